// Causal self-attention through cuDNN's fused SDPA (model.attention = "cudnn"): the op of
// kernels/cuda/attention_fused.cu, atty and lse with the same meaning and layout, computed by the
// graphs of cuDNN's frontend (headers only, third_party/cudnn_frontend: scripts/install_deps.sh).
// Host code, compiled by the host compiler into the CUDA backend; cuDNN itself is opened with
// dlopen when the first graph is built (src/cuda/cudnn_library.cpp defines the cudnn* functions
// the frontend calls, forwarding to it), so a process that never runs it never loads it.
//
// Layout. qkv is N x 3C with rows [q | k | v] and head h in columns h*hs..; cuDNN's tensors are
// [B, H, T, hs] views of it by strides alone: Q at qkv, K at qkv + C, V at qkv + 2C, each with
// strides (T*3C, hs, 3C, 1); atty (N x C) is O with strides (T*C, hs, C, 1); lse (B x H x T fp32,
// the log of each row's softmax denominator, its max included) is cuDNN's Stats, [B, H, T, 1]
// in natural log, as the fused kernel writes it. The causal mask is cuDNN's diagonal band with
// top-left alignment and right bound 0 (key j <= query t); the scale is 1/sqrt(hs) as fp32.
//
// Dropout. cuDNN draws its mask with Philox from a seed and an offset given as device tensors
// (int64 [1,1,1,1]); the seed is the op's RNG key (kernels/rng.h: rng_key of the step, micro-batch,
// layer and tensor) and the offset 0, so the same key draws the same mask: a recomputed forward is
// bit-identical, and backward drops what forward dropped. The mask is not attention_fused's. The
// seed is written into device memory with eight one-byte cudaMemsetAsync calls on the stream,
// which need no host buffer to outlive the call (a cudaMemcpyAsync from pageable memory would
// wait for the stream each time).
//
// Graphs are built once per (B, H, T, hs, dtype, dropout probability, direction) and kept; building
// one allocates on the host and may grow the workspace (cudaMalloc), so a model's first step does,
// its later steps do not. Backward asks for cuDNN's deterministic algorithm (no atomics: the same
// inputs give the same dqkv bit for bit) and takes the default one where cuDNN has none for the
// shape (dnn_describe says which). With KernelContext::deterministic false (training.deterministic)
// it takes the default one, which sums dQ by atomics: on Hopper it skips writing and reading the
// deterministic algorithm's B x H x T x T matrix, and its workspace is linear in T.
#include "kernels/cuda/attention_cudnn.h"

#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "kernels/cuda/device_sizes.h"
#include "kernels/cuda/ops.h"
#include "src/common/errors.h"

