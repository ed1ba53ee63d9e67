#include "src/train/rank_agreement.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/token_shard.h"
#include "src/common/checksum.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/config/config.h"
#include "src/dist/process_group.h"
#include "src/io/checkpoint_file.h"

namespace adacc {

namespace {

// What must be equal on every rank, as named text.
using RunFacts = std::vector<std::pair<std::string, std::string>>;

// Every resolved key, as the config table prints it ("section.key  value").
void add_config_facts(const RunConfig& config, RunFacts& facts) {
    std::istringstream table(format_config_table(config));
    for (std::string line; std::getline(table, line);) {
        const auto key_end = line.find(' ');
        facts.emplace_back(line.substr(0, key_end), line.substr(line.find_first_not_of(' ', key_end)));
    }
}

// A checkpoint is known by its tensors' checksums (verified as they are read).
std::string checkpoint_digest(const CheckpointReader& reader) {
    Fnv64 digest;
    for (const auto& tensor : reader.tensors()) digest.update(&tensor.checksum, sizeof tensor.checksum);
    return format_name(WeightsFormat::adacc_checkpoint) + ", digest " + format_digest(digest.value());
}

// llm.c and Hugging Face weights have no checksums: their bytes are hashed (once per job; ~1 s
// per GB), file after file.
void hash_file(const std::filesystem::path& path, Fnv64& digest) {
    const ReadOnlyFile file(path);
    std::vector<char> chunk(std::size_t{8} << 20);  // a multiple of 8, as Fnv64 needs
    for (std::uint64_t offset = 0; offset < file.size(); offset += chunk.size()) {
        const std::size_t bytes = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), file.size() - offset));
        if (!file.read_at(offset, chunk.data(), bytes))
            throw UserError(quoted(path) + " became shorter while it was read; is another process writing it?");
        const std::uint64_t padded = (bytes + 7) / 8 * 8;  // every file but the last ends on a whole word
        std::fill(chunk.begin() + static_cast<std::ptrdiff_t>(bytes),
                  chunk.begin() + static_cast<std::ptrdiff_t>(padded), 0);
        digest.update(chunk.data(), padded);
    }
}

// A Hugging Face folder is its config.json and its .safetensors files, in name order.
std::string weights_files_digest(const WeightsFile& weights) {
    std::vector<std::filesystem::path> files{weights.path};
    if (weights.format == WeightsFormat::hf_model) {
        files.clear();
        for (const auto& entry : std::filesystem::directory_iterator(weights.path))
            if (entry.path().extension() == ".safetensors" || entry.path().filename() == "config.json")
                files.push_back(entry.path());
        std::sort(files.begin(), files.end());
    }
    Fnv64 digest;
    for (const auto& file : files) hash_file(file, digest);
    return format_name(weights.format) + ", digest " + format_digest(digest.value());
}

std::string weights_fact(const std::optional<std::filesystem::path>& resume_checkpoint,
                         const std::optional<WeightsFile>& init_from) {
    if (resume_checkpoint) return checkpoint_digest(CheckpointReader(*resume_checkpoint));
    if (!init_from) return "initialised from training.seed";
    if (init_from->checkpoint) return checkpoint_digest(*init_from->checkpoint);
    return weights_files_digest(*init_from);
}

// A data split's files, by number and size (their names are the config's pattern). A pattern
// that matches nothing is left to the trainer's own error, on every rank alike.
std::string data_fact(const std::string& pattern) {
    std::vector<std::filesystem::path> files;
    try {
        files = expand_shard_pattern(pattern);
    } catch (const UserError&) {
        return "no files";
    }
    Fnv64 sizes;
    std::uint64_t total = 0;
    for (const auto& file : files) {
        const std::uint64_t bytes = std::filesystem::file_size(file);
        sizes.update(&bytes, sizeof bytes);
        total += bytes;
    }
    return std::to_string(files.size()) + " files, " + std::to_string(total) + " bytes in all, sizes digest " +
           format_digest(sizes.value());
}

// Every resolved config key, the starting weights' digest and the data files.
RunFacts run_facts(const RunConfig& config, const std::optional<std::filesystem::path>& resume_checkpoint,
                   const std::optional<WeightsFile>& init_from) {
    RunFacts facts;
    add_config_facts(config, facts);
    facts.emplace_back("weights", weights_fact(resume_checkpoint, init_from));
    facts.emplace_back("data.train files", data_fact(config.data.train));
    if (!config.data.val.empty()) facts.emplace_back("data.val files", data_fact(config.data.val));
    return facts;
}

// The facts of `mine` that differ from rank 0's, one "\n  name: X on rank 0, Y on rank R" line
// each, the first `limit` of them; empty when they agree.
std::string describe_differences(const RunFacts& root, const RunFacts& mine, int rank, std::size_t limit = 6) {
    const std::map<std::string, std::string> at_root(root.begin(), root.end());
    std::string lines;
    std::size_t found = 0;
    for (const auto& [name, value] : mine) {
        const auto it = at_root.find(name);
        const std::string root_value = it == at_root.end() ? "(none)" : it->second;
        if (root_value == value) continue;
        if (found++ < limit)
            lines += "\n  " + name + ": " + root_value + " on rank 0, " + value + " on rank " + std::to_string(rank);
    }
    if (found > limit) lines += "\n  ... and " + std::to_string(found - limit) + " more";
    return lines;
}

}  // namespace

void require_ranks_agree(const RunConfig& config, const std::optional<std::filesystem::path>& resume_checkpoint,
                         const std::optional<WeightsFile>& init_from) {
    const ProcessGroup& group = process_group();
    if (group.world_size == 1) return;
    const RunFacts mine = run_facts(config, resume_checkpoint, init_from);
    std::string text = group.is_root() ? nlohmann::json(mine).dump() : std::string();
    broadcast_text(text, 0);
    const std::string differences = describe_differences(nlohmann::json::parse(text).get<RunFacts>(), mine, group.rank);
    if (all_reduce_max(differences.empty() ? 0 : 1) == 0) return;
    if (!differences.empty())
        throw UserError("this rank was given another run than rank 0:" + differences +
                        "\nevery rank of a job must train the same config, weights and data: give them the same "
                        "--config, --set, --init-from and data files");
    // A rank that agrees waits here for the one that differs to end the job with its message.
    all_reduce_max(0);
    throw UserError("another rank was given another run than rank 0 (its message says how)");
}

}  // namespace adacc
