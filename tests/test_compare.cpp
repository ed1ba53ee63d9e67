// `adacc compare` takes its steps through the trainer's TrainingStep: with gradient accumulation,
// shuffled data and dropout, the loss compare reports after N steps is bit for bit the loss
// training logs at step N, in a fixed mode and in a planned one. Gradient fidelity, at the initial
// weights (compare) and along a run (training.fidelity_every), and the [stress] outlier hook.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "src/adacc/adacc_regulator.h"
#include "src/adacc/profiler.h"
#include "src/common/errors.h"
#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/engine/memory_report.h"
#include "src/engine/weight_init.h"
#include "src/train/compare.h"
#include "src/train/token_loader.h"
#include "src/train/trainer.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

RunConfig small_run(const std::filesystem::path& dir) {
    test::write_random_shard(dir / "train.bin", 20000, 97, 3);
    RunConfig config;
    config.model.n_layer = 2, config.model.n_embd = 32, config.model.n_head = 2, config.model.vocab_size = 97;
    config.model.max_seq_len = 16, config.model.dropout = 0.1f;
    config.training.batch_size = 2, config.training.seq_len = 16, config.training.steps = 4;
    config.training.grad_accum = 2;
    config.optimizer.grad_clip = 0.05f;  // small enough that clipping acts
    config.lr.warmup_steps = 2;
    config.data.train = (dir / "train.bin").string();
    config.data.shuffle = true;
    config.logging.print_every = 100;
    validate_config(config);
    return config;
}

double last_training_loss(const std::filesystem::path& run_dir) {
    std::ifstream in(run_dir / "metrics.jsonl");
    double loss = 0;
    for (std::string line; std::getline(in, line);) {
        const auto record = nlohmann::json::parse(line);
        if (record.contains("loss")) loss = record["loss"].get<double>();
    }
    return loss;
}

void expect_compare_matches_training(RunConfig config, MemoryMode mode, std::uint64_t budget,
                                     const std::filesystem::path& dir) {
    config.memory.mode = memory_mode_name(mode);
    if (budget) config.memory.budget = std::to_string(budget);
    config.logging.run_dir = (dir / memory_mode_name(mode)).string();
    Trainer trainer(config, std::nullopt);
    trainer.run();

    CompareOptions options;
    options.modes = {mode};
    options.batches = {config.training.batch_size};
    options.steps = config.training.steps;
    options.budget = budget;
    const auto rows = run_comparison(config, options);
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_TRUE(rows[0].ran) << memory_mode_name(mode);
    EXPECT_EQ(rows[0].loss, last_training_loss(config.logging.run_dir)) << memory_mode_name(mode);
    EXPECT_TRUE(rows[0].gradients.has_value());
    // --no-fidelity: the same steps, without the gradients' extra passes.
    options.fidelity = false;
    const auto quick = run_comparison(config, options);
    ASSERT_EQ(quick.size(), 1u);
    EXPECT_EQ(quick[0].loss, rows[0].loss) << memory_mode_name(mode);
    EXPECT_FALSE(quick[0].gradients.has_value());
    // The table says its gradient columns are empty because they were not measured.
    const std::string table = format_comparison(quick, "table");
    EXPECT_NE(table.find("\ngrad_err, grad_cos: not measured (--no-fidelity)\n"), std::string::npos) << table;
    EXPECT_EQ(table.find("relative L2 error"), std::string::npos) << table;
}

TEST(Compare, StepsAreTrainingSteps) {
    const auto dir = test::scratch_dir("compare");
    const RunConfig config = small_run(dir);
    expect_compare_matches_training(config, MemoryMode::quant, 0, dir);
    // A budget between full's and none's totals, profiled from a file so both plan the same.
    const int B = config.training.batch_size, T = config.training.seq_len;
    const std::uint64_t full = memory_for_mode(config.model, B, T, MemoryMode::full).total();
    const std::uint64_t none = memory_for_mode(config.model, B, T, MemoryMode::none).total();
    RunConfig planned = config;
    std::vector<int> tokens(static_cast<std::size_t>(B) * T, 1);
    profile_block(config.model, B, B, T, tokens, ProfileWeights{nullptr, 1, {}}, {}).save(dir / "profile.json");
    planned.memory.profile = (dir / "profile.json").string();
    expect_compare_matches_training(planned, MemoryMode::adacc, (full + none) / 2, dir);
}

