// A one-line progress bar on stderr ("label [#####     ] text"), redrawn at most ten times a
// second; silent when stderr is not a terminal, so logs do not fill with carriage returns.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace adacc {

class ProgressBar {
public:
    ProgressBar(std::string label, int width);
    // `fraction` in [0, 1]; `text` (called only when the bar is redrawn) follows the bar. A
    // fraction of 1 always draws.
    void update(double fraction, const std::function<std::string(double seconds)>& text);
    // Ends the line if anything was drawn.
    void finish();

private:
    using Clock = std::chrono::steady_clock;
    bool enabled_;
    bool drawn_ = false;
    std::string label_;
    int width_;
    Clock::time_point start_, last_draw_{};
};

}  // namespace adacc
