"""Tests for rl-07. Independent references: slow float64 loops written out here, exact expectations over the
tiny LM's vocabulary, and the field's code as oracle (verl 0.9.1: `core_algos.kl_penalty`,
`compute_gae_advantage_return`, `agg_loss`, `utils.torch_functional.logprobs_from_logits`, and
`ray_trainer.apply_kl_penalty` run from its own source). Fast tests come first; verl's import (~4 s) last."""

import ast
import importlib.util
import math
import pathlib

import numpy as np
import pytest
import torch

KINDS = ("k1", "k2", "k3")
VERL_NAME = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}


def _mask(lengths, width):
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()


def _k_ref(a: float, b: float, kind: str) -> float:
    """KL estimators in float64 for one sampled token: a = log π(y), b = log π_ref(y); k3 clamped as the README says."""
    if kind == "k1":
        return a - b
    if kind == "k2":
        return 0.5 * (a - b) ** 2
    x = min(max(b - a, -20.0), 20.0)
    return min(math.exp(x) - x - 1.0, 10.0)


def _logprob_pair(g, shape, dtype, spread=2.0):
    """log π and log π_ref of sampled tokens: log-probs in [-4, 0), differences of up to ±spread."""
    lp = -4 * torch.rand(shape, generator=g, dtype=torch.float64)
    ref = lp + spread * (2 * torch.rand(shape, generator=g, dtype=torch.float64) - 1)
    return lp.to(dtype), ref.to(dtype)


def _gae_ref(rewards, values, lengths, gamma, lam):
    """Plain GAE per row on the valid prefix in float64; the episode ends after the last valid token."""
    r, v = rewards.double().numpy(), values.double().numpy()
    adv, ret = np.zeros_like(r), np.zeros_like(r)
    for b, n in enumerate(lengths):
        running, next_v = 0.0, 0.0
        for t in reversed(range(n)):
            running = r[b, t] + gamma * next_v - v[b, t] + gamma * lam * running
            next_v = v[b, t]
            adv[b, t], ret[b, t] = running, running + v[b, t]
    return torch.from_numpy(adv), torch.from_numpy(ret)


# ---------------------------------------------------------------- KL estimators


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)], ids=["fp64", "fp32"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (0, 5)])
def test_kl_estimators_match_closed_forms(lesson, dtype, tol, shape):
    rl = lesson.load("rlhf.py")
    g = torch.Generator().manual_seed(sum(shape) + 3)
    lp, ref = _logprob_pair(g, shape, dtype)
    keep = (lp.clone(), ref.clone())
    for kind in KINDS:
        want = torch.tensor([_k_ref(a, b, kind) for a, b in zip(lp.double().flatten().tolist(),
                                                                ref.double().flatten().tolist())],
                            dtype=torch.float64).reshape(shape)
        for name in (kind, VERL_NAME[kind]):
            got = rl.kl_estimate(lp, ref, name)
            assert got.shape == lp.shape and got.dtype == dtype, f"{name}: shape {tuple(got.shape)}, dtype {got.dtype}"
            # elementwise ops only: fp64 agrees to rounding, fp32 to a few ulps of values below ~5
            torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol, msg=f"kl_estimate(kind={name!r})")
    assert torch.equal(lp, keep[0]) and torch.equal(ref, keep[1]), "kl_estimate changed its inputs"
    for bad in ("k4", "full", "abs"):
        with pytest.raises(ValueError):
            rl.kl_estimate(lp, ref, bad)


