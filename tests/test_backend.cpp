// The backend seam (src/engine/backend.h): every kernel, memset and copy the engine makes goes
// through a Backend. A "remote" test backend runs the CPU kernels on memory the engine must treat
// as not host-addressable — every host read and write has to be an explicit copy, token ids are
// staged through the workspace, checkpoint-style reads go through host_readable's staging — and
// it counts what crosses the seam. A training step (quant and adacc-style plans, dropout, two
// micro-batches, AdamW), eval-style logits and the sampled codec statistics must be bit-identical
// to the CPU backend's, and a step must copy no more than the tokens in and the losses out.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "src/adacc/codec_sampler.h"
#include "src/common/errors.h"
#include "src/engine/gpt_model.h"
#include "src/engine/kernel_timing.h"
#include "src/engine/memory_report.h"
#include "src/engine/optimizer.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

class RemoteBackend final : public Backend {
public:
    RemoteBackend() {
        kernels_ = cpu_backend().kernels();
        context_ = cpu_backend().context();
    }
    Device device() const override { return Device::cuda; }  // stands in for a device the host cannot see
    void* allocate(std::size_t bytes) override {
        void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p) throw std::bad_alloc();
        std::memset(p, 0, bytes);  // allocate promises zeroes
        return p;
    }
    void release(void* memory) override { std::free(memory); }
    void memset(void* dst, int byte, std::size_t bytes) override { std::memset(dst, byte, bytes); }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
        to_device += bytes;
        std::memcpy(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
        to_host += bytes;
        std::memcpy(dst, src, bytes);
    }
    void synchronize() override {}
    bool host_addressable() const override { return false; }
    bool supports(Kernel kernel, DType activation) const override {
        return kernel != declined && cpu_backend().supports(kernel, activation);
    }
    std::size_t free_memory() const override { return std::size_t{1} << 40; }
    std::unique_ptr<IntervalTimer> make_interval_timer(std::size_t max_intervals) override {
        return cpu_backend().make_interval_timer(max_intervals);
    }

    KernelTable& table() { return kernels_; }  // a test's stand-ins for kernels

    std::size_t to_device = 0, to_host = 0;
    std::optional<Kernel> declined;  // a kernel this backend says it does not run (supports)
};

using test::random_tokens;

GPTConfig tiny_config() {
    GPTConfig cfg = *gpt_preset("gpt-micro");
    cfg.n_layer = 2;
    cfg.dropout = 0.1f;
    return cfg;
}

// A plan exercising every policy: some tensors recomputed, the rest compressed by Adacc's codecs.
// fch is the MLP's recomputed tensor: a backend standing in for CUDA runs CUDA's graph (GELU in
// the matmuls' epilogues), whose fc re-run gives the CPU's fch bit for bit (its fch_gelu, kept,
// goes to a discard). Recomputing fch_gelu beside a compressed fch would not: the CPU's gelu op
// reads the decoded fch, CUDA's graph re-runs fc from ln2.
ActivationPlan mixed_plan(const GPTConfig& cfg, int B, int T) {
    const BlockGraph block(cfg, B, T);
    ActivationPlan plan(block, cfg.n_layer);
    for (int l = 0; l < cfg.n_layer; ++l)
        for (const TensorInfo& t : block.tensors()) {
            if (!t.saved || t.tiny || t.kind == TensorKind::x) continue;
            if (t.kind == TensorKind::ln1 || t.kind == TensorKind::fch)
                plan.set(l, t.kind, {Policy::recompute});
            else
                plan.set(l, t.kind, {Policy::compress, adacc_codec(t.kind)});
        }
    return plan;
}

struct StepOutcome {
    std::vector<float> losses, params, adam_m, logits, inference_logits;
    std::vector<CodecSample> samples;
};

