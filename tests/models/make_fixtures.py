"""Golden outputs for the decoder parity tests, made live by transformers (CPU, fp32).

For each family it makes a tiny random checkpoint with transformers itself, saves it
with save_pretrained (Llama sharded), reloads it with eager attention, and runs a set
of examples of different lengths through it one at a time (and once more as one
packed row, boundaries given only by restarting position_ids). Per example it records the
input, the logits, the summed token loss (HF's own loss with num_items_in_batch=1,
i.e. the sum over supervised tokens) and the gradient of every parameter.

  <out>/<name>/                 the checkpoint (config.json + safetensors)
  <out>/<name>-golden.safetensors
      example.<i>.input_ids, example.<i>.labels       int64 [L]
      example.<i>.logits                              fp32 [L, vocab]
      example.<i>.loss_sum                            fp32 []
      example.<i>.grad.<parameter name>               fp32, like the parameter
      rope.inv_freq                                   fp32 [head_dim / 2]
      pack.position_ids, pack.logits, pack.loss_sum, pack.grad.<parameter name>
          all examples concatenated in one row, positions restarting at 0
  <out>/<name>-lora/            a PEFT LoRA adapter of that checkpoint (LORA_CASES), saved by
                                PeftModel.save_pretrained, its A and B random (B is zero at init)
  <out>/<name>-lora-golden.safetensors
      pack.logits, pack.loss_sum, pack.grad.<adapter tensor name as saved>   the packed row through PEFT
      merged.<parameter name>   the adapted weights after merge_and_unload
  <out>/llama-nf4/               the llama checkpoint as bitsandbytes stores a 4-bit NF4 base
  <out>/llama-nf4-golden.safetensors   its projections dequantised, the packed row's logits through them
"""
import argparse
import pathlib

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          GraniteConfig, GraniteForCausalLM, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

# One example is a single token; the window of the Mistral model (4) is shorter
# than most of them.
LENGTHS = [9, 1, 14, 5, 11]

COMMON = dict(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
              max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.2)

MODELS = {
    # llama3 RoPE scaling (original context 64 puts the 8 frequencies of head_dim
    # 16 in all three bands), GQA 4/2, biases, saved in several shards.
    "llama": (LlamaConfig, LlamaForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
        rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=64)),
        "40KB"),
    # sliding window 4, multi-query attention, head_dim 32 != hidden / heads.
    "mistral": (MistralConfig, MistralForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=1, head_dim=32, sliding_window=4,
        rope_theta=10000.0), None),
    # non-default multipliers, tied embeddings, linear RoPE scaling, biases.
    "granite": (GraniteConfig, GraniteForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
        embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.2, logits_scaling=4.0,
        attention_bias=True, rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)),
        None),
    # q/k/v biases without an o bias, layer 0 full and layers 1-2 in a window of 4
    # (max_window_layers), GQA 4/2, head_dim 32 != hidden / heads, tied embeddings.
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(
        COMMON, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        use_sliding_window=True, sliding_window=4, max_window_layers=1, tie_word_embeddings=True,
        rope_theta=1000000.0), None),
    # q/k norms per head, biases on q/k/v/o, multi-query, head_dim 24, explicit
    # layer_types (sliding first, window 3), untied.
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=1, head_dim=24, attention_bias=True,
        use_sliding_window=True, sliding_window=3, layer_types=["sliding_attention", "full_attention"]),
        None),
    # fused qkv_proj and gate_up_proj, GQA 4/2, a window of 6 on every layer.
    "phi3": (Phi3Config, Phi3ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, sliding_window=6, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, rope_theta=10000.0), None),
    # LongRoPE with an original context of 8: examples of 9 tokens and more (and the
    # packed row) take the long factors, the shorter ones the short factors; cos and
    # sin scaled by sqrt(1 + ln(256 / 8) / ln 8).
    "phi3_longrope": (Phi3Config, Phi3ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=4, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        original_max_position_embeddings=8,
        rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                             short_factor=[1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                             long_factor=[1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 18.0])), None),
    # Phi-4-mini's partial rotary embeddings: the first 12 of 16 dimensions of each head
    # rotate (partial_rotary_factor 0.75), the rest pass; GQA 4/2, a window of 6.
    "phi3_partial": (Phi3Config, Phi3ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, sliding_window=6, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.75)),
        None),
    # Gemma 2 with caps that bite (scores 1.5, logits 3.0), query_pre_attn_scalar 20,
    # GQA 4/2, head_dim 24 != hidden / heads, q/k/v/o biases, three layers with the
    # default layer_types (sliding, full, sliding) and a window of 4, tied embeddings.
    "gemma2": (Gemma2Config, Gemma2ForCausalLM, dict(
        COMMON, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        attn_logit_softcapping=1.5, final_logit_softcapping=3.0, query_pre_attn_scalar=20, sliding_window=4,
        attention_bias=True, pad_token_id=0, bos_token_id=2, eos_token_id=1, rope_theta=10000.0), None),
    # Gemma 3 text: q/k norms ((1 + w)), a local RoPE base (1e4) on the sliding layers and a
    # linearly scaled global one (1e6, factor 4) on the full layer, layer_types sliding, full,
    # sliding with a window of 4, a final soft-cap of 3 (its attention has none), GQA 4/2,
    # head_dim 24, query_pre_attn_scalar 20, q/k/v/o biases, tied.
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, dict(
        COMMON, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], sliding_window=4,
        final_logit_softcapping=3.0, query_pre_attn_scalar=20, attention_bias=True, pad_token_id=0,
        bos_token_id=2, eos_token_id=1,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}), None),
}