def test_k3_is_clamped_like_verl(lesson):
    """Log-ratios far outside what a sampled token gives in practice: the clamp of the README decides."""
    rl = lesson.load("rlhf.py")
    diffs = [-60.0, -25.0, -20.0, -9.0, -3.5, -2.5, 0.0, 2.0, 2.5, 3.0, 15.0, 25.0, 60.0]  # log π_ref − log π
    lp = torch.full((len(diffs),), -30.0, dtype=torch.float64)
    ref = lp + torch.tensor(diffs, dtype=torch.float64)
    want = torch.tensor([_k_ref(a, b, "k3") for a, b in zip(lp.tolist(), ref.tolist())], dtype=torch.float64)
    got = rl.kl_estimate(lp, ref, "k3")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert got.max().item() == 10.0 and got.min().item() >= 0.0
    # the contract range is |log r| <= 60: there the gradient is finite in both dtypes, and 0 where the value is clamped
    for dtype in (torch.float64, torch.float32):
        a = lp.to(dtype).requires_grad_(True)
        b = ref.to(dtype).requires_grad_(True)
        k3 = rl.kl_estimate(a, b, "k3")
        ga, gb = torch.autograd.grad(k3.sum(), (a, b))
        assert torch.isfinite(ga).all() and torch.isfinite(gb).all(), f"{dtype}: non-finite k3 gradient {ga}, {gb}"
        clamped = want >= 10.0
        assert (ga[clamped] == 0).all() and (gb[clamped] == 0).all(), f"{dtype}: k3 = 10 there, its gradient is 0"


# ---------------------------------------------------------------- log-probs of the response tokens


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)], ids=["fp64", "fp32"])
@pytest.mark.parametrize("lengths, prompt_width, vocab", [
    ([0, 1, 6, 3, 5], 4, 37),  # all padding, one token, full width (no EOS), in between
    ([1], 1, 5),               # R = 1 and a prompt of one column
    ([7, 2, 7], 3, 40),
])
def test_response_logprobs_match_a_slow_loop(lesson, dtype, tol, lengths, prompt_width, vocab):
    rl = lesson.load("rlhf.py")
    width = max(max(lengths), 1)
    b, seq = len(lengths), prompt_width + width
    g = torch.Generator().manual_seed(seq * 7 + vocab)
    # non-contiguous logits (a transposed buffer), as a model's output slice may be
    logits = (3 * torch.randn(seq, b, vocab, generator=g, dtype=torch.float64)).to(dtype).transpose(0, 1)
    # positions whose logits predict no response token: the prompt before its last column, and the last column
    logits[:, : prompt_width - 1] = float("nan")
    logits[:, -1] = float("nan")
    ids = torch.randint(0, vocab, (b, seq), generator=g)
    mask = _mask(lengths, width)
    keep = (logits.clone(), ids.clone(), mask.clone())

    got = rl.response_logprobs(logits, ids, mask)
    assert got.shape == (b, width) and got.dtype == dtype, f"got shape {tuple(got.shape)}, dtype {got.dtype}"
    want = torch.zeros(b, width, dtype=torch.float64)
    for row, n in enumerate(lengths):
        for t in range(n):
            pos = prompt_width + t  # column of response token t in input_ids
            want[row, t] = torch.log_softmax(logits[row, pos - 1].double(), -1)[ids[row, pos]]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    assert torch.equal(got[mask == 0], torch.zeros_like(got[mask == 0])), "padding must give exactly 0"
    assert torch.equal(rl.response_logprobs(logits, ids, mask), got), "a second call differs"
    for before, after in zip(keep, (logits, ids, mask)):
        assert torch.equal(before.nan_to_num(7.0), after.nan_to_num(7.0)), "response_logprobs changed an input"


@pytest.mark.parametrize("dtype, gap, rtol", [(torch.float32, 120.0, 1e-6), (torch.float64, 1000.0, 1e-12)],
                         ids=["fp32", "fp64"])
def test_response_logprobs_are_exact_for_large_logit_gaps(lesson, dtype, gap, rtol):
    """A reference model's log-prob of a token it finds unlikely can be below −100: exp of that underflows in fp32
    (below ~−104) and fp64 (below ~−745), so log(softmax(x)) gives −inf where log_softmax / gather − logsumexp are exact."""
    rl = lesson.load("rlhf.py")
    lengths, prompt_width, vocab = [3, 2], 2, 6
    width, b = max(lengths), len(lengths)
    g = torch.Generator().manual_seed(71)
    logits = torch.randn(b, prompt_width + width, vocab, generator=g, dtype=torch.float64)
    ids = torch.randint(0, vocab, (b, prompt_width + width), generator=g)
    mask = _mask(lengths, width)
    for row in range(b):
        for t in range(width):
            pos = prompt_width + t
            other = (ids[row, pos] + 1 + t) % vocab  # never the response token itself
            logits[row, pos - 1, other] += gap  # the scored token sits `gap` nats below the favourite
    logits = logits.to(dtype)
    got = rl.response_logprobs(logits, ids, mask)
    assert torch.isfinite(got).all(), f"log-probs must be finite for logit gaps of {gap:g} nats: {got}"
    want = torch.zeros(b, width, dtype=torch.float64)
    for row, n in enumerate(lengths):
        for t in range(n):
            pos = prompt_width + t
            want[row, t] = torch.log_softmax(logits[row, pos - 1].double(), -1)[ids[row, pos]]
    assert (want[mask.bool()] < -gap + 10).all()
    # values near −gap: rtol of a few ulps of the dtype (fp32 ulp at 120 is ~8e-6, so 1e-6 relative is ~1.5 ulp)
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=rtol)


