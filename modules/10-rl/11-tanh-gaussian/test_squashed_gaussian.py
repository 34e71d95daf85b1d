"""Tests for rl-11. The oracle is torch's own change of variables: TransformedDistribution(Normal(mean, std),
[TanhTransform(cache_size=1), AffineTransform(loc, scale, cache_size=1)]) evaluated on the same pre-tanh sample
(the caches hand it the exact u instead of atanh(tanh(u))), its rsample under the same seed, and autograd through
it. Independent extra references: the closed form of log(1 - tanh^2) in float64 at |u| <= 40, a hand example,
a high-sample Monte Carlo of the entropy with its standard error, and gymnasium's Pendulum-v1 action space."""

from __future__ import annotations

import io
import math
import tokenize

import numpy as np
import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

F64, F32 = torch.float64, torch.float32
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

# float64: every term is at most a few hundred nats and is rounded ~10 times (1e-16 relative), but torch's
# F.softplus returns x itself above x = 20, dropping up to 2 e^-20 = 4e-9 nats per dimension (torch's own
# TanhTransform does this for u < -10): 1e-7 over D <= 5 dims. The naive log(1 - tanh^2 + 1e-6) is off by
# 1e-6 at u = 0, by 5e-3 at |u| = 5 and by 25 nats at |u| = 20.
TOL64 = dict(rtol=1e-10, atol=1e-7)
# float32 against the float64 oracle on the same float32 inputs: terms up to ~60 nats, a few roundings of 6e-8
# each, summed over D <= 5 dims: ~5e-5 worst case. The naive form is off by 5e-3 at |u| = 5 and by 25 at |u| = 9.
TOL32 = dict(rtol=1e-5, atol=2e-4)

def assert_close(got, want, *, rtol, atol, msg=None):
    """|got - want| <= atol + rtol * |want| elementwise, compared in float64; same shape, no nan or inf where want
    is finite. (torch.testing.assert_close costs ~1 s of imports on its first call, paid again by every mutant run.)"""
    assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    g, w = got.detach().double(), want.detach().double()
    bad = ~((g - w).abs() <= atol + rtol * w.abs())
    if bad.any():
        i = tuple(int(k) for k in bad.nonzero()[0])
        text = (f"{int(bad.sum())} of {bad.numel()} elements differ; at {i}: got {g[i].item()!r}, expected {w[i].item()!r} "
                f"(|diff| {abs(g[i].item() - w[i].item()):.3g}, allowed {atol + rtol * abs(w[i].item()):.3g})")
        raise AssertionError(msg(text) if msg else text)


# per-dimension, asymmetric bounds (D = 5); -7.3..1.1 and 0.1..0.35 round past a bound in float32 if unclamped
LOW5 = [-2.0, -7.3, 0.1, -0.3, 0.0]
HIGH5 = [2.0, 1.1, 0.35, 0.7, 5.0]


def _bounds(dtype, low=LOW5, high=HIGH5):
    return torch.tensor(low, dtype=dtype), torch.tensor(high, dtype=dtype)


def ref_dist(mean, log_std, low, high, cache=1):
    """The squashed policy as torch builds it: base Normal with the clamped std, tanh, then the affine map."""
    std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
    transforms = [TanhTransform(cache_size=cache), AffineTransform((high + low) / 2, (high - low) / 2, cache_size=cache)]
    return TransformedDistribution(Normal(mean, std, validate_args=False), transforms, validate_args=False)


def ref_log_prob(mean, log_std, u, low, high):
    """log pi [B] of the action that u maps to, from torch's transforms with the pre-tanh value cached."""
    dist = ref_dist(mean, log_std, low, high)
    y = u
    for t in dist.transforms:
        y = t(y)
    return dist.log_prob(y).sum(-1)


def naive_log_prob(mean, log_std, u, low, high):
    """SB3 / CleanRL's form: log(1 - tanh(u)^2 + 1e-6) as the tanh term (what the test must reject)."""
    std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
    lp = Normal(mean, std).log_prob(u) - torch.log(1 - torch.tanh(u) ** 2 + 1e-6) - torch.log((high - low) / 2)
    return lp.sum(-1)