// A planned mode whose planner gives no plan (here: a budget no plan meets) is reported as not
// planned, with the planner's reason, not as "does not fit": the same row is printed when the
// planner fails for any other reason. A fixed mode over the budget still does not fit.
TEST(Compare, APlannedModeWithoutAPlanSaysSoInsteadOfOverBudget) {
    const auto dir = test::scratch_dir("compare_unplanned");
    const RunConfig config = small_run(dir);
    CompareOptions options;
    options.modes = {MemoryMode::full, MemoryMode::adacc};
    options.batches = {config.training.batch_size};
    options.steps = 2;
    options.budget = 4096;  // below the parameters alone
    options.fidelity = false;
    const auto rows = run_comparison(config, options);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_FALSE(rows[0].plan_error.has_value());
    EXPECT_FALSE(rows[0].fits);
    ASSERT_TRUE(rows[1].plan_error.has_value());
    EXPECT_FALSE(rows[1].plan_error->empty());
    EXPECT_FALSE(rows[1].ran);

    const std::string text = format_comparison(rows, "text");
    const auto line_of = [&text](const std::string& mode) {
        const std::size_t at = text.find("\n" + mode + " ");
        return at == std::string::npos ? std::string() : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    };
    EXPECT_NE(line_of("full").find("does not fit the budget"), std::string::npos) << text;
    EXPECT_NE(line_of("adacc").find("not planned (the reason is above)"), std::string::npos) << text;
    EXPECT_EQ(line_of("adacc").find("does not fit"), std::string::npos) << text;

    const auto json = nlohmann::json::parse(format_comparison(rows, "json"));
    EXPECT_EQ(json[0]["fits"], false);
    EXPECT_TRUE(json[1]["fits"].is_null());
    EXPECT_EQ(json[1]["plan_error"], *rows[1].plan_error);
    const std::string csv = format_comparison(rows, "csv");
    EXPECT_NE(csv.find("\nfull,2,16,,"), std::string::npos) << csv;
    const std::size_t adacc_line = csv.find("\nadacc,");
    ASSERT_NE(adacc_line, std::string::npos) << csv;
    EXPECT_EQ(csv.substr(adacc_line).find(",no,"), std::string::npos) << "fits_budget left empty: " << csv;
}

