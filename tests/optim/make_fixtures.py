"""Goldens for the 8-bit blockwise AdamW moments (optim/blockwise8*.h, optim/flat_adamw8bit.cpp).

From bitsandbytes itself (its CPU backend): the code books (functional.create_dynamic_map), each
block's absmax (functional.quantize_blockwise), the dequantisation (dequantize_blockwise), and
five steps of optim.AdamW8bit on the CPU (another algorithm than its CUDA kernel: for closeness).
bitsandbytes has no CPU optimizer step, and its CPU quantize_blockwise picks codes through a
65,536-entry lookup table, not the binary search of its CUDA optimizer kernel; so the codes and
the step come from the reference below, which follows kOptimizerStatic8bit2StateBlockwise and
quantize_2D (csrc/kernels.cu, bitsandbytes 0.50) operation for operation in IEEE fp32 (numpy;
FMAs where nvcc contracts the kernel's source, emulated exactly).

Writes <out>/blockwise8.safetensors.
"""
import argparse
import pathlib

import numpy as np
import torch
from safetensors.torch import save_file

import bitsandbytes.functional as F

F32 = np.float32
BLOCK = 256  # csrc/ops.cu BLOCKSIZE_2STATE


def fma32(a, b, c):
    """fma(a, b, c) rounded once to fp32, elementwise: a*b is exact in fp64, the fp64 sum's error
    is recovered exactly (TwoSum), and the sum rounded to fp32 is wrong only when it lies exactly
    halfway between two fp32 values while the error says on which side the exact value is."""
    a, b, c = (np.asarray(x, np.float32).astype(np.float64) for x in (a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    r = s.astype(np.float32)
    below = r.astype(np.float64) <= s
    lo = np.where(below, r, np.nextafter(r, np.float32(-np.inf)))
    hi = np.where(below, np.nextafter(r, np.float32(np.inf)), r)
    halfway = s == (lo.astype(np.float64) + hi.astype(np.float64)) / 2
    return np.where(halfway & (err > 0), hi, np.where(halfway & (err < 0), lo, r)).astype(np.float32)


def quantize_2d(code, x, signed):
    """quantize_2D<SIGNED>: binary search over the sorted book, then the nearer neighbour by the
    fp32 midpoint (strict comparisons, as the kernel)."""
    x = x.astype(F32)
    pivot = np.full(x.shape, 127)
    upper_pivot = np.full(x.shape, 255)
    lower_pivot = np.zeros(x.shape, dtype=np.int64)
    lower = np.full(x.shape, F32(-1.0 if signed else 0.0))
    upper = np.full(x.shape, F32(1.0))
    val = code[pivot]
    i = 64
    while i > 0:
        gt = x > val
        lower_pivot = np.where(gt, pivot, lower_pivot)
        lower = np.where(gt, val, lower)
        upper_pivot = np.where(gt, upper_pivot, pivot)
        upper = np.where(gt, upper, val)
        pivot = np.where(gt, pivot + i, pivot - i)
        val = code[pivot]
        i >>= 1
    gt = x > val
    mid_up = ((upper + val) * F32(0.5)).astype(F32)
    mid_down = ((lower + val) * F32(0.5)).astype(F32)
    return np.where(gt, np.where(x > mid_up, upper_pivot, pivot), np.where(x < mid_down, lower_pivot, pivot))


def quantize_state(code, s, absmax_per_element, signed):
    """The kernel's store: code of s / absmax, and for the first moment its sign kept."""
    with np.errstate(invalid="ignore", divide="ignore"):
        c = quantize_2d(code, (s / absmax_per_element).astype(F32), signed)
    if signed:
        flip = np.signbit(code[c]) != np.signbit(s)
        c = np.where(flip, np.where(s > 0, c + 1, c - 1), c) & 0xFF  # unsigned char wraps
    return c.astype(np.uint8)


def block_absmax(values):
    """fmaxf from -FLT_MAX over each block (NaN never wins)."""
    blocks = values.reshape(-1, BLOCK)
    return np.fmax.reduce(np.abs(blocks), axis=1, initial=-np.finfo(F32).max).astype(F32)


def scalars(lr, beta1, beta2, eps, wd, step):
    """As the kernel computes them in fp32 from fp32 arguments, the powers correctly rounded."""
    b1, b2, lr32, wd32 = F32(beta1), F32(beta2), F32(lr), F32(wd)
    c1 = F32(1) - F32(float(b1) ** step)
    c2 = np.sqrt(F32(1) - F32(float(b2) ** step), dtype=F32)
    return dict(b1=b1, b2=b2, om1=F32(1) - b1, om2=F32(1) - b2, eps=F32(eps), c2=c2,
                step_size=F32(-(lr32 * c2)) / c1, decay=F32(1) - lr32 * wd32, apply_decay=wd32 > 0)


def bf16_round_away(x):
    """The model's bf16 copy of an fp32 master: nearest, ties away from zero (flat_adamw_math.h)."""
    bits = x.view(np.uint32).astype(np.uint64)
    return (((bits + 0x8000) >> 16) << 16).astype(np.uint32).view(F32)


def bf16_round_even(x):
    return torch.from_numpy(x.copy()).to(torch.bfloat16).float().numpy()


def step(state, grad, coef, sc, qm, qv, form):
    """One kernel step over a flat buffer; form: fp32 (weights fp32), master (fp32 master, bf16
    copy), bf16 (bf16 weights updated in place)."""
    g_raw = grad.astype(F32)
    live = np.isfinite(g_raw)
    absm = np.repeat(state["absmax1"], BLOCK)
    absv = np.repeat(state["absmax2"], BLOCK)
    g = (g_raw * F32(coef)).astype(F32)
    v_old = (qv[state["state2"]] * absv).astype(F32)
    m_old = (qm[state["state1"]] * absm).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = fma32(g, (sc["om2"] * g).astype(F32), (v_old * sc["b2"]).astype(F32))
        m = fma32(np.full_like(g, sc["om1"]), g, (m_old * sc["b1"]).astype(F32))
    m = np.where(live, m, F32(0))
    v = np.where(live, v, F32(0))
    state["absmax1"], state["absmax2"] = block_absmax(m), block_absmax(v)
    w = state["weights"]
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = fma32(np.full_like(v, sc["c2"]), np.full_like(v, sc["eps"]), np.sqrt(v, dtype=F32))
        upd = fma32(np.full_like(m, sc["step_size"]), (m / denom).astype(F32), w)
    if form == "bf16":
        upd = bf16_round_even(upd)
    if sc["apply_decay"]:
        upd = (upd * sc["decay"]).astype(F32)
    if form == "bf16":
        upd = bf16_round_even(upd)
    state["weights"] = np.where(live, upd, w).astype(F32)
    state["state1"] = quantize_state(qm, m, np.repeat(state["absmax1"], BLOCK), True)
    state["state2"] = quantize_state(qv, v, np.repeat(state["absmax2"], BLOCK), False)


def quantisation_goldens(out, qm, qv):
    gen = torch.Generator().manual_seed(3)
    blocks = 24
    scale = torch.logspace(-9, 2, blocks, dtype=torch.float64).float().repeat_interleave(BLOCK)
    x = torch.randn(blocks * BLOCK, generator=gen) * scale
    x[5 * BLOCK + 7] = 0.0  # exact zeros, a -0
    x[6 * BLOCK + 1] = -0.0
    x = torch.cat([x, torch.randn(100, generator=gen)])  # a partial last block
    for name, values, code, signed in (("m", x, qm, True), ("v", x.abs(), qv, False)):
        q, st = F.quantize_blockwise(values, code=torch.from_numpy(code), blocksize=BLOCK)
        absmax = st.absmax.numpy()
        ref = quantize_state(code, values.numpy(), np.repeat(absmax, BLOCK)[: values.numel()], signed)
        out[f"q_in_{name}"] = values
        out[f"q_absmax_{name}"] = st.absmax
        out[f"q_codes_{name}"] = torch.from_numpy(ref)
        # bitsandbytes' own dequantisation of the reference codes.
        out[f"dq_{name}"] = F.dequantize_blockwise(torch.from_numpy(ref), st).float()
        out[f"q_bnb_cpu_codes_{name}"] = q  # its lookup-table codes, for information only


def step_goldens(out, qm, qv):
    n = BLOCK * 12
    gen = torch.Generator().manual_seed(11)
    hyper = dict(beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01)
    lrs = [1e-3, 2e-3, 5e-4, 1e-3, 3e-3]
    coefs = [1.0, 0.37, 1.0, 0.81, 1.0]
    w0 = (torch.randn(n, generator=gen) * 0.5).float()
    out["step_w0"] = w0
    grads = []
    for s in range(len(lrs)):
        scale = torch.logspace(-6, 1, 12).repeat_interleave(BLOCK)
        g = torch.randn(n, generator=gen) * scale
        g[3 * BLOCK:4 * BLOCK] = 0.0  # a block without gradient
        if s == 2:
            g[17] = float("nan")  # a non-finite gradient: moments 0, weight kept
            g[BLOCK * 5 + 3] = float("inf")
        grads.append(g)
        out[f"step_g{s}"] = g
    out["step_lr"] = torch.tensor(lrs, dtype=torch.float64)
    out["step_coef"] = torch.tensor(coefs, dtype=torch.float32)
    out["step_hyper"] = torch.tensor([hyper["beta1"], hyper["beta2"], hyper["eps"], hyper["wd"]], dtype=torch.float64)
    w0_bf16 = w0.to(torch.bfloat16).float().numpy()
    for form, start in (("fp32", w0.numpy()), ("master", w0.numpy()), ("bf16", w0_bf16)):
        st = dict(weights=start.astype(F32).copy(), state1=np.zeros(n, np.uint8), state2=np.zeros(n, np.uint8),
                  absmax1=np.zeros(n // BLOCK, F32), absmax2=np.zeros(n // BLOCK, F32))
        for s, (lr, coef) in enumerate(zip(lrs, coefs)):
            g = grads[s].numpy()
            if form != "fp32":  # a bf16 model's gradients are bf16
                g = grads[s].to(torch.bfloat16).float().numpy()
            sc = scalars(lr, hyper["beta1"], hyper["beta2"], hyper["eps"], hyper["wd"], s + 1)
            step(st, g, coef, sc, qm, qv, form)
            p = f"step_{form}_{s}_"
            out[p + "weights"] = torch.from_numpy(st["weights"].copy())
            if form == "master":
                out[p + "model"] = torch.from_numpy(bf16_round_away(st["weights"]))
            out[p + "codes1"] = torch.from_numpy(st["state1"].copy())
            out[p + "codes2"] = torch.from_numpy(st["state2"].copy())
            out[p + "absmax1"] = torch.from_numpy(st["absmax1"].copy())
            out[p + "absmax2"] = torch.from_numpy(st["absmax2"].copy())


def bnb_cpu_goldens(out):
    """bitsandbytes.optim.AdamW8bit itself on the CPU: its CPU backend is another algorithm than its
    CUDA kernel (torch ops, the lookup-table quantisation, weight decay before the update, no sign
    rule), so the test only checks that ours stays close to it."""
    import bitsandbytes as bnb
    n = BLOCK * 64
    gen = torch.Generator().manual_seed(1)
    w0 = torch.randn(n, generator=gen) * 0.5
    p = torch.nn.Parameter(w0.clone())
    opt = bnb.optim.AdamW8bit([p], lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    out["bnbcpu_w0"] = w0
    for s in range(5):
        scale = torch.logspace(-5, 0, n // BLOCK)[torch.randperm(n // BLOCK, generator=gen)].repeat_interleave(BLOCK)
        g = torch.randn(n, generator=gen) * scale
        out[f"bnbcpu_g{s}"] = g
        p.grad = g.clone()
        opt.step()
        st = opt.state[p]
        out[f"bnbcpu_{s}_p"] = p.detach().clone()
        for key in ("state1", "state2", "absmax1", "absmax2"):
            out[f"bnbcpu_{s}_{key}"] = st[key].clone()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    qm = F.create_dynamic_map(signed=True)
    qv = F.create_dynamic_map(signed=False)
    out = {"map_signed": qm, "map_unsigned": qv}
    quantisation_goldens(out, qm.numpy(), qv.numpy())
    step_goldens(out, qm.numpy(), qv.numpy())
    bnb_cpu_goldens(out)
    save_file({k: v.contiguous() for k, v in out.items()}, str(out_dir / "blockwise8.safetensors"))
    print(f"wrote {len(out)} tensors to {out_dir / 'blockwise8.safetensors'}")


if __name__ == "__main__":
    main()
