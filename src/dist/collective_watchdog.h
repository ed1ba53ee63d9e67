// A watchdog over a device's collectives (docs/distributed.md, 'A rank that dies'). A rank that
// dies or hangs leaves the others waiting inside a NCCL collective on the GPU, where no launcher
// sees them: the job would burn its GPU hours until its time limit. The backend hands each
// collective it queues to the watchdog, whose thread polls them in queue order; one still pending
// after the timeout (training.collective_timeout_s) is aborted (ncclCommAbort, which lets the
// stuck kernel and the thread waiting for it return) and the job is ended with a message that
// names the collective and the setting.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace adacc {

// One queued collective, as the watchdog sees it: whether it has finished (polled from the
// watchdog's thread). Destroyed once it has (a CUDA event is released then).
class PendingCollective {
public:
    virtual ~PendingCollective() = default;
    virtual bool finished() = 0;
};

class CollectiveWatchdog {
public:
    struct Actions {
        std::function<void()> abort_collectives;          // makes every pending collective return
        std::function<void(const std::string&)> end_job;  // given the message; need not return
    };
    // `timeout_s` > 0: how long one collective may stay pending.
    CollectiveWatchdog(double timeout_s, Actions actions);
    ~CollectiveWatchdog();  // stops watching (a collective still pending is no longer timed)
    CollectiveWatchdog(const CollectiveWatchdog&) = delete;
    CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

    // `what` names it in the message ("the all-reduce of 124439808 floats"); collectives finish
    // in the order they are queued, as on one stream.
    void watch(std::string what, std::unique_ptr<PendingCollective> collective);
    // How many collectives are still pending (the tests' view of the queue).
    std::size_t pending() const;

private:
    struct Watched {
        std::string what;
        std::unique_ptr<PendingCollective> collective;
        std::chrono::steady_clock::time_point queued;
    };
    void run();
    void time_out(const std::string& what);

    const std::chrono::duration<double> timeout_;
    const std::chrono::milliseconds poll_;
    Actions actions_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Watched> queue_;
    bool stopping_ = false;
    std::thread thread_;  // last: started once the rest is ready
};

// The message the job ends with when `what` has not finished within `timeout_s`.
std::string collective_timeout_message(const std::string& what, double timeout_s);

}  // namespace adacc
