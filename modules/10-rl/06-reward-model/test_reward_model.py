"""Tests for rl-06. References: the closed form of −log σ evaluated stably in float64 numpy, the loss
expression read from TRL's own `RewardTrainer.compute_loss` source, Newton's method in float64 for the
(convex) linear-model MLE, and the known utility that generated the preferences."""

import ast
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def one_thread():
    """The matrices here are tiny: on a busy 2-core machine torch's intra-op threads only spin (30x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _softplus(x):
    """log(1 + e^x) without overflow, float64."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _sigmoid(x):
    return np.exp(-_softplus(-x))


def closed_form(rc, rr, margin=None, center=None):
    """(loss, dL/dr_chosen, dL/dr_rejected) in float64 numpy."""
    rc, rr = np.asarray(rc, np.float64), np.asarray(rr, np.float64)
    z = rc - rr - (0.0 if margin is None else np.asarray(margin, np.float64))
    n = len(rc)
    loss = _softplus(-z).mean()
    g = -_sigmoid(-z) / n  # d/dz of −log σ(z) is −(1 − σ(z)) = −σ(−z)
    grad_c, grad_r = g.copy(), -g
    if center is not None:
        s = rc + rr
        loss += center * np.mean(s ** 2)
        grad_c, grad_r = grad_c + 2 * center * s / n, grad_r + 2 * center * s / n
    return loss, grad_c, grad_r


