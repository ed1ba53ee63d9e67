#include "src/engine/driver.h"

#include <stdexcept>
#include <string>

#include "kernels/rng.h"
#include "src/common/errors.h"

namespace adacc {

namespace {

// The kernels a model runs besides its blocks' ops (models/op_table.h): the embedding and
// its dropout, the final layernorm and the tied classifier here; the summed loss (GPTModel), the
// gradient norm and AdamW (optimizer.cpp); and in training the activation codecs, which any
// re-plan may bring in (their statistics are the codec sampler's).
constexpr Kernel kModelKernels[] = {
    Kernel::encoder_forward,           Kernel::encoder_backward,  Kernel::dropout_mask,       Kernel::dropout_forward,
    Kernel::residual_dropout_backward, Kernel::layernorm_forward, Kernel::layernorm_backward, Kernel::matmul_forward,
    Kernel::matmul_backward,           Kernel::fused_classifier,  Kernel::loss_accumulate,
};
constexpr Kernel kTrainingKernels[] = {
    Kernel::global_norm,      Kernel::adamw_update,        Kernel::codec_compress,
    Kernel::codec_decompress, Kernel::codec_outlier_count, Kernel::codec_error,
};

}  // namespace

Driver::Driver(Backend& backend, const ModelLayout& layout, ModelArenas& arenas)
    : backend_(backend), k_(backend.kernels()), arenas_(arenas) {
    rebind(layout);
}

void Driver::rebind(const ModelLayout& layout) {
    require_supported(layout);
    layout_ = &layout;
    ctx_ = backend_.context();
    ctx_.scratch = arenas_.views.codec_scratch;
    ctx_.scratch_bytes = layout.workspace().codec_scratch_bytes;
    ctx_.deterministic = layout.device_traits().deterministic;
    schedule_.clear();
    schedule_.reserve(layout.max_tape_entries());
    layer_mark_.assign(layout.config().n_layer + 1, {});
}

// Before anything runs: every kernel this model will call must be one the backend runs on the
// model's activations, or the run stops here saying which op and what to change.
void Driver::require_supported(const ModelLayout& layout) const {
    const DType activation = layout.device_traits().activation;
    // `user`: who calls the kernel, for the message; `attention`: whether model.attention chose it.
    auto require = [&](Kernel kernel, const std::string& user, bool attention) {
        if (backend_.supports(kernel, activation)) return;
        const std::string note = backend_.unsupported_note(kernel, activation);
        throw UserError("the " + std::string(device_name(backend_.device())) + " backend does not run kernel " +
                        kernel_name(kernel) + " (" + user + ") on " + model_dtype_name(activation) + " activations; " +
                        (!note.empty()
                             ? note
                             : "use a model.dtype it runs (fp32 runs on every backend)" +
                                   std::string(attention ? ", another model.attention" : "") + " or another --device"));
    };
    for (const OpInfo& op : layout.block().ops()) {
        const OpSpec& spec = op_spec(op.kind);
        for (Kernel kernel : spec.kernels)
            require(kernel, "the block's op \"" + op.name + "\"", spec.chosen_by_attention);
    }
    for (Kernel kernel : kModelKernels) require(kernel, "the embedding, final layernorm or classifier", false);
    if (layout.device_traits().fusions.residual_layernorm)
        require(Kernel::residual_layernorm_forward, "residual adds fused with the layernorms after them", false);
    if (layout.use() == ModelUse::training)
        for (Kernel kernel : kTrainingKernels) require(kernel, "the optimizer or the activation codecs", false);
}

unsigned char* Driver::mask_view(TensorKind kind) const {
    return dropout_active_ ? view(kind).as<unsigned char>() : nullptr;
}

ConstAct Driver::weight(std::optional<ParamId> id, int layer) const {
    if (!id) return nullptr;
    if (!arenas_.working.data()) return layout_->parameters().at(arenas_.params.as<const float>(), *id, layer);
    return layout_->parameters().at(arenas_.working.as<const bf16>(), *id, layer);
}

float Driver::dropout_p() const { return dropout_active_ ? layout_->config().dropout : 0.0f; }

bool Driver::dropped(int layer, TensorKind kind) const {
    return layout_->block().tensor(kind).saved && layout_->plan().at(layer, kind).policy == Policy::recompute;
}

// Backward's gradient of tensor `kind`: its buffer by liveness (model_layout.h's
// gradient_buffers); the residual stream's (x, x2, out) is one buffer throughout.
Act Driver::grad_buffer(TensorKind kind) const { return arenas_.views.grad[static_cast<int>(kind)]; }

std::uint64_t Driver::dropout_key(int layer, TensorKind kind) const {
    return rng_key(dropout_.seed, dropout_.step, dropout_.micro, static_cast<std::uint64_t>(layer),
                   static_cast<std::uint64_t>(kind));
}

// The next slot of the tape schedule, which must be (layer, kind): the walk below and
// ModelLayout::tape_schedule describe the same pushes, and this keeps them honest.
void* Driver::push_scheduled(int layer, TensorKind kind) {
    if (next_entry_ >= schedule_.size() || schedule_[next_entry_].layer != layer || schedule_[next_entry_].kind != kind)
        throw std::logic_error("tape schedule out of step: forward pushes " + std::string(tensor_kind_name(kind)) +
                               " of layer " + std::to_string(layer) + " at entry " + std::to_string(next_entry_));
    const TapeEntry& e = schedule_[next_entry_++];
    return arenas_.tape.push(e.layer, e.kind, e.policy, e.bytes, e.full_bytes);
}

// ---- forward --------------------------------------------------------------------------------

// Op `op` of `layer` as its kernels see it (models/op_table.h): its tensors in view, in the order
// of its inputs and outputs, their gradient buffers, its parameters and this pass's dropout.
OpCall Driver::op_call(const OpInfo& op, int layer, int B, int T) const {
    const GPTConfig& cfg = layout_->config();
    if (op.inputs.size() > kMaxOpTensors || op.outputs.size() > kMaxOpTensors)
        throw std::logic_error("op " + op.name + " has more than " + std::to_string(kMaxOpTensors) +
                               " inputs or outputs");
    OpCall c{k_, ctx_};
    c.B = B, c.T = T, c.C = cfg.n_embd, c.NH = cfg.n_head;
    c.in_features = op.in_features, c.out_features = op.out_features;
    c.n = op.outputs.empty() ? 0 : static_cast<long>(layout_->numel(op.outputs[0], B, T));
    c.dropout_p = dropout_p();
    if (op.rng_kind) c.dropout_key = dropout_key(layer, *op.rng_kind);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        c.in[i] = view(op.inputs[i]);
        c.din[i] = grad_buffer(op.inputs[i]);
    }
    for (std::size_t i = 0; i < op.outputs.size(); ++i) {
        c.out[i] = view(op.outputs[i]);
        c.dout[i] = grad_buffer(op.outputs[i]);
    }
    if (!op.inputs.empty() && layout_->block().tensor(op.inputs.back()).dtype == DType::u8)
        c.mask = mask_view(op.inputs.back());
    c.weight = weight(op.weight, layer);
    c.bias = weight(op.bias, layer);
    return c;
}

