// llm.c's GPT-2 model files (gpt2_124M.bin and friends, as written by llm.c's train_gpt2.py
// and train_gpt2.cu), so published GPT-2 weights can be evaluated and our weights used there.
//
// Layout: a header of 256 int32 — [0] magic 20240326, [1] version (3: fp32 parameters,
// 5: bf16 parameters), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp (V padded), the rest zero —
// then every parameter in llm.c's order, which is ParameterLayout's order (models/gpt_params.h),
// with no padding between tensors.
#pragma once

#include <cstdint>
#include <filesystem>

#include "models/gpt_config.h"
#include "src/common/file_io.h"

namespace adacc {

constexpr std::int32_t kLlmcModelMagic = 20240326;
constexpr std::int32_t kLlmcVersionFp32 = 3;
constexpr std::int32_t kLlmcVersionBf16 = 5;

// The model shape a file's header describes (dropout is not stored: 0). UserError when the
// file is not an llm.c model file this build can read, or its size is not what the header implies.
GPTConfig read_llmc_header(const std::filesystem::path& file);

// Reads all parameters into `params` (ParameterLayout(expected).total() floats), converting
// bf16 files to fp32. UserError naming the file, what it holds and the fix when its shape
// differs from `expected` or the file is truncated.
void load_llmc_model(const std::filesystem::path& file, const GPTConfig& expected, float* params);

// What save_llmc_model wrote: the file (a symlink's target when written through it) and its size.
struct LlmcModelWritten {
    std::filesystem::path file;
    std::uint64_t bytes = 0;
};

// Writes a version-3 (fp32) file, atomically (src/common/file_io.h: a unique temporary, renamed
// over a regular file only).
LlmcModelWritten save_llmc_model(const std::filesystem::path& file, const GPTConfig& config, const float* params,
                                 ExistingTarget existing = ExistingTarget::replace_regular_file);

}  // namespace adacc
