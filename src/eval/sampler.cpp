#include "src/eval/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/rng.h"

namespace adacc {

int sample_token(const float* logits, int V, float temperature, int top_k, float u) {
    if (temperature <= 0.0f) return static_cast<int>(std::max_element(logits, logits + V) - logits);
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    const int k = top_k > 0 ? std::min(top_k, V) : V;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    std::vector<double> weights(k);
    const double top = logits[order[0]];
    for (int i = 0; i < k; ++i) weights[i] = std::exp((logits[order[i]] - top) / temperature);
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    double cumulative = 0.0;
    for (int i = 0; i < k; ++i) {
        cumulative += weights[i] / total;
        if (u < cumulative) return order[i];
    }
    return order[k - 1];
}

std::vector<int> generate(GPTModel& model, std::vector<int> prompt, const SamplingOptions& options,
                          const std::function<void(int)>& on_token) {
    const int window = model.max_seq_len(), V = model.config().vocab_size, Vp = model.config().padded_vocab_size();
    const std::uint64_t key = rng_key(options.seed, 0, 0, 0, 0x5A);
    std::vector<int> generated;
    std::vector<float> last(static_cast<std::size_t>(Vp));  // the last position's logits
    for (int i = 0; i < options.tokens; ++i) {
        const int T = std::min<int>(window, static_cast<int>(prompt.size()));
        const int* context = prompt.data() + prompt.size() - T;
        model.forward(context, nullptr, 1, T, DropoutContext{0, 0, 0, false}, 0.0f);
        model.read_logits(static_cast<std::size_t>(T - 1), 1, last.data());
        const int next = sample_token(last.data(), V, options.temperature, options.top_k, rng_uniform(key, i));
        prompt.push_back(next);
        generated.push_back(next);
        if (on_token) on_token(next);
    }
    return generated;
}

}  // namespace adacc
