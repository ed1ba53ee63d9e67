#!/usr/bin/env python3
"""adacc's peer in PyTorch: GPT-2 as adacc computes it, from the llm.c model file `adacc export` writes.

The model: llm.c's GPT-2 (tied token embedding, learned positions, pre-layernorm blocks with eps
1e-5, causal attention by F.scaled_dot_product_attention, GELU's tanh form, the loss the mean
cross-entropy over the B x T tokens). The token embedding has Vp rows (V padded, as in the model
file); the logits are the first V columns only, so the padded rows get no gradient, as in adacc
and llm.c. Parameters are held per layer (what torch.compile and AdamW see in a normal model) and
their gradients stacked back into llm.c's order, the model file's, for the comparison.

  numerics  the loss and the parameter gradients of one forward and backward on the batch of an
            `adacc gradients` file (which holds the batch, adacc's loss and gradients), at the
            weights of the llm.c model file it was run from, in fp32 (TF32 off) and, for a bf16
            adacc run, also under bf16 autocast; the relative L2 error of each parameter tensor
            and overall. Then a self-check: the same comparison with two of adacc's gradient
            tensors swapped (layer 0's ln1w and ln2w) must fail, or the comparison is broken.
  speed     training steps (bf16 autocast on CUDA, SDPA, torch.compile of the block and of the
            head, AdamW as adacc's: betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights,
            global-norm clipping at 1.0) at a given shape, batch and T: tokens/s of the median step.
  check     both against an adacc executable, as the tests and the GPU check run them: writes a
            random token shard, trains a few steps (so biases and layernorms are not at their
            init), `adacc export`s the llm.c file, `adacc gradients` at it, then `numerics`.
            --device cpu: gpt-tiny, adacc fp32 against torch fp32 (the ctest). --device cuda:
            gpt-117m, adacc fp32 and bf16 on the GPU against torch on the GPU; with --speed, adacc
            (`adacc compare --modes none`) and torch at each --speed-presets preset, same batch and
            T, tokens/s side by side with the ratio.

Tolerances (derived, not fitted).
  fp32. Each gradient element ends a chain of fp32 reductions: the softmax's normaliser over V
  logits, per layer the contractions over C and 4C (forward and backward) and over up to T keys,
  and the weight gradients' sums over the B x T tokens. By probabilistic rounding error analysis
  (Higham and Mary 2019) a sum of n terms in precision u = 2^-24 is off by at most lambda sqrt(n) u
  relative to the sum of the terms' magnitudes, with probability at least 1 - 2 exp(-lambda^2 / 2);
  independent roundings of the chained reductions add in quadrature: n = V + B T + 2 L (5 C + T).
  Two implementations each carry that error, so they differ by at most
      FP32 = 2 lambda sqrt(V + B T + 2 L (5 C + T)) u,   lambda = 6 (failure odds 3e-8),
  which is 1.6e-4 at gpt-tiny (V = 50257, B T = 256, L = 2, C = 64, T = 64) and 3.0e-4 at gpt-117m
  with B = 4, T = 1024 (measured: 4.9e-7 and 5.9e-7 overall, see README). A misplaced tensor or a wrong formula moves its gradients by 1e-2 to 1.
  The loss is held to the same relative bound.
  bf16. adacc's bf16 run rounds every stored activation and activation gradient, the logits and
  the weights' working copy to bf16 (u = 2^-9; the sums themselves are fp32). Along one gradient's
  path that is at most 8 activations forward and 8 gradients backward per layer, the weights, the
  logits and their gradient: n = 16 L + 4 roundings, so against torch's fp32
      BF16 = lambda sqrt(16 L + 4) 2^-9,   lambda = 6,
  0.16 at gpt-117m. torch's own bf16 autocast error against its fp32 is printed beside it as the
  yardstick (autocast keeps layernorms, the residual stream and softmax in fp32, so it is smaller).

Output lines start with "torch_peer " (the GPU check collects them). Exit 0 when every comparison
passes, 1 when one fails, 2 on a usage or setup error, 77 when torch is not importable (ctest's
skip code: CI has no torch).

Usage:
  torch_reference.py check --adacc BUILD/adacc --work DIR [--device cpu|cuda] [--speed]
                           [--speed-presets gpt-117m,gpt-345m] [--speed-batch 16] [--seq 1024]
                           [--adacc-library-path P] [--budget-s S]
  torch_reference.py numerics --model W.bin --gradients G.bin [--device cpu|cuda]
  torch_reference.py speed --shape L,C,NH [--vocab 50257] --batch B --seq T [--steps N] [--warmup W]
                           [--device cuda] [--no-compile]
"""
import argparse
import math
import os
import random
import statistics
import struct
import subprocess
import sys
import time
import tomllib
import warnings

