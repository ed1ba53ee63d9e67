#include "src/gpt_model.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/ops.h"
#include "kernels/rng.h"

namespace adacc {

namespace {

constexpr std::size_t kAlign = 64;
std::size_t align_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of every buffer inside the activation and workspace arenas. Computed the same
// way for plan_memory() (before allocating) and for carving the real arenas.
struct ArenaLayout {
    std::size_t layer_slot = 0;
    std::size_t tensor[kNumTensorKinds] = {};  // within a layer slot
    std::size_t final_x = 0, lnf = 0, lnf_mean = 0, lnf_rstd = 0, logits = 0, losses = 0, emb_mask = 0;
    std::size_t activations = 0;
    std::size_t attproj = 0, fcproj = 0, dres = 0, dc_a = 0, dc_b = 0, dqkv = 0, dfc = 0, datt = 0;
    std::size_t workspace = 0;
};

struct Cursor {
    std::size_t bytes = 0;
    std::size_t take(std::size_t n) {
        const std::size_t at = bytes;
        bytes += align_up(n);
        return at;
    }
};

ArenaLayout arena_layout(const GPTConfig& cfg, const BlockGraph& block, int B, int T) {
    ArenaLayout a;
    const std::size_t N = static_cast<std::size_t>(B) * T, C = cfg.n_embd, F = sizeof(float);
    Cursor slot;
    for (const auto& t : block.tensors())
        if (t.saved) a.tensor[static_cast<int>(t.kind)] = slot.take(t.bytes());
    a.layer_slot = slot.bytes;

    Cursor acts{a.layer_slot * cfg.n_layer};
    a.final_x = acts.take(N * C * F);
    a.lnf = acts.take(N * C * F);
    a.lnf_mean = acts.take(N * F);
    a.lnf_rstd = acts.take(N * F);
    a.logits = acts.take(N * cfg.padded_vocab_size() * F);
    a.losses = acts.take(N * F);
    a.emb_mask = acts.take(block.has_dropout() ? N * C : 0);
    a.activations = acts.bytes;

    Cursor ws;
    a.attproj = ws.take(N * C * F);
    a.fcproj = ws.take(N * C * F);
    a.dres = ws.take(N * C * F);
    a.dc_a = ws.take(N * C * F);
    a.dc_b = ws.take(N * C * F);
    a.dqkv = ws.take(N * 3 * C * F);
    a.dfc = ws.take(N * 4 * C * F);
    a.datt = ws.take(block.tensor(TensorKind::att).bytes());
    a.workspace = ws.bytes;
    return a;
}

template <typename T>
T* at_byte(float* base, std::size_t offset) {
    return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(base) + offset);
}

}  // namespace