// Interleaving (step k of every mode, then step k+1 of every mode) keeps each mode's run its own:
// every step's loss, the tape peak and the arenas are those of the mode run alone, and of the
// modes run one after another (--no-interleave, or when their models do not fit together).
TEST(Compare, InterleavingLeavesEachModesRunAsItIsAlone) {
    const auto dir = test::scratch_dir("compare_interleave");
    RunConfig config = small_run(dir);
    const int B = config.training.batch_size, T = config.training.seq_len;
    const std::uint64_t full = memory_for_mode(config.model, B, T, MemoryMode::full).total();
    const std::uint64_t none = memory_for_mode(config.model, B, T, MemoryMode::none).total();
    std::vector<int> tokens(static_cast<std::size_t>(B) * T, 1);
    profile_block(config.model, B, B, T, tokens, ProfileWeights{nullptr, 1, {}}, {}).save(dir / "profile.json");
    config.memory.profile = (dir / "profile.json").string();  // so every run plans the same
    CompareOptions options;
    options.modes = {MemoryMode::none, MemoryMode::full, MemoryMode::quant, MemoryMode::adacc};
    options.batches = {B};
    options.steps = 4;
    // Between full's and none's totals, and at least quant's, so that every mode but none fits.
    options.budget =
        std::max<std::uint64_t>((full + none) / 2, memory_for_mode(config.model, B, T, MemoryMode::quant).total());
    options.fidelity = false;
    const auto interleaved = run_comparison(config, options);
    ASSERT_EQ(interleaved.size(), 4u);
    options.interleave = false;
    const auto sequential = run_comparison(config, options);
    options.interleave = true;
    options.memory_limit = 1;  // no two models fit together
    const auto fallback = run_comparison(config, options);
    options.memory_limit = 0;
    ASSERT_EQ(sequential.size(), 4u);
    ASSERT_EQ(fallback.size(), 4u);
    for (std::size_t i = 0; i < interleaved.size(); ++i) {
        const MemoryMode mode = options.modes[i];
        SCOPED_TRACE(memory_mode_name(mode));
        CompareOptions single = options;
        single.modes = {mode};
        const auto alone = run_comparison(config, single);
        ASSERT_EQ(alone.size(), 1u);
        ASSERT_TRUE(alone[0].ran);
        EXPECT_FALSE(alone[0].interleaved);
        EXPECT_FALSE(alone[0].not_interleaved.has_value()) << "one mode: nothing to interleave with";
        const CompareRow& r = interleaved[i];
        ASSERT_TRUE(r.ran);
        EXPECT_EQ(r.mode, mode);
        EXPECT_TRUE(r.interleaved);
        EXPECT_FALSE(r.not_interleaved.has_value());
        ASSERT_EQ(r.losses.size(), 4u);
        EXPECT_EQ(r.losses, alone[0].losses);  // bit for bit, every step
        EXPECT_EQ(r.loss, alone[0].loss);
        EXPECT_EQ(r.tape_peak_bytes, alone[0].tape_peak_bytes);
        EXPECT_EQ(r.total_bytes, alone[0].total_bytes);
        ASSERT_TRUE(r.memory.has_value());
        EXPECT_EQ(r.memory->total(), r.total_bytes);
        EXPECT_EQ(sequential[i].losses, alone[0].losses);
        EXPECT_FALSE(sequential[i].interleaved);
        ASSERT_TRUE(sequential[i].not_interleaved.has_value());
        EXPECT_NE(sequential[i].not_interleaved->find("--no-interleave"), std::string::npos);
        EXPECT_EQ(fallback[i].losses, alone[0].losses);
        EXPECT_FALSE(fallback[i].interleaved);
        ASSERT_TRUE(fallback[i].not_interleaved.has_value());
        EXPECT_NE(fallback[i].not_interleaved->find("more than the 1 B there is"), std::string::npos)
            << *fallback[i].not_interleaved;
        // The spread: 3 timed steps (4, one warm-up), their median inside their interquartile range.
        EXPECT_EQ(r.timed_steps, 3);
        EXPECT_LE(r.step_ms_p25, r.step_ms);
        EXPECT_LE(r.step_ms, r.step_ms_p75);
        EXPECT_LE(r.tokens_per_s_p25, r.tokens_per_s);
        EXPECT_LE(r.tokens_per_s, r.tokens_per_s_p75);
    }
    // quant's loss differs from none's (INT4 activations): the runs are not all one run.
    EXPECT_NE(interleaved[2].losses, interleaved[0].losses);
    // The table says which batches were interleaved and which were not, and why.
    EXPECT_NE(
        format_comparison(interleaved, "table").find("batch 2: none, full, quant, adacc interleaved step by step"),
        std::string::npos)
        << format_comparison(interleaved, "table");
    const std::string text = format_comparison(fallback, "table");
    EXPECT_NE(text.find("batch 2: none, full, quant, adacc NOT interleaved: their models together need"),
              std::string::npos)
        << text;
    // json and csv carry the spread, the arenas and the budget.
    const auto json = nlohmann::json::parse(format_comparison(interleaved, "json", options.budget));
    EXPECT_EQ(json[1]["step_ms_p25"].get<double>(), interleaved[1].step_ms_p25);
    EXPECT_EQ(json[1]["step_ms_p75"].get<double>(), interleaved[1].step_ms_p75);
    EXPECT_EQ(json[1]["timed_steps"], 3);
    EXPECT_EQ(json[1]["interleaved"], true);
    EXPECT_EQ(json[1]["arenas"]["tape"].get<std::size_t>(), interleaved[1].memory->tape);
    EXPECT_EQ(json[1]["budget_bytes"].get<std::uint64_t>(), options.budget);
    EXPECT_EQ(json[3]["losses"].size(), 4u);
    const std::string csv = format_comparison(interleaved, "csv");
    EXPECT_NE(csv.find(",step_ms_p25,step_ms_p75,tokens_per_s_p25,tokens_per_s_p75,timed_steps,interleaved\n"),
              std::string::npos)
        << csv;
    EXPECT_NE(csv.find(",3,yes\n"), std::string::npos) << csv;
}

