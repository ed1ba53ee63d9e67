// Text generation: repeated forward passes over the (sliding) context window, sampling the
// next token from the last position's logits with temperature and top-k.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "src/engine/gpt_model.h"

namespace adacc {

struct SamplingOptions {
    int tokens = 64;            // how many to generate
    float temperature = 1.0f;   // 0 = greedy
    int top_k = 40;             // 0 = whole vocabulary
    std::uint64_t seed = 1;
};

// Generates after `prompt` (non-empty). The model must be allocated with batch >= 1 and its
// full context (max_seq_len()). `on_token` sees each new token as it is produced.
std::vector<int> generate(GPTModel& model, std::vector<int> prompt, const SamplingOptions& options,
                          const std::function<void(int)>& on_token = {});

// Index drawn from the top-k of `logits` (V of them) at `temperature`, using uniform `u` in [0, 1).
int sample_token(const float* logits, int V, float temperature, int top_k, float u);

}  // namespace adacc
