#include "src/io/checkpoint_folder.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string_view>

#include "src/common/errors.h"
#include "src/common/file_io.h"

namespace adacc {

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Run folders.

std::vector<std::pair<std::int64_t, fs::path>> checkpoints_newest_first(const fs::path& dir) {
    std::vector<std::pair<std::int64_t, fs::path>> found;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(dir, error))
        if (const auto step = checkpoint_step(entry.path()); step && entry.is_regular_file())
            found.emplace_back(*step, entry.path());
    std::ranges::sort(found, [](const auto& a, const auto& b) { return a.first > b.first; });
    return found;
}

// The newest checkpoint in `dir` that opens as complete, left open. A run still training there
// may prune a checkpoint between the listing and the open: then the folder is listed once more.
std::unique_ptr<CheckpointReader> open_newest_complete_in(const fs::path& dir, std::vector<std::string>* rejected) {
    for (int listing = 0; listing < 2; ++listing) {
        std::vector<std::string> unreadable;
        std::unique_ptr<CheckpointReader> newest;
        bool pruned = false;
        for (const auto& [step, path] : checkpoints_newest_first(dir)) {
            try {
                newest = std::make_unique<CheckpointReader>(path);
                break;
            } catch (const UserError& error) {
                std::error_code ignored;
                if ((pruned = !fs::exists(path, ignored))) break;
                unreadable.push_back(error.what());
            }
        }
        if (pruned) continue;
        if (rejected) rejected->insert(rejected->end(), unreadable.begin(), unreadable.end());
        return newest;
    }
    throw UserError("the run in " + quoted(dir.filename() == "checkpoints" ? dir.parent_path() : dir) +
                    " is still writing checkpoints: its newest was pruned twice while being opened; wait for the run "
                    "to finish, or pass one of its checkpoint files");
}

// A checkpoint's temporary, left by a run killed while writing it (AtomicFileWriter's name).
bool is_checkpoint_temporary(const fs::path& path) {
    const auto target = atomic_write_target(path);
    return target && checkpoint_step(*target);
}

void remove_file(const fs::path& path) {
    std::error_code error;
    fs::remove(path, error);
    if (error)
        throw UserError("cannot delete old checkpoint " + quoted(path) + ": " + error.message() +
                        "; delete it by hand or raise checkpoint.keep");
}

}  // namespace

fs::path checkpoint_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

fs::path checkpoint_path(const fs::path& run_dir, std::int64_t step) {
    char name[48];
    std::snprintf(name, sizeof name, "ckpt_%08lld.bin", static_cast<long long>(step));
    return checkpoint_dir(run_dir) / name;
}

std::optional<std::int64_t> checkpoint_step(const fs::path& file) {
    const std::string name = file.filename().string();
    constexpr std::string_view prefix = "ckpt_", suffix = ".bin";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
        return std::nullopt;
    const std::string_view digits =
        std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    std::int64_t step = 0;
    const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (result.ec != std::errc() || result.ptr != digits.data() + digits.size() || digits.front() == '-')
        return std::nullopt;
    return step;
}

std::optional<fs::path> newest_complete_checkpoint(const fs::path& run_dir, std::vector<std::string>* rejected) {
    const auto reader = open_newest_complete_in(checkpoint_dir(run_dir), rejected);
    if (!reader) return std::nullopt;
    return reader->path();
}

std::vector<fs::path> newer_format_checkpoints(const fs::path& run_dir) {
    std::vector<fs::path> newer;
    // An unreadable file is not a newer format, just a bad file (skipped when resuming).
    for (const auto& [step, path] : checkpoints_newest_first(checkpoint_dir(run_dir)))
        if (const auto version = stored_format_version(path); version && *version > kCheckpointFormatVersion)
            newer.push_back(path);
    return newer;
}

std::vector<fs::path> checkpoint_files(const fs::path& run_dir) {
    std::vector<fs::path> files;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(checkpoint_dir(run_dir), error))
        if (checkpoint_step(entry.path())) files.push_back(entry.path());
    return files;
}

void remove_checkpoint_temporaries(const fs::path& run_dir) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(checkpoint_dir(run_dir), error))
        if (is_checkpoint_temporary(entry.path())) remove_file(entry.path());
}

void prune_checkpoints(const fs::path& run_dir, int keep, const fs::path& just_written) {
    if (keep < 1) throw UserError("checkpoint.keep must be >= 1 (got " + std::to_string(keep) + ")");
    const auto protected_step = checkpoint_step(just_written);
    const auto found = checkpoints_newest_first(checkpoint_dir(run_dir));
    for (std::size_t i = static_cast<std::size_t>(keep); i < found.size(); ++i)
        if (found[i].first != protected_step) remove_file(found[i].second);
    remove_checkpoint_temporaries(run_dir);
}

std::shared_ptr<const CheckpointReader> open_checkpoint(const fs::path& file_or_run_dir) {
    std::error_code error;
    if (fs::is_regular_file(file_or_run_dir, error)) return std::make_shared<CheckpointReader>(file_or_run_dir);
    if (!fs::is_directory(file_or_run_dir, error))
        throw UserError(
            quoted(file_or_run_dir) +
            " does not exist; pass a checkpoint file (RUN_DIR/checkpoints/ckpt_00001000.bin) or a run folder");
    const fs::path dir =
        fs::is_directory(checkpoint_dir(file_or_run_dir), error) ? checkpoint_dir(file_or_run_dir) : file_or_run_dir;
    std::vector<std::string> rejected;
    if (auto newest = open_newest_complete_in(dir, &rejected)) return newest;
    std::string message = "no complete checkpoint in " + quoted(dir);
    for (const auto& reason : rejected) message += "\n  skipped: " + reason;
    throw UserError(message + "\npass a checkpoint file, or the run folder of a run that has saved one");
}

}  // namespace adacc
