"""Module 03 (triton) reference kernels against PyTorch on one GPU (written for the H200).

    python3 benchmarks/triton_h200.py            # from the repository root, on a CUDA machine
    python3 benchmarks/triton_h200.py flash      # only some parts: softmax layernorm matmul flash

Measures, with triton.testing.do_bench (median of ~100 ms of runs after 25 ms of warm-up; do_bench clears
the L2 between runs):
- device copy bandwidth (torch copy_ of 1 GiB, bytes read + written): the ceiling for memory-bound kernels;
- triton-03 softmax and triton-05 LayerNorm forward: achieved GB/s (input read once, output written once),
  as a fraction of that copy bandwidth (target >= 85 %);
- triton-06 and triton-07 bf16 matmul at 4096^3: TFLOP/s against torch.matmul (target >= 90 %);
- triton-09 causal FlashAttention forward, bf16, seq 4096, head dim 128: TFLOP/s (causal FLOPs counted
  as half of 4*B*H*S^2*D) against torch SDPA (target >= 80 %).
Every Triton result is checked against PyTorch before it is timed. The table is printed last.
"""

from __future__ import annotations

import datetime
import importlib.util
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parent.parent / "modules" / "03-triton"


def load(rel: str):
    path = ROOT / rel
    name = "bench_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def ms(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def check(name, got, ref, rtol, atol):
    err = (got.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    ok = bool(torch.isfinite(got).all()) and err <= atol + rtol * scale
    print(f"  check {name}: max|err| = {err:.3e} (max|ref| = {scale:.3e}) {'ok' if ok else 'FAILED'}", flush=True)
    if not ok:
        raise SystemExit(f"{name}: wrong result, not timing it")


def copy_bandwidth() -> float:
    x = torch.randn(2**28, device="cuda")  # 1 GiB
    y = torch.empty_like(x)
    t = ms(lambda: y.copy_(x))
    return 2 * x.numel() * 4 / (t * 1e-3) / 1e9  # GB/s, read + write


def bench_softmax(table, copy_gbs):
    mod = load("03-fused-softmax/softmax.py")
    for dtype in (torch.float32, torch.bfloat16):
        M, N = 32768, 4096
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        out = torch.empty_like(x)
        mod.softmax(x, out=out)
        check(f"softmax {dtype}", out, torch.softmax(x.float(), -1), 1e-2, 1e-5)
        nbytes = 2 * M * N * x.element_size()
        t_tri = ms(lambda: mod.softmax(x, out=out))
        t_torch = ms(lambda: torch.softmax(x, -1))
        gbs = nbytes / (t_tri * 1e-3) / 1e9
        gbs_torch = nbytes / (t_torch * 1e-3) / 1e9
        table.append((f"triton-03 softmax {M}x{N} {str(dtype)[6:]}", f"{gbs:.0f} GB/s",
                      f"copy {copy_gbs:.0f} GB/s (torch.softmax {gbs_torch:.0f})", gbs / copy_gbs, 0.85))


def bench_layernorm(table, copy_gbs):
    mod = load("05-layernorm/layernorm.py")
    M, N = 32768, 4096
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        w = torch.randn(N, device="cuda", dtype=dtype)
        b = torch.randn(N, device="cuda", dtype=dtype)
        y, _, _ = mod.layernorm_forward(x, w, b, 1e-5)
        check(f"layernorm {dtype}", y, F.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5), 2e-2, 2e-2)
        nbytes = 2 * M * N * x.element_size() + 2 * N * x.element_size() + 2 * M * 4  # x, y, w, b, mean, rstd
        t_tri = ms(lambda: mod.layernorm_forward(x, w, b, 1e-5))
        t_torch = ms(lambda: F.layer_norm(x, (N,), w, b, 1e-5))
        gbs = nbytes / (t_tri * 1e-3) / 1e9
        gbs_torch = 2 * M * N * x.element_size() / (t_torch * 1e-3) / 1e9
        table.append((f"triton-05 LayerNorm fwd {M}x{N} {str(dtype)[6:]}", f"{gbs:.0f} GB/s",
                      f"copy {copy_gbs:.0f} GB/s (F.layer_norm {gbs_torch:.0f})", gbs / copy_gbs, 0.85))


