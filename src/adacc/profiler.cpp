#include "src/adacc/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/common/units.h"
#include "src/engine/activation_plan.h"
#include "src/engine/weight_init.h"

namespace adacc {

namespace {

// Compresses and decompresses tensor `kind` of every layer with `codec`, from the tape of a
// kept-everything forward: an untimed pass over layer 0 first (a codec's first call pays for its
// code and its scratch's first touch), then `repeats` timed passes over every layer on the
// backend's queue, measuring size, error and outliers on the last; the blob, the decoded copy and
// the codec's scratch are backend memory of their own.
CodecMeasurement measure_codec(const GPTModel& model, TensorKind kind, Codec codec, int B, int T,
                               const CodecParams& params, int repeats) {
    const TensorInfo& info = model.block().tensor(kind);
    const std::size_t numel = info.numel * B / model.max_batch();  // the block graph is at the allocated batch
    const std::size_t rows = tensor_rows(model.config(), kind, B, T), cols = numel / rows;
    CodecMeasurement m;
    m.codec = codec;
    m.compressed_bound = codec_max_bytes(codec, rows, cols, params);
    Backend& backend = model.backend();
    const Arena blob(backend, m.compressed_bound), decoded(backend, numel * dtype_size(info.dtype)),
        scratch(backend, codec_scratch_bytes(codec, rows, cols, params));
    KernelContext ctx = backend.context();
    ctx.scratch = scratch.data();
    ctx.scratch_bytes = scratch.bytes();
    const KernelTable& k = backend.kernels();
    const int L = model.config().n_layer;
    auto layer_data = [&](int l) { return ConstAct(model.tape().data(*model.tape().find(l, kind)), info.dtype); };
    const Act decoded_data(decoded.data(), info.dtype);
    k.codec_compress(ctx, codec, layer_data(0), rows, cols, params, blob.data());
    k.codec_decompress(ctx, codec, blob.data(), rows, cols, decoded_data);
    // Size, error and outliers of layer l, whose blob and decoded copy were just written (outside
    // the timed intervals: on a GPU, reading them back synchronises).
    auto measure_layer = [&](int l) {
        const std::size_t outliers = k.codec_outlier_count(ctx, codec, blob.data());
        m.compressed_bytes = std::max(m.compressed_bytes, codec_bytes(codec, rows, cols, params, outliers));
        if (codec_is_lossless(codec)) {  // bitpack: no error, no outliers
            m.layer_errors.push_back(0.0);
            return;
        }
        const CodecStats stats = k.codec_error(ctx, layer_data(l), decoded_data, numel);
        m.relative_error = std::max(m.relative_error, stats.relative_l2);
        m.layer_errors.push_back(stats.relative_l2);
        m.outlier_fraction = std::max(m.outlier_fraction, double(outliers) / static_cast<double>(cols));
    };
    const std::unique_ptr<IntervalTimer> timer = backend.make_interval_timer(2 * static_cast<std::size_t>(L));
    std::vector<double> compress(repeats, 0.0), decompress(repeats, 0.0);  // per repeat, mean over layers
    for (int r = 0; r < repeats; ++r) {
        for (int l = 0; l < L; ++l) {
            timer->start();
            k.codec_compress(ctx, codec, layer_data(l), rows, cols, params, blob.data());
            timer->stop();
            timer->start();
            k.codec_decompress(ctx, codec, blob.data(), rows, cols, decoded_data);
            timer->stop();
            if (r == repeats - 1) measure_layer(l);
        }
        const std::vector<double> ms = timer->take_ms();
        for (int l = 0; l < L; ++l) {
            compress[r] += ms[2 * l] / L;
            decompress[r] += ms[2 * l + 1] / L;
        }
    }
    const RepeatedTime c = summarize_repeats(compress), d = summarize_repeats(decompress);
    m.compress_ms = c.median_ms, m.compress_spread_ms = c.spread_ms;
    m.decompress_ms = d.median_ms, m.decompress_spread_ms = d.spread_ms;
    return m;
}

// Format 4 keeps each time's spread over the profiler's repeats; format 3, still read (its spreads
// then 0), lacks them; it names what a profile was measured for ("measured_for") and keeps
// compressed sizes within their bound, which format 2 lacks; format 1 lacks "codecs".
constexpr int kProfileFormat = 4;
constexpr int kOldestReadableProfileFormat = 3;

// A block op or codec pass taking longer than a day per layer is not a measurement (the largest
// models' ops at the largest batches take minutes on a CPU); the cap keeps the planner's sums of
// times finite.
constexpr double kMaxProfileMs = 86400e3;
// Every codec rounds each element to within half a step of its group's (or channel's) range, so
// its relative L2 error is at most 1 for the symmetric codecs and sqrt(G) / 15 <= 4.3 for the
// asymmetric one (G <= kMaxGroupSize): an error above 10 is not a measurement.
constexpr double kMaxRelativeError = 10;

// A codec's times at `scale` times the batch they were measured at.
void scale_times(CodecMeasurement& m, double scale) {
    for (double* ms : {&m.compress_ms, &m.decompress_ms, &m.compress_spread_ms, &m.decompress_spread_ms}) *ms *= scale;
}

// Linear scaling also scales what a blob holds whatever the batch (its header, per-channel scales),
// so a size measured at a smaller batch may scale past the exact bound; no blob exceeds it.
std::size_t scaled_bytes(std::size_t bytes, double scale, std::size_t bound) {
    return std::min(bound, static_cast<std::size_t>(double(bytes) * scale));
}

// Each block op's forward time summed over layers, one list per forward (start_repeat before each).
class OpTimer final : public ModelObserver {
public:
    explicit OpTimer(std::size_t ops) : ops_(ops) {}
    void start_repeat() { repeats_.emplace_back(ops_, 0.0); }
    bool wants_op_times() const override { return true; }
    void op_timed(std::size_t op_index, double ms) override { repeats_.back()[op_index] += ms; }
    // Op `op`'s time in every repeat.
    std::vector<double> times(std::size_t op) const {
        std::vector<double> out;
        for (const auto& repeat : repeats_) out.push_back(repeat[op]);
        return out;
    }

private:
    std::size_t ops_;
    std::vector<std::vector<double>> repeats_;
};

// The slice's parameters out of the whole model's: every tensor whole, except that per-layer
// tensors keep only their first slice.n_layer layers (the layout stacks layers tensor by tensor).
std::vector<float> slice_parameters(const GPTConfig& config, const GPTConfig& slice, const float* whole) {
    const ParameterLayout from(config), to(slice);
    std::vector<float> out(to.total());
    for (int id = 0; id < kNumParamTensors; ++id) {
        const ParamTensorInfo &src = from.tensors()[id], &dst = to.tensors()[id];
        std::copy(whole + src.offset, whole + src.offset + dst.numel,
                  out.begin() + static_cast<std::ptrdiff_t>(dst.offset));
    }
    return out;
}

void load_weights(GPTModel& slice_model, const GPTConfig& config, const ProfileWeights& weights) {
    if (weights.parameters == nullptr) {
        init_weights_with_stress(slice_model, weights.seed, weights.stress, config.n_layer);
        return;
    }
    const std::vector<float> params = slice_parameters(config, slice_model.config(), weights.parameters);
    slice_model.write_arena(ModelArena::parameters, 0, params.size(), params.data());
}

}  // namespace

RepeatedTime summarize_repeats(std::vector<double> times_ms) {
    std::sort(times_ms.begin(), times_ms.end());
    const std::size_t n = times_ms.size(), mid = n / 2;
    const double median = n % 2 == 1 ? times_ms[mid] : (times_ms[mid - 1] + times_ms[mid]) / 2;
    return {median, times_ms.back() - times_ms.front()};
}

GPTConfig profile_slice(const GPTConfig& config) {
    GPTConfig slice = config;
    slice.n_layer = std::min(config.n_layer, kProfiledLayers);
    return slice;
}

bool profile_slice_fits(const GPTConfig& config, int B, int T, std::uint64_t bytes, const ComputeTarget& target) {
    const GPTConfig slice = profile_slice(config);
    const ActivationPlan keep_all(BlockGraph(slice, B, T), slice.n_layer);
    return GPTModel::plan_memory(slice, B, T, keep_all, {}, ModelUse::training, target).total() <= bytes;
}

Profile profile_subject(const GPTConfig& config, int batch, int seq, const ComputeTarget& target,
                        const CodecParams& codec_params) {
    Profile p;
    p.batch = batch;
    p.seq = seq;
    p.codec_params = codec_params;
    p.block = {config.n_embd, config.n_head,    profile_slice(config).n_layer, config.dropout, config.attention,
               target.device, target.activation};
    return p;
}

bool is_profiled(const TensorInfo& t) { return t.saved && !t.tiny && t.kind != TensorKind::x && t.numel > 0; }

std::size_t compressed_bound(const GPTConfig& config, const TensorInfo& t, Codec codec, int B, int T,
                             const CodecParams& params) {
    const std::size_t rows = tensor_rows(config, t.kind, B, T);
    return codec_max_bytes(codec, rows, t.numel / rows, params);
}

int profiled_layer(int layer, int layers_profiled) { return std::min(layer, std::max(layers_profiled, 1) - 1); }

double layer_error(const CodecMeasurement& m, int layer) {
    if (layer < 0 || m.layer_errors.empty()) return m.relative_error;
    return m.layer_errors[profiled_layer(layer, static_cast<int>(m.layer_errors.size()))];
}

const CodecMeasurement* TensorProfile::find(Codec wanted) const {
    for (const auto& c : codecs)
        if (c.codec == wanted) return &c;
    return nullptr;
}

const TensorProfile* Profile::find(TensorKind kind) const {
    for (const auto& t : tensors)
        if (t.kind == kind) return &t;
    return nullptr;
}

Profile profile_block(const GPTConfig& config, int batch, int measured_batch, int T, const std::vector<int>& tokens,
                      const ProfileWeights& weights, const ComputeTarget& target, const CodecParams& codec_params,
                      int repeats) {
    const int Bm = measured_batch;
    const GPTConfig slice = profile_slice(config);
    // Unsharded whatever ZeRO-1 does in training: the slice holds whole weights, and only its
    // forward and the codecs are timed.
    GPTModel model(slice, Bm, T, ActivationPlan(BlockGraph(slice, Bm, T), slice.n_layer), {}, ModelUse::training,
                   ComputeTarget{target.device, target.activation});
    load_weights(model, config, weights);
    const DropoutContext dropout{weights.seed, 1, 0, true};
    model.forward(tokens.data(), tokens.data(), Bm, T, dropout, 0.0f);  // warm-up: threads, caches, first touch
    Profile profile = profile_subject(config, batch, T, target, codec_params);
    profile.measured_batch = Bm;
    for (const auto& op : model.block().ops()) profile.op_names.push_back(op.name);
    OpTimer timer(profile.op_names.size());
    model.set_observer(&timer);
    for (int r = 0; r < repeats; ++r) {
        timer.start_repeat();
        model.forward(tokens.data(), tokens.data(), Bm, T, dropout, 0.0f);
    }
    model.set_observer(nullptr);
    // Per layer and per forward, scaled to the planned batch (op times grow linearly with B).
    const double scale = double(batch) / Bm, per_layer = scale / slice.n_layer;
    for (std::size_t op = 0; op < profile.op_names.size(); ++op) {
        const RepeatedTime t = summarize_repeats(timer.times(op));
        profile.op_ms.push_back(t.median_ms * per_layer);
        profile.op_spread_ms.push_back(t.spread_ms * per_layer);
    }

    const BlockGraph planned(config, batch, T, target.activation);
    for (const TensorInfo& t : model.block().tensors()) {
        if (!is_profiled(t)) continue;
        TensorProfile p;
        p.kind = t.kind;
        p.name = t.name;
        p.bytes = planned.tensor(t.kind).bytes();
        for (Codec codec : codecs_that_store(t.kind)) {
            CodecMeasurement m = measure_codec(model, t.kind, codec, Bm, T, codec_params, repeats);
            m.compressed_bound = compressed_bound(config, planned.tensor(t.kind), codec, batch, T, codec_params);
            m.compressed_bytes = scaled_bytes(m.compressed_bytes, scale, m.compressed_bound);
            scale_times(m, scale);
            p.codecs.push_back(m);
        }
        profile.tensors.push_back(p);
    }
    return profile;
}

void keep_times(const Profile& from, Profile& into) {
    into.op_ms = from.op_ms;
    into.op_spread_ms = from.op_spread_ms;
    for (auto& t : into.tensors)
        if (const TensorProfile* old = from.find(t.kind))
            for (auto& m : t.codecs)
                if (const CodecMeasurement* measured = old->find(m.codec)) {
                    m.compress_ms = measured->compress_ms;
                    m.decompress_ms = measured->decompress_ms;
                    m.compress_spread_ms = measured->compress_spread_ms;
                    m.decompress_spread_ms = measured->decompress_spread_ms;
                }
}

Profile rescale_profile(const Profile& profile, const GPTConfig& config, int batch) {
    Profile out = profile;
    const double scale = double(batch) / profile.batch;
    out.batch = batch;
    for (double& ms : out.op_ms) ms *= scale;
    for (double& ms : out.op_spread_ms) ms *= scale;
    const BlockGraph planned(config, batch, profile.seq);
    for (auto& t : out.tensors) {
        const TensorInfo& info = planned.tensor(t.kind);
        t.bytes = t.bytes / profile.batch * batch;  // exact: every block tensor has B rows of a fixed size
        for (auto& m : t.codecs) {
            m.compressed_bound = compressed_bound(config, info, m.codec, batch, profile.seq, profile.codec_params);
            m.compressed_bytes = scaled_bytes(m.compressed_bytes, scale, m.compressed_bound);
            scale_times(m, scale);
        }
    }
    return out;
}

namespace {

// What `p` was measured for, as profile.json's "measured_for" holds it: the profile's batch, seq,
// block and codec parameters (profile_subject's fields).
nlohmann::json measured_for(const Profile& p) {
    const ProfiledBlock& b = p.block;
    return {{"n_embd", b.n_embd},
            {"n_head", b.n_head},
            {"layers", b.layers},
            {"dropout", b.dropout},
            {"attention", attention_impl_name(b.attention)},
            {"device", device_name(b.device)},
            {"dtype", model_dtype_name(b.dtype)},
            {"batch", p.batch},
            {"seq", p.seq},
            {"codec",
             {{"group_size", p.codec_params.group_size},
              {"outlier_z", p.codec_params.outlier_z},
              {"max_outlier_channels", p.codec_params.max_outlier_channels}}}};
}

// A profile.json that is not a measurement of the block it names; the message names the key.
class MalformedProfile : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A value of profile.json with its key (tensors[2].codecs[0].relative_error), so that what is
// wrong with it is said of that key.
class Field {
public:
    Field(const nlohmann::json& value, std::string key) : value_(value), key_(std::move(key)) {}

