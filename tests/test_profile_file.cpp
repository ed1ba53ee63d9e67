// A profile file (memory.profile, `adacc plan --profile`) is a measurement of one block of one run:
// it names what it was measured for, and a run of another model, batch, device, dtype or codec
// parameters refuses it naming the field; its ops, tensors, sizes, bounds, errors and times are
// checked against the block the run builds. Every refusal is a user error (exit 2) naming the
// file, the key and the fix. A fuzz of 200 mutated profiles: each run ends with exit 0 or 2, never
// 3 or a signal, refuses every mutation that breaks the file, and never plans over the budget.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "src/adacc/adacc_regulator.h"
#include "src/adacc/profiler.h"
#include "src/common/errors.h"
#include "src/config/config.h"
#include "src/engine/memory_report.h"
#include "src/train/token_loader.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kB = 4, kT = 16;

// A tiny run: two blocks (the profiler's whole slice), dropout (masks among the planned tensors),
// random profiling tokens (no data.train).
fs::path write_config(const fs::path& dir) {
    const fs::path file = dir / "run.toml";
    std::ofstream(file) << "[model]\nn_layer = 2\nn_embd = 32\nn_head = 4\nvocab_size = 97\nmax_seq_len = 16\n"
                        << "dropout = 0.1\n[training]\nbatch_size = " << kB << "\nseq_len = " << kT
                        << "\nsteps = 1\n[logging]\nrun_dir = \"" << (dir / "run").string() << "\"\n";
    return file;
}

// Halfway between full recomputation's total and keeping everything's: the plan must mix.
std::uint64_t mixed_budget(const RunConfig& config) {
    const std::uint64_t full = memory_for_mode(config.model, kB, kT, MemoryMode::full).total();
    const std::uint64_t none = memory_for_mode(config.model, kB, kT, MemoryMode::none).total();
    return (full + none) / 2;
}

json read_json(const fs::path& file) {
    std::ifstream in(file);
    return json::parse(in);
}

void write_text(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }

class ProfileFile : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("profile_file");
        config_file = write_config(dir);
        config = load_config(config_file);
        budget = mixed_budget(config);
        valid = dir / "profile.json";
        const test::ProcessResult r = run_plan("--save-profile " + valid.string());
        ASSERT_EQ(r.status, 0) << r.output;
    }
    // `adacc plan` of the tiny run at the mixed budget, with `extra` (shell text).
    test::ProcessResult run_plan(const std::string& extra) const {
        return test::run_adacc("plan --config " + config_file.string() + " --memory-budget " + std::to_string(budget) +
                               " " + extra);
    }
    // The valid profile edited by `edit`, as FILE.
    fs::path edited(const std::string& name, const std::function<void(json&)>& edit) const {
        json j = read_json(valid);
        edit(j);
        const fs::path file = dir / name;
        write_text(file, j.dump(2));
        return file;
    }
    // `adacc plan --profile FILE EXTRA` exits 2 with each of `fragments` in its message.
    void expect_refused(const fs::path& file, const std::string& extra,
                        const std::vector<std::string>& fragments) const {
        const test::ProcessResult r = run_plan("--profile " + file.string() + " " + extra);
        EXPECT_EQ(r.status, 2) << extra << "\n" << r.output;
        for (const auto& f : fragments)
            EXPECT_NE(r.output.find(f), std::string::npos) << "missing '" << f << "' in:\n" << r.output;
    }

    fs::path dir, config_file, valid;
    RunConfig config;
    std::uint64_t budget = 0;
};

