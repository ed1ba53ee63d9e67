// RUN_DIR/metrics.jsonl: one JSON object per line (per step, per validation, per event),
// flushed as written so a killed run keeps everything up to its last line.
#pragma once

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace adacc {

class MetricsLog {
public:
    // Opens for appending. With `keep_through_step` >= 0 (a resumed run), first drops the lines
    // of steps after it: the killed run's steps past its last checkpoint are trained again.
    MetricsLog(const std::filesystem::path& file, int keep_through_step = -1);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    // UserError when the line cannot be written (disk full): a log never silently stops.
    void write(const nlohmann::json& record);

private:
    std::filesystem::path path_;
    std::FILE* file_ = nullptr;
};

}  // namespace adacc
