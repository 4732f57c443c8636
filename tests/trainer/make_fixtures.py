"""Fixtures for the trainer tests, made with the real libraries (CPU, fp32).

  <out>/llama/          a tiny LlamaForCausalLM saved by transformers (random init, GQA 4/2)
                        with a SentencePiece BPE tokenizer (tokenizer.model, LlamaTokenizer)
  <out>/llama64/        the same with head_dim 64 (2 heads, 1 key/value head), for the GPU tests
  <out>/tokens.jsonl    240 pre-tokenized examples {input_ids, labels}: arithmetic
                        progressions (learnable), the first part of each masked as a prompt
  <out>/chat.jsonl      96 `messages` examples (user / assistant) in plain English
"""
import argparse
import json
import pathlib
import random

import sentencepiece as spm
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM)

WORDS = ("apple river blue green city mountain light book tree house garden friend water stone cloud "
         "bird song road window paper table chair music summer winter").split()


def chat_examples(rng, n):
    out = []
    for _ in range(n):
        kind = rng.randrange(3)
        if kind == 0:
            a, b = rng.randrange(100), rng.randrange(100)
            m = [{"role": "user", "content": f"What is {a} plus {b}?"},
                 {"role": "assistant", "content": f"{a} plus {b} equals {a + b}."}]
        elif kind == 1:
            w = rng.sample(WORDS, rng.randrange(2, 9))
            m = [{"role": "user", "content": "Repeat these words: " + " ".join(w)},
                 {"role": "assistant", "content": " ".join(w)}]
        else:
            w = rng.sample(WORDS, rng.randrange(2, 6))
            m = [{"role": "system", "content": "You answer briefly."},
                 {"role": "user", "content": "Reverse the words: " + " ".join(w)},
                 {"role": "assistant", "content": " ".join(reversed(w))}]
        out.append({"messages": m})
    return out


def save_beside(out, name, model_dir, model):
    """`model` saved as out/name with model_dir's tokenizer (the same for every fixture model)."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.model", "tokenizer_config.json"):
        (folder / f).write_bytes((model_dir / f).read_bytes())
    model.save_pretrained(folder)


def save_adapter(folder, model_dir, settings, seed):
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:  # the GPU machine's environment (its tests use no adapter); scripts/requirements.txt has it
        print(f"peft is not installed: {folder} not made")
        return
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                           LoraConfig(lora_dropout=0.0, **settings))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    model.save_pretrained(folder)


def save_four_bit(folder, model_dir):
    """model_dir as bitsandbytes stores a 4-bit NF4 base with double quantisation (QLoRA's)."""
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:  # as save_adapter
        print(f"bitsandbytes is not installed: {folder} not made")
        return
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, device_map={"": "cpu"},
                                                 quantization_config=BitsAndBytesConfig(
                                                     load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                     bnb_4bit_use_double_quant=True,
                                                     bnb_4bit_compute_dtype=torch.float32))
    save_beside(folder.parent, folder.name, model_dir, model)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = pathlib.Path(ap.parse_args().out)
    model_dir = out / "llama"
    model_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)

    chat = chat_examples(rng, 96)
    with open(out / "chat.jsonl", "w") as f:
        for ex in chat:
            f.write(json.dumps(ex) + "\n")

    corpus = [m["content"] for ex in chat_examples(random.Random(1), 3000) for m in ex["messages"]]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=str(model_dir / "tokenizer"), vocab_size=320,
        model_type="bpe", byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        split_digits=True, hard_vocab_limit=False, minloglevel=2)
    (model_dir / "tokenizer.vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(model_dir / "tokenizer.model"))
    vocab = sp.get_piece_size()
    with open(model_dir / "tokenizer_config.json", "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False}, f)

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2, initializer_range=0.05)
    LlamaForCausalLM(config).save_pretrained(model_dir)

    # head_dim 64 (what our GPU kernels take) for the GPU tests; same tokenizer.
    torch.manual_seed(1)
    wide = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                       bos_token_id=1, eos_token_id=2, initializer_range=0.05)
    save_beside(out, "llama64", model_dir, LlamaForCausalLM(wide))

    # A Qwen3 (q/k norms, q/k/v/o biases, head_dim 16, a window of 8 in layer 0,
    # tied embeddings) for the training loop against transformers; same tokenizer.
    torch.manual_seed(2)
    qwen = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=True,
                       use_sliding_window=True, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                       max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=True,
                       bos_token_id=1, eos_token_id=2, initializer_range=0.05)
    save_beside(out, "qwen3", model_dir, Qwen3ForCausalLM(qwen))

    # A Gemma 2 (soft-caps that bite, sandwich norms, a window of 8 in layer 0,
    # query_pre_attn_scalar 24, tied) for the training loop; same tokenizer.
    torch.manual_seed(3)
    gemma = Gemma2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                         attn_logit_softcapping=2.0, final_logit_softcapping=5.0, query_pre_attn_scalar=24,
                         max_position_embeddings=512, rms_norm_eps=1e-5, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2, initializer_range=0.05)
    save_beside(out, "gemma2", model_dir, Gemma2ForCausalLM(gemma))

    # A Gemma 3 text model (q/k norms, a local RoPE base on the sliding layer 0 and a
    # scaled global one on layer 1, a window of 8, a final soft-cap of 5); same tokenizer.
    torch.manual_seed(4)
    gemma3 = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                              layer_types=["sliding_attention", "full_attention"], final_logit_softcapping=5.0,
                              query_pre_attn_scalar=16, max_position_embeddings=512, rms_norm_eps=1e-5,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2, initializer_range=0.05,
                              rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                  "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    save_beside(out, "gemma3", model_dir, Gemma3ForCausalLM(gemma3))

    # PEFT adapters to train from (LoRA's B is zero at init, which would hide A's gradient in the
    # first step: both random here). Llama: all seven projections; Qwen3: a subset with rsLoRA.
    save_adapter(out / "llama-lora", out / "llama", dict(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                           "down_proj"]), seed=5)
    save_adapter(out / "qwen3-lora", out / "qwen3", dict(
        r=8, lora_alpha=4, target_modules=["q_proj", "o_proj", "up_proj"], use_rslora=True), seed=6)
    save_four_bit(out / "llama-nf4", out / "llama")

    with open(out / "tokens.jsonl", "w") as f:
        for i in range(240):
            length = rng.randrange(6, 48)
            start, stride = rng.randrange(vocab), rng.randrange(1, 4)
            ids = [3 + (start + stride * t) % (vocab - 3) for t in range(length)]
            prompt = rng.randrange(1, length // 2 + 1)
            labels = [-100] * prompt + ids[prompt:]
            f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")


if __name__ == "__main__":
    main()
