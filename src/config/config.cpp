#include "src/config/config.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include "src/common/closest_name.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/activation_plan.h"
#include "src/engine/device.h"
#include "src/engine/memory_mode.h"
#include "src/eval/eval_tasks.h"

namespace adacc {
namespace {

// ---------------------------------------------------------------------------------------------
// Values in a type-neutral form, so that one parser, one printer and one range check per kind
// serve every key of that kind.

using ConfigValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::string>>;

enum class ValueKind { integer, number, boolean, string, string_list };

std::string_view kind_phrase(ValueKind kind) {
    switch (kind) {
        case ValueKind::integer: return "an integer";
        case ValueKind::number: return "a number";
        case ValueKind::boolean: return "true or false";
        case ValueKind::string: return "a string";
        case ValueKind::string_list: return "a list of strings";
    }
    return "a value";
}

std::string_view kind_short_name(ValueKind kind) {
    switch (kind) {
        case ValueKind::integer: return "integer";
        case ValueKind::number: return "number";
        case ValueKind::boolean: return "bool";
        case ValueKind::string: return "string";
        case ValueKind::string_list: return "list";
    }
    return "value";
}

std::string join(const std::vector<std::string>& items, std::string_view separator = ", ") {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += separator;
        out += items[i];
    }
    return out;
}

// Shortest decimal text that parses back to exactly `value`: "1", "0.0006", "1e-08". Plain
// notation for everyday magnitudes (to_chars alone would pick "6e-04" for being shorter).
std::string format_plain(double value) {
    const double magnitude = std::abs(value);
    const bool plain = value == 0 || (magnitude >= 1e-4 && magnitude < 1e15);
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value,
                                      plain ? std::chars_format::fixed : std::chars_format::scientific);
    return std::string(buffer, result.ptr);
}

// The same, kept recognisably real: TOML reads "1" as an integer.
std::string format_real(double value) {
    std::string text = format_plain(value);
    if (text.find_first_of(".eni") == std::string::npos) text += ".0";
    return text;
}

// A float field's value as the double nearest to the float's shortest decimal form (6e-4f
// becomes 0.0006, not 0.0006000000284984708), so it prints as written and narrows back to the
// same float.
double widen_float(float value) {
    char buffer[64];
    const auto written = std::to_chars(buffer, buffer + sizeof buffer, value);
    double wide = value;
    std::from_chars(buffer, written.ptr, wide);
    return wide;
}

std::string quote_toml(std::string_view text) {
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                    char escaped[8];
                    std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
                    out += escaped;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

// The value in TOML syntax; also how the printed table shows it, so what a user reads there can
// be pasted into a config file.
std::string format_value(const ConfigValue& value) {
    struct Formatter {
        std::string operator()(std::int64_t v) const { return std::to_string(v); }
        std::string operator()(double v) const { return format_real(v); }
        std::string operator()(bool v) const { return v ? "true" : "false"; }
        std::string operator()(const std::string& v) const { return quote_toml(v); }
        std::string operator()(const std::vector<std::string>& v) const {
            std::vector<std::string> quoted;
            for (const auto& item : v) quoted.push_back(quote_toml(item));
            return "[" + join(quoted) + "]";
        }
    };
    return std::visit(Formatter{}, value);
}

double as_number(const ConfigValue& value) {
    if (const auto* integer = std::get_if<std::int64_t>(&value)) return static_cast<double>(*integer);
    return std::get<double>(value);
}

// ---------------------------------------------------------------------------------------------
// Moving values between RunConfig fields and ConfigValue. `store` returns a complaint when the
// value cannot be held by the field's C++ type.

ConfigValue to_value(int v) { return std::int64_t{v}; }
ConfigValue to_value(std::uint64_t v) { return static_cast<std::int64_t>(v); }
ConfigValue to_value(float v) { return widen_float(v); }
ConfigValue to_value(bool v) { return v; }
ConfigValue to_value(const std::string& v) { return v; }
ConfigValue to_value(const std::vector<std::string>& v) { return v; }

std::optional<std::string> store(const ConfigValue& value, int& field) {
    const auto v = std::get<std::int64_t>(value);
    if (v < INT_MIN || v > INT_MAX) return "does not fit in a 32-bit integer";
    field = static_cast<int>(v);
    return std::nullopt;
}
std::optional<std::string> store(const ConfigValue& value, std::uint64_t& field) {
    const auto v = std::get<std::int64_t>(value);
    if (v < 0) return "must not be negative";
    field = static_cast<std::uint64_t>(v);
    return std::nullopt;
}
std::optional<std::string> store(const ConfigValue& value, float& field) {
    const double v = std::get<double>(value);
    // No key means anything by inf or nan: an infinite lr or weight decay trains on NaN.
    if (!std::isfinite(v)) return "is not a finite number; every numeric key needs a finite value";
    if (std::abs(v) > std::numeric_limits<float>::max()) return "is too large for a 32-bit float";
    field = static_cast<float>(v);
    return std::nullopt;
}
template <typename T>
std::optional<std::string> store(const ConfigValue& value, T& field) {
    field = std::get<T>(value);
    return std::nullopt;
}

template <typename T>
constexpr ValueKind kind_of() {
    if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::uint64_t>)
        return ValueKind::integer;
    else if constexpr (std::is_same_v<T, float>)
        return ValueKind::number;
    else if constexpr (std::is_same_v<T, bool>)
        return ValueKind::boolean;
    else if constexpr (std::is_same_v<T, std::string>)
        return ValueKind::string;
    else {
        static_assert(std::is_same_v<T, std::vector<std::string>>, "no ValueKind for this field type");
        return ValueKind::string_list;
    }
}

