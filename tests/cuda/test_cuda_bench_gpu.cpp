// bench_gpu (benchmarks/bench_gpu.cpp) as the GPU check runs it, at tiny presets and batch 2 on
// the emulated backend: every table it prints must come out, with counts that follow from GPT-2's
// shapes alone (the FLOPs per token of llm.c's rule, the block's GEMM shapes and how often a step
// runs each). Its times there are the emulation's; the GPU check reads the real ones. It skips in
// the device build (the GPU check runs bench_gpu itself) and where benchmarks are not built.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <tuple>

#include "src/engine/memory_mode.h"
#include "tests/test_support.h"

namespace adacc::test {
namespace {

#ifdef ADACC_BENCH_GPU_BINARY
constexpr const char* kBenchGpu = ADACC_BENCH_GPU_BINARY;  // bench_gpu_emulated
#else
constexpr const char* kBenchGpu = nullptr;
#endif
constexpr const char* kNotBuilt =
    "no bench_gpu_emulated in this build (the device build's bench_gpu runs in the GPU check)";

// bench_gpu with `args` at batch 2 x seq 16, `steps` timed steps, the fused attention (cuDNN's
// cannot run on the emulation); its JSON.
nlohmann::json run_bench_gpu(const std::string& args, int steps = 1) {
    const auto dir = scratch_dir("bench_gpu");
    const auto json_file = dir / "bench.json";
    const ProcessResult r = run_shell(std::string(kBenchGpu) + " --seq 16 --batch 2 --steps " + std::to_string(steps) +
                                      " --warmup 0 --attention fused --json " + json_file.string() + " " + args);
    EXPECT_EQ(r.status, 0) << r.output;
    const std::string text = read_bytes(json_file);
    EXPECT_FALSE(text.empty()) << "no JSON written\n" << r.output;
    return text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text);
}

// gpt-micro (L 2, C 16, vocab 97 padded to 128, context 16): llm.c's FLOPs per token, 6 N + 6 L C T,
// with N = Vp C + T_max C + L (12 C^2 + 13 C) + 2 C = 2048 + 256 + 6560 + 32 = 8896 parameters.
constexpr double kMicroFlopsPerToken = 6.0 * 8896 + 6.0 * 2 * 16 * 16;

// A row of two timed steps: its median is the upper of the two, so its slowest, and its fastest
// is the other.
void expect_median_within_spread(const nlohmann::json& row) {
    const double fastest = row["step_ms_fastest"], median = row["step_ms"], slowest = row["step_ms_slowest"];
    EXPECT_GT(fastest, 0.0) << row.dump();
    EXPECT_LE(fastest, median) << row.dump();
    EXPECT_EQ(median, slowest) << row.dump();
}

TEST(BenchGpu, StepAndModeTablesAtAFixedBatch) {
    if (!kBenchGpu) GTEST_SKIP() << kNotBuilt;
    const nlohmann::json out = run_bench_gpu("--presets gpt-micro,gpt-tiny", 2);
    ASSERT_EQ(out["runs"].size(), 2u) << out.dump(1);
    EXPECT_EQ(out["runs"][0]["model"], "gpt-micro");
    EXPECT_EQ(out["runs"][1]["model"], "gpt-tiny");
    for (const auto& run : out["runs"]) {
        EXPECT_EQ(run["batch"], 2);
        EXPECT_EQ(run["timed_steps"], 2);
        expect_median_within_spread(run);
        const double tokens_per_s = run["tokens_per_s"], step_ms = run["step_ms"];
        EXPECT_GT(step_ms, 0.0);
        EXPECT_NEAR(tokens_per_s * step_ms / 1e3, 2.0 * 16, 1e-9 * 32) << run.dump();
    }
    const double micro_tokens_per_s = out["runs"][0]["tokens_per_s"], micro_tflops = out["runs"][0]["tflops"];
    EXPECT_NEAR(micro_tflops * 1e12 / micro_tokens_per_s, kMicroFlopsPerToken, 1e-9 * kMicroFlopsPerToken);
    // The first preset in every fixed mode, at its batch; full recomputation keeps less than none.
    std::map<std::string, nlohmann::json> modes;
    for (const auto& m : out["modes"]) modes[m["mode"]] = m;
    ASSERT_EQ(modes.size(), fixed_memory_modes().size()) << out["modes"].dump(1);
    for (MemoryMode mode : fixed_memory_modes()) {
        ASSERT_TRUE(modes.count(memory_mode_name(mode))) << memory_mode_name(mode);
        EXPECT_EQ(modes[memory_mode_name(mode)]["batch"], 2);
        expect_median_within_spread(modes[memory_mode_name(mode)]);
    }
    EXPECT_LT(modes["full"]["tape_bytes"].get<double>(), modes["none"]["tape_bytes"].get<double>());
}

// Where the classifier's chunk splits the batch (8 of its 2 x 16 = 32 rows), the step table times the
// first preset again with a chunk four times as long (32 rows: one chunk here), at the same batch.
TEST(BenchGpu, StepTableTimesALongerClassifierChunkWhereTheChunkSplitsTheBatch) {
    if (!kBenchGpu) GTEST_SKIP() << kNotBuilt;
    const nlohmann::json out = run_bench_gpu("--presets gpt-micro --classifier-chunk 8", 2);
    ASSERT_EQ(out["runs"].size(), 2u) << out.dump(1);
    EXPECT_EQ(out["runs"][0]["classifier_chunk"], 8);
    EXPECT_EQ(out["runs"][1]["classifier_chunk"], 32);
    for (const auto& run : out["runs"]) {
        EXPECT_EQ(run["model"], "gpt-micro");
        EXPECT_EQ(run["batch"], 2);
        expect_median_within_spread(run);
    }
}

TEST(BenchGpu, PerOpTablesInModesNoneAndQuant) {
    if (!kBenchGpu) GTEST_SKIP() << kNotBuilt;
    const nlohmann::json out = run_bench_gpu("--presets gpt-micro --per-op --per-op-modes none,quant");
    ASSERT_EQ(out["per_op"].size(), 2u) << out.dump(1);
    for (const auto& table : out["per_op"]) {
        const std::string mode = table["mode"];
        std::map<std::string, double> families;
        double sum = 0;
        for (const auto& f : table["families"]) {
            families[f["family"]] = f["ms_per_step"];
            sum += f["ms_per_step"].get<double>();
        }
        for (const char* family : {"matmul", "attention", "layernorm", "classifier", "encoder", "optimizer+loss"})
            EXPECT_TRUE(families.count(family)) << mode << ": no " << family << " row";
        // Only a compressed mode runs the codecs; their time is its own row.
        EXPECT_EQ(families.count("codecs"), mode == "quant" ? 1u : 0u) << mode;
        EXPECT_NEAR(sum, table["kernels_ms"].get<double>(), 1e-9 * sum) << mode << ": the rows add up to the kernels";
        // The matmuls by shape: each of the block's four linear layers (qkv C -> 3C, the attention's
        // projection C -> C, fc C -> 4C, its projection 4C -> C) once a layer forward and once
        // backward, the classifier (C -> Vp) once each way, at N = 2 x 16 tokens.
        std::map<std::tuple<int, int, int>, long> forward, backward;
        for (const auto& m : table["matmuls"]) {
            const std::string kernel = m["kernel"];
            auto& calls = kernel.find("backward") != std::string::npos ? backward : forward;
            calls[{m["N"].get<int>(), m["C"].get<int>(), m["OC"].get<int>()}] += m["calls_per_step"].get<long>();
        }
        const std::map<std::tuple<int, int, int>, long> expected = {
            {{32, 16, 48}, 2}, {{32, 16, 16}, 2}, {{32, 16, 64}, 2}, {{32, 64, 16}, 2}, {{32, 16, 128}, 1}};
        EXPECT_EQ(forward, expected) << mode << "\n" << table["matmuls"].dump(1);
        EXPECT_EQ(backward, expected) << mode << "\n" << table["matmuls"].dump(1);
    }
    EXPECT_EQ(out["per_op"][0]["mode"], "none");
    EXPECT_EQ(out["per_op"][1]["mode"], "quant");
}

}  // namespace
}  // namespace adacc::test
