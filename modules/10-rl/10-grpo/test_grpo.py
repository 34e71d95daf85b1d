"""Tests for rl-10. Oracles: verl 0.9.1's `verl.trainer.ppo.core_algos` (compute_grpo_outcome_advantage,
compute_policy_loss_vanilla, kl_penalty "k3", agg_loss) and TRL 1.16.0's `GRPOTrainer._compute_loss` lines (read
from the installed source and run on our tensors: trl itself cannot be imported here); float64 closed forms and
slow Python loops as additional references.

Order: verl-free tests first (each piece against float64 formulas and loops), then verl (import ~4 s), then TRL.
All inputs are float64 unless a test says otherwise: two correct orders of the same sums agree to ~1e-15 relative;
tolerances 1e-10 (1e-7 where verl adds its own 1e-8 to a token count, seq-mean-token-mean).
"""

import ast
import importlib.util
import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
PAD = 1.0e3  # what padding positions hold: finite (verl multiplies by the mask) but far from any real value


# ---------------------------------------------------------------------------------------------
# inputs and slow references
# ---------------------------------------------------------------------------------------------


def _batch(seed, lengths, T, dtype=torch.float64):
    """Right-padded [B, T] mask with the given response lengths (0 = a fully masked row)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return g, mask


def _groups():
    """Unsorted, non-contiguous group ids: sizes 4, 3, 1 (singleton), 5, 2, 1 (singleton); one std-0 group."""
    ids = torch.tensor([7, 3, 7, 42, 3, 7, 11, 11, 3, 11, 7, 11, 11, 5, 5, 9])
    g = torch.Generator().manual_seed(3)
    rewards = torch.randn(len(ids), generator=g, dtype=torch.float64)
    rewards[ids == 5] = 0.75  # every response of group 5 got the same reward: std 0
    rewards[ids == 3] = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)  # a 0/1 verifier group
    return rewards, ids


def _slow_advantages(rewards, ids, eps, scale):
    out = []
    for i in range(len(ids)):
        group = [float(rewards[j]) for j in range(len(ids)) if int(ids[j]) == int(ids[i])]
        mean, std = (0.0, 1.0) if len(group) == 1 else (statistics.fmean(group), statistics.stdev(group))
        a = float(rewards[i]) - mean
        out.append(a / (std + eps) if scale else a)
    return torch.tensor(out, dtype=torch.float64)


def _slow_aggregate(loss_mat, mask, mode, max_len):
    rows = [[float(loss_mat[i, t]) for t in range(mask.shape[1]) if mask[i, t]] for i in range(mask.shape[0])]
    rows = [r for r in rows if r]
    if mode == "token-mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if mode == "seq-mean-token-mean":
        return statistics.fmean(sum(r) / len(r) for r in rows)
    total = statistics.fmean(sum(r) for r in rows)
    return total if mode == "seq-mean-token-sum" else total / max_len


def _logps(seed, B, T, spread=0.35):
    """logp, old_logp, ref_logp with ratios on both sides of both clip bounds (|log-ratio| up to ~1)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3 - 0.05
    logp = old + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = old + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    return logp, old, ref, g


# ---------------------------------------------------------------------------------------------
# verl-free tests
# ---------------------------------------------------------------------------------------------


