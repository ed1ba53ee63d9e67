// SIGTERM and SIGINT (Slurm preemption, Ctrl-C) during training: the first one asks the trainer
// to finish the current step, write a checkpoint and exit with status 128 + signal (143 for
// SIGTERM, 130 for SIGINT: what shells and schedulers report for that signal, so job scripts
// see a preempted run); a second one ends the process at once with the default action.
#pragma once

namespace adacc {

// Installs the handlers (idempotent). Until then the signals keep their default action.
void install_stop_signal_handlers();

// The signal received since installation, or 0.
int stop_signal_received();

// The exit status for a run stopped by `signal`.
inline int exit_status_for_signal(int signal) { return 128 + signal; }

}  // namespace adacc
