"""Tests for infer-10: prefill/decode disaggregation on real Ray actors.

Oracles: a single-process reference generation loop written here from the lesson's model primitives
(kv_row, next_token); the per-process KV accounting the model itself keeps (how many KVCache objects and
bytes each process deserialized, how many prefills each process ran), read from every actor; the
definitions of TTFT and TPOT checked on synthetic timestamps. One Ray instance per session (ray_cluster);
the actors are started once per test session and one extra decode worker is started to be killed.
"""

import random
import threading
import time

import numpy as np
import pytest

STEP_S = 0.004
_STATE = {}


@pytest.fixture
def pd(lesson):
    key = str(lesson.path("pd_disagg.py"))
    if key not in _STATE:
        _STATE[key] = lesson.load("pd_disagg.py")
    return _STATE[key]


@pytest.fixture
def workers(pd, ray_cluster):
    """One prefill and two decode actors, shared by the tests of this session."""
    if "workers" not in _STATE:
        _STATE["workers"] = pd.make_workers(1, 2, prefill_s=0.01, step_s=STEP_S)
    return _STATE["workers"]


def reference(pd, prompt, n):
    kv = np.stack([pd.kv_row(t, p) for p, t in enumerate(prompt)])
    out = [pd.next_token(kv, prompt[-1])]
    while len(out) < n:
        kv = np.concatenate([kv, pd.kv_row(out[-1], len(prompt) + len(out) - 1)[None]])
        out.append(pd.next_token(kv, out[-1]))
    return out


def make_requests(pd, seed, n, lengths, max_tokens):
    rng = random.Random(seed)
    return [pd.Request(f"q{seed}-{i}", [rng.randrange(pd.VOCAB) for _ in range(rng.choice(lengths))],
                       rng.choice(max_tokens)) for i in range(n)]


def stats(handles):
    import ray

    return ray.get([h.stats.remote() for h in handles], timeout=20)


def check_results(pd, requests, results):
    assert sorted(results) == sorted(r.req_id for r in requests), "requests lost or invented"
    for r in requests:
        res = results[r.req_id]
        assert res.tokens == reference(pd, r.prompt, r.max_tokens), f"{r.req_id}: tokens differ from the reference"
        assert len(res.token_times) == r.max_tokens
        assert all(a < b for a, b in zip(res.token_times, res.token_times[1:])), f"{r.req_id}: times not increasing"
        assert res.ttft == res.token_times[0] - res.arrival > 0
        if r.max_tokens > 1:  # every decode step sleeps STEP_S
            assert res.tpot >= 0.9 * STEP_S


@pytest.mark.points(0.5)
def test_the_router_does_not_wait_for_one_prefill_before_dispatching_the_next(pd, workers):
    """Six single-token requests on a prefill worker that takes PREFILL_S each and runs 4 at a time: dispatching
    everything first gives TTFTs of about one or two PREFILL_S; a router that waits for each prefill before sending
    the next request makes the last TTFT about 6 * PREFILL_S."""
    PREFILL_S = 0.2
    if "slow_prefill" not in _STATE:
        _STATE["slow_prefill"] = pd.make_workers(1, 0, prefill_s=PREFILL_S, step_s=STEP_S)[0]
        stats(_STATE["slow_prefill"])  # the actor is up before the clock starts
    requests = make_requests(pd, 3, 6, lengths=[4, 8], max_tokens=[1])
    results = pd.Router(_STATE["slow_prefill"], workers[1]).serve(requests)
    check_results(pd, requests, results)
    worst = max(res.ttft for res in results.values())
    assert worst < 4 * PREFILL_S, (
        f"worst TTFT {worst:.2f} s with {len(requests)} prefills of {PREFILL_S} s that can run 4 at a time: "
        "the router waited for a prefill before dispatching the next request (prefills serialised)")


