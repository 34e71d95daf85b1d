"""Tests for rl-12. The oracle is torch's own Beta (`torch.distributions.Beta`: log_prob, entropy, mean, and autograd
through them) evaluated in float64 on the same (rounded) inputs, plus the affine term log(high - low) per dimension.
Independent extra references: closed-form moments of the Beta distribution (mean, second moment) against
large-sample Monte Carlo with its own standard error, the exact bandit gradient from those moments, and the clipped
Gaussian's exact expected action and policy gradient (normal CDF/pdf in closed form), plus gymnasium's Pendulum-v1."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

F64, F32 = torch.float64, torch.float32


def assert_close(got, want, *, tol, scale=None, msg=""):
    """|got - want| <= tol * (1 + scale) elementwise in float64 (scale: the size of the terms that were rounded;
    default |want|). Same shape, finite wherever want is finite."""
    assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    g, w = got.detach().double(), want.detach().double()
    s = w.abs() if scale is None else scale.double()
    bad = ~((g - w).abs() <= tol * (1.0 + s))
    if bad.any():
        i = tuple(int(k) for k in bad.nonzero()[0])
        raise AssertionError(
            f"{msg}{int(bad.sum())} of {bad.numel()} elements differ; at {i}: got {g[i].item()!r}, expected "
            f"{w[i].item()!r} (|diff| {abs(g[i].item() - w[i].item()):.3g}, allowed {tol * (1 + s[i].item()):.3g})"
        )


def inv_softplus_plus_one(c):
    """The raw head output that gives concentration c >= 1 (float64): softplus(raw) + 1 = c."""
    y = torch.as_tensor(c, dtype=F64) - 1.0
    return torch.where(y > 30, y, y + torch.log(-torch.expm1(-y)))


# concentrations from exactly 1 (raw = -30: softplus is 9.4e-14, so alpha rounds to 1.0 in float32) to 1000
CONC = [1.0, 1.0001, 1.7, 3.0, 40.0, 250.0, 1000.0]
RAW_ONE = -30.0
# per-dimension, asymmetric bounds (D = 5): widths from 1e-3 to 300
LOW5 = [-2.0, -7.3, 0.1, 999.0, -100.0]
HIGH5 = [1.0, 1.1, 0.101, 1000.0, 200.0]


def _bounds(dtype, low=LOW5, high=HIGH5):
    return torch.tensor(low, dtype=dtype), torch.tensor(high, dtype=dtype)


def _raw_params(B, D, seed):
    """alpha_raw, beta_raw [B, D] in float64 whose concentrations are drawn from CONC (raw = -30 for exactly 1)."""
    g = torch.Generator().manual_seed(seed)
    conc = torch.tensor(CONC, dtype=F64)
    raws = torch.cat([torch.tensor([RAW_ONE], dtype=F64), inv_softplus_plus_one(conc[1:])])
    ia = torch.randint(0, len(CONC), (B, D), generator=g)
    ib = torch.randint(0, len(CONC), (B, D), generator=g)
    return raws[ia], raws[ib]


def _unit_points(B, D, seed, dtype):
    """x [B, D] in (0, 1): a third in the bulk, the rest within 1e-6 of 0 or of 1 (but at least machine eps away)."""
    g = torch.Generator().manual_seed(seed + 100)
    near = [2e-7, 5e-7, 9.5e-7] if dtype == F32 else [1e-14, 3e-10, 5e-7, 9.5e-7]
    pts = [0.001, 0.2, 0.5, 0.77, 0.999] + near + [1.0 - v for v in near]
    pts = torch.tensor(pts, dtype=F64).to(dtype)  # rounded to the dtype first: both sides see the same x
    return pts[torch.randint(0, len(pts), (B, D), generator=g)]


def oracle(alpha_raw, beta_raw, dtype):
    """torch's Beta in float64 on the concentrations of the dtype-rounded raw outputs."""
    a = F.softplus(alpha_raw.to(dtype).double()) + 1.0
    b = F.softplus(beta_raw.to(dtype).double()) + 1.0
    return torch.distributions.Beta(a, b, validate_args=False), a, b


def log_prob_scale(a, b, x, low, high):
    """Sum over D of the magnitudes of the terms of log pi: what a correct float32/float64 evaluation rounds."""
    x = x.double()
    terms = (torch.lgamma(a).abs() + torch.lgamma(b).abs() + torch.lgamma(a + b).abs()
             + ((a - 1) * torch.log(x)).abs() + ((b - 1) * torch.log1p(-x)).abs()
             + torch.log(high.double() - low.double()).abs())
    return terms.sum(-1)