void Driver::run_op(const OpInfo& op, int layer, int B, int T) { op_spec(op.kind).forward(op_call(op, layer, B, T)); }

// Where op output `kind` of `layer` is written in forward: a kept tensor straight into its tape
// slot, the block output into the next layer's input slot, anything else into its workspace
// buffer (compressed after the op, or dropped and recorded as such).
void Driver::place_output(int layer, TensorKind kind, int B, int T) {
    if (layout_->use() == ModelUse::inference) {  // nothing is saved: one block's buffers serve every layer
        view_slot(kind) = kind == TensorKind::out ? arenas_.views.residual[(layer + 1) % 2].data() : buffer(kind);
        return;
    }
    if (kind == TensorKind::out) {
        layer_mark_[layer + 1] = arenas_.tape.mark();
        view_slot(kind) = push_scheduled(layer + 1, TensorKind::x);
        return;
    }
    if (!layout_->block().tensor(kind).saved) {
        view_slot(kind) = buffer(kind);
        return;
    }
    const Policy policy = layout_->plan().at(layer, kind).policy;
    if (policy == Policy::keep) {
        view_slot(kind) = push_scheduled(layer, kind);
        return;
    }
    view_slot(kind) = buffer(kind);
    if (policy == Policy::recompute) push_scheduled(layer, kind);
}

// Whether forward compresses op output `kind` of `layer` onto the tape (training only).
bool Driver::compresses(int layer, TensorKind kind) const {
    return layout_->use() == ModelUse::training && layout_->block().tensor(kind).saved &&
           layout_->plan().at(layer, kind).policy == Policy::compress;
}

