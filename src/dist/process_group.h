// Data parallelism across processes (docs/distributed.md): the job's processes, started by the
// cluster's launcher (`mpirun -np N adacc train ...`, or `srun` under Slurm), each train the same
// model on their own share of the data and average their gradients after backward. MPI starts
// them and sums on the CPU; a process not started by a launcher (or a build without MPI) is a
// group of one, and every call here is then free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/activation.h"

namespace adacc {

// The engine's (src/engine/backend.h), above this header: only declared here.
class Backend;
struct SumPiece;

struct ProcessGroup {
    int rank = 0;  // this process, 0 .. world_size - 1
    int world_size = 1;
    int local_rank = 0;  // among the processes on this machine (which GPU it takes)
    bool is_root() const { return rank == 0; }
};

// Joins the job: MPI_Init when a launcher started this process (its environment names the job:
// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK) and the build has MPI; else a group of one. Once,
// first thing in main. Ranks other than 0 then write nothing on stdout (only rank 0 logs); their
// errors still reach stderr.
void join_process_group(int* argc, char*** argv);
// Leaves it (MPI_Finalize) at a normal exit.
void leave_process_group();
const ProcessGroup& process_group();

// Makes the backend's communicator over the job's ranks (NCCL's on a GPU) at start-up, so its
// buffers are measured and counted before any memory check (src/engine/device.h:
// cuda_collectives_overhead) instead of appearing with the first gradient sum. A collective: every
// rank calls it at the same point, once (Trainer's start, after the ranks agreed). Free at world size 1.
void start_collectives(Backend& backend);
// Starts the in-place sums of `pieces` (in `backend`'s memory; SumPiece: into every rank, or into
// one) over the ranks without waiting for them: with the backend's own collectives where it has
// them (NCCL on a second stream, after what is queued so far), else MPI's non-blocking ones
// through host memory. Every rank starts the same pieces in the same order, and a piece's sum is
// the same bits whenever it is started (the same collective of the same size).
void start_sums(Backend& backend, std::span<const SumPiece> pieces);
// Lets the started MPI sums move on: without a progress thread MPI moves a non-blocking collective
// only inside its own calls, so a rank calls this between pieces of work. Free where none is pending.
void progress_sums();
// Waits until every started sum is in place (on a device: what is queued from now on waits for them).
void finish_sums(Backend& backend);
// Host values, in place.
void all_reduce_sum(double* values, std::size_t count);
int all_reduce_max(int value);
std::uint64_t all_reduce_max(std::uint64_t value);
// `bytes` of host memory at `data` from rank `root` to every rank.
void broadcast_bytes(void* data, std::size_t bytes, int root);
// Rank `root`'s `text` to every rank (its length first: the other ranks cannot know it).
void broadcast_text(std::string& text, int root);

// ZeRO-1's all-gather over `count` elements split into world_size shards as it splits the
// parameters (src/engine/model_layout.h: optimizer_shard): every rank's shard (fp32 or bf16) to
// every rank. In `backend`'s memory, in place, with the backend's own collectives where it has
// them (NCCL), else through host memory (MPI); `data` holds sharded_span(count, world_size)
// elements (the padding lets NCCL take equal shards).
void all_gather(Backend& backend, Act data, std::size_t count);
// Host memory: rank 0's `full` (count floats) receives every rank's `shard` (its shard's floats).
void gather_to_root(const float* shard, float* full, std::size_t count);

// Ends every process of the job with `status`: `message` goes to stderr first, prefixed with this
// rank when there are several (MPI_Abort; the launcher ends the others within seconds). In a group
// of one it is std::exit.
[[noreturn]] void abort_process_group(const std::string& message, int status);
// The same from any thread, without running exit handlers (std::_Exit): for a watchdog whose main
// thread is stuck in a collective, where destructors would wait for it.
[[noreturn]] void abort_process_group_now(const std::string& message, int status);

// How long one device collective may stay pending before its watchdog ends the job
// (training.collective_timeout_s, src/dist/collective_watchdog.h); set before the first step.
inline constexpr double kDefaultCollectiveTimeoutS = 600;
void set_collective_timeout(double seconds);
double collective_timeout();

}  // namespace adacc
