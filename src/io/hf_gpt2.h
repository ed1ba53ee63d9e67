// Hugging Face GPT-2 model folders: what transformers' GPT2LMHeadModel.save_pretrained writes and
// the Hub serves (openai-community/gpt2, gpt2-medium, gpt2-large, gpt2-xl):
//   config.json                      the shape (n_layer, n_embd, n_head, n_positions, vocab_size)
//   model.safetensors                the weights (src/io/safetensors.h), or the shards
//   model-0000N-of-0000M.safetensors with model.safetensors.index.json naming each tensor's shard
//   vocab.json, merges.txt           the tokenizer (OpenAI's encoder.json and vocab.bpe)
//
// The weights are GPT2LMHeadModel's state dict: transformer.wte.weight [V, C],
// transformer.wpe.weight [n_positions, C], per layer transformer.h.N.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias}, transformer.ln_f.{weight, bias}; the
// Hub's own gpt2 files name them without "transformer.". The linear layers are transformers'
// Conv1D, whose weight is [in, out] (y = x W + b): the transpose of the engine's [out, in]
// (models/gpt_params.h). c_attn's output is [q | k | v], each head's columns contiguous, which
// is the engine's fused qkvw row order once transposed, so no reordering is needed. The head is
// tied to wte (lm_head.weight, when a file has it, must equal it) and the vocabulary's rows are
// padded with zeros to the engine's padded_vocab_size(), as llm.c files pad theirs. Old files also
// hold each layer's causal mask buffers (attn.bias, attn.masked_bias), constants that are ignored.
#pragma once

#include <filesystem>

#include "models/gpt_config.h"

namespace adacc {

// Whether DIR is a Hugging Face model folder (it holds config.json).
bool is_hf_model_dir(const std::filesystem::path& dir);

// The model config.json describes (dropout 0: weights carry none), after checking, without
// reading any tensor's data, that the folder is one load_hf_gpt2 reads. UserError naming the key,
// its value, what adacc runs and the fix, when config.json is not a GPT-2 adacc computes exactly
// (an architecture other than GPT2LMHeadModel, an activation other than gelu_new, an MLP other than
// 4 x n_embd, a layernorm epsilon other than 1e-5, an untied head, scaled or cross attention);
// naming the tensor, both shapes and the fix when a tensor is missing, extra, of another shape
// than config.json implies, or of a dtype other than F32, F16 and BF16.
GPTConfig read_hf_gpt2(const std::filesystem::path& dir);

// Reads the folder's weights into `params` (ParameterLayout(expected).total() floats), after
// read_hf_gpt2's checks; also a UserError when config.json's shape is not `expected`'s or the
// folder's lm_head.weight is not its wte.
void load_hf_gpt2(const std::filesystem::path& dir, const GPTConfig& expected, float* params);

// Writes DIR/model.safetensors (fp32, GPT2LMHeadModel's names; the tied lm_head left out, as
// save_pretrained leaves it out) and then DIR/config.json, each atomically; config.json last, so
// a folder whose export failed is not mistaken for a model. With `vocab_dir` (a GPT-2 vocabulary,
// Gpt2Tokenizer::vocab_files) also vocab.json, merges.txt and tokenizer_config.json, which
// AutoTokenizer reads. UserError when the vocabulary's size is not config.vocab_size.
void save_hf_gpt2(const std::filesystem::path& dir, const GPTConfig& config, const float* params,
                  const std::filesystem::path& vocab_dir);

}  // namespace adacc
