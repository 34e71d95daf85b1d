"""Tests for infer-01: KV bytes per token, paged capacity and the decode roofline.

Oracles: hand-computed integers for the published configs (Llama-3-8B/70B GQA, Llama-2-7B MHA,
DeepSeek-V3 MLA), and on random model specs slow references written differently from the formulas:
the cache tensors each TP rank allocates are listed and their elements counted; the KV pool is filled
token by token until a sequence no longer fits; the FLOPs of a decode step are summed matmul by matmul.
Byte counts are integers and must match exactly; times are compared to 1e-9 relative (float division).
"""

import math
import random

import pytest

H200_BYTES = 141_000_000_000      # docs/hardware.md: HBM capacity 141 GB
COPY_BW = 4.2e12                  # docs/hardware.md: measured device copy bandwidth
BF16_PEAK = 729e12                # docs/hardware.md: measured cuBLAS bf16
GiB = 1 << 30


@pytest.fixture
def kp(lesson):
    return lesson.load("kv_planner.py")


def random_spec(kp, rng, mla):
    layers = rng.randint(1, 7)
    heads = rng.choice([4, 6, 8, 12, 16])
    if mla:
        return kp.ModelSpec("rand-mla", layers, heads, heads, rng.choice([16, 24]), rng.randint(10**5, 10**7),
                            16 * rng.randint(10**3, 10**4), kv_lora_rank=rng.choice([24, 40, 72]),
                            qk_rope_head_dim=rng.choice([8, 16]))
    kv_heads = rng.choice([h for h in (1, 2, 3, 4, 6, 8, 12, 16) if heads % h == 0])
    active = 16 * rng.randint(10**4, 10**6)  # divisible by every TP degree used
    return kp.ModelSpec("rand", layers, heads, kv_heads, rng.choice([8, 24, 40]), active, active)


def pick_tp(spec, rng, choices):
    """A TP degree vLLM accepts: it divides the query heads, and the KV heads divide it or it divides them."""
    ok = [t for t in choices if spec.num_heads % t == 0 and (spec.num_kv_heads % t == 0 or t % spec.num_kv_heads == 0)]
    return rng.choice(ok)


