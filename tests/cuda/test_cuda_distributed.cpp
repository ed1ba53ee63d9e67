// Data parallelism on the CUDA backend as users run it, `mpirun -np 2 adacc train` with
// training.device = "cuda" in bf16: in CI through adacc_emulated, the adacc command on the
// SIMT-emulated backend, whose collectives go through host memory (MPI); on a machine with two
// GPUs through adacc itself, whose collectives are NCCL's (one GPU per rank).
//   * ZeRO-1 with the fp32 masters sharded (each rank holds half of them and of AdamW's moments,
//     updates its half of the bf16 working copy and all-gathers it) trains as plain data
//     parallelism bit for bit: the same losses, and the same parameters in the step-6 checkpoint
//     (the masters gathered from both ranks). Gradient clipping is off: the gradient norm, summed
//     per shard and then over the ranks, is the one number computed in another order, and
//     unclipped no update reads it.
//   * Plain data parallelism with the gradient sums overlapped with backward (the default: on a
//     GPU, NCCL on the communication stream) and without (training.overlap_grads = false) give
//     the same losses and parameters bit for bit.
//   * Its step-3 checkpoint resumed on 2 ranks continues bit for bit (each rank takes its half of
//     the masters back and the working copy whole), and on one process (grad_accum 2: the same
//     global batch, the masters whole) to within bf16 precision of the uninterrupted run.
// And in one process, what a sharded model's host API does: rank 0 of 2 keeps its half of the
// masters that write_arena gives it, the working copy whole, and refuses reads of the other half.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/gpt_config.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/io/checkpoint_folder.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/test_support.h"