// ---------------------------------------------------------------------------------------------
// Allowed values: a phrase completing "must be ..." plus the predicate it describes. The
// predicate also sees the whole config, for ranges bounded by another key.

struct Allowed {
    std::string description;  // empty: any value of the key's type
    std::function<bool(const ConfigValue&, const RunConfig&)> holds;
    // For bounds set by another key: its current value, e.g. " (model.max_seq_len = 1024)".
    std::function<std::string(const RunConfig&)> bound_note = [](const RunConfig&) { return std::string(); };
};

Allowed any_value() {
    return {"", [](const ConfigValue&, const RunConfig&) { return true; }};
}
Allowed at_least(double low) {
    return {">= " + format_plain(low), [low](const ConfigValue& v, const RunConfig&) { return as_number(v) >= low; }};
}
Allowed above(double low) {
    return {"> " + format_plain(low), [low](const ConfigValue& v, const RunConfig&) { return as_number(v) > low; }};
}
// [0, 1): probabilities and Adam betas, where 1 is meaningless.
Allowed below_one() {
    return {"in [0, 1)", [](const ConfigValue& v, const RunConfig&) {
                const double x = as_number(v);
                return x >= 0 && x < 1;
            }};
}
Allowed within(std::int64_t low, std::int64_t high) {
    return {"in [" + std::to_string(low) + ", " + std::to_string(high) + "]",
            [low, high](const ConfigValue& v, const RunConfig&) {
                const auto x = std::get<std::int64_t>(v);
                return x >= low && x <= high;
            }};
}
Allowed one_of(std::vector<std::string> choices) {
    std::string description = "one of " + join(choices);
    return {std::move(description), [choices = std::move(choices)](const ConfigValue& v, const RunConfig&) {
                return std::ranges::find(choices, std::get<std::string>(v)) != choices.end();
            }};
}
Allowed each_one_of(std::vector<std::string> choices) {
    std::string description = "a list whose items are each one of " + join(choices);
    return {std::move(description), [choices = std::move(choices)](const ConfigValue& v, const RunConfig&) {
                return std::ranges::all_of(std::get<std::vector<std::string>>(v), [&](const std::string& item) {
                    return std::ranges::find(choices, item) != choices.end();
                });
            }};
}
Allowed non_empty() {
    return {"a non-empty string",
            [](const ConfigValue& v, const RunConfig&) { return !std::get<std::string>(v).empty(); }};
}

// A budget of 0 bytes holds nothing: it is refused here, once for every command, rather than read
// as "no limit" by one and "fits nothing" by another.
Allowed size_or_empty() {
    return {"a size of at least one byte such as \"24GiB\", \"1.5 GB\" or \"123456\" (bytes), or \"\" for no limit",
            [](const ConfigValue& v, const RunConfig&) {
                const auto& text = std::get<std::string>(v);
                if (text.empty()) return true;
                const SizeParse parsed = try_parse_size(text);
                return parsed.error.empty() && parsed.bytes > 0;
            }};
}

// ---------------------------------------------------------------------------------------------
// The key registry.

struct KeySpec {
    std::string_view section;
    std::string_view name;
    ValueKind kind;
    std::function<ConfigValue(const RunConfig&)> get;
    // Stores a value already of `kind`; returns a complaint (completing "<key> = <value> ...")
    // when the value cannot be stored.
    std::function<std::optional<std::string>(RunConfig&, const ConfigValue&)> set;
    Allowed allowed;
    std::string_view help;
    // Applied before the other keys of its section because it resets them (model.preset).
    bool applies_first = false;

    std::string full_name() const { return std::string(section) + "." + std::string(name); }
};

// A key stored in field `Member` of section struct `Section` of RunConfig.
template <auto Section, auto Member>
KeySpec field(std::string_view section, std::string_view name, Allowed allowed, std::string_view help) {
    using T = std::remove_cvref_t<decltype((std::declval<RunConfig&>().*Section).*Member)>;
    return KeySpec{
        section,
        name,
        kind_of<T>(),
        [](const RunConfig& config) { return to_value((config.*Section).*Member); },
        [](RunConfig& config, const ConfigValue& value) { return store(value, (config.*Section).*Member); },
        std::move(allowed),
        help,
    };
}

