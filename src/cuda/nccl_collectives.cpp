// The CUDA backend's collectives over the job's ranks with NCCL: the gradients' sums (all-reduces,
// or under ZeRO-1 reduces into the rank whose shard holds them) on the backend's communication
// stream, and ZeRO-1's all-gather of the updated weights on its compute stream.
// libnccl is opened at run time (dlopen): it is large and not every GPU machine has it, so a
// machine without it still runs everything, and the process group then sums through host memory
// (src/dist/process_group.cpp). The communicator is made at training's start (nccl_start), or else
// on first use: rank 0's unique id goes to every rank through MPI (broadcast_bytes), then
// ncclCommInitRank, with every connection made then, so its buffers can be measured (NCCL 2.22 and
// later connect lazily, at the first collective that needs a connection, unless
// NCCL_RUNTIME_CONNECT=0; a value the environment sets is kept). Every collective is handed to
// a watchdog (src/dist/collective_watchdog.h) with an event recorded after it: one that does not
// finish within training.collective_timeout_s aborts the communicator and ends the job.
#include "src/cuda/nccl_collectives.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "src/dist/collective_watchdog.h"
#include "src/dist/process_group.h"
#include "src/engine/model_layout.h"

namespace adacc {

namespace {

struct NcclLibrary {
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) comm_init_rank = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclReduce) reduce = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    decltype(&ncclCommAbort) comm_abort = nullptr;
};

// Null when libnccl.so.2 cannot be opened or lacks a symbol.
const NcclLibrary* nccl_library() {
    static const NcclLibrary* library = []() -> const NcclLibrary* {
        void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!handle) return nullptr;
        static NcclLibrary l;
        l.get_unique_id = reinterpret_cast<decltype(l.get_unique_id)>(dlsym(handle, "ncclGetUniqueId"));
        l.comm_init_rank = reinterpret_cast<decltype(l.comm_init_rank)>(dlsym(handle, "ncclCommInitRank"));
        l.all_reduce = reinterpret_cast<decltype(l.all_reduce)>(dlsym(handle, "ncclAllReduce"));
        l.reduce = reinterpret_cast<decltype(l.reduce)>(dlsym(handle, "ncclReduce"));
        l.group_start = reinterpret_cast<decltype(l.group_start)>(dlsym(handle, "ncclGroupStart"));
        l.group_end = reinterpret_cast<decltype(l.group_end)>(dlsym(handle, "ncclGroupEnd"));
        l.all_gather = reinterpret_cast<decltype(l.all_gather)>(dlsym(handle, "ncclAllGather"));
        l.error_string = reinterpret_cast<decltype(l.error_string)>(dlsym(handle, "ncclGetErrorString"));
        l.comm_abort = reinterpret_cast<decltype(l.comm_abort)>(dlsym(handle, "ncclCommAbort"));
        const bool complete = l.get_unique_id && l.comm_init_rank && l.all_reduce && l.reduce && l.group_start &&
                              l.group_end && l.all_gather && l.error_string && l.comm_abort;
        return complete ? &l : nullptr;
    }();
    return library;
}

void check(const NcclLibrary& nccl, ncclResult_t status, const char* what) {
    if (status != ncclSuccess)
        throw std::runtime_error(std::string(what) + ": NCCL error: " + nccl.error_string(status));
}

// The job's communicator (one per process: one GPU per rank), made on first use.
ncclComm_t job_communicator(const NcclLibrary& nccl) {
    static ncclComm_t comm = [&] {
        setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);  // before NCCL reads its settings
        const ProcessGroup& group = process_group();
        ncclUniqueId id{};
        if (group.is_root()) check(nccl, nccl.get_unique_id(&id), "ncclGetUniqueId");
        broadcast_bytes(&id, sizeof id, 0);
        ncclComm_t made = nullptr;
        check(nccl, nccl.comm_init_rank(&made, group.world_size, id, group.rank), "ncclCommInitRank");
        return made;
    }();
    return comm;
}

// A collective is done when the event recorded after it on its stream has completed. The
// watchdog's thread polls it on the rank's GPU (the current device is a thread's own).
class QueuedOnStream : public PendingCollective {
public:
    explicit QueuedOnStream(cudaStream_t stream) {
        if (cudaGetDevice(&device_) != cudaSuccess ||
            cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventRecord(done_, stream) != cudaSuccess)
            throw std::runtime_error("cannot record a CUDA event after a NCCL collective");
    }
    ~QueuedOnStream() override { cudaEventDestroy(done_); }
    bool finished() override {
        cudaSetDevice(device_);
        return cudaEventQuery(done_) != cudaErrorNotReady;
    }

private:
    int device_ = 0;
    cudaEvent_t done_ = nullptr;
};

// Hands the collective just queued on `stream` to the job's watchdog, made with the first.
void watch(const NcclLibrary& nccl, cudaStream_t stream, const std::string& what) {
    static CollectiveWatchdog watchdog(
        collective_timeout(),
        {.abort_collectives = [&nccl] { nccl.comm_abort(job_communicator(nccl)); },
         .end_job = [](const std::string& message) { abort_process_group_now("error: " + message, 2); }});
    watchdog.watch(what, std::make_unique<QueuedOnStream>(stream));
}

std::string named(const char* collective, std::size_t count) {
    return std::string("the NCCL ") + collective + " of " + std::to_string(count) + " elements";
}

}  // namespace

bool nccl_available() { return nccl_library() != nullptr; }

void nccl_start() {
    if (const NcclLibrary* nccl = nccl_library()) job_communicator(*nccl);
}

bool nccl_sums(std::span<const SumPiece> pieces, cudaStream_t stream) {
    const NcclLibrary* nccl = nccl_library();
    if (!nccl) return false;
    const ncclComm_t comm = job_communicator(*nccl);
    std::size_t total = 0;
    check(*nccl, nccl->group_start(), "ncclGroupStart");
    for (const SumPiece& p : pieces) {
        total += p.count;
        if (p.root < 0)
            check(*nccl, nccl->all_reduce(p.data, p.data, p.count, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
        else
            check(*nccl, nccl->reduce(p.data, p.data, p.count, ncclFloat, ncclSum, p.root, comm, stream), "ncclReduce");
    }
    check(*nccl, nccl->group_end(), "ncclGroupEnd");
    watch(
        *nccl, stream,
        "the NCCL sums of " + std::to_string(pieces.size()) + " gradient runs (" + std::to_string(total) + " floats)");
    return true;
}

// In place, NCCL's way: rank r's shard of the buffer is its send buffer, at r * shard elements.
bool nccl_all_gather(Act data, std::size_t count, cudaStream_t stream) {
    const NcclLibrary* nccl = nccl_library();
    if (!nccl) return false;
    const ProcessGroup& group = process_group();
    const std::size_t shard = sharded_span(count, group.world_size) / static_cast<std::size_t>(group.world_size);
    const std::size_t element = dtype_size(data.dtype());
    auto* base = static_cast<unsigned char*>(data.data());
    const void* mine = base + shard * static_cast<std::size_t>(group.rank) * element;
    const ncclDataType_t type = data.dtype() == DType::bf16 ? ncclBfloat16 : ncclFloat;
    check(*nccl, nccl->all_gather(mine, base, shard, type, job_communicator(*nccl), stream), "ncclAllGather");
    watch(*nccl, stream, named("all-gather", count));
    return true;
}

}  // namespace adacc
