// The planned modes (adacc, recompute-opt) on the CUDA backend (emulated in CI, the GPU under the
// `cuda` label), against the CPU backend: the profiler's slice measured on the device (events for
// the times, the device's codecs and error reduction for the rest; its ops are its own graph's)
// gives the CPU's profile, in fp32 and — errors measured on bf16 tensors — in bf16; and a whole
// run of `adacc train` on CUDA, monitor and re-planning included, follows the same run on the
// CPU: the same plans, the same re-plans at the same steps for the same reasons, the same losses.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "src/adacc/profiler.h"
#include "src/config/config.h"
#include "src/engine/backend.h"
#include "src/train/trainer.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/test_support.h"

namespace adacc::test {
namespace {

// Small enough for the emulation, wide enough (64 channels) for outlier channels to stand out.
GPTConfig planned_model() {
    GPTConfig c;
    c.n_layer = 2, c.n_embd = 64, c.n_head = 2, c.vocab_size = 97, c.max_seq_len = 16, c.dropout = 0.1f;
    return c;
}
constexpr int kB = 2, kT = 16;

Profile profile_on(const ComputeTarget& target, const std::vector<int>& tokens) {
    return profile_block(planned_model(), kB, kB, kT, tokens, ProfileWeights{nullptr, 7, {}}, target);
}

// Codec errors measured on the device's tensors: fp32 within 1e-3 relative of the CPU's (the
// tensors differ by ~1e-6 in fp32, which moves a few INT4 roundings), bf16 within 5% (bf16
// rounding of the input adds ~0.4% to INT4's ~10%; a bf16 tensor read as fp32 would be far off).
// The op names of a block.
std::vector<std::string> op_names(const BlockGraph& block) {
    std::vector<std::string> names;
    for (const OpInfo& op : block.ops()) names.push_back(op.name);
    return names;
}

void expect_same_profile(const Profile& device, const Profile& cpu, DType dtype) {
    // Each backend's ops: CUDA's have the GELU in the matmuls' epilogues, no gelu op.
    ASSERT_EQ(device.op_names, op_names(BlockGraph(planned_model(), kB, kT, dtype, gelu_epilogue(Device::cuda))));
    ASSERT_EQ(cpu.op_names, op_names(BlockGraph(planned_model(), kB, kT)));
    double device_ms = 0;
    for (double ms : device.op_ms) {
        EXPECT_GE(ms, 0.0);
        device_ms += ms;
    }
    EXPECT_GT(device_ms, 0.0) << "the device's op times are all zero";
    ASSERT_EQ(device.tensors.size(), cpu.tensors.size());
    const double error_rel = dtype == DType::f32 ? 1e-3 : 5e-2;
    for (std::size_t i = 0; i < cpu.tensors.size(); ++i) {
        const TensorProfile &d = device.tensors[i], &c = cpu.tensors[i];
        SCOPED_TRACE(c.name);
        ASSERT_EQ(d.kind, c.kind);
        const bool mask = BlockGraph(planned_model(), kB, kT).tensor(c.kind).dtype == DType::u8;
        EXPECT_EQ(d.bytes, mask ? c.bytes : c.bytes / 4 * dtype_size(dtype)) << "full size in the device's dtype";
        ASSERT_EQ(d.codecs.size(), c.codecs.size());
        for (std::size_t j = 0; j < c.codecs.size(); ++j) {
            const CodecMeasurement &dm = d.codecs[j], &cm = c.codecs[j];
            SCOPED_TRACE(codec_name(cm.codec));
            EXPECT_EQ(dm.codec, cm.codec);
            EXPECT_EQ(dm.compressed_bound, cm.compressed_bound);
            if (dtype == DType::f32) {
                EXPECT_EQ(dm.compressed_bytes, cm.compressed_bytes);
                EXPECT_EQ(dm.outlier_fraction, cm.outlier_fraction);
            }
            EXPECT_NEAR(dm.relative_error, cm.relative_error, error_rel * cm.relative_error);
            ASSERT_EQ(dm.layer_errors.size(), cm.layer_errors.size());
            for (std::size_t l = 0; l < cm.layer_errors.size(); ++l)
                EXPECT_NEAR(dm.layer_errors[l], cm.layer_errors[l], error_rel * cm.layer_errors[l]) << "layer " << l;
            EXPECT_GE(dm.compress_ms, 0.0);
            EXPECT_GE(dm.decompress_ms, 0.0);
        }
    }
}

TEST(CudaAdacc, TheProfilerMeasuresTheCpusProfileOnTheDevice) {
    ADACC_REQUIRE_CUDA_DEVICE();
    const std::vector<int> tokens = random_tokens(kB * kT, planned_model().vocab_size, 3);
    const Profile cpu = profile_on(ComputeTarget{}, tokens);
    for (DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dtype));
        expect_same_profile(profile_on(ComputeTarget{Device::cuda, dtype}, tokens), cpu, dtype);
    }
}

