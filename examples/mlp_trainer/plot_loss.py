#!/usr/bin/env python3
"""Plots the loss of mlp_trainer runs on one PNG.

    plot_loss.py OUT.png LABEL=run/loss.csv [LABEL=run/loss.csv ...] [--stop STEP]

Each CSV is the `step,loss` file a run writes (by default <ckpt-dir>/loss.csv). A resumed run's
file holds the whole curve, the rows of the first part kept up to the resumed checkpoint. With
--stop, a vertical line marks where the interrupted run stopped and resumed.

run_demo.sh beside this script trains an uninterrupted and a stopped-and-resumed run and calls
this. Needs python3 with matplotlib (Debian: python3-matplotlib).
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, losses = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            steps.append(int(row["step"]))
            losses.append(float(row["loss"]))
    return steps, losses


def smooth(values, window=50):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def main(argv):
    args = list(argv[1:])
    stop = None
    if "--stop" in args:
        i = args.index("--stop")
        stop = int(args[i + 1])
        del args[i : i + 2]
    if len(args) < 2 or any("=" not in a for a in args[1:]):
        sys.exit(__doc__)
    out, runs = args[0], [a.split("=", 1) for a in args[1:]]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    styles = [dict(linewidth=3, alpha=0.5), dict(linewidth=1, linestyle="--")]
    for k, (label, path) in enumerate(runs):
        steps, losses = read(path)
        ax.plot(steps, smooth(losses), label=label, **styles[k % len(styles)])
    if stop is not None:
        ax.axvline(stop, color="gray", linewidth=0.8)
        ax.annotate(" stopped, resumed", (stop, ax.get_ylim()[1]), va="top", color="gray")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (moving average of 50 steps)")
    ax.set_yscale("log")
    ax.set_title("mlp_trainer on two spirals: the resumed run retraces the uninterrupted one")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv)
