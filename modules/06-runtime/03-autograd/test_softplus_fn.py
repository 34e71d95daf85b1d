# ruff: noqa: B023  (every closure made in a loop here is called within the same iteration)
"""Tests for runtime-03: the learner's SoftplusAmax autograd.Function.

Oracles: float64 closed forms (softplus via log1p/exp, its derivative torch.sigmoid(beta*x), its second derivative
beta*s*(1-s)), torch.autograd.gradcheck / gradgradcheck (finite differences, float64), saved-tensor hooks
(torch.autograd.graph.saved_tensors_hooks) for what is saved, and the version counter for in-place edits.
"""

import itertools

import pytest
import torch

BETAS = [1.0, 0.5, 3.0]


@pytest.fixture
def sp(lesson):
    return lesson.load("softplus_fn.py")


def ref_softplus(x, beta):
    """float64 softplus_beta, exact for every finite x."""
    bx = x.double() * beta
    return (bx.clamp(min=0) + torch.log1p(torch.exp(-bx.abs()))) / beta


def inputs(gen, dtype, n=257, big=None):
    """Random values, a spread of magnitudes, zero, and the overflow range of exp for this dtype."""
    big = big if big is not None else (1000.0 if dtype == torch.float64 else 200.0)
    x = torch.cat([torch.randn(n, generator=gen, dtype=torch.float64) * 4,
                   torch.tensor([0.0, 1e-8, -1e-8, 5.0, -5.0, 30.0, -30.0, 60.0, -60.0, big, -big, big / 2, -big / 2],
                                dtype=torch.float64)])
    return x.to(dtype)


@pytest.mark.points(1)
def test_forward_is_exact_for_every_x(sp):
    gen = torch.Generator().manual_seed(631)
    for dtype, beta in itertools.product([torch.float64, torch.float32], BETAS):
        for shape in [(270,), (10, 27), (2, 5, 27)]:
            x = inputs(gen, dtype).reshape(shape)
            x0 = x.clone()
            y, amax = sp.softplus_amax(x, beta)
            assert torch.equal(x, x0), f"{dtype} beta={beta}: softplus_amax modified its input x"
            want = ref_softplus(x, beta)
            assert y.dtype == dtype and y.shape == x.shape, f"y is {y.dtype} {tuple(y.shape)}"
            assert torch.isfinite(y).all(), f"{dtype} beta={beta}: non-finite output at x = {x[~torch.isfinite(y)][:4]}"
            rtol, atol = (1e-12, 1e-300) if dtype == torch.float64 else (2e-6, 1e-38)
            torch.testing.assert_close(y.double(), want, rtol=rtol, atol=atol,
                                       msg=lambda m, dtype=dtype, beta=beta: f"{dtype} beta={beta}\n{m}")
            assert amax.shape == () and amax.dtype == dtype
            torch.testing.assert_close(amax.double(), want.max(), rtol=rtol, atol=0)


@pytest.mark.points(1)
def test_gradient_matches_sigmoid_and_only_y_is_differentiable(sp):
    """dy/dx = sigmoid(beta*x) to relative precision, also where it is 1e-20 or 1 - 1e-20; amax has no gradient."""
    gen = torch.Generator().manual_seed(632)
    for dtype, beta in itertools.product([torch.float64, torch.float32], BETAS):
        x = inputs(gen, dtype, big=500.0 if dtype == torch.float64 else 60.0).reshape(30, 9).requires_grad_()
        y, amax = sp.softplus_amax(x, beta)
        assert y.requires_grad and y.grad_fn is not None, "y must carry a grad_fn"
        assert not amax.requires_grad, "amax must be marked non-differentiable (ctx.mark_non_differentiable)"
        g = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dtype)
        (dx,) = torch.autograd.grad(y, x, g)
        want = g.double() * torch.sigmoid(beta * x.detach().double())
        # sigmoid recovered from y: fp32 keeps ~1e-6 relative; where sigmoid underflows to subnormals, use atol
        rtol, atol = (1e-10, 1e-300) if dtype == torch.float64 else (1e-5, 1e-30)
        torch.testing.assert_close(dx.double(), want, rtol=rtol, atol=atol,
                                   msg=lambda m, dtype=dtype, beta=beta: f"dx, {dtype} beta={beta}\n{m}")


@pytest.mark.points(1)
def test_gradcheck_float64(sp):
    gen = torch.Generator().manual_seed(633)
    for beta, scale in itertools.product(BETAS, [1.0, 8.0]):
        x = (torch.randn(4, 7, generator=gen, dtype=torch.float64) * scale).requires_grad_()
        assert torch.autograd.gradcheck(lambda t, beta=beta: sp.softplus_amax(t, beta)[0], (x,), eps=1e-6, atol=1e-8,
                                        raise_exception=False), f"gradcheck failed, beta={beta}, |x| ~ {scale}"


