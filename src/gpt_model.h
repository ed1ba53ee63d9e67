// GPT-2 on the CPU: the four arenas (parameters, gradients, AdamW m and v), the activations
// backward needs, a workspace for transients, and the explicit forward / backward driver that
// walks the block description of models/gpt_block.h. Everything is allocated in the
// constructor; forward, backward and the optimizer step never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "models/gpt_block.h"
#include "models/gpt_config.h"
#include "models/gpt_params.h"

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
    std::size_t activations = 0;  // saved tensors of all blocks + embedding/final-LN/logits buffers
    std::size_t workspace = 0;    // transients and backward scratch
    std::size_t total() const { return parameters + gradients + optimizer_state + activations + workspace; }
};

class GPTModel {
public:
    // Allocates for micro-batches up to B x T (T <= config.max_seq_len).
    GPTModel(const GPTConfig& config, int B, int T);
    static ModelMemory plan_memory(const GPTConfig& config, int B, int T);

    const GPTConfig& config() const { return config_; }
    const ParameterLayout& layout() const { return layout_; }
    int max_batch() const { return B_; }
    int max_seq_len() const { return T_; }
    float* params() const { return params_.data(); }
    float* grads() const { return grads_.data(); }
    float* adam_m() const { return m_.data(); }
    float* adam_v() const { return v_.data(); }
    std::size_t num_params() const { return layout_.total(); }
    const ModelMemory& memory() const { return memory_; }

    // GPT-2 init: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2L), zero biases,
    // unit layernorm weights, zero padded embedding rows. Deterministic in `seed`.
    void init_weights(std::uint64_t seed);
    void zero_grads();

    // Forward pass over tokens (B x T, row-major). With targets, returns the mean loss over
    // B*T tokens; with dloss != 0 the logits are turned into dlogits scaled by dloss (ready for
    // backward()), otherwise logits() holds the logits. Without targets returns 0.
    float forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                  float dloss);
    // Backward pass of the last forward (which must have had targets and dloss != 0), with the
    // same tokens; uses the forward's dropout masks; accumulates into grads().
    void backward(const int* tokens, int B, int T);

    const float* logits() const { return logits_; }   // B*T x Vp, after a forward
    const float* losses() const { return losses_; }   // B*T per-token losses, after a forward with targets
    // Floating point operations of one training step (forward + backward) at B x T.
    double training_flops(int B, int T) const;

private:
    float* act(int layer, TensorKind kind) const;
    unsigned char* mask(int layer, TensorKind kind) const;  // null when this pass has no dropout
    float dropout_p() const;                                // 0 when this pass has no dropout
    float* grad_buffer(TensorKind kind) const;
    std::uint64_t dropout_key(const DropoutContext& ctx, int layer, TensorKind kind) const;
    void forward_op(const OpInfo& op, int layer, int B, int T, const DropoutContext& dropout);
    void backward_op(const OpInfo& op, int layer, int B, int T);
    void carve_activations();
    void carve_workspace();

    GPTConfig config_;
    ParameterLayout layout_;
    int B_, T_;
    BlockGraph block_;  // at the allocated B x T: per-layer slot sizes
    ModelMemory memory_;
    FloatArena params_, grads_, m_, v_, activations_, workspace_;

    std::size_t layer_slot_floats_ = 0;                       // one block's saved tensors
    std::size_t tensor_offset_[kNumTensorKinds] = {};         // within a layer slot, floats
    float* transient_[kNumTensorKinds] = {};                  // attproj, fcproj: shared by all layers
    float *encoded_ = nullptr, *final_x_ = nullptr, *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
    float *logits_ = nullptr, *losses_ = nullptr;
    unsigned char* emb_mask_ = nullptr;
    // backward workspace
    float *dres_ = nullptr, *dc_a_ = nullptr, *dc_b_ = nullptr, *dqkv_ = nullptr, *dfc_ = nullptr, *datt_ = nullptr;
    bool has_dlogits_ = false;
    bool dropout_active_ = false;  // the last forward applied dropout
};

}  // namespace adacc