CompareRow timed_row(MemoryMode mode, double median, double p25, double p75) {
    CompareRow r;
    r.mode = mode;
    r.batch = 4;
    r.seq = 16;
    r.ran = true;
    r.step_ms = median, r.step_ms_p25 = p25, r.step_ms_p75 = p75;
    r.timed_steps = 5;
    return r;
}

// The median and quartiles by linear interpolation between order statistics (numpy's default).
TEST(Compare, StepTimeSpreadIsTheMedianAndTheInterquartileRange) {
    StepTimeSpread s = step_time_spread({5, 1, 3, 2, 4});
    EXPECT_EQ(s.median, 3.0);
    EXPECT_EQ(s.p25, 2.0);
    EXPECT_EQ(s.p75, 4.0);
    s = step_time_spread({4, 1, 3, 2});  // positions 0.75, 1.5 and 2.25 of 1 2 3 4
    EXPECT_DOUBLE_EQ(s.p25, 1.75);
    EXPECT_DOUBLE_EQ(s.median, 2.5);
    EXPECT_DOUBLE_EQ(s.p75, 3.25);
    s = step_time_spread({100, 10, 11, 12, 13, 14, 15});  // one stalled step leaves the quartiles alone
    EXPECT_EQ(s.median, 13.0);
    EXPECT_DOUBLE_EQ(s.p25, 11.5);
    EXPECT_DOUBLE_EQ(s.p75, 14.5);
    s = step_time_spread({7});
    EXPECT_EQ(s.median, 7.0);
    EXPECT_EQ(s.p25, 7.0);
    EXPECT_EQ(s.p75, 7.0);
    s = step_time_spread({});
    EXPECT_EQ(s.median, 0.0);
}

