// Ranks that agree (docs/distributed.md, 'Ranks that agree'): the processes of one data-parallel
// job must train the same model from the same weights on the same data with the same schedule.
// Nothing made them: a `--set` that differed per rank hung the job in a collective (the steps),
// aborted it inside MPI with no word of ours (a shape), or trained replicas that silently differ
// (the learning rate, the seed, the weights file). So before the first step every rank compares
// what it was given with rank 0's, and a rank that differs ends the job naming what differs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/config/run_config.h"
#include "src/io/weights_file.h"

namespace adacc {

// What must be equal on every rank, as named text: every resolved config key, a digest of the
// weights the run starts from, and the number and sizes of its data files.
using RunFacts = std::vector<std::pair<std::string, std::string>>;

RunFacts run_facts(const RunConfig& config, const std::optional<std::filesystem::path>& resume_checkpoint,
                   const std::optional<WeightsFile>& init_from);

// The facts of `mine` that differ from `root`'s (rank 0's), one "\n  name: X on rank 0, Y on rank
// R" line each, the first `limit` of them; empty when they agree.
std::string describe_differences(const RunFacts& root, const RunFacts& mine, int rank, std::size_t limit = 6);

// Rank 0 broadcasts its facts and each rank compares its own; a rank that differs throws a
// UserError naming the differences (main() then ends every rank of the job with it, exit 2).
// Free in a group of one.
void require_ranks_agree(const RunFacts& mine);

}  // namespace adacc
