#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "src/common/errors.h"
#include "src/common/file_io.h"

namespace adacc {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::uint32_t kNoRank = std::numeric_limits<std::uint32_t>::max();
constexpr std::string_view kVocabFix =
    "pass --vocab DIR holding encoder.json and vocab.bpe (`scripts/download_data.sh vocab DIR` fetches them)";

// ---- GPT-2's byte <-> printable-unicode mapping ---------------------------------------------
// encoder.json and vocab.bpe spell token bytes as printable characters: a byte that is printable
// Latin-1 (other than space) stands for itself, the remaining 68 bytes map to U+0100, U+0101, ...
// in byte order. Internally tokens are raw bytes; this mapping is needed only to read the files.

bool is_printable_latin1(unsigned byte) {
    return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
}

// The 256 bytes in rank order: printable ones first, then the rest (tiktoken's rank_to_intbyte).
// Also the order of GPT-2's first 256 token ids.
std::array<std::uint8_t, 256> bytes_in_rank_order() {
    std::array<std::uint8_t, 256> order{};
    std::size_t next = 0;
    for (unsigned byte = 0; byte < 256; ++byte)
        if (is_printable_latin1(byte)) order[next++] = static_cast<std::uint8_t>(byte);
    for (unsigned byte = 0; byte < 256; ++byte)
        if (!is_printable_latin1(byte)) order[next++] = static_cast<std::uint8_t>(byte);
    return order;
}

// Code point -> byte for the 324 code points the mapping uses; -1 elsewhere.
std::array<int, 324> code_point_to_byte_table() {
    std::array<int, 324> table;
    table.fill(-1);
    unsigned shifted = 256;
    for (unsigned byte = 0; byte < 256; ++byte) table[is_printable_latin1(byte) ? byte : shifted++] = int(byte);
    return table;
}

// Decodes a token as spelled in encoder.json / vocab.bpe into its raw bytes.
std::string token_spelling_to_bytes(std::string_view spelling, const std::filesystem::path& file) {
    static const std::array<int, 324> code_point_to_byte = code_point_to_byte_table();
    std::string bytes;
    for (std::size_t i = 0; i < spelling.size();) {
        // The mapping only uses code points below U+0800, i.e. 1- or 2-byte UTF-8.
        const auto lead = static_cast<unsigned char>(spelling[i]);
        unsigned code_point = 0x800;
        if (lead < 0x80) {
            code_point = lead;
            i += 1;
        } else if ((lead & 0xE0) == 0xC0 && i + 1 < spelling.size()) {
            code_point = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(spelling[i + 1]) & 0x3Fu);
            i += 2;
        }
        if (code_point >= code_point_to_byte.size() || code_point_to_byte[code_point] < 0)
            throw UserError(quoted(file) + " spells token '" + std::string(spelling) +
                            "' with a character outside GPT-2's byte mapping: it is not a GPT-2 vocabulary file; " +
                            std::string(kVocabFix));
        bytes.push_back(static_cast<char>(code_point_to_byte[code_point]));
    }
    return bytes;
}

std::string read_vocab_file(const std::filesystem::path& path) {
    std::ifstream stream(path, std::ios::binary);
    if (!stream) throw UserError("cannot read " + quoted(path) + ": " + std::string(kVocabFix));
    std::ostringstream contents;
    contents << stream.rdbuf();
    return contents.str();
}

// ---- GPT-2's pre-tokenization regex ---------------------------------------------------------
// GPT-2's pattern is 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s spelled out as Unicode White_Space (see tokenizer.h for why).
std::string gpt2_pattern() {
    const std::string space =
        R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
    return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + space + R"(\p{L}\p{N}]+|[)" + space + "]+(?![^" +
           space + "])|[" + space + "]+";
}

std::string pcre2_message(int error_code) {
    std::array<PCRE2_UCHAR, 256> buffer{};
    pcre2_get_error_message(error_code, buffer.data(), buffer.size());
    return reinterpret_cast<const char*>(buffer.data());
}

struct CodeDeleter {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

struct Gpt2Tokenizer::Tables {
    std::string token_bytes;                   // every token's bytes back to back, in id order
    std::vector<std::uint32_t> token_offsets;  // id -> start in token_bytes; one extra entry: the end
    // Bytes of every mergeable token (all but <|endoftext|>) -> its id, which is also its merge rank.
    // The keys view token_bytes, which never changes after load.
    std::unordered_map<std::string_view, std::uint32_t> ranks;
    std::uint32_t eot_id = 0;
    std::unique_ptr<pcre2_code, CodeDeleter> regex;
    bool jit = false;