FloatArena::FloatArena(std::size_t floats) : size_(floats) {
    const std::size_t bytes = align_up(std::max<std::size_t>(floats * sizeof(float), kAlign));
    void* p = std::aligned_alloc(kAlign, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.reset(static_cast<float*>(p));
}

void FloatArena::Free::operator()(float* p) const { std::free(p); }

ModelMemory GPTModel::plan_memory(const GPTConfig& cfg, int B, int T) {
    const BlockGraph block(cfg, B, T);
    const ArenaLayout a = arena_layout(cfg, block, B, T);
    const std::size_t param_bytes = ParameterLayout(cfg).total() * sizeof(float);
    return {param_bytes, param_bytes, 2 * param_bytes, a.activations, a.workspace};
}

GPTModel::GPTModel(const GPTConfig& config, int B, int T)
    : config_(config), layout_(config), B_(B), T_(T), block_(config, B, T), memory_(plan_memory(config, B, T)),
      params_(layout_.total()), grads_(layout_.total()), m_(layout_.total()), v_(layout_.total()),
      activations_(memory_.activations / sizeof(float)), workspace_(memory_.workspace / sizeof(float)) {
    carve_activations();
    carve_workspace();
}

void GPTModel::carve_activations() {
    const ArenaLayout a = arena_layout(config_, block_, B_, T_);
    layer_slot_floats_ = a.layer_slot / sizeof(float);
    for (int k = 0; k < kNumTensorKinds; ++k) tensor_offset_[k] = a.tensor[k] / sizeof(float);
    float* base = activations_.data();
    encoded_ = act(0, TensorKind::x);
    final_x_ = at_byte<float>(base, a.final_x);
    lnf_ = at_byte<float>(base, a.lnf);
    lnf_mean_ = at_byte<float>(base, a.lnf_mean);
    lnf_rstd_ = at_byte<float>(base, a.lnf_rstd);
    logits_ = at_byte<float>(base, a.logits);
    losses_ = at_byte<float>(base, a.losses);
    emb_mask_ = at_byte<unsigned char>(base, a.emb_mask);
}

void GPTModel::carve_workspace() {
    const ArenaLayout a = arena_layout(config_, block_, B_, T_);
    float* base = workspace_.data();
    transient_[static_cast<int>(TensorKind::attproj)] = at_byte<float>(base, a.attproj);
    transient_[static_cast<int>(TensorKind::fcproj)] = at_byte<float>(base, a.fcproj);
    dres_ = at_byte<float>(base, a.dres);
    dc_a_ = at_byte<float>(base, a.dc_a);
    dc_b_ = at_byte<float>(base, a.dc_b);
    dqkv_ = at_byte<float>(base, a.dqkv);
    dfc_ = at_byte<float>(base, a.dfc);
    datt_ = at_byte<float>(base, a.datt);
}

float* GPTModel::act(int layer, TensorKind kind) const {
    if (kind == TensorKind::out)  // a block's output is the next block's input
        return layer + 1 < config_.n_layer ? act(layer + 1, TensorKind::x) : final_x_;
    if (float* t = transient_[static_cast<int>(kind)]) return t;
    return activations_.data() + static_cast<std::size_t>(layer) * layer_slot_floats_ +
           tensor_offset_[static_cast<int>(kind)];
}

unsigned char* GPTModel::mask(int layer, TensorKind kind) const {
    return dropout_active_ ? reinterpret_cast<unsigned char*>(act(layer, kind)) : nullptr;
}

float GPTModel::dropout_p() const { return dropout_active_ ? config_.dropout : 0.0f; }

// Backward's gradient buffers: the residual stream's gradient (dres) is shared by x, x2 and
// out because residual additions pass it through unchanged; the rest alternate between two
// N x C buffers so that each op reads one and writes the other (see the table in the header).
float* GPTModel::grad_buffer(TensorKind kind) const {
    using K = TensorKind;
    switch (kind) {
        case K::x:
        case K::x2:
        case K::out: return dres_;
        case K::fcproj:
        case K::attproj:
        case K::ln1: return dc_a_;
        case K::ln2:
        case K::atty: return dc_b_;
        case K::fch:
        case K::fch_gelu: return dfc_;
        case K::qkv: return dqkv_;
        case K::att: return datt_;
        default: return nullptr;
    }
}

std::uint64_t GPTModel::dropout_key(const DropoutContext& ctx, int layer, TensorKind kind) const {
    return rng_key(ctx.seed, ctx.step, ctx.micro, static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(kind));
}

void GPTModel::init_weights(std::uint64_t seed) {
    const int L = config_.n_layer;
    for (int id = 0; id < kNumParamTensors; ++id) {
        const auto pid = static_cast<ParamId>(id);
        const ParamTensorInfo& t = layout_.info(pid);
        float* p = params_.data() + t.offset;
        const bool is_norm_weight = pid == ParamId::ln1w || pid == ParamId::ln2w || pid == ParamId::lnfw;
        if (!t.weight_decay) {  // biases and layernorm parameters
            for (std::size_t i = 0; i < t.numel; ++i) p[i] = is_norm_weight ? 1.0f : 0.0f;
            continue;
        }
        const bool residual_proj = pid == ParamId::attprojw || pid == ParamId::fcprojw;
        const double stddev = residual_proj ? 0.02 / std::sqrt(2.0 * L) : 0.02;
        const std::uint64_t key = rng_key(seed, 0x1417, 0, static_cast<std::uint64_t>(id), 0);
        // Padded embedding rows stay zero: no token ever selects them and their logits are masked.
        const std::size_t live = pid == ParamId::wte ? std::size_t(config_.vocab_size) * config_.n_embd : t.numel;
#pragma omp parallel for schedule(static)
        for (std::size_t i = 0; i < t.numel; ++i) p[i] = i < live ? static_cast<float>(stddev * rng_normal(key, i)) : 0.0f;
    }
}

void GPTModel::zero_grads() { std::memset(grads_.data(), 0, grads_.bytes()); }

void GPTModel::forward_op(const OpInfo& op, int layer, int B, int T, const DropoutContext& dropout) {
    const int N = B * T, C = config_.n_embd, NH = config_.n_head;
    const float p = dropout_p();
    const float* params = params_.data();
    auto weight = [&](std::optional<ParamId> id) { return id ? layout_.at(params, *id, layer) : nullptr; };
    auto in = [&](int i) { return act(layer, op.inputs[i]); };
    auto out = [&](int i) { return act(layer, op.outputs[i]); };
    switch (op.kind) {
        case OpKind::layernorm:
            cpu::layernorm_forward(out(0), out(1), out(2), in(0), weight(op.weight), weight(op.bias), N, C);
            break;
        case OpKind::matmul:
            cpu::matmul_forward(out(0), in(0), weight(op.weight), weight(op.bias), N, op.in_features, op.out_features);
            break;
        case OpKind::attention_softmax: cpu::attention_softmax_forward(out(0), in(0), B, T, C, NH); break;
        case OpKind::dropout_mask: {
            const long n = static_cast<long>(op.outputs[0] == TensorKind::att_mask ? std::size_t(N) * NH * T : std::size_t(N) * C);
            cpu::dropout_mask(mask(layer, op.outputs[0]), n, p, dropout_key(dropout, layer, op.outputs[0]));
            break;
        }
        case OpKind::attention_value:
            cpu::attention_value_forward(out(0), in(0), mask(layer, TensorKind::att_mask), p, act(layer, TensorKind::qkv),
                                         B, T, C, NH);
            break;
        case OpKind::residual_dropout:
            cpu::residual_dropout_forward(out(0), in(0), in(1), op.inputs.size() > 2 ? mask(layer, op.inputs[2]) : nullptr,
                                          p, static_cast<long>(N) * C);
            break;
        case OpKind::gelu: cpu::gelu_forward(out(0), in(0), static_cast<long>(N) * 4 * C); break;
    }
}

void GPTModel::backward_op(const OpInfo& op, int layer, int B, int T) {
    const int N = B * T, C = config_.n_embd, NH = config_.n_head;
    const float p = dropout_p();
    auto weight = [&](std::optional<ParamId> id) { return id ? layout_.at(params_.data(), *id, layer) : nullptr; };
    auto dweight = [&](std::optional<ParamId> id) { return id ? layout_.at(grads_.data(), *id, layer) : nullptr; };
    const float* att = act(layer, TensorKind::att);
    const float* qkv = act(layer, TensorKind::qkv);
    switch (op.kind) {
        case OpKind::layernorm:
            cpu::layernorm_backward(grad_buffer(op.inputs[0]), dweight(op.weight), dweight(op.bias),
                                    grad_buffer(op.outputs[0]), act(layer, op.inputs[0]), weight(op.weight),
                                    act(layer, op.outputs[1]), act(layer, op.outputs[2]), N, C);
            break;
        case OpKind::matmul:
            cpu::matmul_backward(grad_buffer(op.inputs[0]), dweight(op.weight), dweight(op.bias),
                                 grad_buffer(op.outputs[0]), act(layer, op.inputs[0]), weight(op.weight), N,
                                 op.in_features, op.out_features);
            break;
        case OpKind::attention_softmax:
            cpu::attention_softmax_backward(dqkv_, datt_, att, qkv, B, T, C, NH);
            break;
        case OpKind::dropout_mask: break;  // masks are inputs only
        case OpKind::attention_value:
            cpu::attention_value_backward(datt_, dqkv_, grad_buffer(TensorKind::atty), att,
                                          mask(layer, TensorKind::att_mask), p, qkv, B, T, C, NH);
            break;
        case OpKind::residual_dropout:
            // The residual input's gradient is the output's (same buffer, dres); only the branch needs work.
            cpu::residual_dropout_backward(grad_buffer(op.inputs[1]), grad_buffer(op.outputs[0]),
                                           op.inputs.size() > 2 ? mask(layer, op.inputs[2]) : nullptr, p,
                                           static_cast<long>(N) * C);
            break;
        case OpKind::gelu:
            cpu::gelu_backward(grad_buffer(op.inputs[0]), act(layer, op.inputs[0]), grad_buffer(op.outputs[0]),
                               static_cast<long>(N) * 4 * C);
            break;
    }
}

float GPTModel::forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                        float dloss) {
    const int N = B * T, C = config_.n_embd, V = config_.vocab_size, Vp = config_.padded_vocab_size();
    const float* params = params_.data();
    // Without dropout in this pass, the driver skips the mask ops and gates with null masks.
    dropout_active_ = dropout.training && block_.has_dropout();

    cpu::encoder_forward(encoded_, tokens, layout_.at(params, ParamId::wte), layout_.at(params, ParamId::wpe), B, T, C);
    if (dropout_active_) {
        cpu::dropout_mask(emb_mask_, static_cast<long>(N) * C, config_.dropout,
                          dropout_key(dropout, config_.n_layer, TensorKind::x));
        cpu::dropout_forward(encoded_, encoded_, emb_mask_, config_.dropout, static_cast<long>(N) * C);
    }
    for (int l = 0; l < config_.n_layer; ++l)
        for (const OpInfo& op : block_.ops())
            if (op.kind != OpKind::dropout_mask || dropout_active_) forward_op(op, l, B, T, dropout);

    cpu::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, final_x_, layout_.at(params, ParamId::lnfw),
                           layout_.at(params, ParamId::lnfb), N, C);
    cpu::matmul_forward(logits_, lnf_, layout_.at(params, ParamId::wte), nullptr, N, C, Vp);
    has_dlogits_ = false;
    if (!targets) return 0.0f;
    cpu::fused_classifier(logits_, losses_, targets, N, V, Vp, dloss);
    has_dlogits_ = dloss != 0.0f;
    double total = 0.0;
    for (int i = 0; i < N; ++i) total += losses_[i];
    return static_cast<float>(total / N);
}