    Field operator[](const std::string& name) const {
        if (!value_.is_object() || !value_.contains(name)) fail((key_.empty() ? "it" : key_) + " has no " + name);
        return {value_[name], key_.empty() ? name : key_ + "." + name};
    }
    std::vector<Field> items() const {
        if (!value_.is_array()) refuse("not a list");
        std::vector<Field> out;
        for (std::size_t i = 0; i < value_.size(); ++i)
            out.emplace_back(value_[i], key_ + "[" + std::to_string(i) + "]");
        return out;
    }
    std::string text() const {
        if (!value_.is_string()) refuse("not a name");
        return value_.get<std::string>();
    }
    // A whole number in [lo, hi].
    std::uint64_t whole(std::uint64_t lo, std::uint64_t hi) const {
        if (!value_.is_number_unsigned() || value_.get<std::uint64_t>() < lo || value_.get<std::uint64_t>() > hi)
            refuse("not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return value_.get<std::uint64_t>();
    }
    // A finite number in [lo, hi].
    double number(double lo, double hi) const {
        const double x = value_.is_number() ? value_.get<double>() : std::nan("");
        if (!(x >= lo && x <= hi))  // false for NaN
            refuse("not a number in [" + format_number(lo) + ", " + format_number(hi) + "]");
        return x;
    }
    // Throws MalformedProfile: "KEY is VALUE, " + `problem`.
    [[noreturn]] void refuse(const std::string& problem) const { fail(key_ + " is " + value_.dump() + ", " + problem); }
    [[noreturn]] static void fail(const std::string& problem) { throw MalformedProfile(problem); }
    const nlohmann::json& json() const { return value_; }

private:
    static std::string format_number(double x) {
        std::ostringstream out;
        out << x;
        return out.str();
    }
    const nlohmann::json& value_;
    std::string key_;
};

// Refuses `source` unless `profile`'s measured_for equals `run`'s field by field, naming the first
// that differs (a profile of another model, batch, device, dtype or codec parameters would plan
// this run from another run's sizes and times).
void check_measured_for(const Field& profile, const nlohmann::json& run, const std::string& source,
                        const std::string& prefix = "") {
    for (const auto& [name, expected] : run.items()) {
        const Field field = profile[name];
        if (expected.is_object()) {
            check_measured_for(field, expected, source, prefix + name + ".");
            continue;
        }
        const nlohmann::json& value = field.json();
        if (value != expected)
            throw SettingError("memory.profile", source + " was measured for " + prefix + name + " " + value.dump() +
                                                     ", but this run has " + prefix + name + " " + expected.dump() +
                                                     ": delete it or point memory.profile elsewhere");
    }
}

// `names` joined by ", ", for messages.
std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

std::string op_names(const BlockGraph& block) {
    std::vector<std::string> names;
    for (const OpInfo& op : block.ops()) names.push_back(op.name);
    return joined(names);
}

std::string profiled_names(const BlockGraph& block) {
    std::vector<std::string> names;
    for (const TensorInfo& t : block.tensors())
        if (is_profiled(t)) names.push_back(t.name + " (kind " + std::to_string(static_cast<int>(t.kind)) + ")");
    return joined(names);
}

// The block's ops, exactly and in order, each with its forward time.
void read_ops(const Field& ops, const BlockGraph& block, bool with_spreads, Profile& p) {
    const std::vector<Field> list = ops.items();
    if (list.size() != block.ops().size())
        Field::fail("ops lists " + std::to_string(list.size()) + " ops, but this block has " +
                    std::to_string(block.ops().size()) + ": " + op_names(block));
    for (std::size_t i = 0; i < list.size(); ++i) {
        const Field name = list[i]["name"];
        if (name.text() != block.ops()[i].name)
            name.refuse("but op " + std::to_string(i) + " of this block is " + block.ops()[i].name);
        p.op_names.push_back(name.text());
        p.op_ms.push_back(list[i]["forward_ms"].number(0, kMaxProfileMs));
        p.op_spread_ms.push_back(with_spreads ? list[i]["forward_spread_ms"].number(0, kMaxProfileMs) : 0.0);
    }
}

// One codec's measurement of tensor `info`: a codec that stores it, listed once, at this block's
// bound, with sizes, fractions, errors and times in range.
CodecMeasurement read_codec(const Field& c, const GPTConfig& config, const TensorInfo& info, bool with_spreads,
                            const Profile& p, const TensorProfile& tensor) {
    CodecMeasurement m;
    const Field id = c["codec_id"];
    m.codec = static_cast<Codec>(id.whole(0, kNumCodecs - 1));
    const std::vector<Codec> stores = codecs_that_store(info.kind);
    if (std::find(stores.begin(), stores.end(), m.codec) == stores.end())
        id.refuse(std::string(codec_name(m.codec)) + ", which does not store " + info.name);
    if (tensor.find(m.codec) != nullptr)
        id.refuse("a second measurement of " + std::string(codec_name(m.codec)) + " on " + info.name);
    const Field name = c["codec"];
    if (name.text() != codec_name(m.codec))
        name.refuse("but codec_id " + std::to_string(static_cast<int>(m.codec)) + " is " + codec_name(m.codec));
    const std::size_t bound = compressed_bound(config, info, m.codec, p.batch, p.seq, p.codec_params);
    const Field bound_field = c["compressed_bound"];
    m.compressed_bound = bound_field.whole(0, std::numeric_limits<std::uint64_t>::max());
    if (m.compressed_bound != bound)
        bound_field.refuse("but " + std::string(codec_name(m.codec)) + " stores this block's " + info.name +
                           " in at most " + std::to_string(bound) + " bytes");
    m.compressed_bytes = c["compressed_bytes"].whole(1, bound);
    m.outlier_fraction = c["outlier_fraction"].number(0, 1);
    m.relative_error = c["relative_error"].number(0, kMaxRelativeError);
    const Field layer_errors = c["layer_errors"];
    const std::vector<Field> layers = layer_errors.items();
    if (layers.size() != static_cast<std::size_t>(p.block.layers))
        layer_errors.refuse("but the profiler's slice has " + std::to_string(p.block.layers) +
                            " layers, one error each");
    for (const Field& e : layers) m.layer_errors.push_back(e.number(0, kMaxRelativeError));
    m.compress_ms = c["compress_ms"].number(0, kMaxProfileMs);
    m.decompress_ms = c["decompress_ms"].number(0, kMaxProfileMs);
    if (with_spreads) {
        m.compress_spread_ms = c["compress_spread_ms"].number(0, kMaxProfileMs);
        m.decompress_spread_ms = c["decompress_spread_ms"].number(0, kMaxProfileMs);
    }
    return m;
}

// One saved tensor of the block, listed once, at this block's size, with its codecs.
TensorProfile read_tensor(const Field& t, const GPTConfig& config, const BlockGraph& block, bool with_spreads,
                          const Profile& p) {
    TensorProfile tensor;
    const Field kind = t["kind"];
    tensor.kind = static_cast<TensorKind>(kind.whole(0, kNumTensorKinds - 1));
    const TensorInfo& info = block.tensor(tensor.kind);
    if (!is_profiled(info)) kind.refuse("not a tensor this block plans: " + profiled_names(block));
    if (p.find(tensor.kind) != nullptr) kind.refuse("a second entry for " + info.name);
    const Field name = t["name"];
    tensor.name = name.text();
    if (tensor.name != info.name)
        name.refuse("but kind " + std::to_string(static_cast<int>(info.kind)) + " is " + info.name);
    const Field bytes = t["bytes"];
    tensor.bytes = bytes.whole(0, std::numeric_limits<std::uint64_t>::max());
    if (tensor.bytes != info.bytes())
        bytes.refuse("but this block's " + info.name + " holds " + std::to_string(info.bytes()) + " bytes");
    for (const Field& c : t["codecs"].items())
        tensor.codecs.push_back(read_codec(c, config, info, with_spreads, p, tensor));
    return tensor;
}

// profile.json's measurements into `p` (which names the run they must describe), each checked
// against the block `config` builds at p's batch, seq and dtype: what profile_block would write.
// `with_spreads`: the file's format keeps the times' spreads.
void read_measurements(const Field& root, const GPTConfig& config, bool with_spreads, Profile& p) {
    const BlockGraph block(config, p.batch, p.seq, p.block.dtype, block_fusions(p.block.device));
    p.measured_batch = static_cast<int>(root["measured_batch"].whole(1, static_cast<std::uint64_t>(p.batch)));
    read_ops(root["ops"], block, with_spreads, p);
    for (const Field& t : root["tensors"].items()) p.tensors.push_back(read_tensor(t, config, block, with_spreads, p));
    for (const TensorInfo& info : block.tensors())
        if (is_profiled(info) && p.find(info.kind) == nullptr)
            Field::fail("tensors has no " + info.name + "; this block plans " + profiled_names(block));
}

}  // namespace

nlohmann::json Profile::to_json() const {
    nlohmann::json j;
    j["format"] = kProfileFormat;
    j["measured_for"] = measured_for(*this);
    j["measured_batch"] = measured_batch;
    j["ops"] = nlohmann::json::array();
    for (std::size_t i = 0; i < op_names.size(); ++i)
        j["ops"].push_back({{"name", op_names[i]}, {"forward_ms", op_ms[i]}, {"forward_spread_ms", op_spread_ms[i]}});
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : tensors) {
        nlohmann::json codecs = nlohmann::json::array();
        for (const auto& m : t.codecs)
            codecs.push_back({{"codec", codec_name(m.codec)},
                              {"codec_id", static_cast<int>(m.codec)},
                              {"compressed_bytes", m.compressed_bytes},
                              {"compressed_bound", m.compressed_bound},
                              {"outlier_fraction", m.outlier_fraction},
                              {"relative_error", m.relative_error},
                              {"layer_errors", m.layer_errors},
                              {"compress_ms", m.compress_ms},
                              {"decompress_ms", m.decompress_ms},
                              {"compress_spread_ms", m.compress_spread_ms},
                              {"decompress_spread_ms", m.decompress_spread_ms}});
        j["tensors"].push_back(
            {{"name", t.name}, {"kind", static_cast<int>(t.kind)}, {"bytes", t.bytes}, {"codecs", codecs}});
    }
    return j;
}

void Profile::save(const std::filesystem::path& file) const {
    const std::string text = to_json().dump(2) + "\n";
    AtomicFileWriter out(file);  // a killed run or a full disk never leaves half a profile to plan from
    out.write(text.data(), text.size());
    out.commit();
}

Profile Profile::load(const std::filesystem::path& file, const GPTConfig& config, int batch, int seq,
                      const ComputeTarget& target, const CodecParams& codec_params) {
    std::ifstream in(file);
    if (!in)
        throw SettingError("memory.profile", "cannot read profile " + file.string() +
                                                 ": memory.profile must name a profile.json written by a run, or be "
                                                 "empty to profile afresh");
    std::ostringstream text;
    text << in.rdbuf();
    return parse(text.str(), "profile " + file.string(), config, batch, seq, target, codec_params);
}

Profile Profile::parse(const std::string& text, const std::string& source, const GPTConfig& config, int batch, int seq,
                       const ComputeTarget& target, const CodecParams& codec_params) {
    const std::string redo = ": delete it and let the run profile again";
    try {
        const nlohmann::json j = nlohmann::json::parse(text);
        const Field root(j, "");
        // Format 1 had no "format" key.
        const nlohmann::json format = j.is_object() && j.contains("format") ? j["format"] : nlohmann::json(1);
        if (format != kProfileFormat && format != kOldestReadableProfileFormat)
            throw SettingError("memory.profile", source + " has format " + format.dump() +
                                                     "; this adacc names what a profile was measured for (formats " +
                                                     std::to_string(kOldestReadableProfileFormat) + " and " +
                                                     std::to_string(kProfileFormat) + ")" + redo);
        Profile p = profile_subject(config, batch, seq, target, codec_params);
        check_measured_for(root["measured_for"], measured_for(p), source);
        read_measurements(root, config, format == kProfileFormat, p);
        return p;
    } catch (const MalformedProfile& e) {
        throw SettingError("memory.profile", source + ": " + e.what() + redo);
    } catch (const nlohmann::json::exception& e) {
        throw SettingError("memory.profile", source + " is malformed (" + e.what() + ")" + redo);
    }
}

}  // namespace adacc
