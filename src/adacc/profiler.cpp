#include "src/adacc/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

#include "src/engine/activation_plan.h"
#include "src/common/units.h"
#include "src/common/errors.h"

namespace adacc {

namespace {

using Clock = std::chrono::steady_clock;


// Compresses and decompresses tensor `kind` of every layer from the tape of a kept-everything
// forward, timing both and measuring size, error and outliers; the blob, the decoded copy and
// the codec's scratch are backend memory of their own.
TensorProfile profile_tensor(const GPTModel& model, TensorKind kind, int B, int T, const CodecParams& params) {
    const TensorInfo& info = model.block().tensor(kind);
    const std::size_t numel = info.numel * B / model.max_batch();  // the block graph is at the allocated batch
    const std::size_t rows = tensor_rows(model.config(), kind, B, T), cols = numel / rows;
    TensorProfile p;
    p.kind = kind;
    p.name = info.name;
    p.codec = adacc_codec(kind);
    p.compressed_bound = codec_max_bytes(p.codec, rows, cols, params);
    Backend& backend = model.backend();
    const Arena blob(backend, p.compressed_bound), decoded(backend, numel * dtype_size(info.dtype)),
        scratch(backend, codec_scratch_bytes(p.codec, rows, cols, params));
    KernelContext ctx = backend.context();
    ctx.scratch = scratch.data();
    ctx.scratch_bytes = scratch.bytes();
    const KernelTable& k = backend.kernels();
    const int L = model.config().n_layer;
    for (int l = 0; l < L; ++l) {
        const ConstAct data(model.tape().data(*model.tape().find(l, kind)), info.dtype);
        auto t0 = Clock::now();
        k.codec_compress(ctx, p.codec, data, rows, cols, params, blob.data());
        backend.synchronize();
        p.compress_ms += ms_since(t0) / L;
        t0 = Clock::now();
        k.codec_decompress(ctx, p.codec, blob.data(), rows, cols, Act(decoded.data(), data.dtype()));
        backend.synchronize();
        p.decompress_ms += ms_since(t0) / L;
        const std::size_t outliers = k.codec_outlier_count(ctx, p.codec, blob.data());
        p.compressed_bytes = std::max(p.compressed_bytes, codec_bytes(p.codec, rows, cols, params, outliers));
        if (!codec_is_lossless(p.codec)) {  // bitpack: no error, no outliers
            const CodecStats stats = k.codec_error(ctx, data.as<float>(), decoded.as<float>(), numel);
            p.relative_error = std::max(p.relative_error, stats.relative_l2);
            p.outlier_fraction = std::max(p.outlier_fraction, double(outliers) / static_cast<double>(cols));
        }
    }
    return p;
}

// Sums each block op's forward time over layers and repeats.
class OpTimer final : public ModelObserver {
public:
    explicit OpTimer(std::vector<double>& op_ms) : op_ms_(op_ms) {}
    bool wants_op_times() const override { return true; }
    void op_timed(std::size_t op_index, double ms) override { op_ms_[op_index] += ms; }

private:
    std::vector<double>& op_ms_;
};

}  // namespace

const TensorProfile* Profile::find(TensorKind kind) const {
    for (const auto& t : tensors)
        if (t.kind == kind) return &t;
    return nullptr;
}

Profile profile_block(const GPTConfig& config, int batch, int measured_batch, int T, const std::vector<int>& tokens,
                      const float* weights, std::uint64_t seed, const CodecParams& codec_params, int repeats) {
    const int Bm = measured_batch;
    GPTModel model(config, Bm, T);
    if (weights)
        model.write_arena(ModelArena::parameters, 0, model.num_params(), weights);
    else
        model.init_weights(seed);
    const DropoutContext dropout{seed, 1, 0, true};
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
    for (double& ms : profile.op_ms) ms = ms / repeats / config.n_layer * scale;

    const BlockGraph planned(config, batch, T);
    for (const TensorInfo& t : model.block().tensors()) {
        if (!t.saved || t.tiny || t.kind == TensorKind::x || t.numel == 0) continue;
        TensorProfile p = profile_tensor(model, t.kind, Bm, T, codec_params);
        p.bytes = planned.tensor(t.kind).bytes();
        p.compressed_bytes = static_cast<std::size_t>(double(p.compressed_bytes) * scale);
        const std::size_t rows = tensor_rows(config, t.kind, batch, T);
        p.compressed_bound = codec_max_bytes(p.codec, rows, planned.tensor(t.kind).numel / rows, codec_params);
        p.compress_ms *= scale;
        p.decompress_ms *= scale;
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
        t.bytes = info.bytes();
        t.compressed_bytes = static_cast<std::size_t>(double(t.compressed_bytes) * scale);
        t.compressed_bound = codec_max_bytes(t.codec, rows, info.numel / rows, profile.codec_params);
        t.compress_ms *= scale;
        t.decompress_ms *= scale;
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
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : tensors)
        j["tensors"].push_back({{"name", t.name}, {"kind", static_cast<int>(t.kind)}, {"bytes", t.bytes},
                                {"codec", codec_name(t.codec)}, {"codec_id", static_cast<int>(t.codec)},
                                {"compressed_bytes", t.compressed_bytes}, {"compressed_bound", t.compressed_bound},
                                {"outlier_fraction", t.outlier_fraction}, {"relative_error", t.relative_error},
                                {"compress_ms", t.compress_ms}, {"decompress_ms", t.decompress_ms}});
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
        tp.codec = static_cast<Codec>(t.at("codec_id").get<int>());
        tp.compressed_bytes = t.at("compressed_bytes");
        tp.compressed_bound = t.at("compressed_bound");
        tp.outlier_fraction = t.at("outlier_fraction");
        tp.relative_error = t.at("relative_error");
        tp.compress_ms = t.at("compress_ms");
        tp.decompress_ms = t.at("decompress_ms");
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
        return from_json(nlohmann::json::parse(in));
    } catch (const nlohmann::json::exception& e) {
        throw UserError("profile " + file.string() + " is malformed (" + e.what() +
                        "): delete it and let the run profile again");
    }
}

}  // namespace adacc
