"""What is alive at the peak of a training step's GPU memory, by phase: the transformers
peer's side of fptrain's memory trace (trainer/memory_trace.h), and both side by side.

The analysis is trainer/memory_trace_analysis.cpp's, over the same plain events: ("alloc",
addr, bytes, tag), ("free", addr), ("name", addr, name) (the block alive at addr now is
that buffer), ("oom", bytes, tag). The peak is the first allocation reaching the largest
total of live bytes; the blocks alive then are grouped by name, else by their phase tag
with layer numbers folded ("forward L* attention"). Sizes are the allocator history's
requested bytes on both sides (its peak is torch's requested_bytes.all.peak).

The peer (PeerMemoryTrace, used by benchmarks/distributed/hf_ddp.py --memory-trace-dir)
records torch.cuda.memory._record_memory_history for one step, every allocation tagged
through torch.cuda.memory._set_memory_metadata with a label that module hooks keep: the
decoder layer and its part (attention, mlp, norm, embedding) in the forward, "recompute L3"
when checkpointing runs a layer again, and in the backward tensor hooks on each layer's
and MLP's output, whose gradients start their backward ("backward L3 mlp"). Before the
optimizer step the parameters, gradients and optimizer state are named.

    memory_trace_report.py FPTRAIN_JSON PEER_JSON [--out FILE.md]   # side by side
"""
import argparse
import json
import re
import sys
import threading

MIB = 1 << 20
GIB = 1 << 30
SMALL_BLOCK_BYTES = 16 * MIB  # trainer/memory_trace_analysis.h kSmallBlockBytes
BEFORE = "before the step"


def fold_layers(tag):
    return re.sub(r"(^| )L\d+", r"\1L*", tag)


def size_class(n):
    if n < MIB:
        return "< 1 MiB"
    if n < 16 * MIB:
        return "1-16 MiB"
    if n < 128 * MIB:
        return "16-128 MiB"
    if n < GIB:
        return "128 MiB-1 GiB"
    return ">= 1 GiB"


def _replay(events, end, on_event=None):
    live, total, unmatched = {}, 0, 0
    for i in range(end):
        e = events[i]
        if on_event:
            on_event(i, e, live)
        if e[0] == "alloc":
            live[e[1]] = {"addr": e[1], "size": e[2], "tag": e[3], "name": "", "event": i}
            total += e[2]
        elif e[0] == "free":
            b = live.pop(e[1], None)
            if b is None:
                unmatched += 1
            else:
                total -= b["size"]
    return live, total, unmatched


def _group(b):
    return b["name"] or fold_layers(b["tag"])


def group_blocks(blocks, key):
    groups = {}
    for b in blocks:
        k = key(b)
        g = groups.setdefault(k, {"group": k, "bytes": 0, "count": 0})
        g["bytes"] += b["size"]
        g["count"] += 1
    return sorted(groups.values(), key=lambda g: (-g["bytes"], g["group"]))


def analyse(events, top=20):
    """The events' peak (or first out-of-memory) and what is alive then, as the JSON fptrain writes."""
    moment, oom, peak, total = -1, False, -1, 0
    live = {}
    for i, e in enumerate(events):
        if e[0] == "oom":
            moment, oom = i, True
            break
        if e[0] == "alloc":
            live[e[1]] = e[2]
            total += e[2]
            if total > peak:
                peak, moment = total, i
        elif e[0] == "free" and e[1] in live:
            total -= live.pop(e[1])
    names = {}

    def collect_names(i, e, alive):
        if e[0] == "name" and e[1] in alive:
            names[alive[e[1]]["event"]] = e[2]

    _replay(events, len(events), collect_names)
    alive, total, unmatched = _replay(events, moment if oom else moment + 1) if moment >= 0 else ({}, 0, 0)
    blocks = sorted(alive.values(), key=lambda b: (-b["size"], b["event"]))
    for b in blocks:
        b["name"] = names.get(b["event"], "")
    at = events[moment] if moment >= 0 else ("alloc", 0, 0, "")
    allocs = [{"size": e[2], "tag": e[3], "name": ""} for e in events if e[0] == "alloc"]
    out = {"at": "out of memory" if oom else "peak", "bytes": total, "event": moment,
           "event_tag": at[3] if at[0] != "oom" else at[2],
           ("failed_request_bytes" if oom else "event_bytes"): at[1] if at[0] == "oom" else at[2],
           "live_blocks": len(blocks), "unmatched_frees": unmatched,
           "by_group": group_blocks(blocks, _group), "by_tag": group_blocks(blocks, lambda b: b["tag"]),
           "by_size_class": group_blocks(blocks, lambda b: size_class(b["size"])),
           "allocated_in_step": group_blocks(allocs, _group),
           "top": [{"bytes": b["size"], "group": _group(b), "tag": b["tag"]} for b in blocks[:top]],
           # every block under 16 MiB, as fptrain's JSON has them (sizes name small buffers)
           "small_blocks": [{"bytes": b["size"], "group": _group(b), "tag": b["tag"]}
                            for b in blocks if b["size"] < SMALL_BLOCK_BYTES]}
    return out


