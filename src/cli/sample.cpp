// adacc sample --checkpoint DIR|FILE | --llmc-model FILE | --hf-model DIR --prompt TEXT --vocab DIR
//              [--tokens N --temperature T --top-k K --seed S]
#include <cstdio>

#include "data/tokenizer.h"
#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/eval/sampler.h"
#include "src/train/weights_file.h"

namespace adacc {

namespace {

struct SampleArgs {
    std::string checkpoint, llmc_model, hf_model, prompt, vocab, device = "cpu", dtype = "auto";
    SamplingOptions options;
};

void run_sample(const SampleArgs& args) {
    const WeightsFile weights = open_weights_option(args.checkpoint, args.llmc_model, args.hf_model);
    const GPTConfig& shape = weights.shape;
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(args.vocab);
    if (static_cast<std::uint32_t>(shape.vocab_size) != tokenizer.vocab_size())
        throw UserError("the model's vocab_size is " + std::to_string(shape.vocab_size) + " but the tokenizer in " +
                        args.vocab + " has " + std::to_string(tokenizer.vocab_size()) +
                        " tokens: sample needs a model trained on GPT-2 token ids");
    const Device device = parse_device(args.device);
    GPTModel model =
        GPTModel::for_inference(shape, 1, shape.max_seq_len, {device, resolve_model_dtype(args.dtype, device)});
    load_weights(weights, model);
    const auto ids = tokenizer.encode(args.prompt);
    std::vector<int> prompt(ids.begin(), ids.end());
    if (prompt.empty()) prompt.push_back(static_cast<int>(tokenizer.eot_token()));
    std::printf("%s", args.prompt.c_str());
    std::fflush(stdout);
    // Decode incrementally: a multi-byte character may span tokens, so print the new suffix of
    // the decoded text instead of token by token.
    std::vector<std::uint32_t> out;
    std::string printed;
    generate(model, prompt, args.options, [&](int token) {
        out.push_back(static_cast<std::uint32_t>(token));
        const std::string text = tokenizer.decode(out);
        std::printf("%s", text.substr(printed.size()).c_str());
        std::fflush(stdout);
        printed = text;
    });
    std::printf("\n");
}

}  // namespace

void add_sample_command(Command& program) {
    auto args = std::make_shared<SampleArgs>();
    Command cmd = program.subcommand(
        "sample", "Generate text from a checkpoint, an llm.c model file or a Hugging Face GPT-2 folder");
    add_model_options(cmd, args->checkpoint, args->llmc_model, args->hf_model);
    cmd.option("--prompt", args->prompt, "text to continue").required();
    add_device_option(cmd, args->device, "cpu");
    add_dtype_option(cmd, args->dtype, "auto");
    cmd.option("--vocab", args->vocab, "folder with GPT-2's encoder.json and vocab.bpe").required();
    cmd.option("--tokens", args->options.tokens, "tokens to generate").in_range(1, 100000);
    cmd.option("--temperature", args->options.temperature, "softmax temperature (0 = greedy)").in_range(0.0, 100.0);
    cmd.option("--top-k", args->options.top_k, "sample among the k most likely tokens (0 = all)").in_range(0, 1 << 20);
    cmd.option("--seed", args->options.seed, "sampling seed");
    cmd.on_run([args] { run_sample(*args); });
}

}  // namespace adacc