struct RunRecord {
    std::vector<float> losses;
    std::vector<std::pair<int, std::string>> replans;  // (step, the tensor the reason names)
    ActivationPlan final_plan;
    std::size_t final_total = 0;
};

// `adacc train` in mode adacc on `target`, from a shared profile (so both backends start from the
// same plan), with a budget of compressing everything by the Adacc codecs as the target allocates
// it. At step 5, five of ln2's 64 channels become 50x larger in every layer (through the host
// API, as a user's hook would on any backend): outlier channels appear in the residual stream,
// the sampled statistics leave the plan's, and the monitor re-plans. Errors near the tolerance
// do not re-plan (memory.max_codec_error 0.3), so every re-plan is the injection's.
// The shared profile (write_shared_inputs) as `target` names it: a profile says which device and
// dtype it was measured on, and a run refuses another's. Its errors and times stand for every
// target's, so every run starts from the same plan; full sizes are the target dtype's.
std::filesystem::path shared_profile_for(const std::filesystem::path& dir, const ComputeTarget& target) {
    const GPTConfig cfg = planned_model();
    Profile p = Profile::load(dir / "profile.json", cfg, kB, kT, ComputeTarget{}, {});
    p.block.device = target.device;
    p.block.dtype = target.activation;
    const BlockGraph block(cfg, kB, kT, target.activation, gelu_epilogue(target.device));
    for (auto& t : p.tensors) t.bytes = block.tensor(t.kind).bytes();
    // The target's ops: on CUDA there is no gelu op (fc runs the GELU in its epilogue), so
    // recomputing fch or fch_gelu re-runs fc. Every op of the shared profile takes the same time
    // (favour_compression), so each of the two costs on CUDA what it costs on the CPU, and both
    // targets plan alike.
    const Profile cpu = p;
    p.op_names.clear(), p.op_ms.clear(), p.op_spread_ms.clear();
    for (const OpInfo& op : block.ops())
        for (std::size_t i = 0; i < cpu.op_names.size(); ++i)
            if (cpu.op_names[i] == op.name) {
                EXPECT_EQ(cpu.op_ms[i], cpu.op_ms[0]) << "every op takes the same time";
                p.op_names.push_back(op.name);
                p.op_ms.push_back(cpu.op_ms[i]);
                p.op_spread_ms.push_back(cpu.op_spread_ms[i]);
            }
    const auto file = dir / ("profile_" + std::string(device_name(target.device)) + "_" +
                             std::string(dtype_name(target.activation)) + ".json");
    p.save(file);
    return file;
}

RunRecord train_adacc(const std::filesystem::path& dir, const std::string& name, const ComputeTarget& target) {
    const GPTConfig cfg = planned_model();
    const std::filesystem::path profile_file = shared_profile_for(dir, target);
    const Profile profile = Profile::load(profile_file, cfg, kB, kT, target, {});
    const std::uint64_t budget = everything_compressed_memory(cfg, kB, kT, profile, target).total() + 4096;
    RunConfig config;
    config.model = cfg;
    config.dtype = model_dtype_name(target.activation);
    config.training.device = device_name(target.device);
    config.training.batch_size = kB, config.training.seq_len = kT, config.training.steps = 10;
    config.lr.max = 1e-3f, config.lr.warmup_steps = 2;
    config.data.train = (dir / "train.bin").string();
    config.memory.mode = "adacc";
    config.memory.budget = std::to_string(budget);
    config.memory.profile = profile_file.string();
    config.memory.codecs = "paper";
    config.memory.max_codec_error = 0.3f;  // re-plans come from the injection, not from errors near a tolerance
    config.memory.monitor_max_interval = 2;
    config.memory.min_replan_steps = 2;
    config.logging.run_dir = (dir / name).string();
    config.logging.print_every = 100;
    validate_config(config);

    Trainer trainer(config, std::nullopt);
    EXPECT_EQ(trainer.model().backend().device(), target.device);
    EXPECT_EQ(trainer.model().activation_dtype(), target.activation);
    EXPECT_EQ(trainer.model().plan().at(0, TensorKind::ln2).policy, Policy::compress) << "the profile favours it";
    trainer.set_step_hook([](int step, GPTModel& model) {
        if (step != 5) return;
        std::vector<float> params(model.num_params());
        model.read_arena(ModelArena::parameters, 0, params.size(), params.data());
        for (int l = 0; l < model.config().n_layer; ++l) {
            float* w = model.layout().at(params.data(), ParamId::ln2w, l);
            for (int c : {3, 17, 30, 41, 60}) w[c] *= 50.0f;
        }
        model.write_arena(ModelArena::parameters, 0, params.size(), params.data());
    });
    trainer.run();

    RunRecord record{{}, {}, trainer.model().plan(), trainer.model().memory().total()};
    EXPECT_LE(record.final_total, budget);
    std::ifstream in(dir / name / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (r.contains("loss")) record.losses.push_back(r["loss"].get<float>());
        if (!r.contains("event")) continue;
        EXPECT_LE(r["predicted_total_bytes"].get<std::uint64_t>(), budget) << line;
        const std::string reason = r["reason"];
        record.replans.emplace_back(r["step"].get<int>(), reason.substr(0, reason.find(' ')));
    }
    return record;
}

