// The CPU side of model.attention = "cudnn": the fused kernels (kernels/cpu/attention_fused.cpp),
// which compute the same causal attention, atty and lse, as cuDNN's SDPA graphs do on CUDA
// (kernels/cuda/attention_cudnn.cpp). They are the reference the device tests compare cuDNN with;
// the CPU backend does not offer them to a model (src/engine/cpu_backend.cpp: supports), because
// with dropout cuDNN's Philox mask is not this RNG's: a run asks for "fused" on the CPU instead.
#include "kernels/cpu/ops.h"

namespace adacc::cpu {

void attention_cudnn_forward(const KernelContext& ctx, Act atty, float* lse, ConstAct qkv, int B, int T, int C, int NH,
                             float dropout_p, unsigned long long key) {
    attention_fused_forward(ctx, atty, lse, qkv, B, T, C, NH, dropout_p, key);
}

void attention_cudnn_backward(const KernelContext& ctx, Act dqkv, ConstAct datty, ConstAct qkv, ConstAct atty,
                              const float* lse, int B, int T, int C, int NH, float dropout_p, unsigned long long key) {
    attention_fused_backward(ctx, dqkv, datty, qkv, atty, lse, B, T, C, NH, dropout_p, key);
}

}  // namespace adacc::cpu