# ---------------------------------------------------------------- token-level rewards


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)], ids=["fp64", "fp32"])
@pytest.mark.parametrize("kind", KINDS)
def test_token_level_rewards_match_a_slow_loop(lesson, dtype, tol, kind):
    rl = lesson.load("rlhf.py")
    lengths, width = [0, 1, 7, 3, 6, 2], 7
    g = torch.Generator().manual_seed(11 + KINDS.index(kind))
    mask = _mask(lengths, width)
    lp, ref = _logprob_pair(g, (len(lengths), width), torch.float64)
    # padded positions hold garbage: nothing may read them
    lp = torch.where(mask.bool(), lp, 35 * torch.rand(lp.shape, generator=g, dtype=torch.float64) - 30).to(dtype)
    ref = torch.where(mask.bool(), ref, 35 * torch.rand(ref.shape, generator=g, dtype=torch.float64) - 30).to(dtype)
    # ... including non-finite values: the padding of a log-prob tensor may hold anything (x * mask gives NaN there)
    inf, nan = float("inf"), float("nan")
    for (row, col), a, b in [((0, 0), nan, -1.0), ((0, 3), inf, -2.0), ((0, 5), -inf, -3.0), ((1, 2), -1.0, nan),
                             ((1, 4), -2.0, -inf), ((3, 4), -inf, -inf), ((3, 6), nan, nan), ((5, 3), inf, inf),
                             ((5, 6), -0.5, inf)]:
        assert not mask[row, col]
        lp[row, col], ref[row, col] = a, b
    scores = (3 * torch.randn(len(lengths), generator=g, dtype=torch.float64)).to(dtype)
    for beta in (0.07, 0.0, 1.3):
        keep = (lp.clone(), ref.clone(), mask.clone(), scores.clone())
        got = rl.token_level_rewards(scores, lp, ref, mask, beta, kind)
        assert got.shape == mask.shape and got.dtype == dtype, f"got shape {tuple(got.shape)}, dtype {got.dtype}"
        want = torch.zeros(mask.shape, dtype=torch.float64)
        for row, n in enumerate(lengths):
            for t in range(n):
                want[row, t] = -beta * _k_ref(lp[row, t].item(), ref[row, t].item(), kind)
            if n:
                want[row, n - 1] += scores[row].item()  # the sequence score, on the last valid token only
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol, msg=f"beta={beta}")
        assert torch.equal(got[mask == 0], torch.zeros_like(got[mask == 0])), "padding must get reward exactly 0"
        assert torch.equal(rl.token_level_rewards(scores, lp, ref, mask, beta, kind), got), "a second call differs"
        for before, after in zip(keep, (lp, ref, mask, scores)):
            torch.testing.assert_close(after, before, rtol=0, atol=0, equal_nan=True,
                                       msg="token_level_rewards changed an input")


