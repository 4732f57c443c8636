#!/usr/bin/env python3
"""Synthetic instruction data whose token-length distributions mimic FLAN or OrcaMath.

    scripts/make_dataset.py --profile flan --examples 100000 --out flan.jsonl
    scripts/make_dataset.py --profile orcamath --examples 20000 --format alpaca --out orca.jsonl
    scripts/make_dataset.py --profile flan --tokenizer MODEL_DIR ...   # calibrate to that tokenizer

Profiles (lengths in tokens of the whole example, prompt + response; the
packing-paper experiments use these shapes):

  flan      lognormal, median 256, sigma 1.1, clipped to [24, 4096]: mostly short,
            heavy tail. Prompts carry most of the tokens (response share 10-40%).
            10% of examples hold a code snippet.
  orcamath  lognormal, median 550, sigma 0.4, clipped to [96, 4096]: longer and
            narrow. A word problem with numbers, then a step-by-step solution
            (response share 60-85%) with arithmetic.
  alpaca    lognormal, median 100, sigma 0.7, clipped to [16, 1024]: short
            single-turn instructions and answers (response share 30-70%), the
            short-document case of attention (many documents per tile).

Text is English-like: 75% of the words drawn (Zipf) from a built-in list of
common English words, 25% from a long tail of 60,000 pseudo-words built from
syllables (Zipf, fixed, the same for every file), so that,
as in real text, frequent words are single tokens while rare ones split into
several and a tokenizer's word cache does not see only a few hundred words.
Sentences carry punctuation, numbers, some arithmetic and code. About 1.6
tokens per word for a 32k Llama-style BPE (the default --tokens-per-word). Target lengths are converted to words with --tokens-per-word; with
--tokenizer the ratio is measured on a sample with that Hugging Face tokenizer
first. Output is deterministic for a given --seed.

Formats: messages (with a system turn in 30% of examples), prompt_completion,
alpaca (instruction / input / output) and text.
"""
import argparse
import json
import math
import sys

import numpy as np

PROFILES = {
    "flan": {"median": 256, "sigma": 1.1, "min": 24, "max": 4096, "response_share": (0.10, 0.40), "code": 0.10},
    "orcamath": {"median": 550, "sigma": 0.4, "min": 96, "max": 4096, "response_share": (0.60, 0.85), "code": 0.0},
    "alpaca": {"median": 100, "sigma": 0.7, "min": 16, "max": 1024, "response_share": (0.30, 0.70), "code": 0.05},
}

WORDS = """the of and to a in is that for it as with was on be by this are or from at an which not have has
but they you can more one all their there been were also other we when about what would into its some these
only than time first new people two may any such most after many over used between where through how each
because system data model number world well both those even work part example during under while however
information however three same state water use called form high could should large including group small
found process given based must known point order since value result left right important following without
within different case set common often level between area general several field study power change method
energy light sound early because student history question answer problem solution step total each
explain describe summarize translate classify sentence paragraph text article review story language
instruction input output task context following given provide list write short brief detailed reason
therefore thus first second third finally next then calculate compute find determine show simplify
equation fraction percent average sum difference product quotient remainder rate speed distance hours
minutes days weeks apples books students teachers cars trees price cost money dollars pounds meters
city country river mountain school market company game team player music song movie film book author
red blue green large small quick slow happy sad good bad better best true false yes no positive negative
neutral review restaurant food service hotel room weather sunny rain cold warm morning evening night
computer program function variable list string integer loop return value class object method library
science biology chemistry physics history geography economics medicine health disease doctor patient
country government election policy law court market price growth trade bank interest tax budget""".split()

