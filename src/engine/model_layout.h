// A model's memory as pure arithmetic (docs/design.md, 'Memory: arenas and accounting'): every
// arena's size, every workspace buffer's place and the tape schedule — the ordered list of slots
// one forward pushes, each at its reserved size (a compressed tensor at its codec's upper bound).
// The same schedule sizes the tape before anything is allocated and drives the pushes at run time,
// so capacity and use cannot drift apart. Nothing here allocates backend memory or runs a kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "models/gpt_config.h"
#include "models/gpt_params.h"
#include "src/engine/activation_plan.h"
#include "src/engine/device.h"

namespace adacc {

// Byte sizes of every allocation the model makes, known before any is made.
struct ModelMemory {
    // fp32. parameters: the masters (under ZeRO-1 with a working copy, this rank's shard of them);
    // optimizer: AdamW's m and v (this rank's shard under ZeRO-1).
    std::size_t parameters = 0, gradients = 0, optimizer_state = 0;
    std::size_t working_weights = 0;  // the bf16 copy of the parameters forward and backward read (0 in fp32)
    std::size_t tape = 0;             // capacity: every saved activation at its reserved size (bounds for codecs)
    std::size_t materialize = 0;      // workspace: full-size buffers for tensors not kept in some layer
    std::size_t transients = 0;       // workspace: op outputs no backward needs, backward's gradient buffers
    std::size_t logits = 0;           // workspace: logits / dlogits (N x Vp), per-token losses, the loss and norm
                                      // scalars (and staged tokens)
    // The backend's own memory: DeviceTraits::resident_bytes (0 on the CPU) and, training with
    // cuDNN's attention, its workspace (kernels/cuda/device_sizes.h).
    std::size_t backend = 0;
    std::size_t workspace() const { return materialize + transients + logits; }
    std::size_t static_bytes() const { return parameters + working_weights + gradients + optimizer_state; }
    std::size_t total() const { return static_bytes() + tape + workspace() + backend; }
};

// Training allocates gradients, optimizer state and the tape; inference (eval, sampling)
// allocates none of them: activations live in one block's workspace buffers, reused per layer.
enum class ModelUse : std::uint8_t { training, inference };

// Layer index of the tensors before the first block (the embedding dropout mask); the final
// layernorm's slots carry layer n_layer.
constexpr int kEmbeddingLayer = -1;

// One slot of the tape schedule.
struct TapeEntry {
    int layer = 0;
    TensorKind kind = TensorKind::x;
    Policy policy = Policy::keep;
    Codec codec = Codec::group_int4;  // Policy::compress only
    std::size_t bytes = 0;            // reserved on the tape: full size, codec bound, or 0 (recompute)
    std::size_t full_bytes = 0;       // the tensor's uncompressed size
};

// Byte offsets into the workspace arena (one allocation, carved into these buffers).
struct WorkspaceLayout {
    std::size_t buffer[kNumTensorKinds] = {};  // materialised tensors and transients
    bool has_buffer[kNumTensorKinds] = {};
    std::size_t residual[2] = {}, lnf = 0, lnf_mean = 0, lnf_rstd = 0;  // inference only
    // Training only: the buffer of each tensor's gradient in backward (gradient_buffers: several
    // tensors whose gradients are never alive together share one), and the discard buffer.
    std::size_t grad[kNumTapeTensorKinds] = {};
    bool has_grad[kNumTapeTensorKinds] = {};
    std::size_t discard = 0;
    std::size_t codec_scratch = 0, codec_scratch_bytes = 0;
    std::size_t logits = 0, losses = 0;
    std::size_t classifier_rows = 0;  // rows of logits held (B x T, or a chunk of them)
    std::size_t scalars = 0;  // two floats: the summed loss (loss_accumulate) and the gradient norm (global_norm)
    std::size_t tokens = 0, targets = 0;  // staged token ids (backends the host cannot address)
    std::size_t materialize = 0, transients = 0, logits_bytes = 0, total = 0;
};

// The parameters whose AdamW moments one rank holds under ZeRO-1: of `params`, shards of
// ceil(params / shards) elements in rank order (the last one shorter); one shard is all of them.
struct OptimizerShard {
    std::size_t begin = 0, count = 0;
};
OptimizerShard optimizer_shard(std::size_t params, int shards, int rank);
// The parameters of [offset, offset + count) (a tensor of the layout) that `shard` holds; count 0
// when none.
OptimizerShard shard_part(const OptimizerShard& shard, std::size_t offset, std::size_t count);
// Elements of the arrays ZeRO-1's collectives address whole (the gradients, and the working copy
// or else the fp32 parameters):
// `shards` shards of one size, ceil(params / shards) each (NCCL's reduce-scatter and all-gather
// take equal shards), so up to shards - 1 elements of padding past the parameters.
std::size_t sharded_span(std::size_t params, int shards);

class ModelLayout {
public:
    // For micro-batches up to B x T (T <= config.max_seq_len) under `plan`, on a device with
    // `traits`. With traits.stage_tokens (a backend whose memory the host cannot address), the
    // workspace also holds the token ids and targets copied in per forward; the CPU reads the
    // caller's arrays in place.
    ModelLayout(const GPTConfig& config, int B, int T, const ActivationPlan& plan, const CodecParams& codec_params,
                ModelUse use, const DeviceTraits& traits);

