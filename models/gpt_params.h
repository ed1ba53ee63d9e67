// Parameter layout: 16 tensors, tensor-major with layers stacked (llm.c's order), so one
// allocation holds all parameters and the same offsets index gradients and AdamW m / v.
// Matrices are (out x in) row-major and a linear layer computes out = in @ W^T + b.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "models/gpt_config.h"

namespace adacc {

enum class ParamId : int {
    wte,        // Vp x C   token embedding, tied with the output head
    wpe,        // maxT x C position embedding
    ln1w,       // L x C
    ln1b,       // L x C
    qkvw,       // L x 3C x C
    qkvb,       // L x 3C
    attprojw,   // L x C x C
    attprojb,   // L x C
    ln2w,       // L x C
    ln2b,       // L x C
    fcw,        // L x 4C x C
    fcb,        // L x 4C
    fcprojw,    // L x C x 4C
    fcprojb,    // L x C
    lnfw,       // C
    lnfb,       // C
};
constexpr int kNumParamTensors = 16;

struct ParamTensorInfo {
    std::string name;                // "wte", "ln1w", ...
    std::vector<std::size_t> shape;  // full stacked shape, e.g. {L, 3C, C}
    std::size_t offset = 0;          // in floats, from the start of the parameter arena
    std::size_t numel = 0;
    bool per_layer = false;          // first dimension is the layer
    bool weight_decay = false;       // AdamW decay applies to 2-D weights (matrices, embeddings) only
};

class ParameterLayout {
public:
    explicit ParameterLayout(const GPTConfig& config);

    const ParamTensorInfo& info(ParamId id) const { return tensors_[static_cast<int>(id)]; }
    const std::array<ParamTensorInfo, kNumParamTensors>& tensors() const { return tensors_; }
    std::size_t total() const { return total_; }  // floats

    // Pointer to tensor `id` (of layer `layer` for per-layer tensors) inside an arena laid out
    // by this layout (parameters, gradients, m and v all share it).
    template <typename T>
    T* at(T* arena, ParamId id, int layer = 0) const {
        const auto& t = info(id);
        return arena + t.offset + (t.per_layer ? static_cast<std::size_t>(layer) * (t.numel / t.shape[0]) : 0);
    }

private:
    std::array<ParamTensorInfo, kNumParamTensors> tensors_;
    std::size_t total_ = 0;
};

}  // namespace adacc
