"""The peer for benchmarks/distributed: a plain transformers training loop under torch DDP
with padding-free batches, the way data-parallel fine-tuning with transformers usually runs
when it is done well: DataCollatorWithFlattening (one token stream per rank, positions
restarting per example, cu_seqlens for the attention), FlashAttention-2 varlen, gradient
checkpointing on every layer, bf16 weights, torch.optim.AdamW(fused=True). Launched by
torchrun, one process per GPU; prints one JSON line from rank 0: non-padding tokens/s
(global and per GPU) over the steps after --warmup, peak memory (max over ranks), the
attention that ran, each step's loss and non-padding tokens (all ranks), the padding tokens.

    torchrun --standalone --nproc_per_node 2 hf_ddp.py --model DIR --data FILE.jsonl \
        --batch 4 --steps 30 --warmup 5
    hf_ddp.py --model DIR --data FILE.jsonl ...        # one process, no DDP (the 1-GPU rate)

Data: the same JSONL as fptrain's run, shuffled once with --seed (or in file order with
--no-shuffle: then each step holds the examples that fptrain's step holds with
data.shuffle false, so the two are timed on the same tokens), split across ranks the
way torch's DistributedSampler splits it (rank r takes positions r, r + W, r + 2W, ...),
--batch examples per rank and step, truncated to --max-length tokens.

--pad: the padded baseline instead: each micro-batch padded on the right to its longest
example, with the attention mask; padding is neither supervised nor counted in tokens/s
(the JSON gives the padding tokens apart). The supervised tokens are those of the flattened
run (every token but each example's first), so both modes have the same loss.

--eval-data FILE: after training, the mean token loss over every example of FILE (the same
tokens supervised, the same collation as training, --batch examples at a time), in "eval_loss".

--memory-trace-dir DIR: the allocator's history of step --memory-trace-step (1-based, default 3)
on rank 0, each allocation tagged by the phase that made it, and what is alive at the step's peak
(or its out-of-memory error) into DIR/memory_trace.{json,md}: fptrain's logging.memory_trace_step,
for benchmarks/train/memory_trace_report.py to put side by side (PeerMemoryTrace there).

Attention (--attn auto picks the first that can run):
  flash_attention_2  transformers' FA2 path (the flash_attn package);
  torch-varlen       FlashAttention-2 varlen as PyTorch ships it (torch.nn.attention.varlen,
                     the kernel of at::_flash_attention_forward), registered with
                     transformers' AttentionInterface and fed the collator's cu_seqlens;
  sdpa               transformers' SDPA with the block-diagonal mask it derives from the
                     restarting position_ids (benchmarks/train's peer attention): dense
                     over the whole stream, so slower than varlen.
With --pad, auto takes flash_attention_2 (which unpads around the kernel) on a GPU with the
flash_attn package and sdpa with the padding mask otherwise; torch-varlen takes only a
flattened batch.

Differences from fptrain's run, stated rather than hidden: pure bf16 AdamW (no fp32 master
weights, no optimizer sharding: each rank holds all moments), every token supervised (the
same compute as fptrain's masked loss), the loss averaged per rank and the gradients
averaged by DDP; at world size 1 the model is not wrapped in DDP.
"""
import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import random
import time

import torch
import torch.distributed as dist


def pick_attention(requested, device, pad=False):
    """The attention implementation to run: (transformers name, name to report)."""
    has_fa2 = importlib.util.find_spec("flash_attn") is not None
    try:
        from torch.nn.attention import varlen as _varlen  # noqa: F401
        has_torch_varlen = hasattr(_varlen, "varlen_attn")
    except ImportError:
        has_torch_varlen = False
    cuda = device.type == "cuda"
    if requested == "auto":
        if cuda and has_fa2:
            requested = "flash_attention_2"
        elif cuda and has_torch_varlen and not pad:
            requested = "torch-varlen"
        else:
            requested = "sdpa"
    if requested == "eager":
        return "eager", "eager (block-diagonal mask from position_ids)" if not pad else "eager (padding mask)"
    if requested == "flash_attention_2":
        if not has_fa2:
            raise SystemExit("--attn flash_attention_2: the flash_attn package is not importable")
        import flash_attn
        what = ", padding mask, unpadded around the kernel" if pad else ""
        return "flash_attention_2", f"flash_attention_2 (flash_attn {getattr(flash_attn, '__version__', '?')}{what})"
    if pad:
        if requested == "torch-varlen":
            raise SystemExit("--attn torch-varlen takes a flattened batch, not --pad")
        return "sdpa", "sdpa (padding mask)"
    if requested == "torch-varlen":
        if not has_torch_varlen:
            raise SystemExit("--attn torch-varlen: this torch has no torch.nn.attention.varlen.varlen_attn")
        register_torch_varlen()
        return "torch_varlen_fa2", f"torch-varlen (FA2 varlen in torch {torch.__version__.split('+')[0]})"
    return "sdpa", "sdpa (block-diagonal mask from position_ids)"