# Tolerances, relative to 1 + (the sum of the magnitudes of the terms): float32 evaluations of lgamma, log and the
# products are each rounded to ~6e-8 relative; torch's own float32 Beta.log_prob lands within 1.4e-7 of float64 on
# these inputs (lgamma(2000) = 13200 nats is the largest term), the reference within 1.2e-7: 1e-6 leaves 7x margin.
# float64: the same at 1.1e-16 relative (measured 1.7e-16); 1e-12 leaves room for any order of the sums.
# A wrong term is off by O(1) nats or more: |log(high - low)| is 0 to 6.9 per dim here (2.0 summed over the five),
# a swapped alpha/beta at x = 2e-7 by ~15 |alpha - beta| nats.
TOL = {F32: 1e-6, F64: 1e-12}


# ---- the fastest tests that catch a wrong head come first -------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, F64])
def test_concentrations_are_softplus_plus_one(lesson, dtype):
    bp = lesson.load("beta_policy.py")
    raw = torch.tensor([[-30.0, -5.0, -0.3, 0.0], [0.4, 3.0, 25.0, 999.0]], dtype=dtype)
    alpha, beta = bp.concentrations(raw, raw.flip(-1))
    want = F.softplus(raw.double()) + 1.0
    assert alpha.dtype == dtype and beta.dtype == dtype, "concentrations keep the dtype of the head's outputs"
    assert_close(alpha, want, tol=TOL[dtype], msg="alpha = softplus(alpha_raw) + 1: ")
    assert_close(beta, want.flip(-1), tol=TOL[dtype], msg="beta = softplus(beta_raw) + 1: ")
    assert bool((alpha >= 1).all()) and bool((beta >= 1).all()), "concentrations below 1 give a U-shaped density"
    assert alpha[1, 3].item() == 1000.0, "raw = 999 must give alpha = 1000 (a softplus that overflows is not finite)"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_log_beta_function_is_finite_and_exact_for_large_concentrations(lesson, dtype):
    bp = lesson.load("beta_policy.py")
    a = torch.tensor([1.0, 1.5, 20.0, 35.0, 171.0, 400.0, 1000.0, 1000.0], dtype=dtype)
    b = torch.tensor([1.0, 7.0, 20.0, 2.0, 3.0, 400.0, 1.0, 1000.0], dtype=dtype)
    got = bp.log_beta_function(a, b)
    ad, bd = a.double(), b.double()
    want = torch.lgamma(ad) + torch.lgamma(bd) - torch.lgamma(ad + bd)  # Gamma(35) overflows float32, Gamma(172) float64
    scale = torch.lgamma(ad).abs() + torch.lgamma(bd).abs() + torch.lgamma(ad + bd).abs()
    assert bool(torch.isfinite(got).all()), f"log B must be finite up to alpha, beta = 1000, got {got.tolist()}"
    assert_close(got, want, tol=TOL[dtype], scale=scale, msg="log B(alpha, beta): ")


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("B, D, seed", [(37, 5, 0), (64, 5, 1), (1, 1, 2)])
def test_log_prob_matches_torch_beta_plus_affine_term(lesson, dtype, B, D, seed):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(B, D, seed)
    x = _unit_points(B, D, seed, dtype)
    low, high = _bounds(dtype, LOW5[:D], HIGH5[:D])
    got = bp.log_prob(ar.to(dtype), br.to(dtype), x, low, high)
    assert got.shape == (B,), f"log pi is one number per row: shape {tuple(got.shape)}, expected ({B},)"
    assert isinstance(got, torch.Tensor) and got.dtype == dtype, f"log pi must be a {dtype} tensor"
    dist, a, b = oracle(ar, br, dtype)
    want = (dist.log_prob(x.double()) - torch.log(high.double() - low.double())).sum(-1)
    assert_close(got, want, tol=TOL[dtype], scale=log_prob_scale(a, b, x, low, high),
                 msg="log pi vs torch Beta.log_prob(x) - log(high - low), summed over dims: ")


