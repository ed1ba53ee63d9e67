// adacc export --checkpoint RUN_DIR|FILE --llmc-model OUT [--force]
// Writes a checkpoint's parameters as llm.c's version-3 (fp32) GPT-2 model file, which llm.c's
// trainers and `adacc eval|sample --llmc-model` read, and `adacc train --init-from` starts from.
// OUT is replaced only when it is a regular file; --force writes the file a symlink OUT points to.
#include <cstdio>
#include <vector>

#include "src/cli/commands.h"
#include "src/common/units.h"
#include "src/common/errors.h"
#include "src/io/llmc_model_io.h"
#include "src/io/weights_file.h"

namespace adacc {

namespace {

struct ExportArgs {
    std::string checkpoint, llmc_model;
    bool force = false;
};

void run_export(const ExportArgs& args) {
    const WeightsFile weights = open_checkpoint_weights(args.checkpoint);
    const std::filesystem::path out = args.llmc_model;
    std::error_code error;
    if (std::filesystem::equivalent(out, weights.path, error))
        throw UserError("--llmc-model " + out.string() + " is the checkpoint being exported: write it elsewhere");
    const GPTConfig& m = weights.shape;
    // The parameter arena only: an inference model allocates no gradients or optimizer state.
    GPTModel model = GPTModel::for_inference(m, 1, 1);
    load_weights(weights, model);
    std::vector<float> staging;
    const LlmcModelWritten written =
        save_llmc_model(out, m, model.host_readable(ModelArena::parameters, staging),
                        args.force ? ExistingTarget::write_through_symlink : ExistingTarget::replace_regular_file);
    std::printf("wrote %s: llm.c GPT-2 model, version %d (fp32), from %s\n", written.file.c_str(), kLlmcVersionFp32,
                describe_weights(weights).c_str());
    std::printf("model: L=%d C=%d H=%d V=%d (padded %d) maxT=%d, %lld parameters, %s\n", m.n_layer, m.n_embd,
                m.n_head, m.vocab_size, m.padded_vocab_size(), m.max_seq_len,
                static_cast<long long>(model.num_params()),
                format_bytes(written.bytes).c_str());
}

}  // namespace

void add_export_command(Command& program) {
    auto args = std::make_shared<ExportArgs>();
    Command cmd = program.subcommand("export", "Write a checkpoint's weights as an llm.c GPT-2 model file (fp32)");
    cmd.option("--checkpoint", args->checkpoint, "checkpoint file or run folder (newest checkpoint)")
        .required()
        .type_name("DIR|FILE");
    cmd.option("--llmc-model", args->llmc_model, "the llm.c model file to write (replaced atomically)")
        .required()
        .type_name("OUT");
    cmd.flag("--force", args->force,
             "when OUT is a symbolic link, write the file it points to (without it, only a regular file is replaced)");
    cmd.on_run([args] { run_export(*args); });
}

}  // namespace adacc