def register_torch_varlen():
    """Registers torch's FA2 varlen kernel as a transformers attention implementation."""
    from torch.nn.attention.varlen import varlen_attn
    from transformers import AttentionInterface

    params = inspect.signature(varlen_attn).parameters

    def torch_varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        cu = kwargs.get("cu_seq_lens_q")
        max_len = kwargs.get("max_length_q")
        if cu is None or max_len is None:
            raise ValueError("torch-varlen attention needs cu_seq_lens_q and max_length_q "
                             "(DataCollatorWithFlattening(return_flash_attn_kwargs=True))")
        if query.shape[0] != 1:
            raise ValueError(f"torch-varlen attention takes one flattened sequence, got batch {query.shape[0]}")
        # (1, heads, tokens, head_dim) -> (tokens, heads, head_dim); FA2 takes grouped K/V heads as they are.
        q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))
        if q.dtype == torch.float32:  # fp32 norms under autocast (QLoRA); transformers' FA2 path casts the same way
            q, k, v = (t.to(torch.get_autocast_dtype("cuda")) for t in (q, k, v))
        window = kwargs.get("sliding_window")  # HF: key j visible from i iff i - j < window
        if "window_size" in params:
            mask = {"window_size": (window - 1 if window else -1, 0)}
        elif window:
            raise ValueError("torch-varlen attention: this torch's varlen_attn has no window_size")
        else:
            mask = {"is_causal": True}
        out = varlen_attn(q, k, v, cu, cu, int(max_len), int(max_len), scale=scaling, **mask)
        return out.unsqueeze(0), None  # (1, tokens, heads, head_dim), as sdpa_attention_forward returns

    AttentionInterface.register("torch_varlen_fa2", torch_varlen_attention)


def load_examples(tok, path, positions, max_length):
    """Token ids of the examples at `positions` (indices into the file's lines)."""
    wanted = set(positions)
    lines = {}
    with open(path) as f:
        for i, line in enumerate(f):
            if i in wanted:
                lines[i] = json.loads(line)
    out = {}
    for i, ex in lines.items():
        if "messages" in ex:
            ids = tok.apply_chat_template(ex["messages"], tokenize=True)
        else:
            ids = tok(ex.get("text") or (ex.get("prompt", "") + ex.get("completion", ""))).input_ids
        if hasattr(ids, "keys"):  # BatchEncoding in recent transformers
            ids = ids["input_ids"]
        out[i] = list(ids)[:max_length]
    return out


def pad_collate(features, pad_id):
    """Right padding to the longest example, with the attention mask. Labels are -100 on the padding
    and on each example's first token: the tokens DataCollatorWithFlattening supervises."""
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.full((len(features), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(features), longest), dtype=torch.long)
    labels = torch.full((len(features), longest), -100, dtype=torch.long)
    for i, f in enumerate(features):
        row = torch.tensor(f["input_ids"], dtype=torch.long)
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
        labels[i, 1:len(row)] = row[1:]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def count_tokens(batch):
    """(non-padding tokens, padding tokens, supervised tokens) of a collated micro-batch."""
    total = batch["input_ids"].numel()
    real = int(batch["attention_mask"].sum()) if "attention_mask" in batch else total
    # the loss shifts labels by one: the label at position t + 1 is the target of position t
    supervised = int((batch["labels"][..., 1:] != -100).sum())
    return real, total - real, supervised


