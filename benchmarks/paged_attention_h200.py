"""infer-03 paged decode attention (the lesson's REFERENCE Triton kernel) on one GPU (written for the H200).

    python3 benchmarks/paged_attention_h200.py            # from the repository root, on a CUDA machine
    python3 benchmarks/paged_attention_h200.py --quick    # two configurations only
    python3 benchmarks/paged_attention_h200.py --variant per-block   # the other kernels: see --help

What it measures, per configuration (batch B, context length, block size; 32 query heads / 8 KV heads,
head_dim 128, fp16):
- the pool holds exactly the blocks the batch needs plus 10 %, and each sequence's physical blocks are a
  random permutation of the pool (the kernel reads through the block table, never a contiguous run);
- the kernel is checked first against torch (fp32 softmax attention over K/V gathered through the table)
  on 4 sequences; a wrong result stops the run;
- time: triton.testing.do_bench (median of ~100 ms of launches after 25 ms of warm-up; do_bench clears the
  L2 between launches), so K/V come from HBM;
- bytes: the minimum the kernel must move: K + V of every context token (2 * ctx * Hkv * D * 2 B per
  sequence), q read once and out written once (B * Hq * D * 2 B each). The block table (4 B per block) is
  left out: < 0.01 % of the total. GB/s = bytes / time;
- the reference point: torch `dst.copy_(src)` of a buffer of the same number of bytes, reported like
  docs/hardware.md's copy bandwidth, (bytes read + bytes written) / time. The last column is
  kernel GB/s / copy GB/s.
Prints one line per configuration as it goes and a Markdown table last.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import math
import sys
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

LESSON = Path(__file__).resolve().parent.parent / "modules" / "07-inference" / "03-paged-attention"
HQ, HKV, D = 32, 8, 128
DTYPE = torch.float16
CONFIGS = [  # (batch, context, block_size)
    (64, 1024, 16), (64, 4096, 16), (64, 8192, 16),
    (128, 2048, 16), (256, 1024, 16), (256, 4096, 16), (256, 8192, 16),
    (64, 8192, 32), (256, 4096, 32),
]
QUICK = [(64, 4096, 16), (256, 8192, 16)]


def load_lesson():
    path = LESSON / "paged_attention.py"
    spec = importlib.util.spec_from_file_location("bench_paged_attention", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def ms(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def make_batch(batch: int, ctx: int, bs: int, seed: int = 0):
    """q [B, HQ, D], a shuffled paged pool k_cache/v_cache [num_blocks, bs, HKV, D], block tables, lengths."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    per_seq = math.ceil(ctx / bs)
    num_blocks = int(batch * per_seq * 1.1) + 1
    k_cache = torch.randn(num_blocks, bs, HKV, D, device="cuda", dtype=DTYPE, generator=g)
    v_cache = torch.randn(num_blocks, bs, HKV, D, device="cuda", dtype=DTYPE, generator=g)
    perm = torch.randperm(num_blocks, device="cuda", generator=g)[: batch * per_seq]
    tables = perm.view(batch, per_seq).to(torch.int32).contiguous()
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, HQ, D, device="cuda", dtype=DTYPE, generator=g)
    return q, k_cache, v_cache, tables, lens


