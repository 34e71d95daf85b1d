"""Tests for train-13. References: brute-force scans over every sample (float64, no sorted search),
windows and packed sequences rebuilt with plain loops, and probes that plant sentinel samples just
after a tick (the nearest-frame match, interpolation, and a flipped or ignored clock lag all leak them)."""

import numpy as np
import pytest

D, P = 5, 3                     # embedding width, patches per frame
CAM_LAG, STATE_LAG, ACT_LAG = 0.035, -0.003, 0.0015
CAM_TOL, STATE_TOL = 0.050, 0.010
SENTINEL = 1.0e6


# ----------------------------------------------------------------------------- synthetic recordings
def _stream(mod, parts, lag):
    stamp = np.concatenate([c + lag for c, _ in parts])
    ep = np.concatenate([np.full(len(c), e, dtype=np.int64) for e, (c, _) in enumerate(parts)])
    val = np.concatenate([v for _, v in parts])
    return mod.Stream(stamp, ep, val, lag)


def _capture_times(rng, start, period, dur, jitter, drop, burst):
    n = int(dur / period)
    c = start + period * np.arange(n) + rng.uniform(-jitter, jitter, n)
    keep = rng.random(n) >= drop
    b0 = rng.integers(n // 4, 3 * n // 4)
    keep[b0:b0 + burst] = False            # a burst of dropped samples: a gap longer than the tolerance
    return c[keep]


def make_recording(mod, seed, n_ep=3):
    rng = np.random.default_rng(seed)
    cams, states, acts, lang = [], [], [], {}
    for e in range(n_ep):
        dur = rng.uniform(1.1, 1.7)
        c = _capture_times(rng, rng.uniform(-0.02, 0.08), 1 / 30, dur, 0.003, 0.12, 2)
        s = _capture_times(rng, rng.uniform(-0.01, 0.02), 1 / 200, dur, 0.0004, 0.05, 3)
        a = 0.02 * np.arange(int(dur / 0.02))
        cams.append((c, rng.uniform(-2, 2, (len(c), P, D))))
        states.append((s, rng.uniform(-2, 2, (len(s), D))))
        acts.append((a, rng.uniform(-2, 2, (len(a), D))))
        lang[e] = rng.uniform(-2, 2, (int(rng.integers(2, 6)), D))
    return mod.Recording(_stream(mod, cams, CAM_LAG), _stream(mod, states, STATE_LAG),
                         _stream(mod, acts, ACT_LAG), lang)


# ----------------------------------------------------------------------------- brute-force references
def ref_asof(stamp, lag, t, max_age):
    capture = [float(s) - lag for s in stamp]
    out = []
    for q in np.atleast_1d(t):
        past = [j for j in range(len(capture)) if capture[j] <= q]
        j = max(past, key=lambda j: capture[j]) if past else -1
        out.append(j if j >= 0 and q - capture[j] <= max_age else -1)
    return out


def ref_windows(rec, k, horizon, cam_tol, state_tol):
    out = []
    for i in range(len(rec.action.stamp)):
        ep = int(rec.action.episode[i])
        t = rec.action.stamp[i] - rec.action.lag_s
        cam_ids = np.flatnonzero(rec.camera.episode == ep)
        st_ids = np.flatnonzero(rec.state.episode == ep)
        act_ids = np.flatnonzero(rec.action.episode == ep)
        c = ref_asof(rec.camera.stamp[cam_ids], rec.camera.lag_s, t, cam_tol)[0]
        s = ref_asof(rec.state.stamp[st_ids], rec.state.lag_s, t, state_tol)[0]
        if c < k - 1 or s < 0:
            continue
        pos = int(np.flatnonzero(act_ids == i)[0])
        chunk = [act_ids[min(pos + h, len(act_ids) - 1)] for h in range(horizon)]
        pad = [pos + h >= len(act_ids) for h in range(horizon)]
        out.append((ep, t, list(cam_ids[c - k + 1:c + 1]), int(st_ids[s]), chunk, pad))
    return out


def ref_pack(rec, w):
    rows, mods, times, blocks = [], [], [], []

    def add(vec, m, tm, b):
        rows.append(vec)
        mods.append(m)
        times.append(tm)
        blocks.append(b)

    for vec in rec.language[w.episode]:
        add(vec, 0, -np.inf, 0)
    for f in w.frames:
        for p in range(rec.camera.value.shape[1]):
            add(rec.camera.value[f, p], 1, rec.camera.stamp[f] - rec.camera.lag_s, 0)
    add(rec.state.value[w.state], 2, rec.state.stamp[w.state] - rec.state.lag_s, 1)
    for a in w.actions:
        add(rec.action.value[a], 3, rec.action.stamp[a] - rec.action.lag_s, 2)
    n = len(rows)
    attn = np.array([[blocks[j] <= blocks[i] for j in range(n)] for i in range(n)])
    loss = np.array([m == 3 for m in mods])
    loss[np.array(mods) == 3] = ~np.asarray(w.action_is_pad, dtype=bool)
    return np.array(rows), np.array(mods), np.array(times), attn, loss


def _as_tuple(w):
    return (int(w.episode), float(w.t), [int(x) for x in w.frames], int(w.state),
            [int(x) for x in w.actions], [bool(x) for x in w.action_is_pad])


def _compare_windows(got, want, what):
    got = [_as_tuple(w) for w in got]
    assert len(got) == len(want), f"{what}: {len(got)} windows, expected {len(want)}"
    for g, r in zip(got, want, strict=True):
        ctx = f"{what}: window at episode {r[0]}, t = {r[1]:.4f}"
        assert g[0] == r[0] and abs(g[1] - r[1]) <= 1e-12, f"{ctx}: got episode {g[0]}, t = {g[1]:.4f}"
        assert g[2] == r[2], f"{ctx}: camera frames {g[2]}, expected {r[2]}"
        assert g[3] == r[3], f"{ctx}: proprio index {g[3]}, expected {r[3]}"
        assert g[4] == r[4], f"{ctx}: action chunk {g[4]}, expected {r[4]}"
        assert g[5] == r[5], f"{ctx}: action_is_pad {g[5]}, expected {r[5]}"


# ----------------------------------------------------------------------------- tests
@pytest.mark.points(1)
def test_asof_matches_brute_force_on_jittered_streams(lesson):
    mod = lesson.load("vla_align.py")
    rng = np.random.default_rng(3)
    for trial in range(12):
        cap = _capture_times(rng, rng.uniform(-0.05, 0.05), 1 / 30, 1.3, 0.004, 0.15, 3)
        lag = [0.035, -0.004, 0.0, 0.0171][trial % 4]
        stamp = cap + lag
        q = np.concatenate([rng.uniform(-0.1, 1.4, 57), cap[rng.integers(0, len(cap), 5)]])
        for tol in (0.02, 0.05, 1.0):
            got = np.asarray(mod.asof_indices(stamp, lag, q, tol))
            want = ref_asof(stamp, lag, q, tol)
            bad = np.flatnonzero(got != np.array(want))
            assert bad.size == 0, (
                f"lag {lag}, max_age {tol}: at t = {q[bad[0]]:.5f} got index {got[bad[0]]}, expected "
                f"{want[bad[0]]} (the newest frame with stamp - lag <= t, -1 if none or older than max_age)")


@pytest.mark.points(1)
def test_asof_ties_and_age_boundary_are_inclusive(lesson):
    mod = lesson.load("vla_align.py")
    lag = 0.125                                  # dyadic: every sum below is exact in float64
    stamp = np.array([0.25, 0.5, 0.75, 1.5]) + lag
    q = np.array([0.25, 0.5, 0.375, 0.875, 0.9375, 0.1875, 1.5, 1.25])
    got = [int(x) for x in mod.asof_indices(stamp, lag, q, 0.125)]
    assert got == [0, 1, 0, 2, -1, -1, 3, -1], (
        f"got {got}: a sample captured exactly at t counts, an age of exactly max_age counts, "
        "older is -1, nothing before the first sample is -1")
    empty = mod.asof_indices(np.array([]), 0.0, np.array([0.1, 0.2]), 1.0)
    assert [int(x) for x in empty] == [-1, -1], "an empty stream has no sample at or before t"


@pytest.mark.points(2)
@pytest.mark.parametrize("seed,k,horizon", [(5, 3, 7), (6, 1, 50), (7, 4, 11)])
def test_windows_match_reference(lesson, seed, k, horizon):
    mod = lesson.load("vla_align.py")
    rec = make_recording(mod, seed)
    got = mod.make_windows(rec, k, horizon, CAM_TOL, STATE_TOL)
    _compare_windows(got, ref_windows(rec, k, horizon, CAM_TOL, STATE_TOL), f"seed {seed}, k {k}, H {horizon}")


def _probe_copy(mod, rec, which, t, eps):
    """rec (one episode) with the samples of one stream captured in (t, t + 12 ms] removed and one
    sentinel sample captured at t + eps inserted in their place."""
    st = getattr(rec, which)
    cap = st.stamp - st.lag_s
    ep = 0
    del_ = (st.episode == ep) & (cap > t) & (cap <= t + 0.012)
    keep = ~del_
    stamp, epi, val = st.stamp[keep], st.episode[keep], st.value[keep]
    pos = int(np.flatnonzero((epi == ep) & (stamp - st.lag_s <= t))[-1]) + 1
    stamp = np.insert(stamp, pos, t + eps + st.lag_s)
    epi = np.insert(epi, pos, ep)
    val = np.insert(val, pos, np.full(val.shape[1:], SENTINEL), axis=0)
    new = mod.Stream(stamp, epi, val, st.lag_s)
    parts = {"camera": rec.camera, "state": rec.state, "action": rec.action, which: new}
    return mod.Recording(parts["camera"], parts["state"], parts["action"], rec.language), pos


@pytest.mark.points(2)
@pytest.mark.parametrize("which", ["camera", "state"])
def test_planted_future_samples_never_reach_the_observation(lesson, which):
    mod = lesson.load("vla_align.py")
    rec = make_recording(mod, 11, n_ep=1)
    k, horizon = 2, 5
    t_all = rec.action.stamp - rec.action.lag_s
    probes = [i for i in range(5, len(t_all), 7)]
    checked = 0
    for n, i in enumerate(probes):
        eps = [1e-6, 2e-5, 1e-4, 0.002][n % 4]
        prec, planted = _probe_copy(mod, rec, which, float(t_all[i]), eps)
        want = [w for w in ref_windows(prec, k, horizon, 1.0, 1.0) if w[4][0] == i]
        if not want:
            continue
        got = [w for w in mod.make_windows(prec, k, horizon, 1.0, 1.0) if int(w.actions[0]) == i]
        assert got, f"the window at t = {t_all[i]:.4f} is missing"
        w = got[0]
        used = [int(x) for x in w.frames] if which == "camera" else [int(w.state)]
        assert planted not in used, (
            f"{which} sample captured {eps * 1e3:g} ms AFTER t = {t_all[i]:.4f} (stamp - lag) was used: "
            f"future leakage (nearest-timestamp match, interpolation, or the lag applied with the wrong sign?)")
        packed = mod.pack_window(prec, w)
        assert np.abs(np.asarray(packed.tokens)).max() < 1e5, (
            f"a token of the window at t = {t_all[i]:.4f} carries the planted future {which} sentinel "
            "(interpolating toward the next sample leaks it too)")
        checked += 1
    assert checked >= 8


@pytest.mark.points(1)
def test_episode_boundaries_and_restarting_clocks(lesson):
    mod = lesson.load("vla_align.py")
    rng = np.random.default_rng(21)
    # two short episodes whose clocks both start at 0: a global sorted search mixes them up
    cam = [(np.array([0.0, 0.03, 0.07, 0.1]), rng.uniform(-2, 2, (4, P, D))),
           (np.array([0.01, 0.04, 0.065]), rng.uniform(-2, 2, (3, P, D)))]
    st = [(0.005 * np.arange(24), rng.uniform(-2, 2, (24, D))), (0.005 * np.arange(24), rng.uniform(-2, 2, (24, D)))]
    act = [(0.02 * np.arange(6), rng.uniform(-2, 2, (6, D))), (0.02 * np.arange(5), rng.uniform(-2, 2, (5, D)))]
    rec = mod.Recording(_stream(mod, cam, CAM_LAG), _stream(mod, st, STATE_LAG), _stream(mod, act, ACT_LAG),
                        {0: rng.uniform(-2, 2, (3, D)), 1: rng.uniform(-2, 2, (2, D))})
    got = mod.make_windows(rec, 2, 4, CAM_TOL, STATE_TOL)
    want = ref_windows(rec, 2, 4, CAM_TOL, STATE_TOL)
    for w in got:
        ep = int(w.episode)
        for name, idx, s in (("camera", w.frames, rec.camera), ("action", w.actions, rec.action)):
            assert all(int(s.episode[j]) == ep for j in idx), (
                f"window of episode {ep} at t = {w.t:.3f} uses {name} samples of another episode: {list(idx)}")
    _compare_windows(got, want, "two episodes with restarting clocks")


@pytest.mark.points(1)
@pytest.mark.parametrize("seed,k,horizon", [(8, 3, 6), (9, 1, 1)])
def test_packed_layout_mask_and_loss_mask(lesson, seed, k, horizon):
    mod = lesson.load("vla_align.py")
    rec = make_recording(mod, seed)
    wins = [mod.Window(*(r[0], r[1], np.array(r[2]), r[3], np.array(r[4]), np.array(r[5])))
            for r in ref_windows(rec, k, horizon, CAM_TOL, STATE_TOL)]
    assert any(w.action_is_pad.any() for w in wins) or horizon == 1
    for w in wins[:: max(1, len(wins) // 25)] + wins[-3:]:
        tok, modal, tm, attn, loss = ref_pack(rec, w)
        got = mod.pack_window(rec, w)
        ctx = f"window at episode {w.episode}, t = {w.t:.4f}"
        assert np.array_equal(np.asarray(got.modality), modal), (
            f"{ctx}: modality order {list(got.modality)}, expected {list(modal)} "
            "(language, frames oldest first with P patches each, state, H actions)")
        assert np.array_equal(np.asarray(got.tokens), tok), f"{ctx}: token embeddings differ"
        assert np.array_equal(np.asarray(got.time), tm), f"{ctx}: token times differ"
        ga = np.asarray(got.attn, dtype=bool)
        obs = modal != 3
        assert not ga[np.ix_(obs, ~obs)].any(), f"{ctx}: an observation token attends to an action token"
        assert np.array_equal(ga, attn), f"{ctx}: attention mask is not the 3-block causal mask"
        assert np.array_equal(np.asarray(got.loss_mask, dtype=bool), loss), f"{ctx}: loss_mask differs"
