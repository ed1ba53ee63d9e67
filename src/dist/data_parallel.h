// A training step's collectives over the data-parallel ranks (src/dist/process_group.h), around
// the optimizer (src/engine/optimizer.h). Without ZeRO-1 every rank sums the whole gradient
// (all-reduce) and updates every parameter. With ZeRO-1 (training.zero = 1) rank r holds AdamW's
// moments (and, beside a bf16 working copy, its fp32 masters) for its shard of the parameters
// only (ModelLayout::optimizer_shard): the gradients are reduced into the rank whose shard holds
// them (each rank gets its shard's sum), the norm that clipping reads is combined from the
// shards', each rank updates its shard, and the updated weights forward reads (the working copy,
// or the fp32 parameters) are all-gathered.
// The gradients are summed in buckets (gradient_buckets), which may start while backward still
// runs (GradientReduction). In a job of one, every call is free.
#pragma once

#include <cstddef>
#include <vector>

#include "src/engine/gpt_model.h"

namespace adacc {

// `count` gradients from parameter `begin`, summed into every rank (root < 0) or, under ZeRO-1,
// into rank `root`, whose optimizer shard holds them.
struct GradientPiece {
    std::size_t begin = 0, count = 0;
    int root = -1;
};
// The gradients that backward finishes together, one bucket each, in the order it finishes them:
// bucket i < L holds block L - 1 - i's slices of the twelve per-layer tensors (the parameters are
// laid out tensor-major, so a block's gradients are twelve strided runs), bucket 0 also the final
// layernorm's (finished before the last block), and bucket L the embeddings' (wte, tied with the
// classifier, and wpe are final only after the encoder's backward). Pieces run in parameter
// order; runs that touch are merged, and with `sharded` (ZeRO-1 over `world_size` ranks) split
// where the optimizer shards split them.
std::vector<std::vector<GradientPiece>> gradient_buckets(const ParameterLayout& layout, int world_size, bool sharded);

// A step's gradient sums over the ranks, bucket by bucket. With `overlap` (training.overlap_grads)
// each block's bucket starts as soon as the step's last backward has finished the block, and sums
// while backward goes on below it; without, every bucket starts after the whole backward. Both
// start the same collectives in the same order, so their sums are the same bits at any world
// size (a bucket's sum does not depend on when it starts); only the waiting differs.
class GradientReduction {
public:
    // `model` must outlive it.
    GradientReduction(GPTModel& model, bool overlap);
    ~GradientReduction();  // a backward left by an exception keeps no hook into this object
    GradientReduction(const GradientReduction&) = delete;
    GradientReduction& operator=(const GradientReduction&) = delete;
    // Before the step's last backward (its gradients are final after it): with overlap, its blocks
    // start their buckets as they finish.
    void before_last_backward();
    // After it: starts the buckets not yet started and waits for all; every rank then holds the
    // ranks' sum of the gradients (under ZeRO-1, of its shard's).
    void finish();

private:
    void start_through(std::size_t bucket);  // starts every bucket up to `bucket`

    GPTModel& model_;
    bool overlap_;
    std::vector<std::vector<SumPiece>> buckets_;  // in the gradient arena; empty in a job of one
    std::size_t started_ = 0;                     // buckets started this step
};

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
