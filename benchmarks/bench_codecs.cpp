// Activation codec benchmark: compress and decompress throughput in GB/s of the fp32 input
// (the byte mask for bitpack), best of --reps runs, on 1 and 2 threads, for realistic GPT-2
// shapes, with the compression ratio, the codec's relative L2 error, and — the cost compression
// competes with — the time of one matmul_forward of the same activation through a C x C weight
// (recomputing the tensor costs at least that). Usage:
//   bench_codecs [--reps 5] [--threads 1,2]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/codecs.h"
#include "kernels/cpu/ops.h"
#include "src/cli/command_line.h"
#include "src/common/units.h"
#include "src/engine/cpu_threads.h"

namespace {

using namespace adacc;
using namespace adacc::cpu;
using Clock = std::chrono::steady_clock;
using adacc::align_up;
using adacc::seconds_since;

template <class F>
double best_seconds(int reps, F&& f) {
    f();  // warm-up: page faults, caches, the OpenMP pool
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        f();
        best = std::min(best, seconds_since(t0));
    }
    return best;
}

// 64-byte-aligned storage (the codecs' blobs must be).
struct Aligned {
    std::unique_ptr<void, decltype(&std::free)> p{nullptr, &std::free};
    explicit Aligned(std::size_t bytes) : p(std::aligned_alloc(64, align_up(bytes, 64) + 64), &std::free) {}
    template <class T>
    T* as() const {
        return static_cast<T*>(p.get());
    }
};

// Linear-layer inputs: normal activations with ~1% of channels 50-100x larger (the outlier
// channels LLM activations are known for).
std::vector<float> activations(std::size_t rows, std::size_t cols, std::mt19937& gen) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> boost(50.0f, 100.0f);
    std::vector<float> channel_scale(cols, 1.0f);
    for (std::size_t j = 0; j < cols; ++j)
        if (gen() % 100 == 0) channel_scale[j] = boost(gen);
    std::vector<float> x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) x[i * cols + j] = normal(gen) * channel_scale[j];
    return x;
}

// q, k, v: per-channel scales spread over two orders of magnitude.
std::vector<float> qkv_like(std::size_t rows, std::size_t cols, std::mt19937& gen) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> log_scale(-2.3f, 2.3f);
    std::vector<float> channel_scale(cols);
    for (auto& s : channel_scale) s = std::exp(log_scale(gen));
    std::vector<float> x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) x[i * cols + j] = normal(gen) * channel_scale[j];
    return x;
}

// Causal softmax rows of length T (row r of each T x T block has r + 1 live entries).
std::vector<float> softmax_like(std::size_t rows, std::size_t T, std::mt19937& gen) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(rows * T, 0.0f);
    for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t live = i % T + 1;
        float sum = 0;
        for (std::size_t j = 0; j < live; ++j) sum += x[i * T + j] = std::exp(normal(gen));
        for (std::size_t j = 0; j < live; ++j) x[i * T + j] /= sum;
    }
    return x;
}

struct Row {
    std::string codec, shape;
    int threads;
    double compress_gbs, decompress_gbs, ratio, compress_ms, rel_l2, matmul_ms;
};

void print(const Row& r) {
    char matmul[64] = "        -", times[32] = "      -";
    if (r.matmul_ms > 0) {
        std::snprintf(matmul, sizeof matmul, "%9.1f", r.matmul_ms);
        std::snprintf(times, sizeof times, "%6.0fx", r.matmul_ms / r.compress_ms);
    }
    std::printf("%-13s %-12s %3d %11.1f %13.1f %7.2f %9.2f %10.2e %s %s\n", r.codec.c_str(), r.shape.c_str(), r.threads,
                r.compress_gbs, r.decompress_gbs, r.ratio, r.compress_ms, r.rel_l2, matmul, times);
    std::fflush(stdout);
}

