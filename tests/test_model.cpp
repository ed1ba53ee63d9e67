// Whole-model tests: parameter counts, gradient check of every parameter against finite
// differences (dropout on and off), the golden comparison with an independent float64 JAX
// implementation (tests/fixtures/gpt2_golden.bin, dev/make_golden_fixture.py), gradient
// accumulation, overfitting one batch, and bit-for-bit determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "src/engine/device.h"
#include "src/engine/gpt_model.h"
#include "src/engine/optimizer.h"
#include "src/engine/tape.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

TEST(ParameterCount, MatchesFormulaAndPublishedGpt2) {
    const GPTConfig small = *gpt_preset("gpt-117m");
    EXPECT_EQ(small.unpadded_parameter_count(), 124439808);  // GPT-2 small as published
    EXPECT_EQ(small.parameter_count(), 124475904);           // llm.c's count with Vp = 50304
    EXPECT_EQ(static_cast<std::int64_t>(ParameterLayout(small).total()), small.parameter_count());
    EXPECT_EQ(gpt_preset("gpt-345m")->unpadded_parameter_count(), 354823168);
    EXPECT_EQ(gpt_preset("gpt-1.5b")->unpadded_parameter_count(), 1557611200);
    const std::int64_t big = gpt_preset("gpt-4.7b")->parameter_count();
    EXPECT_GT(big, 4'685'000'000);
    EXPECT_LT(big, 4'695'000'000);
    for (const auto& name : gpt_preset_names()) {
        const GPTConfig c = *gpt_preset(name);
        EXPECT_EQ(static_cast<std::int64_t>(ParameterLayout(c).total()), c.parameter_count()) << name;
    }
}

// MFU's numerator, as llm.c's gpt2_estimate_mfu counts it: 6 N (N with the padded vocabulary rows)
// + 6 L C T a token; gpt-117m at T = 1024: 6 x 124,475,904 + 6 x 12 x 768 x 1024.
TEST(FlopsPerToken, IsLlmcsCount) {
    EXPECT_EQ(gpt_preset("gpt-117m")->flops_per_token(1024), 803'478'528.0);
    EXPECT_EQ(gpt_preset("gpt-117m")->flops_per_token(64), 6.0 * 124'475'904 + 6.0 * 12 * 768 * 64);
    const GPTConfig medium = *gpt_preset("gpt-345m");
    EXPECT_EQ(medium.flops_per_token(1024), 6.0 * medium.parameter_count() + 6.0 * 24 * 1024 * 1024);
}

// The datasheet peaks MFU is taken against, by the names CUDA gives the GPUs: the first listed part
// of the name decides (an H100 PCIe is not an SXM one), an unlisted GPU has none (no MFU printed).
TEST(GpuPeak, ByTheDevicesName) {
    EXPECT_EQ(gpu_peak("NVIDIA H200").bf16_tflops, 989.0);
    EXPECT_EQ(gpu_peak("NVIDIA H200").memory_gbps, 4800.0);
    EXPECT_EQ(gpu_peak("NVIDIA H100 PCIe").bf16_tflops, 756.0);
    EXPECT_EQ(gpu_peak("NVIDIA H100 80GB HBM3").tflops(DType::bf16), 989.0);
    EXPECT_EQ(gpu_peak("NVIDIA A100-SXM4-80GB").tflops(DType::f32), 19.5);
    EXPECT_EQ(gpu_peak("NVIDIA GeForce GTX 1080").tflops(DType::bf16), 0.0);
}

GPTConfig micro_config(float dropout) {
    GPTConfig c = *gpt_preset("gpt-micro");  // L2 C16 H2 V97 maxT16
    c.dropout = dropout;
    return c;
}

using test::random_tokens;

double mean_loss(const GPTModel& model, int n) {
    std::vector<float> losses(static_cast<std::size_t>(n));
    model.read_losses(losses.size(), losses.data());
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += losses[i];
    return sum / n;
}

// Finite differences over every parameter of a tiny model: the same DropoutContext in every
// forward regenerates the same masks, so the function being differentiated is fixed.
void check_model_gradients(float dropout) {
    const int B = 2, T = 8, N = B * T;
    GPTModel model(micro_config(dropout), B, T);
    model.init_weights(11);
    // GPT-2's init (std 0.02) puts the embeddings so close to zero that layernorm's 1/std makes
    // the loss strongly curved in them; a wider init keeps finite differences accurate.
    for (const auto& info : model.layout().tensors())
        if (info.weight_decay)
            for (std::size_t i = info.offset; i < info.offset + info.numel; ++i) model.params()[i] *= 5.0f;
    const auto tokens = random_tokens(N, 97, 1), targets = random_tokens(N, 97, 2);
    const DropoutContext ctx{5, 3, 0, true};

    model.zero_grads();
    model.forward(tokens.data(), targets.data(), B, T, ctx, 1.0f / N);
    model.backward(tokens.data(), B, T);
    std::vector<float> analytic(model.grads(), model.grads() + model.num_params());

    // Fourth-order central differences, (-f(+2h) + 8f(+h) - 8f(-h) + f(-2h)) / 12h: the loss is
    // computed in float32, so h cannot be tiny, and the higher order keeps truncation error small.
    const float h = 1e-2f;
    auto loss_at = [&](float& p, float value) {
        p = value;
        model.forward(tokens.data(), targets.data(), B, T, ctx, 0.0f);
        return mean_loss(model, N);
    };
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < model.num_params(); ++i) {
        float& p = model.params()[i];
        const float saved = p;
        const double numeric = (-loss_at(p, saved + 2 * h) + 8 * loss_at(p, saved + h) - 8 * loss_at(p, saved - h) +
                                loss_at(p, saved - 2 * h)) /
                               (12.0 * h);
        p = saved;
        diff2 += (analytic[i] - numeric) * (analytic[i] - numeric);
        ref2 += numeric * numeric;
    }
    const double rel = std::sqrt(diff2 / ref2);
    std::printf("whole-model gradient check (dropout %.2f): relative L2 error %.3g over %zu parameters\n", dropout, rel,
                model.num_params());
    EXPECT_LT(rel, 1e-3);
}

TEST(ModelGradient, AllParametersMatchFiniteDifferences) { check_model_gradients(0.0f); }
TEST(ModelGradient, AllParametersMatchFiniteDifferencesWithDropout) { check_model_gradients(0.2f); }

// ---- golden fixture ------------------------------------------------------------------------

struct GoldenArray {
    std::uint32_t dtype;  // 0 f32, 1 f64, 2 i32
    std::vector<std::uint64_t> dims;
    std::vector<double> values;
};

std::map<std::string, GoldenArray> read_golden(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path.string());
    char magic[8];
    in.read(magic, 8);
    if (std::string(magic, 8) != "ADGOLD01") throw std::runtime_error("bad golden magic");
    auto u32 = [&] {
        std::uint32_t v;
        in.read(reinterpret_cast<char*>(&v), 4);
        return v;
    };
    std::map<std::string, GoldenArray> arrays;
    for (std::uint32_t count = u32(), a = 0; a < count; ++a) {
        std::string name(u32(), '\0');
        in.read(name.data(), static_cast<std::streamsize>(name.size()));
        GoldenArray arr;
        arr.dtype = u32();
        arr.dims.resize(u32());
        std::uint64_t n = 1;
        for (auto& d : arr.dims) {
            in.read(reinterpret_cast<char*>(&d), 8);
            n *= d;
        }
        arr.values.resize(n);
        for (auto& v : arr.values) {
            if (arr.dtype == 0) {
                float f;
                in.read(reinterpret_cast<char*>(&f), 4);
                v = f;
            } else if (arr.dtype == 1) {
                in.read(reinterpret_cast<char*>(&v), 8);
            } else {
                std::int32_t i;
                in.read(reinterpret_cast<char*>(&i), 4);
                v = i;
            }
        }
        arrays[name] = std::move(arr);
    }
    if (!in) throw std::runtime_error("truncated golden fixture");
    return arrays;
}

