// GPT-2 on the CPU: the four arenas (parameters, gradients, AdamW m and v), the activation
// tape, a workspace for transients, and the explicit forward / backward driver that walks the
// block description of models/gpt_block.h. Every activation backward needs lives on the tape in
// the form the ActivationPlan says (kept, compressed, or recomputed before its block's
// backward). Everything is allocated in the constructor; forward, backward and the optimizer
// step never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "models/gpt_config.h"
#include "models/gpt_params.h"
#include "src/activation_plan.h"
#include "src/policy_monitor.h"
#include "src/tape.h"

namespace adacc {

// Identifies the dropout streams of one forward pass: masks are keyed by
// (seed, step, micro-batch, layer, tensor), so the same context regenerates the same masks.
struct DropoutContext {
    std::uint64_t seed = 0;
    std::uint64_t step = 0;
    std::uint64_t micro = 0;
    bool training = true;  // false: dropout off (validation, eval, sampling)
};

// One 64-byte-aligned allocation of floats, zero-initialised.
class FloatArena {
public:
    FloatArena() = default;
    explicit FloatArena(std::size_t floats);
    float* data() const { return data_.get(); }
    std::size_t size() const { return size_; }
    std::size_t bytes() const { return size_ * sizeof(float); }

private:
    struct Free {
        void operator()(float* p) const;
    };
    std::unique_ptr<float, Free> data_;
    std::size_t size_ = 0;
};

// Byte sizes of every allocation the model makes, known before any is made.
struct ModelMemory {
    std::size_t parameters = 0, gradients = 0, optimizer_state = 0;  // optimizer: m and v
    std::size_t tape = 0;            // capacity: every saved activation at its planned size (bounds for codecs)
    std::size_t materialize = 0;     // workspace: full-size buffers for tensors not kept in some layer
    std::size_t transients = 0;      // workspace: op outputs no backward needs, backward's gradient buffers
    std::size_t logits = 0;          // workspace: logits / dlogits (N x Vp) and per-token losses
    std::size_t workspace() const { return materialize + transients + logits; }
    std::size_t static_bytes() const { return parameters + gradients + optimizer_state; }
    std::size_t total() const { return static_bytes() + tape + workspace(); }
};

// Training allocates gradients, optimizer state and the tape; inference (eval, sampling)
// allocates none of them: activations live in one block's workspace buffers, reused per layer.
enum class ModelUse : std::uint8_t { training, inference };

class GPTModel {
public:
    // Allocates for micro-batches up to B x T (T <= config.max_seq_len) under `plan`
    // (default: keep everything).
    GPTModel(const GPTConfig& config, int B, int T);
    GPTModel(const GPTConfig& config, int B, int T, const ActivationPlan& plan,
             const CodecParams& codec_params = {}, ModelUse use = ModelUse::training);
    static GPTModel for_inference(const GPTConfig& config, int B, int T);
    static ModelMemory plan_memory(const GPTConfig& config, int B, int T, const ActivationPlan& plan,
                                   const CodecParams& codec_params = {}, ModelUse use = ModelUse::training);

    const GPTConfig& config() const { return config_; }
    const ParameterLayout& layout() const { return layout_; }
    const BlockGraph& block() const { return block_; }
    const ActivationPlan& plan() const { return plan_; }
    int max_batch() const { return B_; }
    int max_seq_len() const { return T_; }
    float* params() const { return params_.data(); }
    float* grads() const { return grads_.data(); }  // null arenas (size 0) for inference
    float* adam_m() const { return m_.data(); }
    float* adam_v() const { return v_.data(); }
    std::size_t num_params() const { return layout_.total(); }
    const ModelMemory& memory() const { return memory_; }
    TapeAllocator& tape() { return tape_; }
    const TapeAllocator& tape() const { return tape_; }

    // Switches to another plan between steps (the Adacc regulator's re-plan): the tape and the
    // workspace are re-sized for it; parameters and optimizer state are untouched.
    void set_plan(const ActivationPlan& plan, const CodecParams& codec_params);

    // GPT-2 init: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L), zero biases,
    // unit layernorm weights, zero padded embedding rows. Deterministic in `seed`.
    void init_weights(std::uint64_t seed);
    void zero_grads();