def test_log_prob_is_a_sum_over_action_dims(lesson):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(9, 5, 7)
    x = _unit_points(9, 5, 7, F64)
    low, high = _bounds(F64)
    whole = bp.log_prob(ar, br, x, low, high)
    parts = sum(bp.log_prob(ar[:, d:d + 1], br[:, d:d + 1], x[:, d:d + 1], low[d:d + 1], high[d:d + 1])
                for d in range(5))
    assert whole.shape == (9,), f"log pi is one number per row: shape {tuple(whole.shape)}, expected (9,)"
    assert_close(whole, parts, tol=1e-12, scale=log_prob_scale(*oracle(ar, br, F64)[1:], x, low, high),
                 msg="a product distribution's log-density is the sum over dims: ")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_exact_bounds_are_clamped_to_machine_eps(lesson, dtype):
    bp = lesson.load("beta_policy.py")
    eps = torch.finfo(dtype).eps
    # alpha exactly 1 (raw = -30; in float64 1 + 9e-14) with x = 0: an unclamped (alpha - 1) log x is 0 * -inf = nan
    ar = torch.tensor([[RAW_ONE, 2.0, 0.5], [6.0, RAW_ONE, -1.0]], dtype=F64)
    br = torch.tensor([[1.0, RAW_ONE, 3.0], [RAW_ONE, 0.0, 6.9]], dtype=F64)
    low, high = _bounds(dtype, [-1.0, 0.0, 5.0], [1.0, 2.5, 5.5])
    x = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]], dtype=dtype)
    x_clamped = torch.tensor([[eps, 1 - eps, eps], [1 - eps, eps, 1 - eps]], dtype=dtype)
    a_leaf = ar.to(dtype).requires_grad_(True)
    b_leaf = br.to(dtype).requires_grad_(True)
    got = bp.log_prob(a_leaf, b_leaf, x, low, high)
    assert bool(torch.isfinite(got).all()), f"x = 0 or 1 exactly must give a finite log pi, got {got.tolist()}"
    ga, gb = torch.autograd.grad(got.sum(), (a_leaf, b_leaf))
    assert bool(torch.isfinite(ga).all() and torch.isfinite(gb).all()), "gradients at x = 0 or 1 must be finite"
    dist, a, b = oracle(ar, br, dtype)
    want = (dist.log_prob(x_clamped.double()) - torch.log(high.double() - low.double())).sum(-1)
    assert_close(got, want, tol=TOL[dtype], scale=log_prob_scale(a, b, x_clamped, low, high),
                 msg=f"x = 0 / 1 must be evaluated at eps / 1 - eps with eps = finfo({dtype}).eps = {eps:.3g}: ")


def test_log_prob_gradients_match_torch_beta(lesson):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(31, 3, 11)
    x = _unit_points(31, 3, 11, F64)
    low, high = _bounds(F64, LOW5[:3], HIGH5[:3])
    a_leaf, b_leaf = ar.clone().requires_grad_(True), br.clone().requires_grad_(True)
    w = torch.linspace(-1.0, 2.0, 31, dtype=F64)  # a weighted sum: every row's gradient is checked separately
    ga, gb = torch.autograd.grad((w * bp.log_prob(a_leaf, b_leaf, x, low, high)).sum(), (a_leaf, b_leaf))
    ra, rb = ar.clone().requires_grad_(True), br.clone().requires_grad_(True)
    want = torch.distributions.Beta(F.softplus(ra) + 1, F.softplus(rb) + 1).log_prob(x).sum(-1)
    wa, wb = torch.autograd.grad((w * want).sum(), (ra, rb))
    # d/d raw = sigmoid(raw) (log x - psi(alpha) + psi(alpha + beta)): terms up to ~35 (log 1e-14) times |w| <= 2
    assert_close(ga, wa, tol=1e-11, scale=torch.full_like(wa, 70.0), msg="d log pi / d alpha_raw: ")
    assert_close(gb, wb, tol=1e-11, scale=torch.full_like(wb, 70.0), msg="d log pi / d beta_raw: ")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_entropy_is_the_closed_form_plus_the_affine_term(lesson, dtype):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(41, 5, 3)
    low, high = _bounds(dtype)
    got = bp.entropy(ar.to(dtype), br.to(dtype), low, high)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.shape == (41,), "entropy: [B] in the dtype"
    dist, a, b = oracle(ar, br, dtype)
    want = (dist.entropy() + torch.log(high.double() - low.double())).sum(-1)
    s = a + b
    scale = (torch.lgamma(a).abs() + torch.lgamma(b).abs() + torch.lgamma(s).abs() + ((a - 1) * torch.digamma(a)).abs()
             + ((b - 1) * torch.digamma(b)).abs() + ((s - 2) * torch.digamma(s)).abs()).sum(-1)
    # float32: the closed form cancels terms of ~1e4 nats down to a few nats, so it is compared relative to them
    assert_close(got, want, tol=TOL[dtype], scale=scale, msg="entropy vs torch Beta.entropy() + log(high - low): ")
    # the entropy is a training signal (PPO's bonus): its gradient must be torch's as well
    a_leaf, b_leaf = ar.clone().requires_grad_(True), br.clone().requires_grad_(True)
    ga, gb = torch.autograd.grad(bp.entropy(a_leaf, b_leaf, *_bounds(F64)).sum(), (a_leaf, b_leaf))
    ra, rb = ar.clone().requires_grad_(True), br.clone().requires_grad_(True)
    wa, wb = torch.autograd.grad(torch.distributions.Beta(F.softplus(ra) + 1, F.softplus(rb) + 1).entropy().sum(),
                                 (ra, rb))
    assert_close(ga, wa, tol=1e-9, scale=torch.full_like(wa, 10.0), msg="d entropy / d alpha_raw: ")
    assert_close(gb, wb, tol=1e-9, scale=torch.full_like(wb, 10.0), msg="d entropy / d beta_raw: ")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_mean_action_is_the_beta_mean_mapped_to_the_box(lesson, dtype):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(23, 5, 5)
    low, high = _bounds(dtype)
    got = bp.mean_action(ar.to(dtype), br.to(dtype), low, high)
    assert got.dtype == dtype and got.shape == (23, 5), "mean_action: [B, D] in the dtype"
    dist, _, _ = oracle(ar, br, dtype)
    want = low.double() + dist.mean * (high.double() - low.double())
    assert_close(got, want, tol=4 * torch.finfo(dtype).eps, scale=torch.maximum(low.abs(), high.abs()).double()
                 .expand_as(want), msg="mean action low + alpha / (alpha + beta) (high - low): ")
    assert bool(((got >= low) & (got <= high)).all()), "the mean action lies inside the Box"