class Golden : public ::testing::Test {
protected:
    void SetUp() override {
        g = read_golden(test::fixtures_dir() / "gpt2_golden.bin");
        const auto& c = g.at("config").values;  // L, C, H, V, Vp, maxT, B, T
        cfg.n_layer = int(c[0]), cfg.n_embd = int(c[1]), cfg.n_head = int(c[2]), cfg.vocab_size = int(c[3]);
        cfg.max_seq_len = int(c[5]), cfg.dropout = 0.0f;
        ASSERT_EQ(cfg.padded_vocab_size(), int(c[4]));
        B = int(c[6]), T = int(c[7]);
        for (double v : g.at("tokens").values) tokens.push_back(int(v));
        for (double v : g.at("targets").values) targets.push_back(int(v));
    }
    void load_params(GPTModel& model) {
        const auto& p = g.at("params").values;
        ASSERT_EQ(p.size(), model.num_params());
        for (std::size_t i = 0; i < p.size(); ++i) model.params()[i] = static_cast<float>(p[i]);
    }
    std::map<std::string, GoldenArray> g;
    GPTConfig cfg;
    int B = 0, T = 0;
    std::vector<int> tokens, targets;
};

// Tolerances: float32 engine vs float64 reference on a 2-layer model.
// logits: |diff| <= 1e-5 + 1e-4 |ref|; loss: 1e-5 relative; gradients: relative L2 error per
// parameter tensor < 1e-4 and |diff| <= 1e-6 + 1e-3 |ref| elementwise.
TEST_F(Golden, LogitsLossAndGradientsMatchJaxFloat64) {
    GPTModel model(cfg, B, T);
    load_params(model);
    const int N = B * T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size();
    model.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    const auto& logits = g.at("logits").values;
    std::vector<float> ours(static_cast<std::size_t>(N) * Vp);
    model.read_logits(0, static_cast<std::size_t>(N), ours.data());
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < V; ++j) {
            const double ref = logits[static_cast<std::size_t>(i) * V + j];
            ASSERT_NEAR(ours[static_cast<std::size_t>(i) * Vp + j], ref, 1e-5 + 1e-4 * std::abs(ref));
        }
    model.zero_grads();
    const float loss = model.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 1.0f / N);
    EXPECT_NEAR(loss, g.at("loss").values[0], 1e-5 * g.at("loss").values[0]);
    model.backward(tokens.data(), B, T);
    const auto& grads = g.at("grads").values;
    for (const auto& info : model.layout().tensors()) {
        double diff2 = 0, ref2 = 0;
        for (std::size_t i = info.offset; i < info.offset + info.numel; ++i) {
            const double d = model.grads()[i] - grads[i];
            diff2 += d * d;
            ref2 += grads[i] * grads[i];
            ASSERT_NEAR(model.grads()[i], grads[i], 1e-6 + 1e-3 * std::abs(grads[i]))
                << info.name << " element " << i - info.offset;
        }
        EXPECT_LT(std::sqrt(diff2 / std::max(ref2, 1e-30)), 1e-4) << info.name;
    }
}

