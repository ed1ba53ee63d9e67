// The planned modes (adacc, recompute-opt) on the CUDA backend (emulated in CI, the GPU under the
// `cuda` label), against the CPU backend: the profiler's slice measured on the device (events for
// the times, the device's codecs and error reduction for the rest; its ops are its own graph's)
// gives the CPU's profile, in fp32 and — errors measured on bf16 tensors — in bf16; and a whole
// run of `adacc train` on CUDA, monitor and re-planning included, follows the same run on the
// CPU: the same plans, the same re-plans at the same steps for the same reasons, the same losses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/adacc/profiler.h"
#include "src/config/config.h"
#include "src/engine/backend.h"
#include "src/engine/weight_init.h"
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
constexpr std::uint64_t kProfileSeed = 7;  // the profiled weights' and dropout's

Profile profile_on(const ComputeTarget& target, const std::vector<int>& tokens) {
    return profile_block(planned_model(), kB, kB, kT, tokens, ProfileWeights{nullptr, kProfileSeed, {}}, target);
}

// The forward profile_block measures its codecs on (its slice, weights and dropout; the measured
// batch is the planned one), run once more on `target`: its tape holds the very tensors the
// profile's codecs compressed (the kernels are deterministic, on the device too). Should it drift
// from profile_block's, the CPU profile's own counts leave the ranges built on it.
std::unique_ptr<GPTModel> profiled_forward(const ComputeTarget& target, const std::vector<int>& tokens) {
    const GPTConfig slice = profile_slice(planned_model());
    auto model = std::make_unique<GPTModel>(slice, kB, kT, ActivationPlan(BlockGraph(slice, kB, kT), slice.n_layer),
                                            CodecParams{}, ModelUse::training, target);
    init_weights_with_stress(*model, kProfileSeed, {}, planned_model().n_layer);
    model->forward(tokens.data(), tokens.data(), kB, kT, DropoutContext{kProfileSeed, 1, 0, true}, 0.0f);
    return model;
}

// Layer `layer`'s `kind` (fp32) off the model's tape, on the host.
std::vector<float> tape_tensor(const GPTModel& model, int layer, TensorKind kind) {
    std::vector<float> host(model.block().tensor(kind).numel);
    model.backend().copy_to_host(host.data(), model.tape().data(*model.tape().find(layer, kind)),
                                 host.size() * sizeof(float));
    return host;
}

// The outlier counts (channels kept by the outlier codec) a tensor x' may give when it differs
// from x, whose Z-scores the codec computes, by rounding. The codec (select_outliers) sums
// Sh_j = sum_i |x_ij| in double, Z_j = (Sh_j - mean) / std over the n = cols channels, and keeps
// min(#{Z_j > z}, cap) of them. With E_j = sum_i |x'_ij - x_ij| (||a'| - |a|| <= |a' - a|):
//   Sh'_j = Sh_j + e_j, |e_j| <= E_j; the deviations d_j = Sh_j - mean move by e_j - mean(e),
//   at most E_j + mean(E); std = |d| / sqrt(n) moves by at most |e - mean(e)| / sqrt(n) <= R =
//   sqrt(mean(E^2)) (centering does not lengthen a vector); and Z'_j - Z_j = (d'_j - d_j) / std'
//   - Z_j (std' - std) / std', so |Z'_j - Z_j| <= (E_j + mean(E) + |Z_j| R) / (std - R).
// Each side's own double arithmetic adds at most gamma(rows + 2 cols + 4) (Sh_max + mean) / std
// (1 + |Z_j|) (Higham's gamma(m) = m u / (1 - m u), u = 2^-53: every value is a sum of at most
// rows + cols terms no larger than Sh_max + mean, then a square root and two divisions); delta_j
// is the first bound plus twice this one. A channel within delta_j of the cutoff may fall either
// side, so the count lies between the channels above z + delta_j and those above z - delta_j;
// where none is that close, the two are equal and the count is exact. E_j is measured here on
// the device's forward, the very one its profile ran (deterministic kernels); under the emulation
// it is at most 6e-6 against channel spreads (std) of 0.1 to 4, and every count is exact.
struct OutlierRange {
    std::size_t lo = 0, hi = 0;
};

OutlierRange outlier_count_range(const std::vector<float>& x, const std::vector<float>& x_other, std::size_t rows,
                                 std::size_t cols, const CodecParams& params) {
    std::vector<double> sh(cols, 0.0), err(cols, 0.0);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
            sh[j] += std::fabs(static_cast<double>(x[i * cols + j]));
            err[j] += std::fabs(static_cast<double>(x_other[i * cols + j]) - static_cast<double>(x[i * cols + j]));
        }
    const double n = static_cast<double>(cols);
    double mean = 0.0, mean_err = 0.0, mean_err2 = 0.0;
    for (std::size_t j = 0; j < cols; ++j) mean += sh[j], mean_err += err[j], mean_err2 += err[j] * err[j];
    mean /= n, mean_err /= n;
    double var = 0.0;
    for (std::size_t j = 0; j < cols; ++j) var = std::fma(sh[j] - mean, sh[j] - mean, var);
    const double std_dev = std::sqrt(var / n), R = std::sqrt(mean_err2 / n);
    const double m = static_cast<double>(rows + 2 * cols + 4), u = std::ldexp(1.0, -53), gamma = m * u / (1 - m * u);
    const double rounding = 2 * gamma * (*std::max_element(sh.begin(), sh.end()) + mean) / std_dev;
    EXPECT_GT(std_dev, R) << "the tensors differ by as much as their channels do: no bound on Z";
    OutlierRange range;
    for (std::size_t j = 0; j < cols; ++j) {
        const double Z = (sh[j] - mean) / std_dev;
        const double delta = (err[j] + mean_err + std::fabs(Z) * R) / (std_dev - R) + rounding * (1 + std::fabs(Z));
        range.lo += Z - delta > params.outlier_z;
        range.hi += Z + delta > params.outlier_z;
    }
    const std::size_t cap = outlier_channel_cap(cols, params);
    return {std::min(range.lo, cap), std::min(range.hi, cap)};
}