def table(report, title, top=20):
    """The short markdown fptrain's memory_trace.md has."""
    g = lambda n: f"{n / GIB:.3f}"  # noqa: E731
    oom = report["at"] == "out of memory"
    lines = [f"## {title}", ""]
    lines.append((f"Alive when an allocation of {g(report['failed_request_bytes'])} GiB failed ({report['event_tag']}): "
                  if oom else f"Alive at the peak, reached by an allocation of {g(report['event_bytes'])} GiB in "
                  f"{report['event_tag']}: ") + f"{g(report['bytes'])} GiB in {report['live_blocks']} blocks.")
    for head, key in (("group", "by_group"), ("size class", "by_size_class")):
        lines += ["", f"| {head} | GiB | blocks |", "| --- | ---: | ---: |"]
        lines += [f"| {r['group']} | {g(r['bytes'])} | {r['count']} |" for r in report[key]]
    lines += ["", "| largest blocks | GiB | allocated in |", "| --- | ---: | --- |"]
    lines += [f"| {b['group']} | {g(b['bytes'])} | {b['tag']} |" for b in report["top"][:top]]
    return "\n".join(lines) + "\n"


def side_by_side(ours, peer):
    """Markdown: each group's bytes alive at each side's peak, and the difference."""
    g = lambda n: f"{n / GIB:.3f}"  # noqa: E731
    a = {r["group"]: r["bytes"] for r in ours["by_group"]}
    b = {r["group"]: r["bytes"] for r in peer["by_group"]}
    groups = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0), b.get(k, 0)))
    lines = ["| group | fptrain GiB | peer GiB | fptrain - peer GiB |", "| --- | ---: | ---: | ---: |"]
    for k in groups:
        lines.append(f"| {k} | {g(a.get(k, 0))} | {g(b.get(k, 0))} | {g(a.get(k, 0) - b.get(k, 0))} |")
    lines.append(f"| **alive at the {ours['at']} / {peer['at']}** | {g(ours['bytes'])} | {g(peer['bytes'])} | "
                 f"{g(ours['bytes'] - peer['bytes'])} |")
    for side in (ours, peer):
        alloc = side.get("allocator", {})
        lines.append("")
        lines.append(f"{side.get('side', '?')}, step {side.get('step', '?')}: peak made by {side['event_tag']} "
                     f"({g(side.get('event_bytes', side.get('failed_request_bytes', 0)))} GiB); allocator's "
                     f"allocated-bytes peak {g(alloc.get('allocated_peak_bytes', 0))} GiB, requested-bytes peak "
                     f"{g(alloc.get('requested_peak_bytes', 0))} GiB.")
    return "\n".join(lines) + "\n"


