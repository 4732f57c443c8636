#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/seed-*) from
the test fixtures, shrunk to a few KB each, plus the inputs that crashed or
exhausted memory before issue 10 was fixed (regress-issue10-*).

The fixtures are what the test areas' make_fixtures.py write (real Hugging Face
tokenizers, checkpoints and data made live with transformers, tokenizers,
sentencepiece and safetensors); run the test suite once first, or:

    .venv/bin/python tests/models_io/make_fixtures.py --out build/fixtures/models_io
    .venv/bin/python tests/tokenizers/make_fixtures.py --out build/fixtures/tokenizers
    .venv/bin/python tests/data/make_fixtures.py --out build/fixtures/data
    .venv/bin/python tests/trainer/make_fixtures.py --out build/fixtures/trainer
    .venv/bin/python fuzz/make_corpus.py --fixtures build/fixtures

Existing seed-* files are replaced; regress-* files found by fuzzing (committed
by hand, see README.md) are left alone. The output is deterministic.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEED_BYTES = 8192


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class Corpus:
    def __init__(self, out):
        self.out = out
        self.written = {}

    def reset(self, target):
        folder = os.path.join(self.out, target)
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):
            if name.startswith("seed-") or name.startswith("regress-issue10-"):
                os.remove(os.path.join(folder, name))
        self.written[target] = set()

    def add(self, target, name, data, prefix="seed-", limit=MAX_SEED_BYTES):
        if isinstance(data, str):
            data = data.encode("utf-8")
        if prefix == "seed-" and len(data) > limit:
            return
        digest = hashlib.sha1(data).hexdigest()
        if digest in self.written[target]:
            return
        self.written[target].add(digest)
        with open(os.path.join(self.out, target, prefix + name), "wb") as f:
            f.write(data)


def fixture_dirs(root):
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))) if os.path.isdir(root) else []


# ---- config_json ------------------------------------------------------------

def config_json(corpus, fixtures):
    corpus.reset("config_json")
    models_io = os.path.join(fixtures, "models_io")
    for name in fixture_dirs(models_io):
        path = os.path.join(models_io, name, "config.json")
        if os.path.isfile(path):
            with open(path, "rb") as f:
                corpus.add("config_json", name + ".json", f.read())
    deep = 20000
    corpus.add("config_json", "deep-nesting.json",
               '{"architectures":["LlamaForCausalLM"],"vocab_size":' + "[" * deep + "]" * deep + "}",
               prefix="regress-issue10-")


# ---- safetensors_header -----------------------------------------------------

def safetensors_bytes(header, data=b""):
    text = compact(header).encode("utf-8")
    return struct.pack("<Q", len(text)) + text + data


def safetensors_header(corpus, fixtures):
    import torch
    from safetensors.torch import load_file, save

    corpus.reset("safetensors_header")
    models_io = os.path.join(fixtures, "models_io")
    for name in fixture_dirs(models_io):
        for file in sorted(os.listdir(os.path.join(models_io, name))):
            if not file.endswith(".safetensors") or "weights_f64" in file:
                continue
            path = os.path.join(models_io, name, file)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                metadata = json.loads(f.read(n)).get("__metadata__")
            # Every tensor cut to at most 2 entries per dimension, names, dtypes and metadata kept.
            small = {k: v[tuple(slice(0, 2) for _ in v.shape)].contiguous() for k, v in load_file(path).items()}
            corpus.add("safetensors_header", name + "-" + file, save(small, metadata=metadata))
    # Every dtype, a scalar, an empty tensor, no metadata.
    dtypes = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2]
    tensors = {str(d).replace("torch.", ""): torch.arange(6).reshape(2, 3).to(d) for d in dtypes}
    tensors["scalar"] = torch.tensor(1.5)
    tensors["empty"] = torch.zeros(0, 4)
    corpus.add("safetensors_header", "dtypes.safetensors", save(tensors))
    corpus.add("safetensors_header", "metadata-only.safetensors", save({}, metadata={"format": "pt"}))

    deep = 20000
    deep_header = ('{"__metadata__":' + "[" * deep + "]" * deep + "}").encode()
    corpus.add("safetensors_header", "deep-nesting.safetensors", struct.pack("<Q", len(deep_header)) + deep_header,
               prefix="regress-issue10-")
    # Shape [2^31, 2^31] of F32 needs 2^64 bytes: the size once wrapped to 0 and matched empty offsets.
    corpus.add("safetensors_header", "size-overflow.safetensors",
               safetensors_bytes({"w": {"dtype": "F32", "shape": [2**31, 2**31], "data_offsets": [0, 0]}}),
               prefix="regress-issue10-")
    corpus.add("safetensors_header", "dimension-2pow64-minus-1.safetensors",
               safetensors_bytes({"w": {"dtype": "F32", "shape": [2**64 - 1, 0], "data_offsets": [0, 0]}}),
               prefix="regress-issue10-")


