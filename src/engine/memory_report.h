// Memory accounting before allocation (docs/design.md, 'Memory: arenas and accounting'): every
// arena's size for a model, batch and memory mode, the largest batch a budget holds, and the
// `adacc memory` table (after Megatron's theoretical-memory report).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/engine/activation_plan.h"
#include "src/engine/gpt_model.h"

namespace adacc {

// Every function here sizes arenas as the target's backend allocates them (src/engine/device.h):
// its device and the activations' dtype. The table's params column counts the fp32 weights and,
// in bf16, their bf16 copy.
ModelMemory memory_for_mode(const GPTConfig& config, int B, int T, MemoryMode mode, const ComputeTarget& target = {});
ActivationPlan plan_for_mode(const GPTConfig& config, int B, int T, MemoryMode mode);

// Largest B in [1, max_batch] with fits(B) (fits must be monotone: doubling, then bisection);
// 0 when not even B = 1 fits.
int largest_fitting_batch(const std::function<bool(int)>& fits, int max_batch = 1 << 16);

// Largest B (up to max_batch) whose total fits in `budget` bytes; 0 when not even B = 1 fits.
int largest_batch(const GPTConfig& config, int T, MemoryMode mode, std::uint64_t budget, int max_batch = 1 << 16,
                  const ComputeTarget& target = {});

// One line: every arena of `memory` and the total ("parameters 1.2 GiB, gradients ..., total ...").
std::string format_arenas(const ModelMemory& memory);

// Throws UserError when the total for (B, T, mode) exceeds `budget`, with the arena breakdown
// and, for every mode, the largest batch that would fit.
void check_budget(const GPTConfig& config, int B, int T, MemoryMode mode, std::uint64_t budget,
                  const ComputeTarget& target = {});

// The host memory this process may still take (src/common/process_memory.h: host_memory_limit):
// physical RAM, or the cgroup's memory limit or the process's ulimit -v / -d when lower.
std::uint64_t host_memory_bytes();

// The memory a model on `device` may use: host_memory_bytes() on the CPU; on CUDA the GPU's
// free memory plus what the backend already holds (ModelMemory::backend counts that).
std::uint64_t device_memory_bytes(Device device);

// Throws UserError, before anything is allocated, when `total` (the run's every arena) exceeds
// device_memory_bytes(device): it names the total, the device's memory, the arenas and the
// largest batch that fits it at seq T in `mode` (a fixed mode: planned modes pass the mode their
// budget is compared with).
void check_physical_memory(const GPTConfig& config, int B, int T, MemoryMode mode, std::uint64_t total,
                           const ComputeTarget& target = {});

// "the largest batch that fits in mode M is N (--set training.batch_size=N)" for `bytes` at seq T,
// or that not even batch 1 does.
std::string largest_batch_words(const GPTConfig& config, int T, MemoryMode mode, std::uint64_t bytes,
                                const ComputeTarget& target = {});

// Throws UserError when the model does not fit `target`'s memory even at batch 1 x seq T with full
// recomputation (about the least any plan needs: the static arenas, one x per layer, the logits),
// naming that total, its static part and the device's memory. Planned modes call it before they
// profile.
void check_model_fits_machine(const GPTConfig& config, int T, const ComputeTarget& target = {});

// One row of the `adacc memory` table: a mode's arenas at the config's batch (none when that
// batch has no plan within the budget: `note` says why) and its largest batch under the budget
// (-1: no budget given).
struct MemoryRow {
    MemoryMode mode = MemoryMode::none;
    std::optional<ModelMemory> memory;
    int max_batch = -1;
    std::string note;
};

// The row of fixed mode `mode` (memory_for_mode and largest_batch; budget 0: no max_batch).
MemoryRow fixed_memory_row(const GPTConfig& config, int B, int T, MemoryMode mode, std::uint64_t budget,
                           const ComputeTarget& target = {});

// The table: one line per row with every arena, the total, and max_batch when any row has one.
std::string format_memory_rows(const std::vector<MemoryRow>& rows, const ComputeTarget& target = {});

// One line: the device and dtype, its backend's fixed memory, and bytes per parameter (weights,
// gradient, AdamW m and v) and per activation element.
std::string describe_device_memory(const ComputeTarget& target);

}  // namespace adacc
