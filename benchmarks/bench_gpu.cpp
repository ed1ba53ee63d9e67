// GPU training-step benchmark (scripts/gpu_check.sh runs it): for each preset at seq T, the largest
// power-of-two batch whose arenas fit the GPU's free memory in mode none, its step time (median
// after warm-up, beside the fastest and slowest step: forward, backward, gradient norm, AdamW),
// tokens/s and MFU (with cuDNN's attention, the first preset again with training.deterministic =
// false; where the classifier's chunk splits its batch, again with a 4x longer chunk); then
// every fixed memory mode at the first preset's batch. MFU counts FLOPs per token as
// llm.c does, 6 N + 6 L C T (N parameters, L layers, C channels; attention's T-dependent part
// included once per layer), against the GPU's dense peak for the precision the kernels use. One
// table on stdout, JSON with --json.
// --per-op instead: where each preset's step goes, per op family and per kernel (KernelTiming:
// CUDA events around every kernel), with each family's FLOPs and bytes per step and the fraction
// of the GPU's roofline its time reaches; in mode none, or in each of --per-op-modes (a compressed
// mode's codec kernels then show their time, with no cost columns).
// --batch B times every preset at batch B instead (a preset that does not fit there is skipped).
//   bench_gpu [--presets gpt-117m,gpt-345m] [--seq 1024] [--batch B] [--steps 6] [--warmup 2]
//             [--json FILE] [--attention materialized|fused|cudnn] [--nondeterministic]
//             [--classifier-chunk N] [--per-op [--per-op-modes none,quant]]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/cli/command_line.h"
#include "src/common/dtype.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/device.h"
#include "src/engine/gpt_model.h"
#include "src/engine/kernel_timing.h"
#include "src/engine/memory_report.h"
#include "src/engine/optimizer.h"

namespace {

using namespace adacc;

// The timed steps' median and their fastest and slowest: a target judged on the median is read
// beside the spread it came with.
struct StepTiming {
    double median_ms = 0, fastest_ms = 0, slowest_ms = 0;
    float loss = 0;
};

// Steps as TrainingStep runs them: everything queued, the loss and norm read back once at the end.
// With `per_kernel`, the timed steps run under a KernelTiming and their kernels' times add up there.
StepTiming time_steps(const GPTConfig& cfg, int B, int T, MemoryMode mode, const ComputeTarget& target, int steps,
                      int warmup, KernelTimes* per_kernel = nullptr) {
    GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, mode), {}, ModelUse::training, target);
    Backend& backend = model.backend();
    std::unique_ptr<KernelTiming> kernel_timing;
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
        if (per_kernel && step == warmup + 1) kernel_timing = std::make_unique<KernelTiming>(backend);
        const auto t0 = std::chrono::steady_clock::now();
        model.forward_step(tokens.data(), targets.data(), B, T, DropoutContext{}, 1.0f / (B * T), double(B) * T, false);
        model.backward(tokens.data(), B, T, false);
        queue_gradient_norm(model);
        queue_adamw_step(model, opt, 3e-4f, step);
        timing.loss = model.read_step().loss;
        if (step > warmup) ms.push_back(ms_since(t0));
    }
    if (kernel_timing) *per_kernel = kernel_timing->take();
    std::sort(ms.begin(), ms.end());
    timing.median_ms = ms[ms.size() / 2];
    timing.fastest_ms = ms.front();
    timing.slowest_ms = ms.back();
    return timing;
}

// "fastest-slowest" of the timed steps, in ms.
std::string format_ms_range(const StepTiming& t) {
    char text[48];
    std::snprintf(text, sizeof text, "%.1f-%.1f", t.fastest_ms, t.slowest_ms);
    return text;
}

// ---- the per-op table (--per-op) ----

// Each kernel's op family, by its name (kernels/ops.inc names a kernel after its op), the first
// prefix that matches: a residual addition fused with the layernorm after it is layernorm's (its
// kernel is in layernorm.cu, and the pass over the row is a layernorm's with one more input and output).
const char* family_of(const std::string& kernel) {
    const std::pair<const char*, const char*> prefixes[] = {
        {"matmul", "matmul"},
        {"attention", "attention"},
        {"layernorm", "layernorm"},
        {"residual_layernorm", "layernorm"},
        {"gelu", "gelu"},
        {"residual", "residual+dropout"},
        {"dropout", "residual+dropout"},
        {"encoder", "encoder"},
        {"fused_classifier", "classifier"},
        {"loss_accumulate", "optimizer+loss"},
        {"global_norm", "optimizer+loss"},
        {"adamw", "optimizer+loss"},
        {"codec", "codecs"},
    };
    for (const auto& [prefix, family] : prefixes)
        if (kernel.rfind(prefix, 0) == 0) return family;
    return "other";
}

