"""A Hugging Face model folder at a published shape with random weights, for the
benchmarks (nothing may be downloaded): made with transformers on the meta
device, filled on the GPU when there is one (norms 1, biases 0, the rest
N(0, 0.02), seeded), saved in bf16, with the tokenizer files of another folder
(fptrain init's, trained on the benchmark's data). Used by distributed/bench_tools.py
packing/packing_report.py and models/bench_helper.py."""
import json
import os
import shutil
import time

# config.json values of the published checkpoints; "tiny" keeps Llama-2's
# structure at a size a CPU trains in seconds.
SHAPES = {
    "llama2-7b": ("llama", dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                                rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)),
    # Llama-3.1-8B (vocab 128256, GQA 32/8): the LoRA benchmark's shape.
    "llama3-8b": ("llama", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                                rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)),
    # Llama-3.1-70B: the QLoRA benchmark's large shape (4-bit: ~40 GB on disk, made with --nf4).
    "llama3-70b": ("llama", dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                 num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192,
                                 rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)),
    "mistral-7b": ("mistral", dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
                                   tie_word_embeddings=False)),
    "granite-8b-code": ("llama", dict(vocab_size=49152, hidden_size=4096, intermediate_size=14336,
                                      num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                                      max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000000.0,
                                      attention_bias=True, mlp_bias=False, tie_word_embeddings=True)),
    "qwen2.5-7b": ("qwen2", dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                                 rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False,
                                 tie_word_embeddings=False)),
    "qwen3-8b": ("qwen3", dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                               max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                               attention_bias=False, tie_word_embeddings=False)),
    # Phi-3-mini-4k-instruct (head_dim 96: torch-fa2 on fptrain's side, our kernels take 64 and 128).
    "phi3-mini": ("phi3", dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                               num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                               rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=2047,
                               tie_word_embeddings=False)),
    # Gemma-2-9B: head_dim 256, soft-capped scores (50) and logits (30), windows of 4096 on
    # alternate layers, query_pre_attn_scalar 256, tied embeddings of a 256k vocabulary.
    "gemma2-9b": ("gemma2", dict(vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                                 max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0,
                                 attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                 query_pre_attn_scalar=256, sliding_window=4096, tie_word_embeddings=True)),
    # Gemma-3-4B's text decoder: head_dim 256, 5 sliding (1024) : 1 full layers, q/k norms, local RoPE
    # base 1e4 and a linearly scaled (8x) global 1e6, no soft caps.
    "gemma3-4b": ("gemma3", dict(vocab_size=262208, hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
                                 num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                 max_position_embeddings=131072, rms_norm_eps=1e-6, query_pre_attn_scalar=256,
                                 sliding_window=1024, tie_word_embeddings=True,
                                 rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                     "rope_theta": 1e6},
                                                  "sliding_attention": {"rope_type": "default",
                                                                        "rope_theta": 1e4}})),
    "tiny": ("llama", dict(vocab_size=2048, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                           rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja")


def random_weights(config):
    """The model of a transformers config in bf16, on the CPU, built on the meta
    device and filled where it is fastest (the GPU when there is one): norms 1,
    biases 0, the rest N(0, 0.02), seeded; embeddings tied where the config says."""
    import torch
    from transformers import AutoModelForCausalLM
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=gen)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model.to("cpu")  # save from host memory, whatever the library version does with CUDA tensors


# What transformers writes for a model loaded with load_in_4bit (QLoRA's storage).
NF4_QUANTIZATION_CONFIG = {
    "quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False, "_load_in_4bit": True,
    "_load_in_8bit": False, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
    "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8", "llm_int8_skip_modules": None,
    "llm_int8_threshold": 6.0, "llm_int8_has_fp16_weight": False, "llm_int8_enable_fp32_cpu_offload": False}


def save_random_nf4(config, out, shard_bytes=4 << 30):
    """The model of `config` as bitsandbytes stores a 4-bit NF4 base (transformers' save_pretrained of a
    load_in_4bit model), written tensor by tensor so a 70B never exists whole in any precision: the
    decoder's projections N(0, 0.02) quantised by bitsandbytes on the GPU, the rest bf16 as
    random_weights fills them (on the GPU when there is one)."""
    import torch
    import bitsandbytes.functional as bnbf
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        shapes = [(n, tuple(p.shape)) for n, p in AutoModelForCausalLM.from_config(config).named_parameters()]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(0)
    shards, shard, size = [], {}, 0
    for name, shape in shapes:
        if name.endswith("norm.weight"):
            tensors = {name: torch.ones(shape, dtype=torch.bfloat16)}
        else:
            w = torch.empty(shape, dtype=torch.bfloat16, device=device).normal_(0.0, 0.02, generator=gen)
            if ".layers." in name and name.endswith("_proj.weight"):
                packed, state = bnbf.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
                tensors = {name: packed, **{f"{name}.{k}": v for k, v in state.as_dict(packed=True).items()}}
            else:
                tensors = {name: w}
        for k, t in tensors.items():
            shard[k] = t.to("cpu").contiguous()
            size += shard[k].numel() * shard[k].element_size()
        if size >= shard_bytes:
            shards.append(shard)
            shard, size = {}, 0
    if shard:
        shards.append(shard)
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, os.path.join(out, file), metadata={"format": "pt"})
        for k, t in tensors.items():
            weight_map[k] = file
            total += t.numel() * t.element_size()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    config.quantization_config = NF4_QUANTIZATION_CONFIG
    config.dtype = "bfloat16"
    config.save_pretrained(out)


