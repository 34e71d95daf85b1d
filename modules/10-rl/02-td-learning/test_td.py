"""Tests for rl-02. Fast rule checks first (a broken learner fails in milliseconds), the learning runs last.

Independent references: every expected update is recomputed here in float64 from the transition; the
learning loops are replayed from the transitions the env really produced (gymnasium's FrozenLake-v1 and
TimeLimit); the converged tables are compared with V^pi / Q^pi from a numpy linear solve and Q* from value
iteration on the env's own model (gymnasium's `env.unwrapped.P` for CliffWalking-v1).
"""

import random

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Discrete
from gymnasium.wrappers import TimeLimit


# ----------------------------------------------------------------------------------------------------
# Environments and independent references
# ----------------------------------------------------------------------------------------------------
class TabularMDP(gym.Env):
    """A known finite MDP as a gymnasium env. P[s, a, s'], reward R[s, a, s'] and term[s, a, s'] =
    P(terminated | s, a, s'). Termination is a flag of the transition: s' is an ordinary state whose own
    value is not zero, so bootstrapping through a termination shows. Wrap in TimeLimit for truncation."""

    def __init__(self, P, R, term, mu):
        self.P, self.R, self.term, self.mu = P, R, term, mu
        self._cdf, self._mu_cdf = np.cumsum(P, axis=2), np.cumsum(mu)
        self.observation_space, self.action_space = Discrete(P.shape[0]), Discrete(P.shape[1])

    def _draw(self, cdf):
        return min(int(np.searchsorted(cdf, self.np_random.random(), side="right")), len(cdf) - 1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = self._draw(self._mu_cdf)
        return self.s, {}

    def step(self, a):
        s = self.s
        s_next = self._draw(self._cdf[s, a])
        terminated = bool(self.np_random.random() < self.term[s, a, s_next])
        self.s = s_next
        return s_next, float(self.R[s, a, s_next]), terminated, False, {}


def random_mdp(n_s, n_a, seed, p_term, time_limit):
    g = np.random.default_rng(seed)
    P = g.dirichlet(np.full(n_s, 0.5), size=(n_s, n_a))
    R = np.repeat(g.uniform(0.0, 2.0, size=(n_s, n_a))[:, :, None], n_s, axis=2)  # positive: values far from 0
    term = np.full((n_s, n_a, n_s), p_term)
    return TimeLimit(TabularMDP(P, R, term, np.full(n_s, 1.0 / n_s)), max_episode_steps=time_limit)


def random_walk(n=5):
    """Sutton & Barto Example 6.2: states 1..n, start in the middle, terminals 0 and n+1 (+1 on the right)."""
    P = np.zeros((n + 2, 1, n + 2))
    R = np.zeros_like(P)
    term = np.zeros_like(P)
    for s in range(1, n + 1):
        P[s, 0, s - 1] = P[s, 0, s + 1] = 0.5
    P[0, 0, 0] = P[n + 1, 0, n + 1] = 1.0  # never reached as a current state
    R[n, 0, n + 1] = 1.0
    term[:, :, 0] = term[:, :, n + 1] = 1.0
    mu = np.zeros(n + 2)
    mu[(n + 1) // 2] = 1.0
    return TimeLimit(TabularMDP(P, R, term, mu), max_episode_steps=1000)


def _model(env):
    m = env.unwrapped
    cont = m.P * (1.0 - m.term)  # probability of moving to s' AND going on
    return (m.P * m.R).sum(axis=2), cont


def q_pi_linear_solve(env, pi, gamma):
    """Q^pi in float64: V = (I - gamma M)^-1 r_pi, then Q = R + gamma cont V."""
    r_sa, cont = _model(env)
    M = np.einsum("sa,sat->st", pi, cont)
    V = np.linalg.solve(np.eye(len(M)) - gamma * M, (pi * r_sa).sum(axis=1))
    return r_sa + gamma * cont @ V


def q_star_value_iteration(env, gamma):
    r_sa, cont = _model(env)
    Q = np.zeros_like(r_sa)
    for _ in range(10_000):
        Q_new = r_sa + gamma * cont @ Q.max(axis=1)
        if np.abs(Q_new - Q).max() < 1e-13:
            return Q_new
        Q = Q_new
    raise AssertionError("value iteration did not converge")


def q_star_from_gym_model(P, n_s, n_a, gamma):
    """Value iteration on gymnasium's own toy-text model P[s][a] = [(p, s', r, terminated), ...]."""
    Q = np.zeros((n_s, n_a))
    for _ in range(10_000):
        V = Q.max(axis=1)
        Q_new = np.array([[sum(p * (r + (0.0 if t else gamma * V[s2])) for p, s2, r, t in P[s][a])
                           for a in range(n_a)] for s in range(n_s)])
        if np.abs(Q_new - Q).max() < 1e-12:
            return Q_new
        Q = Q_new
    raise AssertionError("value iteration did not converge")


# ----------------------------------------------------------------------------------------------------
# Recording what the learner's loop really did
# ----------------------------------------------------------------------------------------------------
class Recorder(gym.Wrapper):
    """Logs ("reset", obs) and ("step", s, a, r, s_next, terminated, truncated) as the learner runs."""

    def __init__(self, env, log):
        super().__init__(env)
        self.log = log

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.log.append(("reset", obs))
        self._obs = obs
        return obs, info

    def step(self, action):
        obs, r, terminated, truncated, info = self.env.step(action)
        self.log.append(("step", self._obs, int(action), r, obs, bool(terminated), bool(truncated)))
        self._obs = obs
        return obs, r, terminated, truncated, info


def record_actions(mod, log):
    """Route the learner's epsilon_greedy through a recorder (the loops must choose actions with it)."""
    original = mod.epsilon_greedy

    def recorded(q_row, epsilon, rng):
        row = np.array(q_row, dtype=np.float64, copy=True)  # the row as the loop passed it, before any change
        a = original(q_row, epsilon, rng)
        log.append(("act", int(a), row))
        return a

    mod.epsilon_greedy = recorded


class Schedule:
    """step_size(n) = c / n**w, checking that n counts updates of one entry from 1."""

    def __init__(self, c, w):
        self.c, self.w = c, w

    def __call__(self, n):
        assert isinstance(n, (int, np.integer)) and n >= 1, f"step_size called with n={n!r}: n counts from 1"
        return self.c / float(n) ** self.w


def episodes_of(log, n_episodes, kind="td0"):
    """Split the log into episodes; each is a list of (step, action chosen after that step or None, the Q row
    that choice saw or None); the first entry's step also carries the row the episode's first choice saw
    (`first_rows[k]`, returned alongside).

    The epsilon_greedy choices ("act") are checked against the actions executed: SARSA chooses exactly once
    between reset() and the first step() and executes that action, then chooses a' once after every step;
    Q-learning chooses exactly once before every step (the first one included) and executes that choice.
    """
    resets = [i for i, e in enumerate(log) if e[0] == "reset"]
    assert len(resets) == n_episodes, f"{len(resets)} env.reset() calls for n_episodes={n_episodes}"
    assert resets[0] == 0, "env.step() before the first env.reset()"
    out = []
    for k, start in enumerate(resets):
        events = log[start + 1:resets[k + 1] if k + 1 < len(resets) else len(log)]
        at = [i for i, e in enumerate(events) if e[0] == "step"]
        assert at, "an episode without a single step"
        # acts[j]: the epsilon_greedy choices logged after step j-1 (j = 0: after reset) and before step j;
        # acts[-1]: those after the last step
        bounds = [-1, *at, len(events)]
        acts = [[e[1] for e in events[bounds[j] + 1:bounds[j + 1]]] for j in range(len(bounds) - 1)]
        rows = [[e[2] for e in events[bounds[j] + 1:bounds[j + 1]]] for j in range(len(bounds) - 1)]
        steps = [events[i] for i in at]
        if kind in ("sarsa", "q"):
            for j, e in enumerate(steps):
                where = "at the episode start (after reset())" if j == 0 else f"before step {j} of an episode"
                assert len(acts[j]) == 1, (
                    f"{len(acts[j])} epsilon_greedy calls {where}: every executed action is chosen "
                    "by exactly one epsilon_greedy call")
                assert acts[j][0] == e[2], (
                    f"{where}: epsilon_greedy chose {acts[j][0]} but env.step() got {e[2]}: "
                    "the action executed must be the one epsilon_greedy chose")
            if kind == "sarsa":
                assert len(acts[-1]) <= 1, "epsilon_greedy called more than once after the last step"
            else:
                assert not acts[-1], "Q-learning called epsilon_greedy after the episode's last step"
        else:
            assert not any(acts), "td0_evaluate called epsilon_greedy"
        pairs = [(e, acts[j + 1][0] if acts[j + 1] else None, rows[j + 1][0] if rows[j + 1] else None)
                 for j, e in enumerate(steps)]
        for e in steps[:-1]:
            assert not (e[5] or e[6]), "the loop stepped on after terminated/truncated without env.reset()"
        assert steps[-1][5] or steps[-1][6], "an episode stopped before terminated or truncated"
        out.append((rows[0][0] if rows[0] else None, pairs))
    return out


def replay(episodes, kind, n_s, n_a, gamma, schedule):
    """The expected table, recomputed from the recorded transitions with float64 updates."""
    table = np.zeros(n_s) if kind == "td0" else np.zeros((n_s, n_a))
    counts = np.zeros(table.shape, dtype=np.int64)
    for first_row, steps in episodes:
        if first_row is not None:  # the episode's first choice sees Q[s_0] as the table stands
            np.testing.assert_allclose(first_row, table[steps[0][0][1]], rtol=1e-12, atol=1e-12,
                                       err_msg="the first epsilon_greedy call of an episode did not get Q[s_0]")
        for i, ((_, s, a, r, s_next, terminated, _truncated), chosen, row) in enumerate(steps):  # truncation bootstraps
            if kind == "sarsa" and row is not None:  # a' is chosen from Q[s'] before Q[s, a] is updated
                np.testing.assert_allclose(row, table[s_next], rtol=1e-12, atol=1e-12,
                                           err_msg="SARSA chose a' from another row than Q[s'] before the update")
            idx = s if kind == "td0" else (s, a)
            if kind == "td0":
                boot = table[s_next]
            elif kind == "q":
                boot = table[s_next].max()
            else:  # sarsa: the action chosen in s_next, which is the one executed next
                if i + 1 < len(steps):
                    assert chosen == steps[i + 1][0][2], "SARSA executed another action than it chose"
                elif not terminated:
                    assert chosen is not None, "SARSA at truncation must choose a_next in s_next and bootstrap on it"
                boot = 0.0 if terminated else table[s_next, chosen]
            counts[idx] += 1
            target = r if terminated else r + gamma * boot
            table[idx] += schedule(int(counts[idx])) * (target - table[idx])
            if kind == "q" and row is not None:  # the next action is chosen from Q[s'] after this update
                np.testing.assert_allclose(row, table[s_next], rtol=1e-12, atol=1e-12,
                                           err_msg="Q-learning chose its next action from a stale row, not Q[s'] "
                                                   "after the update")
    return table


# ----------------------------------------------------------------------------------------------------
# epsilon-greedy
# ----------------------------------------------------------------------------------------------------
def test_epsilon_greedy_is_argmax_with_lowest_index_ties_at_epsilon_zero(lesson):
    td = lesson.load("td.py")
    rng = np.random.default_rng(0)
    cases = [([0.0, 0.0, 0.0, 0.0], 0), ([-1.0, 3.0, 3.0, 2.0], 1), ([-np.inf, -5.0, -np.inf], 1),
             ([7.5], 0), ([1.0, 2.0, 0.5, 2.0, 2.0], 1), ([0.1, -0.2, 0.1 + 1e-12], 2)]
    for row, want in cases:
        q_row = np.array(row)
        before = q_row.copy()
        for _ in range(20):
            a = td.epsilon_greedy(q_row, 0.0, rng)
            assert isinstance(a, (int, np.integer)) and a == want, f"{row}: got {a!r}, want {want}"
        np.testing.assert_array_equal(q_row, before, err_msg="epsilon_greedy modified q_row")


def test_epsilon_greedy_explores_uniformly_over_all_actions(lesson):
    td = lesson.load("td.py")
    n = 40_000
    for epsilon, q_row in [(0.4, np.array([0.3, -1.0, 2.0, 0.7, 1.9])), (1.0, np.array([5.0, 1.0, 1.0])),
                           (0.1, np.array([0.0, 4.0]))]:
        rng = np.random.default_rng(7)
        counts = np.bincount([td.epsilon_greedy(q_row, epsilon, rng) for _ in range(n)], minlength=len(q_row))
        k = len(q_row)
        want = np.full(k, epsilon / k)
        want[int(np.argmax(q_row))] += 1.0 - epsilon
        # binomial standard error sqrt(p(1-p)/n) <= 0.0025; 6 sigma. Exploring only among the non-greedy
        # actions (0.4 -> greedy 0.6 instead of 0.68) or never exploring is off by >= 0.05.
        np.testing.assert_allclose(counts / n, want, atol=0.015,
                                   err_msg=f"epsilon={epsilon}: action frequencies (greedy = argmax)")


def test_epsilon_greedy_draws_only_from_the_generator(lesson):
    td = lesson.load("td.py")
    q_row = np.array([0.5, 0.1, -0.3, 0.2])

    def draws(seed, global_seed):
        np.random.seed(global_seed)
        random.seed(global_seed)
        rng = np.random.default_rng(seed)
        return [int(td.epsilon_greedy(q_row, 0.5, rng)) for _ in range(200)]

    first = draws(3, 1)
    assert draws(3, 2) == first, "same generator seed, different actions: randomness from elsewhere"
    assert draws(4, 1) != first, "different generator seeds give identical actions: the generator is ignored"


# ----------------------------------------------------------------------------------------------------
# One update on a given transition
# ----------------------------------------------------------------------------------------------------
FLAGS = [(False, False), (False, True), (True, False), (True, True)]  # TimeLimit may set both at once


@pytest.mark.parametrize("terminated, truncated", FLAGS, ids=["mid", "truncated", "terminated", "both"])
def test_td0_update_bootstraps_on_truncation_not_termination(lesson, terminated, truncated):
    td = lesson.load("td.py")
    g = np.random.default_rng(11)
    for s, s_next in [(2, 5), (4, 4), (0, 6)]:  # (4, 4): a self-loop uses V[s] before the update
        V = g.normal(3.0, 2.0, size=7)
        before = V.copy()
        r, alpha, gamma = float(g.normal()), 0.3, 0.9
        target = r if terminated else r + gamma * before[s_next]
        delta = td.td0_update(V, s, r, s_next, terminated, truncated, alpha, gamma)
        want = before.copy()
        want[s] += alpha * (target - before[s])
        np.testing.assert_allclose(V, want, rtol=1e-12, atol=1e-12,
                                   err_msg=f"V after the update (terminated={terminated}, truncated={truncated})")
        assert delta == pytest.approx(target - before[s], rel=1e-12, abs=1e-12), "returned TD error"


@pytest.mark.parametrize("terminated, truncated", FLAGS, ids=["mid", "truncated", "terminated", "both"])
def test_sarsa_update_bootstraps_on_the_next_action_taken(lesson, terminated, truncated):
    td = lesson.load("td.py")
    g = np.random.default_rng(12)
    for s, a, s_next in [(1, 2, 3), (3, 0, 3), (0, 1, 4)]:
        Q = g.normal(2.0, 3.0, size=(5, 3))
        a_next = int(np.argmin(Q[s_next]))  # far from the max: a max-bootstrap is visibly wrong
        before = Q.copy()
        r, alpha, gamma = float(g.normal()), 0.4, 0.8
        target = r if terminated else r + gamma * before[s_next, a_next]
        delta = td.sarsa_update(Q, s, a, r, s_next, a_next, terminated, truncated, alpha, gamma)
        want = before.copy()
        want[s, a] += alpha * (target - before[s, a])
        np.testing.assert_allclose(Q, want, rtol=1e-12, atol=1e-12,
                                   err_msg=f"Q after the update (terminated={terminated}, truncated={truncated})")
        assert delta == pytest.approx(target - before[s, a], rel=1e-12, abs=1e-12), "returned TD error"


@pytest.mark.parametrize("terminated, truncated", FLAGS, ids=["mid", "truncated", "terminated", "both"])
def test_q_learning_update_bootstraps_on_the_max(lesson, terminated, truncated):
    td = lesson.load("td.py")
    g = np.random.default_rng(13)
    for s, a, s_next in [(1, 2, 3), (3, 0, 3), (0, 1, 4)]:
        Q = g.normal(2.0, 3.0, size=(5, 3))
        before = Q.copy()
        r, alpha, gamma = float(g.normal()), 0.4, 0.8
        target = r if terminated else r + gamma * before[s_next].max()
        delta = td.q_learning_update(Q, s, a, r, s_next, terminated, truncated, alpha, gamma)
        want = before.copy()
        want[s, a] += alpha * (target - before[s, a])
        np.testing.assert_allclose(Q, want, rtol=1e-12, atol=1e-12,
                                   err_msg=f"Q after the update (terminated={terminated}, truncated={truncated})")
        assert delta == pytest.approx(target - before[s, a], rel=1e-12, abs=1e-12), "returned TD error"


@pytest.mark.parametrize("fn", ["sarsa", "q_learning"])
def test_control_explores_on_the_first_action_of_every_episode(lesson, fn):
    """A one-step bandit: every executed action is an episode's first. At epsilon = 1 they are uniform."""
    td = lesson.load("td.py")
    n_a, n_episodes = 3, 600
    R = np.array([0.0, 1.0, 0.5]).reshape(1, n_a, 1)  # argmax of a learned Q is action 1, of Q = 0 action 0
    log = []
    env = Recorder(TabularMDP(np.ones((1, n_a, 1)), R, np.ones((1, n_a, 1)), np.ones(1)), log)
    env.reset(seed=0)
    log.clear()
    getattr(td, fn)(env, n_episodes, 0.9, 1.0, lambda n: 0.5, np.random.default_rng(6))
    actions = [e[2] for e in log if e[0] == "step"]
    assert len(actions) == n_episodes, f"{len(actions)} env.step() calls for {n_episodes} one-step episodes"
    freq = np.bincount(actions, minlength=n_a) / n_episodes
    # binomial standard error sqrt((1/3)(2/3)/600) = 0.019; 0.1 is 5 sigma. A greedy first action gives 1.0 / 0.0.
    np.testing.assert_allclose(freq, np.full(n_a, 1.0 / n_a), atol=0.1, err_msg=(
        f"{fn}, epsilon = 1: frequencies of the first action of each episode; it must be chosen with "
        "epsilon_greedy like every other action"))


# ----------------------------------------------------------------------------------------------------
# The loops, replayed from the transitions they really produced
# ----------------------------------------------------------------------------------------------------
def _replay_envs():
    """A dense-reward MDP whose episodes end both ways (termination coin 0.15, TimeLimit 5), and
    gymnasium's slippery FrozenLake-v1 with a TimeLimit of 8 steps (holes/goal terminate)."""
    return [pytest.param(lambda: random_mdp(5, 3, seed=21, p_term=0.15, time_limit=5), 0.9, 80, id="mdp"),
            pytest.param(lambda: gym.make("FrozenLake-v1", is_slippery=True, max_episode_steps=8), 0.95, 300,
                         id="frozenlake")]


@pytest.mark.points(2)
@pytest.mark.parametrize("make_env, gamma, n_episodes", _replay_envs())
def test_td0_evaluate_replays_exactly(lesson, make_env, gamma, n_episodes):
    td = lesson.load("td.py")
    env0 = make_env()
    n_s, n_a = env0.observation_space.n, env0.action_space.n
    g = np.random.default_rng(5)
    pi = g.dirichlet(np.ones(n_a), size=n_s)
    pi[0] = np.eye(n_a)[n_a - 1]  # deterministic row
    pi[1, 0] = 0.0
    pi[1] /= pi[1].sum()
    pi_before = pi.copy()
    log = []
    env = Recorder(make_env(), log)
    env.reset(seed=8)
    log.clear()
    schedule = Schedule(0.9, 0.6)
    V = td.td0_evaluate(env, pi, n_episodes, gamma, schedule, np.random.default_rng(3))
    np.testing.assert_array_equal(pi, pi_before, err_msg="td0_evaluate modified pi")
    assert isinstance(V, np.ndarray) and V.shape == (n_s,) and V.dtype == np.float64
    episodes = episodes_of(log, n_episodes)
    taken = [(e[1], e[2]) for _, steps in episodes for e, _, _ in steps]
    assert all(pi[s, a] > 0 for s, a in taken), "an action with pi[s, a] = 0 was taken: actions must follow pi[s]"
    want = replay(episodes, "td0", n_s, n_a, gamma, schedule)
    np.testing.assert_allclose(V, want, rtol=1e-9, atol=1e-12, err_msg=(
        "V differs from the TD(0) updates replayed from your env.step() transitions "
        "(target r + gamma V[s'] unless terminated; alpha = step_size(updates of s so far))"))


@pytest.mark.points(2)
@pytest.mark.parametrize("fn, kind", [("sarsa", "sarsa"), ("q_learning", "q")])
@pytest.mark.parametrize("make_env, gamma, n_episodes", _replay_envs())
def test_control_replays_exactly(lesson, fn, kind, make_env, gamma, n_episodes):
    td = lesson.load("td.py")
    log = []
    record_actions(td, log)
    env = Recorder(make_env(), log)
    env.reset(seed=9)
    log.clear()
    n_s, n_a = env.observation_space.n, env.action_space.n
    schedule = Schedule(0.9, 0.6)
    Q = getattr(td, fn)(env, n_episodes, gamma, 0.3, schedule, np.random.default_rng(4))
    assert isinstance(Q, np.ndarray) and Q.shape == (n_s, n_a) and Q.dtype == np.float64
    want = replay(episodes_of(log, n_episodes, kind), kind, n_s, n_a, gamma, schedule)
    np.testing.assert_allclose(Q, want, rtol=1e-9, atol=1e-12, err_msg=(
        f"{fn}: Q differs from the updates replayed from your env.step() transitions and epsilon_greedy choices"))


def test_loops_are_reproducible_and_keep_no_state(lesson):
    td = lesson.load("td.py")
    for fn in ("sarsa", "q_learning"):
        runs = []
        for _ in range(2):
            env = random_mdp(5, 3, seed=21, p_term=0.15, time_limit=5)
            env.reset(seed=9)
            runs.append(getattr(td, fn)(env, 40, 0.9, 0.3, Schedule(0.9, 0.6), np.random.default_rng(4)))
        np.testing.assert_array_equal(runs[0], runs[1], err_msg=f"{fn}: same seeds, different Q")
        assert runs[0] is not runs[1]
    pi = np.full((5, 3), 1.0 / 3.0)
    runs = []
    for _ in range(2):
        env = random_mdp(5, 3, seed=21, p_term=0.15, time_limit=5)
        env.reset(seed=9)
        runs.append(td.td0_evaluate(env, pi, 40, 0.9, Schedule(0.9, 0.6), np.random.default_rng(4)))
    np.testing.assert_array_equal(runs[0], runs[1], err_msg="td0_evaluate: same seeds, different V")
    assert runs[0] is not runs[1]


# ----------------------------------------------------------------------------------------------------
# Convergence to values computed independently
# ----------------------------------------------------------------------------------------------------
def test_td0_on_the_random_walk_approaches_one_sixth_to_five_sixths(lesson):
    td = lesson.load("td.py")
    env = random_walk(5)
    env.reset(seed=0)
    V = td.td0_evaluate(env, np.ones((7, 1)), 1000, 1.0, Schedule(1.0, 0.7), np.random.default_rng(0))
    want = np.arange(1, 6) / 6.0
    # 30 seeds: max error 0.040
    np.testing.assert_allclose(V[1:6], want, atol=0.08, err_msg="TD(0) on Sutton's 5-state random walk")
    assert V[0] == 0.0 and V[6] == 0.0, "terminal states are never updated"


@pytest.mark.points(2)
@pytest.mark.parametrize("mdp_seed", [1, 2])
def test_td0_converges_to_v_pi_of_a_random_mdp_with_time_limit(lesson, mdp_seed):
    td = lesson.load("td.py")
    gamma, n_s, n_a = 0.9, 6, 3
    env = random_mdp(n_s, n_a, seed=mdp_seed, p_term=0.1, time_limit=6)
    pi = np.random.default_rng(mdp_seed).dirichlet(np.ones(n_a), size=n_s)
    v_pi = (pi * q_pi_linear_solve(env, pi, gamma)).sum(axis=1)
    env.reset(seed=100 + mdp_seed)
    V = td.td0_evaluate(env, pi, 3000, gamma, Schedule(1.0, 0.8), np.random.default_rng(mdp_seed))
    # |V^pi| up to ~6; 30 seeds x 3 correct variants stay within 0.26; no bootstrap at truncation is >= 1.07 off
    np.testing.assert_allclose(V, v_pi, atol=0.5, err_msg="TD(0) vs V^pi from a linear solve")


@pytest.mark.points(2)
@pytest.mark.parametrize("mdp_seed", [3, 4])
def test_uniform_behaviour_sarsa_learns_q_pi_and_q_learning_learns_q_star(lesson, mdp_seed):
    td = lesson.load("td.py")
    gamma, n_s, n_a = 0.8, 6, 3
    env = random_mdp(n_s, n_a, seed=mdp_seed, p_term=0.1, time_limit=6)
    q_unif = q_pi_linear_solve(env, np.full((n_s, n_a), 1.0 / n_a), gamma)
    q_star = q_star_value_iteration(env, gamma)
    assert np.abs(q_star - q_unif).max() > 1.2  # the two targets are far apart on these MDPs
    # epsilon = 1: both follow the uniform random policy; only the bootstrap differs
    env.reset(seed=200 + mdp_seed)
    Q_sarsa = td.sarsa(env, 3000, gamma, 1.0, Schedule(1.0, 0.7), np.random.default_rng(mdp_seed))
    env.reset(seed=300 + mdp_seed)
    Q_ql = td.q_learning(env, 3000, gamma, 1.0, Schedule(1.0, 0.7), np.random.default_rng(mdp_seed))
    # 30 seeds x 3 correct variants: max error 0.24 (SARSA), 0.51 (Q-learning); swapping the two bootstraps
    # (SARSA with max, Q-learning with a sampled a') is >= 1.47 off
    np.testing.assert_allclose(Q_sarsa, q_unif, atol=0.8, err_msg="SARSA (on-policy) vs Q^pi of its policy")
    np.testing.assert_allclose(Q_ql, q_star, atol=0.8, err_msg="Q-learning (off-policy) vs Q* from value iteration")


@pytest.mark.points(2)
def test_cliff_walking_q_learning_finds_v_star_sarsa_the_safe_epsilon_greedy_value(lesson):
    td = lesson.load("td.py")
    env = gym.make("CliffWalking-v1")
    P = env.unwrapped.P
    q_star = q_star_from_gym_model(P, 48, 4, 1.0)
    edge = [36, 24, *range(25, 36)]  # the optimal path: up, then along the cliff edge
    env.reset(seed=0)
    Q_ql = td.q_learning(env, 300, 1.0, 0.1, lambda n: 0.5, np.random.default_rng(0))
    env.reset(seed=1)
    Q_sarsa = td.sarsa(env, 300, 1.0, 0.1, lambda n: 0.5, np.random.default_rng(1))
    # deterministic env, constant alpha: Q-learning's values on the optimal path converge geometrically
    np.testing.assert_allclose(Q_ql[edge].max(axis=1), q_star[edge].max(axis=1), atol=1e-6,
                               err_msg="Q-learning: max_a Q on the optimal path vs V* (value iteration on env.P)")
    # SARSA learns the value of the epsilon-greedy policy it follows: falling off now and then costs
    # -100, so the start is worth well below V* = -13 (seeds 0..99: at most -17.6)
    assert Q_sarsa[36].max() < -15.0, f"SARSA's start value {Q_sarsa[36].max():.2f} is V* (-13): it bootstraps on the max"
