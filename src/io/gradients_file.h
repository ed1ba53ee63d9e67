// The gradients file `adacc gradients` writes: one forward and backward's batch, loss and
// parameter gradients, for a peer implementation (scripts/torch_reference.py) to compare its own
// with, at the weights of an llm.c model file both load.
//
// Layout, little-endian: a header of 256 int32 — [0] magic 20261204, [1] version 1, [2] B,
// [3] T, then the model's shape as llm.c's model header has it: [4] maxT, [5] V, [6] L, [7] NH,
// [8] C, [9] Vp; [10] the device (0 cpu, 1 cuda), [11] the activation dtype (0 fp32, 1 bf16),
// [12] the loss (the mean over the B x T tokens) as float32 bits, the rest zero — then the
// inputs, B x T int32 row-major, the targets, B x T int32, and every parameter's gradient as
// float32 in llm.c's order, the model file's (models/gpt_params.h), with no padding between
// tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "models/gpt_config.h"
#include "src/common/dtype.h"
#include "src/engine/device.h"

namespace adacc {

constexpr std::int32_t kGradientsFileMagic = 20261204;
constexpr std::int32_t kGradientsFileVersion = 1;

struct GradientsRecord {
    GPTConfig shape;
    int B = 0, T = 0;
    Device device = Device::cpu;
    DType activation = DType::f32;
    float loss = 0;
    const std::vector<int>* inputs = nullptr;       // B x T
    const std::vector<int>* targets = nullptr;      // B x T
    const std::vector<float>* gradients = nullptr;  // ParameterLayout(shape).total()
};

// Writes the file atomically (src/common/file_io.h); returns its size in bytes.
std::uint64_t save_gradients_file(const std::filesystem::path& file, const GradientsRecord& record);

}  // namespace adacc
