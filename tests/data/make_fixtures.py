#!/usr/bin/env python3
"""Golden outputs for the data-pipeline tests, made live with Hugging Face.

Writes into --out:
  tok_llama3/ tok_granite3/       byte-level BPE tokenizers (tokenizers' trainer, Llama-3 style split regex)
  tok_llama2/ tok_mistral/        SentencePiece BPE with byte fallback (sentencepiece's trainer)
                                  each saved by transformers with its chat template
  spm_llama2/ spm_mistral/        the same as tokenizer.model (no tokenizer.json)
  chat_golden.json                per template: conversations, apply_chat_template text, ids, assistant masks
  flatten_*.jsonl, flatten_golden.json
                                  pre-tokenized examples and DataCollatorWithFlattening's batches of them
  chat_flatten.jsonl, chat_flatten_golden.json
                                  conversations -> apply_chat_template (ids + assistant mask as labels)
                                  -> DataCollatorWithFlattening: the whole text path end to end
  gen_<profile>_<format>.jsonl    scripts/make_dataset.py output in every format
  chat_parity/, chat_parity_golden.json
                                  chat_parity_fixtures.py: templates x tokenizers x conversations through
                                  apply_chat_template, for chat_parity_test.cpp

The chat templates are the ones fptrain ships (data/chat_templates/, the public
conventions of Llama 3, Llama 2, Mistral and Granite 3), saved with each
tokenizer; fptrain's Jinja interpreter must render them exactly as transformers
does. {% generation %} marks what return_assistant_tokens_mask reports, which is
what fptrain supervises by default.
"""
import argparse
import json
import os

import numpy as np

# The conventions fptrain ships (data/chat_templates/*.jinja): one copy, read here.
_TEMPLATES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "chat_templates")


def _shipped(name):
    with open(os.path.join(_TEMPLATES_DIR, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


LLAMA3 = _shipped("llama3")
LLAMA2 = _shipped("llama2")
MISTRAL = _shipped("mistral")
GRANITE3 = _shipped("granite3")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. What is 12 + 30? The answer is 42.",
    "Write a function: def add(a, b):\n    return a + b\n",
    "Le café est très bon à Paris. Über naïve façade — déjà vu!",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Emoji test 😀🎉👍 and numbers 3.14159, 2718281828, 1,000,000.",
    "Instruction: summarize the following text in one sentence.\r\nInput: a long story.",
    "Q: If Sam has 7 apples and eats 3, how many remain? A: 7 - 3 = 4 apples.",
    "   leading spaces, trailing tabs\t\t and\u00a0non-breaking\u2009thin spaces  ",
    "You are a helpful assistant. Answer briefly and accurately.",
    "[INST] system and user turns [/INST] assistant answer </s>",
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hi there!"}, {"role": "assistant", "content": "Hello! How can I help?"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is 12 + 30?"},
     {"role": "assistant", "content": "12 + 30 = 42."}],
    [{"role": "user", "content": "Write add(a, b) in Python."},
     {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
     {"role": "user", "content": "Now in C."},
     {"role": "assistant", "content": "int add(int a, int b) { return a + b; }"}],
    [{"role": "system", "content": "  Réponds en français.  "},
     {"role": "user", "content": "  Où est le café ?\n"},
     {"role": "assistant", "content": " Il est à Paris. 東京 😀 \n"}],
    [{"role": "user", "content": "Count: 1 2 3\r\n4 5 6"},
     {"role": "assistant", "content": "Done:\u00a07 8 9\t"},
     {"role": "user", "content": "Thanks"},
     {"role": "assistant", "content": "You're welcome."}],
]


def train_byte_level(specials):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok


def make_tokenizers(out):
    from transformers import LlamaTokenizer, PreTrainedTokenizerFast
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>", "<|finetune_right_pad_id|>", "<|start_of_role|>", "<|end_of_role|>"]
    bl = train_byte_level(specials)
    toks = {}
    t = PreTrainedTokenizerFast(tokenizer_object=bl, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    t.chat_template = LLAMA3
    toks["llama3"] = t
    t = PreTrainedTokenizerFast(tokenizer_object=bl, eos_token="<|end_of_text|>")
    t.chat_template = GRANITE3
    toks["granite3"] = t

    import sentencepiece as spm
    corpus_file = os.path.join(out, "sp_corpus.txt")
    with open(corpus_file, "w", encoding="utf-8") as f:
        f.write("\n".join(CORPUS * 20))
    spm.SentencePieceTrainer.train(
        input=corpus_file, model_prefix=os.path.join(out, "sp"), vocab_size=500, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2, num_threads=1)
    for name, template in (("llama2", LLAMA2), ("mistral", MISTRAL)):
        d = os.path.join(out, "sp_" + name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(out, "sp.model"), "rb") as src, open(os.path.join(d, "tokenizer.model"), "wb") as dst:
            dst.write(src.read())
        t = LlamaTokenizer.from_pretrained(d)
        t.chat_template = template
        toks[name] = t
    for name, t in toks.items():
        t.save_pretrained(os.path.join(out, "tok_" + name))
    # The same SentencePiece tokenizers as a tokenizer.model without tokenizer.json (read via libsentencepiece).
    import shutil
    for name in ("llama2", "mistral"):
        d = os.path.join(out, "spm_" + name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(out, "sp.model"), os.path.join(d, "tokenizer.model"))
        for f in ("tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(out, "tok_" + name, f), os.path.join(d, f))
    return toks


def chat_golden(toks, out):
    golden = []
    for name, tok in toks.items():
        cases = []
        for conv in CONVERSATIONS:
            text = tok.apply_chat_template(conv, tokenize=False)
            enc = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            cases.append({"messages": conv, "text": text, "input_ids": list(enc["input_ids"]),
                          "assistant_masks": list(enc["assistant_masks"])})
        golden.append({"template": name, "tokenizer_dir": "tok_" + name,
                       "jinja": tok.chat_template, "cases": cases})
    with open(os.path.join(out, "chat_golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)


def flatten_golden(toks, out):
    from transformers import DataCollatorWithFlattening
    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="np")
    rng = np.random.default_rng(7)
    per_batch = 4
    golden = {"examples_per_micro_batch": per_batch, "files": {}}

    def batches(features):
        result = []
        for i in range(0, len(features), per_batch):
            b = collator(features[i:i + per_batch])
            result.append({"input_ids": b["input_ids"][0].tolist(), "labels": b["labels"][0].tolist(),
                           "position_ids": b["position_ids"][0].tolist(),
                           "cu_seqlens": b["cu_seq_lens_q"].tolist(), "max_seqlen": int(b["max_length_q"])})
        return result

    for with_labels in (True, False):
        features = []
        for _ in range(14):  # 3 full micro-batches and a partial one
            n = int(rng.integers(1, 40))
            ids = rng.integers(0, 500, size=n).tolist()
            feat = {"input_ids": ids}
            if with_labels:
                labels = [i if rng.random() < 0.6 else -100 for i in ids]
                labels[-1] = ids[-1]  # at least one supervised token after the first
                feat["labels"] = labels
            features.append(feat)
        name = "flatten_labels.jsonl" if with_labels else "flatten_ids.jsonl"
        with open(os.path.join(out, name), "w") as f:
            for feat in features:
                f.write(json.dumps(feat) + "\n")
        golden["files"][name] = batches(features)

    # Text path: conversations through the chat template, assistant tokens as labels.
    tok = toks["llama3"]
    features = []
    with open(os.path.join(out, "chat_flatten.jsonl"), "w", encoding="utf-8") as f:
        for conv in CONVERSATIONS * 2:
            f.write(json.dumps({"messages": conv}, ensure_ascii=False) + "\n")
            enc = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            ids = list(enc["input_ids"])
            labels = [i if m else -100 for i, m in zip(ids, enc["assistant_masks"])]
            features.append({"input_ids": ids, "labels": labels})
    golden["files"]["chat_flatten.jsonl"] = batches(features)
    with open(os.path.join(out, "flatten_golden.json"), "w") as f:
        json.dump(golden, f)


def generated(out):
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "make_dataset.py")
    for profile, fmt, n in (("flan", "messages", 400), ("flan", "prompt_completion", 200),
                            ("orcamath", "alpaca", 200), ("orcamath", "text", 100)):
        subprocess.run([sys.executable, script, "--profile", profile, "--format", fmt, "--examples", str(n),
                        "--seed", "3", "--out", os.path.join(out, f"gen_{profile}_{fmt}.jsonl")], check=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    toks = make_tokenizers(args.out)
    chat_golden(toks, args.out)
    flatten_golden(toks, args.out)
    generated(args.out)
    import chat_parity_fixtures  # tests/data/, beside this script
    chat_parity_fixtures.write_chat_parity(args.out)


if __name__ == "__main__":
    main()
