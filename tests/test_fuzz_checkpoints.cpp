// Fuzz: 200 mutated checkpoints of a trained tiny model fed to the real `adacc train --resume`,
// and alternately to `adacc eval` and `adacc sample` (those two need ../shared/data's GPT-2
// vocabulary and LAMBADA; without it only resume runs, said in a message). Mutations: random bit
// flips anywhere, flips in the header and index, truncations, appended bytes, overwritten ranges,
// and crafted files with valid checksums (metadata out of range or of the wrong type, a stored
// config of another shape, non-finite or reshaped tensors). Every run must end with status 0 or
// 2 ("error: ..."), never a signal, an internal error (3) or a hang; and a run that accepted a
// file must have been given the original tensors it reads (the mutation hit padding, or tensors
// that command does not read: eval and sample read only the parameters).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "src/io/checkpoint_folder.h"
#include "tests/test_support.h"

extern char** environ;

namespace adacc {
namespace {

namespace fs = std::filesystem;

constexpr int kMutations = 200;
constexpr auto kProcessTimeout = std::chrono::seconds(120);

void write_bytes(const fs::path& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

struct Outcome {
    int status = 0;  // exit status, or -signal
    std::string output;
};

// Runs args with a deadline; a run past it is killed and reported as a hang.
Outcome run_with_timeout(const std::vector<std::string>& args, const fs::path& log) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    const auto deadline = std::chrono::steady_clock::now() + kProcessTimeout;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            ADD_FAILURE() << "hang: killed after " << kProcessTimeout.count() << " s: " << args[1];
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), test::read_bytes(log)};
}

// The tensors named `prefix`... a checkpoint file yields through the reader, by name; empty when
// it does not open or one of them fails its checksum.
std::map<std::string, std::string> readable_tensors(const fs::path& file, const std::string& prefix = "") {
    std::map<std::string, std::string> tensors;
    try {
        const CheckpointReader reader(file);
        for (const auto& t : reader.tensors()) {
            if (!t.name.starts_with(prefix)) continue;
            std::string bytes(t.bytes, '\0');
            reader.read_into(t.name, bytes.data(), bytes.size());
            tensors[t.name] = bytes;
        }
    } catch (const std::exception&) {
        return {};
    }
    return tensors;
}

class CheckpointFuzz : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("ckpt_fuzz");
        test::write_random_shard(dir / "train.bin", 4000, 50257, 5);
        std::ofstream(dir / "run.toml") << "[model]\nn_layer = 1\nn_embd = 8\nn_head = 2\nvocab_size = 50257\n"
                                        << "max_seq_len = 16\n[training]\nbatch_size = 2\nseq_len = 8\nsteps = 2\n"
                                        << "threads = 1\n[data]\ntrain = \"" << (dir / "train.bin").string() << "\"\n";
        const auto base = dir / "base";
        ASSERT_EQ(run_with_timeout({test::adacc_binary(), "train", "--config", (dir / "run.toml").string(), "--set",
                                    "logging.run_dir=" + base.string()},
                                   dir / "base.log")
                      .status,
                  0)
            << test::read_bytes(dir / "base.log");
        original_file = checkpoint_path(base, 2);
        original = test::read_bytes(original_file);
        original_tensors = readable_tensors(original_file);
        ASSERT_FALSE(original_tensors.empty());
        const CheckpointReader reader(original_file);
        index_end = 64 + reader.meta().dump().size();  // header + metadata; the table follows
        meta = reader.meta();
        for (const auto& t : reader.tensors()) table.push_back(t);
    }

    // A copy of the checkpoint rewritten with valid checksums: metadata edited, or a tensor changed.
    std::string crafted(std::mt19937& gen) {
        nlohmann::json m = meta;
        std::vector<std::string> data;
        std::vector<CheckpointTensor> tensors;
        for (const auto& t : table) data.push_back(original_tensors.at(t.name));
        for (std::size_t i = 0; i < table.size(); ++i)
            tensors.push_back({table[i].name, table[i].dtype, table[i].shape, data[i].data()});
        const int kind = static_cast<int>(gen() % 12);
        const auto pick = [&](std::initializer_list<nlohmann::json> values) {
            return *(values.begin() + gen() % values.size());
        };
        switch (kind) {
            case 0: m["step"] = pick({1000000000000ll, -1, "2", 2.5, nullptr, 3, 2147483648ll}); break;
            case 1: m["train_data"]["epoch"] = pick({-5, "0", 1.5, nullptr}); break;
            case 2: m["train_data"]["batch"] = pick({1000000, -1, "x", 18446744073709551615ull}); break;
            case 3: {
                const nlohmann::json other_scheme = {{"scheme", "other"}, {"seed", 1337}};
                m["rng"] = pick({nullptr, "counter", nlohmann::json::object(), other_scheme});
                break;
            }
            case 4: m["rng"]["seed"] = pick({1, -1, "1337"}); break;
            case 5: m["config"] = pick({5, "", "[model]\nn_layer = 2\n", "not toml ]]["}); break;
            case 6: {  // the stored config of another shape
                const std::string text = m["config"].get<std::string>(), key = "n_embd = 8";
                const std::size_t at = text.find(key);
                m["config"] = text.substr(0, at) + "n_embd = 16" + text.substr(at + key.size());
                break;
            }
            case 7: m.erase(pick({"step", "train_data", "rng", "config"}).get<std::string>()); break;
            case 8: m = pick({nlohmann::json::array(), 42, "meta"}); break;
            case 9: {  // a non-finite value in a random tensor
                auto& bytes = data[gen() % data.size()];
                const float bad = pick({NAN, INFINITY, -INFINITY}).get<float>();
                std::memcpy(bytes.data() + (gen() % (bytes.size() / 4)) * 4, &bad, 4);
                break;
            }
            case 10: tensors[gen() % tensors.size()].name += "_renamed"; break;
            default: {  // a reshaped tensor (same bytes, other dims)
                auto& t = tensors[gen() % tensors.size()];
                if (t.shape.size() == 2 && t.shape[0] % 2 == 0)
                    t.shape = {t.shape[0] / 2, t.shape[1] * 2};
                else
                    t.shape.insert(t.shape.begin(), 1);
                break;
            }
        }
        const fs::path file = dir / "crafted.bin";
        write_checkpoint(file, m, tensors);
        return test::read_bytes(file);
    }

    std::string mutated(int i, std::mt19937& gen) {
        std::string bytes = original;
        const auto flip = [&](std::size_t lo, std::size_t hi) {
            const std::size_t at = lo + gen() % (hi - lo);
            bytes[at] = static_cast<char>(bytes[at] ^ (1 << (gen() % 8)));
        };
        switch (i % 6) {
            case 0:
                for (int k = 1 + gen() % 8; k > 0; --k) flip(0, bytes.size());
                break;
            case 1: flip(0, std::min<std::size_t>(bytes.size(), index_end + 4096)); break;
            case 2: bytes.resize(gen() % bytes.size()); break;
            case 3: bytes.append(1 + gen() % 200, static_cast<char>(gen())); break;
            case 4: {
                const std::size_t at = gen() % bytes.size(),
                                  n = std::min<std::size_t>(1 + gen() % 64, bytes.size() - at);
                for (std::size_t k = 0; k < n; ++k) bytes[at + k] = static_cast<char>(gen());
                break;
            }
            default: bytes = crafted(gen); break;
        }
        return bytes;
    }

    fs::path dir, original_file;
    std::string original;
    std::map<std::string, std::string> original_tensors;
    std::size_t index_end = 0;
    nlohmann::json meta;
    std::vector<StoredTensor> table;
};

