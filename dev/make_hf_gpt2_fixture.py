#!/usr/bin/env python3
"""Writes a tiny Hugging Face GPT-2 folder and its logits from an independent numpy forward.

The C++ tests (tests/test_hf_gpt2.cpp) read what this writes; everything is committed, so CI needs
neither Python nor these packages. It is kept to say exactly how the fixture was made and to let
anyone regenerate it (deterministic: rerunning gives byte-identical files).

Usage:
    pip install numpy safetensors
    python3 dev/make_hf_gpt2_fixture.py [--out tests/fixtures] [--seed 26]

Model: GPT-2 as transformers' GPT2LMHeadModel computes it, L=2 layers, C=8 channels, H=2 heads
(head size 4), V=37 tokens (the engine pads to 128 rows), n_positions=8. Random weights from
numpy's RandomState(seed), rounded to float32: matrices N(0, 0.3), biases N(0, 0.1), layernorm
weights 1 + N(0, 0.2) and biases N(0, 0.1). Weights are large enough that the activations are of
order 1, so the logits depend on every op.

Written (OUT = tests/fixtures):
  OUT/hf_gpt2_tiny/config.json, model.safetensors
      float32, named as the Hub's openai-community/gpt2 file names them (no "transformer."
      prefix), with each layer's causal-mask buffer h.N.attn.bias [1, 1, 8, 8] as that file has.
  OUT/hf_gpt2_tiny_sharded/config.json, model.safetensors.index.json,
      model-00001-of-00002.safetensors, model-00002-of-00002.safetensors
      the same weights rounded to float16, named as GPT2LMHeadModel.save_pretrained names them
      ("transformer." prefix) plus the tied lm_head.weight, split into two shards with an index.
  OUT/hf_gpt2_tiny_logits.safetensors
      tokens [2, 8] int32 (uniform in [0, V)), logits [2, 8, V] float32 of the float32 weights and
      logits_f16 [2, 8, V] of the float16 weights, both computed in float64 by forward() below.

forward() follows transformers' modeling_gpt2.py: Conv1D is y = x @ W + b with W stored [in, out];
c_attn's output splits into q, k, v of C columns each, and each into H heads of consecutive
columns; scores q k^T / sqrt(head size), causal mask, softmax; the MLP is c_fc, gelu_new
(0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), c_proj; layernorms have eps 1e-5 and biased
variance; the head is tied: logits = ln_f(h) @ wte^T, no bias.
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file

L, C, H, V, T = 2, 8, 2, 37, 8
B = 2


def config_json():
    """config.json as GPT2Config.to_json_file writes it, for this shape."""
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.1,
        "bos_token_id": V - 1,
        "embd_pdrop": 0.1,
        "eos_token_id": V - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": T,
        "n_embd": C,
        "n_head": H,
        "n_inner": None,
        "n_layer": L,
        "n_positions": T,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.1,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "transformers_version": "4.44.0",
        "use_cache": True,
        "vocab_size": V,
    }


def make_weights(rng):
    """GPT2Model's state dict (names without "transformer."), float32, Conv1D weights [in, out]."""
    def matrix(*shape):
        return rng.normal(0.0, 0.3, shape)

    def bias(n):
        return rng.normal(0.0, 0.1, n)

    w = {"wte.weight": matrix(V, C), "wpe.weight": matrix(T, C)}
    for l in range(L):
        p = "h.%d." % l
        w[p + "ln_1.weight"] = 1.0 + rng.normal(0.0, 0.2, C)
        w[p + "ln_1.bias"] = bias(C)
        w[p + "attn.c_attn.weight"] = matrix(C, 3 * C)
        w[p + "attn.c_attn.bias"] = bias(3 * C)
        w[p + "attn.c_proj.weight"] = matrix(C, C)
        w[p + "attn.c_proj.bias"] = bias(C)
        w[p + "ln_2.weight"] = 1.0 + rng.normal(0.0, 0.2, C)
        w[p + "ln_2.bias"] = bias(C)
        w[p + "mlp.c_fc.weight"] = matrix(C, 4 * C)
        w[p + "mlp.c_fc.bias"] = bias(4 * C)
        w[p + "mlp.c_proj.weight"] = matrix(4 * C, C)
        w[p + "mlp.c_proj.bias"] = bias(C)
    w["ln_f.weight"] = 1.0 + rng.normal(0.0, 0.2, C)
    w["ln_f.bias"] = bias(C)
    return {k: v.astype(np.float32) for k, v in w.items()}


def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def conv1d(x, weight, bias):
    return x @ weight + bias


def forward(w, tokens):
    """Logits [B, T, V] in float64 of weights w (any float dtype, upcast exactly)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    n, t = tokens.shape
    hs = C // H
    h = w["wte.weight"][tokens] + w["wpe.weight"][np.arange(t)]
    causal = np.tril(np.ones((t, t), dtype=bool))
    for l in range(L):
        p = "h.%d." % l
        a = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        q, k, v = np.split(conv1d(a, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]), 3, axis=-1)
        q, k, v = (x.reshape(n, t, H, hs).transpose(0, 2, 1, 3) for x in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
        scores = np.where(causal, scores, np.finfo(np.float64).min)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        att = scores / scores.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(n, t, C)
        h = h + conv1d(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        m = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        m = gelu_new(conv1d(m, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]))
        h = h + conv1d(m, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    h = layer_norm(h, w["ln_f.weight"], w["ln_f.bias"])
    return h @ w["wte.weight"].T


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")


def write_single(folder, weights):
    """As the Hub's gpt2 model.safetensors: no prefix, the causal-mask buffers included."""
    os.makedirs(folder, exist_ok=True)
    tensors = dict(weights)
    for l in range(L):
        tensors["h.%d.attn.bias" % l] = np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    write_json(os.path.join(folder, "config.json"), config_json())


def write_sharded(folder, weights):
    """As save_pretrained(max_shard_size=...) of GPT2LMHeadModel: prefixed names, two shards, an index."""
    os.makedirs(folder, exist_ok=True)
    tensors = {"transformer." + k: v for k, v in weights.items()}
    tensors["lm_head.weight"] = weights["wte.weight"]
    names = sorted(tensors)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        save_file({k: tensors[k] for k in shard}, os.path.join(folder, file), metadata={"format": "pt"})
        for k in shard:
            weight_map[k] = file
            total += tensors[k].nbytes
    write_json(os.path.join(folder, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})
    config = config_json()
    config["torch_dtype"] = "float16"
    write_json(os.path.join(folder, "config.json"), config)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/fixtures")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args()
    rng = np.random.RandomState(args.seed)
    weights = make_weights(rng)
    tokens = rng.randint(0, V, size=(B, T)).astype(np.int32)
    half = {k: v.astype(np.float16) for k, v in weights.items()}

    write_single(os.path.join(args.out, "hf_gpt2_tiny"), weights)
    write_sharded(os.path.join(args.out, "hf_gpt2_tiny_sharded"), half)
    logits = forward(weights, tokens)
    logits_f16 = forward(half, tokens)
    save_file({"tokens": tokens, "logits": logits.astype(np.float32), "logits_f16": logits_f16.astype(np.float32)},
              os.path.join(args.out, "hf_gpt2_tiny_logits.safetensors"))
    print("logits: |max| %.3f, std %.3f; fp16 weights move them by up to %.2e"
          % (np.abs(logits).max(), logits.std(), np.abs(logits - logits_f16).max()))


if __name__ == "__main__":
    main()
