#include "src/common/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace adacc {

ProgressBar::ProgressBar(std::string label, int width)
    : enabled_(::isatty(STDERR_FILENO) == 1), label_(std::move(label)), width_(width), start_(Clock::now()) {}

void ProgressBar::update(double fraction, const std::function<std::string(double seconds)>& text) {
    const auto now = Clock::now();
    const bool done = fraction >= 1.0;
    if (!enabled_ || (now - last_draw_ < std::chrono::milliseconds(100) && !done)) return;
    last_draw_ = now;
    const int filled = static_cast<int>(std::min(1.0, std::max(0.0, fraction)) * width_);
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r%s [%s%s] %s", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width_ - filled, ' ').c_str(), text(seconds).c_str());
    drawn_ = true;
}

void ProgressBar::finish() {
    if (drawn_) std::fputc('\n', stderr);
}

}  // namespace adacc
