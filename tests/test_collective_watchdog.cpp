// The collective watchdog (src/dist/collective_watchdog.h) with fake collectives: one that never
// finishes until it is aborted, as a NCCL all-reduce whose peer rank died; ones that finish. The
// bounds are the watchdog's contract: nothing before the timeout, the job ended within a few polls
// after it (a poll is at most a tenth of the timeout), here checked with a generous 30 s ceiling.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "src/dist/collective_watchdog.h"

namespace adacc {
namespace {

using Clock = std::chrono::steady_clock;

// Finishes when `done` is set (by its test, or by the watchdog's abort).
class FakeCollective : public PendingCollective {
public:
    explicit FakeCollective(std::shared_ptr<std::atomic<bool>> done) : done_(std::move(done)) {}
    bool finished() override { return done_->load(); }

private:
    std::shared_ptr<std::atomic<bool>> done_;
};

// What the watchdog did, as its actions saw it.
struct Outcome {
    std::mutex mutex;
    int aborts = 0;
    int ends = 0;
    std::string message;
    Clock::time_point ended;
};

CollectiveWatchdog::Actions recording(Outcome& outcome, std::shared_ptr<std::atomic<bool>> aborted_flag) {
    return {.abort_collectives =
                [&outcome, aborted_flag] {
                    std::lock_guard lock(outcome.mutex);
                    ++outcome.aborts;
                    aborted_flag->store(true);  // as ncclCommAbort makes the stuck collective return
                },
            .end_job =
                [&outcome](const std::string& message) {
                    std::lock_guard lock(outcome.mutex);
                    ++outcome.ends;
                    outcome.message = message;
                    outcome.ended = Clock::now();
                }};
}

bool wait_until(const std::function<bool()>& condition, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!condition()) {
        if (Clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

TEST(CollectiveWatchdog, ACollectiveThatNeverFinishesIsAbortedAndEndsTheJobNamingIt) {
    Outcome outcome;
    auto hung = std::make_shared<std::atomic<bool>>(false);
    const double timeout_s = 0.3;
    CollectiveWatchdog watchdog(timeout_s, recording(outcome, hung));
    const auto queued = Clock::now();
    watchdog.watch("the NCCL all-reduce of 124439808 elements", std::make_unique<FakeCollective>(hung));

    ASSERT_TRUE(wait_until(
        [&] {
            std::lock_guard l(outcome.mutex);
            return outcome.ends > 0;
        },
        std::chrono::seconds(30)))
        << "the watchdog never ended the job";
    std::lock_guard lock(outcome.mutex);
    EXPECT_EQ(outcome.aborts, 1);
    EXPECT_EQ(outcome.ends, 1);
    EXPECT_GE(std::chrono::duration<double>(outcome.ended - queued).count(), timeout_s);
    EXPECT_NE(outcome.message.find("the NCCL all-reduce of 124439808 elements did not finish within 0.3 s"),
              std::string::npos)
        << outcome.message;
    EXPECT_NE(outcome.message.find("training.collective_timeout_s"), std::string::npos) << outcome.message;
    EXPECT_NE(outcome.message.find("--resume"), std::string::npos) << outcome.message;
}

TEST(CollectiveWatchdog, CollectivesThatFinishAreLetGo) {
    Outcome outcome;
    auto never_aborted = std::make_shared<std::atomic<bool>>(false);
    const double timeout_s = 0.5;
    CollectiveWatchdog watchdog(timeout_s, recording(outcome, never_aborted));
    // Three in a row, each finishing well within the timeout though together they take longer:
    // each is timed from when the one before it finished, as on one stream.
    for (int i = 0; i < 3; ++i) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        watchdog.watch("collective " + std::to_string(i), std::make_unique<FakeCollective>(done));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        done->store(true);
    }
    ASSERT_TRUE(wait_until([&] { return watchdog.pending() == 0; }, std::chrono::seconds(30)));
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // past the timeout: still nothing
    std::lock_guard lock(outcome.mutex);
    EXPECT_EQ(outcome.aborts, 0);
    EXPECT_EQ(outcome.ends, 0) << outcome.message;
}

TEST(CollectiveWatchdog, TheHungCollectiveBehindFinishedOnesIsTheOneNamed) {
    Outcome outcome;
    auto hung = std::make_shared<std::atomic<bool>>(false);
    CollectiveWatchdog watchdog(0.3, recording(outcome, hung));
    auto first = std::make_shared<std::atomic<bool>>(true);
    watchdog.watch("the reduce-scatter", std::make_unique<FakeCollective>(first));
    watchdog.watch("the all-gather", std::make_unique<FakeCollective>(hung));
    ASSERT_TRUE(wait_until(
        [&] {
            std::lock_guard l(outcome.mutex);
            return outcome.ends > 0;
        },
        std::chrono::seconds(30)));
    std::lock_guard lock(outcome.mutex);
    EXPECT_EQ(outcome.message.rfind("the all-gather did not finish", 0), 0u) << outcome.message;
}

TEST(CollectiveWatchdog, RefusesATimeoutThatIsNotPositive) {
    Outcome outcome;
    auto flag = std::make_shared<std::atomic<bool>>(false);
    EXPECT_THROW(CollectiveWatchdog(0, recording(outcome, flag)), std::invalid_argument);
}

}  // namespace
}  // namespace adacc
