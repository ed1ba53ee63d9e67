// The devices a model can run on, named once: config values, --device, tables and errors read
// kDevices. A device's memory traits are known without its backend (so `adacc memory --device
// cuda` sizes device arenas on a machine with no GPU, or a build with no CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/common/dtype.h"

namespace adacc {

enum class Device : std::uint8_t { cpu, cuda };

struct DeviceInfo {
    Device device;
    const char* name;  // as written in configs (training.device) and after --device
};
inline constexpr DeviceInfo kDevices[] = {{Device::cpu, "cpu"}, {Device::cuda, "cuda"}};

const char* device_name(Device device);
// A name of kDevices; SettingError on training.device naming the valid names otherwise.
Device parse_device(const std::string& name);
std::vector<std::string> device_names();

// What memory accounting needs to know about a device's backend.
struct DeviceTraits {
    bool stage_tokens = false;        // token ids are copied into the workspace (the host cannot address it)
    std::size_t resident_bytes = 0;   // the backend's own fixed allocations (CUDA: cuBLASLt workspace, reduction scratch)
    DType activation = DType::f32;    // element type of activations and matmul inputs
    std::size_t param_bytes = 4;      // bytes per parameter of the working weights (fp32 masters, grads, m, v are 4 each)
};
DeviceTraits device_traits(Device device);

}  // namespace adacc
