#include "src/engine/memory_mode.h"

#include "src/common/errors.h"

namespace adacc {

namespace {
const MemoryModeInfo& info(MemoryMode mode) {
    for (const auto& m : kMemoryModes)
        if (m.mode == mode) return m;
    throw std::logic_error("memory mode missing from kMemoryModes");
}
}  // namespace

MemoryMode parse_memory_mode(const std::string& name) {
    for (const auto& m : kMemoryModes)
        if (name == m.name) return m.mode;
    std::vector<MemoryMode> all;
    for (const auto& m : kMemoryModes) all.push_back(m.mode);
    throw UserError("memory.mode '" + name + "' is unknown; use one of " + join_memory_mode_names(all));
}

const char* memory_mode_name(MemoryMode mode) { return info(mode).name; }

bool is_planned(MemoryMode mode) { return info(mode).planned; }

std::vector<MemoryMode> fixed_memory_modes() {
    std::vector<MemoryMode> out;
    for (const auto& m : kMemoryModes)
        if (!m.planned) out.push_back(m.mode);
    return out;
}

std::vector<std::string> memory_mode_names() {
    std::vector<std::string> out;
    for (const auto& m : kMemoryModes) out.emplace_back(m.name);
    return out;
}

std::string join_memory_mode_names(const std::vector<MemoryMode>& modes) {
    std::string out;
    for (MemoryMode mode : modes) out += (out.empty() ? "" : ", ") + std::string(memory_mode_name(mode));
    return out;
}

}  // namespace adacc
