// The config's token shards as a DataLoader. Training, `adacc compare` and `adacc plan` open
// data.train and data.val only through here, so they read the same batches the same way.
#pragma once

#include <vector>

#include "data/dataloader.h"
#include "src/config/run_config.h"

namespace adacc {

enum class TokenSplit { train, val };  // data.train, data.val

// A loader of the split's shards at training.batch_size x training.seq_len, every id checked
// against model.vocab_size, the windows in a permutation seeded by training.seed when `shuffle`.
// UserError when the key is not set (naming it and how to make shards) or a shard is unusable.
DataLoader open_token_loader(const RunConfig& config, TokenSplit split, bool shuffle);

// The first batch of data.train in order (B*T input ids): the tokens planned modes profile with.
std::vector<int> first_training_batch(const RunConfig& config);

// The batch `adacc plan` and `adacc memory` profile with: first_training_batch when data.train
// is readable, else random_tokens (saying so on stderr, with the reason), so a plan needs no data.
std::vector<int> profiling_tokens(const RunConfig& config);
// training.batch_size x seq_len tokens drawn from training.seed.
std::vector<int> random_tokens(const RunConfig& config);

}  // namespace adacc
