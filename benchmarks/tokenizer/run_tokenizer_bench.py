#!/usr/bin/env python3
"""Tokenizer throughput on one core: fptrain against Hugging Face tokenizers.

Trains the test tokenizers (tests/tokenizers/make_fixtures.py), generates a few MB
of mixed text (prose with many distinct words, accented Latin, CJK, emoji, code,
numbers), then on the same core and in the same run times
  * Hugging Face: the tokenizers.Tokenizer that transformers' AutoTokenizer builds,
    encode() one text at a time and encode_batch() over all texts, with
    RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false;
  * fptrain: build-dir/benchmarks/tokenizer_bench (encode one text at a time).
Both must produce the same number of tokens. Writes results/tokenizer_bench.json and .md.

    run_tokenizer_bench.py --build BUILD_DIR [--mb 4] [--core 0]
"""
import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizers"))
import make_fixtures  # noqa: E402

TOKENIZERS = {
    "llama3_32k": "Llama 3 style tokenizer.json, 32k vocab (Split regex + ByteLevel, ignore_merges)",
    "spm_32k": "Llama 2 style tokenizer.model, 32k vocab (SentencePiece BPE, byte fallback)",
    "bpe_llama3_ignore_merges": "Llama 3 style tokenizer.json (Split regex + ByteLevel, ignore_merges)",
    "bpe_granite": "Granite style tokenizer.json (GPT2Tokenizer, ByteLevel regex)",
    "bpe_byte_fallback": "Llama 2 style tokenizer.json (byte-fallback BPE, Prepend/Replace normalizer)",
    "spm_llama2": "Llama 2 style tokenizer.model (SentencePiece BPE)",
}


def pseudo_word(rng):
    syllables = ["ka", "lo", "mi", "ter", "on", "ra", "vis", "qu", "est", "ing", "tion", "ber", "sch", "ö", "é", "ñ"]
    return "".join(rng.choice(syllables) for _ in range(rng.randint(1, 5)))


def generate_texts(megabytes, seed=3):
    rng = random.Random(seed)
    fixture_rng = random.Random(seed + 1)
    texts, size = [], 0
    while size < megabytes * 1e6:
        if rng.random() < 0.5:
            text = " ".join(make_fixtures.random_line(fixture_rng, []) for _ in range(rng.randint(1, 6)))
        else:
            words = [pseudo_word(rng) if rng.random() < 0.6 else rng.choice(make_fixtures.WORDS)
                     for _ in range(rng.randint(20, 200))]
            text = " ".join(w.capitalize() if rng.random() < 0.1 else w for w in words) + "."
        texts.append(text)
        size += len(text.encode("utf-8"))
    return texts


def train_large(work, texts):
    """32k-vocabulary tokenizers trained on separate text of the same kind, closer to real models than the
    small test fixtures."""
    import sentencepiece as spm
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(make_fixtures.LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|begin_of_text|>", "<|eot_id|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    d = os.path.join(work, "llama3_32k")
    make_fixtures.save_tokenizer_json(tok, d)
    make_fixtures.write_config(d, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                                   "eos_token": "<|eot_id|>"})

    corpus = os.path.join(work, "spm_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ").replace("\r", " ") for t in texts))
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(work, "spm_32k"), model_type="bpe", vocab_size=32000,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True, allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        hard_vocab_limit=False, minloglevel=2)
    d = os.path.join(work, "spm_32k")
    os.makedirs(d, exist_ok=True)
    os.replace(os.path.join(work, "spm_32k.model"), os.path.join(d, "tokenizer.model"))
    make_fixtures.write_config(d, {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                                   "unk_token": "<unk>", "add_bos_token": True, "legacy": False})


