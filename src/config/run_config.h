// The resolved run configuration: one struct per TOML section. A section a component takes whole is
// that component's own options struct ([optimizer]: OptimizerOptions and [lr]: LrSchedule,
// src/engine/optimizer.h; [stress]: StressOptions, src/engine/weight_init.h); the other sections
// are declared here, and src/config/config.h maps them into the components' options
// (compute_target, budget_bytes, regulator_options, planned_run). src/config/config.cpp loads it
// from TOML (+ --set overrides), validates it, prints it and writes it back. Only train/ and cli/
// read this struct; nothing below src/config includes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt_config.h"
#include "src/adacc/budget_planner.h"
#include "src/dist/process_group.h"
#include "src/engine/optimizer.h"
#include "src/engine/weight_init.h"

namespace adacc {

inline constexpr int kMaxCpuThreads = 1024;  // training.threads' upper bound

struct TrainingSection {
    int batch_size = 4;          // B, sequences per micro-batch
    int seq_len = 64;            // T, <= model.max_seq_len
    int steps = 100;             // optimizer steps
    int grad_accum = 1;          // micro-batches per optimizer step
    std::uint64_t seed = 1337;   // init, dropout and data order all derive from it
    int val_every = 0;           // steps between validation losses (0 = never)
    int fidelity_every = 0;      // steps between gradient-fidelity measurements vs keep-all (0 = never)
    int val_batches = 4;         // micro-batches per validation loss
    int threads = 0;             // OpenMP threads (0 = all cores)
    std::string device = "cpu";  // "cpu" | "cuda" (src/engine/device.h)
    int skip_nonfinite = 0;      // steps with a non-finite loss or gradient norm skipped before stopping
    int zero = 0;                // 1: ZeRO-1, AdamW's m and v sharded over the data-parallel ranks
    bool overlap_grads = true;   // the gradient sums start per block during the last backward
    bool deterministic = true;   // false: cuDNN's attention backward may sum by atomics (src/engine/device.h)
    // How long one GPU collective may stay pending before its watchdog ends the job
    // (src/dist/collective_watchdog.h).
    float collective_timeout_s = static_cast<float>(kDefaultCollectiveTimeoutS);
};

struct DataSection {
    std::string train;     // .bin shard file or glob
    std::string val;       // .bin shard file or glob ("" = no validation)
    bool shuffle = false;  // seeded permutation of sequence windows
};

struct MemorySection {
    std::string mode = "none";  // a name in kMemoryModes (src/engine/memory_mode.h)
    std::string budget;         // "" = unlimited, else bytes or "24GiB"-style sizes
    // Planned modes (adacc, recompute-opt):
    std::string granularity = "block";  // block: one plan for all layers | global: layers may differ
    std::string profile;                // reuse this profile.json instead of profiling at start
    int monitor_max_interval = 64;      // cap of the monitor's exponential backoff (steps)
    int min_replan_steps = 20;          // fewest steps between two plan switches
    // Adacc's codecs: the candidates per tensor (a name in kCodecCandidateNames,
    // src/engine/activation_plan.h) and the largest profiled relative L2 error a codec may have on
    // a tensor to be chosen for it (see README "Which codec compresses what").
    std::string codecs = kDefaultCodecCandidates;
    float max_codec_error = kDefaultMaxCodecError;
};

struct CheckpointSection {
    int every = 0;  // steps between checkpoints (0 = only at the end)
    int keep = 3;   // newest K kept in RUN_DIR/checkpoints/
};

struct EvalSection {
    int every = 0;  // steps between in-training evals (0 = never)
    std::vector<std::string> tasks;
    int limit = 100;
    std::string data;   // folder with lambada_openai/ and arc_easy/ (needed when tasks run)
    std::string vocab;  // folder with GPT-2's encoder.json and vocab.bpe (likewise)
};

struct LoggingSection {
    std::string run_dir = "runs/default";
    int print_every = 1;
};

struct RunConfig {
    std::string preset;  // informational: the preset the model section started from
    GPTConfig model;
    // model.dtype (src/engine/device.h: auto, fp32, bf16). Outside GPTConfig: checkpoints hold the
    // fp32 master weights whatever the dtype, so a model trains in one and evaluates in another.
    std::string dtype = "auto";
    // Whether model.attention was given (by the file, --set or a checkpoint's config); if not,
    // resolve_default_attention (src/config/config.h) picks it for the device: cudnn on CUDA when
    // cuDNN loads, else materialized.
    bool attention_given = false;
    TrainingSection training;
    OptimizerOptions optimizer;
    LrSchedule lr;
    DataSection data;
    MemorySection memory;
    CheckpointSection checkpoint;
    EvalSection eval;
    StressOptions stress;
    LoggingSection logging;
};

}  // namespace adacc
