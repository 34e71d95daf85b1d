"""Tests for infer-07: speculative sampling (accept/reject, resample, bonus) and the draft/verify loop.

Oracles: a per-row float64 loop that follows Leviathan et al. (ICML 2023) Algorithm 1 literally; the target
distribution itself (chi-square goodness of fit, fixed seeds); the closed form E[tokens per step] =
(1 - alpha^(G+1)) / (1 - alpha) with alpha = sum(min(p, q)); greedy decoding of the target for temperature 0.
Chi-square p-values come from torch.special.gammaincc (survival function of chi2 with k dof = Q(k/2, x/2)).
"""

import math

import numpy as np
import pytest
import torch

SIGNIFICANCE = 1e-4  # per chi-square test; the seeds are fixed, so the reference passes deterministically


@pytest.fixture
def sd(lesson):
    return lesson.load("spec_decode.py")


@pytest.mark.points(1)
def test_sampled_generation_takes_all_randomness_from_gen(sd):
    """The contract hands in `gen`: the same gen seed must give the same tokens whatever the global torch RNG
    holds (drafts, u and v all come from gen), and another gen seed must give other tokens."""
    V, gamma, max_new = 7, 3, 24
    g0 = torch.Generator().manual_seed(77)
    t_table = torch.randn(V, V, generator=g0, dtype=torch.float64)
    d_table = torch.randn(V, V, generator=g0, dtype=torch.float64)
    prompt = torch.tensor([2, 5], dtype=torch.int64)
    saved = torch.get_rng_state()
    try:
        runs = {}
        for global_seed, gen_seed in [(1, 5), (2, 5), (1, 6)]:
            torch.manual_seed(global_seed)  # a different global RNG state must not matter
            out, steps = sd.speculative_generate(Bigram(t_table), Bigram(d_table), prompt, max_new, gamma, 1.0,
                                                 torch.Generator().manual_seed(gen_seed))
            runs[global_seed, gen_seed] = (out.tolist(), steps)
    finally:
        torch.set_rng_state(saved)
    assert prompt.tolist() == [2, 5], "speculative_generate modified the caller's prompt"
    assert runs[1, 5] == runs[2, 5], (
        "same gen seed, different global torch seed, different output: some randomness (draft sampling or the "
        "uniforms u, v) does not come from the generator the contract hands in")
    assert runs[1, 5][0] != runs[1, 6][0], "two gen seeds gave the same tokens: the generator is not used"


def dist(gen, v, zeros=()):
    w = torch.rand(v, generator=gen, dtype=torch.float64) ** 2 + 0.02
    w[list(zeros)] = 0.0
    return w / w.sum()


def draw(gen, probs, n):
    """n independent draws from each distribution of probs [..., V] -> [n, ...] (test-side sampler)."""
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, n, replacement=True, generator=gen).T
    return out.reshape(n, *probs.shape[:-1])


def ref_verify(draft, q, p, u, v):
    """Per-row loop, float64 numpy: the algorithm as the paper writes it."""
    B, G = draft.shape
    toks = np.full((B, G + 1), -1, dtype=np.int64)
    ns = np.zeros(B, dtype=np.int64)

    def inv_cdf(w, r):
        c = np.cumsum(w)
        return min(int(np.searchsorted(c, r * c[-1], side="right")), len(w) - 1)

    for b in range(B):
        for i in range(G):
            x = int(draft[b, i])
            if u[b, i] < min(1.0, p[b, i, x] / q[b, i, x]):
                toks[b, i] = x
                continue
            toks[b, i] = inv_cdf(np.maximum(p[b, i] - q[b, i], 0.0), v[b, i])
            ns[b] = i + 1
            break
        else:
            toks[b, G] = inv_cdf(p[b, G], v[b, G])
            ns[b] = G + 1
    return toks, ns


def counting(sd, monkeypatch):
    calls = []
    real = sd.sample_categorical

    def wrapped(weights, v):
        calls.append(tuple(weights.shape))
        return real(weights, v)

    monkeypatch.setattr(sd, "sample_categorical", wrapped)
    return calls


def random_case(gen, B, G, V):
    """Rows of every kind: generic, q has mass where p has none, p has mass where q has none, p == q, disjoint."""
    q = torch.empty(B, G, V, dtype=torch.float64)
    p = torch.empty(B, G + 1, V, dtype=torch.float64)
    for b in range(B):
        kind = b % 5
        for i in range(G + 1):
            pz = (0, 1) if kind in (1, 4) else ()
            p[b, i] = dist(gen, V, pz)
            if i == G:
                continue
            if kind == 3:
                q[b, i] = p[b, i]
            elif kind == 4:
                q[b, i] = dist(gen, V, range(2, V))  # q lives exactly where p has none
            else:
                q[b, i] = dist(gen, V, (V - 1, V - 2) if kind == 2 else ())
    draft = draw(gen, q, 1)[0]
    u = torch.rand(B, G, generator=gen, dtype=torch.float64)
    v = torch.rand(B, G + 1, generator=gen, dtype=torch.float64)
    return draft, q, p, u, v


