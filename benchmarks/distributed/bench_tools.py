"""Python side of benchmarks/distributed/run_gpu.sh.

  bench_tools.py make-model --out DIR --tokenizer-from DIR [--shape llama2-7b|tiny]
      A Llama-shaped model saved by transformers in bf16 (random N(0, 0.02) weights, built on
      the meta device and filled on the GPU when there is one), with the tokenizer files of
      another model folder (fptrain init's, trained on the benchmark's data). Done once:
      a stamp file marks a finished folder. --nf4: its projections 4-bit as bitsandbytes
      stores a QLoRA base (a 70B in ~40 GB).
  bench_tools.py fptrain-run --run DIR --name NAME [--world-size N]
      One JSON line from an fptrain run folder: steady-state tokens/s (the metrics.jsonl
      records after the first), per GPU, MFU, peak memory (summary.json), steps measured.
  bench_tools.py parity --one RUN_DIR --two RUN_DIR [--again RUN_DIR] [--steps 10]
      Per-step losses of two runs (log_interval 1) and their largest relative difference.
  bench_tools.py failed --name NAME --world-size N --impl IMPL --log FILE
      The JSON line that stands for a run that failed (the report lists it as FAILED).
  bench_tools.py report --out DIR --runs A.json ... [--parity P.json] [--gpus N]
      $OUT/distributed-bench.json and distributed-bench.md: one row a run, scaling
      efficiency against the same implementation's 1-GPU run, and the targets checked.
"""
import argparse
import datetime
import json
import math
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from random_model import SHAPES, make_random_model  # noqa: E402
from run_metrics import read_metrics  # noqa: E402

PEAK_FLOPS = 989e12  # dense bf16, H100/H200 SXM
GIB = 2**30

SHAPE_NAMES = {"llama2-7b": "Llama-2-7B", "llama-1b": "Llama-3.2-1B"}

# The issue's targets.
TARGET_SCALING = 0.95       # fptrain per-GPU tokens/s at 2 GPUs over its 1-GPU rate
TARGET_PEAK_GIB = 70.0      # fptrain peak allocated per GPU at 2 GPUs
TARGET_VS_PEER = 1.5        # fptrain per-GPU tokens/s over the transformers DDP peer's, at 2 GPUs


def make_model(a):
    make_random_model(a.out, a.tokenizer_from, a.shape, stamp_name=".bench-shape", nf4=a.nf4)


def read_records(run):
    """metrics.jsonl's training records (not eval or other events)."""
    return read_metrics(run)[0]


# summary.json's memory_per_rank keys, by the buffer kind a memory table shows (hf_ddp.py reports the same kinds).
MEMORY_KINDS = {"weights": "weights_bytes", "gradients": "gradients_bytes", "optimizer_state": "optimizer_state_bytes",
                "rest_of_peak": "activations_and_workspace_peak_bytes"}


def fptrain_run(a):
    recs = read_records(a.run)
    s = json.load(open(os.path.join(a.run, "summary.json")))
    if not recs:
        raise SystemExit(f"{a.run}/metrics.jsonl: no training records")
    steady = recs[1:] or recs  # the first record pays for warm-up, allocator growth, NCCL set-up
    tok = sum(r["tokens"] for r in steady)
    sec = sum(r["step_time_s"] * r["steps_in_record"] for r in steady)
    world = int(s.get("world_size", a.world_size))
    if world != a.world_size:
        print(f"warning: {a.run}: summary.json says world_size {world}, the launch asked for {a.world_size}",
              file=sys.stderr)
    tps = tok / sec
    # The ranks' balance (the mean rank's compute over the busiest's): records of several ranks carry it.
    balanced = [r for r in steady if "rank_balance" in r]
    balance = (sum(r["rank_balance"] * r["steps_in_record"] for r in balanced) /
               sum(r["steps_in_record"] for r in balanced)) if balanced else None
    transfers = None  # how the collectives moved, as the run logged it
    log = os.path.join(a.run, "train.log")
    if os.path.exists(log):
        for line in open(log, errors="replace"):
            if "tensor collectives: " in line:
                transfers = line.split("tensor collectives: ", 1)[1].strip()
    m = s.get("memory_per_rank", {})  # per buffer kind; the rest of the peak is activations and workspace
    memory = {kind: m[key] / GIB for kind, key in MEMORY_KINDS.items() if key in m} or None
    print(json.dumps({
        "name": a.name, "impl": "fptrain", "world_size": world, "attention": s.get("attention"),
        "memory_gib": memory,
        "transfers": transfers,
        "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world,
        "steps_measured": sum(r["steps_in_record"] for r in steady),
        "examples_per_gpu": a.examples_per_gpu, "grad_accumulation": a.grad_accumulation,
        "batching": a.batching, "rank_balance": balance,
        "num_parameters": s["num_parameters"],
        "mfu": 6 * s["num_parameters"] * tps / world / PEAK_FLOPS,
        "peak_allocated_gib": s.get("peak_allocated_bytes", 0) / GIB,
        "peak_reserved_gib": s.get("peak_reserved_bytes", 0) / GIB,
        "first_loss": s.get("first_loss"), "last_loss": s.get("last_loss"), "device": s.get("device"),
        "world_size_in_summary": "world_size" in s}))


