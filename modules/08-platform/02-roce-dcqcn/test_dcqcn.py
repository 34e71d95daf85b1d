"""Tests for platform-02: DCQCN's reaction point, RED-like ECN marking and PFC hysteresis, each against an independent
scalar reference (plain Python floats, one flow at a time), then properties of the whole fluid simulation.

Tolerances: the unit comparisons are float64 with the same operations in the same order, so rel 1e-12. The simulation
uses seeded random marking; its thresholds are stated next to each assertion with the margin the reference run has.
"""

import math

import numpy as np
import pytest

G = 1.0 / 256


@pytest.fixture(scope="module")
def m(lesson):
    return lesson.load("dcqcn.py")


# ---------------------------------------------------------------- independent scalar references

def ref_mark(q, kmin, kmax, pmax):
    if q > kmax:
        return 1.0
    if q > kmin:
        return pmax * (q - kmin) / (kmax - kmin)
    return 0.0


class RefRp:
    """One flow of HPCC ns-3's Mellanox DCQCN (rdma-hw.cc *Mlx), written as plain Python."""

    def __init__(self, p, rc):
        self.p, self.rc, self.rt, self.alpha = p, rc, rc, 1.0
        self.stage, self.active, self.a_flag, self.d_flag, self.next = 0, False, False, False, math.inf

    def cnp(self):
        if not self.active:
            self.active, self.rt = True, self.rc
        else:
            self.a_flag = True
        self.d_flag = True

    def alpha_update(self):
        if self.active:
            self.alpha = (1 - self.p.g) * self.alpha + (self.p.g if self.a_flag else 0.0)
        self.a_flag = False

    def decrease(self, now):
        if self.d_flag:
            if self.p.clamp_target or self.stage != 0:
                self.rt = self.rc
            self.rc = max(self.p.min_gbps, self.rc * (1 - self.alpha / 2))
            self.stage, self.next, self.d_flag = 0, now + self.p.timer_us, False

    def increase(self, now):
        if self.next <= now:
            if self.stage == self.p.fast_recovery:
                self.rt = min(self.rt + self.p.rai_gbps, self.p.line_gbps)
            elif self.stage > self.p.fast_recovery:
                self.rt = min(self.rt + self.p.rhai_gbps, self.p.line_gbps)
            self.rc = (self.rc + self.rt) / 2
            self.stage += 1
            self.next += self.p.timer_us


# ---------------------------------------------------------------- the switch

@pytest.mark.points(1)
def test_mark_probability_is_red_between_kmin_and_kmax(m):
    rng = np.random.default_rng(2)
    for kmin, kmax, pmax in [(400e3, 1600e3, 0.2), (100e3, 400e3, 0.2), (5e3, 200e3, 0.01), (7.0, 9.0, 0.75)]:
        q = np.concatenate([rng.uniform(0, 1.3 * kmax, 301), [0.0, kmin, kmin + 1, kmax - 1, kmax, kmax + 1, 9 * kmax]])
        got = np.asarray(m.mark_probability(q.copy(), kmin, kmax, pmax), dtype=np.float64)
        want = np.array([ref_mark(x, kmin, kmax, pmax) for x in q])
        assert got.shape == q.shape
        bad = ~np.isclose(got, want, rtol=1e-12, atol=1e-15)
        assert not bad.any(), f"Kmin={kmin} Kmax={kmax} Pmax={pmax}: q={q[bad][:3]} gave {got[bad][:3]}, want {want[bad][:3]}"
    grid = m.mark_probability(np.arange(5.0).reshape(1, 5) * 5e5, 4e5, 1.6e6, 0.2)
    assert np.shape(grid) == (1, 5), "must keep the shape of qlen (one value per egress queue)"


@pytest.mark.points(1)
def test_pfc_pauses_at_xoff_and_resumes_only_at_xon(m):
    rng = np.random.default_rng(3)
    xoff, xon = 1000.0, 700.0
    # exact thresholds from a known state: an unpaused port pauses AT xoff, a paused one resumes AT xon
    old = np.array([False, False, True, True, False, True])
    row = np.array([xoff, xoff - 1e-9, xon, xon + 1e-9, 0.0, 2 * xoff])
    got = np.asarray(m.pfc_update(old.copy(), row.copy(), xoff, xon), dtype=bool)
    assert got.tolist() == [True, False, False, True, False, True], \
        f"state {old.tolist()} with bytes {row.tolist()}: got {got.tolist()} (pause at >= XOFF, resume at <= XON)"
    walk = np.clip(np.cumsum(rng.normal(0, 120, (400, 7)), axis=0) + 800, 0, None)
    walk[5, :] = [xoff, xon, xoff - 1, xon + 1, 0, 2 * xoff, 850]   # exact thresholds
    walk[6, :] = [xon, xon, xon + 1, xon, 0, xoff, 850]
    paused = np.zeros(7, dtype=bool)
    ref = [False] * 7
    toggles = 0
    for row in walk:
        new = np.asarray(m.pfc_update(paused.copy(), row.copy(), xoff, xon), dtype=bool)
        ref = [bool(b > xon) if p else bool(b >= xoff) for p, b in zip(ref, row, strict=True)]
        assert new.tolist() == ref, f"bytes {row.tolist()}: got {new.tolist()}, want {ref}"
        toggles += int((new != paused).sum())
        paused = new
    assert toggles > 20, "the random walk should cross the thresholds many times"


