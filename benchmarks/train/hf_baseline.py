"""The peer baseline for benchmarks/train: a plain transformers training loop on the
same model folder and the same JSONL, the way padded fine-tuning usually runs
(batches of N examples padded to the longest, attention_mask, SDPA attention,
bf16 weights, torch.optim.AdamW fused). Prints one JSON line: non-padding tokens/s
over the steps after the first, padding fraction, peak memory.

    hf_baseline.py --model DIR --data FILE.jsonl --batch 8 --steps 20 [--device cuda]

Differences from fptrain's run, stated rather than hidden: pure bf16 AdamW (no fp32
master weights: less work than fptrain's default), every token supervised (the same
compute as fptrain's masked loss), examples taken in file order.
"""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(a.model)
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa").to(a.device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=a.device == "cuda")
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    def examples():
        with open(a.data) as f:
            for line in f:
                ex = json.loads(line)
                ids = tok.apply_chat_template(ex["messages"], tokenize=True) if "messages" in ex else \
                    tok(ex.get("text") or (ex.get("prompt", "") + ex.get("completion", ""))).input_ids
                if hasattr(ids, "keys"):  # BatchEncoding in recent transformers
                    ids = ids["input_ids"]
                yield ids[: a.max_length]

    stream = examples()
    times, real_tokens, all_tokens = [], 0, 0
    for step in range(a.steps):
        batch = [next(stream) for _ in range(a.batch)]
        longest = max(len(b) for b in batch)
        ids = torch.full((len(batch), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for i, b in enumerate(batch):
            ids[i, : len(b)] = torch.tensor(b)
            mask[i, : len(b)] = 1
        labels = ids.masked_fill(mask == 0, -100)
        ids, mask, labels = ids.to(a.device), mask.to(a.device), labels.to(a.device)
        if a.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if a.device == "cuda":
            torch.cuda.synchronize()
        if step > 0:  # the first step pays for allocator growth and kernel selection
            times.append(time.perf_counter() - start)
            real_tokens += int(mask.sum())
            all_tokens += mask.numel()
    out = {"name": "transformers-padded", "tokens_per_s": real_tokens / sum(times),
           "padding_fraction": 1 - real_tokens / all_tokens, "batch": a.batch,
           "num_parameters": sum(p.numel() for p in model.parameters()), "last_loss": float(loss)}
    if a.device == "cuda":
        out["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
        out["mfu"] = 6 * out["num_parameters"] * out["tokens_per_s"] / 989e12
    print(json.dumps(out))


if __name__ == "__main__":
    main()