@pytest.mark.points(2)
@pytest.mark.parametrize("B,G,V", [(41, 1, 7), (53, 4, 13), (1, 6, 5)])
def test_verify_equals_the_per_row_algorithm_in_one_batched_pass(sd, monkeypatch, B, G, V):
    gen = torch.Generator().manual_seed(1000 + 7 * G + V)
    draft, q, p, u, v = random_case(gen, B, G, V)
    args = [t.clone() for t in (draft, q, p, u, v)]
    calls = counting(sd, monkeypatch)
    toks, n = sd.verify(*args)
    for a, t in zip(args, (draft, q, p, u, v)):
        assert torch.equal(a, t), "verify modified one of its inputs"
    assert toks.dtype == torch.int64 and tuple(toks.shape) == (B, G + 1), (toks.dtype, tuple(toks.shape))
    assert n.dtype == torch.int64 and tuple(n.shape) == (B,), (n.dtype, tuple(n.shape))
    want_t, want_n = ref_verify(*(t.numpy() for t in (draft, q, p, u, v)))
    for b in range(B):
        assert int(n[b]) == want_n[b] and toks[b].tolist() == want_t[b].tolist(), (
            f"row {b} (kind {b % 5}: 0 generic, 1 p has zeros, 2 q has zeros, 3 p == q, 4 disjoint): "
            f"got {toks[b].tolist()} n={int(n[b])}, want {want_t[b].tolist()} n={want_n[b]}")
    assert 1 <= len(calls) <= 2, (
        f"sample_categorical was called {len(calls)} times for B = {B}: sample the whole batch in one or two "
        "calls (a loop over rows or positions is the slow path this lesson replaces)")


