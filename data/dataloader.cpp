#include "data/dataloader.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "src/common/errors.h"

namespace adacc {
namespace {

// SplitMix64: a tiny generator with a fixed definition, so a seed gives the same shuffle on
// every platform and standard library (std::shuffle's distribution is not specified).
class SplitMix64 {
public:
    explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, bound) without modulo bias.
    std::uint64_t below(std::uint64_t bound) {
        const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
        for (;;)
            if (const std::uint64_t value = next(); value >= threshold) return value % bound;
    }

private:
    std::uint64_t state_;
};

void check_options(const DataLoaderOptions& options) {
    if (options.batch_size <= 0 || options.seq_len <= 0)
        throw std::invalid_argument("DataLoader needs batch_size > 0 and seq_len > 0");
    if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size)
        throw std::invalid_argument("DataLoader needs 0 <= rank < world_size");
}

// Reads the whole shard to check its ids, in pieces so that memory stays small for large shards.
void validate_shard(const TokenShardFile& shard, std::uint32_t vocab_size) {
    std::vector<std::uint16_t> piece(std::min<std::size_t>(shard.tokens(), std::size_t{1} << 20));
    for (std::size_t first = 0; first < shard.tokens(); first += piece.size()) {
        const auto tokens = std::span(piece).first(std::min(piece.size(), shard.tokens() - first));
        shard.read(first, tokens);
        validate_tokens(tokens, vocab_size, shard.path(), first);
    }
}

}  // namespace

DataLoader::DataLoader(const std::vector<std::filesystem::path>& shards, const DataLoaderOptions& options)
    : options_(options) {
    check_options(options);
    const auto seq_len = static_cast<std::uint64_t>(options.seq_len);
    shards_.reserve(shards.size());
    first_window_.push_back(0);
    for (const auto& path : shards) {
        const TokenShardFile& shard = shards_.emplace_back(path);
        validate_shard(shard, options.vocab_size);
        const std::uint64_t windows = shard.tokens() == 0 ? 0 : (shard.tokens() - 1) / seq_len;
        first_window_.push_back(first_window_.back() + windows);
    }
    window_.resize(seq_len + 1);
    const std::uint64_t windows = first_window_.back();
    const std::uint64_t windows_per_step = static_cast<std::uint64_t>(options.batch_size) * options.world_size;
    batches_per_epoch_ = windows / windows_per_step;
    if (batches_per_epoch_ == 0)
        throw UserError("the token shards hold " + std::to_string(windows) + " sequences of " +
                        std::to_string(seq_len) + "+1 tokens, fewer than one batch on every rank needs (" +
                        std::to_string(options.batch_size) + " x " + std::to_string(options.world_size) +
                        " ranks): use more data, or a smaller batch_size or seq_len");
    begin_epoch(0);
}

void DataLoader::next_batch(std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
    const auto batch_tokens = static_cast<std::size_t>(options_.batch_size) * options_.seq_len;
    if (inputs.size() != batch_tokens || targets.size() != batch_tokens)
        throw std::invalid_argument("DataLoader::next_batch needs buffers of batch_size * seq_len tokens");
    const std::uint64_t global_batch = state_.batch * options_.world_size + options_.rank;
    for (int row = 0; row < options_.batch_size; ++row) {
        const std::uint64_t window = window_at(global_batch * options_.batch_size + row);
        const std::size_t offset = static_cast<std::size_t>(row) * options_.seq_len;
        copy_window(window, inputs.data() + offset, targets.data() + offset);
    }
    if (++state_.batch == batches_per_epoch_) begin_epoch(state_.epoch + 1);
}

void DataLoader::restore(const DataLoaderState& state) {
    if (state.batch >= batches_per_epoch_)
        throw UserError("the saved data position (epoch " + std::to_string(state.epoch) + ", batch " +
                        std::to_string(state.batch) + ") is past the end of an epoch of this data, which has " +
                        std::to_string(batches_per_epoch_) + " batches per rank: the shards, batch size, " +
                        "sequence length or number of ranks changed since the checkpoint");
    begin_epoch(state.epoch);
    state_.batch = state.batch;
}

std::uint64_t DataLoader::window_at(std::uint64_t order_position) const {
    return options_.shuffle ? shuffled_order_[order_position] : order_position;
}

void DataLoader::copy_window(std::uint64_t window, std::int32_t* inputs, std::int32_t* targets) {
    // The shard holding the window: the last one whose first window is <= it.
    const auto next_shard = std::upper_bound(first_window_.begin(), first_window_.end(), window);
    const auto shard = static_cast<std::size_t>(next_shard - first_window_.begin() - 1);
    const std::size_t first = (window - first_window_[shard]) * static_cast<std::size_t>(options_.seq_len);
    shards_[shard].read(first, window_);
    // Checked at open too, but a change that the shard's size and time do not show must not reach
    // the embedding as an out-of-range row.
    validate_tokens(window_, options_.vocab_size, shards_[shard].path(), first);
    std::copy(window_.begin(), window_.end() - 1, inputs);
    std::copy(window_.begin() + 1, window_.end(), targets);
}

void DataLoader::begin_epoch(std::uint64_t epoch) {
    state_ = {epoch, 0};
    if (!options_.shuffle) return;
    // Fisher-Yates from the identity, seeded by (seed, epoch): the same order on every rank.
    shuffled_order_.resize(first_window_.back());
    std::iota(shuffled_order_.begin(), shuffled_order_.end(), std::uint64_t{0});
    SplitMix64 random(SplitMix64(options_.seed).next() ^ epoch);
    for (std::uint64_t i = shuffled_order_.size() - 1; i > 0; --i)
        std::swap(shuffled_order_[i], shuffled_order_[random.below(i + 1)]);
}

}  // namespace adacc
