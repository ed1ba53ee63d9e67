// KernelTiming on the CUDA backend (bench_gpu --per-op's source): a training step timed kernel by
// kernel runs the CPU's kernels (the MLP's GELU inside its matmuls, residual adds with layernorms), as many
// times, and computes the same numbers as the step untimed; on a GPU every kernel the step ran took
// some time on the device.
#include <gtest/gtest.h>

#include <array>
#include <utility>

#include "src/engine/gpt_model.h"
#include "src/engine/kernel_timing.h"
#include "src/engine/memory_report.h"
#include "src/engine/optimizer.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

struct TimedStep {
    StepReadout readout;
    KernelTimes times;
};

constexpr int kLayers = 2;

TimedStep step_on(Backend& backend, bool timed) {
    const int B = 2, T = 16, N = B * T;
    GPTConfig cfg = *gpt_preset("gpt-micro");
    cfg.n_layer = kLayers;
    cfg.dropout = 0.0f;
    GPTModel model(cfg, B, T, plan_for_mode(cfg, B, T, MemoryMode::none), {}, ModelUse::training, backend,
                   {backend.device(), DType::f32});
    model.init_weights(5);
    const auto tokens = test::random_tokens(N, cfg.vocab_size, 1), targets = test::random_tokens(N, cfg.vocab_size, 2);
    std::unique_ptr<KernelTiming> timing = timed ? std::make_unique<KernelTiming>(backend) : nullptr;
    model.forward_step(tokens.data(), targets.data(), B, T, DropoutContext{}, 1.0f / N, N, false);
    model.backward(tokens.data(), B, T, false);
    queue_gradient_norm(model);
    queue_adamw_step(model, OptimizerOptions{}, 1e-3f, 1);
    TimedStep out;
    out.readout = model.read_step();
    if (timing) out.times = timing->take();
    return out;
}

// The CPU step's kernel calls as CUDA's graph makes them (models/gpt_block.h: BlockFusions): each
// gelu_forward and its fc matmul_forward are one matmul_gelu_forward, each gelu_backward and its
// fcproj matmul_backward one matmul_dgelu_backward, and each layer's two residual adds with the
// layernorm after each (residual1 with ln2; residual2 with the next layer's ln1 or the final
// layernorm: one residual_dropout_forward and one layernorm_forward each) one
// residual_layernorm_forward.
std::array<long, kNumKernels> in_cudas_graph(std::array<long, kNumKernels> calls, int n_layer) {
    auto at = [&](Kernel k) -> long& { return calls[static_cast<int>(k)]; };
    at(Kernel::matmul_forward) -= at(Kernel::gelu_forward);
    at(Kernel::matmul_gelu_forward) += std::exchange(at(Kernel::gelu_forward), 0);
    at(Kernel::matmul_backward) -= at(Kernel::gelu_backward);
    at(Kernel::matmul_dgelu_backward) += std::exchange(at(Kernel::gelu_backward), 0);
    at(Kernel::residual_dropout_forward) -= 2 * n_layer;
    at(Kernel::layernorm_forward) -= 2 * n_layer;
    at(Kernel::residual_layernorm_forward) += 2 * n_layer;
    return calls;
}

TEST(CudaKernelTiming, TimesTheCpusKernelsAsOftenAndChangesNothing) {
    ADACC_REQUIRE_CUDA_DEVICE();
    const TimedStep cpu = step_on(cpu_backend(), true), plain = step_on(cuda_backend(), false),
                    timed = step_on(cuda_backend(), true);
    EXPECT_EQ(timed.readout.loss, plain.readout.loss);
    EXPECT_EQ(timed.readout.grad_norm, plain.readout.grad_norm);
    ASSERT_GT(cpu.times.calls[static_cast<int>(Kernel::gelu_forward)], 0) << "the CPU runs gelu as an op";
    const std::array<long, kNumKernels> want = in_cudas_graph(cpu.times.calls, kLayers);
    for (int k = 0; k < kNumKernels; ++k) {
        SCOPED_TRACE(kKernelNames[k]);
        EXPECT_EQ(timed.times.calls[k], want[k]);
        EXPECT_GE(timed.times.ms[k], 0.0);
        // CUDA events time a GPU's kernels; the emulation's events read the host's clock, where a
        // kernel may take less than its resolution.
        if (!test::running_under_emulation() && timed.times.calls[k] > 0) {
            EXPECT_GT(timed.times.ms[k], 0.0);
        }
    }
    EXPECT_GT(timed.times.calls[static_cast<int>(Kernel::matmul_forward)], 0);
}

}  // namespace
}  // namespace adacc
