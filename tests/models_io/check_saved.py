"""Checks a checkpoint folder written by fptrain with transformers itself.

  check_saved.py --candidate DIR [--reference DIR] [--dtype float32|bfloat16]
                 [--expect-shards N] [--expect-tied]

The candidate must load with AutoModelForCausalLM.from_pretrained with no missing,
unexpected or mismatched weights. With --reference (a checkpoint transformers saved),
both are loaded in --dtype and must agree exactly: what transformers makes of the
config, every weight, and the logits on a fixed batch. Exits 1 naming the mismatch.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import describe  # noqa: E402


def fail(msg):
    print(f"check_saved: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--reference")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--expect-shards", type=int, default=0, help="0: a single model.safetensors")
    parser.add_argument("--expect-tied", action="store_true")
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()
    dtype = getattr(torch, args.dtype)

    files = sorted(os.listdir(args.candidate))
    index_path = os.path.join(args.candidate, "model.safetensors.index.json")
    if args.expect_shards:
        if not os.path.exists(index_path):
            fail(f"no index in {args.candidate}: {files}")
        with open(index_path) as f:
            shards = set(json.load(f)["weight_map"].values())
        if len(shards) != args.expect_shards:
            fail(f"expected {args.expect_shards} shards, the index names {len(shards)}")
    elif files != ["config.json", "model.safetensors"]:
        fail(f"expected config.json and model.safetensors, found {files}")

    cand, info = AutoModelForCausalLM.from_pretrained(args.candidate, dtype=dtype, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        fail(f"transformers reports loading problems: {problems}")
    cand.eval()
    if next(cand.parameters()).dtype != dtype:
        fail(f"loaded as {next(cand.parameters()).dtype}, expected {dtype}")
    tied = cand.lm_head.weight.data_ptr() == cand.get_input_embeddings().weight.data_ptr()
    if tied != args.expect_tied:
        fail(f"tied embeddings: {tied}, expected {args.expect_tied}")

    vocab = cand.config.vocab_size
    input_ids = (torch.arange(2 * 19).reshape(2, 19) * 7 + 3) % vocab
    with torch.no_grad():
        cand_logits = cand(input_ids=input_ids).logits
    if not torch.isfinite(cand_logits).all():
        fail("candidate logits are not finite")

    if args.reference:
        ref = AutoModelForCausalLM.from_pretrained(args.reference, dtype=dtype).eval()
        want, got = describe(ref.config, ref), describe(cand.config, cand)
        diff = {k: (want[k], got[k]) for k in want if k != "dtype" and want[k] != got[k]}
        if diff:
            fail(f"config differs (reference, candidate): {diff}")
        ref_state, cand_state = ref.state_dict(), cand.state_dict()
        if set(ref_state) != set(cand_state):
            fail(f"parameter names differ: {set(ref_state) ^ set(cand_state)}")
        for name, t in ref_state.items():
            if not torch.equal(t, cand_state[name]):
                fail(f"weight {name} differs (max abs diff {(t.float() - cand_state[name].float()).abs().max()})")
        with torch.no_grad():
            ref_logits = ref(input_ids=input_ids).logits
        if not torch.equal(ref_logits, cand_logits):
            fail(f"logits differ (max abs diff {(ref_logits - cand_logits).abs().max()})")
    print(f"check_saved: OK {args.candidate} ({len(files)} files, {args.dtype})")


if __name__ == "__main__":
    main()