namespace adacc::cuda {

namespace fe = cudnn_frontend;

namespace {

// Tensor ids of the variant packs.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kSeed, kOffset, kDO, kDQ, kDK, kDV };

struct GraphKey {
    int B, H, T, hs;
    bool bf16;
    float dropout_p;  // 0: no dropout nodes
    bool backward;
    bool deterministic;  // backward: ask for cuDNN's deterministic algorithm (forward: always true)
    bool operator<(const GraphKey& o) const {
        return std::tie(B, H, T, hs, bf16, dropout_p, backward, deterministic) <
               std::tie(o.B, o.H, o.T, o.hs, o.bf16, o.dropout_p, o.backward, o.deterministic);
    }
    std::string name() const {
        return std::string(backward ? "backward" : "forward") + " graph (B=" + std::to_string(B) +
               " H=" + std::to_string(H) + " T=" + std::to_string(T) + " hs=" + std::to_string(hs) +
               (bf16 ? " bf16" : " fp32") + (dropout_p > 0 ? " dropout " + std::to_string(dropout_p) : "") + ")";
    }
};

struct BuiltGraph {
    std::shared_ptr<fe::graph::Graph> graph;
    std::int64_t workspace_bytes = 0;
    bool deterministic = true;  // backward: cuDNN's deterministic algorithm
};

void check_cuda(cudaError_t status, const std::string& what) {
    if (status != cudaSuccess)
        throw std::runtime_error("cuDNN attention: " + what + ": CUDA error: " + cudaGetErrorString(status));
}

void check_cudnn(cudnnStatus_t status, const std::string& what) {
    if (status != CUDNN_STATUS_SUCCESS)
        throw std::runtime_error("cuDNN attention: " + what + ": " + cudnnGetErrorString(status));
}

// A frontend step's error as a runtime_error naming the graph, the step and cuDNN's message.
void check_fe(fe::error_t status, const GraphKey& key, const char* step) {
    if (status.is_good()) return;
    throw std::runtime_error("cuDNN attention " + key.name() + ": " + step + " failed: " + status.get_message());
}

}  // namespace

struct DnnContext {
    cudnnHandle_t handle = nullptr;
    std::map<GraphKey, BuiltGraph> graphs;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    std::int64_t* rng = nullptr;  // device: the dropout seed, then the offset (0)
};

DnnContext* make_dnn_context() { return new DnnContext; }

void destroy_dnn_context(DnnContext* dnn) {
    if (!dnn) return;
    dnn->graphs.clear();  // before the handle they were built with
    if (dnn->workspace) cudaFree(dnn->workspace);
    if (dnn->rng) cudaFree(dnn->rng);
    if (dnn->handle) cudnnDestroy(dnn->handle);
    delete dnn;
}

std::size_t dnn_device_bytes(const DnnContext* dnn) {
    return dnn ? dnn->workspace_bytes + (dnn->rng ? 2 * sizeof(std::int64_t) : 0) : 0;
}

std::string dnn_describe(const DnnContext* dnn) {
    std::string out;
    if (!dnn) return out;
    for (const auto& [key, built] : dnn->graphs) {
        out += key.name() + ": workspace " + std::to_string(built.workspace_bytes) + " bytes";
        if (key.backward)
            out += built.deterministic ? ", deterministic"
                   : key.deterministic ? ", NOT deterministic (cuDNN has none)"
                                       : ", not deterministic (training.deterministic = false)";
        out += "\n";
    }
    return out;
}

namespace {

// The handle on the first call (cuDNN is loaded by then: the backend checked cudnn_problem), on
// the kernel's stream every call.
DnnContext& dnn_for(const KernelContext& ctx) {
    if (!ctx.dnn)
        throw std::logic_error(
            "attention_cudnn: this KernelContext has no cuDNN context (cuDNN did not load; the backend's supports() "
            "should have refused the kernel)");
    auto& dnn = *static_cast<DnnContext*>(ctx.dnn);
    if (!dnn.handle) {
        check_cudnn(cudnnCreate(&dnn.handle), "cudnnCreate");
        check_cuda(cudaMalloc(reinterpret_cast<void**>(&dnn.rng), 2 * sizeof(std::int64_t)), "cudaMalloc (seed)");
        // On the kernel's stream, so that the seed's own memsets there come after it whatever the
        // stream's kind (a non-blocking stream is not ordered after the default stream's cudaMemset).
        check_cuda(cudaMemsetAsync(dnn.rng, 0, 2 * sizeof(std::int64_t), static_cast<cudaStream_t>(ctx.stream)),
                   "cudaMemsetAsync (seed)");
    }
    check_cudnn(cudnnSetStream(dnn.handle, static_cast<cudaStream_t>(ctx.stream)), "cudnnSetStream");
    return dnn;
}

// Q, K and V as [B, H, T, hs] views of qkv (see the file's comment).
struct Views {
    std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
};

std::vector<std::int64_t> qkv_strides(const GraphKey& k) {
    const std::int64_t C = std::int64_t{k.H} * k.hs;
    return {std::int64_t{k.T} * 3 * C, k.hs, 3 * C, 1};
}
std::vector<std::int64_t> atty_strides(const GraphKey& k) {
    const std::int64_t C = std::int64_t{k.H} * k.hs;
    return {std::int64_t{k.T} * C, k.hs, C, 1};
}
std::vector<std::int64_t> dims(const GraphKey& k) { return {k.B, k.H, k.T, k.hs}; }
std::vector<std::int64_t> stats_dims(const GraphKey& k) { return {k.B, k.H, k.T, 1}; }
std::vector<std::int64_t> stats_strides(const GraphKey& k) { return {std::int64_t{k.H} * k.T, k.T, 1, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name, Uid uid,
                                                     std::vector<std::int64_t> dim, std::vector<std::int64_t> stride) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

std::shared_ptr<fe::graph::Graph> new_graph(const GraphKey& key) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(key.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::FLOAT)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

// The seed and offset tensors (int64 [1,1,1,1] in device memory).
std::pair<std::shared_ptr<fe::graph::Tensor_attributes>, std::shared_ptr<fe::graph::Tensor_attributes>> rng_tensors(
    fe::graph::Graph& g) {
    auto one = [&](const char* name, Uid uid) {
        return g.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim({1, 1, 1, 1})
                            .set_stride({1, 1, 1, 1})
                            .set_data_type(fe::DataType_t::INT64));
    };
    return {one("seed", kSeed), one("offset", kOffset)};
}

float attention_scale(int hs) { return 1.0f / std::sqrt(static_cast<float>(hs)); }

// validate, lower, pick cuDNN's heuristic plan, check it runs here, compile it.
void finish(fe::graph::Graph& g, cudnnHandle_t handle, const GraphKey& key) {
    check_fe(g.validate(), key, "validate");
    check_fe(g.build_operation_graph(handle), key, "build_operation_graph");
    check_fe(g.create_execution_plans({fe::HeurMode_t::A}), key, "create_execution_plans");
    check_fe(g.check_support(), key, "check_support");
    check_fe(g.build_plans(), key, "build_plans");
}

BuiltGraph build_forward(cudnnHandle_t handle, const GraphKey& key) {
    BuiltGraph built;
    built.graph = new_graph(key);
    fe::graph::Graph& g = *built.graph;
    auto q = tensor(g, "Q", kQ, dims(key), qkv_strides(key));
    auto k = tensor(g, "K", kK, dims(key), qkv_strides(key));
    auto v = tensor(g, "V", kV, dims(key), qkv_strides(key));
    auto options = fe::graph::SDPA_attributes()
                       .set_name("adacc_attention_forward")
                       .set_generate_stats(true)  // lse: saved for backward (att_lse)
                       .set_attn_scale(attention_scale(key.hs))
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
    if (key.dropout_p > 0) {
        auto [seed, offset] = rng_tensors(g);
        options.set_dropout(key.dropout_p, seed, offset);
    }
    auto [o, stats] = g.sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(dims(key)).set_stride(atty_strides(key));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims(key))
        .set_stride(stats_strides(key));
    finish(g, handle, key);
    check_fe(g.get_workspace_size(built.workspace_bytes), key, "get_workspace_size");
    return built;
}

BuiltGraph build_backward_as(cudnnHandle_t handle, const GraphKey& key, bool deterministic) {
    BuiltGraph built;
    built.deterministic = deterministic;
    built.graph = new_graph(key);
    fe::graph::Graph& g = *built.graph;
    auto q = tensor(g, "Q", kQ, dims(key), qkv_strides(key));
    auto k = tensor(g, "K", kK, dims(key), qkv_strides(key));
    auto v = tensor(g, "V", kV, dims(key), qkv_strides(key));
    auto o = tensor(g, "O", kO, dims(key), atty_strides(key));
    auto d_o = tensor(g, "dO", kDO, dims(key), atty_strides(key));
    auto stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("Stats")
                              .set_uid(kStats)
                              .set_dim(stats_dims(key))
                              .set_stride(stats_strides(key))
                              .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("adacc_attention_backward")
                       .set_attn_scale(attention_scale(key.hs))
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(deterministic);
    if (key.dropout_p > 0) {
        auto [seed, offset] = rng_tensors(g);
        options.set_dropout(key.dropout_p, seed, offset);
    }
    auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, d_o, stats, options);
    // dq, dk and dv are the q, k and v columns of dqkv: the same views as Q, K and V.
    dq->set_output(true).set_uid(kDQ).set_dim(dims(key)).set_stride(qkv_strides(key));
    dk->set_output(true).set_uid(kDK).set_dim(dims(key)).set_stride(qkv_strides(key));
    dv->set_output(true).set_uid(kDV).set_dim(dims(key)).set_stride(qkv_strides(key));
    finish(g, handle, key);
    check_fe(g.get_workspace_size(built.workspace_bytes), key, "get_workspace_size");
    return built;
}

