#!/usr/bin/env python3
"""Per-rank GPU memory of a data-parallel fptrain run, projected to other world sizes.

    memory_model.py LOG[:WORLD] [LOG[:WORLD] ...] --project 1 2 4 8 [--transfers auto|copy_engine|nccl]

Reads rank 0's log of each run: the "memory of this rank" line (weights, gradients,
optimizer state, activations and workspace at the peak, memory outside the allocator), the
"gradients after the reductions" line (release setting, gradient storage), the batching line
(micro-batches per step), the model line (vocab, hidden) and the transfers line. A 1-GPU
log that ran out of memory counts as a measurement ("out of memory, needs X GiB").

A run of N ranks is projected with the storage and transfers N ranks would use:
    transfers     N > 1: copy engines (one host) unless the log or --transfers says NCCL
    gradients     lazy; with release_unowned_gradients on, 1/N after the reductions.
                  Resident (whole on every rank, whatever the transfers) where the log says
                  optimizer.gradient_storage is resident, predates lazy storage, or pulled
                  by copy engines (what auto chose for them before they pushed)
    optimizer     masters and moments split: x W / N
    buckets       distributed.bucket_mb auto: 512 MiB at N > 1, 64 MiB at 1
    copy engines  lazy gradients: pushed into each owner's receive window, cudaMalloc'd for
                  the run outside the allocator: 2 slots x (N-1) x the largest bucket / N
                  (rounded up to 256 bytes; a bucket holds whole tensors, so at least the
                  head's gradient); resident ones: pulled into a reduce-scatter scratch of
                  bucket x (N-1)/N kept for the run (in the allocator); either way at N > 2
                  fp32 sums of 2 x bucket x (N+1)/N while one runs
The peak is the largest of these phases (the "phase" of each projection):
    backward    W + O/N + gradients held in the forward + A + the copy engines' scratch and sums
                (held: all with resident storage or several micro-batches, else the head's bucket)
    reductions  (released gradients only) through NCCL W + O/N + G + G/N + the sums, G the
                whole gradients: the reducer keeps every released bucket, beside its shard,
                until the step's reductions have finished; pushed W + O/N + G/N + one bucket
                in flight + the sums: the push records its reads with the allocator, so a
                bucket is freed as soon as its push is queued
    step        W + O/N + gradients held at the step + S (+ the scratch)
A (one micro-batch's activation peak) and S (the step's workspace, per bucket piece of
bucket/N, so it scales with that) come from the phase the log's own peak fell in: where the
gradients were held through its forwards (resident, or several micro-batches) its figure is
A (less the gradients it released: the figure counts only the 1/N kept to the step);
a lazy single-micro-batch log's is S (its forward held only the head's bucket), and A then
comes from another given log of the same world size, model and micro-batch size that measured
it, else the projection is a lower bound (">="). Outside the allocator: the CUDA context
(a 1-rank log's figure, else CONTEXT) plus PEER per peer (NCCL, the peer's context on this
GPU) plus the copy engines' flags ((8192 + 2) x 2 x N x 4 bytes) and, where they push, the
receive window (the shared buffers are the allocator's, counted as weights and gradients).
A measured run is compared with the projection of its own transfers, as its log names them:
"pushed by copy engines" (the window), "by copy engines" with resident gradients (the pull),
else NCCL.
"""
import argparse
import os
import re

GIB = 1024 ** 3
MIB = 1024 ** 2
UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": GIB, "TiB": 1024 ** 4}
SIZE = r"[\d.]+ \w+"
LINE = re.compile(rf"memory of this rank: (?P<weights>{SIZE}) weights, (?P<gradients>{SIZE}) gradients, "
                  rf"(?P<optimizer>{SIZE}) optimizer state, (?P<activations>{SIZE}) activations and workspace "
                  rf"at the peak, (?P<outside>{SIZE}) outside the allocator")
RELEASE = re.compile(rf"gradients after the reductions: each rank holds (?P<held>{SIZE}) of the "
                     rf"(?P<whole>{SIZE}) gradients \(distributed\.release_unowned_gradients: "
                     r"(?P<release>true|false), gradient storage (?P<storage>\w+)\)")
