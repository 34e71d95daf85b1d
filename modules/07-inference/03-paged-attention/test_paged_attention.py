"""Tests for infer-03 (paged decode attention in Triton).

Each case writes dense per-sequence K/V (float64 on the host) into a paged pool: the pool holds several
times the blocks needed, the physical blocks are a random permutation (so logical order != physical
order), two sequences share a prefix block (as after a fork / prefix-cache hit), and everything the kernel
must not read is poison: unused pool blocks, the slots past a sequence's length in its last block, and
the table entries past its last block (they point at a block full of NaN). The reference is dense
attention in float64 on the *dense* K/V, so it never looks at the table.

Tolerances: fp32 caches (float32 tl.dot made IEEE on a GPU by TRITON_F32_DEFAULT): fp32 dot products over <= 64
terms plus the exp2/rescale rounding of the online softmax, rtol = atol = 2e-5 for outputs of size O(1); 1e-4 with
scores of several hundred. An element-wise p*V written as `tl.sum(p[:, :, None] * v[None, :, :], axis=1)` fails on a
GPU: Triton's combine pass (CombineBroadcastMulReducePattern, lib/Dialect/Triton/Transforms/Combine.cpp) turns it into
a TF32 tl.dot (1.3e-3 on the H200) and, with block_size 4, into a wrong one (1.5); the README says so and the
element-wise alternative multiplies v first, which the pattern does not match (3e-7 on the H200,
benchmarks/infer03_gpu_variants.py). fp16 caches: q, K, V are rounded to fp16 before the
reference sees them (the reference uses the same rounded values), the kernel accumulates in fp32 and
rounds the output to fp16 (2^-11 relative): rtol = atol = 2e-3.
"""

import math

import pytest
import torch

NAN = float("nan")


