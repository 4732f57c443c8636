#!/usr/bin/env python3
"""Per-rank GPU memory of a data-parallel fptrain run, projected to other world sizes.

    memory_model.py LOG [LOG ...] --project 2 4 8

Reads fptrain's "memory of this rank" line (rank 0's log of each run: weights, gradients,
optimizer state, activations and workspace at the peak, memory outside the allocator), its
"gradients after the reductions" line (what a rank holds of the gradients from its reductions
to the step, the whole buffer, distributed.release_unowned_gradients and the gradient
storage; a log without it: whole gradients, no release) and the world size of the run, then
projects each run to the requested world sizes with the model the trainer follows when
`distributed.shard_optimizer` is on:

    weights               replicated: the same on every rank
    gradients             the whole buffer; with the release on and lazy storage, at N > 1
                          ranks only the rank's shards after the reductions: whole / N
                          (the projection keeps the run's storage: at N ranks the copy
                          engines may keep gradients resident, without release)
    optimizer state       the fp32 masters and both moments are split over the ranks: x W / N
    activations           per micro-batch, independent of N (flatten balances tokens per rank);
                          the whole buckets the backward holds before their reductions
                          count here when the peak falls in the backward

and compares every projection with a measured run of that world size when one is given.
The memory outside the allocator (CUDA context, NCCL's buffers) grows with the number of
peers and is listed, not projected.
"""
import argparse
import os
import re

GIB = 1024 ** 3
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": GIB, "TiB": 1024 ** 4}
LINE = re.compile(r"memory of this rank: (?P<weights>[\d.]+ \w+) weights, (?P<gradients>[\d.]+ \w+) gradients, "
                  r"(?P<optimizer>[\d.]+ \w+) optimizer state, (?P<activations>[\d.]+ \w+) activations and workspace "
                  r"at the peak, (?P<outside>[\d.]+ \w+) outside the allocator")
RELEASE = re.compile(r"gradients after the reductions: each rank holds (?P<held>[\d.]+ \w+) of the "
                     r"(?P<whole>[\d.]+ \w+) gradients \(distributed\.release_unowned_gradients: "
                     r"(?P<release>true|false), gradient storage (?P<storage>\w+)\)")


def size(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


def read(path, world):
    with open(path) as f:
        text = f.read()
    lines = LINE.findall(text)
    if not lines:
        raise SystemExit(f"{path}: no 'memory of this rank' line")
    keys = ("weights", "gradients", "optimizer", "activations", "outside")
    run = {"log": path, "world": world, **{k: size(v) for k, v in zip(keys, lines[-1])}}
    releases = list(RELEASE.finditer(text))
    last = releases[-1] if releases else None
    run["whole_gradients"] = size(last["whole"]) if last else run["gradients"]
    run["release"] = bool(last) and last["release"] == "true" and last["storage"] == "lazy"
    return run


def gradients(run, n):
    """What a rank of n holds of the gradients after its reductions."""
    return run["whole_gradients"] / n if run["release"] and n > 1 else run["whole_gradients"]


def project(run, n):
    return run["weights"] + gradients(run, n) + run["optimizer"] * run["world"] / n + run["activations"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="rank 0's fptrain log of each run as LOG:WORLD_SIZE (LOG alone: 1)")
    ap.add_argument("--project", nargs="+", type=int, default=[1, 2, 4, 8])
    a = ap.parse_args()
    runs = []
    for spec in a.logs:
        path, _, world = spec.partition(":")
        runs.append(read(path, int(world) if world else 1))
    print("| run | ranks | weights | gradients | optimizer | activations | outside allocator | "
          + " | ".join(f"projected to {n} (GiB)" for n in a.project) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(a.project))
    for r in runs:
        cells = [f"{r[k] / GIB:.2f}" for k in ("weights", "gradients", "optimizer", "activations", "outside")]
        proj = []
        for n in a.project:
            p = project(r, n) / GIB
            measured = next((m for m in runs if m["world"] == n and m is not r), None)
            if measured:
                real = project(measured, n) / GIB  # its own parts at its own size: the measured allocation
                proj.append(f"{p:.1f} (measured {real:.1f}, {100 * (p - real) / real:+.1f}%)")
            else:
                proj.append(f"{p:.1f}")
        print(f"| {os.path.basename(r['log'])} | {r['world']} | " + " | ".join(cells) + " | " + " | ".join(proj) + " |")


if __name__ == "__main__":
    main()
