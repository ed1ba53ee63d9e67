// GPT-2 training and inference on a backend: a ModelLayout (every size and place, computed
// before anything is allocated), ModelArenas (the memory, one backend allocation per arena) and
// the Driver (the forward / backward walk), behind the host API the rest of the engine uses —
// parameters in and out, tokens in, losses and logits out. Everything is allocated in the
// constructor; forward, backward and the optimizer step never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "models/gpt_block.h"
#include "models/gpt_config.h"
#include "models/gpt_params.h"
#include "src/engine/activation_plan.h"
#include "src/engine/backend.h"
#include "src/engine/driver.h"
#include "src/engine/model_arenas.h"
#include "src/engine/model_layout.h"
#include "src/engine/model_observer.h"
#include "src/engine/tape.h"

namespace adacc {

// What a training step reads back once, after its update is queued (GPTModel::read_step).
struct StepReadout {
    float loss = 0;       // the step's mean loss (forward_step's sum)
    float grad_norm = 0;  // the global gradient norm (global_norm, before clipping)
};

// The fp32 arenas the host API reads and writes.
enum class ModelArena : std::uint8_t { parameters, gradients, adam_m, adam_v };

class GPTModel {
public:
    // Allocates for micro-batches up to B x T (T <= config.max_seq_len) under `plan`
    // (default: keep everything), on the CPU.
    GPTModel(const GPTConfig& config, int B, int T);
    // On the target's backend (backend_for(target.device)). Activations (and the weights forward
    // and backward read) are of type target.activation: fp32, or bf16 on CUDA, where a bf16 copy
    // of the fp32 master weights is kept beside them (src/engine/device.h). With
    // target.optimizer_shards > 1 (ZeRO-1 over that many data-parallel ranks) a training model
    // holds AdamW's moments, and beside a bf16 copy the masters, for this rank's shard of the
    // parameters only (optimizer_shard(), held()).
    GPTModel(const GPTConfig& config, int B, int T, const ActivationPlan& plan, const CodecParams& codec_params = {},
             ModelUse use = ModelUse::training, const ComputeTarget& target = {});
    // The same on a backend of the caller's that stands in for target.device (a test's
    // instrumented backend).
    GPTModel(const GPTConfig& config, int B, int T, const ActivationPlan& plan, const CodecParams& codec_params,
             ModelUse use, Backend& backend, const ComputeTarget& target);
    // Not movable: the driver points into the arenas (for_inference returns by guaranteed elision).
    GPTModel(const GPTModel&) = delete;
    GPTModel& operator=(const GPTModel&) = delete;
    // model.attention = "cudnn" runs the fused kernels here (the same attention without dropout).
    static GPTModel for_inference(const GPTConfig& config, int B, int T, const ComputeTarget& target = {});
    // Every arena's size before allocating, as the target's backend allocates them (CUDA stages
    // token ids, 2 x B x T ints in the workspace, and holds its fixed resident memory; bf16 halves
    // activations and adds the weights' bf16 copy).
    static ModelMemory plan_memory(const GPTConfig& config, int B, int T, const ActivationPlan& plan,
                                   const CodecParams& codec_params = {}, ModelUse use = ModelUse::training,
                                   const ComputeTarget& target = {});

    const GPTConfig& config() const { return layout_->config(); }
    const ParameterLayout& layout() const { return layout_->parameters(); }
    const BlockGraph& block() const { return layout_->block(); }
    const ActivationPlan& plan() const { return layout_->plan(); }
    const ModelLayout& memory_layout() const { return *layout_; }
    int max_batch() const { return layout_->max_batch(); }
    int max_seq_len() const { return layout_->max_seq_len(); }
    std::size_t num_params() const { return layout_->parameters().total(); }
    const ModelMemory& memory() const { return layout_->memory(); }
    Backend& backend() const { return *backend_; }
    TapeAllocator& tape() { return arenas_.tape; }
    const TapeAllocator& tape() const { return arenas_.tape; }

    // The arenas in backend memory, for kernels (the optimizer step) and CPU-side tests; the host
    // reads and writes them through the host API below. Element i of an arena is parameter
    // held(arena).begin + i.
    float* params() const { return arenas_.params.as<float>(); }  // the fp32 masters
    float* grads() const { return arenas_.grads.as<float>(); }    // null for inference
    float* adam_m() const { return arenas_.adam_m.as<float>(); }
    float* adam_v() const { return arenas_.adam_v.as<float>(); }
    // The parameters an arena holds values of: all of them, except under ZeRO-1, where AdamW's
    // moments (and the masters, where ModelLayout::masters_sharded) hold this rank's optimizer
    // shard; the gradients and the working copy are always whole.
    OptimizerShard held(ModelArena arena) const;
    OptimizerShard optimizer_shard() const { return layout_->optimizer_shard(); }
    // The bf16 copy of the parameters that forward and backward read, which AdamW and write_arena
    // keep current; null in fp32. Whole on every rank (padded to sharded_span under ZeRO-1).
    Act working_weights() const;
    DType activation_dtype() const { return layout_->device_traits().activation; }
    // Where global_norm writes the gradient norm and adamw_update reads it (backend memory).
    float* grad_norm_slot() const { return arenas_.views.grad_norm; }