    // Forward pass over tokens (B x T, row-major), saving activations on the tape per the plan
    // (nothing is saved by an inference model).
    // With targets, returns the mean loss over B*T tokens; with dloss != 0 the logits are turned
    // into dlogits scaled by dloss (ready for backward()), otherwise logits() holds the logits.
    // Without targets returns 0.
    float forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                  float dloss);
    // Backward pass of the last forward (which must have had targets and dloss != 0), with the
    // same tokens: before each block's backward, its dropped tensors are recomputed and its
    // compressed ones decompressed into the workspace; after it, its tape slots are released.
    // Accumulates into grads(); with accumulate false (a step's first micro-batch) overwrites
    // them instead, so no zeroing pass over the gradient arena is needed.
    void backward(const int* tokens, int B, int T, bool accumulate = true);

    // Profiling: while set, every forward adds each block op's wall time (ms, summed over
    // layers) to (*op_ms)[op index in block().ops()].
    void set_op_timing(std::vector<double>* op_ms) { op_ms_ = op_ms; }

    // Monitoring: while set, every compression in forward also decodes its blob (into backward's
    // idle gradient buffers, so nothing is allocated) and records, per tensor kind, the worst
    // size, outlier fraction and relative error over layers. The vector is cleared per forward.
    void set_codec_sampling(std::vector<CodecSample>* samples) { samples_ = samples; }
    // Time spent sampling since the last call (ms): the monitor's cost inside forward.
    double take_sampling_ms() { return std::exchange(sampling_ms_, 0.0); }

    const float* logits() const { return logits_; }   // B*T x Vp, after a forward
    const float* losses() const { return losses_; }   // B*T per-token losses, after a forward with targets
    // Floating point operations of one training step (forward + backward) at B x T, not
    // counting recomputation.
    double training_flops(int B, int T) const;

private:
    float* view(TensorKind kind) const { return view_[static_cast<int>(kind)]; }
    unsigned char* mask_view(TensorKind kind) const;  // null when this pass has no dropout
    float dropout_p() const;                          // 0 when this pass has no dropout
    float* grad_buffer(TensorKind kind) const;
    std::uint64_t dropout_key(int layer, TensorKind kind) const;
    std::size_t rows_of(TensorKind kind, int B, int T) const;
    std::size_t bytes_of(TensorKind kind, int B, int T) const;

    void forward_block(int layer, int B, int T);
    void place_output(int layer, TensorKind kind, int B, int T);
    void compress_output(int layer, TensorKind kind, int B, int T);
    void sample_codec(TensorKind kind, Codec codec, const void* blob, std::size_t bytes, int B, int T);
    void materialize_block(int layer, int B, int T);
    void run_op(const OpInfo& op, int layer, int B, int T);
    void backward_op(const OpInfo& op, int layer, int B, int T, bool accumulate);
    void zero_non_matmul_grads();
    void carve_workspace();

    GPTConfig config_;
    ParameterLayout layout_;
    int B_, T_;
    BlockGraph block_;  // at the allocated B x T
    ActivationPlan plan_;
    CodecParams codec_params_;
    ModelMemory memory_;
    FloatArena params_, grads_, m_, v_, workspace_;
    TapeAllocator tape_;

    float* view_[kNumTensorKinds] = {};       // the current block's tensors (tape or workspace)
    float* buffer_[kNumTensorKinds] = {};     // workspace buffers: materialised tensors and transients
    std::vector<TapeAllocator::Mark> layer_mark_;  // tape mark before layer l's input x (l = L: final x)
    float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *final_x_ = nullptr;
    float *logits_ = nullptr, *losses_ = nullptr;
    unsigned char* emb_mask_ = nullptr;
    void* codec_scratch_ = nullptr;
    float* discard_ = nullptr;  // outputs a recompute must produce but that are already materialised
    // backward gradient buffers
    float *dres_ = nullptr, *dc_a_ = nullptr, *dc_b_ = nullptr, *dqkv_ = nullptr, *dfc_ = nullptr, *datt_ = nullptr;
    ModelUse use_;
    float* residual_[2] = {};  // inference: the residual stream, alternating between layers
    bool has_dlogits_ = false;
    bool dropout_active_ = false;  // the last forward applied dropout
    DropoutContext dropout_;       // the last forward's, to regenerate its masks
    std::vector<double>* op_ms_ = nullptr;
    std::vector<CodecSample>* samples_ = nullptr;
    double sampling_ms_ = 0;
};

}  // namespace adacc
