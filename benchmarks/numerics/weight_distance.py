"""How far two training runs' weights are apart, checkpoint by checkpoint (the training-level
measure of "Is Flash Attention Stable?"): per tensor the largest |w_a - w_b| and the 1-D
Wasserstein distance between the two tensors' value distributions (both sorted: the mean
|a_(i) - b_(i)|, exact for equal sizes), summarised over the model's tensors (the largest,
and the mean weighted by size), and the two runs' training losses at those steps.

  weight_distance.py RUN_A RUN_B [--label NAME]      one JSON line per common checkpoint step
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from run_metrics import read_metrics  # noqa: E402


def checkpoints(run):
    """{step: folder} of a run's weights kept along the way (weights/step-NNNNNNNN, study.sh's copies),
    else of its checkpoints (checkpoints/step-NNNNNNNN)."""
    root = os.path.join(run, "weights")
    if not os.path.isdir(root):
        root = os.path.join(run, "checkpoints")
    out = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if name.startswith("step-") and name[5:].isdigit():
            out[int(name[5:])] = os.path.join(root, name)
    return out


# The sorts of every tensor in float64 take ~30 s per checkpoint pair of a 150M model on the
# CPU (H100 machine, 2026-11-26); on the GPU a fraction of that.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def load_weights(folder):
    tensors = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors") and f.startswith("model"):
            tensors.update(load_file(os.path.join(folder, f), device=DEVICE))
    if not tensors:
        raise SystemExit(f"{folder}: no model*.safetensors")
    return tensors


def wasserstein_1d(a, b):
    """W1 between the empirical distributions of two equally sized tensors."""
    return (torch.sort(a.flatten())[0] - torch.sort(b.flatten())[0]).abs().mean().item()


def distance(folder_a, folder_b):
    a, b = load_weights(folder_a), load_weights(folder_b)
    if a.keys() != b.keys():
        raise SystemExit(f"{folder_a} and {folder_b} hold different tensors")
    worst_abs, worst_w1, w1_sum, n = 0.0, 0.0, 0.0, 0
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        worst_abs = max(worst_abs, (x - y).abs().max().item())
        w1 = wasserstein_1d(x, y)
        worst_w1 = max(worst_w1, w1)
        w1_sum += w1 * x.numel()
        n += x.numel()
    return {"max_abs": worst_abs, "max_w1": worst_w1, "mean_w1": w1_sum / n}


def losses(run):
    records, _ = read_metrics(run)
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    ca, cb = checkpoints(a.run_a), checkpoints(a.run_b)
    steps = sorted(set(ca) & set(cb))
    if not steps:
        raise SystemExit(f"{a.run_a} and {a.run_b} have no checkpoint step in common")
    la, lb = losses(a.run_a), losses(a.run_b)
    for step in steps:
        row = {"label": a.label, "step": step, **distance(ca[step], cb[step])}
        if step in la and step in lb:
            row["loss_a"], row["loss_b"], row["loss_diff"] = la[step], lb[step], abs(la[step] - lb[step])
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
