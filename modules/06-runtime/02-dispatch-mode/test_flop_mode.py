# ruff: noqa: B023  (every closure made in a loop here is called within the same iteration)
"""Tests for runtime-02: the learner's OpTracer and FlopCounter (TorchDispatchMode subclasses).

Oracles: make_fx (torch.fx.experimental.proxy_tensor) for the sequence of aten overloads and output shapes, forward
and backward; torch.utils.flop_counter.FlopCounterMode for FLOP totals and the per-op breakdown (PyTorch v2.13.0's
convention); closed forms (2*M*N*K per matmul, backward = 2x forward for matmuls); FlopCounterMode with the CPU
flash-attention ops mapped to its own sdpa formulas for F.scaled_dot_product_attention's default CPU path.
"""

import random

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils import flop_counter
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten


@pytest.fixture
def fm(lesson):
    return lesson.load("flop_mode.py")


def oracle_counts(fn, *args, extra=None):
    """(total, {op name: flops}) from FlopCounterMode while fn(*args) runs."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=extra or {}) as fc:
        fn(*args)
    per_op = {str(k): v for k, v in fc.get_flop_counts().get("Global", {}).items() if v}
    return fc.get_total_flops(), per_op


def learner_counts(fm, fn, *args):
    counter = fm.FlopCounter()
    with counter:
        fn(*args)
    extra_keys = set(counter.counts) - set(counter.formulas)
    assert not extra_keys, f"counts has entries for ops without a FLOP formula: {sorted(map(str, extra_keys))}"
    per_op = {str(k): v for k, v in counter.counts.items() if v}
    return counter.total(), per_op


def make_fx_calls(fn, *args):
    gm = make_fx(fn)(*args)
    return [(str(n.target), [tuple(v.shape) for v in tree_flatten(n.meta.get("val"))[0] if isinstance(v, torch.Tensor)])
            for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def fwd_bwd(module_fn, params):
    """f(x) -> grads of sum(module_fn(x)) w.r.t. x (when it requires grad) and params, by autograd.grad (make_fx)."""
    def run(x):
        out = module_fn(x)
        wrt = ([x] if x.requires_grad else []) + [p for p in params if p.requires_grad]
        return torch.autograd.grad(out.sum(), wrt)
    return run


def fwd_backward(module_fn):
    """f(x) -> sum(module_fn(x)).backward() (FlopCounterMode's module tracker rejects autograd.grad on modules)."""
    def run(x):
        module_fn(x).sum().backward()
    return run


# ----------------------------------------------------------------------------------------------------------------
# Models the FLOP tests run, forward and forward+backward.

def models(gen):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    lin = torch.nn.Linear(24, 40)
    lin_nb = torch.nn.Linear(24, 40, bias=False)
    mlp = torch.nn.Sequential(torch.nn.Linear(17, 64), torch.nn.GELU(), torch.nn.Linear(64, 17), torch.nn.LayerNorm(17))
    conv2 = torch.nn.Conv2d(6, 8, 3, stride=2, padding=1, dilation=1, groups=2)
    conv1 = torch.nn.Conv1d(3, 5, 4, stride=1, padding=2, dilation=2)
    conv3 = torch.nn.Conv3d(2, 4, (1, 3, 2), stride=(1, 2, 1))
    convt = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    frozen = torch.nn.Conv2d(3, 5, 3, padding=1)
    frozen.weight.requires_grad_(False)  # a frozen weight, trainable bias: output_mask[1] is False
    return [
        ("linear 2-D", lin, (7, 24)), ("linear 3-D", lin, (3, 5, 24)), ("linear no bias", lin_nb, (9, 24)),
        ("mlp", mlp, (4, 6, 17)), ("conv2d groups=2 stride 2", conv2, (2, 6, 9, 11)),
        ("conv1d dilation 2", conv1, (3, 3, 20)), ("conv3d", conv3, (1, 2, 3, 8, 5)),
        ("conv_transpose2d", convt, (2, 4, 5, 7)), ("cnn", cnn, (2, 3, 10, 10)),
        ("conv2d frozen weight", frozen, (2, 3, 6, 5)),
    ]


def attention(q, k, v, causal=False, scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.points(1)
def test_sdpa_flops_on_shapes(fm):
    """sdpa_flops on shapes, against FlopCounterMode's sdpa_flop_count: v's head dim Dv differs from D (the CPU flash
    kernel never runs with Dv != D, other backends do), and GQA (k/v with fewer heads: every query head counts)."""
    for b, h, hkv, sq, sk, d, dv in [(2, 3, 3, 5, 7, 8, 4), (1, 2, 2, 9, 4, 16, 40), (2, 6, 2, 8, 12, 16, 8)]:
        q, k, v = (b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, dv)
        want = flop_counter.sdpa_flop_count(q, (b, h, sk, d), (b, h, sk, dv))
        assert want == 2 * b * h * sq * sk * (d + dv)
        assert fm.sdpa_flops(q, k, v) == want, f"sdpa_flops{(q, k, v)} = {fm.sdpa_flops(q, k, v)}, want {want}"


@pytest.mark.points(1)
def test_tracer_equals_make_fx_forward_and_backward(fm):
    """The op sequence and every output shape (nested tuples too: native_layer_norm, convolution_backward)."""
    gen = torch.Generator().manual_seed(621)
    for name, mod, shape in models(gen)[3:]:
        params = list(mod.parameters())
        for x_grad in (True, False):
            x = torch.randn(shape, generator=gen).requires_grad_(x_grad)
            run = fwd_bwd(mod, params)
            tracer = fm.OpTracer()
            with tracer:
                run(x)
            want = make_fx_calls(run, x)
            got = tracer.calls
            assert [c[0] for c in got] == [c[0] for c in want], (
                f"{name} (x.requires_grad={x_grad}): ops\n{[c[0] for c in got]}\nmake_fx traced\n{[c[0] for c in want]}")
            for (op, shapes), (_, wshapes) in zip(got, want):
                assert [tuple(s) for s in shapes] == wshapes, f"{name}: {op} output shapes {shapes}, want {wshapes}"
    assert tracer.ops() == [c[0] for c in tracer.calls]


@pytest.mark.points(1)
def test_modes_are_transparent_and_nest(fm):
    """Inside either mode every op returns exactly what it returns outside (kwargs included); nested modes both see
    every op."""
    gen = torch.Generator().manual_seed(622)
    a, b, c = (torch.randn(s, generator=gen, dtype=torch.float64) for s in [(5, 7), (7, 3), (5, 3)])
    q, k, v = (torch.randn(2, 3, 6, 8, generator=gen) for _ in range(3))

    def program():
        return [torch.addmm(c, a, b, beta=0.5, alpha=-2.0),  # beta/alpha reach the mode as kwargs
                torch.full((2, 3), 1.5, dtype=torch.float64),
                torch.zeros(4, dtype=torch.int32),
                attention(q, k, v, scale=0.3),
                torch.baddbmm(c.expand(2, 5, 3), a.expand(2, 5, 7), b.expand(2, 7, 3), beta=0.0)]

    want = program()
    for mode_cls in (fm.OpTracer, fm.FlopCounter):
        with mode_cls():
            got = program()
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w), (
                f"{mode_cls.__name__}: an op returned a different result inside the mode "
                f"(dtype {g.dtype} vs {w.dtype}): pass args AND kwargs through unchanged")
    outer, inner = fm.FlopCounter(), fm.OpTracer()
    with outer, inner:
        program()
    plain = fm.OpTracer()
    with plain:
        program()
    assert inner.ops() == plain.ops(), "the inner mode of a nested pair missed or added ops"
    solo = fm.FlopCounter()
    with solo:
        program()
    assert dict(outer.counts) == dict(solo.counts) and outer.total() > 0, (
        "the outer FlopCounter must see the ops the inner tracer forwards to it")


@pytest.mark.points(2)
def test_flops_equal_flopcountermode_per_op(fm):
    """Totals and per-op breakdown against FlopCounterMode: forward, and forward+backward with and without x.grad."""
    gen = torch.Generator().manual_seed(623)
    for name, mod, shape in models(gen):
        for x_grad in (True, False):
            x = torch.randn(shape, generator=gen).requires_grad_(x_grad)
            for what, fn in (("forward", mod), ("forward+backward", fwd_backward(mod))):
                want_total, want = oracle_counts(fn, x)
                got_total, got = learner_counts(fm, fn, x)
                assert got == want and got_total == want_total, (
                    f"{name}, {what}, x.requires_grad={x_grad}: {got} (total {got_total}), "
                    f"FlopCounterMode: {want} (total {want_total})")
    # attention with the MATH backend forced: it decomposes into bmm, which both count
    for (b, h, sq, sk, d, dv), causal in [((2, 3, 5, 7, 8, 4), False), ((1, 2, 9, 9, 16, 16), True)]:
        q = torch.randn(b, h, sq, d, generator=gen, requires_grad=True)
        k = torch.randn(b, h, sk, d, generator=gen, requires_grad=True)
        v = torch.randn(b, h, sk, dv, generator=gen, requires_grad=True)

        def attn_fb(q, k, v, causal=causal):
            return torch.autograd.grad(attention(q, k, v, causal).sum(), (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            want_total, want = oracle_counts(attn_fb, q, k, v)
            got_total, got = learner_counts(fm, attn_fb, q, k, v)
        assert got == want and got_total == want_total, f"MATH attention {(b, h, sq, sk, d, dv)}: {got} vs {want}"


@pytest.mark.points(1)
def test_matmul_family_random_shapes(fm):
    """mm / addmm / bmm / baddbmm / matmul / linear on 200 random shapes (size-1 dims included), fwd and bwd,
    against FlopCounterMode and the closed form 2*B*M*N*K (backward of a matmul = 2x its forward)."""
    rng = random.Random(624)
    for i in range(200):
        bsz, m, n, k = (rng.choice([1, rng.randint(2, 19)]) for _ in range(4))
        kind = ["mm", "addmm", "bmm", "baddbmm", "matmul", "linear"][i % 6]
        batched = kind in ("bmm", "baddbmm", "matmul")
        a = torch.randn((bsz, m, k) if batched else (m, k), requires_grad=True)
        b = torch.randn((bsz, k, n) if kind in ("bmm", "baddbmm") else (k, n), requires_grad=True)
        pick = (i // 6) % 3
        bias_shape = [(bsz, m, n), (n,), (1, m, 1)][pick] if kind == "baddbmm" else [(n,), (m, n), (1, n)][pick]
        bias = torch.randn(bias_shape, requires_grad=True)  # broadcast biases too
        fn = {"mm": lambda: torch.mm(a, b), "addmm": lambda: torch.addmm(bias, a, b),
              "bmm": lambda: torch.bmm(a, b), "baddbmm": lambda: torch.baddbmm(bias, a, b),
              "matmul": lambda: torch.matmul(a, b), "linear": lambda: F.linear(a, b.t(), bias)}[kind]
        fwd = 2 * (bsz if batched else 1) * m * n * k
        got_total, got = learner_counts(fm, fn)
        want_total, want = oracle_counts(fn)
        assert got == want and got_total == want_total == fwd, (
            f"{kind} a{tuple(a.shape)} b{tuple(b.shape)}: {got} (total {got_total}), FlopCounterMode {want}, "
            f"closed form {fwd}")
        out = fn()
        got_total, _ = learner_counts(fm, lambda: torch.autograd.grad(out.sum(), (a, b)))
        assert got_total == 2 * fwd, f"{kind} backward: {got_total} FLOPs, want 2 x forward = {2 * fwd}"


@pytest.mark.points(1)
def test_cpu_sdpa_default_path_is_counted(fm):
    """F.scaled_dot_product_attention on CPU runs aten._scaled_dot_product_flash_attention_for_cpu, which
    FlopCounterMode does not count. Yours must: the forward as the MATH decomposition counts it (2 bmm), the backward
    as FlopCounterMode counts fused attention backward (5 bmm); with GQA every query head counts."""
    gen = torch.Generator().manual_seed(625)
    def heads(t, like):  # k/v shape with the query's head count (GQA): torch 2.11's sdpa_flop_count rejects GQA
        return torch.Size([t[0], like[1], *t[2:]])  # the formulas receive shapes, not tensors

    extra = {aten._scaled_dot_product_flash_attention_for_cpu:
             lambda q, k, v, *a, out_shape=None, **kw: flop_counter.sdpa_flop_count(q, heads(k, q), heads(v, q)),
             aten._scaled_dot_product_flash_attention_for_cpu_backward:
             lambda g, q, k, v, *a, out_shape=None, **kw: flop_counter.sdpa_backward_flop_count(
                 g, q, heads(k, q), heads(v, q))}
    for (b, h, hkv, sq, sk, d), causal in [((2, 4, 4, 16, 16, 8), False), ((1, 3, 3, 7, 11, 16), False),
                                           ((2, 2, 2, 9, 9, 32), True), ((1, 1, 1, 1, 1, 4), False),
                                           ((2, 6, 2, 8, 12, 16), False)]:  # GQA: 6 query heads share 2 kv heads
        q = torch.randn(b, h, sq, d, generator=gen, requires_grad=True)
        k = torch.randn(b, hkv, sk, d, generator=gen, requires_grad=True)
        v = torch.randn(b, hkv, sk, d, generator=gen, requires_grad=True)
        tracer = fm.OpTracer()
        with tracer:
            out = attention(q, k, v, causal)
        assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in tracer.ops(), tracer.ops()
        fwd = 4 * b * h * sq * sk * d  # QK^T and PV, closed form
        got_fwd, _ = learner_counts(fm, attention, q, k, v, causal)
        want_fwd, _ = oracle_counts(attention, q, k, v, causal, extra=extra)
        with sdpa_kernel(SDPBackend.MATH):
            math_fwd, _ = oracle_counts(attention, q, k, v, causal)
        assert got_fwd == want_fwd == math_fwd == fwd, (
            f"attention {(b, h, sq, sk, d)} forward: {got_fwd}, want {fwd} (FlopCounterMode on MATH: {math_fwd})")

        def backward(out=out):
            return torch.autograd.grad(out.sum(), (q, k, v), retain_graph=True)
        got_bwd, got = learner_counts(fm, backward)
        want_bwd, want = oracle_counts(backward, extra=extra)
        assert got_bwd == want_bwd == 10 * b * h * sq * sk * d, (
            f"attention {(b, h, sq, sk, d)} backward: {got_bwd} ({got}), want {want_bwd} = 2.5 x forward")
