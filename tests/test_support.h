// Small helpers shared by the tests: where the shared data lives, scratch directories.
#pragma once

#include <filesystem>
#include <string>

namespace adacc::test {

// ../shared/data beside the checkout; empty path when it is not there (tests then GTEST_SKIP).
std::filesystem::path shared_data_dir();
// tests/fixtures inside the source tree.
std::filesystem::path fixtures_dir();
// A fresh empty directory under the system temp dir, unique per call.
std::filesystem::path scratch_dir(const std::string& tag);
// Path of the built `adacc` executable (for tests that run the CLI as a process).
std::string adacc_binary();

}  // namespace adacc::test
