"""Makes the model I/O fixtures with the real Hugging Face libraries.

For each tiny model (random init, fixed seed) it writes into --out:
  <name>/                 transformers' save_pretrained (config.json in the v5 form + safetensors)
  <name>_sharded/         the same model saved with a small max_shard_size (shards + index)   [some]
  <name>_v4/config.json   the same config rewritten in the transformers v4 form
  <name>_ref/weights_f64.safetensors   every parameter in float64 (safetensors.torch.save_file)
  <name>_ref/expected.json  what transformers makes of the config (read from the config object
                           and the instantiated model), per-tensor float64 checksums, and for
                           the v4 form the same fields as transformers parses them.
The C++ tests compare fptrain's reading of these files against those values.
"""
import argparse
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file
from transformers import (AutoConfig, AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, GraniteConfig, LlamaConfig,
                          MistralConfig, Phi3Config, Qwen2Config, Qwen3Config)

TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=56, num_hidden_layers=2)

MODELS = {
    # llama3 RoPE scaling, GQA, attention biases, untied
    "llama": lambda: LlamaConfig(
        **TINY, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        attention_bias=True, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=[2, 5], pad_token_id=0,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
    # linear RoPE scaling, explicit head_dim different from hidden/heads, MLP biases
    "llama_linear": lambda: LlamaConfig(
        **TINY, num_attention_heads=4, num_key_value_heads=4, head_dim=16, mlp_bias=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 20000.0, "factor": 2.0}),
    # sliding window, GQA
    "mistral": lambda: MistralConfig(
        **TINY, num_attention_heads=4, num_key_value_heads=1, sliding_window=7, rms_norm_eps=1e-6),
    # no sliding window at all (null)
    "mistral_nowindow": lambda: MistralConfig(
        **TINY, num_attention_heads=4, num_key_value_heads=2, sliding_window=None),
    # non-default multipliers, tied embeddings
    "granite": lambda: GraniteConfig(
        **TINY, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
        logits_scaling=8.0, pad_token_id=3, attention_dropout=0.1, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    # q/k/v biases, no o bias; a window of 5 from layer 1 on (max_window_layers); tied
    "qwen2": lambda: Qwen2Config(
        **TINY, num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=5,
        max_window_layers=1, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
    # q/k norms, all four attention biases, head_dim 12, explicit layer_types (sliding first)
    "qwen3": lambda: Qwen3Config(
        **TINY, num_attention_heads=4, num_key_value_heads=1, head_dim=12, attention_bias=True,
        use_sliding_window=True, sliding_window=6, layer_types=["sliding_attention", "full_attention"]),
    # fused qkv / gate_up weights, a window on every layer, LongRoPE (v4 spelling "su" as older
    # Phi-3 checkpoints write it is tested on the written config), GQA
    "phi3": lambda: Phi3Config(
        **TINY, num_attention_heads=4, num_key_value_heads=2, sliding_window=9, pad_token_id=3,
        max_position_embeddings=512, original_max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "short_factor": [1.0, 1.2, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}),
    # Phi-4-mini: LongRoPE on the rotated 3/4 of each head (partial_rotary_factor 0.75:
    # 6 of 8 dimensions, 3 factors each), GQA, untied
    "phi4_mini": lambda: Phi3Config(
        **TINY, num_attention_heads=4, num_key_value_heads=2, pad_token_id=3, max_position_embeddings=512,
        original_max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": [1.0, 1.2, 1.5], "long_factor": [1.0, 2.0, 4.0]}),
    # (1 + w) norms around both blocks, the default soft-caps (50, 30), query_pre_attn_scalar 16
    # with head_dim 12, a window of 5 on the default layer_types (sliding, full), tied
    "gemma2": lambda: Gemma2Config(
        **TINY, num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=5,
        query_pre_attn_scalar=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    # q/k norms, a RoPE per layer type (a linearly scaled global one, a local base of 20000),
    # layer_types from sliding_window_pattern 2 (sliding, full), a window of 6, head_dim 12
    "gemma3": lambda: Gemma3TextConfig(
        **TINY, num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=6,
        sliding_window_pattern=2, query_pre_attn_scalar=12,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}),
}
SHARDED = {"llama": "20KB", "granite": "16KB"}
BF16 = {"mistral"}  # also saved in bfloat16 to test conversion on load


def dtype_name(dtype):
    return str(dtype).replace("torch.", "") if dtype is not None else None


WINDOWED = ("mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")


def layer_window(config, attn):
    if config.model_type in ("mistral", "phi3"):
        return config.sliding_window
    return getattr(attn, "sliding_window", None)


def describe(config, model):
    """What transformers makes of a config: read from the config and the live modules."""
    attn = model.model.layers[0].self_attn
    fused = hasattr(attn, "qkv_proj")  # Phi-3
    mlp = model.model.layers[0].mlp
    rope = dict(config.rope_parameters)
    local = rope.get("sliding_attention") if "full_attention" in rope else None
    rope = dict(rope["full_attention"]) if "full_attention" in rope else rope  # Gemma 3: one per layer type
    rotary = model.model.rotary_emb
    # Gemma 3 holds one per layer type present (a model of sliding layers only has no full one).
    inv_freq = next(t for t in (getattr(rotary, k, None) for k in ("inv_freq", "full_attention_inv_freq",
                                                                     "sliding_attention_inv_freq")) if t is not None)
    emb = model.get_input_embeddings().weight
    tied = model.lm_head.weight.data_ptr() == emb.data_ptr()
    eos = config.eos_token_id
    return {
        "architecture": type(model).__name__,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": (config.num_key_value_heads if fused else attn.k_proj.out_features // attn.head_dim),
        "head_dim": attn.head_dim,
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": getattr(model.model.norm, "variance_epsilon", getattr(model.model.norm, "eps", None)),
        "tie_word_embeddings": tied,
        "attention_bias": (attn.qkv_proj if fused else attn.q_proj).bias is not None,
        "qk_norm": hasattr(attn, "q_norm"),
        # each layer's window (None: full causal attention)
        "layer_windows": [layer_window(config, layer.self_attn) for layer in model.model.layers],
        "o_proj_bias": attn.o_proj.bias is not None,
        "mlp_bias": (mlp.gate_up_proj if fused else mlp.gate_proj).bias is not None,
        "attention_dropout": config.attention_dropout,
        "sliding_window": getattr(config, "sliding_window", None) if config.model_type in WINDOWED else None,
        "softmax_scale": attn.scaling,
        "embedding_multiplier": getattr(config, "embedding_multiplier", 1.0),
        "residual_multiplier": getattr(config, "residual_multiplier", 1.0),
        "logits_scaling": getattr(config, "logits_scaling", 1.0),
        "attn_logit_softcapping": getattr(config, "attn_logit_softcapping", None),
        "final_logit_softcapping": getattr(config, "final_logit_softcapping", None),
        "rope_type": rope["rope_type"],
        "rope_theta": rope["rope_theta"],
        # absent (null) when the RoPE type does not use them
        "rope_factor": rope.get("factor"),
        "rope_low_freq_factor": rope.get("low_freq_factor"),
        "rope_high_freq_factor": rope.get("high_freq_factor"),
        "rope_original_max_position_embeddings": rope.get("original_max_position_embeddings"),
        "inv_freq": inv_freq.tolist(),
        "rope_local_theta": local["rope_theta"] if local else None,
        "dtype": dtype_name(config.dtype),
        "bos_token_id": config.bos_token_id,
        "eos_token_ids": [] if eos is None else (list(eos) if isinstance(eos, (list, tuple)) else [eos]),
        "pad_token_id": config.pad_token_id,
        "num_parameters": model.num_parameters(),
        "initializer_range": config.initializer_range,
    }


def to_v4(doc):
    """Rewrites a v5 config.json the way transformers 4.x wrote it."""
    doc = dict(doc)
    rope = dict(doc.pop("rope_parameters"))
    if "full_attention" in rope:  # Gemma 3: the local base apart, the scaling applies to the global one
        doc["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        rope = dict(rope["full_attention"])
    doc["rope_theta"] = rope.pop("rope_theta")
    rope_type = rope.pop("rope_type")
    # transformers 4 wrote both spellings over time; use the old "type" for linear (not
    # for Gemma 3, whose checkpoints write rope_type, and whose v5 reading keeps "type"'s
    # linear as default).
    old_spelling = rope_type == "linear" and "rope_local_base_freq" not in doc
    doc["rope_scaling"] = None if rope_type == "default" else {
        ("type" if old_spelling else "rope_type"): rope_type, **rope}
    if "dtype" in doc:
        doc["torch_dtype"] = doc.pop("dtype")
    doc["transformers_version"] = "4.46.0"
    return doc


def checksums(state):
    out = {}
    for name, t in state.items():
        flat = t.detach().double().flatten()
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64) / flat.numel()
        out[name] = {"shape": list(t.shape), "sum": flat.sum().item(),
                     "abs_sum": flat.abs().sum().item(), "weighted_sum": (flat * weights).sum().item()}
    return out


def saved_state(model):
    """The tensors transformers writes: the state dict minus the tied lm_head."""
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(1234)

    for name, make_config in MODELS.items():
        model = AutoModelForCausalLM.from_config(make_config(), dtype=torch.float32).eval()
        # Non-trivial norm weights and biases, so a loader mixing them up is caught.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight") or pname.endswith(".bias"):
                    p.copy_(torch.randn_like(p) * 0.1 + (1.0 if pname.endswith("weight") else 0.0))
        for sub in (name, name + "_sharded", name + "_v4", name + "_ref", name + "_bf16", name + "_bf16_ref"):
            shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
        model.save_pretrained(os.path.join(out, name))
        if name in SHARDED:
            model.save_pretrained(os.path.join(out, name + "_sharded"), max_shard_size=SHARDED[name])
            assert os.path.exists(os.path.join(out, name + "_sharded", "model.safetensors.index.json"))

        with open(os.path.join(out, name, "config.json")) as f:
            v5 = json.load(f)
        assert "rope_parameters" in v5 and "architectures" in v5, "transformers no longer writes the v5 form"
        os.makedirs(os.path.join(out, name + "_v4"))
        with open(os.path.join(out, name + "_v4", "config.json"), "w") as f:
            json.dump(to_v4(v5), f, indent=2)

        # What transformers makes of each form, from the files just written.
        expected = {}
        for form, folder in (("v5", name), ("v4", name + "_v4")):
            config = AutoConfig.from_pretrained(os.path.join(out, folder))
            expected[form] = describe(config, AutoModelForCausalLM.from_config(config))
        assert {k: v for k, v in expected["v4"].items() if k != "inv_freq"} == \
               {k: v for k, v in expected["v5"].items() if k != "inv_freq"}, name

        state = saved_state(model)
        expected["checksums"] = checksums(state)
        expected["transformers_version"] = transformers.__version__
        ref = os.path.join(out, name + "_ref")
        os.makedirs(ref)
        save_file({k: v.detach().double().contiguous() for k, v in state.items()},
                  os.path.join(ref, "weights_f64.safetensors"))
        with open(os.path.join(ref, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1)

        if name in BF16:
            bf16 = model.to(torch.bfloat16)
            bf16.save_pretrained(os.path.join(out, name + "_bf16"))
            os.makedirs(os.path.join(out, name + "_bf16_ref"))
            save_file({k: v.detach().double().contiguous() for k, v in saved_state(bf16).items()},
                      os.path.join(out, name + "_bf16_ref", "weights_f64.safetensors"))
    # Configs giving only the sizes, to compare fptrain's defaults with transformers'.
    for model_type, arch in (("llama", "LlamaForCausalLM"), ("mistral", "MistralForCausalLM"),
                             ("granite", "GraniteForCausalLM"), ("qwen2", "Qwen2ForCausalLM"),
                             ("qwen3", "Qwen3ForCausalLM"), ("gemma2", "Gemma2ForCausalLM"),
                             ("gemma3_text", "Gemma3ForCausalLM")):
        folder = os.path.join(out, model_type + "_minimal")
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as f:
            # Qwen's 32 KV heads by default need as many query heads.
            heads = 32 if model_type.startswith("qwen") else 8
            json.dump({"architectures": [arch], "model_type": model_type, **TINY,
                       "hidden_size": 64, "num_attention_heads": heads}, f)
        config = AutoConfig.from_pretrained(folder)
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump({"v5": describe(config, AutoModelForCausalLM.from_config(config))}, f, indent=1)

    print(f"model I/O fixtures in {out} (transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