@pytest.fixture(autouse=True)
def ieee_float32_dot(monkeypatch):
    """float32 `tl.dot` in full precision on a GPU too (Triton's default there is tf32, ~1e-3 relative):
    the same tolerances hold for a learner's kernel on a CPU and on a GPU, with or without tl.dot."""
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every tensor the lesson allocates with torch.empty / empty_like starts as NaN."""
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(NAN))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: real_empty_like(*a, **k).fill_(NAN))


def _case(lens, hq, hkv, d, bs, seed, dtype=torch.float32, device="cpu", q_scale=1.0,
          past_end_entry=0, pool_factor=3, first_block_k_scale=1.0, table_cols=None):
    """Dense K/V per sequence and the same data in a shuffled, poisoned paged pool.

    Physical block 0 is a poison block (all NaN); table entries past a sequence's last block hold
    `past_end_entry` (0: the poison block; an index >= num_blocks: outside the pool). The table has
    `table_cols` columns (default: two more than the longest sequence needs).
    The pool is laid out [num_blocks, 2, bs, hkv, d] (K and V interleaved per block, as in FlashInfer's
    NHD paged layout), so k_cache / v_cache are strided views, not contiguous tensors.
    """
    g = torch.Generator().manual_seed(seed)
    nblk = [-(-n // bs) for n in lens]
    num_blocks = pool_factor * sum(nblk) + 5
    pool = torch.full((num_blocks, 2, bs, hkv, d), NAN, dtype=torch.float64)
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    table = torch.full((len(lens), table_cols or max(nblk) + 2), past_end_entry, dtype=torch.int32)
    q = (q_scale * torch.randn(len(lens), hq, d, generator=g, dtype=torch.float64)).to(dtype).double()
    dense = []
    for b, n in enumerate(lens):
        kv = torch.randn(2, n, hkv, d, generator=g, dtype=torch.float64)
        kv[0, :bs] *= first_block_k_scale
        kv = kv.to(dtype).double()
        shared = b == 1 and lens[0] >= bs and n >= bs  # sequence 1 shares sequence 0's first (full) block
        if shared:
            kv[:, :bs] = dense[0][:, :bs]
        for j in range(nblk[b]):
            phys = int(table[0, 0]) if (shared and j == 0) else perm.pop()
            table[b, j] = phys
            lo, hi = j * bs, min(n, (j + 1) * bs)
            pool[phys, :, : hi - lo] = kv[:, lo:hi]
        dense.append(kv)
    pool = pool.to(dtype=dtype, device=device)
    ctx = torch.tensor(lens, dtype=torch.int32, device=device)
    return q.to(dtype=dtype, device=device), pool[:, 0], pool[:, 1], table.to(device), ctx, q, dense


def _reference(q64, dense, hq, hkv, scale):
    out = []
    for b, kv in enumerate(dense):
        k = kv[0].repeat_interleave(hq // hkv, dim=1)  # [n, hq, d]: query head h reads KV head h // group
        v = kv[1].repeat_interleave(hq // hkv, dim=1)
        p = torch.softmax(torch.einsum("hd,nhd->hn", q64[b], k) * scale, dim=-1)
        out.append(torch.einsum("hn,nhd->hd", p, v))
    return torch.stack(out)


def _run_and_check(mod, lens, hq, hkv, d, bs, seed, tol, dtype=torch.float32, device="cpu", tile_n=16, **kw):
    q, kc, vc, table, ctx, q64, dense = _case(lens, hq, hkv, d, bs, seed, dtype, device, **kw)
    out = torch.full_like(q, NAN)
    mod.paged_decode_attention(q, kc, vc, table, ctx, out=out, tile_n=tile_n)
    ref = _reference(q64, dense, hq, hkv, 1.0 / math.sqrt(d))
    torch.testing.assert_close(out.detach().cpu().double(), ref, **tol)


FP32 = {"rtol": 2e-5, "atol": 2e-5}


@pytest.mark.points(3)
@pytest.mark.parametrize("bs,hq,hkv,d,lens,tile_n", [
    (16, 4, 2, 32, [17, 40, 1, 16, 5], 16),  # ragged: 1 token, exactly one block, one past a block
    (8, 6, 2, 16, [23, 9, 1, 8], 16),        # GQA group 3 (padded to 16 rows); a step = 2 blocks
    (4, 8, 1, 16, [13, 3, 130], 64),         # MQA: one KV head for 8 query heads; a step = 16 blocks
    (16, 3, 3, 64, [33, 2], 32),             # MHA: group 1
], ids=["gqa2-bs16", "gqa3-bs8", "mqa-bs4", "mha-bs16"])
def test_matches_dense_attention_through_a_shuffled_block_table(lesson, device, bs, hq, hkv, d, lens, tile_n):
    mod = lesson.load("paged_attention.py")
    _run_and_check(mod, lens, hq, hkv, d, bs, seed=bs * 7 + hq, tol=FP32, device=device, tile_n=tile_n)


@pytest.mark.points(2)
def test_any_strides_and_a_block_longer_than_a_step(lesson, device):
    # the wrapper takes caches and q with any strides: K contiguous, V stored head-major and permuted (so its
    # strides differ from K's), q a view with element stride 2; block_size 32 > TILE_N 16, so steps start in the
    # middle of a block (a token's slot is tok % block_size, not its offset in the step)
    mod = lesson.load("paged_attention.py")
    lens, hq, hkv, d, bs = [45, 70, 3], 4, 2, 16, 32
    q, kc, vc, table, ctx, q64, dense = _case(lens, hq, hkv, d, bs, seed=6, device=device)
    k_cache = kc.contiguous()
    v_cache = torch.full((kc.shape[0], hkv, bs, d), NAN, device=device).permute(0, 2, 1, 3)
    v_cache.copy_(vc)
    assert k_cache.stride() != v_cache.stride()
    qbuf = torch.full((len(lens), hq, 2 * d), NAN, device=device)
    qbuf[..., ::2] = q
    out = torch.full((len(lens), hq, d), NAN, device=device)
    mod.paged_decode_attention(qbuf[..., ::2], k_cache, v_cache, table, ctx, out=out, tile_n=16)
    torch.testing.assert_close(out.detach().cpu().double(), _reference(q64, dense, hq, hkv, d ** -0.5), **FP32)


def test_large_logits_across_blocks(lesson, device):
    # first-block scores of +-several hundred, later blocks O(1): a kernel that shifts each block by its own
    # max instead of the running max computes exp2(m_old - m_new) = 2^(hundreds) = inf
    mod = lesson.load("paged_attention.py")
    _run_and_check(mod, [37, 21], 4, 2, 16, 8, seed=3, tol={"rtol": 1e-4, "atol": 1e-4},
                   device=device, q_scale=4.0, first_block_k_scale=40.0)


def test_fp16_cache(lesson, device):
    mod = lesson.load("paged_attention.py")
    _run_and_check(mod, [29, 1, 16], 8, 2, 32, 16, seed=4, tol={"rtol": 2e-3, "atol": 2e-3},
                   dtype=torch.float16, device=device)


@pytest.mark.interpreter
def test_reads_stay_inside_the_pool(lesson, device):
    # table entries past a sequence's last block point outside the pool, the table is exactly as wide as the
    # longest sequence (the last one) needs, so the last step's table lookups for tokens past its length fall
    # past the end of the table, and q / out are views inside larger buffers: any load through an unused entry,
    # past the table or past a head is an out-of-bounds access.
    # On a GPU machine this test runs through the guarded interpreter in a subprocess.
    mod = lesson.load("paged_attention.py")
    lens, hq, hkv, d, bs = [8, 12, 19], 6, 2, 16, 8
    q, kc, vc, table, ctx, q64, dense = _case(lens, hq, hkv, d, bs, seed=5, device=device,
                                              past_end_entry=10_000, table_cols=3)
    qbuf = torch.full((len(lens) + 2, hq + 3, d), NAN, device=device)
    qbuf[1:-1, 1:hq + 1] = q
    obuf = torch.full((len(lens) + 2, hq + 3, d), NAN, device=device)
    out = obuf[1:-1, 1:hq + 1]
    mod.paged_decode_attention(qbuf[1:-1, 1:hq + 1], kc, vc, table, ctx, out=out, tile_n=16)
    torch.testing.assert_close(out.detach().cpu().double(), _reference(q64, dense, hq, hkv, d ** -0.5), **FP32)
    assert torch.isnan(obuf[0]).all() and torch.isnan(obuf[-1]).all() and torch.isnan(obuf[:, 0]).all()
    assert torch.isnan(obuf[:, hq + 1:]).all(), "a store landed past the last query head"


@pytest.mark.interpreter
def test_block_offsets_past_2_31_elements(lesson, tmp_path):
    # a pool of 2**22 + 64 blocks of 512 fp16 elements: the last blocks start past element 2**31, so
    # phys * stride_kb must be computed in int64 (int32 wraps to a negative offset). The pool is a sparse
    # memory-mapped file (4.3 GB of address space, only the pages written here exist); on a GPU machine this
    # test runs in the guarded CPU interpreter like the one above.
    mod = lesson.load("paged_attention.py")
    bs, hkv, hq, d = 16, 1, 2, 16
    per_block = 2 * bs * hkv * d
    nb = 2**31 // per_block + 64
    path = tmp_path / "pool.bin"
    with open(path, "wb") as f:
        f.truncate(nb * per_block * 2)
    pool = torch.from_file(str(path), shared=True, size=nb * per_block, dtype=torch.float16).view(nb, 2, bs, hkv, d)
    g = torch.Generator().manual_seed(6)
    lens, blocks = [20, 5], [[nb - 3, nb - 40], [nb - 7]]
    table = torch.zeros(2, 3, dtype=torch.int32)
    dense = []
    for b, n in enumerate(lens):
        kv = torch.randn(2, n, hkv, d, generator=g, dtype=torch.float64).to(torch.float16)
        for j, phys in enumerate(blocks[b]):
            lo, hi = j * bs, min(n, (j + 1) * bs)
            pool[phys, :, : hi - lo] = kv[:, lo:hi]
            table[b, j] = phys
        dense.append(kv.double())
    q = torch.randn(2, hq, d, generator=g, dtype=torch.float64).to(torch.float16)
    out = mod.paged_decode_attention(q, pool[:, 0], pool[:, 1], table, torch.tensor(lens, dtype=torch.int32),
                                     tile_n=16)
    ref = _reference(q.double(), dense, hq, hkv, d ** -0.5)
    torch.testing.assert_close(out.detach().cpu().double(), ref, rtol=2e-3, atol=2e-3)