def time_hf(tok_dir, texts, rounds):
    from transformers import AutoTokenizer

    backend = AutoTokenizer.from_pretrained(tok_dir).backend_tokenizer
    single = []
    tokens = 0
    for _ in range(rounds):
        start = time.perf_counter()
        tokens = sum(len(backend.encode(t, add_special_tokens=False).ids) for t in texts)
        single.append(time.perf_counter() - start)
    batch = []
    for _ in range(rounds):
        start = time.perf_counter()
        encodings = backend.encode_batch(texts, add_special_tokens=False)
        batch.append(time.perf_counter() - start)
    assert sum(len(e.ids) for e in encodings) == tokens
    return {"tokens": tokens, "single_seconds": single, "batch_seconds": batch,
            "single_tokens_per_s": tokens / min(single), "batch_tokens_per_s": tokens / min(batch)}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, help="fptrain build directory holding benchmarks/tokenizer_bench")
    parser.add_argument("--mb", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over the texts per run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each side")
    parser.add_argument("--core", type=int, default=0, help="CPU core both sides are pinned to")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--keep", help="keep the tokenizers and texts in this directory (for profiling)")
    args = parser.parse_args()

    # One core for both sides, and no thread pool on the Hugging Face side.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.sched_setaffinity(0, {args.core})
    bench = os.path.join(args.build, "benchmarks", "tokenizer_bench")
    texts = generate_texts(args.mb)  # timed; the 32k tokenizers train on other texts of the same kind
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        fixtures = os.path.join(work, "fixtures")
        subprocess.run([sys.executable, make_fixtures.__file__, "--out", fixtures], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        train_large(fixtures, generate_texts(args.mb, seed=11))
        texts_path = os.path.join(work, "texts.jsonl")
        with open(texts_path, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        for name, description in TOKENIZERS.items():
            tok_dir = os.path.join(fixtures, name)
            # Alternate the two sides so that load changes on a shared machine hit both alike.
            hf_runs, our_runs = [], []
            for _ in range(args.repeats):
                hf_runs.append(time_hf(tok_dir, texts, args.rounds))
                run = subprocess.run(["taskset", "-c", str(args.core), bench, tok_dir, texts_path, str(args.rounds)],
                                     check=True, capture_output=True, text=True)
                our_runs.append(json.loads(run.stdout))
            hf = max(hf_runs, key=lambda r: r["single_tokens_per_s"])
            hf["batch_tokens_per_s"] = max(r["batch_tokens_per_s"] for r in hf_runs)
            ours = max(our_runs, key=lambda r: r["tokens_per_s"])
            if ours["tokens"] != hf["tokens"]:
                raise SystemExit(f"{name}: token counts differ: fptrain {ours['tokens']}, HF {hf['tokens']}")
            results.append({"tokenizer": name, "description": description, "hf": hf, "fptrain": ours,
                            "speedup_vs_hf_single": ours["tokens_per_s"] / hf["single_tokens_per_s"],
                            "speedup_vs_hf_batch": ours["tokens_per_s"] / hf["batch_tokens_per_s"]})
            print(f"{name}: fptrain {ours['tokens_per_s']:,.0f} tok/s, HF one-by-one "
                  f"{hf['single_tokens_per_s']:,.0f}, HF batch {hf['batch_tokens_per_s']:,.0f}", flush=True)

    import tokenizers
    import transformers
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{cpu_name()} ({platform.node()}), 1 core pinned (core {args.core})",
            "texts": len(texts), "megabytes": sum(len(t.encode()) for t in texts) / 1e6, "rounds": args.rounds,
            "tokenizers_version": tokenizers.__version__, "transformers_version": transformers.__version__,
            "repeats": args.repeats,
            "note": "best of all rounds of all runs; fptrain's cold column is the first pass of its best run, "
                    "which starts with an empty word cache (HF's cache is warm after its first pass too)"}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer_bench.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    lines = [
        "# Tokenizer throughput, one core", "",
        f"{meta['machine']}, {meta['date']}. {meta['texts']} texts, {meta['megabytes']:.1f} MB of mixed text "
        f"(prose, accented Latin, CJK, emoji, code, numbers); tokens/s, best of {args.repeats} alternating runs x "
        f"{args.rounds} passes per side; "
        f"tokenizers {meta['tokenizers_version']}, transformers {meta['transformers_version']}. "
        "Both sides give the same token count.", "",
        "| tokenizer | tokens | fptrain tok/s | fptrain cold tok/s | HF one-by-one tok/s | HF encode_batch tok/s "
        "| fptrain / HF one-by-one | fptrain / HF batch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(f"| {r['description']} | {r['fptrain']['tokens']:,} | {r['fptrain']['tokens_per_s']:,.0f} "
                     f"| {r['fptrain']['first_round_tokens_per_s']:,.0f} | {r['hf']['single_tokens_per_s']:,.0f} "
                     f"| {r['hf']['batch_tokens_per_s']:,.0f} | {r['speedup_vs_hf_single']:.2f}x "
                     f"| {r['speedup_vs_hf_batch']:.2f}x |")
    with open(os.path.join(args.out, "tokenizer_bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
