// The memory a model owns, one backend allocation per arena (parameters, gradients, AdamW m and
// v, workspace) plus the tape, sized by a ModelLayout; and the workspace carved into the
// driver's buffers. Allocation happens here and only here.
#pragma once

#include "src/common/errors.h"
#include "src/engine/backend.h"
#include "src/engine/model_layout.h"
#include "src/engine/tape.h"

namespace adacc {

// Pointers into the workspace arena, one per buffer of WorkspaceLayout (null where the layout
// has none: inference has no gradient buffers, training no residual ping-pong). Activation
// buffers (Act: the model's dtype) and their gradients; layernorm statistics and losses are fp32.
struct WorkspaceViews {
    void* buffer[kNumTensorKinds] = {};  // materialised tensors and transients (each in its TensorInfo dtype)
    Act residual[2] = {};                // inference: the residual stream, alternating between layers
    Act lnf;                             // inference: the final layernorm
    float *lnf_mean = nullptr, *lnf_rstd = nullptr;
    Act grad[kNumTapeTensorKinds] = {};  // training: each tensor's gradient buffer (WorkspaceLayout::grad)
    float* discard = nullptr;  // layernorm statistics a recompute must produce but that are already materialised
    void* codec_scratch = nullptr;
    Act logits;
    float* losses = nullptr;
    float *loss_total = nullptr, *grad_norm = nullptr;  // the two scalars (WorkspaceLayout::scalars)
    int *tokens = nullptr, *targets = nullptr;          // staged token ids (null: the host's arrays are read in place)
};

// An arena the backend could not allocate: a UserError naming it, its size and the device's
// memory. The caller that knows the memory mode adds the batch that fits (src/train/trainer.cpp).
class OutOfMemoryError : public UserError {
public:
    using UserError::UserError;
};

struct ModelArenas {
    ModelArenas(Backend& backend, const ModelLayout& layout);
    // The tape and workspace for another plan (parameters and optimizer state untouched); the old
    // ones are freed before the new ones are allocated.
    void reshape(Backend& backend, const ModelLayout& layout);

    Arena params, working, grads, adam_m, adam_v, workspace;  // working: the bf16 copy of params (or none)
    TapeAllocator tape;
    WorkspaceViews views;

private:
    void carve(const ModelLayout& layout);
};

}  // namespace adacc