// 10 AdamW steps on one batch: losses within 1e-4 relative; final parameters within a relative
// L2 error of 1e-3 (Adam divides by sqrt(v), so entries with near-zero gradients amplify float32
// rounding; the bound is on the whole vector, plus |diff| < 5e-3 per entry).
TEST_F(Golden, TenStepAdamWTrajectoryMatchesJax) {
    GPTModel model(cfg, B, T);
    load_params(model);
    const auto& h = g.at("adamw_hparams").values;  // lr, b1, b2, eps, wd, clip
    OptimizerOptions opt;
    opt.beta1 = float(h[1]), opt.beta2 = float(h[2]), opt.eps = float(h[3]), opt.weight_decay = float(h[4]);
    opt.grad_clip = float(h[5]);
    const int N = B * T;
    const auto& losses = g.at("train_losses").values;
    const auto& norms = g.at("train_grad_norms").values;
    for (int step = 1; step <= 10; ++step) {
        model.zero_grads();
        const float loss = model.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 1.0f / N);
        model.backward(tokens.data(), B, T);
        const OptimizerStepStats stats = adamw_step(model, opt, float(h[0]), step);
        EXPECT_NEAR(loss, losses[step - 1], 1e-4 * losses[step - 1]) << "step " << step;
        EXPECT_NEAR(stats.grad_norm, norms[step - 1], 1e-4 * norms[step - 1]) << "step " << step;
    }
    const auto& final_params = g.at("final_params").values;
    double diff2 = 0, ref2 = 0, max_abs = 0;
    for (std::size_t i = 0; i < model.num_params(); ++i) {
        const double d = model.params()[i] - final_params[i];
        diff2 += d * d;
        ref2 += final_params[i] * final_params[i];
        max_abs = std::max(max_abs, std::abs(d));
    }
    std::printf("final params after 10 AdamW steps: relative L2 error %.3g, max abs %.3g\n", std::sqrt(diff2 / ref2),
                max_abs);
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-3);
    EXPECT_LT(max_abs, 5e-3);
}

