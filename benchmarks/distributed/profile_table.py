#!/usr/bin/env python3
"""Step profiles of the data-parallel run side by side (profile_gpu.sh writes them).

    profile_table.py --base profile-1gpu-ga2.json --base-accum 2 profile-2gpu-*.json > table.md

Per step of each 2-GPU run against the 1-GPU run on the same examples, whose step is
`--base-accum` micro-batches (so its time per micro-batch is the 2-GPU ideal): wall time,
GPU idle, kernel time per category (NCCL runs beside compute, so categories overlap), and
the scaling that the wall times imply.
"""
import argparse
import json
import os

CATEGORIES = ["gemm", "attention", "other_elementwise", "optimizer", "clipping", "nccl"]


def load(path):
    with open(path) as f:
        p = json.load(f)
    name = os.path.basename(path).removeprefix("profile-").removesuffix(".json")
    return name, p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the 1-GPU profile on the same examples")
    ap.add_argument("--base-accum", type=int, default=2, help="its micro-batches per step (= the world size)")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    base_name, base = load(a.base)
    k = a.base_accum
    rows = [(f"{base_name} (per micro-batch: step / {k})", base, k)] + [(*load(r), 1) for r in a.runs]
    head = ["run", "wall ms", "GPU idle ms"] + [f"{c} ms" for c in CATEGORIES] + ["scaling"]
    out = [f"Device {base['device']}, {base['date']}, LibTorch {base['torch']}; steps "
           f"{base['first_step']}-{base['last_step']} ({base['profiled_steps']} after {base['warmup_steps']} "
           "warm-up steps), rank 0. Kernel times per category overlap (NCCL beside compute). Scaling = the "
           "1-GPU time per micro-batch / the 2-GPU step time.", "",
           "| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    ideal = base["per_step"]["wall_ms"] / k
    for name, p, div in rows:
        cats = p["categories"]
        cells = [name, f"{p['per_step']['wall_ms'] / div:.1f}", f"{p['per_step']['idle_ms'] / div:.1f}"]
        cells += [f"{cats.get(c, {}).get('ms', 0.0) / div:.1f}" for c in CATEGORIES]
        cells.append(f"{ideal / (p['per_step']['wall_ms'] / div):.1%}")
        out.append("| " + " | ".join(cells) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
