// GPT-2's byte-level BPE tokenizer, loaded from OpenAI's encoder.json + vocab.bpe, producing
// exactly the ids OpenAI's reference tokenizer (tiktoken's "gpt2" encoding) produces.
//
// Pipeline: the text is split into pieces by GPT-2's pre-tokenization regex (PCRE2, UTF + UCP,
// JIT-compiled when available); a piece that is itself a vocabulary entry becomes that token;
// any other piece is split into bytes and adjacent parts are merged, lowest rank first
// (leftmost on ties), while their concatenation is a vocabulary entry. That is tiktoken's
// algorithm; a token's rank is its id, which load() checks against the merge order in vocab.bpe.
//
// Choices where the reference leaves room:
//   * `<|endoftext|>` (50256) is recognized only with SpecialTokens::allowed. By default it is
//     ordinary text, as in tiktoken's encode_ordinary, so a document that happens to contain the
//     string cannot inject document boundaries; `adacc prepare` adds the real separators itself.
//   * Invalid UTF-8 is encoded, not rejected: GPT-2's BPE works on bytes, so each run of bytes
//     that is not valid UTF-8 becomes a piece of its own, encoded from byte tokens. (PCRE2 runs
//     with PCRE2_MATCH_INVALID_UTF, which makes such bytes unmatchable instead of an error.)
//     decode(encode(x)) == x holds for every byte string x. tiktoken cannot take such input.
//   * Whitespace in the regex is Unicode White_Space, spelled out, because tiktoken's regex engine
//     means that by \s while PCRE2's \s differs on U+180E.
//
// A Gpt2Tokenizer is immutable after load(): copies share the tables, and encode/decode may be
// called from several threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace adacc {

// A vocabulary's two files: the token -> id map and the BPE merges in rank order. OpenAI names
// them encoder.json and vocab.bpe; a Hugging Face model folder holds the same two files as
// vocab.json and merges.txt.
struct Gpt2VocabFiles {
    std::filesystem::path encoder, merges;
    static Gpt2VocabFiles openai(const std::filesystem::path& dir) { return {dir / "encoder.json", dir / "vocab.bpe"}; }
    static Gpt2VocabFiles hugging_face(const std::filesystem::path& dir) {
        return {dir / "vocab.json", dir / "merges.txt"};
    }
};

enum class SpecialTokens {
    as_text,  // "<|endoftext|>" in the input is encoded like any other text (tiktoken's encode_ordinary)
    allowed,  // "<|endoftext|>" in the input becomes the end-of-text token
};

class Gpt2Tokenizer {
public:
    // Reads vocab_files(dir); throws UserError naming the file and the fix (also for an empty
    // path, so commands can pass an unset --vocab straight through).
    static Gpt2Tokenizer load(const std::filesystem::path& dir);
    // The files load(dir) reads: OpenAI's names, or Hugging Face's where DIR has vocab.json and no
    // encoder.json (a Hub download or `adacc export --hf-model` folder).
    static Gpt2VocabFiles vocab_files(const std::filesystem::path& dir);

    std::vector<std::uint32_t> encode(std::string_view text, SpecialTokens special = SpecialTokens::as_text) const;
    // Throws UserError for an id outside the vocabulary.
    std::string decode(std::span<const std::uint32_t> ids) const;

    std::uint32_t eot_token() const;   // <|endoftext|>, 50256 for GPT-2
    std::uint32_t vocab_size() const;  // 50257 for GPT-2 (ids 0 .. vocab_size()-1)

    struct Tables;  // the vocabulary and the compiled regex (tokenizer.cpp)

private:
    explicit Gpt2Tokenizer(std::shared_ptr<const Tables> tables);
    std::shared_ptr<const Tables> tables_;
};

}  // namespace adacc
