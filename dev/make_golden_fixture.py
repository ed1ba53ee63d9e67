#!/usr/bin/env python3
"""Independent float64 JAX reference for a tiny GPT-2; writes tests/fixtures/gpt2_golden.bin.

The C++ engine's tests do not need this script: the fixture it writes is committed. It is
kept to document exactly how the fixture was made and to let anyone regenerate it.

Usage:
    python3 dev/make_golden_fixture.py [--out tests/fixtures/gpt2_golden.bin] [--seed 1234]

Requires only numpy and jax (CPU is fine). All math is done in float64
(jax_enable_x64); outputs are stored as float32 or float64 as listed below.

Model (GPT-2, llm.c conventions)
--------------------------------
config: L=2 layers, C=32 channels, H=4 heads (head size hs=C/H=8), V=65 real vocab,
Vp=128 padded vocab, maxT=16 positions; one batch of B=2 rows x T=8 tokens.

Parameters, in llm.c order (matrices are (out x in), row-major; linear is y = x @ W.T + b):
    wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C),
    attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw (L,4C,C), fcb (L,4C),
    fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C)
  total = Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C = 30080 floats.
Init (numpy RandomState(seed)), drawn in the order above:
    2-D weights wte, wpe, qkvw, fcw ~ N(0, 0.02); attprojw, fcprojw ~ N(0, 0.02/sqrt(2L));
    every bias ~ N(0, 0.1); layernorm weights ~ 1 + N(0, 0.1); layernorm biases ~ N(0, 0.1);
    padded wte rows [V, Vp) are exactly zero.
  All parameters are then rounded to float32; the float64 math runs on those
  float32-representable values (so "params" in the fixture is exact).
tokens, targets: two independent int arrays (B,T) with values in [0, V), drawn from the
same RandomState after the parameters (tokens first, then targets).

Forward:
    x = wte[tokens] + wpe[0:T]
    per layer l:
        ln1 = LayerNorm(x; ln1w[l], ln1b[l])       (eps 1e-5, biased variance over C)
        qkv = ln1 @ qkvw[l].T + qkvb[l]             (3C): q = [0:C], k = [C:2C], v = [2C:3C]
        head h uses columns h*hs:(h+1)*hs of q, k, v
        att = softmax(q k^T / sqrt(hs), causal mask: key position <= query position)
        y = att @ v, heads concatenated back to C
        x = x + y @ attprojw[l].T + attprojb[l]
        ln2 = LayerNorm(x; ln2w[l], ln2b[l])
        h = GELU_tanh(ln2 @ fcw[l].T + fcb[l])      0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
        x = x + h @ fcprojw[l].T + fcprojb[l]
    lnf = LayerNorm(x; lnfw, lnfb)
    logits = lnf @ wte.T                            (B,T,Vp), tied head, no bias
    loss = mean over B*T of cross-entropy(logits[..., :V], targets)
           (padded columns are excluded from the softmax). No dropout.

Gradients: jax.grad of loss w.r.t. all parameters, same layout (padded wte rows get 0).

AdamW trajectory: 10 steps on the same batch, starting from the float32-rounded params;
params, moments and everything else are kept in float64 for the whole trajectory
(no per-step rounding to float32). For t = 1..10:
    loss_t, g = value_and_grad(params)             record loss_t (before the update)
    norm_t = sqrt(sum over ALL params of g^2)       record norm_t (before clipping)
    if norm_t > clip: g *= clip / norm_t
    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
    mhat = m / (1-b1^t);  vhat = v / (1-b2^t)
    p -= lr * (mhat / (sqrt(vhat) + eps) + wd_p * p)
  with lr=1e-2 (constant), b1=0.9, b2=0.95, eps=1e-8, clip=1.0, and wd_p = wd = 0.1 for the
  2-D weights wte, wpe, qkvw, attprojw, fcw, fcprojw and wd_p = 0 for all biases and
  layernorm parameters. (Padded wte rows stay 0: their grad is 0 and decay of 0 is 0.)
"final_params" is the params after the 10th update, rounded to float32.

Self-check: jax.grad is compared with fourth-order central finite differences (float64,
h=1e-4, (8(f(+h)-f(-h)) - (f(+2h)-f(-2h)))/12h) on 20 random parameter entries (chosen
among entries with |grad| > 1e-4); the script fails unless the max relative error,
|fd - grad| / max(|fd|, |grad|), is < 1e-6.

Fixture format (little-endian)
------------------------------
    8 bytes  magic "ADGOLD01"
    uint32   number of arrays
    per array:
        uint32   name length, then the name bytes (ascii, no terminator)
        uint32   dtype: 0 = float32, 1 = float64, 2 = int32
        uint32   ndim, then ndim x uint64 dims
        data     prod(dims) elements, row-major (C order)
Arrays, in this order:
    config            int32   [8]         L, C, H, V, Vp, maxT, B, T
    tokens            int32   [B,T]
    targets           int32   [B,T]
    params            float32 [30080]     all params flattened in the order above
    logits            float32 [B,T,V]     only the real vocab columns
    loss              float64 [1]
    grads             float32 [30080]     flattened like params
    adamw_hparams     float64 [6]         lr, b1, b2, eps, wd, clip
    train_losses      float64 [10]        loss before each update
    train_grad_norms  float64 [10]        global grad L2 norm before clipping
    final_params      float32 [30080]     params after 10 AdamW updates
"""