Row bench_float(Codec codec, const std::vector<float>& x, std::size_t rows, std::size_t cols, int threads, int reps,
                bool with_matmul) {
    omp_set_num_threads(threads);
    const CodecParams params;
    Aligned blob(codec_max_bytes(codec, rows, cols, params));
    Aligned scratch(codec_scratch_bytes(codec, rows, cols, params));
    std::vector<float> y(rows * cols);
    std::size_t bytes = 0;
    const double tc = best_seconds(
        reps, [&] { bytes = compress(codec, x.data(), rows, cols, params, blob.as<void>(), scratch.as<void>()); });
    const double td = best_seconds(reps, [&] { decompress(codec, blob.as<void>(), rows, cols, y.data()); });
    const double in_bytes = 4.0 * rows * cols;
    Row r{codec_name(codec),
          std::to_string(rows) + "x" + std::to_string(cols),
          threads,
          in_bytes / tc / 1e9,
          in_bytes / td / 1e9,
          in_bytes / bytes,
          tc * 1e3,
          measure_error(x.data(), y.data(), x.size()).relative_l2,
          0};
    if (with_matmul) {  // one forward of this activation through a cols x cols weight
        std::mt19937 gen(9);
        std::normal_distribution<float> normal(0.0f, 0.02f);
        std::vector<float> w(cols * cols), out(rows * cols);
        for (auto& v : w) v = normal(gen);
        const int N = static_cast<int>(rows), C = static_cast<int>(cols);
        r.matmul_ms =
            best_seconds(1,
                         [&] { matmul_forward(default_context(), out.data(), x.data(), w.data(), nullptr, N, C, C); }) *
            1e3;
    }
    return r;
}

Row bench_mask(const std::vector<unsigned char>& mask, int threads, int reps) {
    omp_set_num_threads(threads);
    const std::size_t n = mask.size();
    Aligned blob(codec_max_bytes(Codec::bitpack, 1, n, CodecParams{}));
    std::vector<unsigned char> back(n);
    std::size_t bytes = 0;
    const double tc = best_seconds(
        reps, [&] { bytes = compress(Codec::bitpack, mask.data(), 1, n, CodecParams{}, blob.as<void>(), nullptr); });
    const double td = best_seconds(reps, [&] { decompress(Codec::bitpack, blob.as<void>(), 1, n, back.data()); });
    if (back != mask) std::fprintf(stderr, "error: bitpack round trip differs\n");
    return Row{"bitpack",    std::to_string(n >> 20) + "M bytes", threads,  n / tc / 1e9,
               n / td / 1e9, static_cast<double>(n) / bytes,      tc * 1e3, 0.0,
               0.0};
}

}  // namespace

int main(int argc, char** argv) {
    adacc::CommandLine command_line("adacc activation codec benchmark");
    adacc::Command app = command_line.program();
    int reps = 5;
    std::vector<int> thread_counts = {1, 2};
    bool matmul = true;
    app.option("--reps", reps, "timed runs per measurement (best is reported)").in_range(1, 100000);
    app.option("--threads", thread_counts, "thread counts").comma_separated().in_range(1, 1024);
    app.flag("!--no-matmul", matmul, "skip the matmul comparison");
    if (const auto parse_ended = command_line.run(argc, argv)) return *parse_ended;
    adacc::configure_cpu_threads();  // pinned threads, as the engine runs them

    std::mt19937 gen(1);
    struct FloatCase {
        Codec codec;
        std::size_t rows, cols;
        const std::vector<float>* x;
    };
    const auto act768 = activations(4096, 768, gen), act3072 = activations(4096, 3072, gen);
    const auto qkv = qkv_like(4096, 2304, gen);
    const auto att = softmax_like(8 * 12 * 256, 256, gen);  // B = 8, H = 12, T = 256
    std::vector<unsigned char> mask(std::size_t(32) << 20);
    for (auto& m : mask) m = gen() % 10 != 0;  // dropout p = 0.1
    const FloatCase cases[] = {
        {Codec::group_int4, 4096, 768, &act768},   {Codec::group_int4, 4096, 3072, &act3072},
        {Codec::outlier_int4, 4096, 768, &act768}, {Codec::outlier_int4, 4096, 3072, &act3072},
        {Codec::channel_int4, 4096, 2304, &qkv},   {Codec::asym_int4, 8 * 12 * 256, 256, &att},
    };

    std::printf(
        "GB/s of fp32 input (mask bytes for bitpack), best of %d; ratio = input bytes / blob bytes;\n"
        "matmul_ms = one matmul_forward of the activation through a C x C weight (the least a recompute "
        "costs); x = matmul / compress\n",
        reps);
    std::printf("%-13s %-12s %3s %11s %13s %7s %9s %10s %9s %s\n", "codec", "shape", "thr", "compr_GB/s",
                "decompr_GB/s", "ratio", "compr_ms", "rel_l2", "matmul_ms", "x");
    for (const auto& c : cases)
        for (int t : thread_counts) print(bench_float(c.codec, *c.x, c.rows, c.cols, t, reps, matmul));
    for (int t : thread_counts) print(bench_mask(mask, t, reps));
    return 0;
}