def chi2_pvalue(counts, probs):
    """Goodness of fit of integer counts to probs (cells with probs == 0 must be empty)."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    if counts[probs == 0].sum() > 0:
        return 0.0
    live = probs > 0
    n = counts.sum()
    if live.sum() < 2:
        return 1.0
    exp = n * probs[live]
    stat = float(((counts[live] - exp) ** 2 / exp).sum())
    k = int(live.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(k / 2.0, dtype=torch.float64),
                                         torch.tensor(stat / 2.0, dtype=torch.float64)))


def scenario(name, gen, G, V):
    ps = [dist(gen, V) for _ in range(G + 1)]
    if name == "generic":
        qs = [dist(gen, V) for _ in range(G)]
    elif name == "q_where_p_is_zero":
        ps = [dist(gen, V, (0, 1)) for _ in range(G + 1)]
        qs = [dist(gen, V) for _ in range(G)]
    elif name == "p_where_q_is_zero":
        qs = [dist(gen, V, (V - 1, V - 2, V - 3)) for _ in range(G)]
    elif name == "p_equals_q":
        qs = [x.clone() for x in ps[:G]]
    else:  # disjoint supports: every draft is rejected
        ps = [dist(gen, V, range(V // 2)) for _ in range(G + 1)]
        qs = [dist(gen, V, range(V // 2, V)) for _ in range(G)]
    return torch.stack(qs), torch.stack(ps)


@pytest.mark.points(2)
@pytest.mark.parametrize("name", ["generic", "q_where_p_is_zero", "p_where_q_is_zero", "p_equals_q", "disjoint"])
def test_every_emitted_position_follows_the_target_distribution(sd, name):
    G, V, N = 3, 6, 20000
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    q1, p1 = scenario(name, gen, G, V)
    q, p = q1.expand(N, G, V).contiguous(), p1.expand(N, G + 1, V).contiguous()
    draft = draw(gen, q1, N)
    u = torch.rand(N, G, generator=gen, dtype=torch.float64)
    v = torch.rand(N, G + 1, generator=gen, dtype=torch.float64)
    toks, n = sd.verify(draft, q, p, u, v)
    assert int(n.min()) >= 1 and int(n.max()) <= G + 1, (int(n.min()), int(n.max()))
    pos = torch.arange(G + 1)
    assert bool(((toks >= 0) == (pos < n.unsqueeze(1))).all()), "slots >= n must be PLACEHOLDER, slots < n tokens"
    if name == "p_equals_q":
        assert bool((n == G + 1).all()), "p == q: every draft must be accepted (acceptance probability 1)"
    if name == "disjoint":
        assert bool((n == 1).all()), "q and p have disjoint supports: the first draft is always rejected"
    for i in range(G + 1):
        col = toks[n > i, i].numpy()
        if len(col) == 0:
            continue
        counts = np.bincount(col, minlength=V)
        pv = chi2_pvalue(counts, p1[i].numpy())
        assert pv > SIGNIFICANCE, (
            f"[{name}] position {i}: emitted tokens do not follow the target p_{i} (chi-square p = {pv:.2e}, "
            f"{len(col)} samples)\n  counts   {counts.tolist()}\n  expected {np.round(p1[i].numpy() * len(col)).tolist()}")


@pytest.mark.points(1)
@pytest.mark.parametrize("G", [1, 3, 5])
def test_acceptance_rate_and_tokens_per_step_match_the_closed_form(sd, G):
    V, N = 9, 30000
    gen = torch.Generator().manual_seed(70 + G)
    p1, q1 = dist(gen, V, (0,)), dist(gen, V, (V - 1,))
    alpha = float(torch.minimum(p1, q1).sum())
    q = q1.expand(N, G, V).contiguous()
    p = p1.expand(N, G + 1, V).contiguous()
    draft = draw(gen, q, 1)[0]
    u = torch.rand(N, G, generator=gen, dtype=torch.float64)
    v = torch.rand(N, G + 1, generator=gen, dtype=torch.float64)
    _, n = sd.verify(draft, q, p, u, v)
    n = n.to(torch.float64)
    want = (1 - alpha ** (G + 1)) / (1 - alpha)
    tol = 5 * float(n.std()) / math.sqrt(N)  # 5 standard errors
    assert abs(float(n.mean()) - want) < tol, (
        f"G = {G}, alpha = {alpha:.4f}: mean tokens per step {float(n.mean()):.4f}, "
        f"the closed form (1 - alpha^(G+1)) / (1 - alpha) gives {want:.4f} (tolerance {tol:.4f})")
    reached_first = float((n >= 2).to(torch.float64).mean())
    assert abs(reached_first - alpha) < 5 * math.sqrt(alpha * (1 - alpha) / N), (
        f"acceptance rate of the first draft {reached_first:.4f}, want alpha = sum(min(p, q)) = {alpha:.4f}")


class Bigram:
    """A toy language model: next-token logits depend on the last token only; counts its calls."""

    def __init__(self, table):
        self.table = table
        self.calls = 0
        self.lengths = []

    def __call__(self, tokens):
        self.calls += 1
        self.lengths.append(int(tokens.numel()))
        return self.table[tokens].clone()


def greedy_decode(table, prompt, n):
    seq = prompt.tolist()
    for _ in range(n):
        seq.append(int(table[seq[-1]].argmax()))
    return seq[len(prompt):]


@pytest.mark.points(2)
@pytest.mark.parametrize("gamma", [1, 3, 4])
def test_greedy_generation_equals_target_argmax_with_one_target_call_per_step(sd, gamma):
    V, max_new = 11, 23
    gen = torch.Generator().manual_seed(300 + gamma)
    t_table = torch.randn(V, V, generator=gen, dtype=torch.float64) * 3
    d_table = t_table + torch.randn(V, V, generator=gen, dtype=torch.float64) * 2  # agrees often, not always
    prompt = torch.tensor([3, 7, 2], dtype=torch.int64)
    want = greedy_decode(t_table, prompt, max_new)
    for name, dt in [("similar draft", d_table), ("perfect draft", t_table), ("useless draft", -t_table)]:
        target, draft = Bigram(t_table), Bigram(dt)
        out, steps = sd.speculative_generate(target, draft, prompt.clone(), max_new, gamma, 0.0, gen)
        assert out.tolist() == want, f"[{name}, gamma {gamma}] temperature 0 must reproduce target greedy decoding"
        assert target.calls == steps, f"[{name}] {target.calls} target calls but {steps} steps reported"
        assert draft.calls <= gamma * steps, f"[{name}] {draft.calls} draft calls for {steps} steps of gamma {gamma}"
        if name == "perfect draft":
            assert steps == math.ceil(max_new / (gamma + 1)), (
                f"a draft equal to the target is always accepted: {max_new} tokens need "
                f"{math.ceil(max_new / (gamma + 1))} target calls with gamma {gamma}, you made {steps}")
        if name == "useless draft":
            assert steps == max_new, f"every draft rejected: one token per step, {max_new} steps, you made {steps}"


@pytest.mark.points(1)
def test_sampled_generation_follows_the_target_chain(sd):
    V, gamma, runs, max_new = 3, 2, 700, 3
    gen = torch.Generator().manual_seed(4242)
    t_table = torch.randn(V, V, generator=gen, dtype=torch.float64) * 1.5
    d_table = torch.randn(V, V, generator=gen, dtype=torch.float64)
    prompt = torch.tensor([1], dtype=torch.int64)
    P = torch.softmax(t_table, dim=-1).numpy()
    outs = []
    for _ in range(runs):
        out, _ = sd.speculative_generate(Bigram(t_table), Bigram(d_table), prompt, max_new, gamma, 1.0, gen)
        assert out.numel() == max_new
        outs.append(out.tolist())
    outs = np.array(outs)
    joint = P[1][:, None] * P  # P(x0, x1)
    cells = (outs[:, 0] * V + outs[:, 1])
    pv = chi2_pvalue(np.bincount(cells, minlength=V * V), joint.reshape(-1))
    assert pv > SIGNIFICANCE, f"joint law of the first two generated tokens differs from the target (p = {pv:.2e})"
    third = P[1] @ P @ P
    pv = chi2_pvalue(np.bincount(outs[:, 2], minlength=V), third)
    assert pv > SIGNIFICANCE, f"marginal law of the third generated token differs from the target (p = {pv:.2e})"

