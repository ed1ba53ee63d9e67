// adacc export --checkpoint RUN_DIR|FILE --llmc-model OUT [--force]
// adacc export --checkpoint RUN_DIR|FILE --hf-model DIR [--vocab VOCAB_DIR]
// Writes a checkpoint's parameters as llm.c's version-3 (fp32) GPT-2 model file, which llm.c's
// trainers and `adacc eval|sample --llmc-model` read, or as a Hugging Face GPT-2 folder, which
// transformers' GPT2LMHeadModel.from_pretrained and `adacc eval|sample --hf-model` read;
// `adacc train --init-from` starts from either. OUT is replaced only when it is a regular file;
// --force writes the file a symlink OUT points to.
#include <cstdio>
#include <vector>

#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/io/hf_gpt2.h"
#include "src/io/llmc_model_io.h"
#include "src/train/weights_file.h"

namespace adacc {

namespace {

namespace fs = std::filesystem;

struct ExportArgs {
    std::string checkpoint, llmc_model, hf_model, vocab;
    bool force = false;
};

// A Hugging Face folder gets config.json, which would make a run folder read as a Hugging Face
// model (src/train/weights_file.h): refuse to write one into a run.
void refuse_run_folder(const fs::path& dir) {
    if (fs::exists(dir / "config.toml") || fs::exists(dir / "checkpoints"))
        throw UserError("--hf-model " + dir.string() +
                        " holds an adacc run (config.toml, checkpoints/): write the "
                        "Hugging Face folder elsewhere");
}

void run_export(const ExportArgs& args) {
    if (args.llmc_model.empty() == args.hf_model.empty())
        throw UserError(
            "adacc export needs one of --llmc-model OUT (llm.c's file) or --hf-model DIR (a Hugging Face "
            "folder)");
    if (!args.vocab.empty() && args.hf_model.empty())
        throw UserError("--vocab goes with --hf-model (llm.c model files hold no tokenizer): drop it");
    const WeightsFile weights = open_checkpoint_weights(args.checkpoint);
    const GPTConfig& m = weights.shape;
    // The parameter arena only: an inference model allocates no gradients or optimizer state.
    GPTModel model = GPTModel::for_inference(m, 1, 1);
    load_weights(weights, model);
    std::vector<float> staging;
    const float* params = model.host_readable(ModelArena::parameters, staging);
    fs::path written;
    std::uint64_t bytes = 0;
    if (!args.llmc_model.empty()) {
        std::error_code error;
        if (fs::equivalent(args.llmc_model, weights.path, error))
            throw UserError("--llmc-model " + args.llmc_model +
                            " is the checkpoint being exported: write it elsewhere");
        const LlmcModelWritten llmc =
            save_llmc_model(args.llmc_model, m, params,
                            args.force ? ExistingTarget::write_through_symlink : ExistingTarget::replace_regular_file);
        written = llmc.file;
        bytes = llmc.bytes;
        std::printf("wrote %s: llm.c GPT-2 model, version %d (fp32), from %s\n", written.c_str(), kLlmcVersionFp32,
                    describe_weights(weights).c_str());
    } else {
        refuse_run_folder(args.hf_model);
        save_hf_gpt2(args.hf_model, m, params, args.vocab);
        written = fs::path(args.hf_model) / "model.safetensors";
        bytes = fs::file_size(written);
        std::printf("wrote %s: Hugging Face GPT-2 folder (config.json, model.safetensors fp32%s), from %s\n",
                    args.hf_model.c_str(), args.vocab.empty() ? "" : ", vocab.json, merges.txt, tokenizer_config.json",
                    describe_weights(weights).c_str());
        if (args.vocab.empty())
            std::printf(
                "no tokenizer files written: add --vocab DIR (GPT-2's encoder.json and vocab.bpe) for "
                "AutoTokenizer\n");
    }
    std::printf("model: L=%d C=%d H=%d V=%d (padded %d) maxT=%d, %lld parameters, %s\n", m.n_layer, m.n_embd, m.n_head,
                m.vocab_size, m.padded_vocab_size(), m.max_seq_len, static_cast<long long>(model.num_params()),
                format_bytes(bytes).c_str());
}

}  // namespace

void add_export_command(Command& program) {
    auto args = std::make_shared<ExportArgs>();
    Command cmd = program.subcommand(
        "export", "Write a checkpoint's weights as an llm.c GPT-2 model file or a Hugging Face GPT-2 folder (fp32)");
    cmd.option("--checkpoint", args->checkpoint, "checkpoint file or run folder (newest checkpoint)")
        .required()
        .type_name("DIR|FILE");
    CommandOption llmc =
        cmd.option("--llmc-model", args->llmc_model, "the llm.c model file to write (replaced atomically)")
            .type_name("OUT");
    CommandOption hf = cmd.option("--hf-model", args->hf_model,
                                  "the Hugging Face folder to write: config.json, model.safetensors (each replaced "
                                  "atomically)")
                           .type_name("DIR");
    cmd.flag("--force", args->force,
             "with --llmc-model: when OUT is a symbolic link, write the file it points to (without it, only a "
             "regular file is replaced)");
    llmc.excludes(hf);
    hf.excludes(llmc);
    cmd.option("--vocab", args->vocab,
               "with --hf-model: GPT-2's vocabulary (encoder.json, vocab.bpe), written as vocab.json, merges.txt "
               "and tokenizer_config.json for AutoTokenizer")
        .type_name("DIR");
    cmd.on_run([args] { run_export(*args); });
}

}  // namespace adacc
