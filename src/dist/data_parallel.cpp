#include "src/dist/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "src/dist/process_group.h"

namespace adacc {

namespace {

bool sharded(const GPTModel& model) { return model.memory_layout().device_traits().optimizer_shards > 1; }

// Adds [begin, begin + count) to `bucket`, split at the optimizer shards' bounds when sharded.
void add_run(std::vector<GradientPiece>& bucket, std::size_t begin, std::size_t count, std::size_t params,
             int world_size, bool sharded) {
    const std::size_t end = begin + count;
    if (!sharded) {
        bucket.push_back({begin, count, -1});
        return;
    }
    const std::size_t shard = optimizer_shard(params, world_size, 0).count;
    for (std::size_t at = begin; at < end;) {
        const std::size_t owner = at / shard, stop = std::min(end, (owner + 1) * shard);
        bucket.push_back({at, stop - at, static_cast<int>(owner)});
        at = stop;
    }
}

// In parameter order, runs that touch (and go to the same rank) merged.
void sort_and_merge(std::vector<GradientPiece>& bucket) {
    std::ranges::sort(bucket, {}, &GradientPiece::begin);
    std::vector<GradientPiece> merged;
    for (const GradientPiece& p : bucket) {
        if (!merged.empty() && merged.back().begin + merged.back().count == p.begin && merged.back().root == p.root)
            merged.back().count += p.count;
        else
            merged.push_back(p);
    }
    bucket = std::move(merged);
}

}  // namespace

std::vector<std::vector<GradientPiece>> gradient_buckets(const ParameterLayout& layout, int world_size, bool sharded) {
    const std::size_t L = layout.info(ParamId::ln1w).shape[0];
    std::vector<std::vector<GradientPiece>> buckets(L + 1);
    for (int id = 0; id < kNumParamTensors; ++id) {
        const auto pid = static_cast<ParamId>(id);
        const ParamTensorInfo& t = layout.info(pid);
        if (t.per_layer) {
            const std::size_t per_layer = t.numel / L;
            for (std::size_t l = 0; l < L; ++l)
                add_run(buckets[L - 1 - l], t.offset + l * per_layer, per_layer, layout.total(), world_size, sharded);
            continue;
        }
        const bool embedding = pid == ParamId::wte || pid == ParamId::wpe;
        add_run(buckets[embedding ? L : 0], t.offset, t.numel, layout.total(), world_size, sharded);
    }
    for (auto& bucket : buckets) sort_and_merge(bucket);
    return buckets;
}

GradientReduction::GradientReduction(GPTModel& model, bool overlap) : model_(model), overlap_(overlap) {
    const int world_size = process_group().world_size;
    if (world_size == 1) return;
    for (const auto& bucket : gradient_buckets(model.layout(), world_size, sharded(model))) {
        std::vector<SumPiece>& pieces = buckets_.emplace_back();
        for (const GradientPiece& p : bucket) pieces.push_back({model.grads() + p.begin, p.count, p.root});
    }
}

GradientReduction::~GradientReduction() {
    if (!buckets_.empty()) model_.set_block_gradients_hook(nullptr);
}

void GradientReduction::before_last_backward() {
    if (!overlap_ || buckets_.empty()) return;
    const std::size_t L = buckets_.size() - 1;
    model_.set_block_gradients_hook([this, L](int layer) {
        start_through(L - 1 - static_cast<std::size_t>(layer));
        progress_sums();  // and moves on those started before
    });
}

void GradientReduction::finish() {
    if (buckets_.empty()) return;
    model_.set_block_gradients_hook(nullptr);
    start_through(buckets_.size() - 1);
    finish_sums(model_.backend());
    started_ = 0;
}

void GradientReduction::start_through(std::size_t bucket) {
    for (; started_ <= bucket; ++started_) start_sums(model_.backend(), buckets_[started_]);
}

void combine_gradient_norm(GPTModel& model) {
    if (!sharded(model)) return;
    float norm = 0.0f;
    model.backend().copy_to_host(&norm, model.grad_norm_slot(), sizeof norm);
    double squares = static_cast<double>(norm) * norm;
    all_reduce_sum(&squares, 1);
    norm = static_cast<float>(std::sqrt(squares));  // NaN or inf when any shard's is: every rank skips alike
    model.backend().copy_to_device(model.grad_norm_slot(), &norm, sizeof norm);
}

void gather_parameters(GPTModel& model) {
    if (!sharded(model)) return;
    // AdamW wrote this shard's working copy (bf16) beside its masters: the masters stay sharded.
    if (const Act working = model.working_weights()) return all_gather(model.backend(), working, model.num_params());
    all_gather(model.backend(), model.params(), model.num_params());
}

const float* arena_on_root(const GPTModel& model, ModelArena arena, std::vector<float>& staging) {
    const bool root = process_group().is_root();
    if (model.held(arena).count == model.num_params()) return root ? model.host_readable(arena, staging) : nullptr;
    std::vector<float> shard;
    const float* mine = model.host_readable(arena, shard);
    if (root) staging.resize(model.num_params());
    gather_to_root(mine, root ? staging.data() : nullptr, model.num_params());
    return root ? staging.data() : nullptr;
}

}  // namespace adacc
