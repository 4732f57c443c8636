"""families.sh's report: one table per shape (tokens/s, MFU, peak memory) and the ratio of
fptrain's best run to transformers' best, written to OUT/families.{json,md}. An input may
also be an earlier families.json (its runs are merged: one shape per device call).

  families_report.py OUT RUN.json|families.json ..."""
import datetime
import json
import os
import sys


def steps_text(runs):
    """The runs' steps: 5 unmeasured + steps_measured each (families.sh's FPTRAIN_FAMILY_STEPS)."""
    steps = sorted({r["steps_measured"] + 5 for r in runs if "steps_measured" in r})
    if not steps:
        return "30 steps"
    return (f"{steps[0]} steps" if len(steps) == 1
            else " or ".join(str(n) for n in steps) + " steps (calls differed)")


KINDS = ("weights", "gradients", "optimizer_state", "rest_of_peak")


def memory_table(rows, shape):
    """Each run's peak split by buffer kind (runs that report it: bench_tools.py fptrain-run, hf_ddp.py)."""
    rows = [r for r in rows if r.get("memory_gib")]
    if not rows:
        return []
    md = ["", "Peak memory by buffer kind, GiB (rest: the peak less the other three, i.e. activations and "
              "workspace; gradients counted whole, as if all were held at the peak):", "",
          "| run | weights | gradients | optimizer state | rest of the peak | peak allocated |",
          "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        m = r["memory_gib"]
        md.append(f"| {r['name'][len(shape) + 1:]} | " + " | ".join(f"{m.get(k, float('nan')):.1f}" for k in KINDS) +
                  f" | {r['peak_allocated_gib']:.1f} |")
    return md


def main():
    out, files = sys.argv[1], sys.argv[2:]
    runs = []
    for f in files:
        if os.path.getsize(f) == 0:
            continue
        doc = json.load(open(f))
        for r in doc["runs"] if "runs" in doc else [doc]:
            if all(r["name"] != seen["name"] for seen in runs):  # a row measured twice: the first call's
                runs.append(r)
    shapes = []
    for r in runs:
        shape = r["name"].split("-fptrain")[0].split("-hf")[0]
        r["shape"] = shape
        if shape not in shapes:
            shapes.append(shape)
    device = next((r.get("device") for r in runs if r.get("device")), "?")
    date = datetime.date.today().isoformat()
    md = [f"# Families against transformers, one {device} ({date})", "",
          "Random-init shapes, bf16, FLAN-like data, flatten, 4 examples per micro-batch in file order, "
          f"{steps_text(runs)} (the first 5 not measured); tokens/s are non-padding tokens, "
          "MFU = 6 N tokens/s / 989 TFLOP/s (`benchmarks/train/families.sh`).", ""]
    if any("lora" in r["name"] for r in runs):
        md[-1:-1] = ["", "LoRA / QLoRA rows: r 16, alpha 32, all seven projections, base frozen; MFU still counts "
                     "6 N per token as full fine-tuning does (a LoRA step skips the base's weight gradients: ~4 N)."]
    summary = []
    for shape in shapes:
        rows = [r for r in runs if r["shape"] == shape]
        # One N per shape (a peer that counts a 4-bit weight's packed bytes would show a smaller model).
        n = max(r["num_parameters"] for r in rows)
        for r in rows:
            r["num_parameters"], r["mfu"] = n, 6 * n * r["tokens_per_s"] / 989e12
        md += [f"## {shape} ({rows[0]['num_parameters'] / 1e9:.2f}B parameters)", "",
               "| run | tokens/s | MFU | peak allocated GiB |", "| --- | ---: | ---: | ---: |"]
        for r in rows:
            md.append(f"| {r['name'][len(shape) + 1:]} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% | "
                      f"{r['peak_allocated_gib']:.1f} |")
        md += memory_table(rows, shape)
        ours = [r for r in rows if r["impl"] == "fptrain"]
        peers = [r for r in rows if r["impl"] != "fptrain"]
        if ours and peers:
            best, peer = max(ours, key=lambda r: r["tokens_per_s"]), max(peers, key=lambda r: r["tokens_per_s"])
            ratio = best["tokens_per_s"] / peer["tokens_per_s"]
            md += ["", f"Best against best: {best['name'][len(shape) + 1:]} / {peer['name'][len(shape) + 1:]} = "
                       f"**{ratio:.2f}x** at {best['peak_allocated_gib']:.1f} vs {peer['peak_allocated_gib']:.1f} GiB."]
            entry = {"shape": shape, "fptrain": best["name"], "peer": peer["name"], "ratio": ratio}
            leaner = [r for r in ours if r["peak_allocated_gib"] <= peer["peak_allocated_gib"]]
            if leaner:
                lean = max(leaner, key=lambda r: r["tokens_per_s"])
                entry["at_peer_memory"] = {"fptrain": lean["name"], "ratio": lean["tokens_per_s"] / peer["tokens_per_s"]}
                md.append(f"At no more than the peer's memory: {lean['name'][len(shape) + 1:]} = "
                          f"**{entry['at_peer_memory']['ratio']:.2f}x** at {lean['peak_allocated_gib']:.1f} GiB.")
            else:
                md.append("At no more than the peer's memory: no fptrain run (its least is "
                          f"{min(r['peak_allocated_gib'] for r in ours):.1f} GiB).")
            for other in peers:
                fits = [r for r in ours if r["peak_allocated_gib"] <= other["peak_allocated_gib"]]
                if other is peer or not fits:
                    continue
                lean = max(fits, key=lambda r: r["tokens_per_s"])
                md.append(f"Against {other['name'][len(shape) + 1:]} at no more memory: "
                          f"{lean['name'][len(shape) + 1:]} = {lean['tokens_per_s'] / other['tokens_per_s']:.2f}x "
                          f"at {lean['peak_allocated_gib']:.1f} vs {other['peak_allocated_gib']:.1f} GiB.")
            summary.append(entry)
        md.append("")
    with open(os.path.join(out, "families.json"), "w") as f:
        json.dump({"date": date, "device": device, "runs": runs, "best_against_best": summary}, f, indent=1)
    with open(os.path.join(out, "families.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
