#!/usr/bin/env python3
"""Draws <run>/loss.png from <run>/metrics.jsonl: training loss (and eval loss)
per step, and throughput.

    scripts/plot_metrics.py RUN_DIR [--out PNG]
"""
import argparse
import json
import pathlib
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--out")
    a = ap.parse_args()
    run = pathlib.Path(a.run_dir)
    train, evals = [], []
    for line in open(run / "metrics.jsonl"):
        if not line.strip():
            continue
        r = json.loads(line)
        if "event" not in r:
            train.append(r)
        elif r["event"] == "eval":
            evals.append(r)
    if not train:
        print(f"{run}/metrics.jsonl has no training records", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no plot drawn", file=sys.stderr)
        return 1

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    if evals:
        ax.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="eval loss")
    ax.set_ylabel("loss (per supervised token)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"fptrain: {a.run_dir}")
    bx.plot([r["step"] for r in train], [r["tokens_per_s"] for r in train], color="tab:green")
    bx.set_ylabel("tokens/s")
    bx.set_xlabel("step")
    bx.grid(alpha=0.3)
    fig.tight_layout()
    out = pathlib.Path(a.out) if a.out else run / "loss.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
