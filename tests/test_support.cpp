#include "tests/test_support.h"

#include <atomic>
#include <unistd.h>

namespace adacc::test {

std::filesystem::path shared_data_dir() {
    const std::filesystem::path dir = std::filesystem::path(ADACC_SOURCE_DIR) / ".." / "shared" / "data";
    return std::filesystem::exists(dir) ? std::filesystem::canonical(dir) : std::filesystem::path();
}

std::filesystem::path fixtures_dir() { return std::filesystem::path(ADACC_SOURCE_DIR) / "tests" / "fixtures"; }

std::filesystem::path scratch_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    const auto dir = std::filesystem::temp_directory_path() /
                     ("adacc_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

std::string adacc_binary() { return ADACC_BINARY; }

}  // namespace adacc::test
