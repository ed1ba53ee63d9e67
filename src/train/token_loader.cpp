#include "src/train/token_loader.h"

#include <cstdio>
#include <random>
#include <string>

#include "data/token_shard.h"
#include "src/common/errors.h"
#include "src/dist/process_group.h"

namespace adacc {

DataLoader open_token_loader(const RunConfig& config, TokenSplit split, bool shuffle) {
    const bool train = split == TokenSplit::train;
    const std::string& pattern = train ? config.data.train : config.data.val;
    const std::string key = train ? "data.train" : "data.val";
    if (pattern.empty())
        throw SettingError(key, key + " is not set: point it at token shards (file or glob), e.g. data/corpus/" +
                                    (train ? "train" : "val") + "_*.bin; make shards with `adacc prepare`");
    DataLoaderOptions options;
    options.batch_size = config.training.batch_size;
    options.seq_len = config.training.seq_len;
    options.shuffle = shuffle;
    options.rank = process_group().rank;  // every rank its own batches (DataLoader: batches r, r + W, ...)
    options.world_size = process_group().world_size;
    options.seed = config.training.seed;
    options.vocab_size = static_cast<std::uint32_t>(config.model.vocab_size);
    return DataLoader(expand_shard_pattern(pattern), options);
}

std::vector<int> first_training_batch(const RunConfig& config) {
    DataLoader data = open_token_loader(config, TokenSplit::train, /*shuffle=*/false);
    std::vector<std::int32_t> inputs(static_cast<std::size_t>(config.training.batch_size) * config.training.seq_len),
        targets(inputs.size());
    data.next_batch(inputs, targets);
    return inputs;
}

std::vector<int> profiling_tokens(const RunConfig& config) {
    if (!config.data.train.empty()) {
        try {
            return first_training_batch(config);
        } catch (const UserError& e) {
            std::fprintf(stderr, "profiling on random tokens (%s)\n", e.what());
        }
    }
    return random_tokens(config);
}

std::vector<int> random_tokens(const RunConfig& config) {
    std::vector<int> tokens(static_cast<std::size_t>(config.training.batch_size) * config.training.seq_len);
    std::mt19937 gen(static_cast<std::uint32_t>(config.training.seed));
    for (auto& t : tokens) t = static_cast<int>(gen() % config.model.vocab_size);
    return tokens;
}

}  // namespace adacc
