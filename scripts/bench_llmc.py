#!/usr/bin/env python3
"""adacc beside llm.c on one GPU: training tokens/s at the same GPT-2 shape, batch and T, and the
largest batch each fits in the GPU's memory.

llm.c (github.com/karpathy/llm.c) is the engine adacc's GPU speed is measured against. This project
neither ships nor builds it: build its `train_gpt2cu` yourself (`make train_gpt2cu USE_CUDNN=1`,
cuDNN's flash attention, bf16) and pass it with --llmc. Both train from random init on the same
random token shard (llm.c's format, which both read), with no evaluation or checkpoint in the timed
steps:
  adacc   `adacc compare --modes none` (memory mode none, its default attention: cuDNN's on CUDA;
          bf16), the median of --steps timed steps after --warmup;
  llm.c   `train_gpt2cu -e dL` (llm.c builds GPT-2 of depth L from its own width rule), once per
          --llmc-flags variant (default: "-r 0", no recomputation; "-r 0 -ge 2", GELU in cuBLASLt's
          epilogues, as adacc's; "-r 2", GELU and layernorms recomputed, its most frugal), its own
          per-step times (CUDA events around each step), the median of the same steps; validation
          runs once before the first step, outside them.
A preset is compared only where llm.c's model of that depth is the preset's (its width and heads),
and with llm.c's sequence length limit (1024). The speed ratio printed is adacc's tokens/s over the
fastest llm.c variant's. Then the memory: in the GPU's memory as llm.c reports it, llm.c's own
estimate of its largest batch (its most frugal variant's: B + the free memory after allocating
at B over its activations' bytes per sequence, no workspace counted) beside adacc's largest batch
per mode by its exact accounting (`adacc memory --device cuda --memory-budget`), and the ratio of
adacc's largest to llm.c's.

Output lines start with "llmc_peer " (the GPU check collects them). Exit 0 when every comparison
ran, 1 when a run failed, 2 on a usage or setup error.

Usage:
  bench_llmc.py --llmc PATH/train_gpt2cu --adacc BUILD/adacc --work DIR [--presets gpt-117m,gpt-345m]
                [--batch 64] [--seq 1024] [--steps 10] [--warmup 3] [--device cuda]
                [--llmc-flags "-r 0" --llmc-flags "-r 2" ...] [--adacc-library-path P] [--llmc-library-path P]
                [--budget-s S]
"""
import argparse
import collections
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # beside it, also under python3 -I
from torch_reference import Adacc, SetupError, say, write_config, write_shard  # noqa: E402

EXIT_FAIL, EXIT_SETUP = 1, 2
LLMC_MAX_T = 1024
# llm.c's gpt2_set_hyperparameters: the width and heads it gives GPT-2 of each depth.
LLMC_DEPTHS = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
# llm.c's per-step line: "step    4/13 | loss ... | lr ... | 123.45 ms | ...".
LLMC_STEP = re.compile(r"^step\s+(\d+)/(\d+) \|.*\| ([0-9.]+) ms \|")
# What llm.c says of its memory once its buffers are allocated (cuDNN's workspace comes later): the
# device's memory in use (cudaMemGetInfo) and its estimate of the largest batch the rest would hold.
LLMC_MEMORY = re.compile(r"^device memory usage: (\d+) MiB / (\d+) MiB")
LLMC_MAX_BATCH = re.compile(r"estimated maximum batch size: (\d+)")
# adacc's modes in the memory comparison: keep-all, full recomputation, INT4, the planner's.
MEMORY_MODES = ["none", "full", "quant", "adacc"]


def llmc_descriptor(preset, shape):
    """llm.c's -e descriptor for the preset, or why llm.c has no model of its shape."""
    width = LLMC_DEPTHS.get(shape["L"])
    if width != (shape["C"], shape["NH"]) or shape["V"] != 50257:
        raise SetupError("%s (L=%d C=%d NH=%d V=%d) is not a GPT-2 llm.c builds from a depth (%s)"
                         % (preset, shape["L"], shape["C"], shape["NH"], shape["V"],
                            ", ".join("d%d: C=%d NH=%d" % (d, c, h) for d, (c, h) in LLMC_DEPTHS.items())))
    return "d%d" % shape["L"]


# One llm.c run: its tokens/s, and (None where it did not print them) the GPU's memory in MiB and
# its estimate of its largest batch there.
LlmcRun = collections.namedtuple("LlmcRun", "tokens_per_s gpu_mib max_batch")


