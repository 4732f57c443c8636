"""Goldens for the chat-template parity test (tests/data/chat_parity_test.cpp).

Proves that fptrain trains on exactly the text the model expects: for many
templates x tokenizers x conversations, transformers' apply_chat_template
(run here, live) gives the rendered text, the token ids and, for templates
with {% generation %} blocks, the assistant mask; the C++ test runs the same
conversations through fptrain's real path (a JSONL file, DataOptions pointing
at a tokenizer folder that holds the template, ExampleSource::process) and
must agree.

The templates:
  mc_*      what the mistral-common package generates for Mistral's tokenizer
            versions (v1 ... v15, SentencePiece and Tekken flavours) - the
            templates transformers attaches to Mistral tokenizers it converts;
  fam_*     tests/jinja/chat_templates.py's templates in each family's style
            (Llama 3.1, Qwen 2.5, Qwen 3, Mistral v3, Gemma, Gemma 3, Phi-3,
            Granite 3, Zephyr, generation-block ones);
  shipped_* data/chat_templates/*.jinja (also run with the named option);
  named_tool_use
            a tokenizer with a "default" and a "tool_use" template.

Each is paired with tokenizers that know its control tokens: variants of the
byte-level BPE (tok_llama3) and SentencePiece BPE (tok_mistral) tokenizers that
make_fixtures.py trains, saved by transformers with the extra special tokens
and the template; SentencePiece ones also as tokenizer.model + config only.

Without {% generation %} transformers gives no mask, so the golden holds what
data/chat_template.h's provenance rule must supervise, located independently
of our provenance tracking: each message's content is found by rendering the
conversation again with that content replaced by a unique marker (the text
before and after the marker must frame the content in the real rendering);
the supervised text is each assistant content as placed, plus the blank text
and first special token that follow it (its end of turn) when no other
message's content comes first, plus the template's spaces right before it when
the tokenizer spells a space as the next word's "\u2581" (SentencePiece).

For mistral-common's v1/v2/v3/v7 SentencePiece and v3/v7 Tekken templates the
goldens also hold transformers' own assistant mask (return_assistant_tokens_mask)
from a copy of the template with {% generation %} blocks around what it renders
for a reply (the space before it, the content, the eos), where that copy renders
the same text: fptrain's provenance mask must equal it token for token.

strftime_now is fixed to DATE (fptrain: FPTRAIN_CHAT_TEMPLATE_DATE).
"""
import copy
import datetime as _datetime
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "jinja"))
import chat_templates as fam  # noqa: E402  (tests/jinja/chat_templates.py)

DATE = "2025-02-03"  # strftime_now's date on both sides (midnight)
MARKER = "QZXMARKER{}XZQ"  # letters and digits only: survives trim, tojson, ...

_SHIPPED_DIR = os.path.join(HERE, "..", "..", "data", "chat_templates")

# ---- conversations --------------------------------------------------------

TOOL_CALL_2 = {"id": "xyz987uvw", "type": "function",
               "function": {"name": "noop", "arguments": "{\"x\": 1}"}}

EXTRA_CONVERSATIONS = {
    "rtl": [
        {"role": "user", "content": "مرحبا، كيف حالك؟ שלום עולם"},
        {"role": "assistant", "content": "أنا بخير، شكرا! תודה רבה ‏(RTL)‏"},
    ],
    "cjk_emoji": [
        {"role": "system", "content": "用中文回答。"},
        {"role": "user", "content": "東京の天気は？ 🌧️☔"},
        {"role": "assistant", "content": "今日は雨です 🌂。서울은 맑음 ☀️ — 北京多云。"},
    ],
    "whitespace_heavy": [
        {"role": "user", "content": "\n\n\t  lots   of\twhite   space \r\n\r\n"},
        {"role": "assistant", "content": "\n  leading newline and  double  spaces\n\n\t"},
        {"role": "user", "content": "   "},
        {"role": "assistant", "content": "  \t tab-led answer\n"},
    ],
    "whitespace_only_answer": [
        {"role": "user", "content": "Say nothing."},
        {"role": "assistant", "content": "   \n"},
    ],
    "long_multiturn": [
        x for i in range(6) for x in (
            {"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
            {"role": "assistant", "content": f"{i} + {i} = {2 * i}."})
    ],
    "system_then_assistant": [
        {"role": "system", "content": "Be terse."},
        {"role": "assistant", "content": "Ready."},
        {"role": "user", "content": "Go."},
    ],
    "middle_system": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": "Switch to French."},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Au revoir"},
    ],
    "two_tool_calls": [
        {"role": "user", "content": "Weather in Paris, then nothing."},
        {"role": "assistant", "content": "", "tool_calls": [fam.TOOL_CALL, TOOL_CALL_2]},
        {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather", "content": "22"},
        {"role": "tool", "tool_call_id": "xyz987uvw", "name": "noop", "content": "3.5"},
        {"role": "assistant", "content": "Done: 22 °C."},
    ],
    "tool_call_null_content": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [fam.TOOL_CALL]},
        {"role": "tool", "tool_call_id": "abc123def", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ],
    "reasoning_last": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Add two and two.\n"},
    ],
    # issue 26's example: with Mistral's SentencePiece the space after [/INST] is a token of its own
    "cjk_reply": [
        {"role": "user", "content": "你喜欢什么？"},
        {"role": "assistant", "content": "我也喜欢！日本語も少し。"},
    ],
    "control_text_in_content": [
        {"role": "user", "content": "What does </s> or [/INST] or <|im_end|> mean?"},
        {"role": "assistant", "content": "They end turns: </s> [INST] <end_of_turn> <|end|>."},
    ],
    "assistant_first": [
        {"role": "assistant", "content": "I speak first."},
        {"role": "user", "content": "ok"},
    ],
}

