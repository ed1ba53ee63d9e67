// Config loading: every preset loads, bad input of each kind fails with a message naming the
// problem and the fix, overrides apply, and to_toml() round-trips.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/memory_mode.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;

// A small valid config that the error tests break one key at a time.
constexpr const char* kBaseToml = R"(
[model]
preset = "gpt-micro"

[training]
batch_size = 2
seq_len = 16
steps = 3
)";

fs::path write_file(const std::string& name, const std::string& text) {
    const auto path = test::scratch_dir("config") / name;
    std::ofstream(path) << text;
    return path;
}

std::string toml_error(const std::string& text) {
    return test::user_error_of([&] { config_from_toml_string(text, "test.toml"); });
}

std::string override_error(const std::string& assignment) {
    return test::user_error_of([&] {
        RunConfig config = config_from_toml_string(kBaseToml, "base.toml");
        apply_override(config, assignment);
        validate_config(config, "base.toml");
    });
}

TEST(Config, EveryPresetFileLoads) {
    const fs::path dir = fs::path(ADACC_SOURCE_DIR) / "configs";
    int loaded = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".toml") continue;
        SCOPED_TRACE(entry.path().string());
        EXPECT_NO_THROW(load_config(entry.path()));
        ++loaded;
    }
    EXPECT_GE(loaded, 7);
}

TEST(Config, PaperPresetFilesMatchModelPresets) {
    for (const std::string name : {"gpt-117m", "gpt-345m", "gpt-762m", "gpt-1.5b", "gpt-4.7b"}) {
        SCOPED_TRACE(name);
        const auto config = load_config(fs::path(ADACC_SOURCE_DIR) / "configs" / (name + ".toml"));
        const auto preset = gpt_preset(name).value();
        EXPECT_EQ(config.preset, name);
        EXPECT_EQ(config.model.n_layer, preset.n_layer);
        EXPECT_EQ(config.model.n_embd, preset.n_embd);
        EXPECT_EQ(config.model.n_head, preset.n_head);
        EXPECT_EQ(config.model.vocab_size, preset.vocab_size);
        EXPECT_EQ(config.model.max_seq_len, preset.max_seq_len);
        EXPECT_EQ(config.training.seq_len, 1024);
    }
}

TEST(Config, QuickstartPointsAtFortunesAndCheckpoints) {
    const auto config = load_config(fs::path(ADACC_SOURCE_DIR) / "configs" / "quickstart.toml");
    EXPECT_EQ(config.logging.run_dir, "runs/quickstart");
    EXPECT_EQ(config.data.train, "datasets/fortunes/train_*.bin");
    EXPECT_EQ(config.data.val, "datasets/fortunes/val_*.bin");
    EXPECT_GT(config.checkpoint.every, 0);
    EXPECT_GT(config.training.val_every, 0);
}

TEST(Config, PresetStartsTheModelAndOtherKeysOverrideItInAnyOrder) {
    const auto config = config_from_toml_string(R"(
[model]
n_layer = 2
preset = "gpt-345m"
dropout = 0.1
)",
                                                "t.toml");
    EXPECT_EQ(config.preset, "gpt-345m");
    EXPECT_EQ(config.model.n_layer, 2);
    EXPECT_EQ(config.model.n_embd, 1024);
    EXPECT_EQ(config.model.n_head, 16);
    EXPECT_FLOAT_EQ(config.model.dropout, 0.1f);
}

TEST(Config, UnspecifiedKeysKeepTheirDefaults) {
    const auto config = config_from_toml_string(kBaseToml, "t.toml");
    const RunConfig defaults;
    EXPECT_EQ(config.optimizer.beta2, defaults.optimizer.beta2);
    EXPECT_EQ(config.lr.schedule, defaults.lr.schedule);
    EXPECT_EQ(config.checkpoint.keep, defaults.checkpoint.keep);
}

