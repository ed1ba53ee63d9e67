// Every __global__ kernel of kernels/cuda/ is launched by a kernel-level test of this binary (one
// that checks kernels against their CPU twins, not a whole model): those tests run again in a
// child process that logs each launched kernel's name (SIMT_LAUNCH_LOG,
// tests/simt/simt_scheduler.cpp), and the log is compared with the kernels the sources declare.
// The whole-model tests (training runs, the planned modes, data parallelism) are left out: a
// kernel only they launch has no twin test of its own, and they are most of this binary's time.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tests/cuda/cuda_test_support.h"
#include "tests/test_support.h"

namespace adacc::test {
namespace {

std::set<std::string> kernels_declared_in_sources() {
    std::set<std::string> names;
    // A kernel's name follows `__global__ void`, after its __launch_bounds__(...) if it has one.
    const std::regex global(R"(__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\()");
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::path(ADACC_SOURCE_DIR) / "kernels/cuda")) {
        if (entry.path().extension() != ".cu") continue;
        std::ifstream in(entry.path());
        std::stringstream text;
        text << in.rdbuf();
        const std::string source = text.str();
        for (std::sregex_iterator it(source.begin(), source.end(), global), end; it != end; ++it)
            names.insert((*it)[1]);
    }
    return names;
}

// The kernel-level tests: everything but this test and the whole-model tests (a negative filter).
constexpr const char* kKernelTestsFilter = "-CudaKernelCoverage.*:CudaModel*:CudaAdacc*:CudaDataParallel*";

TEST(CudaKernelCoverage, EveryKernelOfKernelsCudaRunsUnderEmulation) {
    if (!running_under_emulation())
        GTEST_SKIP()
            << "launches are counted under the SIMT emulation (test_cuda_emulated); on a GPU the same tests run";
    if (kSanitized)
        GTEST_SKIP() << "counted in the Release build; here every kernel test runs under ASan once, not twice";
    const std::set<std::string> declared = kernels_declared_in_sources();
    ASSERT_FALSE(declared.empty());
    const auto log = scratch_dir("cuda_coverage") / "launches.txt";
    const auto self =
        std::filesystem::read_symlink("/proc/self/exe");  // this binary (a shell's /proc/self is the shell)
    const std::string command = "SIMT_LAUNCH_LOG='" + log.string() + "' '" + self.string() + "' --gtest_filter='" +
                                kKernelTestsFilter + "' > '" + (log.parent_path() / "tests.log").string() + "' 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0)
        << "the emulated kernel tests failed: see " << log.parent_path() / "tests.log";
    std::set<std::string> launched;
    std::ifstream in(log);
    for (std::string name; std::getline(in, name);) launched.insert(name);
    std::string missing;
    std::size_t covered = 0;
    for (const std::string& name : declared) {
        if (launched.count(name))
            ++covered;
        else
            missing += " " + name;
    }
    std::printf("CUDA kernels covered under emulation: %zu of the %zu in kernels/cuda/\n", covered, declared.size());
    EXPECT_EQ(covered, declared.size()) << "never launched by a kernel test (add one beside its CPU twin's):"
                                        << missing;
}

}  // namespace
}  // namespace adacc::test