@pytest.mark.points(1.5)
def test_requests_match_the_reference_and_kv_goes_prefill_to_decode(pd, workers):
    prefill, decode = workers
    requests = make_requests(pd, 1, 9, lengths=[1, 3, 17, 40], max_tokens=[2, 7, 13, 20])
    p0, d0 = stats(prefill), stats(decode)
    driver0 = dict(pd.counters())
    results = pd.Router(prefill, decode).serve(requests)
    check_results(pd, requests, results)
    p1, d1 = stats(prefill), stats(decode)
    want = sum(len(r.prompt) for r in requests) * pd.LAYERS * 2 * pd.HEAD_DIM * 4
    assert sum(b["sent_bytes"] - a["sent_bytes"] for a, b in zip(p0, p1)) == want
    got = sum(b["loaded_bytes"] - a["loaded_bytes"] for a, b in zip(d0, d1))
    assert got == want, f"decode workers received {got} KV bytes, the prompts' KV is {want} B"
    assert pd.counters()["loads"] == driver0["loads"], "the router pulled KV caches into the driver"
    assert all(b["prefills"] == a["prefills"] for a, b in zip(d0, d1)), "a decode worker re-ran prefill"
    assert sum(b["prefills"] - a["prefills"] for a, b in zip(p0, p1)) == len(requests)
    per_worker = [len(b["started"]) - len(a["started"]) for a, b in zip(d0, d1)]
    assert min(per_worker) >= len(requests) // 4, f"decode work not spread over the workers: {per_worker}"


@pytest.mark.points(1.5)
def test_a_killed_decode_worker_loses_no_request(pd, workers):
    import ray

    prefill, decode = workers
    victim = pd.make_workers(0, 1, step_s=STEP_S)[1][0]
    survivor = decode[1]
    requests = make_requests(pd, 2, 8, lengths=[2, 9, 30], max_tokens=[25, 33, 40])
    p0, s0 = stats(prefill), stats([survivor])[0]
    router = pd.Router(prefill, [victim, survivor])
    out = {}
    thread = threading.Thread(target=lambda: out.update(results=router.serve(requests, timeout=30)), daemon=True)
    thread.start()
    end = time.monotonic() + 15
    while len(ray.get(victim.stats.remote(), timeout=10)["started"]) < 2:
        assert time.monotonic() < end and thread.is_alive(), "the victim never got a request"
        time.sleep(0.005)
    ray.kill(victim, no_restart=True)
    thread.join(30)
    assert "results" in out, "serve() raised or hung after a decode worker died"
    check_results(pd, requests, out["results"])
    s1 = stats([survivor])[0]
    done_here = s1["finished"][len(s0["finished"]):]
    assert len(done_here) == len(set(done_here)), "a request was decoded twice on the survivor"
    assert len(router.resent) >= 1, "the kill hit no in-flight request"
    assert len(router.resent) == len(set(router.resent)), (
        f"a request was re-sent more than once ({router.resent}): a re-send went to the dead worker again")
    assert router.dead and all(d == victim for d in router.dead), "router.dead must list the killed worker (only)"
    for r in requests:
        want = 1 + router.resent.count(r.req_id)
        got = out["results"][r.req_id].decode_attempts
        assert got == want, f"{r.req_id}: decode_attempts {got}, but it was dispatched {want} time(s)"
    prefills = sum(b["prefills"] - a["prefills"] for a, b in zip(p0, stats(prefill)))
    assert len(requests) <= prefills <= len(requests) + len(router.resent)


def test_ttft_and_tpot_follow_their_definitions(pd):
    assert pd.latency_metrics(100.0, [100.25, 100.5, 101.0, 101.75]) == (0.25, 0.5)
    ttft, tpot = pd.latency_metrics(5.0, [5.5])
    assert ttft == 0.5 and tpot is None
    rng = np.random.default_rng(7)
    for n in [2, 3, 10, 129]:
        arrival = float(rng.uniform(0, 1000))
        times = list(arrival + 0.3 + np.cumsum(rng.exponential(0.02, n)))
        ttft, tpot = pd.latency_metrics(arrival, times)
        assert ttft == pytest.approx(times[0] - arrival, rel=1e-12)
        assert tpot == pytest.approx(float(np.mean(np.diff(times))), rel=1e-9)