LLMC_MAGIC, LLMC_FP32, LLMC_BF16 = 20240326, 3, 5   # src/io/llmc_model_io.h
GRADIENTS_MAGIC, GRADIENTS_VERSION = 20261204, 1    # src/io/gradients_file.h
SHARD_MAGIC = 20240520                              # data/token_shard.h
HEADER_INTS = 256
LN_EPS = 1e-5
LAMBDA = 6.0
EXIT_FAIL, EXIT_SETUP, EXIT_NO_TORCH = 1, 2, 77

# llm.c's parameter order (models/gpt_params.h): name, per layer?, shape from (V_padded, maxT, C).
PARAMS = [
    ("wte", False, lambda s: (s["Vp"], s["C"])),
    ("wpe", False, lambda s: (s["maxT"], s["C"])),
    ("ln1w", True, lambda s: (s["C"],)),
    ("ln1b", True, lambda s: (s["C"],)),
    ("qkvw", True, lambda s: (3 * s["C"], s["C"])),
    ("qkvb", True, lambda s: (3 * s["C"],)),
    ("attprojw", True, lambda s: (s["C"], s["C"])),
    ("attprojb", True, lambda s: (s["C"],)),
    ("ln2w", True, lambda s: (s["C"],)),
    ("ln2b", True, lambda s: (s["C"],)),
    ("fcw", True, lambda s: (4 * s["C"], s["C"])),
    ("fcb", True, lambda s: (4 * s["C"],)),
    ("fcprojw", True, lambda s: (s["C"], 4 * s["C"])),
    ("fcprojb", True, lambda s: (s["C"],)),
    ("lnfw", False, lambda s: (s["C"],)),
    ("lnfb", False, lambda s: (s["C"],)),
]
BLOCK_PARAMS = [name for name, per_layer, _ in PARAMS if per_layer]


class SetupError(Exception):
    """Bad input or a failed adacc command: exit 2 with the message."""


def say(line):
    print(line, flush=True)


def numel(shape):
    return math.prod(shape)


def stacked_shape(name_shape, per_layer, shape):
    return ((shape["L"],) if per_layer else ()) + name_shape


def param_table(shape):
    """(name, per_layer, stacked shape, offset, numel) in llm.c's order."""
    table, offset = [], 0
    for name, per_layer, of in PARAMS:
        full = stacked_shape(of(shape), per_layer, shape)
        table.append((name, per_layer, full, offset, numel(full)))
        offset += numel(full)
    return table


def total_params(shape):
    return sum(t[4] for t in param_table(shape))


def padded_vocab(V):
    return (V + 127) // 128 * 128  # models/gpt_config.h: GPTConfig::padded_vocab_size


# ---- files ------------------------------------------------------------------------------------

def read_exact(f, count, path, what):
    data = f.read(count)
    if len(data) != count:
        raise SetupError("%s: truncated: %s needs %d bytes, %d there" % (path, what, count, len(data)))
    return data


def read_llmc_model(path):
    """The llm.c GPT-2 model file: its shape and {name: stacked fp32 tensor} (bf16 files widened)."""
    import torch
    with open(path, "rb") as f:
        header = struct.unpack("<%di" % HEADER_INTS, read_exact(f, 4 * HEADER_INTS, path, "the header"))
        if header[0] != LLMC_MAGIC or header[1] not in (LLMC_FP32, LLMC_BF16):
            raise SetupError("%s is not an llm.c GPT-2 model file (magic %d, version %d; want %d, version %d or %d)"
                             % (path, header[0], header[1], LLMC_MAGIC, LLMC_FP32, LLMC_BF16))
        shape = dict(maxT=header[2], V=header[3], L=header[4], NH=header[5], C=header[6], Vp=header[7])
        width = 4 if header[1] == LLMC_FP32 else 2
        count = total_params(shape)
        data = bytearray(read_exact(f, count * width, path, "%d parameters" % count))
        if f.read(1):
            raise SetupError("%s: bytes after the %d parameters its header implies" % (path, count))
    flat = torch.frombuffer(data, dtype=torch.float32 if width == 4 else torch.bfloat16).float()
    return shape, {name: flat[o:o + n].view(full) for name, _, full, o, n in param_table(shape)}


