// The op table: for every OpKind of models/gpt_block.h, the kernels it runs (kernels/ops.inc), its
// gradient wiring, and how its forward and backward call those kernels. The driver
// (src/engine/driver.cpp) fills an OpCall from the tensors in view and calls the entry; it names
// no op's kernels itself, so adding an op changes this table, the block's op list and the kernels
// (docs/architecture.md, 'Adding an elementwise op').
#pragma once

#include <array>
#include <vector>

#include "kernels/kernel_context.h"
#include "kernels/kernel_table.h"
#include "models/gpt_block.h"

namespace adacc {

// The most inputs or outputs an op has (layernorm's y, mean and rstd; residual's three inputs).
constexpr std::size_t kMaxOpTensors = 4;

// What one op's kernels are called with, in the order of its OpInfo's inputs and outputs: the
// tensors in view, their gradient buffers (backward only), its parameters, the shapes and the
// dropout of this pass. An op's dropout mask is its last input (or its output: dropout_mask).
struct OpCall {
    const KernelTable& k;
    const KernelContext& ctx;
    int B = 0, T = 0, C = 0, NH = 0;
    int in_features = 0, out_features = 0;         // matmul shapes
    long n = 0;                                    // elements of the first output: an elementwise op's length
    float dropout_p = 0;                           // 0 when this pass has no dropout
    unsigned long long dropout_key = 0;            // the op's counter-RNG key (OpInfo::rng_kind)
    const unsigned char* mask = nullptr;           // the dropout-mask input; null without one or without dropout
    std::array<Act, kMaxOpTensors> in{}, out{};    // the tensors
    std::array<Act, kMaxOpTensors> din{}, dout{};  // their gradients' buffers (backward)
    ConstAct weight{}, bias{};                     // null for no tensor
    float *dweight = nullptr, *dbias = nullptr;    // backward
    bool accumulate = false;                       // backward: parameter gradients add up
    int N() const { return B * T; }
};

struct OpSpec {
    std::vector<Kernel> kernels;       // forward's and backward's: a backend must support each
    void (*forward)(const OpCall&);    //
    void (*backward)(const OpCall&);   // null: no gradient (a dropout mask)
    void (*wire_gradients)(OpInfo&);   // sets OpInfo's grad_* fields from its inputs and outputs
    bool chosen_by_attention = false;  // model.attention picks it (for the unsupported-kernel message)
};

const OpSpec& op_spec(OpKind kind);

}  // namespace adacc
