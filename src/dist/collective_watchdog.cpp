#include "src/dist/collective_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace adacc {

namespace {

// Often enough that a timeout ends the job within a tenth of it, never more than 10 polls a second.
std::chrono::milliseconds poll_interval(double timeout_s) {
    const auto tenth = std::chrono::milliseconds(static_cast<long long>(timeout_s * 100.0));
    return std::clamp(tenth, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
}

}  // namespace

std::string collective_timeout_message(const std::string& what, double timeout_s) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
    return what + " did not finish within " + seconds +
           " s (training.collective_timeout_s): another rank of the job has died or hangs. The collectives "
           "were aborted and the job ends; resume it from its newest checkpoint (adacc train --resume RUN_DIR) on "
           "the healthy ranks, or raise training.collective_timeout_s if this job's collectives are that slow";
}

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, Actions actions)
    : timeout_(timeout_s), poll_(poll_interval(timeout_s)), actions_(std::move(actions)) {
    if (!(timeout_s > 0)) throw std::invalid_argument("CollectiveWatchdog: the timeout must be positive");
    thread_ = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void CollectiveWatchdog::watch(std::string what, std::unique_ptr<PendingCollective> collective) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back({std::move(what), std::move(collective), std::chrono::steady_clock::now()});
    }
    wake_.notify_all();
}

std::size_t CollectiveWatchdog::pending() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
}

// Only this thread pops the queue, so the front stays put while it is polled without the lock
// (a deque's push_back moves no element).
void CollectiveWatchdog::run() {
    std::unique_lock lock(mutex_);
    while (true) {
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        Watched& front = queue_.front();
        lock.unlock();
        const bool finished = front.collective->finished();
        const auto now = std::chrono::steady_clock::now();
        lock.lock();
        if (finished) {
            queue_.pop_front();
            // The next collective runs from now on: the time it waited behind this one is not its own.
            if (!queue_.empty()) queue_.front().queued = std::max(queue_.front().queued, now);
            continue;
        }
        if (now - front.queued > timeout_) {
            const std::string what = front.what;
            lock.unlock();
            time_out(what);
            return;
        }
        wake_.wait_for(lock, poll_, [&] { return stopping_; });
    }
}

void CollectiveWatchdog::time_out(const std::string& what) {
    actions_.abort_collectives();
    actions_.end_job(collective_timeout_message(what, timeout_.count()));
}

}  // namespace adacc
