// CPU training-step benchmark: step time (median of measured steps after warm-up), tokens/s,
// achieved GFLOP/s, and that as a percentage of the SGEMM peak measured with Eigen's own
// multithreaded GEMM in the same run (the baseline). Usage:
//   bench_cpu [--preset gpt-117m] [--batch 4] [--seq 64] [--steps 5] [--warmup 2]
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "src/cli/command_line.h"
#include "src/common/units.h"
#include "src/engine/cpu_threads.h"
#include "src/engine/gpt_model.h"
#include "src/engine/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using adacc::seconds_since;

// Best GFLOP/s of Eigen's (multithreaded) SGEMM over a few square sizes, best of 3 runs each.
double measure_sgemm_peak() {
    double best = 0;
    for (int n : {512, 1024, 2048}) {
        Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
        c.noalias() = a * b;  // warm-up
        for (int rep = 0; rep < 3; ++rep) {
            const auto t0 = Clock::now();
            c.noalias() = a * b;
            best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
        }
    }
    return best;
}

// The benchmark's line for `preset` at batch B x T: `steps` timed steps after `warmup`, beside the
// SGEMM peak measured first on the same threads.
void time_training(const adacc::GPTConfig& cfg, const std::string& preset, int B, int T, int steps, int warmup) {
    adacc::configure_cpu_threads();  // the baseline and the model run on the same pinned threads
    const double peak = measure_sgemm_peak();

    adacc::GPTModel model(cfg, B, T);
    model.init_weights(1);
    std::mt19937 gen(1);
    std::vector<int> tokens(B * T), targets(B * T);
    for (auto& t : tokens) t = static_cast<int>(gen() % cfg.vocab_size);
    for (auto& t : targets) t = static_cast<int>(gen() % cfg.vocab_size);
    adacc::OptimizerOptions opt;
    // Per phase and whole step; medians over the measured steps.
    std::vector<double> times, forward_times, backward_times, optimizer_times;
    for (int step = 1; step <= warmup + steps; ++step) {
        const auto t0 = Clock::now();
        model.forward(tokens.data(), targets.data(), B, T, adacc::DropoutContext{1, std::uint64_t(step), 0, true},
                      1.0f / (B * T));
        const auto t1 = Clock::now();
        model.backward(tokens.data(), B, T, /*accumulate=*/false);
        const auto t2 = Clock::now();
        adacc::adamw_step(model, opt, 1e-4f, step);
        if (step > warmup) {
            times.push_back(seconds_since(t0));
            forward_times.push_back(std::chrono::duration<double>(t1 - t0).count());
            backward_times.push_back(std::chrono::duration<double>(t2 - t1).count());
            optimizer_times.push_back(seconds_since(t2));
        }
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const double step_s = median(times);
    const double gflops = model.training_flops(B, T) / step_s / 1e9;
    std::printf(
        "%-13s B=%-3d T=%-5d params=%-11lld step_ms=%8.1f (fwd %.1f bwd %.1f opt %.1f) tokens/s=%8.1f "
        "GFLOP/s=%6.1f sgemm_peak=%6.1f pct_of_peak=%5.1f%%\n",
        preset.c_str(), B, T, static_cast<long long>(model.num_params()), step_s * 1e3, median(forward_times) * 1e3,
        median(backward_times) * 1e3, median(optimizer_times) * 1e3, B * T / step_s, gflops, peak,
        100.0 * gflops / peak);
}

}  // namespace

int main(int argc, char** argv) {
    adacc::CommandLine command_line("adacc CPU training-step benchmark");
    adacc::Command app = command_line.program();
    std::string preset = "gpt-117m";
    int B = 4, T = 64, steps = 5, warmup = 2;
    app.option("--preset", preset, "model preset");
    app.option("--batch", B, "micro-batch size").positive();
    app.option("--seq", T, "sequence length, at most the preset's max_seq_len").positive();
    app.option("--steps", steps, "measured steps").in_range(1, 100000);
    app.option("--warmup", warmup, "warm-up steps").in_range(0, 100000);
    if (const auto parse_ended = command_line.run(argc, argv)) return *parse_ended;
    const auto cfg = adacc::gpt_preset(preset);
    if (!cfg) {
        std::fprintf(stderr, "error: unknown preset %s\n", preset.c_str());
        return 2;
    }
    if (T > cfg->max_seq_len) {
        std::fprintf(stderr, "error: --seq %d is longer than %s's max_seq_len %d\n", T, preset.c_str(),
                     cfg->max_seq_len);
        return 2;
    }
    try {
        time_training(*cfg, preset, B, T, steps, warmup);
    } catch (const std::exception& e) {  // the model's own refusals, a batch too large for memory among them
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    return 0;
}
