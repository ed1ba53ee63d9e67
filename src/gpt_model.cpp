#include "src/gpt_model.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/cpu/codecs.h"
#include "kernels/cpu/ops.h"
#include "kernels/rng.h"

namespace adacc {

namespace {

constexpr std::size_t kAlign = 64;
std::size_t align_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

bool is_attention_matrix(TensorKind k) { return k == TensorKind::att || k == TensorKind::att_mask; }
bool is_block_output(TensorKind k) { return k == TensorKind::out; }

// Elements of tensor `kind` at B x T, from the block description at its allocated shape.
std::size_t numel_at(const BlockGraph& block, const GPTConfig& cfg, TensorKind kind, int B, int T) {
    const std::size_t N = static_cast<std::size_t>(B) * T;
    if (kind == TensorKind::out) return N * cfg.n_embd;
    if (block.tensor(kind).numel == 0) return 0;
    if (is_attention_matrix(kind)) return N * cfg.n_head * T;
    const std::size_t per_token = block.tensor(kind).numel / block.tensor(TensorKind::ln1_mean).numel;
    return N * per_token;
}

// The tape capacity for one forward at B x T: the same walk as GPTModel::forward, summing the
// aligned size each push reserves (codecs at their exact upper bound).
std::size_t tape_capacity(const GPTConfig& cfg, const BlockGraph& block, const ActivationPlan& plan,
                          const CodecParams& codec_params, int B, int T) {
    const std::size_t N = static_cast<std::size_t>(B) * T, C = cfg.n_embd, F = sizeof(float);
    std::size_t total = 0;
    if (block.has_dropout()) total += align_up(N * C);  // embedding dropout mask
    total += align_up(N * C * F);                       // x of layer 0
    for (int l = 0; l < cfg.n_layer; ++l)
        for (const OpInfo& op : block.ops())
            for (TensorKind t : op.outputs) {
                if (is_block_output(t)) {
                    total += align_up(N * C * F);  // the next layer's x
                    continue;
                }
                const TensorInfo& info = block.tensor(t);
                if (!info.saved) continue;
                const TensorPolicy& p = plan.at(l, t);
                const std::size_t rows = is_attention_matrix(t) ? N * cfg.n_head : N;
                if (p.policy == Policy::keep) total += align_up(info.bytes());
                if (p.policy == Policy::compress)
                    total += align_up(codec_max_bytes(p.codec, rows, info.numel / rows, codec_params));
            }
    total += align_up(N * C * F) + 2 * align_up(N * F);  // final layernorm output, mean, rstd
    return total;
}

// Workspace byte offsets, computed the same way for plan_memory() and for carving.
struct WorkspaceLayout {
    std::size_t buffer[kNumTensorKinds] = {};  // materialised tensors and transients (0 = none)
    bool has_buffer[kNumTensorKinds] = {};
    std::size_t residual[2] = {}, lnf = 0, lnf_mean = 0, lnf_rstd = 0;  // inference only
    std::size_t dres = 0, dc_a = 0, dc_b = 0, dqkv = 0, dfc = 0, datt = 0, discard = 0, codec_scratch = 0;
    std::size_t logits = 0, losses = 0;
    std::size_t materialize = 0, transients = 0, logits_bytes = 0, total = 0;
};

struct Cursor {
    std::size_t bytes = 0;
    std::size_t take(std::size_t n) {
        const std::size_t at = bytes;
        bytes += align_up(n);
        return at;
    }
};

WorkspaceLayout workspace_layout(const GPTConfig& cfg, const BlockGraph& block, const ActivationPlan& plan,
                                 const CodecParams& codec_params, int B, int T, ModelUse use) {
    WorkspaceLayout w;
    const std::size_t N = static_cast<std::size_t>(B) * T, C = cfg.n_embd, F = sizeof(float);
    const bool inference = use == ModelUse::inference;
    Cursor c;
    std::size_t scratch = 0;
    for (const TensorInfo& t : block.tensors()) {
        const int k = static_cast<int>(t.kind);
        if (!t.saved || t.kind == TensorKind::x || !(inference || plan.materialized_anywhere(t.kind))) continue;
        w.buffer[k] = c.take(t.bytes());
        w.has_buffer[k] = true;
        const std::size_t rows = is_attention_matrix(t.kind) ? N * cfg.n_head : N;
        for (int l = 0; l < plan.n_layer(); ++l)
            if (plan.at(l, t.kind).policy == Policy::compress)
                scratch = std::max(scratch, codec_scratch_bytes(plan.at(l, t.kind).codec, rows,
                                                                t.numel / rows, codec_params));
    }
    w.codec_scratch = c.take(scratch);
    if (inference) {
        w.residual[0] = c.take(N * C * F);
        w.residual[1] = c.take(N * C * F);
        w.lnf = c.take(N * C * F);
        w.lnf_mean = c.take(N * F);
        w.lnf_rstd = c.take(N * F);
    }
    w.materialize = c.bytes;
    for (TensorKind t : {TensorKind::attproj, TensorKind::fcproj}) {
        w.buffer[static_cast<int>(t)] = c.take(N * C * F);
        w.has_buffer[static_cast<int>(t)] = true;
    }
    if (!inference) {  // backward's buffers
        w.dres = c.take(N * C * F);
        w.dc_a = c.take(N * C * F);
        w.dc_b = c.take(N * C * F);
        w.dqkv = c.take(N * 3 * C * F);
        w.dfc = c.take(N * 4 * C * F);
        w.datt = c.take(block.tensor(TensorKind::att).bytes());
        w.discard = c.take(2 * N * F);
    }
    w.transients = c.bytes - w.materialize;
    w.logits = c.take(N * cfg.padded_vocab_size() * F);
    w.losses = c.take(N * F);
    w.logits_bytes = c.bytes - w.materialize - w.transients;
    w.total = c.bytes;
    return w;
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

ModelMemory GPTModel::plan_memory(const GPTConfig& cfg, int B, int T, const ActivationPlan& plan,
                                  const CodecParams& codec_params, ModelUse use) {
    const BlockGraph block(cfg, B, T);
    const WorkspaceLayout w = workspace_layout(cfg, block, plan, codec_params, B, T, use);
    const std::size_t param_bytes = ParameterLayout(cfg).total() * sizeof(float);
    const bool training = use == ModelUse::training;
    ModelMemory m;
    m.parameters = param_bytes;
    m.gradients = training ? param_bytes : 0;
    m.optimizer_state = training ? 2 * param_bytes : 0;
    m.tape = training ? tape_capacity(cfg, block, plan, codec_params, B, T) : 0;
    m.materialize = w.materialize;
    m.transients = w.transients;
    m.logits = w.logits_bytes;
    return m;
}

GPTModel::GPTModel(const GPTConfig& config, int B, int T)
    : GPTModel(config, B, T, ActivationPlan(BlockGraph(config, B, T), config.n_layer)) {}

GPTModel::GPTModel(const GPTConfig& config, int B, int T, const ActivationPlan& plan,
                   const CodecParams& codec_params, ModelUse use)
    : config_(config), layout_(config), B_(B), T_(T), block_(config, B, T), plan_(plan), codec_params_(codec_params),
      memory_(plan_memory(config, B, T, plan, codec_params, use)), params_(layout_.total()),
      grads_(memory_.gradients / sizeof(float)), m_(memory_.optimizer_state / 2 / sizeof(float)),
      v_(memory_.optimizer_state / 2 / sizeof(float)), workspace_(memory_.workspace() / sizeof(float)),
      tape_(memory_.tape), layer_mark_(config.n_layer + 1), use_(use) {
    if (plan.n_layer() != config.n_layer) throw std::invalid_argument("activation plan has the wrong layer count");
    carve_workspace();
}

GPTModel GPTModel::for_inference(const GPTConfig& config, int B, int T) {
    return GPTModel(config, B, T, ActivationPlan(BlockGraph(config, B, T), config.n_layer), {}, ModelUse::inference);
}

void GPTModel::set_plan(const ActivationPlan& plan, const CodecParams& codec_params) {
    if (plan.n_layer() != config_.n_layer) throw std::invalid_argument("activation plan has the wrong layer count");
    plan_ = plan;
    codec_params_ = codec_params;
    memory_ = plan_memory(config_, B_, T_, plan_, codec_params_, use_);
    workspace_ = FloatArena();  // free the old arenas before allocating the new ones
    tape_ = TapeAllocator(0);
    tape_ = TapeAllocator(memory_.tape);
    workspace_ = FloatArena(memory_.workspace() / sizeof(float));
    std::fill(std::begin(buffer_), std::end(buffer_), nullptr);
    carve_workspace();
}

void GPTModel::carve_workspace() {
    const WorkspaceLayout w = workspace_layout(config_, block_, plan_, codec_params_, B_, T_, use_);
    float* base = workspace_.data();
    if (use_ == ModelUse::inference) {
        residual_[0] = at_byte<float>(base, w.residual[0]);
        residual_[1] = at_byte<float>(base, w.residual[1]);
        lnf_ = at_byte<float>(base, w.lnf);
        lnf_mean_ = at_byte<float>(base, w.lnf_mean);
        lnf_rstd_ = at_byte<float>(base, w.lnf_rstd);
    }
    for (int k = 0; k < kNumTensorKinds; ++k)
        if (w.has_buffer[k]) buffer_[k] = at_byte<float>(base, w.buffer[k]);
    codec_scratch_ = at_byte<void>(base, w.codec_scratch);
    dres_ = at_byte<float>(base, w.dres);
    dc_a_ = at_byte<float>(base, w.dc_a);
    dc_b_ = at_byte<float>(base, w.dc_b);
    dqkv_ = at_byte<float>(base, w.dqkv);
    dfc_ = at_byte<float>(base, w.dfc);
    datt_ = at_byte<float>(base, w.datt);
    discard_ = at_byte<float>(base, w.discard);
    logits_ = at_byte<float>(base, w.logits);
    losses_ = at_byte<float>(base, w.losses);
}

unsigned char* GPTModel::mask_view(TensorKind kind) const {
    return dropout_active_ ? reinterpret_cast<unsigned char*>(view(kind)) : nullptr;
}

float GPTModel::dropout_p() const { return dropout_active_ ? config_.dropout : 0.0f; }

std::size_t GPTModel::rows_of(TensorKind kind, int B, int T) const {
    const std::size_t N = static_cast<std::size_t>(B) * T;
    return is_attention_matrix(kind) ? N * config_.n_head : N;
}

std::size_t GPTModel::bytes_of(TensorKind kind, int B, int T) const {
    return numel_at(block_, config_, kind, B, T) * dtype_size(block_.tensor(kind).dtype);
}

// Backward's gradient buffers: the residual stream's gradient (dres) is shared by x, x2 and
// out because residual additions pass it through unchanged; the rest alternate between two
// N x C buffers so that each op reads one and writes the other.
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

std::uint64_t GPTModel::dropout_key(int layer, TensorKind kind) const {
    return rng_key(dropout_.seed, dropout_.step, dropout_.micro, static_cast<std::uint64_t>(layer),
                   static_cast<std::uint64_t>(kind));
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

// ---- forward --------------------------------------------------------------------------------

void GPTModel::run_op(const OpInfo& op, int layer, int B, int T) {
    const int N = B * T, C = config_.n_embd, NH = config_.n_head;
    const float p = dropout_p();
    const float* params = params_.data();
    auto weight = [&](std::optional<ParamId> id) { return id ? layout_.at(params, *id, layer) : nullptr; };
    auto in = [&](int i) { return view(op.inputs[i]); };
    auto out = [&](int i) { return view(op.outputs[i]); };
    switch (op.kind) {
        case OpKind::layernorm:
            cpu::layernorm_forward(out(0), out(1), out(2), in(0), weight(op.weight), weight(op.bias), N, C);
            break;
        case OpKind::matmul:
            cpu::matmul_forward(out(0), in(0), weight(op.weight), weight(op.bias), N, op.in_features, op.out_features);
            break;
        case OpKind::attention_softmax: cpu::attention_softmax_forward(out(0), in(0), B, T, C, NH); break;
        case OpKind::dropout_mask:
            cpu::dropout_mask(mask_view(op.outputs[0]), static_cast<long>(numel_at(block_, config_, op.outputs[0], B, T)),
                              p, dropout_key(layer, op.outputs[0]));
            break;
        case OpKind::attention_value:
            cpu::attention_value_forward(out(0), view(TensorKind::att), mask_view(TensorKind::att_mask), p,
                                         view(TensorKind::qkv), B, T, C, NH);
            break;
        case OpKind::residual_dropout:
            cpu::residual_dropout_forward(out(0), in(0), in(1), op.inputs.size() > 2 ? mask_view(op.inputs[2]) : nullptr,
                                          p, static_cast<long>(N) * C);
            break;
        case OpKind::gelu: cpu::gelu_forward(out(0), in(0), static_cast<long>(N) * 4 * C); break;
    }
}

// Where op output `kind` of `layer` is written in forward: a kept tensor straight into its tape
// slot, the block output into the next layer's input slot, anything else into its workspace
// buffer (compressed after the op, or dropped and recorded as such).
void GPTModel::place_output(int layer, TensorKind kind, int B, int T) {
    const int k = static_cast<int>(kind);
    const std::size_t bytes = bytes_of(kind, B, T);
    if (use_ == ModelUse::inference) {  // nothing is saved: one block's buffers serve every layer
        view_[k] = is_block_output(kind) ? residual_[(layer + 1) % 2] : buffer_[k];
        return;
    }
    if (is_block_output(kind)) {
        layer_mark_[layer + 1] = tape_.mark();
        view_[k] = static_cast<float*>(tape_.push(layer + 1, TensorKind::x, Policy::keep, bytes, bytes));
        return;
    }
    if (!block_.tensor(kind).saved) {
        view_[k] = buffer_[k];
        return;
    }
    const TensorPolicy& p = plan_.at(layer, kind);
    if (p.policy == Policy::keep) {
        view_[k] = static_cast<float*>(tape_.push(layer, kind, Policy::keep, bytes, bytes));
        return;
    }
    view_[k] = buffer_[k];
    if (p.policy == Policy::recompute) tape_.push(layer, kind, Policy::recompute, 0, bytes);
}

void GPTModel::compress_output(int layer, TensorKind kind, int B, int T) {
    const TensorPolicy& p = plan_.at(layer, kind);
    const std::size_t numel = numel_at(block_, config_, kind, B, T), rows = rows_of(kind, B, T);
    const std::size_t bound = codec_max_bytes(p.codec, rows, numel / rows, codec_params_);
    void* blob = tape_.top(layer, kind, bound);
    const std::size_t bytes = cpu::compress(p.codec, view(kind), rows, numel / rows, codec_params_, blob, codec_scratch_);
    tape_.push(layer, kind, Policy::compress, bytes, numel * dtype_size(block_.tensor(kind).dtype));
    if (samples_) sample_codec(kind, p.codec, blob, bytes, B, T);
}

void GPTModel::sample_codec(TensorKind kind, Codec codec, const void* blob, std::size_t bytes, int B, int T) {
    const auto start = std::chrono::steady_clock::now();
    CodecSample* entry = nullptr;
    for (auto& s : *samples_)
        if (s.kind == kind) entry = &s;
    if (!entry) {
        if (samples_->size() == samples_->capacity()) return;  // never reallocate inside a step
        samples_->push_back({kind, 0, 0, 0});
        entry = &samples_->back();
    }
    entry->bytes = std::max(entry->bytes, bytes);
    if (codec_is_lossless(codec)) return;  // bit-packing: nothing to measure
    const std::size_t numel = numel_at(block_, config_, kind, B, T), rows = rows_of(kind, B, T);
    float* decoded = is_attention_matrix(kind) ? datt_ : dfc_;
    cpu::decompress(codec, blob, rows, numel / rows, decoded);
    const CodecStats stats = cpu::measure_error(view(kind), decoded, numel);
    entry->relative_error = std::max(entry->relative_error, stats.relative_l2);
    const std::size_t outliers = cpu::codec_outlier_channels(blob), cols = numel / rows;
    entry->outlier_fraction = std::max(entry->outlier_fraction, double(outliers) / double(cols));
    if (codec == Codec::outlier_int4 && outliers >= outlier_channel_cap(cols, codec_params_))
        entry->outlier_cap_reached = true;
    sampling_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void GPTModel::forward_block(int layer, int B, int T) {
    const auto& ops = block_.ops();
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const OpInfo& op = ops[i];
        if (op.kind == OpKind::dropout_mask && !dropout_active_) continue;
        for (TensorKind t : op.outputs) place_output(layer, t, B, T);
        const auto start = std::chrono::steady_clock::now();
        run_op(op, layer, B, T);
        if (op_ms_) (*op_ms_)[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (use_ == ModelUse::inference) continue;
        for (TensorKind t : op.outputs)
            if (block_.tensor(t).saved && plan_.at(layer, t).policy == Policy::compress) compress_output(layer, t, B, T);
    }
}

float GPTModel::forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                        float dloss) {
    const int N = B * T, C = config_.n_embd, L = config_.n_layer, V = config_.vocab_size,
              Vp = config_.padded_vocab_size();
    const std::size_t act_bytes = static_cast<std::size_t>(N) * C * sizeof(float);
    const float* params = params_.data();
    const bool inference = use_ == ModelUse::inference;
    // Without dropout in this pass, the driver skips the mask ops and gates with null masks.
    dropout_active_ = dropout.training && block_.has_dropout() && !inference;
    dropout_ = dropout;
    if (samples_) samples_->clear();
    tape_.release_to({});
    tape_.reset_peak();

    if (dropout_active_)
        emb_mask_ = static_cast<unsigned char*>(
            tape_.push(kEmbeddingLayer, TensorKind::res1_mask, Policy::keep, static_cast<std::size_t>(N) * C,
                       static_cast<std::size_t>(N) * C));
    layer_mark_[0] = tape_.mark();
    float* x = inference ? residual_[0]
                         : static_cast<float*>(tape_.push(0, TensorKind::x, Policy::keep, act_bytes, act_bytes));
    cpu::encoder_forward(x, tokens, layout_.at(params, ParamId::wte), layout_.at(params, ParamId::wpe), B, T, C);
    if (dropout_active_) {
        cpu::dropout_mask(emb_mask_, static_cast<long>(N) * C, config_.dropout, dropout_key(L, TensorKind::x));
        cpu::dropout_forward(x, x, emb_mask_, config_.dropout, static_cast<long>(N) * C);
    }
    view_[static_cast<int>(TensorKind::x)] = x;
    for (int l = 0; l < L; ++l) {
        forward_block(l, B, T);
        view_[static_cast<int>(TensorKind::x)] = view(TensorKind::out);
    }
    // The final layernorm is recorded as layer L's ln1 on the tape; its input is layer L's x.
    final_x_ = view(TensorKind::out);
    if (!inference) {
        lnf_ = static_cast<float*>(tape_.push(L, TensorKind::ln1, Policy::keep, act_bytes, act_bytes));
        lnf_mean_ = static_cast<float*>(tape_.push(L, TensorKind::ln1_mean, Policy::keep, N * sizeof(float), N * sizeof(float)));
        lnf_rstd_ = static_cast<float*>(tape_.push(L, TensorKind::ln1_rstd, Policy::keep, N * sizeof(float), N * sizeof(float)));
    }
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

// ---- backward -------------------------------------------------------------------------------

// Brings every tensor of `layer` that backward reads into view, in forward order: kept ones
// from their tape slot, compressed ones decompressed into the workspace, dropped ones
// recomputed by re-running their producing op (and the transient ops feeding it) from tensors
// already in view. Outputs of a re-run op that are already in view go to a discard buffer, so
// kept tensors are never overwritten.
void GPTModel::materialize_block(int layer, int B, int T) {
    const auto& ops = block_.ops();
    bool rerun[32] = {};
    for (std::size_t i = 0; i < ops.size(); ++i)
        for (TensorKind t : ops[i].outputs)
            if (block_.tensor(t).saved && plan_.at(layer, t).policy == Policy::recompute) rerun[i] = true;
    for (std::size_t i = ops.size(); i-- > 0;)
        if (rerun[i])
            for (TensorKind in : ops[i].inputs)
                if (!block_.tensor(in).saved && in != TensorKind::x)
                    rerun[block_.producer(in) - ops.data()] = true;

    view_[static_cast<int>(TensorKind::x)] = static_cast<float*>(tape_.data(*tape_.find(layer, TensorKind::x)));
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const OpInfo& op = ops[i];
        if (op.kind == OpKind::dropout_mask && !dropout_active_) continue;
        float* discard = discard_;
        for (TensorKind t : op.outputs) {
            const int k = static_cast<int>(t);
            if (!block_.tensor(t).saved) {
                view_[k] = buffer_[k];
                continue;
            }
            const TensorPolicy& p = plan_.at(layer, t);
            if (p.policy == Policy::keep) view_[k] = static_cast<float*>(tape_.data(*tape_.find(layer, t)));
            if (p.policy == Policy::compress) {
                const void* blob = tape_.data(*tape_.find(layer, t));
                const std::size_t numel = numel_at(block_, config_, t, B, T), rows = rows_of(t, B, T);
                cpu::decompress(p.codec, blob, rows, numel / rows, buffer_[k]);
                view_[k] = buffer_[k];
            }
        }
        if (!rerun[i]) continue;
        float* in_view[4] = {};
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const int k = static_cast<int>(op.outputs[o]);
            in_view[o] = view_[k];
            const bool dropped = block_.tensor(op.outputs[o]).saved && plan_.at(layer, op.outputs[o]).policy == Policy::recompute;
            if (!block_.tensor(op.outputs[o]).saved || dropped) {
                view_[k] = buffer_[k];
            } else {
                view_[k] = discard;
                discard += static_cast<std::size_t>(B) * T;  // only layernorm statistics land here
            }
        }
        run_op(op, layer, B, T);
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const TensorKind t = op.outputs[o];
            const bool dropped = block_.tensor(t).saved && plan_.at(layer, t).policy == Policy::recompute;
            if (block_.tensor(t).saved && !dropped) view_[static_cast<int>(t)] = in_view[o];
        }
    }
}

void GPTModel::backward_op(const OpInfo& op, int layer, int B, int T, bool accumulate) {
    const int N = B * T, C = config_.n_embd, NH = config_.n_head;
    const float p = dropout_p();
    auto weight = [&](std::optional<ParamId> id) { return id ? layout_.at(params_.data(), *id, layer) : nullptr; };
    auto dweight = [&](std::optional<ParamId> id) { return id ? layout_.at(grads_.data(), *id, layer) : nullptr; };
    const float* att = view(TensorKind::att);
    const float* qkv = view(TensorKind::qkv);
    switch (op.kind) {
        case OpKind::layernorm:
            cpu::layernorm_backward(grad_buffer(op.inputs[0]), dweight(op.weight), dweight(op.bias),
                                    grad_buffer(op.outputs[0]), view(op.inputs[0]), weight(op.weight),
                                    view(op.outputs[1]), view(op.outputs[2]), N, C);
            break;
        case OpKind::matmul:
            cpu::matmul_backward(grad_buffer(op.inputs[0]), dweight(op.weight), dweight(op.bias),
                                 grad_buffer(op.outputs[0]), view(op.inputs[0]), weight(op.weight), N,
                                 op.in_features, op.out_features, accumulate);
            break;
        case OpKind::attention_softmax: cpu::attention_softmax_backward(dqkv_, datt_, att, qkv, B, T, C, NH); break;
        case OpKind::dropout_mask: break;  // masks are inputs only
        case OpKind::attention_value:
            cpu::attention_value_backward(datt_, dqkv_, grad_buffer(TensorKind::atty), att,
                                          mask_view(TensorKind::att_mask), p, qkv, B, T, C, NH);
            break;
        case OpKind::residual_dropout:
            // The residual input's gradient is the output's (same buffer, dres); only the branch needs work.
            cpu::residual_dropout_backward(grad_buffer(op.inputs[1]), grad_buffer(op.outputs[0]),
                                           op.inputs.size() > 2 ? mask_view(op.inputs[2]) : nullptr, p,
                                           static_cast<long>(N) * C);
            break;
        case OpKind::gelu:
            cpu::gelu_backward(grad_buffer(op.inputs[0]), view(op.inputs[0]), grad_buffer(op.outputs[0]),
                               static_cast<long>(N) * 4 * C);
            break;
    }
}

// Gradients no matmul writes whole: layernorm parameters (accumulated over rows) and wpe (the
// encoder adds into the rows of the positions used). wte is written whole by the classifier.
void GPTModel::zero_non_matmul_grads() {
    for (ParamId id : {ParamId::wpe, ParamId::ln1w, ParamId::ln1b, ParamId::ln2w, ParamId::ln2b, ParamId::lnfw,
                       ParamId::lnfb}) {
        const ParamTensorInfo& info = layout_.info(id);
        std::memset(grads_.data() + info.offset, 0, info.numel * sizeof(float));
    }
}

void GPTModel::backward(const int* tokens, int B, int T, bool accumulate) {
    if (use_ == ModelUse::inference) throw std::logic_error("GPTModel::backward on an inference model");
    if (!has_dlogits_) throw std::logic_error("GPTModel::backward needs a forward with targets and dloss != 0");
    const int N = B * T, C = config_.n_embd, Vp = config_.padded_vocab_size(), L = config_.n_layer;
    const float* params = params_.data();
    float* grads = grads_.data();

    if (!accumulate) zero_non_matmul_grads();
    // Classifier (tied head): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf; then the final layernorm.
    cpu::matmul_backward(dc_a_, layout_.at(grads, ParamId::wte), nullptr, logits_, lnf_,
                         layout_.at(params, ParamId::wte), N, C, Vp, accumulate);
    std::memset(dres_, 0, sizeof(float) * N * C);
    cpu::layernorm_backward(dres_, layout_.at(grads, ParamId::lnfw), layout_.at(grads, ParamId::lnfb), dc_a_, final_x_,
                            layout_.at(params, ParamId::lnfw), lnf_mean_, lnf_rstd_, N, C);
    tape_.release_to(layer_mark_[L]);

    const auto& ops = block_.ops();
    for (int l = L - 1; l >= 0; --l) {
        materialize_block(l, B, T);
        for (auto op = ops.rbegin(); op != ops.rend(); ++op)
            if (op->kind != OpKind::dropout_mask) backward_op(*op, l, B, T, accumulate);
        tape_.release_to(layer_mark_[l]);
    }

    if (dropout_active_)
        cpu::residual_dropout_backward(dres_, dres_, emb_mask_, config_.dropout, static_cast<long>(N) * C);
    cpu::encoder_backward(layout_.at(grads, ParamId::wte), layout_.at(grads, ParamId::wpe), dres_, tokens, B, T, C);
    tape_.release_to({});
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
