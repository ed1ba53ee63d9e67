// The tape: exact byte accounting for every memory mode (against sizes computed here from the
// tensor list and the codec formulas), the peak seen by an observer on every push and release,
// and bit-identical gradients for every recompute-only plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "src/adacc/codec_sampler.h"
#include "src/engine/gpt_model.h"
#include "src/engine/memory_report.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

std::size_t a64(std::size_t n) { return (n + 63) / 64 * 64; }

using test::random_tokens;

GPTConfig config_with(const char* preset, int n_layer, float dropout) {
    GPTConfig c = *gpt_preset(preset);
    c.n_layer = n_layer;
    c.dropout = dropout;
    return c;
}

// What the tape must hold after a forward at B x T under `plan` with dropout on: per tensor,
// its full size (kept), its codec formula size (compressed) or nothing (recomputed), each
// rounded up to 64 bytes; plus the embedding mask, every layer's input, and the final layernorm.
struct Expected {
    std::size_t used = 0, kept = 0, compressed = 0, recomputed = 0;
};
Expected expected_tape(const GPTConfig& cfg, int B, int T, const ActivationPlan& plan) {
    const BlockGraph block(cfg, B, T);
    const std::size_t N = std::size_t(B) * T, C = cfg.n_embd;
    Expected e;
    auto keep = [&](std::size_t bytes) { e.used += a64(bytes), e.kept += bytes; };
    if (block.has_dropout()) keep(N * C);
    keep(N * C * 4);  // x of layer 0
    for (int l = 0; l < cfg.n_layer; ++l) {
        for (const TensorInfo& t : block.tensors()) {
            if (!t.saved || t.kind == TensorKind::x) continue;
            const TensorPolicy& p = plan.at(l, t.kind);
            if (p.policy == Policy::keep) keep(t.bytes());
            if (p.policy == Policy::recompute) e.recomputed += t.bytes();
            if (p.policy == Policy::compress) {
                const std::size_t rows =
                    (t.kind == TensorKind::att || t.kind == TensorKind::att_mask) ? N * cfg.n_head : N;
                const bool mask = p.codec == Codec::bitpack;
                const std::size_t bytes = mask ? (t.numel + 7) / 8 /* bits, padded to 64 */
                                               : codec_bytes(p.codec, rows, t.numel / rows, {});
                e.used += a64(bytes);
                e.compressed += mask ? a64(bytes) : bytes;
            }
        }
        keep(N * C * 4);  // the block's output: the next layer's x (or the final layernorm's input)
    }
    keep(N * C * 4), keep(N * 4), keep(N * 4);  // final layernorm output, mean, rstd
    return e;
}

struct Case {
    const char* preset;
    int n_layer, B, T;
    float dropout;
};

class TapeAccounting : public ::testing::TestWithParam<Case> {};

TEST_P(TapeAccounting, BytesMatchTheTensorListExactlyInEveryMode) {
    const Case c = GetParam();
    const GPTConfig cfg = config_with(c.preset, c.n_layer, c.dropout);
    const auto tokens = random_tokens(c.B * c.T, cfg.vocab_size, 1),
               targets = random_tokens(c.B * c.T, cfg.vocab_size, 2);
    for (MemoryMode mode : fixed_memory_modes()) {
        const ActivationPlan plan = plan_for_mode(cfg, c.B, c.T, mode);
        GPTModel model(cfg, c.B, c.T, plan);
        model.init_weights(3);
        std::size_t observed_peak = 0;
        model.tape().set_observer([&](const std::vector<TapeSlot>& slots, const TapeUsage& usage) {
            std::size_t end = 0;  // recomputed from the slots themselves, not from the tape's counters
            for (const auto& s : slots) end = std::max(end, s.offset + a64(s.bytes));
            EXPECT_EQ(end, usage.used);
            for (const auto& s : slots) EXPECT_EQ(s.offset % 64, 0u);
            observed_peak = std::max(observed_peak, end);
        });
        model.forward(tokens.data(), targets.data(), c.B, c.T, DropoutContext{1, 1, 0, true}, 1.0f / (c.B * c.T));
        const Expected e = expected_tape(cfg, c.B, c.T, plan);
        const TapeUsage& u = model.tape().usage();
        const char* name = memory_mode_name(mode);
        EXPECT_EQ(u.used, e.used) << name;
        EXPECT_EQ(u.by_policy[int(Policy::keep)], e.kept) << name;
        EXPECT_EQ(u.by_policy[int(Policy::recompute)], e.recomputed) << name;
        // The group/channel/asym codecs have fixed sizes, so the capacity planned before
        // allocation is exactly what a forward uses.
        EXPECT_EQ(model.memory().tape, e.used) << name;
        model.backward(tokens.data(), c.B, c.T);
        EXPECT_EQ(model.tape().usage().used, 0u) << name << ": backward releases every slot";
        EXPECT_EQ(model.tape().peak().used, observed_peak) << name;
        EXPECT_EQ(observed_peak, e.used) << name;
    }
}