# PEFT adapters: every projection (biases, GQA, a sharded base), a subset with rsLoRA on
# tied embeddings, Phi-3's fused projections, Gemma 2's all-linear.
LORA_CASES = {
    "llama": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                     "up_proj", "down_proj"]),
    "qwen2": dict(r=3, lora_alpha=6, target_modules=["q_proj", "v_proj", "down_proj"], use_rslora=True),
    "phi3": dict(r=4, lora_alpha=16, target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    "gemma2": dict(r=2, lora_alpha=4, target_modules="all-linear"),
}


def make_examples(vocab_size, generator):
    examples = []
    for i, length in enumerate(LENGTHS):
        ids = torch.randint(0, vocab_size, (length,), generator=generator)
        labels = ids.clone()
        labels[: min(length, 1 + i)] = -100  # first token (and a short "prompt") unsupervised
        examples.append((ids, labels))
    return examples


def randomize(model, generator):
    # transformers initializes norms to 1 and biases to 0; perturb every tensor so
    # that each one is exercised by the forward pass.
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)


def make(name, out_dir, seed):
    config_cls, model_cls, kwargs, shard = MODELS[name]
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**kwargs))
    randomize(model, generator)
    ckpt = out_dir / name
    model.save_pretrained(ckpt, **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert (ckpt / "model.safetensors.index.json").exists(), "expected a sharded checkpoint"

    # Reload what was written: the parity is against the checkpoint on disk.
    model = AutoModelForCausalLM.from_pretrained(ckpt, attn_implementation="eager", dtype=torch.float32)
    model.train()
    # transformers' RoPE inverse frequencies, to compare bit for bit.
    rotary = model.model.rotary_emb  # Gemma 3: one per layer type; the full layers' is `rope`
    inv_freq = getattr(rotary, "inv_freq", None)
    golden = {"rope.inv_freq": (inv_freq if inv_freq is not None else rotary.full_attention_inv_freq).detach().clone()}
    for i, (ids, labels) in enumerate(make_examples(model.config.vocab_size, generator)):
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids[None], labels=labels[None], num_items_in_batch=1,
                use_cache=False)
        out.loss.backward()
        golden[f"example.{i}.input_ids"] = ids
        golden[f"example.{i}.labels"] = labels
        golden[f"example.{i}.logits"] = out.logits[0].detach().clone()
        golden[f"example.{i}.loss_sum"] = out.loss.detach().clone()
        for pname, p in model.named_parameters():
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            golden[f"example.{i}.grad.{pname}"] = grad.detach().clone().contiguous()

    # The same examples as one packed row. transformers finds the boundaries
    # itself where position_ids restart, an independent check of our cu_seqlens path.
    examples = [(golden[f"example.{i}.input_ids"], golden[f"example.{i}.labels"]) for i in range(len(LENGTHS))]
    ids = torch.cat([e[0] for e in examples])
    labels = torch.cat([e[1] for e in examples])
    positions = torch.cat([torch.arange(len(e[0])) for e in examples])
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids[None], position_ids=positions[None], labels=labels[None], num_items_in_batch=1,
                use_cache=False)
    out.loss.backward()
    golden["pack.position_ids"] = positions
    golden["pack.logits"] = out.logits[0].detach().clone()
    golden["pack.loss_sum"] = out.loss.detach().clone()
    for pname, p in model.named_parameters():
        golden[f"pack.grad.{pname}"] = p.grad.detach().clone().contiguous()
    save_file(golden, out_dir / f"{name}-golden.safetensors")
    if name in LORA_CASES:
        make_lora(name, model, ids, labels, positions, out_dir, generator)


