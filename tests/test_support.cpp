#include "tests/test_support.h"

#include <gtest/gtest.h>

#include <random>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "data/token_shard.h"
#include "src/adacc/budget_planner.h"
#include "src/common/errors.h"
#include "src/io/checkpoint_folder.h"

extern char** environ;

namespace adacc::test {

void favour_compression(Profile& profile) {
    for (double& ms : profile.op_ms) ms = 100.0;
    for (auto& t : profile.tensors)
        for (auto& m : t.codecs) m.compress_ms = m.decompress_ms = 0.01;
}

ModelMemory everything_compressed_memory(const GPTConfig& config, int B, int T, const Profile& profile,
                                         const ComputeTarget& target) {
    const BlockGraph block(config, B, T);
    ActivationPlan plan(block, config.n_layer);
    for (int l = 0; l < config.n_layer; ++l)
        for (const auto& t : block.tensors()) plan.set(l, t.kind, {Policy::compress, adacc_codec(t.kind)});
    return GPTModel::plan_memory(config, B, T, plan, codec_params_for(profile, config), ModelUse::training, target);
}

std::vector<int> random_tokens(int n, int vocab, std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<int> t(n);
    for (auto& x : t) x = static_cast<int>(gen() % vocab);
    return t;
}

void write_random_shard(const std::filesystem::path& file, int n, int vocab, std::uint32_t seed) {
    const std::vector<int> ids = random_tokens(n, vocab, seed);
    write_token_shard(file, std::vector<std::uint16_t>(ids.begin(), ids.end()));
}

std::string user_error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const UserError& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a UserError";
    return "";
}

std::filesystem::path shared_data_dir() {
    const std::filesystem::path dir = std::filesystem::path(ADACC_SOURCE_DIR) / ".." / "shared" / "data";
    return std::filesystem::exists(dir) ? std::filesystem::canonical(dir) : std::filesystem::path();
}

std::filesystem::path fixtures_dir() { return std::filesystem::path(ADACC_SOURCE_DIR) / "tests" / "fixtures"; }

std::filesystem::path scratch_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    const auto dir = std::filesystem::temp_directory_path() /
                     ("adacc_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

std::string adacc_binary() {
    // ADACC_TEST_BINARY runs the CLI tests against another build (e.g. an older one, to see a
    // regression test fail there).
    const char* other = std::getenv("ADACC_TEST_BINARY");
    return other && *other ? other : ADACC_BINARY;
}

std::string read_bytes(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

ProcessResult run_adacc(const std::string& args, bool merge_stderr) {
    return run_shell(adacc_binary() + " " + args, merge_stderr);
}

ProcessResult run_shell(const std::string& shell_command, bool merge_stderr, int timeout_s) {
    // coreutils' timeout turns a hang into status 124 instead of a stuck test.
    const std::string command =
        "timeout -k 10 " + std::to_string(timeout_s) + " " + shell_command + (merge_stderr ? " 2>&1" : " 2>/dev/null");
    FILE* pipe = popen(command.c_str(), "r");
    ProcessResult result;
    std::array<char, 4096> buffer;
    while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe))
        result.output.append(buffer.data(), n);
    const int status = pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    // Every command a test runs is also a probe of the error paths: a user's mistake (the only
    // kind a test provokes) must be an "error: ..." naming it, never main()'s last resort.
    if (result.output.find("internal error") != std::string::npos)
        ADD_FAILURE() << "`" << shell_command << "` reached \"internal error\" (status " << result.status
                      << "): a user's mistake must be a UserError naming it and the fix\n"
                      << result.output;
    return result;
}

int spawn_process(const std::vector<std::string>& argv, int stderr_fd) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
    pid_t pid = 0;
    const int failed = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    return failed ? -1 : pid;
}

int wait_process(int pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

int last_logged_step(const std::filesystem::path& run_dir) {
    std::ifstream in(run_dir / "metrics.jsonl");
    int step = 0;
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line, nullptr, false);
        if (!r.is_discarded() && r.contains("loss")) step = r["step"].get<int>();
    }
    return step;
}

std::map<int, double> logged_losses(const std::filesystem::path& run_dir) {
    std::map<int, double> out;
    std::ifstream in(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (r.contains("loss")) out[r["step"].get<int>()] = r["loss"].get<double>();
    }
    return out;
}

std::vector<float> checkpoint_parameters(const std::filesystem::path& run_dir) {
    const CheckpointReader reader(*newest_complete_checkpoint(run_dir));
    std::vector<float> out;
    for (const StoredTensor& t : reader.tensors()) {
        if (t.name.rfind("params/", 0) != 0) continue;
        std::vector<float> values(t.bytes / sizeof(float));
        reader.read_into(t.name, values.data(), t.bytes);
        out.insert(out.end(), values.begin(), values.end());
    }
    return out;
}

std::string mpirun(int ranks) {
    // Under AddressSanitizer the ranks run without its leak checker: Open MPI does not free what
    // MPI_Init allocates, and its plugins are unloaded before the check, so those reports cannot
    // be told apart from ours (the test process itself, and every other test, still check leaks).
    const std::string ranks_without_leak_check = kSanitized ? "-x ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 " : "";
    return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
           "OMPI_MCA_btl_vader_single_copy_mechanism=none "
           "mpirun --oversubscribe -x OMP_NUM_THREADS=1 " +
           ranks_without_leak_check + "-np " + std::to_string(ranks) + " ";
}

std::string mpi_unavailable() {
#ifndef ADACC_HAVE_MPI
    return "this build has no MPI (scripts/install_deps.sh installs libopenmpi-dev; reconfigure)";
#else
    if (run_shell("mpirun --version").status != 0) return "mpirun is not installed (openmpi-bin)";
    return "";
#endif
}

std::filesystem::path write_data_parallel_job(const std::string& tag) {
    const auto dir = scratch_dir(tag);
    std::mt19937 gen(3);
    for (const char* split : {"train", "val"}) {
        std::vector<std::uint16_t> tokens(20000);
        for (auto& t : tokens) t = static_cast<std::uint16_t>(gen() % 97);
        write_token_shard(dir / (std::string(split) + ".bin"), tokens);
    }
    std::ofstream(dir / "job.toml") << "[model]\nn_layer = 2\nn_embd = 32\nn_head = 2\nvocab_size = 97\n"
                                       "max_seq_len = 16\ndropout = 0.0\n"
                                       "[training]\nbatch_size = 2\nseq_len = 16\nsteps = 6\nval_every = 3\n"
                                       "val_batches = 4\nthreads = 1\n"
                                       "[lr]\nmax = 1e-3\nwarmup_steps = 2\n"
                                       "[data]\ntrain = \""
                                    << (dir / "train.bin").string() << "\"\nval = \"" << (dir / "val.bin").string()
                                    << "\"\n[checkpoint]\nevery = 0\n[logging]\nprint_every = 1\n";
    return dir;
}

ProcessResult train_job(const std::string& adacc, const std::filesystem::path& dir, const std::string& run, int ranks,
                        const std::string& sets) {
    const std::string args =
        "train --config " + (dir / "job.toml").string() + " --set logging.run_dir=" + (dir / run).string() + " " + sets;
    return run_shell((ranks == 0 ? std::string() : mpirun(ranks)) + adacc + " " + args);
}

}  // namespace adacc::test
