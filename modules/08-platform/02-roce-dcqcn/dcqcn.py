"""platform-02: DCQCN rate control, RED-like ECN marking and PFC on one switch (a fluid model in 1 us steps).

Every parameter comes from ONE source: HPCC's ns-3 simulator (alibaba-edu/High-Precision-Congestion-Control @ 9f4be2a9ea,
`simulation/mix/config.txt`, 100 Gb/s entries), whose DCQCN is "Mellanox's version" (`rdma-hw.cc`, *Mlx functions):
the reaction point (RP) updates alpha every ALPHA_RESUME_INTERVAL, checks for a rate cut every RATE_DECREASE_INTERVAL and
raises its rate on a timer only (no byte counter). The switch marks like `switch-mmu.cc` ShouldSendCN and pauses an
ingress like CheckShouldPause / CheckShouldResume, with a STATIC threshold here (ns-3's is dynamic: free buffer / 8).

Units: time in microseconds, rates in Gb/s, sizes in bytes. 1 Gb/s = 125 bytes per microsecond.
"""

from dataclasses import dataclass, field

import numpy as np

BYTES_PER_US_PER_GBPS = 125.0


@dataclass(frozen=True)
class DcqcnParams:
    """RP parameters: HPCC ns-3 mix/config.txt (CC_MODE 1 = DCQCN)."""

    line_gbps: float = 100.0        # NIC line rate; the rate every flow starts at
    g: float = 1.0 / 256            # EWMA_GAIN 0.00390625
    alpha_interval_us: int = 1      # ALPHA_RESUME_INTERVAL 1
    decrease_interval_us: int = 4   # RATE_DECREASE_INTERVAL 4: at most one cut per 4 us per flow
    timer_us: int = 900             # RP_TIMER 900: rate-increase period
    fast_recovery: int = 1          # FAST_RECOVERY_TIMES 1 (F)
    rai_gbps: float = 0.05          # RATE_AI 50Mb/s
    rhai_gbps: float = 0.1          # RATE_HAI 100Mb/s
    min_gbps: float = 0.1           # MIN_RATE 100Mb/s
    clamp_target: bool = False      # CLAMP_TARGET_RATE 0


@dataclass(frozen=True)
class SwitchParams:
    """Switch parameters: KMIN/KMAX/PMAX_MAP at 100 Gb/s and BUFFER_SIZE 32 (MiB) of mix/config.txt."""

    kmin: float = 400_000.0         # KMIN_MAP 100G -> 400 (ConfigEcn multiplies by 1000)
    kmax: float = 1_600_000.0       # KMAX_MAP 100G -> 1600
    pmax: float = 0.2               # PMAX_MAP 100G -> 0.2
    buffer: float = 32 * 2**20      # BUFFER_SIZE 32 (MiB, shared by all ports)
    xoff: float = 4 * 2**20         # static stand-in for ns-3's dynamic threshold on an idle switch: buffer >> 3
    xon: float = 4 * 2**20 - 3072   # resume when shared use + resume_offset (3 KiB) <= threshold
    pfc: bool = True                # PFC enabled on every ingress
    packet: float = 1000.0          # PACKET_PAYLOAD_SIZE 1000


@dataclass(frozen=True)
class Flow:
    src_port: int                   # switch ingress port the flow arrives on
    dst_port: int                   # switch egress port it leaves by
    start_us: int = 0
    demand_gbps: float = float("inf")  # application limit; DCQCN's rate caps it further


# ---------------------------------------------------------------- the switch: ECN marking and PFC

def mark_probability(qlen: np.ndarray, kmin: float, kmax: float, pmax: float) -> np.ndarray:
    """Probability that a packet leaving an egress queue of qlen bytes is ECN-marked (float64, shape of qlen)."""
    qlen = np.asarray(qlen, dtype=np.float64)
    ### HINT: three regimes: none at or below kmin, a ramp up to pmax, and every packet above kmax
    ### BEGIN SOLUTION
    ramp = pmax * (qlen - kmin) / (kmax - kmin)
    return np.where(qlen > kmax, 1.0, np.where(qlen > kmin, ramp, 0.0))
    ### END SOLUTION


def pfc_update(paused: np.ndarray, ingress_bytes: np.ndarray, xoff: float, xon: float) -> np.ndarray:
    """New pause state of each ingress (bool) from its old state and the bytes it holds in the switch."""
    ### HINT: hysteresis: a port that is not paused pauses at xoff; a paused one resumes only at or below xon
    ### BEGIN SOLUTION
    return np.where(paused, ingress_bytes > xon, ingress_bytes >= xoff)
    ### END SOLUTION


