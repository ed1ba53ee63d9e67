#include "src/engine/model_arenas.h"

namespace adacc {

namespace {

template <typename T>
T* at_byte(const Arena& arena, std::size_t offset) {
    return reinterpret_cast<T*>(arena.as<unsigned char>() + offset);
}

}  // namespace

ModelArenas::ModelArenas(Backend& backend, const ModelLayout& layout)
    : params(backend, layout.memory().parameters), working(backend, layout.memory().working_weights),
      grads(backend, layout.memory().gradients),
      adam_m(backend, layout.memory().optimizer_state / 2), adam_v(backend, layout.memory().optimizer_state / 2),
      workspace(backend, layout.memory().workspace()), tape(backend, layout.memory().tape, layout.max_tape_entries()) {
    carve(layout);
}

void ModelArenas::reshape(Backend& backend, const ModelLayout& layout) {
    workspace.reset();
    tape = TapeAllocator(backend, 0, 0);
    tape = TapeAllocator(backend, layout.memory().tape, layout.max_tape_entries());
    workspace = Arena(backend, layout.memory().workspace());
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
        v.dres = act(w.dres);
        v.dc_a = act(w.dc_a);
        v.dc_b = act(w.dc_b);
        v.dqkv = act(w.dqkv);
        v.dfc = act(w.dfc);
        v.datt = act(w.datt);
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