// Each output of `op` (of block `layer`) that the plan compresses, into its tape slot taken now.
void Driver::compress_outputs(const OpInfo& op, int layer, int B, int T) {
    for (TensorKind t : op.outputs)
        if (compresses(layer, t)) compress_output(layer, t, push_scheduled(layer, t), B, T);
}

// The blob goes straight into `blob`, its tape slot (push_scheduled) reserved at the codec's
// bound, so its size need not be known: nothing is read back from the device per tensor.
void Driver::compress_output(int layer, TensorKind kind, void* blob, int B, int T) {
    const TensorPolicy& p = layout_->plan().at(layer, kind);
    const std::size_t numel = layout_->numel(kind, B, T), rows = layout_->rows(kind, B, T);
    k_.codec_compress(ctx_, p.codec, view(kind), rows, numel / rows, layout_->codec_params(), blob);
    if (observer_ && observer_->wants_compressed_tensors()) report_compressed(layer, kind, p.codec, blob, B, T);
}

// Sampling (the monitor's steps): the blob's exact size goes on the tape's record, and the
// observer sees the tensor with an idle gradient buffer to decode into (backward's buffers are
// unused during forward, so nothing is allocated).
void Driver::report_compressed(int layer, TensorKind kind, Codec codec, const void* blob, int B, int T) {
    CompressedTensor t;
    t.layer = layer;
    t.kind = kind;
    t.codec = codec;
    t.original = view(kind);
    t.blob = blob;
    t.rows = layout_->rows(kind, B, T);
    t.cols = layout_->numel(kind, B, T) / t.rows;
    t.exact_bytes =
        codec_bytes(codec, t.rows, t.cols, layout_->codec_params(), k_.codec_outlier_count(ctx_, codec, blob));
    // The gradient buffers of the largest tensors, att's or fch's: at least the tensor's size.
    t.decode_buffer = grad_buffer(is_attention_matrix(kind) ? TensorKind::att : TensorKind::fch);
    arenas_.tape.set_measured_bytes(layer, kind, t.exact_bytes);
    observer_->tensor_compressed(backend_, t);
}

void Driver::set_observer(ModelObserver* observer) {
    observer_ = observer;
    op_timer_.reset();
    if (!observer || !observer->wants_op_times()) return;
    // One interval per block op of every layer, made here so that forward allocates nothing.
    const std::size_t intervals = layout_->block().ops().size() * layout_->config().n_layer;
    op_timer_ = backend_.make_interval_timer(intervals);
    timed_ops_.reserve(intervals);
}

// After a forward's blocks: the ops' times, read once (on a GPU, after the queue reached the last).
void Driver::report_op_times() {
    const std::vector<double> ms = op_timer_->take_ms();
    for (std::size_t k = 0; k < ms.size(); ++k) observer_->op_timed(timed_ops_[k], ms[k]);
    timed_ops_.clear();
}

void Driver::forward_block(int layer, int B, int T) {
    const auto& ops = layout_->block().ops();
    std::size_t i = next_layernorm_ran_ ? 1 : 0;  // ln1 ran with the previous block's residual2
    next_layernorm_ran_ = false;
    for (; i < ops.size(); ++i) {
        const OpInfo& op = ops[i];
        if (op.kind == OpKind::dropout_mask && !dropout_active_) continue;
        for (TensorKind t : op.outputs) place_output(layer, t, B, T);
        if (fuses_residual_layernorm(i)) {
            const bool last = i + 1 == ops.size();
            if (!last)
                residual_with_layernorm(op, layer, &ops[++i], layer, B, T);  // this block's next op
            else
                residual_with_layernorm(op, layer, layer + 1 < layout_->config().n_layer ? &ops.front() : nullptr,
                                        layer + 1, B, T);
            continue;
        }
        if (op_timer_) op_timer_->start();
        run_op(op, layer, B, T);
        if (op_timer_) {
            op_timer_->stop();
            timed_ops_.push_back(i);
        }
        compress_outputs(op, layer, B, T);
    }
}