StepOutcome two_steps(Backend& backend, const ActivationPlan& plan, int B, int T) {
    const GPTConfig cfg = tiny_config();
    GPTModel model(cfg, B, T, plan, {}, ModelUse::training, backend, backend.device());
    model.init_weights(5);
    const auto tokens = random_tokens(B * T, cfg.vocab_size, 1), targets = random_tokens(B * T, cfg.vocab_size, 2);
    CodecSampler sampler;
    model.set_observer(&sampler);
    StepOutcome out;
    OptimizerOptions opt;
    for (int step = 1; step <= 2; ++step) {
        for (int micro = 0; micro < 2; ++micro) {
            out.losses.push_back(model.forward(tokens.data(), targets.data(), B, T,
                                               DropoutContext{3, std::uint64_t(step), std::uint64_t(micro), true},
                                               1.0f / (2 * B * T)));
            model.backward(tokens.data(), B, T, micro > 0);
        }
        adamw_step(model, opt, 1e-3f, step);
    }
    out.samples = sampler.samples();
    std::vector<float> staging;
    const float* p = model.host_readable(ModelArena::parameters, staging);
    out.params.assign(p, p + model.num_params());
    out.adam_m.resize(model.num_params());
    model.read_arena(ModelArena::adam_m, 0, out.adam_m.size(), out.adam_m.data());
    model.forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    out.logits.resize(static_cast<std::size_t>(B) * T * cfg.padded_vocab_size());
    model.read_logits(0, static_cast<std::size_t>(B) * T, out.logits.data());
    // The trained weights in an inference model (one block's buffers for every layer).
    GPTModel inference(cfg, B, T, ActivationPlan(BlockGraph(cfg, B, T), cfg.n_layer), {}, ModelUse::inference, backend,
                       backend.device());
    inference.write_arena(ModelArena::parameters, 0, out.params.size(), out.params.data());
    inference.forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    out.inference_logits.resize(out.logits.size());
    inference.read_logits(0, static_cast<std::size_t>(B) * T, out.inference_logits.data());
    return out;
}

bool compresses(const ActivationPlan& plan) {
    for (int l = 0; l < plan.n_layer(); ++l)
        for (int k = 0; k < kNumTensorKinds; ++k)
            if (plan.at(l, static_cast<TensorKind>(k)).policy == Policy::compress) return true;
    return false;
}

// Mode none but `kind` recomputed in every layer.
ActivationPlan recomputing(const GPTConfig& cfg, int B, int T, TensorKind kind) {
    ActivationPlan plan = plan_for_mode(cfg, B, T, MemoryMode::none);
    for (int l = 0; l < cfg.n_layer; ++l) plan.set(l, kind, {Policy::recompute});
    return plan;
}

