# ruff: noqa: B023  (every closure made in a loop here is called within the same iteration)
"""Tests for runtime-01: the learner's RMSNorm custom op against PyTorch's own checkers.

Oracles: a float64 plain-PyTorch RMSNorm (forward values and autograd gradients), `torch.library.opcheck`
(schema / mutation, autograd registration, fake-vs-real metadata, AOT dispatch with dynamic shapes),
`torch.autograd.gradcheck` (finite differences), the fake kernel run on meta tensors and on fake CUDA tensors
(FakeTensorMode needs no GPU), and Dynamo's `CompileCounterWithBackend("aot_eager")` for one frame, no graph break.

The op registers `hpccourse::rms_norm` once per process, so the learner file is imported once per test session.
"""

import itertools

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode

_MODULES = {}

# Forward tolerances by dtype. float32/float64: relative to the row's largest |y|. 16-bit outputs must be the float32
# result rounded ONCE (the contract: the math runs in acc_dtype): elementwise |err| <= 1.25 u |y| with the unit
# roundoff u = 2^-8 (bf16, 8 significant bits) / 2^-11 (fp16, 11), plus one subnormal ulp for fp16 (2^-24).
# Multiplying in 16 bits rounds two or three times and reaches ~2-3 u.
FWD_TOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 1.25 * 2**-11, torch.bfloat16: 1.25 * 2**-8}
SUBNORMAL_ULP = {torch.float16: 2**-24, torch.bfloat16: 0.0}


@pytest.fixture
def op(lesson):
    """torch.ops.hpccourse.rms_norm.default, after importing the learner's file (once per session)."""
    key = str(lesson.path("rms_norm_op.py"))
    if key not in _MODULES:
        _MODULES[key] = lesson.load("rms_norm_op.py")
    return torch.ops.hpccourse.rms_norm.default


def reference(x, w, eps):
    """Plain-PyTorch RMSNorm in float64 (autograd-differentiable): (y, rstd)."""
    rstd = (x.double().pow(2).mean(dim=-1) + eps).rsqrt()
    return x.double() * rstd.unsqueeze(-1) * w.double(), rstd


def acc_dtype(dtype):
    return torch.promote_types(dtype, torch.float32)


def make_x(shape, dtype, gen, scale=1.0, transposed=False):
    if transposed:  # same values, last two dims swapped in memory: x.stride(-1) != 1
        x = torch.randn(*shape[:-2], shape[-1], shape[-2], generator=gen, dtype=torch.float64).transpose(-1, -2)
    else:
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return (x * scale).to(dtype)


def make_w(n, dtype, gen):
    return (1 + 0.5 * torch.randn(n, generator=gen, dtype=torch.float64)).to(dtype)


