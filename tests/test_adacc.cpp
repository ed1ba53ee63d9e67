// Mode adacc end to end: the planner's plan fits the budget as the model allocates it, an
// infeasible budget names the smallest memory any plan reaches, the monitor re-plans when
// outlier channels are injected mid-run (a step hook scales a few layernorm channels), with the
// new plan still inside the budget, and with outlier channels from the start ([stress]) the
// outlier codec beats plain INT4 on the gradients and the planner chooses it by its measured error.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "src/adacc/adacc_regulator.h"
#include "src/adacc/budget_planner.h"
#include "src/adacc/profiler.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/memory_report.h"
#include "src/engine/weight_init.h"
#include "src/train/gradient_fidelity.h"
#include "src/train/token_loader.h"
#include "src/train/trainer.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

GPTConfig small_model() {
    GPTConfig c;
    c.n_layer = 2, c.n_embd = 128, c.n_head = 4, c.vocab_size = 97, c.max_seq_len = 32, c.dropout = 0.1f;
    return c;
}

// A profile in which recomputing is expensive and compressing cheap, so that the plan compresses
// whatever it can (deterministic, whatever the machine's timings).
Profile compress_favouring_profile(const GPTConfig& cfg, int B, int T) {
    std::vector<int> tokens(static_cast<std::size_t>(B) * T);
    std::mt19937 gen(1);
    for (auto& t : tokens) t = static_cast<int>(gen() % cfg.vocab_size);
    Profile p = profile_block(cfg, B, B, T, tokens, ProfileWeights{nullptr, 1, {}}, {});
    test::favour_compression(p);
    return p;
}

TEST(AdaccPlan, FitsTheBudgetAsAllocated) {
    const GPTConfig cfg = small_model();
    const int B = 4, T = 32;
    const Profile profile = compress_favouring_profile(cfg, B, T);
    const ModelMemory none = memory_for_mode(cfg, B, T, MemoryMode::none);
    const ModelMemory full = memory_for_mode(cfg, B, T, MemoryMode::full);
    for (double fraction : {0.2, 0.4, 0.7}) {
        const std::uint64_t budget =
            full.total() + static_cast<std::uint64_t>(fraction * (none.total() - full.total()));
        const AdaccPlan plan = plan_adacc(cfg, B, T, profile, budget, true, {});
        EXPECT_LE(plan.memory.total(), budget);
        EXPECT_EQ(plan.memory.total(), GPTModel::plan_memory(cfg, B, T, plan.plan, plan.codec_params).total());
        const AdaccPlan no_compress = plan_adacc(cfg, B, T, profile, budget, false, {});
        for (int l = 0; l < cfg.n_layer; ++l)
            for (TensorKind k : no_compress.kinds) EXPECT_NE(no_compress.plan.at(l, k).policy, Policy::compress);
        EXPECT_LE(plan.result.extra_ms, no_compress.result.extra_ms + 1e-9) << "compression can only help";
    }
}

// On a GPU target the backend's fixed memory (cuBLASLt workspace, reduction scratch, the CUDA
// context: hundreds of MiB, far more than this model) counts against the budget: with just enough budget for compressing
// everything, the planner finds that plan (once, it planned as if the 48 MiB were free, and at
// such budgets gave up: every answer overflowed as allocated).
TEST(AdaccPlan, CountsTheGpuBackendsFixedMemory) {
    const GPTConfig cfg = small_model();
    const int B = 4, T = 32;
    const Profile profile = compress_favouring_profile(cfg, B, T);
    for (DType dtype : {DType::f32, DType::bf16}) {
        const ComputeTarget gpu{Device::cuda, dtype};
        const ModelMemory compressed = test::everything_compressed_memory(cfg, B, T, profile, gpu);
        ASSERT_GT(compressed.backend, compressed.static_bytes());
        const std::uint64_t budget = compressed.total() + 4096;
        const AdaccPlan plan = plan_adacc(cfg, B, T, profile, budget, true, {}, {}, gpu);
        EXPECT_LE(plan.memory.total(), budget);
        EXPECT_EQ(plan.memory.backend, compressed.backend);
    }
}

