// NCCL's collectives as the CUDA backend runs them for data parallelism (src/cuda/nccl_collectives.h),
// at world size 1 (a communicator of this process alone): the gradient sums on the backend's
// communication stream (an all-reduce piece and a reduce piece into rank 0, in one NCCL group,
// ordered after a memset queued on the compute stream and before the copy back by events), and
// ZeRO-1's all-gather (fp32 and bf16) of one shard, leave every value as it was, through NCCL's
// own init and kernels. On a GPU only (the SIMT emulation has no
// NCCL; its backend sums through host memory); skipped where libnccl.so.2 is not installed. And
// the communicator's memory, made and measured before training's first step.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "src/engine/backend.h"
#include "tests/cuda/cuda_test_support.h"
#ifndef ADACC_SIMT_EMULATION
#include "src/cuda/nccl_collectives.h"
#endif

namespace adacc::test {
namespace {

TEST(CudaNccl, CollectivesOverOneRankKeepTheValues) {
#ifdef ADACC_SIMT_EMULATION
    GTEST_SKIP() << "NCCL runs on a GPU only (the emulated backend sums through host memory)";
#else
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!nccl_available()) GTEST_SKIP() << "libnccl.so.2 is not installed here";
    Backend& backend = cuda_backend();
    std::vector<float> values(1000);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 100.0f;
    const Arena buffer(backend, values.size() * sizeof(float));
    backend.copy_to_device(buffer.data(), values.data(), values.size() * sizeof(float));
    // Bytes 0x3f: every float of the first 100 becomes 0x3f3f3f3f (0.7470...), queued on the compute
    // stream; the sums must read them, so they wait for it.
    backend.memset(buffer.data(), 0x3f, 100 * sizeof(float));
    for (std::size_t i = 0; i < 100; ++i) std::memset(&values[i], 0x3f, sizeof(float));
    const SumPiece pieces[] = {{buffer.as<float>(), 600, -1}, {buffer.as<float>() + 600, 400, 0}};
    ASSERT_TRUE(backend.start_sums(pieces));
    backend.finish_sums();
    ASSERT_TRUE(backend.all_gather(Act(buffer.as<float>()), values.size()));
    std::vector<float> back(values.size());
    backend.copy_to_host(back.data(), buffer.data(), back.size() * sizeof(float));
    EXPECT_EQ(back, values);

    std::vector<bf16> halves(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) halves[i] = to_bf16(values[i]);
    const Arena bf16_buffer(backend, halves.size() * sizeof(bf16));
    backend.copy_to_device(bf16_buffer.data(), halves.data(), halves.size() * sizeof(bf16));
    ASSERT_TRUE(backend.all_gather(Act(bf16_buffer.as<bf16>()), halves.size()));
    std::vector<bf16> halves_back(halves.size());
    backend.copy_to_host(halves_back.data(), bf16_buffer.data(), halves_back.size() * sizeof(bf16));
    for (std::size_t i = 0; i < halves.size(); ++i) EXPECT_EQ(halves_back[i].bits, halves[i].bits) << "i=" << i;
#endif
}

// Training makes the communicator at its start (Backend::start_collectives, which the process
// group calls at world size > 1) and measures it, so the first gradient sum allocates nothing
// more: here a communicator of one rank, made directly. Under the emulation, which has no NCCL,
// the measurement is that of nothing: 0 bytes, measured.
TEST(CudaNccl, TheCommunicatorIsMadeAndMeasuredAtStart) {
    ADACC_REQUIRE_CUDA_DEVICE();
    Backend& backend = cuda_backend();
    EXPECT_FALSE(cuda_collectives_overhead(2).measured) << "the estimate until training starts its collectives";
    backend.start_collectives();
    const CudaFixedOverhead nccl = cuda_collectives_overhead(2);
    EXPECT_TRUE(nccl.measured);
#ifdef ADACC_SIMT_EMULATION
    EXPECT_EQ(nccl.bytes, 0u);
#else
    if (!nccl_available()) GTEST_SKIP() << "libnccl.so.2 is not installed here";
    const Arena buffer(backend, 1 << 20);
    const std::size_t free_before = backend.free_memory();
    const SumPiece pieces[] = {{buffer.as<float>(), (1 << 20) / sizeof(float), -1}};
    ASSERT_TRUE(backend.start_sums(pieces));
    backend.finish_sums();
    backend.synchronize();
    // The first sum makes the backend's communication stream and two events (no device memory to
    // speak of): NCCL's buffers were made with the communicator. At one rank there are no peers, so
    // this shows the wiring; the buffers of real connections show in a 2-GPU run's memory line.
    const std::size_t free_after = backend.free_memory();
    EXPECT_LE(free_before > free_after ? free_before - free_after : 0, std::size_t{2} << 20)
        << "NCCL allocated at the first sum";
#endif
}

}  // namespace
}  // namespace adacc::test
