#include "src/train/stop_signals.h"

#include <csignal>
#include <cstring>
#include <unistd.h>

namespace adacc {

namespace {

volatile std::sig_atomic_t g_received = 0;

void write_stderr(const char* text) {
    if (::write(STDERR_FILENO, text, std::strlen(text)) < 0) {
        // Nothing to do in a signal handler when stderr is gone.
    }
}

// Async-signal-safe: a flag, write(2), and on the second signal the default action.
void on_stop_signal(int signal) {
    if (g_received != 0) {
        std::signal(signal, SIG_DFL);
        std::raise(signal);
        return;
    }
    g_received = signal;
    write_stderr(signal == SIGINT ? "\nadacc: SIGINT received" : "\nadacc: SIGTERM received");
    write_stderr(": finishing this step and writing a checkpoint (send it again to stop at once)\n");
}

}  // namespace

void install_stop_signal_handlers() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // reads and writes in progress continue instead of failing with EINTR
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
}

int stop_signal_received() { return g_received; }

}  // namespace adacc