// What a family must do in one step of mode none, without dropout: the FLOPs of its matrix
// products (0 where a family is memory-bound and its arithmetic does not bound it) and the bytes
// it must move at least, each operand read once and each result written once. N = B T tokens,
// e = the activations' bytes per element, P parameters; weights are e bytes (their working copy),
// weight gradients fp32 read and written (they accumulate). Attention's FLOPs are the causal
// half's, as llm.c's 6LCT counts them; the materialized one also writes and reads its B H T x T
// scores. Estimates of the least work, against which a kernel's time is judged, not a count of
// what the kernels do.
struct FamilyCost {
    double flops = 0, bytes = 0;
};
// With the fusions of CUDA's graph (models/gpt_block.h: BlockFusions): the MLP's GELU in the
// matmuls' epilogues, the matmul family also writes fch beside fch_gelu in forward and reads it in
// backward, and there is no gelu family; each residual add fused with the layernorm after it
// (residual1 with ln2, residual2 with the next ln1 or the final layernorm: 2L of them), that forward
// reads the residual and the branch and writes the sum beside the layernorm's output in the
// layernorm family (2 more N x C than the layernorm's alone), and the residual's forward (3 N x C)
// leaves the residual family: one N x C, the sum read back, saved per fused pair. A residual's
// backward reads the sum's gradient and writes the branch's (2 N x C) only with dropout: without,
// the branch's gradient is the sum's own buffer (models/op_table.cpp) and nothing runs.
std::map<std::string, FamilyCost> family_costs(const GPTConfig& c, int B, int T, DType dtype, std::size_t params,
                                               const BlockFusions& fused) {
    const double N = double(B) * T, C = c.n_embd, L = c.n_layer, Vp = c.padded_vocab_size(), H = c.n_head;
    const double e = static_cast<double>(dtype_size(dtype)), P = static_cast<double>(params);
    const double scores = double(B) * H * T * T;  // one B x H x T x T matrix's elements
    std::map<std::string, FamilyCost> cost;
    // Per layer: qkv (C -> 3C), attention projection (C -> C), fc (C -> 4C), fc projection (4C -> C):
    // sum of in x out = 12 C^2, of outputs 9C, of inputs 7C. Then the classifier (C -> Vp).
    const double matmul_fwd_flops = 2 * N * 12 * C * C * L + 2 * N * C * Vp;
    const double matmul_fwd_bytes = L * e * (16 * N * C + 12 * C * C) + e * (N * C + C * Vp + N * Vp);
    const double matmul_bwd_bytes =
        L * (e * (23 * N * C + 12 * C * C) + 8 * 12 * C * C) + e * (N * Vp + 2 * N * C + C * Vp) + 8 * C * Vp;
    // GELU on its own: forward reads fch and writes fch_gelu; backward reads fch and its output's
    // gradient and writes fch's.
    const double gelu_bytes = L * e * 4 * N * C * 5;
    cost["matmul"] = {3 * matmul_fwd_flops,
                      matmul_fwd_bytes + matmul_bwd_bytes + (fused.gelu_epilogue ? L * e * 8 * N * C : 0)};
    const bool materialized = c.attention == AttentionImpl::materialized;
    cost["attention"] = {6 * N * T * C * L,
                         L * (e * 12 * N * C + (materialized ? e * 7 * scores : 8 * double(B) * H * T))};
    const double fused_nc = fused.residual_layernorm ? 2 * L * e * N * C : 0;  // an N x C per fused pair
    cost["layernorm"] = {0, (2 * L + 1) * (e * 6 * N * C + 16 * N) + 2 * fused_nc};
    if (!fused.gelu_epilogue) cost["gelu"] = {0, gelu_bytes};
    const double residual_backward_nc = c.dropout > 0 ? 2 : 0;
    cost["residual+dropout"] = {0, 2 * L * e * N * C * (3 + residual_backward_nc) - 3 * fused_nc};
    cost["encoder"] = {0, e * 2 * N * C + 8 * N * C};
    cost["classifier"] = {0, e * 2 * N * Vp};
    cost["optimizer+loss"] = {0, P * (4 + 28 + e)};
    return cost;
}

