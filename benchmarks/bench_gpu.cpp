// GPU training-step benchmark (scripts/gpu_check.sh runs it): for each preset at seq T, the
// largest power-of-two batch whose arenas fit the GPU's free memory in mode none, its step time
// (median after warm-up: forward, backward, gradient norm, AdamW), tokens/s and MFU; then every
// fixed memory mode at one batch. MFU counts FLOPs per token as llm.c does, 6 N + 6 L C T (N
// parameters, L layers, C channels; attention's T-dependent part included once per layer), against
// the GPU's dense peak for the precision the kernels use. One table on stdout, JSON with --json.
//   bench_gpu [--presets gpt-117m,gpt-345m] [--seq 1024] [--steps 6] [--warmup 2] [--json FILE]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "src/cli/command_line.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/gpt_model.h"
#include "src/engine/memory_report.h"
#include "src/engine/optimizer.h"

namespace {

using namespace adacc;

// Dense (no sparsity) tensor-core peaks in TFLOP/s by GPU, from NVIDIA's datasheets: bf16, and
// fp32 without TF32 (the precision the kernels use today; see README).
struct GpuPeak {
    const char* name_part;
    double bf16_tflops, fp32_tflops;
};
constexpr GpuPeak kPeaks[] = {
    {"H200", 989.0, 67.0}, {"H100 SXM", 989.0, 67.0}, {"H100 PCIe", 756.0, 51.0}, {"H100", 989.0, 67.0},
    {"A100", 312.0, 19.5}, {"L40S", 362.0, 91.6},     {"A10", 125.0, 31.2},
};

GpuPeak peak_for(const std::string& gpu) {
    for (const GpuPeak& p : kPeaks)
        if (gpu.find(p.name_part) != std::string::npos) return p;
    return {"unknown", 0.0, 0.0};
}

double llmc_flops_per_token(const GPTConfig& c, std::size_t params, int T) {
    return 6.0 * static_cast<double>(params) + 6.0 * c.n_layer * c.n_embd * static_cast<double>(T);
}

struct StepTiming {
    double median_ms = 0;
    float loss = 0;
};

// Steps as TrainingStep runs them: everything queued, the loss and norm read back once at the end.
StepTiming time_steps(const GPTConfig& cfg, int B, int T, MemoryMode mode, DType dtype, int steps, int warmup) {
    GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, mode), {}, ModelUse::training, {Device::cuda, dtype});
    Backend& backend = model.backend();
    model.init_weights(1337);
    std::mt19937 gen(1);
    std::vector<int> tokens(static_cast<std::size_t>(B) * T), targets(tokens.size());
    for (auto& t : tokens) t = static_cast<int>(gen() % cfg.vocab_size);
    for (auto& t : targets) t = static_cast<int>(gen() % cfg.vocab_size);
    OptimizerOptions opt;
    std::vector<double> ms;
    StepTiming timing;
    for (int step = 1; step <= warmup + steps; ++step) {
        backend.synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        model.forward_step(tokens.data(), targets.data(), B, T, DropoutContext{}, 1.0f / (B * T), double(B) * T, false);
        model.backward(tokens.data(), B, T, false);
        queue_gradient_norm(model);
        queue_adamw_step(model, opt, 3e-4f, step);
        timing.loss = model.read_step().loss;
        if (step > warmup) ms.push_back(ms_since(t0));
    }
    std::sort(ms.begin(), ms.end());
    timing.median_ms = ms[ms.size() / 2];
    return timing;
}

int largest_power_of_two_batch(const GPTConfig& cfg, int T, MemoryMode mode, DType dtype) {
    const std::uint64_t free = device_memory_bytes(Device::cuda);
    int B = 0;
    for (int b = 1; b <= 4096; b *= 2)
        if (memory_for_mode(cfg, b, T, mode, {Device::cuda, dtype}).total() <= free) B = b;
    return B;
}

}  // namespace

