"""Tests for rl-01. Independent references, all numpy float64:
- V* of a small MDP (|S| <= 6, |A| <= 3): every deterministic policy evaluated by a linear solve
  (I - gamma P_pi) V = R_pi, then the elementwise max over policies (some policy attains it in every state);
- the Bellman optimality residual ||max_a Q(V) - V||_inf for FrozenLake, where enumeration is out of reach
  (||V - V*|| <= residual / (1 - gamma));
- FrozenLake's arrays rebuilt from the map itself (desc, success_rate, reward_schedule), not from env.P.
Tolerances: linear solves of |S| <= 64 with condition number <= (1 + gamma)/(1 - gamma) <= 2000 are exact to
~1e-13 on values <= 1000, so 1e-10 is ~1000x of rounding and far below any real error.
"""

import itertools

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(30)  # the whole file runs in ~3 s; a non-terminating loop fails fast

TIE = 1e-12  # the lesson's tie rule: lowest action index within 1e-12 of the row max


# ----------------------------------------------------------------------------------------------- references
def _absorbing(P, R, terminal):
    P, R = P.copy(), R.copy()
    if terminal is not None:
        for t in np.flatnonzero(terminal):
            P[t] = 0.0
            P[t, :, t] = 1.0
            R[t] = 0.0
    return P, R


def _greedy(Q):
    pi = np.empty(Q.shape[0], dtype=np.int64)
    for s in range(Q.shape[0]):
        best = max(Q[s])
        pi[s] = min(a for a in range(Q.shape[1]) if Q[s, a] >= best - TIE)
    return pi


def _solve(P, R, gamma, pi):
    S = P.shape[0]
    P_pi = np.array([P[s, pi[s]] for s in range(S)])
    R_pi = np.array([R[s, pi[s]] for s in range(S)])
    return np.linalg.solve(np.eye(S) - gamma * P_pi, R_pi)


def _enumerated_optimum(P, R, gamma, terminal=None):
    """V* = elementwise max over all |A|^|S| deterministic policies, each evaluated by a linear solve."""
    P, R = _absorbing(P, R, terminal)
    S, A = R.shape
    policies = np.array(list(itertools.product(range(A), repeat=S)))  # (A^S, S)
    states = np.arange(S)
    P_pi = P[states, policies]  # (A^S, S, S)
    R_pi = R[states, policies]  # (A^S, S)
    values = np.linalg.solve(np.eye(S) - gamma * P_pi, R_pi[..., None])[..., 0]
    return values.max(axis=0)


def _q(P, R, gamma, V):
    return R + gamma * (P @ V)


def _live(terminal, S):
    """States whose action is graded: a terminal state's action changes nothing, so it is not checked."""
    return np.ones(S, dtype=bool) if terminal is None else ~np.asarray(terminal)


def _vi_iterates(P, R, gamma, terminal, n):
    """V_0 = 0, ..., V_n of synchronous value iteration (the test's own loop)."""
    P, R = _absorbing(P, R, terminal)
    out = [np.zeros(P.shape[0])]
    for _ in range(n):
        out.append(_q(P, R, gamma, out[-1]).max(axis=1))
    return out


def _vi_reference_sweeps(P, R, gamma, tol, terminal):
    """First k with ||V_k - V_{k-1}||_inf < tol (1 - gamma) / (2 gamma): the README's rule."""
    P, R = _absorbing(P, R, terminal)
    V, k = np.zeros(P.shape[0]), 0
    while True:
        V_next = _q(P, R, gamma, V).max(axis=1)
        k += 1
        if 2 * gamma * np.abs(V_next - V).max() < tol * (1 - gamma):
            return k
        V = V_next


def _pi_reference_evaluations(P, R, gamma, terminal):
    P, R = _absorbing(P, R, terminal)
    pi, n = np.zeros(P.shape[0], dtype=np.int64), 0
    while True:
        n += 1
        improved = _greedy(_q(P, R, gamma, _solve(P, R, gamma, pi)))
        if np.array_equal(improved, pi):
            return n
        pi = improved


