"""Tests for rl-05. Oracles: verl 0.9.1's `verl.trainer.ppo.core_algos` (compute_policy_loss_vanilla,
compute_value_loss, compute_entropy_loss, kl_penalty "low_var_kl") and `verl.utils.torch_functional.masked_whiten`;
torch.distributions.Categorical; float64 per-row formulas written from the papers; a real gymnasium SyncVectorEnv
(NEXT_STEP) over a scripted env whose episodes end where the test says; greedy CartPole-v1 evaluation episodes.

Order: verl-free tests first (each piece against float64 formulas, the rollout, the update against a loop of those
formulas), then the same against verl (its import costs ~4 s), the training run last. Mutants stop at the first
failure, and a learner without verl still gets every piece graded.
fp32 tolerances: the same formula evaluated in another order differs by a few ulps (~1e-7 relative); after a
dozen Adam steps on a small MLP the parameters of two correct implementations agree to ~1e-6.
"""

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

# ---------------------------------------------------------------------------------------------
# float64 formulas (independent of the lesson file) and verl adapters
# ---------------------------------------------------------------------------------------------


def _paper_loss_row(r, a, lo, hi, c):
    """-min(r A, clip(r) A) of Schulman et al. 2017 (eq. 7), then Ye et al.'s dual clip max(., c A) for A < 0."""
    objective = min(r * a, min(max(r, 1 - lo), 1 + hi) * a)
    if c is not None and a < 0:
        objective = max(objective, c * a)
    return -objective


class Formulas:
    """The pieces written from the papers' formulas, torch ops, any dtype (the additional reference)."""

    @staticmethod
    def policy_loss(logp, old, adv, mask, lo, hi, c):
        ratio = torch.exp(logp - old)
        obj = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - lo, 1 + hi) * adv)
        clipped = torch.clamp(ratio, 1 - lo, 1 + hi) * adv < ratio * adv
        if c is not None:
            obj = torch.where(adv < 0, torch.maximum(obj, c * adv), obj)
        return -obj[mask].mean(), clipped[mask].double().mean().item()

    @staticmethod
    def value_loss(v, old_v, ret, mask, clip):
        if clip is None:
            return 0.5 * ((v - ret) ** 2)[mask].mean()
        v_clip = torch.minimum(torch.maximum(v, old_v - clip), old_v + clip)
        return 0.5 * torch.maximum((v - ret) ** 2, (v_clip - ret) ** 2)[mask].mean()

    @staticmethod
    def entropy(logits, mask):
        return torch.distributions.Categorical(logits=logits).entropy()[mask].mean()

    @staticmethod
    def approx_kl(logp, old, mask):
        log_r = (logp - old)[mask]
        return (torch.exp(log_r) - 1 - log_r).mean()

    @staticmethod
    def normalize(adv, mask):
        a = adv[mask]
        out = adv.clone()
        out[mask] = (a - a.mean()) / (a.std(correction=1) + 1e-8)
        return out


def _verl():
    from verl.trainer.ppo import core_algos
    from verl.utils import torch_functional as verl_F

    return core_algos, verl_F


def _verl_policy_cfg(clip_low, clip_high, clip_ratio_c):
    from omegaconf import OmegaConf

    # dual-clip off = a bound no row reaches (verl always applies clip_ratio_c, default 3.0)
    c = 1e9 if clip_ratio_c is None else clip_ratio_c
    return OmegaConf.create({"clip_ratio": clip_low, "clip_ratio_low": clip_low, "clip_ratio_high": clip_high,
                             "clip_ratio_c": c, "global_batch_info": {}})