// model.preset lives outside GPTConfig and, when set, replaces the whole model section.
KeySpec preset_key() {
    KeySpec spec{
        "model",
        "preset",
        ValueKind::string,
        [](const RunConfig& config) { return ConfigValue{config.preset}; },
        [](RunConfig& config, const ConfigValue& value) -> std::optional<std::string> {
            const auto& name = std::get<std::string>(value);
            if (name.empty()) {
                config.preset.clear();
                return std::nullopt;
            }
            const auto preset = gpt_preset(name);
            if (!preset) return "is not a known preset; known presets: " + join(gpt_preset_names());
            config.model = *preset;
            config.preset = name;
            return std::nullopt;
        },
        any_value(),
        "start the model section from this preset (gpt-117m, ...); other model keys override it",
    };
    spec.applies_first = true;
    return spec;
}

// model.dtype lives outside GPTConfig (run_config.h says why).
KeySpec attention_key() {
    return KeySpec{
        "model",
        "attention",
        ValueKind::string,
        [](const RunConfig& config) { return ConfigValue{std::string(attention_impl_name(config.model.attention))}; },
        [](RunConfig& config, const ConfigValue& value) -> std::optional<std::string> {
            config.model.attention = *parse_attention_impl(std::get<std::string>(value));
            config.attention_given = true;
            return std::nullopt;
        },
        one_of(attention_impl_names()),
        "causal attention: materialized (the T x T probabilities, planned like any tensor), fused (never "
        "stored: one logsumexp per row, recomputed in backward) or cudnn (fused, by cuDNN: CUDA and bf16 only); "
        "unset: cudnn on CUDA when cuDNN loads, else materialized",
    };
}

KeySpec dtype_key() {
    return KeySpec{
        "model",
        "dtype",
        ValueKind::string,
        [](const RunConfig& config) { return ConfigValue{config.dtype}; },
        [](RunConfig& config, const ConfigValue& value) -> std::optional<std::string> {
            config.dtype = std::get<std::string>(value);
            return std::nullopt;
        },
        one_of(model_dtype_names()),
        kModelDtypeHelp,
    };
}

// The seq_len bound depends on another key, so it is checked against the resolved model.
Allowed up_to_max_seq_len() {
    return {"in [1, model.max_seq_len]",
            [](const ConfigValue& v, const RunConfig& config) {
                const auto x = std::get<std::int64_t>(v);
                return x >= 1 && x <= config.model.max_seq_len;
            },
            [](const RunConfig& config) {
                return " (model.max_seq_len = " + std::to_string(config.model.max_seq_len) + ")";
            }};
}
Allowed up_to_n_embd() {
    return {"in [0, model.n_embd]",
            [](const ConfigValue& v, const RunConfig& config) {
                const auto x = std::get<std::int64_t>(v);
                return x >= 0 && x <= config.model.n_embd;
            },
            [](const RunConfig& config) { return " (model.n_embd = " + std::to_string(config.model.n_embd) + ")"; }};
}
Allowed up_to_lr_max() {
    return {"in [0, lr.max]",
            [](const ConfigValue& v, const RunConfig& config) {
                const double x = as_number(v);
                return x >= 0 && x <= widen_float(config.lr.max);
            },
            [](const RunConfig& config) { return " (lr.max = " + format_real(widen_float(config.lr.max)) + ")"; }};
}