TEST(Config, UnknownPresetListsTheKnownOnes) {
    const auto message = toml_error("[model]\npreset = \"gpt-9000\"\n");
    EXPECT_NE(message.find("model.preset = \"gpt-9000\" in test.toml:2"), std::string::npos) << message;
    EXPECT_NE(message.find("not a known preset"), std::string::npos) << message;
    EXPECT_NE(message.find("gpt-117m"), std::string::npos) << message;
}

TEST(Config, MalformedTomlNamesFileLineColumnAndTheProblem) {
    const auto message = toml_error("[training]\nbatch_size = = 4\n");
    EXPECT_NE(message.find("test.toml:2:"), std::string::npos) << message;
    EXPECT_NE(message.find("malformed TOML"), std::string::npos) << message;
}

TEST(Config, MalformedFileOnDiskNamesThePath) {
    const auto path = write_file("broken.toml", "[training\nbatch_size = 4\n");
    const auto message = test::user_error_of([&] { load_config(path); });
    EXPECT_NE(message.find(path.string() + ":1:"), std::string::npos) << message;
}

TEST(Config, MissingFileSaysSo) {
    const auto message = test::user_error_of([] { load_config("/nonexistent/run.toml"); });
    EXPECT_NE(message.find("cannot read config file '/nonexistent/run.toml'"), std::string::npos) << message;
}

