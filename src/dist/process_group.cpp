#include "src/dist/process_group.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#ifdef ADACC_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings (deprecated, and noisy to compile)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include "src/engine/backend.h"
#include "src/engine/model_layout.h"

namespace adacc {

namespace {

ProcessGroup group;
#ifdef ADACC_HAVE_MPI
bool mpi_started = false;
#endif

// What the launchers set: OpenMPI's mpirun, PMI (MPICH's, Slurm's srun), PMIx (srun, prrte).
bool started_by_a_launcher() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(name)) return true;
    return false;
}

#ifndef ADACC_HAVE_MPI
// The job's size as the launcher states it (1 when it does not say).
int launched_world_size() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
        if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
    return 1;
}
#else
// MPI counts are ints: larger buffers go in chunks of 2^30 elements.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

// Every rank's shard of `count` floats: element counts and offsets, as MPI's v-collectives take them.
struct ShardCounts {
    std::vector<int> counts, offsets;
};
ShardCounts shard_counts(std::size_t count) {
    ShardCounts out;
    for (int r = 0; r < group.world_size; ++r) {
        const OptimizerShard s = optimizer_shard(count, group.world_size, r);
        if (s.begin + s.count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
            abort_process_group("error: ZeRO-1 shards past 2^31 floats are not supported: use more ranks", 2);
        out.counts.push_back(static_cast<int>(s.count));
        out.offsets.push_back(static_cast<int>(s.begin));
    }
    return out;
}

// fp32 or bf16 (moved as its 16 bits) elements.
void all_gather_host(void* data, MPI_Datatype type, std::size_t count) {
    const ShardCounts s = shard_counts(count);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, s.counts.data(), s.offsets.data(), type, MPI_COMM_WORLD);
}

// The MPI sums start_sums started and finish_sums waits for: one request per chunk, and where the
// backend's memory is not the host's, the device elements its host copy goes back to (only where
// the sum lands on this rank).
struct StartedSums {
    std::vector<MPI_Request> requests;
    struct CopyBack {
        float* device;
        const float* host;
        std::size_t count;
    };
    std::vector<CopyBack> copies;
    // Host copies of the pieces, one per piece started since the last finish, kept for the next step.
    std::vector<std::vector<float>> staging;
    std::size_t staged = 0;
};
StartedSums started;

// The piece's elements as MPI reads them: in place on the host, else a host copy.
float* host_elements(Backend& backend, const SumPiece& piece) {
    if (backend.host_addressable()) return piece.data;
    if (started.staged == started.staging.size()) started.staging.emplace_back();
    std::vector<float>& copy = started.staging[started.staged++];
    copy.resize(piece.count);
    backend.copy_to_host(copy.data(), piece.data, piece.count * sizeof(float));  // waits for the kernels writing it
    if (piece.root < 0 || piece.root == group.rank) started.copies.push_back({piece.data, copy.data(), piece.count});
    return copy.data();
}

void start_mpi_sum(float* host, std::size_t count, int root) {
    for (std::size_t at = 0; at < count; at += kMaxChunk) {
        const int n = static_cast<int>(std::min(kMaxChunk, count - at));
        MPI_Request& request = started.requests.emplace_back();
        if (root < 0)
            MPI_Iallreduce(MPI_IN_PLACE, host + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
        else if (root == group.rank)
            MPI_Ireduce(MPI_IN_PLACE, host + at, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &request);
        else
            MPI_Ireduce(host + at, nullptr, n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &request);
    }
}

// `operation` on a host copy of the `count` elements at `data` when the backend's memory is not
// the host's (one staging buffer for all of them, kept for the next step).
std::vector<unsigned char> host_staging;
template <typename Element, typename Operation>
void on_host(Backend& backend, Element* data, std::size_t count, Operation operation) {
    backend.synchronize();  // the kernels that wrote `data` are done
    if (backend.host_addressable()) return operation(data);
    const std::size_t bytes = count * sizeof(Element);
    host_staging.resize(bytes);
    backend.copy_to_host(host_staging.data(), data, bytes);
    operation(reinterpret_cast<Element*>(host_staging.data()));
    backend.copy_to_device(data, host_staging.data(), bytes);
}
#endif

}  // namespace

void join_process_group(int* argc, char*** argv) {
    if (!started_by_a_launcher()) return;
#ifdef ADACC_HAVE_MPI
    MPI_Init(argc, argv);  // MPI's default error handler ends the whole job with its message
    mpi_started = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &group.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &group.world_size);
    MPI_Comm machine;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, group.rank, MPI_INFO_NULL, &machine);
    MPI_Comm_rank(machine, &group.local_rank);
    MPI_Comm_free(&machine);
    if (!group.is_root() && !std::freopen("/dev/null", "w", stdout))
        abort_process_group("cannot silence stdout on this rank (/dev/null)", 3);
