#!/usr/bin/env python3
"""The GPU check's hf_gpt2 step: adacc's Hugging Face GPT-2 folders against transformers itself.

Needs python3 with torch, transformers and numpy (the GPU machine has them; this project's CPU
machines do not, so this has not run yet). Runs on the CPU in fp32 (a tiny model; torch's CPU
matmuls are true fp32), in about 10-20 s, most of it importing torch and transformers.

  export  adacc trains a tiny GPT-2 (gpt-tiny: L=2, C=64, H=4, GPT-2's 50257 tokens, T=64) for 20
          steps on random tokens and exports it (`adacc export --hf-model`);
          GPT2LMHeadModel.from_pretrained must load it with no missing, unexpected or mismatched
          key and no warning, and its loss on the first batches must be adacc's.
  import  transformers makes its own GPT2LMHeadModel of that shape (its init, every parameter then
          perturbed so biases and layernorms are not trivial) and saves it with save_pretrained;
          `adacc train --init-from` must start from it with transformers' loss on the same batches.

adacc's loss on a batch is the step loss a run logs with a learning rate of 1e-30, which leaves
every fp32 weight as it is; transformers' is the mean cross-entropy of its logits against the
same targets (adacc's data loader, sequential: batch i, row r is tokens[(iB + r)T : (iB + r)T + T + 1]).
Both are fp32 means over B x T = 256 tokens of log-softmaxes over 50257 logits of order 1: each
is within a few 1e-6 relative of the exact value (2^-24 roundings over sums of 50257 exponentials
and 64-term dot products), about 1e-5 absolute at a loss near ln(50257) = 10.8, so the two agree
within TOLERANCE = 1e-4 unless a weight is misplaced, which moves the loss by 1e-2 or more.

Usage: hf_gpt2_check.py --adacc BUILD/adacc --work DIR [--adacc-library-path P] [--vocab GPT2_VOCAB_DIR]
  --adacc-library-path is LD_LIBRARY_PATH for adacc alone (the GPU bundle's libraries; python3 and
  torch keep their own).
  --vocab (encoder.json, vocab.bpe; absent from the GPU bundle) also exports the tokenizer files
  and checks that AutoTokenizer.from_pretrained encodes a text as adacc's tokenizer does.
Exit 0 when both directions agree, 1 when one does not, 2 on a usage or setup error.
"""
import argparse
import json
import logging
import os
import struct
import subprocess
import sys

TOLERANCE = 1e-4
V, T, B, STEPS, BATCHES = 50257, 64, 4, 20, 4


ADACC_ENV = dict(os.environ)


def run(cmd, stdin=None):
    """An adacc command; its output when it succeeds, else the step ends with it."""
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=ADACC_ENV)
    if done.returncode != 0:
        print(done.stdout)
        raise SystemExit("hf_gpt2: %s exited %d" % (cmd[1], done.returncode))
    return done.stdout


def write_shard(path, count, seed):
    """llm.c's token shard (data/token_shard.h): 256 int32 of header, then uint16 ids."""
    import numpy as np
    tokens = np.random.RandomState(seed).randint(0, V, size=count).astype("<u2")
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(tokens.tobytes())
    return tokens


def write_config(path, shard, run_dir, steps, lr):
    with open(path, "w") as f:
        f.write('[model]\npreset = "gpt-tiny"\ndropout = 0.0\n'
                "[training]\nbatch_size = %d\nseq_len = %d\nsteps = %d\nseed = 7\n"
                "[lr]\nmax = %g\nmin = 0.0\n"
                '[data]\ntrain = "%s"\nshuffle = false\n[logging]\nrun_dir = "%s"\n'
                % (B, T, steps, lr, shard, run_dir))


def adacc_losses(adacc, work, name, shard, weights):
    """adacc's step losses on the first BATCHES batches, starting from `weights` at lr 1e-30."""
    config = os.path.join(work, name + ".toml")
    run_dir = os.path.join(work, name)
    write_config(config, shard, run_dir, BATCHES, 1e-30)
    run([adacc, "train", "--config", config, "--init-from", weights])
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [r["loss"] for r in records if "loss" in r][:BATCHES]


def transformers_losses(model, tokens):
    import torch
    losses = []
    with torch.no_grad():
        for i in range(BATCHES):
            rows = [tokens[(i * B + r) * T:(i * B + r) * T + T + 1] for r in range(B)]
            window = torch.tensor([list(map(int, row)) for row in rows], dtype=torch.long)
            logits = model(window[:, :-1]).logits.float()
            losses.append(torch.nn.functional.cross_entropy(logits.reshape(-1, V), window[:, 1:].reshape(-1)).item())
    return losses