def test_k3_is_the_closed_form_and_nonnegative(lesson):
    grpo = lesson.load("grpo.py")
    logp, _, ref, _ = _logps(1, 5, 9, spread=1.0)
    got = grpo.k3_kl(logp, ref)
    d = (ref - logp).numpy()
    want = torch.tensor([[math.exp(x) - x - 1 for x in row] for row in d], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    assert (got >= 0).all(), "k3 = exp(d) - d - 1 >= 0 for every d"
    assert grpo.k3_kl(ref, ref).abs().max() == 0.0, "k3 is 0 where pi = pi_ref"


def test_group_advantages_equal_a_slow_loop(lesson):
    grpo = lesson.load("grpo.py")
    rewards, ids = _groups()
    lengths = [3, 7, 1, 11, 5, 11, 2, 9, 4, 6, 8, 10, 1, 7, 3, 11]
    _, mask = _batch(0, lengths, 11)
    keep = (rewards.clone(), ids.clone(), mask.clone())
    for scale, eps in [(True, 1e-6), (False, 1e-6), (True, 0.1)]:
        adv = grpo.group_advantages(rewards, ids, mask, eps=eps, scale_by_std=scale)
        want = _slow_advantages(rewards, ids, eps, scale).unsqueeze(-1) * mask
        assert adv.shape == mask.shape and adv.dtype == torch.float64
        assert torch.isfinite(adv).all(), "no NaN / inf: a std-0 group and singletons must stay finite"
        torch.testing.assert_close(adv, want, rtol=1e-10, atol=1e-12,
                                   msg=f"scale_by_std={scale}, eps={eps}: (r - group mean)/(group std + eps) * mask")
    again = grpo.group_advantages(rewards, ids, mask)
    torch.testing.assert_close(again, grpo.group_advantages(rewards, ids, mask), rtol=0, atol=0)
    for before, after in zip(keep, (rewards, ids, mask)):
        assert torch.equal(before, after), "inputs are read-only"


def test_std0_group_gets_zero_and_singleton_follows_verl(lesson):
    grpo = lesson.load("grpo.py")
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.7, 0.0, 1.0], dtype=torch.float32)
    ids = torch.tensor([0, 0, 0, 1, 2, 2])
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[3, 2:] = False
    adv = grpo.group_advantages(rewards, ids, mask)
    assert adv.dtype == torch.float32, "the output dtype is the rewards' dtype"
    assert torch.equal(adv[:3], torch.zeros(3, 4)), "all-equal rewards: advantage exactly 0 (0 / (0 + eps))"
    assert adv[3, :2] == pytest.approx([0.7 / (1 + 1e-6)] * 2, rel=1e-6), "singleton group: mean 0, std 1 (verl)"
    assert adv[3, 2:].abs().max() == 0, "padding positions get 0"
    # two responses 0 and 1: unbiased std = sqrt(0.5)
    assert adv[5, 0].item() == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6), rel=1e-6)
    assert adv[4, 0].item() == pytest.approx(-0.5 / (math.sqrt(0.5) + 1e-6), rel=1e-6)
    dr = grpo.group_advantages(rewards, ids, mask, scale_by_std=False)
    assert dr[3, 0].item() == pytest.approx(0.7, rel=1e-6) and dr[5, 0].item() == pytest.approx(0.5, rel=1e-6)


def test_token_loss_and_gradient_equal_the_closed_form(lesson):
    grpo = lesson.load("grpo.py")
    B, T, lo, hi, beta = 6, 13, 0.2, 0.28, 0.04
    logp, old, ref, g = _logps(5, B, T)
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T).clone()
    adv[2] = 0.0
    keep = (logp.clone(), old.clone(), ref.clone(), adv.clone())
    x = logp.clone().requires_grad_(True)
    loss = grpo.grpo_token_loss(x, old, ref, adv, lo, hi, beta)
    loss.sum().backward()
    r = torch.exp(logp - old)
    d = ref - logp
    inside = (r > 1 - lo) & (r < 1 + hi)
    assert inside.any() and (r > 1 + hi).any() and (r < 1 - lo).any(), "the batch reaches every clip region"
    want = -torch.minimum(r * adv, r.clamp(1 - lo, 1 + hi) * adv) + beta * (torch.exp(d) - d - 1)
    torch.testing.assert_close(loss.detach(), want, rtol=1e-12, atol=1e-14)
    # d/dlogp: -A r where the unclipped term is the smaller one (or inside the bounds), else 0; k3' = 1 - exp(d)
    active = inside | ((adv > 0) & (r <= 1 - lo)) | ((adv < 0) & (r >= 1 + hi))
    want_grad = torch.where(active, -adv * r, torch.zeros_like(r)) + beta * (1 - torch.exp(d))
    torch.testing.assert_close(x.grad, want_grad, rtol=1e-10, atol=1e-13,
                               msg="gradient in logp: clipped tokens carry only the KL term")
    for before, after in zip(keep, (logp, old, ref, adv)):
        assert torch.equal(before, after), "inputs are read-only"


