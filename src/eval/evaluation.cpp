#include "src/eval/evaluation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "data/tokenizer.h"
#include "kernels/vector_math.h"
#include "src/common/errors.h"

namespace adacc {

TextEncoder gpt2_text_encoder(const Gpt2Tokenizer& tokenizer) {
    TextEncoder encoder;
    encoder.encode = [tokenizer](std::string_view text) {
        const auto ids = tokenizer.encode(text);
        return std::vector<int>(ids.begin(), ids.end());
    };
    encoder.decode = [tokenizer](std::span<const int> ids) {
        const std::vector<std::uint32_t> unsigned_ids(ids.begin(), ids.end());
        return tokenizer.decode(unsigned_ids);
    };
    encoder.prefix_token = static_cast<int>(tokenizer.eot_token());
    encoder.vocab_size = static_cast<int>(tokenizer.vocab_size());
    return encoder;
}

TextEncoder byte_text_encoder() {
    TextEncoder encoder;
    encoder.encode = [](std::string_view text) {
        std::vector<int> ids;
        ids.reserve(text.size());
        for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
        return ids;
    };
    encoder.decode = [](std::span<const int> ids) {
        std::string text;
        for (const int id : ids)
            if (id >= 0 && id < 256) text.push_back(static_cast<char>(id));
        return text;
    };
    encoder.prefix_token = 256;
    encoder.vocab_size = 257;
    return encoder;
}

namespace {

// Python's str.isspace: bidirectional class WS, B or S, or general category Zs.
bool is_python_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point ending at `end` (exclusive) and its byte length; length 0 for invalid UTF-8.
std::pair<char32_t, std::size_t> last_code_point(std::string_view text, std::size_t end) {
    std::size_t start = end;
    while (start > 0 && end - start < 4) {
        --start;
        if ((static_cast<unsigned char>(text[start]) & 0xC0) != 0x80) break;
    }
    if (start == end) return {0, 0};
    const auto lead = static_cast<unsigned char>(text[start]);
    const std::size_t length = end - start;
    const std::size_t expected = lead < 0x80           ? 1
                                 : (lead >> 5) == 0x6  ? 2
                                 : (lead >> 4) == 0xE  ? 3
                                 : (lead >> 3) == 0x1E ? 4
                                                       : 0;
    if (expected != length) return {0, 0};
    char32_t c = length == 1 ? lead : length == 2 ? (lead & 0x1F) : length == 3 ? (lead & 0x0F) : (lead & 0x07);
    for (std::size_t i = start + 1; i < end; ++i) c = (c << 6) | (static_cast<unsigned char>(text[i]) & 0x3F);
    return {c, length};
}

}  // namespace

std::size_t trailing_whitespace_bytes(std::string_view text) {
    std::size_t end = text.size();
    while (end > 0) {
        const auto [c, length] = last_code_point(text, end);
        if (length == 0 || !is_python_space(c)) break;
        end -= length;
    }
    return text.size() - end;
}

LoglikelihoodRequest encode_request(const TextEncoder& encoder, std::string_view context,
                                    std::string_view continuation) {
    LoglikelihoodRequest request;
    if (context.empty()) {
        request.context = {encoder.prefix_token};
        request.continuation = encoder.encode(continuation);
    } else {
        // Trailing whitespace of the context moves to the front of the continuation.
        const std::size_t spaces = trailing_whitespace_bytes(context);
        std::string cont(continuation);
        if (spaces > 0) {
            cont.insert(0, context.substr(context.size() - spaces));
            context.remove_suffix(spaces);
        }
        const std::vector<int> whole = encoder.encode(std::string(context) + cont);
        request.context = encoder.encode(context);
        if (whole.size() > request.context.size())
            request.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(request.context.size()),
                                        whole.end());
        // A whitespace-only context encodes to nothing (the harness would fail an assertion):
        // score it like an empty context.
        if (request.context.empty()) request.context = {encoder.prefix_token};
    }
    if (request.continuation.empty())
        throw UserError("the continuation '" + std::string(continuation) +
                        "' encodes to no tokens of its own after its context: nothing to score");
    return request;
}

