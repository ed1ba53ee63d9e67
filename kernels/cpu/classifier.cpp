// Fused classifier: log-softmax, cross-entropy and dlogits in one pass per row; the
// probabilities are never stored (dlogits overwrite the logits in place).
#include <cmath>

#include "kernels/cpu/ops.h"

namespace adacc::cpu {

void fused_classifier(float* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
#pragma omp parallel for
    for (int i = 0; i < N; ++i) {
        float* row = logits + static_cast<long>(i) * Vp;
        float maxv = -INFINITY;
        for (int j = 0; j < V; ++j) maxv = row[j] > maxv ? row[j] : maxv;
        double sum = 0.0;  // double: V terms of similar size, cheap next to the logits matmul
        for (int j = 0; j < V; ++j) sum += std::exp(static_cast<double>(row[j] - maxv));
        const float log_sum = static_cast<float>(std::log(sum));
        const int target = targets[i];
        losses[i] = log_sum - (row[target] - maxv);
        if (dloss == 0.0f) continue;
        const float inv_sum = static_cast<float>(1.0 / sum);
        for (int j = 0; j < V; ++j) row[j] = std::exp(row[j] - maxv) * inv_sum * dloss;
        row[target] -= dloss;
        for (int j = V; j < Vp; ++j) row[j] = 0.0f;
    }
}

}  // namespace adacc::cpu