def step_losses(run, steps):
    out = {}
    for r in read_records(run):
        if r.get("steps_in_record", 1) != 1:
            raise SystemExit(f"{run}: records of {r['steps_in_record']} steps; parity runs need log_interval 1")
        out[r["step"]] = r["loss"]
    first = sorted(out)[:steps]
    return [out[k] for k in first], first


def parity(a):
    one, steps_one = step_losses(a.one, a.steps)
    two, steps_two = step_losses(a.two, a.steps)
    if steps_one != steps_two or not one:
        raise SystemExit(f"parity: the runs logged different steps ({steps_one} and {steps_two})")
    rel = [abs(y - x) / abs(x) for x, y in zip(one, two)]
    result = {"steps": steps_one, "loss_1gpu": one, "loss_2gpu": two, "rel_diff": rel,
              "max_rel_diff": max(rel), "at_step": steps_one[rel.index(max(rel))]}
    if a.again:  # the same 1-GPU run a second time: how far bf16 training drifts from itself
        again, steps_again = step_losses(a.again, a.steps)
        if steps_again == steps_one:
            noise = [abs(y - x) / abs(x) for x, y in zip(one, again)]
            result.update({"loss_1gpu_again": again, "noise_rel_diff": noise, "max_noise_rel_diff": max(noise)})
    print(json.dumps(result))


def failed(a):
    print(json.dumps({"name": a.name, "impl": a.impl, "world_size": a.world_size, "failed": True,
                      "log": os.path.basename(a.log), "reason": a.reason}))


def short_transfers(t):
    """The log's "tensor collectives: ..." line, short: copy engines or NCCL."""
    return "copy engines" if "by copy engines" in t else "NCCL"


def family(run):
    """fptrain, or transformers (with or without DDP)."""
    return run["impl"].split("+")[0]