TEST(AdaccPlan, InfeasibleBudgetNamesTheSmallestPlan) {
    const GPTConfig cfg = small_model();
    const Profile profile = compress_favouring_profile(cfg, 4, 32);
    try {
        plan_adacc(cfg, 4, 32, profile, 1024, true, {});
        FAIL() << "a 1 KiB budget cannot fit";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("smallest plan needs"), std::string::npos) << e.what();
    }
}

// Training, `adacc plan` and `adacc compare` take the planner's and monitor's settings from the
// config through regulator_options, so none of them can ignore one.
TEST(AdaccPlan, RegulatorOptionsFollowTheMemorySection) {
    RunConfig config;
    const RegulatorOptions defaults = regulator_options(config, MemoryMode::adacc);
    EXPECT_TRUE(defaults.allow_compress);
    EXPECT_EQ(defaults.planner.granularity, PlanGranularity::block);
    EXPECT_FALSE(defaults.profile_file);
    EXPECT_TRUE(defaults.save_profile.empty());
    EXPECT_EQ(defaults.codecs.candidates, CodecCandidates::paper_and_group);
    EXPECT_FLOAT_EQ(static_cast<float>(defaults.codecs.max_error), 0.12f);
    EXPECT_FLOAT_EQ(static_cast<float>(defaults.monitor.max_codec_error), 0.12f);
    config.memory.granularity = "global";
    config.memory.profile = "runs/x/profile.json";
    config.memory.monitor_max_interval = 7;
    config.memory.min_replan_steps = 3;
    config.memory.codecs = "all";
    config.memory.max_codec_error = 0.3f;
    const RegulatorOptions options = regulator_options(config, MemoryMode::recompute_opt);
    EXPECT_FALSE(options.allow_compress);
    EXPECT_EQ(options.planner.granularity, PlanGranularity::global);
    ASSERT_TRUE(options.profile_file);
    EXPECT_EQ(*options.profile_file, "runs/x/profile.json");
    EXPECT_EQ(options.monitor.max_interval, 7);
    EXPECT_EQ(options.monitor.min_steps_between_replans, 3);
    EXPECT_EQ(options.codecs.candidates, CodecCandidates::all);
    EXPECT_FLOAT_EQ(static_cast<float>(options.codecs.max_error), 0.3f);
    EXPECT_FLOAT_EQ(static_cast<float>(options.monitor.max_codec_error), 0.3f);
}

// Trains 30 steps of adacc on `cfg` under the budget of compressing everything (the plan must
// compress ln2, with the outlier codec), and at step 10 makes six of ln2's 128 channels 50x
// larger in the layers `injected`: outliers the outlier codec separates (Z ~ 4.5), more than its
// cap of twice the profiled count (>= 4). Returns the run's re-plan events, each checked to fit.
std::vector<nlohmann::json> replans_after_injecting_outliers(const std::string& tag, const GPTConfig& cfg,
                                                             const std::vector<int>& injected) {
    const auto dir = test::scratch_dir(tag);
    test::write_random_shard(dir / "train.bin", 20000, 97, 2);
    const int B = 4, T = 32;
    const Profile profile = compress_favouring_profile(cfg, B, T);
    profile.save(dir / "profile.json");
    const std::uint64_t budget = test::everything_compressed_memory(cfg, B, T, profile).total() + 4096;

    RunConfig config;
    config.model = cfg;
    config.training.batch_size = B, config.training.seq_len = T, config.training.steps = 30;
    config.lr.max = 1e-3f, config.lr.warmup_steps = 2;
    config.data.train = (dir / "train.bin").string();
    config.memory.mode = "adacc";
    config.memory.budget = std::to_string(budget);
    config.memory.profile = (dir / "profile.json").string();
    config.memory.codecs = "paper";  // ln2 takes the outlier codec, whose cap the injection reaches
    config.memory.monitor_max_interval = 4;
    config.memory.min_replan_steps = 2;
    config.logging.run_dir = (dir / "run").string();
    config.logging.print_every = 100;
    validate_config(config);

    Trainer trainer(config, std::nullopt);
    const ActivationPlan first_plan = trainer.model().plan();
    EXPECT_EQ(first_plan.at(0, TensorKind::ln2).policy, Policy::compress) << "the profile favours compressing ln2";
    trainer.set_step_hook([&injected](int step, GPTModel& model) {
        if (step != 10) return;
        for (int l : injected) {
            float* w = model.layout().at(model.params(), ParamId::ln2w, l);
            for (int c : {3, 17, 40, 64, 90, 111}) w[c] *= 50.0f;
        }
    });
    trainer.run();
    EXPECT_LE(trainer.model().memory().total(), budget);

    std::ifstream in(dir / "run" / "metrics.jsonl");
    std::vector<nlohmann::json> replans;
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (!r.contains("event")) continue;
        EXPECT_EQ(r["event"], "replan");
        EXPECT_LE(r["predicted_total_bytes"].get<std::uint64_t>(), budget) << line;
        replans.push_back(r);
    }
    return replans;
}