#else
    (void)argc, (void)argv;
    // Several copies that cannot talk would each train alone and write over each other's run.
    if (const int size = launched_world_size(); size > 1) {
        std::fprintf(stderr,
                     "error: started by an MPI launcher as one of %d processes, but this adacc was built without "
                     "MPI: install it (scripts/install_deps.sh: libopenmpi-dev) and rebuild, or run one process\n",
                     size);
        std::exit(2);
    }
#endif
}

void leave_process_group() {
#ifdef ADACC_HAVE_MPI
    if (mpi_started) MPI_Finalize();
    mpi_started = false;
#endif
}

const ProcessGroup& process_group() { return group; }

void start_collectives(Backend& backend) {
    if (group.world_size > 1) backend.start_collectives();
}

void start_sums(Backend& backend, std::span<const SumPiece> pieces) {
    if (group.world_size == 1 || pieces.empty()) return;
#ifdef ADACC_HAVE_MPI
    if (backend.start_sums(pieces)) return;
    backend.synchronize();  // the kernels that wrote the pieces are done
    for (const SumPiece& piece : pieces)
        if (piece.count > 0) start_mpi_sum(host_elements(backend, piece), piece.count, piece.root);
#endif
}

void progress_sums() {
#ifdef ADACC_HAVE_MPI
    if (started.requests.empty()) return;
    int all_done = 0;  // when they are, finish_sums finds them so
    MPI_Testall(static_cast<int>(started.requests.size()), started.requests.data(), &all_done, MPI_STATUSES_IGNORE);
#endif
}

void finish_sums(Backend& backend) {
    if (group.world_size == 1) return;
#ifdef ADACC_HAVE_MPI
    backend.finish_sums();
    MPI_Waitall(static_cast<int>(started.requests.size()), started.requests.data(), MPI_STATUSES_IGNORE);
    for (const StartedSums::CopyBack& c : started.copies)
        backend.copy_to_device(c.device, c.host, c.count * sizeof(float));
    started.requests.clear();
    started.copies.clear();
    started.staged = 0;
#endif
}

void all_gather(Backend& backend, Act data, std::size_t count) {
    if (group.world_size == 1 || count == 0) return;
#ifdef ADACC_HAVE_MPI
    if (backend.all_gather(data, count)) return;
    if (data.dtype() == DType::bf16)
        return on_host(backend, data.as<bf16>(), count,
                       [&](bf16* host) { all_gather_host(host, MPI_UINT16_T, count); });
    on_host(backend, data.as<float>(), count, [&](float* host) { all_gather_host(host, MPI_FLOAT, count); });
#endif
}

void gather_to_root(const float* shard, float* full, std::size_t count) {
    if (group.world_size == 1) {
        std::copy(shard, shard + count, full);
        return;
    }
#ifdef ADACC_HAVE_MPI
    const ShardCounts s = shard_counts(count);
    MPI_Gatherv(shard, s.counts[group.rank], MPI_FLOAT, full, s.counts.data(), s.offsets.data(), MPI_FLOAT, 0,
                MPI_COMM_WORLD);
#endif
}

void all_reduce_sum(double* values, std::size_t count) {
    if (group.world_size == 1 || count == 0) return;
#ifdef ADACC_HAVE_MPI
    MPI_Allreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
}

int all_reduce_max(int value) {
#ifdef ADACC_HAVE_MPI
    if (group.world_size > 1) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
#endif
    return value;
}

std::uint64_t all_reduce_max(std::uint64_t value) {
#ifdef ADACC_HAVE_MPI
    if (group.world_size > 1) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
#endif
    return value;
}

void broadcast_bytes(void* data, std::size_t bytes, int root) {
#ifdef ADACC_HAVE_MPI
    if (group.world_size > 1) MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
#endif
}

void broadcast_text(std::string& text, int root) {
    std::uint64_t length = text.size();
    broadcast_bytes(&length, sizeof length, root);
    text.resize(length);
    broadcast_bytes(text.data(), text.size(), root);
}

namespace {

// The message, prefixed with this rank when there are several, then MPI_Abort, which ends the
// other ranks (it returns only in a group of one).
void report_and_abort_ranks(const std::string& message, int status) {
    std::fflush(stdout);
    if (group.world_size > 1)
        std::fprintf(stderr, "rank %d of %d: %s\n", group.rank, group.world_size, message.c_str());
    else
        std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
#ifdef ADACC_HAVE_MPI
    if (mpi_started && group.world_size > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
}

double collective_timeout_s = kDefaultCollectiveTimeoutS;

}  // namespace

void abort_process_group(const std::string& message, int status) {
    report_and_abort_ranks(message, status);
    std::exit(status);
}

void abort_process_group_now(const std::string& message, int status) {
    report_and_abort_ranks(message, status);
    std::_Exit(status);
}

void set_collective_timeout(double seconds) { collective_timeout_s = seconds; }
double collective_timeout() { return collective_timeout_s; }

}  // namespace adacc