def buffer_kinds(model, trained, opt, peak_bytes):
    """This rank's memory by buffer kind (GiB), as fptrain's summary counts it: the parameters as stored
    (bitsandbytes' packed 4-bit ones at their real size), one gradient per trained parameter, the
    optimizer's state tensors, and the rest of the allocator's peak (activations and workspace)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in trained)
    state = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
    kinds = {"weights": weights, "gradients": grads, "optimizer_state": state,
             "rest_of_peak": max(0.0, peak_bytes - weights - grads - state)}
    return {k: v / 2**30 for k, v in kinds.items()}


def peer_buffers(model, opt):
    """What the memory trace names after the backward: parameters, gradients, optimizer state."""
    out = [("weights", p) for p in model.parameters()]
    out += [("gradients", p.grad) for p in model.parameters() if p.grad is not None]
    for st in opt.state.values():
        out += [("moments" if k.startswith("exp_avg") else "optimizer state", t) for k, t in st.items()
                if torch.is_tensor(t)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=4, help="examples per rank and step")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="steps before the measured ones")
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--attn", choices=["auto", "flash_attention_2", "torch-varlen", "sdpa", "eager"], default="auto")
    ap.add_argument("--no-checkpointing", action="store_true", help="keep every activation")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches of --batch examples per step")
    ap.add_argument("--liger", action="store_true",
                    help="Liger Kernel's fused RMSNorm, RoPE, SwiGLU and linear + cross-entropy "
                         "(apply_liger_kernel_to_<model_type>: llama, mistral, qwen2, qwen3, phi3, gemma2, "
                         "gemma3_text; GeGLU for Gemma)")
    ap.add_argument("--lora", type=int, default=0,
                    help="rank of PEFT LoRA adapters on q, k, v, o, gate, up and down (0: full fine-tuning); "
                         "PEFT's defaults otherwise (fp32 adapters on the bf16 base)")
    ap.add_argument("--lora-alpha", type=float, default=0, help="LoRA alpha (default 2 x rank)")
    ap.add_argument("--qlora", action="store_true",
                    help="with --lora: the base in 4-bit NF4 with double quantisation (bitsandbytes, bf16 compute), "
                         "prepared as QLoRA recipes do (peft.prepare_model_for_kbit_training)")
    ap.add_argument("--optim", choices=["adamw", "adamw8bit"], default="adamw",
                    help="torch.optim.AdamW (fused on CUDA), or bitsandbytes' AdamW8bit (8-bit blockwise moments: "
                         "how a full 8B fine-tune fits one 80 GB card with transformers)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-shuffle", action="store_true",
                    help="take the examples in file order: fptrain with data.shuffle false sees the same ones per step")
    ap.add_argument("--name", default="hf-ddp")
    ap.add_argument("--device", default="auto", help="auto | cuda | cpu")
    ap.add_argument("--pad", action="store_true",
                    help="padded micro-batches (to the longest example, attention mask) instead of flattened ones")
    ap.add_argument("--eval-data", help="JSONL whose mean token loss is reported after training")
    ap.add_argument("--memory-trace-dir", help="write what is alive at the peak of --memory-trace-step here")
    ap.add_argument("--memory-trace-step", type=int, default=3, help="the step (1-based) --memory-trace-dir records")
    a = ap.parse_args()
    if a.warmup >= a.steps:
        ap.error("--warmup must be smaller than --steps")

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    distributed = "RANK" in os.environ and world > 1
    if use_cuda:
        torch.cuda.set_device(device)
    if distributed:
        if use_cuda:
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorWithFlattening
    transformers.utils.logging.disable_progress_bar()
    attn_name, attn_label = pick_attention(a.attn, device, a.pad)

    # The same shuffled order on every rank; rank r takes every world-th example of it.
    with open(a.data) as f:
        n_lines = sum(1 for _ in f)
    order = list(range(n_lines))
    if not a.no_shuffle:
        random.Random(a.seed).shuffle(order)
    mine = order[rank::world]
    per_step = a.batch * a.grad_accum
    need = a.steps * per_step
    if len(mine) < need:
        raise SystemExit(f"{a.data}: {n_lines} examples, rank {rank} needs {need} ({a.steps} steps x {per_step})")
    mine = mine[:need]
    tok = AutoTokenizer.from_pretrained(a.model)
    ids = load_examples(tok, a.data, mine, a.max_length)
    if a.pad:
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        collate = lambda features: pad_collate(features, pad_id)  # noqa: E731
    else:
        collate = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="pt")

    dtype = torch.bfloat16 if use_cuda else torch.float32
    load = dict(dtype=dtype, attn_implementation=attn_name)
    if use_cuda and importlib.util.find_spec("accelerate") is not None:
        load["device_map"] = {"": device}
    with open(os.path.join(a.model, "config.json")) as f:
        model_json = json.load(f)
    stored_4bit = "quantization_config" in model_json  # a 4-bit checkpoint loads as stored
    if model_json.get("attn_logit_softcapping") and attn_name not in ("flash_attention_2", "eager"):
        # Gemma 2's soft-capped scores: neither torch's varlen kernel nor sdpa has them; eager takes
        # the flattened batch through a block-diagonal mask from position_ids.
        attn_name, attn_label = "eager", "eager (soft-capped scores; block-diagonal mask from position_ids)"
        load["attn_implementation"] = attn_name
    if a.qlora and not stored_4bit:
        from transformers import BitsAndBytesConfig
        load["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype)
    if a.qlora or stored_4bit:
        load["device_map"] = {"": device}
    model = AutoModelForCausalLM.from_pretrained(a.model, **load)
    if not (a.qlora or stored_4bit):
        model = model.to(device)
    model.config.use_cache = False
    if a.liger:
        import liger_kernel.transformers as liger
        apply = {"llama": liger.apply_liger_kernel_to_llama, "mistral": liger.apply_liger_kernel_to_mistral,
                 "qwen2": liger.apply_liger_kernel_to_qwen2, "qwen3": liger.apply_liger_kernel_to_qwen3,
                 "phi3": liger.apply_liger_kernel_to_phi3, "gemma2": liger.apply_liger_kernel_to_gemma2,
                 "gemma3_text": liger.apply_liger_kernel_to_gemma3_text}
        gated = {"geglu": True} if model.config.model_type.startswith("gemma") else {"swiglu": True}
        apply[model.config.model_type](rope=True, rms_norm=True, cross_entropy=False,
                                       fused_linear_cross_entropy=True, model=model, **gated)
        attn_label += " + Liger"
    if not a.no_checkpointing:
        ckpt = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=ckpt)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt)
    # bitsandbytes packs two 4-bit weights per byte; its quant_state keeps the weight's real shape.
    num_parameters = sum(p.quant_state.shape.numel() if getattr(p, "quant_state", None) is not None else p.numel()
                         for p in model.parameters())
    if a.lora:
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        if a.qlora:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=not a.no_checkpointing,
                                                    gradient_checkpointing_kwargs={"use_reentrant": False})
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        if model.config.model_type == "phi3":
            targets = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=a.lora_alpha or 2 * a.lora, lora_dropout=0.0,
                                                 target_modules=targets, task_type="CAUSAL_LM"))
        attn_label += f" + PEFT {'QLoRA (bitsandbytes NF4)' if a.qlora else 'LoRA'} r{a.lora}"
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None) \
        if distributed else model
    if a.optim == "adamw8bit":
        import bitsandbytes as bnb
        opt = bnb.optim.AdamW8bit(trained, lr=a.lr)
        attn_label += " + bitsandbytes AdamW8bit"
    else:
        opt = torch.optim.AdamW(trained, lr=a.lr, fused=use_cuda)

    def sync():
        if use_cuda:
            torch.cuda.synchronize()
        if distributed:
            dist.barrier()

    # prepare_model_for_kbit_training keeps norms, embeddings and the head in fp32; the HF Trainer's bf16=True
    # (as Axolotl's QLoRA configs run it) computes under autocast, which is what flash attention needs.
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if a.qlora and use_cuda else contextlib.nullcontext()
    trace = None
    if a.memory_trace_dir and use_cuda and rank == 0:
        import sys
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
        from memory_trace_report import PeerMemoryTrace
        trace = PeerMemoryTrace(model, a.memory_trace_dir, a.memory_trace_step)
    losses, tokens, start = [], 0, None
    step_counts = []  # (non-padding, padding) tokens of this rank per step
    for step in range(a.steps):
        if step == a.warmup:  # the earlier steps pay for allocator growth, kernel selection, NCCL set-up
            sync()
            start = time.perf_counter()
        n_tokens, n_padding, step_loss = 0, 0, 0.0
        if trace:
            trace.begin(step + 1)
        try:
            for micro in range(a.grad_accum):
                first = step * per_step + micro * a.batch
                batch = collate([{"input_ids": ids[i]} for i in mine[first:first + a.batch]])
                real, padding, _ = count_tokens(batch)
                n_tokens += real
                n_padding += padding
                batch = {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}
                # DDP reduces on the last micro-batch only.
                sync_ctx = net.no_sync() if distributed and micro + 1 < a.grad_accum else contextlib.nullcontext()
                with sync_ctx, autocast:
                    if trace:
                        trace.forward()
                    loss = net(**batch, use_cache=False).loss / a.grad_accum
                    if trace:
                        trace.label_loss(loss)
                    loss.backward()
                step_loss = step_loss + loss.detach()
            loss = step_loss
            if trace:
                trace.name_buffers(peer_buffers(model, opt))
                trace.optimizer()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            if trace:
                trace.end(oom=True)
            raise
        if trace:
            trace.end()
        losses.append(loss.detach())
        step_counts.append((n_tokens, n_padding))
        if step >= a.warmup:
            tokens += n_tokens
    sync()
    seconds = time.perf_counter() - start

    eval_loss, eval_tokens = None, 0
    if a.eval_data:
        # Every rank takes every world-th example of the file; the token losses are summed over ranks.
        with open(a.eval_data) as f:
            n_eval = sum(1 for _ in f)
        eval_mine = list(range(rank, n_eval, world))
        eval_ids = load_examples(tok, a.eval_data, eval_mine, a.max_length)
        model.eval()
        loss_sum = torch.zeros(2, dtype=torch.float64, device=device)
        with torch.no_grad():
            for first in range(0, len(eval_mine), a.batch):
                batch = collate([{"input_ids": eval_ids[i]} for i in eval_mine[first:first + a.batch]])
                _, _, supervised = count_tokens(batch)
                if supervised == 0:
                    continue
                batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
                mean = model(**batch, use_cache=False).loss  # mean over the batch's supervised tokens
                loss_sum += torch.stack([mean.double() * supervised, torch.tensor(float(supervised),
                                                                                  dtype=torch.float64, device=device)])
        model.train()
        if distributed:
            dist.all_reduce(loss_sum)
        total, eval_tokens = loss_sum.tolist()
        eval_loss = total / eval_tokens if eval_tokens else None

    counts = torch.tensor(step_counts, dtype=torch.float64, device=device)
    if distributed:
        dist.all_reduce(counts)  # every rank's tokens of each step
    step_tokens = [int(x) for x in counts[:, 0].tolist()]
    padding_tokens = int(counts[:, 1].sum())

    stats = torch.tensor([float(tokens), seconds,
                          torch.cuda.max_memory_allocated(device) if use_cuda else 0.0,
                          torch.cuda.max_memory_reserved(device) if use_cuda else 0.0], dtype=torch.float64,
                         device=device)
    if distributed:
        tok_sum = stats[:1].clone()
        dist.all_reduce(tok_sum)  # global tokens
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # slowest rank's time, largest peak
        stats[0] = tok_sum[0]
    global_tokens, seconds, peak_alloc, peak_res = stats.tolist()
    memory = buffer_kinds(model, trained, opt, peak_alloc) if use_cuda else None
    if rank == 0:
        tps = global_tokens / seconds
        out = {"memory_gib": memory,"name": a.name, "impl": "transformers+ddp" if distributed else "transformers",
               "mode": "pad" if a.pad else "flatten",
               "world_size": world, "attention": attn_label, "tokens_per_s": tps,
               "tokens_per_s_per_gpu": tps / world, "steps_measured": a.steps - a.warmup,
               "examples_per_gpu": a.batch, "grad_accumulation": a.grad_accum, "num_parameters": num_parameters,
               "mfu": 6 * num_parameters * tps / world / 989e12,
               "peak_allocated_gib": peak_alloc / 2**30, "peak_reserved_gib": peak_res / 2**30,
               "first_loss": float(losses[0]), "last_loss": float(losses[-1]),
               "losses": [float(x) for x in losses], "activation_checkpointing": not a.no_checkpointing,
               "tokens": sum(step_tokens), "padding_tokens": padding_tokens, "tokens_per_step": step_tokens,
               "supervised": "every token but each example's first", "eval_loss": eval_loss,
               "eval_supervised_tokens": int(eval_tokens),
               "device": torch.cuda.get_device_name(device) if use_cuda else "cpu",
               "torch": torch.__version__, "transformers": transformers.__version__}
        print(json.dumps(out), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