ScoringWindow scoring_window(const LoglikelihoodRequest& request, int window) {
    const std::size_t cont = request.continuation.size(), all = request.context.size() + cont;
    if (cont > static_cast<std::size_t>(window))
        throw UserError("a continuation of " + std::to_string(cont) + " tokens does not fit the model's window of " +
                        std::to_string(window) +
                        " tokens (model.max_seq_len); lm-evaluation-harness refuses such "
                        "requests too: evaluate a model with a longer max_seq_len");
    const std::size_t kept = std::min(all, static_cast<std::size_t>(window) + 1);
    return {all - kept, static_cast<int>(kept - 1)};
}

int required_seq_len(std::span<const LoglikelihoodRequest> requests, int window) {
    int longest = 1;
    for (const auto& request : requests) longest = std::max(longest, scoring_window(request, window).input_length);
    return longest;
}

std::vector<std::size_t> scoring_order(std::span<const LoglikelihoodRequest> requests) {
    std::vector<std::size_t> order(requests.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    // Compares ctx + cont without concatenating.
    auto token = [&](std::size_t r, std::size_t i) {
        const auto& q = requests[r];
        return i < q.context.size() ? q.context[i] : q.continuation[i - q.context.size()];
    };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const std::size_t la = requests[a].context.size() + requests[a].continuation.size();
        const std::size_t lb = requests[b].context.size() + requests[b].continuation.size();
        if (la != lb) return la > lb;
        for (std::size_t i = 0; i < la; ++i)
            if (token(a, i) != token(b, i)) return token(a, i) < token(b, i);
        return false;
    });
    return order;
}

// exp in float (Cephes-style, ~2 ulp, vectorised: the harness's own log_softmax runs in float32),
// its sum in double.
TokenScore score_token(const float* logits, int vocab_size, int target) {
    float best = -INFINITY;
#pragma omp simd reduction(max : best)
    for (int j = 0; j < vocab_size; ++j) best = logits[j] > best ? logits[j] : best;
    int argmax = 0;
    while (argmax < vocab_size - 1 && !(logits[argmax] == best)) ++argmax;  // the first maximum
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < vocab_size; ++j) sum += static_cast<double>(exp_approx(logits[j] - best));
    return {static_cast<double>(logits[target]) - static_cast<double>(best) - std::log(sum), argmax};
}

