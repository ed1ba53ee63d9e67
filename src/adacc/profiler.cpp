#include "src/adacc/profiler.h"

#include <algorithm>
#include <memory>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "src/engine/activation_plan.h"
#include "src/common/units.h"
#include "src/common/errors.h"
#include "src/engine/weight_init.h"

namespace adacc {

namespace {

// Compresses and decompresses tensor `kind` of every layer with `codec`, from the tape of a
// kept-everything forward, timing both on the backend's queue and measuring size, error and
// outliers; the blob, the decoded copy and the codec's scratch are backend memory of their own.
CodecMeasurement measure_codec(const GPTModel& model, TensorKind kind, Codec codec, int B, int T,
                               const CodecParams& params) {
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
    const std::unique_ptr<IntervalTimer> timer = backend.make_interval_timer(2);
    for (int l = 0; l < L; ++l) {
        const ConstAct data(model.tape().data(*model.tape().find(l, kind)), info.dtype);
        const Act decoded_data(decoded.data(), data.dtype());
        timer->start();
        k.codec_compress(ctx, codec, data, rows, cols, params, blob.data());
        timer->stop();
        timer->start();
        k.codec_decompress(ctx, codec, blob.data(), rows, cols, decoded_data);
        timer->stop();
        const std::vector<double> ms = timer->take_ms();
        m.compress_ms += ms[0] / L;
        m.decompress_ms += ms[1] / L;
        const std::size_t outliers = k.codec_outlier_count(ctx, codec, blob.data());
        m.compressed_bytes = std::max(m.compressed_bytes, codec_bytes(codec, rows, cols, params, outliers));
        if (!codec_is_lossless(codec)) {  // bitpack: no error, no outliers
            const CodecStats stats = k.codec_error(ctx, data, decoded_data, numel);
            m.relative_error = std::max(m.relative_error, stats.relative_l2);
            m.layer_errors.push_back(stats.relative_l2);
            m.outlier_fraction = std::max(m.outlier_fraction, double(outliers) / static_cast<double>(cols));
        } else {
            m.layer_errors.push_back(0.0);
        }
    }
    return m;
}

// Profile files written before every codec was measured per tensor lack "codecs".
constexpr int kProfileFormat = 2;

// Sums each block op's forward time over layers and repeats.
class OpTimer final : public ModelObserver {
public:
    explicit OpTimer(std::vector<double>& op_ms) : op_ms_(op_ms) {}
    bool wants_op_times() const override { return true; }
    void op_timed(std::size_t op_index, double ms) override { op_ms_[op_index] += ms; }

private:
    std::vector<double>& op_ms_;
};

// The slice's parameters out of the whole model's: every tensor whole, except that per-layer
// tensors keep only their first slice.n_layer layers (the layout stacks layers tensor by tensor).
std::vector<float> slice_parameters(const GPTConfig& config, const GPTConfig& slice, const float* whole) {
    const ParameterLayout from(config), to(slice);
    std::vector<float> out(to.total());
    for (int id = 0; id < kNumParamTensors; ++id) {
        const ParamTensorInfo &src = from.tensors()[id], &dst = to.tensors()[id];
        std::copy(whole + src.offset, whole + src.offset + dst.numel, out.begin() + static_cast<std::ptrdiff_t>(dst.offset));
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
    GPTModel model(slice, Bm, T, ActivationPlan(BlockGraph(slice, Bm, T), slice.n_layer), {}, ModelUse::training,
                   backend_for(target.device), target.activation);
    load_weights(model, config, weights);
    const DropoutContext dropout{weights.seed, 1, 0, true};
    model.forward(tokens.data(), tokens.data(), Bm, T, dropout, 0.0f);  // warm-up: threads, caches, first touch
    Profile profile;
    profile.batch = batch;
    profile.seq = T;
    profile.measured_batch = Bm;
    profile.codec_params = codec_params;
    for (const auto& op : model.block().ops()) profile.op_names.push_back(op.name);
    profile.op_ms.assign(profile.op_names.size(), 0.0);
    OpTimer timer(profile.op_ms);
    model.set_observer(&timer);
    for (int r = 0; r < repeats; ++r) model.forward(tokens.data(), tokens.data(), Bm, T, dropout, 0.0f);
    model.set_observer(nullptr);
    // Per layer and per forward, scaled to the planned batch (op times grow linearly with B).
    const double scale = double(batch) / Bm;
    for (double& ms : profile.op_ms) ms = ms / repeats / slice.n_layer * scale;

    const BlockGraph planned(config, batch, T, target.activation);
    for (const TensorInfo& t : model.block().tensors()) {
        if (!t.saved || t.tiny || t.kind == TensorKind::x || t.numel == 0) continue;
        TensorProfile p;
        p.kind = t.kind;
        p.name = t.name;
        p.bytes = planned.tensor(t.kind).bytes();
        const std::size_t rows = tensor_rows(config, t.kind, batch, T), cols = planned.tensor(t.kind).numel / rows;
        for (Codec codec : codecs_that_store(t.kind)) {
            CodecMeasurement m = measure_codec(model, t.kind, codec, Bm, T, codec_params);
            m.compressed_bytes = static_cast<std::size_t>(double(m.compressed_bytes) * scale);
            m.compressed_bound = codec_max_bytes(codec, rows, cols, codec_params);
            m.compress_ms *= scale;
            m.decompress_ms *= scale;
            p.codecs.push_back(m);
        }
        profile.tensors.push_back(p);
    }
    return profile;
}

Profile rescale_profile(const Profile& profile, const GPTConfig& config, int batch) {
    Profile out = profile;
    const double scale = double(batch) / profile.batch;
    out.batch = batch;
    for (double& ms : out.op_ms) ms *= scale;
    const BlockGraph planned(config, batch, profile.seq);
    for (auto& t : out.tensors) {
        const TensorInfo& info = planned.tensor(t.kind);
        const std::size_t rows = tensor_rows(config, t.kind, batch, profile.seq);
        t.bytes = t.bytes / profile.batch * batch;  // exact: every block tensor has B rows of a fixed size
        for (auto& m : t.codecs) {
            m.compressed_bytes = static_cast<std::size_t>(double(m.compressed_bytes) * scale);
            m.compressed_bound = codec_max_bytes(m.codec, rows, info.numel / rows, profile.codec_params);
            m.compress_ms *= scale;
            m.decompress_ms *= scale;
        }
    }
    return out;
}

nlohmann::json Profile::to_json() const {
    nlohmann::json j;
    j["batch"] = batch;
    j["seq"] = seq;
    j["measured_batch"] = measured_batch;
    j["codec"] = {{"group_size", codec_params.group_size}, {"outlier_z", codec_params.outlier_z},
                  {"max_outlier_channels", codec_params.max_outlier_channels}};
    j["ops"] = nlohmann::json::array();
    for (std::size_t i = 0; i < op_names.size(); ++i) j["ops"].push_back({{"name", op_names[i]}, {"forward_ms", op_ms[i]}});
    j["format"] = kProfileFormat;
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : tensors) {
        nlohmann::json codecs = nlohmann::json::array();
        for (const auto& m : t.codecs)
            codecs.push_back({{"codec", codec_name(m.codec)}, {"codec_id", static_cast<int>(m.codec)},
                              {"compressed_bytes", m.compressed_bytes}, {"compressed_bound", m.compressed_bound},
                              {"outlier_fraction", m.outlier_fraction}, {"relative_error", m.relative_error},
                              {"layer_errors", m.layer_errors},
                              {"compress_ms", m.compress_ms}, {"decompress_ms", m.decompress_ms}});
        j["tensors"].push_back(
            {{"name", t.name}, {"kind", static_cast<int>(t.kind)}, {"bytes", t.bytes}, {"codecs", codecs}});
    }
    return j;
}

Profile Profile::from_json(const nlohmann::json& j) {
    Profile p;
    p.batch = j.at("batch");
    p.seq = j.at("seq");
    p.measured_batch = j.at("measured_batch");
    p.codec_params.group_size = j.at("codec").at("group_size");
    p.codec_params.outlier_z = j.at("codec").at("outlier_z");
    p.codec_params.max_outlier_channels = j.at("codec").at("max_outlier_channels");
    for (const auto& op : j.at("ops")) {
        p.op_names.push_back(op.at("name"));
        p.op_ms.push_back(op.at("forward_ms"));
    }
    for (const auto& t : j.at("tensors")) {
        TensorProfile tp;
        tp.name = t.at("name");
        tp.kind = static_cast<TensorKind>(t.at("kind").get<int>());
        tp.bytes = t.at("bytes");
        for (const auto& c : t.at("codecs")) {
            CodecMeasurement m;
            m.codec = static_cast<Codec>(c.at("codec_id").get<int>());
            m.compressed_bytes = c.at("compressed_bytes");
            m.compressed_bound = c.at("compressed_bound");
            m.outlier_fraction = c.at("outlier_fraction");
            m.relative_error = c.at("relative_error");
            m.layer_errors = c.value("layer_errors", std::vector<double>{});  // absent before per-layer classes
            m.compress_ms = c.at("compress_ms");
            m.decompress_ms = c.at("decompress_ms");
            tp.codecs.push_back(m);
        }
        p.tensors.push_back(tp);
    }
    return p;
}

void Profile::save(const std::filesystem::path& file) const { std::ofstream(file) << to_json().dump(2) << "\n"; }

Profile Profile::load(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in)
        throw SettingError("memory.profile", "cannot read profile " + file.string() +
                                                 ": memory.profile must name a profile.json written by a run, or be "
                                                 "empty to profile afresh");
    try {
        const nlohmann::json j = nlohmann::json::parse(in);
        if (j.value("format", 1) != kProfileFormat)
            throw UserError("profile " + file.string() + " has format " + std::to_string(j.value("format", 1)) +
                            "; this adacc measures every codec per tensor (format " + std::to_string(kProfileFormat) +
                            "): delete it and let the run profile again");
        return from_json(j);
    } catch (const nlohmann::json::exception& e) {
        throw UserError("profile " + file.string() + " is malformed (" + e.what() +
                        "): delete it and let the run profile again");
    }
}

}  // namespace adacc