@pytest.mark.points(2)
def test_gradgradcheck_and_second_derivative(sp):
    """Double backward: gradgradcheck (finite differences of the backward), and d2y/dx2 = beta*s(bx)*s(-bx) in closed
    form, including |beta*x| up to 40 (there to absolute precision 1e-15)."""
    gen = torch.Generator().manual_seed(634)
    for beta, scale in itertools.product(BETAS, [1.0, 6.0]):
        x = (torch.randn(3, 5, generator=gen, dtype=torch.float64) * scale).requires_grad_()
        fn = lambda t, beta=beta: sp.softplus_amax(t, beta)[0]  # noqa: E731
        assert torch.autograd.gradgradcheck(fn, (x,), eps=1e-6, atol=1e-7, raise_exception=False), (
            f"gradgradcheck failed, beta={beta}: the backward is not differentiable (detach / .data / no_grad?) "
            "or its derivative is wrong")
    for beta in BETAS:
        x = torch.cat([torch.randn(40, generator=gen, dtype=torch.float64) * 3,
                       torch.tensor([40.0, -40.0, 20.0, -20.0], dtype=torch.float64) / beta]).requires_grad_()
        y, _ = sp.softplus_amax(x, beta)
        (dx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        assert dx.requires_grad, "the gradient has no graph: backward must be built from differentiable ops"
        (d2x,) = torch.autograd.grad(dx.sum(), x)
        bx = beta * x.detach()
        want = beta * torch.sigmoid(bx) * torch.sigmoid(-bx)  # s*(1-s) without the cancellation in 1 - s
        # atol: autograd's expm1 backward uses (result + 1), which cancels to ~1e-16 where s(-bx) is tiny
        torch.testing.assert_close(d2x, want, rtol=1e-9, atol=1e-15 * beta,
                                   msg=lambda m, beta=beta: f"second derivative, beta={beta}\n{m}")


@pytest.mark.points(1)
def test_saves_exactly_the_output(sp):
    """saved_tensors_hooks see one packed tensor, y itself (same storage); backward reads it back through the
    hooks (unpack returns a copy here, as save_on_cpu or checkpointing would)."""
    gen = torch.Generator().manual_seed(635)
    for shape in [(17,), (6, 11), (2, 3, 8)]:
        x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 5).requires_grad_()
        packed, unpacked = [], []

        def pack(t):
            packed.append(t)
            return t.detach().clone()  # what the graph keeps is now a copy, not y

        def unpack(t):
            unpacked.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            y, _ = sp.softplus_amax(x, 2.0)
        assert len(packed) == 1, (f"{len(packed)} tensors saved for backward, want exactly 1 (the output y): "
                                  "save with ctx.save_for_backward and save nothing but y")
        t = packed[0]
        assert t.shape == y.shape and t.data_ptr() == y.data_ptr(), (
            "the saved tensor is not the output y: save y itself (not x, not a copy); sigmoid(beta*x) = 1 - exp(-beta*y)")
        (dx,) = torch.autograd.grad(y.sum(), x)
        assert len(unpacked) == 1, "backward must read the saved tensor through ctx.saved_tensors"
        torch.testing.assert_close(dx, torch.sigmoid(2.0 * x.detach()), rtol=1e-10, atol=1e-300)


@pytest.mark.points(1)
def test_version_counter_guards_the_saved_output(sp):
    """In-place on y after forward must make backward raise; in-place on x must not (x is not saved)."""
    gen = torch.Generator().manual_seed(636)
    leaf = torch.randn(5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    y, _ = sp.softplus_amax(leaf * 1.0, 1.5)
    y.mul_(2.0)  # e.g. a later in-place op in the model
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    x = leaf * 1.0
    y, _ = sp.softplus_amax(x, 1.5)
    want = torch.sigmoid(1.5 * x.detach())
    x.add_(100.0)  # the input changes after forward: the gradient must still be the one at the old x
    (dx,) = torch.autograd.grad(y.sum(), leaf)
    torch.testing.assert_close(dx, want, rtol=1e-10, atol=1e-300)
    y, _ = sp.softplus_amax(leaf * 1.0, 1.5)
    g1 = torch.autograd.grad(y.sum(), leaf, retain_graph=True)[0]
    g2 = torch.autograd.grad(y.sum(), leaf)[0]
    assert torch.equal(g1, g2), "two backward passes over a retained graph must agree"