def _rewards(n, dtype, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    rc = (scale * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    rr = (scale * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    margin = torch.rand(n, generator=g, dtype=torch.float64).mul(3).floor().to(dtype)  # Llama 2 style 0, 1, 2
    return rc, rr, margin


def _loss_and_grads(rm, rc, rr, margin, center):
    rc, rr = rc.clone().requires_grad_(), rr.clone().requires_grad_()
    loss = rm.reward_loss(rc, rr, margin, center)
    loss.backward()
    return loss, rc.grad, rr.grad


# float64: a mean of n softplus values, ~1e-15 relative. float32: ~n ulps of the mean in the worst case.
TOL = {torch.float64: dict(rtol=1e-11, atol=1e-13), torch.float32: dict(rtol=2e-5, atol=1e-7)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("n", [1, 7, 130])
@pytest.mark.parametrize("with_margin, center", [(False, None), (True, None), (False, 0.01), (True, 0.3)],
                         ids=["plain", "margin", "center", "margin+center"])
def test_loss_and_gradient_match_the_closed_form(lesson, dtype, n, with_margin, center):
    rm = lesson.load("reward_model.py")
    rc, rr, margin = _rewards(n, dtype, seed=n + 17 * with_margin)
    margin = margin if with_margin else None
    before = [t.clone() for t in (rc, rr, margin) if t is not None]
    loss, grad_c, grad_r = _loss_and_grads(rm, rc, rr, margin, center)
    want, want_c, want_r = closed_form(rc, rr, margin, center)
    assert loss.dim() == 0 and loss.dtype == dtype, f"loss must be a 0-dim {dtype} tensor, got {loss.shape} {loss.dtype}"
    torch.testing.assert_close(loss.double(), torch.tensor(want), **TOL[dtype], msg="loss value")
    torch.testing.assert_close(grad_c.double(), torch.from_numpy(want_c), **TOL[dtype],
                               msg="gradient w.r.t. r_chosen")
    torch.testing.assert_close(grad_r.double(), torch.from_numpy(want_r), **TOL[dtype],
                               msg="gradient w.r.t. r_rejected")
    after = [t for t in (rc, rr, margin) if t is not None]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True)), "the inputs were modified"
    again, _, _ = _loss_and_grads(rm, rc, rr, margin, center)
    assert torch.equal(again, loss), "a second call gave another value"


def test_zero_margin_and_zero_center_change_nothing(lesson):
    rm = lesson.load("reward_model.py")
    rc, rr, _ = _rewards(9, torch.float64, seed=3)
    plain = rm.reward_loss(rc, rr)
    torch.testing.assert_close(rm.reward_loss(rc, rr, torch.zeros(9, dtype=torch.float64), 0.0), plain,
                               rtol=1e-14, atol=0.0)


@pytest.mark.parametrize("dtype, big", [(torch.float32, 100.0), (torch.float64, 1000.0)], ids=["fp32", "fp64"])
def test_loss_is_finite_and_exact_for_huge_reward_gaps(lesson, dtype, big):
    """log(sigmoid(z)) is -inf once σ(z) rounds to 0 (z ≈ −88 in fp32, −745 in fp64); log1p(exp(−z))
    overflows at the same place. The loss must stay exact there: −log σ(−100) = 100 + 3.7e-44."""
    rm = lesson.load("reward_model.py")
    gaps = torch.tensor([-big, big, -big / 2, big / 2, 0.0, -1.5], dtype=torch.float64)
    rc = (0.25 * gaps).to(dtype)
    rr = (-0.75 * gaps).to(dtype)  # rc − rr = gap exactly (powers of two)
    for margin in (None, torch.tensor([1.0, -2.0, 0.0, 3.0, 0.5, 0.0], dtype=dtype)):
        loss, grad_c, grad_r = _loss_and_grads(rm, rc, rr, margin, None)
        want, want_c, want_r = closed_form(rc, rr, margin)
        assert torch.isfinite(loss), f"loss is {loss.item()} for reward gaps of ±{big:g} ({dtype})"
        assert torch.isfinite(grad_c).all() and torch.isfinite(grad_r).all(), \
            f"gradient not finite for gaps of ±{big:g}: {grad_c.tolist()}"
        torch.testing.assert_close(loss.double(), torch.tensor(want), **TOL[dtype], msg="loss at huge gaps")
        torch.testing.assert_close(grad_c.double(), torch.from_numpy(want_c), **TOL[dtype],
                                   msg="gradient at huge gaps")
        torch.testing.assert_close(grad_r.double(), torch.from_numpy(want_r), **TOL[dtype],
                                   msg="gradient at huge gaps")


def _trl_compute_loss():
    """The statements of TRL's RewardTrainer.compute_loss that assign `loss`, read from the installed source
    (trl cannot be imported here: it needs datasets/accelerate), compiled as they are written."""
    spec = importlib.util.find_spec("trl")  # locates the package without importing it (capability `trl`)
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "reward_trainer.py"
    source = path.read_text()
    fn = next((node for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.FunctionDef) and node.name == "compute_loss"), None)

    def assigns_loss(stmt):
        return any(isinstance(t, ast.Name) and t.id == "loss"
                   for node in ast.walk(stmt) if isinstance(node, (ast.Assign, ast.AugAssign))
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))

    stmts = [s for s in (fn.body if fn else []) if assigns_loss(s)]
    text = "\n".join(ast.get_source_segment(source, s) for s in stmts)
    assert "logsigmoid" in text and "center_rewards_coefficient" in text, f"{path}: not the 1.16.0 loss lines: {text!r}"
    return compile(ast.Module(body=stmts, type_ignores=[]), str(path), "exec"), text


@pytest.mark.requires("trl")
@pytest.mark.parametrize("with_margin, center", [(False, None), (True, None), (True, 0.01)],
                         ids=["plain", "margin", "margin+center"])
def test_loss_equals_trl_reward_trainer(lesson, with_margin, center):
    rm = lesson.load("reward_model.py")
    code, text = _trl_compute_loss()
    rc, rr, margin = _rewards(23, torch.float64, seed=41)
    inputs = {"margin": margin} if with_margin else {}
    scope = {"nn": torch.nn, "torch": torch, "rewards_chosen": rc, "rewards_rejected": rr, "inputs": inputs,
             "self": SimpleNamespace(args=SimpleNamespace(center_rewards_coefficient=center))}
    exec(code, scope)  # TRL's own lines, on our tensors
    got = rm.reward_loss(rc, rr, margin if with_margin else None, center)
    torch.testing.assert_close(got, scope["loss"], rtol=1e-12, atol=0.0, msg=f"TRL computes\n{text}")