SHAPES = [(7,), (1,), (3, 1), (5, 33), (2, 3, 17), (4, 1, 9), (0, 6), (2, 0, 5), (3, 130)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def check_outputs(y, rstd, x, w, eps, what):
    ry, rr = reference(x, w, eps)
    assert isinstance(y, torch.Tensor) and isinstance(rstd, torch.Tensor), f"{what}: returns {type(y)}, {type(rstd)}"
    assert (y.shape, y.dtype) == (x.shape, x.dtype), f"{what}: y is {tuple(y.shape)} {y.dtype}"
    assert (rstd.shape, rstd.dtype) == (x.shape[:-1], acc_dtype(x.dtype)), (
        f"{what}: rstd is {tuple(rstd.shape)} {rstd.dtype}, the contract says {tuple(x.shape[:-1])} {acc_dtype(x.dtype)}")
    assert y.is_contiguous() and rstd.is_contiguous(), f"{what}: outputs must be contiguous"
    tol = FWD_TOL[x.dtype]
    rtol_r = 1e-12 if x.dtype == torch.float64 else 2e-6  # rstd is computed in float32/float64 for every x
    torch.testing.assert_close(rstd.double(), rr, rtol=rtol_r, atol=0, msg=lambda m: f"{what}: rstd\n{m}")
    if x.dtype in SUBNORMAL_ULP:  # elementwise: one rounding of the float32 result
        atol = SUBNORMAL_ULP[x.dtype]
    else:
        atol = tol * ry.abs().max().item() if ry.numel() else 0
    torch.testing.assert_close(y.double(), ry, rtol=tol, atol=atol, msg=lambda m: f"{what}: y\n{m}")


@pytest.mark.points(1)
def test_forward_matches_float64_reference(op):
    gen = torch.Generator().manual_seed(601)
    cases = []
    for shape, dtype in itertools.product(SHAPES, DTYPES):
        cases.append((shape, dtype, 1.0, False, 1e-6))
    for dtype in DTYPES:
        cases += [((4, 64), dtype, 3e-3, False, 1e-5),  # mean square ~ 1e-5: eps is half the denominator
                  ((3, 5, 24), dtype, 1.0, True, 1e-6),  # non-contiguous x
                  ((6, 40), dtype, 50.0, False, 1e-6)]
    for shape, dtype, scale, transposed, eps in cases:
        x, w = make_x(shape, dtype, gen, scale, transposed), make_w(shape[-1], dtype, gen)
        x0, w0 = x.clone(), w.clone()
        y, rstd = op(x, w, eps)
        what = f"x {tuple(shape)} {dtype} scale={scale} transposed={transposed} eps={eps}"
        assert torch.equal(x, x0) and torch.equal(w, w0), f"{what}: the op modified its input"
        check_outputs(y, rstd, x, w, eps, what)


def opcheck_samples(gen):
    """(args, run test_aot_dispatch_dynamic?): that check compiles forward and backward (~1-2 s each)."""
    out = []
    for i, (shape, dtype, transposed) in enumerate([((4, 6, 7), torch.float32, False), ((3, 5, 8), torch.bfloat16, True),
                                                    ((5, 9), torch.float64, False), ((2, 3, 5), torch.float16, False),
                                                    ((6, 11), torch.float32, True), ((13,), torch.float32, False),
                                                    ((3, 1), torch.float64, False), ((0, 4), torch.float32, False)]):
        x, w = make_x(shape, dtype, gen, 1.0, transposed), make_w(shape[-1], dtype, gen)
        if i % 3 != 2:
            x.requires_grad_()
        if i % 2 == 0 or i == 1:
            w.requires_grad_()
        out.append(((x, w, 1e-5 if i % 2 else 1e-6), i < 2))
    return out


def assert_opcheck(op, args, test_utils):
    try:
        result = torch.library.opcheck(op, args, test_utils=test_utils)
    except torch.library.OpCheckError as e:  # keep the first line: it names the failed check
        raise AssertionError(f"opcheck on x {tuple(args[0].shape)} {args[0].dtype} stride {args[0].stride()}: "
                             f"{str(e).splitlines()[0]}") from None
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.points(2)
def test_opcheck_passes_every_check(op):
    """Every opcheck test_util (AOT dispatch on 2 samples, the rest on 8), then schema + fake on 60 random inputs."""
    gen = torch.Generator().manual_seed(602)
    for args, aot in opcheck_samples(gen):
        assert_opcheck(op, args, ("test_schema", "test_autograd_registration", "test_faketensor")
                       + ("test_aot_dispatch_dynamic",) * aot)
    for k in range(60):
        rank = 1 + k % 4
        shape = tuple(int(torch.randint(1, 7, (), generator=gen)) for _ in range(rank - 1)) + (
            int(torch.randint(1, 70, (), generator=gen)),)
        dtype = DTYPES[k % 4]
        x = make_x(shape, dtype, gen, 1.0, transposed=rank >= 2 and k % 3 == 0)
        assert_opcheck(op, (x, make_w(shape[-1], dtype, gen), 1e-6), ("test_schema", "test_faketensor"))


@pytest.mark.points(1)
def test_fake_kernel_on_meta_and_fake_cuda(op):
    """The fake kernel alone: outputs on the input's device (meta, fake CUDA), with the real kernel's metadata."""
    gen = torch.Generator().manual_seed(603)
    for shape, dtype in itertools.product([(5,), (3, 8), (2, 4, 6), (0, 3)], DTYPES):
        x, w = make_x(shape, dtype, gen), make_w(shape[-1], dtype, gen)
        ry, rr = op(x, w, 1e-6)
        want = [(tuple(t.shape), t.dtype, t.stride()) for t in (ry, rr)]
        my, mr = op(x.to("meta"), w.to("meta"), 1e-6)
        got = [(tuple(t.shape), t.dtype, t.stride()) for t in (my, mr)]
        assert (my.device.type, mr.device.type) == ("meta", "meta"), (
            f"meta inputs {shape} {dtype}: outputs on {my.device}, {mr.device}: the fake kernel must allocate on x.device")
        assert got == want, f"meta inputs {shape} {dtype}: (shape, dtype, stride) {got}, real kernel gives {want}"
        with FakeTensorMode():
            xc = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="cuda")
            wc = torch.empty(w.shape, dtype=dtype, device="cuda")
            fy, fr = op(xc, wc, 1e-6)
        assert (fy.device.type, fr.device.type) == ("cuda", "cuda"), (
            f"fake CUDA inputs {shape} {dtype}: outputs on {fy.device}, {fr.device}: allocate on x.device")
        got = [(tuple(t.shape), t.dtype, t.stride()) for t in (fy, fr)]
        assert got == want, f"fake CUDA inputs {shape} {dtype}: {got}, real kernel gives {want}"


@pytest.mark.points(1)
def test_gradcheck_float64(op):
    """Finite differences on both outputs (y and rstd), float64, incl. rank-1, N = 1 and mean square ~ eps."""
    gen = torch.Generator().manual_seed(604)
    for shape, scale, eps in [((3, 5), 1.0, 1e-6), ((2, 3, 4), 1.0, 1e-5), ((6,), 1.0, 1e-6), ((4, 1), 1.0, 1e-6),
                              ((3, 7), 3e-3, 1e-5)]:
        x = make_x(shape, torch.float64, gen, scale).requires_grad_()
        w = make_w(shape[-1], torch.float64, gen).requires_grad_()
        ok = torch.autograd.gradcheck(lambda a, b, eps=eps: op(a, b, eps), (x, w), eps=1e-6, atol=1e-7,
                                      rtol=1e-5, raise_exception=False)
        assert ok, f"gradcheck failed for x {shape} scale={scale} eps={eps}: the backward is not the derivative"