def llmc_memory(lines):
    """llm.c's memory in use and the GPU's (MiB) and its largest-batch estimate (None: not printed)."""
    used = next((m for m in map(LLMC_MEMORY.match, lines) if m), None)
    batch = next((m for m in map(LLMC_MAX_BATCH.search, lines) if m), None)
    return (int(used.group(1)) if used else None, int(used.group(2)) if used else None,
            int(batch.group(1)) if batch else None)


def median_step_ms(lines, warmup):
    """The median of the per-step milliseconds after the first `warmup` steps."""
    times = [float(m.group(3)) for m in map(LLMC_STEP.match, lines) if m and int(m.group(1)) > warmup]
    return statistics.median(times) if times else None, len(times)


def run_llmc(args, descriptor, shard, flags, label):
    """llm.c's LlmcRun at the batch, or None (after saying why) when it failed."""
    steps = args.steps + args.warmup
    cmd = [args.llmc, "-i", shard, "-j", shard, "-e", descriptor, "-b", str(args.batch), "-t", str(args.seq),
           "-x", str(steps), "-v", str(steps + 1), "-m", "1", "-s", "0", "-n", "0", "-h", "0"] + shlex.split(flags)
    say("$ " + " ".join(cmd))
    env = dict(os.environ)
    if args.llmc_library_path is not None:
        env["LD_LIBRARY_PATH"] = args.llmc_library_path
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=args.run_timeout_s, cwd=args.work, env=env)
    except subprocess.TimeoutExpired:
        say("llmc_peer %s llm.c %s: outlasted %d s" % (label, flags, args.run_timeout_s))
        return None
    lines = done.stdout.splitlines()
    ms, timed = median_step_ms(lines, args.warmup)
    if done.returncode != 0 or ms is None:
        print(done.stdout[-3000:])
        say("llmc_peer %s llm.c %s: exited %d after %d timed steps: %s"
            % (label, flags, done.returncode, timed, (lines or ["no output"])[-1][:160]))
        return None
    tokens_per_s = args.batch * args.seq / (ms / 1e3)
    used_mib, gpu_mib, max_batch = llmc_memory(lines)
    say("llmc_peer %s llm.c %s: %.1f ms/step (median of %d), %.0f tokens/s%s%s"
        % (label, flags, ms, timed, tokens_per_s,
           "; device memory in use before its first step %d MiB" % used_mib if used_mib is not None else "",
           "; its estimate of its largest batch %d" % max_batch if max_batch is not None else ""))
    return LlmcRun(tokens_per_s, gpu_mib, max_batch)


def run_adacc(adacc, args, config, label):
    out = adacc.run("compare", "--config", config, "--modes", "none", "--batch", args.batch, "--steps",
                    args.steps + args.warmup, "--warmup", args.warmup, "--no-fidelity", "--format", "csv",
                    "--device", args.device, timeout=args.run_timeout_s)
    lines = out.splitlines()
    try:
        columns = next(line for line in lines if line.startswith("mode,")).split(",")
        fields = dict(zip(columns, next(line for line in lines if line.startswith("none,")).split(",")))
        tokens_per_s = float(fields["tokens_per_s"])
    except (StopIteration, KeyError, ValueError):
        raise SetupError("adacc compare printed no csv row for mode none: %s" % (lines or ["no output"])[-1])
    say("llmc_peer %s adacc: %s ms/step (median of %s), %.0f tokens/s; accounted memory %.0f MiB"
        % (label, fields["step_ms"], fields["timed_steps"], tokens_per_s, float(fields["total_bytes"]) / 2**20))
    return tokens_per_s


def adacc_largest_batches(adacc, args, config, gpu_mib):
    """adacc's largest batch per mode in gpu_mib MiB by its exact accounting (`adacc memory`)."""
    out = adacc.run("memory", "--config", config, "--device", args.device, "--modes", ",".join(MEMORY_MODES),
                    "--memory-budget", "%dMiB" % gpu_mib, timeout=args.run_timeout_s)
    batches = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) > 1 and words[0] in MEMORY_MODES and words[-1].isdigit():
            batches[words[0]] = int(words[-1])
    if len(batches) != len(MEMORY_MODES):
        raise SetupError("adacc memory printed no largest batch for %s"
                         % ", ".join(m for m in MEMORY_MODES if m not in batches))
    return batches