def compare(direction, ours, theirs):
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    print("hf_gpt2 %s: adacc losses %s" % (direction, " ".join("%.6f" % x for x in ours)))
    print("hf_gpt2 %s: transformers   %s" % (direction, " ".join("%.6f" % x for x in theirs)))
    ok = len(ours) == len(theirs) == BATCHES and worst <= TOLERANCE
    print("hf_gpt2 %s: max |adacc - transformers| = %.3g over %d batches (tolerance %g): %s"
          % (direction, worst, BATCHES, TOLERANCE, "PASS" if ok else "FAIL"), flush=True)
    return ok


def load_exported(path):
    """from_pretrained with its loading report and every warning transformers logs."""
    import transformers
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    transformers.logging.set_verbosity_warning()
    handler = Keep(level=logging.WARNING)
    transformers.logging.get_logger().addHandler(handler)
    try:
        model, info = transformers.GPT2LMHeadModel.from_pretrained(path, output_loading_info=True)
    finally:
        transformers.logging.get_logger().removeHandler(handler)
    for r in records:
        print("hf_gpt2 export: transformers warned: %s" % r.splitlines()[0][:200])
    # A warning about the weights is a failure; others (deprecations) are only printed.
    about_weights = [r for r in records if any(w in r for w in ("initialized", "not used", "missing", "unexpected"))]
    problems = ["%s: %s" % (k, v) for k, v in info.items() if v] + ["warning: " + r for r in about_weights]
    return model.eval(), problems


def check_export(args, shard, tokens):
    config = os.path.join(args.work, "train.toml")
    run_dir = os.path.join(args.work, "trained")
    write_config(config, shard, run_dir, STEPS, 6e-4)
    run([args.adacc, "train", "--config", config])
    exported = os.path.join(args.work, "exported")
    export = [args.adacc, "export", "--checkpoint", run_dir, "--hf-model", exported]
    run(export + (["--vocab", args.vocab] if args.vocab else []))
    model, problems = load_exported(exported)
    for p in problems:
        print("hf_gpt2 export: from_pretrained reported %s" % p)
    print("hf_gpt2 export: from_pretrained: %s" % ("FAIL" if problems else "no missing, unexpected or mismatched key, "
                                                   "no warning"))
    ok = compare("export", adacc_losses(args.adacc, args.work, "from_export", shard, exported),
                 transformers_losses(model, tokens))
    return ok and not problems and check_tokenizer(args, exported)


def check_tokenizer(args, exported):
    if not args.vocab:
        print("hf_gpt2 tokenizer: not checked (no --vocab: the GPU bundle carries no GPT-2 vocabulary)")
        return True
    import transformers
    text = "Hello world, this is adacc's GPT-2 tokenizer: 123 tokens, ünïcödé and  spaces."
    theirs = transformers.AutoTokenizer.from_pretrained(exported)(text)["input_ids"]
    ours = [int(x) for x in run([args.adacc, "tokenize", "--vocab", exported], stdin=text).split()]
    ok = ours == theirs
    print("hf_gpt2 tokenizer: AutoTokenizer %s adacc tokenize (%d ids)" % ("equals" if ok else "DIFFERS from", len(theirs)))
    return ok


def check_import(args, shard, tokens):
    import torch
    import transformers
    torch.manual_seed(26)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=T, vocab_size=V)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    saved = os.path.join(args.work, "saved_by_transformers")
    model.save_pretrained(saved)
    print("hf_gpt2 import: save_pretrained wrote %s" % ", ".join(sorted(os.listdir(saved))))
    return compare("import", adacc_losses(args.adacc, args.work, "from_transformers", shard, saved),
                   transformers_losses(model, tokens))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adacc", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--adacc-library-path", default=None)
    parser.add_argument("--vocab", default="")
    args = parser.parse_args()
    if args.adacc_library_path is not None:
        ADACC_ENV["LD_LIBRARY_PATH"] = args.adacc_library_path
    try:
        import numpy  # noqa: F401
        import torch
        import transformers
    except ImportError as error:
        print("hf_gpt2: %s: this step needs torch, transformers and numpy" % error)
        return 2
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    print("hf_gpt2: torch %s, transformers %s" % (torch.__version__, transformers.__version__), flush=True)
    os.makedirs(args.work, exist_ok=True)
    shard = os.path.join(args.work, "tokens.bin")
    tokens = write_shard(shard, 40000, 1337)
    exported_ok = check_export(args, shard, tokens)
    imported_ok = check_import(args, shard, tokens)
    return 0 if exported_ok and imported_ok else 1


if __name__ == "__main__":
    sys.exit(main())