# ---- the score-function estimate, exactly, at the learner's own draws -------------------------------------------
def _score_mean_at_own_draws(bp, ar, br, low, high, reward_fn, n, seed):
    """(1/n) sum_i r_i d log pi(x_i) / d raw in float64, at the draws the learner's own `sample` makes from
    Generator().manual_seed(seed) on [n, D] rows; closed-form score sigmoid(raw) (log x - psi(alpha) + psi(total)).
    Also the scale: the mean of |r| sigmoid(raw) (|log x| + |psi(alpha)| + |psi(total)|), what a correct run rounds."""
    D = ar.shape[0]
    action, x = bp.sample(ar.expand(n, D), br.expand(n, D), low, high, torch.Generator().manual_seed(seed))
    r = reward_fn(action).double()[:, None]
    a, b = F.softplus(ar.double()) + 1.0, F.softplus(br.double()) + 1.0
    xd, psi_t = x.double(), torch.digamma(a + b)
    out = []
    for raw, log_x, conc in ((ar, torch.log(xd), a), (br, torch.log1p(-xd), b)):
        sig = torch.sigmoid(raw.double())
        out.append((r * sig * (log_x - torch.digamma(conc) + psi_t)).mean(0))
        out.append((r.abs() * sig * (log_x.abs() + torch.digamma(conc).abs() + psi_t.abs())).mean(0))
    return out


REINFORCE_CASES = {
    # constant reward 1: the estimate is the mean score itself; a mean baseline turns it into exactly 0
    "f64-constant-reward": (F64, [4.0, 1.7, 40.0], [1.5, 250.0, 1.2], LOW5[:3], HIGH5[:3], None, 8),
    "f64-varying-reward": (F64, [4.0, 1.7, 40.0], [1.5, 250.0, 1.2], LOW5[:3], HIGH5[:3], 1.0, 8),
    # float32 on [999, 1000]: an action near 999.1 is stored to ~6e-5 (one ulp of 1000), so x recomputed from
    # the action, (action - low) / (high - low), is off by up to 3e-5 -- ~1e-3 relative for x ~ 0.005 (beta = 250)
    "f32-box-999-1000": (F32, [1.2, 1.2], [8.0, 250.0], [999.0, 999.0], [1000.0, 1000.0], 1.0, 32),
}


