// Log-likelihood scoring of (context, continuation) pairs, exactly as lm-evaluation-harness
// scores them for a decoder-only model (TemplateLM.loglikelihood, _encode_pair and
// HFLM._loglikelihood_tokens; docs/evaluation.md, 'What exactly is computed'):
//
//   1. Trailing whitespace of the context (Python's str.rstrip()) moves to the front of the
//      continuation.
//   2. ctx = encode(context), cont = encode(context + continuation)[len(ctx):]. An empty context
//      is [prefix token] (GPT-2: <|endoftext|>) and cont = encode(continuation).
//   3. The model reads (ctx + cont)[-(W+1):][:-1], W = the model's max_seq_len (left truncation);
//      the logits at its last len(cont) positions predict the continuation, teacher-forced.
//   4. log-softmax over the real vocabulary (config.vocab_size columns; padded columns never
//      count), summed in double: ll = sum of log p(cont_i | ...), is_greedy = every cont_i is the
//      arg-max (first maximum on ties).
//
// Requests are scored in the harness's order (longest ctx + cont first, then by token ids),
// several per forward, right-padded to the batch's longest input. Rows of a batch never interact
// (causal attention, per-row layernorm, row-wise matmuls), so batching changes no result; the
// tests check that. Scoring runs on an inference model (GPTModel::for_inference): no gradients,
// optimizer state or tape exist to be touched.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/engine/gpt_model.h"

namespace adacc {

class Gpt2Tokenizer;

// How text becomes token ids: GPT-2's BPE, or raw bytes (tests and tiny byte-vocabulary models).
struct TextEncoder {
    std::function<std::vector<int>(std::string_view)> encode;
    std::function<std::string(std::span<const int>)> decode;  // for showing predictions
    int prefix_token = 0;  // the context of a request whose context is "" (GPT-2: <|endoftext|>)
    int vocab_size = 0;    // ids lie in [0, vocab_size)
};
// GPT-2 byte-level BPE; the encoder shares the tokenizer's tables (copies are cheap).
TextEncoder gpt2_text_encoder(const Gpt2Tokenizer& tokenizer);
// Byte b -> id b, prefix token 256, vocabulary 257.
TextEncoder byte_text_encoder();

struct LoglikelihoodRequest {
    std::vector<int> context;       // never empty
    std::vector<int> continuation;  // never empty
};

// Steps 1 and 2 above. UserError when the continuation encodes to no tokens.
LoglikelihoodRequest encode_request(const TextEncoder& encoder, std::string_view context,
                                    std::string_view continuation);

// Bytes of trailing whitespace in UTF-8 `text` by Python's str.isspace (what str.rstrip() removes).
std::size_t trailing_whitespace_bytes(std::string_view text);

// Step 3 for one request and window W: the model input is all[begin, begin + input_length) of
// all = ctx + cont, and the continuation is predicted at input positions
// [input_length - len(cont), input_length).
struct ScoringWindow {
    std::size_t begin = 0;
    int input_length = 0;
};
// UserError when the continuation is longer than the window (the harness asserts the same).
ScoringWindow scoring_window(const LoglikelihoodRequest& request, int window);

// The longest model input among the requests: the T an eval model has to be allocated with.
int required_seq_len(std::span<const LoglikelihoodRequest> requests, int window);

// The harness's order: longest ctx + cont first, ties by the token ids ascending.
std::vector<std::size_t> scoring_order(std::span<const LoglikelihoodRequest> requests);

struct LoglikelihoodResult {
    double loglikelihood = 0.0;      // natural log, summed over the continuation's tokens
    bool is_greedy = false;          // every continuation token was the arg-max
    std::vector<int> greedy_tokens;  // the arg-max at each continuation position
};

// log p(target) under softmax over the first `vocab_size` entries of `logits` (double), and the
// arg-max over them (first maximum).
struct TokenScore {
    double logprob = 0.0;
    int argmax = 0;
};
TokenScore score_token(const float* logits, int vocab_size, int target);

// Called after each forward with the indices (into `requests`) it finished; their results are
// already in `results`.
using ScoreCallback =
    std::function<void(std::span<const std::size_t> finished, const std::vector<LoglikelihoodResult>& results)>;

// Scores every request with `model` (an inference model whose max_seq_len() is at least
// required_seq_len(requests, config.max_seq_len)), up to `batch` requests per forward
// (0 = model.max_batch()). Results are in request order.
std::vector<LoglikelihoodResult> score_requests(GPTModel& model, std::span<const LoglikelihoodRequest> requests,
                                                int batch = 0, const ScoreCallback& callback = {});

}  // namespace adacc