// Re-plans after the injection that blame ln2.
int ln2_replans_after_injection(const std::vector<nlohmann::json>& replans) {
    return static_cast<int>(std::count_if(replans.begin(), replans.end(), [](const nlohmann::json& r) {
        return r["step"].get<int>() >= 10 && r["reason"].get<std::string>().find("ln2") != std::string::npos;
    }));
}

TEST(AdaccTraining, MonitorReplansWhenOutliersAppear) {
    const auto replans = replans_after_injecting_outliers("adacc", small_model(), {0, 1});
    EXPECT_GE(ln2_replans_after_injection(replans), 1) << "no re-plan blamed ln2 after the injection";
}

// Outliers in layers the profiler's slice does not hold (its first kProfiledLayers): the re-plan's
// profile is raised to what the monitor sampled in the whole model, so the plan it solves knows
// them and the monitor, comparing later samples with that plan's figures, has no cause to re-plan
// again. A profile of the slice alone would not see them: later samples would leave its
// tolerance again and again (three ln2 re-plans after the injection with the raise removed).
TEST(AdaccTraining, OutliersBeyondTheProfiledSliceAreKnownToTheReplan) {
    GPTConfig cfg = small_model();
    cfg.n_layer = kProfiledLayers + 2;
    const auto replans = replans_after_injecting_outliers("adacc_deep", cfg, {kProfiledLayers, kProfiledLayers + 1});
    EXPECT_EQ(ln2_replans_after_injection(replans), 1);
}

