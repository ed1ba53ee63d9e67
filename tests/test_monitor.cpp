// PolicyMonitor: the exponential backoff schedule, its reset when statistics move, the
// tolerance checks (drift from the plan's statistics, per codec, and memory.max_codec_error) and
// the minimum spacing between re-plans.
#include <gtest/gtest.h>

#include "src/adacc/policy_monitor.h"

namespace adacc {
namespace {

const std::vector<CodecSample> kBaseline = {{TensorKind::ln1, Codec::outlier_int4, 0.01, 0.10, 1000},
                                            {TensorKind::fch, Codec::outlier_int4, 0.00, 0.12, 4000}};

std::vector<int> sampled_steps(PolicyMonitor& monitor, int last_step, const std::vector<CodecSample>& sample) {
    std::vector<int> steps;
    for (int step = 1; step <= last_step; ++step)
        if (monitor.should_sample(step)) {
            steps.push_back(step);
            monitor.observe(step, sample, 0, 0);
        }
    return steps;
}

TEST(PolicyMonitor, BacksOffExponentiallyWhileStableUpToTheCap) {
    MonitorOptions options;
    options.max_interval = 16;
    PolicyMonitor monitor(options);
    monitor.set_baseline(0, kBaseline);
    // Intervals 1, 2, 4, 8, 16, 16, ...: samples at 1, 2, 4, 8, 16, 32, 48, 64.
    EXPECT_EQ(sampled_steps(monitor, 70, kBaseline), (std::vector<int>{1, 2, 4, 8, 16, 32, 48, 64}));
}

TEST(PolicyMonitor, ReturnsToEveryStepWhenStatisticsMove) {
    PolicyMonitor monitor;
    monitor.set_baseline(0, kBaseline);
    EXPECT_EQ(sampled_steps(monitor, 8, kBaseline), (std::vector<int>{1, 2, 4, 8}));
    EXPECT_EQ(monitor.interval(), 16);
    auto moved = kBaseline;
    moved[1].relative_error *= 1.2;  // within tolerance (+50%) but a move (> 5%)
    EXPECT_FALSE(monitor.observe(24, moved, 0, 0));
    EXPECT_EQ(monitor.interval(), 1);
    EXPECT_TRUE(monitor.should_sample(25));
}

TEST(PolicyMonitor, ReplansWhenAStatisticLeavesItsTolerance) {
    MonitorOptions options;
    options.min_steps_between_replans = 10;
    PolicyMonitor monitor(options);
    monitor.set_baseline(100, kBaseline);
    auto drifted = kBaseline;
    drifted[0].outlier_fraction = 0.05;  // +0.04 > 0.02
    EXPECT_FALSE(monitor.observe(105, drifted, 0, 0)) << "too soon after the last plan switch";
    const auto reason = monitor.observe(110, drifted, 0, 0);
    ASSERT_TRUE(reason);
    EXPECT_NE(reason->find("ln1 outlier fraction"), std::string::npos) << *reason;

    auto bigger = kBaseline;
    bigger[1].bytes = 5200;  // +30% > 25%
    EXPECT_NE(monitor.observe(120, bigger, 0, 0)->find("fch compressed size"), std::string::npos);
    auto worse = kBaseline;
    worse[1].relative_error = 0.2;  // +67% > 50%
    EXPECT_NE(monitor.observe(130, worse, 0, 0)->find("fch relative error"), std::string::npos);
    EXPECT_NE(monitor.observe(140, kBaseline, 2000, 1000)->find("exceeds the budget"), std::string::npos);
    auto capped = kBaseline;
    capped[0].outlier_cap_reached = true;
    EXPECT_NE(monitor.observe(145, capped, 0, 0)->find("ln1 outlier channels reached"), std::string::npos);
    EXPECT_FALSE(monitor.observe(150, kBaseline, 900, 1000));
}

TEST(PolicyMonitor, ReplansWhenAnErrorExceedsTheCodecTolerance) {
    MonitorOptions options;
    options.min_steps_between_replans = 0;
    options.max_codec_error = 0.125;
    PolicyMonitor monitor(options);
    monitor.set_baseline(0, kBaseline);
    EXPECT_FALSE(monitor.observe(1, kBaseline, 0, 0));  // 0.10 and 0.12: inside
    auto worse = kBaseline;
    worse[1].relative_error = 0.13;  // +8%: inside the +50% drift tolerance, but beyond 0.125
    const auto reason = monitor.observe(2, worse, 0, 0);
    ASSERT_TRUE(reason);
    EXPECT_NE(reason->find("fch relative error 0.1300 (outlier_int4) exceeds memory.max_codec_error 0.1250"),
              std::string::npos)
        << *reason;
}

TEST(PolicyMonitor, ComparesASampleWithTheBaselineOfTheSameCodec) {
    // ln1 compressed with two codecs in different layers: each sample meets its own baseline.
    MonitorOptions options;
    options.min_steps_between_replans = 0;
    PolicyMonitor monitor(options);
    const std::vector<CodecSample> two = {{TensorKind::ln1, Codec::outlier_int4, 0.01, 0.10, 1000},
                                          {TensorKind::ln1, Codec::group_int4, 0.0, 0.14, 800}};
    monitor.set_baseline(0, two);
    EXPECT_FALSE(monitor.observe(1, two, 0, 0));
    auto worse = two;
    worse[0].relative_error = 0.16;  // +60% over outlier_int4's 0.10 (though below group_int4's 0.14)
    const auto reason = monitor.observe(2, worse, 0, 0);
    ASSERT_TRUE(reason);
    EXPECT_NE(reason->find("ln1 relative error 0.1600 exceeds planned 0.1000"), std::string::npos) << *reason;
}

}  // namespace
}  // namespace adacc
