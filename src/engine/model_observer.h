// What a model reports to whoever watches it run (the profiler's op timing, the Adacc monitor's
// codec sampling), so the model knows nothing of either: the driver calls these hooks when an
// observer is set, and costs nothing when none is.
#pragma once

#include <cstddef>

#include "kernels/activation.h"
#include "kernels/codec_format.h"
#include "models/gpt_block.h"

namespace adacc {

class Backend;

// A tensor the driver has just compressed in forward; every pointer is in backend memory.
struct CompressedTensor {
    int layer = 0;
    TensorKind kind = TensorKind::x;
    Codec codec = Codec::group_int4;
    ConstAct original;               // the tensor as the op wrote it (the model's dtype, or mask bytes)
    const void* blob = nullptr;      // its blob, in its tape slot
    std::size_t rows = 0, cols = 0;
    std::size_t exact_bytes = 0;     // the blob's exact size (read from its header)
    Act decode_buffer;               // idle workspace of >= rows * cols activations to decode into
};

class ModelObserver {
public:
    virtual ~ModelObserver() = default;
    // At the start of every forward.
    virtual void forward_started() {}
    // Op timing: when true (asked when the observer is set), every block op of a forward is timed
    // on the backend's queue (IntervalTimer: CUDA events on a GPU, the steady clock on the CPU)
    // and reported through op_timed after the forward's last block.
    virtual bool wants_op_times() const { return false; }
    virtual void op_timed(std::size_t op_index, double ms) {}
    // Codec sampling: when true, every compression in forward measures its blob's exact size (the
    // tape records it) and reports the tensor through tensor_compressed.
    virtual bool wants_compressed_tensors() const { return false; }
    virtual void tensor_compressed(Backend& backend, const CompressedTensor& tensor) {}
};

}  // namespace adacc