import argparse
import math
import os
import struct
import sys

import numpy as np

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

# ----------------------------------------------------------------------------- config
L, C, H, V, Vp, MAXT = 2, 32, 4, 65, 128, 16
B, T = 2, 8
HS = C // H
LN_EPS = 1e-5

LR, B1, B2, ADAM_EPS, WD, CLIP = 1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0
STEPS = 10

PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
PARAM_SHAPES = {
    "wte": (Vp, C), "wpe": (MAXT, C),
    "ln1w": (L, C), "ln1b": (L, C),
    "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
    "attprojw": (L, C, C), "attprojb": (L, C),
    "ln2w": (L, C), "ln2b": (L, C),
    "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
    "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
    "lnfw": (C,), "lnfb": (C,),
}
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
NUM_PARAMS = sum(int(np.prod(s)) for s in PARAM_SHAPES.values())
assert NUM_PARAMS == Vp * C + MAXT * C + L * (12 * C * C + 13 * C) + 2 * C


# ----------------------------------------------------------------------------- init
def init_params(rng):
    std = 0.02
    proj_std = 0.02 / math.sqrt(2 * L)
    p = {}
    for name in PARAM_NAMES:
        shape = PARAM_SHAPES[name]
        if name in ("attprojw", "fcprojw"):
            a = rng.normal(0.0, proj_std, size=shape)
        elif name in ("wte", "wpe", "qkvw", "fcw"):
            a = rng.normal(0.0, std, size=shape)
        elif name in ("ln1w", "ln2w", "lnfw"):
            a = 1.0 + rng.normal(0.0, 0.1, size=shape)
        else:  # biases and layernorm biases
            a = rng.normal(0.0, 0.1, size=shape)
        if name == "wte":
            a[V:, :] = 0.0
        # round to float32, then compute in float64 on exactly those values
        p[name] = a.astype(np.float32).astype(np.float64)
    return p


def flatten(p):
    return np.concatenate([np.asarray(p[n], dtype=np.float64).reshape(-1) for n in PARAM_NAMES])


def unflatten(flat):
    out, off = {}, 0
    for n in PARAM_NAMES:
        k = int(np.prod(PARAM_SHAPES[n]))
        out[n] = flat[off:off + k].reshape(PARAM_SHAPES[n])
        off += k
    return out


# ----------------------------------------------------------------------------- model
def layernorm(x, w, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)  # biased
    return (x - mean) / jnp.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(qkv):
    # qkv: (B,T,3C)
    q, k, v = qkv[..., 0:C], qkv[..., C:2 * C], qkv[..., 2 * C:3 * C]
    t = qkv.shape[1]

    def heads(a):  # (B,T,C) -> (B,H,T,hs); head h = columns h*hs:(h+1)*hs
        return a.reshape(a.shape[0], t, H, HS).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HS)  # (B,H,T,T)
    mask = jnp.tril(jnp.ones((t, t), dtype=bool))
    scores = jnp.where(mask, scores, -jnp.inf)
    att = jax.nn.softmax(scores, axis=-1)
    y = att @ v  # (B,H,T,hs)
    return y.transpose(0, 2, 1, 3).reshape(y.shape[0], t, C)


