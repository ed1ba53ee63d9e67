// The forward / backward driver (docs/design.md, 'The tape'): walks the block description of
// models/gpt_block.h layer by layer, calling the backend's kernels on the model's arenas. Forward
// pushes every tensor backward needs onto the tape in the order of the layout's tape schedule and
// in the form the ActivationPlan says (kept, compressed into a slot reserved at the codec's bound,
// or recorded as dropped); backward first brings each block's tensors back (decompressing, or
// re-running the ops of dropped ones) and releases the block's slots after its backward. The driver
// allocates nothing: every buffer it touches is in ModelArenas.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "models/op_table.h"
#include "src/engine/backend.h"
#include "src/engine/model_arenas.h"
#include "src/engine/model_layout.h"
#include "src/engine/model_observer.h"

namespace adacc {

// Identifies the dropout streams of one forward pass: masks are keyed by
// (seed, step, micro-batch, layer, tensor), so the same context regenerates the same masks.
struct DropoutContext {
    std::uint64_t seed = 0;
    std::uint64_t step = 0;
    std::uint64_t micro = 0;
    bool training = true;  // false: dropout off (validation, eval, sampling)
};

class Driver {
public:
    Driver(Backend& backend, const ModelLayout& layout, ModelArenas& arenas);
    // After the layout or the arenas changed (a re-plan).
    void rebind(const ModelLayout& layout);

    // Forward over token ids in backend memory (B x T); with targets (or null), the fused
    // classifier writes per-token losses and, with dloss != 0, dlogits. A chunked classifier
    // (classifier_forward) also writes the classifier's gradients then, with `accumulate` as the
    // following backward must get it.
    void forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout, float dloss,
                 bool accumulate);
    // Backward of the last forward (which must have had targets and dloss != 0), same tokens.
    void backward(const int* tokens, int B, int T, bool accumulate);

    void set_observer(ModelObserver* observer);
    // Called with each block's layer once backward has queued its parameters' gradients (null: none).
    void set_block_gradients_hook(std::function<void(int layer)> hook) { block_gradients_hook_ = std::move(hook); }

    // Whether the last forward's logits are in the logits buffer whole (B x T rows), or were
    // chunked (model.classifier_chunk): then an inference model computes the rows it is asked for
    // with classifier_logits — rows [row, row + n) of the last forward, n <= classifier_rows, into
    // the start of the logits buffer.
    bool logits_whole() const { return !classifier_chunked_; }
    void classifier_logits(std::size_t row, int n);

private:
    // A UserError naming the op, kernel, dtype and backend when the backend does not support a
    // kernel `layout`'s model runs (Backend::supports).
    void require_supported(const ModelLayout& layout) const;
    // Block tensor `kind` where it is now, typed by its TensorInfo (activations in the model's
    // dtype, layernorm statistics fp32, masks bytes).
    Act view(TensorKind kind) const { return Act(view_[static_cast<int>(kind)], layout_->block().tensor(kind).dtype); }
    void*& view_slot(TensorKind kind) { return view_[static_cast<int>(kind)]; }
    void* buffer(TensorKind kind) const { return arenas_.views.buffer[static_cast<int>(kind)]; }
    unsigned char* mask_view(TensorKind kind) const;  // null when this pass has no dropout
    float dropout_p() const;                          // 0 when this pass has no dropout
    Act grad_buffer(TensorKind kind) const;
    void* idle_gradient(const OpInfo& op, TensorKind kind, int B, int T) const;
    // Parameter tensor `id` (of `layer`) as forward and backward read it: the bf16 working copy
    // when there is one (the fp32 masters are the optimizer's alone, and ZeRO-1 shards them),
    // else the fp32 parameters; null for no tensor.
    ConstAct weight(std::optional<ParamId> id, int layer = 0) const;
    std::uint64_t dropout_key(int layer, TensorKind kind) const;
    bool dropped(int layer, TensorKind kind) const;
    void* push_scheduled(int layer, TensorKind kind);

    void forward_block(int layer, int B, int T);
    bool fuses_residual_layernorm(std::size_t i) const;
    void residual_with_layernorm(const OpInfo& residual, int layer, const OpInfo* norm, int norm_layer, int B, int T);
    void place_final_layernorm();
    void classifier_forward(const int* targets, int N, float dloss, bool accumulate);
    void place_output(int layer, TensorKind kind, int B, int T);
    bool compresses(int layer, TensorKind kind) const;
    void compress_outputs(const OpInfo& op, int layer, int B, int T);
    void compress_output(int layer, TensorKind kind, void* blob, int B, int T);
    void report_compressed(int layer, TensorKind kind, Codec codec, const void* blob, int B, int T);
    void report_op_times();
    void materialize_block(int layer, int B, int T);
    OpCall op_call(const OpInfo& op, int layer, int B, int T) const;
    void run_op(const OpInfo& op, int layer, int B, int T);
    void backward_op(const OpInfo& op, int layer, int B, int T, bool accumulate);
    void zero_non_matmul_grads();

    Backend& backend_;
    const KernelTable& k_;
    KernelContext ctx_;  // the backend's, with this model's codec scratch
    const ModelLayout* layout_;
    ModelArenas& arenas_;

    std::vector<TapeEntry> schedule_;  // this forward's tape pushes (reserved at construction)
    std::size_t next_entry_ = 0;
    void* view_[kNumTensorKinds] = {};             // the current block's tensors (tape or workspace)
    std::vector<TapeAllocator::Mark> layer_mark_;  // tape mark before layer l's input x (l = L: the final layernorm)
    Act lnf_, final_x_;
    float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
    unsigned char* emb_mask_ = nullptr;
    bool has_dlogits_ = false;
    bool classifier_chunked_ = false;      // the last forward's classifier ran (or, inference, runs) chunk by chunk
    bool classifier_accumulated_ = false;  // ... with this accumulate flag
    bool dropout_active_ = false;          // the last forward applied dropout
    // The layernorm after the block just run (the next block's ln1, or the final one) ran with its
    // second residual (residual_with_layernorm).
    bool next_layernorm_ran_ = false;
    DropoutContext dropout_;  // the last forward's, to regenerate its masks
    ModelObserver* observer_ = nullptr;
    std::function<void(int layer)> block_gradients_hook_;
    std::unique_ptr<IntervalTimer> op_timer_;  // when the observer wants op times
    std::vector<std::size_t> timed_ops_;       // the op index of each of op_timer_'s intervals
};

}  // namespace adacc
