// What the SIMT emulation (tests/simt/simt.h) promises to refuse, as a GPU would: a kernel that
// does one of these must abort under the emulation, naming the kernel and the fault, not run on a
// CPU that forgives it. Each test launches a small kernel of its own with the one fault; the pack
// kernel and the barrier kernel also run correctly launched and give their values, so a check
// that fired on everything would fail too. Emulation only: on a GPU the faults are the hardware's.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_support.h"

#ifdef ADACC_SIMT_EMULATION
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

namespace adacc::test {
namespace {

using cuda::kPack;
using cuda::Pack;

constexpr int P = kPack<float>;  // 4 floats: one 16-byte pack

// out[t * P .. t * P + P) = in[offset + t * P ..] through load_pack's 16-byte path ("aligned"
// claimed), then store_pack's.
__global__ void copy_packs_kernel(float* out, const float* in, long offset, long n) {
    float v[P];
    const long i = static_cast<long>(threadIdx.x) * P;
    cuda::load_pack(v, in + offset, i, n, true);
    cuda::store_pack(out, i, n, v, true);
}

// Copies 2 threads' packs from in + in_offset to out + out_offset, every pack whole.
std::vector<float> copy_packs(long in_offset, long out_offset) {
    alignas(16) static float in[2 * P + P], out[2 * P + P];
    for (int j = 0; j < 3 * P; ++j) in[j] = static_cast<float>(j + 1);
    ADACC_LAUNCH(copy_packs_kernel, 1, 2, 0, nullptr)(out + out_offset, in, in_offset, 2L * P);
    return std::vector<float>(out + out_offset, out + out_offset + 2 * P);
}

TEST(SimtEmulation, AlignedPacksLoadAndStore) {
    const std::vector<float> got = copy_packs(P, 0);  // a whole pack along: still 16-byte aligned
    for (int j = 0; j < 2 * P; ++j) EXPECT_EQ(got[j], static_cast<float>(P + j + 1)) << j;
}

TEST(SimtEmulation, AMisalignedPackLoadAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(copy_packs(1, 0), "copy_packs_kernel.*16-byte pack load at an address not 16-byte aligned");
}

TEST(SimtEmulation, AMisalignedPackStoreAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(copy_packs(0, 1), "copy_packs_kernel.*__stwb stored 16 bytes at an address not 16-byte aligned");
}

// store_pack into the launch's dynamic shared memory: st.global on a shared address.
__global__ void store_pack_to_shared_kernel(float* out) {
    ADACC_DYNAMIC_SHARED(float, stage);
    const float v[P] = {1, 2, 3, 4};
    cuda::store_pack(stage, 0, P, v, true);
    __syncthreads();
    out[0] = stage[0];
}

TEST(SimtEmulation, AGlobalStoreToSharedMemoryAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    float out = 0;
    EXPECT_DEATH(ADACC_LAUNCH(store_pack_to_shared_kernel, 1, 1, P * sizeof(float), nullptr)(&out),
                 "store_pack_to_shared_kernel.*st.global.*shared memory");
}

// Thread `leaver` returns before the block's barrier (none when leaver < 0); the rest wait there.
__global__ void barrier_kernel(int* out, int leaver) {
    if (static_cast<int>(threadIdx.x) == leaver) return;
    __syncthreads();
    atomicAdd(out, 1);
}

TEST(SimtEmulation, AThreadExitingWhileOthersWaitAtABarrierAborts) {
    int passed = 0;
    ADACC_LAUNCH(barrier_kernel, 1, 64, 0, nullptr)(&passed, -1);
    EXPECT_EQ(passed, 64);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(ADACC_LAUNCH(barrier_kernel, 1, 64, 0, nullptr)(&passed, 5),
                 "barrier_kernel.*barrier divergence: threads exited while others wait at __syncthreads");
}

}  // namespace
}  // namespace adacc::test
#endif
