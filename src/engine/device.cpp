#include "src/engine/device.h"

#include "kernels/cuda/device_sizes.h"
#include "src/common/errors.h"

namespace adacc {

const char* device_name(Device device) {
    for (const DeviceInfo& d : kDevices)
        if (d.device == device) return d.name;
    return "?";
}

std::vector<std::string> device_names() {
    std::vector<std::string> names;
    for (const DeviceInfo& d : kDevices) names.emplace_back(d.name);
    return names;
}

Device parse_device(const std::string& name) {
    for (const DeviceInfo& d : kDevices)
        if (name == d.name) return d.device;
    std::string valid;
    for (const DeviceInfo& d : kDevices) valid += (valid.empty() ? "" : ", ") + std::string(d.name);
    throw SettingError("training.device", "training.device \"" + name + "\" is not a device; use one of " + valid);
}

DeviceTraits device_traits(Device device) {
    DeviceTraits traits;
    if (device == Device::cuda) {
        traits.stage_tokens = true;
        traits.resident_bytes = cuda::kBlasWorkspaceBytes + cuda::kReductionScratchBytes;
    }
    return traits;
}

}  // namespace adacc
