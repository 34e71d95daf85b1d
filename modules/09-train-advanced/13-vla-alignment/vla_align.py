"""train-13: multi-rate sensor alignment for a VLA training pipeline.

Three timestamped streams per episode (camera ~30 Hz with jitter and dropped frames, proprioception
~200 Hz, actions 50 Hz) plus one language instruction per episode. Every stream stamps its samples on
its own clock, and the stamp leads the capture time on the robot's clock by a known constant:

    stamp = capture_time + lag_s        (so capture_time = stamp - lag_s)

lag_s > 0 for a camera whose stamp is taken when the host receives the frame (pipeline latency);
lag_s < 0 for a sensor whose clock runs behind the robot clock. Timestamps restart in every episode.

The training samples are the action ticks. For the action at capture time t (robot clock):
  * the observation is causal (an "as-of" join): the newest camera frame and the newest proprio
    sample captured at or before t, never one captured after t (zero-order hold, no interpolation);
  * the target is the action chunk: this action and the next H-1 actions of the same episode.
"""

from dataclasses import dataclass

import numpy as np

LANG, IMAGE, STATE, ACTION = 0, 1, 2, 3  # modality codes of packed tokens


@dataclass
class Stream:
    stamp: np.ndarray    # [n] float64 seconds on the stream's clock; sorted within each episode
    episode: np.ndarray  # [n] int64 episode id, non-decreasing (episodes are stored one after another)
    value: np.ndarray    # [n, ...] float64 payload
    lag_s: float         # stamp = capture time on the robot clock + lag_s


@dataclass
class Recording:
    camera: Stream              # value [n, P, D]: P patch embeddings of width D per frame
    state: Stream               # value [n, D]
    action: Stream              # value [n, D]
    language: dict[int, np.ndarray]  # episode id -> [L_e, D] instruction token embeddings


@dataclass
class Window:
    episode: int
    t: float                    # capture time of the window's first action (robot clock)
    frames: np.ndarray          # [k] int64 global camera indices, oldest first; the last is as-of t
    state: int                  # global proprio index, as-of t
    actions: np.ndarray         # [H] int64 global action indices (past the episode end: its last action)
    action_is_pad: np.ndarray   # [H] bool, True where the chunk ran past the episode end


@dataclass
class Packed:
    tokens: np.ndarray      # [N, D] float64
    modality: np.ndarray    # [N] int64 (LANG, IMAGE, STATE, ACTION)
    time: np.ndarray        # [N] float64 capture time of each token (LANG: -inf)
    attn: np.ndarray        # [N, N] bool, attn[i, j]: query token i may attend to key token j
    loss_mask: np.ndarray   # [N] bool, True on action tokens that are real targets


def episode_slices(episode: np.ndarray) -> dict[int, slice]:
    """Episode id -> the slice of the flat stream that holds it."""
    ids, first = np.unique(episode, return_index=True)
    bounds = list(first) + [len(episode)]
    return {int(e): slice(int(bounds[i]), int(bounds[i + 1])) for i, e in enumerate(ids)}


def asof_indices(stamp: np.ndarray, lag_s: float, t: np.ndarray, max_age_s: float) -> np.ndarray:
    """For each query time t (robot clock), the index of the newest sample captured at or before t.

    stamp: [n] sorted stamps of ONE episode of one stream. Returns [len(t)] int64; -1 where no sample
    was captured at or before t, or where the newest one is older than max_age_s (t - capture > max_age_s).
    A sample captured exactly at t counts. Never returns a sample captured after t.
    """
    t = np.asarray(t, dtype=np.float64)
    ### HINT: convert stamps to capture times first; a sorted search finds "the last one <= t" in O(log n)
    ### BEGIN SOLUTION
    capture = stamp - lag_s
    if len(capture) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    idx = np.searchsorted(capture, t, side="right") - 1
    ok = idx >= 0
    age = t - capture[np.maximum(idx, 0)]
    ok &= age <= max_age_s
    return np.where(ok, idx, -1).astype(np.int64)
    ### END SOLUTION


def make_windows(rec: Recording, k: int, horizon: int, cam_tol_s: float, state_tol_s: float) -> list[Window]:
    """One window per action tick, in the order of the action stream, never crossing an episode.

    A tick is dropped when its as-of camera frame or proprio sample is missing or too old (tolerances
    above), or when its episode has fewer than k - 1 camera frames before the as-of frame. The action
    chunk is never dropped for running past the episode end: it is padded with the episode's last
    action and flagged in action_is_pad.
    """
    cam_sl = episode_slices(rec.camera.episode)
    st_sl = episode_slices(rec.state.episode)
    windows: list[Window] = []
    for ep, a_sl in episode_slices(rec.action.episode).items():
        if ep not in cam_sl or ep not in st_sl:
            continue
        c_sl, s_sl = cam_sl[ep], st_sl[ep]
        t = rec.action.stamp[a_sl] - rec.action.lag_s
        ### HINT: work in episode-local indices, then add each stream's episode start
        ### BEGIN SOLUTION
        cam = asof_indices(rec.camera.stamp[c_sl], rec.camera.lag_s, t, cam_tol_s)
        st = asof_indices(rec.state.stamp[s_sl], rec.state.lag_s, t, state_tol_s)
        n_act = a_sl.stop - a_sl.start
        for i in range(n_act):
            if cam[i] < k - 1 or st[i] < 0:
                continue
            frames = c_sl.start + np.arange(cam[i] - k + 1, cam[i] + 1)
            steps = i + np.arange(horizon)
            pad = steps >= n_act
            actions = a_sl.start + np.minimum(steps, n_act - 1)
            windows.append(Window(ep, float(t[i]), frames.astype(np.int64), int(s_sl.start + st[i]),
                                  actions.astype(np.int64), pad))
        ### END SOLUTION
    return windows


def pack_window(rec: Recording, w: Window) -> Packed:
    """Token sequence of one window, in this order (time order within the observation):

        [language L_e] [frame 0: P patches] ... [frame k-1: P patches] [state: 1] [actions: H]

    Attention is blockwise causal with three blocks, as in pi0: block 0 = language + all image tokens,
    block 1 = the state token, block 2 = the action tokens. A token attends to every token of its own
    block and of earlier blocks, never to a later block (so no observation token sees the targets).
    loss_mask is True on action tokens whose action_is_pad is False.
    """
    lang = rec.language[w.episode]
    cam_t = rec.camera.stamp[w.frames] - rec.camera.lag_s
    st_t = rec.state.stamp[w.state] - rec.state.lag_s
    act_t = rec.action.stamp[w.actions] - rec.action.lag_s
    n_patch = rec.camera.value.shape[1]
    ### HINT: build tokens, modality, time and a block id per token side by side; the mask follows from block ids
    ### BEGIN SOLUTION
    img = rec.camera.value[w.frames].reshape(-1, rec.camera.value.shape[-1])
    tokens = np.concatenate([lang, img, rec.state.value[w.state][None], rec.action.value[w.actions]])
    sizes = [len(lang), len(img), 1, len(w.actions)]
    modality = np.repeat([LANG, IMAGE, STATE, ACTION], sizes).astype(np.int64)
    time = np.concatenate([np.full(len(lang), -np.inf), np.repeat(cam_t, n_patch), [st_t], act_t])
    block = np.repeat([0, 0, 1, 2], sizes)
    attn = block[None, :] <= block[:, None]
    loss_mask = modality == ACTION
    loss_mask[modality == ACTION] = ~w.action_is_pad
    return Packed(tokens, modality, time, attn, loss_mask)
    ### END SOLUTION