TEST(Config, UnknownKeySuggestsTheClosestValidKey) {
    const auto message = toml_error("[training]\nbatchsize = 4\n");
    EXPECT_NE(message.find("unknown key 'training.batchsize' in test.toml:2"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'training.batch_size'?"), std::string::npos) << message;
}

TEST(Config, KeyInTheWrongSectionSuggestsItsSection) {
    const auto message = toml_error("[training]\nwarmup_steps = 4\n");
    EXPECT_NE(message.find("did you mean 'lr.warmup_steps'?"), std::string::npos) << message;
}

TEST(Config, UnrecognisableKeyListsTheSectionsKeys) {
    const auto message = toml_error("[lr]\nzzzzzzzzzzzz = 4\n");
    EXPECT_NE(message.find("valid keys in [lr]: max, min, warmup_steps, schedule"), std::string::npos) << message;
}

TEST(Config, UnknownSectionSuggestsTheClosestSection) {
    const auto message = toml_error("[trainig]\nbatch_size = 4\n");
    EXPECT_NE(message.find("unknown section [trainig] in test.toml:1"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean [training]?"), std::string::npos) << message;
}

TEST(Config, TopLevelKeySaysKeysBelongInASection) {
    const auto message = toml_error("batch_sise = 4\n");
    EXPECT_NE(message.find("unknown key 'batch_sise' at the top level"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'training.batch_size'?"), std::string::npos) << message;
}

TEST(Config, SectionWrittenAsAValueIsRejected) {
    const auto message = toml_error("training = 4\n");
    EXPECT_NE(message.find("must be a section ([training])"), std::string::npos) << message;
}

TEST(Config, WrongTypeNamesKeyExpectedTypeAndWhatWasGiven) {
    struct Case {
        const char* toml;
        const char* expected;
    };
    const Case cases[] = {
        {"[training]\nbatch_size = \"4\"\n",
         "training.batch_size in test.toml:2:14 must be an integer, but is a string (\"4\")"},
        {"[training]\nbatch_size = 4.5\n",
         "training.batch_size in test.toml:2:14 must be an integer, but is a floating-point number (4.5)"},
        {"[lr]\nmax = true\n", "lr.max in test.toml:2:7 must be a number, but is a boolean (true)"},
        {"[data]\nshuffle = 1\n", "data.shuffle in test.toml:2:11 must be true or false, but is an integer (1)"},
        {"[data]\ntrain = 3\n", "data.train in test.toml:2:9 must be a string, but is an integer (3)"},
        {"[eval]\ntasks = \"lambada\"\n",
         "eval.tasks in test.toml:2:9 must be a list of strings like [\"lambada\", \"arc_easy\"], but is a string"},
        {"[eval]\ntasks = [1, 2]\n", "eval.tasks in test.toml:2:9 must be a list of strings"},
    };
    for (const auto& c : cases) {
        const auto message = toml_error(c.toml);
        EXPECT_NE(message.find(c.expected), std::string::npos) << "got: " << message << "\nwanted: " << c.expected;
    }
}

TEST(Config, IntegersAreAcceptedForNumbers) {
    const auto config = config_from_toml_string("[lr]\nmax = 1\nmin = 0\n[model]\ndropout = 0\n", "t.toml");
    EXPECT_EQ(config.lr.max, 1.0f);
    EXPECT_EQ(config.lr.min, 0.0f);
}

TEST(Config, OutOfRangeNamesKeyValueAndAllowedRange) {
    struct Case {
        const char* assignment;
        const char* expected;
    };
    const Case cases[] = {
        {"training.batch_size=0", "training.batch_size = 0, but it must be >= 1"},
        {"training.seq_len=17",
         "training.seq_len = 17, but it must be in [1, model.max_seq_len] (model.max_seq_len = 16)"},
        {"training.steps=0", "training.steps = 0, but it must be >= 1"},
        {"training.grad_accum=-1", "training.grad_accum = -1, but it must be >= 1"},
        {"training.collective_timeout_s=0", "training.collective_timeout_s = 0.0, but it must be > 0"},
        {"model.dropout=1", "model.dropout = 1.0, but it must be in [0, 1)"},
        {"model.vocab_size=70000", "model.vocab_size = 70000, but it must be in [2, 65536]"},
        {"lr.max=0", "lr.max = 0.0, but it must be > 0"},
        {"lr.min=0.1", "lr.min = 0.1, but it must be in [0, lr.max] (lr.max = 0.0006)"},
        {"lr.schedule=linear", "lr.schedule = \"linear\", but it must be one of cosine, constant"},
        {"memory.mode=fast",
         "memory.mode = \"fast\", but it must be one of none, full, selective, quant, adacc, recompute-opt"},
        {"memory.budget=lots",
         "memory.budget = \"lots\", but it must be a size of at least one byte such as \"24GiB\""},
        // 0 bytes holds nothing: refused here for every command (it read as "no limit" in one).
        {"memory.budget=0", "memory.budget = \"0\", but it must be a size of at least one byte"},
        {"optimizer.beta1=1", "optimizer.beta1 = 1.0, but it must be in [0, 1)"},
        {"optimizer.beta2=-0.5", "optimizer.beta2 = -0.5, but it must be in [0, 1)"},
        {"optimizer.eps=0", "optimizer.eps = 0.0, but it must be > 0"},
        {"optimizer.grad_clip=-1", "optimizer.grad_clip = -1.0, but it must be >= 0"},
        {"checkpoint.keep=0", "checkpoint.keep = 0, but it must be >= 1"},
        {"eval.tasks=lambada,squad",
         "eval.tasks = [\"lambada\", \"squad\"], but it must be a list whose items are each one of lambada, arc_easy"},
        {"logging.run_dir=", "logging.run_dir = \"\", but it must be a non-empty string"},
        {"logging.print_every=0", "logging.print_every = 0, but it must be >= 1"},
    };
    for (const auto& c : cases) {
        const auto message = override_error(c.assignment);
        EXPECT_NE(message.find(c.expected), std::string::npos) << "got: " << message << "\nwanted: " << c.expected;
        EXPECT_NE(message.find("invalid config base.toml"), std::string::npos) << message;
        EXPECT_NE(message.find("or with --set"), std::string::npos) << message;
    }
}

TEST(Config, ModelShapeIsCheckedByGptConfig) {
    const auto message = override_error("model.n_embd=15");
    EXPECT_NE(message.find("model.n_embd (15) must be divisible by model.n_head (2)"), std::string::npos) << message;
    EXPECT_NE(message.find("fix the [model] section or pick a preset"), std::string::npos) << message;
}

// A shape the command line broke names the --set keys it came from.
TEST(Config, ModelShapeErrorNamesTheCommandLinesModelKeys) {
    const std::vector<std::string> overrides{"model.n_head=5", "model.dtype=fp32", "training.steps=3"};
    const auto message = test::user_error_of([&] {
        RunConfig config = config_from_toml_string(kBaseToml, "base.toml");
        for (const auto& o : overrides) apply_override(config, o);
        validate_config(config, "base.toml", overrides);
    });
    EXPECT_NE(message.find("must be divisible by model.n_head (5)"), std::string::npos) << message;
    EXPECT_NE(message.find("; fix --set model.n_head, the [model] section, or pick a preset"), std::string::npos)
        << message;
    EXPECT_EQ(message.find("training.steps"), std::string::npos) << message;
    EXPECT_EQ(message.find("model.dtype"), std::string::npos) << message;  // not a shape key
}

TEST(Config, IntegerTooLargeForItsFieldIsRejected) {
    const auto message = override_error("training.steps=99999999999");
    EXPECT_NE(message.find("training.steps = 99999999999 in --set training.steps=99999999999 does not fit"),
              std::string::npos)
        << message;
}

TEST(Config, OverrideSyntaxErrorsShowTheExpectedForm) {
    for (const char* bad : {"training.batch_size", "batch_size=4", "=4", ".batch_size=4", "training.=4"}) {
        const auto message = override_error(bad);
        EXPECT_NE(message.find("bad override '" + std::string(bad) + "': expected section.key=value"),
                  std::string::npos)
            << message;
    }
}

TEST(Config, OverrideOfUnknownKeySuggests) {
    const auto message = override_error("training.batchsize=8");
    EXPECT_NE(message.find("unknown key 'training.batchsize' in --set training.batchsize=8; did you mean "
                           "'training.batch_size'?"),
              std::string::npos)
        << message;
    EXPECT_NE(override_error("trainig.batch_size=8").find("did you mean [training]?"), std::string::npos);
}

TEST(Config, OverrideWithWrongTypeNamesTheValue) {
    EXPECT_NE(override_error("training.batch_size=abc")
                  .find("training.batch_size in --set training.batch_size=abc must be an integer, but 'abc' is not"),
              std::string::npos);
    EXPECT_NE(override_error("lr.max=fast").find("lr.max in --set lr.max=fast must be a number"), std::string::npos);
    EXPECT_NE(override_error("data.shuffle=maybe").find("must be true or false"), std::string::npos);
}

TEST(Config, OverridesApplyPerType) {
    RunConfig config = config_from_toml_string(kBaseToml, "base.toml");
    apply_override(config, "training.batch_size=32");
    apply_override(config, " lr.max = 3e-4 ");
    apply_override(config, "data.shuffle=true");
    apply_override(config, "data.train=\"my data/train_*.bin\"");
    apply_override(config, "eval.tasks=lambada, arc_easy");
    apply_override(config, "memory.budget=24GiB");
    apply_override(config, "training.seed=42");
    EXPECT_EQ(config.training.batch_size, 32);
    EXPECT_EQ(config.lr.max, 3e-4f);
    EXPECT_TRUE(config.data.shuffle);
    EXPECT_EQ(config.data.train, "my data/train_*.bin");
    EXPECT_EQ(config.eval.tasks, (std::vector<std::string>{"lambada", "arc_easy"}));
    EXPECT_EQ(config.memory.budget, "24GiB");
    EXPECT_EQ(config.training.seed, 42u);
    apply_override(config, "eval.tasks=");
    EXPECT_TRUE(config.eval.tasks.empty());
}

TEST(Config, PresetOverrideReplacesTheModel) {
    RunConfig config = config_from_toml_string(kBaseToml, "base.toml");
    apply_override(config, "model.preset=gpt-117m");
    apply_override(config, "model.n_layer=3");
    EXPECT_EQ(config.preset, "gpt-117m");
    EXPECT_EQ(config.model.n_embd, 768);
    EXPECT_EQ(config.model.n_layer, 3);
}

TEST(Config, LoadConfigAppliesOverridesAfterTheFileThenValidates) {
    const auto path = write_file("run.toml", kBaseToml);
    const auto config = load_config(path, {"training.batch_size=5", "model.max_seq_len=32", "training.seq_len=32"});
    EXPECT_EQ(config.training.batch_size, 5);
    EXPECT_EQ(config.training.seq_len, 32);
    // The file alone would be fine; the override makes it invalid, so the message blames the
    // command line, not the file, and is a SettingError for the key (the CLI adds its flag).
    try {
        load_config(path, {"training.seq_len=64"});
        FAIL() << "training.seq_len beyond model.max_seq_len must be refused";
    } catch (const SettingError& e) {
        EXPECT_EQ(e.setting(), "training.seq_len");
        const std::string message = e.what();
        EXPECT_NE(message.find("invalid value on the command line: training.seq_len = 64"), std::string::npos)
            << message;
        EXPECT_EQ(message.find(path.string()), std::string::npos) << message;
    }
}

void expect_same_config(const RunConfig& a, const RunConfig& b) {
    EXPECT_EQ(a.preset, b.preset);
    EXPECT_EQ(a.model.n_layer, b.model.n_layer);
    EXPECT_EQ(a.model.n_embd, b.model.n_embd);
    EXPECT_EQ(a.model.n_head, b.model.n_head);
    EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
    EXPECT_EQ(a.model.max_seq_len, b.model.max_seq_len);
    EXPECT_EQ(a.model.dropout, b.model.dropout);
    EXPECT_EQ(a.training.batch_size, b.training.batch_size);
    EXPECT_EQ(a.training.seq_len, b.training.seq_len);
    EXPECT_EQ(a.training.steps, b.training.steps);
    EXPECT_EQ(a.training.grad_accum, b.training.grad_accum);
    EXPECT_EQ(a.training.seed, b.training.seed);
    EXPECT_EQ(a.training.val_every, b.training.val_every);
    EXPECT_EQ(a.training.val_batches, b.training.val_batches);
    EXPECT_EQ(a.training.threads, b.training.threads);
    EXPECT_EQ(a.training.overlap_grads, b.training.overlap_grads);
    EXPECT_EQ(a.training.deterministic, b.training.deterministic);
    EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
    EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
    EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
    EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
    EXPECT_EQ(a.optimizer.grad_clip, b.optimizer.grad_clip);
    EXPECT_EQ(a.lr.max, b.lr.max);
    EXPECT_EQ(a.lr.min, b.lr.min);
    EXPECT_EQ(a.lr.warmup_steps, b.lr.warmup_steps);
    EXPECT_EQ(a.lr.schedule, b.lr.schedule);
    EXPECT_EQ(a.data.train, b.data.train);
    EXPECT_EQ(a.data.val, b.data.val);
    EXPECT_EQ(a.data.shuffle, b.data.shuffle);
    EXPECT_EQ(a.memory.mode, b.memory.mode);
    EXPECT_EQ(a.memory.budget, b.memory.budget);
    EXPECT_EQ(a.memory.granularity, b.memory.granularity);
    EXPECT_EQ(a.memory.profile, b.memory.profile);
    EXPECT_EQ(a.memory.monitor_max_interval, b.memory.monitor_max_interval);
    EXPECT_EQ(a.memory.min_replan_steps, b.memory.min_replan_steps);
    EXPECT_EQ(a.memory.codecs, b.memory.codecs);
    EXPECT_EQ(a.memory.max_codec_error, b.memory.max_codec_error);
    EXPECT_EQ(a.checkpoint.every, b.checkpoint.every);
    EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
    EXPECT_EQ(a.eval.every, b.eval.every);
    EXPECT_EQ(a.eval.tasks, b.eval.tasks);
    EXPECT_EQ(a.eval.limit, b.eval.limit);
    EXPECT_EQ(a.eval.data, b.eval.data);
    EXPECT_EQ(a.eval.vocab, b.eval.vocab);
    EXPECT_EQ(a.logging.run_dir, b.logging.run_dir);
    EXPECT_EQ(a.logging.print_every, b.logging.print_every);
}

TEST(Config, ToTomlRoundTripsEveryField) {
    RunConfig config;
    config.preset = "gpt-tiny";
    config.model = gpt_preset("gpt-tiny").value();
    config.model.n_layer = 3;
    config.model.dropout = 0.1f;
    config.training = {7, 33, 1234, 3, 9007199254740993ull, 17, 5, 2};
    config.training.overlap_grads = false;  // not the default
    config.training.deterministic = false;  // not the default
    config.optimizer = {0.85f, 0.999f, 1.234e-7f, 0.05f, 0.7f};
    config.lr = {3.3e-4f, 1.1e-5f, 123, "constant"};
    config.data = {"data/with \"quotes\" and \\ backslash/train_*.bin", "", true};
    config.memory = {"adacc", "1.5 GiB", "global", "runs/profile.json", 32, 7, "paper", 0.25f};
    config.checkpoint = {250, 4};
    config.eval = {100, {"arc_easy", "lambada"}, 0, "eval data/", "gpt2 vocab/"};
    config.logging = {"runs/round trip", 3};
    validate_config(config);

    const std::string text = to_toml(config);
    const RunConfig loaded = config_from_toml_string(text, "roundtrip.toml");
    expect_same_config(config, loaded);
    EXPECT_EQ(to_toml(loaded), text);
}

TEST(Config, ToTomlOfEachPresetFileRoundTrips) {
    for (const auto& entry : fs::directory_iterator(fs::path(ADACC_SOURCE_DIR) / "configs")) {
        SCOPED_TRACE(entry.path().string());
        const auto config = load_config(entry.path());
        expect_same_config(config, config_from_toml_string(to_toml(config), "roundtrip.toml"));
    }
}

TEST(Config, FloatsPrintAsWritten) {
    RunConfig config;
    config.lr.max = 6e-4f;
    const auto text = to_toml(config);
    EXPECT_NE(text.find("max = 0.0006\n"), std::string::npos) << text;
    EXPECT_NE(text.find("eps = 1e-08\n"), std::string::npos) << text;
}

TEST(Config, TableListsEveryKeyWithAlignedValues) {
    const auto config = config_from_toml_string(kBaseToml, "t.toml");
    const auto table = format_config_table(config);
    EXPECT_NE(table.find("training.batch_size"), std::string::npos);
    EXPECT_NE(table.find("model.preset"), std::string::npos);
    EXPECT_NE(table.find("\"gpt-micro\""), std::string::npos);
    std::size_t value_column = std::string::npos;
    std::size_t rows = 0;
    std::size_t start = 0;
    while (start < table.size()) {
        const auto end = table.find('\n', start);
        const auto line = table.substr(start, end - start);
        const auto column = line.find_first_not_of(' ', line.find(' '));
        if (value_column == std::string::npos) value_column = column;
        EXPECT_EQ(column, value_column) << line;
        ++rows;
        start = end + 1;
    }
    EXPECT_EQ(rows, 56u);  // the 53 fields of run_config.h, plus model.preset, model.attention and model.dtype
}

TEST(Config, ReferenceDescribesEveryKey) {
    const auto reference = format_config_reference();
    EXPECT_NE(reference.find("memory.mode"), std::string::npos);
    EXPECT_NE(reference.find("one of none, full, selective, quant, adacc, recompute-opt"), std::string::npos);
}

// kMemoryModes is the one list of mode names: each parses back to its mode, the fixed modes are
// those without a planner, and a wrong name is refused with the whole list.
TEST(MemoryModes, NamesComeFromOneTable) {
    for (const auto& m : kMemoryModes) {
        EXPECT_EQ(parse_memory_mode(m.name), m.mode);
        EXPECT_STREQ(memory_mode_name(m.mode), m.name);
        EXPECT_EQ(is_planned(m.mode), m.planned);
    }
    EXPECT_EQ(fixed_memory_modes(),
              (std::vector<MemoryMode>{MemoryMode::none, MemoryMode::full, MemoryMode::selective, MemoryMode::quant}));
    EXPECT_EQ(join_memory_mode_names(fixed_memory_modes()), "none, full, selective, quant");
    const auto message = test::user_error_of([] { parse_memory_mode("fast"); });
    EXPECT_NE(
        message.find("memory.mode 'fast' is unknown; use one of none, full, selective, quant, adacc, recompute-opt"),
        std::string::npos)
        << message;
}

TEST(Size, ParsesBytesAndUnits) {
    constexpr std::uint64_t KiB = 1024, MiB = KiB * KiB, GiB = MiB * KiB, TiB = GiB * KiB;
    EXPECT_EQ(parse_size("123456"), 123456u);
    EXPECT_EQ(parse_size("0"), 0u);
    EXPECT_EQ(parse_size("10B"), 10u);
    EXPECT_EQ(parse_size("24GiB"), 24 * GiB);
    EXPECT_EQ(parse_size("1.5 GiB"), GiB + GiB / 2);
    EXPECT_EQ(parse_size("512M"), 512 * MiB);
    EXPECT_EQ(parse_size("512MiB"), 512 * MiB);
    EXPECT_EQ(parse_size("2 kib"), 2 * KiB);
    EXPECT_EQ(parse_size("4K"), 4 * KiB);
    EXPECT_EQ(parse_size("1KB"), 1000u);
    EXPECT_EQ(parse_size("2.5GB"), 2500000000u);
    EXPECT_EQ(parse_size("1T"), TiB);
    EXPECT_EQ(parse_size("3TiB"), 3 * TiB);
    EXPECT_EQ(parse_size("0.5 KiB"), 512u);
    EXPECT_EQ(parse_size("18446744073709551615"), 18446744073709551615ull);
    // Every unit format_bytes prints is read back: "1048576TiB" was accepted and printed as
    // "1.00 EiB", which was then refused.
    EXPECT_EQ(parse_size("2PiB"), 2 * 1024 * TiB);
    EXPECT_EQ(parse_size("1EiB"), 1024 * 1024 * TiB);
    EXPECT_EQ(parse_size("1048576TiB"), parse_size("1EiB"));
    EXPECT_EQ(parse_size(format_bytes(parse_size("1048576TiB"))), parse_size("1EiB"));
    EXPECT_EQ(parse_size("1EB"), 1000000000000000000ull);
    EXPECT_NE(test::user_error_of([] { parse_size("16EiB"); }).find("too large"), std::string::npos);
}

TEST(Size, RejectsMalformedSizesWithAHint) {
    for (const char* bad : {"", "abc", "-1G", "1.2.3G", "12 parsecs", "GiB", "1e3", "99999999999T"}) {
        const auto message = test::user_error_of([&] { parse_size(bad); });
        EXPECT_NE(message.find("bad size '" + std::string(bad) + "'"), std::string::npos) << message;
    }
    EXPECT_NE(test::user_error_of([] { parse_size("12 parsecs"); }).find("such as \"24GiB\""), std::string::npos);
    EXPECT_NE(test::user_error_of([] { parse_size("99999999999T"); }).find("too large"), std::string::npos);
}

TEST(Size, AlignsUp) {
    EXPECT_EQ(align_up(0, 64), 0u);
    EXPECT_EQ(align_up(1, 64), 64u);
    EXPECT_EQ(align_up(64, 64), 64u);
    EXPECT_EQ(align_up(65, 64), 128u);
    EXPECT_EQ(align_up(4097, 4096), 8192u);
}

TEST(Size, FormatsInBinaryUnits) {
    EXPECT_EQ(format_bytes(0), "0 B");
    EXPECT_EQ(format_bytes(1023), "1023 B");
    EXPECT_EQ(format_bytes(1024), "1.00 KiB");
    EXPECT_EQ(format_bytes(1536ull << 20), "1.50 GiB");
    EXPECT_EQ(format_bytes(24ull << 30), "24.00 GiB");
    EXPECT_EQ(format_bytes(5ull << 40), "5.00 TiB");
}

// kBaseToml's run with `model_keys` added to its [model] section, on `device`.
std::string run_on(const std::string& device, const std::string& model_keys = "") {
    return "[model]\npreset = \"gpt-micro\"\n" + model_keys + "[training]\nbatch_size = 2\nseq_len = 16\nsteps = 3\n" +
           "device = \"" + device + "\"\n";
}

// model.attention: unset, it follows the device (materialized on the CPU; on CUDA in bf16 cudnn
// when cuDNN loads, else materialized); set, it is kept; cudnn is refused where it cannot run, with
// the fix.
TEST(Config, AttentionUnsetIsMaterializedOnTheCpu) {
    const auto config = config_from_toml_string(run_on("cpu"), "t.toml");
    EXPECT_EQ(config.model.attention, AttentionImpl::materialized);
    EXPECT_NE(to_toml(config).find("attention = \"materialized\""), std::string::npos);  // stored as chosen
}

TEST(Config, AttentionUnsetOnCudaIsCudnnWhenCudnnLoads) {
    const auto config = config_from_toml_string(run_on("cuda"), "t.toml");
    EXPECT_EQ(config.model.attention, cudnn_problem().empty() ? AttentionImpl::cudnn : AttentionImpl::materialized)
        << cudnn_problem();
    // fp32 on CUDA: cuDNN's attention does not run it, so materialized.
    const auto fp32 = config_from_toml_string(run_on("cuda", "dtype = \"fp32\"\n"), "t.toml");
    EXPECT_EQ(fp32.model.attention, AttentionImpl::materialized);
}

TEST(Config, AttentionGivenIsKept) {
    const auto config = config_from_toml_string(run_on("cuda", "attention = \"fused\"\n"), "t.toml");
    EXPECT_EQ(config.model.attention, AttentionImpl::fused);
}

TEST(Config, CudnnAttentionOnTheCpuIsRefusedNamingFused) {
    const std::string message = toml_error(run_on("cpu", "attention = \"cudnn\"\n"));
    EXPECT_NE(message.find("runs on CUDA only"), std::string::npos) << message;
    EXPECT_NE(message.find("model.attention = \"fused\""), std::string::npos) << message;
}

// training.deterministic: true unless set, and it reaches the compute target the model is built
// for (its kernel context and cuDNN's workspace: tests/test_device_memory.cpp).
TEST(Config, DeterministicIsTheDefaultAndReachesTheComputeTarget) {
    const auto config = config_from_toml_string(run_on("cpu"), "t.toml");
    EXPECT_TRUE(config.training.deterministic);
    EXPECT_TRUE(compute_target(config, 1).deterministic);
    RunConfig fast = config;
    apply_override(fast, "training.deterministic=false");
    EXPECT_FALSE(fast.training.deterministic);
    EXPECT_FALSE(compute_target(fast, 1).deterministic);
    EXPECT_NE(to_toml(fast).find("deterministic = false"), std::string::npos);
}

TEST(Config, CudnnAttentionInFp32IsRefusedNamingBf16) {
    const std::string message = toml_error(run_on("cuda", "attention = \"cudnn\"\ndtype = \"fp32\"\n"));
    EXPECT_NE(message.find("bf16"), std::string::npos) << message;
    EXPECT_NE(message.find("fused"), std::string::npos) << message;
}

}  // namespace
}  // namespace adacc