class Verl:
    """The same pieces from verl 0.9.1 (masks as floats, loss_agg_mode "token-mean")."""

    @staticmethod
    def policy_loss(logp, old, adv, mask, lo, hi, c):
        core_algos, _ = _verl()
        loss, metrics = core_algos.compute_policy_loss_vanilla(old, logp, adv, mask.to(logp.dtype), "token-mean",
                                                               _verl_policy_cfg(lo, hi, c))
        return loss, metrics["actor/pg_clipfrac"]

    @staticmethod
    def value_loss(v, old_v, ret, mask, clip):
        core_algos, _ = _verl()
        if clip is None:  # compute_value_loss always clips: unclipped = 0.5 * agg_loss of the squared error
            return 0.5 * core_algos.agg_loss((v - ret) ** 2, mask.to(v.dtype), "token-mean")
        return core_algos.compute_value_loss(v, ret, old_v, mask.to(v.dtype), clip, "token-mean")[0]

    @staticmethod
    def entropy(logits, mask):
        core_algos, _ = _verl()
        return core_algos.compute_entropy_loss(logits, mask.to(logits.dtype), "token-mean")

    @staticmethod
    def approx_kl(logp, old, mask):
        # verl's k3 estimates KL(p || ref) from samples of p: here p = pi_old, ref = pi_new
        core_algos, _ = _verl()
        return core_algos.agg_loss(core_algos.kl_penalty(old, logp, "low_var_kl"), mask.to(logp.dtype), "token-mean")

    @staticmethod
    def normalize(adv, mask):
        _, verl_F = _verl()
        return verl_F.masked_whiten(adv, mask.to(adv.dtype))