# ---------------------------------------------------------------- GAE over the response tokens


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0), (1.0, 0.5)])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)], ids=["fp64", "fp32"])
def test_gae_matches_a_slow_loop(lesson, gamma, lam, dtype, tol):
    rl = lesson.load("rlhf.py")
    lengths, width = [0, 1, 9, 4, 8, 2], 9
    g = torch.Generator().manual_seed(int(100 * gamma + 10 * lam))
    mask = _mask(lengths, width)
    rewards = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    values = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    # garbage where the mask is 0: the critic's outputs on padding and a reward there must both be ignored
    rewards = torch.where(mask.bool(), rewards, 50.0 + torch.rand(mask.shape, generator=g, dtype=torch.float64)).to(dtype)
    values = torch.where(mask.bool(), values, -80.0 - torch.rand(mask.shape, generator=g, dtype=torch.float64)).to(dtype)
    keep = (rewards.clone(), values.clone(), mask.clone())
    adv, ret = rl.gae_advantages(rewards, values, mask, gamma, lam)
    for name, t in (("advantages", adv), ("returns", ret)):
        assert t.shape == mask.shape and t.dtype == dtype, f"{name}: shape {tuple(t.shape)}, dtype {t.dtype}"
        assert torch.equal(t[mask == 0], torch.zeros_like(t[mask == 0])), f"{name} must be exactly 0 on padding"
    want_adv, want_ret = _gae_ref(rewards, values, lengths, gamma, lam)
    # up to 9 chained multiply-adds: fp64 to ~1e-14, fp32 to ~1e-6 of values of order 1-10
    torch.testing.assert_close(adv.double(), want_adv, rtol=tol, atol=tol, msg="advantages")
    torch.testing.assert_close(ret.double(), want_ret, rtol=tol, atol=tol, msg="returns")
    for before, after in zip(keep, (rewards, values, mask)):
        assert torch.equal(before, after), "gae_advantages changed an input"
    # a second call with other rewards: new results in new storage, the first call's results untouched
    first = (adv.clone(), ret.clone())
    rewards_b = (rewards.double() + torch.where(mask.bool(), 1.5, 0.0)).to(dtype)
    adv_b, ret_b = rl.gae_advantages(rewards_b, values, mask, gamma, lam)
    assert adv_b.data_ptr() != adv.data_ptr() and ret_b.data_ptr() != ret.data_ptr(), "results reuse a buffer"
    assert torch.equal(adv, first[0]) and torch.equal(ret, first[1]), "a later call changed an earlier result"
    want_adv_b, want_ret_b = _gae_ref(rewards_b, values, lengths, gamma, lam)
    torch.testing.assert_close(adv_b.double(), want_adv_b, rtol=tol, atol=tol, msg="advantages, second call")
    torch.testing.assert_close(ret_b.double(), want_ret_b, rtol=tol, atol=tol, msg="returns, second call")
    adv2, ret2 = rl.gae_advantages(rewards, values, mask, gamma, lam)
    assert torch.equal(adv2, adv) and torch.equal(ret2, ret), "a third call with the first inputs differs"


# ---------------------------------------------------------------- KL in the loss vs KL in the reward


@pytest.mark.parametrize("kind", KINDS)
def test_kl_loss_is_the_token_mean_with_its_gradient(lesson, kind):
    rl = lesson.load("rlhf.py")
    lengths, width = [5, 1, 0, 3], 5  # rows of different lengths: a per-sequence mean would weigh them differently
    g = torch.Generator().manual_seed(21)
    mask = _mask(lengths, width)
    lp, ref = _logprob_pair(g, mask.shape, torch.float64, spread=1.5)
    lp = torch.where(mask.bool(), lp, 9.0).requires_grad_(True)  # garbage on padding
    keep = (lp.detach().clone(), ref.clone(), mask.clone())
    loss = rl.kl_loss(lp, ref, mask, kind)
    assert loss.dim() == 0, "kl_loss returns a scalar"
    for before, after in zip(keep, (lp.detach(), ref, mask)):
        assert torch.equal(before, after), "kl_loss changed an input"
    n = sum(lengths)
    d = (lp - ref).detach()
    per_token = {"k1": d, "k2": 0.5 * d**2, "k3": torch.exp(-d) + d - 1}[kind]
    # rtol 1e-7: a denominator with an eps such as 1e-8 (verl's masked_mean style) is fine
    torch.testing.assert_close(loss.detach(), (per_token * mask).sum() / n, rtol=1e-7, atol=1e-12)
    (grad,) = torch.autograd.grad(loss, lp)
    # ∂/∂log π of each token's estimator, divided by the number of valid tokens in the batch
    local = {"k1": torch.ones_like(d), "k2": d, "k3": 1 - torch.exp(-d)}[kind]
    torch.testing.assert_close(grad, local * mask / n, rtol=1e-7, atol=1e-12, msg="gradient w.r.t. log π")
    assert torch.equal(rl.kl_loss(lp, ref, mask, kind).detach(), loss.detach()), "a second call differs"
    for before, after in zip(keep, (lp.detach(), ref, mask)):
        assert torch.equal(before, after), "kl_loss changed an input (second call)"