// Whether forward runs block op `i`, a residual add, with the layernorm of its sum that
// follows (residual1 with ln2; residual2, the block's last op, with the next block's ln1 or the
// final layernorm) in one kernel, as llm.c does: where the backend fuses them (DeviceTraits::
// fusions) and not while ops are timed (their times price recomputes, which run the plain ops).
// The kernel's outputs are the two kernels' bit for bit, so backward and recompute see the same
// tensors.
bool Driver::fuses_residual_layernorm(std::size_t i) const {
    const auto& ops = layout_->block().ops();
    if (!layout_->device_traits().fusions.residual_layernorm || op_timer_ || ops[i].kind != OpKind::residual_dropout)
        return false;
    if (i + 1 == ops.size()) return true;  // out, the next block's x, is always kept
    const OpInfo& next = ops[i + 1];
    return next.kind == OpKind::layernorm && next.inputs[0] == ops[i].outputs[0];
}

// `residual` of block `layer` with the layernorm of its sum: `norm` of block `norm_layer` (ln2 of
// the same block, or ln1 of the next), its outputs placed before and compressed after as that
// block would, or, null, the final layernorm. Tape slots are taken in the schedule's order: a
// compressed sum's (x2 in quant and adacc plans) before the layernorm's, so it is reserved first
// and filled once the kernel has written the sum.
void Driver::residual_with_layernorm(const OpInfo& residual, int layer, const OpInfo* norm, int norm_layer, int B,
                                     int T) {
    const TensorKind sum = residual.outputs[0];
    void* sum_blob = compresses(layer, sum) ? push_scheduled(layer, sum) : nullptr;
    const OpCall r = op_call(residual, layer, B, T);
    Act y;
    float *mean = nullptr, *rstd = nullptr;
    ConstAct w, b;
    if (norm) {
        for (TensorKind t : norm->outputs) place_output(norm_layer, t, B, T);
        y = view(norm->outputs[0]), mean = view(norm->outputs[1]).as<float>(),
        rstd = view(norm->outputs[2]).as<float>();
        w = weight(norm->weight, norm_layer), b = weight(norm->bias, norm_layer);
    } else {
        place_final_layernorm();
        y = lnf_, mean = lnf_mean_, rstd = lnf_rstd_;
        w = weight(ParamId::lnfw), b = weight(ParamId::lnfb);
    }
    k_.residual_layernorm_forward(ctx_, r.out[0], y, mean, rstd, r.in[0], r.in[1], r.mask, r.dropout_p, w, b, r.N(),
                                  r.C);
    next_layernorm_ran_ = norm_layer != layer;  // the next block's ln1 or the final layernorm
    if (sum_blob) compress_output(layer, sum, sum_blob, B, T);
    if (norm) compress_outputs(*norm, norm_layer, B, T);
}

// The final layernorm's outputs: the workspace's in inference, else the tape's last slots.
void Driver::place_final_layernorm() {
    const int L = layout_->config().n_layer;
    const DType a = layout_->device_traits().activation;
    if (layout_->use() == ModelUse::inference) {
        const WorkspaceViews& w = arenas_.views;
        lnf_ = w.lnf, lnf_mean_ = w.lnf_mean, lnf_rstd_ = w.lnf_rstd;
        return;
    }
    lnf_ = Act(push_scheduled(L, TensorKind::lnf), a);
    lnf_mean_ = static_cast<float*>(push_scheduled(L, TensorKind::lnf_mean));
    lnf_rstd_ = static_cast<float*>(push_scheduled(L, TensorKind::lnf_rstd));
    if (next_entry_ != schedule_.size()) throw std::logic_error("tape schedule out of step: entries left over");
}