// The matmul kernels by shape (KernelTimes::matmuls): which of the step's GEMMs take the matmul
// row's time, and at what rate. FLOPs per call: 2 N C OC forward, 4 N C OC backward (dinp and
// dweight; every linear layer of the model has a dinp); the bias gradient's FLOPs are not counted,
// its column sums' time is in its kernel's.
nlohmann::json matmul_rows(const KernelTimes& kernels, int steps, double peak_flops) {
    nlohmann::json rows = nlohmann::json::array();
    std::printf("  matmuls by shape (N x C -> OC: ms per step, calls per step, TFLOP/s, of the peak):\n");
    for (const auto& [shape, times] : kernels.matmuls) {
        const bool backward = shape.kernel == Kernel::matmul_backward || shape.kernel == Kernel::matmul_dgelu_backward;
        const double flops = (backward ? 4.0 : 2.0) * shape.N * shape.C * shape.OC * static_cast<double>(times.calls);
        const double tflops = times.ms > 0 ? flops / (times.ms / 1e3) / 1e12 : 0.0;
        std::printf("    %-22s %7d x %5d -> %5d %9.2f ms (%ld) %7.1f TFLOP/s %6.1f%%\n",
                    kKernelNames[static_cast<int>(shape.kernel)], shape.N, shape.C, shape.OC, times.ms / steps,
                    times.calls / steps, tflops, peak_flops > 0 ? 100 * tflops * 1e12 / peak_flops : 0.0);
        rows.push_back({{"kernel", kKernelNames[static_cast<int>(shape.kernel)]},
                        {"N", shape.N},
                        {"C", shape.C},
                        {"OC", shape.OC},
                        {"ms_per_step", times.ms / steps},
                        {"calls_per_step", times.calls / steps},
                        {"tflops", tflops}});
    }
    return rows;
}