@pytest.mark.parametrize("case", list(REINFORCE_CASES))
def test_reinforce_gradient_is_the_exact_score_mean_at_its_own_draws(lesson, case):
    bp = lesson.load("beta_policy.py")
    dtype, conc_a, conc_b, lo, hi, wiggle, n = REINFORCE_CASES[case]
    ar = inv_softplus_plus_one(torch.tensor(conc_a)).to(dtype)
    br = inv_softplus_plus_one(torch.tensor(conc_b)).to(dtype)
    low, high = _bounds(dtype, lo, hi)

    def reward(action):
        base = torch.ones(action.shape[0], dtype=action.dtype)
        return base if wiggle is None else base + wiggle * torch.cos(action).sum(-1)

    want_a, scale_a, want_b, scale_b = _score_mean_at_own_draws(bp, ar, br, low, high, reward, n, 3)
    got_a, got_b = bp.reinforce_gradient(ar, br, low, high, reward, n, torch.Generator().manual_seed(3))
    assert got_a.shape == ar.shape and got_b.shape == br.shape, "one gradient entry per action dimension"
    assert got_a.dtype == dtype and got_b.dtype == dtype, "the gradient keeps the dtype of the parameters"
    # the estimate is a mean of n rounded products: float64 within 1e-16 relative of the scale (measured 3e-17),
    # float32 within 6e-8 (measured over 10 seeds); x taken from the action instead of `sample`'s x is off by
    # >= 2e-5 relative there, a mean baseline by the whole estimate
    tol = 1e-12 if dtype == F64 else 1e-6
    msg = ("must equal (1/n) sum_i r_i d log pi(x_i) / d raw exactly (no baseline, log pi at the x that `sample` "
           "returned, one `sample` call on [n_samples, D] rows with the generator handed in): ")
    assert_close(got_a, want_a, tol=tol, scale=scale_a, msg="d/d alpha_raw " + msg)
    assert_close(got_b, want_b, tol=tol, scale=scale_b, msg="d/d beta_raw " + msg)


# ---- sampling -------------------------------------------------------------------------------------------------
def _rows(pairs, n, D, dtype):
    """alpha_raw, beta_raw [sum(n), D]: the k-th (alpha, beta) pair repeated n (or n[k]) times, the same in every dim."""
    counts = torch.tensor(n if isinstance(n, (list, tuple)) else [n] * len(pairs))
    raws = [(RAW_ONE if a == 1.0 else inv_softplus_plus_one(a).item(),
             RAW_ONE if b == 1.0 else inv_softplus_plus_one(b).item()) for a, b in pairs]
    ar = torch.tensor([r[0] for r in raws], dtype=F64).repeat_interleave(counts)[:, None].expand(-1, D)
    br = torch.tensor([r[1] for r in raws], dtype=F64).repeat_interleave(counts)[:, None].expand(-1, D)
    return ar.to(dtype).contiguous(), br.to(dtype).contiguous()


@pytest.mark.points(2)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_samples_stay_strictly_inside_for_extreme_concentrations(lesson, dtype):
    bp = lesson.load("beta_policy.py")
    eps = torch.finfo(dtype).eps
    # float32, 200k draws of Beta(1000, 1): ~17 ratios G_a / (G_a + G_b) round above 1 - eps (~4 to exactly 1.0);
    # of Beta(1, 1000): ~23 fall below eps
    big = 200_000 if dtype == F32 else 20_000
    pairs = [(1000.0, 1.0), (1.0, 1000.0), (1.0, 1.0), (1000.0, 1000.0)]
    ar, br = _rows(pairs, [big, big, 20_000, 20_000], 2, dtype)
    # [-1.1, -1.0] and [1.0, 1.1]: in float32 the centred form (2x - 1) (high - low) / 2 + (high + low) / 2 lands
    # one ulp past high at x = 1 - eps (dim 0) and below low at x = eps (dim 1); low + x (high - low) never does
    low, high = _bounds(dtype, [-1.1, 1.0], [-1.0, 1.1])
    action, x = bp.sample(ar, br, low, high, torch.Generator().manual_seed(3))
    assert action.shape == ar.shape and x.shape == ar.shape, "sample returns (action, x), both [B, D]"
    assert action.dtype == dtype and x.dtype == dtype, "samples keep the dtype"
    assert not action.requires_grad and not x.requires_grad, "samples are data: no autograd graph"
    assert bool(torch.isfinite(x).all()), "non-finite unit samples"
    assert x.min().item() >= eps and x.max().item() <= 1 - eps, (
        f"unit samples must lie in [eps, 1 - eps] (eps = {eps:.3g}): got min {x.min().item():.3g}, "
        f"1 - max = {1 - x.max().item():.3g}")
    assert bool(((action >= low) & (action <= high)).all()), "actions must never leave [low, high]"
    want = low.double() + x.double() * (high.double() - low.double())
    assert_close(action, want, tol=4 * eps, scale=torch.full_like(want, 2.0), msg="action = low + x (high - low): ")


