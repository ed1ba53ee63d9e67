// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// The formula is kernels/gelu_math.h's, with the vectorised exp of kernels/vector_math.h.
#include "kernels/cpu/ops.h"
#include "kernels/gelu_math.h"
#include "kernels/vector_math.h"

namespace adacc::cpu {
namespace {
constexpr auto kExp = [](float x) { return exp_approx(x); };
}  // namespace

void gelu_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, long n) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) out[i] = gelu_value(inp[i], kExp);
}

void gelu_backward(const KernelContext& ctx, Act dinp_act, ConstAct inp_act, ConstAct dout_act, long n) {
    float* dinp = dinp_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float* dout = dout_act.as<float>();
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) dinp[i] = gelu_derivative(inp[i], kExp) * dout[i];
}

}  // namespace adacc::cpu
