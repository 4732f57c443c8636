#!/usr/bin/env python3
"""Where the time of a training step goes, from fptrain's step profile.

`logging.profile_steps: N` makes the trainer record N steps with LibTorch's
Kineto profiler and save, in the run's output folder, the raw trace
(profile_trace.json, Chrome trace format: open it in Perfetto or
chrome://tracing) and the window (profile_window.json: device, steps, note).
This script turns them into profile.json and profile.md:

  python3 benchmarks/train/profile_report.py RUN_DIR

On a GPU every kernel, memcpy and memset of the window is put in a category
(`classify`: its name first, then the ops that launched it), and per step the
report gives the GPU time of each category, kernel counts, the wall time, the
GPU's idle time (wall minus the union of GPU activity: host gaps and
synchronizations), the host time spent waiting in cuda*Synchronize and
cudaMemcpy*, the 15 costliest kernels and the ops behind other_elementwise.
On the CPU (or where the trace holds no GPU activity) the same report is made
of the CPU ops' self time on the training thread.
"""
import argparse
import bisect
import json
import os
import re
import sys

CATEGORIES = ["gemm", "attention", "norm", "rope", "activation", "loss", "other_elementwise",
              "optimizer", "clipping", "nccl", "memcpy", "memset", "other"]
STEP_MARKER = "ProfilerStep#"  # the trainer's (and torch.profiler's) name for a step's range
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}


# ---- classification -----------------------------------------------------------

def op_base(op):
    """What an op is about, in lower snake case without namespace, autograd
    decoration or in-place suffix: "aten::_log_softmax_backward_data" and
    "autograd::engine::evaluate_function: LogSoftmaxBackward0" are "log_softmax",
    "torch::autograd::CppNode<ns::HopperAttention>" is "hopper_attention"."""
    s = op
    p = s.rfind(": ")
    if p >= 0:
        s = s[p + 2:]
    s = re.sub(r"[^0-9A-Za-z_]+$", "", s)
    p = s.rfind("::")
    if p >= 0:
        s = s[p + 2:]
    p = s.rfind("<")
    if p >= 0:
        s = s[p + 1:]
    out = ""
    for i, c in enumerate(s):
        if c.isupper() and i > 0 and (s[i - 1].islower() or s[i - 1].isdigit()):
            out += "_"
        out += c.lower()
    out = out.lstrip("_")
    for cut in ("backward", "_forward"):
        p = out.find(cut)
        if p > 0:
            out = out[:p]
    return out.rstrip("_0123456789")


def has_words(base, words):
    return f"_{words}_" in f"_{base}_"


def by_kernel_name(n):
    if "nccl" in n:
        return "nccl"
    if n.startswith("memcpy"):
        return "memcpy"
    if n.startswith("memset"):
        return "memset"
    if "fptrain::models" in n:  # our fused kernels say what they are (models/cuda/)
        for part, category in (("rms_norm", "norm"), ("rotary", "rope"), ("swiglu", "activation"),
                               ("gelu", "activation"), ("cross_entropy", "loss")):
            if part in n:
                return category
    if "fptrain::optim" in n or "fptrain::trainer" in n:
        if "grad_norm" in n or "norm_kernel" in n:
            return "clipping"
        if "adamw" in n or "accumulate" in n or "step_kernel" in n:
            return "optimizer"
    if any(a in n for a in ("fptrain::attention", "flash_fwd", "flash_bwd", "flash_attn", "fmha", "sdpa",
                            "attention")):
        return "attention"
    if "adam" in n:
        return "optimizer"
    if "lpnorm" in n or "l2norm" in n:
        return "clipping"  # torch's clip_grad_norm_ (foreach norm)
    if any(g in n for g in ("gemm", "cutlass", "nvjet", "xmma", "cublas", "gemv", "splitkreduce", "s16816",
                            "s1688", "hmma")):
        return "gemm"
    return None


