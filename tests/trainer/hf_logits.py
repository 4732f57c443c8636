"""Loads a model folder with transformers (eager attention, fp32) and writes the
logits of a few token sequences, each run on its own, to a safetensors file:
  seq.<i>.input_ids int64 [L], seq.<i>.logits fp32 [L, vocab].
Prints {"vocab_size": V, "num_sequences": n} on success."""
import argparse
import json

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(0)
    tensors = {}
    lengths = [9, 1, 17, 4]
    with torch.no_grad():
        for i, n in enumerate(lengths):
            ids = torch.randint(0, model.config.vocab_size, (n,), generator=g)
            tensors[f"seq.{i}.input_ids"] = ids
            tensors[f"seq.{i}.logits"] = model(input_ids=ids[None]).logits[0].float().contiguous()
    save_file(tensors, a.out)
    print(json.dumps({"vocab_size": model.config.vocab_size, "num_sequences": len(lengths)}))


if __name__ == "__main__":
    main()