// A profile in which recomputing is expensive and compressing cheap (deterministic plans,
// whatever the machine's timings), at the run's initial weights.
void write_shared_inputs(const std::filesystem::path& dir) {
    std::mt19937 gen(2);
    std::vector<std::uint16_t> tokens(4000);
    for (auto& t : tokens) t = static_cast<std::uint16_t>(gen() % 97);
    write_token_shard(dir / "train.bin", tokens);
    Profile p = profile_on(ComputeTarget{}, std::vector<int>(tokens.begin(), tokens.begin() + kB * kT));
    favour_compression(p);
    p.save(dir / "profile.json");
}

bool same_plan(const ActivationPlan& a, const ActivationPlan& b, const BlockGraph& block, int layers) {
    for (int l = 0; l < layers; ++l)
        for (const auto& t : block.tensors())
            if (a.at(l, t.kind).policy != b.at(l, t.kind).policy || a.at(l, t.kind).codec != b.at(l, t.kind).codec)
                return false;
    return true;
}

// The steps of a run's re-plans.
std::vector<int> replan_steps(const RunRecord& run) {
    std::vector<int> steps;
    for (const auto& [step, tensor] : run.replans) steps.push_back(step);
    return steps;
}

// fp32 on both: losses within 1e-4 relative (the CUDA twins' 1e-5 per step, over ten steps
// through INT4 codecs whose roundings the ~1e-6 differences can flip), the same re-plans (step and
// the tensor blamed) and the same final plan. bf16 on CUDA: losses within 2e-2 of the fp32 CPU
// run (bf16 training follows fp32 within its precision; ten steps of it) and re-plans at the same
// steps — its statistics are bf16 tensors', so which tensor the monitor names first may differ.
TEST(CudaAdacc, TrainingRunsFollowTheCpuRunThroughAReplan) {
    ADACC_REQUIRE_CUDA_DEVICE();
    const auto dir = scratch_dir("cuda_adacc");
    write_shared_inputs(dir);
    const RunRecord cpu = train_adacc(dir, "cpu", ComputeTarget{});
    ASSERT_FALSE(cpu.replans.empty()) << "the injection should make the CPU run re-plan";
    EXPECT_GE(cpu.replans.back().first, 5) << "a re-plan after the injection";
    const GPTConfig cfg = planned_model();
    for (DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dtype));
        const RunRecord cuda = train_adacc(dir, "cuda_" + std::string(dtype_name(dtype)), {Device::cuda, dtype});
        ASSERT_EQ(cuda.losses.size(), cpu.losses.size());
        EXPECT_TRUE(all_close(cuda.losses, cpu.losses, dtype == DType::f32 ? 1e-4 : 2e-2)) << "losses";
        EXPECT_EQ(replan_steps(cuda), replan_steps(cpu)) << "re-plan steps";
        if (dtype != DType::f32) continue;
        EXPECT_EQ(cuda.replans, cpu.replans) << "re-plans (step, tensor)";
        EXPECT_TRUE(same_plan(cuda.final_plan, cpu.final_plan, BlockGraph(cfg, kB, kT), cfg.n_layer))
            << "the plans the runs ended with";
    }
}

}  // namespace
}  // namespace adacc::test