// The remote backend runs CUDA's graph and forward on the CPU's kernels, whose twins of the fused
// kernels are the separate kernels in turn: the same numbers as the CPU's graph, bit for bit, also
// where a layernorm that forward ran with the residual add before it (ln2 with residual1, ln1
// with the previous block's residual2; in quant with x2 compressed from the fused kernel's sum),
// recomputed alone (x2, ln2, ln1) or with everything (full), or not saved (inference).
TEST(Backend, ARemoteBackendComputesTheCpuNumbersBitForBit) {
    const int B = 2, T = 16;
    const GPTConfig cfg = tiny_config();
    for (const ActivationPlan& plan :
         {plan_for_mode(cfg, B, T, MemoryMode::quant), mixed_plan(cfg, B, T),
          plan_for_mode(cfg, B, T, MemoryMode::full), recomputing(cfg, B, T, TensorKind::x2),
          recomputing(cfg, B, T, TensorKind::ln2), recomputing(cfg, B, T, TensorKind::ln1)}) {
        RemoteBackend remote;
        const StepOutcome cpu = two_steps(cpu_backend(), plan, B, T), far = two_steps(remote, plan, B, T);
        EXPECT_EQ(cpu.losses, far.losses);
        EXPECT_EQ(std::memcmp(cpu.params.data(), far.params.data(), cpu.params.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(cpu.adam_m.data(), far.adam_m.data(), cpu.adam_m.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(cpu.logits.data(), far.logits.data(), cpu.logits.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(cpu.inference_logits.data(), far.inference_logits.data(),
                              cpu.inference_logits.size() * sizeof(float)),
                  0);
        EXPECT_EQ(cpu.inference_logits, cpu.logits) << "an inference model computes the training model's logits";
        ASSERT_EQ(cpu.samples.size(), far.samples.size());
        ASSERT_NE(cpu.samples.empty(), compresses(plan)) << "a compressing plan's codecs are sampled";
        for (std::size_t i = 0; i < cpu.samples.size(); ++i) {
            EXPECT_EQ(cpu.samples[i].bytes, far.samples[i].bytes);
            EXPECT_EQ(cpu.samples[i].relative_error, far.samples[i].relative_error);
            EXPECT_EQ(cpu.samples[i].outlier_fraction, far.samples[i].outlier_fraction);
        }
    }
}

// What crosses the seam in one training step as TrainingStep runs it (forward_step, backward, the
// gradient norm and AdamW queued): the token ids and targets in (and the tokens again for
// backward), and once, at the end, the step's loss and gradient norm out (two floats). No tensor,
// size or other value comes back, so a device backend runs the step without waiting.
TEST(Backend, ATrainingStepCopiesOnlyTokensInAndTheLossAndNormOut) {
    const int B = 2, T = 16, N = B * T;
    const GPTConfig cfg = tiny_config();
    RemoteBackend remote;
    GPTModel model(cfg, B, T, mixed_plan(cfg, B, T), {}, ModelUse::training, remote, remote.device());
    model.init_weights(5);
    const auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
    const float loss = model.forward(tokens.data(), targets.data(), B, T, DropoutContext{3, 2, 0, true}, 1.0f / N);
    model.backward(tokens.data(), B, T, false);
    remote.to_device = remote.to_host = 0;
    model.forward_step(tokens.data(), targets.data(), B, T, DropoutContext{3, 2, 0, true}, 1.0f / N, N, false);
    model.backward(tokens.data(), B, T, false);
    queue_gradient_norm(model);
    queue_adamw_step(model, OptimizerOptions{}, 1e-3f, 1);
    EXPECT_EQ(remote.to_host, 0u) << "nothing is read back before the step's end";
    const StepReadout readout = model.read_step();
    EXPECT_EQ(remote.to_device, 3 * N * sizeof(int));
    EXPECT_EQ(remote.to_host, 2 * sizeof(float));
    // The figures are the host-side path's: forward()'s loss, gradient_norm()'s norm (AdamW
    // changed the parameters, not the gradients).
    EXPECT_EQ(readout.loss, loss);
    EXPECT_EQ(readout.grad_norm, gradient_norm(model));
}

// The tape reserves a compressed tensor at its codec's bound and learns the exact size only when
// the codec sampler measures it: reserved bytes match the layout's schedule, measured ones the
// sampler's, and the outlier codec's blob is no larger than its reservation. The same on the
// remote backend, which runs CUDA's forward: residual1 with ln2 in one kernel although x2 is
// compressed (its slot reserved before ln2's and measured after them).
void expect_compressed_slots_reserved_and_measured(Backend& backend) {
    const int B = 2, T = 16, N = B * T;
    const GPTConfig cfg = tiny_config();
    const ActivationPlan plan = mixed_plan(cfg, B, T);
    ASSERT_EQ(plan.at(0, TensorKind::x2).policy, Policy::compress);
    GPTModel model(cfg, B, T, plan, {}, ModelUse::training, backend, backend.device());
    model.init_weights(5);
    const auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
    std::vector<TapeEntry> schedule;
    model.memory_layout().tape_schedule(B, T, true, schedule);
    std::size_t reserved = 0;
    for (const TapeEntry& e : schedule)
        if (e.policy == Policy::compress) reserved += e.bytes;

    model.forward(tokens.data(), targets.data(), B, T, DropoutContext{3, 1, 0, true}, 1.0f / N);
    EXPECT_EQ(model.tape().usage().by_policy[int(Policy::compress)], reserved);
    EXPECT_EQ(model.tape().usage().measured_slots, 0u) << "nothing is measured unless sampled";
    EXPECT_EQ(model.tape().usage().used, model.memory().tape) << "the schedule is the capacity";
    model.backward(tokens.data(), B, T, false);

    CodecSampler sampler;
    model.set_observer(&sampler);
    model.forward(tokens.data(), targets.data(), B, T, DropoutContext{3, 2, 0, true}, 1.0f / N);
    const TapeUsage& u = model.tape().usage();
    EXPECT_EQ(u.measured_reserved, reserved);
    EXPECT_LE(u.measured_bytes, reserved);
    EXPECT_GT(u.measured_bytes, 0u);
    std::size_t slots = 0;
    for (const TapeEntry& e : schedule) slots += e.policy == Policy::compress;
    EXPECT_EQ(u.measured_slots, slots);
    std::size_t worst_per_kind = 0;
    for (const CodecSample& s : sampler.samples()) worst_per_kind += s.bytes * cfg.n_layer;
    EXPECT_GE(worst_per_kind, u.measured_bytes);  // per kind the worst layer, times layers
}

TEST(Backend, CompressedSlotsAreReservedAtTheBoundAndMeasuredWhenSampled) {
    expect_compressed_slots_reserved_and_measured(cpu_backend());
    RemoteBackend remote;
    {
        KernelTiming timing(remote);
        expect_compressed_slots_reserved_and_measured(remote);
        const KernelTimes times = timing.take();
        // Two forwards, each with every residual add fused with the layernorm after it.
        EXPECT_EQ(times.calls[static_cast<int>(Kernel::residual_layernorm_forward)], 2 * 2 * tiny_config().n_layer);
        EXPECT_EQ(times.calls[static_cast<int>(Kernel::residual_dropout_forward)], 0);
    }
}

// The message a model's construction on `backend` refuses with (empty when it does not throw a
// UserError). The refusal comes before any step, from the driver's Backend::supports check.
std::string refusal(const GPTConfig& cfg, Backend& backend, DType activation) {
    const int B = 2, T = 8;
    try {
        GPTModel model(cfg, B, T, ActivationPlan(BlockGraph(cfg, B, T, activation), cfg.n_layer), {},
                       ModelUse::training, backend, {backend.device(), activation});
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST(Backend, TheCpuBackendRefusesBf16ActivationsBeforeTheFirstStep) {
    EXPECT_FALSE(cpu_backend().supports(Kernel::gelu_forward, DType::bf16));
    EXPECT_TRUE(cpu_backend().supports(Kernel::gelu_forward, DType::f32));
    const std::string message = refusal(tiny_config(), cpu_backend(), DType::bf16);
    EXPECT_NE(message.find("the cpu backend does not run kernel"), std::string::npos) << message;
    EXPECT_NE(message.find("on bf16 activations"), std::string::npos) << message;
    EXPECT_NE(message.find("model.dtype"), std::string::npos) << message;
}

TEST(Backend, AKernelTheBackendDeclinesIsRefusedNamingItsOpAndTheFix) {
    GPTConfig cfg = tiny_config();
    cfg.attention = AttentionImpl::fused;
    RemoteBackend remote;
    remote.declined = Kernel::attention_fused_backward;
    const std::string message = refusal(cfg, remote, DType::f32);
    EXPECT_NE(message.find("kernel attention_fused_backward (the block's op \"attention\") on fp32"), std::string::npos)
        << message;
    EXPECT_NE(message.find("another model.attention"), std::string::npos) << message;
    // The materialized attention does not call it: the same backend runs that model.
    cfg.attention = AttentionImpl::materialized;
    EXPECT_EQ(refusal(cfg, remote, DType::f32), "");
    // A kernel outside the blocks is checked too.
    remote.declined = Kernel::fused_classifier;
    EXPECT_NE(refusal(cfg, remote, DType::f32).find("kernel fused_classifier (the embedding"), std::string::npos);
}

// training.deterministic reaches the kernels: the driver hands a model's setting (its ComputeTarget,
// through DeviceTraits) to every kernel in its KernelContext, where cuDNN's attention backward
// reads it. Here the fused backward stands in for cuDNN's and records what it was handed.
bool backward_saw_deterministic = true;
void recording_attention_backward(const KernelContext& ctx, Act dqkv, ConstAct datty, ConstAct qkv, ConstAct atty,
                                  const float* lse, int B, int T, int C, int NH, float dropout_p,
                                  unsigned long long key) {
    backward_saw_deterministic = ctx.deterministic;
    cpu_backend().kernels().attention_fused_backward(ctx, dqkv, datty, qkv, atty, lse, B, T, C, NH, dropout_p, key);
}

TEST(Backend, TheModelsDeterminismReachesItsKernels) {
    const int B = 2, T = 16, N = B * T;
    GPTConfig cfg = tiny_config();
    cfg.attention = AttentionImpl::fused;
    RemoteBackend remote;
    remote.table().attention_fused_backward = recording_attention_backward;
    for (const bool deterministic : {false, true, false}) {
        ComputeTarget target(remote.device(), DType::f32);
        target.deterministic = deterministic;
        GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, MemoryMode::none), {}, ModelUse::training, remote, target);
        model.init_weights(5);
        const auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
        backward_saw_deterministic = !deterministic;
        model.forward(tokens.data(), targets.data(), B, T, DropoutContext{}, 1.0f / N);
        model.backward(tokens.data(), B, T, false);
        EXPECT_EQ(backward_saw_deterministic, deterministic);
    }
}

// KernelTiming (bench_gpu --per-op's source) times every kernel a step runs without changing a
// bit of it, counts each call once, and puts the backend's table back when it goes. The counts
// are the model's: per layer two layernorms and four matmuls (one with GELU in its epilogue each
// way), plus the final layernorm and the classifier's matmul; one encoder pass each way.
TEST(Backend, KernelTimingCountsEveryKernelOfAStepAndChangesNothing) {
    const int B = 2, T = 16, N = B * T;
    GPTConfig cfg = tiny_config();
    cfg.dropout = 0.0f;
    const int L = cfg.n_layer;
    RemoteBackend remote;
    const KernelTable untimed = remote.kernels();
    auto step = [&](KernelTiming* timing, KernelTimes* times, double* wall_ms) {
        GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, MemoryMode::none), {}, ModelUse::training, remote,
                       remote.device());
        model.init_weights(5);
        const auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
        if (timing) timing->take();  // the start-up's kernels (weight copies) are not the step's
        const auto t0 = std::chrono::steady_clock::now();
        model.forward_step(tokens.data(), targets.data(), B, T, DropoutContext{}, 1.0f / N, N, false);
        model.backward(tokens.data(), B, T, false);
        queue_gradient_norm(model);
        queue_adamw_step(model, OptimizerOptions{}, 1e-3f, 1);
        const StepReadout readout = model.read_step();
        if (wall_ms)
            *wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (timing) *times = timing->take();
        return readout;
    };
    const StepReadout plain = step(nullptr, nullptr, nullptr);
    KernelTimes times;
    double wall_ms = 0;
    StepReadout timed;
    {
        KernelTiming timing(remote);
        EXPECT_THROW(KernelTiming second(cpu_backend()), std::logic_error);
        timed = step(&timing, &times, &wall_ms);
    }
    EXPECT_EQ(timed.loss, plain.loss);
    EXPECT_EQ(timed.grad_norm, plain.grad_norm);
    EXPECT_EQ(std::memcmp(&remote.kernels(), &untimed, sizeof untimed), 0) << "the table is put back";
    auto calls = [&](Kernel k) { return times.calls[static_cast<int>(k)]; };
    EXPECT_EQ(calls(Kernel::encoder_forward), 1);
    EXPECT_EQ(calls(Kernel::encoder_backward), 1);
    // The remote backend stands in for CUDA, so it runs CUDA's graph and forward: each residual add
    // with the layernorm after it in one kernel (residual1 with ln2; residual2 with the next ln1,
    // the last block's with the final layernorm), leaving layer 0's ln1 the one plain layernorm
    // forward; fc with the GELU in its epilogue, fcproj with dGELU in backward's, no gelu op (a
    // kernel's own calls are its own: the CPU's fused kernels call no other through the table).
    EXPECT_EQ(calls(Kernel::layernorm_forward), 1);
    EXPECT_EQ(calls(Kernel::residual_layernorm_forward), 2 * L);
    EXPECT_EQ(calls(Kernel::residual_dropout_forward), 0);
    EXPECT_EQ(calls(Kernel::layernorm_backward), 2 * L + 1);
    // Without dropout each residual's branch shares the sum's gradient: no backward copy.
    EXPECT_EQ(calls(Kernel::residual_dropout_backward), 0);
    EXPECT_EQ(calls(Kernel::matmul_forward), 3 * L + 1);
    EXPECT_EQ(calls(Kernel::matmul_gelu_forward), L);
    EXPECT_EQ(calls(Kernel::matmul_backward), 3 * L + 1);
    EXPECT_EQ(calls(Kernel::matmul_dgelu_backward), L);
    EXPECT_EQ(calls(Kernel::gelu_forward), 0);
    EXPECT_EQ(calls(Kernel::gelu_backward), 0);
    EXPECT_EQ(calls(Kernel::fused_classifier), 1);
    EXPECT_GE(calls(Kernel::adamw_update), 1);
    EXPECT_EQ(calls(Kernel::codec_compress), 0) << "mode none compresses nothing";
    for (int k = 0; k < kNumKernels; ++k) EXPECT_GE(times.ms[k], 0.0) << kKernelNames[k];
    EXPECT_GT(times.total_ms(), 0.0);
    EXPECT_LE(times.total_ms(), wall_ms) << "the kernels' times are parts of the step's";

    // The matmuls again by shape: each linear layer's (N x C -> OC) once a layer each way, the
    // classifier's (N x C -> Vp) once; their calls and times add up to the matmul kernels'.
    const int C = cfg.n_embd, Vp = cfg.padded_vocab_size();
    const std::map<MatmulShape, long> expected = {
        {{Kernel::matmul_forward, N, C, 3 * C}, L},        {{Kernel::matmul_forward, N, C, C}, L},
        {{Kernel::matmul_gelu_forward, N, C, 4 * C}, L},   {{Kernel::matmul_forward, N, 4 * C, C}, L},
        {{Kernel::matmul_forward, N, C, Vp}, 1},           {{Kernel::matmul_backward, N, C, 3 * C}, L},
        {{Kernel::matmul_backward, N, C, C}, L},           {{Kernel::matmul_backward, N, C, 4 * C}, L},
        {{Kernel::matmul_dgelu_backward, N, 4 * C, C}, L}, {{Kernel::matmul_backward, N, C, Vp}, 1}};
    std::map<MatmulShape, long> got;
    std::array<double, kNumKernels> shape_ms{};
    for (const auto& [shape, t] : times.matmuls) {
        got[shape] = t.calls;
        shape_ms[static_cast<int>(shape.kernel)] += t.ms;
    }
    EXPECT_EQ(got, expected);
    for (Kernel k :
         {Kernel::matmul_forward, Kernel::matmul_gelu_forward, Kernel::matmul_backward, Kernel::matmul_dgelu_backward})
        EXPECT_NEAR(shape_ms[static_cast<int>(k)], times.ms[static_cast<int>(k)], 1e-9 * times.ms[static_cast<int>(k)])
            << kKernelNames[static_cast<int>(k)] << ": the same intervals, added in another order";
}

// model.attention = "cudnn" is fused's block with cuDNN's kernels, which the CPU does not run: the
// refusal names the fix, fused. The block is fused's tensor for tensor.
TEST(Backend, TheCpuRefusesCudnnAttentionNamingFused) {
    GPTConfig cfg = tiny_config();
    cfg.attention = AttentionImpl::cudnn;
    EXPECT_FALSE(cpu_backend().supports(Kernel::attention_cudnn_forward, DType::f32));
    const std::string message = refusal(cfg, cpu_backend(), DType::f32);
    EXPECT_NE(message.find("kernel attention_cudnn_forward"), std::string::npos) << message;
    EXPECT_NE(message.find("model.attention = \"fused\""), std::string::npos) << message;
    GPTConfig fused = cfg;
    fused.attention = AttentionImpl::fused;
    const BlockGraph a(cfg, 2, 8), b(fused, 2, 8);
    ASSERT_EQ(a.ops().size(), b.ops().size());
    for (std::size_t i = 0; i < a.ops().size(); ++i) {
        EXPECT_EQ(a.ops()[i].inputs, b.ops()[i].inputs) << a.ops()[i].name;
        EXPECT_EQ(a.ops()[i].outputs, b.ops()[i].outputs) << a.ops()[i].name;
    }
    for (int k = 0; k < kNumTensorKinds; ++k) {
        EXPECT_EQ(a.tensor(TensorKind(k)).numel, b.tensor(TensorKind(k)).numel) << k;
        EXPECT_EQ(a.tensor(TensorKind(k)).saved, b.tensor(TensorKind(k)).saved) << k;
    }
    // A checkpoint trained with cuDNN's attention evaluates and samples on the CPU: inference
    // models run it with the fused kernels.
    GPTModel inference = GPTModel::for_inference(cfg, 2, 8);
    EXPECT_EQ(inference.config().attention, AttentionImpl::fused);
}

}  // namespace
}  // namespace adacc
