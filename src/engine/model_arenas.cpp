#include "src/engine/model_arenas.h"

#include <new>
#include <string>

#include "src/common/errors.h"
#include "src/common/units.h"

namespace adacc {

namespace {

template <typename T>
T* at_byte(const Arena& arena, std::size_t offset) {
    return reinterpret_cast<T*>(arena.as<unsigned char>() + offset);
}

// The config sizes every arena, so one that cannot be had is the user's to fix: a UserError naming
// it, its size and what limits the device's memory (a start-up check passed, so the limit moved,
// or the process holds more beside its arenas than it counts).
[[noreturn]] void refuse_arena(const Backend& backend, const char* arena, std::size_t bytes) {
    const Device device = backend.device();
    throw OutOfMemoryError(std::string("out of memory: cannot allocate the model's ") + arena + " (" +
                           format_bytes(bytes) + ") in " + device_name(device) + " memory; " +
                           device_memory_words(device, backend.free_memory()) +
                           ". Lower training.batch_size or training.seq_len, or use a memory mode that keeps less: "
                           "`adacc memory --memory-budget SIZE` shows every arena and the largest batch per mode");
}

Arena model_arena(Backend& backend, std::size_t bytes, const char* arena) {
    try {
        return Arena(backend, bytes);
    } catch (const std::bad_alloc&) {
        refuse_arena(backend, arena, bytes);
    }
}

TapeAllocator model_tape(Backend& backend, std::size_t bytes, std::size_t entries) {
    try {
        return TapeAllocator(backend, bytes, entries);
    } catch (const std::bad_alloc&) {
        refuse_arena(backend, "tape", bytes);
    }
}

}  // namespace

ModelArenas::ModelArenas(Backend& backend, const ModelLayout& layout)
    : params(model_arena(backend, layout.memory().parameters, "parameters")),
      working(model_arena(backend, layout.memory().working_weights, "working weights")),
      grads(model_arena(backend, layout.memory().gradients, "gradients")),
      adam_m(model_arena(backend, layout.memory().optimizer_state / 2, "AdamW m")),
      adam_v(model_arena(backend, layout.memory().optimizer_state / 2, "AdamW v")),
      workspace(model_arena(backend, layout.memory().workspace(), "workspace")),
      tape(model_tape(backend, layout.memory().tape, layout.max_tape_entries())) {
    carve(layout);
}

void ModelArenas::reshape(Backend& backend, const ModelLayout& layout) {
    workspace.reset();
    tape = TapeAllocator(backend, 0, 0);
    tape = model_tape(backend, layout.memory().tape, layout.max_tape_entries());
    workspace = model_arena(backend, layout.memory().workspace(), "workspace");
    carve(layout);
}

void ModelArenas::carve(const ModelLayout& layout) {
    const WorkspaceLayout& w = layout.workspace();
    const DType a = layout.device_traits().activation;
    auto act = [&](std::size_t offset) { return Act(at_byte<void>(workspace, offset), a); };
    WorkspaceViews v;
    if (layout.use() == ModelUse::inference) {
        v.residual[0] = act(w.residual[0]);
        v.residual[1] = act(w.residual[1]);
        v.lnf = act(w.lnf);
        v.lnf_mean = at_byte<float>(workspace, w.lnf_mean);
        v.lnf_rstd = at_byte<float>(workspace, w.lnf_rstd);
    } else {
        for (int k = 0; k < kNumTapeTensorKinds; ++k)
            if (w.has_grad[k]) v.grad[k] = act(w.grad[k]);
        v.discard = at_byte<float>(workspace, w.discard);
    }
    for (int k = 0; k < kNumTensorKinds; ++k)
        if (w.has_buffer[k]) v.buffer[k] = at_byte<void>(workspace, w.buffer[k]);
    v.codec_scratch = w.codec_scratch_bytes ? at_byte<void>(workspace, w.codec_scratch) : nullptr;
    v.logits = act(w.logits);
    v.losses = at_byte<float>(workspace, w.losses);
    v.loss_total = at_byte<float>(workspace, w.scalars);
    v.grad_norm = v.loss_total + 1;
    if (layout.stage_tokens()) {
        v.tokens = at_byte<int>(workspace, w.tokens);
        v.targets = at_byte<int>(workspace, w.targets);
    }
    views = v;
}

}  // namespace adacc
