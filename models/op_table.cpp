#include "models/op_table.h"

#include <iterator>

namespace adacc {

namespace {

using K = TensorKind;
using Kn = Kernel;

// Each op's gradient wiring (OpInfo's grad_* fields) follows what its backward kernel writes,
// as the ops.inc comments say: overwritten (grad_writes), accumulated into or completed
// (grad_updates), or the output's own buffer passed on (grad_shared).

// layernorm: inputs {x}; outputs {y, mean, rstd}; params {w, b}. dinp accumulates: x is the
// residual stream.
void layernorm_forward(const OpCall& c) {
    c.k.layernorm_forward(c.ctx, c.out[0], c.out[1].as<float>(), c.out[2].as<float>(), c.in[0], c.weight, c.bias, c.N(),
                          c.C);
}
void layernorm_backward(const OpCall& c) {
    c.k.layernorm_backward(c.ctx, c.din[0], c.dweight, c.dbias, c.dout[0], c.in[0], c.weight, c.out[1].as<float>(),
                           c.out[2].as<float>(), c.N(), c.C);
}
void layernorm_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_updates = {op.inputs[0]};
}

// matmul: inputs {x}; outputs {y}; params {w, b}.
void matmul_forward(const OpCall& c) {
    c.k.matmul_forward(c.ctx, c.out[0], c.in[0], c.weight, c.bias, c.N(), c.in_features, c.out_features);
}
void matmul_backward(const OpCall& c) {
    c.k.matmul_backward(c.ctx, c.din[0], c.dweight, c.dbias, c.dout[0], c.in[0], c.weight, c.N(), c.in_features,
                        c.out_features, c.accumulate);
}
void matmul_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_writes = {op.inputs[0]};
}

// attention_softmax: inputs {qkv}; outputs {att}. Backward writes the q and k columns of dqkv,
// which attention_value's backward began with the v columns.
void attention_softmax_forward(const OpCall& c) {
    c.k.attention_softmax_forward(c.ctx, c.out[0], c.in[0], c.B, c.T, c.C, c.NH);
}
void attention_softmax_backward(const OpCall& c) {
    c.k.attention_softmax_backward(c.ctx, c.din[0], c.dout[0], c.out[0], c.in[0], c.B, c.T, c.C, c.NH);
}
void attention_softmax_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_updates = {op.inputs[0]};
}

// dropout_mask: inputs {}; outputs {mask}, drawn at the key of its own tensor. A mask has no
// gradient.
void dropout_mask_forward(const OpCall& c) {
    c.k.dropout_mask(c.ctx, c.out[0].as<unsigned char>(), c.n, c.dropout_p, c.dropout_key);
}
void no_gradient(OpInfo&) {}

// attention_value: inputs {att, qkv, att_mask?}; outputs {atty}. Backward writes datt and the v
// columns of dqkv.
void attention_value_forward(const OpCall& c) {
    c.k.attention_value_forward(c.ctx, c.out[0], c.in[0], c.mask, c.dropout_p, c.in[1], c.B, c.T, c.C, c.NH);
}
void attention_value_backward(const OpCall& c) {
    c.k.attention_value_backward(c.ctx, c.din[0], c.din[1], c.dout[0], c.in[0], c.mask, c.dropout_p, c.in[1], c.B, c.T,
                                 c.C, c.NH);
}
void attention_value_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_writes = {op.inputs[0], op.inputs[1]};
}

// attention_fused: inputs {qkv}; outputs {atty, att_lse}. Dropout is drawn from the RNG at
// att_mask's key (no mask tensor); backward writes all of dqkv, and att_lse has no gradient.
void attention_fused_forward(const OpCall& c) {
    c.k.attention_fused_forward(c.ctx, c.out[0], c.out[1].as<float>(), c.in[0], c.B, c.T, c.C, c.NH, c.dropout_p,
                                c.dropout_key);
}
void attention_fused_backward(const OpCall& c) {
    c.k.attention_fused_backward(c.ctx, c.din[0], c.dout[0], c.in[0], c.out[0], c.out[1].as<float>(), c.B, c.T, c.C,
                                 c.NH, c.dropout_p, c.dropout_key);
}
void attention_fused_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_writes = {op.inputs[0]};
}

// attention_cudnn: attention_fused's op through cuDNN's SDPA graphs; dropout is cuDNN's Philox draw
// seeded with att_mask's key, so a recomputed forward draws the same mask. Wiring as fused.
void attention_cudnn_forward(const OpCall& c) {
    c.k.attention_cudnn_forward(c.ctx, c.out[0], c.out[1].as<float>(), c.in[0], c.B, c.T, c.C, c.NH, c.dropout_p,
                                c.dropout_key);
}
void attention_cudnn_backward(const OpCall& c) {
    c.k.attention_cudnn_backward(c.ctx, c.din[0], c.dout[0], c.in[0], c.out[0], c.out[1].as<float>(), c.B, c.T, c.C,
                                 c.NH, c.dropout_p, c.dropout_key);
}

