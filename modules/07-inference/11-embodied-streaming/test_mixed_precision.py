"""Tests for infer-11 (b): sensitivity analysis and precision assignment under an error budget.

References: brute force over every assignment (small cases), an independent dynamic program over integer
costs (40 layers), and the real output error of a small MLP whose layers are fake-quantized to the chosen
formats. Synthetic errors are multiples of 1/64 and costs are integers, so every sum is exact in float64
and a budget equal to an achievable sum is met exactly (the budget is inclusive).
"""

import copy

import numpy as np
import pytest
import torch
from torch import nn


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: thread hand-offs dominate on a loaded 2-core runner
    yield
    torch.set_num_threads(threads)


def _brute_force(err, cost, budget):
    """Least total cost over every assignment whose total error (summed in layer order) is <= budget."""
    n, nf = err.shape
    choices = np.indices((nf,) * n).reshape(n, -1).T  # every assignment, one row each
    e = np.zeros(len(choices))
    for i in range(n):  # in layer order, as the checks below sum
        e = e + err[i, choices[:, i]]
    c = cost[np.arange(n), choices].sum(axis=1)
    return float(c[e <= budget].min()) if (e <= budget).any() else None


def _check(choice, err, cost, budget, best_cost):
    if best_cost is None:
        assert choice is None, f"no assignment meets budget {budget}, got {choice}"
        return
    assert choice is not None and len(choice) == err.shape[0], f"budget {budget}: expected an assignment"
    e = sum(float(err[i, f]) for i, f in enumerate(choice))
    c = sum(float(cost[i, f]) for i, f in enumerate(choice))
    assert e <= budget, f"budget {budget} exceeded: total error {e} ({choice})"
    assert c == best_cost, f"budget {budget}: cost {c} but {best_cost} is achievable ({choice})"


@pytest.mark.points(4)
def test_assignment_is_optimal_against_brute_force(lesson):
    mod = lesson.load("mixed_precision.py")
    rng = np.random.default_rng(11)
    for _ in range(60):
        n, nf = int(rng.integers(1, 7)), int(rng.integers(2, 5))
        err = rng.integers(0, 40, size=(n, nf)) / 64.0
        cost = rng.integers(1, 30, size=(n, nf)).astype(float)
        exact = sum(err[i, rng.integers(nf)] for i in range(n))  # met exactly by some assignment
        for budget in (exact, float(rng.uniform(0, err.sum())), err.min(axis=1).sum() - 1 / 64, 0.0):
            _check(mod.assign_precision(err, cost, budget), err, cost, budget, _brute_force(err, cost, budget))


def _dp_over_cost(err, cost, budget):
    """Minimum total cost with total error <= budget, by DP over exact integer total cost."""
    reach = {0: 0.0}  # total cost -> least total error reaching it
    for i in range(err.shape[0]):
        nxt = {}
        for c, e in reach.items():
            for f in range(err.shape[1]):
                cc, ee = c + int(cost[i, f]), e + float(err[i, f])
                if ee < nxt.get(cc, float("inf")):
                    nxt[cc] = ee
        reach = nxt
    feasible = [c for c, e in reach.items() if e <= budget]
    return float(min(feasible)) if feasible else None


@pytest.mark.points(2)
def test_forty_layers(lesson):
    # 4^40 assignments: only an exact DP (or branch and bound) answers this in time; 6.0 is infeasible
    mod = lesson.load("mixed_precision.py")
    rng = np.random.default_rng(12)
    err = rng.integers(0, 48, size=(40, 4)) / 64.0  # some formats are dominated (costlier and worse)
    cost = rng.integers(1, 9, size=(40, 4)).astype(float)
    # least possible error 426/64; greedy by error-per-byte misses the optimum at the first two budgets
    for budget in (6.0, 442 / 64, 522 / 64, 12.0):
        _check(mod.assign_precision(err, cost, budget), err, cost, budget, _dp_over_cost(err, cost, budget))


def _mlp(seed):
    torch.manual_seed(seed)
    dims = [24, 48, 40, 56, 32, 12]
    layers = []
    for i in range(len(dims) - 1):
        layers += [nn.Linear(dims[i], dims[i + 1])] + ([nn.GELU()] if i < len(dims) - 2 else [])
    return nn.Sequential(*layers).double().requires_grad_(False)


def _one_at_a_time(mod, model, x, formats=None):
    """err[l, f] measured on fresh copies of the model (never touches the original)."""
    formats = mod.FORMATS if formats is None else formats
    y = model(x)
    n = len(mod.quant_layers(model))
    err = np.zeros((n, len(formats)))
    for li in range(n):
        for fi, fmt in enumerate(formats):
            m2 = copy.deepcopy(model)
            layer = mod.quant_layers(m2)[li]
            layer.weight.data = mod.fake_quant(layer.weight.data, fmt)
            err[li, fi] = mod.relative_error(m2(x), y)
    return err


@pytest.mark.points(4)
def test_real_model_meets_the_budget(lesson):
    mod = lesson.load("mixed_precision.py")
    model = _mlp(0)
    x = torch.randn(256, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    err = mod.measure_sensitivity(model, x)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"measure_sensitivity left {k} modified"
    np.testing.assert_allclose(err, _one_at_a_time(mod, model, x), rtol=1e-9, atol=1e-15)
    subset = ("int4", "bf16")  # the formats argument, in its own order (not a prefix of FORMATS)
    np.testing.assert_allclose(mod.measure_sensitivity(model, x, subset), _one_at_a_time(mod, model, x, subset),
                               rtol=1e-9, atol=1e-15, err_msg=f"measure_sensitivity(model, x, {subset})")
    cost = mod.layer_costs(model)
    y = model(x)
    cheapest = copy.deepcopy(model)
    mod.apply_formats(cheapest, [len(mod.FORMATS) - 1] * err.shape[0])  # every layer int4
    for budget in (0.002, 0.004, 0.008):
        assert mod.relative_error(cheapest(x), y) > budget  # the budget binds
        choice = mod.assign_precision(err, cost, budget)
        _check(choice, err, cost, budget, _brute_force(err, cost, budget))
        quantized = copy.deepcopy(model)
        mod.apply_formats(quantized, choice)
        assert mod.relative_error(quantized(x), y) <= budget, f"measured error over budget {budget} ({choice})"
