// The include graph of the sources runs downward only: every #include "src/...", "kernels/...",
// "models/..." or "data/..." line of a file under src/, kernels/, models/ or data/ names a file of
// its own layer or of a lower one, by the table below. So the run config stops at train/ and cli/
// (no engine, io, eval or adacc file reads src/config), io knows nothing of training, and a lower
// layer never needs a higher one to build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// Layers, lowest first. A file may include files of its own layer and of lower ranks; layers of
// one rank do not include each other.
//
// src/dist/process_group.h is its own layer below the engine: the job's ranks and the collectives'
// declarations, with Backend only forward-declared, so the engine may ask which rank it is
// (src/engine/model_layout.cpp: a ZeRO-1 rank's optimizer shard). Its implementation and the rest
// of src/dist run the collectives on the engine's Backend and the model: above the engine.
// models/ sits above kernels/: the op table names the kernels each op runs and calls them
// (models/op_table.h), and a backend's supports() is asked about those.
const std::map<std::string, int>& layer_ranks() {
    static const std::map<std::string, int> ranks = {
        {"src/common", 0}, {"kernels", 1},    {"data", 1},      {"models", 2},   {"src/dist/process_group.h", 3},
        {"src/engine", 4}, {"src/dist", 5},   {"src/io", 5},    {"src/eval", 5}, {"src/adacc", 6},
        {"src/cuda", 6},   {"src/config", 7}, {"src/train", 8}, {"src/cli", 9},
    };
    return ranks;
}

// The layer a source path (relative to the checkout) belongs to: a file named in the table, else
// its folder (src/<folder>, or the top-level folder).
std::string layer_of(const std::string& path) {
    if (layer_ranks().contains(path)) return path;
    const auto slash = path.find('/');
    if (path.starts_with("src/")) return path.substr(0, path.find('/', slash + 1));
    return path.substr(0, slash);
}

struct Include {
    std::string file;  // the including file
    int line = 0;
    std::string target;  // the included path
};

std::vector<Include> project_includes(const fs::path& root) {
    static const std::regex include_line(R"(^\s*#\s*include\s+"((?:src|kernels|models|data)/[^"]+)\")");
    std::vector<Include> out;
    for (const char* top : {"src", "kernels", "models", "data"}) {
        for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
            const auto ext = entry.path().extension();
            if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
            const std::string file = fs::relative(entry.path(), root).generic_string();
            std::ifstream in(entry.path());
            std::string text;
            for (int line = 1; std::getline(in, text); ++line) {
                std::smatch match;
                if (std::regex_search(text, match, include_line)) out.push_back({file, line, match[1]});
            }
        }
    }
    return out;
}

// Empty when the include runs to the file's own layer or down; else why it may not.
std::string layering_problem(const Include& include) {
    const std::string from = layer_of(include.file), to = layer_of(include.target);
    if (from == to) return "";
    const auto from_rank = layer_ranks().find(from), to_rank = layer_ranks().find(to);
    if (from_rank == layer_ranks().end()) return "the layer table has no layer " + from;
    if (to_rank == layer_ranks().end()) return "the layer table has no layer " + to;
    if (to_rank->second < from_rank->second) return "";
    return from + " (rank " + std::to_string(from_rank->second) + ") may not include " + to + " (rank " +
           std::to_string(to_rank->second) + ")";
}

TEST(IncludeLayers, EveryIncludeRunsDownTheLayerTable) {
    const auto includes = project_includes(ADACC_SOURCE_DIR);
    ASSERT_GT(includes.size(), 100u) << "found too few includes under " << ADACC_SOURCE_DIR;
    for (const Include& include : includes) {
        const std::string problem = layering_problem(include);
        EXPECT_TRUE(problem.empty()) << include.file << ":" << include.line << " includes " << include.target << ": "
                                     << problem;
    }
}

TEST(IncludeLayers, TheRulesOfTheTableHold) {
    const auto rank = [](const std::string& layer) { return layer_ranks().at(layer); };
    EXPECT_LT(rank("src/engine"), rank("src/train"));
    EXPECT_LT(rank("src/io"), rank("src/train"));
    for (const char* below_config : {"src/engine", "src/io", "src/eval", "src/adacc"})
        EXPECT_LT(rank(below_config), rank("src/config")) << below_config;
    EXPECT_LT(rank("src/config"), rank("src/train"));
}

TEST(IncludeLayers, AnUpwardIncludeIsCaught) {
    EXPECT_FALSE(layering_problem({"src/io/weights_file.cpp", 1, "src/train/training_state.h"}).empty());
    EXPECT_FALSE(layering_problem({"src/engine/optimizer.h", 1, "src/config/run_config.h"}).empty());
    EXPECT_FALSE(layering_problem({"src/dist/process_group.h", 1, "src/dist/data_parallel.h"}).empty());
    EXPECT_TRUE(layering_problem({"src/engine/model_layout.cpp", 1, "src/dist/process_group.h"}).empty());
    EXPECT_TRUE(layering_problem({"src/train/trainer.cpp", 1, "src/config/config.h"}).empty());
}

}  // namespace
