"""Tests for train-15.

References written here, independent of the lesson file:
- `_brute_force`: every way to cut n layers into p contiguous non-empty stages (small n), with the
  memory rule of the lesson re-derived here (weights + min(p - s, m) * activations);
- `_ref_time`: 1F1B as a discrete-event simulation that advances stage by stage in rounds (no recursion);
- the closed form T = sum_{s<p-1}(f_s + b_s) + m * (f_{p-1} + b_{p-1}), exact when the last stage is the
  slowest one (then it equals (m - 1) * max_s(f_s + b_s) + sum_s(f_s + b_s)).
Times are multiples of 1/4 ms and memory multiples of 1/8 GB, so every sum is exact in float64; the
comparisons still allow 1e-9 for a different summation order.
"""

import itertools
import math
import random

import pytest


def _layers(hp, n, rng, mem=False):
    out = []
    for i in range(n):
        f = rng.randint(1, 24) / 4
        b = rng.choice([2 * f, rng.randint(1, 40) / 4])
        act = rng.randint(1, 16) / 8 if mem else 0.0
        w = rng.randint(1, 24) / 8 if mem else 0.0
        out.append(hp.Layer(f"l{i}", f, b, act, w))
    return out


def _cost(layers, sizes):
    i, worst = 0, 0.0
    for n in sizes:
        worst = max(worst, sum(x.t_f + x.t_b for x in layers[i:i + n]))
        i += n
    return worst


def _mem_ok(layers, sizes, p, m, budget):
    i = 0
    for s, n in enumerate(sizes):
        seg = layers[i:i + n]
        if sum(x.weight for x in seg) + min(p - s, m) * sum(x.act for x in seg) > budget + 1e-9:
            return False
        i += n
    return True


def _brute_force(layers, p, m, budget=math.inf):
    n, best = len(layers), math.inf
    for cuts in itertools.combinations(range(1, n), p - 1):
        b = [0, *cuts, n]
        sizes = [b[k + 1] - b[k] for k in range(p)]
        if _mem_ok(layers, sizes, p, m, budget):
            best = min(best, _cost(layers, sizes))
    return best


def _check_sizes(sizes, n, p):
    sizes = list(sizes)
    assert len(sizes) == p, f"{len(sizes)} stages for p = {p}"
    assert all(isinstance(k, int) and k >= 1 for k in sizes), f"empty or non-integer stage in {sizes}"
    assert sum(sizes) == n, f"stages hold {sum(sizes)} layers, the model has {n}: every layer exactly once"
    return sizes


def _ref_time(f, b, m):
    """1F1B event simulation: stage s runs its op list in order; rounds until all lists are done."""
    p = len(f)
    lists = []
    for s in range(p):
        w = min(p - s - 1, m)
        ops = [("F", i) for i in range(w)]
        for i in range(w, m):
            ops += [("F", i), ("B", i - w)]
        lists.append(ops + [("B", i) for i in range(m - w, m)])
    done, nxt, free = {}, [0] * p, [0.0] * p
    while any(nxt[s] < len(lists[s]) for s in range(p)):
        moved = False
        for s in range(p):
            if nxt[s] == len(lists[s]):
                continue
            kind, i = lists[s][nxt[s]]
            dep = (s - 1, "F", i) if kind == "F" and s > 0 else (s + 1, "B", i) if kind == "B" and s < p - 1 \
                else (s, "F", i) if kind == "B" else None
            if dep is not None and dep not in done:
                continue
            t = max(free[s], done[dep] if dep else 0.0) + (f[s] if kind == "F" else b[s])
            done[(s, kind, i)] = free[s] = t
            nxt[s] += 1
            moved = True
        assert moved, "reference 1F1B order deadlocked (test bug)"
    return max(free)


@pytest.mark.points(1)
def test_partition_is_optimal_contiguous_and_complete(lesson):
    hp = lesson.load("hetero_pp.py")
    rng = random.Random(1515)
    for trial in range(60):
        n = rng.randint(1, 10)
        p = rng.randint(1, min(n, 5)) if trial % 7 else n  # includes p == n (one layer per stage)
        layers = _layers(hp, n, rng)
        sizes = _check_sizes(hp.partition(layers, p, m=8), n, p)
        want = _brute_force(layers, p, 8)
        assert _cost(layers, sizes) == pytest.approx(want, abs=1e-9), f"n={n} p={p}: not the smallest bottleneck"
    with pytest.raises(ValueError):
        hp.partition(_layers(hp, 3, rng), 4, m=8)


