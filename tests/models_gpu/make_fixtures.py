"""Golden outputs for the bf16 decoder parity tests on CUDA, made live by transformers.

For each family it makes a small random checkpoint with transformers, stored in bf16
(so every run below uses exactly the same weights), and runs each example alone
through transformers (eager attention) on CUDA twice:

  <name>-ref.safetensors   in float64: the accurate reference
  <name>-hf.safetensors    in bfloat16: transformers' own bf16 result

Each file holds example.<i>.{input_ids,labels,logits,loss_sum} and grad_sum.<parameter>
(the gradient of the loss summed over all examples). Values are stored as fp32.
The C++ test checks that our bf16 error against the reference is no worse than
about twice transformers' own.
"""
import argparse
import pathlib

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          GraniteConfig, GraniteForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

# Lengths cross FA2's tile sizes; one example is a single token.
LENGTHS = [1, 37, 128, 300, 77, 210]

COMMON = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              max_position_embeddings=4096, rms_norm_eps=1e-5, initializer_range=0.05)

MODELS = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=1024)), "200KB"),
    "mistral": (MistralConfig, MistralForCausalLM, dict(
        COMMON, num_attention_heads=8, num_key_value_heads=4, head_dim=64, sliding_window=48,
        rope_theta=10000.0), None),
    "granite": (GraniteConfig, GraniteForCausalLM, dict(
        COMMON, num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0625, logits_scaling=8.0,
        attention_bias=True, rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0)), None),
    # q/k/v biases, no o bias; layer 1 in a window of 48; tied; head_dim 64 (our kernels).
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=64, use_sliding_window=True,
        sliding_window=48, max_window_layers=1, tie_word_embeddings=True, rope_theta=1000000.0), None),
    # q/k norms, biases on q/k/v/o, head_dim 128, layer 0 in a window of 64.
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(
        COMMON, num_attention_heads=2, num_key_value_heads=1, head_dim=128, attention_bias=True,
        use_sliding_window=True, sliding_window=64, layer_types=["sliding_attention", "full_attention"]), None),
    # fused qkv and gate_up weights, window 96, head_dim 64; LongRoPE's short factors and
    # its cos/sin scale (an original context of 512, beyond every example: packed and
    # one by one rotate alike; the long factors are tested on the CPU).
    "phi3": (Phi3Config, Phi3ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, sliding_window=96, pad_token_id=0,
        original_max_position_embeddings=512,
        rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                             short_factor=[1.0 + 0.1 * i for i in range(32)],
                             long_factor=[1.0 + 0.5 * i for i in range(32)])), None),
    # Gemma 2: soft-caps that bite (scores 10, logits 8), sandwich norms, GELU-tanh,
    # layer 0 in a window of 48, query_pre_attn_scalar 96, head_dim 64, tied.
    "gemma2": (Gemma2Config, Gemma2ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=48,
        attn_logit_softcapping=10.0, final_logit_softcapping=8.0, query_pre_attn_scalar=96, pad_token_id=0,
        rope_theta=10000.0), None),
    # Gemma 3 text on our kernels (no soft-capped scores): q/k norms, the local RoPE base
    # on the sliding layer 0 (window 48), a scaled global one on layer 1, head_dim 64.
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, dict(
        COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=48,
        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=64, pad_token_id=0,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}), None),
    # Gemma 2 at its real head_dim 256 (2B, 9B): our head_dim 256 kernels with soft-capped
    # scores, a window of 48 on layer 0, GQA 2:1.
    "gemma2_hd256": (Gemma2Config, Gemma2ForCausalLM, dict(
        COMMON, num_attention_heads=2, num_key_value_heads=1, head_dim=256, sliding_window=48,
        attn_logit_softcapping=10.0, final_logit_softcapping=8.0, query_pre_attn_scalar=256, pad_token_id=0,
        rope_theta=10000.0), None),
}


def randomize(model, generator):
    # Norms start at 1 and biases at 0 in transformers; perturb them so they matter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.05 * noise)


def make_examples(vocab_size, generator):
    examples = []
    for i, length in enumerate(LENGTHS):
        ids = torch.randint(0, vocab_size, (length,), generator=generator)
        labels = ids.clone()
        labels[: min(length, 1 + 7 * i)] = -100  # first token and a short "prompt" unsupervised
        examples.append((ids, labels))
    return examples


def run(ckpt, dtype, examples, device):
    model = AutoModelForCausalLM.from_pretrained(ckpt, attn_implementation="eager", dtype=dtype).to(device)
    model.train()
    out = {}
    model.zero_grad(set_to_none=True)
    for i, (ids, labels) in enumerate(examples):
        res = model(input_ids=ids[None].to(device), labels=labels[None].to(device), num_items_in_batch=1,
                    use_cache=False)
        res.loss.backward()  # gradients accumulate over the examples
        out[f"example.{i}.input_ids"] = ids
        out[f"example.{i}.labels"] = labels
        out[f"example.{i}.logits"] = res.logits[0].detach().float().cpu()
        out[f"example.{i}.loss_sum"] = res.loss.detach().float().cpu()
    for name, p in model.named_parameters():
        out[f"grad_sum.{name}"] = p.grad.detach().float().cpu().contiguous()
    return out


def make(name, out_dir, seed, device):
    config_cls, model_cls, kwargs, shard = MODELS[name]
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**kwargs))
    randomize(model, generator)
    ckpt = out_dir / name
    model.to(torch.bfloat16).save_pretrained(ckpt, **({"max_shard_size": shard} if shard else {}))
    examples = make_examples(model.config.vocab_size, generator)
    save_file(run(ckpt, torch.float64, examples, device), out_dir / f"{name}-ref.safetensors")
    save_file(run(ckpt, torch.bfloat16, examples, device), out_dir / f"{name}-hf.safetensors")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("make_fixtures.py: no CUDA device (these fixtures are made on the GPU machine)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    for seed, name in enumerate(MODELS):
        make(name, args.out, 2000 + seed, args.device)
        print(f"made {name}")


if __name__ == "__main__":
    main()
