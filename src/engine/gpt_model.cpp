#include "src/engine/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/rng.h"

namespace adacc {

ModelMemory GPTModel::plan_memory(const GPTConfig& cfg, int B, int T, const ActivationPlan& plan,
                                  const CodecParams& codec_params, ModelUse use, const ComputeTarget& target) {
    return ModelLayout(cfg, B, T, plan, codec_params, use, device_traits(target)).memory();
}

namespace {
// The target's traits, except that what the host can address is the backend's own word (a test
// backend may stand in for a device without being one).
DeviceTraits traits_of(const Backend& backend, const ComputeTarget& target) {
    if (backend.device() != target.device)
        throw std::logic_error("GPTModel: a " + std::string(device_name(backend.device())) + " backend for a " +
                               device_name(target.device) + " target");
    DeviceTraits traits = device_traits(target);
    traits.stage_tokens = !backend.host_addressable();
    return traits;
}
}  // namespace

GPTModel::GPTModel(const GPTConfig& config, int B, int T)
    : GPTModel(config, B, T, ActivationPlan(BlockGraph(config, B, T), config.n_layer)) {}

GPTModel::GPTModel(const GPTConfig& config, int B, int T, const ActivationPlan& plan, const CodecParams& codec_params,
                   ModelUse use, const ComputeTarget& target)
    : GPTModel(config, B, T, plan, codec_params, use, backend_for(target.device), target) {}

GPTModel::GPTModel(const GPTConfig& config, int B, int T, const ActivationPlan& plan, const CodecParams& codec_params,
                   ModelUse use, Backend& backend, const ComputeTarget& target)
    : backend_(&backend),
      layout_(std::make_unique<ModelLayout>(config, B, T, plan, codec_params, use, traits_of(backend, target))),
      arenas_(backend, *layout_),
      driver_(backend, *layout_, arenas_) {}

GPTModel GPTModel::for_inference(const GPTConfig& config, int B, int T, const ComputeTarget& target) {
    // A model trained with cuDNN's attention evaluates and samples with the fused kernels: without
    // dropout they compute the same attention, on any device (the CPU has no cuDNN), and sampling's
    // growing lengths would each need a cuDNN graph of their own.
    GPTConfig inference = config;
    inference.attention = portable_attention(inference.attention);
    return GPTModel(inference, B, T, ActivationPlan(BlockGraph(inference, B, T), inference.n_layer), {},
                    ModelUse::inference, target);
}

Act GPTModel::working_weights() const {
    return arenas_.working.data() ? Act(arenas_.working.data(), layout_->device_traits().activation) : Act();
}

void GPTModel::set_plan(const ActivationPlan& plan, const CodecParams& codec_params) {
    auto layout = std::make_unique<ModelLayout>(config(), max_batch(), max_seq_len(), plan, codec_params,
                                                layout_->use(), layout_->device_traits());
    layout_ = std::move(layout);
    arenas_.reshape(*backend_, *layout_);
    driver_.rebind(*layout_);
}

const Arena& GPTModel::arena(ModelArena which) const {
    switch (which) {
        case ModelArena::parameters: return arenas_.params;
        case ModelArena::gradients: return arenas_.grads;
        case ModelArena::adam_m: return arenas_.adam_m;
        case ModelArena::adam_v: return arenas_.adam_v;
    }
    throw std::logic_error("unknown model arena");
}

OptimizerShard GPTModel::held(ModelArena which) const {
    const bool sharded = which == ModelArena::adam_m || which == ModelArena::adam_v ||
                         (which == ModelArena::parameters && layout_->masters_sharded());
    return sharded ? layout_->optimizer_shard() : OptimizerShard{0, num_params()};
}

void GPTModel::read_arena(ModelArena which, std::size_t offset, std::size_t count, float* host) const {
    const OptimizerShard h = held(which);
    const Arena& a = arena(which);
    if (offset < h.begin || offset + count > h.begin + h.count ||
        (offset - h.begin + count) * sizeof(float) > a.bytes())
        throw std::out_of_range("read_arena: parameters [" + std::to_string(offset) + ", " +
                                std::to_string(offset + count) + ") are not all in this arena (it holds [" +
                                std::to_string(h.begin) + ", " + std::to_string(h.begin + h.count) + "))");
    backend_->copy_to_host(host, a.as<float>() + (offset - h.begin), count * sizeof(float));
}

void GPTModel::write_arena(ModelArena which, std::size_t offset, std::size_t count, const float* host) {
    if (offset + count > num_params() || !arena(which).data())
        throw std::out_of_range("write_arena: beyond the parameters, or an arena this model does not have");
    const OptimizerShard h = held(which);
    const OptimizerShard part = shard_part(h, offset, count);
    if (part.count > 0)
        backend_->copy_to_device(arena(which).as<float>() + (part.begin - h.begin), host + (part.begin - offset),
                                 part.count * sizeof(float));
    if (which != ModelArena::parameters || !arenas_.working.data()) return;
    // Rounded on the host as the convert kernel rounds (kernels/activation.h's to_bf16): the masters
    // of other ranks' shards are not here to convert from.
    std::vector<bf16> working(count);
    for (std::size_t i = 0; i < count; ++i) working[i] = to_bf16(host[i]);
    backend_->copy_to_device(arenas_.working.as<bf16>() + offset, working.data(), count * sizeof(bf16));
}

const float* GPTModel::host_readable(ModelArena which, std::vector<float>& staging) const {
    const Arena& a = arena(which);
    if (backend_->host_addressable()) return a.as<float>();
    const OptimizerShard h = held(which);
    staging.resize(h.count);
    read_arena(which, h.begin, h.count, staging.data());
    return staging.data();
}

const float* GPTModel::forward_weights(std::vector<float>& staging) const {
    if (!arenas_.working.data()) return host_readable(ModelArena::parameters, staging);  // whole without a working copy
    std::vector<bf16> working(num_params());
    backend_->copy_to_host(working.data(), arenas_.working.data(), working.size() * sizeof(bf16));
    staging.resize(working.size());
    for (std::size_t i = 0; i < working.size(); ++i) staging[i] = to_float(working[i]);
    return staging.data();
}

void GPTModel::read_logits(std::size_t row, std::size_t rows, float* host) {
    const std::size_t Vp = static_cast<std::size_t>(config().padded_vocab_size());
    if (row + rows > static_cast<std::size_t>(max_batch()) * max_seq_len())
        throw std::out_of_range("read_logits: beyond B x T rows");
    if (driver_.logits_whole()) return copy_logits(row, rows, host);
    if (layout_->use() != ModelUse::inference)
        throw std::logic_error("read_logits: this training model holds its logits a chunk of " +
                               std::to_string(layout_->classifier_rows()) +
                               " rows at a time (model.classifier_chunk); read logits from an inference model");
    const std::size_t chunk = static_cast<std::size_t>(layout_->classifier_rows());
    for (std::size_t r = row; r < row + rows; r += chunk) {
        const std::size_t n = std::min(chunk, row + rows - r);
        driver_.classifier_logits(r, static_cast<int>(n));
        copy_logits(0, n, host + (r - row) * Vp);
    }
}

void GPTModel::copy_logits(std::size_t row, std::size_t rows, float* host) const {
    const std::size_t Vp = static_cast<std::size_t>(config().padded_vocab_size());
    const Act logits = arenas_.views.logits;
    if (logits.dtype() == DType::f32) {
        backend_->copy_to_host(host, logits.as<float>() + row * Vp, rows * Vp * sizeof(float));
        return;
    }
    logits_staging_.resize(rows * Vp);
    backend_->copy_to_host(logits_staging_.data(), logits.as<bf16>() + row * Vp, rows * Vp * sizeof(bf16));
    for (std::size_t i = 0; i < rows * Vp; ++i) host[i] = to_float(logits_staging_[i]);
}

void GPTModel::read_losses(std::size_t count, float* host) const {
    if (count > static_cast<std::size_t>(max_batch()) * max_seq_len())
        throw std::out_of_range("read_losses: beyond B x T");
    backend_->copy_to_host(host, arenas_.views.losses, count * sizeof(float));
}

// Per parameter tensor, drawn on the host and copied in: memory beyond the arena is one tensor's.
// Written in chunks of kInitChunk floats through one small host buffer: a buffer as large as the
// largest tensor (wte, 147 MiB at gpt-117m) would be the process's peak memory beside the arenas.
// Every value is drawn from its own counter (rng_normal(key, i)), so the chunking changes no bit.
void GPTModel::init_weights(std::uint64_t seed, int residual_layers) {
    constexpr std::size_t kInitChunk = std::size_t(1) << 20;
    const int L = residual_layers > 0 ? residual_layers : config().n_layer;
    const ParameterLayout& pl = layout();
    std::vector<float> host(kInitChunk);
    for (int id = 0; id < kNumParamTensors; ++id) {
        const auto pid = static_cast<ParamId>(id);
        const ParamTensorInfo& t = pl.info(pid);
        const bool is_norm_weight = pid == ParamId::ln1w || pid == ParamId::ln2w || pid == ParamId::lnfw;
        const bool residual_proj = pid == ParamId::attprojw || pid == ParamId::fcprojw;
        const double stddev = residual_proj ? 0.02 / std::sqrt(2.0 * L) : 0.02;
        const std::uint64_t key = rng_key(seed, 0x1417, 0, static_cast<std::uint64_t>(id), 0);
        // Padded embedding rows stay zero: no token ever selects them and their logits are masked.
        const std::size_t live = pid == ParamId::wte ? std::size_t(config().vocab_size) * config().n_embd : t.numel;
        for (std::size_t begin = 0; begin < t.numel; begin += kInitChunk) {
            const std::size_t n = std::min(kInitChunk, t.numel - begin);
            float* p = host.data();
            if (!t.weight_decay) {  // biases and layernorm parameters
                std::fill(p, p + n, is_norm_weight ? 1.0f : 0.0f);
            } else {
#pragma omp parallel for schedule(static)
                for (std::size_t k = 0; k < n; ++k) {
                    const std::size_t i = begin + k;
                    p[k] = i < live ? static_cast<float>(stddev * rng_normal(key, i)) : 0.0f;
                }
            }
            write_arena(ModelArena::parameters, t.offset + begin, n, p);
        }
    }
}

void GPTModel::zero_grads() { backend_->memset(arenas_.grads.data(), 0, arenas_.grads.bytes()); }

const int* GPTModel::tokens_for_kernels(const int* tokens, const int** targets, int B, int T) {
    if (B > max_batch() || T > max_seq_len())
        throw std::invalid_argument("GPTModel: " + std::to_string(B) + " x " + std::to_string(T) +
                                    " exceeds the allocated " + std::to_string(max_batch()) + " x " +
                                    std::to_string(max_seq_len()));
    if (!layout_->stage_tokens()) return tokens;
    const std::size_t bytes = static_cast<std::size_t>(B) * T * sizeof(int);
    backend_->copy_to_device(arenas_.views.tokens, tokens, bytes);
    if (targets && *targets) {
        backend_->copy_to_device(arenas_.views.targets, *targets, bytes);
        *targets = arenas_.views.targets;
    }
    return arenas_.views.tokens;
}

void GPTModel::run_forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                           float dloss, bool accumulate) {
    const int* device_targets = targets;
    const int* device_tokens = tokens_for_kernels(tokens, &device_targets, B, T);
    driver_.forward(device_tokens, device_targets, B, T, dropout, dloss, accumulate);
}

