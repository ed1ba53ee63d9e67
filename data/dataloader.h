// DataLoader: (inputs, targets) batches of B x T token ids from llm.c token shards.
//
// Semantics (llm.c's, made exact and resumable):
//   * Each shard is cut into windows of T+1 tokens that start every T tokens: window w covers
//     tokens [w*T, w*T + T] of its shard; inputs are its first T tokens, targets its last T.
//     A shard of n tokens yields (n-1)/T windows (the tail is unused); windows never cross shards.
//     Read in order, the B windows of a batch are one contiguous run of B*T+1 tokens, which is
//     exactly llm.c's batch layout.
//   * An epoch visits the windows of all shards in an order: shard by shard, front to back
//     (sequential), or a seeded permutation of all windows that changes every epoch (shuffled;
//     it depends only on seed and epoch, so every rank computes the same one). A batch is B
//     consecutive windows of that order.
//   * Data parallel: rank r of W takes batches r, r+W, r+2W, ... of the epoch, so ranks see
//     disjoint windows and together cover the epoch. Every rank gets the same number of batches,
//     floor(windows / (B*W)); the windows left over at the end of an epoch's order are skipped
//     in that epoch (shuffling makes it a different set each time). Then the next epoch begins.
//   * The position is two integers (DataLoaderState). restore() with the same shards and
//     options continues with exactly the batches the saved loader would have produced.
// Shards are not memory-mapped but read with pread, one window at a time, into the loader's own
// buffer (TokenShardFile): a shard truncated or rewritten while a run reads it is a UserError naming
// it, not a SIGBUS or silently different data, and every window's ids are checked against
// vocab_size again. next_batch() copies into caller-owned buffers and never allocates.
// Shuffled mode keeps the epoch's order in memory: 8 bytes per window (0.4% of the data at T=1024).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "data/token_shard.h"

namespace adacc {

struct DataLoaderOptions {
    int batch_size = 1;             // B, windows per batch
    int seq_len = 1;                // T, tokens per window (each window reads T+1)
    int rank = 0;                   // this process's rank in data parallelism
    int world_size = 1;             // number of ranks
    bool shuffle = false;           // seeded permutation of windows, new every epoch
    std::uint64_t seed = 0;         // shuffle seed
    std::uint32_t vocab_size = 0;   // every token id must be below it (checked at open and per window)
};

// Plain integers, so a checkpoint can store them.
struct DataLoaderState {
    std::uint64_t epoch = 0;  // complete passes over the data so far
    std::uint64_t batch = 0;  // batches this rank has taken in the current epoch
    bool operator==(const DataLoaderState&) const = default;
};

class DataLoader {
public:
    // Opens and validates every shard; UserError for unreadable shards, ids >= vocab_size, or
    // too little data for one batch on every rank.
    DataLoader(const std::vector<std::filesystem::path>& shards, const DataLoaderOptions& options);

    // Fills B*T inputs and the B*T targets (inputs shifted by one), row-major [B][T]. UserError
    // when a shard changed since it was opened or a window holds an id >= vocab_size.
    void next_batch(std::span<std::int32_t> inputs, std::span<std::int32_t> targets);

    DataLoaderState state() const { return state_; }
    // UserError if the state cannot come from this data with these options (batch past the epoch).
    void restore(const DataLoaderState& state);

    std::uint64_t batches_per_epoch() const { return batches_per_epoch_; }

private:
    std::uint64_t window_at(std::uint64_t order_position) const;
    void copy_window(std::uint64_t window, std::int32_t* inputs, std::int32_t* targets);
    void begin_epoch(std::uint64_t epoch);

    DataLoaderOptions options_;
    std::vector<TokenShardFile> shards_;
    std::vector<std::uint16_t> window_;        // T+1 tokens: the window being read
    std::vector<std::uint64_t> first_window_;  // per shard, its first global window; one extra: the total
    std::uint64_t batches_per_epoch_ = 0;
    std::vector<std::uint64_t> shuffled_order_;  // this epoch's window order (shuffled mode only)
    DataLoaderState state_;
};

}  // namespace adacc
