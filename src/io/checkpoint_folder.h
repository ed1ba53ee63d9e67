// Which checkpoints a run folder holds and keeps. Checkpoints live in RUN_DIR/checkpoints/ named
// ckpt_%08d.bin by optimizer step (ckpt_00005000.bin; steps past 99,999,999 get more digits), and
// are ordered by the parsed step, never by name or time. A write in progress is
// ckpt_XXXXXXXX.bin.tmp. The file format itself is src/io/checkpoint_file.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/io/checkpoint_file.h"

namespace adacc {

std::filesystem::path checkpoint_dir(const std::filesystem::path& run_dir);
std::filesystem::path checkpoint_path(const std::filesystem::path& run_dir, std::int64_t step);
// The step a checkpoint file name encodes; empty for any other name (including *.tmp).
std::optional<std::int64_t> checkpoint_step(const std::filesystem::path& file);

// The checkpoint with the highest step that opens cleanly (header, metadata and table valid,
// size as recorded). Newer files that fail are skipped, each with its reason appended to
// `rejected` when given, so a run resumes from the last good checkpoint after a crash.
std::optional<std::filesystem::path> newest_complete_checkpoint(const std::filesystem::path& run_dir,
                                                                std::vector<std::string>* rejected = nullptr);

// Checkpoint files in RUN_DIR/checkpoints written by a newer adacc (format version above
// kCheckpointFormatVersion): this build cannot read them, and must not prune or overwrite them
// unless the user says so.
std::vector<std::filesystem::path> newer_format_checkpoints(const std::filesystem::path& run_dir);

// Every checkpoint file (ckpt_*.bin, complete or not) in RUN_DIR/checkpoints.
std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& run_dir);

// Deletes the temporaries of checkpoints whose writing was cut short (a kill, a full disk):
// only files named as AtomicFileWriter names them, so nothing adacc did not make.
void remove_checkpoint_temporaries(const std::filesystem::path& run_dir);

// Keeps the `keep` checkpoints with the highest steps and `just_written` (even if it is not
// among them, e.g. after resuming from an older step); deletes the other checkpoints and the
// temporaries of interrupted writes.
void prune_checkpoints(const std::filesystem::path& run_dir, int keep, const std::filesystem::path& just_written);

// What a --checkpoint argument names, opened: a checkpoint file as is; a run folder (or its
// checkpoints/ folder) as its newest complete checkpoint. UserError when there is none. The file
// stays open, so a run still writing there cannot prune it away from the reader; one pruned
// between listing and opening lists the folder again (and twice is a UserError saying so).
std::shared_ptr<const CheckpointReader> open_checkpoint(const std::filesystem::path& file_or_run_dir);

}  // namespace adacc
