"""Python side of the checkpoint-loading benchmark.

  bench_helper.py make    --out DIR [--shape llama2-7b|tiny] [--max-shard-size 5GB]
      A Llama-shaped checkpoint saved by transformers (bf16, random N(0, 0.02) weights),
      built on the meta device and filled directly (on the GPU when there is one), so
      making 7B takes seconds instead of transformers' slow initialisation.
  bench_helper.py peers   --checkpoint DIR [--device cuda] [--dtype bfloat16] [--repeats 2] --json FILE
      Times the peers on the same files, cold and warm: safetensors.torch.load_file onto
      the device, and transformers' AutoModelForCausalLM.from_pretrained(device_map=device).
  bench_helper.py report  --inputs A.json B.json --md FILE --json FILE
      One table (markdown) and one JSON from load_bench's and the peers' results.
"""
import argparse
import datetime
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from random_model import random_weights  # noqa: E402

SHAPES = {
    # Llama-2-7B
    "llama2-7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                      rms_norm_eps=1e-5),
    # about 0.9 GB in bf16, to try the whole path on a workstation
    "small": dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                  num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=4096, rms_norm_eps=1e-5),
    # the same structure, small enough to try anywhere
    "tiny": dict(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5),
}


def weight_files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))


def make(args):
    from transformers import LlamaConfig
    stamp = os.path.join(args.out, ".bench-shape")
    if os.path.exists(stamp) and open(stamp).read() == args.shape + args.max_shard_size:
        print(f"checkpoint {args.out} already made ({args.shape})")
        return
    t0 = time.time()
    model = random_weights(LlamaConfig(**SHAPES[args.shape], architectures=["LlamaForCausalLM"]))
    model.save_pretrained(args.out, max_shard_size=args.max_shard_size)
    with open(stamp, "w") as f:
        f.write(args.shape + args.max_shard_size)
    size = sum(os.path.getsize(f) for f in weight_files(args.out))
    print(f"made {args.out}: {args.shape}, {len(weight_files(args.out))} files, {size / 1e9:.2f} GB, "
          f"{model.num_parameters() / 1e9:.2f} B parameters in {time.time() - t0:.1f} s")


def make_cold(files):
    """Drops the page cache if allowed; evicts the files' pages in any case."""
    os.sync()
    dropped = False
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        dropped = True
    except OSError:
        pass
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return dropped


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peers(args):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    import transformers
    transformers.utils.logging.disable_progress_bar()
    files = weight_files(args.checkpoint)
    size = sum(os.path.getsize(f) for f in files)
    dtype = getattr(torch, args.dtype)
    if args.device.startswith("cuda"):
        torch.ones(1, device=args.device).sum().item()  # context creation is not load time
    runs, all_dropped = [], True
    try:
        import accelerate  # noqa: F401
        use_device_map = True
    except ImportError:
        use_device_map = False
        print("  (accelerate is not installed: transformers loads on the CPU, then .to(device))")

    def record(what, cache, seconds):
        runs.append({"what": what, "cache": cache, "seconds": seconds, "gb_per_s": size / 1e9 / seconds})
        print(f"  {what:34s} {cache:5s} {seconds:8.3f} s  {size / 1e9 / seconds:6.2f} GB/s", flush=True)

    for _ in range(args.repeats):
        for cold in (True, False):
            cache = "cold" if cold else "warm"
            if cold:
                all_dropped = make_cold(files) and all_dropped
            t0 = time.perf_counter()
            tensors = {}
            for f in files:
                tensors.update(load_file(f, device=args.device))
            synchronize(args.device)
            record("safetensors load_file", cache, time.perf_counter() - t0)
            del tensors

            if cold:
                make_cold(files)
            t0 = time.perf_counter()
            if use_device_map:
                model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=dtype, device_map=args.device)
            else:  # device_map needs accelerate; load on the CPU, then move
                model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=dtype).to(args.device)
            synchronize(args.device)
            record("transformers from_pretrained", cache, time.perf_counter() - t0)
            del model
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    result = {"device": args.device, "page_cache_dropped": all_dropped, "runs": runs,
              "transformers_method": "device_map" if use_device_map else "cpu then .to(device)",
              "torch": torch.__version__, "transformers": transformers.__version__}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


def report(args):
    fptrain, peer = (json.load(open(p)) for p in args.inputs)
    device_name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    ck = fptrain["checkpoint"]
    best = {}
    for source in (fptrain, peer):
        for r in source["runs"]:
            key = (r["what"], r["cache"])
            if key not in best or r["seconds"] < best[key]["seconds"]:
                best[key] = r
    dropped = fptrain["page_cache_dropped"] and peer["page_cache_dropped"]
    lines = [
        f"# Loading a {ck['parameters'] / 1e9:.2f} B-parameter checkpoint "
        f"({ck['files']} safetensors files, {ck['bytes'] / 1e9:.2f} GB, {ck['stored_dtype']})",
        "",
        f"Device: {device_name} · target {fptrain['device']} {fptrain['target_dtype']} · "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} · "
        f"torch {peer['torch']}, transformers {peer['transformers']}",
        "",
        "Cold: " + ("page cache dropped (/proc/sys/vm/drop_caches) before each run." if dropped else
                   "/proc/sys/vm/drop_caches not writable; the files were evicted with posix_fadvise(DONTNEED) "
                   "(load_bench reports the fraction still cached)."),
        f"Best of the repeats. transformers loads with {peer['transformers_method']}. "
        "`*` marks fptrain's default byte reader.",
        "",
        "| what | cold s | cold GB/s | warm s | warm GB/s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    order = ["read bytes only"] + sorted(w for w, _ in best if w.startswith("fptrain")) + [
        "safetensors load_file", "transformers from_pretrained"]
    for what in dict.fromkeys(order):
        cold, warm = best.get((what, "cold")), best.get((what, "warm"))
        if not cold and not warm:
            continue
        cell = lambda r, k: f"{r[k]:.2f}" if r else "-"
        lines.append(f"| {what} | {cell(cold, 'seconds')} | {cell(cold, 'gb_per_s')} | "
                     f"{cell(warm, 'seconds')} | {cell(warm, 'gb_per_s')} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.md, "w") as f:
        f.write(text)
    with open(args.json, "w") as f:
        json.dump({"device_name": device_name, "fptrain": fptrain, "peers": peer}, f, indent=2)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("--out", required=True)
    p.add_argument("--shape", default="llama2-7b", choices=sorted(SHAPES))
    p.add_argument("--max-shard-size", default="5GB")
    p = sub.add_parser("peers")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", required=True)
    p = sub.add_parser("report")
    p.add_argument("--inputs", nargs=2, required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--json", required=True)
    args = parser.parse_args()
    {"make": make, "peers": peers, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
