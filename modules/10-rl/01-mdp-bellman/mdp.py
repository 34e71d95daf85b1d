"""rl-01: value iteration and policy iteration on a tabular MDP given as arrays.

An MDP is the arrays (P, R) plus gamma and an optional terminal mask:
  P[s, a, s2]  float64 (S, A, S): probability of landing in s2 after action a in state s; P[s, a] sums to 1
  R[s, a]      float64 (S, A): expected reward of taking a in s, E[r | s, a] (reward on the transition, averaged)
  gamma        discount, 0 <= gamma < 1
  terminal     None or bool (S,): terminal states absorb with reward 0, whatever their rows of P and R say
A policy is an int64 array pi of shape (S,): pi[s] is the action taken in s.
No function here changes P, R or terminal (they may be read-only arrays).
"""

from __future__ import annotations

import numpy as np

TIE_ATOL = 1e-12  # actions whose Q is within this of the row max count as tied; the lowest index wins


def absorbing(P: np.ndarray, R: np.ndarray, terminal: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Float64 copies of P and R in which every terminal state loops onto itself with reward 0."""
    ### HINT: copy first; a terminal row of P becomes a one-hot on the state itself for every action, its R row 0
    ### BEGIN SOLUTION
    P = np.array(P, dtype=np.float64)  # np.array copies: the caller's arrays stay untouched
    R = np.array(R, dtype=np.float64)
    if terminal is not None:
        done = np.flatnonzero(terminal)
        P[done] = 0.0
        P[done, :, done] = 1.0  # P[t, a, t] = 1 for every terminal t and every action a
        R[done] = 0.0
    return P, R
    ### END SOLUTION


def q_values(P: np.ndarray, R: np.ndarray, gamma: float, V: np.ndarray) -> np.ndarray:
    """One Bellman backup for every (s, a): Q[s, a] = R[s, a] + gamma * sum_s2 P[s, a, s2] V[s2]. Shape (S, A)."""
    return R + gamma * (P @ V)


def greedy(Q: np.ndarray) -> np.ndarray:
    """For each state, the LOWEST action index whose Q is within TIE_ATOL of the row's max. int64 (S,)."""
    ### HINT: first mark the near-maximal actions of each row, then take the first marked one
    ### BEGIN SOLUTION
    near_max = Q >= Q.max(axis=1, keepdims=True) - TIE_ATOL
    return np.argmax(near_max, axis=1).astype(np.int64)  # argmax of booleans: the first True
    ### END SOLUTION


def policy_evaluation(
    P: np.ndarray, R: np.ndarray, gamma: float, pi: np.ndarray, terminal: np.ndarray | None = None
) -> np.ndarray:
    """V^pi (float64, shape (S,)) from the linear system (I - gamma P_pi) V = R_pi, solved exactly."""
    ### HINT: P_pi[s] = P[s, pi[s]] is an (S, S) matrix and R_pi[s] = R[s, pi[s]]; index each state's own row
    ### BEGIN SOLUTION
    P, R = absorbing(P, R, terminal)
    states = np.arange(P.shape[0])
    P_pi = P[states, pi]
    R_pi = R[states, pi]
    return np.linalg.solve(np.eye(len(states)) - gamma * P_pi, R_pi)
    ### END SOLUTION


def value_iteration(
    P: np.ndarray, R: np.ndarray, gamma: float, tol: float, terminal: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Synchronous value iteration from V_0 = 0: V_k = max_a Q(V_{k-1}).

    Stops at the first k with ||V_k - V_{k-1}||_inf < tol (1 - gamma) / (2 gamma), which guarantees
    ||V_k - V*||_inf < tol / 2 and that greedy(Q(V_k)) is tol-optimal. Returns (V_k, greedy(Q(V_k)), k).
    """
    ### HINT: ||V_k - V*|| <= gamma/(1-gamma) ||V_k - V_{k-1}||; the stopping condition must also hold up at gamma = 0
    ### BEGIN SOLUTION
    P, R = absorbing(P, R, terminal)
    V = np.zeros(P.shape[0])
    sweeps = 0
    while True:
        V_next = q_values(P, R, gamma, V).max(axis=1)
        sweeps += 1
        delta = np.max(np.abs(V_next - V))
        V = V_next
        if 2.0 * gamma * delta < tol * (1.0 - gamma):  # multiplied out: no division by gamma = 0
            return V, greedy(q_values(P, R, gamma, V)), sweeps
    ### END SOLUTION


def policy_iteration(
    P: np.ndarray, R: np.ndarray, gamma: float, terminal: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Policy iteration from pi_0 = 0 in every state: evaluate exactly, improve greedily (tie rule),
    stop when the improved policy equals the current one. Returns (V^pi, pi, number of evaluations)."""
    ### HINT: the loop ends on an evaluation whose greedy policy is the policy just evaluated; count that one too
    ### BEGIN SOLUTION
    P, R = absorbing(P, R, terminal)
    pi = np.zeros(P.shape[0], dtype=np.int64)
    evaluations = 0
    while True:
        V = policy_evaluation(P, R, gamma, pi)
        evaluations += 1
        improved = greedy(q_values(P, R, gamma, V))
        if np.array_equal(improved, pi):
            return V, pi, evaluations
        pi = improved
    ### END SOLUTION


def frozenlake_arrays(env) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P, R, terminal) of a gymnasium FrozenLake env (as gym.make returns it, wrappers included).

    env.unwrapped.P[s][a] is a list of (prob, next_state, reward, terminated); holes 'H' and the goal 'G'
    are the terminal states.
    """
    lake = env.unwrapped
    n_states, n_actions = int(lake.observation_space.n), int(lake.action_space.n)
    P = np.zeros((n_states, n_actions, n_states))
    R = np.zeros((n_states, n_actions))
    ### HINT: several listed transitions can land on the same cell; the reward of a transition counts with its probability
    ### BEGIN SOLUTION
    for s in range(n_states):
        for a in range(n_actions):
            for prob, s_next, reward, _terminated in lake.P[s][a]:
                P[s, a, s_next] += prob  # a slip into a wall and the move along it both stay put
                R[s, a] += prob * reward
    ### END SOLUTION
    terminal = np.isin(lake.desc.ravel(), (b"G", b"H"))
    return P, R, terminal
