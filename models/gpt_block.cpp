#include "models/gpt_block.h"

#include <iterator>

#include "kernels/gelu_math.h"
#include "models/op_table.h"

namespace adacc {

namespace {
const char* const kTensorNames[] = {
    "x",       "ln1",       "ln1_mean", "ln1_rstd", "qkv",      "att",      "att_mask", "atty",
    "attproj", "res1_mask", "x2",       "ln2",      "ln2_mean", "ln2_rstd", "fch",      "fch_gelu",
    "fcproj",  "res2_mask", "out",      "att_lse",  "emb_mask", "lnf",      "lnf_mean", "lnf_rstd",
};
static_assert(std::size(kTensorNames) == kNumTapeTensorKinds, "one name per TensorKind, in the enum's order");
}  // namespace

const char* tensor_kind_name(TensorKind k) { return kTensorNames[static_cast<int>(k)]; }

std::size_t tensor_rows(const GPTConfig& config, TensorKind kind, int B, int T) {
    return static_cast<std::size_t>(B) * T * (is_attention_matrix(kind) ? config.n_head : 1);
}

namespace {

// The block's tensors in TensorKind's order, at N = B T tokens: what each holds, whether backward
// reads it, and its size (0 where the configuration has none: masks without dropout, the T x T
// matrices with a flash attention).
std::vector<TensorInfo> block_tensors(const GPTConfig& cfg, int B, int T, DType activation, bool dropout) {
    const std::size_t N = static_cast<std::size_t>(B) * T, C = cfg.n_embd, H = cfg.n_head;
    const std::size_t TT = static_cast<std::size_t>(B) * H * T * T;
    struct Spec {
        DType dtype;
        std::size_t numel;
        bool saved, tiny;
    };
    const bool d = dropout, fused = is_flash_attention(cfg.attention);  // fused or cudnn
    const std::size_t matrix = fused ? 0 : TT;                          // the attention matrices' elements
    const DType A = activation, S = DType::f32, M = DType::u8;          // activations, layernorm statistics, masks
    const Spec specs[] = {
        {A, N * C, true, false},                  // x
        {A, N * C, true, false},                  // ln1
        {S, N, true, true},                       // ln1_mean
        {S, N, true, true},                       // ln1_rstd
        {A, N * 3 * C, true, false},              // qkv
        {A, matrix, !fused, false},               // att
        {M, d ? matrix : 0, d && !fused, false},  // att_mask
        {A, N * C, true, false},                  // atty
        {A, N * C, false, false},                 // attproj
        {M, d ? N * C : 0, d, false},             // res1_mask
        {A, N * C, true, false},                  // x2
        {A, N * C, true, false},                  // ln2
        {S, N, true, true},                       // ln2_mean
        {S, N, true, true},                       // ln2_rstd
        {A, N * 4 * C, true, false},              // fch
        {A, N * 4 * C, true, false},              // fch_gelu
        {A, N * C, false, false},                 // fcproj
        {M, d ? N * C : 0, d, false},             // res2_mask
        {A, N * C, false, false},                 // out (saved as the next block's x)
        {S, fused ? N * H : 0, fused, true},      // att_lse
    };
    static_assert(std::size(specs) == kNumTensorKinds, "one spec per block TensorKind, in the enum's order");
    std::vector<TensorInfo> tensors;
    for (int i = 0; i < kNumTensorKinds; ++i)
        tensors.push_back({static_cast<TensorKind>(i), kTensorNames[i], specs[i].dtype, specs[i].numel, specs[i].saved,
                           specs[i].tiny});
    return tensors;
}

// Appends the block's ops in forward order, each with its forward FLOPs at n tokens of width c;
// the dropout masks' ops only with dropout.
struct BlockOps {
    std::vector<OpInfo>& ops;
    double n, c;
    bool dropout;
    using K = TensorKind;