@pytest.mark.points(1)
def test_partition_respects_the_1f1b_memory_of_each_stage(lesson):
    hp = lesson.load("hetero_pp.py")
    rng = random.Random(2929)
    binding = 0
    for _ in range(40):
        n, m = rng.randint(3, 10), rng.randint(1, 6)
        p = rng.randint(2, min(n, 5))
        layers = _layers(hp, n, rng, mem=True)
        # a budget among the stage peaks of all partitions: from the tightest feasible one to no limit
        budgets = sorted({_stage_peak(layers, sz, p, m) for sz in _all_sizes(n, p)})
        budget = budgets[rng.randrange(len(budgets))]
        want = _brute_force(layers, p, m, budget)
        sizes = _check_sizes(hp.partition(layers, p, m, budget), n, p)
        assert _mem_ok(layers, sizes, p, m, budget), f"stage over budget {budget} GB: {sizes}"
        assert _cost(layers, sizes) == pytest.approx(want, abs=1e-9), f"not optimal under budget {budget}"
        binding += want > _brute_force(layers, p, m)
    assert binding >= 8, "test bug: the budget should change the optimum in many cases"
    with pytest.raises(ValueError):
        hp.partition(layers, p, m, min(budgets) - 0.125)


# (t_f, t_b, act, weight) per layer, p, m, budget: a layer with large activations that fits only on a late
# stage (small multiplier min(p - s, m)). Packing stages greedily from the FRONT pushes it onto a stage whose
# multiplier is too large (or leaves a later stage empty) at every bottleneck value, although a partition exists.
_STAGE_INDEX_TRAPS = [
    ([(1, 1, .1, .1), (1, 1, .1, .1), (1, 1, 3, .1), (1, 1, .1, .1)], 3, 3, 3.5),  # optimum [1, 1, 2]
    ([(2.0, 1.0, 0.125, 0.375), (1.0, 1.5, 0.125, 0.125), (2.0, 2.0, 2.0, 0.25), (0.5, 1.0, 0.125, 0.25)], 3, 2, 2.625),
    ([(0.5, 1.0, 0.125, 0.5), (1.5, 1.5, 0.125, 0.25), (2.0, 0.5, 1.0, 0.375), (1.5, 1.5, 0.125, 0.25)], 3, 3, 1.75),
    ([(2.0, 1.0, 0.125, 0.125), (1.5, 1.0, 0.125, 0.5), (0.5, 0.5, 0.125, 0.5), (0.5, 2.0, 1.0, 0.5),
      (1.5, 2.0, 0.125, 0.375)], 4, 2, 2.0),
    ([(1.0, 1.5, 0.125, 0.125), (1.5, 2.0, 0.125, 0.25), (0.5, 0.5, 2.0, 0.375), (1.5, 2.0, 0.125, 0.5),
      (2.0, 1.0, 1.0, 0.5)], 4, 4, 4.375),
    ([(1.5, 1.0, 0.125, 0.375), (0.5, 1.5, 0.125, 0.25), (1.0, 0.5, 2.0, 0.125), (0.5, 0.5, 0.125, 0.125),
      (2.0, 1.0, 0.125, 0.375)], 3, 3, 2.875),
    ([(1.0, 2.0, 0.125, 0.5), (0.5, 1.5, 0.125, 0.375), (2.0, 2.0, 1.0, 0.5), (1.5, 1.0, 2.0, 0.25),
      (1.5, 1.0, 1.0, 0.25), (1.0, 1.0, 0.125, 0.125), (0.5, 1.5, 0.125, 0.125)], 3, 2, 4.0),
    ([(0.5, 1.5, 0.125, 0.5), (1.5, 1.0, 0.125, 0.375), (1.0, 0.5, 0.125, 0.375), (1.0, 0.5, 1.0, 0.25),
      (1.5, 2.0, 2.0, 0.125), (2.0, 0.5, 0.125, 0.5)], 4, 4, 2.875),
    ([(1.0, 2.0, 0.125, 0.375), (0.5, 1.5, 1.0, 0.375), (0.5, 1.5, 1.0, 0.125), (1.0, 1.5, 0.125, 0.125),
      (2.0, 0.5, 2.0, 0.5), (2.0, 1.0, 0.125, 0.25), (2.0, 1.5, 1.0, 0.125)], 4, 2, 4.25),
]


