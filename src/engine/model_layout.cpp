#include "src/engine/model_layout.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_sizes.h"
#include "src/common/units.h"
#include "src/dist/process_group.h"

namespace adacc {

namespace {
// What a library's kernels take beside the arenas for this model: cuDNN's attention workspace
// when training with it (inference runs the fused kernels: GPTModel::for_inference).
std::size_t library_workspace_bytes(const GPTConfig& config, int B, int T, ModelUse use, bool deterministic) {
    if (use != ModelUse::training || config.attention != AttentionImpl::cudnn) return 0;
    const auto H = static_cast<std::size_t>(config.n_head);
    return cuda::cudnn_attention_device_bytes(static_cast<std::size_t>(B), H, static_cast<std::size_t>(T),
                                              static_cast<std::size_t>(config.n_embd) / H, deterministic);
}

constexpr std::size_t kAlign = 64;  // every tape slot and workspace buffer starts on a cache line

// Hands out consecutive 64-byte-aligned byte ranges.
struct Cursor {
    std::size_t bytes = 0;
    std::size_t take(std::size_t n) {
        const std::size_t at = bytes;
        bytes += align_up(n, kAlign);
        return at;
    }
};

// The largest scratch a compression of the plan needs (the outlier codec's statistics).
std::size_t codec_scratch_bytes(const GPTConfig& cfg, const BlockGraph& block, const ActivationPlan& plan,
                                const CodecParams& codec_params, int B, int T) {
    std::size_t scratch = 0;
    for (const TensorInfo& t : block.tensors()) {
        if (!t.saved) continue;
        const std::size_t rows = tensor_rows(cfg, t.kind, B, T);
        for (int l = 0; l < plan.n_layer(); ++l)
            if (plan.at(l, t.kind).policy == Policy::compress)
                scratch = std::max(scratch,
                                   codec_scratch_bytes(plan.at(l, t.kind).codec, rows, t.numel / rows, codec_params));
    }
    return scratch;
}

WorkspaceLayout workspace_layout(const GPTConfig& cfg, const BlockGraph& block, const ActivationPlan& plan,
                                 const CodecParams& codec_params, int B, int T, ModelUse use, bool stage_tokens) {
    WorkspaceLayout w;
    // A: an activation element (the model's dtype); F: fp32 (layernorm statistics, losses).
    const std::size_t N = static_cast<std::size_t>(B) * T, C = cfg.n_embd, F = sizeof(float);
    const std::size_t A = dtype_size(block.tensor(TensorKind::x).dtype);
    const bool inference = use == ModelUse::inference;
    Cursor c;
    for (const TensorInfo& t : block.tensors()) {
        const int k = static_cast<int>(t.kind);
        if (!t.saved || t.kind == TensorKind::x || !(inference || plan.materialized_anywhere(t.kind))) continue;
        w.buffer[k] = c.take(t.bytes());
        w.has_buffer[k] = true;
    }
    w.codec_scratch_bytes = codec_scratch_bytes(cfg, block, plan, codec_params, B, T);
    w.codec_scratch = c.take(w.codec_scratch_bytes);
    if (inference) {
        w.residual[0] = c.take(N * C * A);
        w.residual[1] = c.take(N * C * A);
        w.lnf = c.take(N * C * A);
        w.lnf_mean = c.take(N * F);
        w.lnf_rstd = c.take(N * F);
    }
    w.materialize = c.bytes;
    for (TensorKind t : {TensorKind::attproj, TensorKind::fcproj}) {
        w.buffer[static_cast<int>(t)] = c.take(N * C * A);
        w.has_buffer[static_cast<int>(t)] = true;
    }
    if (!inference) {  // backward's buffers
        const GradientBuffers grads = gradient_buffers(block);
        std::vector<std::size_t> offsets;
        for (std::size_t bytes : grads.bytes) offsets.push_back(c.take(bytes));
        for (int k = 0; k < kNumTapeTensorKinds; ++k)
            if (grads.of[k] >= 0) {
                w.grad[k] = offsets[grads.of[k]];
                w.has_grad[k] = true;
            }
        // A re-run op's kept outputs: a layernorm's two statistics, or fused attention's lse.
        w.discard = c.take(std::max(2 * N, block.tensor(TensorKind::att_lse).numel) * F);
    }
    w.transients = c.bytes - w.materialize;
    // The classifier's logits are held a chunk at a time (inference computes the rows it reads).
    w.classifier_rows = static_cast<std::size_t>(cfg.classifier_rows(static_cast<int>(N), A));
    w.logits = c.take(w.classifier_rows * cfg.padded_vocab_size() * A);
    w.losses = c.take(N * F);
    w.scalars = c.take(2 * F);
    if (stage_tokens) {
        w.tokens = c.take(N * sizeof(int));
        w.targets = c.take(N * sizeof(int));
    }
    w.logits_bytes = c.bytes - w.materialize - w.transients;
    w.total = c.bytes;
    return w;
}

}  // namespace

GradientBuffers gradient_buffers(const BlockGraph& block) {
    using K = TensorKind;
    GradientBuffers g;
    std::fill(std::begin(g.of), std::end(g.of), -1);
    std::vector<int> holders;  // per buffer: the tensors whose gradient it holds now
    auto bytes = [&](K k) { return k == K::lnf ? block.tensor(K::x).bytes() : block.tensor(k).bytes(); };
    auto name = [](K k) { return std::string(tensor_kind_name(k)); };
    auto live = [&](K k) { return g.of[static_cast<int>(k)] >= 0 && holders[g.of[static_cast<int>(k)]] > 0; };
    auto take = [&](K k) {
        if (live(k)) throw std::logic_error("gradient_buffers: " + name(k) + "'s gradient is written twice");
        int buffer = 0;
        while (buffer < static_cast<int>(g.bytes.size()) && (holders[buffer] > 0 || g.bytes[buffer] != bytes(k)))
            ++buffer;
        if (buffer == static_cast<int>(g.bytes.size())) {
            g.bytes.push_back(bytes(k));
            holders.push_back(0);
        }
        g.of[static_cast<int>(k)] = buffer;
        ++holders[buffer];
    };
    auto release = [&](K k) {
        if (!live(k)) throw std::logic_error("gradient_buffers: " + name(k) + "'s gradient is read but never written");
        --holders[g.of[static_cast<int>(k)]];
    };
    take(K::lnf);  // the classifier's dlnf
    take(K::out);  // the final layernorm's: the last block's output gradient
    release(K::lnf);
    const auto& ops = block.ops();
    for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
        for (const auto& [input, output] : op->grad_shared) {
            if (!live(output)) throw std::logic_error("gradient_buffers: " + op->name + " shares a dead gradient");
            g.of[static_cast<int>(input)] = g.of[static_cast<int>(output)];
            ++holders[g.of[static_cast<int>(input)]];
        }
        for (K k : op->grad_writes) take(k);  // before the reads are freed: no op's dinp is its dout
        for (K k : op->grad_updates)
            if (!live(k)) throw std::logic_error("gradient_buffers: " + op->name + " adds to a dead gradient");
        for (K k : op->grad_reads) release(k);
    }
    if (!live(K::x) || g.of[static_cast<int>(K::x)] != g.of[static_cast<int>(K::out)])
        throw std::logic_error("gradient_buffers: the block's input gradient is not its output's buffer");
    return g;
}

