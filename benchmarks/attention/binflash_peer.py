#!/usr/bin/env python3
"""BinFlash (Binary Block Masking, Sharma & Geiping, arXiv 2409.15097) timed on attention_bench's documents.

BinFlash is a peer of the attention benchmark, never part of the project: its Triton code is
fetched into an ignored folder (default .binflash/, see README.md) and imported from there.

    attention_bench --dump-workloads wl.json
    binflash_peer.py --binflash .binflash --workloads wl.json --merge RESULTS.json --md RESULTS.md

For each workload that runs at Hkv 32 (BinFlash takes one K/V head per query head: no grouped
queries) and each head dimension, it builds the causal block-diagonal (N, N) bool mask of the
workload's documents and times binflash_attention's forward and forward + backward as
attention_bench times ours: the median of --reps runs after 3 warm-ups, CUDA events, the same
random-normal bf16 inputs' shapes, FLOPs of useful work counted as FlashAttention does (causal
forward 2·Hq·D·ΣLᵢ², forward + backward 3.5 times that). BinFlash caches its mask preprocessing
per mask tensor, so the timed calls exclude it (as they would in training, where the mask of a
batch is made once).

--layout one (default): the whole pack as one row of N = 32768 tokens, the very documents our
kernels get. --layout rows: 4 rows of 8192 tokens sharing one mask (BinFlash's batch takes one
mask): the pack's first 8192 tokens' documents, FLOPs counted on them 4 times.

--merge adds the rows (method "binflash") to attention_bench's JSON and rewrites its markdown.
"""
import argparse
import json
import math
import os
import sys


def causal_document_mask(lens, device):
    import torch
    n = sum(lens)
    doc = torch.repeat_interleave(torch.arange(len(lens), device=device),
                                  torch.tensor(lens, device=device))
    i = torch.arange(n, device=device)
    return (doc[:, None] == doc[None, :]) & (i[None, :] <= i[:, None])


def rows_of(lens, row_tokens, rows):
    """The first rows × row_tokens tokens of the pack cut into rows (documents split at a row's end)."""
    out, cur, room = [], [], row_tokens
    for l in lens:
        while l > 0 and len(out) < rows:
            take = min(l, room)
            cur.append(take)
            l -= take
            room -= take
            if room == 0:
                out.append(cur)
                cur, room = [], row_tokens
        if len(out) == rows:
            break
    return out


def time_ms(fn, reps):
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def measure(binflash_attention, lens, layout, hq, d, reps):
    import torch
    if layout == "rows":
        first = rows_of(lens, 8192, 1)[0]
        batch, n, doc_lens, flop_lens = 4, 8192, first, first * 4
    else:
        batch, n, doc_lens, flop_lens = 1, sum(lens), lens, lens
    if n % 128:
        raise SystemExit(f"binflash needs N divisible by 128, got {n}")
    sum_sq = float(sum(l * l for l in flop_lens))
    fwd_flops = 2.0 * hq * d * sum_sq
    mask = causal_document_mask(doc_lens, "cuda")
    g = torch.Generator(device="cuda").manual_seed(42)
    shape = (batch, hq, n, d)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    scale = 1.0 / math.sqrt(d)

    def fwd():
        with torch.no_grad():
            binflash_attention(q, k, v, mask, sm_scale=scale)

    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))

    def fwdbwd():
        out = binflash_attention(qg, kg, vg, mask, sm_scale=scale)
        torch.autograd.grad(out, (qg, kg, vg), do)  # returned, not accumulated into .grad

    f, fb = time_ms(fwd, reps), time_ms(fwdbwd, reps)
    err = check_against_sdpa(binflash_attention, q, k, v, do, mask, doc_lens, scale)
    return {"fwd_ms": f, "fwdbwd_ms": fb, "fwd_tflops": fwd_flops / f * 1e-9,
            "fwdbwd_tflops": 3.5 * fwd_flops / fb * 1e-9, "max_rel_err": err}


def check_against_sdpa(binflash_attention, q, k, v, do, mask, doc_lens, scale):
    """Largest |x - ref| / max|ref| over O, dQ, dK, dV of a few documents (the longest and the first
    eight), ref = torch SDPA on each document alone: a peer's speed counts only if its answer is right."""
    import torch
    import torch.nn.functional as F
    qg, kg, vg = (t[:1].detach().requires_grad_(True) for t in (q, k, v))
    out = binflash_attention(qg, kg, vg, mask, sm_scale=scale)
    grads = torch.autograd.grad(out, (qg, kg, vg), do[:1])
    starts = [0]
    for l in doc_lens:
        starts.append(starts[-1] + l)
    picks = sorted(set(list(range(min(8, len(doc_lens)))) + [max(range(len(doc_lens)), key=lambda i: doc_lens[i])]))
    worst = 0.0
    for i in picks:
        a, b = starts[i], starts[i + 1]
        qs, ks, vs = (t[:1, :, a:b].detach().float().requires_grad_(True) for t in (q, k, v))
        ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
        ref_grads = torch.autograd.grad(ref, (qs, ks, vs), do[:1, :, a:b].float())
        for x, r in zip((out, *grads), (ref, *ref_grads)):
            xs = x[:, :, a:b].float()
            worst = max(worst, float(((xs - r).abs().max() / r.abs().max().clamp_min(1e-6)).detach()))
    return worst