def check(mod, q, k_cache, v_cache, tables, lens) -> float:
    """Max |error| on 4 sequences against fp32 attention over K/V gathered through the table (SystemExit if wrong)."""
    out = mod.paged_decode_attention(q, k_cache, v_cache, tables, lens)
    bs = k_cache.shape[1]
    worst = 0.0
    for b in sorted({0, 1, q.shape[0] // 2, q.shape[0] - 1}):
        n = int(lens[b])
        blocks = tables[b, : math.ceil(n / bs)].long()
        k = k_cache[blocks].reshape(-1, HKV, D)[:n].float().repeat_interleave(HQ // HKV, dim=1)
        v = v_cache[blocks].reshape(-1, HKV, D)[:n].float().repeat_interleave(HQ // HKV, dim=1)
        p = torch.softmax(torch.einsum("hd,nhd->hn", q[b].float(), k) / math.sqrt(D), dim=-1)
        ref = torch.einsum("hn,nhd->hd", p, v)
        worst = max(worst, (out[b].float() - ref).abs().max().item())
    if not (torch.isfinite(out).all() and worst <= 1e-2):
        raise SystemExit(f"paged_decode_attention: wrong result (max |err| = {worst:.3e}), not timing it")
    return worst


def copy_gbs(nbytes: int) -> float:
    src = torch.randn(nbytes // 2, device="cuda", dtype=DTYPE)
    dst = torch.empty_like(src)
    t = ms(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / (t * 1e-3) / 1e9  # read + write


def bench(mod, batch: int, ctx: int, bs: int) -> tuple:
    q, k_cache, v_cache, tables, lens = make_batch(batch, ctx, bs)
    err = check(mod, q, k_cache, v_cache, tables, lens)
    out = torch.empty_like(q)
    t = ms(lambda: mod.paged_decode_attention(q, k_cache, v_cache, tables, lens, out=out))
    kv_bytes = 2 * int(lens.sum()) * HKV * D * k_cache.element_size()
    nbytes = kv_bytes + 2 * q.numel() * q.element_size()
    gbs = nbytes / (t * 1e-3) / 1e9
    ref = copy_gbs(nbytes)
    name = f"B={batch} ctx={ctx} block={bs}"
    print(f"  {name}: {t * 1e3:8.1f} us  {nbytes / 2**20:8.0f} MiB  {gbs:6.0f} GB/s  "
          f"copy {ref:6.0f} GB/s  ratio {gbs / ref:6.1%}  (check max|err| {err:.1e})", flush=True)
    del q, k_cache, v_cache, tables, lens, out
    torch.cuda.empty_cache()
    return name, t * 1e3, nbytes, gbs, ref


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two configurations only")
    ap.add_argument("--variant", choices=["lesson", "per-block", "split-kv"], default="lesson",
                    help="which kernel (benchmarks/paged_attention_variants.py holds the other two)")
    ap.add_argument("--tile", type=int, default=64, help="tokens per loop step (lesson, split-kv)")
    ap.add_argument("--splits", type=int, default=None, help="split-kv: ways (default: by batch size)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    mod = load_lesson()
    what = f"lesson kernel (tile {args.tile})"
    if args.variant != "lesson":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import paged_attention_variants as variants

        fn = getattr(variants, args.variant.replace("-", "_"))
        what = {"per-block": "per-block variant (one block per step, CUDA-core products)",
                "split-kv": f"split-KV variant (tile {args.tile}, splits {args.splits or 'auto'})"}[args.variant]
        mod = argparse.Namespace(paged_decode_attention=functools.partial(fn, tile_n=args.tile,
                                                                          num_splits=args.splits))
    else:
        mod = argparse.Namespace(paged_decode_attention=functools.partial(mod.paged_decode_attention,
                                                                          tile_n=args.tile))
    print(f"{what}  {datetime.date.today()}  {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"triton {triton.__version__}  Hq={HQ} Hkv={HKV} D={D} {str(DTYPE)[6:]}", flush=True)
    rows = [bench(mod, *cfg) for cfg in (QUICK if args.quick else CONFIGS)]
    w = max(len(r[0]) for r in rows)
    print()
    print(f"| {'configuration'.ljust(w)} | time (us) | bytes (MiB) | kernel GB/s | copy GB/s | kernel / copy |")
    print(f"|{'-' * (w + 2)}|---|---|---|---|---|")
    for name, t_us, nbytes, gbs, ref in rows:
        print(f"| {name.ljust(w)} | {t_us:.1f} | {nbytes / 2**20:.0f} | {gbs:.0f} | {ref:.0f} | {gbs / ref:.1%} |")


if __name__ == "__main__":
    main()