// The deterministic backward where asked and cuDNN has one for the shape, else the other, said
// once per shape on stderr: the run goes on, but its attention gradients are no longer
// reproducible bit for bit (the accounting reserves either's workspace: device_sizes.h).
BuiltGraph build_backward(cudnnHandle_t handle, const GraphKey& key) {
    if (!key.deterministic) return build_backward_as(handle, key, false);
    try {
        return build_backward_as(handle, key, true);
    } catch (const std::runtime_error& deterministic_failed) {
        BuiltGraph built;
        try {
            built = build_backward_as(handle, key, false);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string(e.what()) +
                                     " (and with the deterministic algorithm: " + deterministic_failed.what() + ")");
        }
        std::fprintf(stderr,
                     "cuDNN has no deterministic attention backward for %s (%s): its gradients there are summed by "
                     "atomics and may differ run to run (model.attention = \"materialized\" is deterministic)\n",
                     key.name().c_str(), deterministic_failed.what());
        return built;
    }
}

// The workspace of `need` bytes for `key`'s graph, built deterministic or not. The accounting
// reserves what cuDNN asks for (device_sizes.h: cudnn_attention_device_bytes), so this fails
// only when the device is fuller than planned or a cuDNN asks for more: the user's to fix, with
// less budget or batch.
void allocate_workspace(DnnContext& dnn, std::size_t need, const GraphKey& key) {
    if (cudaMalloc(&dnn.workspace, need) == cudaSuccess) {
        dnn.workspace_bytes = need;
        return;
    }
    cudaGetLastError();  // clear the error so later calls do not see it
    // The old workspace is gone: a cached graph run after this error is caught would get none.
    dnn.graphs.clear();
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    const std::size_t reserved = cudnn_attention_device_bytes(key.B, key.H, key.T, key.hs, key.deterministic);
    throw UserError("cuDNN's attention needs a workspace of " + std::to_string(need) + " bytes for its " + key.name() +
                    " (the memory accounting reserved " + std::to_string(reserved) + "), and the GPU has " +
                    std::to_string(free) + " bytes free; lower memory.budget or training.batch_size, or use " +
                    "model.attention = \"fused\"");
}

