// The GPT-2 block described as data (docs/design.md, 'The block as data'): an ordered list of ops,
// each naming its inputs, outputs and parameters, plus every tensor's size and whether backward
// needs it. The forward/backward driver (src/engine/driver.cpp), the memory accounting and the
// planner all read this one description, so adding an op or a block type changes one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt_config.h"
#include "models/gpt_params.h"
#include "src/common/dtype.h"

namespace adacc {

// Every tensor one block produces. `x` is the block input (the previous block's output);
// `out` is this block's output, which is the next block's `x`.
enum class TensorKind : int {
    x,
    ln1,
    ln1_mean,
    ln1_rstd,
    qkv,
    att,       // softmax probabilities, B x H x T x T
    att_mask,  // attention dropout mask, B x H x T x T bytes
    atty,
    attproj,  // transient: only feeds the residual
    res1_mask,
    x2,  // residual stream after attention
    ln2,
    ln2_mean,
    ln2_rstd,
    fch,  // fc output, gelu input
    fch_gelu,
    fcproj,  // transient
    res2_mask,
    out,      // block output = next block's x
    att_lse,  // fused attention: log of each probability row's softmax denominator, B x H x T fp32
    // Tensors outside the blocks (on the tape, never in BlockGraph's lists or a plan):
    emb_mask,  // embedding dropout mask, N x C bytes
    lnf,       // final layernorm output, N x C
    lnf_mean,
    lnf_rstd,
};
// Counted from the enum, so adding a kind moves them: the block's tensors are x .. att_lse
// (BlockGraph::tensors()), the tape's are every TensorKind, the ones outside the blocks included.
constexpr int kNumTensorKinds = static_cast<int>(TensorKind::att_lse) + 1;
constexpr int kNumTapeTensorKinds = static_cast<int>(TensorKind::lnf_rstd) + 1;

// The B x H x T x T tensors (softmax probabilities and their dropout mask): rows = N * H, cols = T.
constexpr bool is_attention_matrix(TensorKind k) { return k == TensorKind::att || k == TensorKind::att_mask; }

// An op's inputs, outputs and parameters, by kind (models/op_table.h has each kind's kernels).
// A dropout mask, when an op reads one, is its last input.
enum class OpKind : std::uint8_t {
    layernorm,          // inputs {x}; outputs {y, mean, rstd}; params {w, b}
    matmul,             // inputs {x}; outputs {y}; params {w, b}
    attention_softmax,  // inputs {qkv}; outputs {att}
    dropout_mask,       // inputs {}; outputs {mask}
    attention_value,    // inputs {att, qkv, att_mask?}; outputs {atty}
    attention_fused,    // inputs {qkv}; outputs {atty, att_lse} (dropout from the RNG, no mask tensor)
    residual_dropout,   // inputs {residual, branch, mask?}; outputs {sum}
    gelu,               // inputs {x}; outputs {y}
    attention_cudnn,    // attention_fused's inputs and outputs, cuDNN's kernels (dropout from its Philox)
    matmul_gelu,        // inputs {x}; outputs {pre, y = gelu(pre)}; params {w, b}: GELU in the epilogue
    matmul_dgelu,       // inputs {x = gelu(pre), pre}; outputs {y}; params {w, b}: dGELU in backward's
};
constexpr int kNumOpKinds = static_cast<int>(OpKind::matmul_dgelu) + 1;

struct TensorInfo {
    TensorKind kind;
    std::string name;
    DType dtype;
    std::size_t numel;  // elements for the given (B, T)
    bool saved;         // backward reads it, so it must be on the tape in some form
    bool tiny;          // layernorm statistics: always kept, never planned
    std::size_t bytes() const { return numel * dtype_size(dtype); }
};

struct OpInfo {
    std::string name;
    OpKind kind;
    std::vector<TensorKind> inputs;
    std::vector<TensorKind> outputs;
    std::optional<ParamId> weight;
    std::optional<ParamId> bias;
    int in_features = 0, out_features = 0;  // matmul shapes
    double forward_flops = 0;               // for one block at (B, T)
    // The tensor whose counter-RNG key the op's dropout draws from: a mask op's own mask; fused
    // attention draws att_mask's, so its draws are the materialized path's mask bits.
    std::optional<TensorKind> rng_kind = std::nullopt;
    // Gradient wiring, what backward reads and writes (ModelLayout gives each gradient a buffer
    // by its liveness from these): the gradients of outputs it reads; of inputs it writes (born
    // here, overwritten); of inputs it adds to or completes, alive already (layernorm adds to the
    // residual stream's, attention_softmax writes qkv's q and k columns beside attention_value's
    // v); and {input, output} for each input whose gradient is the output's own buffer (a residual
    // addition passes the gradient through unchanged to the residual, and to the branch too without
    // dropout; gelu's backward runs in place). matmul_dgelu writes its second input's (pre's)
    // gradient: its first input's is never stored.
    std::vector<TensorKind> grad_reads = {}, grad_writes = {}, grad_updates = {};
    std::vector<std::pair<TensorKind, TensorKind>> grad_shared = {};
};

// What a backend fuses (a device's capability: src/engine/device.h, block_fusions): ops of the
// block graph run as one in place of their parts, or kernels of forward. The tensors are the same
// either way, so plans carry over; a fused graph's ops' times, and so profiles, do not.
struct BlockFusions {
    // With 4C a multiple of kGeluEpilogueColumns, the MLP's GELU is in its matmuls' epilogues: fc is
    // a matmul_gelu op writing fch and fch_gelu, fcproj a matmul_dgelu op reading both, no gelu op.
    bool gelu_epilogue = false;
    // Forward runs each residual add with the layernorm after it (residual1 with ln2, residual2 with
    // the next block's ln1 or the final layernorm) in one kernel, residual_layernorm_forward, whose
    // outputs are the two kernels' bit for bit (src/engine/driver.h: Driver::fuses_residual_layernorm).
    // Not a change of the graph: it keeps both ops, which backward, recompute and the profiler run.
    bool residual_layernorm = false;
};

class BlockGraph {
public:
    // Dropout masks exist only when config.dropout > 0; without dropout they are absent from
    // the op and tensor lists (nothing to save, nothing to plan). With config.attention = fused (or cudnn)
    // the attention matrices (att, att_mask) are absent the same way and att_lse is saved. Activations are of type
    // `activation` (the model's dtype); layernorm statistics are fp32 and masks bytes in every dtype.
    // `fusions`: the fused ops of the backend that runs the block (DeviceTraits), none by default.
    BlockGraph(const GPTConfig& config, int B, int T, DType activation = DType::f32, BlockFusions fusions = {});

    const std::vector<OpInfo>& ops() const { return ops_; }
    const TensorInfo& tensor(TensorKind k) const { return tensors_[static_cast<int>(k)]; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    bool has_dropout() const { return has_dropout_; }
    // The op whose outputs include `k` (every tensor but x has exactly one producer).
    const OpInfo* producer(TensorKind k) const;
    double forward_flops() const;  // one block, forward only

private:
    std::vector<TensorInfo> tensors_;
    std::vector<OpInfo> ops_;
    bool has_dropout_ = false;
};

const char* tensor_kind_name(TensorKind k);
// Rows of tensor `kind` seen as a matrix at B x T (what codecs quantize row by row): N * H for
// the attention matrices, N = B * T for the others; cols = numel / rows.
std::size_t tensor_rows(const GPTConfig& config, TensorKind kind, int B, int T);

}  // namespace adacc
