"""Tests for train-12. Reference: plain autograd through the full score matrix in float64
(`_naive`). The technique is graded with a TorchDispatchMode that sees every aten op the learner's
code runs: tensor sizes (no Nq x Nk intermediate), exp evaluations and matmul multiply-adds (one
pass per direction, the backward reuses the lse instead of re-running a softmax)."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _mask(n_q: int, n_k: int) -> torch.Tensor:
    """Bottom-right aligned causal keep-mask, built independently of the lesson's helper."""
    keep = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        for j in range(n_k):
            keep[i, j] = j <= i + n_k - n_q
    return keep


def _naive(q, k, v, scale, causal):
    """softmax(scale q k^T) v through autograd; rows with no visible key give 0 (and no NaN)."""
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(~_mask(q.shape[0], k.shape[0]), -math.inf)
    m = s.amax(dim=1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), 0.0, m)
    e = torch.exp(s - m)
    den = e.sum(dim=1, keepdim=True)
    o = (e / torch.where(den > 0, den, 1.0)) @ v
    lse = torch.where(den[:, 0] > 0, torch.log(den[:, 0]) + m[:, 0], math.inf)
    return o, lse


class _PoisonedTorch:
    """`torch` as the lesson module sees it, except that torch.empty / empty_like return NaN-filled
    tensors: an output element the code never writes (o and lse are allocated with torch.empty)
    shows up as NaN instead of whatever the allocator happened to hold."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def _poison(t):
        return t.fill_(math.nan) if t.is_floating_point() else t

    def empty(self, *args, **kwargs):
        return self._poison(torch.empty(*args, **kwargs))

    def empty_like(self, *args, **kwargs):
        return self._poison(torch.empty_like(*args, **kwargs))


def _load(lesson):
    fa = lesson.load("flash_attention.py")
    fa.torch = _PoisonedTorch()
    return fa


def _inputs(n_q, n_k, d, dv, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_q, d, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(n_k, d, generator=g, dtype=torch.float64) * 1.5
    v = torch.randn(n_k, dv, generator=g, dtype=torch.float64)
    do = torch.randn(n_q, dv, generator=g, dtype=torch.float64)
    return q, k, v, do


# (n_q, n_k, d, dv, block_q, block_k, causal): ragged tails, tile 1, tiles larger than N,
# Nq > Nk causal (fully masked rows), Nq < Nk causal (bottom-right alignment), dv != d.
CASES = [
    (13, 13, 8, 8, 4, 4, False),
    (13, 13, 8, 8, 4, 4, True),
    (17, 11, 5, 7, 1, 1, True),
    (9, 23, 6, 4, 64, 64, True),
    (21, 8, 4, 6, 5, 3, True),
    (19, 29, 7, 3, 6, 8, False),
    (1, 7, 3, 2, 2, 2, True),
    (30, 17, 8, 5, 7, 16, True),
]


@pytest.mark.points(1)
@pytest.mark.parametrize("n_q, n_k, d, dv, bq, bk, causal", CASES)
def test_values_and_gradients_match_autograd(lesson, n_q, n_k, d, dv, bq, bk, causal):
    fa = _load(lesson)
    q, k, v, do = _inputs(n_q, n_k, d, dv, seed=n_q * 100 + n_k)
    scale = 0.7 / math.sqrt(d)
    q_r, k_r, v_r = (t.clone().requires_grad_(True) for t in (q, k, v))
    o_ref, lse_ref = _naive(q_r, k_r, v_r, scale, causal)
    grads_ref = torch.autograd.grad(o_ref, (q_r, k_r, v_r), do)

    originals = [t.clone() for t in (q, k, v, do)]
    with torch.no_grad():
        o, lse = fa.flash_forward(q, k, v, scale, causal, bq, bk)
    # float64: only summation-order differences (~1e-15 relative) separate the two.
    torch.testing.assert_close(o, o_ref.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lse, lse_ref.detach(), rtol=1e-10, atol=1e-12)

    q_f, k_f, v_f = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = fa.flash_attention(q_f, k_f, v_f, scale, causal, bq, bk)
    grads = torch.autograd.grad(out, (q_f, k_f, v_f), do)
    for name, got, want in zip("qkv", grads, grads_ref):
        assert torch.isfinite(got).all(), f"d{name} holds NaN/inf"
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=f"d{name}")
    for name, now, was in zip(("q", "k", "v", "do"), (q, k, v, do), originals):
        assert torch.equal(now, was), f"the caller's {name} was modified in place"
    for name, now, was in zip("qkv", (q_f, k_f, v_f), originals):
        assert torch.equal(now.detach(), was), f"the caller's {name} was modified in place (autograd path)"


EXP_OPS = {"exp", "exp_", "exp2", "exp2_", "expm1", "pow", "_softmax", "_log_softmax",
           "logsumexp", "sigmoid", "softmax"}
MM_OPS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "dot", "matmul"}


class _Ledger(TorchDispatchMode):
    """Records the largest tensor any aten op produces, exp work, matmul multiply-adds and output shapes."""

    def __init__(self):
        super().__init__()
        self.largest, self.largest_op, self.exp_numel, self.macs = 0, None, 0, 0
        self.fused, self.mm_shapes = [], set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if "attention" in name or "flash" in name:
            self.fused.append(name)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest:
                self.largest, self.largest_op = t.numel(), (name, tuple(t.shape))
        if name in EXP_OPS:
            self.exp_numel += sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        if name in MM_OPS:
            self.mm_shapes.update(tuple(t.shape[-2:]) for t in tree_leaves(out)
                                  if isinstance(t, torch.Tensor) and t.dim() >= 2)
            a = args[-2] if name in {"addmm", "baddbmm", "addbmm"} else args[0]
            b = args[-1] if name in {"addmm", "baddbmm", "addbmm"} else args[1]
            self.macs += a.numel() * (b.shape[-1] if b.dim() > 1 else 1)
        return out


# (n_q, n_k, block_q, block_k, causal): block_q != block_k both ways round; Nq > Nk causal has 18 fully
# masked rows. Tiles are small against N*d, so a tile shaped by the wrong block size stays visible.
TECHNIQUE = {"full": (101, 119, 16, 12, False), "causal": (101, 119, 16, 12, True),
             "causal-empty-rows": (119, 101, 12, 16, True)}


@pytest.mark.points(4)
@pytest.mark.parametrize("case", list(TECHNIQUE))
def test_linear_memory_and_one_pass_each_way(lesson, case):
    """The taught technique, on a result that is right: the same run is compared with autograd, so a
    wrong answer computed with little memory does not earn the technique's points."""
    fa = _load(lesson)
    n_q, n_k, bq, bk, causal = TECHNIQUE[case]
    d, dv = 8, 6
    q, k, v, do = _inputs(n_q, n_k, d, dv, seed=7)
    scale = 1.0 / math.sqrt(d)
    limit = max(bq * bk, max(n_q, n_k) * max(d, dv))
    with torch.no_grad(), _Ledger() as fwd:
        o, lse = fa.flash_forward(q, k, v, scale, causal, bq, bk)
    with torch.no_grad(), _Ledger() as bwd:
        dq, dk, dv_ = fa.flash_backward(q, k, v, o, lse, do, scale, causal, bq, bk)

    q_r, k_r, v_r = (t.clone().requires_grad_(True) for t in (q, k, v))
    o_ref, lse_ref = _naive(q_r, k_r, v_r, scale, causal)
    grads_ref = torch.autograd.grad(o_ref, (q_r, k_r, v_r), do)
    torch.testing.assert_close(o, o_ref.detach(), rtol=1e-10, atol=1e-12, msg="o")
    torch.testing.assert_close(lse, lse_ref.detach(), rtol=1e-10, atol=1e-12, msg="lse")
    for name, got, want in zip("qkv", (dq, dk, dv_), grads_ref):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=f"d{name}")

    for tag, led in (("forward", fwd), ("backward", bwd)):
        assert not led.fused, f"{tag} calls a fused attention op {led.fused}"
        assert led.largest <= limit, (
            f"{tag} materialised a tensor of {led.largest} elements {led.largest_op}; the limit is "
            f"max(block_q*block_k, N*d) = {limit} (a full score matrix has {n_q * n_k})")
        # Score tiles are block_q x block_k (or the transpose): no matmul output is larger, and a full one occurs
        # (d, dv = 8, 6 are below both block sizes, so the [rows, d] products fit this rule too).
        too_big = [t for t in led.mm_shapes if not (t[0] <= bq and t[1] <= bk) and not (t[0] <= bk and t[1] <= bq)]
        assert not too_big, f"{tag}: matmul outputs {too_big} exceed a block_q x block_k = {bq} x {bk} tile"
        assert (bq, bk) in led.mm_shapes or (bk, bq) in led.mm_shapes, (
            f"{tag}: no {bq} x {bk} score tile among the matmul outputs {sorted(led.mm_shapes)}: "
            f"query blocks have block_q rows, key blocks block_k rows")
    # At most one exp per score in each direction (+ the [bq]-sized rescale factors forward): at most
    # Nq*Nk however many tiles right of the diagonal are skipped; re-running a softmax (or the
    # forward) in backward doubles it.
    tiles = math.ceil(n_k / bk)
    assert fwd.exp_numel <= n_q * n_k + 3 * n_q * tiles, f"forward exp count {fwd.exp_numel}"
    assert bwd.exp_numel <= n_q * n_k, (
        f"backward evaluated exp on {bwd.exp_numel} elements; recomputing P from the saved lse "
        f"needs at most {n_q * n_k}")
    # Forward: q k^T and P v once; backward: q k^T, dO v^T, P^T dO, dS k, dS^T q once each.
    # Slack of one N x (d + dv) pass for row-wise work such as D = rowsum(dO * O) done by einsum.
    slack = (n_q + n_k) * (d + dv)
    assert fwd.macs <= n_q * n_k * (d + dv) + slack, f"forward matmul work {fwd.macs}: more than one pass"
    assert bwd.macs <= n_q * n_k * (3 * d + 2 * dv) + slack, (
        f"backward matmul work {bwd.macs}: more than one pass of the five tile products")


