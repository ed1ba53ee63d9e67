// A training step's collectives over the data-parallel ranks (src/dist/process_group.h), around
// the optimizer (src/engine/optimizer.h). Without ZeRO-1 every rank sums the whole gradient
// (all-reduce) and updates every parameter. With ZeRO-1 (training.zero = 1) rank r holds AdamW's
// moments (and, beside a bf16 working copy, its fp32 masters) for its shard of the parameters
// only (ModelLayout::optimizer_shard): the gradients are reduce-scattered (each rank gets its
// shard's sum), the norm that clipping reads is combined from the shards', each rank updates its
// shard, and the updated weights forward reads (the working copy, or the fp32 parameters) are
// all-gathered.
// In a job of one, every call is free.
#pragma once

#include <vector>

#include "src/engine/gpt_model.h"

namespace adacc {

// After the step's backward passes: every rank's gradients summed (into its shard under ZeRO-1).
void reduce_gradients(GPTModel& model);
// After queue_gradient_norm: under ZeRO-1 the slot holds this shard's norm; replaces it with the
// whole gradient's, sqrt(sum over ranks of norm^2) (reads it back: one synchronisation).
void combine_gradient_norm(GPTModel& model);
// After queue_adamw_step: under ZeRO-1 every rank's updated shard to every rank.
void gather_parameters(GPTModel& model);

// `arena` (parameters, adam_m or adam_v) of every parameter in host memory on rank 0, for its
// checkpoint: the arena itself where it is whole (GPTModel::held), else the ranks' shards gathered
// into `staging`. Every rank calls it; the others get null.
const float* arena_on_root(const GPTModel& model, ModelArena arena, std::vector<float>& staging);

}  // namespace adacc