def read_gradients(path, shape):
    """An `adacc gradients` file (README, Formats) for a model of `shape`."""
    import torch
    with open(path, "rb") as f:
        header = struct.unpack("<%di" % HEADER_INTS, read_exact(f, 4 * HEADER_INTS, path, "the header"))
        if header[0] != GRADIENTS_MAGIC or header[1] != GRADIENTS_VERSION:
            raise SetupError("%s is not an adacc gradients file of version %d (magic %d, version %d)"
                             % (path, GRADIENTS_VERSION, header[0], header[1]))
        B, T = header[2], header[3]
        theirs = dict(maxT=header[4], V=header[5], L=header[6], NH=header[7], C=header[8], Vp=header[9])
        if theirs != shape:
            raise SetupError("%s is of a model %s, the model file's is %s: run `adacc gradients --init-from` "
                             "that model file" % (path, theirs, shape))
        tokens = B * T
        inputs = torch.frombuffer(bytearray(read_exact(f, 4 * tokens, path, "the inputs")), dtype=torch.int32)
        targets = torch.frombuffer(bytearray(read_exact(f, 4 * tokens, path, "the targets")), dtype=torch.int32)
        count = total_params(shape)
        grads = torch.frombuffer(bytearray(read_exact(f, 4 * count, path, "the gradients")), dtype=torch.float32)
        if f.read(1):
            raise SetupError("%s: bytes after the gradients its header implies" % path)
    return dict(B=B, T=T, device=("cpu", "cuda")[header[10]], dtype=("fp32", "bf16")[header[11]],
                loss=struct.unpack("<f", struct.pack("<i", header[12]))[0],
                inputs=inputs.long().view(B, T), targets=targets.long().view(B, T), grads=grads)


def write_shard(path, count, seed, V):
    """llm.c's token shard (data/token_shard.h): 256 int32 of header, then uint16 ids."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, SHARD_MAGIC, 1, count, *([0] * (HEADER_INTS - 3))))
        f.write(struct.pack("<%dH" % count, *(rng.randrange(V) for _ in range(count))))


# ---- the model --------------------------------------------------------------------------------

def block(x, n_head, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb):
    import torch.nn.functional as F
    B, T, C = x.shape
    q, k, v = F.linear(F.layer_norm(x, (C,), ln1w, ln1b, LN_EPS), qkvw, qkvb).split(C, dim=2)
    q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    x = x + F.linear(y, attprojw, attprojb)
    h = F.gelu(F.linear(F.layer_norm(x, (C,), ln2w, ln2b, LN_EPS), fcw, fcb), approximate="tanh")
    return x + F.linear(h, fcprojw, fcprojb)


def head(x, lnfw, lnfb, wte_rows, targets):
    """The mean cross-entropy of the logits over the V real tokens (the softmax in fp32)."""
    import torch.nn.functional as F
    logits = F.linear(F.layer_norm(x, (x.size(-1),), lnfw, lnfb, LN_EPS), wte_rows)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


class Gpt:
    """GPT-2 with llm.c's parameters held per layer, as leaves of autograd."""

    def __init__(self, shape, stacked, device):
        import torch
        self.shape = shape
        leaf = lambda t: t.detach().to(device=device, dtype=torch.float32).clone().requires_grad_(True)
        self.top = {name: leaf(stacked[name]) for name, per_layer, _ in PARAMS if not per_layer}
        self.layers = [{name: leaf(stacked[name][l]) for name in BLOCK_PARAMS} for l in range(shape["L"])]
        self.block, self.head = block, head

    def compile(self):
        import torch
        # One graph for every layer (the same shapes: the layers' parameters are its inputs) and
        # one for the head: compile time does not grow with the depth. Static shapes, and the
        # previous preset's graphs forgotten: after a shape change Dynamo would otherwise compile
        # a dynamic-shape graph.
        torch._dynamo.reset()
        self.block, self.head = torch.compile(block, dynamic=False), torch.compile(head, dynamic=False)

    def parameters(self):
        return list(self.top.values()) + [p for layer in self.layers for p in layer.values()]

    def loss(self, inputs, targets):
        T = inputs.size(1)
        x = self.top["wte"][inputs] + self.top["wpe"][:T]
        for layer in self.layers:
            x = self.block(x, self.shape["NH"], *(layer[name] for name in BLOCK_PARAMS))
        return self.head(x, self.top["lnfw"], self.top["lnfb"], self.top["wte"][:self.shape["V"]], targets)

    def gradients(self):
        """Every parameter's gradient, flat in llm.c's order (on the CPU, fp32)."""
        import torch
        parts = []
        for name, per_layer, _ in PARAMS:
            g = torch.stack([layer[name].grad for layer in self.layers]) if per_layer else self.top[name].grad
            parts.append(g.detach().float().reshape(-1).cpu())
        return torch.cat(parts)