# ---------------------------------------------------------------- the reaction point

def run_rp(m, p, n, steps, seed, cnp_prob, start_rc, on_off):
    rng = np.random.default_rng(seed)
    rp = m.DcqcnRp(n, p)
    rp.rc[:] = start_rc
    rp.rt[:] = start_rc
    refs = [RefRp(p, float(r)) for r in start_rc]
    for t in range(steps):
        mask = rng.random(n) < (cnp_prob if t % sum(on_off) < on_off[0] else 0.0)   # congestion episodes
        rp.on_cnp(mask.copy())
        for r, c in zip(refs, mask, strict=True):
            if c:
                r.cnp()
        calls = [(t % p.alpha_interval_us == 0, "update_alpha", ()), (t % p.decrease_interval_us == 0, "decrease", (t,)),
                 (True, "increase", (t,))]
        for due, name, args in calls:
            if due:
                getattr(rp, name)(*args)
                for r in refs:
                    getattr(r, {"update_alpha": "alpha_update"}.get(name, name))(*args)
        for name in ("rc", "rt", "alpha"):
            got, want = getattr(rp, name), np.array([getattr(r, name) for r in refs])
            if not np.max(np.abs(got - want) / want) <= 1e-12:
                i = int(np.flatnonzero(~np.isclose(got, want, rtol=1e-12, atol=0))[0])
                pytest.fail(f"{p}: t={t} flow {i}: {name} = {got[i]!r}, reference {want[i]!r} (stage {refs[i].stage})")


@pytest.mark.points(2)
def test_rp_state_machine_matches_a_hand_computed_sequence(m):
    p = m.DcqcnParams()
    rp = m.DcqcnRp(1, p)
    one = np.array([True])
    rp.on_cnp(one)
    rp.decrease(0)                         # first CNP: alpha = 1, Rt stays 100 (stage 0), Rc halves
    assert (rp.rc[0], rp.rt[0]) == (50.0, 100.0)
    rp.increase(899)
    assert rp.rc[0] == 50.0, "the increase timer restarts at the cut: nothing is due before t = 900"
    rp.increase(900)                       # fast recovery (stage 0 < F = 1)
    assert (rp.rc[0], rp.rt[0]) == (75.0, 100.0)
    rp.increase(1800)                      # additive increase, Rt capped at the line rate
    assert (rp.rc[0], rp.rt[0]) == (87.5, 100.0)
    for _ in range(256):
        rp.update_alpha()                  # no CNP for 256 us: alpha = (255/256)^256
    a = (1 - G) ** 256
    assert math.isclose(rp.alpha[0], a, rel_tol=1e-12)
    rp.on_cnp(one)
    rp.decrease(2000)                      # stage 2 != 0: Rt <- Rc first
    rc = 87.5 * (1 - a / 2)
    assert math.isclose(rp.rc[0], rc, rel_tol=1e-12) and rp.rt[0] == 87.5
    rp.on_cnp(one)
    rp.decrease(2004)                      # consecutive cut (stage 0): Rt is not clamped again
    rc *= 1 - a / 2
    assert math.isclose(rp.rc[0], rc, rel_tol=1e-12) and rp.rt[0] == 87.5
    rp.increase(2900)                      # fast recovery, timer counted from the last cut at 2004
    assert math.isclose(rp.rc[0], rc, rel_tol=1e-12), "the last cut at t = 2004 restarts the timer: nothing due at 2900"
    rp.increase(2904)
    rc = (rc + 87.5) / 2
    assert math.isclose(rp.rc[0], rc, rel_tol=1e-12)
    rp.increase(3804)                      # additive increase: Rt += 50 Mb/s
    rc = (rc + 87.55) / 2
    assert math.isclose(rp.rt[0], 87.55, rel_tol=1e-12) and math.isclose(rp.rc[0], rc, rel_tol=1e-12)
    rp.increase(4704)                      # hyper increase: Rt += 100 Mb/s
    rc = (rc + 87.65) / 2
    assert math.isclose(rp.rt[0], 87.65, rel_tol=1e-12) and math.isclose(rp.rc[0], rc, rel_tol=1e-12)
    rp.update_alpha()                      # the two CNPs at 2000 and 2004 count once
    a = (1 - G) * a + G
    assert math.isclose(rp.alpha[0], a, rel_tol=1e-12), "alpha = (1 - g) alpha + g after CNPs"
    rp.update_alpha()
    assert math.isclose(rp.alpha[0], a * (1 - G), rel_tol=1e-12), "alpha decays when no CNP came since the last update"


