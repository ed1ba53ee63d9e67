#include "src/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/io/checkpoint_folder.h"

namespace adacc {

namespace fs = std::filesystem;

namespace {

// The files of a run besides its checkpoints.
constexpr const char* kRunFiles[] = {"config.toml", "metrics.jsonl", "profile.json"};

constexpr const char* kStartOverAdvice =
    "start over there with --overwrite (deletes those files), or choose another logging.run_dir";

// The listing of a refused folder: its first four files, and how many more.
std::string list_files(const std::vector<fs::path>& files) {
    std::string listing;
    for (std::size_t i = 0; i < files.size() && i < 4; ++i) listing += "\n  " + files[i].string();
    if (files.size() > 4) listing += "\n  ... (" + std::to_string(files.size() - 4) + " more)";
    return listing;
}

}  // namespace

void create_run_folder(const fs::path& run_dir) {
    std::error_code error;
    fs::create_directories(run_dir, error);
    if (error || !fs::is_directory(run_dir))
        throw UserError("cannot create the run folder " + quoted(run_dir) + ": " +
                        (error ? error.message() : std::string("a file of that name exists")) +
                        "; choose a writable folder with --set logging.run_dir=DIR");
}

RunFolderLock::RunFolderLock(const fs::path& run_dir) {
    const fs::path file = run_dir / ".lock";
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
        throw UserError("cannot open the lock file " + quoted(file) + ": " + std::strerror(errno) +
                        "; check that the run folder is writable");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int reason = errno;
        std::string holder;
        std::getline(std::ifstream(file), holder);
        ::close(fd_);
        fd_ = -1;
        if (reason == EWOULDBLOCK)
            throw UserError("the run folder " + quoted(run_dir) + " is in use by another adacc train" +
                            (holder.empty() ? std::string() : " (process " + holder + ")") +
                            "; wait for it to finish, stop it, or choose another logging.run_dir");
        throw UserError("cannot lock " + quoted(file) + ": " + std::strerror(reason));
    }
    // Who holds it, for the message above; the lock itself is the flock, so a failed write of this
    // text changes nothing.
    const std::string pid = std::to_string(::getpid()) + "\n";
    const bool noted = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) > 0;
    static_cast<void>(noted);
}

RunFolderLock::~RunFolderLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::vector<fs::path> existing_run_files(const fs::path& run_dir) {
    std::vector<fs::path> found;
    std::error_code error;
    for (const char* name : kRunFiles)
        if (fs::exists(run_dir / name, error)) found.push_back(run_dir / name);
    for (const auto& file : checkpoint_files(run_dir)) found.push_back(file);
    return found;
}

void remove_failed_start_files(const fs::path& run_dir) {
    std::error_code error;  // best effort: the start's own error is the one to report
    for (const char* name : kRunFiles) fs::remove(run_dir / name, error);
}

void claim_run_folder_for_fresh_run(const fs::path& run_dir, bool overwrite) {
    remove_checkpoint_temporaries(run_dir);  // a killed write's leftovers: nothing to keep or resume
    const auto files = existing_run_files(run_dir);
    if (files.empty()) return;
    if (!overwrite) {
        if (checkpoint_files(run_dir).empty())
            throw UserError("the run folder " + quoted(run_dir) + " holds a run that saved no checkpoint, so there " +
                            "is nothing to resume:" + list_files(files) + "\n" + kStartOverAdvice);
        throw UserError("the run folder " + quoted(run_dir) + " already holds a run:" + list_files(files) +
                        "\ncontinue it with `adacc train --resume " + run_dir.string() + "`, or " + kStartOverAdvice);
    }
    for (const auto& file : files) {
        std::error_code error;
        fs::remove(file, error);
        if (error)
            throw UserError("--overwrite cannot delete " + quoted(file) + ": " + error.message() +
                            "; delete it by hand or choose another logging.run_dir");
    }
}

}  // namespace adacc
