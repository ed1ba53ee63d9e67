// CPU kernels: the declarations of kernels/ops.inc in namespace adacc::cpu.
#pragma once

namespace adacc::cpu {
#include "kernels/ops.inc"
}  // namespace adacc::cpu
