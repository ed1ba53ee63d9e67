// GPT-2 model shape: the handful of numbers every other part (parameter layout, activation
// sizes, FLOP counts, checkpoints, the planner) derives its sizes from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace adacc {

// More parameters than this (2^50, 16 PiB of fp32 training state) are refused by validate():
// sizes then stay exact in 64-bit integers.
inline constexpr std::int64_t kMaxParameters = std::int64_t{1} << 50;

// How the block computes causal attention (model.attention): `materialized` forms the B x H x T x T
// probabilities (saved, compressed or recomputed by the plan); `fused` never does — forward keeps
// one logsumexp per row and backward recomputes the probabilities (FlashAttention's algorithm);
// `cudnn` is the same algorithm and the same block (atty and att_lse saved, no T x T tensor) through
// cuDNN's fused SDPA graphs, on CUDA with cuDNN 9 only (kernels/cuda/attention_cudnn.cpp).
enum class AttentionImpl : std::uint8_t { materialized, fused, cudnn };
// fused and cudnn: no attention matrices, att_lse saved (the block graph and planner treat them alike).
constexpr bool is_flash_attention(AttentionImpl impl) { return impl != AttentionImpl::materialized; }
// The attention that runs anywhere in place of `impl`: cuDNN's is the fused kernels' algorithm with
// the same tensors, so the CPU (and any run that cannot use cuDNN's graphs) takes the fused ones.
constexpr AttentionImpl portable_attention(AttentionImpl impl) {
    return impl == AttentionImpl::cudnn ? AttentionImpl::fused : impl;
}
const char* attention_impl_name(AttentionImpl impl);
std::vector<std::string> attention_impl_names();
std::optional<AttentionImpl> parse_attention_impl(const std::string& name);

// model.classifier_chunk = 0: chunks of at most this many bytes of logits (1334 tokens of GPT-2's
// vocab in fp32, one T = 1024 sequence and a third).
constexpr std::size_t kAutoClassifierChunkBytes = 256u << 20;

struct GPTConfig {
    int n_layer = 12;
    int n_embd = 768;        // C, the hidden size
    int n_head = 12;         // H; n_embd must be divisible by it
    int vocab_size = 50257;  // V, real tokens
    int max_seq_len = 1024;  // learned position embeddings cover this many positions
    float dropout = 0.0f;    // embedding, attention and residual dropout probability
    // Tokens per chunk of the classifier (final matmul, log-softmax, loss and dlogits), so the
    // N x Vp logits never exist whole, in training or inference; 0 = auto (classifier_rows).
    int classifier_chunk = 0;
    AttentionImpl attention = AttentionImpl::materialized;

    // Vocab padded to a multiple of 128 (50257 -> 50304) for aligned matmuls; the padded logits
    // are excluded from the loss and the padded embedding rows stay zero.
    int padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }

    // Rows of logits a model holds for N tokens with `element_bytes` per logit: N when
    // they fit in one chunk, else the chunk: classifier_chunk, or for 0 the most rows whose logits
    // take at most kAutoClassifierChunkBytes (a chunk that size keeps the GEMM large, at least
    // one row).
    int classifier_rows(int N, std::size_t element_bytes) const;

    // Number of trainable parameters, padded embedding rows included (as llm.c counts them):
    // Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C.
    std::int64_t parameter_count() const;
    // The same without the padded rows: what GPT-2 papers quote (124,439,808 for gpt-117m).
    std::int64_t unpadded_parameter_count() const;
    // Training FLOPs per token as llm.c counts them for its MFU: 6N + 6LCT (N = parameter_count;
    // the attention's T-dependent matmuls once per layer). 803,478,528 for gpt-117m at T = 1024.
    double flops_per_token(int T) const;

    // Empty when valid; otherwise a message naming the offending key and the fix.
    std::optional<std::string> validate() const;
};

// The fields that decide the parameter layout (a checkpoint's or an llm.c file's tensors), by
// their [model] key names.
struct GPTShapeField {
    const char* name;
    int GPTConfig::*member;
};
inline constexpr GPTShapeField kGPTShapeFields[] = {{"n_layer", &GPTConfig::n_layer},
                                                    {"n_embd", &GPTConfig::n_embd},
                                                    {"n_head", &GPTConfig::n_head},
                                                    {"vocab_size", &GPTConfig::vocab_size},
                                                    {"max_seq_len", &GPTConfig::max_seq_len}};

// Whether two configs lay out the same parameters (every kGPTShapeFields field equal).
bool same_shape(const GPTConfig& a, const GPTConfig& b);

// Presets by name: gpt-117m, gpt-345m, gpt-762m, gpt-1.5b, gpt-4.7b, and tiny CPU ones
// (gpt-tiny, gpt-micro). Empty when the name is unknown.
std::optional<GPTConfig> gpt_preset(const std::string& name);
std::vector<std::string> gpt_preset_names();

}  // namespace adacc
