"""Tests for infer-04: the continuous-batching scheduler, driven by the engine loop below on random workloads.

`drive` plays the engine: requests arrive at given steps, `schedule()` runs, the model "runs" (nothing to
compute), `update_after_step` samples tokens. Around every call it snapshots the scheduler's state (running and
waiting order, num_computed, num_tokens, blocks per request, free blocks) so the tests check properties of the
whole trace against quantities computed here, not reported by the scheduler: the token budget, ceil-division
block counts, FCFS order of a shadow waiting queue, the newest-first preemption rule, recompute accounting, and
the gap between a running request's decode steps. `reference_trace` is an independent, dictionary-based
re-implementation of the same vLLM V1 FCFS policy; the learner's steps must equal it exactly.
"""

import random

import pytest

CONFIGS = [  # num_blocks, block_size, max_num_batched_tokens, max_num_seqs
    (18, 4, 32, 5),
    (53, 1, 17, 4),
    (9, 16, 64, 8),
    (31, 3, 11, 3),
]


@pytest.fixture
def sc(lesson):
    return lesson.load("scheduler.py")


def cdiv(a, b):
    return -(-a // b)


def workload(seed, cfg):
    num_blocks, bs, budget, _ = cfg
    rng = random.Random(seed)
    cap = num_blocks * bs  # every request must fit alone, or nothing could ever finish it
    reqs = []
    for rid in range(rng.randint(9, 22)):
        prompt = rng.choice([rng.randint(1, 9), rng.randint(1, 3 * budget)])
        prompt = min(prompt, cap - 1)
        out = rng.randint(1, min(24, cap - prompt))
        reqs.append((rng.randint(0, 25), rid, prompt, out))
    reqs.sort()
    return reqs


def state(s):
    reqs = list(s.running) + list(s.waiting)
    return dict(running=[r.rid for r in s.running], waiting=[r.rid for r in s.waiting],
                comp={r.rid: r.num_computed for r in reqs}, ntok={r.rid: r.num_tokens for r in reqs},
                blocks={r.rid: r.num_blocks for r in reqs}, npre={r.rid: r.num_preemptions for r in reqs},
                free=s.pool.num_free)


def drive(sc, cfg, reqs, max_steps=3000):
    s = sc.Scheduler(*cfg)
    pending, trace, finished = list(reqs), [], {}
    for step in range(max_steps):
        while pending and pending[0][0] <= step:
            _, rid, prompt, out = pending.pop(0)
            s.add_request(sc.Request(rid, prompt, out))
        if not pending and not s.running and not s.waiting:
            return trace, finished
        before = state(s)
        out = s.schedule()
        rec = dict(step=step, before=before, out=dict(out.num_scheduled), preempted=list(out.preempted),
                   after=state(s))
        for r in s.update_after_step(out):
            finished[r.rid] = (r.num_output, r.num_blocks)
        rec["post"] = state(s)
        trace.append(rec)
    raise AssertionError(f"requests still unfinished after {max_steps} steps: the scheduler makes no progress")


def all_traces(sc, seeds=range(6)):
    for cfg in CONFIGS:
        for seed in seeds:
            reqs = workload(seed * 31 + cfg[0], cfg)
            yield cfg, reqs, drive(sc, cfg, reqs)


def where(cfg, rec):
    return f"config {cfg}, step {rec['step']}: before {rec['before']}, scheduled {rec['out']}, preempted {rec['preempted']}"


@pytest.mark.points(1)
def test_budget_and_blocks_hold_every_step(sc):
    # budget used up in the middle of `running` (two chunked prefills, as after a budget change or with vLLM's
    # long_prefill_token_threshold): the second request gets 0 tokens, so it is not scheduled at all; the pool
    # has exactly the 2 blocks the first one needs (exact fit: no preemption)
    s = sc.Scheduler(4, 4, 8, 4)
    a, b = sc.Request(0, 20, 2, num_computed=4, num_blocks=1), sc.Request(1, 20, 2, num_computed=4, num_blocks=1)
    s.running = [a, b]
    s.pool.take(2)
    out = s.schedule()
    assert (dict(out.num_scheduled), out.preempted) == ({0: 8}, []), (
        f"scheduled {dict(out.num_scheduled)}, preempted {out.preempted}; expected {{0: 8}} and no preemption "
        "(a request that gets 0 tokens is not scheduled; 2 free blocks are exactly enough)")
    assert (a.num_computed, a.num_blocks, b.num_computed, b.num_blocks, s.pool.num_free) == (12, 3, 4, 1, 0)
    for cfg, _, (trace, _) in all_traces(sc):
        num_blocks, bs, budget, max_seqs = cfg
        for rec in trace:
            b, a, out = rec["before"], rec["after"], rec["out"]
            assert sum(out.values()) <= budget, f"token budget exceeded: {where(cfg, rec)}"
            assert len(a["running"]) <= max_seqs, f"more than max_num_seqs running: {where(cfg, rec)}"
            assert a["free"] >= 0 and a["free"] + sum(a["blocks"].values()) == num_blocks, (
                f"block pool does not add up: {where(cfg, rec)}")
            for rid, n in out.items():
                start = 0 if rid in rec["preempted"] else b["comp"][rid]
                assert 1 <= n <= b["ntok"][rid] - start, f"request {rid} got {n} tokens: {where(cfg, rec)}"
                assert a["comp"][rid] == start + n
                assert a["blocks"][rid] == cdiv(start + n, bs), (
                    f"request {rid} holds {a['blocks'][rid]} blocks for {start + n} tokens (block size {bs}); "
                    f"blocks are allocated per step for the tokens scheduled: {where(cfg, rec)}")
            for rid in rec["preempted"]:
                assert a["blocks"][rid] == 0 and a["comp"][rid] == 0, f"preempted {rid} kept its KV: {where(cfg, rec)}"


@pytest.mark.points(1)
def test_every_request_finishes_with_exact_compute_recompute_counted(sc):
    for cfg, reqs, (trace, finished) in all_traces(sc):
        for _, rid, prompt, max_tokens in reqs:
            assert rid in finished, f"config {cfg}: request {rid} never finished"
            assert finished[rid] == (max_tokens, 0), f"request {rid} finished with (outputs, blocks) {finished[rid]}"
            computed = sum(rec["out"].get(rid, 0) for rec in trace)
            lost = sum(rec["before"]["comp"][rid] for rec in trace if rid in rec["preempted"])
            assert computed == prompt + max_tokens - 1 + lost, (
                f"config {cfg}: request {rid} (prompt {prompt}, {max_tokens} outputs, {lost} tokens recomputed after "
                f"preemption) was scheduled for {computed} tokens in all")
        assert trace[-1]["post"]["free"] == cfg[0], "blocks leaked after every request finished"


@pytest.mark.points(1)
def test_fcfs_admission_preempted_first_and_no_idle_capacity(sc):
    for cfg, reqs, (trace, _) in all_traces(sc):
        _, bs, budget, max_seqs = cfg
        shadow = []
        arrivals = {rid: t for t, rid, _, _ in reqs}
        for rec in trace:
            b, a, out = rec["before"], rec["after"], rec["out"]
            shadow += [rid for rid in b["waiting"] if rid not in shadow and arrivals[rid] == rec["step"]]
            assert b["waiting"] == shadow, f"waiting queue {b['waiting']}, FCFS order is {shadow}: {where(cfg, rec)}"
            admitted = [rid for rid in out if rid not in b["running"]]
            assert admitted == shadow[: len(admitted)], (
                f"admitted {admitted} while the queue head was {shadow[:3]}: {where(cfg, rec)}")
            shadow = shadow[len(admitted):]
            for rid in rec["preempted"]:
                shadow.insert(0, rid)
            left = budget - sum(out.values())
            for rid in b["running"]:
                assert rid in out or rid in rec["preempted"] or left == 0, (
                    f"running request {rid} skipped with {left} tokens of budget left: {where(cfg, rec)}")
            if not rec["preempted"] and shadow and left > 0 and len(a["running"]) < max_seqs:
                head = shadow[0]
                need = cdiv(min(a["ntok"][head], left), bs)
                assert need > a["free"], (
                    f"request {head} waits although {left} tokens of budget and {a['free']} free blocks "
                    f"(it needs {need}) were left: {where(cfg, rec)}")


@pytest.mark.points(1)
def test_preemption_takes_the_newest_running_request(sc):
    seen = 0
    for cfg, _, (trace, _) in all_traces(sc):
        for rec in trace:
            order = list(rec["before"]["running"])
            for rid in rec["preempted"]:
                assert order and rid == order[-1], (
                    f"preempted {rid}, the newest running request was {order[-1:]}: {where(cfg, rec)}")
                order.pop()
                seen += 1
            for rid, n in rec["before"]["npre"].items():
                assert rec["after"]["npre"][rid] == n + rec["preempted"].count(rid), (
                    f"request {rid}: num_preemptions {n} -> {rec['after']['npre'][rid]}: {where(cfg, rec)}")
            if rec["preempted"]:
                assert not [rid for rid in rec["out"] if rid not in rec["before"]["running"]], (
                    f"admitted a waiting request in a step that preempted: {where(cfg, rec)}")
    assert seen >= 20, "the workloads should have preempted (the tests' pools are tight)"


@pytest.mark.points(1)
def test_long_prompt_is_chunked_and_running_decodes_never_stall(sc):
    cfg = (200, 4, 24, 6)
    reqs = [(0, rid, 3 + rid, 30) for rid in range(4)] + [(4, 9, 10 * 24 + 7, 3), (6, 10, 5, 4)]
    trace, finished = drive(sc, cfg, reqs)
    assert len(finished) == 6
    for rec in trace:
        b, out = rec["before"], rec["out"]
        for rid in b["running"]:
            if b["ntok"][rid] - b["comp"][rid] == 1:
                assert rid in out, f"decoding request {rid} stalled for a step: {where(cfg, rec)}"
        assert sum(out.values()) <= cfg[2]
    chunks = [rec["out"][9] for rec in trace if 9 in rec["out"]]
    assert len(chunks) >= 10 and max(chunks) < 24, f"the long prompt's chunks were {chunks}"
    first_10 = next(rec["step"] for rec in trace if 10 in rec["out"])
    last_9_prefill = max(rec["step"] for rec in trace if rec["out"].get(9, 0) > 1)
    assert first_10 >= last_9_prefill, "request 10 arrived behind the long prompt and must not overtake it (FCFS)"


def reference_trace(cfg, reqs):
    num_blocks, bs, budget0, max_seqs = cfg
    prompt = {rid: p for _, rid, p, _ in reqs}
    target = {rid: m for _, rid, _, m in reqs}
    outs = dict.fromkeys(prompt, 0)
    comp = dict.fromkeys(prompt, 0)
    held = dict.fromkeys(prompt, 0)
    waiting, running, pending, steps = [], [], sorted(reqs), []
    step = 0
    while pending or waiting or running:
        waiting += [rid for t, rid, _, _ in pending if t <= step]
        pending = [p for p in pending if p[0] > step]
        budget, sched, pre = budget0, {}, []

        def fits(rid, n):
            need = cdiv(comp[rid] + n, bs) - held[rid]
            if need > num_blocks - sum(held.values()):
                return False
            held[rid] += max(need, 0)
            return True

        for rid in list(running):
            if budget == 0 or rid not in running:
                break
            n = min(prompt[rid] + outs[rid] - comp[rid], budget)
            while not fits(rid, n):
                victim = running.pop()
                held[victim], comp[victim] = 0, 0
                waiting.insert(0, victim)
                pre.append(victim)
                if victim == rid:
                    break
            if rid in pre:
                break
            sched[rid] = n
            budget -= n
        while not pre and waiting and budget and len(running) < max_seqs:
            rid = waiting[0]
            n = min(prompt[rid] + outs[rid], budget)
            if not fits(rid, n):
                break
            running.append(waiting.pop(0))
            sched[rid] = n
            budget -= n
        for rid, n in sched.items():
            comp[rid] += n
            if comp[rid] == prompt[rid] + outs[rid]:
                outs[rid] += 1
                if outs[rid] == target[rid]:
                    running.remove(rid)
                    held[rid] = 0
        steps.append((sched, pre))
        step += 1
    return steps


@pytest.mark.points(1)
def test_steps_equal_the_reference_scheduler(sc):
    for cfg, reqs, (trace, _) in all_traces(sc, seeds=range(4)):
        want = reference_trace(cfg, reqs)
        got = [(rec["out"], rec["preempted"]) for rec in trace]
        for i, (g, w) in enumerate(zip(got, want)):
            assert list(g[0].items()) == list(w[0].items()) and g[1] == w[1], (
                f"config {cfg}, step {i}: scheduled {g[0]} preempted {g[1]}; the vLLM V1 policy gives "
                f"scheduled {w[0]} preempted {w[1]}\n  state before: {trace[i]['before']}")
        assert len(got) == len(want), f"finished after {len(got)} steps, the reference after {len(want)}"