void Driver::forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout, float dloss,
                     bool accumulate) {
    const GPTConfig& cfg = layout_->config();
    const int N = B * T, C = cfg.n_embd, L = cfg.n_layer;
    const WorkspaceViews& w = arenas_.views;
    const DType a = layout_->device_traits().activation;
    const bool inference = layout_->use() == ModelUse::inference;
    TapeAllocator& tape = arenas_.tape;
    // Without dropout in this pass, the driver skips the mask ops and gates with null masks.
    dropout_active_ = dropout.training && layout_->block().has_dropout() && !inference;
    dropout_ = dropout;
    next_layernorm_ran_ = false;
    if (observer_) observer_->forward_started();
    tape.release_to({});
    tape.reset_peak();
    if (!inference) layout_->tape_schedule(B, T, dropout_active_, schedule_);
    next_entry_ = 0;

    if (dropout_active_) emb_mask_ = static_cast<unsigned char*>(push_scheduled(kEmbeddingLayer, TensorKind::emb_mask));
    layer_mark_[0] = tape.mark();
    const Act x = inference ? w.residual[0] : Act(push_scheduled(0, TensorKind::x), a);
    k_.encoder_forward(ctx_, x, tokens, weight(ParamId::wte), weight(ParamId::wpe), B, T, C);
    if (dropout_active_) {
        // Keyed as (layer L, kind x) since before emb_mask had a kind of its own: masks stay bit-identical.
        k_.dropout_mask(ctx_, emb_mask_, static_cast<long>(N) * C, cfg.dropout, dropout_key(L, TensorKind::x));
        k_.dropout_forward(ctx_, x, x, emb_mask_, cfg.dropout, static_cast<long>(N) * C);
    }
    view_slot(TensorKind::x) = x.data();
    for (int l = 0; l < L; ++l) {
        forward_block(l, B, T);
        view_slot(TensorKind::x) = view(TensorKind::out).data();
    }
    final_x_ = view(TensorKind::out);
    if (op_timer_) report_op_times();
    if (!next_layernorm_ran_) {
        place_final_layernorm();
        k_.layernorm_forward(ctx_, lnf_, lnf_mean_, lnf_rstd_, final_x_, weight(ParamId::lnfw), weight(ParamId::lnfb),
                             N, C);
    }
    classifier_forward(targets, N, dloss, accumulate);
}

namespace {
// Rows [row, ...) of a row-major activation of `cols` columns.
Act rows_from(Act a, std::size_t row, std::size_t cols) {
    return Act(static_cast<unsigned char*>(a.data()) + row * cols * dtype_size(a.dtype()), a.dtype());
}
}  // namespace

// logits = lnf @ wte^T, then with targets the loss and, when dloss != 0, dlogits in place (the
// fused classifier). Over chunks of layout_->classifier_rows() tokens when the N x Vp logits do
// not fit whole: each chunk's dlogits are consumed at once — dlnf into its gradient buffer (where backward's
// final layernorm reads it) and the chunk's share of dwte into the gradients (accumulate false:
// the first chunk overwrites them, as backward's classifier matmul would) — so backward starts at
// the final layernorm, and only one chunk of logits ever exists. An inference forward without
// targets then computes no logits: read_logits computes the rows it is asked for
// (classifier_logits), from the final layernorm's output, which stays in the workspace.
void Driver::classifier_forward(const int* targets, int N, float dloss, bool accumulate) {
    const GPTConfig& cfg = layout_->config();
    const int C = cfg.n_embd, V = cfg.vocab_size, Vp = cfg.padded_vocab_size(), rows = layout_->classifier_rows();
    const WorkspaceViews& w = arenas_.views;
    has_dlogits_ = false;
    classifier_chunked_ = N > rows;
    if (!classifier_chunked_) {
        k_.matmul_forward(ctx_, w.logits, lnf_, weight(ParamId::wte), nullptr, N, C, Vp);
        if (!targets) return;
        k_.fused_classifier(ctx_, w.logits, w.losses, targets, N, V, Vp, dloss);
        has_dlogits_ = dloss != 0.0f;
        return;
    }
    if (!targets) {
        if (layout_->use() == ModelUse::inference) return;
        throw std::logic_error("a training model's chunked classifier keeps no logits: forward needs targets");
    }
    float* dwte = layout_->parameters().at(arenas_.grads.as<float>(), ParamId::wte);
    for (int row = 0; row < N; row += rows) {
        const int n = std::min(rows, N - row);
        const Act lnf = rows_from(lnf_, row, C);
        k_.matmul_forward(ctx_, w.logits, lnf, weight(ParamId::wte), nullptr, n, C, Vp);
        k_.fused_classifier(ctx_, w.logits, w.losses + row, targets + row, n, V, Vp, dloss);
        if (dloss == 0.0f) continue;
        k_.matmul_backward(ctx_, rows_from(grad_buffer(TensorKind::lnf), row, C), dwte, nullptr, w.logits, lnf,
                           weight(ParamId::wte), n, C, Vp, accumulate || row > 0);
    }
    has_dlogits_ = dloss != 0.0f;
    classifier_accumulated_ = accumulate;
}