def by_op(b):
    if not b:
        return None
    if "loss" in b or "cross_entropy" in b or "log_softmax" in b:
        return "loss"
    if has_words(b, "clip") or "grad_norm" in b:
        return "clipping"
    if has_words(b, "optimizer") or "adam" in b:
        return "optimizer"
    if "nccl" in b or "c10d" in b or any(has_words(b, w) for w in
                                         ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter")):
        return "nccl"
    if any(has_words(b, w) for w in ("attention", "attn", "sdpa", "softmax")):
        return "attention"
    if any(w in b for w in ("rms_norm", "rmsnorm", "layer_norm", "group_norm", "batch_norm")) or \
            b in ("rsqrt", "pow", "mean", "var", "var_mean"):
        return "norm"
    if has_words(b, "rope") or has_words(b, "rotary") or b in ("neg", "cos", "sin"):
        return "rope"
    if any(has_words(b, w) for w in ("silu", "gelu", "swiglu")) or \
            b in ("relu", "sigmoid", "tanh", "glu", "softplus", "mish"):
        return "activation"
    return None


GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "addmv", "mv", "dot", "scaled_mm",
            "addmm_activation"}


def classify(name, op_chain):
    """The category of one GPU activity or CPU op. `op_chain`: the ops around it,
    innermost first (for a kernel, the op that launched it first; for work of the
    backward pass the forward op that made its autograd node may follow).
      1. by the name: nccl*, Memcpy, Memset, our optimizer kernels, attention
         kernels (ours, flash, fmha, cudnn sdpa), cuBLAS / cutlass / nvjet GEMMs;
      2. by the ops, innermost first, the first that names a category; a GEMM op
         names gemm only as the launching op itself;
      3. else other_elementwise for ATen's work, other for the rest.
    Generic ops (mul, add, cat, copies) name nothing: the products and sums of
    RMSNorm, RoPE and SwiGLU are other_elementwise unless an enclosing scope
    (RECORD_FUNCTION "fptrain::rms_norm", ...) names their block."""
    n = name.lower()
    c = by_kernel_name(n)
    if c:
        return c
    for i, op in enumerate(op_chain):
        b = op_base(op)
        c = by_op(b)
        if c:
            return c
        if i == 0 and b in GEMM_OPS:
            return "gemm"
    if op_chain or "at::native" in n or "elementwise" in n or n.startswith("aten::"):
        return "other_elementwise"
    return "other"


def union_length(intervals, lo, hi):
    total, covered_to = 0, lo
    for start, end in sorted(intervals):
        start, end = max(start, covered_to), min(end, hi)
        if end > start:
            total += end - start
            covered_to = end
    return total


# ---- the trace ------------------------------------------------------------------

class Op:
    __slots__ = ("name", "start", "end", "thread", "external", "seq", "backward", "parent", "self")

    def __init__(self, e):
        a = e.get("args", {})
        self.name = e["name"]
        self.start = ns(e["ts"])
        self.end = self.start + ns(e.get("dur", 0))
        self.thread = e.get("tid")
        self.external = a.get("External id")
        self.seq = a.get("Sequence number", -1)
        # The autograd node's own range (SumBackward0) runs in the backward pass: a
        # forward thread id is recorded for it; the engine's wrapper is autograd::.
        self.backward = a.get("Fwd thread id", 0) > 0 and not self.name.startswith("autograd::")
        self.parent = -1
        self.self = 0


def ns(us):
    return int(round(float(us) * 1000.0))


def read_trace(path, last_step):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ops, device, runtime, steps = [], [], [], []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in DEVICE_CATS:
            start = ns(e["ts"])
            device.append((e["name"], start, start + ns(e.get("dur", 0)), e.get("args", {}).get("External id")))
        elif cat in RUNTIME_CATS:
            start = ns(e["ts"])
            runtime.append((e["name"], start, start + ns(e.get("dur", 0))))
        elif cat in ("cpu_op", "user_annotation"):
            if e["name"].startswith(STEP_MARKER):
                step = int(e["name"][len(STEP_MARKER):])
                if step <= last_step:
                    start = ns(e["ts"])
                    steps.append((start, start + ns(e.get("dur", 0)), step, e.get("tid")))
                continue
            ops.append(Op(e))
    steps.sort()
    return ops, device, runtime, steps


def link_parents(ops):
    """Parents by nesting in time on each thread, and every op's self time."""
    order = sorted(range(len(ops)), key=lambda i: (str(ops[i].thread), ops[i].start, -ops[i].end))
    stack = []
    for i in order:
        op = ops[i]
        while stack and (ops[stack[-1]].thread != op.thread or ops[stack[-1]].end <= op.start):
            stack.pop()
        if stack:
            op.parent = stack[-1]
        op.self = op.end - op.start
        stack.append(i)
    for op in ops:
        if op.parent >= 0:
            ops[op.parent].self -= op.end - op.start
    for op in ops:
        op.self = max(op.self, 0)


