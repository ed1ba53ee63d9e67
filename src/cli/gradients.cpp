// adacc gradients --config FILE [--set section.key=value ...] [--init-from FILE|RUN_DIR|HF_DIR]
//                 [--device cpu|cuda] [--dtype auto|fp32|bf16] --output FILE
// One forward and backward on the run's first training batch, keep-all and dropout off, written
// as a gradients file (src/io/gradients_file.h): the batch, the loss and every parameter's
// gradient, so that another implementation (scripts/torch_reference.py, PyTorch) can be compared
// with adacc's on the same weights and tokens. It is the computation `adacc compare`'s fidelity
// and training's probe make (src/train/gradient_fidelity.h), written out instead of compared.
#include <cstdio>
#include <optional>

#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/memory_report.h"
#include "src/io/gradients_file.h"
#include "src/train/gradient_fidelity.h"
#include "src/train/weights_file.h"

namespace adacc {

namespace {

struct GradientsArgs {
    std::string config, init_from, device, dtype, output;
    std::vector<std::string> overrides;
};

void run_gradients(GradientsArgs& args) {
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    const RunConfig config = load_config(args.config, args.overrides);
    std::optional<WeightsFile> weights;
    if (!args.init_from.empty()) {  // before anything is allocated
        weights = open_weights_file(args.init_from);
        check_weights_shape(*weights, config.model);
    }
    const ComputeTarget target = compute_target(config);
    const int B = config.training.batch_size, T = config.training.seq_len;
    const FirstBatchGradients result = first_batch_gradients(
        config, target, plan_for_mode(config.model, B, T, MemoryMode::none), {}, weights ? &*weights : nullptr);
    GradientsRecord record;
    record.shape = config.model;
    record.B = B;
    record.T = T;
    record.device = target.device;
    record.activation = target.activation;
    record.loss = result.loss;
    record.inputs = &result.inputs;
    record.targets = &result.targets;
    record.gradients = &result.gradients;
    const std::uint64_t bytes = save_gradients_file(args.output, record);
    const std::string from = weights ? describe_weights(*weights)
                                     : "the initial weights of training.seed " + std::to_string(config.training.seed);
    std::printf(
        "wrote %s: loss %.6f and %zu parameter gradients (%s) of one forward and backward on the first batch "
        "of data.train, B=%d T=%d, %s %s, keep-all, dropout off, from %s\n",
        args.output.c_str(), result.loss, result.gradients.size(), format_bytes(bytes).c_str(), B, T,
        device_name(target.device), model_dtype_name(target.activation), from.c_str());
}

}  // namespace

void add_gradients_command(Command& program) {
    auto args = std::make_shared<GradientsArgs>();
    Command cmd = program.subcommand(
        "gradients",
        "Write the loss and parameter gradients of one forward and backward on the first training batch (for a "
        "peer implementation to compare)");
    cmd.option("--config", args->config, "TOML run config (model, batch_size, seq_len, data.train)").required();
    add_set_option(cmd, args->overrides);
    cmd.option("--init-from", args->init_from,
               "at these weights (llm.c GPT-2 model file, Hugging Face GPT-2 folder, adacc checkpoint or run folder); "
               "default: the run's initial weights (training.seed)")
        .type_name("FILE|DIR");
    add_device_option(cmd, args->device, "training.device");
    add_dtype_option(cmd, args->dtype, "model.dtype");
    cmd.option("--output", args->output,
               "the gradients file to write (README, Formats: a 256-int32 header, the batch's inputs and targets, "
               "float32 gradients in llm.c's parameter order)")
        .required()
        .type_name("FILE");
    cmd.on_run([args] { run_gradients(*args); });
}

}  // namespace adacc
