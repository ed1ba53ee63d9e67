#include "src/engine/memory_report.h"

#include <algorithm>
#include <cstdio>

#include "src/common/errors.h"
#include "src/common/process_memory.h"
#include "src/common/units.h"

namespace adacc {

ActivationPlan plan_for_mode(const GPTConfig& config, int B, int T, MemoryMode mode) {
    return ActivationPlan::for_mode(mode, BlockGraph(config, B, T), config.n_layer);
}

ModelMemory memory_for_mode(const GPTConfig& config, int B, int T, MemoryMode mode, const ComputeTarget& target) {
    return GPTModel::plan_memory(config, B, T, plan_for_mode(config, B, T, mode), {}, ModelUse::training, target);
}

int largest_fitting_batch(const std::function<bool(int)>& fits, int max_batch) {
    if (!fits(1)) return 0;
    int lo = 1, hi = 2;  // fits(lo); find the first hi that does not fit, then bisect
    while (hi <= max_batch && fits(hi)) lo = hi, hi *= 2;
    hi = std::min(hi, max_batch + 1);
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

int largest_batch(const GPTConfig& config, int T, MemoryMode mode, std::uint64_t budget, int max_batch,
                  const ComputeTarget& target) {
    return largest_fitting_batch([&](int B) { return memory_for_mode(config, B, T, mode, target).total() <= budget; },
                                 max_batch);
}

std::string format_arenas(const ModelMemory& m) {
    return "parameters " + format_bytes(m.parameters) + ", gradients " + format_bytes(m.gradients) +
           ", optimizer state " + format_bytes(m.optimizer_state) + ", tape " + format_bytes(m.tape) + ", workspace " +
           format_bytes(m.workspace()) + " (of which logits " + format_bytes(m.logits) + ")" +
           (m.backend ? ", backend " + format_bytes(m.backend) : std::string()) + ", total " + format_bytes(m.total());
}

void check_budget(const GPTConfig& config, int B, int T, MemoryMode mode, std::uint64_t budget,
                  const ComputeTarget& target) {
    const ModelMemory m = memory_for_mode(config, B, T, mode, target);
    if (m.total() <= budget) return;
    std::string fits;
    for (MemoryMode other : fixed_memory_modes()) {
        const int b = largest_batch(config, T, other, budget, 1 << 16, target);
        fits += std::string("\n  ") + memory_mode_name(other) + ": " +
                (b > 0 ? "largest batch " + std::to_string(b) : std::string("does not fit even at batch 1"));
    }
    throw UserError("memory.budget " + format_bytes(budget) + " is too small for batch " + std::to_string(B) +
                    " x seq " + std::to_string(T) + " in mode " + memory_mode_name(mode) + ": " + format_arenas(m) +
                    ".\nAt seq " + std::to_string(T) + " this budget fits:" + fits +
                    "\nLower training.batch_size, choose another memory.mode, or raise memory.budget.");
}

std::uint64_t host_memory_bytes() { return host_memory_limit().bytes; }

std::uint64_t device_memory_bytes(Device device) {
    if (device == Device::cpu) return host_memory_bytes();
    return cuda_backend().free_memory() + device_traits(device).resident_bytes;
}

void check_physical_memory(const GPTConfig& config, int B, int T, MemoryMode mode, std::uint64_t total,
                           const ComputeTarget& target) {
    const std::uint64_t machine = device_memory_bytes(target.device);
    if (total <= machine) return;
    throw UserError("this run needs " + format_bytes(total) + " (batch " + std::to_string(B) + " x seq " +
                    std::to_string(T) + ", mode " + memory_mode_name(mode) + ": " +
                    format_arenas(memory_for_mode(config, B, T, mode, target)) + ") but " +
                    device_memory_words(target.device, machine) + "; " +
                    largest_batch_words(config, T, mode, machine, target) +
                    "; or choose a memory.mode that keeps less (`adacc memory` compares them)");
}

std::string largest_batch_words(const GPTConfig& config, int T, MemoryMode mode, std::uint64_t bytes,
                                const ComputeTarget& target) {
    const int fits = largest_batch(config, T, mode, bytes, 1 << 16, target);
    if (fits == 0) return std::string("not even batch 1 fits in mode ") + memory_mode_name(mode);
    return "the largest batch that fits in mode " + std::string(memory_mode_name(mode)) + " is " +
           std::to_string(fits) + " (--set training.batch_size=" + std::to_string(fits) + ")";
}

void check_model_fits_machine(const GPTConfig& config, int T, const ComputeTarget& target) {
    const std::uint64_t machine = device_memory_bytes(target.device);
    const ModelMemory least = memory_for_mode(config, 1, T, MemoryMode::full, target);
    if (least.total() <= machine) return;
    throw UserError("this model (" + std::to_string(config.parameter_count()) + " parameters) needs " +
                    format_bytes(least.total()) + " even at batch 1 x seq " + std::to_string(T) +
                    " with full recomputation (" + format_arenas(least) +
                    "; parameters, gradients and AdamW state "
                    "alone are " +
                    format_bytes(least.static_bytes()) + "), but " + device_memory_words(target.device, machine) +
                    ": no memory mode can train it here; choose a smaller model (`adacc memory` shows "
                    "every arena without allocating)");
}

MemoryRow fixed_memory_row(const GPTConfig& config, int B, int T, MemoryMode mode, std::uint64_t budget,
                           const ComputeTarget& target) {
    MemoryRow row;
    row.mode = mode;
    row.memory = memory_for_mode(config, B, T, mode, target);
    if (budget) row.max_batch = largest_batch(config, T, mode, budget, 1 << 16, target);
    return row;
}

std::string format_memory_rows(const std::vector<MemoryRow>& rows, const ComputeTarget& target) {
    std::string out;
    char line[512];
    // The backend's fixed memory gets a column where there is any (CUDA), so the row adds up.
    const bool backend_column = device_traits(target).resident_bytes > 0;
    const bool batch_column =
        std::any_of(rows.begin(), rows.end(), [](const MemoryRow& r) { return r.max_batch >= 0; });
    std::snprintf(line, sizeof line, "%-13s %12s %12s %12s %12s %12s %12s %12s%s %12s%s\n", "mode", "params", "grads",
                  "adamw", "tape", "materialize", "transients", "logits", backend_column ? "      backend" : "",
                  "total", batch_column ? "   max_batch" : "");
    out += line;
    for (const MemoryRow& row : rows) {
        const std::string max_batch = batch_column ? "   " + std::to_string(row.max_batch) : std::string();
        if (!row.memory) {
            std::snprintf(line, sizeof line, "%-13s %-*s%s\n", memory_mode_name(row.mode),
                          12 * 8 + 7 + (backend_column ? 13 : 0), ("  " + row.note).c_str(), max_batch.c_str());
            out += line;
            continue;
        }
        const ModelMemory& m = *row.memory;
        char backend[32] = "";
        if (backend_column) std::snprintf(backend, sizeof backend, " %12s", format_bytes(m.backend).c_str());
        std::snprintf(line, sizeof line, "%-13s %12s %12s %12s %12s %12s %12s %12s%s %12s%s\n",
                      memory_mode_name(row.mode), format_bytes(m.parameters + m.working_weights).c_str(),
                      format_bytes(m.gradients).c_str(), format_bytes(m.optimizer_state).c_str(),
                      format_bytes(m.tape).c_str(), format_bytes(m.materialize).c_str(),
                      format_bytes(m.transients).c_str(), format_bytes(m.logits).c_str(), backend,
                      format_bytes(m.total()).c_str(), max_batch.c_str());
        out += line;
    }
    return out;
}

namespace {
// "; backend fixed memory X (cuBLASLt workspace, reduction scratch, the CUDA context Y measured at
// start-up)", or nothing where the backend holds none (the CPU).
std::string backend_words(const DeviceTraits& t) {
    if (!t.resident_bytes) return {};
    std::string measured;  // the parts measured, or estimated
    if (t.context.bytes)
        measured = ", the CUDA context " + format_bytes(t.context.bytes) +
                   (t.context.measured ? " measured at start-up" : " estimated: no GPU here to measure it");
    if (t.collectives.bytes)
        measured +=
            ", NCCL's buffers " + format_bytes(t.collectives.bytes) +
            (t.collectives.measured ? " measured at start-up" : " estimated: training measures them at start-up");
    return "; backend fixed memory " + format_bytes(t.resident_bytes) + " (cuBLASLt workspace, reduction scratch" +
           measured + ")";
}
}  // namespace

std::string describe_device_memory(const ComputeTarget& target) {
    const DeviceTraits t = device_traits(target);
    const std::size_t activation = dtype_size(t.activation);
    char weights[64];
    if (t.working_weight_bytes)
        std::snprintf(weights, sizeof weights, "fp32 weights 4 + their %s copy %zu", model_dtype_name(t.activation),
                      t.working_weight_bytes);
    else
        std::snprintf(weights, sizeof weights, "fp32 weights 4");
    // Under ZeRO-1 each rank holds a shard of AdamW's m and v, and of the masters beside a working copy.
    char shards[160] = "";
    if (t.optimizer_shards > 1) {
        const bool masters = t.masters_sharded();
        const double sharded = 8.0 + (masters ? 4.0 : 0.0);  // m and v, and the masters
        const double whole = 4.0 + (masters ? static_cast<double>(t.working_weight_bytes) : 4.0);  // gradient, weights
        std::snprintf(shards, sizeof shards, " (ZeRO-1 over %d ranks: %.2f per rank, the %s sharded)",
                      t.optimizer_shards, whole + sharded / t.optimizer_shards,
                      masters ? "moments and masters" : "moments");
    }
    char line[560];
    std::snprintf(line, sizeof line,
                  "device %s, dtype %s: %zu bytes per parameter (%s, gradient 4, AdamW m 4 and v 4)%s, %zu bytes per "
                  "activation element%s\n",
                  device_name(target.device), model_dtype_name(t.activation), 16 + t.working_weight_bytes, weights,
                  shards, activation, backend_words(t).c_str());
    return line;
}

}  // namespace adacc
