// Global-norm gradient clipping's factor, one expression for the CPU and CUDA AdamW kernels and
// the optimizer's report of it: min(1, grad_clip / norm), 1 when clipping is off (grad_clip 0).
#pragma once

#include "kernels/host_device.h"

namespace adacc {

ADACC_HOST_DEVICE inline float clip_scale(float grad_clip, float grad_norm) {
    return grad_clip > 0.0f && grad_norm > grad_clip ? grad_clip / grad_norm : 1.0f;
}

}  // namespace adacc