    // ---- host API --------------------------------------------------------------------------
    // Parameters [offset, offset + count) of an arena (indices into all the parameters) to host
    // memory; the arena must hold all of them (held()).
    void read_arena(ModelArena arena, std::size_t offset, std::size_t count, float* host) const;
    // From host memory: the arena keeps those of them it holds (under ZeRO-1 the rest are other
    // ranks'), and writing parameters refreshes the working copy of all of them.
    void write_arena(ModelArena arena, std::size_t offset, std::size_t count, const float* host);
    // What an arena holds (held(arena).count floats) readable by the host: the arena itself where
    // the backend's memory is host-addressable (the CPU's), else a copy made into `staging`.
    const float* host_readable(ModelArena arena, std::vector<float>& staging) const;
    // Every parameter as forward and backward read it, in fp32 host memory: the parameters, or
    // their bf16 working copy widened (exactly). Whole on every rank, also when ZeRO-1 shards the
    // masters: what the Adacc profiler builds its slice of the model from.
    const float* forward_weights(std::vector<float>& staging) const;
    // Rows [row, row + rows) of the last forward's logits (Vp floats each) into host memory
    // (bf16 logits converted). When B x T logits exceed one classifier chunk, an inference model
    // computes the rows asked for here, a chunk at a time, so its logits never exist whole
    // (eval and sampling read few rows); a training model refuses (its logits are gone).
    void read_logits(std::size_t row, std::size_t rows, float* host);
    // The last forward's per-token losses (count <= B*T) into host memory.
    void read_losses(std::size_t count, float* host) const;

    // Switches to another plan between steps (the Adacc regulator's re-plan): the tape and the
    // workspace are re-sized for it; parameters and optimizer state are untouched.
    void set_plan(const ActivationPlan& plan, const CodecParams& codec_params);

    // GPT-2 init: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L), zero biases,
    // unit layernorm weights, zero padded embedding rows. Deterministic in `seed`. Each value
    // depends only on (seed, tensor, index), so a model of fewer layers gets exactly the first
    // layers of a deeper one when `residual_layers` names the deeper one's depth (the profiler's
    // slice); 0 means this model's own n_layer.
    void init_weights(std::uint64_t seed, int residual_layers = 0);
    void zero_grads();

    // Forward pass over tokens (B x T host ints, row-major, copied to the backend), saving
    // activations on the tape per the plan (nothing is saved by an inference model).
    // With targets, returns the mean loss over B*T tokens; with dloss != 0 the logits are turned
    // into dlogits scaled by dloss (ready for backward()), otherwise they stay logits
    // (read_logits). Without targets returns 0. A training model whose B x T logits exceed one
    // classifier chunk (GPTConfig::classifier_rows) keeps none: with dloss != 0 it computes the
    // classifier's gradients here, as a step's first micro-batch does, so backward must get
    // accumulate = false (forward_step takes the flag for later micro-batches).
    float forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout, float dloss);
    // A training step's forward (targets and dloss required): the same pass, but nothing is read
    // back; its per-token losses, summed and divided by loss_divisor, are added to the step's loss
    // in backend memory (accumulate_loss false: the step's first micro-batch starts the sum; the
    // flag must be the one backward then gets, which a chunked classifier applies here).
    void forward_step(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout, float dloss,
                      double loss_divisor, bool accumulate_loss);
    // The step's loss and gradient norm in one copy back (waits for everything queued).
    StepReadout read_step() const;
    // Backward pass of the last forward (which must have had targets and dloss != 0), with the
    // same tokens: before each block's backward, its dropped tensors are recomputed and its
    // compressed ones decompressed into the workspace; after it, its tape slots are released.
    // Accumulates into grads(); with accumulate false (a step's first micro-batch) overwrites
    // them instead, so no zeroing pass over the gradient arena is needed.
    void backward(const int* tokens, int B, int T, bool accumulate = true);

    // Profiling and codec sampling (src/engine/model_observer.h); null: none.
    void set_observer(ModelObserver* observer) { driver_.set_observer(observer); }
    // Called in every backward with block l once its parameters' gradients are queued (on a GPU,
    // maybe not yet computed): where data parallelism starts summing them (src/dist/data_parallel.h).
    // Null: none.
    void set_block_gradients_hook(std::function<void(int layer)> hook) {
        driver_.set_block_gradients_hook(std::move(hook));
    }

    // Floating point operations of one training step (forward + backward) at B x T, not
    // counting recomputation.
    double training_flops(int B, int T) const;

private:
    const Arena& arena(ModelArena which) const;
    // Rows [row, row + rows) of the logits buffer into host memory.
    void copy_logits(std::size_t row, std::size_t rows, float* host) const;
    // Token ids as the kernels read them: the host's arrays on a host-addressable backend, else
    // copied into the workspace's staging buffers. Returns the tokens' pointer (targets via *targets).
    const int* tokens_for_kernels(const int* tokens, const int** targets, int B, int T);
    // The forward pass itself (tokens staged, the driver's walk), shared by forward and forward_step.
    void run_forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout, float dloss,
                     bool accumulate);

    Backend* backend_;
    std::unique_ptr<ModelLayout> layout_;  // behind a pointer: the driver keeps its address across set_plan
    ModelArenas arenas_;
    Driver driver_;
    mutable std::vector<bf16> logits_staging_;  // read_logits of bf16 logits
};

}  // namespace adacc