// The codecs a tensor may be compressed with: candidates within memory.max_codec_error, minus any
// another admitted candidate matches or beats in slot bytes, time and error at once. Slot bytes
// come from the codecs' formulas (for ln1's rows x C: channel < group < asym < outlier's bound);
// times and errors are set here.
TEST(AdaccPlan, CodecOptionsAreAdmittedByErrorAndDominatedOnesDropped) {
    const GPTConfig cfg = small_model();
    const int B = 4, T = 32;
    Profile profile = compress_favouring_profile(cfg, B, T);
    auto set = [&](Codec codec, double error, double ms) {
        for (auto& t : profile.tensors)
            if (t.kind == TensorKind::ln1)
                for (auto& m : t.codecs)
                    if (m.codec == codec) m.relative_error = error, m.compress_ms = ms, m.decompress_ms = 0;
    };
    auto ln1_options = [&](CodecCandidates candidates) {
        std::vector<TensorKind> kinds;
        const BlockProblem p = build_block_problem(cfg, B, T, profile, true, {candidates, 0.12}, &kinds);
        std::vector<Codec> out;
        const std::size_t i = std::find(kinds.begin(), kinds.end(), TensorKind::ln1) - kinds.begin();
        for (const CompressOption& o : p.tensors[i].compress_options) out.push_back(o.codec);
        return out;
    };
    set(Codec::group_int4, 0.10, 1.0);
    set(Codec::outlier_int4, 0.05, 2.0);  // more bytes and time, less error: an option
    set(Codec::channel_int4, 0.13, 0.5);  // over the tolerance
    set(Codec::asym_int4, 0.11, 1.5);     // more bytes, time and error than group: dominated
    EXPECT_EQ(ln1_options(CodecCandidates::all), (std::vector<Codec>{Codec::group_int4, Codec::outlier_int4}));
    EXPECT_EQ(ln1_options(CodecCandidates::paper), (std::vector<Codec>{Codec::outlier_int4}));
    set(Codec::channel_int4, 0.11, 1.0);  // worse error than group, but fewer bytes: it buys memory
    set(Codec::asym_int4, 0.11, 0.5);     // worse error and more bytes, but faster: it buys time
    EXPECT_EQ(ln1_options(CodecCandidates::all),
              (std::vector<Codec>{Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4}));
    // paper+group: the paper's outlier codec and plain group INT4, nothing else.
    EXPECT_EQ(ln1_options(CodecCandidates::paper_and_group),
              (std::vector<Codec>{Codec::outlier_int4, Codec::group_int4}));
    set(Codec::outlier_int4, 0.10, 1.0);  // no better than group anywhere, and larger: dominated
    EXPECT_EQ(ln1_options(CodecCandidates::paper_and_group), (std::vector<Codec>{Codec::group_int4}));
    set(Codec::group_int4, 0.2, 1.0);  // neither candidate within the tolerance
    set(Codec::outlier_int4, 0.2, 1.0);
    EXPECT_TRUE(ln1_options(CodecCandidates::paper_and_group).empty()) << "ln1 must be kept or recomputed";
}

// The outlier-heavy case (issue 14). LLM activations grow systematic outlier channels with scale
// (LLM.int8(), SmoothQuant); this tiny model gets them from [stress]: 4 of ln1's and ln2's 128
// channels scaled 50x at initialisation.
RunConfig outlier_run(const std::filesystem::path& dir, int outlier_channels) {
    test::write_random_shard(dir / "train.bin", 4096, 97, 3);
    RunConfig config;
    config.model = small_model();
    config.model.dropout = 0.0f;
    config.training.batch_size = 4, config.training.seq_len = 32;
    config.data.train = (dir / "train.bin").string();
    config.stress.outlier_channels = outlier_channels;
    config.stress.outlier_scale = 50.0f;
    validate_config(config);
    return config;
}

// The gradients' relative L2 error vs keep-all when only ln1 and ln2 are compressed with `codec`.
double layernorm_output_error(const RunConfig& config, Codec codec, const CodecParams& params) {
    const BlockGraph block(config.model, config.training.batch_size, config.training.seq_len);
    const ActivationPlan keep_all(block, config.model.n_layer);
    ActivationPlan plan = keep_all;
    for (int l = 0; l < config.model.n_layer; ++l)
        for (TensorKind k : {TensorKind::ln1, TensorKind::ln2}) plan.set(l, k, {Policy::compress, codec});
    const ParameterLayout layout(config.model);
    const ComputeTarget target = compute_target(config);
    return compare_gradients(gradients_at_init(config, target, plan, params),
                             gradients_at_init(config, target, keep_all, params), layout)
        .overall.relative_l2;
}

