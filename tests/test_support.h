// Small helpers shared by the tests: where the shared data lives, scratch directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "src/adacc/profiler.h"
#include "src/engine/gpt_model.h"

namespace adacc::test {

// Whether this test binary runs under AddressSanitizer (scripts/test.sh --sanitize): its code is
// ~10x slower there, so a test that needs long steps takes smaller ones, and its records differ.
// The tests' own sources compile uninstrumented (CMakeLists.txt: ADACC_TEST_CODE), so the build
// says so with ADACC_TESTS_SANITIZED.
#if defined(ADACC_TESTS_SANITIZED) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// n token ids uniform in [0, vocab) from a fixed seed (std::mt19937: the same ids on every machine).
std::vector<int> random_tokens(int n, int vocab, std::uint32_t seed);
// A token shard (llm.c's format) at `file` of those n ids: the tiny runs' training data.
void write_random_shard(const std::filesystem::path& file, int n, int vocab, std::uint32_t seed);

// Every arena of a training model of (config, B, T) whose every saved tensor, in every layer, is
// compressed by the Adacc paper's codec for it (codec parameters from `profile`), as `target`
// allocates it: 4 KiB more is a budget under which the planner must compress nearly everything.
ModelMemory everything_compressed_memory(const GPTConfig& config, int B, int T, const Profile& profile,
                                         const ComputeTarget& target = {});

// Sets `profile`'s times so that recomputing is expensive (100 ms per op) and compressing cheap
// (0.01 ms): the planner then compresses whatever the budget needs, deterministically, whatever
// this machine's timings were.
void favour_compression(Profile& profile);

// The UserError message of `action`, or a test failure (and "") when it throws none.
std::string user_error_of(const std::function<void()>& action);

// ../shared/data beside the checkout; empty path when it is not there (tests then GTEST_SKIP).
std::filesystem::path shared_data_dir();
// tests/fixtures inside the source tree.
std::filesystem::path fixtures_dir();
// A fresh empty directory under the system temp dir, unique per call.
std::filesystem::path scratch_dir(const std::string& tag);
// The whole of `file`'s bytes ("" when it cannot be read: the caller's assertions then say so).
std::string read_bytes(const std::filesystem::path& file);
// Path of the built `adacc` executable (for tests that run the CLI as a process); the
// environment variable ADACC_TEST_BINARY, when set, names another one.
std::string adacc_binary();

// A finished process: its exit status (or -signal when a signal ended it) and its stdout+stderr.
struct ProcessResult {
    int status = 0;
    std::string output;
};
// Runs shell `command` capturing stdout and stderr (or stdout alone, stderr discarded); a run past
// `timeout_s` seconds is killed and reports status 124. An output holding "internal error"
// (main()'s last resort) fails the calling test: every command a test runs is a user's command.
ProcessResult run_shell(const std::string& command, bool merge_stderr = true, int timeout_s = 600);
// run_shell of `adacc ARGS` (ARGS is shell text).
ProcessResult run_adacc(const std::string& args, bool merge_stderr = true);

// Starts argv[0] with `argv` (no shell), stdout to /dev/null and stderr to `stderr_fd` when >= 0
// (else inherited); for tests that signal or kill the process while it runs.
int spawn_process(const std::vector<std::string>& argv, int stderr_fd = -1);
// Waits for it: its exit status, or -signal when a signal ended it.
int wait_process(int pid);

// The step of the last training-step record in RUN_DIR/metrics.jsonl (0 when none; a line cut
// short by a kill is skipped): how tests see a live run's progress.
int last_logged_step(const std::filesystem::path& run_dir);
// Every training step's loss in RUN_DIR/metrics.jsonl, by step.
std::map<int, double> logged_losses(const std::filesystem::path& run_dir);
// The parameters ("params/...", in file order) of RUN_DIR's newest complete checkpoint.
std::vector<float> checkpoint_parameters(const std::filesystem::path& run_dir);

// ---- data parallelism (mpirun) ----------------------------------------------------------------
// `mpirun` as the tests run it: `ranks` processes on however many cores there are, one OpenMP
// thread each, allowed to run as root (CI containers are), quiet about the container's network;
// the command follows.
std::string mpirun(int ranks);
// Why this build or machine cannot run the mpirun tests ("" when it can).
std::string mpi_unavailable();
#define ADACC_REQUIRE_MPI()                                                                   \
    do {                                                                                      \
        const std::string why_no_mpi = ::adacc::test::mpi_unavailable();                      \
        if (!why_no_mpi.empty()) GTEST_SKIP() << "data parallelism untested: " << why_no_mpi; \
    } while (0)
// Token shards (train.bin, val.bin: 20000 ids below 97 each) and JOB.toml, a tiny model's 6-step
// job on them (batch 2 x 16, validation every 3 steps, no checkpoints: runs set what they vary
// with --set), in a fresh scratch directory.
std::filesystem::path write_data_parallel_job(const std::string& tag);
// `ADACC train` of that job into DIR/RUN on `ranks` processes (0: without mpirun), with `sets`
// (shell text); ADACC is the adacc executable to run.
ProcessResult train_job(const std::string& adacc, const std::filesystem::path& dir, const std::string& run, int ranks,
                        const std::string& sets);

}  // namespace adacc::test