def test_accuracy_counts_strict_wins_only(lesson):
    rm = lesson.load("reward_model.py")
    rc = torch.tensor([2.0, 0.5, -1.0, 3.0, 0.0, 7.0, -2.0])
    rr = torch.tensor([1.0, 0.5, -3.0, 4.0, 0.0, 7.0, -2.5])  # wins: 0, 2, 6; ties: 1, 4, 5
    acc = rm.preference_accuracy(rc, rr)
    assert isinstance(acc, float), f"return a Python float, got {type(acc).__name__}"
    assert acc == pytest.approx(3 / 7, abs=1e-12), f"3 strict wins of 7 (ties count as wrong), got {acc}"
    assert rm.preference_accuracy(rc[:1], rr[:1]) == 1.0
    assert rm.preference_accuracy(rr, rc) == pytest.approx(1 / 7, abs=1e-12), "the reverse: only pair 3 wins"


# ---------------------------------------------------------------------------------------------
# Training: a linear reward model must land on the Bradley–Terry MLE (convex), found here by Newton.
# ---------------------------------------------------------------------------------------------

D, N_PAIRS, STEPS, LR = 5, 1499, 200, 2.0


def newton_mle(chosen, rejected, margin, center):
    """argmin over (w, b) of mean softplus(−(w·(c − r) − m)) + center·mean((w·(c + r) + 2b)²), float64.
    Without the centring term b does not enter the loss: returns b = None."""
    x = (chosen - rejected).numpy()
    s = (chosen + rejected).numpy()
    m = np.zeros(len(x)) if margin is None else margin.numpy()
    n, d = x.shape
    a = np.hstack([s, 2 * np.ones((n, 1))])  # the centring term is linear in (w, b)
    theta = np.zeros(d + 1)
    for _ in range(100):
        z = x @ theta[:d] - m
        p = _sigmoid(z)
        grad = np.zeros(d + 1)
        hess = np.zeros((d + 1, d + 1))
        grad[:d] = -(x * (1 - p)[:, None]).mean(0)
        hess[:d, :d] = (x.T * (p * (1 - p))) @ x / n
        if center is None:
            hess[d, d] = 1.0  # b is not identified: keep it at 0
        else:
            t = a @ theta
            grad += 2 * center * (a * t[:, None]).mean(0)
            hess += 2 * center * a.T @ a / n
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-14:
            break
    return theta[:d], (None if center is None else theta[d])


def _linear_problem(rm, seed, with_margin):
    g = torch.Generator().manual_seed(seed)
    w_true = torch.randn(D, generator=g, dtype=torch.float64)
    w_true *= 2.0 / w_true.norm()

    def utility(x):
        return x @ w_true

    chosen, rejected = rm.sample_preferences(N_PAIRS, D, utility, g, dtype=torch.float64)
    margin = rm.graded_margins(utility(chosen) - utility(rejected), scale=1 / 3) if with_margin else None
    model = rm.LinearReward(D, g).double()
    return chosen, rejected, margin, model


@pytest.mark.points(2)
@pytest.mark.parametrize("with_margin, center", [(False, None), (True, None), (False, 0.01)],
                         ids=["plain", "llama2-margin", "trl-center"])
