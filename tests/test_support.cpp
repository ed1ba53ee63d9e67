#include "tests/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>

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

std::string adacc_binary() {
    // ADACC_TEST_BINARY runs the CLI tests against another build (e.g. an older one, to see a
    // regression test fail there).
    const char* other = std::getenv("ADACC_TEST_BINARY");
    return other && *other ? other : ADACC_BINARY;
}

ProcessResult run_adacc(const std::string& args) {
    // coreutils' timeout turns a hang into status 124 instead of a stuck test.
    const std::string command = "timeout -k 10 600 " + adacc_binary() + " " + args + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    ProcessResult result;
    std::array<char, 4096> buffer;
    while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) result.output.append(buffer.data(), n);
    const int status = pclose(pipe);
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return result;
}

}  // namespace adacc::test