    std::uint32_t vocab_size() const { return static_cast<std::uint32_t>(token_offsets.size() - 1); }
    std::string_view bytes_of(std::uint32_t id) const {
        return std::string_view(token_bytes).substr(token_offsets[id], token_offsets[id + 1] - token_offsets[id]);
    }
    std::uint32_t rank_of(std::string_view bytes) const {
        const auto found = ranks.find(bytes);
        return found == ranks.end() ? kNoRank : found->second;
    }
};

namespace {

using Tables = Gpt2Tokenizer::Tables;

// Fills the id -> bytes table from encoder.json, and the ranks of all tokens but <|endoftext|>.
void load_encoder_json(const std::filesystem::path& path, Tables& tables) {
    nlohmann::json encoder;
    try {
        encoder = nlohmann::json::parse(read_vocab_file(path));
    } catch (const nlohmann::json::exception& error) {
        throw UserError(quoted(path) + " is not valid JSON (" + error.what() + "): " + std::string(kVocabFix));
    }
    if (!encoder.is_object() || encoder.empty())
        throw UserError(quoted(path) + " is not a JSON object of token -> id: " + std::string(kVocabFix));

    std::vector<std::string> bytes_by_id(encoder.size());
    std::vector<bool> seen(encoder.size(), false);
    bool has_eot = false;
    for (const auto& [spelling, id_value] : encoder.items()) {
        const auto id = id_value.is_number_unsigned() ? id_value.get<std::uint64_t>() : encoder.size();
        if (id >= encoder.size() || seen[id])
            throw UserError(quoted(path) + " maps '" + spelling + "' to " + id_value.dump() + ", but ids must be 0.." +
                            std::to_string(encoder.size() - 1) + ", each used once: " + std::string(kVocabFix));
        seen[id] = true;
        if (spelling == kEndOfText) {
            tables.eot_id = static_cast<std::uint32_t>(id);
            has_eot = true;
        }
        bytes_by_id[id] = token_spelling_to_bytes(spelling, path);
    }
    if (!has_eot) throw UserError(quoted(path) + " has no <|endoftext|> token: " + std::string(kVocabFix));

    for (const std::string& bytes : bytes_by_id) {
        tables.token_offsets.push_back(static_cast<std::uint32_t>(tables.token_bytes.size()));
        tables.token_bytes += bytes;
    }
    tables.token_offsets.push_back(static_cast<std::uint32_t>(tables.token_bytes.size()));

    tables.ranks.reserve(bytes_by_id.size());
    for (std::uint32_t id = 0; id < tables.vocab_size(); ++id) {
        if (id == tables.eot_id) continue;
        if (!tables.ranks.emplace(tables.bytes_of(id), id).second)
            throw UserError(quoted(path) + " lists token '" + bytes_by_id[id] + "' twice: " + std::string(kVocabFix));
    }
}

// tiktoken's consistency check: BPE merges tokens by rank, and a token's rank must be its id.
// The ranks are: the 256 single bytes in rank order, then one per line of vocab.bpe, in order.
void check_merges_match_ids(const std::filesystem::path& path, const Tables& tables) {
    const std::string mismatch = quoted(path) + " does not belong to the encoder.json beside it ";
    const auto byte_order = bytes_in_rank_order();
    for (std::uint32_t rank = 0; rank < byte_order.size(); ++rank)
        if (tables.rank_of(std::string(1, static_cast<char>(byte_order[rank]))) != rank)
            throw UserError(mismatch + "(single-byte token ids differ from GPT-2's): " + std::string(kVocabFix));

    std::istringstream lines(read_vocab_file(path));
    std::string line;
    std::getline(lines, line);  // "#version: 0.2"
    std::uint32_t rank = static_cast<std::uint32_t>(byte_order.size());
    for (std::size_t line_number = 2; std::getline(lines, line); ++line_number) {
        std::istringstream fields(line);
        std::string first, second, extra;
        if (!(fields >> first)) continue;  // blank line
        if (!(fields >> second) || (fields >> extra))
            throw UserError("line " + std::to_string(line_number) + " of " + quoted(path) +
                            " is not a merge 'A B': " + std::string(kVocabFix));
        const std::string merged = token_spelling_to_bytes(first, path) + token_spelling_to_bytes(second, path);
        if (tables.rank_of(merged) != rank)
            throw UserError(mismatch + "(line " + std::to_string(line_number) + " merges '" + first + " " + second +
                            "', which encoder.json does not give id " + std::to_string(rank) +
                            "): " + std::string(kVocabFix));
        ++rank;
    }
    if (rank != tables.ranks.size())
        throw UserError(mismatch + "(" + std::to_string(rank - byte_order.size()) + " merges for " +
                        std::to_string(tables.ranks.size()) + " tokens): " + std::string(kVocabFix));
}

void compile_regex(Tables& tables) {
    const std::string pattern = gpt2_pattern();
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    tables.regex.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset,
                                     nullptr));
    if (!tables.regex)
        throw std::logic_error("GPT-2 regex does not compile at " + std::to_string(error_offset) + ": " +
                               pcre2_message(error_code));
    // JIT makes matching several times faster; without it (a PCRE2 built without JIT) the
    // interpreter gives the same matches.
    tables.jit = pcre2_jit_compile(tables.regex.get(), PCRE2_JIT_COMPLETE) == 0;
}