@pytest.mark.points(1)
def test_gradients_match_reference_autograd(op):
    """dx, dw against autograd of the float64 reference, with gradient flowing into y only, rstd only, or both;
    16-bit gradients computed in float32 and rounded once (1.25 u per element)."""
    gen = torch.Generator().manual_seed(605)
    for (shape, dtype, use), scale in itertools.product(
            [((4, 6, 33), torch.float64, "both"), ((9, 17), torch.float64, "y"), ((5, 20), torch.float64, "rstd"),
             ((3, 2, 40), torch.float32, "both"), ((8, 64), torch.bfloat16, "both"), ((7, 1), torch.float64, "both"),
             ((6, 48), torch.float16, "both"), ((2, 5, 24), torch.bfloat16, "rstd")],
            [1.0, 3e-3]):
        x = make_x(shape, dtype, gen, scale).requires_grad_()
        w = make_w(shape[-1], dtype, gen).requires_grad_()
        # upstream gradients exactly representable in y's / rstd's dtype: the op receives exactly what the
        # float64 reference uses, so the 16-bit gradients may differ from it by their final rounding only
        gy = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).double()
        gr = (torch.randn(shape[:-1], generator=gen, dtype=torch.float64) * scale).to(acc_dtype(dtype)).double()
        y, rstd = op(x, w, 1e-5)
        loss = 0
        if use in ("y", "both"):
            loss = loss + (y.double() * gy).sum()
        if use in ("rstd", "both"):
            loss = loss + (rstd.double() * gr).sum()
        dx, dw = torch.autograd.grad(loss, (x, w), allow_unused=True)
        xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        ry, rr = reference(xr, wr, 1e-5)
        rloss = (ry * gy).sum() * (use != "rstd") + (rr * gr).sum() * (use != "y")
        rdx, rdw = torch.autograd.grad(rloss, (xr, wr))
        what = f"x {shape} {dtype} scale={scale}, loss uses {use}"
        for name, got, want in (("dx", dx, rdx), ("dw", dw, rdw)):
            assert got is not None, f"{what}: {name} is None"
            assert got.dtype == dtype and got.shape == want.shape, f"{what}: {name} is {tuple(got.shape)} {got.dtype}"
            if dtype in (torch.bfloat16, torch.float16):  # computed in float32, rounded once: 1.25 u per element
                rtol, atol = FWD_TOL[dtype], 1e-4 * want.abs().max().item()
            else:
                rtol = {torch.float64: 1e-9, torch.float32: 1e-4}[dtype]
                atol = rtol * want.abs().max().item()
            torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol,
                                       msg=lambda m, name=name: f"{what}: {name}\n{m}")


def model(x, w, proj):
    """RMSNorm -> linear -> SiLU -> RMSNorm, using both outputs of the op. (eps is a constant: a float argument
    would become a symbolic float under dynamic=True and make Dynamo restart its analysis once.)"""
    y, rstd = torch.ops.hpccourse.rms_norm(x, w, 1e-6)
    h = torch.nn.functional.silu(y @ proj)
    z, rstd2 = torch.ops.hpccourse.rms_norm(h, w, 1e-5)
    return z.sum(dim=-1) + rstd.log() + rstd2


@pytest.mark.points(2)
def test_compiles_in_one_frame_without_graph_break(op):
    """torch.compile(fullgraph=True, backend aot_eager): one frame, the op stays one node, values and grads equal eager."""
    gen = torch.Generator().manual_seed(606)
    for dynamic in (False, True):
        torch._dynamo.reset()
        cnt = CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(model, backend=cnt, fullgraph=True, dynamic=dynamic)
        shapes = [(3, 5, 16)] if not dynamic else [(3, 5, 16), (2, 7, 16), (6, 4, 16)]
        for shape in shapes:
            x = make_x(shape, torch.float32, gen).requires_grad_()
            w = make_w(16, torch.float32, gen).requires_grad_()
            proj = (torch.randn(16, 16, generator=gen) / 4).requires_grad_()
            out = compiled(x, w, proj)
            grads = torch.autograd.grad(out.sum(), (x, w, proj))
            want = model(x, w, proj)
            wgrads = torch.autograd.grad(want.sum(), (x, w, proj))
            torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
            for g, wg in zip(grads, wgrads):
                torch.testing.assert_close(g, wg, rtol=1e-4, atol=1e-5)
        assert cnt.frame_count == 1, f"dynamic={dynamic}: {cnt.frame_count} frames compiled, want 1"
        nodes = [n for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
        calls = [n for n in nodes if n.target in (torch.ops.hpccourse.rms_norm, torch.ops.hpccourse.rms_norm.default)]
        assert len(calls) == 2, (f"the Dynamo graph holds {len(calls)} hpccourse.rms_norm calls, want 2 "
                                 "(the op must stay opaque to Dynamo)")
