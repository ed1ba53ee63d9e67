#include "src/engine/device.h"

#include "kernels/cuda/device_sizes.h"
#include "src/common/errors.h"
#include "src/common/process_memory.h"
#include "src/common/units.h"

namespace adacc {

const char* device_name(Device device) {
    for (const DeviceInfo& d : kDevices)
        if (d.device == device) return d.name;
    return "?";
}

GpuPeak gpu_peak(const std::string& name) {
    struct Listed {
        const char* name_part;  // the first listed part the name holds decides (H100 SXM before H100)
        GpuPeak peak;
    };
    static constexpr Listed kListed[] = {
        {"H200", {989.0, 67.0, 4800.0}}, {"H100 SXM", {989.0, 67.0, 3350.0}}, {"H100 PCIe", {756.0, 51.0, 2000.0}},
        {"H100", {989.0, 67.0, 3350.0}}, {"A100", {312.0, 19.5, 2039.0}},     {"L40S", {362.0, 91.6, 864.0}},
        {"A10", {125.0, 31.2, 600.0}},
    };
    for (const Listed& listed : kListed)
        if (name.find(listed.name_part) != std::string::npos) return listed.peak;
    return {};
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

std::vector<std::string> model_dtype_names() {
    std::vector<std::string> names{kAutoDtype};
    for (const DtypeInfo& d : kModelDtypes) names.emplace_back(d.name);
    return names;
}

const char* model_dtype_name(DType dtype) {
    for (const DtypeInfo& d : kModelDtypes)
        if (d.dtype == dtype) return d.name;
    return "?";
}

DType resolve_model_dtype(const std::string& name, Device device) {
    if (name == kAutoDtype) return device == Device::cuda ? DType::bf16 : DType::f32;
    for (const DtypeInfo& d : kModelDtypes) {
        if (name != d.name) continue;
        if (d.dtype == DType::bf16 && device != Device::cuda)
            throw SettingError("model.dtype",
                               "model.dtype = \"bf16\" runs on CUDA only (the CPU kernels compute in "
                               "fp32); use model.dtype = \"fp32\" (or \"auto\"), or --device cuda");
        return d.dtype;
    }
    std::string valid;
    for (const std::string& n : model_dtype_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw SettingError("model.dtype", "model.dtype \"" + name + "\" is not a dtype; use one of " + valid);
}

DeviceTraits device_traits(const ComputeTarget& target) {
    DeviceTraits traits;
    if (target.device == Device::cuda) {
        traits.stage_tokens = true;
        traits.context = cuda_fixed_overhead();
        traits.collectives = cuda_collectives_overhead(target.world_size);
        traits.resident_bytes = cuda::kBackendBufferBytes + traits.context.bytes + traits.collectives.bytes;
    }
    traits.activation = target.activation;
    traits.working_weight_bytes = target.activation == DType::f32 ? 0 : dtype_size(target.activation);
    traits.optimizer_shards = target.optimizer_shards;
    traits.fusions = block_fusions(target.device);
    traits.deterministic = target.deterministic;
    return traits;
}

std::string device_memory_words(Device device, std::uint64_t bytes) {
    if (device == Device::cpu) return host_memory_limit().source;
    return "the GPU has " + format_bytes(bytes) + " free";
}

}  // namespace adacc