INSTANTIATE_TEST_SUITE_P(Configs, TapeAccounting,
                         ::testing::Values(Case{"gpt-micro", 2, 2, 16, 0.1f}, Case{"gpt-micro", 3, 3, 7, 0.0f},
                                           Case{"gpt-tiny", 2, 2, 32, 0.1f}, Case{"gpt-tiny", 1, 1, 5, 0.2f}));

TEST(TapeAccounting, ModesOrderAsExpected) {
    const GPTConfig cfg = config_with("gpt-tiny", 2, 0.1f);
    auto tape = [&](MemoryMode m) { return memory_for_mode(cfg, 4, 64, m).tape; };
    EXPECT_LT(tape(MemoryMode::full), tape(MemoryMode::selective));
    EXPECT_LT(tape(MemoryMode::selective), tape(MemoryMode::none));
    EXPECT_LT(tape(MemoryMode::quant), tape(MemoryMode::none) / 3);
}

// The codec decides the element type compress reads: a mask compressed with a float codec (or an
// fp32 tensor bit-packed) is refused when the plan is made, not discovered on the tape.
TEST(ActivationPlan, CompressCodecMustFitTheTensorsElementType) {
    const GPTConfig cfg = config_with("gpt-tiny", 2, 0.1f);
    const BlockGraph block(cfg, 2, 16);
    ActivationPlan plan(block, cfg.n_layer);
    EXPECT_THROW(plan.set(0, TensorKind::att_mask, {Policy::compress, Codec::group_int4}), std::invalid_argument);
    EXPECT_THROW(plan.set(0, TensorKind::fch, {Policy::compress, Codec::bitpack}), std::invalid_argument);
    EXPECT_EQ(plan, ActivationPlan(block, cfg.n_layer)) << "a refused policy leaves the plan as it was";
    plan.set(0, TensorKind::att_mask, {Policy::compress, Codec::bitpack});
    plan.set(0, TensorKind::att_mask, {Policy::recompute, Codec::group_int4});  // the codec only matters for compress
    plan.set(1, TensorKind::fch, {Policy::compress, Codec::outlier_int4});
    EXPECT_EQ(plan.at(1, TensorKind::fch).codec, Codec::outlier_int4);
    for (MemoryMode mode : fixed_memory_modes()) {
        const ActivationPlan fixed = ActivationPlan::for_mode(mode, block, cfg.n_layer);
        for (const TensorInfo& t : block.tensors())
            if (fixed.at(0, t.kind).policy == Policy::compress) {
                EXPECT_EQ(fixed.at(0, t.kind).codec == Codec::bitpack, t.dtype == DType::u8) << t.name;
            }
    }
}

// Backward's gradient buffers by liveness (model_layout.h's gradient_buffers): the residual
// stream's gradient is one buffer, gelu's runs in place, a matmul's input and output gradients
// are never one buffer, and N x C buffers are reused once their reader is done: two of them
// besides the residual stream's, as the fixed dres, dc_a, dc_b were.
TEST(GradientBuffers, LivenessReusesBuffersAndKeepsLiveOnesApart) {
    GPTConfig cfg = config_with("gpt-micro", 2, 0.1f);
    const int B = 2, T = 6;  // H * T is not C, 3C or 4C: the attention matrix has a size of its own
    for (int k : {1, 3, 4}) ASSERT_NE(cfg.n_head * T, k * cfg.n_embd);
    const BlockGraph block(cfg, B, T);
    const GradientBuffers g = gradient_buffers(block);
    auto of = [&](TensorKind k) { return g.of[static_cast<int>(k)]; };
    using K = TensorKind;
    EXPECT_EQ(of(K::x), of(K::x2));
    EXPECT_EQ(of(K::x2), of(K::out));
    EXPECT_EQ(of(K::fch), of(K::fch_gelu));
    for (auto [in, out] :
         {std::pair{K::ln1, K::qkv}, {K::atty, K::attproj}, {K::ln2, K::fch}, {K::fch_gelu, K::fcproj}})
        EXPECT_NE(of(in), of(out)) << tensor_kind_name(in) << " and " << tensor_kind_name(out);
    EXPECT_EQ(of(K::ln1_mean), -1);  // no gradient: statistics, masks
    EXPECT_EQ(of(K::att_mask), -1);
    const std::size_t nc = block.tensor(K::x).bytes();
    std::vector<std::size_t> sizes = g.bytes;
    std::sort(sizes.begin(), sizes.end());
    std::vector<std::size_t> want = {nc, nc, nc, 3 * nc, 4 * nc, block.tensor(K::att).bytes()};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(sizes, want);

    // Where the attention matrix is as large as fch (H * T = 4C) it takes fch's buffer, free by then.
    const BlockGraph square(cfg, B, 4 * cfg.n_embd / cfg.n_head);
    const GradientBuffers s = gradient_buffers(square);
    EXPECT_EQ(s.of[static_cast<int>(K::att)], s.of[static_cast<int>(K::fch)]);
    EXPECT_EQ(s.bytes.size(), 5u);
    // Fused attention has no attention matrix, nor its gradient.
    cfg.attention = AttentionImpl::fused;
    const GradientBuffers f = gradient_buffers(BlockGraph(cfg, B, T));
    EXPECT_EQ(f.of[static_cast<int>(K::att)], -1);
    EXPECT_EQ(f.bytes.size(), 5u);
}