def _rows(n, dtype, seed, spread=0.6):
    """logp, old_logp, advantages and a mask with ~20 % invalid rows."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, generator=g, dtype=dtype) * 2.0 - 0.05
    logp = old + spread * torch.randn(n, generator=g, dtype=dtype)
    adv = torch.randn(n, generator=g, dtype=dtype) * 1.5
    mask = torch.rand(n, generator=g) > 0.2
    mask[0] = True
    return logp, old, adv, mask


# ---------------------------------------------------------------------------------------------
# 1. the pieces on hand cases and against float64 formulas (no verl)
# ---------------------------------------------------------------------------------------------

# (ratio, advantage): inside the range, above it, below it, for both signs, and far out for the dual clip
HAND = [(1.05, 2.0), (1.5, 2.0), (0.5, 2.0), (1.5, -2.0), (0.5, -2.0), (0.95, -1.0), (5.0, -1.0), (6.0, 0.5),
        (0.1, 1.0), (1.3, -0.4), (1.0, 0.7), (4.0, -3.0)]


@pytest.mark.parametrize("clip_ratio_c", [None, 3.0], ids=["no-dual-clip", "dual-clip-3"])
@pytest.mark.parametrize("lo, hi", [(0.2, 0.2), (0.1, 0.28)], ids=["sym", "clip-higher"])
def test_clipped_surrogate_on_hand_cases(lesson, lo, hi, clip_ratio_c):
    ppo = lesson.load("ppo.py")
    ratios = torch.tensor([r for r, _ in HAND], dtype=torch.float64)
    adv = torch.tensor([a for _, a in HAND], dtype=torch.float64)
    old = torch.linspace(-2.0, -0.1, len(HAND), dtype=torch.float64)
    logp = (old + ratios.log()).requires_grad_(True)
    for i, (r, a) in enumerate(HAND):
        one = torch.zeros(len(HAND), dtype=torch.bool)
        one[i] = True
        loss_i, clipfrac_i = ppo.policy_loss(logp, old, adv, one, lo, hi, clip_ratio_c)
        want = _paper_loss_row(r, a, lo, hi, clip_ratio_c)
        assert loss_i.item() == pytest.approx(want, rel=1e-12, abs=1e-12), (
            f"row ratio={r} A={a}: loss {loss_i.item():.6f}, want {want:.6f}")
        active = (a > 0 and r > 1 + hi) or (a < 0 and r < 1 - lo)
        assert float(clipfrac_i) == float(active), f"row ratio={r} A={a}: clipfrac {float(clipfrac_i)}"
    mask = torch.ones(len(HAND), dtype=torch.bool)
    loss, _ = ppo.policy_loss(logp, old, adv, mask, lo, hi, clip_ratio_c)
    (grad,) = torch.autograd.grad(loss, logp)
    for i, (r, a) in enumerate(HAND):
        clipped = (a > 0 and r > 1 + hi) or (a < 0 and r < 1 - lo) or (clip_ratio_c and a < 0 and r > clip_ratio_c)
        want = 0.0 if clipped else -a * r / len(HAND)  # d(-A r)/d logp = -A r, averaged over the rows
        assert grad[i].item() == pytest.approx(want, rel=1e-9, abs=1e-12), (
            f"gradient of row ratio={r} A={a}: {grad[i].item():.6f}, want {want:.6f}"
            + (" (this row is clipped: no gradient)" if clipped else ""))


# (V_old, V_new, R): inside the band, past it towards R, past it away from R, overshooting R, below R
VHAND = [(1.0, 1.1, 3.0), (1.0, 1.5, 3.0), (1.0, 0.5, 3.0), (1.0, 4.0, 1.3), (2.0, 1.0, -4.0), (-3.0, -2.5, -2.9),
         (0.0, 0.0, 0.5)]


@pytest.mark.parametrize("clip_range", [0.2, 0.0, None], ids=["clip-0.2", "clip-0 (V pinned to V_old)", "no-clip"])
def test_value_loss_on_hand_cases(lesson, clip_range):
    ppo = lesson.load("ppo.py")
    old_v, v, ret = (torch.tensor(col, dtype=torch.float64) for col in zip(*VHAND))
    v.requires_grad_(True)
    mask = torch.ones(len(VHAND), dtype=torch.bool)
    mask[3] = False
    loss = ppo.value_loss(v, old_v, ret, mask, clip_range)
    (grad,) = torch.autograd.grad(loss, v)
    n = int(mask.sum())
    want_loss, want_grad = 0.0, []
    for (vo, vn, r), m in zip(VHAND, mask.tolist()):
        vc = vn if clip_range is None else min(max(vn, vo - clip_range), vo + clip_range)
        unclipped, clipped = (vn - r) ** 2, (vc - r) ** 2
        if m:
            want_loss += 0.5 * max(unclipped, clipped) / n
        # the clipped term is constant in V once V left the band: no gradient when it is the (strictly) larger one
        want_grad.append(0.0 if not m or clipped > unclipped else (vn - r) / n)
    assert loss.item() == pytest.approx(want_loss, rel=1e-12)
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-12, atol=1e-15, err_msg="gradient wrt V")


def test_entropy_matches_categorical_and_is_stable(lesson):
    ppo = lesson.load("ppo.py")
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(4, 9, 5, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    mask = torch.rand(4, 9, generator=g) > 0.3
    ent = ppo.entropy(logits, mask)
    ref = Formulas.entropy(logits, mask)
    assert ent.dim() == 0 and ent.item() == pytest.approx(ref.item(), rel=1e-12)
    (grad,) = torch.autograd.grad(ent, logits)
    (ref_grad,) = torch.autograd.grad(Formulas.entropy(logits, mask), logits)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)
    # probabilities that underflow to 0: softmax then log gives 0 * -inf = nan
    sharp = torch.tensor([[0.0, 2000.0, -3000.0], [5.0, 5.0, -1e4], [1.0, 2.0, 3.0]])
    got = ppo.entropy(sharp, torch.ones(3, dtype=torch.bool))
    want = torch.distributions.Categorical(logits=sharp.double()).entropy().mean()
    assert torch.isfinite(got), "entropy is not finite when a probability underflows"
    assert got.item() == pytest.approx(want.item(), rel=1e-5)


def test_approx_kl_is_k3(lesson):
    ppo = lesson.load("ppo.py")
    logp, old, _, mask = _rows(61, torch.float64, seed=11, spread=0.9)
    kl = ppo.approx_kl(logp, old, mask)
    log_r = (logp - old).numpy()[mask.numpy()]
    cleanrl = np.mean((np.exp(log_r) - 1) - log_r)  # CleanRL ppo.py: ((ratio - 1) - logratio).mean()
    assert kl.dim() == 0 and kl.item() == pytest.approx(cleanrl, rel=1e-12)
    assert kl.item() > 0 and ppo.approx_kl(old, old, mask).item() == 0.0
    # k3 of every single row is >= 0 (log r <= r - 1), even where k1 = -log r is negative
    for i in range(8):
        one = torch.zeros_like(mask)
        one[i] = True
        assert ppo.approx_kl(logp, old, one).item() >= 0.0


def test_normalize_advantages_over_valid_rows_only(lesson):
    ppo = lesson.load("ppo.py")
    g = torch.Generator().manual_seed(5)
    for n, scale in [(2, 1.0), (29, 3.0), (200, 0.2)]:
        adv = torch.randn(n, generator=g) * scale + 1.7
        mask = torch.rand(n, generator=g) > 0.3
        mask[:2] = True
        adv[~mask] = 1e6  # poison: an invalid row must not move the mean or the std
        before = adv.clone()
        got = ppo.normalize_advantages(adv, mask)
        assert got.shape == adv.shape and torch.equal(adv, before), "shape changed or input modified"
        assert torch.isfinite(got).all(), "non-finite values in the output"
        x = adv.double().numpy()[mask.numpy()]
        ref64 = (x - x.mean()) / x.std(ddof=1)  # unbiased std; eps 1e-8 is below the tolerance (std >= 0.1)
        np.testing.assert_allclose(got[mask].double().numpy(), ref64, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# 2. the NEXT_STEP rollout, on a real SyncVectorEnv over a scripted env
# ---------------------------------------------------------------------------------------------


class ScriptedEnv(gym.Env):
    """Episode k of this env lasts lengths[k % len(lengths)] steps; even episodes end terminated, odd ones
    truncated. obs = [env id, episode, t]; reward of step t (1-based) = 1 + 10 * env id + t."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, env_id, lengths):
        self.env_id, self.lengths, self.episode, self.t = env_id, lengths, -1, 0
        self.actions = []

    def _obs(self):
        return np.array([self.env_id, self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        end = self.t >= self.lengths[self.episode % len(self.lengths)]
        term, trunc = end and self.episode % 2 == 0, end and self.episode % 2 == 1
        return self._obs(), float(1 + 10 * self.env_id + self.t), term, trunc, {}


LENGTHS = [[3, 2, 4], [1], [5, 6], [7], [2, 3]]  # env 1: every episode one step long (done, reset, done, ...)


def _expected_rows(lengths, steps):
    """Per env: obs, reward, terminated, truncated, valid of each step() call, simulated without gymnasium."""
    out = []
    for env_id, ls in enumerate(lengths):
        episode, t, prev_done, rows = 0, 0, False, []
        for _ in range(steps):
            obs = [env_id, episode, t]
            if prev_done:  # NEXT_STEP: this call only resets the env
                episode, t, prev_done = episode + 1, 0, False
                rows.append((obs, 0.0, False, False, False))
                continue
            t += 1
            end = t >= ls[episode % len(ls)]
            rows.append((obs, 1.0 + 10 * env_id + t, end and episode % 2 == 0, end and episode % 2 == 1, True))
            prev_done = end
        out.append(rows)
    return out


class _ObsAgent(torch.nn.Module):
    """Logits and values that are fixed functions of the observation (so the test can recompute them)."""

    def __init__(self):
        super().__init__()
        self.actor = torch.nn.Linear(3, 3)
        self.critic = torch.nn.Linear(3, 1)
        with torch.no_grad():
            self.actor.weight.copy_(torch.tensor([[0.3, -0.2, 0.1], [-0.1, 0.25, -0.3], [0.05, 0.1, 0.2]]))
            self.actor.bias.copy_(torch.tensor([0.1, -0.2, 0.0]))
            self.critic.weight.copy_(torch.tensor([[1.0, 0.5, 0.25]]))
            self.critic.bias.fill_(-1.0)


def test_rollout_masks_the_next_step_reset_rows(lesson):
    ppo = lesson.load("ppo.py")
    E = len(LENGTHS)
    sizes = [7, 7, 7, 1, 2]  # env 3 ends an episode on the last row of the first rollout; a one-step rollout
    envs = gym.vector.SyncVectorEnv([lambda i=i: ScriptedEnv(i, LENGTHS[i]) for i in range(E)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    obs, _ = envs.reset(seed=0)
    agent = _ObsAgent()
    state = ppo.EnvState(torch.as_tensor(obs), torch.zeros(E, dtype=torch.bool))
    gen = torch.Generator().manual_seed(123)
    ref_gen = torch.Generator().manual_seed(123)
    rng_before = torch.random.get_rng_state()
    want = _expected_rows(LENGTHS, sum(sizes) + 1)  # + 1: the observation the next rollout would start from
    sent = [[] for _ in range(E)]
    start = 0
    for k, T in enumerate(sizes):
        old_state, old_obs, old_done = state, state.obs.clone(), state.done.clone()
        rollout, state = ppo.collect_rollout(envs, agent, state, T, gen)
        assert torch.equal(old_state.obs, old_obs) and torch.equal(old_state.done, old_done), "state modified"
        rows = [[want[e][start + t] for e in range(E)] for t in range(T)]
        exp_obs = torch.tensor([[r[0] for r in row] for row in rows], dtype=torch.float32)
        assert rollout.obs.shape == (T, E, 3) and rollout.valid.shape == (T, E)
        torch.testing.assert_close(rollout.obs, exp_obs, rtol=0, atol=0, msg=f"rollout {k}: obs")
        assert torch.equal(rollout.valid, torch.tensor([[r[4] for r in row] for row in rows])), (
            f"rollout {k}: valid must be False exactly on the step after a done (NEXT_STEP reset rows)\n"
            f"got\n{rollout.valid.int()}\nwant\n{torch.tensor([[r[4] for r in row] for row in rows]).int()}")
        torch.testing.assert_close(rollout.rewards, torch.tensor([[r[1] for r in row] for row in rows]),
                                   rtol=0, atol=0, msg=f"rollout {k}: rewards")
        assert torch.equal(rollout.terminated, torch.tensor([[r[2] for r in row] for row in rows]))
        assert torch.equal(rollout.truncated, torch.tensor([[r[3] for r in row] for row in rows]))
        with torch.no_grad():
            logits = agent.actor(exp_obs)
            exp_actions = torch.stack([ppo.sample_actions(logits[t], ref_gen) for t in range(T)])
            exp_values = agent.critic(exp_obs).squeeze(-1)
        assert torch.equal(rollout.actions, exp_actions), "actions: one sample_actions(logits, gen) call per step"
        torch.testing.assert_close(rollout.logprobs, ppo.log_prob_of(logits, exp_actions), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(rollout.values, exp_values, rtol=1e-6, atol=1e-6)
        start += T
        nxt = [want[e][start][0] for e in range(E)]
        torch.testing.assert_close(state.obs, torch.tensor(nxt, dtype=torch.float32), rtol=0, atol=0)
        torch.testing.assert_close(rollout.next_value, agent.critic(state.obs).squeeze(-1).detach(),
                                   rtol=1e-6, atol=1e-6)
        assert not rollout.logprobs.requires_grad and not rollout.values.requires_grad, "rollout kept a graph"
        for e in range(E):
            sent[e] += rollout.actions[:, e][rollout.valid[:, e]].tolist()
    assert torch.equal(torch.random.get_rng_state(), rng_before), "the global RNG was used: sample with gen"
    # the actions the sub-envs really received are those of the valid rows (reset rows' actions are ignored)
    assert [env.actions for env in envs.envs] == sent
    envs.close()


# ---------------------------------------------------------------------------------------------
# 3. the minibatch update
# ---------------------------------------------------------------------------------------------


def _agent(ppo, seed, obs_dim=4, n_actions=3):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return ppo.Agent(obs_dim, n_actions, hidden=16)


def _batch(ppo, agent, n, seed, invalid=0.15):
    """A synthetic batch whose old log-probs and values come from `agent` itself (so the first KL is ~0)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        logits = agent.actor(obs)
        actions = ppo.sample_actions(logits, g)
        logprobs = ppo.log_prob_of(logits, actions)
        values = agent.critic(obs).squeeze(-1)
    adv = torch.randn(n, generator=g) * 2 + 0.3
    valid = torch.rand(n, generator=g) > invalid
    return ppo.Batch(obs=obs, actions=actions, logprobs=logprobs, values=values, advantages=adv,
                     returns=values + adv + torch.randn(n, generator=g), valid=valid)


class _CountingAdam(torch.optim.Adam):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


def _cfg(ppo, **kw):
    base = dict(num_minibatches=4, update_epochs=3, clip_coef=0.2, clip_ratio_c=None, clip_vloss=0.2,
                ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, target_kl=None, norm_adv=True)
    base.update(kw)
    return ppo.PPOConfig(**base)


def test_update_ignores_the_invalid_rows(lesson):
    ppo = lesson.load("ppo.py")
    cfg = _cfg(ppo)
    results = []
    for poison in (1e3, -7e2):
        agent = _agent(ppo, 1)
        batch = _batch(ppo, agent, 98, seed=2, invalid=0.3)
        bad = ~batch.valid
        batch.obs[bad] = poison
        batch.advantages[bad] = poison
        batch.returns[bad] = -poison
        batch.values[bad] = poison / 3
        batch.logprobs[bad] = -abs(poison) / 100
        opt = torch.optim.Adam(agent.parameters(), lr=3e-3, eps=1e-5)
        stats = ppo.ppo_update(agent, opt, batch, cfg, torch.Generator().manual_seed(9))
        assert all(math.isfinite(x) for x in stats["approx_kl"] + stats["clipfrac"]), stats
        results.append(torch.cat([p.detach().flatten() for p in agent.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6,
                               msg="the update depends on rows with valid = False (NEXT_STEP reset rows)")


@pytest.mark.points(2)
def test_kl_early_stop_fires_at_the_right_update(lesson):
    ppo = lesson.load("ppo.py")
    M, epochs = 4, 3
    # lr 0: the policy never moves, KL stays at rounding level (< 1e-10): never stops
    # lr 0.05: minibatch 0 (KL ~ 0) steps, the next minibatch sees KL >> 1e-4: stops there, before its own step
    for lr, target, want_updates, want_stop in [(0.0, 1e-4, M * epochs, False), (0.05, None, M * epochs, False),
                                                (0.05, 1e-4, 1, True), (0.05, 1e3, M * epochs, False)]:
        agent = _agent(ppo, 3)
        batch = _batch(ppo, agent, 96, seed=4)
        opt = _CountingAdam(agent.parameters(), lr=lr, eps=1e-5)
        gen = torch.Generator().manual_seed(0)
        rng_before = torch.random.get_rng_state()
        stats = ppo.ppo_update(agent, opt, batch, _cfg(ppo, num_minibatches=M, update_epochs=epochs,
                                                       target_kl=target), gen)
        case = f"lr={lr} target_kl={target}"
        assert opt.steps == stats["updates"] == want_updates, (
            f"{case}: {opt.steps} optimizer steps, stats['updates']={stats['updates']}, want {want_updates}")
        assert stats["early_stop"] is want_stop, case
        kls = stats["approx_kl"]
        assert len(kls) == want_updates + int(want_stop), (
            f"{case}: {len(kls)} KLs measured; want one per minibatch reached ({want_updates + int(want_stop)})")
        assert len(stats["clipfrac"]) == want_updates
        assert kls[0] < 1e-8, f"{case}: first minibatch KL {kls[0]}: measure it before that minibatch's step"
        if want_stop:
            assert kls[-1] > target and all(k <= target for k in kls[:-1])
        # one torch.randperm(N, generator=gen) per epoch started, nothing from the global RNG
        ref_gen = torch.Generator().manual_seed(0)
        for _ in range(1 if want_stop else epochs):
            torch.randperm(96, generator=ref_gen)
        assert torch.equal(gen.get_state(), ref_gen.get_state()), f"{case}: generator use"
        assert torch.equal(torch.random.get_rng_state(), rng_before), f"{case}: the global RNG was used"


def _loop(pieces, agent, opt, batch, cfg, gen):
    """The update written out with `pieces` (Formulas or Verl): the reference loop."""
    stats = {"approx_kl": [], "clipfrac": [], "updates": 0, "early_stop": False}
    n = batch.valid.shape[0]
    for _ in range(cfg.update_epochs):
        perm = torch.randperm(n, generator=gen)
        for idx in perm.chunk(cfg.num_minibatches):
            m = batch.valid[idx]
            logits = agent.actor(batch.obs[idx])
            values = agent.critic(batch.obs[idx]).squeeze(-1)
            logp = torch.log_softmax(logits, -1).gather(-1, batch.actions[idx, None]).squeeze(-1)
            old = batch.logprobs[idx]
            kl = pieces.approx_kl(logp.detach(), old, m).item()
            stats["approx_kl"].append(kl)
            if cfg.target_kl is not None and kl > cfg.target_kl:
                stats["early_stop"] = True
                return stats
            adv = pieces.normalize(batch.advantages[idx], m) if cfg.norm_adv else batch.advantages[idx]
            pg, clipfrac = pieces.policy_loss(logp, old, adv, m, cfg.clip_coef, cfg.clip_coef, cfg.clip_ratio_c)
            vl = pieces.value_loss(values, batch.values[idx], batch.returns[idx], m, cfg.clip_vloss)
            loss = pg - cfg.ent_coef * pieces.entropy(logits, m) + cfg.vf_coef * vl
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            opt.step()
            stats["clipfrac"].append(clipfrac)
            stats["updates"] += 1
    return stats


UPDATE_CASES = {
    "defaults": dict(),
    "dual-clip-no-vclip": dict(clip_ratio_c=3.0, clip_vloss=None, ent_coef=0.05),
    "no-adv-norm": dict(norm_adv=False, update_epochs=2, num_minibatches=3),
    "kl-stop-mid-run": dict(target_kl=0.02, update_epochs=6),
}


def _compare_update(ppo, pieces, case):
    cfg = _cfg(ppo, **UPDATE_CASES[case])
    agent = _agent(ppo, 5)
    ref_agent = copy.deepcopy(agent)
    batch = _batch(ppo, agent, 103, seed=6)  # 103 rows: chunks of 26, 26, 26, 25
    before = {k: v.clone() for k, v in vars(batch).items()}
    lr = 0.01 if case == "kl-stop-mid-run" else 3e-3
    opt = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    ref_opt = torch.optim.Adam(ref_agent.parameters(), lr=lr, eps=1e-5)
    gen, ref_gen = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    rng_before = torch.random.get_rng_state()
    stats = ppo.ppo_update(agent, opt, batch, cfg, gen)
    ref = _loop(pieces, ref_agent, ref_opt, batch, cfg, ref_gen)
    if case == "kl-stop-mid-run":  # the scenario itself: the stop must come after several updates
        assert ref["early_stop"] and 4 < ref["updates"] < cfg.update_epochs * cfg.num_minibatches - 1, ref
    assert (stats["updates"], stats["early_stop"]) == (ref["updates"], ref["early_stop"]), (
        f"updates/early_stop {stats['updates']}/{stats['early_stop']}, want {ref['updates']}/{ref['early_stop']}; "
        f"reference KLs {[f'{k:.4g}' for k in ref['approx_kl']]}")
    np.testing.assert_allclose(stats["approx_kl"], ref["approx_kl"], rtol=1e-3, atol=1e-7,
                               err_msg="per-minibatch approx KL")
    np.testing.assert_allclose(stats["clipfrac"], ref["clipfrac"], atol=1e-6, err_msg="per-minibatch clipfrac")
    for (name, p), q in zip(agent.named_parameters(), ref_agent.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=2e-6, msg=f"parameter {name} after the update")
    assert torch.equal(gen.get_state(), ref_gen.get_state()), (
        "the generator was not used exactly like one torch.randperm(N, generator=gen) per epoch started")
    assert torch.equal(torch.random.get_rng_state(), rng_before), "the global RNG was used"
    for k, v in before.items():
        assert torch.equal(v, getattr(batch, k)), f"batch.{k} was modified: the batch is read-only"


@pytest.mark.points(2)
@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_update_matches_a_loop_of_the_formulas(lesson, case):
    _compare_update(lesson.load("ppo.py"), Formulas, case)


# ---------------------------------------------------------------------------------------------
# 4. against verl 0.9.1 (the field's implementation)
# ---------------------------------------------------------------------------------------------


@pytest.mark.requires("verl")
@pytest.mark.parametrize("clip_ratio_c", [None, 3.0], ids=["no-dual-clip", "dual-clip-3"])
@pytest.mark.parametrize("lo, hi", [(0.2, 0.2), (0.1, 0.28)], ids=["sym", "clip-higher"])
@pytest.mark.parametrize("shape", [(37,), (3, 11)], ids=["rows", "seq"])
def test_policy_loss_matches_verl(lesson, shape, lo, hi, clip_ratio_c):
    ppo = lesson.load("ppo.py")
    n = math.prod(shape)
    logp, old, adv, mask = (t.reshape(shape) for t in _rows(n, torch.float32, seed=n + int(100 * hi), spread=1.2))
    logp.requires_grad_(True)
    inputs = [t.clone() for t in (logp, old, adv, mask)]
    loss, clipfrac = ppo.policy_loss(logp, old, adv, mask, lo, hi, clip_ratio_c)
    (grad,) = torch.autograd.grad(loss, logp)
    ref_logp = logp.detach().clone().requires_grad_(True)
    ref_loss, ref_clipfrac = Verl.policy_loss(ref_logp, old, adv, mask, lo, hi, clip_ratio_c)
    (ref_grad,) = torch.autograd.grad(ref_loss, ref_logp)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert float(clipfrac) == pytest.approx(ref_clipfrac, abs=1e-6), "clipfrac differs from verl's pg_clipfrac"
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7, msg="gradient wrt logp differs from verl's")
    for before, after in zip(inputs, (logp, old, adv, mask)):
        assert torch.equal(before, after.detach()), "an input was modified"


@pytest.mark.requires("verl")
@pytest.mark.parametrize("clip_range", [0.2, 5.0, None], ids=["clip-0.2", "clip-5", "no-clip"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_value_loss_matches_verl(lesson, clip_range, dtype):
    ppo = lesson.load("ppo.py")
    g = torch.Generator().manual_seed(7)
    n = 53
    old_v = torch.randn(n, generator=g, dtype=dtype) * 10
    returns = old_v + torch.randn(n, generator=g, dtype=dtype) * 8
    # new predictions: some inside the clip range, some far outside, on both sides of V_old and of R
    values = (old_v + torch.randn(n, generator=g, dtype=dtype) * 6).requires_grad_(True)
    mask = torch.rand(n, generator=g) > 0.25
    loss = ppo.value_loss(values, old_v, returns, mask, clip_range)
    (grad,) = torch.autograd.grad(loss, values)
    ref_values = values.detach().clone().requires_grad_(True)
    ref = Verl.value_loss(ref_values, old_v, returns, mask, clip_range)
    (ref_grad,) = torch.autograd.grad(ref, ref_values)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(loss, ref, rtol=tol, atol=tol)
    torch.testing.assert_close(grad, ref_grad, rtol=tol, atol=tol, msg="gradient wrt the new values")


@pytest.mark.requires("verl")
def test_entropy_approx_kl_and_normalisation_match_verl(lesson):
    ppo = lesson.load("ppo.py")
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(4, 9, 5, generator=g) * 2).requires_grad_(True)
    mask = torch.rand(4, 9, generator=g) > 0.3
    ent = ppo.entropy(logits, mask)
    torch.testing.assert_close(ent, Verl.entropy(logits, mask), rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(ent, logits)
    (ref_grad,) = torch.autograd.grad(Verl.entropy(logits, mask), logits)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7, msg="entropy gradient")
    for dtype, tol in [(torch.float32, 1e-5), (torch.float64, 1e-12)]:
        logp, old, adv, mask = _rows(61, dtype, seed=11, spread=0.9)  # |log r| < 2.5: verl's clamps never act
        torch.testing.assert_close(ppo.approx_kl(logp, old, mask), Verl.approx_kl(logp, old, mask),
                                   rtol=tol, atol=tol, msg="approx_kl vs verl kl_penalty(old, new, 'low_var_kl')")
        # verl adds eps inside the sqrt (rsqrt(var + 1e-8)), the contract outside: < 1e-6 apart at std ~1.5
        torch.testing.assert_close(ppo.normalize_advantages(adv, mask)[mask], Verl.normalize(adv, mask)[mask],
                                   rtol=1e-5, atol=1e-5, msg="normalize_advantages vs verl masked_whiten")


@pytest.mark.requires("verl")
@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_update_matches_a_verl_loop(lesson, case):
    _compare_update(lesson.load("ppo.py"), Verl, case)


# ---------------------------------------------------------------------------------------------
# 5. training: PPO learns CartPole-v1 (last: the slowest test)
# ---------------------------------------------------------------------------------------------

TRAIN_SEED = 1
EVAL_EPISODES = 20
THRESHOLD = 100.0


def greedy_return(agent, seed, episodes=EVAL_EPISODES):
    """Mean undiscounted return of `episodes` fresh CartPole-v1 episodes (reset seeds seed, seed+1, ...) under
    the greedy policy argmax(logits); each episode counts up to its first done (at most 500)."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(episodes)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    obs, _ = envs.reset(seed=seed)
    total = np.zeros(episodes)
    alive = np.ones(episodes, dtype=bool)
    while alive.any():
        with torch.no_grad():
            actions = agent.actor(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1)
        obs, reward, terminated, truncated, _ = envs.step(actions.numpy())
        total += reward * alive
        alive &= ~(terminated | truncated)
    envs.close()
    return float(total.mean())


@pytest.mark.points(2)
@pytest.mark.timeout(300)
def test_ppo_learns_cartpole(lesson):
    ppo = lesson.load("ppo.py")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        agent, history = ppo.train(ppo.PPOConfig(), seed=TRAIN_SEED)
        ret = greedy_return(agent, seed=10_000)
    finally:
        torch.set_num_threads(threads)
    clipfracs = [c for h in history for c in h["clipfrac"]]
    assert clipfracs and all(0.0 <= c <= 1.0 for c in clipfracs) and max(clipfracs) > 0, "clip fraction reported"
    assert ret >= THRESHOLD, (f"greedy return {ret:.1f} over {EVAL_EPISODES} episodes after "
                              f"{ppo.PPOConfig().total_steps} env steps; want >= {THRESHOLD}")