const std::vector<KeySpec>& registry() {
    using R = RunConfig;
    static const std::vector<KeySpec> keys = {
        preset_key(),
        field<&R::model, &GPTConfig::n_layer>("model", "n_layer", at_least(1), "transformer blocks (L)"),
        field<&R::model, &GPTConfig::n_embd>("model", "n_embd", at_least(1), "hidden size (C), divisible by n_head"),
        field<&R::model, &GPTConfig::n_head>("model", "n_head", at_least(1), "attention heads (H)"),
        field<&R::model, &GPTConfig::vocab_size>("model", "vocab_size", within(2, 65536),
                                                 "real tokens (V); tokens are stored as uint16"),
        field<&R::model, &GPTConfig::max_seq_len>("model", "max_seq_len", at_least(1),
                                                  "positions the position embedding covers"),
        field<&R::model, &GPTConfig::dropout>("model", "dropout", below_one(),
                                              "embedding, attention and residual dropout probability"),
        field<&R::model, &GPTConfig::classifier_chunk>(
            "model", "classifier_chunk", at_least(0),
            "tokens per classifier chunk, so training and eval never hold the N x Vp logits whole (0: auto, "
            "chunks of at most 256 MiB of logits)"),
        attention_key(),
        dtype_key(),

        field<&R::training, &TrainingSection::batch_size>("training", "batch_size", at_least(1),
                                                          "sequences per micro-batch (B)"),
        field<&R::training, &TrainingSection::seq_len>("training", "seq_len", up_to_max_seq_len(),
                                                       "tokens per sequence (T)"),
        field<&R::training, &TrainingSection::steps>("training", "steps", at_least(1), "optimizer steps"),
        field<&R::training, &TrainingSection::grad_accum>("training", "grad_accum", at_least(1),
                                                          "micro-batches per optimizer step"),
        field<&R::training, &TrainingSection::seed>("training", "seed", any_value(),
                                                    "seed of init, dropout and data order"),
        field<&R::training, &TrainingSection::val_every>("training", "val_every", at_least(0),
                                                         "steps between validation losses (0 = never)"),
        field<&R::training, &TrainingSection::fidelity_every>(
            "training", "fidelity_every", at_least(0),
            "steps between gradient-fidelity measurements vs keep-all (one extra forward and backward here and "
            "in a keep-all copy of the model; 0 = never)"),
        field<&R::training, &TrainingSection::val_batches>("training", "val_batches", at_least(1),
                                                           "micro-batches per validation loss"),
        // libgomp crashes creating 100,000 threads; no machine needs more than 1024 here.
        field<&R::training, &TrainingSection::threads>("training", "threads", within(0, kMaxCpuThreads),
                                                       "CPU threads (0 = all cores)"),
        field<&R::training, &TrainingSection::device>("training", "device", one_of(device_names()),
                                                      "where the model runs: cpu, or cuda (the local rank's GPU)"),
        field<&R::training, &TrainingSection::zero>(
            "training", "zero", within(0, 1),
            "1: ZeRO-1, AdamW's moments sharded over the data-parallel ranks (each holds 1/N of them); 0: every "
            "rank holds all"),
        field<&R::training, &TrainingSection::overlap_grads>(
            "training", "overlap_grads", any_value(),
            "data parallelism: sum each block's gradients over the ranks while backward goes on below it (the "
            "same sums as false, which sums them after the whole backward)"),
        field<&R::training, &TrainingSection::deterministic>(
            "training", "deterministic", any_value(),
            "true: the same inputs give the same bytes, on a GPU too; false lets cuDNN's attention backward sum dQ "
            "by atomics (no B x H x T x T matrix written and read, a smaller workspace; the last bits vary run to "
            "run). The only kernel it changes: the CPU's are deterministic either way"),
        field<&R::training, &TrainingSection::collective_timeout_s>(
            "training", "collective_timeout_s", above(0),
            "seconds one GPU collective (NCCL) may stay pending before the job is ended as hung: a rank died or "
            "hangs"),
        field<&R::training, &TrainingSection::skip_nonfinite>(
            "training", "skip_nonfinite", at_least(0),
            "steps with a non-finite loss or gradient norm to skip (no update) before stopping; 0 = stop at the first"),

        field<&R::optimizer, &OptimizerOptions::beta1>("optimizer", "beta1", below_one(), "AdamW first-moment decay"),
        field<&R::optimizer, &OptimizerOptions::beta2>("optimizer", "beta2", below_one(), "AdamW second-moment decay"),
        field<&R::optimizer, &OptimizerOptions::eps>("optimizer", "eps", above(0), "AdamW epsilon"),
        field<&R::optimizer, &OptimizerOptions::weight_decay>("optimizer", "weight_decay", at_least(0),
                                                              "decoupled weight decay on 2-D weights"),
        field<&R::optimizer, &OptimizerOptions::grad_clip>("optimizer", "grad_clip", at_least(0),
                                                           "global gradient-norm clip (0 = off)"),

        field<&R::lr, &LrSchedule::max>("lr", "max", above(0), "peak learning rate"),
        field<&R::lr, &LrSchedule::min>("lr", "min", up_to_lr_max(), "floor of the cosine decay"),
        field<&R::lr, &LrSchedule::warmup_steps>("lr", "warmup_steps", at_least(0), "linear warmup steps"),
        field<&R::lr, &LrSchedule::schedule>("lr", "schedule", one_of({"cosine", "constant"}), "decay after warmup"),

        field<&R::data, &DataSection::train>("data", "train", any_value(), "training shard file or glob"),
        field<&R::data, &DataSection::val>("data", "val", any_value(), "validation shard file or glob (\"\" = none)"),
        field<&R::data, &DataSection::shuffle>("data", "shuffle", any_value(),
                                               "seeded permutation of sequence windows"),

        field<&R::memory, &MemorySection::mode>("memory", "mode", one_of(memory_mode_names()),
                                                "activation memory policy"),
        field<&R::memory, &MemorySection::budget>("memory", "budget", size_or_empty(), "device memory the run may use"),
        field<&R::memory, &MemorySection::granularity>("memory", "granularity", one_of({"block", "global"}),
                                                       "planner: one plan for every layer, or layers may differ"),
        field<&R::memory, &MemorySection::profile>("memory", "profile", any_value(),
                                                   "planner: reuse this profile.json (\"\" = profile at start)"),
        field<&R::memory, &MemorySection::monitor_max_interval>("memory", "monitor_max_interval", at_least(1),
                                                                "monitor: cap of the sampling backoff (steps)"),
        field<&R::memory, &MemorySection::min_replan_steps>("memory", "min_replan_steps", at_least(0),
                                                            "monitor: fewest steps between plan switches"),
        field<&R::memory, &MemorySection::codecs>("memory", "codecs", one_of(codec_candidate_names()),
                                                  "adacc: codecs a tensor may be compressed with (the paper's, "
                                                  "plus plain group INT4, or every codec)"),
        field<&R::memory, &MemorySection::max_codec_error>(
            "memory", "max_codec_error", above(0),
            "adacc: largest profiled relative L2 error of a codec chosen for a tensor"),

        field<&R::checkpoint, &CheckpointSection::every>("checkpoint", "every", at_least(0),
                                                         "steps between checkpoints (0 = only at the end)"),
        field<&R::checkpoint, &CheckpointSection::keep>("checkpoint", "keep", at_least(1),
                                                        "newest checkpoints kept in RUN_DIR/checkpoints"),

        field<&R::eval, &EvalSection::every>("eval", "every", at_least(0),
                                             "steps between in-training evals (0 = never)"),
        field<&R::eval, &EvalSection::tasks>("eval", "tasks", each_one_of(eval_task_names()), "eval tasks"),
        field<&R::eval, &EvalSection::limit>("eval", "limit", at_least(0), "examples per task (0 = all)"),
        field<&R::eval, &EvalSection::data>("eval", "data", any_value(),
                                            "folder holding lambada_openai/ and arc_easy/ (test splits)"),
        field<&R::eval, &EvalSection::vocab>("eval", "vocab", any_value(),
                                             "folder with GPT-2's encoder.json and vocab.bpe"),

        field<&R::stress, &StressOptions::outlier_channels>(
            "stress", "outlier_channels", up_to_n_embd(),
            "test hook: channels of every ln1/ln2 weight scaled at initialisation (0 = off)"),
        field<&R::stress, &StressOptions::outlier_scale>("stress", "outlier_scale", above(0),
                                                         "test hook: the factor those channels are scaled by"),

        field<&R::logging, &LoggingSection::run_dir>("logging", "run_dir", non_empty(),
                                                     "run folder: metrics, checkpoints"),
        field<&R::logging, &LoggingSection::print_every>("logging", "print_every", at_least(1),
                                                         "steps between progress lines"),
    };
    return keys;
}