def _params(seed, B, D, dtype, saturated_rows=0):
    """mean, raw log_std and a pre-tanh u [B, D]; the last `saturated_rows` rows sit at |u| in [12, 20], with
    exact +-20 entries, and their mean near u so the Gaussian term stays moderate."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(B, D, generator=g, dtype=F64)
    log_std = -3.0 + 4.5 * torch.rand(B, D, generator=g, dtype=F64)
    eps = torch.randn(B, D, generator=g, dtype=F64)
    if saturated_rows:
        s = slice(B - saturated_rows, B)
        sign = torch.where(torch.rand(saturated_rows, D, generator=g) < 0.5, -1.0, 1.0).to(F64)
        mean[s] = sign * (13.0 + 6.0 * torch.rand(saturated_rows, D, generator=g, dtype=F64))
        log_std[s] = -1.0 + torch.rand(saturated_rows, D, generator=g, dtype=F64)
    u = mean + log_std.exp() * eps
    if saturated_rows:
        u[-1, 0], u[-1, -1] = 20.0, -20.0
        mean[-1, 0], mean[-1, -1] = 19.0, -19.5
        u[s] = u[s].clamp(-20.0, 20.0)
    return mean.to(dtype), log_std.to(dtype), u.to(dtype)


# ---- the stable log-det comes first: the fastest test that catches the naive form -------------------------
@pytest.mark.parametrize("dtype", [F64, F32], ids=["fp64", "fp32"])
def test_tanh_log_det_is_exact_where_tanh_saturates(lesson, dtype):
    sg = lesson.load("squashed_gaussian.py")
    u = torch.tensor([0.0, 0.3, -1.7, 3.0, -5.0, 7.5, -9.0, -10.5, 11.0, 12.0, -15.0, 19.0, 20.0, -20.0, 40.0, -40.0,
                      100.0, -100.0], dtype=dtype)
    u_in = u.clone()
    got = sg.tanh_log_abs_det_jacobian(u)
    assert got.shape == u.shape and got.dtype == dtype
    assert torch.equal(u, u_in), "the input was modified"
    # closed form in float64: 1 - tanh^2 = 4 e^{-2|u|} / (1 + e^{-2|u|})^2
    a = u.double().abs()
    want = math.log(4.0) - 2.0 * a - 2.0 * torch.log1p(torch.exp(-2.0 * a))
    # torch's own form (the oracle), within its softplus threshold error of 2 e^-20 per element
    assert_close(TanhTransform().log_abs_det_jacobian(u.double(), None), want, rtol=1e-14, atol=1e-8)
    naive = torch.log(1 - torch.tanh(u) ** 2 + 1e-6).double()
    assert (naive - want).abs().max() > 20.0, "the naive form should be far off at |u| = 20"
    tol = dict(rtol=1e-12, atol=1e-8) if dtype == F64 else dict(rtol=2e-7, atol=2e-6)
    assert_close(got.double(), want, **tol, msg=lambda m: "log(1 - tanh(u)^2): " + m)
    source = lesson.path("squashed_gaussian.py").read_text()
    names = {t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME}
    used = names & {"TanhTransform", "TransformedDistribution"}
    assert not used, f"squashed_gaussian.py uses {sorted(used)}: the task is to write the change of variables yourself"


def test_log_prob_hand_example(lesson):
    sg = lesson.load("squashed_gaussian.py")
    # D = 2: u = 0 is the mode of tanh's Jacobian (log 1 = 0); bounds [-1, 1] and [0, 4] (scale 1 and 2).
    mean = torch.tensor([[0.0, 1.0]], dtype=F64)
    log_std = torch.tensor([[0.0, math.log(0.5)]], dtype=F64)
    u = torch.tensor([[0.0, 2.0]], dtype=F64)
    low, high = torch.tensor([-1.0, 0.0], dtype=F64), torch.tensor([1.0, 4.0], dtype=F64)
    z = (2.0 - 1.0) / 0.5
    dim1 = -0.5 * z * z - math.log(0.5) - 0.5 * math.log(2 * math.pi) - 2 * math.log(2 / (math.exp(2) + math.exp(-2)))
    want = -0.5 * math.log(2 * math.pi) + dim1 - math.log(2.0)
    got = sg.log_prob_from_pre_tanh(mean, log_std, u, low, high)
    assert got.shape == (1,), f"log-prob shape {tuple(got.shape)}: one value per row (summed over the action dims)"
    assert abs(got.item() - want) < 1e-12, f"got {got.item()}, expected {want}"


@pytest.mark.parametrize(
    "B, D, dtype, seed",
    [(7, 5, F64, 0), (9, 5, F64, 1), (7, 5, F32, 2), (1, 5, F64, 3)],
    ids=["fp64", "fp64-b", "fp32", "one-row"],
)
def test_log_prob_matches_torch_transformed_distribution(lesson, B, D, dtype, seed):
    sg = lesson.load("squashed_gaussian.py")
    mean, log_std, u = _params(seed, B, D, dtype, saturated_rows=min(3, B))
    low, high = _bounds(dtype)
    want = ref_log_prob(*(x.double() for x in (mean, log_std, u, low, high)))
    naive = naive_log_prob(*(x.double() for x in (mean, log_std, u, low, high)))
    assert (naive - want).abs().max() > 20.0, "the inputs should separate the naive form from the exact one"
    got = sg.log_prob_from_pre_tanh(mean, log_std, u, low, high)
    assert got.shape == (B,) and got.dtype == dtype, f"shape {tuple(got.shape)} dtype {got.dtype}; expected ({B},) {dtype}"
    assert torch.isfinite(got).all(), f"non-finite log-prob: {got}"
    assert_close(got.double(), want, **(TOL64 if dtype == F64 else TOL32))


def test_log_prob_is_a_sum_over_action_dims(lesson):
    sg = lesson.load("squashed_gaussian.py")
    mean, log_std, u = _params(4, 6, 3, F64)
    low, high = _bounds(F64, [-1.0, -2.0, 0.0], [1.0, 2.0, 0.5])
    whole = sg.log_prob_from_pre_tanh(mean, log_std, u, low, high)
    parts = sum(
        sg.log_prob_from_pre_tanh(mean[:, d : d + 1], log_std[:, d : d + 1], u[:, d : d + 1], low[d : d + 1], high[d : d + 1])
        for d in range(3)
    )
    assert_close(whole, parts, **TOL64, msg=lambda m: "log pi of [B, 3] != sum of the three 1-D log pi: " + m)


def test_log_std_is_clamped_to_the_stated_range(lesson):
    sg = lesson.load("squashed_gaussian.py")
    raw = torch.tensor([[3.7, -25.0, 2.0, -20.0, 0.4], [2.5, -31.0, 1.9, -19.0, -3.0]], dtype=F64)
    assert_close(sg.clamp_log_std(raw), raw.clamp(LOG_STD_MIN, LOG_STD_MAX), rtol=0, atol=0)
    mean = torch.tensor([[0.3, 0.0, -0.4, 0.0, 1.0], [-2.0, 0.0, 0.5, 0.0, 0.2]], dtype=F64)
    std = raw.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
    u = mean + std * torch.tensor([[0.7, -1.2, 1.5, 0.3, -0.6], [1.1, 0.9, -0.2, -1.7, 0.4]], dtype=F64)
    low, high = _bounds(F64)
    leaf_mean, leaf_ls = mean.clone().requires_grad_(), raw.clone().requires_grad_()
    got = sg.log_prob_from_pre_tanh(leaf_mean, leaf_ls, u, low, high)
    ref_mean, ref_ls = mean.clone().requires_grad_(), raw.clone().requires_grad_()
    want = ref_log_prob(ref_mean, ref_ls, u, low, high)
    assert_close(got, want, **TOL64)
    got.sum().backward()
    want.sum().backward()
    assert leaf_ls.grad is not None, "log pi must be differentiable in log_std"
    assert_close(leaf_ls.grad, ref_ls.grad, rtol=1e-9, atol=1e-9,
                               msg=lambda m: "d log pi / d raw log_std (0 outside the clamp range): " + m)
    assert_close(leaf_mean.grad, ref_mean.grad, rtol=1e-9, atol=1e-9)


def test_squash_to_bounds_maps_ends_to_bounds_and_never_leaves_them(lesson):
    sg = lesson.load("squashed_gaussian.py")
    for dtype in (F64, F32):
        low, high = _bounds(dtype)
        below_one = 1.0 - torch.finfo(dtype).eps / 2
        a = torch.tensor([[-1.0] * 5, [1.0] * 5, [0.0] * 5, [below_one] * 5, [-below_one] * 5,
                          [0.5, -0.25, 0.9, -0.75, 0.1]], dtype=dtype)
        a_in = a.clone()
        got = sg.squash_to_bounds(a, low, high)
        assert got.shape == a.shape and got.dtype == dtype
        assert torch.equal(a, a_in), "the input was modified"
        assert (got >= low).all() and (got <= high).all(), f"{dtype}: an action left [low, high]: {got}"
        want = low.double() + (a.double() + 1) / 2 * (high.double() - low.double())
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == F64 else dict(rtol=1e-6, atol=1e-6)
        assert_close(got.double(), want, **tol)


@pytest.mark.parametrize("dtype", [F64, F32], ids=["fp64", "fp32"])
def test_sample_matches_reference_rsample_under_the_same_seed(lesson, dtype):
    sg = lesson.load("squashed_gaussian.py")
    mean, log_std, _ = _params(5, 7, 5, dtype, saturated_rows=2)
    log_std[0, :2] = torch.tensor([3.5, -24.0], dtype=dtype)  # outside the clamp range
    mean[0, 1] = 0.0
    low, high = _bounds(dtype)
    inputs = [x.clone() for x in (mean, log_std, low, high)]
    action, u, lp = sg.sample(mean, log_std, low, high, torch.Generator().manual_seed(11))
    with torch.random.fork_rng():
        torch.manual_seed(11)  # Normal.rsample draws eps = randn(shape) from the global generator
        dist = ref_dist(mean, log_std, low, high)
        y = dist.rsample()
        want_lp = dist.log_prob(y).sum(-1)
    want_u = dist.transforms[0].inv(dist.transforms[1].inv(y))  # the cached pre-tanh value
    assert all(torch.equal(x, x0) for x, x0 in zip((mean, log_std, low, high), inputs)), "an input was modified"
    assert action.shape == mean.shape and u.shape == mean.shape and lp.shape == (7,)
    assert action.dtype == dtype and u.dtype == dtype and lp.dtype == dtype
    assert_close(u, want_u, rtol=1e-12 if dtype == F64 else 1e-6, atol=1e-12 if dtype == F64 else 1e-6,
                               msg=lambda m: "u = mean + exp(clamped log_std) * randn(mean.shape, generator): " + m)
    assert_close(action, y, rtol=1e-12 if dtype == F64 else 1e-6, atol=1e-12 if dtype == F64 else 1e-6)
    assert (action >= low).all() and (action <= high).all()
    assert_close(lp.double(), want_lp.double(), **(TOL64 if dtype == F64 else TOL32))


def test_sample_gradients_match_autograd_through_reference_rsample(lesson):
    sg = lesson.load("squashed_gaussian.py")
    mean0, log_std0, _ = _params(6, 5, 3, F64, saturated_rows=1)
    log_std0[0, 0], log_std0[1, 2] = 2.6, -21.0  # clamped: no gradient reaches these raw entries
    low, high = _bounds(F64, [-2.0, 0.0, -0.3], [2.0, 5.0, 0.7])
    g = torch.Generator().manual_seed(9)
    w_a = torch.randn(5, 3, generator=g, dtype=F64)
    w_lp = torch.randn(5, generator=g, dtype=F64)

    mean, log_std = mean0.clone().requires_grad_(), log_std0.clone().requires_grad_()
    action, _, lp = sg.sample(mean, log_std, low, high, torch.Generator().manual_seed(21))
    assert action.requires_grad and lp.requires_grad, "action and log pi must carry gradients (reparameterisation)"
    ((w_a * action).sum() + (w_lp * lp).sum()).backward()

    rm, rl = mean0.clone().requires_grad_(), log_std0.clone().requires_grad_()
    with torch.random.fork_rng():
        torch.manual_seed(21)
        dist = ref_dist(rm, rl, low, high)
        y = dist.rsample()
        ((w_a * y).sum() + (w_lp * dist.log_prob(y).sum(-1)).sum()).backward()
    for name, got, want in (("mean", mean.grad, rm.grad), ("log_std", log_std.grad, rl.grad)):
        assert got is not None, f"no gradient reached {name}"
        assert want.abs().max() > 1e-3
        # 1e-6: the row with sigma = e^-20 amplifies float64 rounding of u - mean by 1/sigma (~5e-8 seen); bugs are O(1)
        assert_close(got, want, rtol=1e-6, atol=1e-6, msg=lambda m, n=name: f"d loss / d {n}: " + m)


def test_sample_draws_only_from_the_generator_and_keeps_no_state(lesson):
    sg = lesson.load("squashed_gaussian.py")
    mean, log_std, _ = _params(7, 4, 3, F64)
    low, high = _bounds(F64, [-1.0, 0.0, -3.0], [1.0, 0.5, 2.0])
    torch.manual_seed(1)
    first = sg.sample(mean, log_std, low, high, torch.Generator().manual_seed(5))
    torch.manual_seed(2)
    g = torch.Generator().manual_seed(5)
    again = sg.sample(mean, log_std, low, high, g)
    for x, y in zip(first, again):
        assert torch.equal(x, y), "same generator seed, other global seed: results differ (noise not from `generator`?)"
    after = sg.sample(mean, log_std, low, high, g)
    assert not torch.equal(after[1], again[1]), "a second call on the advanced generator repeated the same noise"
    ref_g = torch.Generator().manual_seed(5)
    torch.randn(mean.shape, generator=ref_g, dtype=F64)
    want = torch.randn(mean.shape, generator=ref_g, dtype=F64)
    assert_close(after[1], mean + log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp() * want, rtol=1e-12, atol=1e-12,
                               msg=lambda m: "the second call should use the next randn(mean.shape) draw: " + m)


def test_saturated_samples_stay_inside_bounds_with_finite_log_prob(lesson):
    sg = lesson.load("squashed_gaussian.py")
    B, D = 64, 5
    g = torch.Generator().manual_seed(13)
    mean = (30.0 * torch.randn(B, D, generator=g)).to(F32)
    log_std = torch.full((B, D), 1.9, dtype=F32)
    low, high = _bounds(F32)
    action, u, lp = sg.sample(mean, log_std, low, high, torch.Generator().manual_seed(3))
    assert (u.abs() > 20).any(), "the draw should saturate tanh"
    assert (action >= low).all() and (action <= high).all(), "float32: an action rounded past its bound"
    assert ((action == low) | (action == high)).any()
    assert torch.isfinite(lp).all(), "log pi must stay finite when tanh(u) rounds to +-1"
    want = ref_log_prob(mean.double(), log_std.double(), u.double(), low.double(), high.double())
    assert_close(lp.double(), want, rtol=1e-5, atol=1e-3)


def test_log_prob_of_action_inverts_the_squash(lesson):
    sg = lesson.load("squashed_gaussian.py")
    g = torch.Generator().manual_seed(17)
    B, D = 8, 5
    mean = 0.8 * torch.randn(B, D, generator=g, dtype=F64)
    log_std = -1.0 + torch.rand(B, D, generator=g, dtype=F64)
    low, high = _bounds(F64)
    u = (mean + log_std.exp() * torch.randn(B, D, generator=g, dtype=F64)).clamp(-3.5, 3.5)
    action = low + (torch.tanh(u) + 1) / 2 * (high - low)
    action_in = action.clone()
    got = sg.log_prob_of_action(mean, log_std, action, low, high)
    assert torch.equal(action, action_in), "the action was modified"
    assert got.shape == (B,) and got.dtype == F64
    # torch without the cache inverts the action itself: the same contract inside the bounds
    want = ref_dist(mean, log_std, low, high, cache=0).log_prob(action).sum(-1)
    assert_close(got, want, rtol=1e-9, atol=1e-7)
    assert_close(got, sg.log_prob_from_pre_tanh(mean, log_std, u, low, high), rtol=1e-9, atol=1e-7)


@pytest.mark.parametrize("dtype", [F64, F32], ids=["fp64", "fp32"])
def test_log_prob_of_action_on_the_bounds_clips_by_machine_eps(lesson, dtype):
    sg = lesson.load("squashed_gaussian.py")
    low, high = _bounds(dtype, [-2.0, -7.3, 0.1], [2.0, 1.1, 0.35])
    action = torch.stack([low, high, torch.stack([low[0], high[1], low[2]])]).to(dtype)
    mean = torch.tensor([[-1.0, 0.5, -2.0], [2.0, 1.0, 3.0], [0.0, 0.0, 0.0]], dtype=dtype)
    log_std = torch.zeros(3, 3, dtype=dtype)
    got = sg.log_prob_of_action(mean, log_std, action, low, high)
    assert torch.isfinite(got).all(), f"an action on a bound gives {got}: clamp y before atanh"
    assert not torch.isfinite(ref_dist(mean, log_std, low, high, cache=0).log_prob(action).sum(-1)).all()
    # y clamped to +-(1 - e): u = +-atanh(1 - e); allow y to have landed up to 4 e inside (rounding of the inverse map).
    e = torch.finfo(dtype).eps
    sign = torch.where(action == high, 1.0, -1.0).double()
    ends = [ref_log_prob(mean.double(), log_std.double(), sign * math.atanh(1 - k * e), low.double(), high.double())
            for k in (1, 4)]
    lo_, hi_ = torch.minimum(*ends), torch.maximum(*ends)
    g64 = got.double()
    assert ((g64 >= lo_ - 1e-3) & (g64 <= hi_ + 1e-3)).all(), f"got {g64}, expected in [{lo_}, {hi_}] (u = +-atanh(1 - eps))"


def test_inputs_are_left_unchanged_and_outputs_are_new(lesson):
    sg = lesson.load("squashed_gaussian.py")
    mean, log_std, u = _params(8, 3, 5, F64)
    log_std[0, 0], log_std[1, 1] = 4.0, -30.0
    low, high = _bounds(F64)
    saved = [x.clone() for x in (mean, log_std, u, low, high)]
    sg.clamp_log_std(log_std)
    sg.log_prob_from_pre_tanh(mean, log_std, u, low, high)
    action, u2, _ = sg.sample(mean, log_std, low, high, torch.Generator().manual_seed(0))
    sg.log_prob_of_action(mean, log_std, action, low, high)
    sg.entropy_estimate(mean, log_std, low, high, 16, torch.Generator().manual_seed(0))
    for name, x, x0 in zip(("mean", "log_std", "u", "low", "high"), (mean, log_std, u, low, high), saved):
        assert torch.equal(x, x0), f"{name} was modified in place"
    assert sg.clamp_log_std(log_std).data_ptr() != log_std.data_ptr(), "clamp_log_std must return a new tensor"


@pytest.mark.parametrize("n, k", [(1, 8.0), (2, 8.0), (16, 5.0)], ids=["n1", "n2", "n16"])
def test_entropy_estimate_is_unbiased_for_few_samples(lesson, n, k):
    """With sigma = e^-20 the squashed policy is a point mass up to 2e-9 in u, so its entropy is known exactly:
    H = sum_d (1/2 + 1/2 log 2 pi + log sigma_d) + sum_d log(1 - tanh^2 mean_d) + sum_d log scale_d. The estimator's
    only noise is sum_d (eps_d^2 - 1) / 2 averaged over n draws: standard error sqrt(0.5 D / n). A large-n test
    cannot see a bias of order |H| / n (dividing by n - 1, say); here |H| is 55 to 75 nats, so that bias is 3.7 to
    4.8 nats at n = 16 (5 SE = 1.5), |H| at n = 2 (8 SE = 6.9) and inf at n = 1."""
    sg = lesson.load("squashed_gaussian.py")
    mean = torch.tensor([[0.3, -0.5, 1.0], [4.0, -6.0, 0.5]], dtype=F64)
    log_std = torch.tensor([[-20.0, -20.0, -20.0], [-20.0, -26.0, -20.0]], dtype=F64)  # -26 is clamped to -20
    low, high = _bounds(F64, [-2.0, 0.0, -0.3], [2.0, 5.0, 0.7])
    a = mean.abs()
    log_det = math.log(4.0) - 2.0 * a - 2.0 * torch.log1p(torch.exp(-2.0 * a))
    want = (0.5 + 0.5 * math.log(2 * math.pi) + log_std.clamp(LOG_STD_MIN, LOG_STD_MAX) + log_det
            + torch.log((high - low) / 2)).sum(-1)
    got = sg.entropy_estimate(mean, log_std, low, high, n, torch.Generator().manual_seed(31))
    assert got.shape == (2,) and got.dtype == F64, f"shape {tuple(got.shape)} dtype {got.dtype}; expected (2,) float64"
    assert torch.isfinite(got).all(), f"n_samples = {n}: non-finite entropy estimate {got}"
    allowed = k * math.sqrt(0.5 * 3 / n)
    assert ((got - want).abs() < allowed).all(), (
        f"n_samples = {n}: entropy estimate {got.tolist()}, exact {want.tolist()} (allowed {allowed:.2f}): "
        "-E[log pi] is estimated by the plain average of -log pi over the n draws")


def _ref_entropy(mean, log_std, low, high, n, seed):
    """-mean log pi over n reference draws per row, with its standard error and the std of log pi."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        dist = ref_dist(mean, log_std, low, high)
        y = dist.rsample((n,))
        lp = dist.log_prob(y).sum(-1)
    return -lp.mean(0), lp.std(0)


