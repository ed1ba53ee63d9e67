#include "src/adacc/policy_monitor.h"

#include <cmath>
#include <cstdio>

#include "src/common/units.h"

namespace adacc {

PolicyMonitor::PolicyMonitor(MonitorOptions options) : options_(options) {}

void PolicyMonitor::set_baseline(int step, const std::vector<CodecSample>& baseline) {
    baseline_ = baseline;
    last_ = baseline;
    last_replan_ = step;
    interval_ = 1;
    next_sample_ = step + 1;
}

const CodecSample* PolicyMonitor::baseline_for(const CodecSample& sample) const {
    for (const auto& b : baseline_)
        if (b.kind == sample.kind && b.codec == sample.codec) return &b;
    return nullptr;
}

namespace {
double relative_change(double now, double before) { return before > 0 ? (now - before) / before : (now > 0 ? 1.0 : 0.0); }
}  // namespace

bool PolicyMonitor::moved(const std::vector<CodecSample>& sample) const {
    for (const auto& s : sample)
        for (const auto& l : last_)
            if (l.kind == s.kind && l.codec == s.codec &&
                (std::abs(s.outlier_fraction - l.outlier_fraction) > options_.stable_outlier_delta ||
                 std::abs(relative_change(s.relative_error, l.relative_error)) > options_.stable_relative_delta ||
                 std::abs(relative_change(double(s.bytes), double(l.bytes))) > options_.stable_relative_delta))
                return true;
    return false;
}

std::optional<std::string> PolicyMonitor::out_of_tolerance(const std::vector<CodecSample>& sample) const {
    char reason[256];
    for (const auto& s : sample) {
        const char* name = tensor_kind_name(s.kind);
        if (s.relative_error > options_.max_codec_error) {
            std::snprintf(reason, sizeof reason, "%s relative error %.4f (%s) exceeds memory.max_codec_error %.4f",
                          name, s.relative_error, codec_name(s.codec), options_.max_codec_error);
            return reason;
        }
        const CodecSample* b = baseline_for(s);
        if (!b) continue;
        if (s.outlier_cap_reached) {
            std::snprintf(reason, sizeof reason, "%s outlier channels reached the codec's cap (fraction %.4f)", name,
                          s.outlier_fraction);
            return reason;
        }
        if (std::abs(s.outlier_fraction - b->outlier_fraction) > options_.outlier_tolerance) {
            std::snprintf(reason, sizeof reason, "%s outlier fraction %.4f left %.4f +- %.4f", name, s.outlier_fraction,
                          b->outlier_fraction, options_.outlier_tolerance);
            return reason;
        }
        if (relative_change(s.relative_error, b->relative_error) > options_.error_tolerance) {
            std::snprintf(reason, sizeof reason, "%s relative error %.4f exceeds planned %.4f by more than %.0f%%", name,
                          s.relative_error, b->relative_error, 100 * options_.error_tolerance);
            return reason;
        }
        if (relative_change(double(s.bytes), double(b->bytes)) > options_.size_tolerance) {
            std::snprintf(reason, sizeof reason, "%s compressed size %s exceeds planned %s by more than %.0f%%", name,
                          format_bytes(s.bytes).c_str(), format_bytes(b->bytes).c_str(), 100 * options_.size_tolerance);
            return reason;
        }
    }
    return std::nullopt;
}

std::optional<std::string> PolicyMonitor::observe(int step, const std::vector<CodecSample>& sample,
                                                  std::size_t predicted_bytes, std::size_t budget_bytes) {
    // The gap to the next sample is the current interval; a stable sample then doubles it.
    if (moved(sample)) {
        interval_ = 1;
        next_sample_ = step + 1;
    } else {
        next_sample_ = step + interval_;
        interval_ = std::min(interval_ * 2, options_.max_interval);
    }
    last_ = sample;
    std::optional<std::string> reason = out_of_tolerance(sample);
    if (!reason && budget_bytes > 0 && predicted_bytes > budget_bytes)
        reason = "predicted memory " + format_bytes(predicted_bytes) + " exceeds the budget " + format_bytes(budget_bytes);
    if (!reason || step - last_replan_ < options_.min_steps_between_replans) return std::nullopt;
    return reason;
}

}  // namespace adacc