CONVERSATIONS = {**fam.CONVERSATIONS, **EXTRA_CONVERSATIONS}
TOOL_CONVERSATIONS = ("simple", "system", "tools", "two_tool_calls", "tool_call_null_content", "multiturn")
DOCUMENT_CONVERSATIONS = ("simple", "system", "unicode", "tools")

# ---- templates ---------------------------------------------------------------

BL, SP = "bl", "sp"  # the byte-level BPE and SentencePiece base tokenizers
# Mistral's own SentencePiece models that mistral-common ships (v1: [INST] as text; v3: control tokens).
REAL_MODELS = {"real_v1": "tokenizer.model.v1", "real_v3": "mistral_instruct_tokenizer_240323.model.v3"}
MISTRAL_CONTROL = re.compile(r"\[/?[A-Z][A-Z_]*\]")


def _shipped(name):
    with open(os.path.join(_SHIPPED_DIR, name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def _spec(name, source, bases, specials=(), bos=None, eos=None, plain=(), named=None, origin="", reference=None):
    return {"name": name, "source": source, "bases": bases, "specials": list(specials), "bos": bos, "eos": eos,
            "plain": list(plain), "named": named, "origin": origin, "reference": reference}


def _generation(statement):
    return "{%- generation %}" + statement + "{%- endgeneration %}"


def with_reply_blocks(source):
    """mistral-common's template with {% generation %} around what it renders for a reply: the
    assistant branch up to and including the eos (one block, so that its end is the eos and not a
    character the tokenizer splits into byte tokens), and in v1 the space after [/INST] that the
    user branch writes. None when the template does not have the expected shape. The block also
    holds tool calls, which the provenance rule does not train: compare conversations without them."""
    branch = "{%- elif message['role'] == 'assistant' %}"
    if source.count(branch) != 1:
        return None
    begin = source.index(branch) + len(branch)
    m = re.compile(r"\{\{- eos_token ?\}\}").search(source, begin)
    if not m:
        return None
    from transformers.utils.chat_template_utils import _compile_jinja_template
    content_branch = "{%- if message['content'] %}"  # v2 writes the eos inside it
    starts = [begin] + ([source.index(content_branch, begin) + len(content_branch)]
                        if content_branch in source[begin:m.start()] else [])
    for start in starts:
        head, region, tail = source[:start], source[start:m.end()], source[m.end():]
        v1_space = '{{- " " }}'
        if head.count(v1_space) == 1:  # v1 writes the space after [/INST] in the user branch
            head = head.replace(v1_space, _generation(v1_space))
        wrapped = head + _generation(region) + tail
        try:
            _compile_jinja_template(wrapped)  # the block nests (the eos is not inside an if it opens)
            return wrapped
        except Exception:
            continue
    return None


def mistral_common_specs():
    """The templates mistral-common generates per tokenizer version; [] when it is not installed."""
    try:
        import mistral_common
        from mistral_common.integrations.chat_templates.chat_templates import generate_chat_template
        from mistral_common.tokens.tokenizers.base import TokenizerVersion as V
    except ImportError:
        return [], None
    out = []
    # (version, spm, thinking via [THINK] tokens, plain <think> thinking, reasoning-effort settings)
    configs = [(V.v1, True, False, False, False), (V.v2, True, False, False, False),
               (V.v3, True, False, False, False), (V.v3, False, False, False, False),
               (V.v7, True, False, False, False), (V.v7, False, False, False, False),
               (V.v11, False, False, True, False), (V.v13, False, True, False, False),
               (V.v15, False, True, False, True)]
    for version, spm, thinking, plain_thinking, effort in configs:
        source = generate_chat_template(
            spm=spm, tokenizer_version=version, image_support=False, audio_support=False,
            thinking_support=thinking, default_system_prompt=None, plain_thinking_support=plain_thinking,
            use_special_token_variables=True, model_settings_fields=None,
            reasoning_effort_values=("none", "high") if effort else None,
            reasoning_effort_default="none" if effort else None)
        # v1 SentencePiece tokenizers spell [INST] as text; later ones have control tokens.
        specials = [] if version == V.v1 else sorted(set(MISTRAL_CONTROL.findall(source)))
        flavour = "spm" if spm else "tekken"
        plain_replies = not (thinking or plain_thinking or effort)
        bases = [BL] if not spm else [SP] + [b for b in REAL_MODELS if b == "real_" + version.value]
        out.append(_spec(f"mc_{version.value}_{flavour}", source, bases, specials, "<s>", "</s>",
                         origin=f"mistral-common {mistral_common.__version__}: {version.value} {flavour}",
                         reference=with_reply_blocks(source) if plain_replies else None))
    return out, mistral_common.__version__


def family_specs():
    chatml = ["<|im_start|>", "<|im_end|>"]
    qwen_plain = ["<tool_call>", "</tool_call>", "<think>", "</think>"]  # added, not special (as in Qwen)
    llama = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    mistral = ["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]",
               "[/TOOL_RESULTS]"]
    granite = ["<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>"]
    t = fam.TEMPLATES
    both = [BL, SP]
    o = "tests/jinja/chat_templates.py"
    return [
        _spec("fam_llama31", t["llama31"], both, llama, "<|begin_of_text|>", "<|eot_id|>", origin=o),
        _spec("fam_qwen25", t["qwen25"], both, chatml, None, "<|im_end|>", qwen_plain, origin=o),
        _spec("fam_qwen3_style", t["qwen3_style"], both, chatml, None, "<|im_end|>", qwen_plain, origin=o),
        _spec("fam_mistral_v3", t["mistral_v3"], both, mistral, "<s>", "</s>", origin=o),
        _spec("fam_gemma", t["gemma"], both, ["<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>", origin=o),
        _spec("fam_gemma3", t["gemma3"], both, ["<start_of_turn>", "<end_of_turn>", "<start_of_image>"], "<bos>",
              "<eos>", origin=o),
        _spec("fam_phi3", t["phi3"], both, ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<s>",
              "<|endoftext|>", origin=o),
        _spec("fam_granite3", t["granite3"], both, granite, "<|end_of_text|>", "<|end_of_text|>", origin=o),
        # Zephyr's role markers are plain text in its tokenizer; only </s> is special.
        _spec("fam_zephyr_indented", t["zephyr_indented"], both, [], "<s>", "</s>", origin=o),
        _spec("fam_chatml_generation", t["chatml_generation"], both, chatml, None, "<|im_end|>", origin=o),
        _spec("fam_macro_generation", t["macro_generation"], both, [], "<s>", "</s>", origin=o),
    ]


def shipped_specs():
    o = "data/chat_templates"
    llama = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    granite = ["<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"]
    return [
        _spec("shipped_llama3", _shipped("llama3"), [BL, SP], llama, "<|begin_of_text|>", "<|eot_id|>",
              named="llama3", origin=o),
        _spec("shipped_granite3", _shipped("granite3"), [BL, SP], granite, None, "<|end_of_text|>",
              named="granite3", origin=o),
        _spec("shipped_llama2", _shipped("llama2"), [SP, BL], [], "<s>", "</s>", named="llama2", origin=o),
        _spec("shipped_mistral", _shipped("mistral"), [SP, BL], [], "<s>", "</s>", named="mistral", origin=o),
    ]


def named_templates_spec():
    chatml = ["<|im_start|>", "<|im_end|>"]
    source = {"default": fam.TEMPLATES["chatml_generation"], "tool_use": fam.TEMPLATES["qwen25"]}
    return _spec("named_tool_use", source, [BL], chatml, None, "<|im_end|>", origin="default + tool_use")


# ---- tokenizers --------------------------------------------------------------

def make_tokenizer(base_dir, out_dir, spec):
    """A copy of a base tokenizer that knows the template's control tokens, saved with the template."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(base_dir)
    vocab = tok.get_vocab()
    new_special = []
    for s in spec["specials"] + [spec["bos"], spec["eos"]]:
        if s and s not in vocab and s not in new_special:
            new_special.append(s)
    if new_special:
        tok.add_tokens([AddedToken(s, special=True, normalized=False) for s in new_special], special_tokens=True)
    plain = [s for s in spec["plain"] if s not in vocab]
    if plain:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in plain])
    tok.bos_token = spec["bos"]
    tok.eos_token = spec["eos"]
    tok.chat_template = spec["source"]
    shutil.rmtree(out_dir, ignore_errors=True)
    tok.save_pretrained(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)


def spm_only_copy(tok_dir, sp_model, out_dir, tok):
    """tok_dir as tokenizer.model + tokenizer_config.json (added tokens in added_tokens_decoder)."""
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(sp_model, os.path.join(out_dir, "tokenizer.model"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["added_tokens_decoder"] = {
        str(i): {"content": t.content, "special": t.special, "normalized": t.normalized, "lstrip": t.lstrip,
                 "rstrip": t.rstrip, "single_word": t.single_word}
        for i, t in sorted(tok.added_tokens_decoder.items())}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    for name in ("chat_template.jinja", "additional_chat_templates"):
        src = os.path.join(tok_dir, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(out_dir, name), dirs_exist_ok=True)
        elif os.path.exists(src):
            shutil.copy(src, os.path.join(out_dir, name))


# ---- goldens -----------------------------------------------------------------

def fix_clock():
    """strftime_now renders DATE at midnight, as fptrain does with FPTRAIN_CHAT_TEMPLATE_DATE."""
    from transformers.utils import chat_template_utils
    fixed = _datetime.datetime.strptime(DATE, "%Y-%m-%d")

    class FixedClock(_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed

    chat_template_utils.datetime = FixedClock


class BlockRecorder:
    """Records the text of each {% generation %} block transformers tracks, to tell whether the
    range it reports holds that text (blocks in macros or set blocks get misplaced ranges)."""

    def __init__(self):
        self.blocks = []
        self._wrapped = set()

    def watch(self, source):
        import jinja2
        from transformers.utils import chat_template_utils
        if source in self._wrapped:
            return
        env = chat_template_utils._compile_jinja_template(source).environment  # cached: the one transformers uses
        tracker = next(e for e in env.extensions.values() if hasattr(e, "_generation_support"))
        original = tracker._generation_support

        @jinja2.pass_eval_context
        def recording(context, caller):
            rv = original(context, caller)
            if tracker.is_active():
                self.blocks.append(rv)
            return rv

        tracker._generation_support = recording
        self._wrapped.add(source)


RECORDER = BlockRecorder()


def uses(spec, word):
    sources = spec["source"].values() if isinstance(spec["source"], dict) else [spec["source"]]
    return any(word in s for s in sources)


GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation(spec, line):
    """Whether the template transformers picks for this line has {% generation %} blocks."""
    source = spec["source"]
    if isinstance(source, dict):
        source = source["tool_use"] if "tools" in line and "tool_use" in source else source["default"]
    return GENERATION_TAG.search(source) is not None


def lines_for(spec):
    """The JSONL lines of a suite: every conversation, plus tool and document variants the template reads."""
    lines = [(name, {"messages": conv}) for name, conv in CONVERSATIONS.items()]
    if uses(spec, "tools"):
        lines += [(name + "+tools", {"messages": CONVERSATIONS[name], "tools": fam.TOOLS})
                  for name in TOOL_CONVERSATIONS]
    if uses(spec, "documents"):
        lines += [(name + "+documents", {"messages": CONVERSATIONS[name], "documents": fam.DOCUMENTS})
                  for name in DOCUMENT_CONVERSATIONS]
        lines.append(("tools+tools+documents", {"messages": CONVERSATIONS["tools"], "tools": fam.TOOLS,
                                                 "documents": fam.DOCUMENTS}))
    return lines


def byte_offsets(text):
    """UTF-8 byte offset of each character index (and of the end)."""
    out, b = [], 0
    for ch in text:
        out.append(b)
        b += len(ch.encode("utf-8"))
    out.append(b)
    return out


def placed_content(render, messages, i, text):
    """[begin, end) character range of message i's content in `text`, found by rendering the
    conversation with that content replaced by a marker; None when that does not frame it."""
    content = messages[i].get("content")
    if content is None or content == "":
        return 0, 0  # nothing of it can be in the text
    if not isinstance(content, str):
        return None
    marker = MARKER.format(i)
    changed = copy.deepcopy(messages)
    changed[i]["content"] = marker
    try:
        other = render(changed)
    except Exception:
        return None
    if other.count(marker) != 1:
        return None
    at = other.index(marker)
    before, after = other[:at], other[at + len(marker):]
    if len(before) + len(after) > len(text) or not text.startswith(before) or not text.endswith(after):
        return None
    return at, len(text) - len(after)


def space_starts_word(tok):
    """Whether the tokenizer writes a space as the "\u2581" that begins the next word: a Metaspace
    pre-tokenizer, or a normalizer replacing " " with it (SentencePiece models as transformers converts them)."""
    def nodes(node):
        if isinstance(node, dict):
            yield node
            for v in node.values():
                yield from nodes(v)
        elif isinstance(node, list):
            for v in node:
                yield from nodes(v)
    model = json.loads(tok.backend_tokenizer.to_str())
    for part in ("normalizer", "pre_tokenizer"):
        for n in nodes(model.get(part)):
            if n.get("type") == "Metaspace":
                return True
            if n.get("type") == "Replace" and n.get("pattern") == {"String": " "} and n.get("content") == "\u2581":
                return True
    return False


def expected_supervision(render, messages, text, special_tokens, spaces_lead_words):
    """Character ranges the provenance rule must supervise (loss_mask: assistant), or None."""
    spans = [placed_content(render, messages, i, text) for i in range(len(messages))]
    starts = sorted(s[0] for s in spans if s and s[1] > s[0])
    placed = [s for s in spans if s and s[1] > s[0]]

    def in_a_message(c):
        return any(a <= c < b for a, b in placed)
    out = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        if spans[i] is None:
            return None
        b, e = spans[i]
        if e == b:
            continue  # nothing of the message is in the text: nothing supervised
        end = e
        limit = next((s for s in starts if s >= e), len(text))
        best = None
        for tok in special_tokens:
            at = text.find(tok, e, limit)
            if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(tok) > len(best[1]))):
                best = (at, tok)
        if best and text[e:best[0]].strip(" \t\r\n") == "":
            end = best[0] + len(best[1])
        while spaces_lead_words and b > 0 and text[b - 1] == " " and not in_a_message(b - 1):
            b -= 1
        out.append([b, end])
    return out


def golden_case(tok, spec, name, line, generation, special_tokens):
    messages = line["messages"]
    kwargs = {k: line[k] for k in ("tools", "documents") if k in line}
    case = {"name": name, "generation": generation}

    def render(msgs):
        return tok.apply_chat_template(msgs, tokenize=False, **kwargs)

    try:
        text = render(messages)
    except Exception as e:  # raise_exception, or an error the template runs into
        case["rejected"] = f"{type(e).__name__}: {e}"
        return case
    case["text"] = text
    if generation:
        from transformers.utils.chat_template_utils import render_jinja_template
        source = tok.get_chat_template(None, kwargs.get("tools"))
        RECORDER.watch(source)
        enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                      **kwargs)
        case["assistant_masks"] = list(enc["assistant_masks"])
        # The ranges the mask came from (apply_chat_template's render, again), and the blocks' text.
        RECORDER.blocks = []
        dropped_none = [{k: v for k, v in m.items() if v is not None} for m in messages]  # as apply_chat_template
        _, ranges = render_jinja_template(conversations=[dropped_none], chat_template=source,
                                          return_assistant_tokens_mask=True, **kwargs, **tok.special_tokens_map)
        assert len(RECORDER.blocks) == len(ranges[0]), (spec["name"], name)
        to_bytes = byte_offsets(text)
        case["generation_bytes"] = [
            [to_bytes[min(a, len(text))], to_bytes[min(b, len(text))], text[a:b] == block]
            for (a, b), block in zip(ranges[0], RECORDER.blocks)]
    else:
        enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
    case["input_ids"] = list(enc["input_ids"])
    plain = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert list(plain["input_ids"]) == case["input_ids"], (spec["name"], name)
    to_bytes = byte_offsets(text)
    case["token_bytes"] = [[to_bytes[a], to_bytes[b]] for a, b in plain["offset_mapping"]]
    if not generation:
        spans = expected_supervision(render, messages, text, special_tokens, space_starts_word(tok))
        case["supervised_bytes"] = None if spans is None else [[to_bytes[a], to_bytes[b]] for a, b in spans]
        tool_calls = any(m.get("tool_calls") for m in messages)
        if spec["reference"] and not tool_calls and tok.apply_chat_template(messages, tokenize=False, chat_template=spec["reference"],
                                                         **kwargs) == text:
            ref = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                          chat_template=spec["reference"], **kwargs)
            assert list(ref["input_ids"]) == case["input_ids"], (spec["name"], name)
            case["reference_mask"] = list(ref["assistant_masks"])
    return case


def real_mistral_bases(out):
    """{base: (folder, tokenizer.model)} of Mistral's real models as transformers reads them (a
    tokenizer.model and a LlamaTokenizer config); {} without mistral-common."""
    try:
        import mistral_common
    except ImportError:
        return {}
    bases = {}
    for base, name in REAL_MODELS.items():
        model = os.path.join(os.path.dirname(mistral_common.__file__), "data", name)
        folder = os.path.join(out, "chat_parity", "base_" + base)
        os.makedirs(folder, exist_ok=True)
        shutil.copy(model, os.path.join(folder, "tokenizer.model"))
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                       "unk_token": "<unk>"}, f)
        bases[base] = (folder, model)
    return bases


def write_suite(out, spec, base, base_dirs, sp_models):
    suite_name = spec["name"] + "_" + base
    tok_dir = os.path.join(out, "chat_parity", "tok_" + suite_name)
    tok = make_tokenizer(base_dirs[base], tok_dir, spec)
    special_tokens = sorted({t.content for t in tok.added_tokens_decoder.values() if t.special})
    lines = lines_for(spec)
    jsonl = os.path.join(out, "chat_parity", suite_name + ".jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for _, line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    cases = [golden_case(tok, spec, name, line, has_generation(spec, line), special_tokens) for name, line in lines]
    dirs = ["chat_parity/tok_" + suite_name]
    if base in sp_models:
        sp_model = sp_models[base]
        # The same tokenizer as tokenizer.model + config, if transformers reads it as the same tokenizer.
        from transformers import AutoTokenizer
        spm_dir = os.path.join(out, "chat_parity", "spm_" + suite_name)
        spm_only_copy(tok_dir, sp_model, spm_dir, tok)
        spm_tok = AutoTokenizer.from_pretrained(spm_dir)
        same = all(spm_tok(c["text"], add_special_tokens=False)["input_ids"] == c["input_ids"]
                   for c in cases if "text" in c)
        if same:
            dirs.append("chat_parity/spm_" + suite_name)
        else:
            shutil.rmtree(spm_dir)
    return {"suite": suite_name, "template": spec["name"], "origin": spec["origin"], "named": spec["named"],
            "jsonl": "chat_parity/" + suite_name + ".jsonl", "tokenizer_dirs": dirs,
            "cases": cases}


def write_chat_parity(out):
    """Writes <out>/chat_parity/ (tokenizers, JSONL files) and chat_parity_golden.json."""
    fix_clock()
    base_dirs = {BL: os.path.join(out, "tok_llama3"), SP: os.path.join(out, "tok_mistral")}
    sp_models = {SP: os.path.join(out, "sp.model")}
    shutil.rmtree(os.path.join(out, "chat_parity"), ignore_errors=True)
    os.makedirs(os.path.join(out, "chat_parity"))
    for base, (folder, model) in real_mistral_bases(out).items():
        base_dirs[base], sp_models[base] = folder, model
    mc_specs, mc_version = mistral_common_specs()
    specs = mc_specs + family_specs() + shipped_specs() + [named_templates_spec()]
    suites = [write_suite(out, spec, base, base_dirs, sp_models) for spec in specs for base in spec["bases"]]
    golden = {"date": DATE, "mistral_common": mc_version, "suites": suites}
    with open(os.path.join(out, "chat_parity_golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False)
    return golden


if __name__ == "__main__":
    import argparse
    import time
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the data fixture folder (make_fixtures.py's --out)")
    args = parser.parse_args()
    start = time.time()
    g = write_chat_parity(args.out)
    n = sum(len(s["cases"]) for s in g["suites"])
    print(f"chat parity: {len(g['suites'])} suites, {n} cases in {time.time() - start:.1f} s")