def test_kl_in_reward_reaches_earlier_tokens_kl_in_loss_stays_local(lesson):
    """Raise log π_ref of one token. KL in the loss: only that token's gradient changes. KL in the reward: the
    reward is a constant for autograd, and through GAE the change reaches that token and every earlier one,
    discounted by (γλ)^distance, and no later token or other row."""
    rl = lesson.load("rlhf.py")
    lengths, width, j, bump = [6, 4, 1], 6, 3, 0.7
    beta, gamma, lam = 0.2, 0.95, 0.9
    g = torch.Generator().manual_seed(5)
    mask = _mask(lengths, width)
    lp, ref = _logprob_pair(g, mask.shape, torch.float64, spread=1.0)
    values = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    scores = torch.randn(3, generator=g, dtype=torch.float64)
    ref2 = ref.clone()
    ref2[0, j] += bump

    lp = lp.requires_grad_(True)
    grads = [torch.autograd.grad(rl.kl_loss(lp, r, mask, "k3"), lp)[0] for r in (ref, ref2)]
    changed = (grads[1] - grads[0]).abs() > 1e-12
    assert changed.sum().item() == 1 and changed[0, j], "KL in the loss: only the bumped token's gradient moves"

    advs = []
    for r in (ref, ref2):
        rewards = rl.token_level_rewards(scores, lp, r, mask, beta, "k1")
        assert not rewards.requires_grad, "KL in the reward is data: token_level_rewards must carry no graph"
        adv, ret = rl.gae_advantages(rewards, values, mask, gamma, lam)
        assert not adv.requires_grad and not ret.requires_grad, "advantages must carry no graph"
        advs.append(adv)
    delta = advs[1] - advs[0]
    want = torch.zeros_like(delta)
    for t in range(j + 1):  # k1 at token j falls by `bump`, its reward rises by β·bump
        want[0, t] = beta * bump * (gamma * lam) ** (j - t)
    torch.testing.assert_close(delta, want, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- the tiny LM: unbiasedness, padding


def test_k1_and_k3_are_unbiased_on_the_tiny_lm(lesson):
    rl = lesson.load("rlhf.py")
    policy = rl.TinyLM(seed=3).double()
    reference = rl.make_reference(policy, noise=0.05, seed=4)
    batch = rl.make_batch(torch.Generator().manual_seed(8), [4, 2], [3, 5], 4, 5)
    with torch.no_grad():
        logp = torch.log_softmax(policy(batch["input_ids"], batch["attention_mask"])[0, 3], -1)
        logq = torch.log_softmax(reference(batch["input_ids"], batch["attention_mask"])[0, 3], -1)
    p = logp.exp()
    exact = (p * (logp - logq)).sum().item()  # KL(π‖π_ref) at the first response token
    assert 0.02 < exact < 1.0
    mean = {k: (p * rl.kl_estimate(logp, logq, k)).sum().item() for k in KINDS}
    # exact expectations over the 40-token vocabulary: k1 and k3 equal the KL, k2 does not
    assert mean["k1"] == pytest.approx(exact, rel=1e-10) and mean["k3"] == pytest.approx(exact, rel=1e-10), mean
    assert abs(mean["k2"] - exact) > 1e-3 * exact, mean

    y = torch.multinomial(p, 40000, replacement=True, generator=torch.Generator().manual_seed(9))
    samples = {k: rl.kl_estimate(logp[y], logq[y], k) for k in KINDS}
    for k in ("k1", "k3"):
        s = samples[k]
        se = s.std().item() / math.sqrt(len(s))
        assert abs(s.mean().item() - exact) < 5 * se, f"{k}: sample mean {s.mean().item():.5f} vs KL {exact:.5f}"
    assert samples["k3"].min().item() >= 0.0, "k3 is never negative"
    assert (samples["k1"] < 0).any(), "k1 is negative on tokens that π_ref favours"
    assert samples["k3"].var() < samples["k1"].var(), "k3 has the lower variance when π_ref is close to π"


# ---------------------------------------------------------------- verl as the oracle


def _verl_apply_kl_penalty():
    """verl's `apply_kl_penalty`, compiled from ray_trainer.py's own source (the module itself imports Ray, torchdata...)."""
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.utils.torch_functional import masked_mean

    path = pathlib.Path(importlib.util.find_spec("verl").origin).parent / "trainer" / "ppo" / "ray_trainer.py"
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "apply_kl_penalty")
    namespace = {"core_algos": core_algos, "masked_mean": masked_mean, "torch": torch, "DataProto": DataProto}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["apply_kl_penalty"], DataProto, core_algos.FixedKLController