const std::vector<std::string>& section_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const auto& key : registry())
            if (std::ranges::find(out, key.section) == out.end()) out.emplace_back(key.section);
        return out;
    }();
    return names;
}

const KeySpec* find_key(std::string_view section, std::string_view name) {
    for (const auto& key : registry())
        if (key.section == section && key.name == name) return &key;
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// "Did you mean" (src/common/closest_name.h): the key or section nearest an unknown one.

// A key written in the wrong section (training.warmup_steps) is found by its bare name first;
// otherwise the nearest full name catches typos. A key outside any section (empty `section`)
// is compared by bare name.
std::optional<std::string> suggest_key(std::string_view section, std::string_view name) {
    for (const auto& key : registry())
        if (key.name == name) return key.full_name();
    std::vector<std::string> candidates;
    for (const auto& key : registry()) candidates.push_back(section.empty() ? std::string(key.name) : key.full_name());
    const auto best =
        closest_name(section.empty() ? std::string(name) : std::string(section) + "." + std::string(name), candidates);
    if (!best || !section.empty()) return best;
    for (const auto& key : registry())
        if (key.name == *best) return key.full_name();
    return std::nullopt;
}

[[noreturn]] void throw_unknown_key(std::string_view section, std::string_view name, std::string_view where) {
    std::string message =
        "unknown key '" + std::string(section) + "." + std::string(name) + "' in " + std::string(where);
    if (const auto suggestion = suggest_key(section, name)) {
        message += "; did you mean '" + *suggestion + "'?";
    } else {
        std::vector<std::string> valid;
        for (const auto& key : registry())
            if (key.section == section) valid.emplace_back(key.name);
        message += "; valid keys in [" + std::string(section) + "]: " + join(valid);
    }
    throw UserError(message);
}

[[noreturn]] void throw_unknown_section(std::string_view section, std::string_view where) {
    std::string message = "unknown section [" + std::string(section) + "] in " + std::string(where);
    if (const auto suggestion = closest_name(section, section_names()))
        message += "; did you mean [" + *suggestion + "]?";
    throw UserError(message + " (sections: " + join(section_names()) + ")");
}

// Stores `value` into the key, turning a complaint from the field into an error naming it.
void set_key(RunConfig& config, const KeySpec& key, const ConfigValue& value, std::string_view where) {
    if (const auto complaint = key.set(config, value))
        throw UserError(key.full_name() + " = " + format_value(value) + " in " + std::string(where) + " " + *complaint);
}

// ---------------------------------------------------------------------------------------------
// TOML files.

std::string location(std::string_view source_name, const toml::source_region& region) {
    if (region.begin.line == 0) return std::string(source_name);
    return std::string(source_name) + ":" + std::to_string(region.begin.line) + ":" +
           std::to_string(region.begin.column);
}

// What a TOML node is, for "must be X, but is Y" messages.
std::string describe_node(const toml::node& node) {
    if (const auto* string = node.as_string()) return "a string (" + quote_toml(string->get()) + ")";
    std::ostringstream text;
    switch (node.type()) {
        case toml::node_type::integer: text << "an integer"; break;
        case toml::node_type::floating_point: text << "a floating-point number"; break;
        case toml::node_type::boolean: text << "a boolean"; break;
        case toml::node_type::array: text << "an array"; break;
        case toml::node_type::table: return "a table";
        default: text << "a date/time"; break;
    }
    text << " (";
    node.visit([&](const auto& value) { text << value; });
    text << ")";
    return text.str();
}

std::optional<ConfigValue> value_from_node(const toml::node& node, ValueKind kind) {
    switch (kind) {
        case ValueKind::integer:
            if (const auto* v = node.as_integer()) return ConfigValue{v->get()};
            break;
        case ValueKind::number:
            if (const auto* v = node.as_floating_point()) return ConfigValue{v->get()};
            if (const auto* v = node.as_integer()) return ConfigValue{static_cast<double>(v->get())};
            break;
        case ValueKind::boolean:
            if (const auto* v = node.as_boolean()) return ConfigValue{v->get()};
            break;
        case ValueKind::string:
            if (const auto* v = node.as_string()) return ConfigValue{v->get()};
            break;
        case ValueKind::string_list:
            if (const auto* array = node.as_array()) {
                std::vector<std::string> items;
                for (const auto& element : *array) {
                    const auto* item = element.as_string();
                    if (!item) return std::nullopt;
                    items.push_back(item->get());
                }
                return ConfigValue{std::move(items)};
            }
            break;
    }
    return std::nullopt;
}

void apply_node(RunConfig& config, const KeySpec& key, const toml::node& node, std::string_view source_name) {
    const auto where = location(source_name, node.source());
    const auto value = value_from_node(node, key.kind);
    if (!value) {
        std::string expected(kind_phrase(key.kind));
        if (key.kind == ValueKind::string_list) expected += " like [\"lambada\", \"arc_easy\"]";
        throw UserError(key.full_name() + " in " + where + " must be " + expected + ", but is " + describe_node(node));
    }
    set_key(config, key, *value, where);
}

void apply_section(RunConfig& config, std::string_view section, const toml::table& table,
                   std::string_view source_name) {
    // Keys that reset others go first, so the rest of the section overrides them.
    for (const bool first_pass : {true, false}) {
        for (const auto& [name, node] : table) {
            const KeySpec* key = find_key(section, name.str());
            if (!key) throw_unknown_key(section, name.str(), location(source_name, name.source()));
            if (key->applies_first == first_pass) apply_node(config, *key, node, source_name);
        }
    }
}

void apply_toml(RunConfig& config, std::string_view text, std::string_view source_name) {
    toml::table root;
    try {
        root = toml::parse(text, source_name);
    } catch (const toml::parse_error& error) {
        throw UserError(location(source_name, error.source()) +
                        ": malformed TOML: " + std::string(error.description()) + "; fix the syntax at that position");
    }
    for (const auto& [name, node] : root) {
        const auto where = location(source_name, name.source());
        const bool is_section = std::ranges::find(section_names(), name.str()) != section_names().end();
        if (!node.is_table()) {
            if (is_section)
                throw UserError("'" + std::string(name.str()) + "' in " + where + " must be a section ([" +
                                std::string(name.str()) + "]), not a value");
            std::string message = "unknown key '" + std::string(name.str()) + "' at the top level of " + where +
                                  "; keys belong in a section";
            if (const auto suggestion = suggest_key("", name.str())) message += ": did you mean '" + *suggestion + "'?";
            throw UserError(message);
        }
        if (!is_section) throw_unknown_section(name.str(), where);
        apply_section(config, name.str(), *node.as_table(), source_name);
    }
}

// ---------------------------------------------------------------------------------------------
// --set overrides.

std::string_view strip_quotes(std::string_view text) {
    if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
        return text.substr(1, text.size() - 2);
    return text;
}

std::vector<std::string> split_list(std::string_view text) {
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
    std::vector<std::string> items;
    while (!text.empty()) {
        const auto comma = text.find(',');
        const auto item = strip_quotes(trim_blanks(text.substr(0, comma)));
        if (!item.empty()) items.emplace_back(item);
        if (comma == std::string_view::npos) break;
        text.remove_prefix(comma + 1);
    }
    return items;
}

std::optional<ConfigValue> value_from_text(std::string_view text, ValueKind kind) {
    switch (kind) {
        case ValueKind::integer:
            if (const auto v = parse_whole<std::int64_t>(text)) return ConfigValue{*v};
            break;
        case ValueKind::number:
            if (const auto v = parse_whole<double>(text)) return ConfigValue{*v};
            break;
        case ValueKind::boolean:
            if (text == "true" || text == "1") return ConfigValue{true};
            if (text == "false" || text == "0") return ConfigValue{false};
            break;
        case ValueKind::string: return ConfigValue{std::string(strip_quotes(text))};
        case ValueKind::string_list: return ConfigValue{split_list(text)};
    }
    return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API.

void apply_override(RunConfig& config, std::string_view assignment) {
    const std::string where = "--set " + std::string(assignment);
    const auto equals = assignment.find('=');
    const auto path = trim_blanks(assignment.substr(0, equals));
    const auto dot = path.find('.');
    if (equals == std::string_view::npos || dot == std::string_view::npos || dot == 0 || dot + 1 == path.size())
        throw UserError("bad override '" + std::string(assignment) +
                        "': expected section.key=value, e.g. --set training.batch_size=8");
    const auto section = path.substr(0, dot);
    const auto name = path.substr(dot + 1);
    if (std::ranges::find(section_names(), section) == section_names().end()) throw_unknown_section(section, where);
    const KeySpec* key = find_key(section, name);
    if (!key) throw_unknown_key(section, name, where);

    const auto text = trim_blanks(assignment.substr(equals + 1));
    const auto value = value_from_text(text, key->kind);
    if (!value)
        throw UserError(key->full_name() + " in " + where + " must be " + std::string(kind_phrase(key->kind)) +
                        ", but '" + std::string(text) + "' is not");
    set_key(config, *key, *value, where);
}

namespace {

// Activation sizes are products of B, T, C, H*T and the vocab in 64-bit integers: refuse shapes
// whose activations (over-estimated: every layer's tensors at 32 C + 8 H T floats per token,
// plus logits and their gradient) would pass 2^60 bytes, long before those products overflow.
std::optional<std::string> activation_size_problem(const RunConfig& config) {
    const GPTConfig& m = config.model;
    const long double tokens = static_cast<long double>(config.training.batch_size) * config.training.seq_len;
    const long double per_token_floats =
        (m.n_layer + 1.0L) * (32.0L * m.n_embd + 8.0L * m.n_head * config.training.seq_len) +
        2.0L * m.padded_vocab_size();
    if (tokens * per_token_floats * sizeof(float) <= static_cast<long double>(std::uint64_t{1} << 60))
        return std::nullopt;
    return "training.batch_size " + std::to_string(config.training.batch_size) + " x training.seq_len " +
           std::to_string(config.training.seq_len) + " with this model needs more than 1 EiB of activations; " +
           "use a smaller batch, sequence or model";
}

// The keys `overrides` ("section.key=value") set.
std::set<std::string, std::less<>> overridden_keys(const std::vector<std::string>& overrides) {
    std::set<std::string, std::less<>> keys;
    for (const auto& assignment : overrides)
        keys.insert(std::string(trim_blanks(std::string_view(assignment).substr(0, assignment.find('=')))));
    return keys;
}

}  // namespace

void validate_config(const RunConfig& config, std::string_view source_name, const std::vector<std::string>& overrides) {
    const std::string where = source_name.empty() ? "config" : "config " + std::string(source_name);
    const auto from_command_line = overridden_keys(overrides);
    for (const auto& key : registry()) {
        const auto value = key.get(config);
        if (key.allowed.holds(value, config)) continue;
        const std::string problem = key.full_name() + " = " + format_value(value) + ", but it must be " +
                                    key.allowed.description + key.allowed.bound_note(config);
        // A value the command line set is the command line's mistake: the advice names its flag.
        if (from_command_line.contains(key.full_name()))
            throw SettingError(key.full_name(), "invalid value on the command line: " + problem);
        throw UserError("invalid " + where + ": " + problem + "; fix it there or with --set " + key.full_name() +
                        "=VALUE");
    }
    if (const auto problem = config.model.validate()) {
        // The shape's keys the command line set are named: the fix may be one of those --set values.
        std::string set_here;
        for (const char* key :
             {"model.preset", "model.n_layer", "model.n_embd", "model.n_head", "model.vocab_size", "model.max_seq_len"})
            if (from_command_line.contains(key))
                set_here += std::string(set_here.empty() ? "--set " : ", --set ") + key;
        throw UserError("invalid " + where + ": " + *problem +
                        (set_here.empty() ? "; fix the [model] section or pick a preset"
                                          : "; fix " + set_here + ", the [model] section, or pick a preset"));
    }
    if (const auto problem = activation_size_problem(config)) throw UserError("invalid " + where + ": " + *problem);
    const ComputeTarget target = compute_target(config);  // a dtype the device does not run is refused here
    if (config.model.attention == AttentionImpl::cudnn && target.device != Device::cuda)
        throw SettingError("model.attention",
                           "model.attention = \"cudnn\" is cuDNN's attention, which runs on CUDA only; on the CPU use "
                           "model.attention = \"fused\" (the same algorithm), or --device cuda");
    if (config.model.attention == AttentionImpl::cudnn && target.activation != DType::bf16)
        throw SettingError("model.attention",
                           "model.attention = \"cudnn\": cuDNN's fused attention runs bf16 activations only, and "
                           "model.dtype is " +
                               std::string(model_dtype_name(target.activation)) +
                               "; use model.dtype = \"bf16\" (or \"auto\"), or model.attention = \"fused\"");
}

void resolve_default_attention(RunConfig& config) {
    if (config.attention_given) return;
    config.attention_given = true;  // written out as chosen, so a resumed run keeps it
    Device device = Device::cpu;
    try {
        device = parse_device(config.training.device);
    } catch (const SettingError&) {
        return;  // validate_config names the bad device
    }
    if (device != Device::cuda) return;  // materialized, GPTConfig's default
    std::string why;
    try {
        if (resolve_model_dtype(config.dtype, device) != DType::bf16) why = "cuDNN's attention runs bf16 only";
    } catch (const SettingError&) {
        return;  // validate_config names the bad dtype
    }
    if (why.empty()) why = cudnn_problem();
    if (why.empty()) {
        config.model.attention = AttentionImpl::cudnn;
        return;
    }
    // Once per process: a command may load its config more than once.
    static bool said = false;
    if (!said)
        std::fprintf(stderr, "model.attention: materialized, not cudnn (%s); set model.attention to choose\n",
                     why.c_str());
    said = true;
}

ComputeTarget compute_target(const RunConfig& config, int world_size) {
    const Device device = parse_device(config.training.device);
    ComputeTarget target(device, resolve_model_dtype(config.dtype, device), config.training.zero ? world_size : 1,
                         world_size);
    target.deterministic = config.training.deterministic;
    return target;
}

std::uint64_t budget_bytes(const MemorySection& memory) {
    return memory.budget.empty() ? 0 : parse_size(memory.budget);
}

CodecChoice codec_choice(const MemorySection& memory) {
    try {
        return {parse_codec_candidates(memory.codecs), memory.max_codec_error};
    } catch (const std::invalid_argument& e) {
        throw SettingError("memory.codecs", e.what());
    }
}

RegulatorOptions regulator_options(const RunConfig& config, MemoryMode mode) {
    RegulatorOptions options;
    options.allow_compress = mode == MemoryMode::adacc;
    options.planner.granularity = parse_plan_granularity(config.memory.granularity);
    options.monitor.max_interval = config.memory.monitor_max_interval;
    options.monitor.min_steps_between_replans = config.memory.min_replan_steps;
    options.codecs = codec_choice(config.memory);
    options.monitor.max_codec_error = options.codecs.max_error;
    if (!config.memory.profile.empty()) options.profile_file = config.memory.profile;
    return options;
}

PlannedRun planned_run(const RunConfig& config, const ComputeTarget& target) {
    return {config.model, config.training.batch_size, config.training.seq_len, config.training.seed, config.stress,
            target};
}

namespace {
// What every way of making a config does after its source is read: the --set overrides in order,
// the default attention, validation. One place, so that no way skips a step.
RunConfig finish_config(RunConfig config, std::string_view source_name, const std::vector<std::string>& overrides) {
    for (const auto& assignment : overrides) apply_override(config, assignment);
    resolve_default_attention(config);
    validate_config(config, source_name, overrides);
    return config;
}
}  // namespace

RunConfig config_from_toml_string(std::string_view text, std::string_view source_name) {
    RunConfig config;
    apply_toml(config, text, source_name);
    return finish_config(std::move(config), source_name, {});
}

RunConfig config_from_overrides(const std::vector<std::string>& overrides) {
    return finish_config(RunConfig{}, "--set", overrides);
}

RunConfig load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
    std::error_code error;
    if (std::filesystem::is_directory(file, error))
        throw UserError("config file '" + file.string() +
                        "' is a folder; pass a TOML file, e.g. configs/gpt-117m.toml");
    std::ifstream in(file, std::ios::binary);
    if (!in)
        throw UserError("cannot read config file '" + file.string() +
                        "': it does not exist or is not readable; pass an existing file, e.g. configs/gpt-117m.toml");
    std::ostringstream text;
    text << in.rdbuf();
    RunConfig config;
    apply_toml(config, text.str(), file.string());
    return finish_config(std::move(config), file.string(), overrides);
}

std::string format_config_table(const RunConfig& config) {
    std::size_t width = 0;
    for (const auto& key : registry()) width = std::max(width, key.full_name().size());
    std::string out;
    for (const auto& key : registry()) {
        const auto name = key.full_name();
        out += name + std::string(width - name.size() + 2, ' ') + format_value(key.get(config)) + "\n";
    }
    return out;
}

std::string format_config_reference() {
    std::size_t name_width = 0, type_width = 0;
    for (const auto& key : registry()) {
        name_width = std::max(name_width, key.full_name().size());
        type_width = std::max(type_width, kind_short_name(key.kind).size());
    }
    std::string out;
    for (const auto& key : registry()) {
        const auto name = key.full_name();
        const auto type = kind_short_name(key.kind);
        out += name + std::string(name_width - name.size() + 2, ' ') + std::string(type) +
               std::string(type_width - type.size() + 2, ' ') + std::string(key.help);
        if (!key.allowed.description.empty()) out += " (" + key.allowed.description + ")";
        out += "\n";
    }
    return out;
}

std::string to_toml(const RunConfig& config) {
    std::string out = "# adacc run config, fully resolved\n";
    std::string_view section;
    for (const auto& key : registry()) {
        if (key.section != section) {
            section = key.section;
            out += "\n[" + std::string(section) + "]\n";
        }
        out += std::string(key.name) + " = " + format_value(key.get(config)) + "\n";
    }
    return out;
}

}  // namespace adacc