void Driver::classifier_logits(std::size_t row, int n) {
    if (layout_->use() != ModelUse::inference)
        throw std::logic_error("classifier_logits: a training model's final layernorm output is on its tape");
    const GPTConfig& cfg = layout_->config();
    if (n > layout_->classifier_rows()) throw std::logic_error("classifier_logits: more rows than the logits buffer");
    k_.matmul_forward(ctx_, arenas_.views.logits, rows_from(lnf_, row, cfg.n_embd), weight(ParamId::wte), nullptr, n,
                      cfg.n_embd, cfg.padded_vocab_size());
}

// ---- backward -------------------------------------------------------------------------------

// Brings every tensor of `layer` that backward reads into view, in forward order: kept ones
// from their tape slot, compressed ones decompressed into the workspace, dropped ones
// recomputed by re-running their producing op (and the transient ops feeding it) from tensors
// already in view. Outputs of a re-run op that are already in view go to a discard buffer, so
// kept tensors are never overwritten: the tiny ones (layernorm statistics, att_lse) to the
// workspace's, a full-size one (matmul_gelu's fch or fch_gelu, when the other is dropped) to the
// gradient buffer of the op's first output, idle until this block's backward begins.
void Driver::materialize_block(int layer, int B, int T) {
    const BlockGraph& block = layout_->block();
    const ActivationPlan& plan = layout_->plan();
    const TapeAllocator& tape = arenas_.tape;
    const auto& ops = block.ops();
    constexpr std::size_t kMaxOps = 32;
    if (ops.size() > kMaxOps) throw std::logic_error("materialize_block: the block has more than 32 ops");
    bool rerun[kMaxOps] = {};
    for (std::size_t i = 0; i < ops.size(); ++i)
        for (TensorKind t : ops[i].outputs)
            if (dropped(layer, t)) rerun[i] = true;
    for (std::size_t i = ops.size(); i-- > 0;)
        if (rerun[i])
            for (TensorKind in : ops[i].inputs)
                if (!block.tensor(in).saved && in != TensorKind::x) rerun[block.producer(in) - ops.data()] = true;

    view_slot(TensorKind::x) = tape.data(*tape.find(layer, TensorKind::x));
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const OpInfo& op = ops[i];
        if (op.kind == OpKind::dropout_mask && !dropout_active_) continue;
        float* discard = arenas_.views.discard;
        for (TensorKind t : op.outputs) {
            if (!block.tensor(t).saved) {
                view_slot(t) = buffer(t);
                continue;
            }
            const TensorPolicy& p = plan.at(layer, t);
            if (p.policy == Policy::keep) view_slot(t) = tape.data(*tape.find(layer, t));
            if (p.policy == Policy::compress) {
                const void* blob = tape.data(*tape.find(layer, t));
                const std::size_t numel = layout_->numel(t, B, T), rows = layout_->rows(t, B, T);
                k_.codec_decompress(ctx_, p.codec, blob, rows, numel / rows, Act(buffer(t), block.tensor(t).dtype));
                view_slot(t) = buffer(t);
            }
        }
        if (!rerun[i]) continue;
        constexpr std::size_t kMaxOutputs = 4;
        if (op.outputs.size() > kMaxOutputs)
            throw std::logic_error("materialize_block: an op with more than 4 outputs");
        void* in_view[kMaxOutputs] = {};
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const TensorKind t = op.outputs[o];
            in_view[o] = view(t).data();
            if (!block.tensor(t).saved || dropped(layer, t)) {
                view_slot(t) = buffer(t);
            } else if (block.tensor(t).tiny) {
                view_slot(t) = discard;
                discard += layout_->numel(t, B, T);  // layernorm statistics (N) or att_lse (N x H)
            } else {
                view_slot(t) = idle_gradient(op, t, B, T);
            }
        }
        run_op(op, layer, B, T);
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const TensorKind t = op.outputs[o];
            if (block.tensor(t).saved && !dropped(layer, t)) view_slot(t) = in_view[o];
        }
    }
}

// The gradient buffer of `op`'s first output, as the discard for its full-size output `kind`
// (materialize_block). It holds that output's gradient, so a tensor no larger fits; it must not be
// the residual stream's, the one gradient alive across blocks.
void* Driver::idle_gradient(const OpInfo& op, TensorKind kind, int B, int T) const {
    const WorkspaceLayout& w = layout_->workspace();
    const int first = static_cast<int>(op.outputs[0]);
    if (!w.has_grad[first] || w.grad[first] == w.grad[static_cast<int>(TensorKind::out)] ||
        layout_->bytes(kind, B, T) > layout_->bytes(op.outputs[0], B, T))
        throw std::logic_error("materialize_block: no idle gradient buffer holds " + op.name + "'s kept output " +
                               tensor_kind_name(kind));
    return grad_buffer(op.outputs[0]).data();
}