def test_samples_on_per_dimension_bounds(lesson):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(3000, 5, 21)
    for dtype in (F32, F64):
        low, high = _bounds(dtype)
        a_leaf, b_leaf = ar.to(dtype).requires_grad_(True), br.to(dtype).requires_grad_(True)  # a network's outputs
        action, x = bp.sample(a_leaf, b_leaf, low, high, torch.Generator().manual_seed(5))
        assert not action.requires_grad and not x.requires_grad, "samples are data: no autograd graph (no rsample)"
        assert bool(((action >= low) & (action <= high)).all()), f"{dtype}: actions must stay in their own dim's box"
        eps = torch.finfo(dtype).eps
        want = low.double() + x.double() * (high.double() - low.double())
        scale = torch.maximum(low.abs(), high.abs()).double().expand_as(want)
        assert_close(action, want, tol=4 * eps, scale=scale, msg=f"{dtype}: action = low + x (high - low) per dim: ")


@pytest.mark.points(2)
def test_samples_follow_the_beta_distribution(lesson):
    bp = lesson.load("beta_policy.py")
    n = 40_000
    pairs = [(1.5, 4.0), (7.0, 2.0), (1.0, 1.0), (300.0, 40.0), (1.0, 12.0)]
    ar, br = _rows(pairs, n, 3, F64)
    low, high = _bounds(F64, [-1.0, 0.0, 3.0], [1.0, 0.25, 10.0])
    _, x = bp.sample(ar, br, low, high, torch.Generator().manual_seed(11))
    x = x.view(len(pairs), n, 3)
    for k, (a, b) in enumerate(pairs):
        s = a + b
        m1, m2 = a / s, a * (a + 1) / (s * (s + 1))
        got1, got2 = x[k].mean(0), (x[k] ** 2).mean(0)
        se1, se2 = x[k].std(0) / math.sqrt(n), (x[k] ** 2).std(0) / math.sqrt(n)
        # 5 standard errors: a correct sampler fails one of these 30 checks with probability ~2e-5
        assert bool(((got1 - m1).abs() <= 5 * se1).all()), (
            f"Beta({a}, {b}): sample mean {got1.tolist()} vs alpha / (alpha + beta) = {m1:.5f} (+- {5 * se1.max():.2g})")
        assert bool(((got2 - m2).abs() <= 5 * se2).all()), (
            f"Beta({a}, {b}): E[x^2] {got2.tolist()} vs {m2:.5f} (+- {5 * se2.max():.2g})")


def test_sample_draws_only_from_the_generator_and_keeps_no_state(lesson):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(50, 3, 13)
    low, high = _bounds(F32, LOW5[:3], HIGH5[:3])
    ar, br = ar.float(), br.float()
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    a1, x1 = bp.sample(ar, br, low, high, torch.Generator().manual_seed(7))
    assert torch.equal(torch.get_rng_state(), state), "sample must not draw from (or reseed) torch's global RNG"
    torch.manual_seed(999)
    a2, x2 = bp.sample(ar, br, low, high, torch.Generator().manual_seed(7))
    assert torch.equal(x1, x2) and torch.equal(a1, a2), "the same generator seed must give the same samples"
    _, x3 = bp.sample(ar, br, low, high, torch.Generator().manual_seed(8))
    assert not torch.equal(x1, x3), "another generator seed must give other samples"


def test_inputs_are_left_unchanged_and_calls_keep_no_state(lesson):
    bp = lesson.load("beta_policy.py")
    ar, br = _raw_params(12, 3, 17)
    x = _unit_points(12, 3, 17, F64)
    x[0, 0], x[1, 1] = 0.0, 1.0
    low, high = _bounds(F64, LOW5[:3], HIGH5[:3])
    a1, b1 = ar[0].clone(), br[0].clone()  # reinforce_gradient's parameters [D]: plain tensors, no grad
    inputs = [t.clone() for t in (ar, br, x, low, high, a1, b1)]
    outs = []
    for _ in range(2):
        outs.append((bp.log_prob(ar, br, x, low, high), bp.entropy(ar, br, low, high),
                     bp.mean_action(ar, br, low, high), bp.sample(ar, br, low, high, torch.Generator().manual_seed(2))[1],
                     bp.clamp_unit(x),
                     *bp.reinforce_gradient(a1, b1, low, high, lambda act: 1.0 - act.sum(-1), 16,
                                            torch.Generator().manual_seed(4))))
    for before, after in zip(inputs, (ar, br, x, low, high, a1, b1)):
        assert torch.equal(before, after), "inputs must be left unchanged (no in-place clamp or softplus)"
        assert not after.requires_grad and after.grad is None, (
            "inputs must be left unchanged: no requires_grad_(True) on the caller's tensors, no .grad left on them "
            "(detach() first, or differentiate a copy)")
    for first, second in zip(*outs):
        assert torch.equal(first, second), "a second call with the same inputs must return the same values"


