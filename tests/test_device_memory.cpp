// `adacc memory --device cuda` sizes a model's device arenas on a machine without a GPU (and in
// a build without CUDA): the printed totals are checked against sizes computed here from the
// GPT-2 parameter count formula and the CUDA backend's documented extras (staged token ids, the
// fixed cuBLASLt workspace and reduction scratch of kernels/cuda/device_sizes.h).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "kernels/cuda/device_sizes.h"
#include "src/common/units.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/memory_report.h"
#include "tests/test_support.h"

namespace adacc::test {
namespace {

// GPT-2's parameters: token embedding (padded vocab) and positions, per layer 12 C^2 + 13 C
// (qkv, proj, fc, fcproj weights and biases, two layernorms), the final layernorm.
std::size_t gpt2_parameters(const GPTConfig& c) {
    const std::size_t C = c.n_embd, L = c.n_layer;
    return c.padded_vocab_size() * C + static_cast<std::size_t>(c.max_seq_len) * C + L * (12 * C * C + 13 * C) + 2 * C;
}

TEST(DeviceMemory, CudaArenasFollowTheFormulas) {
    for (const char* preset : {"gpt-345m", "gpt-4.7b"}) {
        const GPTConfig cfg = *gpt_preset(preset);
        const int B = 8, T = 1024;
        const std::size_t N = static_cast<std::size_t>(B) * T, P = gpt2_parameters(cfg);
        for (MemoryMode mode : fixed_memory_modes()) {
            const ModelMemory cpu = memory_for_mode(cfg, B, T, mode, Device::cpu);
            const ModelMemory cuda = memory_for_mode(cfg, B, T, mode, Device::cuda);
            EXPECT_EQ(cuda.parameters, 4 * P) << preset;
            EXPECT_EQ(cuda.gradients, 4 * P);
            EXPECT_EQ(cuda.optimizer_state, 8 * P);
            EXPECT_EQ(cuda.tape, cpu.tape);
            EXPECT_EQ(cuda.materialize, cpu.materialize);
            EXPECT_EQ(cuda.transients, cpu.transients);
            // logits (one classifier chunk: GPTConfig::classifier_rows of the N tokens x Vp fp32), per-token losses and
            // the loss and norm scalars (one 64-byte aligned slot), plus the staged token ids and targets.
            EXPECT_EQ(cuda.logits, cfg.classifier_rows(static_cast<int>(N), 4) * cfg.padded_vocab_size() * 4 + N * 4 +
                                       64 + 2 * N * sizeof(int));
            // The CUDA context's fixed overhead is measured where there is a GPU, else the estimate.
            const CudaFixedOverhead context = cuda_fixed_overhead();
            if (!cuda_device_info().available) {
                EXPECT_FALSE(context.measured);
                EXPECT_EQ(context.bytes, kCudaContextEstimateBytes);
            }
            EXPECT_EQ(cuda.backend, cuda::kBlasWorkspaceBytes + cuda::kReductionScratchBytes + context.bytes);
            EXPECT_EQ(cuda.total(), cpu.total() + 2 * N * sizeof(int) + cuda.backend);
        }
    }
}

// Training with cuDNN's attention counts its device memory as the backend's: the deterministic
// backward's bf16 B x H x T x T matrix (T = 1024 fills whole 64 x 128 tiles), 4 bytes per
// (batch, head, position) and 256 bytes, as cuDNN asked on an H200, and the dropout seed and offset
// (16 bytes); with training.deterministic = false an fp32 B x H x T x hs dQ accumulator in place of
// the matrix, as cuDNN's frontend sizes it (kernels/cuda/device_sizes.h).
TEST(DeviceMemory, CudnnAttentionsWorkspaceIsCountedInTraining) {
    GPTConfig cfg = *gpt_preset("gpt-345m");
    const std::size_t B = 8, T = 1024, H = cfg.n_head, hs = cfg.n_embd / cfg.n_head;
    cfg.attention = AttentionImpl::fused;
    const ModelMemory fused = memory_for_mode(cfg, B, T, MemoryMode::none, {Device::cuda, DType::bf16});
    cfg.attention = AttentionImpl::cudnn;
    const ModelMemory cudnn = memory_for_mode(cfg, B, T, MemoryMode::none, {Device::cuda, DType::bf16});
    EXPECT_EQ(cudnn.backend - fused.backend, 2 * B * H * T * T + 4 * B * H * T + 256 + 16);
    EXPECT_EQ(cudnn.total() - cudnn.backend, fused.total() - fused.backend) << "the same arenas otherwise";
    ComputeTarget atomics(Device::cuda, DType::bf16);
    atomics.deterministic = false;
    const ModelMemory fast = memory_for_mode(cfg, B, T, MemoryMode::none, atomics);
    EXPECT_EQ(fast.backend - fused.backend, 4 * B * H * T * hs + 4 * B * H * T + 256 + 16);
    EXPECT_EQ(fast.total() - fast.backend, fused.total() - fused.backend) << "the same arenas otherwise";
    // Where the dQ accumulator is the larger (T = 64 < 2 hs = 128: 64 x 128 tiles of bf16 against
    // 64 x 64 fp32), a deterministic run reserves it too: cuDNN runs the other backward for a shape
    // it has no deterministic one for.
    cfg.n_embd = 2 * cfg.n_head * 64;  // hs = 128
    cfg.attention = AttentionImpl::fused;
    const std::size_t short_T = 64, wide_hs = 128;
    const ModelMemory wide_fused = memory_for_mode(cfg, B, short_T, MemoryMode::none, {Device::cuda, DType::bf16});
    cfg.attention = AttentionImpl::cudnn;
    const ModelMemory wide = memory_for_mode(cfg, B, short_T, MemoryMode::none, {Device::cuda, DType::bf16});
    ASSERT_GT(4 * wide_hs * short_T, 2 * short_T * 128) << "the shape must favour the dQ accumulator";
    EXPECT_EQ(wide.backend - wide_fused.backend, 4 * B * H * short_T * wide_hs + 4 * B * H * short_T + 256 + 16);
    // On the CPU the flag changes nothing (no cuDNN there; the fused kernels are deterministic).
    cfg.attention = AttentionImpl::fused;
    ComputeTarget cpu_atomics;
    cpu_atomics.deterministic = false;
    EXPECT_EQ(memory_for_mode(cfg, B, T, MemoryMode::none, cpu_atomics).total(),
              memory_for_mode(cfg, B, T, MemoryMode::none).total());
}

// bf16 (CUDA's default dtype): the fp32 masters, gradients and AdamW state stay, a bf16 copy of
// the weights joins them (2 bytes per parameter), and every activation element halves while
// layernorm statistics (fp32) and dropout masks (bytes) stay. In keep-all (none) the tape holds,
// per layer, x, ln1, qkv (3C), atty, x2, ln2, fch (4C), fch_gelu (4C) — 16 N C elements — and
// the B H T^2 probabilities, plus the last block's output and lnf (N C each): each element saves
// 2 bytes. The logits (N x Vp) are activations too.
TEST(DeviceMemory, Bf16ArenasFollowTheFormulas) {
    for (const char* preset : {"gpt-345m", "gpt-4.7b"}) {
        const GPTConfig cfg = *gpt_preset(preset);
        const int B = 8, T = 1024;
        const std::size_t N = static_cast<std::size_t>(B) * T, P = gpt2_parameters(cfg), C = cfg.n_embd;
        const ModelMemory f32 = memory_for_mode(cfg, B, T, MemoryMode::none, {Device::cuda, DType::f32});
        const ModelMemory b16 = memory_for_mode(cfg, B, T, MemoryMode::none, {Device::cuda, DType::bf16});
        EXPECT_EQ(b16.parameters, 4 * P) << preset;
        EXPECT_EQ(b16.working_weights, 2 * P);
        EXPECT_EQ(b16.gradients, 4 * P);
        EXPECT_EQ(b16.optimizer_state, 8 * P);
        const std::size_t tape_elements =
            cfg.n_layer * (16 * N * C + static_cast<std::size_t>(B) * cfg.n_head * T * T) + 2 * N * C;
        EXPECT_EQ(f32.tape - b16.tape, 2 * tape_elements) << preset;
        EXPECT_EQ(b16.logits, cfg.classifier_rows(static_cast<int>(N), 2) * cfg.padded_vocab_size() * 2 + N * 4 + 64 +
                                  2 * N * sizeof(int));
        EXPECT_EQ(f32.working_weights, 0u);
    }
}

// A job of several ranks holds NCCL's communicator on each GPU: its buffers count in the backend's
// fixed memory, measured when training starts where there is a GPU, else the estimate: NCCL's
// default buffer per connection and protocol (Simple 4 MiB = 4,194,304 bytes, LL128 4,915,200, LL
// 524,288: 9,633,792 bytes), times 32 channels of two connections. One rank has no collectives.
TEST(DeviceMemory, NcclBuffersCountInAJobOfSeveralRanks) {
    EXPECT_EQ(kNcclConnectionBytes, 9633792u);
    EXPECT_EQ(kNcclBuffersEstimateBytes, 64u * 9633792u);
    const DeviceTraits one = device_traits({Device::cuda, DType::bf16, 1, 1});
    EXPECT_EQ(one.collectives.bytes, 0u);
    for (const int shards : {1, 2}) {
        const DeviceTraits two = device_traits({Device::cuda, DType::bf16, shards, 2});
        EXPECT_EQ(two.resident_bytes - one.resident_bytes, two.collectives.bytes);
        if (!cuda_device_info().available) {
            EXPECT_FALSE(two.collectives.measured);
            EXPECT_EQ(two.collectives.bytes, kNcclBuffersEstimateBytes);
        }
    }
    EXPECT_EQ(device_traits({Device::cpu, DType::f32, 1, 2}).resident_bytes, 0u) << "MPI's buffers are host memory";

    const auto r = run_adacc(std::string("memory --device cuda --world-size 2 --config ") + ADACC_SOURCE_DIR +
                             "/configs/gpt-345m.toml --set training.batch_size=8");
    ASSERT_EQ(r.status, 0) << r.output;
    if (!cuda_device_info().available) {
        EXPECT_NE(r.output.find("backend fixed memory 1.12 GiB (cuBLASLt workspace, reduction scratch, the CUDA "
                                "context 512.00 MiB estimated: no GPU here to measure it, NCCL's buffers 588.00 MiB "
                                "estimated: training measures them at start-up)"),
                  std::string::npos)
            << r.output;
    }
}

TEST(DeviceMemory, MemoryCommandPrintsDeviceArenasWithoutAGpu) {
    // --device cuda alone is bf16 (model.dtype = auto); --dtype fp32 is CUDA's exact mode.
    for (const DType dtype : {DType::bf16, DType::f32})
        for (const char* name : {"gpt-345m", "gpt-4.7b"}) {
            const bool bf16 = dtype == DType::bf16;
            const auto r = run_adacc(std::string("memory --device cuda --config ") + ADACC_SOURCE_DIR + "/configs/" +
                                     name + ".toml --set training.batch_size=8 --set training.seq_len=1024" +
                                     (bf16 ? "" : " --dtype fp32"));
            ASSERT_EQ(r.status, 0) << r.output;
            EXPECT_NE(r.output.find(
                          bf16 ? "device cuda, dtype bf16: 18 bytes per parameter (fp32 weights 4 + their bf16 copy 2"
                               : "device cuda, dtype fp32: 16 bytes per parameter (fp32 weights 4,"),
                      std::string::npos)
                << r.output;
            EXPECT_NE(r.output.find(bf16 ? "2 bytes per activation element" : "4 bytes per activation element"),
                      std::string::npos)
                << r.output;
            // 32 MiB of cuBLASLt workspace, 16 MiB of reduction scratch and the context's estimate.
            EXPECT_NE(r.output.find("backend fixed memory 560.00 MiB (cuBLASLt workspace, reduction scratch, the CUDA "
                                    "context 512.00 MiB estimated: no GPU here to measure it)"),
                      std::string::npos)
                << r.output;
            // model.attention unset: cuDNN's on CUDA in bf16 when libcudnn.so.9 loads (this build opens it
            // to decide), else materialized (src/config/config.h: resolve_default_attention).
            GPTConfig cfg = *gpt_preset(name);
            if (bf16 && cudnn_problem().empty()) cfg.attention = AttentionImpl::cudnn;
            for (MemoryMode mode : fixed_memory_modes()) {
                const ModelMemory m = memory_for_mode(cfg, 8, 1024, mode, {Device::cuda, dtype});
                std::istringstream lines(r.output);
                bool found = false;
                for (std::string line; std::getline(lines, line);) {
                    std::istringstream row(line);
                    std::string first;
                    row >> first;
                    if (first != memory_mode_name(mode)) continue;
                    found = true;
                    EXPECT_NE(line.find(format_bytes(m.total())), std::string::npos) << line;
                    EXPECT_NE(line.find(format_bytes(m.parameters + m.working_weights)), std::string::npos) << line;
                    EXPECT_NE(line.find(format_bytes(m.backend)), std::string::npos) << line;
                }
                EXPECT_TRUE(found) << memory_mode_name(mode) << " row missing:\n" << r.output;
            }
        }
}

}  // namespace
}  // namespace adacc::test