class Chains:
    """The ops around op i, innermost first; for work of the backward pass, then
    the forward op that made its autograd node and the ops around that one."""

    def __init__(self, ops):
        self.ops = ops
        self.forward = {}
        for i, op in enumerate(ops):
            if op.seq < 0 or op.backward or op.name.startswith("autograd::"):
                continue
            # The earliest op that saw the node's number: the outermost.
            j = self.forward.get(op.seq)
            if j is None or ops[j].start > op.start:
                self.forward[op.seq] = i

    def of(self, i):
        chain, backward = [], -1
        j = i
        while j >= 0:
            chain.append(self.ops[j].name)
            if backward < 0 and self.ops[j].backward and self.ops[j].seq >= 0:
                backward = j
            j = self.ops[j].parent
        if backward >= 0:
            j = self.forward.get(self.ops[backward].seq, -1)
            while j >= 0:
                chain.append(self.ops[j].name)
                j = self.ops[j].parent
        return chain


def op_label(ops, i):
    """"aten::mul < MulBackward0": an op, and the autograd node it runs in, if any."""
    if i < 0:
        return "(no op)"
    j = ops[i].parent
    while j >= 0:
        if ops[j].backward:
            return ops[i].name + " < " + ops[j].name
        j = ops[j].parent
    return ops[i].name


def step_at(step_starts, t):
    """The step of the window a time belongs to (the last that began before it)."""
    return max(0, bisect.bisect_right(step_starts, t) - 1)


def work_items(ops, device, steps, gpu):
    """(name, category, start, end, duration, step index, op label) of every GPU
    activity of the window, or of every CPU op's self time on the training thread."""
    chains = Chains(ops)
    starts = [s[0] for s in steps]
    lo, last_end = steps[0][0], steps[-1][1]
    items, hi = [], last_end
    if gpu:
        by_external = {}
        for i, op in enumerate(ops):
            if op.external is not None:
                by_external.setdefault(op.external, i)
        for name, start, end, link in device:
            if end < lo:
                continue
            i = by_external.get(link, -1) if link is not None else -1
            if i >= 0 and ops[i].start >= last_end:
                continue  # launched by a step left unfinished
            chain = chains.of(i) if i >= 0 else []
            items.append((name, classify(name, chain), start, end, end - start,
                          step_at(starts, ops[i].start if i >= 0 else start), op_label(ops, i)))
            hi = max(hi, end)  # the window's last step ends when the GPU has finished it
    else:
        thread = steps[0][3]
        for i, op in enumerate(ops):
            if op.thread != thread or op.start < lo or op.start >= hi:
                continue
            items.append((op.name, classify(op.name, chains.of(i)), op.start, op.end, op.self,
                          step_at(starts, op.start), op_label(ops, i)))
    return items, lo, hi


def r3(v):
    return round(v, 3)


def costliest(table, count, per, pct):
    top = sorted(table.items(), key=lambda kv: -kv[1][1])[:count]
    return [{"name": name, "category": cat, "ms": r3(t / 1e6 / per), "percent": pct(t), "count": r3(n / per),
             "mean_us": r3(t / 1e3 / n)} for name, (cat, t, n) in top]


