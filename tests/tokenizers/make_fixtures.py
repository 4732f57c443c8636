#!/usr/bin/env python3
"""Trains small tokenizers with the real libraries and records Hugging Face's ids.

Every fixture is a directory as a model checkpoint would ship it (tokenizer.model
or tokenizer.json plus tokenizer_config.json) and a golden.json holding, for each
line of a test corpus, transformers' AutoTokenizer ids with and without special
tokens and its decode of them. The C++ tests must reproduce all of it.

    make_fixtures.py --out DIR
"""
import argparse
import json
import os
import random
import shutil

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is was for on that with as by it at from this be are or an have not which but "
         "model training data token tokenizer batch gradient loss learning rate attention layer weight "
         "café naïve résumé Zürich façade über Ångström señor crème brûlée déjà São Paulo Kraków Dvořák "
         "東京 日本語 の テキスト 中文 分词 测试 데이터 학습 привет мир данные γλώσσα "
         "😀 🚀 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️").split()
CODE = [
    "def add(a, b):\n\treturn a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "if x != None and len(y) >= 10: print(f\"{x!r}\")",
    "std::vector<int32_t> ids = tok.encode(text, true);",
    "SELECT id, name FROM users WHERE age > 21;",
    "<div class=\"box\">&nbsp;</div>",
    "    indented    code\t\twith tabs",
]
# Qwen2Tokenizer's pre-tokenizer regex (transformers' tokenization_qwen2.py): digits one by one.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Text NFC changes: decomposed accents, marks out of canonical order, Hangul jamo, singletons
# (ohm, angstrom, CJK compatibility), composition exclusions, Indic nukta forms, Vietnamese.
NFC_LINES = [
    "cafe\u0301 nai\u0308ve Zu\u0308rich A\u030angstro\u0308m", "a\u0323\u0301 a\u0301\u0323 q\u0307\u0323",
    "\u1112\u1161\u11ab\u1100\u1173\u11af \u1100\u1161 \uac00\u11a8", "\u2126 \u212b \uf900 \u0958 \u2adc",
    "\u0915\u093c \u0928\u093c", "Vie\u0302\u0323t Nam ti\u00ea\u0301ng Vi\u1ec7t", "e\u0301\u0301\u0301",
    "\u0301 starts with a mark", "\u1e9b\u0323 long s", "\u0b47\u0b3e \u0dd9\u0dcf \u1025\u102e",
]
SPACES = [" ", " ", " ", "  ", "\u00a0", "\u3000", "\u2009", "\t", "\n", "\r\n"]


def random_line(rng, specials):
    kind = rng.random()
    if kind < 0.15:
        return rng.choice(CODE)
    parts = []
    for _ in range(rng.randint(1, 14)):
        r = rng.random()
        if r < 0.1:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        elif r < 0.14 and specials:
            parts.append(rng.choice(specials))
        elif r < 0.2:
            parts.append(rng.choice(",.;:!?'\"()[]{}-—…"))
        else:
            word = rng.choice(WORDS)
            parts.append(word.capitalize() if rng.random() < 0.2 else word)
        parts.append(rng.choice(SPACES))
    return "".join(parts).rstrip(" ") if rng.random() < 0.7 else "".join(parts)


def training_corpus(seed=1, n=6000):
    rng = random.Random(seed)
    return [random_line(rng, []) for _ in range(n)]


def test_corpus(specials, seed=7, n=400):
    rng = random.Random(seed)
    fixed = [
        "", " ", "  ", "Hello world", " Hello world", "Hello world ", "  leading and trailing  ",
        "tab\tseparated\tvalues", "line one\r\nline two\r\n", "\n\nnewlines\n", "1234567890 3.14159 2026-11-21",
        "café naïve Zürich", "東京は日本の首都です。", "👩‍💻 writes code 🚀", "🏳️‍🌈👨‍👩‍👧‍👦",
        "non\u00a0breaking\u3000ideographic\u2009thin", "don't won't it's we've they're I'm",
        "CAPS and MiXeD", "a" * 50, "next\u0085line\u2028sep\u2029par\u1680ogham\u205fmath\x0bvt\x0cff\x1cfs",
        "zero\u200bwidth\ufeffbom \u180e mongolian", "soft\u00adhyphen", "nai\u0308ve cafe\u0301 x\u20dd ②x ½y Ⅻz a_b", "Ⅻ1②3 ٣٤ १२", "ﬁ ligature ① ²³ Ⅻ ½", "x" + " " * 20 + "y", "\u00e9\u0301 combining",
    ]
    for s in specials:
        fixed += [s, s + "text", "text" + s, "a " + s + " b", s + s, " " + s, s + " "]
    return fixed + [random_line(rng, specials) for _ in range(n)]


def golden(tok_dir, lines, extra_check=None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    with_special = [tok(line, add_special_tokens=True)["input_ids"] for line in lines]
    without_special = [tok(line, add_special_tokens=False)["input_ids"] for line in lines]
    record = {
        "tokenizer_class": type(tok).__name__,
        "lines": lines,
        "with_special": with_special,
        "without_special": without_special,
        "decoded": [tok.decode(ids) for ids in with_special],
        "vocab_size": max(tok.get_vocab().values()) + 1,
        "bos_id": tok.bos_token_id,
        "eos_id": tok.eos_token_id,
        "pad_id": tok.pad_token_id,
        "probe_tokens": {t: tok.convert_tokens_to_ids(t) for t in list(tok.get_vocab())[:50]},
    }
    with open(os.path.join(tok_dir, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, ensure_ascii=False)
    return record


def write_config(tok_dir, config):
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


def make_sentencepiece(out):
    """Llama 2 / Mistral style: SentencePiece BPE with byte fallback and identity normalization."""
    import sentencepiece as spm

    work = os.path.join(out, "_spm_work")
    os.makedirs(work, exist_ok=True)
    corpus_path = os.path.join(work, "corpus.txt")
    with open(corpus_path, "w", encoding="utf-8") as f:
        f.write("\n".join(line.replace("\n", " ").replace("\r", " ") for line in training_corpus()))
    spm.SentencePieceTrainer.train(
        input=corpus_path, model_prefix=os.path.join(work, "m"), model_type="bpe", vocab_size=1200,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, allow_whitespace_only_pieces=True, character_coverage=0.995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=["<sep>"], minloglevel=2)
    specials = ["<s>", "</s>", "<unk>", "<sep>"]
    lines = test_corpus(specials)
    variants = {
        # Llama 2's tokenizer_config.json
        "spm_llama2": {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                       "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "legacy": False},
        # legacy prefixing, EOS appended, a pad token
        "spm_legacy_eos": {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                           "unk_token": "<unk>", "pad_token": "<unk>", "add_bos_token": True,
                           "add_eos_token": True, "legacy": True},
    }
    # A unigram model: transformers' LlamaTokenizer still runs it as a BPE over its pieces.
    spm.SentencePieceTrainer.train(
        input=corpus_path, model_prefix=os.path.join(work, "u"), model_type="unigram", vocab_size=900,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=True, character_coverage=0.995, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, minloglevel=2)
    variants["spm_unigram"] = dict(variants["spm_llama2"])
    models_of = {"spm_unigram": "u.model"}
    names = []
    for name, config in variants.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(work, models_of.get(name, "m.model")), os.path.join(d, "tokenizer.model"))
        write_config(d, config)
        golden(d, lines)
        names.append(name)
    shutil.rmtree(work)
    return names


def save_tokenizer_json(tok, tok_dir, edit=None):
    """Saves a tokenizers.Tokenizer as tokenizer.json, optionally editing the JSON first."""
    data = json.loads(tok.to_str())
    if edit:
        edit(data)
    os.makedirs(tok_dir, exist_ok=True)
    with open(os.path.join(tok_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return data


def check_raw_file_matches(tok_dir, record):
    """Where transformers uses tokenizer.json as it is, tokenizers.Tokenizer must agree with it."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    for line, ids in zip(record["lines"], record["with_special"]):
        assert raw.encode(line).ids == ids, (tok_dir, line)


def other_merge_form(data):
    merges = data["model"]["merges"]
    if merges and isinstance(merges[0], str):
        data["model"]["merges"] = [m.split(" ") for m in merges]
    else:
        data["model"]["merges"] = [" ".join(m) for m in merges]


def make_byte_level(out):
    """Llama 3 style: Split(Llama 3 regex) + ByteLevel, BOS template, header/turn special tokens.
    Granite style: GPT2Tokenizer class (ByteLevel with GPT-2's regex), no BOS."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    # Added tokens with the other flags: a plain (normalized) one and a special one with lstrip/rstrip.
    tok.add_tokens([AddedToken("<tool_call>", special=False)])
    tok.add_special_tokens([AddedToken("<|mask|>", lstrip=True, rstrip=True, special=True)])
    llama3_config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                     "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": True}
    test_specials = specials + ["<tool_call>", "<|mask|>"]
    lines = test_corpus(test_specials)
    names = []

    def variant(name, config, edit=None, raw_check=True):
        d = os.path.join(out, name)
        save_tokenizer_json(tok, d, edit)
        write_config(d, config)
        record = golden(d, lines)
        if raw_check:
            check_raw_file_matches(d, record)
        names.append(name)

    variant("bpe_llama3", llama3_config)
    variant("bpe_llama3_other_merge_form", llama3_config, other_merge_form)
    variant("bpe_llama3_ignore_merges", llama3_config, lambda d: d["model"].__setitem__("ignore_merges", True))

    # Qwen2 / Qwen3: NFC, Qwen's split regex, ByteLevel; transformers' Qwen2Tokenizer rebuilds
    # that pipeline from vocab and merges whatever tokenizer.json says.
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    qwen = Tokenizer(models.BPE())
    qwen.normalizer = normalizers.NFC()
    qwen.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    qwen.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=qwen_specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    qwen.train_from_iterator(training_corpus() + NFC_LINES * 20, trainer)
    qwen.post_processor = processors.ByteLevel(trim_offsets=False)
    qwen_config = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "unk_token": None, "add_prefix_space": False,
                   "added_tokens_decoder": {str(qwen.token_to_id(t)): {
                       "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                       "special": True} for t in qwen_specials}}
    qwen_lines = test_corpus(qwen_specials) + NFC_LINES
    for name, edit, raw_check in (
            ("bpe_qwen2", None, True),
            # a tokenizer.json whose own pipeline differs (Llama 3's digit groups, no NFC): the class wins
            ("bpe_qwen2_class_rebuilds", lambda d: (d.__setitem__("normalizer", None),
                                                    d["pre_tokenizer"]["pretokenizers"][0]["pattern"]
                                                    .__setitem__("Regex", LLAMA3_SPLIT)), False)):
        d = os.path.join(out, name)
        save_tokenizer_json(qwen, d, edit)
        write_config(d, qwen_config)
        record = golden(d, qwen_lines)
        assert record["tokenizer_class"] == "Qwen2Tokenizer", record["tokenizer_class"]
        if raw_check:
            check_raw_file_matches(d, record)
        names.append(name)

    granite = Tokenizer(models.BPE())
    granite.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    granite.decoder = decoders.ByteLevel()
    granite.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=["<|end_of_text|>", "<fim_prefix>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    granite.train_from_iterator(training_corpus(), trainer)
    d = os.path.join(out, "bpe_granite")

    def granite_digits(data):
        # Granite 3's tokenizer.json also splits digits; transformers' GPT2Tokenizer rebuilds the
        # pre-tokenizer as ByteLevel alone (so multi-digit tokens trained here do occur).
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, data["pre_tokenizer"]]}

    save_tokenizer_json(granite, d, granite_digits)
    write_config(d, {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|end_of_text|>",
                     "eos_token": "<|end_of_text|>", "pad_token": "<|end_of_text|>", "unk_token": "<|end_of_text|>",
                     "add_prefix_space": False})
    golden(d, test_corpus(["<|end_of_text|>", "<fim_prefix>"]))
    names.append("bpe_granite")
    return names


def make_byte_fallback(out):
    """Llama 2 / Mistral tokenizer.json: byte-fallback BPE over "▁"-joined text."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)  # training only
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))])

    # A plain added token that is matched in normalized text ("▁my▁token").
    from tokenizers import AddedToken
    tok.add_tokens([AddedToken("my token", normalized=True, special=False)])

    def bytes_in_vocab_only(data):
        # Llama 2 keeps <0xNN> in the model vocabulary, not as added tokens.
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in byte_tokens]

    def metaspace_form(data):
        bytes_in_vocab_only(data)
        data["normalizer"] = None
        data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}

    lines = test_corpus(["<s>", "</s>", "<unk>", "my token", "say my token now"])
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True} for t in ["<unk>", "<s>", "</s>"]}
    names = []
    for name, edit, config, raw_check in [
        ("bpe_byte_fallback", bytes_in_vocab_only,
         {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
         True),
        ("bpe_byte_fallback_metaspace", metaspace_form,
         {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "add_bos_token": True, "add_eos_token": True}, False),
        # Llama 2's own config: transformers rebuilds the pipeline as LlamaTokenizer (legacy=False).
        ("bpe_byte_fallback_llama_class", bytes_in_vocab_only,
         {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "add_bos_token": True, "add_eos_token": False, "legacy": False, "added_tokens_decoder": added}, False),
        # ... with legacy prefixing after special tokens, and with no prefix space at all.
        ("bpe_byte_fallback_llama_legacy", bytes_in_vocab_only,
         {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "legacy": True, "added_tokens_decoder": added}, False),
        ("bpe_byte_fallback_llama_no_prefix", bytes_in_vocab_only,
         {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "add_prefix_space": False}, False),
    ]:
        d = os.path.join(out, name)
        save_tokenizer_json(tok, d, edit)
        write_config(d, config)
        record = golden(d, lines)
        if raw_check:
            check_raw_file_matches(d, record)
        names.append(name)
    return names


def make_gemma(out):
    """Gemma 2 / 3's tokenizer as tokenizer.json describes it (byte-fallback BPE fusing
    unknowns, spaces replaced by U+2581, no prefix space, <bos> added by the post-processor),
    with the ids and turn markers of the real one; transformers' GemmaTokenizer rebuilds that
    pipeline from vocab and merges whatever the file's normalizer and pre-tokenizer say."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=2500, special_tokens=specials + byte_tokens, show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B:1", special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    config = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
              "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
              "added_tokens_decoder": {str(tok.token_to_id(t)): {
                  "content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                  "special": True} for t in specials}}
    lines = test_corpus(["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"]) + NFC_LINES

    def other_pipeline(data):  # NFKC and a whitespace split in the file: the class ignores them
        data["normalizer"] = {"type": "NFKC"}
        data["pre_tokenizer"] = {"type": "Whitespace"}

    names = []
    for name, edit in (("bpe_gemma", None), ("bpe_gemma_class_rebuilds", other_pipeline)):
        d = os.path.join(out, name)
        save_tokenizer_json(tok, d, edit)
        write_config(d, config)
        record = golden(d, lines)
        assert record["tokenizer_class"] == "GemmaTokenizer", record["tokenizer_class"]
        if edit is None:
            check_raw_file_matches(d, record)
        names.append(name)
    return names


def make_component_zoo(out):
    """Less common components and flags, each combination trained into a small BPE:
    Split behaviors and invert, Digits, Punctuation, Whitespace(Split), Metaspace split,
    ByteLevel with add_prefix_space and its regex, Strip / Replace normalizers,
    single_word and normalized added tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    P = pre_tokenizers
    zoo = {
        "zoo_metaspace_split": dict(
            normalizer=normalizers.Sequence([normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]),
            pre_tokenizer=P.Sequence([P.Digits(individual_digits=True), P.Punctuation(behavior="contiguous"),
                                      P.Metaspace(replacement="▁", prepend_scheme="always", split=True)]),
            decoder=decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True),
            model=dict(unk_token="<unk>", fuse_unk=True)),
        "zoo_split_behaviors": dict(
            normalizer=None,
            pre_tokenizer=P.Sequence([P.Split(Regex(r"\d+"), behavior="merged_with_previous"),
                                      P.Split(" ", behavior="merged_with_next"),
                                      P.Split(Regex(r"[,;]"), behavior="removed"),
                                      P.Split(Regex(r"[\p{L}\p{M}]+"), behavior="contiguous", invert=True),
                                      P.ByteLevel(add_prefix_space=True, use_regex=True)]),
            decoder=decoders.ByteLevel(), model={}),
        "zoo_whitespace": dict(
            normalizer=normalizers.Sequence([normalizers.Replace("\t", "    "), normalizers.Strip(left=True, right=False)]),
            pre_tokenizer=P.Sequence([P.Whitespace(), P.Digits(individual_digits=False)]),
            decoder=None, model=dict(unk_token="<unk>")),
        "zoo_whitespace_split": dict(
            normalizer=None, pre_tokenizer=P.Sequence([P.WhitespaceSplit(), P.ByteLevel(add_prefix_space=False)]),
            decoder=decoders.ByteLevel(), model={}),
    }
    lines = test_corpus(["<unk>", "[word]", "Zürich", "<sep>"])
    names = []
    for name, parts in zoo.items():
        tok = Tokenizer(models.BPE(**parts["model"]))
        if parts["normalizer"] is not None:
            tok.normalizer = parts["normalizer"]
        tok.pre_tokenizer = parts["pre_tokenizer"]
        if parts["decoder"] is not None:
            tok.decoder = parts["decoder"]
        alphabet = pre_tokenizers.ByteLevel.alphabet() if "ByteLevel" in str(parts["pre_tokenizer"]) else []
        limit = {} if alphabet else {"limit_alphabet": 150}  # a small alphabet leaves characters unknown
        trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", "<s>"], initial_alphabet=alphabet,
                                      show_progress=False, **limit)
        tok.train_from_iterator(training_corpus(), trainer)
        tok.add_tokens([AddedToken("[word]", single_word=True, normalized=True, special=False),
                        AddedToken("Zürich", normalized=True, special=False)])
        tok.add_special_tokens([AddedToken("<sep>", lstrip=True, special=True)])
        d = os.path.join(out, name)
        save_tokenizer_json(tok, d)
        write_config(d, {"tokenizer_class": "PreTrainedTokenizerFast"})
        record = golden(d, lines)
        check_raw_file_matches(d, record)
        names.append(name)
    return names


def make_nfc_cases(out, n=4000):
    """nfc_cases.json: random strings drawn from the characters NFC acts on (marks of every
    combining class, characters with canonical decompositions, Hangul jamo and syllables) and
    ordinary text, with their NFC from tokenizers' normalizer (checked against Python's unicodedata
    where both know the characters)."""
    import unicodedata
    from tokenizers import normalizers
    pool = [chr(c) for c in range(0x10000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")
            and (unicodedata.combining(chr(c)) or (unicodedata.decomposition(chr(c)) and
                                                     not unicodedata.decomposition(chr(c)).startswith("<")))]
    pool += [chr(c) for c in range(0x1100, 0x1200)] + [chr(c) for c in range(0xAC00, 0xAC00 + 600)]
    pool += list("abcdeiouAEIOU ナ日本 .,")
    rng = random.Random(11)
    nfc = normalizers.NFC()
    cases = []
    for _ in range(n):
        s = "".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        want = nfc.normalize_str(s)
        if want == unicodedata.normalize("NFC", s):  # skip characters the two Unicode versions see differently
            cases.append([s, want])
    with open(os.path.join(out, "nfc_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"unicode_version": unicodedata.unidata_version, "cases": cases}, f, ensure_ascii=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = make_sentencepiece(args.out) + make_byte_level(args.out) + make_byte_fallback(args.out)
    names += make_gemma(args.out) + make_component_zoo(args.out)
    make_nfc_cases(args.out)
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump({"tokenizers": names}, f, indent=1)
    print(f"wrote {len(names)} tokenizer fixtures to {args.out}")


if __name__ == "__main__":
    main()
