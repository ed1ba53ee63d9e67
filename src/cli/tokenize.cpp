// `adacc tokenize`: GPT-2 BPE on stdin, for inspecting what the model sees and for scripts.
//   adacc tokenize --vocab DIR            text -> ids on one line, separated by single spaces
//   adacc tokenize --vocab DIR --count    text -> the number of tokens
//   adacc tokenize --vocab DIR --decode   whitespace-separated ids -> text (bytes as they are)
// "<|endoftext|>" in the text is encoded as ordinary text (see data/tokenizer.h).
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "src/cli/commands.h"
#include "src/common/errors.h"

namespace adacc {
namespace {

struct TokenizeArgs {
    std::filesystem::path vocab;
    bool decode = false;
    bool count = false;
};

std::string read_stdin() {
    std::string input;
    char buffer[1 << 16];
    for (std::size_t got; (got = std::fread(buffer, 1, sizeof(buffer), stdin)) > 0;) input.append(buffer, got);
    return input;
}

void write_stdout(std::string_view text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::vector<std::uint32_t> parse_ids(std::string_view text) {
    constexpr std::string_view kSpace = " \t\n\r\v\f";
    std::vector<std::uint32_t> ids;
    for (std::size_t start = text.find_first_not_of(kSpace); start != std::string_view::npos;
         start = text.find_first_not_of(kSpace, start)) {
        const std::string_view word = text.substr(start, text.find_first_of(kSpace, start) - start);
        std::uint32_t id = 0;
        const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), id);
        if (error != std::errc() || end != word.data() + word.size())
            throw UserError("--decode reads token ids separated by whitespace; '" + std::string(word.substr(0, 40)) +
                            "' is not one");
        ids.push_back(id);
        start += word.size();
    }
    return ids;
}

std::string format_ids(const std::vector<std::uint32_t>& ids) {
    std::string line;
    line.reserve(ids.size() * 6 + 1);
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) line.push_back(' ');
        line += std::to_string(ids[i]);
    }
    line.push_back('\n');
    return line;
}

void run_tokenize(const TokenizeArgs& args) {
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(args.vocab);
    const std::string input = read_stdin();
    if (args.decode) {
        write_stdout(tokenizer.decode(parse_ids(input)));
        return;
    }
    const std::vector<std::uint32_t> ids = tokenizer.encode(input);
    write_stdout(args.count ? std::to_string(ids.size()) + "\n" : format_ids(ids));
}

}  // namespace

void add_tokenize_command(Command& program) {
    auto args = std::make_shared<TokenizeArgs>();
    Command command = program.subcommand(
        "tokenize", "GPT-2 BPE on stdin: text -> token ids (one line), or ids -> text with --decode");
    command.option("--vocab", args->vocab, "directory holding GPT-2's encoder.json and vocab.bpe").type_name("DIR");
    CommandOption decode = command.flag("--decode", args->decode, "read whitespace-separated ids, print the text");
    command.flag("--count", args->count, "print only the number of tokens").excludes(decode);
    command.on_run([args] { run_tokenize(*args); });
}

}  // namespace adacc
