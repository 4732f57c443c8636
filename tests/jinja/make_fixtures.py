#!/usr/bin/env python3
"""Golden outputs for the Jinja interpreter tests, rendered live by Python's
jinja2 through transformers' own compile function (the environment that
apply_chat_template uses: ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, {% generation %}, its tojson, raise_exception
and strftime_now), with strftime_now pinned to a fixed date.

Writes into --out:
  cases.json  {"now": {...struct tm fields...},
               "cases": [{"group", "name", "template", "context",
                          "expect": "text" | "compile_error" | "render_error",
                          "text", "message",
                          "generation": [[begin, end], ...],
                          "chat_input": {...} (chat cases: the arguments of jinja::chat_context)}]}
Groups: "feature" (feature_cases.py), "whitespace" and "random"
(template_generator.py), "chat" (chat_templates.py, the chat templates found
in the installed transformers sources and in tests/data/make_fixtures.py,
each with many conversations). "generation" holds the ranges transformers'
return_assistant_tokens_mask reports, converted from characters to UTF-8
bytes (the ranges the C++ interpreter reports).
"""
import argparse
import ast
import datetime
import json
import os
import sys
import warnings

import jinja2
from transformers.utils.chat_template_utils import (
    _alias_reasoning_fields,
    _compile_jinja_template,
    _plain_template_data,
)

# jinja2 compiles templates to Python; odd generated expressions make Python warn.
warnings.filterwarnings("ignore", category=SyntaxWarning)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import chat_templates  # noqa: E402
import feature_cases  # noqa: E402
import template_generator  # noqa: E402

FIXED_NOW = datetime.datetime(2024, 7, 26, 13, 45, 9)
RANDOM_TEMPLATES = 400


def tracker_of(compiled):
    for ext in compiled.environment.extensions.values():
        if type(ext).__name__ == "AssistantTracker":
            return ext
    raise RuntimeError("transformers' AssistantTracker extension not found")


def prepare(compiled):
    """Pins strftime_now, and records each generation block's byte range next to
    the character range transformers records."""
    if getattr(compiled, "_fixture_ready", False):
        return
    compiled.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    tracker = tracker_of(compiled)
    original = tracker._generation_support

    @jinja2.pass_eval_context
    def support(eval_ctx, caller):
        rv = original(eval_ctx, caller)
        prefix = "".join(tracker._rendered_blocks).encode("utf-8")
        tracker._fixture_bytes.append([len(prefix), len(prefix) + len(rv.encode("utf-8"))])
        return rv

    tracker._generation_support = support
    compiled._fixture_ready = True


def render(source, context):
    """(expect, text, message, generation byte ranges), as apply_chat_template renders."""
    try:
        compiled = _compile_jinja_template(source)
    except Exception as e:  # noqa: BLE001 - any failure to compile is the expected outcome
        return "compile_error", "", f"{type(e).__name__}: {e}", []
    prepare(compiled)
    tracker = tracker_of(compiled)
    tracker._fixture_bytes = []
    blocks, indices = [], []
    try:
        with compiled.environment.activate_tracker(blocks, indices):
            for block in compiled.generate(**context):
                blocks.append(block)
    except Exception as e:  # noqa: BLE001
        return "render_error", "", f"{type(e).__name__}: {e}", []
    text = "".join(blocks)
    ranges = tracker._fixture_bytes
    # Our byte ranges describe the same spans as transformers' character ranges.
    assert len(ranges) == len(indices), (ranges, indices)
    for (b, e), (cb, ce) in zip(ranges, indices):
        assert b == len(text[:cb].encode("utf-8")), (source, b, cb)
    return "text", text, "", ranges


def case(group, name, source, context):
    context = json.loads(json.dumps(context, ensure_ascii=False))  # exactly what the C++ side reads
    expect, text, message, generation = render(source, context)
    return {"group": group, "name": name, "template": source, "context": context, "expect": expect,
            "text": text, "message": message, "generation": generation}


def chat_context(messages, add_generation_prompt, extra):
    # What render_jinja_template passes: plain data, reasoning fields aliased,
    # tools/documents always present, then the tokenizer's special tokens and kwargs.
    context = {
        "messages": _alias_reasoning_fields(_plain_template_data(messages)),
        "tools": None,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
    }
    for key, value in extra.items():
        context[key] = _plain_template_data(value)
    return context


def docstring_ids(tree):
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def installed_chat_templates():
    """Chat templates shipped as string constants in the installed transformers."""
    import transformers

    root = os.path.dirname(transformers.__file__)
    found = {}
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            with open(path, encoding="utf-8") as fh:
                src = fh.read()
            if "{%" not in src or "messages" not in src:
                continue
            tree = ast.parse(src)
            skip = docstring_ids(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                        and "{%" in node.value and "for message in messages" in node.value):
                    rel = os.path.relpath(path, root).replace(os.sep, "/")
                    found[f"transformers/{rel}:{node.lineno}"] = node.value
    return found


def data_area_templates():
    """The Llama 3 / Llama 2 / Mistral / Granite 3 templates of the data tests (with {% generation %})."""
    path = os.path.join(HERE, "..", "data", "make_fixtures.py")
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, str) and "{%" in value and "messages" in value:
                out[f"tests/data:{node.targets[0].id}"] = value
    return out


def feature_cases_all():
    out = [case("feature", name, src, feature_cases.FEATURE_CONTEXT) for name, src in feature_cases.FEATURES]
    out += [case("feature", name, src, ctx) for name, src, ctx in feature_cases.SPECIAL]
    return out


def chat_cases():
    templates = dict(chat_templates.TEMPLATES)
    templates.update(installed_chat_templates())
    templates.update(data_area_templates())
    out = []
    for tname, source in templates.items():
        for variant_index, extra in enumerate(chat_templates.VARIANTS.get(tname, [{}])):
            for cname, messages in chat_templates.CONVERSATIONS.items():
                for agp in (False, True):
                    name = f"{tname}/v{variant_index}/{cname}/agp={int(agp)}"
                    c = case("chat", name, source, chat_context(messages, agp, extra))
                    # What a caller of jinja::chat_context passes, to check it builds the same variables.
                    rest = {k: v for k, v in extra.items() if k not in ("tools", "documents")}
                    c["chat_input"] = json.loads(json.dumps({
                        "messages": messages, "add_generation_prompt": agp, "tools": extra.get("tools"),
                        "documents": extra.get("documents"),
                        "extra": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", **rest}}, ensure_ascii=False))
                    out.append(c)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    cases = feature_cases_all()
    for i, src in enumerate(template_generator.whitespace_templates()):
        cases.append(case("whitespace", f"ws{i}", src, {}))
    for i, src in enumerate(template_generator.random_templates(RANDOM_TEMPLATES)):
        cases.append(case("random", f"random{i}", src, template_generator.CONTEXT))
    cases += chat_cases()

    tt = FIXED_NOW.timetuple()
    now = {"year": tt.tm_year - 1900, "mon": tt.tm_mon - 1, "mday": tt.tm_mday, "hour": tt.tm_hour,
           "min": tt.tm_min, "sec": tt.tm_sec, "wday": (tt.tm_wday + 1) % 7, "yday": tt.tm_yday - 1}
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"now": now, "cases": cases}, f, ensure_ascii=False, indent=0)
    counts = {}
    for c in cases:
        key = (c["group"], c["expect"])
        counts[key] = counts.get(key, 0) + 1
    print(f"wrote {len(cases)} cases to {args.out}/cases.json: "
          + ", ".join(f"{g}/{e}={n}" for (g, e), n in sorted(counts.items())))


if __name__ == "__main__":
    main()
