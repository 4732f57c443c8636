"""The report of benchmarks/train/seed_7b.sh: a table of every run and the step
issue's ratios, computed from the runs' JSON lines (never typed).

  seed_report.py OUT RUN.json...              one call's runs -> OUT/seed-7b.{json,md}
  seed_report.py OUT --merge SEED-7B.json...  several calls' seed-7b.json files, in order;
                                              a run name seen again keeps its first measurement
"""
import datetime
import json
import sys


def load_rows(args):
    if args and args[0] == "--merge":
        rows, seen = [], set()
        for path in args[1:]:
            for r in json.load(open(path))["runs"]:
                if r["name"] not in seen:
                    seen.add(r["name"])
                    rows.append(r)
        return rows
    return [json.loads(open(f).read().strip().splitlines()[-1]) for f in args]


def write_report(out, rows):
    date = datetime.date.today().isoformat()
    dev = next((r.get("device") for r in rows if r.get("device")), "?")
    json.dump({"date": date, "device": dev, "runs": rows}, open(f"{out}/seed-7b.json", "w"), indent=2)
    by = {r["name"]: r for r in rows}
    lines = [f"Llama-2-7B shape (and the Llama-3.2-1B shape: rows *-1b-*), one GPU; {dev}, {date}. fptrain: bf16 "
             "weights, fp32 masters and moments unless the row says bf16-adamw; transformers: bf16 weights, torch AdamW "
             "(fused), torch's FA2 varlen. Tokens/s = non-padding tokens over steady-state time; MFU = 6 N tokens/s "
             "over 989 TFLOP/s.", "", "| run | tokens/s | MFU | peak allocated GiB |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | {r['peak_allocated_gib']:.1f} |")
    lines.append("")

    def ratio(a, b, what):
        if a in by and b in by:
            lines.append(f"- {what}: {by[a]['tokens_per_s']:,.0f} / {by[b]['tokens_per_s']:,.0f} = "
                         f"{by[a]['tokens_per_s'] / by[b]['tokens_per_s']:.2f}x")

    ratio("fptrain-ckpt-ga2", "hf-ckpt-ga2", "seed setup, fptrain / transformers + FA2 (target >= 1.5x)")
    ratio("fptrain-ckpt-ga2-bf16-adamw", "hf-ckpt-ga2",
          "seed setup with the peer's bf16 AdamW, fptrain / transformers + FA2 (target >= 1.5x)")
    ratio("fptrain-auto", "hf-liger-nockpt",
          "best against best, fptrain auto (fp32 masters) / transformers + Liger without checkpointing")
    ratio("fptrain-auto-bf16-adamw", "hf-liger-nockpt",
          "best against best with the peer's bf16 AdamW (target >= 1.5x at <= its peak memory)")
    ratio("fptrain-orca-ckpt-ga2", "hf-orca-ckpt-ga2",
          "seed setup on OrcaMath-like data, fptrain / transformers + FA2 (target >= 1.4x)")
    ratio("fptrain-orca-ckpt-ga2-bf16-adamw", "hf-orca-ckpt-ga2",
          "seed setup on OrcaMath-like data with the peer's bf16 AdamW, fptrain / transformers + FA2 (target >= 1.4x)")
    ratio("fptrain-1b-pack16k", "hf-1b-liger", "Llama-3.2-1B shape, fptrain pack 16k (fp32 masters) / transformers + "
          "Liger, 35 examples (target >= 1.3x at <= 42 GiB)")
    ratio("fptrain-1b-flatten35", "hf-1b-liger",
          "Llama-3.2-1B shape, same 35 examples per step, fptrain (fp32 masters) / transformers + Liger (target >= 1.3x)")
    ratio("fptrain-alpaca-ckpt-ga2", "hf-alpaca-ckpt-ga2",
          "short documents (alpaca-like, 32 examples per micro-batch), fptrain / transformers + FA2")
    peer = by.get("hf-liger-nockpt")
    if peer:
        fits = [r for r in rows if r["name"].startswith("fptrain") and r["peak_allocated_gib"] <= peer["peak_allocated_gib"]
                and not any(k in r["name"] for k in ("orca", "-1b-", "alpaca"))]
        if not fits:
            lines.append(f"- best against best at <= the peer's peak memory ({peer['peak_allocated_gib']:.1f} GiB): "
                         "no fptrain row of this report fits (target >= 1.5x)")
        else:
            best = max(fits, key=lambda r: r["tokens_per_s"])
            lines.append(f"- best against best at <= the peer's peak memory ({peer['peak_allocated_gib']:.1f} GiB): "
                         f"{best['name']} ({best['peak_allocated_gib']:.1f} GiB) {best['tokens_per_s']:,.0f} / "
                         f"{peer['tokens_per_s']:,.0f} = {best['tokens_per_s'] / peer['tokens_per_s']:.2f}x (target >= 1.5x)")
    open(f"{out}/seed-7b.md", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    write_report(sys.argv[1], load_rows(sys.argv[2:]))
