// Memory modes: how a run treats the activations backward needs. Fixed modes have one plan per
// shape (ActivationPlan::for_mode); planned modes (adacc, recompute-opt) solve a MILP for a
// memory budget (src/adacc/budget_planner.h). kMemoryModes is the one list of their names: the config's
// allowed values, parsing, help texts and the tables all read it.
#pragma once

#include <string>
#include <vector>

namespace adacc {

enum class MemoryMode { none, full, selective, quant, adacc, recompute_opt };

struct MemoryModeInfo {
    MemoryMode mode;
    const char* name;  // as written in configs and on the command line
    bool planned;      // needs a budget and the planner
};

// Every mode, in the order users see them listed.
inline constexpr MemoryModeInfo kMemoryModes[] = {
    {MemoryMode::none, "none", false},          {MemoryMode::full, "full", false},
    {MemoryMode::selective, "selective", false}, {MemoryMode::quant, "quant", false},
    {MemoryMode::adacc, "adacc", true},         {MemoryMode::recompute_opt, "recompute-opt", true},
};

// A name of kMemoryModes; UserError naming memory.mode and the valid names otherwise.
MemoryMode parse_memory_mode(const std::string& name);
const char* memory_mode_name(MemoryMode mode);
bool is_planned(MemoryMode mode);
std::vector<MemoryMode> fixed_memory_modes();  // the modes that are not planned, in kMemoryModes' order
std::vector<std::string> memory_mode_names();  // every mode's name
// "none, full, selective, quant": the names of `modes`, comma-separated, for help and error texts.
std::string join_memory_mode_names(const std::vector<MemoryMode>& modes);

}  // namespace adacc