# ---- tokenizer_json ---------------------------------------------------------

def shrink_tokenizer_json(doc, keep_ids=300, keep_merges=200):
    """The first `keep_ids` vocabulary entries and the merges among them; added
    tokens renumbered right after them (ids stay dense, as in real files).
    Returns the shrunk document and the map of renumbered ids."""
    model = doc.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        kept = {t: i for t, i in vocab.items() if isinstance(i, int) and i < keep_ids}
        merges = []
        for m in model.get("merges") or []:
            left, right = m.split(" ", 1) if isinstance(m, str) else m
            if left in kept and right in kept and left + right in kept:
                merges.append(m)
            if len(merges) >= keep_merges:
                break
        model["vocab"] = kept
        model["merges"] = merges
    renumbered = {}
    for t in doc.get("added_tokens") or []:
        if t["id"] >= keep_ids:
            renumbered[t["id"]] = keep_ids + len(renumbered)
            t["id"] = renumbered[t["id"]]
    for special in ((doc.get("post_processor") or {}).get("special_tokens") or {}).values():
        special["ids"] = [renumbered.get(i, i) for i in special.get("ids", [])]
    return doc, renumbered


def tokenizer_json(corpus, fixtures):
    corpus.reset("tokenizer_json")
    for area in ("tokenizers", "data", "trainer"):
        root = os.path.join(fixtures, area)
        for name in fixture_dirs(root):
            folder = os.path.join(root, name)
            path = os.path.join(folder, "tokenizer.json")
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8") as f:
                doc, renumbered = shrink_tokenizer_json(json.load(f))
            text = compact(doc)
            for extra in ("tokenizer_config.json", "special_tokens_map.json"):
                extra_path = os.path.join(folder, extra)
                if os.path.isfile(extra_path):
                    with open(extra_path, encoding="utf-8") as f:
                        cfg = json.load(f)
                    cfg.pop("chat_template", None)
                    if isinstance(cfg.get("added_tokens_decoder"), dict):
                        cfg["added_tokens_decoder"] = {str(renumbered.get(int(k), int(k))): v
                                                       for k, v in cfg["added_tokens_decoder"].items()}
                    text += "\n#file:" + extra + "\n" + compact(cfg)
            corpus.add("tokenizer_json", area + "-" + name + ".txt", text)

    deep = 20000
    corpus.add("tokenizer_json", "deep-nesting.txt",
               '{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"x":' + "[" * deep + "]" * deep + "}",
               prefix="regress-issue10-")
    # An id near 2^30 once resized the vocabulary to 2^30 strings (32 GB).
    corpus.add("tokenizer_json", "huge-id.txt",
               '{"model":{"type":"BPE","vocab":{"a":0,"b":1073741824},"merges":[]}}', prefix="regress-issue10-")
    corpus.add("tokenizer_json", "huge-added-id.txt",
               '{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},'
               '"added_tokens":[{"id":1073741800,"content":"<s>","special":true}]}', prefix="regress-issue10-")
    corpus.add("tokenizer_json", "type-error.txt",
               '{"model":{"type":"BPE","vocab":{"a":0,"abc":"x"},"merges":[]}}'
               '\n#file:tokenizer_config.json\n{"add_bos_token":"yes"}', prefix="regress-issue10-")