def torch_gradients(shape, stacked, inputs, targets, device, autocast_bf16):
    """torch's loss and flat gradients for one forward and backward."""
    import torch
    model = Gpt(shape, stacked, device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast_bf16):
        loss = model.loss(inputs.to(device), targets.to(device))
    loss.backward()
    return loss.item(), model.gradients()


# ---- numerics ---------------------------------------------------------------------------------

def relative_l2(got, ref):
    """||got - ref|| / ||ref|| in double; 0 when both are zero, inf when only ref is."""
    got, ref = got.double(), ref.double()
    err, norm = (got - ref).norm().item(), ref.norm().item()
    if not (math.isfinite(err) and math.isfinite(norm)):
        return float("nan")
    return err / norm if norm > 0 else (0.0 if err == 0 else float("inf"))


def fp32_tolerance(shape, B, T):
    n = shape["V"] + B * T + 2 * shape["L"] * (5 * shape["C"] + T)
    return 2 * LAMBDA * math.sqrt(n) * 2.0 ** -24


def bf16_tolerance(shape):
    return LAMBDA * math.sqrt(16 * shape["L"] + 4) * 2.0 ** -9


def per_tensor(shape, got, ref):
    """[(name, numel, relative L2)] per parameter tensor, then ("overall", ...)."""
    rows = [(name, n, relative_l2(got[o:o + n], ref[o:o + n])) for name, _, _, o, n in param_table(shape)]
    return rows + [("overall", got.numel(), relative_l2(got, ref))]


def passes(rows, tolerance):
    # Not `err <= tolerance`, so that NaN fails.
    return all(not (err > tolerance) and math.isfinite(err) for _, _, err in rows)