void GPTModel::backward(const int* tokens, int B, int T) {
    if (!has_dlogits_) throw std::logic_error("GPTModel::backward needs a forward with targets and dloss != 0");
    const int N = B * T, C = config_.n_embd, Vp = config_.padded_vocab_size();
    const float* params = params_.data();
    float* grads = grads_.data();

    // Classifier (tied head): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf.
    cpu::matmul_backward(dc_a_, layout_.at(grads, ParamId::wte), nullptr, logits_, lnf_,
                         layout_.at(params, ParamId::wte), N, C, Vp);
    std::memset(dres_, 0, sizeof(float) * N * C);
    cpu::layernorm_backward(dres_, layout_.at(grads, ParamId::lnfw), layout_.at(grads, ParamId::lnfb), dc_a_, final_x_,
                            layout_.at(params, ParamId::lnfw), lnf_mean_, lnf_rstd_, N, C);

    const auto& ops = block_.ops();
    for (int l = config_.n_layer - 1; l >= 0; --l)
        for (auto op = ops.rbegin(); op != ops.rend(); ++op)
            if (op->kind != OpKind::dropout_mask) backward_op(*op, l, B, T);

    if (dropout_active_)
        cpu::residual_dropout_backward(dres_, dres_, emb_mask_, config_.dropout, static_cast<long>(N) * C);
    cpu::encoder_backward(layout_.at(grads, ParamId::wte), layout_.at(grads, ParamId::wpe), dres_, tokens, B, T, C);
    has_dlogits_ = false;
}

double GPTModel::training_flops(int B, int T) const {
    const BlockGraph block(config_, B, T);
    const double N = static_cast<double>(B) * T;
    const double classifier = 2.0 * N * config_.n_embd * config_.padded_vocab_size();
    // Backward costs twice the forward for matmul-like work (grads of inputs and weights).
    return 3.0 * (config_.n_layer * block.forward_flops() + classifier);
}

}  // namespace adacc