// Without dropout a residual addition's branch gets the sum's gradient unchanged, so it is the
// residual stream's buffer too (as llm.c's one dresidual) and residual_dropout_backward, which would
// copy it, does not run: one N x C buffer fewer than with dropout. With dropout, the branch's is
// its own (dout times the mask's scale).
TEST(GradientBuffers, WithoutDropoutTheBranchesShareTheResidualStreamsGradient) {
    const int B = 2, T = 6;
    using K = TensorKind;
    const GradientBuffers plain = gradient_buffers(BlockGraph(config_with("gpt-micro", 2, 0.0f), B, T));
    const GradientBuffers masked = gradient_buffers(BlockGraph(config_with("gpt-micro", 2, 0.1f), B, T));
    auto of = [](const GradientBuffers& g, K k) { return g.of[static_cast<int>(k)]; };
    EXPECT_EQ(of(plain, K::attproj), of(plain, K::x2));
    EXPECT_EQ(of(plain, K::fcproj), of(plain, K::out));
    EXPECT_EQ(of(plain, K::x), of(plain, K::out));
    EXPECT_NE(of(masked, K::attproj), of(masked, K::x2));
    EXPECT_NE(of(masked, K::fcproj), of(masked, K::out));
    EXPECT_EQ(plain.bytes.size() + 1, masked.bytes.size());

    // The gradients are the copy's bit for bit: a step at dropout 0 against the same step of a model
    // with dropout whose forward ran without it (each residual's backward then copies, scale 1).
    auto gradients = [&](float dropout, bool training) {
        const GPTConfig cfg = config_with("gpt-micro", 2, dropout);
        const auto tokens = random_tokens(B * T, cfg.vocab_size, 1), targets = random_tokens(B * T, cfg.vocab_size, 2);
        GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, MemoryMode::none));
        model.init_weights(3);
        model.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, training}, 1.0f / (B * T));
        model.backward(tokens.data(), B, T);
        return std::vector<float>(model.grads(), model.grads() + model.num_params());
    };
    EXPECT_EQ(gradients(0.0f, true), gradients(0.1f, false));
}

// With GELU in the matmuls' epilogues (CUDA's graph) fcproj's backward writes fch's gradient and
// fch_gelu's is never stored; fc's backward reads fch's. The buffers are otherwise the same.
TEST(GradientBuffers, GeluInTheEpilogueWritesFchsGradientAndNeverFchGelus) {
    const GPTConfig cfg = config_with("gpt-micro", 2, 0.1f);
    const int B = 2, T = 6;
    const BlockGraph block(cfg, B, T, DType::f32, {.gelu_epilogue = true});
    bool has_gelu = false;
    for (const OpInfo& op : block.ops()) has_gelu = has_gelu || op.kind == OpKind::gelu;
    EXPECT_FALSE(has_gelu);
    ASSERT_NE(block.producer(TensorKind::fch), nullptr);
    EXPECT_EQ(block.producer(TensorKind::fch), block.producer(TensorKind::fch_gelu));
    const GradientBuffers g = gradient_buffers(block), plain = gradient_buffers(BlockGraph(cfg, B, T));
    using K = TensorKind;
    EXPECT_EQ(g.of[static_cast<int>(K::fch_gelu)], -1);
    EXPECT_GE(g.of[static_cast<int>(K::fch)], 0);
    EXPECT_NE(g.of[static_cast<int>(K::fch)], g.of[static_cast<int>(K::ln2)]);
    std::vector<std::size_t> sizes = g.bytes, plain_sizes = plain.bytes;
    std::sort(sizes.begin(), sizes.end());
    std::sort(plain_sizes.begin(), plain_sizes.end());
    EXPECT_EQ(sizes, plain_sizes);
    // Same tensors, same flops: plans and MFU carry over.
    const BlockGraph unfused(cfg, B, T);
    EXPECT_EQ(block.forward_flops(), unfused.forward_flops());
    for (const TensorInfo& t : block.tensors()) {
        EXPECT_EQ(t.saved, unfused.tensor(t.kind).saved) << t.name;
        EXPECT_EQ(t.bytes(), unfused.tensor(t.kind).bytes()) << t.name;
    }
}