def analyze(window, ops, device, runtime, steps):
    note = window.get("note", "")
    gpu = window.get("mode") == "gpu"
    if gpu and not device:
        gpu = False
        note += ("; " if note else "") + ("no GPU activity was recorded (this LibTorch has no Kineto/CUPTI, or "
                                          "libcupti could not be loaded): the figures are the CPU ops' self time")
    link_parents(ops)
    items, lo, hi = work_items(ops, device, steps, gpu)
    n = len(steps)
    wall = float(hi - lo)
    busy = float(union_length([(it[2], it[3]) for it in items], lo, hi))
    cat_ns = {c: 0.0 for c in CATEGORIES}
    cat_count = {c: 0 for c in CATEGORIES}
    kernels, elementwise, unclassified = {}, {}, {}
    step_ns, step_count = [0.0] * n, [0] * n
    for name, cat, _, _, dur, step, label in items:
        cat_ns[cat] += dur
        cat_count[cat] += 1
        k = kernels.setdefault(name, [cat, 0.0, 0])
        k[1] += dur
        k[2] += 1
        for table, key in ((elementwise, label), (unclassified, name)):
            if cat == ("other_elementwise" if table is elementwise else "other"):
                e = table.setdefault(key, [cat, 0.0, 0])
                e[1] += dur
                e[2] += 1
        step_ns[step] += dur
        step_count[step] += 1
    sync_ns = api_ns = 0.0
    syncs = 0
    for name, start, end in runtime:
        if start < lo or start >= hi:
            continue
        api_ns += end - start
        # A copy to pageable host memory (reading a loss) waits for the GPU inside cudaMemcpy*.
        if "Synchronize" in name or name.startswith("cudaMemcpy"):
            sync_ns += end - start
            syncs += 1
    per = float(n)

    def pct(v):
        return r3(100.0 * v / wall) if wall > 0 else 0.0

    j = {"device": window.get("device", ""), "date": window.get("date", ""), "torch": window.get("torch", ""),
         "mode": "gpu" if gpu else "cpu",
         "activity": "GPU kernels, memcpy and memset (CUPTI through Kineto)" if gpu
         else "CPU ops, self time on the training thread (Kineto)"}
    if note:
        j["note"] = note
    j.update({"warmup_steps": window.get("warmup_steps", 0), "profiled_steps": n,
              "first_step": steps[0][2], "last_step": steps[-1][2],
              "per_step": {"wall_ms": r3(wall / 1e6 / per), "busy_ms": r3(busy / 1e6 / per),
                           "idle_ms": r3((wall - busy) / 1e6 / per), "busy_percent": pct(busy),
                           "idle_percent": pct(wall - busy), "kernels": r3(len(items) / per),
                           "host_sync_ms": r3(sync_ns / 1e6 / per), "host_syncs": r3(syncs / per),
                           "cuda_api_ms": r3(api_ns / 1e6 / per)},
              "categories": {c: {"ms": r3(cat_ns[c] / 1e6 / per), "percent": pct(cat_ns[c]),
                                 "count": r3(cat_count[c] / per)} for c in CATEGORIES},
              "top_kernels": costliest(kernels, 15, per, pct),
              # What other_elementwise is made of: the ops that launched it (and their autograd nodes).
              "other_elementwise_by_op": costliest(elementwise, 10, per, pct),
              # What no rule named (a new kernel, or one no op launched): the rules' blind spots.
              "other_by_kernel": costliest(unclassified, 10, per, pct),
              "steps": [{"step": s[2], "wall_ms": r3((s[1] - s[0]) / 1e6), "kernels": step_count[i],
                         ("gpu_ms" if gpu else "op_ms"): r3(step_ns[i] / 1e6)} for i, s in enumerate(steps)]})
    return j


def short_name(name):
    """Kernel names run to hundreds of characters of template arguments."""
    s = name if len(name) <= 110 else name[:107] + "..."
    return "`" + s.replace("|", "\\|") + "`"