TEST(OutlierChannels, OutlierSeparatedInt4BeatsPlainInt4OnTheGradientsAtNearlyTheSameBytes) {
    const auto dir = test::scratch_dir("outliers");
    CodecParams params;
    params.max_outlier_channels = 8;  // codec_params_for's cap for 4 profiled outlier channels
    double ratio[2] = {0, 0};
    for (int hook : {0, 1}) {
        const RunConfig config = outlier_run(dir, hook ? 4 : 0);
        const double group = layernorm_output_error(config, Codec::group_int4, params);
        const double outlier = layernorm_output_error(config, Codec::outlier_int4, params);
        std::printf("outlier hook %s: gradient relative error with ln1/ln2 in group_int4 %.4e, outlier_int4 %.4e\n",
                    hook ? "on " : "off", group, outlier);
        EXPECT_GT(outlier, 0.0);
        ratio[hook] = group / outlier;
    }
    // Without outliers the outlier codec has (nearly) nothing to separate; with them it is far
    // better. Measured here: 1.02x off, 9.7x on (5.9e-2 vs 6.1e-3).
    EXPECT_LT(ratio[0], 1.5);
    EXPECT_GT(ratio[1], 4.0);

    // Nearly the same bytes: the measured blobs of ln1 (the profile's largest over layers). The
    // outlier codec stores its k channels exactly, 4 bytes per element against 9/16 for group
    // INT4's codes and scales, so its blob is larger by about 64k / (9 C): 22% at this C = 128
    // with k = 4 (measured 20%), under 4% at GPT-2's C = 768.
    const RunConfig config = outlier_run(dir, 4);
    const std::vector<float> weights = initial_parameters(config.model, config.training.seed, config.stress);
    const Profile profile = profile_block(config.model, 4, 4, 32, first_training_batch(config),
                                          ProfileWeights{weights.data(), config.training.seed, {}}, {});
    const TensorProfile& ln1 = *profile.find(TensorKind::ln1);
    const double bytes_ratio =
        double(ln1.find(Codec::outlier_int4)->compressed_bytes) / double(ln1.find(Codec::group_int4)->compressed_bytes);
    std::printf("ln1 blobs: outlier_int4 %zu bytes, group_int4 %zu bytes (x%.3f); errors %.4f vs %.4f\n",
                ln1.find(Codec::outlier_int4)->compressed_bytes, ln1.find(Codec::group_int4)->compressed_bytes,
                bytes_ratio, ln1.find(Codec::outlier_int4)->relative_error,
                ln1.find(Codec::group_int4)->relative_error);
    EXPECT_LT(bytes_ratio, 1.25);
}

TEST(OutlierChannels, ThePlannerChoosesTheOutlierCodecByItsMeasuredError) {
    const auto dir = test::scratch_dir("outliers_plan");
    const int B = 4, T = 32;
    for (int hook : {0, 1}) {
        SCOPED_TRACE(hook ? "outlier hook on" : "outlier hook off");
        const RunConfig config = outlier_run(dir, hook ? 4 : 0);
        const std::vector<float> weights = initial_parameters(config.model, config.training.seed, config.stress);
        Profile profile = profile_block(config.model, B, B, T, first_training_batch(config),
                                        ProfileWeights{weights.data(), config.training.seed, {}}, {});
        test::favour_compression(profile);  // the plan compresses
        std::vector<TensorKind> kinds;
        const BlockProblem problem = build_block_problem(config.model, B, T, profile, true, {}, &kinds);
        const std::size_t ln1 = std::find(kinds.begin(), kinds.end(), TensorKind::ln1) - kinds.begin();
        std::vector<Codec> options;
        for (const CompressOption& o : problem.tensors[ln1].compress_options) options.push_back(o.codec);
        // The default candidates for ln1: the paper's outlier codec and plain group INT4, each
        // admitted when its measured error is within memory.max_codec_error (0.12).
        const double group_error = profile.find(TensorKind::ln1)->find(Codec::group_int4)->relative_error;
        std::printf("hook %d: ln1 group_int4 error %.4f, options:", hook, group_error);
        for (Codec c : options) std::printf(" %s", codec_name(c));
        std::printf("\n");
        const bool group_admitted = std::find(options.begin(), options.end(), Codec::group_int4) != options.end();
        EXPECT_EQ(group_admitted, !hook) << "group_int4's error on ln1 is " << group_error;
        if (!hook) continue;
        // A budget that makes the plan compress ln1 and ln2: every tensor compressed with its paper codec.
        const BlockGraph block(config.model, B, T);
        ActivationPlan compressed(block, config.model.n_layer);
        for (int l = 0; l < config.model.n_layer; ++l)
            for (const auto& t : block.tensors()) compressed.set(l, t.kind, {Policy::compress, adacc_codec(t.kind)});
        const std::uint64_t budget =
            GPTModel::plan_memory(config.model, B, T, compressed, codec_params_for(profile, config.model)).total() +
            4096;
        // Codecs are admitted per layer (layer classes): wherever group INT4's error in that layer
        // is over the tolerance, the plan never uses it there; it compresses with the outlier
        // codec instead (or keeps the tensor, when another layer's saving leaves room).
        const AdaccPlan plan = plan_adacc(config.model, B, T, profile, budget, true, {}, codec_choice(config.memory));
        int refused = 0, outlier = 0;
        for (int l = 0; l < config.model.n_layer; ++l)
            for (TensorKind k : {TensorKind::ln1, TensorKind::ln2}) {
                const double error = layer_error(*profile.find(k)->find(Codec::group_int4), l);
                const TensorPolicy& p = plan.plan.at(l, k);
                std::printf("layer %d %s: group_int4 error %.4f, planned %s %s\n", l, tensor_kind_name(k), error,
                            policy_name(p.policy), p.policy == Policy::compress ? codec_name(p.codec) : "");
                if (error <= 0.12) continue;
                ++refused;
                if (p.policy != Policy::compress) continue;
                EXPECT_EQ(p.codec, Codec::outlier_int4) << tensor_kind_name(k) << " layer " << l;
                ++outlier;
            }
        EXPECT_GE(refused, 1) << "the hook puts group INT4 over the tolerance somewhere";
        EXPECT_GE(outlier, 1) << "the plan compresses some refused tensor with the outlier codec";
    }
}