@pytest.mark.requires("verl")
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)], ids=["fp64", "fp32"])
def test_kl_estimators_match_verl(lesson, dtype, tol):
    from verl.trainer.ppo.core_algos import kl_penalty

    rl = lesson.load("rlhf.py")
    g = torch.Generator().manual_seed(31)
    lp, ref = _logprob_pair(g, (6, 11), dtype, spread=30.0)  # wide enough for verl's clamps to act
    for kind in KINDS:
        for name in (kind, VERL_NAME[kind]):
            torch.testing.assert_close(rl.kl_estimate(lp, ref, name), kl_penalty(lp, ref, kl_penalty=name),
                                       rtol=tol, atol=tol, msg=f"kind={name!r}")


@pytest.mark.requires("verl")
@pytest.mark.parametrize("kind", KINDS)
def test_token_level_rewards_match_verl(lesson, kind):
    apply_kl_penalty, DataProto, FixedKLController = _verl_apply_kl_penalty()
    rl = lesson.load("rlhf.py")
    lengths, width, beta = [1, 7, 3, 6, 2, 0], 7, 0.05
    g = torch.Generator().manual_seed(41)
    mask = _mask(lengths, width)
    lp, ref = _logprob_pair(g, mask.shape, torch.float32)
    scores = torch.randn(len(lengths), generator=g)
    # verl's reward managers (workers/reward_manager/naive.py) write the score at valid_response_length - 1
    token_level_scores = torch.zeros(mask.shape)
    for row, n in enumerate(lengths):
        token_level_scores[row, n - 1] = scores[row]
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_scores": token_level_scores,
                                        "old_log_probs": lp, "ref_log_prob": ref})
    data, _ = apply_kl_penalty(data, FixedKLController(beta), kl_penalty=VERL_NAME[kind])
    want = data.batch["token_level_rewards"]
    got = rl.token_level_rewards(scores, lp, ref, mask, beta, kind)
    valid_rows = [row for row, n in enumerate(lengths) if n]
    torch.testing.assert_close(got[valid_rows], want[valid_rows], rtol=1e-6, atol=1e-6)
    # an all-padding row: verl's index n - 1 = -1 would put the score on the last padded token; the contract says 0
    assert torch.equal(got[-1], torch.zeros(width)), "an all-padding row gets no reward"


@pytest.mark.requires("verl")
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_matches_verl(lesson, gamma, lam):
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return
    from verl.utils.torch_functional import masked_whiten

    rl = lesson.load("rlhf.py")
    lengths, width = [1, 9, 4, 8, 2, 5, 9], 9
    g = torch.Generator().manual_seed(51)
    mask = _mask(lengths, width)
    rewards = torch.where(mask.bool(), torch.randn(mask.shape, generator=g, dtype=torch.float64), 40.0)
    values = torch.where(mask.bool(), torch.randn(mask.shape, generator=g, dtype=torch.float64), -70.0)
    want_adv, want_ret = compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    adv, ret = rl.gae_advantages(rewards, values, mask, gamma, lam)
    valid = mask.bool()
    torch.testing.assert_close(ret[valid], want_ret[valid], rtol=1e-10, atol=1e-10, msg="returns")
    # verl whitens its advantages over the valid tokens of the batch; ours are raw, so whiten them the same way
    torch.testing.assert_close(masked_whiten(adv, mask)[valid], want_adv[valid], rtol=1e-8, atol=1e-8,
                               msg="advantages (after verl's masked_whiten)")