// ---- fused attention -----------------------------------------------------------------------

// Losses of `steps` AdamW steps of `cfg` on one batch (so the loss falls), from one init and the
// same dropout keys.
std::vector<float> train_losses(const GPTConfig& cfg, const ActivationPlan& plan, int B, int T, int steps,
                                std::vector<float>* first_grads = nullptr) {
    GPTModel model(cfg, B, T, plan);
    model.init_weights(21);
    OptimizerOptions opt;
    std::vector<float> losses;
    const auto tokens = random_tokens(B * T, cfg.vocab_size, 100), targets = random_tokens(B * T, cfg.vocab_size, 200);
    for (int step = 1; step <= steps; ++step) {
        losses.push_back(model.forward(tokens.data(), targets.data(), B, T,
                                       DropoutContext{5, std::uint64_t(step), 0, true}, 1.0f / (B * T)));
        model.backward(tokens.data(), B, T, false);
        if (step == 1 && first_grads) first_grads->assign(model.grads(), model.grads() + model.num_params());
        adamw_step(model, opt, 1e-3f, step);
    }
    return losses;
}

// model.attention = "fused" trains like "materialized": 50 steps of a tiny GPT with dropout 0.1
// (both paths drop the same attention entries: the same RNG draws), losses within 1e-4 relative
// at every step and step 1's gradients within 1e-5 relative L2: only fp32 rounding order differs
// (the online softmax's among it; measured here, the gradients differ by ~1e-7 and the float
// losses not at all). Recomputation stays bit-identical to keeping everything; the tape holds no T x T
// tensor, one fp32 logsumexp per row instead.
TEST(FusedAttention, TrainsLikeMaterializedAttention) {
    const int B = 2, T = 16, steps = 50;
    GPTConfig materialized = micro_config(0.1f), fused = materialized;
    fused.attention = AttentionImpl::fused;
    const BlockGraph block(fused, B, T);
    std::vector<float> materialized_grads, keep_grads, full_grads;
    const std::vector<float> a =
        train_losses(materialized, ActivationPlan(BlockGraph(materialized, B, T), 2), B, T, steps, &materialized_grads);
    const std::vector<float> b = train_losses(fused, ActivationPlan(block, 2), B, T, steps, &keep_grads);
    double worst = 0, diff2 = 0, ref2 = 0;
    for (int i = 0; i < steps; ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / std::fabs(double(a[i])));
    for (std::size_t i = 0; i < keep_grads.size(); ++i) {
        diff2 += std::pow(double(keep_grads[i]) - materialized_grads[i], 2);
        ref2 += std::pow(double(materialized_grads[i]), 2);
    }
    std::printf(
        "50 steps, fused vs materialized: largest relative loss difference %.3g (loss %.6f -> %.6f); "
        "step 1's gradients differ by %.3g relative L2\n",
        worst, a.front(), a.back(), std::sqrt(diff2 / ref2));
    EXPECT_LT(worst, 1e-4);
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-5);
    EXPECT_LT(a.back(), a.front()) << "it trains";

    train_losses(fused, ActivationPlan::for_mode(MemoryMode::full, block, 2), B, T, 1, &full_grads);
    EXPECT_EQ(std::memcmp(keep_grads.data(), full_grads.data(), keep_grads.size() * sizeof(float)), 0)
        << "recomputing the fused attention is bit-identical";

    EXPECT_EQ(block.tensor(TensorKind::att).numel, 0u);
    EXPECT_EQ(block.tensor(TensorKind::att_mask).numel, 0u);
    const BlockGraph mblock(materialized, B, T);
    const std::size_t per_layer = tape_aligned(mblock.tensor(TensorKind::att).bytes()) +
                                  tape_aligned(mblock.tensor(TensorKind::att_mask).bytes()) -
                                  tape_aligned(block.tensor(TensorKind::att_lse).bytes());
    EXPECT_EQ(block.tensor(TensorKind::att_lse).bytes(), std::size_t(B) * T * fused.n_head * sizeof(float));
    EXPECT_EQ(GPTModel(materialized, B, T).memory().tape - GPTModel(fused, B, T).memory().tape, 2 * per_layer);
}

