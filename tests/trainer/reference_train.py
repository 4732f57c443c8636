"""The reference training loop: transformers + torch.optim.AdamW, written
independently of fptrain, on the same pre-tokenized examples in the same order.

Step s uses micro-batches s*K .. s*K+K-1 of N examples each, taken from the file
in order (cyclically), as fptrain's `flatten` mode does with shuffling off. Each
example runs through the model on its own (no packing here); the step's loss is
HF's summed token loss over the whole step divided by the number of supervised
tokens of the whole step (num_items_in_batch). Then clip_grad_norm_, the
schedule, AdamW.

With --adapter the model is PEFT's LoRA over the frozen base (the adapter's
tensors train); --save-adapter writes the trained adapter at the end.

Prints JSON: {"loss": [...], "grad_norm": [...], "lr": [...], "supervised": [...]}.
"""
import argparse
import json
import math

import torch
from transformers import AutoModelForCausalLM


def learning_rate(step, a):
    """fptrain's documented schedule (docs/configuration.md), re-derived here."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.decay == "constant":
        return a.lr
    p = min(1.0, (step - a.warmup + 1) / max(1, a.steps - a.warmup))
    if a.decay == "linear":
        return a.min_lr + (a.lr - a.min_lr) * (1 - p)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--examples-per-micro-batch", type=int, required=True)
    ap.add_argument("--grad-accum", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--decay", default="cosine")
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--adapter", help="a PEFT LoRA folder: train it on the frozen model (PeftModel)")
    ap.add_argument("--save-adapter", help="where to write the trained adapter (save_pretrained)")
    ap.add_argument("--qlora", action="store_true",
                    help="load the model in 4-bit NF4 with double quantisation (bitsandbytes), compute in fp32")
    a = ap.parse_args()

    torch.manual_seed(0)
    examples = [json.loads(line) for line in open(a.data) if line.strip()]
    load = dict(dtype=torch.float32, attn_implementation="eager")
    if a.qlora:
        from transformers import BitsAndBytesConfig
        load.update(device_map="cpu", quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32))
    model = AutoModelForCausalLM.from_pretrained(a.model, **load)
    if a.adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, a.adapter, is_trainable=True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=a.weight_decay,
                            foreach=False)
    n, k = a.examples_per_micro_batch, a.grad_accum
    out = {"loss": [], "grad_norm": [], "lr": [], "supervised": []}
    cursor = 0
    for step in range(a.steps):
        batch = [examples[(cursor + i) % len(examples)] for i in range(n * k)]
        cursor += n * k
        # The step's denominator first: supervised tokens after the shift.
        supervised = sum(sum(1 for t in ex["labels"][1:] if t != -100) for ex in batch)
        total = 0.0
        for ex in batch:
            ids = torch.tensor([ex["input_ids"]])
            labels = torch.tensor([ex["labels"]])
            loss = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(supervised)).loss
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, a.clip if a.clip > 0 else float("inf"))
        lr = learning_rate(step, a)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        out["loss"].append(total)
        out["grad_norm"].append(norm.item())
        out["lr"].append(lr)
        out["supervised"].append(supervised)
    if a.save_adapter:
        model.save_pretrained(a.save_adapter)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