def swapped(shape, grads, a="ln1w", b="ln2w"):
    """adacc's gradients with layer 0's tensors a and b (same shape) swapped."""
    table = {name: (o, n // (shape["L"] if per_layer else 1)) for name, per_layer, _, o, n in param_table(shape)}
    (oa, n), (ob, _) = table[a], table[b]
    out = grads.clone()
    out[oa:oa + n], out[ob:ob + n] = grads[ob:ob + n], grads[oa:oa + n]
    return out


def run_numerics(model_path, gradients_path, device, label=""):
    """Compares an `adacc gradients` file with torch; True when it passes (and the self-check catches a swap)."""
    import torch
    shape, stacked = read_llmc_model(model_path)
    dump = read_gradients(gradients_path, shape)
    B, T = dump["B"], dump["T"]
    what = "%s%s %s" % (label, dump["device"], dump["dtype"])
    bf16 = dump["dtype"] == "bf16"
    tolerance = bf16_tolerance(shape) if bf16 else fp32_tolerance(shape, B, T)
    loss32, grads32 = torch_gradients(shape, stacked, dump["inputs"], dump["targets"], device, False)
    rows = per_tensor(shape, dump["grads"], grads32)
    columns = [rows]
    header = "adacc %s vs torch fp32" % dump["dtype"]
    if bf16:
        loss16, grads16 = torch_gradients(shape, stacked, dump["inputs"], dump["targets"], device, True)
        columns += [per_tensor(shape, grads16, grads32), per_tensor(shape, dump["grads"], grads16)]
        header += "  torch autocast vs fp32  adacc vs torch autocast"
    say("torch_peer numerics %s: B=%d T=%d L=%d C=%d NH=%d V=%d (Vp %d), torch %s on %s, relative L2 per tensor:"
        % (what, B, T, shape["L"], shape["C"], shape["NH"], shape["V"], shape["Vp"], torch.__version__, device))
    say("  %-9s %11s  %s" % ("tensor", "numel", header))
    for i, (name, n, _) in enumerate(rows):
        say("  %-9s %11d  %s" % (name, n, "  ".join("%22.3e" % c[i][2] for c in columns)))
    loss_err = abs(dump["loss"] - loss32) / abs(loss32)
    worst = max(rows[:-1], key=lambda r: r[2] if math.isfinite(r[2]) else float("inf"))
    ok = passes(rows, tolerance) and not (loss_err > tolerance)
    extra = (" (torch autocast: loss %.6f, gradients %.3e)" % (loss16, columns[1][-1][2])) if bf16 else ""
    say("torch_peer numerics %s: loss adacc %.6f torch %.6f (relative %.2e); gradients relative L2 overall %.3e, "
        "worst %s %.3e; tolerance %.2e (%s)%s: %s"
        % (what, dump["loss"], loss32, loss_err, rows[-1][2], worst[0], worst[2], tolerance,
           "bf16, derived" if bf16 else "fp32, derived", extra, "PASS" if ok else "FAIL"))
    # The comparison must be able to fail: adacc's gradients with two tensors swapped.
    bad = per_tensor(shape, swapped(shape, dump["grads"]), grads32)
    caught = not passes(bad, tolerance)
    say("torch_peer self-check %s: layer 0's ln1w and ln2w gradients swapped give relative L2 %.3e and %.3e: %s"
        % (what, bad[2][2], bad[8][2], "caught" if caught else "NOT caught, the comparison is broken"))
    return ok and caught


# ---- speed ------------------------------------------------------------------------------------

def init_stacked(shape, seed):
    """GPT-2's init (N(0, 0.02), residual projections by 1/sqrt(2L), zero biases, unit layernorms)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, per_layer, of in PARAMS:
        full = stacked_shape(of(shape), per_layer, shape)
        if name.startswith("ln"):
            out[name] = torch.ones(full) if name.endswith("w") else torch.zeros(full)
        elif len(of(shape)) == 1:
            out[name] = torch.zeros(full)
        else:
            std = 0.02 / (math.sqrt(2 * shape["L"]) if name in ("attprojw", "fcprojw") else 1.0)
            out[name] = torch.randn(full, generator=g) * std
    return out


def run_speed(shape, B, T, steps, warmup, device, use_compile, label):
    """Median step time of torch training steps; returns tokens/s (0 when it could not run)."""
    import torch
    bf16 = device == "cuda"
    model = Gpt(shape, init_stacked(shape, 1337), device)
    compiled = "no (--no-compile)"
    if use_compile:
        try:
            model.compile()
            compiled = "yes"
        except Exception as error:  # an install without a working compiler: eager, and said so
            compiled = "no (torch.compile failed: %s)" % str(error).splitlines()[0][:120]
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if bf16 else {}))
    g = torch.Generator().manual_seed(7)
    window = torch.randint(0, shape["V"], (B, T + 1), generator=g).to(device)
    inputs, targets = window[:, :-1], window[:, 1:]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = model.loss(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()  # the step's one read back, as adacc's

    t0 = time.perf_counter()
    try:
        for _ in range(warmup):
            step()
    except Exception as error:
        if compiled != "yes":
            raise
        say("torch_peer speed %s: torch.compile failed in the first step (%s): eager instead"
            % (label, str(error).splitlines()[0][:160]))
        model.block, model.head = block, head
        compiled = "no (failed in the first step)"
        for _ in range(warmup):
            step()
    sync()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t)
    ms = statistics.median(times) * 1e3
    rate = B * T / (ms / 1e3)
    say("torch_peer speed %s torch: B=%d T=%d, %.1f ms/step (median of %d), %.0f tokens/s, loss %.3f; %s, "
        "SDPA, AdamW%s; compile: %s; warm-up %d steps in %.1f s"
        % (label, B, T, ms, steps, rate, loss, "bf16 autocast" if bf16 else "fp32", " fused" if bf16 else "",
           compiled, warmup, warm_s))
    del model, optimizer
    if device == "cuda":
        torch.cuda.empty_cache()
    return rate


# ---- check: against an adacc executable ---------------------------------------------------------

class Adacc:
    def __init__(self, exe, library_path, work):
        self.exe, self.work = exe, work
        self.env = dict(os.environ)
        if library_path is not None:
            self.env["LD_LIBRARY_PATH"] = library_path

    def run(self, *args, timeout=None):
        cmd = [self.exe] + [str(a) for a in args]
        say("$ " + " ".join(cmd))
        try:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SetupError("adacc %s outlasted %s s" % (args[0], timeout))
        if done.returncode != 0:
            print(done.stdout)
            raise SetupError("adacc %s exited %d: %s" % (args[0], done.returncode,
                                                         (done.stdout.strip().splitlines() or ["no output"])[-1]))
        return done.stdout

    def shape(self, preset):
        """The preset's shape, from adacc itself (models/gpt_config.cpp is the one table)."""
        model = tomllib.loads(self.run("config", "--set", "model.preset=" + preset, "--toml"))["model"]
        V = model["vocab_size"]
        return dict(maxT=model["max_seq_len"], V=V, L=model["n_layer"], NH=model["n_head"], C=model["n_embd"],
                    Vp=padded_vocab(V))


def write_config(path, preset, B, T, steps, shard, run_dir, extra=""):
    with open(path, "w") as f:
        f.write('[model]\npreset = "%s"\ndropout = 0.0\n%s'
                "[training]\nbatch_size = %d\nseq_len = %d\nsteps = %d\nseed = 7\ngrad_accum = 1\n"
                '[lr]\nmax = 6e-4\nmin = 6e-4\nwarmup_steps = 0\nschedule = "constant"\n'
                '[data]\ntrain = "%s"\nval = ""\nshuffle = false\n'
                '[logging]\nrun_dir = "%s"\nprint_every = 100\n[checkpoint]\nevery = 0\n'
                % (preset, extra, B, T, steps, shard, run_dir))


def check(args):
    import torch
    started = time.monotonic()
    left = lambda: args.budget_s - (time.monotonic() - started) if args.budget_s else float("inf")
    adacc = Adacc(args.adacc, args.adacc_library_path, args.work)
    os.makedirs(args.work, exist_ok=True)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SetupError("--device cuda, and torch sees no CUDA device")
    if cuda:  # fp32 is true fp32 on both sides: adacc's cuBLASLt computes in fp32 (README, Precision)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    say("torch_peer: torch %s on %s%s" % (torch.__version__, args.device,
                                          " (%s)" % torch.cuda.get_device_name(0) if cuda else ""))
    preset, B, T, train_steps = ("gpt-117m", 4, 1024, 5) if cuda else ("gpt-tiny", 4, 64, 20)
    shape = adacc.shape(preset)
    shard = os.path.join(args.work, "tokens.bin")
    # Enough tokens for every batch the runs read, so no run starts a second epoch.
    needed = max(B * T * (train_steps + 1), args.speed_batch * args.seq * (args.steps + args.warmup) if args.speed else 0)
    write_shard(shard, needed + 1, 1337, shape["V"])
    config, run_dir = os.path.join(args.work, "numerics.toml"), os.path.join(args.work, "run")
    write_config(config, preset, B, T, train_steps, shard, run_dir)
    device_args = ["--device", args.device]
    # A few steps so the biases and layernorms are not at their init (where swapping ln1 and ln2
    # would change nothing), then the llm.c file both sides load.
    adacc.run("train", "--config", config, "--overwrite", *device_args)
    model = os.path.join(args.work, "model.bin")
    adacc.run("export", "--checkpoint", run_dir, "--llmc-model", model, "--force")
    ok = True
    for dtype in (["fp32", "bf16"] if cuda else ["fp32"]):
        grads = os.path.join(args.work, "gradients_%s.bin" % dtype)
        say(adacc.run("gradients", "--config", config, "--init-from", model, "--output", grads, *device_args,
                      "--dtype", dtype).strip())
        ok = run_numerics(model, grads, args.device) and ok
        os.remove(grads)
        if cuda:
            torch.cuda.empty_cache()  # adacc's next run checks the GPU's free memory
    if not args.speed:
        return ok
    for preset in args.speed_presets.split(","):
        label = "%s B=%d T=%d" % (preset, args.speed_batch, args.seq)
        if left() < 60:
            say("torch_peer speed %s: skipped, %.0f s left of --budget-s %g" % (label, left(), args.budget_s))
            ok = False
            continue
        shape = adacc.shape(preset)
        config = os.path.join(args.work, "speed_%s.toml" % preset)
        write_config(config, preset, args.speed_batch, args.seq, 1, shard, os.path.join(args.work, "speed"))
        # compare times the steps after --warmup: as many as torch's.
        out = adacc.run("compare", "--config", config, "--modes", "none", "--batch", args.speed_batch, "--steps",
                        args.steps + args.warmup, "--warmup", args.warmup, "--no-fidelity", "--format", "csv",
                        *device_args)
        lines = out.splitlines()
        columns = next(line for line in lines if line.startswith("mode,")).split(",")
        fields = dict(zip(columns, next(line for line in lines if line.startswith("none,")).split(",")))
        ours = float(fields["tokens_per_s"])
        # Resolved for the device compare ran on: an unset model.attention is cudnn on CUDA when cuDNN loads.
        attention = tomllib.loads(
            adacc.run("config", "--config", config, "--toml", "--set", "training.device=" + args.device)
        )["model"]["attention"]
        say("torch_peer speed %s adacc: %.1f ms/step (median of %s), %.0f tokens/s; %s, memory.mode none, "
            "%s attention" % (label, float(fields["step_ms"]), fields["timed_steps"], ours,
                              "bf16" if cuda else "fp32", attention))
        theirs = run_speed(shape, args.speed_batch, args.seq, args.steps, args.warmup, args.device,
                           not args.no_compile, label)
        say("torch_peer speed %s: adacc %.0f tokens/s, torch %.0f tokens/s, adacc / torch = %.3f"
            % (label, ours, theirs, ours / theirs if theirs else float("nan")))
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="against an adacc executable (tests, GPU check)")
    c.add_argument("--adacc", required=True)
    c.add_argument("--work", required=True)
    c.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    c.add_argument("--adacc-library-path", default=None, help="LD_LIBRARY_PATH for adacc alone")
    c.add_argument("--speed", action="store_true")
    c.add_argument("--speed-presets", default="gpt-117m,gpt-345m")
    c.add_argument("--speed-batch", type=int, default=16)
    c.add_argument("--seq", type=int, default=1024)
    c.add_argument("--steps", type=int, default=5)
    c.add_argument("--warmup", type=int, default=2)
    c.add_argument("--no-compile", action="store_true")
    c.add_argument("--budget-s", type=float, default=0, help="skip a speed preset when less than 60 s are left")
    n = sub.add_parser("numerics", help="an `adacc gradients` file against torch")
    n.add_argument("--model", required=True)
    n.add_argument("--gradients", required=True)
    n.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    s = sub.add_parser("speed", help="torch's training steps alone")
    s.add_argument("--shape", required=True, help="L,C,NH")
    s.add_argument("--vocab", type=int, default=50257)
    s.add_argument("--batch", type=int, required=True)
    s.add_argument("--seq", type=int, required=True)
    s.add_argument("--steps", type=int, default=5)
    s.add_argument("--warmup", type=int, default=2)
    s.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    s.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    # torch warns at import when numpy is absent, which nothing here uses.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
    except ImportError as error:
        say("torch_peer: skipped: %s: this needs torch (pip install torch)" % error)
        return EXIT_NO_TORCH
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    try:
        if args.command == "check":
            ok = check(args)
        elif args.command == "numerics":
            if args.device == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
            ok = run_numerics(args.model, args.gradients, args.device)
        else:
            L, C, NH = (int(x) for x in args.shape.split(","))
            shape = dict(maxT=args.seq, V=args.vocab, L=L, NH=NH, C=C, Vp=padded_vocab(args.vocab))
            ok = run_speed(shape, args.batch, args.seq, args.steps, args.warmup, args.device, not args.no_compile,
                           "L=%d C=%d NH=%d" % (L, C, NH)) > 0
    except SetupError as error:
        say("torch_peer: error: %s" % error)
        return EXIT_SETUP
    say("torch_peer: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
