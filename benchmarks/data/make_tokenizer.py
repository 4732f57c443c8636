#!/usr/bin/env python3
"""Realistic tokenizers for the data benchmark, trained offline on English and code
that ship with Python (pydoc's topic texts, the docstrings and code of the
installed transformers package): nothing is downloaded.

  OUT/spm_llama2/   SentencePiece BPE, 32000 pieces, byte fallback (Llama 2 style, tokenizer.model)
  OUT/bpe_llama3/   byte-level BPE, 32000 tokens, Llama 3 split regex (tokenizer.json)
each with the chat template of its family (the ones in tests/data/make_fixtures.py).
"""
import argparse
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data"))
import make_fixtures  # noqa: E402  (the chat templates)


def corpus_lines(limit_bytes=40 << 20):
    from pydoc_data.topics import topics
    import transformers
    out, size = [], 0
    for text in topics.values():
        for line in text.splitlines():
            if line.strip():
                out.append(line)
                size += len(line)
    for path in sorted(glob.glob(os.path.join(os.path.dirname(transformers.__file__), "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8", errors="ignore") as f:
            for line in f:
                if line.strip():
                    out.append(line.rstrip("\n"))
                    size += len(line)
        if size > limit_bytes:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=32000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = corpus_lines()
    corpus = os.path.join(args.out, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))

    import sentencepiece as spm
    from transformers import LlamaTokenizer, PreTrainedTokenizerFast
    d = os.path.join(args.out, "spm_llama2")
    os.makedirs(d, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(d, "tokenizer"), vocab_size=args.vocab, model_type="bpe",
        byte_fallback=True, character_coverage=0.9995, input_sentence_size=400000, shuffle_input_sentence=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, split_digits=True, allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity", minloglevel=2)
    os.remove(os.path.join(d, "tokenizer.vocab"))
    t = LlamaTokenizer.from_pretrained(d)
    t.chat_template = make_fixtures.LLAMA2
    t.save_pretrained(os.path.join(args.out, "hf_llama2"))  # the peer loads this one
    for f in ("tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(args.out, "hf_llama2", f), os.path.join(d, f))

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(ignore_merges=True))
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<|finetune_right_pad_id|>"]
    tok.train([corpus], trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=specials, show_progress=False,
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    t.chat_template = make_fixtures.LLAMA3
    t.save_pretrained(os.path.join(args.out, "bpe_llama3"))
    os.remove(corpus)


if __name__ == "__main__":
    main()