// The profiler runs a slice of the model (its first kProfiledLayers blocks): initialised from the
// run's seed, the slice holds exactly the whole model's first layers — the same draws, and the
// residual projections scaled for the whole model's depth — with the [stress] hook too.
TEST(ProfileSlice, InitialisesExactlyTheWholeModelsFirstLayers) {
    GPTConfig whole = small_model();
    whole.n_layer = 5;
    const GPTConfig slice = profile_slice(whole);
    ASSERT_EQ(slice.n_layer, kProfiledLayers);
    StressOptions stress;
    stress.outlier_channels = 3;
    for (bool stressed : {false, true}) {
        SCOPED_TRACE(stressed ? "with outlier channels" : "plain");
        GPTModel a = GPTModel::for_inference(whole, 1, 1), b = GPTModel::for_inference(slice, 1, 1);
        init_weights_with_stress(a, 42, stressed ? stress : StressOptions{}, whole.n_layer);
        init_weights_with_stress(b, 42, stressed ? stress : StressOptions{}, whole.n_layer);
        const ParameterLayout &la = a.layout(), &lb = b.layout();
        for (int id = 0; id < kNumParamTensors; ++id) {
            const ParamTensorInfo& t = lb.tensors()[id];
            const auto pid = static_cast<ParamId>(id);
            EXPECT_EQ(0, std::memcmp(la.at(a.params(), pid), lb.at(b.params(), pid), t.numel * sizeof(float)))
                << t.name << " differs from the whole model's first " << slice.n_layer << " layers";
        }
    }
}

