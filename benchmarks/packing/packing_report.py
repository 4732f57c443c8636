#!/usr/bin/env python3
"""Python side of benchmarks/packing/reproduce.sh (the packing paper's FLAN / OrcaMath experiment).

  packing_report.py make-model --out DIR --tokenizer-from DIR --shape llama2-7b|mistral-7b|granite-8b-code
      A model at the exact shape of the paper's model, random N(0, 0.02) weights, bf16, saved by
      transformers with the tokenizer files of another folder (fptrain init's). Made once: a stamp
      file marks a finished folder.
  packing_report.py fptrain-run --run DIR --model M --dataset D --mode MODE [--warmup-steps W] [--world-size N]
      One JSON line from an fptrain run folder (log_interval 1): steady-state tokens/s (the steps after
      the first W), per GPU, peak memory, steps, final train loss, eval loss, per-step losses and tokens.
  packing_report.py peer --model M --dataset D --mode flatten|pad -- HF_DDP_ARGS...
      Runs benchmarks/distributed/hf_ddp.py in this process (under torchrun: in each rank) and prints
      its JSON line with the process's peak resident memory added (the only memory figure on a CPU)
      and its per-step losses with cumulative tokens. HF_DDP_ARGS carry --pad for mode pad.
  packing_report.py line RUN.json
      One line for the progress output: steps, tokens/s per GPU, final loss.
  packing_report.py report --out DIR --runs A.json ... [--note TEXT]
      DIR/packing.json, DIR/packing.md (the paper's layout, the paper's numbers and ratios, all
      computed from the runs and from the paper's published values) and, when matplotlib imports,
      DIR/throughput.png, DIR/memory.png, DIR/loss-<model>-<dataset>.png.
  packing_report.py convergence --out DIR --runs A.json ... [--note TEXT]
      The convergence study from fptrain-run lines of one model over one epoch in several modes:
      DIR/convergence.json, DIR/convergence.md (steps, final train loss as the mean of the last 10
      steps, eval loss, flatten's largest relative per-step loss difference from pad) and
      DIR/convergence.png (loss per step and per cumulative token, eval losses as markers).
"""
import argparse
import contextlib
import datetime
import io
import json
import os
import resource
import runpy
import shutil
import sys
import time

GIB = 2**30
HERE = os.path.dirname(os.path.abspath(__file__))
HF_DDP = os.path.join(HERE, "..", "distributed", "hf_ddp.py")
sys.path.insert(0, os.path.join(HERE, ".."))
from random_model import SHAPES, make_random_model  # noqa: E402
from run_metrics import read_metrics  # noqa: E402

# What the paper (Kundu et al., arXiv 2407.09105) published, as published: FLAN_20k tokens/s per GPU
# (8 x A100-80GB, FSDP) for padding and for online mini-batch packing with position ids (= flatten).
# For OrcaMath it gives only the speed-up (~1.4x) and the memory change (-6%); for FLAN the memory change
# is -18% to -24%. Ratios in the report are computed from these, never typed.
PAPER_TPS = {
    ("mistral-7b", "flan"): {"pad": 742.0, "flatten": 1408.0},
    ("llama2-7b", "flan"): {"pad": 771.0, "flatten": 1455.0},
    ("granite-8b-code", "flan"): {"pad": 693.0, "flatten": 1358.0},
}
PAPER_SPEEDUP_ONLY = {"orcamath": 1.4}  # "~1.4x", the paper's own figure
PAPER_MEMORY = {"flan": "-18% to -24%", "orcamath": "-6%"}
# The smoke run's tiny model stands in for Llama-2-7B when the paper's column is filled.
PAPER_PROXY = {"tiny": "llama2-7b"}
MODEL_NAMES = {"llama2-7b": "Llama-2-7B", "mistral-7b": "Mistral-7B-v0.1", "granite-8b-code": "Granite-8B-code",
               "tiny": "tiny (fptrain init)"}