// Per profiled tensor kind, per layer: the outlier counts the device's forward may give, around
// the CPU's tensors.
using OutlierRanges = std::map<TensorKind, std::vector<OutlierRange>>;

OutlierRanges outlier_ranges(const GPTModel& cpu, const GPTModel& device) {
    OutlierRanges ranges;
    for (const TensorInfo& t : cpu.block().tensors()) {
        if (!is_profiled(t) || t.dtype != DType::f32) continue;
        const std::size_t rows = tensor_rows(cpu.config(), t.kind, kB, kT), cols = t.numel / rows;
        for (int l = 0; l < cpu.config().n_layer; ++l)
            ranges[t.kind].push_back(outlier_count_range(tape_tensor(cpu, l, t.kind), tape_tensor(device, l, t.kind),
                                                         rows, cols, CodecParams{}));
    }
    return ranges;
}

// The profile keeps the largest blob and outlier fraction over layers (measure_codec): some count
// k_l within each layer's range must give both.
bool outlier_counts_explain(const CodecMeasurement& m, const std::vector<OutlierRange>& layers, std::size_t rows,
                            std::size_t cols) {
    std::vector<std::size_t> k;
    for (const OutlierRange& r : layers) k.push_back(r.lo);
    while (true) {
        std::size_t bytes = 0, most = 0;
        for (std::size_t kl : k) {
            bytes = std::max(bytes, codec_bytes(m.codec, rows, cols, CodecParams{}, kl));
            most = std::max(most, kl);
        }
        if (bytes == m.compressed_bytes && double(most) / double(cols) == m.outlier_fraction) return true;
        std::size_t l = 0;  // the next combination, odometer-wise
        while (l < k.size() && k[l] == layers[l].hi) k[l] = layers[l].lo, ++l;
        if (l == k.size()) return false;
        ++k[l];
    }
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

// In fp32 blob sizes and outlier fractions equal the CPU's, but the outlier codec's: those must
// come from outlier counts within `outliers`, the counts the fp32 device's tensors can give
// (exactly the CPU's where no channel is within rounding of the cutoff).
void expect_same_profile(const Profile& device, const Profile& cpu, DType dtype, const OutlierRanges& outliers) {
    // Each backend's ops: CUDA's have the GELU in the matmuls' epilogues, no gelu op.
    ASSERT_EQ(device.op_names, op_names(BlockGraph(planned_model(), kB, kT, dtype, block_fusions(Device::cuda))));
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
            if (dtype == DType::f32 && cm.codec == Codec::outlier_int4) {
                const std::size_t rows = tensor_rows(planned_model(), c.kind, kB, kT), cols = c.bytes / 4 / rows;
                const std::vector<OutlierRange>& layers = outliers.at(c.kind);
                std::string counts;
                for (const OutlierRange& r : layers)
                    counts += " [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
                SCOPED_TRACE("outlier counts per layer within" + counts + " of " + std::to_string(cols));
                EXPECT_TRUE(outlier_counts_explain(cm, layers, rows, cols)) << "the CPU's, from its own tensors";
                EXPECT_TRUE(outlier_counts_explain(dm, layers, rows, cols))
                    << "the device's: " << dm.compressed_bytes << " bytes, outlier fraction " << dm.outlier_fraction;
            } else if (dtype == DType::f32) {
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
    const OutlierRanges outliers = outlier_ranges(*profiled_forward(ComputeTarget{}, tokens),
                                                  *profiled_forward({Device::cuda, DType::f32}, tokens));
    for (DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dtype));
        expect_same_profile(profile_on(ComputeTarget{Device::cuda, dtype}, tokens), cpu, dtype, outliers);
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
    const BlockGraph block(cfg, kB, kT, target.activation, block_fusions(target.device));
    for (auto& t : p.tensors) t.bytes = block.tensor(t.kind).bytes();
    // The target's ops: on CUDA there is no gelu op (fc runs the GELU in its epilogue), so
    // recomputing fch or fch_gelu re-runs fc. Those ops are priced out of recomputation
    // (write_shared_inputs), every other op takes the same time on both, so both targets plan
    // alike (TrainingRunsFollowTheCpuRunThroughAReplan compares their plans).
    const Profile cpu = p;
    p.op_names.clear(), p.op_ms.clear(), p.op_spread_ms.clear();
    for (const OpInfo& op : block.ops())
        for (std::size_t i = 0; i < cpu.op_names.size(); ++i)
            if (cpu.op_names[i] == op.name) {
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
// whatever the machine's timings), at the run's initial weights. The ops CUDA's graph fuses (fc
// with gelu) are priced out of recomputation altogether: CUDA re-runs its fused op once for both
// outputs where the CPU runs two ops, so with them in play the two graphs' optimal plans could
// differ; without them every plan costs the same on both.
void write_shared_inputs(const std::filesystem::path& dir) {
    test::write_random_shard(dir / "train.bin", 4000, 97, 2);
    // The shard's first batch: the same generator's first kB x kT ids.
    Profile p = profile_on(ComputeTarget{}, test::random_tokens(kB * kT, 97, 2));
    favour_compression(p);
    for (std::size_t i = 0; i < p.op_names.size(); ++i)
        if (p.op_names[i] == "fc" || p.op_names[i] == "gelu") p.op_ms[i] = 1e4;  // 100x favour_compression's ops
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