def make_lora(name, model, ids, labels, positions, out_dir, generator):
    from peft import LoraConfig, get_peft_model
    peft_model = get_peft_model(model, LoraConfig(lora_dropout=0.0, **LORA_CASES[name]))
    # Updates about as large as the base weights' own scale (0.2): scale * B A stays well-conditioned.
    scaling = next(m.scaling["default"] for m in peft_model.modules() if isinstance(getattr(m, "scaling", None), dict))
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_A" in pname:
                p.copy_(0.2 * torch.randn(p.shape, generator=generator))
            elif "lora_B" in pname:
                p.copy_(0.1 / scaling * torch.randn(p.shape, generator=generator))
    peft_model.save_pretrained(out_dir / f"{name}-lora")
    peft_model.train()
    out = peft_model(input_ids=ids[None], position_ids=positions[None], labels=labels[None], num_items_in_batch=1,
                     use_cache=False)
    out.loss.backward()
    golden = {"pack.logits": out.logits[0].detach().clone(), "pack.loss_sum": out.loss.detach().clone()}
    for pname, p in peft_model.named_parameters():
        if p.requires_grad:  # as saved: without the adapter's name
            golden["pack.grad." + pname.replace(".default", "")] = p.grad.detach().clone().contiguous()
    merged = peft_model.merge_and_unload()
    for pname, p in merged.named_parameters():
        golden["merged." + pname] = p.detach().clone().contiguous()
    save_file(golden, out_dir / f"{name}-lora-golden.safetensors")


def make_nf4(out_dir):
    """bitsandbytes' NF4 with double quantisation (QLoRA's storage) of a few weights: odd sizes
    (a last block shorter than 64 and an odd count of indices), bf16 and fp32, more than one
    block of 256 maxima, an all-zero block."""
    import bitsandbytes.functional as bnbf
    # The reference dequantisation (flat blocks of 64, code * absmax in fp32, one rounding), which
    # bitsandbytes' CUDA kernels compute; its CPU kernel treats rows that are not whole blocks otherwise.
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code
    gen = torch.Generator().manual_seed(77)
    weights = {"a": torch.randn(96, 64, generator=gen), "b": torch.randn(64, 112, generator=gen).to(torch.bfloat16),
               "c": 0.02 * torch.randn(7, 37, generator=gen), "d": torch.randn(512, 160, generator=gen) *
               torch.linspace(0.01, 3.0, 160)}
    weights["d"][3, :64] = 0.0
    golden = {}
    for name, w in weights.items():
        packed, state = bnbf.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
        golden[f"{name}.weight"] = w
        golden[f"{name}.codes"] = packed.reshape(-1).contiguous()
        golden[f"{name}.absmax_codes"] = state.absmax.contiguous()
        golden[f"{name}.absmax_scales"] = state.state2.absmax.contiguous()
        golden[f"{name}.absmax_offset"] = state.offset.reshape(()).clone()
        absmax = bnbf.dequantize_blockwise(state.absmax, state.state2) + state.offset
        golden[f"{name}.dequantized"] = _dequantize_4bit_compute(packed.reshape(-1), absmax, _get_4bit_code("nf4", w.device),
                                                                 64, w.shape, w.dtype).contiguous()
    golden["dynamic_map"] = bnbf.create_dynamic_map(signed=True)
    save_file(golden, out_dir / "nf4-golden.safetensors")


def make_bnb_checkpoint(out_dir):
    """The llama checkpoint as bitsandbytes stores a 4-bit NF4 base (transformers' save_pretrained of a
    load_in_4bit model with double quantisation, sharded so a weight's parts span files), and what a
    reader must make of it: each projection dequantised as bitsandbytes' CUDA kernels compute (its CPU
    kernel treats rows that are not whole blocks otherwise), and the packed row's logits through
    those weights."""
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code
    import bitsandbytes as bnb
    import bitsandbytes.functional as bnbf
    from transformers import BitsAndBytesConfig
    quantized = AutoModelForCausalLM.from_pretrained(
        out_dir / "llama", dtype=torch.float32, device_map={"": "cpu"},
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                               bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32))
    quantized.save_pretrained(out_dir / "llama-nf4", max_shard_size="40KB")
    model = AutoModelForCausalLM.from_pretrained(out_dir / "llama", attn_implementation="eager", dtype=torch.float32)
    weights, golden = model.state_dict(), {}
    for name, module in quantized.named_modules():
        if isinstance(module, bnb.nn.Linear4bit):
            state = module.weight.quant_state
            absmax = bnbf.dequantize_blockwise(state.absmax, state.state2) + state.offset
            w = _dequantize_4bit_compute(module.weight.data.reshape(-1), absmax, _get_4bit_code("nf4", "cpu"), 64,
                                         state.shape, state.dtype).contiguous()
            weights[name + ".weight"] = w
            golden[name + ".weight.dequantized"] = w
    model.load_state_dict(weights)
    pack = load_file(out_dir / "llama-golden.safetensors")
    ids = torch.cat([pack[f"example.{i}.input_ids"] for i in range(len(LENGTHS))])
    with torch.no_grad():
        golden["pack.logits"] = model(input_ids=ids[None], position_ids=pack["pack.position_ids"][None],
                                      use_cache=False).logits[0].contiguous()
    save_file(golden, out_dir / "llama-nf4-golden.safetensors")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    for seed, name in enumerate(MODELS):
        make(name, args.out, 1000 + seed)
        print(f"made {name}")
    make_nf4(args.out)
    make_bnb_checkpoint(args.out)


if __name__ == "__main__":
    main()