def _random_mdp(rng, S, A, reward_scale=1.0, terminal_frac=0.0):
    P = rng.random((S, A, S)) ** 2
    P[rng.random((S, A, S)) < 0.4] = 0.0  # sparse rows, like real MDPs
    P[np.arange(S)[:, None], np.arange(A)[None, :], rng.integers(0, S, (S, A))] += 0.05  # no empty row
    P /= P.sum(axis=2, keepdims=True)
    R = rng.normal(0.0, reward_scale, (S, A))
    terminal = None
    if terminal_frac > 0:
        terminal = rng.random(S) < terminal_frac
    return P, R, terminal


def _cases(seed, n, gammas, terminal_frac=0.0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        S, A = int(rng.integers(1, 7)), int(rng.integers(1, 4))
        scale = float(rng.choice([1.0, 1.0, 50.0]))
        yield (*_random_mdp(rng, S, A, scale, terminal_frac if i % 2 else 0.0), gammas[i % len(gammas)])


# ------------------------------------------------------------------------------------------------- greedy
def test_greedy_takes_the_lowest_index_among_near_ties(lesson):
    mdp = lesson.load("mdp.py")
    Q = np.array(
        [
            [0.3, 0.1 + 0.2, 0.2],  # 0.30000000000000004 is one rounding above 0.3: a tie, index 0
            [0.2, 0.3, 0.1 + 0.2],  # the same tie in the other order: index 1
            [0.1, 0.3, 0.3 + 1e-9],  # 1e-9 is a real difference: index 2
            [-5e-13, 0.0, 0.0],  # within 1e-12 of the max: index 0
            [1.0, 1.0 + 4e-12, 1.0],  # 4e-12 above: index 1
            [7.0, 7.0, 7.0],  # all tied: index 0
            [-3.0, 2.0, 2.0],  # exact tie not at the front: index 1
            [100.0 - 5e-11, 100.0, 99.0],  # 5e-11 is a real gap at any magnitude (the 1e-12 is absolute): index 1
            [-1e3, -1e3 + 3e-12, -2e3],  # 3e-12 above (27 ulps at 1000): index 1
        ]
    )
    want = np.array([0, 1, 2, 0, 1, 0, 1, 1, 1])
    got = mdp.greedy(Q.copy())
    assert np.asarray(got).shape == (9,) and np.issubdtype(np.asarray(got).dtype, np.integer)
    np.testing.assert_array_equal(got, want, err_msg="tie rule: lowest action index within 1e-12 of the row max")
    np.testing.assert_array_equal(mdp.greedy(np.array([[4.5], [-1.0]])), [0, 0])


# --------------------------------------------------------------------------------------------- absorbing
def test_absorbing_returns_float64_copies(lesson):
    """absorbing always returns new float64 arrays, also for terminal=None and integer inputs; terminal rows
    absorb (self-loop or zero row) with reward 0, the other rows are unchanged."""
    mdp = lesson.load("mdp.py")
    P, R = np.full((2, 1, 2), 0.5), np.ones((2, 1))
    P_int, R_int = np.array([[[0, 1]], [[1, 0]]]), np.array([[3], [-2]])
    for Pin, Rin in ((P, R), (P_int, R_int)):
        for terminal in (None, np.array([False, False])):
            P2, R2 = mdp.absorbing(Pin, Rin, terminal)
            assert not np.shares_memory(P2, Pin) and not np.shares_memory(R2, Rin), (
                f"terminal={terminal}: absorbing must return copies, never the caller's arrays"
            )
            assert P2.dtype == np.float64 and R2.dtype == np.float64, "absorbing returns float64 arrays"
            np.testing.assert_array_equal(P2, Pin)
            np.testing.assert_array_equal(R2, Rin)
    P, R, _ = _random_mdp(np.random.default_rng(12), 5, 3, reward_scale=2.0)
    terminal = np.array([False, True, False, True, False])
    P2, R2 = mdp.absorbing(P, R, terminal)
    assert not np.shares_memory(P2, P) and not np.shares_memory(R2, R)
    np.testing.assert_array_equal(P2[~terminal], P[~terminal])
    np.testing.assert_array_equal(R2[~terminal], R[~terminal])
    np.testing.assert_array_equal(R2[terminal], 0.0)
    for t in np.flatnonzero(terminal):
        loop = np.zeros((3, 5))
        loop[:, t] = 1.0
        assert np.array_equal(P2[t], loop) or np.array_equal(P2[t], 0.0 * loop), (
            f"terminal state {t}: its rows must be a self-loop (or all zero), got {P2[t]}"
        )


# ----------------------------------------------------------------------------------- value iteration, pi
def test_value_iteration_policy_is_greedy_in_the_returned_v(lesson):
    """pi = greedy(Q(V_k)) with the V_k returned, not the Q of the last sweep (that is Q(V_{k-1})).
    State 1 loops with reward 1: V_n(1) = (1 - gamma^n)/(1 - gamma), delta_n = gamma^(n-1) for n >= 2.
    Probe state j: action 0 goes to state 1 (reward 0), action 1 ends in the terminal state 2 with reward
    c_j = gamma (V_(k_j - 1)(1) + V_(k_j)(1)) / 2, so Q(probe_j) prefers action 1 under V_(k_j - 1) and action 0
    under V_(k_j). The probes cover every k around the stopping sweeps of both README rules (with and
    without the factor 2), so whichever of them a solution uses, one probe sits exactly at its k."""
    mdp = lesson.load("mdp.py")
    gamma, tol = 0.9, 1e-6
    v = [0.0]  # V_n(1), the test's own iterates
    while len(v) < 400:
        v.append(1.0 + gamma * v[-1])

    def first_stop(factor: float) -> int:
        return next(n for n in range(1, 400) if factor * gamma * (v[n] - v[n - 1]) < tol * (1 - gamma))

    k_lo, k_hi = first_stop(1.0), first_stop(2.0)  # 153 and 160
    ks = list(range(k_lo - 2, k_hi + 3))
    S = 3 + len(ks)
    P, R = np.zeros((S, 2, S)), np.zeros((S, 2))
    P[1, :, 1] = R[1, :] = 1.0
    P[2, :, 0] = 1.0  # terminal: its row says "go to 0", absorbing must override it
    R[2, :] = 5.0
    P[0, :, 2] = 1.0  # state 0: ends at once, reward 0 (an extra live state)
    for j, k in enumerate(ks):
        P[3 + j, 0, 1] = P[3 + j, 1, 2] = 1.0
        R[3 + j, 1] = gamma * (v[k - 1] + v[k]) / 2
    terminal = np.zeros(S, dtype=bool)
    terminal[2] = True
    assert _vi_reference_sweeps(P, R, gamma, tol, terminal) == k_hi  # the probes do not move the stop
    V, pi, k = mdp.value_iteration(P, R, gamma, tol, terminal)
    V_k = _vi_iterates(P, R, gamma, terminal, k)[k]
    np.testing.assert_allclose(V, V_k, rtol=0, atol=1e-12, err_msg="V must be V_k, k synchronous sweeps from 0")
    Pa, Ra = _absorbing(P, R, terminal)
    live = ~terminal
    np.testing.assert_array_equal(
        np.asarray(pi)[live],
        _greedy(_q(Pa, Ra, gamma, V_k))[live],
        err_msg=f"k = {k}: pi must be greedy(q_values(P, R, gamma, V_k)) of the returned V_k",
    )


# -------------------------------------------------------------------------------------- policy evaluation
def test_policy_evaluation_solves_the_linear_system(lesson):
    mdp = lesson.load("mdp.py")
    rng = np.random.default_rng(11)
    for P, R, terminal, gamma in _cases(1, 40, [0.0, 0.5, 0.9, 0.99, 0.999], terminal_frac=0.4):
        pi = rng.integers(0, R.shape[1], R.shape[0])
        V = mdp.policy_evaluation(P, R, gamma, pi, terminal)
        Pa, Ra = _absorbing(P, R, terminal)
        want = _solve(Pa, Ra, gamma, pi)
        assert V.shape == want.shape and V.dtype == np.float64
        scale = max(1.0, np.abs(want).max())
        np.testing.assert_allclose(V, want, rtol=0, atol=1e-10 * scale)
        if terminal is not None:
            np.testing.assert_allclose(
                V[terminal], 0.0, rtol=0, atol=1e-10 * scale, err_msg="terminal states are worth 0"
            )


# ----------------------------------------------------------------------------------------- policy iteration
@pytest.mark.points(2)
def test_policy_iteration_finds_the_enumerated_optimum(lesson):
    mdp = lesson.load("mdp.py")
    for P, R, terminal, gamma in _cases(2, 60, [0.3, 0.9, 0.99, 0.999], terminal_frac=0.4):
        v_star = _enumerated_optimum(P, R, gamma, terminal)
        V, pi, _ = mdp.policy_iteration(P, R, gamma, terminal)
        pi, live = np.asarray(pi), _live(terminal, len(v_star))
        scale = max(1.0, np.abs(v_star).max())
        np.testing.assert_allclose(V, v_star, rtol=0, atol=1e-10 * scale, err_msg=f"gamma={gamma}")
        Pa, Ra = _absorbing(P, R, terminal)
        np.testing.assert_allclose(
            _solve(Pa, Ra, gamma, pi),
            V,
            rtol=0,
            atol=1e-10 * scale,
            err_msg="V must be the exact value of the returned policy",
        )
        np.testing.assert_array_equal(
            pi[live],
            _greedy(_q(Pa, Ra, gamma, v_star))[live],
            err_msg="pi must be greedy in V* (tie rule: lowest index)",
        )


def test_policy_iteration_counts_its_evaluations(lesson):
    mdp = lesson.load("mdp.py")
    for P, R, terminal, gamma in _cases(3, 40, [0.5, 0.9, 0.99], terminal_frac=0.4):
        _, _, n = mdp.policy_iteration(P, R, gamma, terminal)
        assert isinstance(n, (int, np.integer))
        assert n == _pi_reference_evaluations(P, R, gamma, terminal), (
            "evaluations: pi_0 = 0 everywhere, one exact evaluation per iteration, the last one included"
        )


def test_policy_iteration_ends_on_the_tie_rule_policy(lesson):
    """State 0: action 0 goes to state 1 (reward 0), action 1 ends the episode with reward gamma.
    State 1: action 1 ends with reward 1, action 0 with 0. From pi_0 = 0, action 1 wins in state 0 at first;
    once state 1 plays action 1, both actions of state 0 are worth gamma: a tie, and the rule takes action 0."""
    mdp = lesson.load("mdp.py")
    gamma = 0.9
    P = np.zeros((3, 2, 3))
    P[0, 0, 1] = 1.0
    P[0, 1, 2] = P[1, :, 2] = P[2, :, 2] = 1.0
    R = np.array([[0.0, gamma], [0.0, 1.0], [0.0, 0.0]])
    terminal = np.array([False, False, True])
    V, pi, n = mdp.policy_iteration(P, R, gamma, terminal)
    np.testing.assert_allclose(V, [gamma, 1.0, 0.0], rtol=0, atol=1e-14)
    assert list(np.asarray(pi)[:2]) == [0, 1], (
        "the returned pi is greedy(Q(V)) with the tie rule, not the last kept action"
    )
    assert n == 3, "pi_0 = (0, 0) -> (1, 1) -> (0, 1), then one more evaluation confirms it"


# ----------------------------------------------------------------------------------------------- edge cases
def test_edge_cases_gamma_zero_one_state_all_terminal(lesson):
    mdp = lesson.load("mdp.py")
    rng = np.random.default_rng(4)
    P, R, _ = _random_mdp(rng, 4, 3)
    R[:, 0] = 0.3
    R[:, 1] = 0.1 + 0.2  # one rounding above action 0: a tie under the rule, so action 0 where these lead
    R[:, 2] = -1.0
    R[2, 2] = 0.31
    # gamma = 0: one sweep, V = max_a R, the greedy policy of R itself
    V, pi, k = mdp.value_iteration(P, R, 0.0, 1e-8)
    np.testing.assert_array_equal(V, R.max(axis=1))
    np.testing.assert_array_equal(pi, _greedy(R))
    assert k == 1, "gamma = 0: V_1 = max_a R and V_2 = V_1, so the rule stops after one sweep"
    V, pi, n = mdp.policy_iteration(P, R, 0.0)
    np.testing.assert_allclose(V, R.max(axis=1), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(pi, _greedy(R))
    assert n == 2  # pi_0 = 0 is greedy except in state 2
    # one state, three actions: V* = max_a R / (1 - gamma)
    P1, R1 = np.ones((1, 3, 1)), np.array([[0.5, 2.0, -1.0]])
    V, pi, n = mdp.policy_iteration(P1, R1, 0.9)
    np.testing.assert_allclose(V, [20.0], rtol=1e-13)
    assert list(pi) == [1] and n == 2
    V, pi, k = mdp.value_iteration(P1, R1, 0.9, 1e-6)
    assert abs(V[0] - 20.0) <= 1e-6 and list(pi) == [1]
    assert k <= 1.5 * _vi_reference_sweeps(P1, R1, 0.9, 1e-6, None) + 10
    # every state terminal: everything is worth 0, action 0 everywhere, nothing to iterate
    every = np.ones(4, dtype=bool)
    V, pi, k = mdp.value_iteration(P, R, 0.95, 1e-6, every)
    assert np.all(V == 0) and k == 1
    V, pi, n = mdp.policy_iteration(P, R, 0.95, every)
    np.testing.assert_allclose(V, 0.0, atol=1e-15)
    assert n == 1


def test_inputs_unchanged_and_calls_repeatable(lesson):
    mdp = lesson.load("mdp.py")
    P, R, _ = _random_mdp(np.random.default_rng(5), 5, 3, reward_scale=2.0)
    terminal = np.array([False, True, False, False, True])  # their rows are NOT absorbing in P and R
    saved = (P.copy(), R.copy(), terminal.copy())
    for a in (P, R, terminal):
        a.setflags(write=False)  # writing into an input raises here
    pi = np.array([2, 0, 1, 1, 0])
    runs = []
    for _ in range(2):
        runs.append(
            (
                mdp.policy_evaluation(P, R, 0.9, pi, terminal),
                *mdp.value_iteration(P, R, 0.9, 1e-9, terminal),
                *mdp.policy_iteration(P, R, 0.9, terminal),
            )
        )
    for got, want in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(got, want, err_msg="a second call must give the same result")
    for a, b in zip((P, R, terminal), saved, strict=True):
        np.testing.assert_array_equal(a, b)


# -------------------------------------------------------------------------------------------- FrozenLake
def _grid_model(desc, slippery, success, rewards):
    """FrozenLake from its map: move (LEFT, DOWN, RIGHT, UP) clamped at the border; slips go to the two
    perpendicular moves with (1 - success) / 2 each; rewards (goal, hole, frozen) on entering a cell;
    G and H absorb with reward 0."""
    moves = [(0, -1), (1, 0), (0, 1), (-1, 0)]
    rows, cols = len(desc), len(desc[0])
    S = rows * cols
    P, R = np.zeros((S, 4, S)), np.zeros((S, 4))
    terminal = np.zeros(S, dtype=bool)
    for r, c in itertools.product(range(rows), range(cols)):
        s = r * cols + c
        if desc[r][c] in "GH":
            terminal[s] = True
            P[s, :, s] = 1.0
            continue
        for a in range(4):
            outcomes = [(a, success), ((a - 1) % 4, (1 - success) / 2), ((a + 1) % 4, (1 - success) / 2)]
            for b, p in outcomes if slippery else [(a, 1.0)]:
                r2 = min(max(r + moves[b][0], 0), rows - 1)
                c2 = min(max(c + moves[b][1], 0), cols - 1)
                P[s, a, r2 * cols + c2] += p
                R[s, a] += p * rewards["GHF".index(desc[r2][c2] if desc[r2][c2] in "GHF" else "F")]
    return P, R, terminal


MAP_4 = ["SFFF", "FHFH", "FFFH", "HFFG"]
MAP_8 = ["SFFFFFFF", "FFFFFFFF", "FFFHFFFF", "FFFFFHFF", "FFFHFFFF", "FHHFFFHF", "FHFFHFHF", "FFFHFFFG"]


@pytest.mark.requires("gymnasium")
def test_frozenlake_arrays_match_the_map(lesson):
    import gymnasium as gym

    mdp = lesson.load("mdp.py")
    configs = [
        dict(map_name="4x4", is_slippery=True),
        dict(map_name="8x8", is_slippery=True),
        dict(map_name="4x4", is_slippery=False),
        dict(desc=["SFFHF", "FHFFF", "FFFHG"], is_slippery=True, success_rate=0.6, reward_schedule=(2.0, -1.0, -0.04)),
    ]
    for cfg in configs:
        env = gym.make("FrozenLake-v1", **cfg)
        desc = cfg.get("desc") or {"4x4": MAP_4, "8x8": MAP_8}[cfg["map_name"]]
        want = _grid_model(
            desc, cfg["is_slippery"], cfg.get("success_rate", 1 / 3), cfg.get("reward_schedule", (1, 0, 0))
        )
        got = mdp.frozenlake_arrays(env)
        for name, g, w in zip(("P", "R", "terminal"), got, want, strict=True):
            assert np.shape(g) == w.shape, f"{cfg}: {name} has shape {np.shape(g)}, want {w.shape}"
            np.testing.assert_allclose(np.asarray(g, dtype=np.float64), w, rtol=0, atol=1e-15, err_msg=f"{cfg}: {name}")
        env.close()


# ------------------------------------------------------------------------------------------ value iteration
@pytest.mark.points(2)
def test_value_iteration_error_is_within_tol(lesson):
    mdp = lesson.load("mdp.py")
    cases = [(*c, 1e-6) for c in _cases(6, 24, [0.9, 0.99], terminal_frac=0.4)]
    cases += [(*c, 1e-4) for c in _cases(7, 4, [0.999], terminal_frac=0.4)]
    for P, R, terminal, gamma, tol in cases:
        v_star = _enumerated_optimum(P, R, gamma, terminal)
        V, pi, _ = mdp.value_iteration(P, R, gamma, tol, terminal)
        err = np.abs(V - v_star).max()
        assert err <= tol, f"gamma={gamma}, tol={tol}: ||V - V*|| = {err:.3g} > tol"
        Pa, Ra = _absorbing(P, R, terminal)
        pi, live = np.asarray(pi), _live(terminal, len(V))
        np.testing.assert_array_equal(pi[live], _greedy(_q(Pa, Ra, gamma, V))[live], err_msg="pi = greedy(Q(V))")
        assert np.all(_solve(Pa, Ra, gamma, pi) >= v_star - tol), "the returned policy is not tol-optimal"


def test_naive_stop_on_delta_below_tol_is_not_enough(lesson):
    """A 3-state chain, rewards only in the last state; gamma = 0.99, tol = 1e-3. Stopping on
    ||V_k - V_{k-1}|| < tol leaves an error near gamma/(1-gamma) * tol ~ 0.1 (checked below)."""
    mdp = lesson.load("mdp.py")
    P = np.zeros((3, 2, 3))
    P[0, 0, 0] = P[1, 0, 0] = P[2, 0, 1] = 1.0  # action 0: one step left
    P[0, 1, 1] = P[1, 1, 2] = P[2, 1, 2] = 1.0  # action 1: one step right
    R = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    gamma, tol = 0.99, 1e-3
    v_star = np.array([gamma**2, gamma, 1.0]) / (1 - gamma)
    np.testing.assert_allclose(_enumerated_optimum(P, R, gamma), v_star, rtol=1e-12)
    iterates = _vi_iterates(P, R, gamma, None, 2000)
    naive = next(k for k in range(1, 2001) if np.abs(iterates[k] - iterates[k - 1]).max() < tol)
    assert np.abs(iterates[naive] - v_star).max() > 50 * tol  # the trap is real
    V, pi, _ = mdp.value_iteration(P, R, gamma, tol)
    assert np.abs(V - v_star).max() <= tol, f"||V - V*|| = {np.abs(V - v_star).max():.3g} > tol = {tol}"
    assert list(pi) == [1, 1, 1]


def test_value_iteration_sweeps_follow_the_stopping_rule(lesson):
    """k is the number of backups from V_0 = 0 (checked: V equals the k-th iterate), and k is at most
    1.5x + 10 the sweeps of the a-posteriori rule: no fixed or a-priori sweep counts."""
    mdp = lesson.load("mdp.py")
    cases = list(_cases(8, 16, [0.9, 0.99], terminal_frac=0.4))
    # rows that all fall into terminal states after a step or two: the rule stops within a few sweeps
    rng = np.random.default_rng(9)
    for S in (3, 5, 6):
        P, R, _ = _random_mdp(rng, S, 2)
        P[:, :, :] = 0.0
        P[:, :, 0] = 1.0
        terminal = np.zeros(S, dtype=bool)
        terminal[0] = True
        cases.append((P, R, terminal, 0.99))
    for P, R, terminal, gamma in cases:
        tol = 1e-6
        V, _, k = mdp.value_iteration(P, R, gamma, tol, terminal)
        assert isinstance(k, (int, np.integer)) and k >= 1
        k_rule = _vi_reference_sweeps(P, R, gamma, tol, terminal)
        assert k <= 1.5 * k_rule + 10, f"gamma={gamma}: {k} sweeps where the a-posteriori rule needs {k_rule}"
        V_k = _vi_iterates(P, R, gamma, terminal, k)[k]
        if gamma <= 0.9:  # here consecutive iterates differ by >> rounding: V pins k exactly
            np.testing.assert_allclose(
                V,
                V_k,
                rtol=0,
                atol=1e-12 * max(1.0, np.abs(V_k).max()),
                err_msg="V must be V_k: synchronous sweeps from V_0 = 0, k of them",
            )


# ------------------------------------------------------------------------------------ FrozenLake, solved
@pytest.mark.points(2)
@pytest.mark.requires("gymnasium")
def test_frozenlake_is_solved_with_the_tie_rule(lesson):
    mdp = lesson.load("mdp.py")
    for desc, gamma in [(MAP_4, 0.99), (MAP_4, 0.9), (MAP_8, 0.99), (MAP_8, 0.9)]:
        P, R, terminal = _grid_model(desc, True, 1 / 3, (1, 0, 0))
        V, pi, _ = mdp.policy_iteration(P, R, gamma, terminal)
        residual = np.abs(_q(P, R, gamma, V).max(axis=1) - V).max()
        assert residual <= 1e-12, f"Bellman optimality residual {residual:.3g}: V is not V*"
        np.testing.assert_allclose(_solve(P, R, gamma, pi), V, rtol=0, atol=1e-12)
        # several states have two actions tied by the map's mirror symmetry (4x4: state 6, LEFT vs RIGHT)
        np.testing.assert_array_equal(pi, _greedy(_q(P, R, gamma, V)), err_msg="tie rule: lowest index")
        np.testing.assert_allclose(V[terminal], 0.0, rtol=0, atol=1e-12)
        tol = 1e-8
        V_vi, pi_vi, _ = mdp.value_iteration(P, R, gamma, tol, terminal)
        assert np.abs(V_vi - V).max() <= tol
        np.testing.assert_array_equal(pi_vi, _greedy(_q(P, R, gamma, V_vi)))
        assert np.all(_solve(P, R, gamma, pi_vi) >= V - tol)
    # the start state's optimal value on the 4x4 map at gamma = 0.99: about 0.542
    V, _, _ = mdp.policy_iteration(*_grid_model(MAP_4, True, 1 / 3, (1, 0, 0))[:2], 0.99)
    assert abs(V[0] - 0.5420259) < 1e-6