ModelLayout::ModelLayout(const GPTConfig& config, int B, int T, const ActivationPlan& plan,
                         const CodecParams& codec_params, ModelUse use, const DeviceTraits& traits)
    : config_(config),
      parameters_(config),
      B_(B),
      T_(T),
      block_(config, B, T, traits.activation, traits.fusions),
      plan_(plan),
      codec_params_(codec_params),
      use_(use),
      traits_(traits),
      workspace_(workspace_layout(config, block_, plan, codec_params, B, T, use, traits.stage_tokens)) {
    if (plan.n_layer() != config.n_layer) throw std::invalid_argument("activation plan has the wrong layer count");
    const std::size_t params = parameters_.total();
    const std::size_t shard = adacc::optimizer_shard(params, traits.optimizer_shards, 0).count;  // the largest
    const bool training = use == ModelUse::training;
    const std::size_t span = training ? sharded_span(params, traits.optimizer_shards) : params;
    memory_.parameters = (masters_sharded() ? shard : span) * sizeof(float);  // whole ones all-gathered: padded
    memory_.working_weights = span * traits.working_weight_bytes;
    memory_.backend = traits.resident_bytes + library_workspace_bytes(config, B, T, use, traits.deterministic);
    memory_.gradients = training ? span * sizeof(float) : 0;
    memory_.optimizer_state = training ? 2 * shard * sizeof(float) : 0;
    if (training) {
        std::vector<TapeEntry> schedule;
        tape_schedule(B, T, block_.has_dropout(), schedule);
        memory_.tape = tape_bytes(schedule);
        max_tape_entries_ = schedule.size();
    }
    memory_.materialize = workspace_.materialize;
    memory_.transients = workspace_.transients;
    memory_.logits = workspace_.logits_bytes;
}

