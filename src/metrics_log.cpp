#include "src/metrics_log.h"

#include <fstream>
#include <string>
#include <vector>

#include "src/errors.h"

namespace adacc {

namespace {
void drop_records_after(const std::filesystem::path& file, int step) {
    std::ifstream in(file);
    if (!in) return;
    std::vector<std::string> kept;
    for (std::string line; std::getline(in, line);) {
        const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (record.is_discarded()) continue;  // a line cut short by the kill
        if (record.contains("step") && record["step"].get<int>() > step) continue;
        kept.push_back(line);
    }
    in.close();
    std::ofstream out(file, std::ios::trunc);
    for (const auto& line : kept) out << line << '\n';
}
}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& file, int keep_through_step) {
    if (keep_through_step >= 0) drop_records_after(file, keep_through_step);
    file_ = std::fopen(file.c_str(), "a");
    if (!file_) throw UserError("cannot open " + file.string() + " for writing: check logging.run_dir is writable");
}

MetricsLog::~MetricsLog() {
    if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
    const std::string line = record.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
}

}  // namespace adacc
