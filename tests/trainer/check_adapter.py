"""Loads an fptrain checkpoint's adapter the way users do, PeftModel.from_pretrained
on the base model, merges it (merge_and_unload), and compares the merged weights
with a merged model folder fptrain wrote (adapter.save_merged) and, optionally,
with another adapter's tensors (the reference loop's).

Prints {"merged_max_rel": x, "adapter_max_rel": y, "adapted_modules": n}."""
import argparse
import json

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def rel(a, b):
    return ((a.double() - b.double()).norm() / max(b.double().norm().item(), 1e-30)).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--merged", help="fptrain's merged model folder to compare with PEFT's merge")
    ap.add_argument("--other-adapter")
    a = ap.parse_args()
    base = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, a.adapter)
    adapted = sum(1 for n, _ in model.named_modules() if n.endswith("lora_A"))
    out = {"adapted_modules": adapted}
    if a.merged:
        merged = model.merge_and_unload().state_dict()
        ours = AutoModelForCausalLM.from_pretrained(a.merged, dtype=torch.float32).state_dict()
        out["merged_max_rel"] = max(rel(ours[k], v) for k, v in merged.items())
    if a.other_adapter:
        mine = load_file(f"{a.adapter}/adapter_model.safetensors")
        other = load_file(f"{a.other_adapter}/adapter_model.safetensors")
        assert mine.keys() == other.keys(), (sorted(mine), sorted(other))
        out["adapter_max_rel"] = max(rel(mine[k], other[k]) for k in mine)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