TEST(TapeAllocator, OverflowNamesTheSlot) {
    TapeAllocator tape(cpu_backend(), 256, 4);
    tape.push(0, TensorKind::ln1, Policy::keep, 200, 200);
    try {
        tape.push(3, TensorKind::qkv, Policy::keep, 100, 100);
        FAIL() << "no overflow";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("qkv of layer 3"), std::string::npos) << e.what();
    }
}

// An inference model allocates no gradients, optimizer state or tape, and computes the same
// logits bit for bit.
TEST(InferenceModel, SameLogitsWithoutTapeOrGradients) {
    const GPTConfig cfg = config_with("gpt-micro", 3, 0.1f);
    const int B = 2, T = 16;
    GPTModel train(cfg, B, T);
    GPTModel infer = GPTModel::for_inference(cfg, B, T);
    train.init_weights(4);
    std::memcpy(infer.params(), train.params(), train.num_params() * sizeof(float));
    const auto tokens = random_tokens(B * T, cfg.vocab_size, 8);
    train.forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    infer.forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, true}, 0.0f);  // dropout never applies
    const std::size_t n = std::size_t(B) * T * cfg.padded_vocab_size();
    std::vector<float> train_logits(n), infer_logits(n);
    train.read_logits(0, std::size_t(B) * T, train_logits.data());
    infer.read_logits(0, std::size_t(B) * T, infer_logits.data());
    EXPECT_EQ(std::memcmp(train_logits.data(), infer_logits.data(), n * sizeof(float)), 0);
    EXPECT_EQ(infer.memory().gradients + infer.memory().optimizer_state + infer.memory().tape, 0u);
    EXPECT_LT(infer.memory().total(), train.memory().total() / 2);
    EXPECT_EQ(infer.tape().peak().used, 0u);
}

// ---- bit-identical recompute ------------------------------------------------------------------

struct StepResult {
    float loss;
    std::vector<float> grads;
};

StepResult train_step(const GPTConfig& cfg, const ActivationPlan& plan, int B, int T) {
    GPTModel model(cfg, B, T, plan);
    model.init_weights(9);
    const auto tokens = random_tokens(B * T, cfg.vocab_size, 4), targets = random_tokens(B * T, cfg.vocab_size, 5);
    model.zero_grads();
    const float loss =
        model.forward(tokens.data(), targets.data(), B, T, DropoutContext{7, 3, 1, true}, 1.0f / (B * T));
    model.backward(tokens.data(), B, T);
    return {loss, std::vector<float>(model.grads(), model.grads() + model.num_params())};
}

// A step pushes one slot per saved tensor of every layer: a deep model (300 blocks, over 5000
// slots with dropout) trains a step keeping everything; the tape once reserved a fixed 4096.
TEST(TapeAllocator, HoldsEveryEntryOfADeepModel) {
    GPTConfig cfg = config_with("gpt-micro", 300, 0.1f);
    cfg.n_embd = 8, cfg.n_head = 2;
    const StepResult r = train_step(cfg, ActivationPlan(BlockGraph(cfg, 1, 4), cfg.n_layer), 1, 4);
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_GT(GPTModel(cfg, 1, 4).memory_layout().max_tape_entries(), 4096u);
}

void expect_bit_identical(const StepResult& a, const StepResult& b, const std::string& what) {
    EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << what;
    ASSERT_EQ(a.grads.size(), b.grads.size());
    EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)), 0) << what;
}

class RecomputeIsBitIdentical : public ::testing::Test {
protected:
    const int B = 2, T = 16;
    const GPTConfig cfg = config_with("gpt-micro", 3, 0.1f);
    const BlockGraph block{cfg, B, T};
    const StepResult reference = train_step(cfg, ActivationPlan(block, cfg.n_layer), B, T);
    std::vector<TensorKind> plannable() const {
        std::vector<TensorKind> kinds;
        for (const auto& t : block.tensors())
            if (t.saved && !t.tiny && t.kind != TensorKind::x) kinds.push_back(t.kind);
        return kinds;
    }
};