// The key's graph, built on first use; the workspace grown to what it needs.
const BuiltGraph& graph_for(DnnContext& dnn, const GraphKey& key) {
    auto it = dnn.graphs.find(key);
    if (it == dnn.graphs.end()) {
        BuiltGraph built = key.backward ? build_backward(dnn.handle, key) : build_forward(dnn.handle, key);
        const auto need = static_cast<std::size_t>(built.workspace_bytes);
        if (need > dnn.workspace_bytes) {
            // cudaFree waits for the device, so no queued graph still uses the old workspace.
            if (dnn.workspace) check_cuda(cudaFree(dnn.workspace), "cudaFree (workspace)");
            dnn.workspace = nullptr;
            dnn.workspace_bytes = 0;
            allocate_workspace(dnn, need, key);
        }
        it = dnn.graphs.emplace(key, std::move(built)).first;
    }
    return it->second;
}

// The seed (the op's RNG key) into device memory, byte by byte on the stream (see the file's comment).
void set_seed(DnnContext& dnn, cudaStream_t stream, unsigned long long key) {
    auto* bytes = reinterpret_cast<unsigned char*>(dnn.rng);
    for (int i = 0; i < 8; ++i)  // little-endian: byte i of the int64 is bits 8i..8i+7
        check_cuda(cudaMemsetAsync(bytes + i, static_cast<int>((key >> (8 * i)) & 0xff), 1, stream),
                   "cudaMemsetAsync (seed)");
}