def test_clip_higher_is_asymmetric(lesson):
    grpo = lesson.load("grpo.py")
    zero = torch.zeros(4, 1, dtype=torch.float64)
    logp = torch.log(torch.tensor([[1.25], [1.35], [0.75], [0.85]], dtype=torch.float64))
    adv = torch.tensor([[1.0], [1.0], [-1.0], [-1.0]], dtype=torch.float64)
    loss = grpo.grpo_token_loss(logp, zero, zero, adv, 0.2, 0.28, 0.0)
    # A>0: the ratio is capped at 1 + 0.28 (1.25 not clipped, 1.35 -> 1.28); A<0: floored at 1 - 0.2 (0.85 kept)
    torch.testing.assert_close(loss.squeeze(1), torch.tensor([-1.25, -1.28, 0.8, 0.85], dtype=torch.float64),
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", MODES)
def test_aggregation_equals_a_slow_loop(lesson, mode):
    grpo = lesson.load("grpo.py")
    # a fully masked row, a 1-token row, two full rows; then T = 20, wider than any row (trailing padding columns)
    for lengths, T in (([5, 0, 17, 1, 9, 17, 12], 17), ([5, 0, 9, 1, 12, 3, 7], 20)):
        g, mask = _batch(11, lengths, T)
        loss_mat = torch.where(mask, torch.randn(7, T, generator=g, dtype=torch.float64),
                               torch.full((7, T), PAD, dtype=torch.float64))
        keep = (loss_mat.clone(), mask.clone())
        for max_len in (None, 40):
            got = grpo.aggregate_loss(loss_mat, mask, mode, max_len=max_len)
            want = _slow_aggregate(loss_mat, mask, mode, T if max_len is None else max_len)
            assert got.dim() == 0, "a scalar tensor"
            assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-13), f"{mode}, T={T}, max_len={max_len}"
            assert torch.equal(grpo.aggregate_loss(loss_mat, mask, mode, max_len=max_len), got), "call twice"
        assert torch.equal(keep[0], loss_mat) and torch.equal(keep[1], mask), "inputs are read-only"


def test_token_weights_show_the_length_bias(lesson):
    """d(loss)/d(loss_mat[i, t]) is the weight a real token gets; at ratio 1 the policy gradient on that token's
    log-prob is -A_i times it. Short correct row (3 tokens), long wrong row (12), a middle row (6)."""
    grpo = lesson.load("grpo.py")
    lengths, T, max_len = [3, 12, 6], 12, 16
    _, mask = _batch(0, lengths, T)
    n = torch.tensor(lengths, dtype=torch.float64).unsqueeze(1)
    expected = {
        "token-mean": torch.full((3, 1), 1 / 21, dtype=torch.float64),
        "seq-mean-token-mean": 1 / (3 * n),
        "seq-mean-token-sum": torch.full((3, 1), 1 / 3, dtype=torch.float64),
        "seq-mean-token-sum-norm": torch.full((3, 1), 1 / (3 * max_len), dtype=torch.float64),
    }
    for mode, w in expected.items():
        x = torch.linspace(-1, 2, 3 * T, dtype=torch.float64).reshape(3, T).requires_grad_(True)
        grpo.aggregate_loss(x, mask, mode, max_len=max_len).backward()
        torch.testing.assert_close(x.grad, w.expand(3, T) * mask, rtol=1e-12, atol=1e-15,
                                   msg=f"{mode}: per-token weights (padding must get 0)")
    # the bias, stated as numbers: per-token weight short/long
    x = torch.zeros(3, T, dtype=torch.float64, requires_grad=True)
    grpo.aggregate_loss(x, mask, "seq-mean-token-mean").backward()
    assert x.grad[0, 0] / x.grad[1, 0] == pytest.approx(4.0), "seq-mean-token-mean: a 3-token row's tokens weigh 4x"
    assert x.grad[1].sum() == pytest.approx(x.grad[0].sum()), "... and every row gets the same total weight 1/B"


