// Mutated token shards through the real `adacc train`: 100 corruptions of a valid shard (bit
// flips, header fields, truncations, appended bytes, ids beyond the vocabulary), from a fixed
// seed. Each run must end with status 0 or 2 ("error: ..."), never a signal, an internal error
// (3) or a hang; it is accepted exactly when the mutated file is still a valid shard (as
// read_token_shard and validate_tokens see it) with enough tokens for a batch.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "data/token_shard.h"
#include "src/common/errors.h"
#include "tests/test_support.h"

extern char** environ;

namespace adacc {
namespace {

constexpr std::uint32_t kVocab = 97;
constexpr std::size_t kBatchTokens = 2 * 8 + 1;  // batch_size 2 x seq_len 8, plus the last target
constexpr int kCases = 100;
constexpr auto kRunLimit = std::chrono::seconds(60);

void write_file(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

void set_int32(std::string& file, std::size_t offset, std::int32_t value) {
    if (offset + sizeof value <= file.size()) std::memcpy(file.data() + offset, &value, sizeof value);
}

// One corruption of `file` (a valid shard), chosen by `random`; `what` says which.
std::string mutate(std::string file, std::mt19937& random, std::string& what) {
    const auto below = [&](std::size_t bound) { return static_cast<std::size_t>(random() % bound); };
    const auto tokens = (file.size() - kTokenShardHeaderBytes) / 2;
    switch (below(8)) {
        case 0: {
            const std::size_t bit = below(file.size() * 8);
            file[bit / 8] = static_cast<char>(file[bit / 8] ^ (1 << (bit % 8)));
            what = "flip bit " + std::to_string(bit);
            break;
        }
        case 1: {  // magic, version or count
            const std::size_t bit = below(12 * 8);
            file[bit / 8] = static_cast<char>(file[bit / 8] ^ (1 << (bit % 8)));
            what = "flip header bit " + std::to_string(bit);
            break;
        }
        case 2: {
            const std::int32_t n = static_cast<std::int32_t>(tokens);
            const std::int32_t counts[] = {0,
                                           -1,
                                           n - 1,
                                           n + 1,
                                           2 * n,
                                           std::numeric_limits<std::int32_t>::max(),
                                           std::numeric_limits<std::int32_t>::min(),
                                           static_cast<std::int32_t>(random())};
            const std::int32_t count = counts[below(std::size(counts))];
            set_int32(file, 8, count);
            what = "token count " + std::to_string(count);
            break;
        }
        case 3: {
            const std::size_t size = below(file.size());
            file.resize(size);
            what = "truncate to " + std::to_string(size) + " bytes";
            break;
        }
        case 4: {
            const std::size_t extra = 1 + below(64);
            for (std::size_t i = 0; i < extra; ++i) file.push_back(static_cast<char>(random()));
            what = "append " + std::to_string(extra) + " bytes";
            break;
        }
        case 5: {
            const std::size_t position = below(tokens);
            const auto id = static_cast<std::uint16_t>(kVocab + below(65536 - kVocab));
            std::memcpy(file.data() + kTokenShardHeaderBytes + 2 * position, &id, sizeof id);
            what = "token " + std::to_string(position) + " = " + std::to_string(id);
            break;
        }
        case 6: {  // a consistent shorter shard: valid, but maybe too small for a batch
            const std::size_t count = below(tokens + 1);
            set_int32(file, 8, static_cast<std::int32_t>(count));
            file.resize(kTokenShardHeaderBytes + 2 * count);
            what = "cut to " + std::to_string(count) + " tokens";
            break;
        }
        default: {  // the header's unused fields are ignored, as llm.c ignores them
            const std::size_t offset = 12 + below(kTokenShardHeaderBytes - 12);
            file[offset] = static_cast<char>(random());
            what = "header byte " + std::to_string(offset);
            break;
        }
    }
    return file;
}

// Whether `adacc train` should accept the shard: it reads, holds only ids below the vocabulary
// and has enough tokens for one batch.
bool usable(const std::filesystem::path& shard) {
    try {
        const std::vector<std::uint16_t> tokens = read_token_shard(shard);
        validate_tokens(tokens, kVocab, shard);
        return tokens.size() >= kBatchTokens;
    } catch (const UserError&) {
        return false;
    }
}

struct Case {
    std::filesystem::path dir;
    std::string mutation;
    bool usable = false;
    pid_t pid = 0;
    std::chrono::steady_clock::time_point started;
};

// Starts `adacc train` on the case's shard; false if it could not be started.
bool start(Case& c) {
    std::ofstream(c.dir / "run.toml") << "[model]\nn_layer = 1\nn_embd = 16\nn_head = 2\nvocab_size = " << kVocab
                                      << "\nmax_seq_len = 8\n[training]\nbatch_size = 2\nseq_len = 8\nsteps = 2\n"
                                      << "threads = 1\n[data]\ntrain = \"" << (c.dir / "shard.bin").string()
                                      << "\"\n[logging]\nrun_dir = \"" << (c.dir / "run").string() << "\"\n";
    std::string binary = test::adacc_binary(), train = "train", flag = "--config",
                config = (c.dir / "run.toml").string();
    char* argv[] = {binary.data(), train.data(), flag.data(), config.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, (c.dir / "output").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    const int error = posix_spawn(&c.pid, argv[0], &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    c.started = std::chrono::steady_clock::now();
    EXPECT_EQ(error, 0) << "cannot start " << binary << ": " << std::strerror(error);
    return error == 0;
}

// The exit status once `c` ends (-signal for a signal), or nullopt while it runs; a run past
// kRunLimit is killed and reported as a hang.
std::optional<int> exit_status(Case& c) {
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() - c.started < kRunLimit) return std::nullopt;
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &status, 0);
        ADD_FAILURE() << c.mutation << ": still running after " << kRunLimit.count() << " s (killed)";
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(FuzzShards, MutatedShardsAreAcceptedOrRefusedCleanly) {
    if (!std::filesystem::exists(test::adacc_binary())) GTEST_SKIP() << "the adacc executable is not built";
    const auto root = test::scratch_dir("fuzz_shards");
    std::mt19937 random(20240520);
    std::vector<std::uint16_t> tokens(64);
    for (auto& t : tokens) t = static_cast<std::uint16_t>(random() % kVocab);
    write_token_shard(root / "valid.bin", tokens);
    const std::string valid = test::read_bytes(root / "valid.bin");

    std::vector<Case> cases(kCases);
    for (int i = 0; i < kCases; ++i) {
        Case& c = cases[static_cast<std::size_t>(i)];
        c.dir = root / std::to_string(i);
        std::filesystem::create_directory(c.dir);
        write_file(c.dir / "shard.bin", mutate(valid, random, c.mutation));
        c.usable = usable(c.dir / "shard.bin");
    }

    // Two runs at a time (ctest runs two test processes on two cores as well).
    int accepted = 0, refused = 0;
    std::size_t next = 0;
    std::vector<Case*> running;
    while (next < cases.size() || !running.empty()) {
        while (running.size() < 2 && next < cases.size()) {
            if (start(cases[next])) running.push_back(&cases[next]);
            ++next;
        }
        for (auto it = running.begin(); it != running.end();) {
            Case& c = **it;
            const std::optional<int> status = exit_status(c);
            if (!status) {
                ++it;
                continue;
            }
            const std::string output = test::read_bytes(c.dir / "output");
            const std::string label = c.mutation + " (" + c.dir.string() + "):\n" + output;
            EXPECT_TRUE(*status == 0 || *status == 2) << "status " << *status << " (-N: signal N) after " << label;
            if (*status == 0) ++accepted;
            if (*status == 2) {
                ++refused;
                EXPECT_NE(output.find("error: "), std::string::npos) << label;
            }
            EXPECT_EQ(*status == 0, c.usable)
                << (c.usable ? "a usable shard was refused: " : "a bad shard was accepted: ") << label;
            it = running.erase(it);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::printf("%d mutated shards: %d accepted, %d refused\n", kCases, accepted, refused);
    EXPECT_GT(accepted, 0);  // the mix covers both outcomes
    EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace adacc