SYMBOLS_MATH = ["+", "-", "×", "÷", "="]
CODE_SNIPPETS = [
    "def {f}({a}, {b}):\n    return {a} {op} {b}\n",
    "for {a} in range({n}):\n    print({a} * {m})\n",
    "int {f}(int {a}) {{\n  return {a} {op} {n};\n}}\n",
    "const {f} = ({a}) => {a}.map(x => x {op} {n});\n",
    "SELECT {a}, COUNT(*) FROM {f} WHERE {b} > {n} GROUP BY {a};\n",
]
NAMES = ["total", "count", "value", "items", "result", "score", "index", "price", "width", "height", "data", "users"]


ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "ch", "st", "tr"]
NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ea", "ou"]
CODAS = ["", "", "", "", "n", "r", "s", "t", "l", "nd", "st"]
TAIL_WORDS = 60000
COMMON_SHARE = 0.75  # of running words; the rest comes from the long tail


def vocabulary():
    """Common English words, then pseudo-words of 2-3 syllables (the same on every run), shorter ones
    more frequent, as in real text."""
    rng = np.random.default_rng(12345)
    words, seen = list(dict.fromkeys(WORDS)), set(WORDS)
    tail = []
    while len(tail) < TAIL_WORDS:
        n = 2 + int(rng.random() < 0.4)
        w = "".join(ONSETS[rng.integers(len(ONSETS))] + NUCLEI[rng.integers(len(NUCLEI))] +
                    CODAS[rng.integers(len(CODAS))] for _ in range(n))
        if w not in seen:
            seen.add(w)
            tail.append(w)
    tail.sort(key=len)
    return words + tail


class TextMaker:
    def __init__(self, rng):
        self.rng = rng
        words = vocabulary()
        self.words = np.array(words)
        common = 1.0 / np.arange(1, len(WORDS) + 1) ** 0.9
        tail = 1.0 / np.arange(1, len(words) - len(WORDS) + 1)
        p = np.concatenate([COMMON_SHARE * common / common.sum(), (1 - COMMON_SHARE) * tail / tail.sum()])
        self.cdf = np.cumsum(p)

    def number(self):
        r = self.rng.random()
        if r < 0.6:
            return str(int(self.rng.integers(0, 100)))
        if r < 0.85:
            return f"{int(self.rng.integers(100, 100000)):,}"
        return f"{self.rng.random() * 1000:.2f}"

    def sentences(self, n_words, numbers=0.04):
        """About n_words words of sentences, with numbers and punctuation."""
        out = []
        remaining = max(1, int(n_words))
        while remaining > 0:
            k = min(remaining, int(self.rng.integers(5, 22)))
            idx = np.minimum(np.searchsorted(self.cdf, self.rng.random(k)), len(self.words) - 1)
            ws = self.words[idx].tolist()
            for i in np.nonzero(self.rng.random(k) < numbers)[0]:
                ws[i] = self.number()
            if k > 8 and self.rng.random() < 0.4:
                ws[int(self.rng.integers(2, k - 2))] += ","
            ws[0] = ws[0].capitalize()
            out.append(" ".join(ws) + ("?" if self.rng.random() < 0.1 else "."))
            remaining -= k
        return " ".join(out)

    def code(self):
        t = CODE_SNIPPETS[int(self.rng.integers(len(CODE_SNIPPETS)))]
        a, b, f = (NAMES[int(i)] for i in self.rng.choice(len(NAMES), 3, replace=False))
        return t.format(f=f, a=a, b=b, op=SYMBOLS_MATH[int(self.rng.integers(4))], n=int(self.rng.integers(2, 50)),
                        m=int(self.rng.integers(2, 9)))

    def arithmetic_steps(self, n_words):
        lines, words, step = [], 0, 1
        while words < n_words:
            x, y = int(self.rng.integers(2, 1000)), int(self.rng.integers(2, 100))
            op = SYMBOLS_MATH[int(self.rng.integers(4))]
            z = {"+": x + y, "-": x - y, "×": x * y, "÷": round(x / y, 2)}[op]
            explain = self.sentences(int(self.rng.integers(6, 18)), numbers=0.08)
            lines.append(f"Step {step}: {explain} {x} {op} {y} = {z}.")
            words += len(lines[-1].split())
            step += 1
        lines.append(f"The answer is {self.number()}.")
        return "\n".join(lines)