@pytest.mark.points(1)
def test_partition_memory_depends_on_the_stage_index(lesson):
    """Exact under a budget, also where a front-to-back greedy (bisection + fill each stage from stage 0)
    finds nothing: the memory multiplier of a layer depends on the stage it lands on."""
    hp = lesson.load("hetero_pp.py")
    for spec, p, m, budget in _STAGE_INDEX_TRAPS:
        layers = [hp.Layer(f"l{i}", *x) for i, x in enumerate(spec)]
        want = _brute_force(layers, p, m, budget)
        assert want < math.inf, "test bug: the crafted case must be feasible"
        try:
            sizes = hp.partition(layers, p, m, budget)
        except ValueError:
            pytest.fail(f"p={p} m={m} budget={budget}: ValueError, but a partition with bottleneck {want} fits "
                        f"(layers {spec})")
        sizes = _check_sizes(sizes, len(layers), p)
        assert _mem_ok(layers, sizes, p, m, budget), f"stage over budget {budget} GB: {sizes}"
        assert _cost(layers, sizes) == pytest.approx(want, abs=1e-9), f"{sizes} is not optimal under budget {budget}"


def _all_sizes(n, p):
    for cuts in itertools.combinations(range(1, n), p - 1):
        b = [0, *cuts, n]
        yield [b[k + 1] - b[k] for k in range(p)]


def _stage_peak(layers, sizes, p, m):
    i, peak = 0, 0.0
    for s, k in enumerate(sizes):
        seg = layers[i:i + k]
        peak = max(peak, sum(x.weight for x in seg) + min(p - s, m) * sum(x.act for x in seg))
        i += k
    return peak


@pytest.mark.points(1)
def test_iteration_time_matches_event_simulation_and_closed_form(lesson):
    hp = lesson.load("hetero_pp.py")
    rng = random.Random(77)
    for _ in range(80):
        p, m = rng.randint(1, 6), rng.randint(1, 12)
        f = [rng.randint(1, 32) / 4 for _ in range(p)]
        b = [rng.choice([2 * x, rng.randint(1, 64) / 4]) for x in f]
        got = hp.iteration_time(f, b, m)
        assert got == pytest.approx(_ref_time(f, b, m), abs=1e-9), (f, b, m)
    for _ in range(30):  # the last stage is the slowest: closed form
        p, m = rng.randint(2, 6), rng.randint(1, 12)
        f = [rng.randint(1, 16) / 4 for _ in range(p)]
        b = [2 * x for x in f]
        f[-1], b[-1] = max(f) + 1.0, max(b) + 2.0
        want = sum(f[:-1]) + sum(b[:-1]) + m * (f[-1] + b[-1])
        assert hp.iteration_time(f, b, m) == pytest.approx(want, abs=1e-9), (f, b, m)
    for p, m in [(4, 8), (5, 3), (1, 6)]:  # equal stages: (m + p - 1)(f + b), bubble (p - 1)/(m + p - 1)
        assert hp.iteration_time([1.5] * p, [3.0] * p, m) == pytest.approx((m + p - 1) * 4.5)


def _vlm(hp):
    """A vision-language model profile (ms per microbatch, GB): 32 ViT layers, a projector, 28 LLM layers
    (the first one holds the embedding), the LM head with its vocab-sized logits."""
    vit = [hp.Layer(f"vit{i}", 1.6, 3.2, 0.5, 0.2) for i in range(32)]
    proj = [hp.Layer("projector", 0.4, 0.8, 0.1, 0.2)]
    llm = [hp.Layer(f"llm{i}", 5.0, 10.0, 0.6, 3.2) for i in range(28)]
    head = [hp.Layer("lm_head", 9.0, 18.0, 2.4, 10.0)]
    return vit + proj + llm + head


@pytest.mark.points(1)
@pytest.mark.timeout(60)
def test_balanced_split_beats_naive_splits_on_a_vlm(lesson):
    hp = lesson.load("hetero_pp.py")
    layers, p, m = _vlm(hp), 8, 24
    n = len(layers)

    def t_of(sizes):
        return _ref_time(*hp.stage_times(layers, sizes), m)

    equal = [n // p + (s < n % p) for s in range(p)]  # equal layer counts
    rest = n - 33
    vision0 = [33] + [rest // (p - 1) + (s < rest % (p - 1)) for s in range(p - 1)]  # ViT + projector alone
    sizes = _check_sizes(hp.partition(layers, p, m), n, p)
    assert _cost(layers, sizes) == pytest.approx(76.8, abs=1e-9)  # the optimum bottleneck (DP, checked)
    # 2355.6 ms vs 3343.8 ms (equal layers) and 3801.0 ms (vision alone on stage 0)
    assert t_of(sizes) <= 0.75 * t_of(equal), "not at least 25% faster than equal layer counts"
    assert t_of(sizes) <= 0.65 * t_of(vision0), "not at least 35% faster than the vision encoder alone on stage 0"
    capped = _check_sizes(hp.partition(layers, p, m, 60.0), n, p)
    assert _mem_ok(layers, capped, p, m, 60.0), f"a stage exceeds 60 GB: {capped}"
    assert _cost(layers, capped) == pytest.approx(85.8, abs=1e-9)