@pytest.mark.requires("verl")
@pytest.mark.parametrize("kind", KINDS)
def test_kl_loss_matches_verl_token_mean(lesson, kind):
    """KL in the loss: value and gradient w.r.t. the policy's logits equal autograd through verl's own pieces."""
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
    from verl.utils.torch_functional import logprobs_from_logits

    rl = lesson.load("rlhf.py")
    lengths, width, prompt_width = [5, 1, 0, 3], 5, 3
    g = torch.Generator().manual_seed(61)
    mask = _mask(lengths, width)
    logits = (2 * torch.randn(len(lengths), prompt_width + width, 23, generator=g, dtype=torch.float64))
    ids = torch.randint(2, 23, logits.shape[:2], generator=g)
    ref = torch.where(mask.bool(), -3 * torch.rand(mask.shape, generator=g, dtype=torch.float64), 0.0)

    keep = (ref.clone(), mask.clone())
    leaf = logits.clone().requires_grad_(True)
    loss = rl.kl_loss(rl.response_logprobs(leaf, ids, mask), ref, mask, kind)
    (grad,) = torch.autograd.grad(loss, leaf)
    assert torch.equal(ref, keep[0]) and torch.equal(mask, keep[1]), "kl_loss changed an input"

    leaf_v = logits.clone().requires_grad_(True)
    lp_v = logprobs_from_logits(leaf_v[:, -width - 1:-1], ids[:, -width:])
    loss_v = agg_loss(kl_penalty(lp_v, ref, kl_penalty=VERL_NAME[kind]), mask, "token-mean")
    (grad_v,) = torch.autograd.grad(loss_v, leaf_v)
    torch.testing.assert_close(loss, loss_v, rtol=1e-7, atol=1e-12, msg="kl_loss value")
    torch.testing.assert_close(grad, grad_v, rtol=1e-7, atol=1e-12, msg="gradient w.r.t. the logits")


@pytest.mark.requires("verl")
def test_tiny_lm_pipeline_matches_verl(lesson):
    """Policy and reference forward, log-probs, k3 rewards, GAE: the learner's path against verl's, on the tiny LM."""
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return
    from verl.utils.torch_functional import log_probs_from_logits_response, masked_whiten

    apply_kl_penalty, DataProto, FixedKLController = _verl_apply_kl_penalty()
    rl = lesson.load("rlhf.py")
    policy = rl.TinyLM(seed=0)
    reference = rl.make_reference(policy, noise=0.05, seed=1)
    lengths, width = [4, 8, 1, 6, 8], 8
    batch = rl.make_batch(torch.Generator().manual_seed(2), [5, 2, 6, 1, 3], lengths, 6, width)
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(len(lengths), generator=g)
    values = torch.randn(len(lengths), width, generator=g)
    beta, gamma, lam = 0.1, 0.99, 0.95
    out = rl.rlhf_advantages(policy, reference, batch, scores, values, beta, gamma, lam, kind="k3")

    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
    with torch.no_grad():
        lp = log_probs_from_logits_response(ids, policy(ids, attn), width)
        ref = log_probs_from_logits_response(ids, reference(ids, attn), width)
    valid = mask.bool()
    torch.testing.assert_close(out["logprob"][valid], lp[valid], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["ref_logprob"][valid], ref[valid], rtol=1e-5, atol=1e-5)
    token_level_scores = torch.zeros(mask.shape)
    token_level_scores[torch.arange(len(lengths)), mask.sum(-1) - 1] = scores
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_scores": token_level_scores,
                                        "old_log_probs": lp, "ref_log_prob": ref})
    data, _ = apply_kl_penalty(data, FixedKLController(beta), kl_penalty="low_var_kl")
    rewards = data.batch["token_level_rewards"]
    torch.testing.assert_close(out["rewards"], rewards * mask, rtol=1e-5, atol=1e-5)
    adv, ret = compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(out["returns"][valid], ret[valid], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(masked_whiten(out["advantages"], mask)[valid], adv[valid], rtol=1e-4, atol=1e-4)