// Encodes text without special tokens. One encoder per encode() call: it owns the scratch state
// (PCRE2 match data, BPE parts, the word cache), so the shared tables stay immutable.
class OrdinaryEncoder {
public:
    OrdinaryEncoder(const Tables& tables, std::vector<std::uint32_t>& out)
        : tables_(tables), out_(out), match_data_(pcre2_match_data_create_from_pattern(tables.regex.get(), nullptr)) {
        if (!match_data_) throw std::bad_alloc();
    }

    void encode(std::string_view text) {
        std::size_t offset = 0;
        while (offset < text.size()) {
            std::size_t start = text.size(), end = text.size();
            find_piece(text, offset, start, end);
            // The regex matches every valid character, so bytes it skipped are invalid UTF-8.
            if (start > offset) encode_piece(text.substr(offset, start - offset));
            if (end > start) encode_piece(text.substr(start, end - start));
            offset = end;
        }
    }

private:
    // Sets [start, end) to the next regex match at or after offset; leaves them at the end of
    // the text when there is none.
    void find_piece(std::string_view text, std::size_t offset, std::size_t& start, std::size_t& end) {
        const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        int rc = tables_.jit
                     ? pcre2_jit_match(tables_.regex.get(), subject, text.size(), offset, 0, match_data_.get(), nullptr)
                     : PCRE2_ERROR_JIT_STACKLIMIT;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // no JIT, or its small stack ran out: interpret
            rc = pcre2_match(tables_.regex.get(), subject, text.size(), offset, PCRE2_NO_JIT, match_data_.get(),
                             nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) return;
        if (rc < 0) throw std::runtime_error("GPT-2 pre-tokenization failed: " + pcre2_message(rc));
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data_.get());
        start = ovector[0];
        end = ovector[1];
    }

    void encode_piece(std::string_view piece) {
        if (const std::uint32_t whole = tables_.rank_of(piece); whole != kNoRank) {
            out_.push_back(whole);  // most words are a single token
            return;
        }
        if (const auto cached = cache_.find(piece); cached != cache_.end()) {
            const auto [first, count] = cached->second;
            out_.insert(out_.end(), cache_ids_.begin() + first, cache_ids_.begin() + first + count);
            return;
        }
        if (cache_.size() >= kCacheEntries) {  // keep memory bounded on text with endless new words
            cache_.clear();
            cache_ids_.clear();
        }
        const std::size_t first = cache_ids_.size();
        byte_pair_merge(piece, cache_ids_);
        cache_.emplace(std::string(piece), CachedIds{first, cache_ids_.size() - first});
        out_.insert(out_.end(), cache_ids_.begin() + first, cache_ids_.end());
    }

    // tiktoken's merge rule: repeatedly join the adjacent pair of parts whose concatenation has
    // the lowest rank (the leftmost such pair on ties) until no adjacent pair forms a token.
    // A min-heap of candidate pairs with lazy invalidation makes that O(n log n), so a piece that
    // is one huge run (a megabyte of "a") costs no more than ordinary text.
    // Parts are named by their start byte: part s covers [s, part_end_[s]); 0 marks a merged-away part.
    void byte_pair_merge(std::string_view piece, std::vector<std::uint32_t>& ids) {
        const std::size_t size = piece.size();
        part_end_.resize(size);
        part_start_before_.resize(size + 1);
        candidates_.clear();
        for (std::size_t start = 0; start < size; ++start) {
            part_end_[start] = start + 1;
            part_start_before_[start + 1] = start;
            if (start + 1 < size) push_candidate(piece, start, start + 1, start + 2);
        }
        while (!candidates_.empty()) {
            std::pop_heap(candidates_.begin(), candidates_.end(), later_candidate);
            const Candidate pair = candidates_.back();
            candidates_.pop_back();
            const bool still_adjacent = part_end_[pair.left] == pair.right && part_end_[pair.right] == pair.end;
            if (!still_adjacent) continue;  // one of its parts was merged since: stale
            part_end_[pair.left] = pair.end;
            part_end_[pair.right] = 0;
            if (pair.end < size) {
                part_start_before_[pair.end] = pair.left;
                push_candidate(piece, pair.left, pair.end, part_end_[pair.end]);
            }
            if (pair.left > 0) push_candidate(piece, part_start_before_[pair.left], pair.left, pair.end);
        }
        for (std::size_t start = 0; start < size; start = part_end_[start])
            ids.push_back(tables_.rank_of(piece.substr(start, part_end_[start] - start)));
    }

    // Parts [left, right) and [right, end) are adjacent; queue them if together they form a token.
    void push_candidate(std::string_view piece, std::size_t left, std::size_t right, std::size_t end) {
        const std::uint32_t rank = tables_.rank_of(piece.substr(left, end - left));
        if (rank == kNoRank) return;
        candidates_.push_back({rank, left, right, end});
        std::push_heap(candidates_.begin(), candidates_.end(), later_candidate);
    }

    struct Candidate {
        std::uint32_t rank;
        std::size_t left, right, end;
    };
    // Heap order: lowest rank first, then leftmost.
    static bool later_candidate(const Candidate& a, const Candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
    }

    struct CachedIds {
        std::size_t first;  // into cache_ids_
        std::size_t count;
    };
    struct StringHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
    };
    static constexpr std::size_t kCacheEntries = 1 << 16;

    const Tables& tables_;
    std::vector<std::uint32_t>& out_;
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data_;
    std::vector<std::size_t> part_end_;  // byte_pair_merge's scratch, reused across pieces
    std::vector<std::size_t> part_start_before_;
    std::vector<Candidate> candidates_;
    // Pieces that needed merging -> their ids (a slice of cache_ids_).
    std::unordered_map<std::string, CachedIds, StringHash, std::equal_to<>> cache_;
    std::vector<std::uint32_t> cache_ids_;
};

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const Tables> tables) : tables_(std::move(tables)) {}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::filesystem::path& dir) {
    if (dir.empty()) throw UserError("no GPT-2 vocabulary directory given: " + std::string(kVocabFix));
    if (!std::filesystem::is_directory(dir))
        throw UserError("GPT-2 vocabulary directory " + quoted(dir) + " does not exist: " + std::string(kVocabFix));
    auto tables = std::make_shared<Tables>();
    const Gpt2VocabFiles files = vocab_files(dir);
    load_encoder_json(files.encoder, *tables);
    check_merges_match_ids(files.merges, *tables);
    compile_regex(*tables);
    return Gpt2Tokenizer(std::move(tables));
}