// One preset's step, kernel by kernel, grouped by family: ms per step, the share of the step,
// FLOPs and bytes per step, and the roofline fraction: the least time the family's FLOPs and
// bytes need at the GPU's peaks over the time it took.
nlohmann::json per_op_table(const std::string& name, const GPTConfig& cfg, int B, int T, MemoryMode mode,
                            const ComputeTarget& target, const GpuPeak& peak, int steps, int warmup) {
    KernelTimes kernels;
    const StepTiming t = time_steps(cfg, B, T, mode, target, steps, warmup, &kernels);
    const DType dtype = target.activation;
    const double peak_flops = peak.tflops(dtype) * 1e12;
    const double peak_bytes = peak.memory_gbps * 1e9;
    const BlockGraph block(cfg, B, T, dtype, block_fusions(Device::cuda));
    auto has = [&](OpKind kind) {
        return std::any_of(block.ops().begin(), block.ops().end(), [&](const OpInfo& op) { return op.kind == kind; });
    };
    // What the graph fused at this shape (the GELU epilogue needs 4C a multiple of 8).
    const BlockFusions fused{.gelu_epilogue = !has(OpKind::gelu),
                             .residual_layernorm = block_fusions(Device::cuda).residual_layernorm};
    const std::map<std::string, FamilyCost> costs = family_costs(cfg, B, T, dtype, ParameterLayout(cfg).total(), fused);
    std::map<std::string, double> family_ms;
    for (int k = 0; k < kNumKernels; ++k)
        if (kernels.calls[k] > 0) family_ms[family_of(kKernelNames[k])] += kernels.ms[k] / steps;
    const double kernels_ms = kernels.total_ms() / steps;
    std::printf(
        "\n%s, batch %d x seq %d, %s, mode %s, %s attention%s%s%s: step %.1f ms (median of %d, kernels timed), "
        "its kernels %.1f ms%s\n",
        name.c_str(), B, T, std::string(dtype_name(dtype)).c_str(), memory_mode_name(mode),
        attention_impl_name(cfg.attention), target.deterministic ? "" : " (training.deterministic = false)",
        fused.gelu_epilogue ? ", GELU in the matmuls' epilogues" : "",
        fused.residual_layernorm ? ", residual adds fused with the layernorms after them" : "", t.median_ms, steps,
        kernels_ms,
        mode == MemoryMode::none ? ""
                                 : "; FLOPs, bytes and roofline are mode none's least work (recomputation and "
                                   "the codecs are not in them)");
    std::printf("%-18s %9s %7s %11s %10s %9s %8s %9s\n", "family", "ms/step", "share", "GFLOP/step", "GB/step",
                "TFLOP/s", "GB/s", "roofline");
    nlohmann::json out = {{"model", name},
                          {"mode", memory_mode_name(mode)},
                          {"batch", B},
                          {"seq", T},
                          {"step_ms", t.median_ms},
                          {"kernels_ms", kernels_ms},
                          {"families", nlohmann::json::array()},
                          {"kernels", nlohmann::json::array()}};
    for (const auto& [family, ms] : family_ms) {
        const auto it = costs.find(family);
        if (it == costs.end()) {  // a family mode none does not run (the codecs): its time alone
            std::printf("%-18s %9.2f %6.1f%% %11s %10s %9s %8s %9s\n", family.c_str(), ms, 100 * ms / t.median_ms, "-",
                        "-", "-", "-", "-");
            out["families"].push_back({{"family", family}, {"ms_per_step", ms}});
            continue;
        }
        const FamilyCost cost = it->second;
        const double seconds = ms / 1e3;
        const double least =
            std::max(peak_flops > 0 ? cost.flops / peak_flops : 0.0, peak_bytes > 0 ? cost.bytes / peak_bytes : 0.0);
        const double roofline = seconds > 0 ? least / seconds : 0.0;
        std::printf("%-18s %9.2f %6.1f%% %11.1f %10.2f %9.1f %8.0f %8.1f%%\n", family.c_str(), ms,
                    100 * ms / t.median_ms, cost.flops / 1e9, cost.bytes / 1e9,
                    seconds > 0 ? cost.flops / seconds / 1e12 : 0.0, seconds > 0 ? cost.bytes / seconds / 1e9 : 0.0,
                    100 * roofline);
        out["families"].push_back({{"family", family},
                                   {"ms_per_step", ms},
                                   {"flops_per_step", cost.flops},
                                   {"bytes_per_step", cost.bytes},
                                   {"roofline_fraction", roofline}});
    }
    std::printf("%-18s %9.2f %6.1f%%   (copies, memsets, launch gaps: the step less its kernels)\n", "rest",
                t.median_ms - kernels_ms, 100 * (t.median_ms - kernels_ms) / t.median_ms);
    std::printf("  by kernel (ms per step, calls per step):");
    int shown = 0;
    for (int k = 0; k < kNumKernels; ++k) {
        if (kernels.calls[k] == 0) continue;
        std::printf("%s %s %.2f (%ld)", shown++ % 4 == 0 ? "\n   " : ";", kKernelNames[k], kernels.ms[k] / steps,
                    kernels.calls[k] / steps);
        out["kernels"].push_back({{"kernel", kKernelNames[k]},
                                  {"ms_per_step", kernels.ms[k] / steps},
                                  {"calls_per_step", kernels.calls[k] / steps}});
    }
    std::printf("\n");
    out["matmuls"] = matmul_rows(kernels, steps, peak_flops);
    return out;
}

int largest_power_of_two_batch(const GPTConfig& cfg, int T, MemoryMode mode, const ComputeTarget& target) {
    const std::uint64_t free = device_memory_bytes(Device::cuda);
    int B = 0;
    for (int b = 1; b <= 4096; b *= 2)
        if (memory_for_mode(cfg, b, T, mode, target).total() <= free) B = b;
    return B;
}

// What one bench_gpu invocation measures: its presets at seq T, each run's steps, the attention
// and the target (device, dtype, determinism), and the GPU's peaks.
struct BenchRun {
    std::vector<std::string> presets{"gpt-117m", "gpt-345m"};
    int T = 1024, steps = 6, warmup = 2;
    int batch = 0;  // --batch: 0, the largest power of two that fits in mode none
    AttentionImpl attention = AttentionImpl::materialized;
    int classifier_chunk = 0;                       // model.classifier_chunk: 0, the default, is the auto chunk
    std::vector<std::string> per_op_modes{"none"};  // --per-op: the fixed memory modes timed
    ComputeTarget target;
    GpuPeak peak{};
    // The dense peak of the matmuls' input type (fp32 runs true fp32, never TF32): MFU's denominator.
    double peak_tflops() const { return peak.tflops(target.activation); }
};

