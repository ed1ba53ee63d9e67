#!/usr/bin/env python3
"""The accuracy study's tables and plot (scripts/accuracy_study.sh runs the training).

    python3 scripts/accuracy_study.py accuracy_out

Reads OUT/runs.csv (run, mode, seed, hook) and each run's OUT/RUN/metrics.jsonl, and writes
  OUT/losses.csv    run, mode, seed, hook, step, loss, val_loss, grad_err, grad_cos (every logged point)
  OUT/summary.csv   one row per run: the printed table's columns
  OUT/accuracy.png  validation loss vs step (none's seeds as a band, mean +- 2 sigma) and gradient
                    error vs step (needs matplotlib; skipped with a message without it)
and prints the table. The noise: sigma = the sample standard deviation (n - 1) of none's final
validation loss over its seeds. A run's gap is its final validation loss minus that of none at the
same seed and outlier hook; it is "inside" the noise when |gap| <= 2 sigma. With three seeds sigma
is itself uncertain (its 95% interval is about 0.5x to 6x the estimate): read the verdicts as that
coarse.
"""
import csv
import json
import math
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from plot_metrics import import_pyplot  # noqa: E402  (the same matplotlib lookup as the other plots)


def read_run(folder):
    points = {}
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "step" not in record or "event" in record:
            continue
        point = points.setdefault(record["step"], {})
        for key in ("loss", "val_loss", "grad_err", "grad_cos"):
            if key in record:
                point[key] = record[key]
    return dict(sorted(points.items()))


def final(points, key):
    values = [p[key] for p in points.values() if key in p]
    return values[-1] if values else math.nan


def chosen_codecs(folder):
    """tensor -> 'codec (error)' for the tensors the run's last plan compresses with a lossy codec."""
    plan_file = folder / "final_plan.json"
    if not plan_file.exists():
        return ""
    plan = json.loads(plan_file.read_text())
    chosen = {}
    for d in plan["decisions"]:
        if d["decision"] == "compress" and d["codec"] != "bitpack":
            chosen.setdefault(d["tensor"], f'{d["codec"]} ({d["relative_error"]:.3f})')
    recomputed = sorted({d["tensor"] for d in plan["decisions"] if d["decision"] == "recompute"})
    text = ", ".join(f"{t} {c}" for t, c in chosen.items())
    return text + (f"; recompute {', '.join(recomputed)}" if recomputed else "")