    void matmul(const char* name, K in, K out, ParamId w, ParamId b, int fin, int fout) {
        ops.push_back({name, OpKind::matmul, {in}, {out}, w, b, fin, fout, 2.0 * n * fin * fout});
    }
    void mask(const char* name, K out) {
        if (!dropout) return;
        ops.push_back({name, OpKind::dropout_mask, {}, {out}, {}, {}, 0, 0, 0.0});
        ops.back().rng_kind = out;
    }
    void layernorm(const char* name, K in, K out, K mean, K rstd, ParamId w, ParamId b) {
        ops.push_back({name, OpKind::layernorm, {in}, {out, mean, rstd}, w, b, 0, 0, 8.0 * n * c});
    }
    // out = residual + dropout(branch), the mask an input only with dropout.
    void residual(const char* name, K residual_in, K branch, K dropout_mask, K out) {
        std::vector<K> inputs = {residual_in, branch};
        if (dropout) inputs.push_back(dropout_mask);
        ops.push_back({name, OpKind::residual_dropout, std::move(inputs), {out}, {}, {}, 0, 0, 2.0 * n * c});
    }
    // qkv -> atty: one op with a flash attention (fused, or cudnn: the fused op's description with
    // cuDNN's kernels, the same tensors and plan), else the T x T softmax, its mask and att @ v.
    void attention(const GPTConfig& cfg, int B, int T) {
        const double H = cfg.n_head;
        const double flops = 2.0 * 2.0 * B * H * (T * (T + 1.0) / 2.0) * (c / H);  // q k^T and att v, causal
        if (is_flash_attention(cfg.attention)) {
            const OpKind kind =
                cfg.attention == AttentionImpl::cudnn ? OpKind::attention_cudnn : OpKind::attention_fused;
            ops.push_back({"attention", kind, {K::qkv}, {K::atty, K::att_lse}, {}, {}, 0, 0, flops});
            ops.back().rng_kind = K::att_mask;
            return;
        }
        ops.push_back({"att_softmax", OpKind::attention_softmax, {K::qkv}, {K::att}, {}, {}, 0, 0, flops / 2});
        mask("att_dropout_mask", K::att_mask);
        std::vector<K> inputs = {K::att, K::qkv};
        if (dropout) inputs.push_back(K::att_mask);
        ops.push_back({"att_value", OpKind::attention_value, std::move(inputs), {K::atty}, {}, {}, 0, 0, flops / 2});
    }
    // ln2 -> fcproj: fc, GELU and fcproj, the GELU in the matmuls' epilogues where the backend
    // fuses it and 4C allows.
    void mlp(int C, BlockFusions fusions) {
        const double gelu_flops = 8.0 * n * 4 * c;
        if (fusions.gelu_epilogue && (4 * C) % kGeluEpilogueColumns == 0) {
            ops.push_back({"fc",
                           OpKind::matmul_gelu,
                           {K::ln2},
                           {K::fch, K::fch_gelu},
                           ParamId::fcw,
                           ParamId::fcb,
                           C,
                           4 * C,
                           2.0 * n * c * 4 * c + gelu_flops});
            ops.push_back({"fcproj",
                           OpKind::matmul_dgelu,
                           {K::fch_gelu, K::fch},
                           {K::fcproj},
                           ParamId::fcprojw,
                           ParamId::fcprojb,
                           4 * C,
                           C,
                           2.0 * n * 4 * c * c});
            return;
        }
        matmul("fc", K::ln2, K::fch, ParamId::fcw, ParamId::fcb, C, 4 * C);
        ops.push_back({"gelu", OpKind::gelu, {K::fch}, {K::fch_gelu}, {}, {}, 0, 0, gelu_flops});
        matmul("fcproj", K::fch_gelu, K::fcproj, ParamId::fcprojw, ParamId::fcprojb, 4 * C, C);
    }
};

}  // namespace

BlockGraph::BlockGraph(const GPTConfig& cfg, int B, int T, DType activation, BlockFusions fusions)
    : has_dropout_(cfg.dropout > 0.0f) {
    tensors_ = block_tensors(cfg, B, T, activation, has_dropout_);
    using K = TensorKind;
    const int C = cfg.n_embd;
    BlockOps add{ops_, static_cast<double>(B) * T, static_cast<double>(C), has_dropout_};
    add.layernorm("ln1", K::x, K::ln1, K::ln1_mean, K::ln1_rstd, ParamId::ln1w, ParamId::ln1b);
    add.matmul("qkv", K::ln1, K::qkv, ParamId::qkvw, ParamId::qkvb, C, 3 * C);
    add.attention(cfg, B, T);
    add.matmul("attproj", K::atty, K::attproj, ParamId::attprojw, ParamId::attprojb, C, C);
    add.mask("res1_dropout_mask", K::res1_mask);
    add.residual("residual1", K::x, K::attproj, K::res1_mask, K::x2);
    add.layernorm("ln2", K::x2, K::ln2, K::ln2_mean, K::ln2_rstd, ParamId::ln2w, ParamId::ln2b);
    add.mlp(C, fusions);
    add.mask("res2_dropout_mask", K::res2_mask);
    add.residual("residual2", K::x2, K::fcproj, K::res2_mask, K::out);
    for (OpInfo& op : ops_) op_spec(op.kind).wire_gradients(op);
}

const OpInfo* BlockGraph::producer(TensorKind k) const {
    for (const auto& op : ops_)
        for (auto o : op.outputs)
            if (o == k) return &op;
    return nullptr;
}

double BlockGraph::forward_flops() const {
    double total = 0;
    for (const auto& op : ops_) total += op.forward_flops;
    return total;
}

}  // namespace adacc