# ---------------------------------------------------------------- the reaction point (sender NIC)

class DcqcnRp:
    """DCQCN reaction-point state of n flows, as numpy arrays (rates in Gb/s)."""

    def __init__(self, n: int, p: DcqcnParams) -> None:
        self.p = p
        self.rc = np.full(n, p.line_gbps)        # current rate
        self.rt = np.full(n, p.line_gbps)        # target rate
        self.alpha = np.ones(n)
        self.stage = np.zeros(n, dtype=np.int64)  # rate-increase events since the last cut
        self.active = np.zeros(n, dtype=bool)     # has seen its first CNP
        self.alpha_cnp = np.zeros(n, dtype=bool)  # a CNP arrived since the last alpha update
        self.dec_cnp = np.zeros(n, dtype=bool)    # a CNP arrived since the last decrease check
        self.next_increase = np.full(n, np.inf)   # time of the next rate-increase event (none before a cut)

    def on_cnp(self, mask: np.ndarray) -> None:
        """CNPs arrived for the flows in mask (bool [n]).

        A flow's very first CNP only activates it (Rt = Rc; alpha is already 1) and does not count for the next
        alpha update; every CNP, the first included, requests a cut at the next decrease check.
        """
        ### BEGIN SOLUTION
        first = mask & ~self.active
        self.rt[first] = self.rc[first]
        self.alpha_cnp |= mask & self.active
        self.dec_cnp |= mask
        self.active |= mask
        ### END SOLUTION

    def update_alpha(self) -> None:
        """Every alpha_interval_us, for flows that have seen a CNP: alpha moves toward 1 (CNP) or 0 (none)."""
        ### BEGIN SOLUTION
        g = self.p.g
        new = (1.0 - g) * self.alpha + g * self.alpha_cnp
        self.alpha = np.where(self.active, new, self.alpha)
        self.alpha_cnp[:] = False
        ### END SOLUTION

    def decrease(self, now: float) -> None:
        """Every decrease_interval_us: flows with a CNP since the last check cut their rate and restart the timer."""
        ### HINT: with clamp_target off, Rt takes Rc only if some increase event happened since the last cut
        ### BEGIN SOLUTION
        cut = self.dec_cnp.copy()
        keep = cut if self.p.clamp_target else cut & (self.stage != 0)
        self.rt[keep] = self.rc[keep]
        self.rc[cut] = np.maximum(self.p.min_gbps, self.rc[cut] * (1.0 - self.alpha[cut] / 2.0))
        self.stage[cut] = 0
        self.next_increase[cut] = now + self.p.timer_us
        self.dec_cnp[:] = False
        ### END SOLUTION

    def increase(self, now: float) -> None:
        """Rate-increase events due at `now`: fast recovery for F stages, then one additive, then hyper increases."""
        ### HINT: every event moves Rc halfway to Rt; AI and HI first raise Rt (never above line rate)
        ### BEGIN SOLUTION
        p = self.p
        due = self.next_increase <= now
        ai = due & (self.stage == p.fast_recovery)
        hi = due & (self.stage > p.fast_recovery)
        self.rt[ai] = np.minimum(self.rt[ai] + p.rai_gbps, p.line_gbps)
        self.rt[hi] = np.minimum(self.rt[hi] + p.rhai_gbps, p.line_gbps)
        self.rc[due] = (self.rc[due] + self.rt[due]) / 2.0
        self.stage[due] += 1
        self.next_increase[due] += p.timer_us
        ### END SOLUTION


# ---------------------------------------------------------------- the simulation (given)

@dataclass
class SimResult:
    delivered: np.ndarray            # bytes delivered per flow
    rate_trace: np.ndarray           # [samples, flows] mean sending rate (Gb/s) per sample window
    sample_us: int
    rc_trace: np.ndarray             # [samples, flows] DCQCN Rc at the end of each window
    max_egress_queue: np.ndarray     # bytes, per egress port
    max_ingress_bytes: np.ndarray    # bytes, per ingress port
    max_buffer_used: float
    dropped: float                   # bytes
    paused_us: np.ndarray            # microseconds each ingress spent paused
    cnps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # CNPs per flow