// R = (t_full - t_mode) / (t_full - t_none) of the medians, printed only where neither full vs
// none nor the mode vs full have overlapping interquartile ranges [p25, p75].
TEST(Compare, RecoveryIsPrintedOnlyWhereTheDifferencesStandOutOfTheSpread) {
    const CompareRow none = timed_row(MemoryMode::none, 100, 95, 110),
                     full = timed_row(MemoryMode::full, 150, 140, 160);
    // Clear: R = (150 - 120) / (150 - 100) = 0.60, 150 / 120 = 1.25x full's tokens/s.
    std::string out = format_recovery({none, full, timed_row(MemoryMode::adacc, 120, 115, 125)});
    EXPECT_NE(out.find("batch 4: adacc wins back R = 0.60 of full recomputation's overhead"), std::string::npos) << out;
    EXPECT_NE(out.find("t_adacc 120.0 ms [115.0-125.0]"), std::string::npos) << out;
    EXPECT_NE(out.find("1.25x full's tokens/s"), std::string::npos) << out;
    EXPECT_EQ(out.find("no R"), std::string::npos) << out;

    // Full's interquartile range [105, 160] reaches into none's [95, 110]: the denominator is
    // inside the spread, whatever the mode does.
    out = format_recovery(
        {none, timed_row(MemoryMode::full, 150, 105, 160), timed_row(MemoryMode::adacc, 120, 115, 125)});
    EXPECT_NE(out.find("batch 4: adacc: no R: full recomputation's overhead over none is inside the spread"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("R ="), std::string::npos) << out;

    // The mode's [130, 141] touches full's [140, 160]: its gain over full is inside the spread.
    out = format_recovery(
        {none, full, timed_row(MemoryMode::quant, 135, 130, 141), timed_row(MemoryMode::adacc, 120, 115, 125)});
    EXPECT_EQ(out.find("quant"), std::string::npos) << "quant is not planned: no line for it\n" << out;
    out = format_recovery({none, full, timed_row(MemoryMode::adacc, 135, 130, 141)});
    EXPECT_NE(out.find("batch 4: adacc: no R: its difference from full recomputation is inside the spread"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("R ="), std::string::npos) << out;

    // Full faster than none, both ranges apart: no overhead to win back.
    out = format_recovery({timed_row(MemoryMode::none, 150, 140, 160), timed_row(MemoryMode::full, 100, 95, 110),
                           timed_row(MemoryMode::adacc, 120, 115, 125)});
    EXPECT_NE(out.find("batch 4: adacc: no R: full recomputation ran faster than none"), std::string::npos) << out;
    EXPECT_EQ(out.find("R ="), std::string::npos) << out;
}

// Gradient fidelity against an independent computation: the gradients of one step at init (dropout
// off) read straight from two models, and relative L2 and cosine summed here in long double.
// Recomputation gives keep-all's gradients bit for bit (0 and 1 exactly); INT4 does not.
TEST(Compare, GradientFidelityMatchesAnIndependentComputation) {
    const auto dir = test::scratch_dir("compare_gradients");
    const RunConfig config = small_run(dir);
    CompareOptions options;
    options.modes = {MemoryMode::none, MemoryMode::full, MemoryMode::selective, MemoryMode::quant};
    options.batches = {config.training.batch_size};
    options.steps = 1;
    const auto rows = run_comparison(config, options);
    ASSERT_EQ(rows.size(), 4u);

    const int B = config.training.batch_size, T = config.training.seq_len;
    auto gradients = [&](MemoryMode mode) {
        GPTModel model(config.model, B, T, plan_for_mode(config.model, B, T, mode));
        model.init_weights(config.training.seed);
        DataLoader data = open_token_loader(config, TokenSplit::train, config.data.shuffle);
        std::vector<int> inputs(static_cast<std::size_t>(B) * T), targets(inputs.size());
        data.next_batch(inputs, targets);
        model.forward(inputs.data(), targets.data(), B, T, DropoutContext{0, 0, 0, false}, 1.0f / (B * T));
        model.backward(inputs.data(), B, T, false);
        std::vector<float> g(model.num_params());
        model.read_arena(ModelArena::gradients, 0, g.size(), g.data());
        return g;
    };
    const std::vector<float> none = gradients(MemoryMode::none), quant = gradients(MemoryMode::quant);
    long double err = 0, dot = 0, q2 = 0, n2 = 0;
    for (std::size_t i = 0; i < none.size(); ++i) {
        err += (static_cast<long double>(quant[i]) - none[i]) * (static_cast<long double>(quant[i]) - none[i]);
        dot += static_cast<long double>(quant[i]) * none[i];
        q2 += static_cast<long double>(quant[i]) * quant[i];
        n2 += static_cast<long double>(none[i]) * none[i];
    }
    const double want_rel = std::sqrt(static_cast<double>(err / n2)),
                 want_cos = static_cast<double>(dot / std::sqrt(q2 * n2));

    for (const CompareRow& row : rows) {
        ASSERT_TRUE(row.gradients) << memory_mode_name(row.mode);
        const GradientFidelity& g = *row.gradients;
        EXPECT_EQ(g.tensors.size(), static_cast<std::size_t>(kNumParamTensors));
        if (row.mode == MemoryMode::quant) {
            EXPECT_NEAR(g.overall.relative_l2, want_rel, 1e-9 * want_rel);
            EXPECT_NEAR(g.overall.cosine, want_cos, 1e-12);
            EXPECT_GT(g.overall.relative_l2, 1e-4) << "INT4 activations change the gradients";
            EXPECT_LT(g.overall.cosine, 1.0);
        } else {
            EXPECT_EQ(g.overall.relative_l2, 0.0) << memory_mode_name(row.mode);
            EXPECT_EQ(g.overall.cosine, 1.0) << memory_mode_name(row.mode);
            for (const auto& [name, f] : g.tensors)
                EXPECT_EQ(f.relative_l2, 0.0) << memory_mode_name(row.mode) << " " << name;
        }
    }
    // The table, csv and json carry the figures.
    EXPECT_NE(format_comparison(rows, "table").find("\ngrad_err, grad_cos: relative L2 error and cosine"),
              std::string::npos);
    EXPECT_NE(format_comparison(rows, "csv").find("grad_rel_l2,grad_cosine"), std::string::npos);
    const auto json = nlohmann::json::parse(format_comparison(rows, "json"));
    EXPECT_DOUBLE_EQ(json[3]["gradient"]["relative_l2"].get<double>(), rows[3].gradients->overall.relative_l2);
    EXPECT_TRUE(json[3]["gradient"]["tensors"].contains("qkvw"));
}

// `adacc compare --plot FILE.png` through the real command line: the json beside it carries
// the arenas and the spread, and the PNG is drawn where matplotlib is importable (else: exit 2
// naming matplotlib, the json and the command to draw it by hand).
class ComparePlot : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("compare_plot");
        test::write_random_shard(dir / "train.bin", 5000, 97, 1);
        config = (dir / "run.toml").string();
        std::ofstream(config) << "[model]\nn_layer = 1\nn_embd = 16\nn_head = 2\nvocab_size = 97\nmax_seq_len = 16\n"
                              << "[training]\nbatch_size = 2\nseq_len = 8\nsteps = 2\n[data]\ntrain = \""
                              << (dir / "train.bin").string() << "\"\n";
    }
    std::string compare_args(const std::filesystem::path& png) const {
        return "compare --config " + config + " --modes none,full,quant --steps 3 --no-fidelity --plot " + png.string();
    }
    static bool matplotlib_importable() {
        return test::run_shell("sh -c \"python3 -c 'import matplotlib' || /usr/bin/python3 -c 'import matplotlib'\"")
                   .status == 0;
    }
    std::filesystem::path dir;
    std::string config;
};