// residual_dropout: inputs {residual, branch, mask?}; outputs {sum = residual + dropout(branch)}.
// The residual's gradient is the sum's own buffer. With a mask the branch's is computed; without
// one (no dropout) it is the sum's too, as llm.c's one residual-stream gradient: nothing to run.
void residual_dropout_forward(const OpCall& c) {
    c.k.residual_dropout_forward(c.ctx, c.out[0], c.in[0], c.in[1], c.mask, c.dropout_p, c.n);
}
void residual_dropout_backward(const OpCall& c) {
    if (c.din[1].data() == c.dout[0].data()) return;  // the branch's gradient is the sum's (wiring)
    c.k.residual_dropout_backward(c.ctx, c.din[1], c.dout[0], c.mask, c.dropout_p, c.n);
}
void residual_dropout_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_shared = {{op.inputs[0], op.outputs[0]}};
    const bool masked = op.inputs.size() > 2;
    if (masked)
        op.grad_writes = {op.inputs[1]};
    else
        op.grad_shared.push_back({op.inputs[1], op.outputs[0]});
}

// gelu: inputs {x}; outputs {y}. Backward runs in place, dinp over dout.
void gelu_forward(const OpCall& c) { c.k.gelu_forward(c.ctx, c.out[0], c.in[0], c.n); }
void gelu_backward(const OpCall& c) { c.k.gelu_backward(c.ctx, c.din[0], c.in[0], c.dout[0], c.n); }
void gelu_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_shared = {{op.inputs[0], op.outputs[0]}};
}

// matmul_gelu: inputs {x}; outputs {pre, y = gelu(pre)}; params {w, b}. Its backward is a plain
// matmul's from pre's gradient, which matmul_dgelu wrote.
void matmul_gelu_forward(const OpCall& c) {
    c.k.matmul_gelu_forward(c.ctx, c.out[1], c.out[0], c.in[0], c.weight, c.bias, c.N(), c.in_features, c.out_features);
}
void matmul_gelu_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_writes = {op.inputs[0]};
}

// matmul_dgelu: inputs {x = gelu(pre), pre}; outputs {y}; params {w, b}. Backward writes pre's
// gradient: x's is only ever inside the GEMM's epilogue.
void matmul_dgelu_backward(const OpCall& c) {
    c.k.matmul_dgelu_backward(c.ctx, c.din[1], c.dweight, c.dbias, c.dout[0], c.in[0], c.in[1], c.weight, c.N(),
                              c.in_features, c.out_features, c.accumulate);
}
void matmul_dgelu_wiring(OpInfo& op) {
    op.grad_reads = {op.outputs[0]};
    op.grad_writes = {op.inputs[1]};
}

// In OpKind's order.
const OpSpec kOpTable[] = {
    {{Kn::layernorm_forward, Kn::layernorm_backward}, layernorm_forward, layernorm_backward, layernorm_wiring},
    {{Kn::matmul_forward, Kn::matmul_backward}, matmul_forward, matmul_backward, matmul_wiring},
    {{Kn::attention_softmax_forward, Kn::attention_softmax_backward},
     attention_softmax_forward,
     attention_softmax_backward,
     attention_softmax_wiring,
     true},
    {{Kn::dropout_mask}, dropout_mask_forward, nullptr, no_gradient},
    {{Kn::attention_value_forward, Kn::attention_value_backward},
     attention_value_forward,
     attention_value_backward,
     attention_value_wiring,
     true},
    {{Kn::attention_fused_forward, Kn::attention_fused_backward},
     attention_fused_forward,
     attention_fused_backward,
     attention_fused_wiring,
     true},
    {{Kn::residual_dropout_forward, Kn::residual_dropout_backward},
     residual_dropout_forward,
     residual_dropout_backward,
     residual_dropout_wiring},
    {{Kn::gelu_forward, Kn::gelu_backward}, gelu_forward, gelu_backward, gelu_wiring},
    {{Kn::attention_cudnn_forward, Kn::attention_cudnn_backward},
     attention_cudnn_forward,
     attention_cudnn_backward,
     attention_fused_wiring,
     true},
    {{Kn::matmul_gelu_forward, Kn::matmul_backward}, matmul_gelu_forward, matmul_backward, matmul_gelu_wiring},
    {{Kn::matmul_forward, Kn::matmul_dgelu_backward}, matmul_forward, matmul_dgelu_backward, matmul_dgelu_wiring},
};
static_assert(std::size(kOpTable) == kNumOpKinds, "one op table entry per OpKind, in the enum's order");

}  // namespace

const OpSpec& op_spec(OpKind kind) { return kOpTable[static_cast<int>(kind)]; }

}  // namespace adacc