def bench_matmul(table):
    m06 = load("06-matmul/matmul.py")
    m07 = load("07-swizzle-autotune/swizzle_matmul.py")
    M = N = K = 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a @ b
    flops = 2 * M * N * K
    t_torch = ms(lambda: torch.matmul(a, b))
    tflops_torch = flops / (t_torch * 1e-3) / 1e12
    print(f"  torch.matmul: {tflops_torch:.0f} TFLOP/s", flush=True)

    # triton-06: no swizzle, fixed configs; report the best of the same candidate tiles triton-07 autotunes over
    best = None
    for cfg in m07.CONFIGS:
        kw = dict(block_m=cfg.kwargs["BLOCK_M"], block_n=cfg.kwargs["BLOCK_N"], block_k=cfg.kwargs["BLOCK_K"],
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        c = m06.matmul(a, b, **kw)
        check(f"matmul-06 {kw}", c, ref, 2e-2, 1e-1)
        t = ms(lambda: m06.matmul(a, b, **kw))
        print(f"  triton-06 {kw}: {flops / (t * 1e-3) / 1e12:.0f} TFLOP/s", flush=True)
        best = min(best or (t, kw), (t, kw), key=lambda p: p[0])
    tflops = flops / (best[0] * 1e-3) / 1e12
    table.append((f"triton-06 matmul bf16 {M}^3 ({best[1]['block_m']}x{best[1]['block_n']}x{best[1]['block_k']})",
                  f"{tflops:.0f} TFLOP/s", f"torch.matmul {tflops_torch:.0f} TFLOP/s", tflops / tflops_torch, 0.90))

    c = m07.matmul(a, b)  # autotunes here
    check("matmul-07 autotuned", c, ref, 2e-2, 1e-1)
    t = ms(lambda: m07.matmul(a, b))
    tflops = flops / (t * 1e-3) / 1e12
    cfg = m07.matmul_autotuned.best_config
    table.append((f"triton-07 matmul bf16 {M}^3 autotuned ({cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']}x"
                  f"{cfg.kwargs['BLOCK_K']}, {cfg.num_warps}w {cfg.num_stages}s)",
                  f"{tflops:.0f} TFLOP/s", f"torch.matmul {tflops_torch:.0f} TFLOP/s", tflops / tflops_torch, 0.90))


def bench_flash_attention(table):
    mod = load("09-flash-attention/flash_attn.py")
    B, H, S, D = 4, 32, 4096, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * B * H * S * S * D / 2  # causal: half of the score matrix
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t_torch = ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    tflops_torch = flops / (t_torch * 1e-3) / 1e12
    print(f"  SDPA: {tflops_torch:.0f} TFLOP/s", flush=True)
    best = None
    for bm, bn, warps, stages in [(128, 64, 8, 3), (128, 64, 4, 3), (128, 64, 8, 4), (128, 128, 8, 2),
                                  (128, 128, 8, 3), (64, 64, 4, 3)]:
        kw = dict(block_m=bm, block_n=bn, num_warps=warps, num_stages=stages)
        o, _ = mod.flash_attn_forward(q, k, v, causal=True, **kw)
        check(f"flash-attn {kw}", o, ref, 2e-2, 2e-2)
        t = ms(lambda: mod.flash_attn_forward(q, k, v, causal=True, **kw))
        print(f"  triton-09 {kw}: {flops / (t * 1e-3) / 1e12:.0f} TFLOP/s", flush=True)
        best = min(best or (t, kw), (t, kw), key=lambda p: p[0])
    tflops = flops / (best[0] * 1e-3) / 1e12
    kw = best[1]
    table.append((f"triton-09 FlashAttn fwd causal B{B} H{H} S{S} D{D} bf16 "
                  f"({kw['block_m']}x{kw['block_n']}, {kw['num_warps']}w {kw['num_stages']}s)",
                  f"{tflops:.0f} TFLOP/s", f"SDPA {tflops_torch:.0f} TFLOP/s", tflops / tflops_torch, 0.80))


def main():
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    torch.manual_seed(0)
    print(f"{datetime.date.today()}  {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"triton {triton.__version__}", flush=True)
    table = []
    copy_gbs = copy_bandwidth()
    print(f"  device copy bandwidth: {copy_gbs:.0f} GB/s", flush=True)
    steps = {"softmax": lambda: bench_softmax(table, copy_gbs), "layernorm": lambda: bench_layernorm(table, copy_gbs),
             "matmul": lambda: bench_matmul(table), "flash": lambda: bench_flash_attention(table)}
    chosen = sys.argv[1:] or list(steps)
    unknown = set(chosen) - set(steps)
    assert not unknown, f"unknown parts {sorted(unknown)}; choose from {list(steps)}"
    for step in (steps[name] for name in chosen):
        try:
            step()
        except (SystemExit, Exception) as exc:  # a wrong result or a failed config: report it, measure the rest
            table.append((f"{type(exc).__name__}: {str(exc)[:100]}", "-", "-", math.nan, math.nan))
        torch.cuda.empty_cache()
    w = max(len(r[0]) for r in table)
    print()
    print(f"| {'kernel'.ljust(w)} | ours | reference | ratio | target | met |")
    print(f"|{'-' * (w + 2)}|---|---|---|---|---|")
    for name, ours, ref, ratio, target in table:
        met = "yes" if ratio >= target else "NO"
        print(f"| {name.ljust(w)} | {ours} | {ref} | {ratio:.1%} | {target:.0%} | {met} |")


if __name__ == "__main__":
    main()