Gpt2VocabFiles Gpt2Tokenizer::vocab_files(const std::filesystem::path& dir) {
    const Gpt2VocabFiles openai = Gpt2VocabFiles::openai(dir), hugging_face = Gpt2VocabFiles::hugging_face(dir);
    return !std::filesystem::exists(openai.encoder) && std::filesystem::exists(hugging_face.encoder) ? hugging_face
                                                                                                     : openai;
}

std::vector<std::uint32_t> Gpt2Tokenizer::encode(std::string_view text, SpecialTokens special) const {
    std::vector<std::uint32_t> ids;
    ids.reserve(text.size() / 4 + 1);  // English text averages about 4 bytes per token
    OrdinaryEncoder encoder(*tables_, ids);
    if (special == SpecialTokens::as_text) {
        encoder.encode(text);
        return ids;
    }
    for (std::size_t found; (found = text.find(kEndOfText)) != std::string_view::npos;) {
        encoder.encode(text.substr(0, found));
        ids.push_back(tables_->eot_id);
        text.remove_prefix(found + kEndOfText.size());
    }
    encoder.encode(text);
    return ids;
}

std::string Gpt2Tokenizer::decode(std::span<const std::uint32_t> ids) const {
    std::string text;
    for (const std::uint32_t id : ids) {
        if (id >= vocab_size())
            throw UserError("token id " + std::to_string(id) + " is not in the GPT-2 vocabulary (ids are 0.." +
                            std::to_string(vocab_size() - 1) + ")");
        text += tables_->bytes_of(id);
    }
    return text;
}

std::uint32_t Gpt2Tokenizer::eot_token() const { return tables_->eot_id; }

std::uint32_t Gpt2Tokenizer::vocab_size() const { return tables_->vocab_size(); }

}  // namespace adacc