TEST_F(CheckpointFuzz, MutatedCheckpointsAreRefusedCleanlyOrLoadTheOriginalParameters) {
    const fs::path shared = test::shared_data_dir();
    const bool have_text_data = !shared.empty() && fs::exists(shared / "gpt2_tokenizer" / "encoder.json") &&
                                fs::exists(shared / "lambada_openai" / "lambada_test.jsonl");
    if (!have_text_data)
        std::printf("../shared/data (GPT-2 vocab, LAMBADA) not present: eval and sample are not fuzzed, resume is\n");
    std::mt19937 gen(2024);
    std::map<std::string, int> accepted, refused;
    for (int i = 0; i < kMutations; ++i) {
        const std::string bytes = mutated(i, gen);
        const fs::path run = dir / "mutated" / std::to_string(i);
        fs::create_directories(checkpoint_dir(run));
        const fs::path file = checkpoint_path(run, 2);
        write_bytes(file, bytes);
        // What each command reads: resume every tensor, eval and sample the parameters only.
        const auto loaded = readable_tensors(file), loaded_params = readable_tensors(file, "params/");
        const bool same_tensors = !loaded.empty() && loaded == original_tensors;
        const bool same_parameters =
            !loaded_params.empty() && loaded_params == readable_tensors(original_file, "params/");

        std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
            {"resume", {test::adacc_binary(), "train", "--resume", run.string(), "--set", "training.steps=3"}}};
        if (have_text_data && i % 2 == 0)
            commands.push_back({"eval",
                                {test::adacc_binary(), "eval", "--checkpoint", file.string(), "--task", "lambada",
                                 "--data", (shared / "lambada_openai").string(), "--vocab",
                                 (shared / "gpt2_tokenizer").string(), "--limit", "2", "--threads", "1"}});
        if (have_text_data && i % 2 == 1)
            commands.push_back({"sample",
                                {test::adacc_binary(), "sample", "--checkpoint", file.string(), "--vocab",
                                 (shared / "gpt2_tokenizer").string(), "--prompt", "Hello", "--tokens", "2"}});
        for (const auto& [name, args] : commands) {
            // The resumed run writes step 3; each command sees the mutated file as it was.
            write_bytes(file, bytes);
            fs::remove(checkpoint_path(run, 3));
            const Outcome r = run_with_timeout(args, dir / "out.log");
            const std::string what = "mutation " + std::to_string(i) + " (kind " + std::to_string(i % 6) + "), " + name;
            ASSERT_TRUE(r.status == 0 || r.status == 2) << what << ": status " << r.status << "\n" << r.output;
            if (r.status == 2) {
                EXPECT_NE(r.output.find("error: "), std::string::npos) << what << "\n" << r.output;
                ++refused[name];
            } else {
                EXPECT_TRUE(name == "resume" ? same_tensors : same_parameters)
                    << what << " was accepted with altered tensors\n"
                    << r.output;
                ++accepted[name];
            }
        }
        fs::remove_all(run);
    }
    for (const auto& [name, count] : refused)
        std::printf("%s: %d refused, %d accepted (the tensors it reads were intact)\n", name.c_str(), count,
                    accepted[name]);
    EXPECT_GT(refused["resume"], kMutations / 2);
}

}  // namespace
}  // namespace adacc