def forward_logits(p, tokens):
    t = tokens.shape[1]
    x = p["wte"][tokens] + p["wpe"][0:t]
    for l in range(L):
        ln1 = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = ln1 @ p["qkvw"][l].T + p["qkvb"][l]
        atty = attention(qkv)
        x = x + atty @ p["attprojw"][l].T + p["attprojb"][l]
        ln2 = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu_tanh(ln2 @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    lnf = layernorm(x, p["lnfw"], p["lnfb"])
    return lnf @ p["wte"].T  # (B,T,Vp)


def loss_fn(p, tokens, targets):
    logits = forward_logits(p, tokens)[..., :V]  # padded columns excluded
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(nll)


def flat_loss(flat, tokens, targets):
    return loss_fn(unflatten(flat), tokens, targets)


# ----------------------------------------------------------------------------- self-check
def finite_difference_check(flat, grad_flat, tokens, targets, rng, n=20, h=1e-4):
    """Fourth-order central differences (Richardson): (8(f(+h)-f(-h)) - (f(+2h)-f(-2h))) / 12h."""
    f = jax.jit(flat_loss)
    candidates = np.nonzero(np.abs(grad_flat) > 1e-4)[0]
    idx = rng.choice(candidates, size=n, replace=False)

    def at(i, d):
        e = np.zeros_like(flat)
        e[i] = d
        return float(f(jnp.asarray(flat + e), tokens, targets))

    max_rel = 0.0
    for i in idx:
        fd = (8 * (at(i, h) - at(i, -h)) - (at(i, 2 * h) - at(i, -2 * h))) / (12 * h)
        a = float(grad_flat[i])
        rel = abs(fd - a) / max(abs(fd), abs(a))
        max_rel = max(max_rel, rel)
    return idx, max_rel


# ----------------------------------------------------------------------------- adamw
def adamw_trajectory(flat0, tokens, targets):
    vg = jax.jit(jax.value_and_grad(flat_loss))
    decay_mask = np.concatenate([
        np.full(int(np.prod(PARAM_SHAPES[n])), WD if n in DECAYED else 0.0) for n in PARAM_NAMES])
    p = flat0.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    losses, norms = [], []
    for t in range(1, STEPS + 1):
        loss, g = vg(jnp.asarray(p), tokens, targets)
        g = np.asarray(g, dtype=np.float64)
        norm = float(np.sqrt(np.sum(g * g)))
        losses.append(float(loss))
        norms.append(norm)
        if norm > CLIP:
            g = g * (CLIP / norm)
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * g * g
        mhat = m / (1 - B1 ** t)
        vhat = v / (1 - B2 ** t)
        p = p - LR * (mhat / (np.sqrt(vhat) + ADAM_EPS) + decay_mask * p)
    return p, np.array(losses), np.array(norms)


# ----------------------------------------------------------------------------- output
DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2}


def write_fixture(path, arrays):
    with open(path, "wb") as f:
        f.write(b"ADGOLD01")
        f.write(struct.pack("<I", len(arrays)))
        for name, a in arrays:
            a = np.ascontiguousarray(a)
            nb = name.encode("ascii")
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<II", DTYPES[a.dtype], a.ndim))
            for d in a.shape:
                f.write(struct.pack("<Q", d))
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def summarize(arrays):
    for name, a in arrays:
        flat = a.reshape(-1)
        head = ", ".join(f"{x:.6g}" if a.dtype.kind == "f" else str(x) for x in flat[:4])
        l2 = float(np.sqrt(np.sum(flat.astype(np.float64) ** 2)))
        print(f"{name:17s} {str(a.dtype):8s} shape={list(a.shape)} first=[{head}] l2={l2:.10g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "tests", "fixtures", "gpt2_golden.bin"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    rng = np.random.RandomState(args.seed)
    params = init_params(rng)
    tokens = rng.randint(0, V, size=(B, T)).astype(np.int32)
    targets = rng.randint(0, V, size=(B, T)).astype(np.int32)
    flat = flatten(params)

    jt, jy = jnp.asarray(tokens), jnp.asarray(targets)
    logits = np.asarray(jax.jit(forward_logits)(params, jt), dtype=np.float64)
    assert np.all(logits[..., V:] == 0.0), "padded wte rows must give zero logits"
    loss, grad_flat = jax.jit(jax.value_and_grad(flat_loss))(jnp.asarray(flat), jt, jy)
    loss = float(loss)
    grad_flat = np.asarray(grad_flat, dtype=np.float64)
    gw = unflatten(grad_flat)["wte"]
    assert np.all(gw[V:] == 0.0), "padded wte rows must get zero gradient"

    idx, max_rel = finite_difference_check(flat, grad_flat, jt, jy,
                                           np.random.RandomState(args.seed + 1))
    print(f"finite-difference check: {len(idx)} entries, max relative error {max_rel:.3e}")
    if not max_rel < 1e-6:
        print("FAILED: finite-difference check", file=sys.stderr)
        return 1

    final_flat, train_losses, train_norms = adamw_trajectory(flat, jt, jy)
    assert abs(train_losses[0] - loss) < 1e-12

    arrays = [
        ("config", np.array([L, C, H, V, Vp, MAXT, B, T], dtype=np.int32)),
        ("tokens", tokens),
        ("targets", targets),
        ("params", flat.astype(np.float32)),
        ("logits", logits[..., :V].astype(np.float32)),
        ("loss", np.array([loss], dtype=np.float64)),
        ("grads", grad_flat.astype(np.float32)),
        ("adamw_hparams", np.array([LR, B1, B2, ADAM_EPS, WD, CLIP], dtype=np.float64)),
        ("train_losses", train_losses.astype(np.float64)),
        ("train_grad_norms", train_norms.astype(np.float64)),
        ("final_params", final_flat.astype(np.float32)),
    ]
    assert np.array_equal(arrays[3][1].astype(np.float64), flat)  # params exact in float32
    write_fixture(args.out, arrays)
    summarize(arrays)
    print("train_losses:", " ".join(f"{x:.10f}" for x in train_losses))
    print("train_grad_norms:", " ".join(f"{x:.10f}" for x in train_norms))
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