def test_the_oracle_is_not_called(lesson, monkeypatch):
    bp = lesson.load("beta_policy.py")

    def refuse(*args, **kwargs):
        raise AssertionError("beta_policy.py must not use torch.distributions (it is the tests' oracle): "
                             "write the density from lgamma and the entropy from digamma")

    for cls in (torch.distributions.Beta, torch.distributions.Dirichlet, torch.distributions.Gamma):
        monkeypatch.setattr(cls, "__init__", refuse)
    ar, br = _raw_params(4, 2, 19)
    low, high = _bounds(F64, [-1.0, 0.0], [1.0, 3.0])
    bp.log_prob(ar, br, _unit_points(4, 2, 19, F64), low, high)
    bp.entropy(ar, br, low, high)
    bp.mean_action(ar, br, low, high)
    bp.sample(ar, br, low, high, torch.Generator().manual_seed(0))
    bp.reinforce_gradient(ar[0], br[0], low, high, lambda act: -act.sum(-1), 16, torch.Generator().manual_seed(0))


@pytest.mark.requires("gymnasium")
def test_pendulum_actions_are_inside_the_action_space(lesson):
    import gymnasium as gym

    bp = lesson.load("beta_policy.py")
    env = gym.make("Pendulum-v1")
    space = env.action_space
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    ar, br = _rows([(1000.0, 1.0), (1.0, 1000.0), (1.0, 1.0), (2.0, 5.0)], 2000, 1, F32)
    action, _ = bp.sample(ar, br, low, high, torch.Generator().manual_seed(0))
    acts = action.numpy()
    assert all(space.contains(a) for a in acts), "every Beta action must be inside Pendulum-v1's Box(-2, 2)"
    env.reset(seed=0)
    for a in acts[::997]:
        env.step(a)
    env.close()


# ---- the measurement: Beta is unbiased at the bound, the clipped Gaussian is not ----------------------------------
def _phi(z):
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _Phi(z):
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2)))


def clipped_gaussian_exact(mu, sigma, low, high, target):
    """Exact numbers for a = clip(u, low, high), u ~ N(mu, sigma^2), reward -(a - target)^2:
    E[a] and dJ/dmu of J = E[reward] (only the unclipped part of the line moves with mu)."""
    zl, zh = (low - mu) / sigma, (high - mu) / sigma
    inside = _Phi(zh) - _Phi(zl)
    e_a = low * _Phi(zl) + high * (1 - _Phi(zh)) + mu * inside + sigma * (_phi(zl) - _phi(zh))
    e_u_minus_t_inside = (mu - target) * inside + sigma * (_phi(zl) - _phi(zh))
    return e_a, -2.0 * e_u_minus_t_inside


