#include "src/io/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "src/common/errors.h"
#include "src/common/file_io.h"

namespace adacc {

namespace {
void drop_records_after(const std::filesystem::path& file, int step) {
    std::ifstream in(file);
    if (!in) return;
    std::vector<std::string> kept;
    for (std::string line; std::getline(in, line);) {
        const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (record.is_discarded()) continue;  // a line cut short by the kill
        if (record.contains("step") && record["step"].is_number_integer() && record["step"].get<std::int64_t>() > step)
            continue;
        kept.push_back(line);
    }
    in.close();
    // Atomically: a kill or a full disk during the rewrite leaves the old log, not half of it.
    AtomicFileWriter out(file);
    for (const auto& line : kept) {
        out.write(line.data(), line.size());
        out.write("\n", 1);
    }
    out.commit();
}
}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& file, int keep_through_step) {
    require_regular_or_absent(file);  // a link, fifo or device named metrics.jsonl is not ours to write
    if (keep_through_step >= 0) drop_records_after(file, keep_through_step);
    // O_NOFOLLOW: a link put there after the check above is refused too.
    const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 || !(file_ = ::fdopen(fd, "a"))) {
        const std::string reason = std::strerror(errno);
        if (fd >= 0) ::close(fd);
        throw UserError("cannot open " + quoted(file) + " for writing: " + reason +
                        "; check that logging.run_dir is writable and that metrics.jsonl is a regular file");
    }
    path_ = file;
}

MetricsLog::~MetricsLog() {
    if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
    const std::string line = record.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
        throw UserError("cannot write to " + path_.string() + ": " + std::strerror(errno) +
                        "; free disk space (checkpoints written so far are intact) and resume the run");
}

}  // namespace adacc