@pytest.mark.points(2)
def test_backward_uses_the_given_lse(lesson):
    """The backward contract: P = exp(scale q k^T - lse) with the lse passed in. Shifting lse by
    delta_i scales row i of P by exp(-delta_i); a backward that renormalises ignores the shift."""
    fa = _load(lesson)
    n_q, n_k, d, dv = 11, 14, 5, 4
    q, k, v, do = _inputs(n_q, n_k, d, dv, seed=3)
    scale = 0.5
    with torch.no_grad():
        o, lse = fa.flash_forward(q, k, v, scale, False, 4, 5)
    delta = torch.linspace(-0.8, 0.6, n_q, dtype=torch.float64)
    dq, dk, dv_ = fa.flash_backward(q, k, v, o, lse + delta, do, scale, False, 4, 5)

    s = (q @ k.T) * scale
    p = torch.softmax(s, dim=1) * torch.exp(-delta)[:, None]
    d_row = (do * o).sum(dim=1, keepdim=True)
    ds = p * (do @ v.T - d_row)
    torch.testing.assert_close(dv_, p.T @ do, rtol=1e-10, atol=1e-12, msg="dv")
    torch.testing.assert_close(dq, ds @ k * scale, rtol=1e-10, atol=1e-12, msg="dq")
    torch.testing.assert_close(dk, ds.T @ q * scale, rtol=1e-10, atol=1e-12, msg="dk")
