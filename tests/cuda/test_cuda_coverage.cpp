// Every __global__ kernel of kernels/cuda/ is launched by a kernel-level test of this binary (one
// that checks kernels against their CPU twins, not a whole model): those tests run again in a
// child process that logs each launched kernel's name and largest block (SIMT_LAUNCH_LOG,
// tests/simt/simt_scheduler.cpp), and the log is compared with the kernels the sources declare.
// The whole-model tests (training runs, the planned modes, data parallelism) are left out: a
// kernel only they launch has no twin test of its own, and they are most of this binary's time.
// The same log checks what the emulation cannot see, registers: ptxas may give a kernel without
// __launch_bounds__ up to 255 registers a thread, which a block of at most 256 threads always has
// (64K a block) and a larger one may not (the GPU then refuses the launch), so such a kernel must
// never be launched with more.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "tests/cuda/cuda_test_support.h"
#include "tests/test_support.h"

namespace adacc::test {
namespace {

// The kernels kernels/cuda/*.cu declare, each with whether it declares __launch_bounds__.
std::map<std::string, bool> kernels_declared_in_sources() {
    std::map<std::string, bool> kernels;
    // A kernel's name follows `__global__ void`, after its __launch_bounds__(...) if it has one.
    const std::regex global(R"(__global__\s+void\s+(__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\()");
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::path(ADACC_SOURCE_DIR) / "kernels/cuda")) {
        if (entry.path().extension() != ".cu") continue;
        std::ifstream in(entry.path());
        std::stringstream text;
        text << in.rdbuf();
        const std::string source = text.str();
        for (std::sregex_iterator it(source.begin(), source.end(), global), end; it != end; ++it)
            kernels[(*it)[2]] = (*it)[1].matched;
    }
    return kernels;
}

// A block of at most this many threads has the registers of any kernel ptxas compiled unbounded.
constexpr unsigned kUnboundedBlockThreads = 256;

// The kernel-level tests: everything but this test and the whole-model tests (a negative filter).
constexpr const char* kKernelTestsFilter = "-CudaKernelCoverage.*:CudaModel*:CudaAdacc*:CudaDataParallel*";

TEST(CudaKernelCoverage, EveryKernelOfKernelsCudaRunsUnderEmulation) {
    if (!running_under_emulation())
        GTEST_SKIP()
            << "launches are counted under the SIMT emulation (test_cuda_emulated); on a GPU the same tests run";
    if (kSanitized)
        GTEST_SKIP() << "counted in the Release build; here every kernel test runs under ASan once, not twice";
    const std::map<std::string, bool> declared = kernels_declared_in_sources();
    ASSERT_FALSE(declared.empty());
    const auto log = scratch_dir("cuda_coverage") / "launches.txt";
    const auto self =
        std::filesystem::read_symlink("/proc/self/exe");  // this binary (a shell's /proc/self is the shell)
    const std::string command = "SIMT_LAUNCH_LOG='" + log.string() + "' '" + self.string() + "' --gtest_filter='" +
                                kKernelTestsFilter + "' > '" + (log.parent_path() / "tests.log").string() + "' 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0)
        << "the emulated kernel tests failed: see " << log.parent_path() / "tests.log";
    std::map<std::string, unsigned> most_threads;  // a kernel's largest block over every process's lines
    std::ifstream in(log);
    std::string name;
    for (unsigned threads = 0; in >> name >> threads;) most_threads[name] = std::max(most_threads[name], threads);
    std::string missing, oversized;
    std::size_t covered = 0;
    for (const auto& [kernel, bounded] : declared) {
        const auto launched = most_threads.find(kernel);
        if (launched == most_threads.end()) {
            missing += " " + kernel;
            continue;
        }
        ++covered;
        if (!bounded && launched->second > kUnboundedBlockThreads)
            oversized += " " + kernel + " (" + std::to_string(launched->second) + " threads)";
    }
    std::printf("CUDA kernels covered under emulation: %zu of the %zu in kernels/cuda/\n", covered, declared.size());
    EXPECT_EQ(covered, declared.size()) << "never launched by a kernel test (add one beside its CPU twin's):"
                                        << missing;
    EXPECT_TRUE(oversized.empty()) << "launched with blocks of more than " << kUnboundedBlockThreads
                                   << " threads but no __launch_bounds__, so ptxas may give them more registers than "
                                      "such a block has and the GPU would refuse the launch (declare the bounds):"
                                   << oversized;
}

}  // namespace
}  // namespace adacc::test