# ---------------------------------------------------------------------------------------------
# verl 0.9.1
# ---------------------------------------------------------------------------------------------


def _verl():
    from verl.trainer.ppo import core_algos

    return core_algos


def _verl_cfg(lo, hi):
    from omegaconf import OmegaConf

    # dual-clip off: verl always applies clip_ratio_c (default 3.0) to A < 0; the lesson's objective has none
    return OmegaConf.create({"clip_ratio": lo, "clip_ratio_low": lo, "clip_ratio_high": hi,
                             "clip_ratio_c": 1e9, "global_batch_info": {}})


@pytest.mark.requires("verl")
@pytest.mark.parametrize("scale", [True, False], ids=["grpo", "dr-grpo"])
def test_advantages_equal_verl(lesson, scale):
    grpo = lesson.load("grpo.py")
    core = _verl()
    rewards, ids = _groups()
    lengths = [3, 7, 1, 11, 5, 11, 2, 9, 4, 6, 8, 10, 1, 7, 3, 11]
    _, mask = _batch(0, lengths, 11)
    token_rewards = torch.zeros(mask.shape, dtype=torch.float64)
    token_rewards[torch.arange(16), torch.tensor(lengths) - 1] = rewards  # outcome reward on the last token
    want, _ = core.compute_grpo_outcome_advantage(token_rewards, mask.to(torch.float64), ids.numpy(),
                                                  norm_adv_by_std_in_grpo=scale)
    got = grpo.group_advantages(rewards, ids, mask, scale_by_std=scale)
    # 1e-7: verl keeps a singleton's std as a float32 tensor(1.0), so its 1 + 1e-6 is rounded to float32
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-12)


@pytest.mark.requires("verl")
def test_k3_equals_verl(lesson):
    grpo = lesson.load("grpo.py")
    logp, _, ref, _ = _logps(9, 4, 23, spread=0.6)  # k3 < 10: verl clamps k3 to [-10, 10]
    torch.testing.assert_close(grpo.k3_kl(logp, ref), _verl().kl_penalty(logp, ref, "k3"), rtol=1e-12, atol=1e-14)


@pytest.mark.requires("verl")
@pytest.mark.parametrize("mode", MODES)
def test_aggregation_equals_verl(lesson, mode):
    grpo = lesson.load("grpo.py")
    core = _verl()
    lengths = [5, 0, 17, 1, 9, 17, 12, 3]
    g, mask = _batch(13, lengths, 17)
    loss_mat = torch.where(mask, torch.randn(8, 17, generator=g, dtype=torch.float64),
                           torch.full((8, 17), PAD, dtype=torch.float64))
    rtol = 1e-7 if mode == "seq-mean-token-mean" else 1e-10  # verl divides by (count + 1e-8)
    for max_len in (None, 64):
        want = core.agg_loss(loss_mat, mask.to(torch.float64), mode, loss_scale_factor=max_len)
        got = grpo.aggregate_loss(loss_mat, mask, mode, max_len=max_len)
        torch.testing.assert_close(got, want, rtol=rtol, atol=1e-12, msg=f"{mode}, max_len={max_len}")