// Whether `cfg` at batch B fits the GPU's free memory in mode none; where not, a line says so
// (`name`, what it would take, then `label`).
bool fits_in_mode_none(const std::string& name, const GPTConfig& cfg, int B, const BenchRun& bench,
                       const std::string& label = "") {
    const ModelMemory m = memory_for_mode(cfg, B, bench.T, MemoryMode::none, bench.target);
    if (m.total() <= device_memory_bytes(Device::cuda)) return true;
    std::printf("%-10s does not fit at batch %d (%s in mode none)%s\n", name.c_str(), B,
                format_bytes(m.total()).c_str(), label.c_str());
    return false;
}

// The preset `name` with the run's attention and classifier chunk, and the batch it runs at: --batch,
// or the largest power of two at which it fits in mode none; nullopt (after saying so) when that
// batch does not fit.
std::optional<std::pair<GPTConfig, int>> preset_at_batch(const std::string& name, const BenchRun& bench) {
    auto cfg = gpt_preset(name);
    if (!cfg) throw UserError("unknown preset " + name);
    if (bench.T > cfg->max_seq_len)
        throw UserError("--seq " + std::to_string(bench.T) + " is longer than " + name + "'s max_seq_len " +
                        std::to_string(cfg->max_seq_len));
    cfg->attention = bench.attention;
    cfg->classifier_chunk = bench.classifier_chunk;
    if (bench.batch > 0) {
        if (fits_in_mode_none(name, *cfg, bench.batch, bench)) return std::make_pair(*cfg, bench.batch);
        return std::nullopt;
    }
    const int B = largest_power_of_two_batch(*cfg, bench.T, MemoryMode::none, bench.target);
    if (B == 0) {
        std::printf("%-10s does not fit even at batch 1\n", name.c_str());
        return std::nullopt;
    }
    return std::make_pair(*cfg, B);
}

// One row of the step table: the preset's step at batch B on `target`, printed (with `label` after
// it) and added to out["runs"].
void step_row(const BenchRun& bench, const std::string& name, const GPTConfig& cfg, int B, const ComputeTarget& target,
              const char* label, nlohmann::json& out) {
    const int T = bench.T;
    const StepTiming t = time_steps(cfg, B, T, MemoryMode::none, target, bench.steps, bench.warmup);
    const double tokens_per_s = B * T / (t.median_ms / 1e3);
    const double tflops = cfg.flops_per_token(T) * tokens_per_s / 1e12;
    const double mfu = bench.peak_tflops() > 0 ? tflops / bench.peak_tflops() : 0.0;
    std::printf("%-10s %6d %6d %10.1f %15s %12.0f %9.1f %11.1f%% %8.4f%s\n", name.c_str(), B, T, t.median_ms,
                format_ms_range(t).c_str(), tokens_per_s, tflops, 100 * mfu, t.loss, label);
    out["runs"].push_back({{"model", name},
                           {"batch", B},
                           {"deterministic", target.deterministic},
                           {"classifier_chunk", cfg.classifier_chunk},
                           {"step_ms", t.median_ms},
                           {"step_ms_fastest", t.fastest_ms},
                           {"step_ms_slowest", t.slowest_ms},
                           {"timed_steps", bench.steps},
                           {"tokens_per_s", tokens_per_s},
                           {"tflops", tflops},
                           {"mfu", mfu}});
}

// A preset as the step table ran it: its name, its config and the batch it fitted.
struct PresetRun {
    std::string name;
    GPTConfig cfg;
    int B = 0;
};

