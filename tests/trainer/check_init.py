"""Checks a folder written by `fptrain init` with the Hugging Face libraries:
transformers loads the model and the tokenizer (tokenizer.json as written),
SentencePiece loads tokenizer.model, and both tokenize a corpus identically (texts holding special-token strings aside:
transformers splits those out, SentencePiece does not).
Prints {"ids": [[...], ...] (transformers, with BOS), "spm_mismatches": n,
"vocab_size": V, "num_parameters": P, "chat": "<rendered chat template>"}."""
import argparse
import json

import sentencepiece as spm
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXTS = ["Write a short story about a river.", "What is 127 plus 48?", " leading space", "two  spaces\tand tab",
         "Accents: café, naïve, Ærø", "CJK 你好世界 and emoji 😀👍", "line one\nline two\r\nline three",
         "def f(x):\n    return x * 2  # code", "</s> is not special inside text? <s>", ""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.model)
    sp = spm.SentencePieceProcessor(model_file=f"{a.model}/tokenizer.model")
    ids = [tok(t).input_ids for t in TEXTS]
    # SentencePiece treats "<s>" in text as text; Hugging Face splits it out as a special token.
    mismatches = sum(1 for t, i in zip(TEXTS, ids) if "<s>" not in t and i != [sp.bos_id()] + sp.encode(t))
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                                   tokenize=False)
    print(json.dumps({"texts": TEXTS, "ids": ids, "spm_mismatches": mismatches,
                      "vocab_size": model.config.vocab_size,
                      "num_parameters": sum(p.numel() for p in model.parameters()), "chat": chat}))


if __name__ == "__main__":
    main()