# ---- sentencepiece_model ----------------------------------------------------

def shrink_sentencepiece(data, keep_normal=60):
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(data)
    pieces = list(m.pieces)
    del m.pieces[:]
    normal = 0
    for p in pieces:
        if p.type == pb.ModelProto.SentencePiece.NORMAL:
            if normal >= keep_normal:
                continue
            normal += 1
        m.pieces.append(p)
    m.normalizer_spec.precompiled_charsmap = b""
    m.denormalizer_spec.precompiled_charsmap = b""
    if "self_test_data" in m.DESCRIPTOR.fields_by_name:
        m.ClearField("self_test_data")
    m.trainer_spec.ClearField("input")
    m.trainer_spec.ClearField("model_prefix")
    return m.SerializeToString()


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def sentencepiece_model(corpus, fixtures):
    corpus.reset("sentencepiece_model")
    seen = 0
    for area in ("tokenizers", "data", "trainer"):
        root = os.path.join(fixtures, area)
        for name in fixture_dirs(root):
            path = os.path.join(root, name, "tokenizer.model")
            if not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                corpus.add("sentencepiece_model", area + "-" + name + ".model", shrink_sentencepiece(f.read()))
                seen += 1
    # A piece length that wraps the read position around once grew the rewritten model to 17 GB.
    piece = b"\x0a\x03\x0a\x01a"
    corpus.add("sentencepiece_model", "wrapping-length.model", piece + b"\x0a" + varint(2**64 - 1) + b"abc",
               prefix="regress-issue10-")
    corpus.add("sentencepiece_model", "length-past-end.model", b"\x12" + varint(2**62) + b"abc",
               prefix="regress-issue10-")


# ---- jsonl_line ---------------------------------------------------------------

def jsonl_line(corpus, fixtures):
    corpus.reset("jsonl_line")
    for area in ("data", "trainer"):
        root = os.path.join(fixtures, area)
        if not os.path.isdir(root):
            continue
        for file in sorted(os.listdir(root)):
            if not file.endswith(".jsonl"):
                continue
            with open(os.path.join(root, file), "rb") as f:
                lines = [l.rstrip(b"\n") for l in f if l.strip()]
            # The shortest few lines of each file (every format the fixtures hold).
            for i, line in enumerate(sorted(lines, key=len)[:3]):
                corpus.add("jsonl_line", "%s-%s-%d.json" % (area, file[:-6], i), line)
    deep = 20000
    corpus.add("jsonl_line", "deep-nesting.json",
               '{"prompt":"q","completion":' + "[" * deep + "]" * deep + "}", prefix="regress-issue10-")


# ---- yaml_config --------------------------------------------------------------

def yaml_config(corpus, fixtures):
    corpus.reset("yaml_config")
    configs = os.path.join(ROOT, "configs")
    for file in sorted(os.listdir(configs)):
        if file.endswith(".yaml"):
            with open(os.path.join(configs, file), "rb") as f:
                corpus.add("yaml_config", file, f.read())
    deep = 20000
    corpus.add("yaml_config", "deep-nesting.yaml", "model: " + "[" * deep + "]" * deep + "\n",
               prefix="regress-issue10-")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixtures", default=os.path.join(ROOT, "build", "fixtures"))
    parser.add_argument("--out", default=os.path.join(ROOT, "fuzz", "corpus"))
    args = parser.parse_args()
    corpus = Corpus(args.out)
    for make in (config_json, safetensors_header, tokenizer_json, sentencepiece_model, jsonl_line, yaml_config):
        make(corpus, args.fixtures)
    for target in sorted(corpus.written):
        print("%-20s %d files" % (target, len(corpus.written[target])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