// The mean loss is forward_step's sum over this one pass, read back.
float GPTModel::forward(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                        float dloss) {
    if (!targets) {
        run_forward(tokens, nullptr, B, T, dropout, dloss, false);
        return 0.0f;
    }
    forward_step(tokens, targets, B, T, dropout, dloss, static_cast<double>(B) * T, false);
    float loss = 0.0f;
    backend_->copy_to_host(&loss, arenas_.views.loss_total, sizeof loss);
    return loss;
}

void GPTModel::forward_step(const int* tokens, const int* targets, int B, int T, const DropoutContext& dropout,
                            float dloss, double loss_divisor, bool accumulate_loss) {
    run_forward(tokens, targets, B, T, dropout, dloss, accumulate_loss);
    backend_->kernels().loss_accumulate(backend_->context(), arenas_.views.loss_total, arenas_.views.losses, B * T,
                                        loss_divisor, accumulate_loss);
}

StepReadout GPTModel::read_step() const {
    float scalars[2];
    backend_->copy_to_host(scalars, arenas_.views.loss_total, sizeof scalars);
    return {scalars[0], scalars[1]};
}

void GPTModel::backward(const int* tokens, int B, int T, bool accumulate) {
    driver_.backward(tokens_for_kernels(tokens, nullptr, B, T), B, T, accumulate);
}

double GPTModel::training_flops(int B, int T) const {
    const BlockGraph block(config(), B, T);
    const double N = static_cast<double>(B) * T;
    const double classifier = 2.0 * N * config().n_embd * config().padded_vocab_size();
    // Backward costs twice the forward for matmul-like work (grads of inputs and weights).
    return 3.0 * (config().n_layer * block.forward_flops() + classifier);
}

}  // namespace adacc