def test_entropy_estimate_matches_high_sample_monte_carlo(lesson):
    sg = lesson.load("squashed_gaussian.py")
    mean = torch.tensor([[0.3, -0.5, 1.0], [0.0, 2.0, -1.5], [0.0, 0.0, 0.0], [4.0, -6.0, 0.5]], dtype=F64)
    log_std = torch.tensor([[-0.7, 0.0, -1.5], [1.5, 0.8, 2.6], [-25.0, 0.5, 1.0], [-2.0, 0.3, 0.0]], dtype=F64)
    low, high = _bounds(F64, [-2.0, 0.0, -0.3], [2.0, 5.0, 0.7])
    n = 8192
    got = sg.entropy_estimate(mean, log_std, low, high, n, torch.Generator().manual_seed(4))
    assert got.shape == (4,) and got.dtype == F64
    want, spread = _ref_entropy(mean, log_std, low, high, 100_000, seed=123)
    se = spread * math.sqrt(1.0 / n + 1.0 / 100_000)
    # the unsquashed Gaussian's entropy (+ log scale) is what a missing Jacobian gives: it must sit far outside
    gauss = (0.5 + 0.5 * math.log(2 * math.pi) + log_std.clamp(LOG_STD_MIN, LOG_STD_MAX) + torch.log((high - low) / 2)).sum(-1)
    assert ((gauss - want).abs() > 20 * se).all()
    again = sg.entropy_estimate(mean, log_std, low, high, n, torch.Generator().manual_seed(4))
    assert torch.equal(got, again), "same generator seed, different entropy estimate"
    z = ((got - want) / se).abs()
    assert (z < 5.0).all(), f"entropy estimate {got} vs Monte Carlo {want} (standard errors off: {z})"