    const GPTConfig& config() const { return config_; }
    const ParameterLayout& parameters() const { return parameters_; }
    const BlockGraph& block() const { return block_; }  // at the allocated B x T
    const ActivationPlan& plan() const { return plan_; }
    const CodecParams& codec_params() const { return codec_params_; }
    ModelUse use() const { return use_; }
    const DeviceTraits& device_traits() const { return traits_; }
    bool stage_tokens() const { return traits_.stage_tokens; }
    int max_batch() const { return B_; }
    // Rows of logits the workspace holds: the classifier runs over chunks of this many tokens.
    int classifier_rows() const { return static_cast<int>(workspace_.classifier_rows); }
    int max_seq_len() const { return T_; }
    const ModelMemory& memory() const { return memory_; }
    const WorkspaceLayout& workspace() const { return workspace_; }
    // This process's shard of the AdamW moments (src/dist/process_group.h's rank); the moment
    // arenas hold the largest shard's count, ceil(params / shards).
    OptimizerShard optimizer_shard() const;
    // Whether each rank holds only its optimizer shard of the fp32 masters too: in training under
    // ZeRO-1 with a working copy, which forward and backward read in their place (the masters are
    // the optimizer's alone). Without a working copy (fp32) the masters are the working weights,
    // whole on every rank.
    bool masters_sharded() const { return use_ == ModelUse::training && traits_.masters_sharded(); }

    // Sizes of tensor `kind` at B x T (<= the allocated shape).
    std::size_t numel(TensorKind kind, int B, int T) const;
    std::size_t bytes(TensorKind kind, int B, int T) const;
    std::size_t rows(TensorKind kind, int B, int T) const { return tensor_rows(config_, kind, B, T); }

    // The slots one training forward at B x T pushes, in push order, into `out` (cleared first;
    // its capacity is kept, so a forward rebuilding it allocates nothing once it is reserved).
    // Without dropout the masks are absent.
    void tape_schedule(int B, int T, bool dropout, std::vector<TapeEntry>& out) const;
    // Entries of the longest schedule (what `out` is reserved for).
    std::size_t max_tape_entries() const { return max_tape_entries_; }

private:
    GPTConfig config_;
    ParameterLayout parameters_;
    int B_, T_;
    BlockGraph block_;
    ActivationPlan plan_;
    CodecParams codec_params_;
    ModelUse use_;
    DeviceTraits traits_;
    WorkspaceLayout workspace_;
    ModelMemory memory_;
    std::size_t max_tape_entries_ = 0;
};

// Backward's gradient buffers, assigned by liveness from the block's gradient wiring
// (OpInfo::grad_*), as the tape reuses its memory: walking backward's order — the classifier
// writing the final layernorm's output gradient, the final layernorm writing the residual
// stream's, then one block's ops reversed — a gradient takes a free buffer of its size when an op
// first writes it (a new one when none is free) and frees it after its reader; an input's
// gradient that shares an output's buffer keeps it alive. Every layer runs one block's
// assignment, so a block's input gradient must be its output's buffer (the residual stream's).
struct GradientBuffers {
    std::vector<std::size_t> bytes;    // each buffer's size
    int of[kNumTapeTensorKinds] = {};  // the buffer holding each tensor's gradient; -1: none
};
GradientBuffers gradient_buffers(const BlockGraph& block);

// Sum of the schedule's slots as the tape lays them out (each 64-byte aligned).
std::size_t tape_bytes(const std::vector<TapeEntry>& schedule);

}  // namespace adacc