@pytest.mark.points(1)
def test_increase_timer_keeps_its_schedule_when_called_late(m):
    """The timer fires every timer_us from the cut: a late call does the due event and the next one stays on
    the original schedule (next_increase += timer_us, not now + timer_us)."""
    p = m.DcqcnParams()
    rp = m.DcqcnRp(2, p)
    rp.on_cnp(np.array([True, True]))
    rp.decrease(0)                               # both cut to 50, timers due at 900
    rp.increase(950)                             # 50 us late: fast recovery for both
    assert rp.rc.tolist() == [75.0, 75.0]
    rp.increase(1800)                            # due at 900 + 900 = 1800 (not 950 + 900)
    assert rp.rc.tolist() == [87.5, 87.5], "the next increase is due one period after the previous due time"
    assert rp.next_increase.tolist() == [2700.0, 2700.0]


@pytest.mark.points(2)
def test_rp_matches_the_reference_on_random_cnp_sequences(m):
    P = m.DcqcnParams
    cases = [  # params, flows, steps, CNP probability per step during an episode, (episode, quiet) lengths
        (P(timer_us=9, fast_recovery=1), 5, 500, 0.1, (40, 80)),
        (P(timer_us=7, fast_recovery=3, clamp_target=True, decrease_interval_us=3, alpha_interval_us=2), 4, 500, 0.1,
         (30, 90)),
        (P(timer_us=5, fast_recovery=2, rai_gbps=4.0, rhai_gbps=9.0, g=1 / 16), 3, 400, 0.1, (20, 80)),  # Rt capped
        (P(timer_us=11, fast_recovery=0, min_gbps=30.0, g=0.5), 3, 300, 0.3, (100, 50)),             # min-rate floor
        (P(), 2, 2000, 0.05, (40, 960)),                                                             # HPCC's values
    ]
    for seed, (p, n, steps, prob, on_off) in enumerate(cases):
        start = np.random.default_rng(seed).uniform(20.0, p.line_gbps, n)
        start[0] = p.line_gbps
        run_rp(m, p, n, steps, seed, prob, start, on_off)   # every case reaches fast recovery, AI and HI


# ---------------------------------------------------------------- the whole simulation

def mean_gbps(res, flow, from_sample):
    return float(res.rate_trace[from_sample:, flow].mean())


@pytest.mark.points(2)
def test_staggered_flows_converge_to_the_fair_share_without_pfc(m):
    flows = [m.Flow(i, 0, start_us=300 * i) for i in range(3)]
    res = m.simulate(flows, 8000, sample_us=500, seed=5)
    x = res.rate_trace[8:].mean(axis=0)    # 4-8 ms
    fair = 100.0 / 3
    assert x.sum() >= 80.0, f"the bottleneck is underused: {x.round(2)} Gb/s"
    assert np.all(np.abs(x - fair) <= 0.3 * fair), f"4-8 ms mean rates {x.round(2)} Gb/s, fair share {fair:.1f} +-30%"
    assert res.paused_us.sum() == 0 and res.max_egress_queue[0] < m.SwitchParams().xoff, "ECN must act before PFC"
    assert res.max_egress_queue[0] > m.SwitchParams().kmin, "the queue must reach Kmin for DCQCN to act at all"
    assert res.dropped == 0


@pytest.mark.points(2)
def test_pfc_is_lossless_and_a_small_buffer_without_it_drops(m):
    sw = m.SwitchParams(buffer=300e3, xoff=64e3, xon=64e3 - 3072)   # 3 x (64 KB + 12.5 KB in flight) < 300 KB
    flows = [m.Flow(i, 0) for i in range(3)]
    on = m.simulate(flows, 1500, sw=sw, seed=1)
    assert on.dropped == 0 and on.max_buffer_used <= sw.buffer, "PFC on: nothing may be dropped"
    assert np.all(on.max_ingress_bytes <= sw.xoff + 12_500 + 1e-6), on.max_ingress_bytes
    assert on.delivered.sum() >= 0.97 * 1500 * 12_500, "PFC must not starve the bottleneck"
    assert np.all(on.paused_us > 0)
    off = m.simulate(flows, 1500, sw=m.SwitchParams(buffer=300e3, pfc=False), seed=1)
    assert off.dropped > 1e6, f"buffer below Kmin, no PFC: the incast must drop (dropped {off.dropped:.0f} B)"


@pytest.mark.points(2)
def test_pfc_pause_blocks_a_victim_flow_unless_ecn_acts_first(m):
    flows = [m.Flow(0, 0), m.Flow(0, 1, demand_gbps=20.0), m.Flow(1, 0), m.Flow(2, 0)]   # flow 1: the victim
    hol = m.simulate(flows, 3000, cc=None, sample_us=500)
    ok = m.simulate(flows, 3000, sample_us=500, seed=3)
    v_hol, v_ok = mean_gbps(hol, 1, 2), mean_gbps(ok, 1, 2)
    assert hol.dropped == 0 and ok.dropped == 0
    assert hol.paused_us[0] > 500 and v_hol < 12.0, f"no CC: ingress 0 paused {hol.paused_us[0]} us, victim {v_hol:.1f}"
    assert ok.paused_us.sum() == 0 and v_ok > 19.0, f"DCQCN keeps queues under XOFF: victim {v_ok:.1f} Gb/s of 20"
