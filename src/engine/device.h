// The devices a model can run on, named once: config values, --device, tables and errors read
// kDevices. A device's memory traits are known without its backend (so `adacc memory --device
// cuda` sizes device arenas on a machine with no GPU, or a build with no CUDA), but for the CUDA
// context's memory, which is measured where there is a GPU (cuda_fixed_overhead).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_block.h"
#include "src/common/dtype.h"

namespace adacc {

enum class Device : std::uint8_t { cpu, cuda };

// A GPU's dense (no sparsity) peaks, from NVIDIA's datasheets, by a part of its name: tensor-core
// bf16 and fp32 without TF32 (the precisions the CUDA kernels use) in TFLOP/s, and its memory
// bandwidth in GB/s. MFU's denominator (bench_gpu, train's step lines) and the per-op roofline's.
struct GpuPeak {
    double bf16_tflops = 0, fp32_tflops = 0, memory_gbps = 0;
    double tflops(DType activation) const { return activation == DType::bf16 ? bf16_tflops : fp32_tflops; }
};
// The peaks of the GPU called `name` (CUDA's device name); zeros for one not listed.
GpuPeak gpu_peak(const std::string& name);

struct DeviceInfo {
    Device device;
    const char* name;  // as written in configs (training.device) and after --device
};
inline constexpr DeviceInfo kDevices[] = {{Device::cpu, "cpu"}, {Device::cuda, "cuda"}};

const char* device_name(Device device);
// A name of kDevices; SettingError on training.device naming the valid names otherwise.
Device parse_device(const std::string& name);
std::vector<std::string> device_names();

// model.dtype: the element type of activations and the weights forward and backward read. fp32
// runs everywhere (the CPU's only dtype, and CUDA's exact mode); bf16 runs on CUDA (fp32
// accumulation, fp32 master weights, gradients and AdamW state, and a bf16 working copy of the
// weights that forward and backward read).
// "auto" is the device's default: bf16 on CUDA, fp32 on the CPU.
struct DtypeInfo {
    DType dtype;
    const char* name;  // as written after model.dtype
};
inline constexpr DtypeInfo kModelDtypes[] = {{DType::f32, "fp32"}, {DType::bf16, "bf16"}};
inline constexpr const char* kAutoDtype = "auto";
// What model.dtype and --dtype mean, for their help texts.
inline constexpr const char* kModelDtypeHelp =
    "activations and matmul inputs: auto (bf16 on cuda, fp32 on cpu), fp32, or bf16 (cuda only)";
std::vector<std::string> model_dtype_names();  // "auto" first
const char* model_dtype_name(DType dtype);
// The dtype `name` (a kModelDtypes name or "auto") means on `device`; SettingError on model.dtype
// when the name is unknown or the device does not run that dtype.
DType resolve_model_dtype(const std::string& name, Device device);

// Where a model runs: the device, the activations' dtype (what sizes every arena), how many
// data-parallel ranks share its AdamW state (ZeRO-1; 1: it holds all of it) and how many ranks the
// job has (whose collectives hold buffers of their own on a GPU), and whether its kernels must be
// deterministic (training.deterministic). From a bare Device, fp32, one rank, deterministic.
struct ComputeTarget {
    ComputeTarget(Device d = Device::cpu, DType a = DType::f32, int shards = 1, int ranks = 1)
        : device(d), activation(a), optimizer_shards(shards), world_size(ranks) {}
    Device device;
    DType activation;
    int optimizer_shards;
    int world_size;
    bool deterministic = true;
};

// The device memory a CUDA process holds beyond what it allocates itself: the CUDA context with
// the kernels it has loaded, and cuBLASLt's handle. Where there is a GPU it is measured once, when
// the CUDA backend starts (src/cuda/cuda_backend.cpp: the memory in use then, less the backend's
// own buffers; on a GPU shared with another process, that process's memory too). Elsewhere it is
// kCudaContextEstimateBytes. Not in it: cuDNN's workspace (ModelLayout counts it per model) and
// NCCL's buffers (cuda_collectives_overhead). docs/design.md, 'Memory: arenas and accounting'.
struct CudaFixedOverhead {
    std::size_t bytes = 0;
    bool measured = false;  // false: the estimate
};
CudaFixedOverhead cuda_fixed_overhead();
// The estimate: what the measurement gave on an H200 (driver 580, CUDA 13, lazy module loading),
// rounded up. README's GPU section has the measurement.
inline constexpr std::size_t kCudaContextEstimateBytes = std::size_t{512} << 20;

// The device memory NCCL's communicator holds in a job of `world_size` ranks: its buffers for every
// connection, which training makes when it starts (src/dist/process_group.h: start_collectives, on
// every rank at the same point) and measures around it; every rank counts the largest rank's. None
// at world size 1 (no collectives) or without libnccl (the sums then go through host memory).
// Before that start, or with no GPU, kNcclBuffersEstimateBytes.
CudaFixedOverhead cuda_collectives_overhead(int world_size);
// NCCL's default buffers per connection, one per protocol: Simple's 4 MiB (NCCL_BUFFSIZE), LL128's
// 120 x 640 x 8 steps x 8 bytes and LL's 8 x 512 x 8 steps x 16 bytes.
inline constexpr std::size_t kNcclConnectionBytes = (std::size_t{4} << 20) + 120 * 640 * 8 * 8 + 8 * 512 * 8 * 16;
// The estimate, not a measurement: 32 channels (NVLink's usual count; PCIe machines run fewer),
// each receiving on a ring's and a tree's connection (588 MiB). NVLink SHARP (NVLS) on NVSwitch
// machines adds buffers of its own; the measurement at start-up counts what there is.
inline constexpr std::size_t kNcclBuffersEstimateBytes = 32 * 2 * kNcclConnectionBytes;

// What memory accounting needs to know about a target's backend.
struct DeviceTraits {
    bool stage_tokens = false;  // token ids are copied into the workspace (the host cannot address it)
    // The backend's fixed memory (CUDA: cuBLASLt's workspace, the reduction scratch, the context's
    // fixed overhead and NCCL's buffers; 0 on the CPU), and the context's and NCCL's parts of it.
    std::size_t resident_bytes = 0;
    CudaFixedOverhead context;
    CudaFixedOverhead collectives;
    DType activation = DType::f32;  // element type of activations and matmul inputs
    // Bytes per parameter of the working copy that forward and backward read beside the fp32
    // masters (bf16: 2; fp32: 0, the masters are the working weights). Masters, gradients, AdamW m
    // and v are 4 each.
    std::size_t working_weight_bytes = 0;
    // Ranks sharing the optimizer's state (ZeRO-1): each holds a shard of AdamW's m and v, and of
    // the fp32 masters where a working copy stands in for them in forward and backward.
    int optimizer_shards = 1;
    // The fused ops of the backend's block graph (models/gpt_block.h): block_fusions(device).
    BlockFusions fusions;
    // Whether every kernel gives the same bytes for the same inputs. Only cuDNN's attention
    // backward has a faster variant that does not (its dQ sums by atomics), with a smaller
    // workspace (kernels/cuda/device_sizes.h); the CPU's kernels and CUDA's own are deterministic.
    bool deterministic = true;
    // Whether a training model's fp32 masters are sharded too (ZeRO-1 beside a working copy).
    bool masters_sharded() const { return optimizer_shards > 1 && working_weight_bytes > 0; }
};
DeviceTraits device_traits(const ComputeTarget& target);

// The fused ops of `device`'s block graph (models/gpt_block.h: BlockFusions). On CUDA: the MLP's
// GELU in its matmuls' epilogues, where cuBLASLt's GELU_AUX_BIAS and DGELU epilogues save the
// elementwise passes over the N x 4C tensors, and residual adds with the layernorms after them
// (in forward: residual1 with ln2, residual2 with the next ln1), which saves writing each sum in
// one kernel and reading it back in the next. None on the CPU, which would gain nothing and keeps
// its graph, profiles and plans. A profile is read against its device's graph.
constexpr BlockFusions block_fusions(Device device) {
    return device == Device::cuda ? BlockFusions{.gelu_epilogue = true, .residual_layernorm = true} : BlockFusions{};
}

// What limits `device`'s memory to `bytes` (src/engine/memory_report.h: device_memory_bytes), in a
// message's words: "this machine has 23.47 GiB of memory", "ulimit -v allows the process ...",
// "the GPU has 79.10 GiB free".
std::string device_memory_words(Device device, std::uint64_t bytes);

}  // namespace adacc
