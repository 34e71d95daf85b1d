"""rl-02: tabular temporal-difference learning — TD(0) evaluation, SARSA and Q-learning.

Everything is tabular: a state is an int in [0, n_states), an action an int in [0, n_actions),
V is a float64 array (n_states,), Q a float64 array (n_states, n_actions).

The environment is any gymnasium-style env with discrete spaces (FrozenLake-v1, CliffWalking-v1, ...):
`env.reset()` -> (obs, info) and `env.step(a)` -> (obs, reward, terminated, truncated, info).
- terminated: the MDP itself ended (hole, goal). No future reward: the target is r alone.
- truncated:  the episode was cut from outside (TimeLimit). The state s_next still has a future:
              the target keeps bootstrapping on s_next. Either flag ends the episode.

Randomness comes only from the `rng` handed in (numpy Generator); the caller seeds the env.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

StepSize = Callable[[int], float]  # n (1 on the first update of that entry) -> alpha_n


def epsilon_greedy(q_row: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """An action for one state: with probability epsilon uniform over ALL actions, else argmax.

    Greedy ties go to the lowest index (np.argmax). q_row is not modified.
    """
    ### HINT: one uniform draw decides explore/exploit; exploring picks among all len(q_row) actions
    ### BEGIN SOLUTION
    if rng.random() < epsilon:
        return int(rng.integers(len(q_row)))
    return int(np.argmax(q_row))
    ### END SOLUTION


def td0_update(V: np.ndarray, s: int, r: float, s_next: int, terminated: bool, truncated: bool,
               alpha: float, gamma: float) -> float:
    """One TD(0) update of V[s] in place; returns the TD error delta (before the update)."""
    ### HINT: only `terminated` removes the bootstrap term; truncation still has a future
    ### BEGIN SOLUTION
    target = r if terminated else r + gamma * V[s_next]
    delta = float(target - V[s])
    V[s] += alpha * delta
    return delta
    ### END SOLUTION


def sarsa_update(Q: np.ndarray, s: int, a: int, r: float, s_next: int, a_next: int,
                 terminated: bool, truncated: bool, alpha: float, gamma: float) -> float:
    """One SARSA update of Q[s, a] in place, bootstrapping on the next action actually chosen."""
    ### BEGIN SOLUTION
    target = r if terminated else r + gamma * Q[s_next, a_next]
    delta = float(target - Q[s, a])
    Q[s, a] += alpha * delta
    return delta
    ### END SOLUTION


def q_learning_update(Q: np.ndarray, s: int, a: int, r: float, s_next: int,
                      terminated: bool, truncated: bool, alpha: float, gamma: float) -> float:
    """One Q-learning update of Q[s, a] in place, bootstrapping on the greedy value of s_next."""
    ### BEGIN SOLUTION
    target = r if terminated else r + gamma * np.max(Q[s_next])
    delta = float(target - Q[s, a])
    Q[s, a] += alpha * delta
    return delta
    ### END SOLUTION


def td0_evaluate(env, pi: np.ndarray, n_episodes: int, gamma: float, step_size: StepSize,
                 rng: np.random.Generator) -> np.ndarray:
    """V^pi by TD(0): n_episodes episodes, actions drawn from pi[s] (rows sum to 1) with rng.

    V starts at zeros; the update of state s uses alpha = step_size(n), n = how many times V[s]
    has been updated including this one.
    """
    n_states, n_actions = env.observation_space.n, env.action_space.n
    ### HINT: count updates per state; the episode ends on terminated OR truncated, the target only on terminated
    ### BEGIN SOLUTION
    V = np.zeros(n_states)
    visits = np.zeros(n_states, dtype=np.int64)
    cdf = np.cumsum(pi, axis=1)
    for _ in range(n_episodes):
        s, _ = env.reset()
        while True:
            a = min(int(np.searchsorted(cdf[s], rng.random(), side="right")), n_actions - 1)
            s_next, r, terminated, truncated, _ = env.step(a)
            visits[s] += 1
            td0_update(V, s, r, s_next, terminated, truncated, step_size(int(visits[s])), gamma)
            if terminated or truncated:
                break
            s = s_next
    return V
    ### END SOLUTION


def sarsa(env, n_episodes: int, gamma: float, epsilon: float, step_size: StepSize,
          rng: np.random.Generator) -> np.ndarray:
    """On-policy TD control: Q of the epsilon-greedy policy it follows.

    Every action (the executed ones and the a_next it bootstraps on) comes from
    epsilon_greedy(Q[s], epsilon, rng). Q starts at zeros; step sizes as in td0_evaluate, counted per (s, a).
    """
    n_states, n_actions = env.observation_space.n, env.action_space.n
    ### HINT: choose a_next in s_next BEFORE updating Q[s, a]; that a_next is the action executed next
    ### BEGIN SOLUTION
    Q = np.zeros((n_states, n_actions))
    visits = np.zeros((n_states, n_actions), dtype=np.int64)
    for _ in range(n_episodes):
        s, _ = env.reset()
        a = epsilon_greedy(Q[s], epsilon, rng)
        while True:
            s_next, r, terminated, truncated, _ = env.step(a)
            a_next = epsilon_greedy(Q[s_next], epsilon, rng)
            visits[s, a] += 1
            sarsa_update(Q, s, a, r, s_next, a_next, terminated, truncated,
                         step_size(int(visits[s, a])), gamma)
            if terminated or truncated:
                break
            s, a = s_next, a_next
    return Q
    ### END SOLUTION


def q_learning(env, n_episodes: int, gamma: float, epsilon: float, step_size: StepSize,
               rng: np.random.Generator) -> np.ndarray:
    """Off-policy TD control: behaves epsilon-greedily, learns Q* (the greedy policy's values).

    Actions from epsilon_greedy(Q[s], epsilon, rng); Q starts at zeros; step sizes counted per (s, a).
    """
    n_states, n_actions = env.observation_space.n, env.action_space.n
    ### BEGIN SOLUTION
    Q = np.zeros((n_states, n_actions))
    visits = np.zeros((n_states, n_actions), dtype=np.int64)
    for _ in range(n_episodes):
        s, _ = env.reset()
        while True:
            a = epsilon_greedy(Q[s], epsilon, rng)
            s_next, r, terminated, truncated, _ = env.step(a)
            visits[s, a] += 1
            q_learning_update(Q, s, a, r, s_next, terminated, truncated,
                              step_size(int(visits[s, a])), gamma)
            if terminated or truncated:
                break
            s = s_next
    return Q
    ### END SOLUTION
