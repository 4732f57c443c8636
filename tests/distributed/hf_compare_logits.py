"""Loads model folders with transformers (eager attention, fp32) and runs them on the
same random token sequences (each on its own). Fails if transformers reports a
missing, unexpected or mismatched weight. Prints one JSON line:
  {"max_abs_diff": ..., "max_abs_logit": ..., "baseline_max_abs_diff": ..., "num_sequences": n,
   "vocab_size": V}
max_abs_diff compares A and B; baseline_max_abs_diff (with --baseline C) compares A and C,
to show how far apart models that really differ are."""
import argparse
import json

import torch
from transformers import AutoModelForCausalLM


def load(path):
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"{path}: transformers reports {problems}")
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--baseline")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    c = load(args.baseline) if args.baseline else None
    for other in (b, c):
        if other is not None and other.config.vocab_size != a.config.vocab_size:
            raise SystemExit("the models have different vocabularies")
    gen = torch.Generator().manual_seed(0)
    diff, top, base = 0.0, 0.0, 0.0
    lengths = [1, 7, 23, 64]
    with torch.no_grad():
        for n in lengths:
            ids = torch.randint(0, a.config.vocab_size, (1, n), generator=gen)
            la, lb = a(input_ids=ids).logits[0], b(input_ids=ids).logits[0]
            diff = max(diff, (la - lb).abs().max().item())
            top = max(top, la.abs().max().item())
            if c is not None:
                base = max(base, (la - c(input_ids=ids).logits[0]).abs().max().item())
    print(json.dumps({"max_abs_diff": diff, "max_abs_logit": top, "baseline_max_abs_diff": base,
                      "num_sequences": len(lengths), "vocab_size": a.config.vocab_size}))


if __name__ == "__main__":
    main()
