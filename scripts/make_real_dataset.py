#!/usr/bin/env python3
"""Instruction data from real text: the documentation of the Python functions and
classes of an installed package (by default torch, which every fptrain environment
pins to one version), read from the sources with `ast` (nothing is imported or run).

    scripts/make_real_dataset.py --out docs-train.jsonl --eval-out docs-eval.jsonl
    scripts/make_real_dataset.py --packages torch,numpy --seed 1 --format prompt_completion ...

Each documented public function, method or class (and each `add_docstr(torch.x, "...")`
of torch's C functions) gives --tasks-per-name examples (default 2), each a different one
of four tasks chosen by the seed:

  explain    "Explain what the Python function `torch.nn.functional.relu(input, inplace=False)`
             does." -> its whole docstring
  summarize  "Summarize in one paragraph what `...` does." -> the docstring's first paragraph
  document   "Write the docstring for this Python function:\\n\\ndef relu(input, inplace=False): ..."
             -> the whole docstring
  identify   "Which function of the `torch` package does this describe?\\n\\n<first paragraph>"
             -> "`torch.nn.functional.relu(input, inplace=False)`"

so the responses are English prose and reStructuredText with code, formulas and
cross-references, the prompts short (explain, summarize, document) or long (identify).
Docstrings under 120 characters are skipped, longer than 6000 cut at a paragraph
break; names already seen are skipped (the first definition in file order wins).

Determinism: the same package versions (recorded in the --stats file) give the same
examples for a seed. The held-out split does not depend on the seed: an example
is in the evaluation set when the first 8 hex digits of sha1(its name) modulo 100
fall below --eval-percent (default 5), so no function is in both sets whatever
the seed; the seed shuffles the training order and picks each example's task.

Lengths, torch 2.11.0 (2026-11-26, the defaults: 2 tasks per name, 5% held out): 9,718
training and 552 held-out examples from 5,135 documented names; per example (prompt and
response) a median of 41 words (336 characters), p10 19, p90 148, mean 70, max 881 words
(7,500 characters): short documents with a long tail, as instruction data is. --stats
writes these counts (characters and words, per split and task) with the package versions.
"""
import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import random
import sys

MIN_DOC_CHARS = 120
MAX_DOC_CHARS = 6000
TASKS = ("explain", "summarize", "document", "identify")


def package_root(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"make_real_dataset.py: package '{name}' is not installed for {sys.executable}")
    return list(spec.submodule_search_locations)[0]


def python_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("__pycache__", "test", "tests", "testing"))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def module_name(package, root, path):
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    rel = rel[: -len(".__init__")] if rel.endswith("__init__") else rel
    return package if rel in ("__init__", "") else f"{package}.{rel}"