def write_markdown(results, md_path):
    head = (f"Device: {results.get('device', '?')}, {results.get('date', '?')}. bf16, causal, Hq=32, "
            f"T={results.get('tokens', 32768)} packed tokens; TFLOP/s of useful work.\n\n"
            "| workload | D | Hkv | method | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n"
            "|---|---|---|---|---|---|---|---|\n")
    order = {}
    for r in results["results"]:
        order.setdefault((r["workload"], r["head_dim"], r.get("heads_kv", 8)), []).append(r)
    lines = []
    for rows in order.values():
        for r in rows:
            lines.append(f"| {r['workload']} | {r['head_dim']} | {r.get('heads_kv', 8)} | {r['method']} | "
                         f"{r['fwd_ms']:.3f} | {r['fwd_tflops']:.1f} | {r['fwdbwd_ms']:.3f} | "
                         f"{r['fwdbwd_tflops']:.1f} |")
    notes = results.get("notes", [])
    with open(md_path, "w") as f:
        f.write(head + "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binflash", default=".binflash", help="folder holding the binflash package")
    ap.add_argument("--workloads", required=True, help="attention_bench --dump-workloads output")
    ap.add_argument("--only", nargs="*", help="workload names (default: every one that runs at Hkv 32)")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--layout", choices=["one", "rows"], default="one")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--merge", help="attention_bench JSON to add the rows to")
    ap.add_argument("--md", help="markdown to rewrite from the merged JSON")
    a = ap.parse_args()

    sys.path.insert(0, os.path.abspath(a.binflash))
    try:
        from binflash import binflash_attention
    except Exception as e:  # noqa: BLE001 - the peer is optional: say why and leave the results alone
        print(f"binflash_peer: cannot import binflash from {a.binflash}: {e}", file=sys.stderr)
        return 1
    wl = json.load(open(a.workloads))
    hq = int(wl.get("heads_q", 32))
    rows = []
    for d in a.head_dims:
        for name, w in wl["workloads"].items():
            if a.only and name not in a.only:
                continue
            if 32 not in w["heads_kv"]:
                continue
            try:
                r = measure(binflash_attention, w["lens"], a.layout, hq, d, a.reps)
            except Exception as e:  # noqa: BLE001 - one failed shape must not lose the others
                print(f"binflash {name} D={d}: failed: {str(e)[:300]}", file=sys.stderr)
                continue
            row = {"workload": name, "method": "binflash" + ("-4x8192" if a.layout == "rows" else ""),
                   "head_dim": d, "heads_kv": 32, **{k: round(v, 4) for k, v in r.items() if k != "max_rel_err"},
                   "max_rel_err": r["max_rel_err"]}
            if r["max_rel_err"] > 0.05:  # bf16 attention is within ~1e-2 of an fp32 reference
                row["method"] += " (WRONG: max rel. err %.2g)" % r["max_rel_err"]
            print(f"{name:11s} D={d:<3d} Hkv=32 {row['method']:14s} fwd {r['fwd_ms']:8.3f} ms "
                  f"{r['fwd_tflops']:6.1f} TF/s | fwd+bwd {r['fwdbwd_ms']:8.3f} ms {r['fwdbwd_tflops']:6.1f} TF/s"
                  f" | max rel. err vs SDPA {r['max_rel_err']:.2e}",
                  flush=True)
            rows.append(row)
    if a.merge:
        results = json.load(open(a.merge)) if os.path.exists(a.merge) else {"results": []}
        results["results"] = [r for r in results["results"] if not r["method"].startswith("binflash")] + rows
        results.setdefault("notes", []).append(
            "binflash: BinFlash (seal-rg/binflash, Triton) on the same documents"
            + (" (one row of all tokens, one (N, N) mask)" if a.layout == "one" else
               " (4 rows of 8192 tokens sharing the first row's mask)")
            + "; K/V with one head per query head, so Hkv 32 only; mask preprocessing cached, not timed;"
            " O, dQ, dK, dV of the longest and the first eight documents checked against torch SDPA on each"
            " document alone (rows marked WRONG are off by more than 5% of the largest value).")
        with open(a.merge, "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        if a.md:
            write_markdown(results, a.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