MODE_ORDER = ["pad", "flatten", "flatten-1mb", "pack", "fixed", "fixed-nopos"]
# The curves' look per mode: pad drawn thick and dashed, as flatten lies on it when they agree.
MODE_STYLE = {"pad": dict(linestyle="--", linewidth=3), "fixed-nopos": dict(linestyle=":", linewidth=1.5)}


def make_model(a):
    make_random_model(a.out, a.tokenizer_from, a.shape, stamp_name=".packing-shape")


def fptrain_run(a):
    train, evals = read_metrics(a.run)
    s = json.load(open(os.path.join(a.run, "summary.json")))
    if not train:
        raise SystemExit(f"{a.run}/metrics.jsonl: no training records")
    steps_seen, steady = 0, []
    for r in train:
        steps_seen += r["steps_in_record"]
        if steps_seen > a.warmup_steps:
            steady.append(r)
    if not steady:  # a run shorter than the warm-up: measure what there is, and say so
        steady = train[1:] or train
    tok = sum(r["tokens"] for r in steady)
    sec = sum(r["step_time_s"] * r["steps_in_record"] for r in steady)
    world = int(s.get("world_size", a.world_size))
    tps = tok / sec if sec > 0 else 0.0
    peak = s.get("peak_allocated_bytes") or 0
    peak_kind = "allocated"
    if not peak:
        peak, peak_kind = s.get("peak_rss_bytes") or 0, "rss"
    cum, per_step = 0, []
    for r in train:
        cum += r["tokens"]
        per_step.append({"step": r["step"], "loss": r["loss"], "tokens": cum})
    print(json.dumps({
        "impl": "fptrain", "model": a.model, "dataset": a.dataset, "mode": a.mode, "world_size": world,
        "attention": s.get("attention"), "dtype": s.get("dtype"), "device": s.get("device"),
        "steps": s.get("steps_completed", s.get("steps")), "examples": s.get("examples"),
        "tokens": s.get("tokens"), "padding_tokens": s.get("padding_tokens"),
        "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world,
        "steps_measured": sum(r["steps_in_record"] for r in steady),
        "peak_bytes": peak, "peak_kind": peak_kind, "num_parameters": s.get("num_parameters"),
        "first_loss": s.get("first_loss"), "last_loss": s.get("last_loss"), "eval_loss": s.get("eval_loss"),
        "train_seconds": s.get("train_seconds"), "losses": per_step}))