// ---- chunked classifier ------------------------------------------------------------------

// The classifier over chunks of tokens (model.classifier_chunk; a chunk that does not divide
// B x T, so the last is short) gives the loss and every parameter gradient of the whole-logits
// path within 1e-6 relative L2 per tensor (only the summation order of dwte over chunks
// differs), with dropout on, over two micro-batches, and keeps only one chunk of logits.
TEST(ChunkedClassifier, LossAndEveryGradientEqualTheWholeLogits) {
    const int B = 3, T = 16, N = B * T, micro = 2;
    GPTConfig whole = micro_config(0.1f), chunked = whole;
    chunked.classifier_chunk = 10;
    const auto tokens = random_tokens(micro * N, 97, 8), targets = random_tokens(micro * N, 97, 9);
    GPTModel a(whole, B, T), b(chunked, B, T);
    ASSERT_EQ(a.memory_layout().classifier_rows(), N);
    ASSERT_EQ(b.memory_layout().classifier_rows(), 10);
    EXPECT_EQ(b.memory().logits + (N - 10) * whole.padded_vocab_size() * sizeof(float), a.memory().logits);
    float loss[2] = {};
    GPTModel* models[2] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
        GPTModel& m = *models[i];
        m.init_weights(4);
        for (int k = 0; k < micro; ++k) {
            m.forward_step(tokens.data() + k * N, targets.data() + k * N, B, T,
                           DropoutContext{3, 1, std::uint64_t(k), true}, 1.0f / (micro * N), double(micro) * N, k > 0);
            m.backward(tokens.data() + k * N, B, T, k > 0);
        }
        loss[i] = m.read_step().loss;
    }
    EXPECT_NEAR(loss[1], loss[0], 1e-6 * std::fabs(loss[0]));
    for (const ParamTensorInfo& t : a.layout().tensors()) {
        double diff2 = 0, ref2 = 0;
        for (std::size_t j = t.offset; j < t.offset + t.numel; ++j) {
            diff2 += std::pow(double(a.grads()[j]) - b.grads()[j], 2);
            ref2 += std::pow(double(a.grads()[j]), 2);
        }
        EXPECT_LE(std::sqrt(diff2 / std::max(ref2, 1e-30)), 1e-6) << t.name;
    }
    // Validation-style forwards (no dloss) give the same loss chunk by chunk, and the logits are
    // not kept whole: reading them is refused.
    EXPECT_NEAR(b.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 0.0f),
                a.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 0.0f), 1e-6);
    std::vector<float> row(whole.padded_vocab_size() * N);
    EXPECT_THROW(b.read_logits(0, N, row.data()), std::logic_error);
    // A backward whose accumulate flag differs from the forward's is refused, not silently wrong.
    b.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 1.0f / N);
    EXPECT_THROW(b.backward(tokens.data(), B, T, /*accumulate=*/true), std::logic_error);
}

