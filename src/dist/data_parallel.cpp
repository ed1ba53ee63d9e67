#include "src/dist/data_parallel.h"

#include <cmath>

#include "src/dist/process_group.h"

namespace adacc {

namespace {
bool sharded(const GPTModel& model) { return model.memory_layout().device_traits().optimizer_shards > 1; }
}  // namespace

void reduce_gradients(GPTModel& model) {
    if (sharded(model)) return reduce_scatter_sum(model.backend(), model.grads(), model.num_params());
    all_reduce_sum(model.backend(), model.grads(), model.num_params());
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
