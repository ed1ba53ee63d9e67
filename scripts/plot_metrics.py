#!/usr/bin/env python3
"""Loss curves of one or more runs from their metrics.jsonl, to a PNG.

    python3 scripts/plot_metrics.py runs/a runs/b --out loss.png

Each run is a run folder (or its metrics.jsonl). Train loss is drawn as a line per run and
validation loss (when measured) as markers in the same colour. Needs matplotlib: Debian's
python3-matplotlib (scripts/install_deps.sh) or `pip install matplotlib`. When the python3 running
it has none (e.g. pyenv's), it runs itself again with Debian's /usr/bin/python3.
"""
import argparse
import json
import os
import pathlib
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        tried = os.environ.get("ADACC_PLOT_TRIED")  # set when this is the re-run under SYSTEM_PYTHON
        if not tried and os.access(SYSTEM_PYTHON, os.X_OK) and \
                os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
            os.environ["ADACC_PLOT_TRIED"] = sys.executable
            # The script that was run (this one, or one importing it, e.g. accuracy_study.py).
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
        pythons = f"{tried} nor {sys.executable}" if tried else sys.executable
        sys.exit(f"error: matplotlib is not installed for {pythons}: run scripts/install_deps.sh "
                 "(Debian's python3-matplotlib) or `python3 -m pip install matplotlib`")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_metrics(path):
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    train, val = [], []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a killed run
        if "loss" in record:
            train.append((record["step"], record["loss"]))
        if "val_loss" in record:
            val.append((record["step"], record["val_loss"]))
    return path.parent.name, train, val


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders or metrics.jsonl files")
    parser.add_argument("--out", default="loss.png", help="PNG to write")
    parser.add_argument("--title", default="training loss")
    args = parser.parse_args()
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for index, run in enumerate(args.runs):
        name, train, val = read_metrics(run)
        if not train:
            print(f"warning: {run} has no loss records", file=sys.stderr)
            continue
        color = f"C{index}"
        ax.plot(*zip(*train), color=color, linewidth=1, label=f"{name} train")
        if val:
            ax.plot(*zip(*val), "o-", color=color, markersize=4, label=f"{name} val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as error:  # a file missing, unreadable or not a run folder's metrics.jsonl
        sys.exit(f"error: {error!r}" if isinstance(error, KeyError) else f"error: {error}")