def ref_cache_shapes(spec, tp):
    """Shapes of the per-token cache tensors of one layer on rank 0 of ``tp``."""
    if spec.kv_lora_rank:
        return [(spec.kv_lora_rank,), (spec.qk_rope_head_dim,)]          # latent + rope key, every rank
    if spec.num_kv_heads >= tp:
        mine = [h for h in range(spec.num_kv_heads) if h * tp // spec.num_kv_heads == 0]
    else:
        mine = [0]                                                        # replicated head
    return [(len(mine), spec.head_dim), (len(mine), spec.head_dim)]       # K and V


def ref_kv_bytes(spec, dtype_bytes, tp):
    return spec.num_layers * sum(math.prod(s) for s in ref_cache_shapes(spec, tp)) * dtype_bytes


@pytest.mark.points(1)
def test_kv_bytes_per_token_published_models(kp):
    cases = [  # (spec, dtype bytes, tp, bytes) hand-computed in the README
        (kp.LLAMA3_8B, 2, 1, 2 * 32 * 8 * 128 * 2),          # 131072 = 128 KiB
        (kp.LLAMA3_70B, 2, 1, 2 * 80 * 8 * 128 * 2),         # 327680 = 320 KiB
        (kp.LLAMA2_7B, 2, 1, 2 * 32 * 32 * 128 * 2),         # 524288 = 512 KiB (MHA)
        (kp.DEEPSEEK_V3, 2, 1, 61 * (512 + 64) * 2),         # 70272 B
        (kp.DEEPSEEK_V3, 1, 1, 61 * 576),                    # fp8 latent cache
        (kp.LLAMA3_8B, 1, 1, 65536),
        (kp.LLAMA3_8B, 2, 2, 65536),
        (kp.LLAMA3_70B, 2, 8, 40960),                        # one KV head per rank
        (kp.LLAMA3_70B, 2, 16, 40960),                       # 8 KV heads on 16 ranks: replicated
        (kp.LLAMA2_7B, 2, 4, 131072),
        (kp.DEEPSEEK_V3, 2, 8, 70272),                       # the latent is not split by TP
    ]
    for spec, b, tp, want in cases:
        got = kp.kv_bytes_per_token(spec, b, tp)
        assert got == want, f"{spec.name}, {b}-byte KV, tp={tp}: {got} B/token, expected {want}"


@pytest.mark.points(1)
def test_kv_bytes_per_token_random_specs(kp):
    rng = random.Random(701)
    for i in range(300):
        spec = random_spec(kp, rng, mla=i % 3 == 0)
        tp = pick_tp(spec, rng, [1, 2, 4, 8, 16])
        b = rng.choice([1, 2, 4])
        want = ref_kv_bytes(spec, b, tp)
        got = kp.kv_bytes_per_token(spec, b, tp)
        assert got == want, f"{spec}, {b}-byte KV, tp={tp}: {got} B/token, expected {want}"


def ref_capacity(kp, spec, dep, seq_len):
    """Fill the pool token by token: a sequence takes a new block whenever its last one is full."""
    budget = int(dep.gpu_bytes * dep.gpu_memory_utilization) - math.ceil(
        spec.num_params * dep.weight_dtype_bytes / dep.tp) - dep.reserve_bytes
    block_bytes = dep.block_size * ref_kv_bytes(spec, dep.kv_dtype_bytes, dep.tp)
    free = 0
    while budget - (free + 1) * block_bytes >= 0:
        free += 1
    pool, seqs = free, 0
    while True:
        used = 0
        for tok in range(seq_len):
            if tok % dep.block_size == 0:
                used += 1
        if used > free:
            break
        free -= used
        seqs += 1
    return max(budget, 0), pool, used, seqs


@pytest.mark.points(1)
def test_capacity_hand_cases(kp):
    dep = kp.Deployment(H200_BYTES, 0.9, 4 * GiB, block_size=16)
    cap = kp.plan_capacity(kp.LLAMA3_8B, dep, 8192)
    # 141e9 * 0.9 = 126.9e9; - 16,060,522,496 B weights - 4 GiB = 106,544,510,208 B; 2 MiB blocks
    assert cap.kv_budget_bytes == 106_544_510_208, cap
    assert (cap.num_blocks, cap.blocks_per_seq, cap.max_seqs) == (50804, 512, 99), cap
    cap = kp.plan_capacity(kp.LLAMA3_8B, dep, 8193)              # one token over: one more block each
    assert (cap.blocks_per_seq, cap.max_seqs) == (513, 99), cap
    cap = kp.plan_capacity(kp.LLAMA3_8B, dep, 1000)              # 62.5 blocks -> 63, not 62.5
    assert (cap.blocks_per_seq, cap.max_seqs) == (63, 806), cap
    tp8 = kp.Deployment(H200_BYTES, 0.9, 4 * GiB, block_size=16, tp=8)
    cap = kp.plan_capacity(kp.LLAMA3_70B, tp8, 32768)
    # weights 141,107,412,992 B / 8 = 17,638,426,624 B per GPU; 40 KiB/token/GPU -> 640 KiB blocks
    assert (cap.kv_budget_bytes, cap.num_blocks, cap.max_seqs) == (104_966_606_080, 160166, 78), cap
    fp8 = kp.Deployment(H200_BYTES, 0.9, 4 * GiB, block_size=64, tp=8, weight_dtype_bytes=1, kv_dtype_bytes=1)
    cap = kp.plan_capacity(kp.DEEPSEEK_V3, fp8, 32768)
    # 671e9 B of fp8 weights / 8 = 83,875,000,000 B; 64 x 35,136 B blocks
    assert (cap.kv_budget_bytes, cap.num_blocks, cap.max_seqs) == (38_730_032_704, 17223, 33), cap
    kv8 = kp.Deployment(H200_BYTES, 0.9, 4 * GiB, block_size=16, kv_dtype_bytes=1)   # bf16 weights, fp8 KV
    cap = kp.plan_capacity(kp.LLAMA3_8B, kv8, 8192)
    # same budget as the first case; 64 KiB/token -> 1 MiB blocks: twice the blocks and the sequences
    assert (cap.kv_budget_bytes, cap.num_blocks, cap.max_seqs) == (106_544_510_208, 101608, 198), cap
    small = kp.Deployment(20_000_000_000, 0.9, 2 * GiB)          # weights do not fit: nothing left
    cap = kp.plan_capacity(kp.LLAMA3_8B, small, 100)
    assert (cap.kv_budget_bytes, cap.num_blocks, cap.max_seqs) == (0, 0, 0), cap


@pytest.mark.points(1)
def test_capacity_random_against_token_by_token_fill(kp):
    rng = random.Random(702)
    for i in range(120):
        spec = random_spec(kp, rng, mla=i % 4 == 0)
        tp = pick_tp(spec, rng, [1, 2, 4])
        bs = rng.choice([1, 3, 8, 16, 32])
        wb, kb = [(2, 2), (2, 1), (1, 2), (1, 1)][i % 4]   # weight and KV dtypes vary independently
        kv_bytes = ref_kv_bytes(spec, kb, tp)
        weights = math.ceil(spec.num_params * wb / tp)
        gpu = weights + rng.randint(0, 400) * bs * kv_bytes + rng.randint(0, 10**6)
        dep = kp.Deployment(gpu, rng.choice([1.0, 0.97, 0.9]), rng.randint(0, 10**5), block_size=bs, tp=tp,
                            weight_dtype_bytes=wb, kv_dtype_bytes=kb)
        seq_len = rng.randint(1, 300)
        budget, pool, per_seq, seqs = ref_capacity(kp, spec, dep, seq_len)
        cap = kp.plan_capacity(spec, dep, seq_len)
        got = (cap.kv_budget_bytes, cap.num_blocks, cap.blocks_per_seq, cap.max_seqs)
        assert got == (budget, pool, per_seq, seqs), f"{spec}, {dep}, seq_len={seq_len}: {cap}"


def ref_step(spec, tp, batch, ctx, weight_b, kv_b):
    """Bytes and FLOPs of one decode step on one rank, summed matmul by matmul."""
    kv_token = ref_kv_bytes(spec, kv_b, tp)
    bytes_read = math.ceil(spec.num_params * weight_b / tp) + sum(ctx * kv_token for _ in range(batch))
    flops = 0.0
    heads = spec.num_heads / tp
    for _ in range(batch):
        flops += 2 * spec.active_params / tp                      # every active weight: one multiply-add
        for _ in range(spec.num_layers):
            if spec.kv_lora_rank:
                k_dim, v_dim = spec.kv_lora_rank + spec.qk_rope_head_dim, spec.kv_lora_rank
            else:
                k_dim = v_dim = spec.head_dim
            flops += heads * (2 * k_dim * ctx + 2 * v_dim * ctx)    # q.K^T then p.V
    return bytes_read, flops


@pytest.mark.points(1)
def test_decode_roofline(kp):
    # exact tie: 1 layer, 1 head, head_dim 1; weights 2 * (2**20 - 8) B + KV 4 * 4 B = 2**21 B and FLOPs
    # 2 * (2**20 - 8) + 4 * 4 = 2**21, at 2**21 B/s and 2**21 FLOP/s: both times are exactly 1 s -> "memory"
    tiny = kp.ModelSpec("tie", 1, 1, 1, 1, 2**20 - 8, 2**20 - 8)
    r = kp.decode_roofline(tiny, kp.Deployment(H200_BYTES, 0.9, 0), 1, 4, 2.0**21, 2.0**21)
    assert (r.bytes_read, r.flops, r.t_memory, r.t_compute) == (2**21, 2**21, 1.0, 1.0), r
    assert r.bound == "memory", f"equal times must give bound 'memory' (README): {r}"
    dep = kp.Deployment(H200_BYTES, 0.9, 4 * GiB)
    r = kp.decode_roofline(kp.LLAMA3_8B, dep, 64, 4096, COPY_BW, BF16_PEAK)
    assert r.bytes_read == 16_060_522_496 + 64 * 4096 * 131072, r      # weights + KV of the batch
    assert r.flops == 2 * 8_030_261_248 * 64 + 64 * 4096 * 32 * 32 * 4 * 128, r
    assert r.bound == "memory" and r.time == pytest.approx(50_420_260_864 / COPY_BW, rel=1e-9), r
    # absorbed MLA: 128 heads share one 576-element latent -> ~242 FLOP/B, above the bf16 ridge
    one = kp.Deployment(H200_BYTES, 0.9, 0, weight_dtype_bytes=1)
    r = kp.decode_roofline(kp.DEEPSEEK_V3, one, 4096, 32768, COPY_BW, BF16_PEAK)
    assert r.bound == "compute" and r.time == pytest.approx(r.flops / BF16_PEAK, rel=1e-9), r
    # TP=8 splits the heads but every rank still reads the whole latent: 8x fewer FLOP per byte
    r = kp.decode_roofline(kp.DEEPSEEK_V3, kp.Deployment(H200_BYTES, 0.9, 0, tp=8, weight_dtype_bytes=1),
                           4096, 32768, COPY_BW, BF16_PEAK)
    assert r.bound == "memory", r
    rng = random.Random(703)
    for i in range(200):
        spec = random_spec(kp, rng, mla=i % 3 == 0)
        tp = pick_tp(spec, rng, [1, 2, 4])
        wb, kb = rng.choice([(2, 2), (1, 1), (2, 1)])
        batch, ctx = rng.randint(1, 70), rng.randint(1, 5000)
        bw, peak = rng.choice([(COPY_BW, BF16_PEAK), (1e9, 1e10), (1e12, 1e12)])
        dep = kp.Deployment(H200_BYTES, 0.9, 0, tp=tp, weight_dtype_bytes=wb, kv_dtype_bytes=kb)
        want_b, want_f = ref_step(spec, tp, batch, ctx, wb, kb)
        r = kp.decode_roofline(spec, dep, batch, ctx, bw, peak)
        msg = f"{spec}, tp={tp}, batch={batch}, ctx={ctx}: {r}"
        assert r.bytes_read == want_b, msg
        assert r.flops == pytest.approx(want_f, rel=1e-9, abs=1.0), msg
        tm, tc = want_b / bw, want_f / peak
        assert r.t_memory == pytest.approx(tm, rel=1e-9) and r.t_compute == pytest.approx(tc, rel=1e-9), msg
        assert r.time == pytest.approx(max(tm, tc), rel=1e-9), msg
        assert r.bound == ("memory" if tm >= tc else "compute"), msg