// Planning a model needs the memory of the profiler's slice only: a model whose parameters,
// gradients and AdamW state alone exceed this machine's memory (its depth is computed from the
// machine) is profiled, planned and accounted for exactly, and the process stays under 1 GiB.
TEST(ProfileSlice, PlansAModelLargerThanThisMachine) {
    const std::uint64_t machine = host_memory_bytes();
    GPTConfig cfg = small_model();
    cfg.dropout = 0.0f;
    GPTConfig one_layer = cfg;
    one_layer.n_layer = 1;
    const std::size_t per_layer_params =
        ParameterLayout(cfg).total() - ParameterLayout(one_layer).total();  // cfg: 2 layers
    cfg.n_layer = static_cast<int>(1.25 * double(machine) / (16.0 * double(per_layer_params))) + 1;
    const int B = 2, T = 32;
    const ModelMemory full = memory_for_mode(cfg, B, T, MemoryMode::full);
    const ModelMemory none = memory_for_mode(cfg, B, T, MemoryMode::none);
    ASSERT_GT(full.static_bytes(), machine) << "the model must not fit this machine";
    std::vector<int> tokens(static_cast<std::size_t>(B) * T);
    std::mt19937 gen(3);
    for (auto& t : tokens) t = static_cast<int>(gen() % cfg.vocab_size);
    const Profile profile = profile_block(cfg, B, B, T, tokens, ProfileWeights{nullptr, 1, {}}, {});
    const std::uint64_t budget = full.total() + (none.total() - full.total()) / 3;
    const AdaccPlan plan = plan_adacc(cfg, B, T, profile, budget, true, {});
    std::printf("L = %d: static %s, full %s, none %s, budget %s; plan %s (%s) in %.1f ms\n", cfg.n_layer,
                format_bytes(full.static_bytes()).c_str(), format_bytes(full.total()).c_str(),
                format_bytes(none.total()).c_str(), format_bytes(budget).c_str(),
                format_bytes(plan.memory.total()).c_str(), plan_status_name(plan.result.status), plan.result.solve_ms);
    EXPECT_EQ(plan.result.status, PlanResult::optimal);
    EXPECT_LE(plan.memory.total(), budget);
    EXPECT_GT(plan.memory.total(), full.total()) << "the plan keeps or compresses something";
    EXPECT_EQ(plan.memory.total(), GPTModel::plan_memory(cfg, B, T, plan.plan, plan.codec_params).total());
    const int planned = largest_planned_batch(cfg, profile, budget, true, {});
    EXPECT_GE(planned, B);
    EXPECT_LE(planned, largest_batch(cfg, T, MemoryMode::full, budget));
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    EXPECT_LT(usage.ru_maxrss * 1024.0, 1024.0 * 1024 * 1024) << "peak resident memory of this test, bytes";
}

// `adacc memory`'s planned rows: the largest batch is the last one the planner fits within the
// budget (the next one has no plan), between none's and full recomputation's (keeping everything
// is a plan; nothing stores less than recomputing everything), and adacc's is at least
// recompute-opt's (it may choose every plan recompute-opt may; the outlier codec's scratch once
// made adacc's first solve infeasible where recompute-opt's was not: 7 against 8 here).
TEST(LargestPlannedBatch, IsTheLastBatchWithAPlanWithinTheBudget) {
    const GPTConfig cfg = small_model();
    const int T = 32;
    const Profile unit = compress_favouring_profile(cfg, 1, T);
    const std::uint64_t budget = memory_for_mode(cfg, 8, T, MemoryMode::full).total();
    int planned[2] = {0, 0};
    for (bool compress : {true, false}) {
        SCOPED_TRACE(compress ? "adacc" : "recompute-opt");
        const int n = planned[compress] = largest_planned_batch(cfg, unit, budget, compress, {});
        std::printf("%s: none %d, planned %d, full %d\n", compress ? "adacc" : "recompute-opt",
                    largest_batch(cfg, T, MemoryMode::none, budget), n,
                    largest_batch(cfg, T, MemoryMode::full, budget));
        EXPECT_GE(n, largest_batch(cfg, T, MemoryMode::none, budget));
        EXPECT_LE(n, largest_batch(cfg, T, MemoryMode::full, budget));
        EXPECT_LE(plan_adacc(cfg, n, T, rescale_profile(unit, cfg, n), budget, compress, {}).memory.total(), budget);
        EXPECT_THROW(plan_adacc(cfg, n + 1, T, rescale_profile(unit, cfg, n + 1), budget, compress, {}), UserError);
    }
    EXPECT_GE(planned[1], planned[0]) << "adacc plans less batch than recompute-opt";
}