def compare_memory(adacc, args, config, preset, ran):
    """The largest batch in the GPU's memory: llm.c's own estimate (its most frugal variant's) beside
    adacc's by mode. Nothing when llm.c printed no estimate."""
    sized = {flags: r for flags, r in ran.items() if r.gpu_mib and r.max_batch}
    if not sized:
        return
    frugal = max(sized, key=lambda flags: sized[flags].max_batch)
    run = sized[frugal]
    batches = adacc_largest_batches(adacc, args, config, run.gpu_mib)
    best = max(batches, key=batches.get)
    say("llmc_peer %s T=%d, largest batch in the GPU's %d MiB: llm.c %d (its own estimate, %s); adacc %s "
        "(exact accounting); adacc's largest (%s) / llm.c's = %.2f"
        % (preset, args.seq, run.gpu_mib, run.max_batch, frugal,
           ", ".join("%s %d" % (m, batches[m]) for m in MEMORY_MODES), best, batches[best] / run.max_batch))


def compare_preset(adacc, args, preset, shard):
    shape = adacc.shape(preset)
    descriptor = llmc_descriptor(preset, shape)
    label = "%s B=%d T=%d" % (preset, args.batch, args.seq)
    config = os.path.join(args.work, "%s.toml" % preset)
    write_config(config, preset, args.batch, args.seq, 1, shard, os.path.join(args.work, "run"))
    ours = run_adacc(adacc, args, config, label)
    theirs = {flags: run_llmc(args, descriptor, shard, flags, label) for flags in args.llmc_flags}
    ran = {flags: r for flags, r in theirs.items() if r}
    if not ran:
        say("llmc_peer %s: adacc %.0f tokens/s, llm.c did not run" % (label, ours))
        return False
    fastest = max(ran, key=lambda flags: ran[flags].tokens_per_s)
    say("llmc_peer %s: adacc %.0f tokens/s, llm.c %.0f tokens/s (%s), adacc / llm.c = %.3f"
        % (label, ours, ran[fastest].tokens_per_s, fastest, ours / ran[fastest].tokens_per_s))
    compare_memory(adacc, args, config, preset, ran)
    return len(ran) == len(theirs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llmc", required=True, help="llm.c's train_gpt2cu (built by you, with cuDNN)")
    parser.add_argument("--adacc", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--presets", default="gpt-117m,gpt-345m")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=LLMC_MAX_T)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda",
                        help="adacc's (cpu: for testing this script with a stand-in llm.c)")
    parser.add_argument("--llmc-flags", action="append", help="llm.c options of one variant (repeatable)")
    parser.add_argument("--adacc-library-path", default=None, help="LD_LIBRARY_PATH for adacc alone")
    parser.add_argument("--llmc-library-path", default=None, help="LD_LIBRARY_PATH for llm.c alone")
    parser.add_argument("--run-timeout-s", type=int, default=120, help="each run of either engine")
    parser.add_argument("--budget-s", type=float, default=0, help="skip a preset when less than 60 s are left")
    args = parser.parse_args()
    args.llmc_flags = args.llmc_flags or ["-r 0", "-r 0 -ge 2", "-r 2"]
    started = time.monotonic()
    try:
        if not (os.path.isfile(args.llmc) and os.access(args.llmc, os.X_OK)):
            raise SetupError("--llmc %s is not an executable: build llm.c's train_gpt2cu (make train_gpt2cu "
                             "USE_CUDNN=1 in a checkout of github.com/karpathy/llm.c)" % args.llmc)
        if not 1 <= args.seq <= LLMC_MAX_T or args.batch < 1 or args.steps < 1 or args.warmup < 0:
            raise SetupError("--seq must be 1..%d (llm.c's limit), --batch and --steps at least 1, --warmup at "
                             "least 0" % LLMC_MAX_T)
        args.llmc, args.work = os.path.abspath(args.llmc), os.path.abspath(args.work)
        os.makedirs(args.work, exist_ok=True)
        adacc = Adacc(args.adacc, args.adacc_library_path, args.work)
        shard = os.path.join(args.work, "tokens.bin")
        # Enough tokens that neither engine starts a second pass over the shard in its steps.
        write_shard(shard, args.batch * args.seq * (args.steps + args.warmup + 2) + 1, 1337, 50257)
        ok = True
        for preset in args.presets.split(","):
            left = args.budget_s - (time.monotonic() - started) if args.budget_s else float("inf")
            if left < 60:
                say("llmc_peer %s: skipped, %.0f s left of --budget-s %g" % (preset, left, args.budget_s))
                ok = False
                continue
            ok = compare_preset(adacc, args, preset, shard) and ok
    except SetupError as error:
        say("llmc_peer: error: %s" % error)
        return EXIT_SETUP
    say("llmc_peer: %s" % ("done" if ok else "FAIL"))
    return 0 if ok else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
