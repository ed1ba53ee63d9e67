// Ranks that agree (docs/distributed.md, 'Ranks that agree'): the processes of one data-parallel
// job must train the same model from the same weights on the same data with the same schedule.
// Nothing made them: a `--set` that differed per rank hung the job in a collective (the steps),
// aborted it inside MPI with no word of ours (a shape), or trained replicas that silently differ
// (the learning rate, the seed, the weights file). So before the first step every rank compares
// what it was given with rank 0's, and a rank that differs ends the job naming what differs.
#pragma once

#include <filesystem>
#include <optional>

#include "src/config/run_config.h"
#include "src/train/weights_file.h"

namespace adacc {

// Rank 0 broadcasts what it was given (every resolved config key, a digest of the weights it
// starts from, the number and sizes of its data files) and each rank compares its own; a rank that
// differs throws a UserError naming the first differences and both values (main() then ends every
// rank of the job with it, exit 2). Free in a group of one: nothing is listed or hashed.
void require_ranks_agree(const RunConfig& config, const std::optional<std::filesystem::path>& resume_checkpoint,
                         const std::optional<WeightsFile>& init_from);

}  // namespace adacc