TEST_F(RecomputeIsBitIdentical, FullAndSelective) {
    expect_bit_identical(reference, train_step(cfg, plan_for_mode(cfg, B, T, MemoryMode::full), B, T), "full");
    expect_bit_identical(reference, train_step(cfg, plan_for_mode(cfg, B, T, MemoryMode::selective), B, T),
                         "selective");
}

TEST_F(RecomputeIsBitIdentical, EachTensorDroppedAlone) {
    for (TensorKind kind : plannable()) {
        ActivationPlan plan(block, cfg.n_layer);
        for (int l = 0; l < cfg.n_layer; ++l) plan.set(l, kind, {Policy::recompute});
        expect_bit_identical(reference, train_step(cfg, plan, B, T), tensor_kind_name(kind));
    }
}

TEST_F(RecomputeIsBitIdentical, RandomPlansWithLayersThatDiffer) {
    std::mt19937 gen(2024);
    const auto kinds = plannable();
    for (int trial = 0; trial < 24; ++trial) {
        ActivationPlan plan(block, cfg.n_layer);
        std::string desc;
        for (int l = 0; l < cfg.n_layer; ++l)
            for (TensorKind kind : kinds)
                if (gen() % 2) {
                    plan.set(l, kind, {Policy::recompute});
                    desc += std::to_string(l) + ":" + tensor_kind_name(kind) + " ";
                }
        expect_bit_identical(reference, train_step(cfg, plan, B, T), "plan " + desc);
    }
}

// Re-planning between steps: the same model switched to other plans still gives the keep-all
// gradients bit for bit (recompute-only plans), and codec sampling reports every compressed kind.
TEST_F(RecomputeIsBitIdentical, SwitchingPlansBetweenSteps) {
    GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, MemoryMode::quant));
    model.init_weights(9);
    const auto tokens = random_tokens(B * T, cfg.vocab_size, 4), targets = random_tokens(B * T, cfg.vocab_size, 5);
    CodecSampler sampler;
    const std::vector<CodecSample>& samples = sampler.samples();
    model.set_observer(&sampler);
    auto step = [&] {
        model.zero_grads();
        const float loss =
            model.forward(tokens.data(), targets.data(), B, T, DropoutContext{7, 3, 1, true}, 1.0f / (B * T));
        model.backward(tokens.data(), B, T);
        return StepResult{loss, std::vector<float>(model.grads(), model.grads() + model.num_params())};
    };
    step();
    EXPECT_EQ(samples.size(), plannable().size());
    for (const auto& s : samples) {
        EXPECT_GT(s.bytes, 0u) << tensor_kind_name(s.kind);
        const bool mask = block.tensor(s.kind).dtype == DType::u8;
        if (mask) continue;
        EXPECT_GT(s.relative_error, 0.0) << tensor_kind_name(s.kind);
        EXPECT_LT(s.relative_error, 0.2) << tensor_kind_name(s.kind);
    }
    model.set_plan(plan_for_mode(cfg, B, T, MemoryMode::full), {});
    expect_bit_identical(reference, step(), "after switching to full");
    model.set_plan(ActivationPlan(block, cfg.n_layer), {});
    expect_bit_identical(reference, step(), "after switching to none");
    EXPECT_TRUE(samples.empty()) << "nothing is compressed any more";
}

// Compression is lossy but must stay close: quant's gradients within a few percent of none's.
TEST(QuantMode, GradientsCloseToKeepAll) {
    const GPTConfig cfg = config_with("gpt-tiny", 2, 0.1f);
    const int B = 2, T = 32;
    const StepResult none = train_step(cfg, plan_for_mode(cfg, B, T, MemoryMode::none), B, T);
    const StepResult quant = train_step(cfg, plan_for_mode(cfg, B, T, MemoryMode::quant), B, T);
    EXPECT_EQ(none.loss, quant.loss);  // forward consumes the uncompressed tensors
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < none.grads.size(); ++i) {
        diff2 += std::pow(double(none.grads[i]) - quant.grads[i], 2);
        ref2 += std::pow(double(none.grads[i]), 2);
    }
    const double rel = std::sqrt(diff2 / ref2);
    std::printf("quant vs none gradient relative L2 error: %.4f\n", rel);
    EXPECT_GT(rel, 0.0);
    EXPECT_LT(rel, 0.1);
}

}  // namespace
}  // namespace adacc