TEST_F(ComparePlot, WritesThePngAndTheJsonItDrawsFrom) {
    const auto png = dir / "out" / "compare.png";  // its folder is made
    const test::ProcessResult r = test::run_adacc(compare_args(png));
    const auto json_file = dir / "out" / "compare.json";
    ASSERT_TRUE(std::filesystem::exists(json_file)) << r.output;
    const auto json = nlohmann::json::parse(test::read_bytes(json_file));
    ASSERT_EQ(json.size(), 3u);
    for (const auto& row : json) {
        EXPECT_EQ(row["ran"], true);
        EXPECT_EQ(row["interleaved"], true);
        EXPECT_EQ(row["timed_steps"], 2);
        EXPECT_GT(row["arenas"]["parameters"].get<std::size_t>(), 0u);
        EXPECT_LE(row["step_ms_p25"].get<double>(), row["step_ms_p75"].get<double>());
    }
    if (!matplotlib_importable()) {
        EXPECT_EQ(r.status, 2) << r.output;
        EXPECT_NE(r.output.find("matplotlib"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("draw the plot with: python3"), std::string::npos) << r.output;
        GTEST_SKIP() << "matplotlib is not importable by python3 or /usr/bin/python3: the PNG was not drawn "
                        "(checked instead: exit 2 naming it)";
    }
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("interleaved step by step"), std::string::npos) << r.output;
    const std::string bytes = test::read_bytes(png);
    ASSERT_GT(bytes.size(), 8u) << r.output;
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_F(ComparePlot, WithoutTheScriptPythonOrMatplotlibItSaysWhatIsMissingAndHowToDrawItByHand) {
    // An adacc outside a checkout: no ../scripts/plot_compare.py beside its folder.
    std::filesystem::create_directories(dir / "bin");
    std::filesystem::copy_file(test::adacc_binary(), dir / "bin" / "adacc");
    test::ProcessResult r = test::run_shell((dir / "bin" / "adacc").string() + " " + compare_args(dir / "a.png"));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("the plot script '" + (dir / "scripts" / "plot_compare.py").string() + "' is not there"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("the comparison's json is in '" + (dir / "a.json").string() + "'"), std::string::npos)
        << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir / "a.json"));
    EXPECT_FALSE(std::filesystem::exists(dir / "a.png"));

    // No python3 on PATH.
    r = test::run_shell("env PATH=" + (dir / "empty").string() + " " + test::adacc_binary() + " " +
                        compare_args(dir / "b.png"));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("there is no python3 on PATH (" + (dir / "empty").string() + ")"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("draw the plot with: python3 '"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("b.json' --out '" + (dir / "b.png").string() + "'"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir / "b.json"));

    // python3 without matplotlib: a matplotlib that cannot be imported comes first on PYTHONPATH,
    // for PATH's python3 and for /usr/bin/python3, which the script tries next.
    std::filesystem::create_directories(dir / "nompl" / "matplotlib");
    std::ofstream(dir / "nompl" / "matplotlib" / "__init__.py") << "raise ImportError('hidden by the test')\n";
    r = test::run_shell("env PYTHONPATH=" + (dir / "nompl").string() + " " + test::adacc_binary() + " " +
                        compare_args(dir / "e.png"));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("failed (exit status 1; it said: error: matplotlib is not installed for"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("e.json' --out '" + (dir / "e.png").string() + "'"), std::string::npos) << r.output;
    EXPECT_TRUE(std::filesystem::exists(dir / "e.json"));
    EXPECT_FALSE(std::filesystem::exists(dir / "e.png"));

    // Mistakes found before the comparison runs.
    r = test::run_adacc("compare --config " + config + " --plot " + (dir / "c.svg").string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("the plot is a PNG, name it FILE.png"), std::string::npos) << r.output;
    r = test::run_adacc("compare --config " + config + " --memory-budget 1MiB --max-batch --plot " +
                        (dir / "d.png").string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--max-batch runs none"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "d.json"));
}

// `adacc compare --max-batch`: a fixed mode's batch is the largest whose exact total fits the
// budget, found here by trying every batch; a planned mode's is one the run itself plans within
// the budget, and the next batch's run finds no plan. Every row ran a step at its batch.
TEST(Compare, MaxBatchIsTheLargestThatFitsAndEachRanAStep) {
    const auto dir = test::scratch_dir("max_batch");
    RunConfig config = small_run(dir);
    const int T = config.training.seq_len;
    const ComputeTarget target = compute_target(config);
    const std::uint64_t budget = memory_for_mode(config.model, 6, T, MemoryMode::none, target).total();
    std::ofstream(dir / "run.toml") << to_toml(config);
    const test::ProcessResult r =
        test::run_adacc("compare --config " + (dir / "run.toml").string() + " --memory-budget " +
                            std::to_string(budget) + " --max-batch --modes none,full,quant,adacc --format json",
                        false);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto rows = nlohmann::json::parse(r.output);
    ASSERT_EQ(rows.size(), 4u);
    const int none_batch = rows[0]["max_batch"].get<int>();
    EXPECT_EQ(none_batch, 6) << "the budget is none's total at batch 6";
    for (const auto& row : rows) {
        const MemoryMode mode = parse_memory_mode(row["mode"].get<std::string>());
        SCOPED_TRACE(memory_mode_name(mode));
        const int batch = row["max_batch"].get<int>();
        ASSERT_GT(batch, 0);
        EXPECT_TRUE(row["verified"].get<bool>());
        EXPECT_LE(row["total_bytes"].get<std::uint64_t>(), budget);
        EXPECT_DOUBLE_EQ(row["ratio_vs_none"].get<double>(), static_cast<double>(batch) / none_batch);
        if (is_planned(mode)) {
            RunConfig at_batch = config;
            at_batch.training.batch_size = batch + 1;
            EXPECT_THROW(AdaccRegulator(planned_run(at_batch, target), budget, regulator_options(at_batch, mode),
                                        first_training_batch(at_batch), nullptr),
                         UserError)
                << "batch " << batch + 1 << " has a plan within the budget";
            continue;
        }
        int largest = 0;  // tried well past the reported batch: totals grow with the batch
        for (int b = 1; b <= 4 * batch + 8; ++b)
            if (memory_for_mode(config.model, b, T, mode, target).total() <= budget) largest = b;
        EXPECT_EQ(batch, largest);
        EXPECT_EQ(row["total_bytes"].get<std::uint64_t>(),
                  memory_for_mode(config.model, batch, T, mode, target).total());
    }
}

// Every record of metrics.jsonl that has `key`, as (step, value).
std::vector<std::pair<int, double>> logged(const std::filesystem::path& run_dir, const std::string& key) {
    std::ifstream in(run_dir / "metrics.jsonl");
    std::vector<std::pair<int, double>> out;
    for (std::string line; std::getline(in, line);) {
        const auto record = nlohmann::json::parse(line);
        if (record.contains(key)) out.emplace_back(record["step"].get<int>(), record[key].get<double>());
    }
    return out;
}

TEST(GradientFidelity, TrainingMeasuresItAlongTheRunWithoutChangingTheRun) {
    const auto dir = test::scratch_dir("fidelity_along");
    RunConfig config = small_run(dir);
    config.training.steps = 5;
    for (const char* mode : {"full", "quant"}) {
        SCOPED_TRACE(mode);
        config.memory.mode = mode;
        config.training.fidelity_every = 0;
        config.logging.run_dir = (dir / (std::string(mode) + "_plain")).string();
        Trainer(config, std::nullopt).run();
        config.training.fidelity_every = 2;
        config.logging.run_dir = (dir / (std::string(mode) + "_probed")).string();
        Trainer(config, std::nullopt).run();
        // The probe leaves parameters, optimizer state and data position alone: same losses, bit for bit.
        EXPECT_EQ(logged(dir / (std::string(mode) + "_plain"), "loss"),
                  logged(dir / (std::string(mode) + "_probed"), "loss"));
        const auto errors = logged(config.logging.run_dir, "grad_err");
        const auto cosines = logged(config.logging.run_dir, "grad_cos");
        ASSERT_EQ(errors.size(), 3u);  // steps 2, 4 and the last
        EXPECT_EQ(errors[0].first, 2);
        EXPECT_EQ(errors[1].first, 4);
        EXPECT_EQ(errors[2].first, 5);
        for (std::size_t i = 0; i < errors.size(); ++i) {
            if (std::string(mode) == "full") {  // recomputation is bit-identical to keeping
                EXPECT_EQ(errors[i].second, 0.0);
                EXPECT_EQ(cosines[i].second, 1.0);
            } else {
                EXPECT_GT(errors[i].second, 1e-4);
                EXPECT_LT(errors[i].second, 0.5);
                EXPECT_GT(cosines[i].second, 0.9);
            }
        }
    }
}

TEST(StressHook, ScalesExactlyTheChosenLayernormChannels) {
    const auto dir = test::scratch_dir("stress");
    RunConfig config = small_run(dir);  // n_embd 32
    const std::vector<float> plain = initial_parameters(config.model, config.training.seed, config.stress);
    config.stress.outlier_channels = 4;
    config.stress.outlier_scale = 20.0f;
    const std::vector<float> stressed = initial_parameters(config.model, config.training.seed, config.stress);
    const ParameterLayout layout(config.model);
    ASSERT_EQ(plain.size(), stressed.size());
    std::vector<bool> scaled(plain.size(), false);
    for (int l = 0; l < config.model.n_layer; ++l)
        for (ParamId id : {ParamId::ln1w, ParamId::ln2w})
            for (int c : {4, 12, 20, 28})  // (2i + 1) * 32 / 8
                scaled[layout.at(plain.data(), id, l) - plain.data() + c] = true;
    for (std::size_t i = 0; i < plain.size(); ++i)
        ASSERT_EQ(stressed[i], scaled[i] ? plain[i] * 20.0f : plain[i]) << "parameter " << i;
    config.stress.outlier_channels = 33;  // more than n_embd
    try {
        validate_config(config);
        FAIL() << "33 outlier channels of 32 were accepted";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("stress.outlier_channels = 33"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("model.n_embd = 32"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace adacc