def main():
    # First, before any output: without matplotlib it re-runs this script under Debian's python3.
    try:
        plt = import_pyplot()
    except SystemExit as e:
        print(f"(no plot: {e})")
        plt = None
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "accuracy_out")
    runs = list(csv.DictReader(open(out / "runs.csv")))
    data = {r["run"]: read_run(out / r["run"]) for r in runs}

    with open(out / "losses.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "mode", "seed", "hook", "step", "loss", "val_loss", "grad_err", "grad_cos"])
        for r in runs:
            for step, p in data[r["run"]].items():
                w.writerow([r["run"], r["mode"], r["seed"], r["hook"], step] +
                           [p.get(k, "") for k in ("loss", "val_loss", "grad_err", "grad_cos")])

    seeds = [r for r in runs if r["mode"] == "none" and r["hook"] == "0"]
    finals = [final(data[r["run"]], "val_loss") for r in seeds]
    sigma = statistics.stdev(finals) if len(finals) > 1 else math.nan
    reference = {(r["seed"], r["hook"]): final(data[r["run"]], "val_loss") for r in runs if r["mode"] == "none"}
    print(f"noise: none's final val_loss over seeds {', '.join(r['seed'] for r in seeds)}: "
          + ", ".join(f"{v:.4f}" for v in finals) + f"; mean {statistics.mean(finals):.4f}, sigma {sigma:.4f} "
          f"({100 * sigma / statistics.mean(finals):.3f}%)")

    rows = []
    for r in runs:
        v = final(data[r["run"]], "val_loss")
        ref = reference.get((r["seed"], r["hook"]), math.nan)
        gap = v - ref
        errs = [p["grad_err"] for p in data[r["run"]].values() if "grad_err" in p]
        rows.append({
            "run": r["run"], "mode": r["mode"], "seed": r["seed"], "outlier_hook": r["hook"],
            "final_val_loss": v, "gap_vs_none": gap, "gap_pct": 100 * gap / ref,
            "gap_sigma": gap / sigma if sigma > 0 else math.nan,
            "inside_2sigma": abs(gap) <= 2 * sigma,
            "mean_grad_err": statistics.mean(errs) if errs else math.nan,
            "max_grad_err": max(errs) if errs else math.nan,
            "codecs": chosen_codecs(out / r["run"]),
        })
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    print(f"{'run':16} {'hook':>4} {'val_loss':>9} {'gap':>8} {'gap %':>8} {'gap/sigma':>9} {'in 2sigma':>9} "
          f"{'grad_err':>10} {'max':>10}")
    for row in rows:
        print(f"{row['run']:16} {row['outlier_hook']:>4} {row['final_val_loss']:9.4f} {row['gap_vs_none']:+8.4f} "
              f"{row['gap_pct']:+7.3f}% {row['gap_sigma']:+9.2f} {'yes' if row['inside_2sigma'] else 'NO':>9} "
              f"{row['mean_grad_err']:10.3e} {row['max_grad_err']:10.3e}")
    for row in rows:
        if row["codecs"]:
            print(f"{row['run']} codecs (last plan): {row['codecs']}")
    by_run = {row["run"]: row for row in rows}
    for suffix, label in (("", "no hook"), ("_outliers", "outlier hook")):
        q, a = by_run.get("quant" + suffix), by_run.get("adacc" + suffix)
        if q and a and a["mean_grad_err"] > 0:
            print(f"{label}: adacc's mean gradient error {a['mean_grad_err']:.3e} vs quant's {q['mean_grad_err']:.3e} "
                  f"at the same memory: {q['mean_grad_err'] / a['mean_grad_err']:.2f}x lower")
    print(f"wrote {out}/losses.csv and {out}/summary.csv")
    if plt:
        plot(plt, out, runs, data, seeds)


def plot(plt, out, runs, data, seeds):
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    steps = [s for s, p in data[seeds[0]["run"]].items() if "val_loss" in p]
    per_step = [[data[r["run"]][s]["val_loss"] for r in seeds] for s in steps]
    mean = [statistics.mean(v) for v in per_step]
    band = [2 * statistics.stdev(v) if len(v) > 1 else 0 for v in per_step]
    left.fill_between(steps, [m - b for m, b in zip(mean, band)], [m + b for m, b in zip(mean, band)],
                      color="grey", alpha=0.3, label=f"none, {len(seeds)} seeds: mean +- 2 sigma")
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(r for r in runs if r not in seeds):
        style = {"marker": "o", "markersize": 3, "label": r["run"], "color": palette[i % len(palette)],
                 "linestyle": "--" if r["hook"] == "1" else "-"}  # one colour per run in both panels
        pts = [(s, p["val_loss"]) for s, p in data[r["run"]].items() if "val_loss" in p]
        left.plot(*zip(*pts), **style)
        errs = [(s, p["grad_err"]) for s, p in data[r["run"]].items() if p.get("grad_err", 0) > 0]
        if errs:
            right.plot(*zip(*errs), **style)
    left.set(xlabel="step", ylabel="validation loss", title="validation loss (dashed: outlier hook)")
    right.set(xlabel="step", ylabel="relative L2 error of the gradients vs keep-all", yscale="log",
              title="gradient error along the run (0 for none, full, recompute-opt)")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=110)
    print(f"wrote {out}/accuracy.png")


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as error:  # a file missing, unreadable or not the study's folder
        sys.exit(f"error: {error!r}" if isinstance(error, KeyError) else f"error: {error}")