// Where the classifier's chunk (the auto one, or --classifier-chunk) splits the batch, the preset
// again with chunks kLargerChunk times as long, if that still fits: the lm head pays per chunk
// (its fp32 gradient read and written once a chunk, a dinp GEMM of the chunk's rows), so the row
// weighs a larger chunk's speed against its logits memory.
constexpr int kLargerChunk = 4;
void larger_chunk_row(const BenchRun& bench, const PresetRun& run, nlohmann::json& out) {
    const int N = run.B * bench.T;
    const int rows = run.cfg.classifier_rows(N, dtype_size(bench.target.activation));
    if (rows >= N) return;
    GPTConfig larger = run.cfg;
    larger.classifier_chunk = kLargerChunk * rows;
    const std::string label = "  model.classifier_chunk = " + std::to_string(larger.classifier_chunk) + " (" +
                              std::to_string(kLargerChunk) + "x " + std::to_string(rows) + " rows)";
    if (fits_in_mode_none(run.name, larger, run.B, bench, label))
        step_row(bench, run.name, larger, run.B, bench.target, label.c_str(), out);
}

// Each preset at its batch (preset_at_batch); with cuDNN's attention, the first that fitted
// again with its other backward (training.deterministic = false) at that batch, whose workspace is
// the smaller one, and with a larger classifier chunk (larger_chunk_row). Returns that first one
// (nullopt: none fitted).
std::optional<PresetRun> step_table(const BenchRun& bench, nlohmann::json& out) {
    std::printf("%-10s %6s %6s %10s %15s %12s %9s %12s %8s\n", "model", "batch", "seq", "step_ms", "fastest-slowest",
                "tokens/s", "TFLOP/s", "MFU", "loss");
    std::optional<PresetRun> first;
    for (const std::string& name : bench.presets) {
        const auto run = preset_at_batch(name, bench);
        if (!run) continue;
        if (!first) first = PresetRun{name, run->first, run->second};
        step_row(bench, name, run->first, run->second, bench.target, "", out);
    }
    if (first && bench.attention == AttentionImpl::cudnn && bench.target.deterministic) {
        ComputeTarget atomics = bench.target;
        atomics.deterministic = false;
        step_row(bench, first->name, first->cfg, first->B, atomics, "  training.deterministic = false", out);
    }
    if (first) larger_chunk_row(bench, *first, out);
    return first;
}

// A preset at its batch in every fixed memory mode: step ms, tape and total bytes.
void modes_table(const BenchRun& bench, const PresetRun& run, nlohmann::json& out) {
    std::printf("\n%s at batch %d x seq %d, fixed memory modes:\n%-10s %10s %15s %12s %12s\n", run.name.c_str(), run.B,
                bench.T, "mode", "step_ms", "fastest-slowest", "tape", "total");
    for (MemoryMode mode : fixed_memory_modes()) {
        const ModelMemory m = memory_for_mode(run.cfg, run.B, bench.T, mode, bench.target);
        const StepTiming t = time_steps(run.cfg, run.B, bench.T, mode, bench.target, bench.steps, bench.warmup);
        std::printf("%-10s %10.1f %15s %12s %12s\n", memory_mode_name(mode), t.median_ms, format_ms_range(t).c_str(),
                    format_bytes(m.tape).c_str(), format_bytes(m.total()).c_str());
        out["modes"].push_back({{"mode", memory_mode_name(mode)},
                                {"batch", run.B},
                                {"step_ms", t.median_ms},
                                {"step_ms_fastest", t.fastest_ms},
                                {"step_ms_slowest", t.slowest_ms},
                                {"tape_bytes", m.tape},
                                {"total_bytes", m.total()}});
    }
}

// --per-op: each preset's per-op table at its batch (preset_at_batch).
void per_op_tables(const BenchRun& bench, const CudaDeviceInfo& gpu, nlohmann::json& out) {
    std::printf(
        "GPU %s (sm_%d), %s; roofline: the least time a family's FLOPs (at %.0f TFLOP/s) and bytes (at %.0f GB/s) "
        "need, over its time\n",
        gpu.name.c_str(), gpu.compute_capability, std::string(dtype_name(bench.target.activation)).c_str(),
        bench.peak_tflops(), bench.peak.memory_gbps);
    std::vector<PresetRun> runs;  // each preset's batch, found once for every mode
    for (const std::string& name : bench.presets)
        if (const auto run = preset_at_batch(name, bench)) runs.push_back({name, run->first, run->second});
    out["per_op"] = nlohmann::json::array();
    for (const std::string& mode : bench.per_op_modes)
        for (const PresetRun& run : runs)
            out["per_op"].push_back(per_op_table(run.name, run.cfg, run.B, bench.T, parse_memory_mode(mode),
                                                 bench.target, bench.peak, bench.steps, bench.warmup));
}

}  // namespace