class _Labels:
    """The peer's phase label: a stage and an op, a stack for module scopes, set as the
    allocator's metadata on every change (so each allocation carries the one current)."""

    def __init__(self, torch):
        self.torch, self.stage, self.op, self.stack = torch, "", "", []
        self.lock = threading.Lock()

    def _apply(self):
        tag = f"{self.stage} {self.op}".strip() or "other"
        self.torch.cuda.memory._set_memory_metadata(tag)

    def set(self, stage=None, op=None):
        with self.lock:
            if stage is not None:
                self.stage, self.op = stage, ""
            if op is not None:
                self.op = op
            self._apply()

    def push(self, stage=None, op=None):
        with self.lock:
            self.stack.append((self.stage, self.op))
        self.set(stage, op)

    def pop(self):
        with self.lock:
            if self.stack:
                self.stage, self.op = self.stack.pop()
            self._apply()

    def in_backward(self):
        return self.stage.startswith("backward")


def _first_tensor(x):
    import torch
    if torch.is_tensor(x):
        return x
    if isinstance(x, (tuple, list)) and x and torch.is_tensor(x[0]):
        return x[0]
    return getattr(x, "last_hidden_state", None)


def _on_grad(t, action):
    if t is not None and t.requires_grad:
        t.register_hook(lambda g: action())