def peer(a, rest):
    sys.argv = [HF_DDP] + rest
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(HF_DDP, run_name="__main__")
    lines = [l for l in buf.getvalue().splitlines() if l.startswith("{")]
    if not lines:  # ranks other than 0 print nothing
        return
    r = json.loads(lines[-1])
    if r.get("mode", "flatten") != a.mode:  # --pad missing or extra in HF_DDP_ARGS
        raise SystemExit(f"packing_report.py peer --mode {a.mode}: hf_ddp.py ran {r.get('mode', 'flatten')}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    peak, kind = r.get("peak_allocated_gib", 0) * GIB, "allocated"
    if not peak:
        peak, kind = rss, "rss (rank 0)"
    step_tokens = r.pop("tokens_per_step", None) or [None] * len(r.get("losses", []))
    per_step, cum = [], 0
    for i, (loss, n) in enumerate(zip(r.get("losses", []), step_tokens)):
        cum = cum + n if n is not None and cum is not None else None
        per_step.append({"step": i + 1, "loss": loss, "tokens": cum})
    r.update({"impl": "transformers", "model": a.model, "dataset": a.dataset, "mode": a.mode,
              "steps": len(per_step), "peak_bytes": peak, "peak_kind": kind, "eval_loss": r.get("eval_loss"),
              "losses": per_step})
    print(json.dumps(r))


def fmt(x, spec="{:.0f}"):
    return "—" if x is None else spec.format(x)


def padding_share(r):
    """Padding tokens over all tokens computed, or None where the run does not say."""
    pad, tok = r.get("padding_tokens"), r.get("tokens")
    return pad / (pad + tok) if pad is not None and tok else None


def max_rel_diff(a, b):
    """Largest relative difference of two runs' per-step losses (b the reference), or None where
    their steps differ."""
    la, lb = [p["loss"] for p in a.get("losses") or []], [p["loss"] for p in b.get("losses") or []]
    if not la or len(la) != len(lb):
        return None
    return max(abs(x - y) / abs(y) for x, y in zip(la, lb))


def read_runs(paths):
    """The result of each run: the last line of its JSON file (empty files skipped)."""
    runs = []
    for path in paths:
        with open(path) as f:
            text = f.read().strip()
        if text:
            runs.append(json.loads(text.splitlines()[-1]))
    return runs


def report(a):
    runs = read_runs(a.runs)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    device = next((r.get("device") for r in runs if r.get("device") and not r.get("failed")), "?")
    key = lambda r: (r["model"], r["dataset"], r["impl"], r["mode"])
    by = {key(r): r for r in runs}

    def ratio(num, den):
        return num / den if num and den else None

    rows = []
    for r in sorted(runs, key=lambda r: (r["model"], r["dataset"], r["impl"] != "fptrain",
                                         MODE_ORDER.index(r["mode"]) if r["mode"] in MODE_ORDER else 9)):
        if r.get("failed"):
            rows.append({**r, "speedup_vs_pad": None, "memory_vs_pad": None})
            continue
        pad = by.get((r["model"], r["dataset"], "fptrain", "pad"))
        ok_pad = pad if pad and not pad.get("failed") else None
        rows.append({**r,
                     "speedup_vs_pad": ratio(r["tokens_per_s_per_gpu"], ok_pad and ok_pad["tokens_per_s_per_gpu"]),
                     "memory_vs_pad": (ratio(r["peak_bytes"], ok_pad["peak_bytes"]) - 1)
                     if ok_pad and r.get("peak_bytes") and ok_pad.get("peak_bytes") else None})
    lines = [f"# Packing-paper reproduction: {device}, {date}", ""]
    if a.note:
        lines += [a.note, ""]
    lines += ["Tokens/s are non-padding tokens per second per GPU (per process on a CPU) over the steady-state "
              "steps (column *measured*); *padding* is the share of computed tokens that are padding; × pad and "
              "Δmem are against fptrain's pad run of the same model and data. Modes: pad (padded to the longest "
              "example of the micro-batch), flatten (the same micro-batches without padding), pack (a token budget "
              "filled with whole examples), fixed (the examples concatenated and cut into rows of exactly the "
              "row length the note above gives, positions restarting per example piece: the paper's offline "
              "packing with position ids; every token is a real one) and fixed-nopos (the same rows, each one "
              "sequence: the paper's packing without position ids, attention across examples). Paper: FLAN_20k, "
              "8×A100-80GB, FSDP; its tokens/s are for padding and for flatten (online mini-batch packing with "
              "position ids), its ratio is computed here from them (OrcaMath: the paper gives only ~1.4×); the "
              "fixed rows have no paper numbers here. transformers' losses are over "
              "every token but each example's first (fptrain's over the assistant turns): compare them between "
              "the peer's modes, not with fptrain's.", "",
              "| model | data | impl | mode | steps | measured | tokens/s/GPU | padding | × pad | peak mem GiB "
              "| Δmem vs pad | final train loss | eval loss | paper tokens/s/GPU | paper × pad | paper Δmem |",
              "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| --- |"]
    for r in rows:
        shape = PAPER_PROXY.get(r["model"], r["model"])
        paper = PAPER_TPS.get((shape, r["dataset"]), {})
        p_tps = paper.get(r["mode"]) if r["impl"] == "fptrain" else None
        p_ratio = None
        if r["mode"] == "flatten" and r["impl"] == "fptrain":
            p_ratio = ratio(paper.get("flatten"), paper.get("pad")) or PAPER_SPEEDUP_ONLY.get(r["dataset"])
        p_mem = PAPER_MEMORY.get(r["dataset"], "") if r["mode"] == "flatten" and r["impl"] == "fptrain" else ""
        model_name = MODEL_NAMES.get(r["model"], r["model"])
        if r.get("failed"):
            lines.append(f"| {model_name} | {r['dataset']} | {r['impl']} | {r['mode']} | FAILED "
                         "| | | | | | | | | | | |")
            continue
        share = padding_share(r)
        lines.append(
            f"| {model_name} | {r['dataset']} | {r['impl']} | {r['mode']} | {fmt(r.get('steps'))} "
            f"| {fmt(r.get('steps_measured'))} | {fmt(r.get('tokens_per_s_per_gpu'))} "
            f"| {fmt(share * 100 if share is not None else None, '{:.0f}%')} "
            f"| {fmt(r['speedup_vs_pad'], '{:.2f}×')} | {fmt(r['peak_bytes'] / GIB if r.get('peak_bytes') else None, '{:.2f}')} "
            f"| {fmt(r['memory_vs_pad'] * 100 if r['memory_vs_pad'] is not None else None, '{:+.0f}%')} "
            f"| {fmt(r.get('last_loss'), '{:.3f}')} | {fmt(r.get('eval_loss'), '{:.3f}')} "
            f"| {fmt(p_tps)}{' (Llama-2-7B)' if p_tps and shape != r['model'] else ''} "
            f"| {fmt(p_ratio, '{:.2f}×')} | {p_mem} |")
    lines.append("")
    peers = []
    for r in rows:
        if r["impl"] == "transformers" and not r.get("failed"):
            mine = by.get((r["model"], r["dataset"], "fptrain", r["mode"]))
            if mine and not mine.get("failed"):
                peers.append(f"- {MODEL_NAMES.get(r['model'], r['model'])}, {r['dataset']}, {r['mode']}: fptrain / "
                             f"transformers tokens/s per GPU = "
                             f"{ratio(mine['tokens_per_s_per_gpu'], r['tokens_per_s_per_gpu']):.2f}× "
                             f"(transformers attention: {r.get('attention')})")
    if peers:
        lines += ["Against the transformers peer in the same run:", ""] + peers + [""]
    # pad and flatten train on the same micro-batches: their per-step losses differ by rounding only
    agree = []
    for r in rows:
        if r["mode"] == "flatten" and not r.get("failed"):
            pad = by.get((r["model"], r["dataset"], r["impl"], "pad"))
            d = max_rel_diff(r, pad) if pad and not pad.get("failed") else None
            if d is not None:
                agree.append(f"- {MODEL_NAMES.get(r['model'], r['model'])}, {r['dataset']}, {r['impl']}: "
                             f"{d:.2e} over {len(r['losses'])} steps")
    if agree:
        lines += ["Largest relative difference of the per-step train loss, flatten against pad (the same examples "
                  "per step; rounding only):", ""] + agree + [""]
    kinds = sorted({r.get("peak_kind") for r in rows if r.get("peak_kind")})
    lines.append(f"Peak memory: {', '.join(kinds)} (allocated: the GPU allocator's peak; rss: the process's peak "
                 "resident memory on a CPU, which includes the program and libraries).")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "packing.json"), "w") as f:
        json.dump({"date": date, "device": device, "note": a.note, "runs": rows}, f, indent=2)
    with open(os.path.join(a.out, "packing.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plots = plot(a.out, rows)
    print("\n".join(lines))
    print(f"\nwrote {a.out}/packing.json, {a.out}/packing.md" + (", " + ", ".join(plots) if plots else
                                                                 " (no plots: matplotlib is not importable)"))


def plot(out, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    ok = [r for r in rows if not r.get("failed")]
    made = []
    cells = sorted({(r["model"], r["dataset"]) for r in ok})
    variants = []
    for r in ok:
        v = (r["impl"], r["mode"])
        if v not in variants:
            variants.append(v)
    for what, field, scale, ylabel in (("throughput", "tokens_per_s_per_gpu", 1.0, "tokens/s per GPU (process)"),
                                       ("memory", "peak_bytes", 1.0 / GIB, "peak memory, GiB")):
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cells) * max(1, len(variants)) / 3), 4))
        width = 0.8 / max(1, len(variants))
        for j, v in enumerate(variants):
            ys = []
            for c in cells:
                r = next((r for r in ok if (r["model"], r["dataset"], r["impl"], r["mode"]) == c + v), None)
                ys.append((r.get(field) or 0) * scale if r else 0)
            ax.bar([i + j * width for i in range(len(cells))], ys, width, label=f"{v[0]} {v[1]}")
        ax.set_xticks([i + width * (len(variants) - 1) / 2 for i in range(len(cells))])
        ax.set_xticklabels([f"{MODEL_NAMES.get(m, m)}\n{d}" for m, d in cells], fontsize=8)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out, f"{what}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    for m, d in cells:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for r in ok:
            if (r["model"], r["dataset"]) != (m, d) or not r.get("losses"):
                continue
            label = f"{r['impl']} {r['mode']}"
            style = {"marker": ".", "linestyle": "-", "linewidth": 1.5, **MODE_STYLE.get(r["mode"], {})}
            a1.plot([p["step"] for p in r["losses"]], [p["loss"] for p in r["losses"]], label=label, **style)
            if all(p.get("tokens") is not None for p in r["losses"]):
                a2.plot([p["tokens"] for p in r["losses"]], [p["loss"] for p in r["losses"]], label=label, **style)
        a1.set_xlabel("optimizer step")
        a2.set_xlabel("tokens trained (cumulative, non-padding)")
        for ax in (a1, a2):
            ax.set_ylabel("train loss")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        modes = [x for x in MODE_ORDER if any(r["mode"] == x and (r["model"], r["dataset"]) == (m, d) for r in ok)]
        fig.suptitle(f"{MODEL_NAMES.get(m, m)}, {d}: {' vs '.join(modes)} "
                     "(transformers: loss over every token)", fontsize=10)
        fig.tight_layout()
        path = os.path.join(out, f"loss-{m}-{d}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made


def convergence(a):
    runs = read_runs(a.runs)
    runs.sort(key=lambda r: MODE_ORDER.index(r["mode"]) if r["mode"] in MODE_ORDER else 9)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    device = next((r.get("device") for r in runs if r.get("device") and not r.get("failed")), "?")
    by = {r["mode"]: r for r in runs if not r.get("failed")}
    rows = []
    for r in runs:
        if r.get("failed"):
            rows.append(r)
            continue
        tail = [p["loss"] for p in r["losses"][-10:]]
        # flatten and flatten-1mb share pad's steps; another mode with as many steps would compare other examples
        diff = max_rel_diff(r, by["pad"]) if r["mode"] in ("flatten", "flatten-1mb") and "pad" in by else None
        rows.append({**r, "final_train_loss": sum(tail) / len(tail), "final_steps_averaged": len(tail),
                     "max_rel_step_loss_diff_vs_pad": diff})
    lines = [f"# Convergence over one epoch: {device}, {date}", ""]
    if a.note:
        lines += [a.note, ""]
    lines += ["Final train loss: the mean of the last 10 optimizer steps' losses (fewer where the run has fewer). "
              "Max rel. Δ vs pad: the largest relative difference of the per-step train loss from pad's (the "
              "same examples in every step, so they differ by rounding only); flatten-1mb, the same steps as one "
              "micro-batch each, shows how far rounding alone takes a run, against which flatten's difference "
              "is to be read. pack and fixed put more tokens in a step and take fewer steps over the same epoch, "
              "so their curves differ.", "",
              "| mode | optimizer steps | examples | tokens | final train loss | eval loss "
              "| max rel. Δ per-step loss vs pad |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['mode']} | FAILED | | | | | |")
            continue
        lines.append(f"| {r['mode']} | {fmt(r.get('steps'))} | {fmt(r.get('examples'))} | {fmt(r.get('tokens'))} "
                     f"| {r['final_train_loss']:.4f} | {fmt(r.get('eval_loss'), '{:.4f}')} "
                     f"| {fmt(r['max_rel_step_loss_diff_vs_pad'], '{:.2e}')} |")
    lines.append("")
    if "pad" in by:
        for r in rows:
            if not r.get("failed") and r["mode"] != "pad" and r.get("steps") and by["pad"].get("steps"):
                lines.append(f"- {r['mode']}: {r['steps'] / by['pad']['steps']:.2f}× pad's optimizer steps, "
                             f"eval loss {fmt(r.get('eval_loss'), '{:.4f}')} against pad's "
                             f"{fmt(by['pad'].get('eval_loss'), '{:.4f}')}")
        lines.append("")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "convergence.json"), "w") as f:
        json.dump({"date": date, "device": device, "note": a.note, "runs": rows}, f, indent=2)
    with open(os.path.join(a.out, "convergence.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    made = plot_convergence(a.out, [r for r in rows if not r.get("failed")])
    print("\n".join(lines))
    print(f"wrote {a.out}/convergence.json, {a.out}/convergence.md" + (f", {made}" if made else
                                                                     " (no plot: matplotlib is not importable)"))


def plot_convergence(out, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        style = {"linestyle": "-", "linewidth": 1.2, **MODE_STYLE.get(r["mode"], {})}
        if len(r["losses"]) <= 50:  # a short run (a smoke run's pack: one step) is a few points
            style["marker"] = "."
        steps = [p["step"] for p in r["losses"]]
        tokens = [p["tokens"] for p in r["losses"]]
        loss = [p["loss"] for p in r["losses"]]
        line, = a1.plot(steps, loss, label=f"{r['mode']} ({r.get('steps')} steps)", **style)
        a2.plot(tokens, loss, label=r["mode"], color=line.get_color(), **style)
        if r.get("eval_loss") is not None:  # at the end of the epoch
            for ax, x in ((a1, steps[-1]), (a2, tokens[-1])):
                ax.plot([x], [r["eval_loss"]], marker="*", markersize=13, color=line.get_color(),
                        markeredgecolor="black", linestyle="none")
    a1.plot([], [], marker="*", markersize=11, color="grey", markeredgecolor="black", linestyle="none",
            label="eval loss (end of epoch)")
    a1.set_xlabel("optimizer step")
    a2.set_xlabel("tokens trained (cumulative, non-padding)")
    for ax in (a1, a2):
        ax.set_ylabel("train loss")
        ax.legend(fontsize=8)
    fig.suptitle("One epoch from the same initial weights: loss per step and per token", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out, "convergence.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-model")
    p.add_argument("--out", required=True)
    p.add_argument("--tokenizer-from", required=True)
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    for name in ("fptrain-run", "peer"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--dataset", required=True)
        p.add_argument("--mode", required=True)
        if name == "fptrain-run":
            p.add_argument("--run", required=True)
            p.add_argument("--warmup-steps", type=int, default=1, help="steps left out of tokens/s")
            p.add_argument("--world-size", type=int, default=1)
    p = sub.add_parser("line")
    p.add_argument("json")
    for name in ("report", "convergence"):
        p = sub.add_parser(name)
        p.add_argument("--out", required=True)
        p.add_argument("--runs", nargs="+", required=True)
        p.add_argument("--note", default="")
    argv = sys.argv[1:]
    rest = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    if a.cmd == "make-model":
        make_model(a)
    elif a.cmd == "fptrain-run":
        fptrain_run(a)
    elif a.cmd == "line":
        r = json.load(open(a.json))
        print(f"{r.get('steps')} steps, {r['tokens_per_s_per_gpu']:.0f} tokens/s per GPU, "
              f"final loss {r['last_loss']:.3f}" + (f", attention {r['attention']}" if r.get("attention") else ""))
    elif a.cmd == "peer":
        peer(a, rest)
    elif a.cmd == "convergence":
        convergence(a)
    else:
        report(a)


if __name__ == "__main__":
    main()
