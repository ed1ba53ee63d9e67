#include "src/engine/tape.h"

#include <stdexcept>
#include <string>

#include "src/common/units.h"

namespace adacc {

std::size_t tape_aligned(std::size_t bytes) { return align_up(bytes, 64); }

TapeAllocator::TapeAllocator(Backend& backend, std::size_t capacity_bytes, std::size_t max_slots)
    : capacity_(tape_aligned(capacity_bytes)), buffer_(backend, capacity_) {
    base_ = buffer_.as<unsigned char>();
    slots_.reserve(max_slots);
}

void TapeAllocator::account(const TapeSlot& slot, long sign) {
    const std::size_t counted = slot.policy == Policy::recompute ? slot.full_bytes : slot.bytes;
    usage_.by_policy[static_cast<int>(slot.policy)] += sign * static_cast<long>(counted);
    if (slot.measured_bytes) {
        usage_.measured_slots += sign;
        usage_.measured_bytes += sign * static_cast<long>(slot.measured_bytes);
        usage_.measured_reserved += sign * static_cast<long>(slot.bytes);
    }
}

void TapeAllocator::check_fits(int layer, TensorKind kind, std::size_t bytes) const {
    const std::size_t need = tape_aligned(bytes);
    if (usage_.used + need > capacity_)
        throw std::runtime_error("tape overflow: slot " + std::string(tensor_kind_name(kind)) + " of layer " +
                                 std::to_string(layer) + " needs " + std::to_string(need) + " bytes but only " +
                                 std::to_string(capacity_ - usage_.used) + " of " + std::to_string(capacity_) +
                                 " are free");
}

void* TapeAllocator::push(int layer, TensorKind kind, Policy policy, std::size_t bytes, std::size_t full_bytes) {
    check_fits(layer, kind, bytes);
    if (slots_.size() == slots_.capacity())
        throw std::runtime_error("tape: more slots than the " + std::to_string(slots_.capacity()) + " reserved");
    TapeSlot slot{layer, kind, policy, usage_.used, bytes, full_bytes};
    slots_.push_back(slot);
    usage_.used += tape_aligned(bytes);
    account(slot, +1);
    if (usage_.used > peak_.used) peak_ = usage_;
    notify();
    return base_ + slot.offset;
}

void TapeAllocator::set_measured_bytes(int layer, TensorKind kind, std::size_t bytes) {
    const TapeSlot* found = find(layer, kind);
    if (!found || found->policy != Policy::compress)
        throw std::logic_error("tape: set_measured_bytes needs a compressed slot for " +
                               std::string(tensor_kind_name(kind)) + " of layer " + std::to_string(layer));
    TapeSlot& slot = slots_[static_cast<std::size_t>(found - slots_.data())];
    account(slot, -1);
    slot.measured_bytes = bytes;
    account(slot, +1);
    if (usage_.used == peak_.used) peak_ = usage_;
    notify();
}

void TapeAllocator::release_to(const Mark& mark) {
    while (slots_.size() > mark.slots) {
        account(slots_.back(), -1);
        slots_.pop_back();
    }
    usage_.used = mark.used;
    notify();
}

const TapeSlot* TapeAllocator::find(int layer, TensorKind kind) const {
    for (auto it = slots_.rbegin(); it != slots_.rend(); ++it)
        if (it->layer == layer && it->kind == kind) return &*it;
    return nullptr;
}

void TapeAllocator::notify() const {
    if (observer_) observer_(slots_, usage_);
}

}  // namespace adacc