@pytest.mark.requires("verl")
@pytest.mark.parametrize("mode", MODES)
def test_policy_loss_with_kl_equals_verl(lesson, mode):
    """verl's actor: compute_policy_loss_vanilla (agg of the clipped loss) + kl_loss_coef * agg_loss(kl_penalty k3)."""
    grpo = lesson.load("grpo.py")
    core = _verl()
    B, T, lo, hi, beta = 7, 19, 0.2, 0.28, 0.05
    logp, old, ref, g = _logps(21, B, T)
    lengths = [19, 4, 0, 11, 1, 16, 7]
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64) * mask
    fmask = mask.to(torch.float64)
    pg, _ = core.compute_policy_loss_vanilla(old, logp, adv, fmask, mode, config=_verl_cfg(lo, hi))
    want = pg + beta * core.agg_loss(core.kl_penalty(logp, ref, "k3"), fmask, mode)
    got = grpo.aggregate_loss(grpo.grpo_token_loss(logp, old, ref, adv, lo, hi, beta), mask, mode)
    rtol = 1e-7 if mode == "seq-mean-token-mean" else 1e-10
    torch.testing.assert_close(got, want, rtol=rtol, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# TRL 1.16.0: GRPOTrainer._compute_loss, from the line that forms log_ratio to the loss_type branches
# ---------------------------------------------------------------------------------------------


def _trl_grpo_loss_lines():
    """The top-level statements of GRPOTrainer._compute_loss from `log_ratio = ...` through the `loss_type` if-chain
    that assigns `loss`, read from the installed source (trl cannot be imported here) and compiled as written."""
    spec = importlib.util.find_spec("trl")
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "grpo_trainer.py"
    source = path.read_text()
    fn = next(node for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.FunctionDef) and node.name == "_compute_loss")
    body = fn.body
    start = next(i for i, s in enumerate(body) if "log_ratio =" in ast.get_source_segment(source, s))
    stop = next(i for i, s in enumerate(body) if isinstance(s, ast.If) and "dr_grpo" in ast.get_source_segment(
        source, s) and "max_completion_length" in ast.get_source_segment(source, s))
    stmts = body[start:stop + 1]
    text = "\n".join(ast.get_source_segment(source, s) for s in stmts)
    assert "torch.exp(ref_per_token_logps - per_token_logps)" in text and "num_items_in_batch" in text, \
        f"{path}: not the 1.16.0 loss lines"
    return compile(ast.Module(body=stmts, type_ignores=[]), str(path), "exec"), text


# TRL loss_type -> (the lesson's mode, what TRL's normaliser is here): grpo divides each row by its length (clamped
# to 1) and averages over all B rows; bnpo is token-mean; dr_grpo divides by B * max_completion_length; dapo by
# num_items_in_batch, the token count of the whole generation batch (here: this batch, one process, eval mode).
TRL_MODES = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dr_grpo": "seq-mean-token-sum-norm",
             "dapo": "token-mean"}


@pytest.mark.requires("trl")
@pytest.mark.parametrize("loss_type", list(TRL_MODES))
def test_loss_equals_trl_grpo_trainer(lesson, loss_type):
    grpo = lesson.load("grpo.py")
    code, text = _trl_grpo_loss_lines()
    B, T, lo, hi, beta, max_completion_length = 6, 15, 0.2, 0.28, 0.04, 24
    logp, old, ref, g = _logps(31, B, T)
    mask = (torch.arange(T).unsqueeze(0) < torch.tensor([15, 3, 9, 1, 12, 15]).unsqueeze(1)).to(torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    self = SimpleNamespace(
        importance_sampling_level="token", beta=beta, loss_type=loss_type, epsilon_low=lo, epsilon_high=hi,
        off_policy_mask_threshold=None, use_vllm=False, model=SimpleNamespace(training=False),
        max_completion_length=max_completion_length, accelerator=SimpleNamespace(num_processes=1),
        current_gradient_accumulation_steps=1, args=SimpleNamespace(use_bias_correction_kl=False, delta=None))
    scope = {"torch": torch, "self": self, "per_token_logps": logp, "old_per_token_logps": old, "mask": mask,
             "advantages": adv.unsqueeze(1), "entropy_mask": None,
             "inputs": {"ref_per_token_logps": ref, "num_items_in_batch": mask.sum()}}
    exec(code, scope)  # TRL's own lines, on our tensors
    per_token = grpo.grpo_token_loss(logp, old, ref, adv.unsqueeze(1).expand(B, T), lo, hi, beta)
    torch.testing.assert_close(per_token * mask, scope["per_token_loss"] * mask, rtol=1e-12, atol=1e-14,
                               msg=f"TRL computes\n{text}")
    got = grpo.aggregate_loss(per_token, mask.bool(), TRL_MODES[loss_type], max_len=max_completion_length)
    torch.testing.assert_close(got, scope["loss"], rtol=1e-10, atol=1e-13, msg=f"loss_type={loss_type}")