// The issue's case (a profile for C=128 planned a C=64 model) and every other field that changes
// a block: each named with the profile's value, the run's and the fix. The device and dtype need
// no GPU: with a profile, `adacc plan --device cuda` plans without running anything.
TEST_F(ProfileFile, AProfileOfAnotherRunIsRefusedNamingTheField) {
    const std::string fix = "delete it or point memory.profile elsewhere";
    const std::string prefix = "profile " + valid.string() + " was measured for ";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"--set model.n_embd=64", "n_embd 32, but this run has n_embd 64"},
        {"--set model.n_head=2", "n_head 4, but this run has n_head 2"},
        {"--set model.n_layer=1", "layers 2, but this run has layers 1"},
        {"--set model.dropout=0", "dropout 0.10000000149011612, but this run has dropout 0.0"},
        {"--set model.attention=fused", "attention \"materialized\", but this run has attention \"fused\""},
        {"--set training.batch_size=2", "batch 4, but this run has batch 2"},
        {"--set training.seq_len=8", "seq 16, but this run has seq 8"},
        {"--device cuda --dtype fp32", "device \"cpu\", but this run has device \"cuda\""},
    };
    for (const auto& [set, message] : cases) expect_refused(valid, set, {prefix + message, fix, "--profile FILE"});

    const fs::path bf16 = edited("bf16.json", [](json& j) {
        j["measured_for"]["device"] = "cuda";
        j["measured_for"]["dtype"] = "bf16";
    });
    expect_refused(
        bf16, "--device cuda --dtype fp32",
        {"profile " + bf16.string() + " was measured for dtype \"bf16\", but this run has dtype \"fp32\"", fix});
    const fs::path group = edited("group.json", [](json& j) { j["measured_for"]["codec"]["group_size"] = 32; });
    expect_refused(group, "", {"was measured for codec.group_size 32, but this run has codec.group_size 64", fix});

    // What the block does not depend on is free to differ: the vocabulary, layers beyond the
    // slice (a third layer needs more memory: twice the budget), the seed.
    const test::ProcessResult r = test::run_adacc(
        "plan --config " + config_file.string() + " --memory-budget " + std::to_string(2 * budget) + " --profile " +
        valid.string() + " --set model.vocab_size=120 --set model.n_layer=3 --set training.seed=9");
    EXPECT_EQ(r.status, 0) << r.output;
}

