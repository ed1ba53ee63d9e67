// A run folder (logging.run_dir) belongs to one run: config.toml, metrics.jsonl, profile.json
// and checkpoints/ all describe the same training. These are the rules that keep it so:
//   * a fresh `train` into a folder that already holds a run is refused unless the user asks to
//     resume it or to overwrite it (which deletes the old run's files, nothing else);
//   * a live trainer holds an exclusive lock (flock on RUN_DIR/.lock, released by the kernel
//     when the process ends, even by SIGKILL), so a second trainer in the same folder is refused;
//   * checkpoints written by a newer adacc are never pruned or overwritten unless asked.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace adacc {

// Creates the folder (and parents); UserError naming it and the system's reason when it cannot.
void create_run_folder(const std::filesystem::path& run_dir);

// Holds RUN_DIR/.lock exclusively for its lifetime. UserError when another process holds it.
class RunFolderLock {
public:
    explicit RunFolderLock(const std::filesystem::path& run_dir);
    ~RunFolderLock();
    RunFolderLock(const RunFolderLock&) = delete;
    RunFolderLock& operator=(const RunFolderLock&) = delete;

private:
    int fd_ = -1;
};

// What in the folder belongs to an earlier run (config.toml, metrics.jsonl, profile.json,
// checkpoint files); empty when the folder is new or holds none of them.
std::vector<std::filesystem::path> existing_run_files(const std::filesystem::path& run_dir);

// Removes the temporaries of killed checkpoint writes, then refuses a fresh run into a folder
// holding a run (naming what is there and the choices), or, with `overwrite`, deletes those files.
void claim_run_folder_for_fresh_run(const std::filesystem::path& run_dir, bool overwrite);
// After a fresh run failed before its first step: removes the run files it wrote (config.toml,
// metrics.jsonl, profile.json; never a checkpoint), so a retry needs no --overwrite.
void remove_failed_start_files(const std::filesystem::path& run_dir);

}  // namespace adacc
