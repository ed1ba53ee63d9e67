// TapeAllocator (DESIGN §4): the one buffer holding every activation backward needs. Forward
// pushes slots in the form their policy says (full tensor, compressed blob, or a zero-byte
// record for a recomputed tensor); backward releases a block's slots after its backward, so the
// tape is a stack and never fragments. Slot offsets are 64-byte aligned. The accounting (peak,
// bytes by policy and by tensor kind at the peak) is exact: it is what compare and the tests read.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "src/activation_plan.h"

namespace adacc {

// Layer index of the tensors outside the blocks: the embedding dropout mask and the final
// layernorm's input/output/statistics.
constexpr int kEmbeddingLayer = -1;

struct TapeSlot {
    int layer = 0;
    TensorKind kind = TensorKind::x;
    Policy policy = Policy::keep;
    std::size_t offset = 0;      // from the tape's start, multiple of 64
    std::size_t bytes = 0;       // bytes the slot holds (0 for recompute)
    std::size_t full_bytes = 0;  // the tensor's uncompressed size
};

struct TapeUsage {
    std::size_t used = 0;  // aligned bytes, including padding between slots
    std::array<std::size_t, 3> by_policy{};  // slot bytes (unaligned) per Policy; recompute: full bytes not stored
    std::array<std::size_t, kNumTensorKinds> by_kind{};  // slot bytes per tensor kind
};

class TapeAllocator {
public:
    explicit TapeAllocator(std::size_t capacity_bytes);

    struct Mark {
        std::size_t used = 0, slots = 0;
    };
    Mark mark() const { return {usage_.used, slots_.size()}; }

    // A slot of `bytes` at the top; returns its memory (64-byte aligned). Throws
    // std::runtime_error naming the tensor and the capacity when it does not fit.
    void* push(int layer, TensorKind kind, Policy policy, std::size_t bytes, std::size_t full_bytes);
    // The free memory at the top, checked to hold `bytes`: a compressor writes its blob here
    // (its exact size known only afterwards), then push() claims exactly that many bytes at the
    // same address.
    void* top(int layer, TensorKind kind, std::size_t bytes) const;
    // Drops every slot pushed after `mark`.
    void release_to(const Mark& mark);
    // The slot for (layer, kind), searching from the top; null when absent.
    const TapeSlot* find(int layer, TensorKind kind) const;
    void* data(const TapeSlot& slot) const { return base_ + slot.offset; }

    std::size_t capacity() const { return capacity_; }
    const TapeUsage& usage() const { return usage_; }
    // The usage at the highest `used` seen since the last reset_peak().
    const TapeUsage& peak() const { return peak_; }
    void reset_peak() { peak_ = usage_; }
    // Test instrumentation: called after every push and release with the slots and usage.
    void set_observer(std::function<void(const std::vector<TapeSlot>&, const TapeUsage&)> observer) {
        observer_ = std::move(observer);
    }

private:
    void account(const TapeSlot& slot, long sign);
    void check_fits(int layer, TensorKind kind, std::size_t bytes) const;
    void notify() const;

    std::size_t capacity_;
    unsigned char* base_ = nullptr;
    std::vector<TapeSlot> slots_;
    TapeUsage usage_, peak_;
    std::function<void(const std::vector<TapeSlot>&, const TapeUsage&)> observer_;

    struct Free {
        void operator()(unsigned char* p) const;
    };
    std::unique_ptr<unsigned char, Free> buffer_;
};

// Bytes a slot of `bytes` occupies on the tape (rounded up to the 64-byte alignment).
std::size_t tape_aligned(std::size_t bytes);

}  // namespace adacc