// Auto chunks (classifier_chunk = 0) hold at most kAutoClassifierChunkBytes of logits, and
// models whose logits fit that keep them whole.
TEST(ChunkedClassifier, AutoChunksHoldAtMost256MiBOfLogits) {
    const GPTConfig gpt2 = *gpt_preset("gpt-117m");
    const std::size_t row = gpt2.padded_vocab_size() * sizeof(float);
    EXPECT_EQ(gpt2.classifier_rows(1024, sizeof(float)), 1024);
    EXPECT_EQ(gpt2.classifier_rows(8 * 1024, sizeof(float)), static_cast<int>(kAutoClassifierChunkBytes / row));
    EXPECT_LE(gpt2.classifier_rows(8 * 1024, sizeof(float)) * row, kAutoClassifierChunkBytes);
    EXPECT_EQ(gpt2.classifier_rows(8 * 1024, 2), static_cast<int>(kAutoClassifierChunkBytes / (row / 2)));
    GPTConfig fixed = gpt2;
    fixed.classifier_chunk = 100;
    EXPECT_EQ(fixed.classifier_rows(8 * 1024, sizeof(float)), 100);
    EXPECT_EQ(fixed.classifier_rows(50, sizeof(float)), 50);
}

// An inference model (eval, sampling) with chunked logits computes the rows it is asked for, a
// chunk at a time: every row, and a range that starts and ends inside chunks, equal the
// whole-logits model's within 1e-6 relative (the same dot products; Eigen may block the rows
// differently); the losses of a forward with targets are computed chunk by chunk too; and the
// logits buffer holds one chunk.
::testing::AssertionResult elementwise_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                             double abs) {
    if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
    for (std::size_t i = 0; i < got.size(); ++i)
        if (std::fabs(double(got[i]) - want[i]) > rel * std::fabs(double(want[i])) + abs)
            return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
    return ::testing::AssertionSuccess();
}