namespace adacc::test {
namespace {

#ifndef ADACC_SIMT_EMULATION
// NCCL takes one GPU per rank.
bool has_two_gpus() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count >= 2;
}
#endif

ProcessResult train_on_cuda(const std::filesystem::path& dir, const std::string& run, int ranks,
                            const std::string& sets) {
    return train_job(ADACC_CUDA_BINARY, dir, run, ranks,
                     "--set training.device=cuda --set model.dtype=bf16 --set optimizer.grad_clip=0 " + sets);
}

TEST(CudaDataParallel, ZeroOneWithShardedMastersTrainsAsPlainDataParallelismAndResumes) {
    ADACC_REQUIRE_CUDA_DEVICE();
#ifndef ADACC_SIMT_EMULATION
    if (!has_two_gpus()) GTEST_SKIP() << "two ranks need two GPUs (NCCL takes one per rank)";
#endif
    ADACC_REQUIRE_MPI();
    const auto dir = write_data_parallel_job("cuda_dp_zero");
    const std::string every3 = "--set checkpoint.every=3 ";
    const auto plain = train_on_cuda(dir, "plain", 2, every3);
    ASSERT_EQ(plain.status, 0) << plain.output;
    const auto zero = train_on_cuda(dir, "zero", 2, every3 + "--set training.zero=1");
    ASSERT_EQ(zero.status, 0) << zero.output;
    const auto serial = train_on_cuda(dir, "serial", 2, every3 + "--set training.overlap_grads=false");
    ASSERT_EQ(serial.status, 0) << serial.output;
    EXPECT_EQ(logged_losses(dir / "serial"), logged_losses(dir / "plain"));
    EXPECT_EQ(checkpoint_parameters(dir / "serial"), checkpoint_parameters(dir / "plain"));
    const std::map<int, double> uninterrupted = logged_losses(dir / "zero");
    ASSERT_EQ(uninterrupted.size(), 6u) << zero.output;
    EXPECT_EQ(uninterrupted, logged_losses(dir / "plain"));
    EXPECT_EQ(checkpoint_parameters(dir / "zero"), checkpoint_parameters(dir / "plain"));
    // Each rank held half of the fp32 masters beside the whole bf16 working copy (the memory line
    // counts one rank's arenas, both in its params column).
    const std::size_t n = ParameterLayout(load_config(dir / "job.toml").model).total();
    const std::string all_masters = "params " + format_bytes(n * sizeof(float) + n * sizeof(bf16)) + ",";
    const std::string half_the_masters = "params " + format_bytes((n + 1) / 2 * sizeof(float) + n * sizeof(bf16)) + ",";
    EXPECT_NE(plain.output.find(all_masters), std::string::npos) << all_masters << "\n" << plain.output;
    EXPECT_NE(zero.output.find(half_the_masters), std::string::npos) << half_the_masters << "\n" << zero.output;
    // NCCL's communicator was made at the start, on both ranks, and counted: the run's last line
    // says how much. The emulation has no NCCL (its sums go through host memory): none there.
#ifdef ADACC_SIMT_EMULATION
    EXPECT_NE(plain.output.find("NCCL's buffers 0 B, both counted"), std::string::npos) << plain.output;
#else
    EXPECT_NE(plain.output.find("NCCL's buffers "), std::string::npos) << plain.output;
    EXPECT_EQ(plain.output.find("NCCL's buffers 0 B"), std::string::npos) << "no buffers measured:\n" << plain.output;
#endif

    // Killed after step 3's checkpoint: resumed on the same 2 ranks, then on one process.
    std::filesystem::remove(checkpoint_path(dir / "zero", 6));
    const auto again = run_shell(mpirun(2) + ADACC_CUDA_BINARY + " train --resume " + (dir / "zero").string());
    ASSERT_EQ(again.status, 0) << again.output;
    EXPECT_EQ(logged_losses(dir / "zero"), uninterrupted);
    std::filesystem::remove(checkpoint_path(dir / "zero", 6));
    const auto one = run_shell(std::string(ADACC_CUDA_BINARY) + " train --resume " + (dir / "zero").string() +
                               " --set training.grad_accum=2");
    ASSERT_EQ(one.status, 0) << one.output;
    const std::map<int, double> resumed = logged_losses(dir / "zero");
    ASSERT_EQ(resumed.size(), uninterrupted.size());
    for (const auto& [step, loss] : uninterrupted) EXPECT_NEAR(resumed.at(step), loss, 1e-3 * loss) << "step " << step;
}

// A model built for 2 ZeRO-1 shards in this process of one: it is rank 0, holding the first half.
TEST(CudaZeroOne, AShardedModelKeepsItsHalfOfTheMastersAndTheWholeWorkingCopy) {
    ADACC_REQUIRE_CUDA_DEVICE();
    const GPTConfig cfg = *gpt_preset("gpt-micro");
    const int B = 1, T = 8;
    GPTModel model(cfg, B, T, ActivationPlan(BlockGraph(cfg, B, T), cfg.n_layer), {}, ModelUse::training,
                   ComputeTarget{Device::cuda, DType::bf16, 2});
    const std::size_t n = model.num_params(), half = (n + 1) / 2;
    const OptimizerShard mine = model.held(ModelArena::parameters);
    EXPECT_EQ(mine.begin, 0u);
    EXPECT_EQ(mine.count, half);
    EXPECT_EQ(model.held(ModelArena::gradients).count, n);
    EXPECT_EQ(model.memory().parameters, half * sizeof(float));

    const std::vector<float> values = random_floats(n, 5, -1.0f, 1.0f);
    model.write_arena(ModelArena::parameters, 0, n, values.data());
    std::vector<float> masters(half);
    model.read_arena(ModelArena::parameters, 0, half, masters.data());
    EXPECT_EQ(masters, std::vector<float>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(half)));
    std::vector<float> beyond(1);
    EXPECT_THROW(model.read_arena(ModelArena::parameters, half, 1, beyond.data()), std::out_of_range);

    // Forward reads the working copy, whole: every value rounded to bf16 (the other half too).
    std::vector<float> staging;
    const float* forward = model.forward_weights(staging);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(forward[i], to_float(to_bf16(values[i]))) << "parameter " << i;
    // A part written alone (token 3's embedding row) lands at its own place in both.
    const std::size_t row = 3 * static_cast<std::size_t>(cfg.n_embd), C = static_cast<std::size_t>(cfg.n_embd);
    const std::vector<float> embedding(C, 0.25f);
    model.write_arena(ModelArena::parameters, row, C, embedding.data());
    std::vector<float> back(C);
    model.read_arena(ModelArena::parameters, row, C, back.data());
    EXPECT_EQ(back, embedding);
    EXPECT_EQ(model.forward_weights(staging)[row + C - 1], 0.25f);
    EXPECT_EQ(model.forward_weights(staging)[row + C], to_float(to_bf16(values[row + C])));
}

}  // namespace
}  // namespace adacc::test
