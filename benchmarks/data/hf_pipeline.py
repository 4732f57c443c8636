#!/usr/bin/env python3
"""The peer: what a Hugging Face Trainer / TRL run does with the same JSONL on one
core: parse each line, apply_chat_template with the assistant mask (labels),
then DataCollatorWithFlattening per micro-batch of N examples."""
import argparse
import json
import os
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--examples", type=int, default=0, help="0: all")
    ap.add_argument("--examples-per-micro-batch", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from transformers import AutoTokenizer, DataCollatorWithFlattening
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    collator = DataCollatorWithFlattening(return_tensors="np")
    t0, c0 = time.perf_counter(), time.process_time()
    examples = tokens = 0
    batch = []
    with open(args.data, encoding="utf-8") as f:
        for line in f:
            if args.examples and examples >= args.examples:
                break
            conv = json.loads(line)["messages"]
            enc = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                          truncation=True, max_length=args.max_length)
            ids = enc["input_ids"]
            labels = [i if m else -100 for i, m in zip(ids, enc["assistant_masks"])]
            batch.append({"input_ids": ids, "labels": labels})
            examples += 1
            tokens += len(ids)
            if len(batch) == args.examples_per_micro_batch:
                collator(batch)
                batch = []
    if batch:
        collator(batch)
    wall, s = time.perf_counter() - t0, time.process_time() - c0
    result = {"peer": "transformers apply_chat_template(return_assistant_tokens_mask) + DataCollatorWithFlattening",
              "examples": examples, "tokens": tokens, "cpu_seconds": s, "wall_seconds": wall,
              "examples_per_second": examples / s, "tokens_per_second": tokens / s}
    print(json.dumps(result))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