TEST(ChunkedClassifier, InferenceReadsEveryRowChunkByChunk) {
    const int B = 3, T = 16, N = B * T;
    GPTConfig whole = micro_config(0.0f), chunked = whole;
    chunked.classifier_chunk = 10;
    GPTModel a = GPTModel::for_inference(whole, B, T), b = GPTModel::for_inference(chunked, B, T);
    const std::size_t Vp = whole.padded_vocab_size();
    EXPECT_EQ(b.memory().logits + (N - 10) * Vp * sizeof(float), a.memory().logits);
    a.init_weights(4);
    b.init_weights(4);
    const auto tokens = random_tokens(N, 97, 8), targets = random_tokens(N, 97, 9);
    for (GPTModel* m : {&a, &b}) m->forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    std::vector<float> want(N * Vp), got(N * Vp);
    a.read_logits(0, N, want.data());
    b.read_logits(0, N, got.data());
    EXPECT_TRUE(elementwise_close(got, want, 1e-6, 1e-7)) << "every row";
    std::vector<float> part(23 * Vp);
    b.read_logits(7, 23, part.data());  // rows 7..29: inside chunks 0 and 2
    EXPECT_TRUE(elementwise_close(part, std::vector<float>(want.begin() + 7 * Vp, want.begin() + 30 * Vp), 1e-6, 1e-7))
        << "rows 7 to 29";
    const float loss_a = a.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    const float loss_b = b.forward(tokens.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    EXPECT_NEAR(loss_b, loss_a, 1e-6 * std::fabs(loss_a));
    EXPECT_THROW(b.read_logits(N - 1, 2, part.data()), std::out_of_range);
}

// ---- training behaviour ---------------------------------------------------------------------

// k micro-batches of B rows accumulate the same gradient as one batch of k*B rows: relative L2
// error of the gradient below 1e-5 (only float32 summation order differs), and the AdamW updates
// as close as those gradients make them (a per-element bound, below).
TEST(GradAccumulation, MicroBatchesEqualOneBigBatch) {
    const int k = 4, B = 2, T = 8, N = B * T;
    const GPTConfig cfg = micro_config(0.0f);
    const auto tokens = random_tokens(k * N, 97, 3), targets = random_tokens(k * N, 97, 4);
    GPTModel big(cfg, k * B, T), small(cfg, B, T);
    big.init_weights(5);
    small.init_weights(5);
    OptimizerOptions opt;
    const DropoutContext ctx{0, 1, 0, false};

    big.zero_grads();
    big.forward(tokens.data(), targets.data(), k * B, T, ctx, 1.0f / (k * N));
    big.backward(tokens.data(), k * B, T);
    // The trainer's way: the first micro-batch overwrites the gradients (stale values here
    // must not leak through), the others accumulate.
    for (std::size_t i = 0; i < small.num_params(); ++i) small.grads()[i] = 1e3f;
    for (int m = 0; m < k; ++m) {
        small.forward(tokens.data() + m * N, targets.data() + m * N, B, T, ctx, 1.0f / (k * N));
        small.backward(tokens.data() + m * N, B, T, /*accumulate=*/m > 0);
    }
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < big.num_params(); ++i) {
        diff2 += std::pow(double(big.grads()[i]) - small.grads()[i], 2);
        ref2 += std::pow(double(big.grads()[i]), 2);
    }
    // The two sum the same 64 rows' terms in another order (4 partial sums of 16 rows, or one of
    // 64): any order is within gamma(64) = 3.8e-6 times the sum of |terms| (Higham). The terms
    // themselves may differ in their last bits (Eigen blocks a product by its row count, so a row's
    // activations can round differently in a batch of 8 or of 2), a relative u or so each. 1e-5 is
    // that bound with room for sums whose terms cancel (sum |terms| > |sum|); measured 6.7e-8.
    EXPECT_LT(std::sqrt(diff2 / ref2), 1e-5);
    // The AdamW update, element by element: at step 1 (m = v = 0 before, the bias corrections
    // equal 1 - beta) AdamW's update is U(x) = x / (|x| + eps) in exact arithmetic, x = g * scale,
    // nearly lr sign(g): a gradient within rounding of zero can flip it, so the bound is how far
    // the two models' own gradients move U, plus each side's rounding (below), not a fixed figure.
    const std::vector<float> before(big.params(), big.params() + big.num_params());
    const float scale_big = adamw_step(big, opt, 1e-3f, 1).grad_scale;
    const float scale_small = adamw_step(small, opt, 1e-3f, 1).grad_scale;
    // Rounding (u = 2^-24, gamma(n) = n u / (1 - n u); FMA or not, each operation rounds at most
    // once): U's float evaluation (g * scale, m, v, two divisions, sqrt, + eps: at most 3 roundings
    // in the numerator and 5 in the denominator) is within gamma(10) |U|; p - lr (U + wd p) rounds
    // at most 4 times: u |p| + gamma(4) lr (|U| + wd |p|). Double's own rounding is negligible.
    const double u = std::ldexp(1.0, -24), lr = 1e-3f;
    auto gamma = [u](int n) { return n * u / (1 - n * u); };
    const double c1 = 1.0f - opt.beta1, b1 = 1.0f - std::pow(opt.beta1, 1.0f);  // the kernel's floats
    const double c2 = 1.0f - opt.beta2, b2 = 1.0f - std::pow(opt.beta2, 1.0f);
    auto update = [&](double x) { return (c1 * x / b1) / (std::sqrt(c2 * x * x / b2) + opt.eps); };
    std::vector<double> decay(big.num_params(), 0.0);
    for (const ParamTensorInfo& info : big.layout().tensors())
        if (info.weight_decay) std::fill_n(decay.begin() + info.offset, info.numel, opt.weight_decay);
    double udiff2 = 0, uref2 = 0, limit2 = 0;
    std::size_t outside = 0;
    for (std::size_t i = 0; i < big.num_params(); ++i) {
        const double ub = double(big.params()[i]) - before[i], us = double(small.params()[i]) - before[i];
        const double Ub = update(double(big.grads()[i]) * scale_big);
        const double Us = update(double(small.grads()[i]) * scale_small);
        const double p = std::fabs(before[i]);
        auto rounding = [&](double U) {
            return lr * gamma(10) * std::fabs(U) + u * p +
                   gamma(4) * lr * ((1 + gamma(10)) * std::fabs(U) + decay[i] * p);
        };
        const double limit = lr * std::fabs(Ub - Us) + rounding(Ub) + rounding(Us);
        outside += !(std::fabs(ub - us) <= limit);
        udiff2 += (ub - us) * (ub - us);
        uref2 += ub * ub;
        limit2 += limit * limit;
    }
    std::printf("grad accumulation: gradient rel. error %.3g, update rel. error %.3g (bound %.3g)\n",
                std::sqrt(diff2 / ref2), std::sqrt(udiff2 / uref2), std::sqrt(limit2 / uref2));
    EXPECT_EQ(outside, 0u) << "updates outside their bound";
}

