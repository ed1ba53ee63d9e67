
#include "src/cli/commands.h"

namespace adacc {

void add_model_options(Command& command, std::string& checkpoint, std::string& llmc_model) {
    CommandOption from_checkpoint =
        command.option("--checkpoint", checkpoint, "checkpoint file or run folder (newest checkpoint)").type_name("DIR|FILE");
    CommandOption from_llmc =
        command.option("--llmc-model", llmc_model, "llm.c GPT-2 model file (gpt2_124M.bin, ...)").type_name("FILE");
    from_checkpoint.excludes(from_llmc);
    from_llmc.excludes(from_checkpoint);
}

}  // namespace adacc
