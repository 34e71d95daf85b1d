"""Tests for infer-05: a real engine-core process behind ZeroMQ, driven through the lesson's EngineClient.

Oracles: the fake model's token sequence recomputed here (independent of the lesson file); the core's own
stats message (blocks, running/waiting ids, step count) for what happens inside the other process; the
kernel's CPU accounting of the core process (/proc/<pid>/stat) for "blocks when idle"; wall-clock bounds for
"a dead core is noticed promptly". Every client is shut down after its test, also when the test fails.
"""

import os
import pickle
import random
import shutil
import signal
import tempfile
import threading
import time

import pytest
import zmq

VOCAB = 50021
T = 2.0  # s without output before a stream read fails: a 60-token request takes ~0.15 s here


def ref_tokens(prompt, n):
    gen = []
    for _ in range(n):
        seq = prompt + gen
        gen.append((seq[-1] * 31 + len(seq) * 17 + prompt[0]) % VOCAB)
    return gen


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def ec(lesson):
    return lesson.load("engine_core.py")


@pytest.fixture
def make_client(ec):
    made = []

    def make(**kw):
        made.append(ec.EngineClient(**kw))
        return made[-1]

    yield make
    for c in made:
        c.shutdown()
        assert not c.proc.is_alive() and not os.path.exists(c.dir), "shutdown left the core or its ipc dir"
        assert not c.thread.is_alive(), "shutdown left the output thread running"


def wait_stats(client, pred, timeout=2.0):
    end = time.monotonic() + timeout
    while True:
        st = client.get_stats()
        if pred(st) or time.monotonic() > end:
            return st
        time.sleep(0.01)


def prompt_of(rng, n):
    return [rng.randrange(1, VOCAB) for _ in range(n)]


def first_step_after_burst(ec, n):
    """An EngineCore in a thread of this process, with n ADDs already waiting on its socket when its busy loop
    starts: the request ids of its first "outputs" message (every pending input is applied before a step)."""
    d = tempfile.mkdtemp(prefix="infer05-test-")
    ctx = zmq.Context()
    router, pull = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PULL)
    router.bind(f"ipc://{d}/input")
    pull.bind(f"ipc://{d}/output")
    core = ec.EngineCore(f"ipc://{d}/input", f"ipc://{d}/output", 64, 0.001)
    loop = threading.Thread(target=core.run_busy_loop, daemon=True)
    ident = None
    try:
        assert router.poll(5000), "the core sent no READY"
        ident, kind, _ = router.recv_multipart()
        assert kind == ec.READY
        for i in range(n):
            router.send_multipart([ident, ec.ADD, pickle.dumps((f"b{i}", [i + 1, 2], 3))])
        time.sleep(0.3)  # let zmq deliver all of them before the loop's first look at the socket
        loop.start()
        assert pull.poll(5000), "no outputs message from the core"
        msg = pickle.loads(pull.recv())
        return sorted(rid for rid, _, _ in msg[2]) if msg[0] == "outputs" else msg
    finally:
        if ident is not None:
            router.send_multipart([ident, ec.SHUTDOWN, pickle.dumps(None)])
        if loop.is_alive():
            loop.join(5)
        core.close()
        router.close(linger=0)
        pull.close(linger=0)
        ctx.term()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.points(1.5)
def test_streams_are_in_order_per_request_and_interleaved(ec, make_client):
    got = first_step_after_burst(ec, 5)
    assert got == [f"b{i}" for i in range(5)], (
        f"5 ADDs were waiting when the loop started, its first step ran {got}: apply every pending message "
        "before each step, not one per step")
    rng = random.Random(5)
    client = make_client(num_blocks=64)
    lengths = [30, 1, 9, 2, 17, 5, 23]  # the longest first: the others must finish while it still runs
    reqs = {f"r{i}": (prompt_of(rng, rng.randint(1, 11)), n) for i, n in enumerate(lengths)}
    for rid, (prompt, n) in reqs.items():
        client.add_request(rid, prompt, n)
    for rid in reversed(list(reqs)):  # read in another order than they finish
        prompt, n = reqs[rid]
        got = list(client.stream(rid, T))
        assert got == ref_tokens(prompt, n), f"{rid}: wrong tokens or order"
        s = client.streams[rid]
        assert s.reason == "finished" and s.tokens == got
        assert s.text == "".join(f"<{t}>" for t in got)
    arrivals = client.arrivals
    assert all(arrivals.count(rid) == n for rid, (_, n) in reqs.items()), "a token was lost or duplicated"
    last = {rid: max(i for i, a in enumerate(arrivals) if a == rid) for rid in reqs}
    assert last["r1"] < last["r2"] < last["r0"], "requests must be batched together, one token each per step"
    # a request added while another runs joins the running batch at once (input is read between steps)
    long_prompt, late_prompt = prompt_of(rng, 6), prompt_of(rng, 4)
    client.add_request("long", long_prompt, 60)
    it = client.stream("long", T)
    first = [next(it) for _ in range(3)]
    client.add_request("late", late_prompt, 3)
    assert list(client.stream("late", T)) == ref_tokens(late_prompt, 3)
    assert len(client.streams["long"].tokens) < 40, "the late request waited for the long one to finish"
    assert first + list(it) == ref_tokens(long_prompt, 60)
    st = wait_stats(client, lambda s: not s["running"])
    assert st["running"] == [] and st["waiting"] == [] and st["free_blocks"] == st["num_blocks"] == 64