int main(int argc, char** argv) {
    adacc::CommandLine command_line("adacc GPU training-step benchmark");
    adacc::Command app = command_line.program();
    BenchRun bench;
    std::string json_file, dtype_name = "bf16", attention_name = "materialized";
    bool per_op = false, nondeterministic = false;
    app.option("--presets", bench.presets, "model presets").comma_separated();
    app.option("--seq", bench.T, "sequence length").positive();
    app.option("--batch", bench.batch, "batch size (0: the largest power of two that fits in mode none)")
        .in_range(0, 1 << 20);
    app.option("--steps", bench.steps, "measured steps").in_range(1, 1000);
    app.option("--warmup", bench.warmup, "steps before measuring").in_range(0, 1000);
    app.option("--json", json_file, "also write the results here");
    app.option("--dtype", dtype_name, "model dtype: bf16 (default) or fp32").one_of({"bf16", "fp32"});
    app.option("--attention", attention_name, "model.attention: materialized (default), fused or cudnn (bf16 only)")
        .one_of(attention_impl_names());
    app.flag("--nondeterministic", nondeterministic,
             "training.deterministic = false: cuDNN's attention backward sums dQ by atomics (--attention cudnn)");
    app.option("--classifier-chunk", bench.classifier_chunk,
               "model.classifier_chunk: tokens per chunk of the classifier (0: the auto chunk, 256 MiB of logits)")
        .in_range(0, 1 << 30);
    app.flag("--per-op", per_op, "where each preset's step goes: ms, FLOPs, bytes and roofline per op family");
    std::vector<std::string> fixed_modes;
    for (MemoryMode mode : fixed_memory_modes()) fixed_modes.push_back(memory_mode_name(mode));
    app.option("--per-op-modes", bench.per_op_modes,
               "with --per-op: the fixed memory modes to time, each preset in each (default none)")
        .comma_separated()
        .one_of(fixed_modes);
    if (const auto parse_ended = command_line.run(argc, argv)) return *parse_ended;
    try {
        const CudaDeviceInfo gpu = cuda_device_info();
        if (!gpu.available) {
            std::printf("bench_gpu: no CUDA device (%s); nothing measured\n", gpu.problem.c_str());
            return 0;
        }
        bench.peak = gpu_peak(gpu.name);
        bench.attention = *parse_attention_impl(attention_name);
        bench.target = ComputeTarget(Device::cuda, resolve_model_dtype(dtype_name, Device::cuda));
        bench.target.deterministic = !nondeterministic;
        nlohmann::json out = {{"gpu", gpu.name},
                              {"compute_capability", gpu.compute_capability},
                              {"precision", dtype_name},
                              {"attention", attention_name},
                              {"deterministic", bench.target.deterministic},
                              {"classifier_chunk", bench.classifier_chunk},
                              {"peak_tflops_fp32", bench.peak.fp32_tflops},
                              {"peak_tflops_bf16", bench.peak.bf16_tflops},
                              {"flops_per_token", "6N + 6LCT (llm.c)"},
                              {"seq_len", bench.T},
                              {"runs", nlohmann::json::array()},
                              {"modes", nlohmann::json::array()}};
        if (per_op) {
            per_op_tables(bench, gpu, out);
        } else {
            std::printf(
                "GPU %s (sm_%d), %s, %s attention%s%s; MFU = (6N + 6LCT) x tokens/s over the dense %s peak "
                "(fp32 %.1f, bf16 %.0f TFLOP/s)\n\n",
                gpu.name.c_str(), gpu.compute_capability, dtype_name.c_str(), attention_name.c_str(),
                bench.target.deterministic ? "" : " (training.deterministic = false)",
                bench.classifier_chunk > 0
                    ? (", model.classifier_chunk = " + std::to_string(bench.classifier_chunk)).c_str()
                    : "",
                dtype_name.c_str(), bench.peak.fp32_tflops, bench.peak.bf16_tflops);
            if (const auto first = step_table(bench, out)) modes_table(bench, *first, out);
        }
        if (!json_file.empty()) std::ofstream(json_file) << out.dump(2) << '\n';
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu: %s\n", e.what());
        return 1;
    }
    return 0;
}
