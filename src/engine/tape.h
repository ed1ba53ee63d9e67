// TapeAllocator (docs/design.md, 'The tape'): the one buffer holding every activation backward
// needs, in a backend's memory. Forward pushes slots in the form their policy says (full tensor,
// compressed blob reserved at its codec's upper bound, or a zero-byte record for a recomputed
// tensor), in the order of the model's tape schedule (src/engine/model_layout.h); backward releases
// a block's slots after its backward, so the tape is a stack and never fragments. Slot offsets are
// 64-byte aligned. The accounting lives on the host and is exact: reserved bytes per policy at the
// peak, and the exact size of the compressed slots whose blobs were measured (the monitor's sampled
// steps) — what compare and the tests read. No size is ever read back from the device.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <vector>

#include "src/engine/activation_plan.h"
#include "src/engine/backend.h"

namespace adacc {

struct TapeSlot {
    int layer = 0;
    TensorKind kind = TensorKind::x;
    Policy policy = Policy::keep;
    std::size_t offset = 0;          // from the tape's start, multiple of 64
    std::size_t bytes = 0;           // bytes reserved (0 for recompute; a compressed blob's bound)
    std::size_t full_bytes = 0;      // the tensor's uncompressed size
    std::size_t measured_bytes = 0;  // compressed: the blob's exact size once measured, else 0
};

struct TapeUsage {
    std::size_t used = 0;  // aligned bytes, including padding between slots
    std::array<std::size_t, 3>
        by_policy{};  // reserved slot bytes (unaligned) per Policy; recompute: full bytes not stored
    // Compressed slots whose exact size was measured: how many, their exact and reserved bytes.
    std::size_t measured_slots = 0, measured_bytes = 0, measured_reserved = 0;
};

class TapeAllocator {
public:
    // Capacity rounded up to 64 bytes, in `backend`'s memory; room for `max_slots` slot records
    // (a step's tape entries, ModelLayout::max_tape_entries), so pushing never reallocates.
    TapeAllocator(Backend& backend, std::size_t capacity_bytes, std::size_t max_slots);

    struct Mark {
        std::size_t used = 0, slots = 0;
    };
    Mark mark() const { return {usage_.used, slots_.size()}; }

    // A slot of `bytes` at the top; returns its memory (64-byte aligned). Throws
    // std::runtime_error naming the tensor and the capacity when it does not fit.
    void* push(int layer, TensorKind kind, Policy policy, std::size_t bytes, std::size_t full_bytes);
    // Records the exact size of the compressed blob in the newest slot of (layer, kind), which must
    // be compressed (not always the top one: a fused kernel's later outputs may sit above it).
    void set_measured_bytes(int layer, TensorKind kind, std::size_t bytes);
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
    Arena buffer_;
    unsigned char* base_ = nullptr;
    std::vector<TapeSlot> slots_;
    TapeUsage usage_, peak_;
    std::function<void(const std::vector<TapeSlot>&, const TapeUsage&)> observer_;
};

// Bytes a slot of `bytes` occupies on the tape (rounded up to the 64-byte alignment).
std::size_t tape_aligned(std::size_t bytes);

}  // namespace adacc