@pytest.mark.points(2)
def test_beta_gradient_is_unbiased_where_the_clipped_gaussian_is_biased(lesson):
    bp = lesson.load("beta_policy.py")
    n = 200_000
    # 3-dim bandit, reward -sum_d (a_d - target_d)^2: dims 0 and 2 have their target beyond a bound (the best
    # action is ON the bound), dim 1 inside
    low = torch.tensor([-1.0, 0.0, -2.0], dtype=F64)
    high = torch.tensor([1.0, 0.5, 3.0], dtype=F64)
    target = torch.tensor([1.5, 0.45, -2.5], dtype=F64)
    conc_a = torch.tensor([4.0, 2.0, 1.2], dtype=F64)
    conc_b = torch.tensor([1.5, 5.0, 1.2], dtype=F64)
    ar, br = inv_softplus_plus_one(conc_a), inv_softplus_plus_one(conc_b)

    def reward(action):
        return -((action - target) ** 2).sum(-1)

    # exact gradient of J = -sum_d [Var a_d + (E a_d - target_d)^2] from the Beta moments
    ra, rb = ar.clone().requires_grad_(True), br.clone().requires_grad_(True)
    a, b = F.softplus(ra) + 1, F.softplus(rb) + 1
    m, width = a / (a + b), high - low
    var = width ** 2 * m * (1 - m) / (a + b + 1)
    exact_a, exact_b = torch.autograd.grad(-(var + (low + m * width - target) ** 2).sum(), (ra, rb))
    # per-sample scores from torch's Beta on the test's own draws: the standard error of a correct estimator
    with torch.no_grad():
        gen = torch.Generator().manual_seed(101)
        ga, gb = torch._standard_gamma(a.expand(n, 3), generator=gen), torch._standard_gamma(b.expand(n, 3), generator=gen)
        xs = ga / (ga + gb)
        r = reward(low + xs * width)[:, None]
        psi_s = torch.digamma(a + b)
        per_a = r * torch.sigmoid(ar) * (torch.log(xs) - torch.digamma(a) + psi_s)
        per_b = r * torch.sigmoid(br) * (torch.log1p(-xs) - torch.digamma(b) + psi_s)
        se_a, se_b = per_a.std(0) / math.sqrt(n), per_b.std(0) / math.sqrt(n)
    got_a, got_b = bp.reinforce_gradient(ar, br, low, high, reward, n, torch.Generator().manual_seed(5))
    again_a, _ = bp.reinforce_gradient(ar, br, low, high, reward, n, torch.Generator().manual_seed(5))
    assert torch.equal(got_a, again_a), "the same generator seed must give the same estimate"
    assert got_a.shape == (3,) and got_b.shape == (3,), "one gradient entry per action dimension"
    # unbiased: within 5 standard errors of the exact gradient in every component
    assert bool(((got_a - exact_a).abs() <= 5 * se_a).all()), (
        f"d/d alpha_raw: estimate {got_a.tolist()}, exact {exact_a.tolist()} (5 SE = {(5 * se_a).tolist()})")
    assert bool(((got_b - exact_b).abs() <= 5 * se_b).all()), (
        f"d/d beta_raw: estimate {got_b.tolist()}, exact {exact_b.tolist()} (5 SE = {(5 * se_b).tolist()})")
    # the deterministic evaluation action is the mean of what the env executes
    action, _ = bp.sample(ar.expand(n, 3), br.expand(n, 3), low, high, torch.Generator().manual_seed(6))
    mean_act = bp.mean_action(ar[None], br[None], low, high)[0]
    assert bool(((action.mean(0) - mean_act).abs() <= 5 * action.std(0) / math.sqrt(n)).all()), (
        f"mean_action {mean_act.tolist()} vs the mean executed action {action.mean(0).tolist()}")

    # The clipped Gaussian on dim 0 (bounds [-1, 1], target 1.5), mu = 1.2, sigma = 0.5: what SB3 / CleanRL run.
    mu, sigma, lo, hi, tgt = 1.2, 0.5, -1.0, 1.0, 1.5
    e_a, exact_mu = clipped_gaussian_exact(mu, sigma, lo, hi, tgt)
    u = mu + sigma * torch.randn(n, generator=torch.Generator().manual_seed(7), dtype=F64)
    a_env = u.clamp(lo, hi)
    r_env = -(a_env - tgt) ** 2
    g_unclipped = r_env * (u - mu) / sigma**2  # score of the sample the policy drew (SB3, CleanRL)
    g_clipped = r_env * (a_env - mu) / sigma**2  # score of the action the env saw (the buffer stores clip(u))
    se, se_c = g_unclipped.std().item() / math.sqrt(n), g_clipped.std().item() / math.sqrt(n)
    # E[g_clipped] exactly: the interior by quadrature plus the two atoms, r(bound) (bound - mu) P(bound)
    grid = torch.linspace(lo, hi, 200_001, dtype=F64)
    dens = torch.exp(-0.5 * ((grid - mu) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    interior = torch.trapezoid(-((grid - tgt) ** 2) * (grid - mu) * dens, grid).item()
    atoms = -((hi - tgt) ** 2) * (hi - mu) * (1 - _Phi((hi - mu) / sigma)) - (lo - tgt) ** 2 * (lo - mu) * _Phi((lo - mu) / sigma)
    clipped_mean = (interior + atoms) / sigma**2
    # evaluation action clip(mu) = 1.0 but the executed actions average 0.885: 0.115 short of the bound
    assert abs(e_a - 0.8848) < 1e-3 and abs(a_env.mean().item() - e_a) < 5 * a_env.std().item() / math.sqrt(n)
    # the score of the unclipped sample is unbiased for dJ/dmu = 0.575 (Fujita & Maeda 2018) ...
    assert abs(exact_mu - 0.5750) < 1e-3 and abs(g_unclipped.mean().item() - exact_mu) < 5 * se
    # ... the score of the clipped action is not: it averages 0.890, +55 % (more than 50 standard errors off)
    assert abs(clipped_mean - 0.8902) < 1e-3 and abs(g_clipped.mean().item() - clipped_mean) < 5 * se_c
    assert clipped_mean - exact_mu > 50 * se
