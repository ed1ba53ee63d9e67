
#include "src/cli/commands.h"

namespace adacc {

void add_model_options(Command& command, std::string& checkpoint, std::string& llmc_model, std::string& hf_model) {
    CommandOption from_checkpoint =
        command.option("--checkpoint", checkpoint, "checkpoint file or run folder (newest checkpoint)")
            .type_name("DIR|FILE");
    CommandOption from_llmc =
        command.option("--llmc-model", llmc_model, "llm.c GPT-2 model file (gpt2_124M.bin, ...)").type_name("FILE");
    CommandOption from_hf =
        command.option("--hf-model", hf_model, "Hugging Face GPT-2 folder (config.json, model.safetensors)")
            .type_name("DIR");
    from_checkpoint.excludes(from_llmc).excludes(from_hf);
    from_llmc.excludes(from_checkpoint).excludes(from_hf);
    from_hf.excludes(from_checkpoint).excludes(from_llmc);
}

}  // namespace adacc