namespace {

// score_requests' preconditions: an inference model allocated for the batch and the requests'
// windows, non-empty parts, and token ids inside the vocabulary (a UserError: the model and the
// tokenizer do not match).
void check_requests(const GPTModel& model, std::span<const LoglikelihoodRequest> requests, int batch) {
    const GPTConfig& config = model.config();
    const int V = config.vocab_size;
    if (model.memory().gradients != 0 || model.memory().tape != 0)
        throw std::logic_error("score_requests needs an inference model (GPTModel::for_inference)");
    if (batch > model.max_batch())
        throw std::logic_error("score_requests: batch " + std::to_string(batch) + " exceeds the model's allocated " +
                               std::to_string(model.max_batch()));
    const int needed = required_seq_len(requests, config.max_seq_len);
    if (needed > model.max_seq_len())
        throw std::logic_error("score_requests: the model is allocated for T = " + std::to_string(model.max_seq_len()) +
                               " but the requests need " + std::to_string(needed));
    for (const auto& request : requests) {
        if (request.context.empty() || request.continuation.empty())
            throw std::logic_error("score_requests: empty context or continuation");
        for (const auto* part : {&request.context, &request.continuation})
            for (const int id : *part)
                if (id < 0 || id >= V)
                    throw UserError("token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                                    std::to_string(V) + ": the model and the tokenizer do not match");
    }
}

// The chunk's input windows as a B x T batch (T its longest window), right-padded with token 0.
void fill_batch(std::span<const LoglikelihoodRequest> requests, std::span<const std::size_t> chunk,
                const std::vector<ScoringWindow>& windows, int T, std::vector<int>& tokens) {
    const int B = static_cast<int>(chunk.size());
    std::fill(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(B) * T, 0);
    for (int b = 0; b < B; ++b) {
        const auto& request = requests[chunk[b]];
        const ScoringWindow& w = windows[chunk[b]];
        for (int t = 0; t < w.input_length; ++t) {
            const std::size_t i = w.begin + static_cast<std::size_t>(t);
            tokens[static_cast<std::size_t>(b) * T + t] =
                i < request.context.size() ? request.context[i] : request.continuation[i - request.context.size()];
        }
    }
}

// The result of a request whose continuation's logit rows (n of Vp each) start at `rows`.
LoglikelihoodResult score_continuation(const LoglikelihoodRequest& request, const float* rows, int V, int Vp) {
    const int n = static_cast<int>(request.continuation.size());
    LoglikelihoodResult result;
    result.greedy_tokens.resize(static_cast<std::size_t>(n));
    result.is_greedy = true;
    double ll = 0.0;
    for (int j = 0; j < n; ++j) {
        const int target = request.continuation[static_cast<std::size_t>(j)];
        const TokenScore s = score_token(rows + static_cast<std::size_t>(j) * Vp, V, target);
        ll += s.logprob;
        result.greedy_tokens[static_cast<std::size_t>(j)] = s.argmax;
        result.is_greedy = result.is_greedy && s.argmax == target;
    }
    result.loglikelihood = ll;
    return result;
}

}  // namespace

std::vector<LoglikelihoodResult> score_requests(GPTModel& model, std::span<const LoglikelihoodRequest> requests,
                                                int batch, const ScoreCallback& callback) {
    const GPTConfig& config = model.config();
    const int window = config.max_seq_len, V = config.vocab_size, Vp = config.padded_vocab_size();
    if (batch <= 0) batch = model.max_batch();
    check_requests(model, requests, batch);

    std::vector<LoglikelihoodResult> results(requests.size());
    const std::vector<std::size_t> order = scoring_order(requests);
    std::vector<ScoringWindow> windows(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) windows[i] = scoring_window(requests[i], window);
    std::vector<int> tokens(static_cast<std::size_t>(batch) * model.max_seq_len());
    std::vector<float> host_logits;  // the continuations' logit rows
    std::vector<std::size_t> row_start(static_cast<std::size_t>(batch));

    for (std::size_t first = 0; first < order.size(); first += static_cast<std::size_t>(batch)) {
        const std::size_t count = std::min(order.size() - first, static_cast<std::size_t>(batch));
        const std::span<const std::size_t> chunk(order.data() + first, count);
        int T = 1;
        for (const std::size_t r : chunk) T = std::max(T, windows[r].input_length);
        const int B = static_cast<int>(count);
        fill_batch(requests, chunk, windows, T, tokens);
        model.forward(tokens.data(), nullptr, B, T, DropoutContext{0, 0, 0, false}, 0.0f);
        // Only the continuation's rows come to the host: request b's n rows at row_start[b] * Vp.
        std::size_t rows = 0;
        for (int b = 0; b < B; ++b) rows += requests[chunk[b]].continuation.size();
        host_logits.resize(std::max(host_logits.size(), rows * static_cast<std::size_t>(Vp)));
        rows = 0;
        for (int b = 0; b < B; ++b) {
            row_start[static_cast<std::size_t>(b)] = rows;
            const std::size_t n = requests[chunk[b]].continuation.size();
            model.read_logits(static_cast<std::size_t>(b) * T + windows[chunk[b]].input_length - n, n,
                              host_logits.data() + rows * static_cast<std::size_t>(Vp));
            rows += n;
        }
#pragma omp parallel for schedule(dynamic)
        for (int b = 0; b < B; ++b)
            results[chunk[b]] = score_continuation(
                requests[chunk[b]], host_logits.data() + row_start[static_cast<std::size_t>(b)] * Vp, V, Vp);
        if (callback) callback(chunk, results);
    }
    return results;
}

}  // namespace adacc
