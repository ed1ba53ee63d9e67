// The CUDA backend's gradient all-reduce over the job's ranks with NCCL, on the backend's stream.
// libnccl is opened at run time (dlopen): it is large and not every GPU machine has it, so a
// machine without it still runs everything, and the process group then sums through host memory
// (src/dist/process_group.cpp). The communicator is made on first use: rank 0's unique id goes to
// every rank through MPI (broadcast_bytes), then ncclCommInitRank.
#include "src/cuda/nccl_all_reduce.h"

#include <dlfcn.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

#include "src/dist/process_group.h"

namespace adacc {

namespace {

struct NcclLibrary {
    decltype(&ncclGetUniqueId) get_unique_id = nullptr;
    decltype(&ncclCommInitRank) comm_init_rank = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
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
        l.error_string = reinterpret_cast<decltype(l.error_string)>(dlsym(handle, "ncclGetErrorString"));
        const bool complete = l.get_unique_id && l.comm_init_rank && l.all_reduce && l.error_string;
        return complete ? &l : nullptr;
    }();
    return library;
}

void check(const NcclLibrary& nccl, ncclResult_t status, const char* what) {
    if (status != ncclSuccess) throw std::runtime_error(std::string(what) + ": NCCL error: " + nccl.error_string(status));
}

// The job's communicator (one per process: one GPU per rank), made on first use.
ncclComm_t job_communicator(const NcclLibrary& nccl) {
    static ncclComm_t comm = [&] {
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

}  // namespace

bool nccl_available() { return nccl_library() != nullptr; }

bool nccl_all_reduce_sum(float* data, std::size_t count, cudaStream_t stream) {
    const NcclLibrary* nccl = nccl_library();
    if (!nccl) return false;
    check(*nccl, nccl->all_reduce(data, data, count, ncclFloat, ncclSum, job_communicator(*nccl), stream),
          "ncclAllReduce");
    return true;
}

}  // namespace adacc