def fmt(x, spec, missing="—"):
    return missing if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(a):
    rows = []
    for f in a.runs:
        try:
            with open(f) as fh:
                rows.append(json.loads(fh.read().strip().splitlines()[-1]))
        except (OSError, ValueError, IndexError) as e:
            print(f"report: skipping {f}: {e}", file=sys.stderr)
    date = datetime.date.today().isoformat()
    ok = [r for r in rows if not r.get("failed")]
    device = next((r["device"] for r in ok if r.get("device")), a.device or "?")
    # Scaling efficiency: per-GPU tokens/s against the same implementation's 1-GPU run on the same
    # examples (gradient accumulation = the world size: the same steps, each GPU's share of the work
    # the same), else its plain 1-GPU run. Runs on other examples are not comparable at a few dozen
    # steps: with FLAN-like lengths (lognormal, sigma 1.1) the tokens of 4 examples vary by ~75%,
    # and tokens/s with them.
    for r in ok:
        ones = [b for b in ok if family(b) == family(r) and b["world_size"] == 1 and
                b.get("batching", "flatten") == r.get("batching", "flatten")]
        base = next((b for b in ones if b.get("grad_accumulation", 1) == r["world_size"] * r.get("grad_accumulation", 1)),
                    None) or next((b for b in ones if b.get("grad_accumulation", 1) == 1), None)
        r["scaling_efficiency"] = r["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"] if base else None
        r["scaling_base"] = base["name"] if base else None
        r["tokens_per_s_global"] = r["tokens_per_s"]
    for r in rows:
        r.setdefault("device", device)
        r["date"] = date
    par = None
    if a.parity:
        try:
            par = json.loads(open(a.parity).read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError) as e:
            print(f"report: no parity result ({e})", file=sys.stderr)

    def find(impl, world):
        return next((r for r in ok if family(r) == impl and r["world_size"] == world and
                     r.get("batching", "flatten") == "flatten"), None)

    f2, h2 = find("fptrain", 2), find("transformers", 2)
    checks = []

    def check(what, value, target, passed, shown):
        checks.append({"check": what, "value": value, "target": target,
                       "result": "n/a" if passed is None else ("PASS" if passed else "FAIL"), "shown": shown})

    if f2 and f2.get("scaling_efficiency"):
        eff, base = f2["scaling_efficiency"], next(b for b in ok if b["name"] == f2["scaling_base"])
        check(f"fptrain per-GPU tokens/s at 2 GPUs / at 1 GPU ({base['name']})", eff, f">= {TARGET_SCALING:.0%}",
              eff >= TARGET_SCALING,
              f"{f2['tokens_per_s_per_gpu']:,.0f} / {base['tokens_per_s_per_gpu']:,.0f} = {eff:.1%}" +
              (f"; the ranks' balance on these examples is {f2['rank_balance']:.1%} (a step waits for its busiest "
               f"rank): {eff / f2['rank_balance']:.1%} of what that allows" if f2.get("rank_balance") else ""))
    else:
        check("fptrain per-GPU tokens/s at 2 GPUs / at 1 GPU", None, f">= {TARGET_SCALING:.0%}", None,
              "not measured (a run is missing or failed)")
    if f2:
        peak = f2["peak_allocated_gib"]
        check("fptrain peak allocated per GPU at 2 GPUs (max over ranks)", peak, f"<= {TARGET_PEAK_GIB:.0f} GiB",
              peak <= TARGET_PEAK_GIB, f"{peak:.1f} GiB (reserved {f2['peak_reserved_gib']:.1f} GiB)")
    else:
        check("fptrain peak allocated per GPU at 2 GPUs (max over ranks)", None, f"<= {TARGET_PEAK_GIB:.0f} GiB",
              None, "not measured")
    if f2 and h2:
        ratio = f2["tokens_per_s_per_gpu"] / h2["tokens_per_s_per_gpu"]
        check("fptrain / transformers DDP peer, per-GPU tokens/s at 2 GPUs", ratio, f">= {TARGET_VS_PEER}x",
              ratio >= TARGET_VS_PEER,
              f"{f2['tokens_per_s_per_gpu']:,.0f} / {h2['tokens_per_s_per_gpu']:,.0f} = {ratio:.2f}x "
              f"(peer attention: {h2['attention']})")
    else:
        check("fptrain / transformers DDP peer, per-GPU tokens/s at 2 GPUs", None, f">= {TARGET_VS_PEER}x", None,
              "not measured")
    if par:
        check(f"bf16 loss parity, 1 GPU x 8 vs 2 GPUs x 4 examples, first {len(par['steps'])} steps "
              "(max relative difference)", par["max_rel_diff"], f"<= {a.parity_tol:g}",
              par["max_rel_diff"] <= a.parity_tol, f"{par['max_rel_diff']:.2e} (at step {par['at_step']})")
    else:
        check("bf16 loss parity, 1 GPU x 8 vs 2 GPUs x 4 examples (max relative difference)", None,
              f"<= {a.parity_tol:g}", None, "not measured (see dist-parity-*.log)")

    result = {"date": date, "device": device, "gpus_visible": a.gpus, "runs": rows, "parity": par,
              "checks": checks, "note": a.note}
    with open(os.path.join(a.out, "distributed-bench.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    params = next((r["num_parameters"] for r in ok if r.get("num_parameters")), 0)
    md = [f"Data-parallel training, {SHAPE_NAMES.get(a.shape, a.shape)} shape ({params / 1e9:.2f}B parameters, "
          f"random init, bf16 weights; fptrain: {'fp32 masters' if a.masters else 'bf16 AdamW'}, optimizer sharded; "
          f"peer: bf16 AdamW), FLAN-like "
          f"data, flatten mode, 4 examples per GPU per micro-batch, activation checkpointing on every layer; "
          f"{device}, {date}", ""]
    if a.note:
        md += [f"Note: {a.note}", ""]
    md += ["Scaling is against the same implementation's 1-GPU run on the same examples: gradient "
           "accumulation 2 there, so its steps are the 2-GPU steps and each GPU's share of the work is the "
           "same (4 examples per micro-batch; the optimizer step of the whole model over two micro-batches "
           "against half of it over one). The plain 1-GPU run (4 examples a step) sees other examples. "
           "The ranks' balance is the mean rank's compute over the busiest rank's, step by step, from the "
           "examples' lengths (a step waits for its busiest rank): what the examples allow data parallelism at "
           "most. Runs named -rows<N> train fixed rows of N tokens, one a micro-batch, against one GPU on the "
           "same rows: every rank the same tokens, so their scaling is what the transfers cost.", "",
           "| run | GPUs | grad. acc. | attention; transfers | tokens/s per GPU | tokens/s (all GPUs) | scaling | "
           "ranks' balance | MFU | peak alloc GiB | peak reserved GiB | steps measured |",
           "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("failed"):
            md.append(f"| {r['name']} | {r['world_size']} | | FAILED ({r.get('reason') or 'see log'}: "
                      f"{r.get('log', '')}) | | | | | | | | |")
            continue
        scaling = fmt(r['scaling_efficiency'], '.1%')
        if r.get("scaling_base") and r["world_size"] > 1:
            scaling += f" (of {r['scaling_base']})"
        md.append(f"| {r['name']} | {r['world_size']} | {r.get('grad_accumulation', 1)} | "
                  f"{r.get('attention') or '?'}{'; ' + short_transfers(r['transfers']) if r.get('transfers') else ''} | "
                  f"{r['tokens_per_s_per_gpu']:,.0f} | {r['tokens_per_s']:,.0f} | "
                  f"{scaling} | {fmt(r.get('rank_balance'), '.1%', '')} | {100 * r['mfu']:.1f}% | "
                  f"{r['peak_allocated_gib']:.1f} | {r['peak_reserved_gib']:.1f} | {r['steps_measured']} |")
    md += ["", "Targets (computed from the runs above):", ""]
    for c in checks:
        md.append(f"- {c['result']}: {c['check']}: {c['shown']} (target {c['target']})")
    if par:
        md += ["", f"Loss per step, 1 GPU x 8 examples vs 2 GPUs x 4 examples "
                   f"({SHAPE_NAMES.get(a.parity_preset, a.parity_preset)} shape):", "",
               "| step | 1 GPU | 2 GPUs | relative difference | 1 GPU again | its difference from the first |",
               "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        again = par.get("loss_1gpu_again") or [None] * len(par["steps"])
        noise = par.get("noise_rel_diff") or [None] * len(par["steps"])
        for s, x, y, d, z, n in zip(par["steps"], par["loss_1gpu"], par["loss_2gpu"], par["rel_diff"], again, noise):
            md.append(f"| {s} | {x:.5f} | {y:.5f} | {d:.2e} | {'' if z is None else f'{z:.5f}'} | "
                      f"{'' if n is None else f'{n:.2e}'} |")
        if par.get("max_noise_rel_diff") is not None:
            md += ["", f"The same 1-GPU run twice differs by up to {par['max_noise_rel_diff']:.2e}: the floor that "
                       "bf16 training's run-to-run variation (atomics in the attention backward) sets for the parity."]
    with open(os.path.join(a.out, "distributed-bench.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-model")
    p.add_argument("--out", required=True)
    p.add_argument("--tokenizer-from", required=True)
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama2-7b")
    p.add_argument("--nf4", action="store_true", help="as bitsandbytes stores a 4-bit NF4 base (QLoRA; needs a GPU)")
    p.set_defaults(fn=make_model)
    p = sub.add_parser("fptrain-run")
    p.add_argument("--run", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--examples-per-gpu", type=int, default=4)
    p.add_argument("--grad-accumulation", type=int, default=1)
    p.add_argument("--batching", default="flatten", help="what a micro-batch is (runs compare within one kind)")
    p.set_defaults(fn=fptrain_run)
    p = sub.add_parser("parity")
    p.add_argument("--one", required=True)
    p.add_argument("--two", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--again", help="a second run of --one's configuration: the run-to-run noise floor")
    p.set_defaults(fn=parity)
    p = sub.add_parser("failed")
    p.add_argument("--name", required=True)
    p.add_argument("--impl", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--reason", default="")
    p.set_defaults(fn=failed)
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    p.add_argument("--runs", nargs="*", default=[])
    p.add_argument("--parity")
    p.add_argument("--parity-tol", type=float, default=0.01)
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--device", default="")
    p.add_argument("--note", default="")
    p.add_argument("--shape", default="llama2-7b", help="the throughput runs' model shape (for the title)")
    p.add_argument("--parity-preset", default="llama-1b", help="the parity runs' model (for the title)")
    p.add_argument("--masters", default="true", type=lambda v: v == "true",
                   help="fptrain's optimizer.master_weights (true: fp32 masters; false: bf16 AdamW; for the title)")
    p.set_defaults(fn=report)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
