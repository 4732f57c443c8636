"""study.sh's report: the pairs' weight distances over the steps (weight_distance.py's rows) as
$OUT/numerics-study.{json,md} and numerics-study.png (the paper's figures: max |dw| and the
Wasserstein distance per step, log scale), with the conclusion in the paper's terms.

  study_report.py DISTANCES.jsonl --out DIR --steps N --preset NAME --device NAME"""
import argparse
import datetime
import json
import os


# What "Is Flash Attention Stable?" (Golden et al., arXiv 2405.02803) reports for a band.
PAPER_SAYS = {"low precision": " (the paper: 2-5x smaller than low-precision training's)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--device", required=True)
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.rows) if line.strip()]
    pairs = {}
    for r in rows:
        pairs.setdefault(r["label"], []).append(r)
    last = {label: max(rs, key=lambda r: r["step"]) for label, rs in pairs.items()}
    date = datetime.date.today().isoformat()
    md = [f"# Training-level numerics: how far pairs of runs' weights move apart ({a.device}, {date})", "",
          f"fptrain init --preset {a.preset}, real text (scripts/make_real_dataset.py), {a.steps} steps, the same "
          "start and examples unless the pair varies them. Per kept step: the largest |w_a - w_b| over all "
          "weights, and the 1-D Wasserstein distance between each tensor's values (W1; mean weighted by size, "
          "and the largest), with the training losses' difference (benchmarks/numerics/study.sh).", "",
          "| pair | step | max abs dw | mean W1 | max W1 | loss difference |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, r in last.items():
        md.append(f"| {label} | {r['step']} | {r['max_abs']:.3e} | {r['mean_w1']:.3e} | {r['max_w1']:.3e} | "
                  f"{r.get('loss_diff', float('nan')):.3e} |")
    summary = {}
    attention = next((rs for label, rs in pairs.items() if label.startswith("attention")), None)
    bands = {label.split(":")[0]: r for label, r in last.items() if label.split(":")[0] in ("low precision", "random init")}
    if attention:
        md.append("")
        for band, r in bands.items():  # compared at the band's last step (a pair cut short has fewer)
            att = next((x for x in attention if x["step"] == r["step"]), None)
            if att is None or att["mean_w1"] <= 0:
                continue
            k = r["mean_w1"] / att["mean_w1"]
            summary[band] = k
            md.append(f"Our flash attention's effect on the weights (mean W1 against baseline attention) is "
                      f"**{k:.1f}x {'smaller' if k >= 1 else 'larger'}** than the {band} band's at step "
                      f"{r['step']}{PAPER_SAYS.get(band, '')}.")
    with open(os.path.join(a.out, "numerics-study.json"), "w") as f:
        json.dump({"date": date, "device": a.device, "preset": a.preset, "steps": a.steps, "rows": rows,
                   "attention_effect_smaller_by": summary}, f, indent=1)
    with open(os.path.join(a.out, "numerics-study.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, rs in pairs.items():
        rs = sorted(rs, key=lambda r: r["step"])
        for ax, key in zip(axes, ("max_abs", "mean_w1")):
            ax.plot([r["step"] for r in rs], [max(r[key], 1e-12) for r in rs], marker="o", label=label)
    for ax, title in zip(axes, ("max |w_a - w_b|", "mean Wasserstein-1 distance")):
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"Weight difference between paired runs ({a.device}, {date})")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "numerics-study.png"), dpi=120)


if __name__ == "__main__":
    main()