def clean(doc):
    doc = inspect.cleandoc(doc).strip()
    if len(doc) > MAX_DOC_CHARS:  # cut at the last paragraph break before the limit
        cut = doc.rfind("\n\n", 0, MAX_DOC_CHARS)
        doc = doc[: cut if cut > MAX_DOC_CHARS // 2 else MAX_DOC_CHARS].rstrip()
    return doc


def signature(node):
    if isinstance(node, ast.ClassDef):
        return ""
    try:
        return "(" + ast.unparse(node.args) + ")"
    except Exception:  # noqa: BLE001 - an odd construct: the name alone
        return "()"


def string_of(node):
    """A docstring argument: a constant, or the template of "...".format(...)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return string_of(node.func.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_of(node.left), string_of(node.right)
        return left + right if left is not None and right is not None else None
    return None


def entries(tree, module):
    """(name, kind, signature, source line of the definition, docstring) of the public definitions."""
    def walk(body, prefix, in_class):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_"):
                    continue
                name = f"{prefix}.{node.name}"
                doc = ast.get_docstring(node, clean=False)
                kind = "class" if isinstance(node, ast.ClassDef) else ("method" if in_class else "function")
                if doc:
                    header = f"{'class' if kind == 'class' else 'def'} {node.name}{signature(node)}"
                    yield name, kind, signature(node), header, doc
                if isinstance(node, ast.ClassDef):
                    yield from walk(node.body, name, True)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                call = node.value  # add_docstr(torch.abs, r"""...""")
                fn = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                if fn == "add_docstr" and len(call.args) >= 2:
                    doc = string_of(call.args[1])
                    target = ast.unparse(call.args[0])
                    if doc and not target.split(".")[-1].startswith("_"):
                        yield target, "function", "", f"def {target.split('.')[-1]}(...)", doc
    yield from walk(tree.body, module, False)


def collect(packages):
    seen, out = set(), []
    for package in packages:
        root = package_root(package)
        for path in python_files(root):
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), filename=path)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for name, kind, sig, header, doc in entries(tree, module_name(package, root, path)):
                doc = clean(doc)
                if len(doc) < MIN_DOC_CHARS or name in seen:
                    continue
                seen.add(name)
                out.append({"name": name, "kind": kind, "signature": sig, "header": header, "doc": doc,
                            "package": package})
    return out


def first_paragraph(doc):
    return doc.split("\n\n", 1)[0].strip()


def make_example(entry, task):
    what = {"class": "class", "method": "method", "function": "function"}[entry["kind"]]
    full = f"`{entry['name']}{entry['signature']}`"
    if task == "explain":
        return f"Explain what the Python {what} {full} does.", entry["doc"]
    if task == "summarize":
        return f"Summarize in one paragraph what the Python {what} {full} does.", first_paragraph(entry["doc"])
    if task == "document":
        return (f"Write the docstring for this Python {what} of the `{entry['package']}` package:\n\n"
                f"{entry['header']}: ...", entry["doc"])
    return (f"Which {what} of the `{entry['package']}` package does this describe?\n\n"
            f"{first_paragraph(entry['doc'])}", full)


def to_record(fmt, prompt, response):
    if fmt == "messages":
        return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]}
    if fmt == "alpaca":
        return {"instruction": prompt, "input": "", "output": response}
    return {"prompt": prompt, "completion": response}


def held_out(name, percent):
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 100 < percent


def describe(lengths):
    if not lengths:
        return {"examples": 0}
    s = sorted(lengths)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"examples": len(s), "median": pick(0.5), "p10": pick(0.1), "p90": pick(0.9), "max": s[-1],
            "mean": round(sum(s) / len(s), 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="training JSONL")
    ap.add_argument("--eval-out", help="held-out JSONL (default: <out> with -eval before .jsonl)")
    ap.add_argument("--packages", default="torch", help="comma-separated installed packages to read")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-percent", type=int, default=5)
    ap.add_argument("--examples", type=int, default=0, help="at most this many training examples (0: all)")
    ap.add_argument("--tasks-per-name", type=int, default=2, choices=range(1, len(TASKS) + 1),
                    help="examples (different tasks) per documented name")
    ap.add_argument("--format", choices=["messages", "prompt_completion", "alpaca"], default="messages")
    ap.add_argument("--stats", help="JSON file: the package versions, the length statistics and each split's names")
    a = ap.parse_args()
    packages = [p for p in a.packages.split(",") if p]
    eval_out = a.eval_out or (a.out[:-6] if a.out.endswith(".jsonl") else a.out) + "-eval.jsonl"
    for path in (a.out, eval_out):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    rng = random.Random(a.seed)
    found = collect(packages)
    pairs = [(e, task) for e in found for task in rng.sample(TASKS, a.tasks_per_name)]
    train = [p for p in pairs if not held_out(p[0]["name"], a.eval_percent)]
    held = [p for p in pairs if held_out(p[0]["name"], a.eval_percent)]
    rng.shuffle(train)
    if a.examples:
        train = train[: a.examples]
    stats = {"packages": {p: importlib.metadata.version(p) for p in packages}, "seed": a.seed,
             "eval_percent": a.eval_percent}
    for split, rows, path in (("train", train, a.out), ("eval", held, eval_out)):
        chars, words, tasks = [], [], {}
        with open(path, "w", encoding="utf-8") as f:
            for e, task in rows:
                prompt, response = make_example(e, task)
                f.write(json.dumps(to_record(a.format, prompt, response), ensure_ascii=False) + "\n")
                chars.append(len(prompt) + len(response))
                words.append(len(prompt.split()) + len(response.split()))
                tasks[task] = tasks.get(task, 0) + 1
        stats[split] = {"path": path, "characters": describe(chars), "words": describe(words), "tasks": tasks,
                        "names": sorted({e["name"] for e, _ in rows})}
    if a.stats:
        with open(a.stats, "w") as f:
            json.dump(stats, f, indent=2)
    w = stats["train"]["words"]
    print(f"wrote {len(train)} training examples to {a.out} and {len(held)} held-out to {eval_out} "
          f"from {', '.join(f'{p} {v}' for p, v in stats['packages'].items())}; words per example: "
          f"median {w.get('median')}, p90 {w.get('p90')}, max {w.get('max')}")


if __name__ == "__main__":
    main()
