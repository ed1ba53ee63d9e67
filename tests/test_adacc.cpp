// Mode adacc end to end: the planner's plan fits the budget as the model allocates it, an
// infeasible budget names the smallest memory any plan reaches, and the monitor re-plans when
// outlier channels are injected mid-run (a step hook scales a few layernorm channels), with the
// new plan still inside the budget.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "data/token_shard.h"
#include "src/adacc/budget_planner.h"
#include "src/adacc/adacc_regulator.h"
#include "src/config/config.h"
#include "src/common/errors.h"
#include "src/engine/memory_report.h"
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
    Profile p = profile_block(cfg, B, B, T, tokens, nullptr, 1, {});
    for (double& ms : p.op_ms) ms = 100.0;
    for (auto& t : p.tensors)
        for (auto& m : t.codecs) m.compress_ms = m.decompress_ms = 0.01;
    return p;
}

TEST(AdaccPlan, FitsTheBudgetAsAllocated) {
    const GPTConfig cfg = small_model();
    const int B = 4, T = 32;
    const Profile profile = compress_favouring_profile(cfg, B, T);
    const ModelMemory none = memory_for_mode(cfg, B, T, MemoryMode::none);
    const ModelMemory full = memory_for_mode(cfg, B, T, MemoryMode::full);
    for (double fraction : {0.2, 0.4, 0.7}) {
        const std::uint64_t budget = full.total() + static_cast<std::uint64_t>(fraction * (none.total() - full.total()));
        const AdaccPlan plan = plan_adacc(cfg, B, T, profile, budget, true, {});
        EXPECT_LE(plan.memory.total(), budget);
        EXPECT_EQ(plan.memory.total(), GPTModel::plan_memory(cfg, B, T, plan.plan, plan.codec_params).total());
        const AdaccPlan no_compress = plan_adacc(cfg, B, T, profile, budget, false, {});
        for (int l = 0; l < cfg.n_layer; ++l)
            for (TensorKind k : no_compress.kinds) EXPECT_NE(no_compress.plan.at(l, k).policy, Policy::compress);
        EXPECT_LE(plan.result.extra_ms, no_compress.result.extra_ms + 1e-9) << "compression can only help";
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

TEST(AdaccTraining, MonitorReplansWhenOutliersAppear) {
    const auto dir = test::scratch_dir("adacc");
    std::mt19937 gen(2);
    std::vector<std::uint16_t> tokens(20000);
    for (auto& t : tokens) t = static_cast<std::uint16_t>(gen() % 97);
    write_token_shard(dir / "train.bin", tokens);
    const GPTConfig cfg = small_model();
    const int B = 4, T = 32;
    const Profile profile = compress_favouring_profile(cfg, B, T);
    profile.save(dir / "profile.json");
    // The budget of compressing everything with the Adacc codecs: the plan must compress ln2.
    const BlockGraph block(cfg, B, T);
    ActivationPlan everything_compressed(block, cfg.n_layer);
    for (int l = 0; l < cfg.n_layer; ++l)
        for (const auto& t : block.tensors())
            everything_compressed.set(l, t.kind, {Policy::compress, adacc_codec(t.kind)});
    const std::uint64_t budget =
        GPTModel::plan_memory(cfg, B, T, everything_compressed, codec_params_for(profile, cfg)).total() + 4096;

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
    ASSERT_EQ(first_plan.at(0, TensorKind::ln2).policy, Policy::compress) << "the profile favours compressing ln2";
    // At step 10, six of ln2's 128 channels become 50x larger in every layer: outliers the
    // outlier codec separates (Z ~ 4.5), more than its cap of twice the profiled count (>= 4).
    trainer.set_step_hook([](int step, GPTModel& model) {
        if (step != 10) return;
        for (int l = 0; l < model.config().n_layer; ++l) {
            float* w = model.layout().at(model.params(), ParamId::ln2w, l);
            for (int c : {3, 17, 40, 64, 90, 111}) w[c] *= 50.0f;
        }
    });
    trainer.run();

    std::ifstream in(dir / "run" / "metrics.jsonl");
    int injected_replans = 0;
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (!r.contains("event")) continue;
        EXPECT_EQ(r["event"], "replan");
        EXPECT_LE(r["predicted_total_bytes"].get<std::uint64_t>(), budget) << line;
        if (r["step"].get<int>() >= 10 && r["reason"].get<std::string>().find("ln2") != std::string::npos)
            ++injected_replans;
    }
    EXPECT_GE(injected_replans, 1) << "no re-plan blamed ln2 after the injection";
    EXPECT_LE(trainer.model().memory().total(), budget);
}

}  // namespace
}  // namespace adacc