OptimizerShard optimizer_shard(std::size_t params, int shards, int rank) {
    const std::size_t size = (params + static_cast<std::size_t>(shards) - 1) / static_cast<std::size_t>(shards);
    const std::size_t begin = std::min(params, size * static_cast<std::size_t>(rank));
    return {begin, std::min(size, params - begin)};
}

OptimizerShard shard_part(const OptimizerShard& shard, std::size_t offset, std::size_t count) {
    const std::size_t begin = std::max(offset, shard.begin);
    const std::size_t end = std::min(offset + count, shard.begin + shard.count);
    return begin < end ? OptimizerShard{begin, end - begin} : OptimizerShard{begin, 0};
}

std::size_t sharded_span(std::size_t params, int shards) {
    return optimizer_shard(params, shards, 0).count * static_cast<std::size_t>(shards);
}

OptimizerShard ModelLayout::optimizer_shard() const {
    return adacc::optimizer_shard(parameters_.total(), traits_.optimizer_shards,
                                  traits_.optimizer_shards > 1 ? process_group().rank : 0);
}

std::size_t ModelLayout::numel(TensorKind kind, int B, int T) const {
    const std::size_t N = static_cast<std::size_t>(B) * T;
    if (kind == TensorKind::out) return N * config_.n_embd;
    if (block_.tensor(kind).numel == 0) return 0;
    if (is_attention_matrix(kind)) return N * config_.n_head * T;
    const std::size_t per_token = block_.tensor(kind).numel / block_.tensor(TensorKind::ln1_mean).numel;
    return N * per_token;
}

std::size_t ModelLayout::bytes(TensorKind kind, int B, int T) const {
    return numel(kind, B, T) * dtype_size(block_.tensor(kind).dtype);
}

// The pushes of Driver::forward, in its order: the embedding mask, layer 0's input, per layer
// and op its saved outputs in their policy's form (the block output as the next layer's input),
// then the final layernorm's output and statistics.
void ModelLayout::tape_schedule(int B, int T, bool dropout, std::vector<TapeEntry>& out) const {
    out.clear();
    const std::size_t N = static_cast<std::size_t>(B) * T, act = N * config_.n_embd * dtype_size(traits_.activation);
    auto keep = [&](int layer, TensorKind kind, std::size_t bytes) {
        out.push_back({layer, kind, Policy::keep, Codec::group_int4, bytes, bytes});
    };
    if (dropout) keep(kEmbeddingLayer, TensorKind::emb_mask, N * config_.n_embd);
    keep(0, TensorKind::x, act);
    for (int l = 0; l < config_.n_layer; ++l)
        for (const OpInfo& op : block_.ops()) {
            if (op.kind == OpKind::dropout_mask && !dropout) continue;
            // Kept and dropped outputs are placed before the op runs, compressed ones after it.
            for (const bool compressed : {false, true})
                for (TensorKind t : op.outputs) {
                    if (t == TensorKind::out) {
                        if (!compressed) keep(l + 1, TensorKind::x, act);
                        continue;
                    }
                    const TensorInfo& info = block_.tensor(t);
                    if (!info.saved) continue;
                    const TensorPolicy& p = plan_.at(l, t);
                    if ((p.policy == Policy::compress) != compressed) continue;
                    const std::size_t full = bytes(t, B, T), rows = this->rows(t, B, T);
                    const std::size_t reserved =
                        p.policy == Policy::keep ? full
                        : p.policy == Policy::recompute
                            ? 0
                            : codec_max_bytes(p.codec, rows, numel(t, B, T) / rows, codec_params_);
                    out.push_back({l, t, p.policy, p.codec, reserved, full});
                }
        }
    const int L = config_.n_layer;
    keep(L, TensorKind::lnf, act);
    keep(L, TensorKind::lnf_mean, N * sizeof(float));
    keep(L, TensorKind::lnf_rstd, N * sizeof(float));
}

std::size_t tape_bytes(const std::vector<TapeEntry>& schedule) {
    std::size_t total = 0;
    for (const TapeEntry& e : schedule) total += align_up(e.bytes, kAlign);
    return total;
}

}  // namespace adacc