def make_example(name, target_tokens, tpw, tm, rng):
    profile = PROFILES[name]
    lo, hi = profile["response_share"]
    share = rng.uniform(lo, hi)
    prompt_words = max(3, target_tokens * (1 - share) / tpw)
    response_words = max(1, target_tokens * share / tpw)
    if name == "orcamath":
        instruction = "Solve the following problem and explain each step."
        problem = tm.sentences(prompt_words - 8, numbers=0.15)
        response = tm.arithmetic_steps(response_words)
        return instruction, problem, response
    instruction = tm.sentences(min(prompt_words, rng.integers(8, 30)))
    rest = prompt_words - len(instruction.split())
    context = tm.sentences(rest) if rest > 3 else ""
    if rng.random() < profile["code"]:
        snippet = tm.code()
        context = (context + "\n\n" if context else "") + snippet
    response = tm.sentences(response_words)
    return instruction, context, response


def to_record(fmt, instruction, context, response, rng):
    prompt = instruction + ("\n\n" + context if context else "")
    if fmt == "messages":
        msgs = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": "You are a helpful assistant."})
        msgs += [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        return {"messages": msgs}
    if fmt == "prompt_completion":
        return {"prompt": prompt + "\n\n", "completion": response}
    if fmt == "alpaca":
        return {"instruction": instruction, "input": context, "output": response}
    return {"text": prompt + "\n\n" + response}


def measure_tokens_per_word(tokenizer_dir, profile, seed):  # profile: its name
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    rng = np.random.default_rng(seed + 1)
    tm = TextMaker(rng)
    words = tokens = 0
    for _ in range(200):
        parts = make_example(profile, 300, 1.3, tm, rng)
        text = "\n\n".join(p for p in parts if p)
        words += len(text.split())
        tokens += len(tok(text, add_special_tokens=False)["input_ids"])
    return tokens / words


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="flan")
    ap.add_argument("--examples", type=int, default=10000)
    ap.add_argument("--format", choices=["messages", "prompt_completion", "alpaca", "text"], default="messages")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens-per-word", type=float, default=1.6)
    ap.add_argument("--tokenizer", help="Hugging Face tokenizer directory to calibrate tokens per word")
    ap.add_argument("--median", type=float, help="override the profile's median length (tokens)")
    ap.add_argument("--sigma", type=float, help="override the profile's lognormal sigma")
    ap.add_argument("--max-tokens", type=int, help="override the profile's maximum length (tokens)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    profile = PROFILES[args.profile]
    median = args.median or profile["median"]
    sigma = args.sigma or profile["sigma"]
    top = args.max_tokens or profile["max"]
    tpw = args.tokens_per_word
    if args.tokenizer:
        tpw = measure_tokens_per_word(args.tokenizer, args.profile, args.seed)
        print(f"measured {tpw:.3f} tokens per word with {args.tokenizer}", file=sys.stderr)

    rng = np.random.default_rng(args.seed)
    tm = TextMaker(rng)
    lengths = np.clip(rng.lognormal(math.log(median), sigma, size=args.examples), profile["min"], top)
    # Template overhead (headers, BOS/EOS) is part of the example's length.
    overhead = 12
    with open(args.out, "w", encoding="utf-8") as f:
        for n in lengths:
            parts = make_example(args.profile, max(8.0, n - overhead), tpw, tm, rng)
            f.write(json.dumps(to_record(args.format, *parts, rng), ensure_ascii=False) + "\n")
    print(f"wrote {args.examples} {args.profile} examples ({args.format}) to {args.out}; "
          f"target median {median} tokens, sigma {sigma}, max {top}", file=sys.stderr)


if __name__ == "__main__":
    main()
