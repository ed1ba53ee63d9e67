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

BlockGraph::BlockGraph(const GPTConfig& cfg, int B, int T, DType activation, BlockFusions fusions)
    : has_dropout_(cfg.dropout > 0.0f) {
    const std::size_t N = static_cast<std::size_t>(B) * T, C = cfg.n_embd, H = cfg.n_head;
    const std::size_t TT = static_cast<std::size_t>(B) * H * T * T;
    using K = TensorKind;
    struct Spec {
        DType dtype;
        std::size_t numel;
        bool saved, tiny;
    };
    const bool d = has_dropout_, fused = is_flash_attention(cfg.attention);  // fused or cudnn
    const std::size_t matrix = fused ? 0 : TT;                               // the attention matrices' elements
    const DType A = activation, S = DType::f32, M = DType::u8;               // activations, layernorm statistics, masks
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
    for (int i = 0; i < kNumTensorKinds; ++i)
        tensors_.push_back(
            {static_cast<K>(i), kTensorNames[i], specs[i].dtype, specs[i].numel, specs[i].saved, specs[i].tiny});

    const double n = static_cast<double>(N), c = static_cast<double>(C);
    const double attn_flops = 2.0 * 2.0 * B * H * (T * (T + 1) / 2.0) * (c / H);  // q k^T and att v, causal
    auto matmul = [&](const char* name, K in, K out, ParamId w, ParamId b, int fin, int fout) {
        ops_.push_back({name, OpKind::matmul, {in}, {out}, w, b, fin, fout, 2.0 * n * fin * fout});
    };
    auto mask = [&](const char* name, K out) {
        if (!d) return;
        ops_.push_back({name, OpKind::dropout_mask, {}, {out}, {}, {}, 0, 0, 0.0});
        ops_.back().rng_kind = out;
    };
    auto layernorm = [&](const char* name, K in, K out, K mean, K rstd, ParamId w, ParamId b) {
        ops_.push_back({name, OpKind::layernorm, {in}, {out, mean, rstd}, w, b, 0, 0, 8.0 * n * c});
    };
    // out = residual + dropout(branch), the mask an input only with dropout.
    auto residual = [&](const char* name, K residual_in, K branch, K dropout_mask, K out) {
        std::vector<K> inputs = {residual_in, branch};
        if (d) inputs.push_back(dropout_mask);
        ops_.push_back({name, OpKind::residual_dropout, std::move(inputs), {out}, {}, {}, 0, 0, 2.0 * n * c});
    };
    const int Ci = static_cast<int>(C);
    layernorm("ln1", K::x, K::ln1, K::ln1_mean, K::ln1_rstd, ParamId::ln1w, ParamId::ln1b);
    matmul("qkv", K::ln1, K::qkv, ParamId::qkvw, ParamId::qkvb, Ci, 3 * Ci);
    if (fused) {
        // cudnn is the fused op's description with cuDNN's kernels: the same tensors, the same plan.
        const OpKind kind = cfg.attention == AttentionImpl::cudnn ? OpKind::attention_cudnn : OpKind::attention_fused;
        ops_.push_back({"attention", kind, {K::qkv}, {K::atty, K::att_lse}, {}, {}, 0, 0, attn_flops});
        ops_.back().rng_kind = K::att_mask;
    } else {
        ops_.push_back({"att_softmax", OpKind::attention_softmax, {K::qkv}, {K::att}, {}, {}, 0, 0, attn_flops / 2});
        mask("att_dropout_mask", K::att_mask);
        ops_.push_back({"att_value",
                        OpKind::attention_value,
                        d ? std::vector<K>{K::att, K::qkv, K::att_mask} : std::vector<K>{K::att, K::qkv},
                        {K::atty},
                        {},
                        {},
                        0,
                        0,
                        attn_flops / 2});
    }
    matmul("attproj", K::atty, K::attproj, ParamId::attprojw, ParamId::attprojb, Ci, Ci);
    mask("res1_dropout_mask", K::res1_mask);
    residual("residual1", K::x, K::attproj, K::res1_mask, K::x2);
    layernorm("ln2", K::x2, K::ln2, K::ln2_mean, K::ln2_rstd, ParamId::ln2w, ParamId::ln2b);
    const double gelu_flops = 8.0 * n * 4 * c;
    if (fusions.gelu_epilogue && (4 * Ci) % kGeluEpilogueColumns == 0) {
        ops_.push_back({"fc",
                        OpKind::matmul_gelu,
                        {K::ln2},
                        {K::fch, K::fch_gelu},
                        ParamId::fcw,
                        ParamId::fcb,
                        Ci,
                        4 * Ci,
                        2.0 * n * c * 4 * c + gelu_flops});
        ops_.push_back({"fcproj",
                        OpKind::matmul_dgelu,
                        {K::fch_gelu, K::fch},
                        {K::fcproj},
                        ParamId::fcprojw,
                        ParamId::fcprojb,
                        4 * Ci,
                        Ci,
                        2.0 * n * 4 * c * c});
    } else {
        matmul("fc", K::ln2, K::fch, ParamId::fcw, ParamId::fcb, Ci, 4 * Ci);
        ops_.push_back({"gelu", OpKind::gelu, {K::fch}, {K::fch_gelu}, {}, {}, 0, 0, gelu_flops});
        matmul("fcproj", K::fch_gelu, K::fcproj, ParamId::fcprojw, ParamId::fcprojb, 4 * Ci, Ci);
    }
    mask("res2_dropout_mask", K::res2_mask);
    residual("residual2", K::x2, K::fcproj, K::res2_mask, K::out);
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