GraphKey key_for(ConstAct qkv, int B, int T, int C, int NH, float dropout_p, bool backward, bool deterministic) {
    if (qkv.dtype() != DType::bf16)
        throw std::logic_error(
            "attention_cudnn: cuDNN's fused attention runs bf16 activations only (the backend's supports() refuses "
            "fp32)");
    return {B, NH, T, C / NH, true, dropout_p > 0 ? dropout_p : 0.0f, backward, deterministic};
}

void run(const DnnContext& dnn, const BuiltGraph& built, const GraphKey& key,
         std::unordered_map<std::int64_t, void*>& pack) {
    if (key.dropout_p > 0) {
        pack[kSeed] = dnn.rng;
        pack[kOffset] = dnn.rng + 1;
    }
    check_fe(built.graph->execute(dnn.handle, pack, dnn.workspace), key, "execute");
}

// cuDNN's variant pack takes void* for inputs too.
void* mutable_ptr(ConstAct a) { return const_cast<bf16*>(a.as<bf16>()); }

}  // namespace

void attention_cudnn_forward(const KernelContext& ctx, Act atty, float* lse, ConstAct qkv, int B, int T, int C, int NH,
                             float dropout_p, unsigned long long key) {
    DnnContext& dnn = dnn_for(ctx);
    const GraphKey gk = key_for(qkv, B, T, C, NH, dropout_p, false, true);
    const BuiltGraph& built = graph_for(dnn, gk);
    if (gk.dropout_p > 0) set_seed(dnn, static_cast<cudaStream_t>(ctx.stream), key);
    auto* base = static_cast<bf16*>(mutable_ptr(qkv));
    std::unordered_map<std::int64_t, void*> pack = {
        {kQ, base}, {kK, base + C}, {kV, base + 2 * C}, {kO, atty.as<bf16>()}, {kStats, lse}};
    run(dnn, built, gk, pack);
}

void attention_cudnn_backward(const KernelContext& ctx, Act dqkv, ConstAct datty, ConstAct qkv, ConstAct atty,
                              const float* lse, int B, int T, int C, int NH, float dropout_p, unsigned long long key) {
    DnnContext& dnn = dnn_for(ctx);
    const GraphKey gk = key_for(qkv, B, T, C, NH, dropout_p, true, ctx.deterministic);
    const BuiltGraph& built = graph_for(dnn, gk);
    if (gk.dropout_p > 0) set_seed(dnn, static_cast<cudaStream_t>(ctx.stream), key);
    auto* base = static_cast<bf16*>(mutable_ptr(qkv));
    bf16* dbase = dqkv.as<bf16>();
    std::unordered_map<std::int64_t, void*> pack = {{kQ, base},
                                                    {kK, base + C},
                                                    {kV, base + 2 * C},
                                                    {kO, mutable_ptr(atty)},
                                                    {kDO, mutable_ptr(datty)},
                                                    {kStats, const_cast<float*>(lse)},
                                                    {kDQ, dbase},
                                                    {kDK, dbase + C},
                                                    {kDV, dbase + 2 * C}};
    run(dnn, built, gk, pack);
}

}  // namespace adacc::cuda