def simulate(flows: list[Flow], duration_us: int, sw: SwitchParams = SwitchParams(),
             cc: DcqcnParams | None = DcqcnParams(), link_gbps: float = 100.0, sample_us: int = 100,
             seed: int | None = None) -> SimResult:
    """Fluid model of one output-queued switch with a shared buffer, 1 us per step.

    Each ingress link and each egress port carries link_gbps. A flow sends min(Rc, demand) (line rate without DCQCN,
    cc=None) unless its ingress is paused; the flows of one ingress share its link in proportion to what they offer.
    An egress queue serves its flows in proportion to their queued bytes (fluid FIFO). Packets leaving an egress are
    marked with mark_probability(queue); marking is deterministic by expectation: a flow gets a CNP each time its
    accumulated expected marks cross a whole number (no feedback delay). With PFC off, bytes beyond the buffer are
    dropped; with PFC on, a pause decided at the end of a step stops the ingress from the next step on.
    """
    n = len(flows)
    src = np.array([f.src_port for f in flows])
    dst = np.array([f.dst_port for f in flows])
    start = np.array([f.start_us for f in flows])
    demand = np.array([f.demand_gbps for f in flows], dtype=np.float64)
    n_in, n_out = int(src.max()) + 1, int(dst.max()) + 1
    cap = link_gbps * BYTES_PER_US_PER_GBPS
    rp = DcqcnRp(n, cc) if cc is not None else None
    rng = np.random.default_rng(seed) if seed is not None else None
    queued = np.zeros(n)                      # bytes of each flow waiting at its egress
    marks = np.zeros(n)                       # expected marks not yet turned into CNPs
    paused = np.zeros(n_in, dtype=bool)
    delivered, cnps = np.zeros(n), np.zeros(n)
    samples = duration_us // sample_us
    rate_trace, rc_trace = np.zeros((samples, n)), np.zeros((samples, n))
    max_q, max_in = np.zeros(n_out), np.zeros(n_in)
    max_used = dropped = 0.0
    paused_us = np.zeros(n_in)
    window = np.zeros(n)
    for t in range(duration_us):
        rate = np.minimum(demand, rp.rc if rp is not None else link_gbps)
        offer = np.where((start <= t) & ~paused[src], rate * BYTES_PER_US_PER_GBPS, 0.0)
        per_in = np.bincount(src, offer, n_in)
        scale = np.where(per_in > cap, cap / np.maximum(per_in, 1e-300), 1.0)
        sent = offer * scale[src]
        window += sent
        queued += sent
        used = queued.sum()
        if not sw.pfc and used > sw.buffer:   # tail drop of the excess, shared by this step's arrivals
            drop = sent * (used - sw.buffer) / sent.sum()
            queued -= drop
            dropped += drop.sum()
        qlen = np.bincount(dst, queued, n_out)
        max_q = np.maximum(max_q, qlen)
        max_used = max(max_used, queued.sum())
        served = queued * np.minimum(1.0, cap / np.maximum(qlen, 1e-300))[dst]
        prob = mark_probability(qlen, sw.kmin, sw.kmax, sw.pmax)[dst]
        queued -= served
        delivered += served
        in_bytes = np.bincount(src, queued, n_in)
        max_in = np.maximum(max_in, in_bytes)
        if sw.pfc:
            paused = pfc_update(paused, in_bytes, sw.xoff, sw.xon)
            paused_us += paused
        if rp is not None:
            if rng is None:
                marks += prob * served / sw.packet
                cnp = marks >= 1.0
                marks -= np.floor(marks)
            else:
                cnp = rng.random(n) < -np.expm1(served / sw.packet * np.log1p(-np.minimum(prob, 1 - 1e-12)))
            cnps += cnp
            rp.on_cnp(cnp)
            if t % cc.alpha_interval_us == 0:
                rp.update_alpha()
            if t % cc.decrease_interval_us == 0 and rp.dec_cnp.any():
                rp.decrease(t)
            if t >= rp.next_increase.min():
                rp.increase(t)
        if (t + 1) % sample_us == 0 and t // sample_us < samples:
            k = t // sample_us
            rate_trace[k] = window / sample_us / BYTES_PER_US_PER_GBPS
            rc_trace[k] = rp.rc if rp is not None else link_gbps
            window[:] = 0.0
    return SimResult(delivered, rate_trace, sample_us, rc_trace, max_q, max_in, max_used, dropped, paused_us, cnps)