def markdown(j):
    gpu = j["mode"] == "gpu"
    what, unit = ("GPU", "kernels") if gpu else ("CPU ops", "ops")
    p = j["per_step"]
    md = [f"# Step profile\n\nDevice {j['device']}, {j['date']}, LibTorch {j['torch']}. Steps {j['first_step']}-"
          f"{j['last_step']} ({j['profiled_steps']} after {j['warmup_steps']} warm-up steps); {j['activity']}. "
          "Figures are per step (the window's totals / its steps).\n"]
    if "note" in j:
        md.append(f"**Note:** {j['note']}\n")
    rows = ["| per step | ms | % of wall |", "| --- | ---: | ---: |", f"| wall time | {p['wall_ms']:.1f} | 100.0 |",
            f"| {what} busy (union of its activity) | {p['busy_ms']:.1f} | {p['busy_percent']:.1f} |",
            f"| {what} idle (host gaps and synchronizations) | {p['idle_ms']:.1f} | {p['idle_percent']:.1f} |"]
    if gpu:
        rows += [f"| host time waiting in cuda*Synchronize and cudaMemcpy* ({p['host_syncs']:.1f} calls) | "
                 f"{p['host_sync_ms']:.2f} | |",
                 "| host time in CUDA runtime calls (kernel launches; the profiler's tracing inflates them) | "
                 f"{p['cuda_api_ms']:.2f} | |"]
    rows.append(f"| {unit} | {p['kernels']:.1f} | |")
    md.append("\n".join(rows) + "\n")
    rows = [f"| category | ms / step | % of wall | {unit} / step |", "| --- | ---: | ---: | ---: |"]
    rows += [f"| {name} | {c['ms']:.2f} | {c['percent']:.1f} | {c['count']:.1f} |" for name, c in j["categories"].items()]
    md.append("\n".join(rows) + "\n\nCategories can overlap in time (NCCL beside compute), so their sum may exceed "
              "the busy time.\n")
    rows = [f"## Top {len(j['top_kernels'])} {unit} by total time\n",
            f"| {'kernel' if gpu else 'op'} | category | ms / step | % of wall | calls / step | mean µs |",
            "| --- | --- | ---: | ---: | ---: | ---: |"]
    rows += [f"| {short_name(k['name'])} | {k['category']} | {k['ms']:.2f} | {k['percent']:.1f} | {k['count']:.1f} | "
             f"{k['mean_us']:.1f} |" for k in j["top_kernels"]]
    md.append("\n".join(rows) + "\n")
    if gpu and j["other_elementwise_by_op"]:
        rows = ["## other_elementwise by the op that launched it\n",
                "| op (< autograd node) | ms / step | % of wall | kernels / step |", "| --- | ---: | ---: | ---: |"]
        rows += [f"| {short_name(k['name'])} | {k['ms']:.2f} | {k['percent']:.1f} | {k['count']:.1f} |"
                 for k in j["other_elementwise_by_op"]]
        md.append("\n".join(rows) + "\n")
    if j["other_by_kernel"]:
        rows = ["## other: what no rule named\n", f"| {'kernel' if gpu else 'op'} | ms / step | % of wall | calls / step |",
                "| --- | ---: | ---: | ---: |"]
        rows += [f"| {short_name(k['name'])} | {k['ms']:.2f} | {k['percent']:.1f} | {k['count']:.1f} |"
                 for k in j["other_by_kernel"]]
        md.append("\n".join(rows) + "\n")
    rows = ["## Steps\n"]
    if gpu:
        rows.append("The host runs ahead of the GPU: a step's host time and the GPU time of the kernels it launched "
                    "differ step by step; the window's totals above are what add up.\n")
    key = "gpu_ms" if gpu else "op_ms"
    rows += [f"| step | wall ms (host) | {unit} | {'GPU' if gpu else 'op'} ms |", "| ---: | ---: | ---: | ---: |"]
    rows += [f"| {s['step']} | {s['wall_ms']:.1f} | {s['kernels']} | {s[key]:.1f} |" for s in j["steps"]]
    md.append("\n".join(rows) + "\n")
    return "\n".join(md)


def summary_line(j, md_path):
    p = j["per_step"]
    cats = sorted(((c["percent"], name) for name, c in j["categories"].items()), reverse=True)
    top = ", ".join(f"{name} {v:.1f}%" for v, name in cats[:5] if v > 0)
    unit = "kernels" if j["mode"] == "gpu" else "ops"
    return (f"step profile, steps {j['first_step']}-{j['last_step']} ({'GPU' if j['mode'] == 'gpu' else 'CPU ops'}): "
            f"{p['wall_ms']:.1f} ms/step, busy {p['busy_percent']:.1f}%, idle {p['idle_ms']:.1f} ms "
            f"({p['idle_percent']:.1f}%: host gaps and syncs), {p['kernels']:.0f} {unit}/step | {top} | {md_path}")


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="the run's output folder (profile_window.json, profile_trace.json)")
    ap.add_argument("--out", help="folder for profile.json and profile.md (default: run_dir)")
    args = ap.parse_args()
    out = args.out or args.run_dir
    with open(os.path.join(args.run_dir, "profile_window.json")) as f:
        window = json.load(f)
    ops, device, runtime, steps = read_trace(os.path.join(args.run_dir, window["trace"]), window["last_step"])
    if not steps:
        sys.exit("profile_report: no step completed inside the profiled window; nothing to report")
    j = analyze(window, ops, device, runtime, steps)
    os.makedirs(out, exist_ok=True)
    write_atomically(os.path.join(out, "profile.json"), json.dumps(j, indent=2) + "\n")
    md_path = os.path.join(out, "profile.md")
    write_atomically(md_path, markdown(j))
    print(summary_line(j, md_path))


if __name__ == "__main__":
    main()