def test_linear_reward_model_reaches_the_newton_mle(lesson, with_margin, center):
    rm = lesson.load("reward_model.py")
    chosen, rejected, margin, model = _linear_problem(rm, seed=2024 + with_margin, with_margin=with_margin)
    data = (chosen.clone(), rejected.clone())
    with torch.no_grad():
        start, _, _ = closed_form(model(chosen), model(rejected), margin, center)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = rm.train_reward_model(model, chosen, rejected, opt, STEPS, margin, center)
    assert torch.equal(chosen, data[0]) and torch.equal(rejected, data[1]), "the training data were modified"
    assert len(losses) == STEPS, f"one loss per step: expected {STEPS}, got {len(losses)}"
    assert losses[0] == pytest.approx(start, rel=1e-12), "losses[0] must be the loss before the first update"
    w_star, b_star = newton_mle(chosen, rejected, margin, center)
    w = model.linear.weight.detach().double().numpy()[0]
    # Gradient descent on this convex, well-conditioned loss converges linearly: after 200 steps the error is
    # ≤ 3e-10 over 60 seeded problems (a reordered float64 variant too); 1e-7 leaves a wide margin.
    err = np.abs(w - w_star).max()
    assert err < 1e-7, (f"trained w = {np.round(w, 6)} is not the Bradley–Terry MLE {np.round(w_star, 6)} "
                        f"(max error {err:.2e})")
    if b_star is not None:  # the centring term makes the bias identifiable
        b = model.linear.bias.item()
        assert abs(b - b_star) < 1e-7, f"with the centring term the bias must reach {b_star:.6f}, got {b:.6f}"
    shift = 0.0 if b_star is None else b_star
    best, _, _ = closed_form(chosen.numpy() @ w_star + shift, rejected.numpy() @ w_star + shift, margin, center)
    assert losses[-1] == pytest.approx(best, rel=1e-9), "the last loss must be the minimum of the BT loss"


# ---------------------------------------------------------------------------------------------
# Training: a small MLP on a nonlinear utility must rank and be calibrated on held-out pairs.
# ---------------------------------------------------------------------------------------------

IDEAL = torch.tensor([0.8, -0.5, 0.0, 0.3], dtype=torch.float64)


def ideal_point_utility(x):
    """u(x) = −‖x − c‖²: the best answer is neither too short nor too long, not linear in x."""
    return -((x - IDEAL) ** 2).sum(-1)


def held_out_metrics(rm, seed, n_train=4000, steps=300):
    """Train an MLP reward model with Adam; returns (accuracy vs the true utility's ranking on held-out
    pairs, held-out NLL minus the NLL of the true utility on the same labelled pairs, training losses)."""
    d = IDEAL.numel()
    g = torch.Generator().manual_seed(seed)
    chosen, rejected = rm.sample_preferences(n_train, d, ideal_point_utility, g)
    model = rm.MLPReward(d, 16, g)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = rm.train_reward_model(model, chosen, rejected, opt, steps)
    test_c, test_r = rm.sample_preferences(4000, d, ideal_point_utility, torch.Generator().manual_seed(seed + 1),
                                           dtype=torch.float64)
    with torch.no_grad():
        gap = (model(test_c.float()) - model(test_r.float())).double()
    true_gap = ideal_point_utility(test_c) - ideal_point_utility(test_r)
    accuracy = ((gap > 0) == (true_gap > 0)).double().mean().item()
    excess_nll = (-F.logsigmoid(gap).mean() + F.logsigmoid(true_gap).mean()).item()
    return accuracy, excess_nll, losses


MLP_SEED = 101
ACCURACY_BOUND, EXCESS_NLL_BOUND = 0.94, 0.04


@pytest.mark.points(2)
def test_mlp_reward_model_ranks_and_is_calibrated_on_held_out_pairs(lesson):
    rm = lesson.load("reward_model.py")
    accuracy, excess_nll, losses = held_out_metrics(rm, MLP_SEED)
    assert len(losses) == 300 and all(np.isfinite(losses)), "one finite loss per step"
    # Over 84 data/init seeds the reference reaches accuracy ≥ 0.952 and excess NLL ≤ 0.029; a flipped sign,
    # σ instead of log σ, pointwise BCE/MSE on labels (excess NLL ≥ 0.057), a detached rejected score or
    # uncleared gradients fail at least one bound on every seed tried (README).
    assert accuracy > ACCURACY_BOUND, (f"held-out ranking accuracy {accuracy:.4f} ≤ {ACCURACY_BOUND} "
                                       f"(agreement with the true utility)")
    assert excess_nll < EXCESS_NLL_BOUND, (f"held-out −log σ(Δr) exceeds the true utility's by {excess_nll:.4f} "
                                           f"≥ {EXCESS_NLL_BOUND}: the rewards rank but are not calibrated "
                                           f"Bradley–Terry log-odds")