class PeerMemoryTrace:
    """One step of the peer under the allocator's history, its phases labelled by hooks."""

    OPS = (("self_attn", "attention"), ("mlp", "mlp"), ("embed_tokens", "embedding"), ("layernorm", "norm"),
           ("norm", "norm"))

    def __init__(self, model, out_dir, step):
        import torch
        self.torch, self.out_dir, self.step, self.labels = torch, out_dir, step, _Labels(torch)
        self.recording, self.start, self.names = False, [], {}
        self.layers = {}
        for name, m in model.named_modules():
            hit = re.search(r"(?:^|\.)layers\.(\d+)$", name)
            if hit:
                self.layers[m] = int(hit.group(1))
        self.last = max(self.layers.values()) if self.layers else -1
        for name, m in model.named_modules():
            if m in self.layers:
                if getattr(m, "_gradient_checkpointing_func", None) is not None:
                    m._gradient_checkpointing_func = self._labelled_checkpoint(m._gradient_checkpointing_func,
                                                                               self.layers[m])
                m.register_forward_pre_hook(self._layer_pre, with_kwargs=True)
                m.register_forward_hook(self._layer_post)
                continue
            leaf = name.rsplit(".", 1)[-1]
            op = next((o for key, o in self.OPS if leaf == key or leaf.endswith(key)), None)
            if op and not any(p in name for p in ("self_attn.", "mlp.")):  # the outermost of a kind
                m.register_forward_pre_hook(lambda mod, args, op=op: self._op_pre(op, mod, args))
                m.register_forward_hook(lambda mod, args, out, op=op: self._op_post(op, out))

    # hooks
    # A layer's hooks run in its forward only (see _op_pre).
    def _layer_pre(self, module, args, kwargs):
        if not self.recording:
            return
        i = self.layers[module]
        hidden = args[0] if args else kwargs.get("hidden_states")
        if i == 0:
            _on_grad(hidden, lambda: self.labels.set(stage="backward embedding"))
        self.labels.push(stage=f"forward L{i}")

    def _layer_post(self, module, args, out):
        if not self.recording:
            return
        i = self.layers[module]
        self.labels.pop()
        if i == self.last:
            self.labels.set(stage="forward head/loss")
        _on_grad(_first_tensor(out), lambda: self.labels.set(stage=f"backward L{i}"))

    def _op_pre(self, op, module, args):
        if not self.recording:
            return
        if self.labels.in_backward():  # recomputed outside a labelled checkpoint: nothing marks its end
            self.labels.set(stage=self.labels.stage.replace("backward", "recompute", 1), op=op)
            return
        forward = self.labels.stage.startswith("forward")
        if op == "mlp" and args and forward:  # the MLP's input gradient: the attention's backward next
            stage = self.labels.stage.replace("forward", "backward", 1)
            _on_grad(_first_tensor(args[0]), lambda: self.labels.set(stage=stage, op="attention"))
        self.labels.push(op=op)

    def _op_post(self, op, out):
        if not self.recording or self.labels.in_backward():
            return
        self.labels.pop()
        if op == "mlp" and self.labels.stage.startswith("forward"):
            stage = self.labels.stage.replace("forward", "backward", 1)
            _on_grad(_first_tensor(out), lambda: self.labels.set(stage=stage, op="mlp"))

    def _labelled_checkpoint(self, checkpoint, layer):
        """transformers' checkpoint function of a layer, its recomputation labelled "recompute L<i>"
        (to its end: torch stops a recomputation early by raising through it)."""
        labels = self.labels

        def run(function, *args, **kwargs):
            def labelled(*a, **k):
                if not (self.recording and labels.in_backward()):
                    return function(*a, **k)
                depth = len(labels.stack)
                labels.push(stage=f"recompute L{layer}")
                try:
                    return function(*a, **k)
                finally:
                    del labels.stack[depth + 1:]
                    labels.pop()
            return checkpoint(labelled, *args, **kwargs)
        return run

    # the step
    def begin(self, step):
        if step != self.step or not self.torch.cuda.is_available():
            return
        torch = self.torch
        dev = torch.cuda.current_device()
        self.start = []
        for seg in torch.cuda.memory._snapshot()["segments"]:
            if seg.get("device", dev) != dev:
                continue
            addr = seg["address"]
            for b in seg["blocks"]:
                if b["state"] == "active_allocated":
                    self.start.append(("alloc", addr, b["requested_size"], BEFORE))
                addr += b["size"]
        self.run_peak_before = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history("all", context=None, max_entries=20_000_000, clear_history=True)
        self.recording = True
        self.labels.set(stage="step")

    def forward(self):
        if self.recording:
            self.labels.set(stage="forward")

    def label_loss(self, loss):
        if self.recording:
            _on_grad(loss, lambda: self.labels.set(stage="backward head/loss"))

    def name_buffers(self, buffers):
        """(name, tensor) pairs: the blocks holding their storage now get the name."""
        if not self.recording:
            return
        key = f"@names:{len(self.names)}"
        self.names[key] = [(t.untyped_storage().data_ptr(), n) for n, t in buffers
                           if self.torch.is_tensor(t) and t.is_cuda]
        self.labels.push(op=key)
        self.torch.empty(1, dtype=self.torch.uint8, device="cuda")  # the marker: the names' place in the history
        self.labels.pop()

    def optimizer(self):
        if self.recording:
            self.labels.set(stage="optimizer")

    def end(self, oom=False):
        if not self.recording:
            return None
        torch = self.torch
        self.recording = False
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(None)
        torch.cuda.memory._set_memory_metadata("")
        dev = torch.cuda.current_device()
        events = list(self.start)
        for e in snap["device_traces"][dev]:
            tag = e.get("user_metadata") or "untagged"
            marker = next((k for k in self.names if tag.endswith(k)), None)
            if e["action"] == "alloc":
                events.append(("alloc", e["addr"], e["size"], "trace marker" if marker else tag))
                for addr, name in self.names.get(marker, []):
                    events.append(("name", addr, name))
            elif e["action"] == "free_requested":
                events.append(("free", e["addr"]))
            elif e["action"] == "oom":
                events.append(("oom", e["size"], tag))
        stats = torch.cuda.memory_stats()
        report = {"side": "transformers", "step": self.step, "sizes": "requested",
                  "history_entries": len(snap["device_traces"][dev]),
                  "allocator": {"requested_peak_bytes": stats.get("requested_bytes.all.peak", 0),
                                "allocated_peak_bytes": stats.get("allocated_bytes.all.peak", 0),
                                "run_allocated_peak_before_bytes": self.run_peak_before}}
        report.update(analyse(events))
        stem = "memory_trace_oom" if oom else "memory_trace"
        import os
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, stem + ".json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(self.out_dir, stem + ".md"), "w") as f:
            f.write(table(report, f"transformers, step {self.step}"))
        return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fptrain", help="fptrain's memory_trace.json")
    ap.add_argument("peer", help="the peer's memory_trace.json (hf_ddp.py --memory-trace-dir)")
    ap.add_argument("--out", help="write the markdown here too")
    a = ap.parse_args()
    with open(a.fptrain) as f:
        ours = json.load(f)
    with open(a.peer) as f:
        peer = json.load(f)
    md = side_by_side(ours, peer)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
