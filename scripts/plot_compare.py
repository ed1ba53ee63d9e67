#!/usr/bin/env python3
"""`adacc compare`'s result as a PNG: per mode and batch, on the left its memory stacked by arena
with the budget as a horizontal line, on the right its tokens/s at the median step time with the
spread (the interquartile range of the timed steps' times) as error bars.

    python3 scripts/plot_compare.py compare.json --out compare.png

The json is `adacc compare --format json`'s (`adacc compare --plot FILE.png` writes it to FILE.json
and runs this script). Needs matplotlib, found as scripts/plot_metrics.py finds it: Debian's
python3-matplotlib (scripts/install_deps.sh) or `pip install matplotlib`; when the python3 running
it has none (e.g. pyenv's), it runs itself again with Debian's /usr/bin/python3.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_metrics import import_pyplot  # noqa: E402

MIB = 2.0**20
# The arenas of src/engine/model_layout.h's ModelMemory, bottom to top, and their legend names.
ARENAS = [
    ("parameters", "parameters"),
    ("working_weights", "bf16 weights"),
    ("gradients", "gradients"),
    ("optimizer_state", "AdamW m, v"),
    ("tape", "tape (saved activations)"),
    ("materialize", "workspace: materialized"),
    ("transients", "workspace: transients"),
    ("logits", "workspace: logits"),
    ("backend", "backend"),
]


def read_rows(path):
    with open(path) as f:
        try:
            rows = json.load(f)
        except json.JSONDecodeError as error:
            sys.exit(f"error: {path} is not JSON ({error}): give it `adacc compare --format json` output")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "mode" in r for r in rows):
        sys.exit(f"error: {path} is not `adacc compare --format json` output (a list of rows with a mode)")
    missing = [r["mode"] for r in rows if r.get("ran") and "tokens_per_s_p25" not in r]
    if missing:
        sys.exit(f"error: {path} has no step-time spread (tokens_per_s_p25): it comes from an older adacc; rerun "
                 "`adacc compare ... --plot FILE.png`")
    return rows


def label(row, batches):
    name = row["mode"]
    if len(batches) > 1:
        name += f"\nB={row['batch']}"
    if row.get("plan_error"):
        name += "\n(no plan)"
    elif not row.get("ran"):
        name += "\n(over budget)"
    elif row.get("fits") is False:
        name += "\n(reference)"
    return name


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", help="adacc compare --format json output")
    parser.add_argument("--out", default="compare.png", help="PNG to write")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    rows = read_rows(args.json)
    plt = import_pyplot()

    batches = sorted({r["batch"] for r in rows})
    labels = [label(r, batches) for r in rows]
    x = list(range(len(rows)))
    fig, (mem_ax, tok_ax) = plt.subplots(1, 2, figsize=(max(10, 1.6 * len(rows) + 4), 5.5))

    bottoms = [0.0] * len(rows)
    for index, (key, name) in enumerate(ARENAS):
        heights = [(r.get("arenas") or {}).get(key, 0) / MIB for r in rows]
        if not any(heights):
            continue
        mem_ax.bar(x, heights, bottom=bottoms, color=f"C{index}", label=name, width=0.7)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    # The tape the run measured at its peak, beside the tape it reserved.
    for i, r in enumerate(rows):
        if r.get("ran") and r.get("arenas"):
            a = r["arenas"]
            below = sum(a.get(k, 0) for k in ("parameters", "working_weights", "gradients", "optimizer_state"))
            y = (below + r["tape_peak_bytes"]) / MIB
            mem_ax.plot([i - 0.35, i + 0.35], [y, y], color="black", linewidth=1, linestyle=":")
    budgets = {r.get("budget_bytes") for r in rows if r.get("budget_bytes")}
    for budget in sorted(budgets):
        mem_ax.axhline(budget / MIB, color="red", linewidth=1.5, linestyle="--",
                       label=f"budget {budget / MIB:.0f} MiB")
    mem_ax.plot([], [], color="black", linewidth=1, linestyle=":", label="tape peak measured")
    mem_ax.set_xticks(x)
    mem_ax.set_xticklabels(labels)
    mem_ax.set_ylabel("MiB")
    mem_ax.set_title("memory by arena (as allocated)")
    mem_ax.grid(axis="y", alpha=0.3)
    mem_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)

    ran = [i for i, r in enumerate(rows) if r.get("ran")]
    medians = [rows[i]["tokens_per_s"] for i in ran]
    lower = [rows[i]["tokens_per_s"] - rows[i]["tokens_per_s_p25"] for i in ran]
    upper = [rows[i]["tokens_per_s_p75"] - rows[i]["tokens_per_s"] for i in ran]
    bars = tok_ax.bar(ran, medians, yerr=[lower, upper], capsize=5, color="C7", width=0.7)
    tok_ax.bar_label(bars, labels=[f"{m:.0f}" for m in medians], label_type="center", color="white", fontsize=8)
    interleaved = any(rows[i].get("interleaved") for i in ran)
    steps = max((rows[i].get("timed_steps", 0) for i in ran), default=0)
    tok_ax.set_xticks(x)
    tok_ax.set_xticklabels(labels)
    tok_ax.set_ylabel("tokens/s")
    tok_ax.set_title(f"tokens/s: median of {steps} timed steps, bars: interquartile range" +
                     ("" if interleaved else "\n(modes NOT interleaved)"), fontsize=10)
    tok_ax.grid(axis="y", alpha=0.3)

    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120, bbox_inches="tight")  # the legend below the axes included
    print(f"wrote {args.out}")


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as error:  # a file missing, unreadable or not the compare json
        sys.exit(f"error: {error!r}" if isinstance(error, KeyError) else f"error: {error}")