void Driver::backward_op(const OpInfo& op, int layer, int B, int T, bool accumulate) {
    const OpSpec& spec = op_spec(op.kind);
    if (!spec.backward) return;  // no gradient (a dropout mask)
    const ParameterLayout& pl = layout_->parameters();
    OpCall c = op_call(op, layer, B, T);
    if (op.weight) c.dweight = pl.at(arenas_.grads.as<float>(), *op.weight, layer);
    if (op.bias) c.dbias = pl.at(arenas_.grads.as<float>(), *op.bias, layer);
    c.accumulate = accumulate;
    spec.backward(c);
}

// Gradients no matmul writes whole: layernorm parameters (accumulated over rows) and wpe (the
// encoder adds into the rows of the positions used). wte is written whole by the classifier.
void Driver::zero_non_matmul_grads() {
    const ParameterLayout& pl = layout_->parameters();
    for (ParamId id :
         {ParamId::wpe, ParamId::ln1w, ParamId::ln1b, ParamId::ln2w, ParamId::ln2b, ParamId::lnfw, ParamId::lnfb}) {
        const ParamTensorInfo& info = pl.info(id);
        backend_.memset(arenas_.grads.as<float>() + info.offset, 0, info.numel * sizeof(float));
    }
}

void Driver::backward(const int* tokens, int B, int T, bool accumulate) {
    if (layout_->use() == ModelUse::inference) throw std::logic_error("GPTModel::backward on an inference model");
    if (!has_dlogits_) throw std::logic_error("GPTModel::backward needs a forward with targets and dloss != 0");
    const GPTConfig& cfg = layout_->config();
    const int N = B * T, C = cfg.n_embd, Vp = cfg.padded_vocab_size(), L = cfg.n_layer;
    const ParameterLayout& pl = layout_->parameters();
    float* grads = arenas_.grads.as<float>();
    const WorkspaceViews& w = arenas_.views;
    TapeAllocator& tape = arenas_.tape;
    // The residual stream's gradient (the last block's output's, the first's input's) and the
    // final layernorm output's.
    const Act dres = grad_buffer(TensorKind::out), dlnf = grad_buffer(TensorKind::lnf);

    if (!accumulate) zero_non_matmul_grads();
    // Classifier (tied head): dlnf = dlogits @ wte, dwte += dlogits^T @ lnf (done chunk by chunk
    // in forward when the logits were chunked); then the final layernorm.
    if (!classifier_chunked_)
        k_.matmul_backward(ctx_, dlnf, pl.at(grads, ParamId::wte), nullptr, w.logits, lnf_, weight(ParamId::wte), N, C,
                           Vp, accumulate);
    else if (classifier_accumulated_ != accumulate)
        throw std::logic_error("a chunked classifier's forward wrote dwte with accumulate = " +
                               std::string(classifier_accumulated_ ? "true" : "false") +
                               " but backward was called with the other: pass forward_step the flag backward gets");
    backend_.memset(dres.data(), 0, dtype_size(dres.dtype()) * N * C);
    k_.layernorm_backward(ctx_, dres, pl.at(grads, ParamId::lnfw), pl.at(grads, ParamId::lnfb), dlnf, final_x_,
                          weight(ParamId::lnfw), lnf_mean_, lnf_rstd_, N, C);
    tape.release_to(layer_mark_[L]);

    const auto& ops = layout_->block().ops();
    for (int l = L - 1; l >= 0; --l) {
        materialize_block(l, B, T);
        for (auto op = ops.rbegin(); op != ops.rend(); ++op) backward_op(*op, l, B, T, accumulate);
        tape.release_to(layer_mark_[l]);
        if (block_gradients_hook_) block_gradients_hook_(l);
    }

    if (dropout_active_)
        k_.residual_dropout_backward(ctx_, dres, dres, emb_mask_, cfg.dropout, static_cast<long>(N) * C);
    k_.encoder_backward(ctx_, pl.at(grads, ParamId::wte), pl.at(grads, ParamId::wpe), dres, tokens, B, T, C);
    tape.release_to({});
    has_dlogits_ = false;
}

}  // namespace adacc