// Per-layer classes: the profiled layers' errors differ (here layer 0, which reads the
// embeddings, takes plain group INT4 everywhere; in the deeper layers its error is over the
// tolerance). Those layers form their own class, so the plan mixes block plans — group INT4 in
// layer 0, the paper's codecs beyond — and is never worse on the planner's objective than the
// best single plan replicated over the layers (one class from the worst layer's errors, what the
// engine solved before; plan_adacc solves both and keeps the better, because a mix can need more
// workspace than the MILP sees), and strictly better at most budgets here.
TEST(LayerClasses, LayersWhoseProfilesDifferGetTheirOwnPlans) {
    GPTConfig cfg = small_model();
    cfg.n_layer = 4;
    const int B = 4, T = 32;
    Profile profile = compress_favouring_profile(cfg, B, T);
    Profile replicated = profile;
    for (Profile* p : {&profile, &replicated})
        for (auto& t : p->tensors)
            for (auto& m : t.codecs) {
                const double deep = m.codec == Codec::group_int4 ? 0.2 : 0.05;
                m.layer_errors = {0.05, deep};
                m.relative_error = deep;
                if (p == &replicated) m.layer_errors.clear();  // every layer at the worst layer's errors
            }
    const ModelMemory none = memory_for_mode(cfg, B, T, MemoryMode::none);
    const ModelMemory full = memory_for_mode(cfg, B, T, MemoryMode::full);
    int strictly_better = 0, mixes = 0;
    for (PlanGranularity granularity : {PlanGranularity::block, PlanGranularity::global})
        for (double fraction : {0.1, 0.25, 0.4, 0.6}) {
            SCOPED_TRACE(std::string(plan_granularity_name(granularity)) + " at " + std::to_string(fraction));
            const std::uint64_t budget =
                full.total() + static_cast<std::uint64_t>(fraction * (none.total() - full.total()));
            PlannerOptions options;
            options.granularity = granularity;
            const AdaccPlan mixed = plan_adacc(cfg, B, T, profile, budget, true, options);
            const AdaccPlan single = plan_adacc(cfg, B, T, replicated, budget, true, options);
            const LayerClasses classes = layer_classes(cfg, B, T, profile, true, {}, DType::f32);
            ASSERT_EQ(classes.problems.size(), 2u);
            EXPECT_EQ(classes.layer_class, (std::vector<int>{0, 1, 1, 1}));
            ASSERT_EQ(single.classes.problems.size(), 1u);
            EXPECT_LE(mixed.memory.total(), budget);
            bool differ = false, group_in_layer0 = false;
            for (TensorKind k : mixed.kinds) {
                differ |= !(mixed.plan.at(0, k) == mixed.plan.at(1, k));
                group_in_layer0 |=
                    mixed.plan.at(0, k).policy == Policy::compress && mixed.plan.at(0, k).codec == Codec::group_int4;
                for (int l = 1; l < cfg.n_layer; ++l) {
                    if (mixed.plan.at(l, k).policy != Policy::compress) continue;
                    EXPECT_NE(mixed.plan.at(l, k).codec, Codec::group_int4) << tensor_kind_name(k) << " layer " << l;
                }
            }
            // Where the budget binds hard everything is recomputed alike; elsewhere layer 0 differs.
            mixes += differ && group_in_layer0;
            std::printf("%s %.2f: objective %.3f ms (%zu classes), single replicated plan %.3f ms\n",
                        plan_granularity_name(granularity), fraction, mixed.result.objective_ms,
                        mixed.classes.problems.size(), single.result.objective_ms);
            EXPECT_LE(mixed.result.objective_ms, single.result.objective_ms + 1e-9);
            strictly_better += mixed.result.objective_ms < single.result.objective_ms - 1e-6;
        }
    EXPECT_GE(strictly_better, 4) << "layer classes beat the replicated plan at too few budgets";
    EXPECT_GE(mixes, 4) << "too few plans give layer 0 (group INT4) a plan of its own";
}
}  // namespace
}  // namespace adacc
