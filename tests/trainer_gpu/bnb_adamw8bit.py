"""bitsandbytes' AdamW8bit on CUDA, step by step, for tests/trainer_gpu/flat_adamw8bit_gpu_test.cpp.

For each case (fp32 and bf16 parameters; a length that is whole blocks and one with a partial
last block) it draws the initial parameter and the gradients of each step from a seeded CPU
generator, runs bitsandbytes.optim.AdamW8bit (optim_bits=8, blockwise, the default
min_8bit_size: every tensor here is larger) and writes, after every step, the parameter and the
state (state1/state2 codes, absmax1/absmax2) to <out>/bnb_adamw8bit.safetensors. Exit code 77:
no CUDA or no CUDA build of bitsandbytes here (the test skips).
"""
import argparse
import pathlib
import sys

import torch
from safetensors.torch import save_file

LR, BETAS, EPS, WD = 2e-3, (0.9, 0.999), 1e-8, 0.01
STEPS = 5
CASES = {"fp32_whole": (torch.float32, 256 * 64), "fp32_ragged": (torch.float32, 256 * 64 + 100),
         "bf16_whole": (torch.bfloat16, 256 * 64)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        return 77
    try:
        import bitsandbytes as bnb
    except Exception as e:  # noqa: BLE001 - any failure to load means: not testable here
        print(f"bitsandbytes unavailable: {e}")
        return 77
    out = {"hyper": torch.tensor([LR, BETAS[0], BETAS[1], EPS, WD], dtype=torch.float64)}
    for name, (dtype, n) in CASES.items():
        gen = torch.Generator().manual_seed(17)
        p0 = (torch.randn(n, generator=gen) * 0.5).to(dtype)
        p = torch.nn.Parameter(p0.cuda())
        opt = bnb.optim.AdamW8bit([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
        out[f"{name}_p0"] = p0
        for s in range(STEPS):
            # Five decades across blocks (a block of a real tensor is one region of it).
            blocks = (n + 255) // 256
            scale = torch.logspace(-5, 0, blocks)[torch.randperm(blocks, generator=gen)].repeat_interleave(256)[:n]
            g = (torch.randn(n, generator=gen) * scale).to(dtype)
            out[f"{name}_g{s}"] = g
            p.grad = g.cuda()
            opt.step()
            st = opt.state[p]
            if st["state1"].dtype != torch.uint8:
                print(f"{name}: bitsandbytes kept 32-bit state")
                return 1
            for key in ("state1", "state2", "absmax1", "absmax2"):
                out[f"{name}_{s}_{key}"] = st[key].detach().cpu().clone()
            out[f"{name}_{s}_p"] = p.detach().cpu().clone()
    path = pathlib.Path(args.out) / "bnb_adamw8bit.safetensors"
    save_file({k: v.contiguous() for k, v in out.items()}, str(path))
    print(f"bitsandbytes {bnb.__version__}: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