int main(int argc, char** argv) {
    adacc::CommandLine command_line("adacc GPU training-step benchmark");
    adacc::Command app = command_line.program();
    std::vector<std::string> presets{"gpt-117m", "gpt-345m"};
    int T = 1024, steps = 6, warmup = 2;
    std::string json_file, dtype_name = "bf16";
    app.option("--presets", presets, "model presets").comma_separated();
    app.option("--seq", T, "sequence length");
    app.option("--steps", steps, "measured steps").in_range(1, 1000);
    app.option("--warmup", warmup, "steps before measuring").in_range(0, 1000);
    app.option("--json", json_file, "also write the results here");
    app.option("--dtype", dtype_name, "model dtype: bf16 (default) or fp32").one_of({"bf16", "fp32"});
    if (const auto parse_ended = command_line.run(argc, argv)) return *parse_ended;
    try {
        const CudaDeviceInfo gpu = cuda_device_info();
        if (!gpu.available) {
            std::printf("bench_gpu: no CUDA device (%s); nothing measured\n", gpu.problem.c_str());
            return 0;
        }
        const GpuPeak peak = peak_for(gpu.name);
        const DType dtype = resolve_model_dtype(dtype_name, Device::cuda);
        // MFU against the dense peak of the matmuls' input type (fp32 runs true fp32, never TF32).
        const double peak_tflops = dtype == DType::bf16 ? peak.bf16_tflops : peak.fp32_tflops;
        nlohmann::json out = {{"gpu", gpu.name},
                              {"compute_capability", gpu.compute_capability},
                              {"precision", dtype_name},
                              {"peak_tflops_fp32", peak.fp32_tflops},
                              {"peak_tflops_bf16", peak.bf16_tflops},
                              {"flops_per_token", "6N + 6LCT (llm.c)"},
                              {"seq_len", T},
                              {"runs", nlohmann::json::array()},
                              {"modes", nlohmann::json::array()}};
        std::printf(
            "GPU %s (sm_%d), %s; MFU = (6N + 6LCT) x tokens/s over the dense %s peak (fp32 %.1f, "
            "bf16 %.0f TFLOP/s)\n\n",
            gpu.name.c_str(), gpu.compute_capability, dtype_name.c_str(), dtype_name.c_str(), peak.fp32_tflops,
            peak.bf16_tflops);
        std::printf("%-10s %6s %6s %10s %12s %9s %12s %8s\n", "model", "batch", "seq", "step_ms", "tokens/s", "TFLOP/s",
                    "MFU", "loss");
        int modes_batch = 0;
        for (const std::string& name : presets) {
            const auto cfg = gpt_preset(name);
            if (!cfg) throw UserError("unknown preset " + name);
            const int B = largest_power_of_two_batch(*cfg, T, MemoryMode::none, dtype);
            if (B == 0) {
                std::printf("%-10s does not fit even at batch 1\n", name.c_str());
                continue;
            }
            if (modes_batch == 0) modes_batch = B;
            const StepTiming t = time_steps(*cfg, B, T, MemoryMode::none, dtype, steps, warmup);
            const double tokens_per_s = B * T / (t.median_ms / 1e3);
            const double tflops = llmc_flops_per_token(*cfg, ParameterLayout(*cfg).total(), T) * tokens_per_s / 1e12;
            const double mfu = peak_tflops > 0 ? tflops / peak_tflops : 0.0;
            std::printf("%-10s %6d %6d %10.1f %12.0f %9.1f %11.1f%% %8.4f\n", name.c_str(), B, T, t.median_ms,
                        tokens_per_s, tflops, 100 * mfu, t.loss);
            out["runs"].push_back({{"model", name},
                                   {"batch", B},
                                   {"step_ms", t.median_ms},
                                   {"tokens_per_s", tokens_per_s},
                                   {"tflops", tflops},
                                   {"mfu", mfu}});
        }
        if (modes_batch > 0) {
            const GPTConfig cfg = *gpt_preset(presets.front());
            std::printf("\n%s at batch %d x seq %d, fixed memory modes:\n%-10s %10s %12s %12s\n",
                        presets.front().c_str(), modes_batch, T, "mode", "step_ms", "tape", "total");
            for (MemoryMode mode : fixed_memory_modes()) {
                const ModelMemory m = memory_for_mode(cfg, modes_batch, T, mode, {Device::cuda, dtype});
                const StepTiming t = time_steps(cfg, modes_batch, T, mode, dtype, steps, warmup);
                std::printf("%-10s %10.1f %12s %12s\n", memory_mode_name(mode), t.median_ms,
                            format_bytes(m.tape).c_str(), format_bytes(m.total()).c_str());
                out["modes"].push_back({{"mode", memory_mode_name(mode)},
                                        {"batch", modes_batch},
                                        {"step_ms", t.median_ms},
                                        {"tape_bytes", m.tape},
                                        {"total_bytes", m.total()}});
            }
        }
        if (!json_file.empty()) std::ofstream(json_file) << out.dump(2) << '\n';
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu: %s\n", e.what());
        return 1;
    }
    return 0;
}