# ---- a real action space last ---------------------------------------------------------------------------
@pytest.mark.requires("gymnasium")
def test_pendulum_actions_are_inside_the_action_space(lesson):
    import gymnasium as gym

    sg = lesson.load("squashed_gaussian.py")
    env = gym.make("Pendulum-v1")
    space = env.action_space
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    mean = torch.tensor([[-40.0], [-3.0], [-0.2], [0.0], [0.7], [3.0], [40.0], [12.0]], dtype=F32)
    log_std = torch.tensor([[0.0], [0.5], [-1.0], [2.0], [-3.0], [1.0], [0.0], [-30.0]], dtype=F32)
    action, u, lp = sg.sample(mean, log_std, low, high, torch.Generator().manual_seed(0))
    assert torch.isfinite(lp).all()
    obs, _ = env.reset(seed=0)
    for row in action.numpy():
        assert space.contains(row), f"{row} is outside {space}"
        obs, reward, terminated, truncated, _ = env.step(row)
        assert np.isfinite(reward)
    env.close()
    box = gym.spaces.Box(low=np.array(LOW5, np.float32), high=np.array(HIGH5, np.float32), dtype=np.float32)
    g = torch.Generator().manual_seed(1)
    mean = 25.0 * torch.randn(256, 5, generator=g)
    action, _, _ = sg.sample(mean, torch.full((256, 5), 1.5), torch.as_tensor(box.low), torch.as_tensor(box.high), g)
    outside = [row for row in action.numpy() if not box.contains(row)]
    assert not outside, f"{len(outside)} of 256 saturated actions are outside {box}, e.g. {outside[0]}"
