// Fused classifier: log-softmax, cross-entropy and dlogits in one pass per row; the
// probabilities are never stored (dlogits overwrite the logits in place).
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/vector_math.h"

namespace adacc::cpu {

void fused_classifier(const KernelContext& ctx, Act logits_act, float* losses, const int* targets, int N, int V, int Vp,
                      float dloss) {
    float* logits = logits_act.as<float>();
#pragma omp parallel for num_threads(team(ctx))
    for (int i = 0; i < N; ++i) {
        float* row = logits + static_cast<long>(i) * Vp;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int j = 0; j < V; ++j) maxv = row[j] > maxv ? row[j] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; ++j) sum += exp_approx(row[j] - maxv);
        const int target = targets[i];
        losses[i] = std::log(sum) - (row[target] - maxv);
        if (dloss == 0.0f) continue;
        const float scale = dloss / sum;
#pragma omp simd
        for (int j = 0; j < V; ++j) row[j] = exp_approx(row[j] - maxv) * scale;
        row[target] -= dloss;
        for (int j = V; j < Vp; ++j) row[j] = 0.0f;
    }
}

// Sequential on purpose: a fixed order whatever the thread count, and n is one row per token.
void loss_accumulate(const KernelContext& ctx, float* total, const float* losses, int n, double divisor,
                     bool accumulate) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += losses[i];
    *total = static_cast<float>((accumulate ? static_cast<double>(*total) : 0.0) + sum / divisor);
}

}  // namespace adacc::cpu