def make_random_model(out, tokenizer_from, shape_name, stamp_name=".random-model-shape", nf4=False):
    """Makes `out` once: a stamp file naming the shape, written last, marks a finished folder.
    nf4: as a 4-bit NF4 checkpoint (save_random_nf4)."""
    stamp_value = shape_name + (" nf4" if nf4 else "")
    import transformers
    from transformers import (Gemma2Config, Gemma3TextConfig, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config,
                              Qwen3Config)
    transformers.utils.logging.disable_progress_bar()
    stamp = os.path.join(out, stamp_name)
    if os.path.exists(stamp) and open(stamp).read() == stamp_value:
        print(f"{out}: already made ({stamp_value})")
        return
    arch, shape = SHAPES[shape_name]
    tok_cfg = json.load(open(os.path.join(tokenizer_from, "config.json")))
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    ids = dict(bos_token_id=tok_cfg.get("bos_token_id", 1), eos_token_id=tok_cfg.get("eos_token_id", 2),
               pad_token_id=tok_cfg.get("pad_token_id"))
    if arch == "mistral":
        config = MistralConfig(**shape, **ids, architectures=["MistralForCausalLM"])
    elif arch == "qwen2":
        config = Qwen2Config(**shape, **ids, architectures=["Qwen2ForCausalLM"])
    elif arch == "qwen3":
        config = Qwen3Config(**shape, **ids, architectures=["Qwen3ForCausalLM"])
    elif arch == "phi3":
        config = Phi3Config(**shape, **ids, architectures=["Phi3ForCausalLM"])
    elif arch == "gemma2":
        config = Gemma2Config(**shape, **ids, architectures=["Gemma2ForCausalLM"])
    elif arch == "gemma3":
        config = Gemma3TextConfig(**shape, **ids, architectures=["Gemma3ForCausalLM"])
    else:
        config = LlamaConfig(**shape, **ids, architectures=["LlamaForCausalLM"])
    if nf4:
        os.makedirs(out)
        save_random_nf4(config, out)
    else:
        model = random_weights(config)
        model.save_pretrained(out)
    copied = []
    for f in TOKENIZER_FILES:
        src = os.path.join(tokenizer_from, f)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(out, f))
            copied.append(f)
    tok_vocab = tok_cfg.get("vocab_size", 0)
    if "tokenizer.json" in copied:
        tok_vocab = len(json.load(open(os.path.join(out, "tokenizer.json")))["model"]["vocab"])
    if tok_vocab > config.vocab_size:
        raise SystemExit(f"the tokenizer of {tokenizer_from} has {tok_vocab} ids, the model {config.vocab_size}")
    with open(stamp, "w") as f:
        f.write(stamp_value)
    print(f"made {out}: {stamp_value}, {'4-bit NF4 projections' if nf4 else 'bf16'}, "
          f"tokenizer {', '.join(copied)} ({tok_vocab} ids), {time.time() - t0:.1f} s")