def test_abort_ends_the_stream_and_frees_the_blocks(make_client):
    rng = random.Random(11)
    client = make_client(num_blocks=48)
    pa, pb, pw = prompt_of(rng, 7), prompt_of(rng, 3), prompt_of(rng, 4 * 49)
    client.add_request("A", pa, 10**6)  # would run for ~30 min
    client.add_request("B", pb, 12)
    client.add_request("W", pw, 5)  # needs 49 blocks of 48: waits forever
    it = client.stream("A", T)
    head = [next(it) for _ in range(3)]
    client.abort(["A", "W", "never-added"])
    tail = list(it)  # must end (TimeoutError otherwise) with reason "abort"
    a = client.streams["A"]
    assert a.reason == "abort", f"stream of an aborted request ended with {a.reason!r}"
    assert head + tail == a.tokens == ref_tokens(pa, len(a.tokens)), "aborted stream must hold a prefix"
    n_a = len(a.tokens)
    # outputs the core produced before it saw the abort are still in flight: they must be dropped
    client.process_outputs(("outputs", 10**6, [("A", 7, False), ("never-added", 8, True)]))
    assert len(a.tokens) == n_a and a.reason == "abort"
    assert list(client.stream("B", T)) == ref_tokens(pb, 12), "an abort must not disturb the other requests"
    client.abort(["B"])  # already finished: harmless
    assert client.streams["B"].reason == "finished"
    st = wait_stats(client, lambda s: not s["running"] and not s["waiting"])
    assert st["running"] == [] and st["waiting"] == [], f"the core still holds aborted requests: {st}"
    assert st["free_blocks"] == 48, f"aborted requests leaked {48 - st['free_blocks']} KV blocks"
    time.sleep(0.1)
    assert client.get_stats()["steps"] == st["steps"], "the core keeps stepping after every request ended"
    assert len(a.tokens) == n_a, "tokens reached the stream after abort() returned"
    client.add_request("C", pb, 4)  # the core still serves
    assert list(client.stream("C", T)) == ref_tokens(pb, 4)


def test_sigkill_of_the_core_surfaces_as_engine_dead_error(ec, make_client):
    rng = random.Random(3)
    client = make_client()
    client.add_request("A", prompt_of(rng, 5), 10**6)
    client.add_request("B", prompt_of(rng, 2), 10**6)
    it = client.stream("A", T)
    next(it), next(it)
    os.kill(client.proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    for rid, stream in [("A", it), ("B", client.stream("B", T))]:
        with pytest.raises(ec.EngineDeadError):
            for _ in stream:
                pass
        assert time.monotonic() - t0 < 1.5, f"{rid}: the dead core was noticed only after {time.monotonic() - t0:.1f} s"
    with pytest.raises(ec.EngineDeadError):
        client.get_stats(timeout=T)
    with pytest.raises(ec.EngineDeadError):
        client.add_request("C", [1, 2], 3)


@pytest.mark.points(0.5)
def test_idle_core_blocks_on_its_socket(make_client):
    rng = random.Random(8)
    client = make_client()
    p = prompt_of(rng, 5)
    client.add_request("A", p, 4)
    assert list(client.stream("A", T)) == ref_tokens(p, 4)
    time.sleep(0.05)
    c0 = cpu_seconds(client.proc.pid)
    time.sleep(0.8)
    used = cpu_seconds(client.proc.pid) - c0
    assert used < 0.1, f"the idle core used {used:.2f} s of CPU in 0.8 s: it spins instead of blocking"
    t0 = time.monotonic()
    client.add_request("B", p, 4)  # a blocked core wakes on input
    assert list(client.stream("B", T)) == ref_tokens(p, 4)
    assert time.monotonic() - t0 < 1.0