std::vector<float> train_losses(const GPTConfig& cfg, int steps, std::uint64_t seed) {
    const int B = 2, T = 16, N = B * T;
    GPTModel model(cfg, B, T);
    model.init_weights(seed);
    const auto tokens = random_tokens(N, cfg.vocab_size, 9), targets = random_tokens(N, cfg.vocab_size, 10);
    OptimizerOptions opt;
    LrSchedule lr;
    lr.max = 1e-2f, lr.min = 1e-3f, lr.warmup_steps = 5;
    std::vector<float> losses;
    for (int step = 1; step <= steps; ++step) {
        model.zero_grads();
        losses.push_back(model.forward(tokens.data(), targets.data(), B, T,
                                       DropoutContext{seed, std::uint64_t(step), 0, true}, 1.0f / N));
        model.backward(tokens.data(), B, T);
        adamw_step(model, opt, learning_rate(lr, step, steps), step);
    }
    return losses;
}

TEST(Training, TinyModelOverfitsOneBatch) {
    const auto losses = train_losses(micro_config(0.0f), 300, 1);
    std::printf("overfit one batch: loss %.4f -> %.4f after %zu steps\n", losses.front(), losses.back(), losses.size());
    EXPECT_LT(losses.back(), 0.05f);
}

TEST(Training, TwoRunsWithTheSameSeedAreBitIdentical) {
    const auto a = train_losses(micro_config(0.1f), 20, 7), b = train_losses(micro_config(0.1f), 20, 7);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "step " << i;
    const auto c = train_losses(micro_config(0.1f), 20, 8);
    EXPECT_NE(a.back(), c.back());  // the seed matters
}

TEST(LearningRate, WarmupThenCosineToMin) {
    LrSchedule lr;
    lr.max = 1.0f, lr.min = 0.1f, lr.warmup_steps = 10;
    EXPECT_FLOAT_EQ(learning_rate(lr, 1, 110), 0.1f);
    EXPECT_FLOAT_EQ(learning_rate(lr, 10, 110), 1.0f);
    EXPECT_NEAR(learning_rate(lr, 60, 110), 0.55f, 1e-6);  // halfway through the decay
    EXPECT_NEAR(learning_rate(lr, 110, 110), 0.1f, 1e-6);
    lr.schedule = "constant";
    EXPECT_FLOAT_EQ(learning_rate(lr, 1, 110), 1.0f);
}

}  // namespace
}  // namespace adacc