OOM = re.compile(rf"needs about (?P<needs>{SIZE}) per rank for weights, gradients and optimizer state")
# LibTorch's own report (logs before fptrain's): what was allocated plus what it tried to add.
TORCH_OOM = re.compile(rf"Tried to allocate (?P<tried>{SIZE})\. .*?Of the allocated memory (?P<held>{SIZE}) is allocated")
DEVICE = re.compile(rf"(?:the device has|of the device's|has a total capacity of) (?P<total>{SIZE})")
MICRO = re.compile(r"(?P<examples>\d+) examples per micro-batch x (?P<k>\d+) micro-batches")
MODEL = re.compile(r"hidden (?P<hidden>\d+), vocab (?P<vocab>\d+)")
# Measured, not derived: the context of a 1-rank run and what each peer adds (six 2-rank logs of
# 2026-11-23..27 on H100 and H200 read 1.55-1.56 GiB; one, 17.25, see the README).
CONTEXT = 0.74 * GIB
PEER = 0.82 * GIB
FLAG_SLOTS = 8192 + 2  # the collectives' and the receive window's
WINDOW_SLOTS = 2
WINDOW_ALIGNMENT = 256


def size(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


def bucket_bytes(n):
    return (512 if n > 1 else 64) * MIB  # distributed.bucket_mb: auto


def read(path, world):
    with open(path) as f:
        text = f.read()
    run = {"log": path, "world": world, "name": os.path.basename(path)}
    dev = DEVICE.search(text)
    run["device"] = size(dev["total"]) if dev else None
    lines = LINE.findall(text)
    if not lines:
        oom, torch_oom = OOM.search(text), TORCH_OOM.search(text)
        if oom:
            return {**run, "oom": True, "needs": size(oom["needs"])}
        if torch_oom:
            return {**run, "oom": True, "needs": size(torch_oom["held"]) + size(torch_oom["tried"])}
        raise SystemExit(f"{path}: no 'memory of this rank' line and no out-of-memory report")
    keys = ("weights", "gradients", "optimizer", "activations", "outside")
    run.update({k: size(v) for k, v in zip(keys, lines[-1])}, oom=False)
    rel = list(RELEASE.finditer(text))
    last = rel[-1] if rel else None  # a log without the line: whole gradients, held throughout, no release
    run["whole_gradients"] = size(last["whole"]) if last else run["gradients"]
    run["release_setting"] = bool(last) and last["release"] == "true"
    run["storage"] = last["storage"] if last else "resident"
    # Resident whatever the transfers: set so, or a log from before lazy storage.
    run["always_resident"] = not last or "optimizer.gradient_storage is resident" in text
    micro, model = MICRO.search(text), MODEL.search(text)
    run["examples"], run["k"] = (int(micro["examples"]), int(micro["k"])) if micro else (None, 1)
    run["head"] = int(model["hidden"]) * int(model["vocab"]) * 2 if model else 0  # bf16 [vocab, hidden]
    run["copy_engines"] = world > 1 and "by copy engines" in text
    # How its gradients were reduce-scattered. Before the copy engines pushed, auto made the
    # gradients resident for them and they pulled; explicitly lazy ones stayed on NCCL.
    if world == 1:
        run["transfers"] = None
    elif "pushed by copy engines" in text:
        run["transfers"] = "push"
    elif run["copy_engines"] and run["storage"] == "resident":
        run["transfers"] = "pull"
    else:
        run["transfers"] = "nccl"
    return run


def copy_engine_bytes(n, transfers):
    """The copy engines' reduce-scatter buffers in the allocator: (kept scratch, transient fp32 sums)."""
    if transfers not in ("push", "pull"):
        return 0.0, 0.0
    b = bucket_bytes(n)
    scratch = b * (n - 1) / n if transfers == "pull" else 0.0  # pushed: the window, outside
    return scratch, (2 * b * (n + 1) / n if n > 2 else 0.0)


def window_bytes(run, n):
    """The pushed reduce-scatters' receive window (cudaMalloc, outside the allocator)."""
    largest = max(bucket_bytes(n), run["head"])
    slice_ = -(-largest // n)
    slice_ = -(-slice_ // WINDOW_ALIGNMENT) * WINDOW_ALIGNMENT
    return WINDOW_SLOTS * (n - 1) * slice_


def own_parts(run):
    """A (one micro-batch's activation peak) and S (the step's workspace) from the log's own peak."""
    held_in_forward = run["storage"] == "resident" or run["k"] > 1
    scratch = copy_engine_bytes(run["world"], run["transfers"])[0]
    if held_in_forward:  # every gradient was there in the forward: its peak is the backward's
        # Its figure is the peak less the gradients held at the step (1/N if released), not all.
        released = run["whole_gradients"] - run["gradients"]
        return max(0.0, run["activations"] - released - scratch), None
    return None, run["activations"]  # lazy, one micro-batch: the forward held one bucket, the peak is the step's


def activation_from_peers(run, runs):
    """A measured by another log of the same world size, model and micro-batch size."""
    for other in runs:
        if other is run or other["oom"] or other["world"] != run["world"]:
            continue
        if other["weights"] == run["weights"] and other["examples"] == run["examples"]:
            a, _ = own_parts(other)
            if a is not None:
                return a, other["name"]
    return None, None


def transfers_at(run, n, choice):
    """How n ranks reduce-scatter the gradients: None (one rank), "nccl", "push" or "pull"
    (copy engines). choice: auto, copy_engine, nccl, or a measured run's push / pull."""
    if n == 1:
        return None
    if choice in ("nccl", "push", "pull"):
        return choice
    if choice == "auto" and run["world"] > 1 and not run["copy_engines"]:
        return "nccl"  # the log says NCCL (another host, or distributed.transfers: nccl)
    # One host: the copy engines push lazy gradients and pull resident ones (an old log that
    # pulled keeps its reading).
    return "pull" if run["always_resident"] or run["transfers"] == "pull" else "push"


def phases(run, n, a, s, choice="auto"):
    """[(peak allocated bytes, phase)] of `run` at n ranks: the backward (where A is known), the
    reductions (where gradients are released), the step."""
    transfers = transfers_at(run, n, choice)
    resident = run["always_resident"] or transfers == "pull"
    scratch, transient = copy_engine_bytes(n, transfers)
    g = run["whole_gradients"]
    base = run["weights"] + run["optimizer"] * run["world"] / n + scratch
    in_forward = g if resident or run["k"] > 1 else max(run["head"], 0)
    released = not resident and run["release_setting"] and n > 1
    at_step = g / n if released else g
    # The step's workspace scales with the bucket piece it updates (bucket / ranks).
    s_n = s * (bucket_bytes(n) / n) / (bucket_bytes(run["world"]) / run["world"]) if s is not None else 0.0
    found = []
    if a is not None:
        found.append((base + in_forward + a + transient, "backward"))
    if released and transfers != "push":  # NCCL: each released bucket kept beside its shard to the end
        found.append((base + g + g / n + transient, "reductions"))
    elif released:  # pushed: a bucket goes once its push was queued; the shards and one bucket in flight
        found.append((base + g / n + bucket_bytes(n) + transient, "reductions"))
    found.append((base + at_step + s_n, "step"))
    return found


def project(run, n, a, s, choice="auto"):
    """(peak allocated bytes, phase, whether it is a lower bound) of `run` at n ranks."""
    p, phase = max(phases(run, n, a, s, choice), key=lambda ph: ph[0])  # the first of equals
    return p, phase, a is None or (phase == "step" and s is None)


def outside(run, n, choice="auto"):
    """Device memory outside the caching allocator at n ranks."""
    context = run["outside"] if run["world"] == 1 and not run["oom"] else CONTEXT
    flags = FLAG_SLOTS * 2 * n * 4 if n > 1 else 0
    window = window_bytes(run, n) if transfers_at(run, n, choice) == "push" else 0
    return context + (n - 1) * PEER + flags + window


def measured_peak(run):
    return run["weights"] + run["gradients"] + run["optimizer"] + run["activations"]


def same_training(r, m):
    """Whether m is r's training at another world size (same model, optimizer, micro-batch)."""
    whole = r["weights"] + r["whole_gradients"] + r["optimizer"] * r["world"]
    if m["oom"]:
        return abs(m["needs"] - whole) < 0.01 * whole
    same_state = abs(m["optimizer"] * m["world"] - r["optimizer"] * r["world"]) < 0.001 * whole
    return m["weights"] == r["weights"] and same_state and m["examples"] == r["examples"]


def sources(run, runs):
    """A and S for projecting `run`, and where A came from."""
    a, s = own_parts(run)
    where = "own peak (backward)" if a is not None else "own peak (step)"
    if a is None:
        a, other = activation_from_peers(run, runs)
        where += f"; A from {other}" if other else "; A unknown"
    return a, s, where


def cell(p, phase, lower):
    return f"{'>= ' if lower else ''}{p / GIB:.1f} ({phase})"


def pair_row(r, m, a, s, choice):
    n = m["world"]
    if n > 1 and not m["oom"]:  # the measured run's transfers, as its log names them
        choice = m["transfers"]
    p, phase, lower = project(dict(r, k=m.get("k", r["k"])), n, a, s, choice)
    if m["oom"]:
        need = p + outside(r, n, choice)
        fits = m["device"] is None or need <= m["device"]
        verdict = "fits: WRONG" if fits else "does not fit: right"
        got = f"out of memory (needs {m['needs'] / GIB:.1f} before activations)"
        return f"| {r['name']} | {m['name']} | {n} | {cell(p, phase, lower)} | {got} | {verdict} |"
    real = measured_peak(m)
    err = f"{100 * (p - real) / real:+.1f}%"
    return f"| {r['name']} | {m['name']} | {n} | {cell(p, phase, lower)} | {real / GIB:.1f} | {err} |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="rank 0's fptrain log of each run as LOG:WORLD_SIZE (LOG alone: 1)")
    ap.add_argument("--project", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--transfers", choices=("auto", "copy_engine", "nccl"), default="auto",
                    help="how N > 1 ranks move gradients (auto: copy engines, one host, unless the log says NCCL)")
    a = ap.parse_args()
    runs = []
    for spec in a.logs:
        path, _, world = spec.rpartition(":") if spec.rpartition(":")[2].isdigit() else (spec, "", "1")
        runs.append(read(path, int(world)))
    ok = [r for r in runs if not r["oom"]]
    print("Peak allocated per rank (GiB), projected; the phase the peak falls in in brackets:\n")
    print("| run | ranks | weights | gradients | optimizer | activations | outside allocator | A, S from | "
          + " | ".join(f"projected to {n}" for n in a.project) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |" + " ---: |" * len(a.project))
    for r in ok:
        act, s, where = sources(r, runs)
        cells = [f"{r[k] / GIB:.2f}" for k in ("weights", "gradients", "optimizer", "activations", "outside")]
        proj = [cell(*project(r, n, act, s, a.transfers)) for n in a.project]
        print(f"| {r['name']} | {r['world']} | " + " | ".join(cells) + f" | {where} | " + " | ".join(proj) + " |")
    print("\nProjected against measured (the measured run's micro-batches per step):\n")
    print("| from | measured run | ranks | projected | measured | error |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in ok:
        act, s, _ = sources(r, runs)
        for m in runs:
            if m["world"] != r["world"] and same_training(r, m):
                print(pair_row(r, m, act, s, a.transfers))
    print("\nOutside the allocator (GiB), projected:\n")
    print("| run | ranks | measured | " + " | ".join(f"at {n}" for n in a.project) + " |")
    print("| --- | ---: | ---: |" + " ---: |" * len(a.project))
    for r in ok:
        print(f"| {r['name']} | {r['world']} | {r['outside'] / GIB:.2f} | "
              + " | ".join(f"{outside(r, n, a.transfers) / GIB:.2f}" for n in a.project) + " |")


if __name__ == "__main__":
    main()