// The issue's accepted-but-wrong profiles, and the negative time that was an internal error:
// each is a user error naming the file, the key and the fix.
TEST_F(ProfileFile, AProfileThatIsNotAMeasurementOfTheBlockIsRefusedNamingTheKey) {
    const std::string fix = "delete it and let the run profile again";
    struct Case {
        std::string name;
        std::function<void(json&)> edit;
        std::string key_message;
    };
    const std::vector<Case> cases = {
        {"bogus", [](json& j) { j["tensors"][0]["name"] = "bogus"; },
         "tensors[0].name is \"bogus\", but kind 1 is ln1"},
        {"three", [](json& j) { j["tensors"].erase(j["tensors"].begin() + 3, j["tensors"].end()); }, "tensors has no "},
        {"bound", [](json& j) { j["tensors"][0]["codecs"][0]["compressed_bound"] = 0; },
         "tensors[0].codecs[0].compressed_bound is 0, but "},
        {"negative_error", [](json& j) { j["tensors"][1]["codecs"][0]["relative_error"] = -0.5; },
         "tensors[1].codecs[0].relative_error is -0.5, not a number in [0"},
        {"negative_layer_error", [](json& j) { j["tensors"][1]["codecs"][0]["layer_errors"][1] = -0.5; },
         "tensors[1].codecs[0].layer_errors[1] is -0.5"},
        {"huge_time", [](json& j) { j["ops"][0]["forward_ms"] = 1e308; }, "ops[0].forward_ms is 1e+308, not a number"},
        {"negative_time", [](json& j) { j["ops"][1]["forward_ms"] = -1.0; }, "ops[1].forward_ms is -1.0, not a number"},
        {"negative_codec_time", [](json& j) { j["tensors"][2]["codecs"][1]["compress_ms"] = -1.0; },
         "tensors[2].codecs[1].compress_ms is -1.0"},
        {"bytes", [](json& j) { j["tensors"][0]["bytes"] = 12; }, "tensors[0].bytes is 12, but this block's ln1 holds"},
        {"over_bound", [](json& j) { j["tensors"][0]["codecs"][0]["compressed_bytes"] = 1u << 30; },
         "tensors[0].codecs[0].compressed_bytes is 1073741824, not a whole number in [1, "},
        {"outliers", [](json& j) { j["tensors"][0]["codecs"][0]["outlier_fraction"] = 2.0; },
         "tensors[0].codecs[0].outlier_fraction is 2.0, not a number in [0, 1]"},
        {"unknown_op", [](json& j) { j["ops"][0]["name"] = "bogus"; },
         "ops[0].name is \"bogus\", but op 0 of this block is ln1"},
        {"dropped_op", [](json& j) { j["ops"].erase(0); }, "ops lists "},
        {"repeated_tensor", [](json& j) { j["tensors"].push_back(j["tensors"][0]); }, "a second entry for ln1"},
        {"codec_of_masks",
         [](json& j) {
             for (auto& t : j["tensors"])
                 if (t["name"] == "att_mask") t["codecs"][0]["codec_id"] = 0;
         },
         "which does not store att_mask"},
        {"layers", [](json& j) { j["tensors"][0]["codecs"][0]["layer_errors"].push_back(0.1); },
         "but the profiler's slice has 2 layers, one error each"},
        {"negative_spread", [](json& j) { j["ops"][1]["forward_spread_ms"] = -1.0; },
         "ops[1].forward_spread_ms is -1.0, not a number"},
        {"no_codec_spread", [](json& j) { j["tensors"][2]["codecs"][1].erase("decompress_spread_ms"); },
         "tensors[2].codecs[1]"},
        {"old_format", [](json& j) { j["format"] = 2; }, "has format 2"},
        {"no_identity", [](json& j) { j.erase("measured_for"); }, "it has no measured_for"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const fs::path file = edited(c.name + ".json", c.edit);
        expect_refused(file, "", {"profile " + file.string(), c.key_message, fix, "--profile FILE"});
    }
}

// A format-3 profile (written before times kept their spread over repeats) still plans, with the
// plan format 4's medians give: the spreads inform, the medians decide.
TEST_F(ProfileFile, AFormatThreeProfileWithoutSpreadsPlansAsBefore) {
    const fs::path old = edited("format3.json", [](json& j) {
        j["format"] = 3;
        for (auto& op : j["ops"]) op.erase("forward_spread_ms");
        for (auto& t : j["tensors"])
            for (auto& c : t["codecs"]) c.erase("compress_spread_ms"), c.erase("decompress_spread_ms");
    });
    const test::ProcessResult now = run_plan("--profile " + valid.string()),
                              before = run_plan("--profile " + old.string());
    ASSERT_EQ(now.status, 0) << now.output;
    ASSERT_EQ(before.status, 0) << before.output;
    // The decisions and the codec table (not the solver's time, which the last line holds).
    auto plan_tables = [](const std::string& out) {
        const std::size_t from = out.find("\nclass "), to = out.find("\nplan (adacc)");
        return from < to && to != std::string::npos ? out.substr(from, to - from) : "no plan table in:\n" + out;
    };
    EXPECT_EQ(plan_tables(before.output), plan_tables(now.output));
}

// The profiler's summary of its repeats, against its definition: the middle element of the
// sorted times (the mean of the middle two for an even count) and largest minus smallest.
TEST(ProfileRepeats, MedianAndRangeOfTheRepeats) {
    EXPECT_EQ(summarize_repeats({4.0}).median_ms, 4.0);
    EXPECT_EQ(summarize_repeats({4.0}).spread_ms, 0.0);
    const RepeatedTime odd = summarize_repeats({6.18, 0.11, 0.12});  // a first-call outlier
    EXPECT_EQ(odd.median_ms, 0.12);
    EXPECT_EQ(odd.spread_ms, 6.18 - 0.11);
    const RepeatedTime even = summarize_repeats({3.0, 1.0, 4.0, 2.0});
    EXPECT_EQ(even.median_ms, 2.5);
    EXPECT_EQ(even.spread_ms, 3.0);
}

// Linear scaling from the batch the slice ran at (6) to the planned one (8) also scales the parts
// of a blob that do not grow with the batch, so qkv's channel_int4 size once scaled past the
// codec's exact bound; a profile's sizes stay within the bound computed here from the shapes.
TEST(ProfileSizes, CompressedSizesStayWithinTheCodecBoundWhenScaled) {
    GPTConfig cfg;
    cfg.n_layer = 2, cfg.n_embd = 64, cfg.n_head = 4, cfg.vocab_size = 97, cfg.max_seq_len = 32, cfg.dropout = 0.1f;
    const int B = 8, Bm = 6, T = 32;
    const Profile p = profile_block(cfg, B, Bm, T, test::random_tokens(Bm * T, cfg.vocab_size, 5),
                                    ProfileWeights{nullptr, 1, {}}, ComputeTarget{});
    const std::size_t N = static_cast<std::size_t>(B) * T, C = static_cast<std::size_t>(cfg.n_embd);
    auto rows_cols = [&](TensorKind k) -> std::pair<std::size_t, std::size_t> {
        switch (k) {
            case TensorKind::qkv: return {N, 3 * C};
            case TensorKind::att:
            case TensorKind::att_mask: return {N * cfg.n_head, static_cast<std::size_t>(T)};
            case TensorKind::fch:
            case TensorKind::fch_gelu: return {N, 4 * C};
            default: return {N, C};
        }
    };
    ASSERT_EQ(p.tensors.size(), 11u);
    for (const TensorProfile& t : p.tensors)
        for (const CodecMeasurement& m : t.codecs) {
            const auto [rows, cols] = rows_cols(t.kind);
            const std::size_t bound = codec_max_bytes(m.codec, rows, cols, p.codec_params);
            EXPECT_EQ(m.compressed_bound, bound) << t.name << " " << codec_name(m.codec);
            EXPECT_LE(m.compressed_bytes, bound) << t.name << " " << codec_name(m.codec);
        }
}

// ---- fuzz -------------------------------------------------------------------------------------

// Every value's JSON pointer in `j` (not the root's).
void collect_pointers(const json& j, const std::string& at, std::vector<std::string>& out) {
    if (!at.empty()) out.push_back(at);
    if (j.is_object())
        for (const auto& [key, value] : j.items()) collect_pointers(value, at + "/" + key, out);
    if (j.is_array())
        for (std::size_t i = 0; i < j.size(); ++i) collect_pointers(j[i], at + "/" + std::to_string(i), out);
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

struct Mutation {
    std::string what;  // for failure messages
    std::string text;  // the mutated file
    bool must_refuse;  // false: a plan may come of it (a measurement changed within range, a codec less)
};

// One seeded mutation of the valid profile `valid`: a number made negative, non-finite, huge, zero
// or rescaled; a key deleted or renamed; a list's element dropped, repeated or moved, or the list
// emptied; a name changed; a value of the wrong type; the text cut short.
Mutation mutate(const json& valid, std::mt19937& gen) {
    std::vector<std::string> all, numbers, strings, objects, arrays;
    collect_pointers(valid, "", all);
    for (const std::string& p : all) {
        const json& v = valid[json::json_pointer(p)];
        if (v.is_number()) numbers.push_back(p);
        if (v.is_string()) strings.push_back(p);
        if (v.is_object() && !v.empty()) objects.push_back(p);
        if (v.is_array() && !v.empty()) arrays.push_back(p);
    }
    objects.push_back("");  // the root
    auto pick = [&](const std::vector<std::string>& from) { return from[gen() % from.size()]; };
    json j = valid;
    switch (gen() % 9) {
        case 0: {  // negative
            const std::string p = pick(numbers);
            const double x = j[json::json_pointer(p)].get<double>();
            j[json::json_pointer(p)] = gen() % 2 ? -(std::abs(x) + 1) : -1e-9;
            return {"negative " + p, j.dump(2), true};
        }
        case 1: {  // not a finite number: what no JSON writer gives, written by hand
            const std::string p = pick(numbers);
            j[json::json_pointer(p)] = "@@";
            const char* forms[] = {"NaN", "1e999", "-1e999", "Infinity", "0x10"};
            const std::string form = forms[gen() % 5];
            std::string text = j.dump(2);
            text.replace(text.find("\"@@\""), 4, form);
            return {form + " at " + p, text, true};
        }
        case 2: {  // another number: huge ones are refused, in-range ones may plan
            const std::string p = pick(numbers);
            const double x = j[json::json_pointer(p)].get<double>();
            switch (gen() % 6) {
                case 0: j[json::json_pointer(p)] = 1e308; return {"1e308 at " + p, j.dump(2), true};
                case 1:
                    j[json::json_pointer(p)] = std::numeric_limits<std::uint64_t>::max();
                    return {"2^64-1 at " + p, j.dump(2), true};
                case 2: j[json::json_pointer(p)] = 0; break;
                case 3: j[json::json_pointer(p)] = x * 1000; break;
                case 4: j[json::json_pointer(p)] = x / 3; break;
                default: j[json::json_pointer(p)] = 1; break;
            }
            return {"changed " + p, j.dump(2), false};
        }
        case 3: {  // a key deleted: every key is required
            const std::string p = pick(objects);
            json& o = p.empty() ? j : j[json::json_pointer(p)];
            auto it = o.begin();
            std::advance(it, static_cast<long>(gen() % o.size()));
            const std::string key = it.key();
            o.erase(key);
            return {"deleted " + p + "/" + key, j.dump(2), true};
        }
        case 4: {  // a key renamed
            const std::string p = pick(objects);
            json& o = p.empty() ? j : j[json::json_pointer(p)];
            auto it = o.begin();
            std::advance(it, static_cast<long>(gen() % o.size()));
            const std::string key = it.key();
            o[key + "_renamed"] = o[key];
            o.erase(key);
            return {"renamed " + p + "/" + key, j.dump(2), true};
        }
        case 5: {  // a list's element dropped, repeated or moved, or the list emptied
            const std::string p = pick(arrays);
            json& a = j[json::json_pointer(p)];
            // A tensor may list fewer codecs (the planner has fewer options), in any order; tensors
            // may come in any order, and a tensor's two layer errors may trade places.
            const bool codecs = ends_with(p, "/codecs");
            const std::size_t i = gen() % a.size(), k = gen() % a.size();
            switch (gen() % 4) {
                case 0: a.erase(i); return {"dropped " + p + "/" + std::to_string(i), j.dump(2), !codecs};
                case 1: a.push_back(a[i]); return {"repeated " + p + "/" + std::to_string(i), j.dump(2), true};
                case 2: {
                    std::swap(a[i], a[k]);
                    const bool free = codecs || i == k || p == "/tensors" || ends_with(p, "/layer_errors");
                    return {"swapped " + p, j.dump(2), !free};
                }
                default: a = json::array(); return {"emptied " + p, j.dump(2), !codecs};
            }
        }
        case 6: {  // a name changed: every name is checked against the kind, id or op it goes with
            const std::string p = pick(strings);
            const std::string old = j[json::json_pointer(p)];
            const char* names[] = {"bogus", "", "ln2", "group_int4", "fused", "cuda", "bf16", "qkv"};
            std::string name = names[gen() % 8];
            if (name == old) name += "x";
            j[json::json_pointer(p)] = name;
            return {"renamed value " + p, j.dump(2), true};
        }
        case 7: {  // a value of the wrong type
            const std::string p = pick(all);
            const json wrong[] = {"12", nullptr, json::array(), json::object(), true};
            const int w = static_cast<int>(gen() % 5);
            j[json::json_pointer(p)] = wrong[w];
            const bool empty_codecs = ends_with(p, "/codecs") && w == 2;  // no codec measured: allowed
            return {"wrong type at " + p, j.dump(2), !empty_codecs};
        }
        default: {  // cut short: no proper prefix of an object's text is JSON
            const std::string text = j.dump(2);
            return {"truncated", text.substr(0, gen() % (text.size() - 1)), true};
        }
    }
}

// What `adacc plan` does with the profile in `file`, in process: 0 with the plan, 2 for a user
// error (what main() prints as "error:"); anything else would be exit 3, "internal error".
struct Outcome {
    int status = 0;
    std::string message;
    std::uint64_t total = 0;  // the plan's memory, as the model would allocate it
};
Outcome plan_in_process(RunConfig config, std::uint64_t budget, const fs::path& file) {
    config.memory.profile = file.string();
    const RegulatorOptions options = regulator_options(config, MemoryMode::adacc);
    try {
        const ComputeTarget target = compute_target(config, 1);
        const AdaccRegulator regulator(planned_run(config, target), budget, options, profiling_tokens(config), nullptr);
        const AdaccPlan& plan = regulator.plan();
        return {0, "",
                GPTModel::plan_memory(config.model, kB, kT, plan.plan, plan.codec_params, ModelUse::training, target)
                    .total()};
    } catch (const UserError& e) {
        return {2, e.what(), 0};
    } catch (const std::exception& e) {
        return {3, e.what(), 0};
    }
}

// 200 mutations, each planned in process (fast enough for the sanitized build); every 25th also
// through the `adacc plan` executable, which must agree and, when it plans, print a plan within
// the budget. A mutation that breaks the file must be refused; none may be an internal error or
// plan over the budget.
TEST_F(ProfileFile, FuzzedProfilesEndInAPlanWithinTheBudgetOrAUserError) {
    const json base = read_json(valid);
    int planned = 0, refused = 0;
    for (std::uint32_t seed = 0; seed < 200; ++seed) {
        std::mt19937 gen(seed);
        const Mutation m = mutate(base, gen);
        SCOPED_TRACE("seed " + std::to_string(seed) + ": " + m.what);
        const fs::path file = dir / "fuzzed.json";
        write_text(file, m.text);
        const Outcome o = plan_in_process(config, budget, file);
        ASSERT_TRUE(o.status == 0 || o.status == 2) << "internal error: " << o.message;
        if (o.status == 2) {
            ++refused;
            EXPECT_NE(o.message.find(file.string()), std::string::npos) << o.message;
        } else {
            ++planned;
            EXPECT_FALSE(m.must_refuse) << "accepted";
            EXPECT_LE(o.total, budget);
        }
        if (seed % 25 != 0) continue;
        const test::ProcessResult r = run_plan("--profile " + file.string() + " --format json");
        ASSERT_EQ(r.status, o.status) << r.output;
        if (r.status != 0) continue;
        const json printed = json::parse(r.output.substr(r.output.find('{')));
        EXPECT_LE(printed["predicted_total_bytes"].get<std::uint64_t>(), budget);
        EXPECT_EQ(printed["predicted_total_bytes"].get<std::uint64_t>(), o.total);
    }
    // Both outcomes occur: the fuzz reaches the planner and the checks.
    EXPECT_GE(planned, 10);
    EXPECT_GE(refused, 100);
}

}  // namespace
}  // namespace adacc
