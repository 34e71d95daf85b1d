"""Tests for runtime-11: cross-process tensor sharing without leaks, with consumers killed by SIGKILL.

Oracles: sha256 of every batch the test sends (values received exact); the test's own scan of /dev/shm and of
/proc/self/fd (no torch shared-memory name created by this process, no fd on one, is left once close() returns:
a producer that runs for days must not accumulate what crashed consumers leave behind); the consumers' exit codes.
The producer runs in the test process; consumers are forked (no torch import per process).
"""

import gc
import multiprocessing.resource_sharer
import os
import random
import time

import pytest
import torch
import torch.multiprocessing as mp

SHM = "/dev/shm"
_MOD = {}
_BYSTANDERS = []  # shared tensors other code in this process owns: kept alive to the end of the session


@pytest.fixture
def ipc(lesson):
    key = str(lesson.path("ipc_share.py"))
    if key not in _MOD:
        _MOD[key] = lesson.load("ipc_share.py")
    return _MOD[key]


def my_names():
    return {n for n in os.listdir(SHM) if n.startswith(f"torch_{os.getpid()}_")}


def my_shm_fds():
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(SHM + "/torch_"):
            out[int(fd)] = target
    return out


class SweepGuard:
    """Wraps Producer._unlink and resource_sharer.stop: a sweep while a consumer of the current producer still
    runs would pull a segment or an fd from under a message it has yet to open."""

    def __init__(self, ipc, monkeypatch):
        self.producer, self.early = None, []
        real_unlink, real_stop = ipc.Producer._unlink, multiprocessing.resource_sharer.stop

        def unlink(name):
            self.check(f"_unlink({name})")
            return real_unlink(name)

        def stop(*args, **kwargs):
            self.check("resource_sharer.stop()")
            return real_stop(*args, **kwargs)

        monkeypatch.setattr(ipc.Producer, "_unlink", staticmethod(unlink))
        monkeypatch.setattr(multiprocessing.resource_sharer, "stop", stop)

    def check(self, what):
        p = self.producer
        if p is not None and any(proc.exitcode is None for proc in p.procs):
            self.early.append(what)


@pytest.fixture
def guard(ipc, monkeypatch):
    return SweepGuard(ipc, monkeypatch)


@pytest.fixture
def clean_state():
    """Baseline of this process's torch shm names and fds; restores the sharing strategy."""
    old = mp.get_sharing_strategy()
    gc.collect()
    before = (my_names(), set(my_shm_fds()))
    yield before
    mp.set_sharing_strategy(old)


class DataSpy:
    """The producer's end of one consumer's data pipe: records batches sent to that consumer after _events() told
    the producer it is gone (an "exit" event); the stop message (None) may go to anyone."""

    def __init__(self, conn, c, told, late):
        self._conn, self._c, self._told, self._late = conn, c, told, late

    def send(self, obj):
        if obj is not None and self._c in self._told:
            self._late.append(self._c)
        return self._conn.send(obj)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def watch_sends(p):
    """Spy on p's data pipes and its _events(); returns the list of consumers sent a batch after their reported exit."""
    told, late = set(), []
    real_events = p._events

    def events():
        ev = real_events()
        told.update(c for c, what, _ in ev if what == "exit")
        return ev

    p._events = events
    p.data = [(r, DataSpy(w, c, told, late)) for c, (r, w) in enumerate(p.data)]
    return late


def batches(seed, n, numel):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, dtype=torch.float64, generator=g) for _ in range(n)]


def run(ipc, guard, strategy, seed, n_consumers=3, n_slots=2, n_batches=8, numel=2000, kills=(), timeout=6.0,
        delay=None):
    """One producer run; `kills` = [(after batch k, consumer c, extra sleep s)]. Returns (producer, expected digests)."""
    rng = random.Random(seed)
    data = batches(seed, n_batches, numel)
    want = [ipc.checksum(b) for b in data]
    p = ipc.Producer(n_consumers, n_slots, numel, strategy, delay=rng.choice([0.0, 0.001, 0.003]) if delay is None else delay,
                     timeout=timeout)
    guard.producer, guard.early = p, []
    late = watch_sends(p)
    t0 = time.monotonic()
    for k, b in enumerate(data):
        p.send(b)
        for when, c, nap in kills:
            if when == k:
                time.sleep(nap)
                ipc.kill(p.procs[c])
    p.close()
    assert time.monotonic() - t0 < timeout, "the run took longer than its timeout"
    assert not guard.early, (f"[{strategy}, seed {seed}] swept while a consumer was still running: {guard.early[:3]}; "
                             "sweep only after every consumer has been joined")
    assert not late, (f"[{strategy}, seed {seed}] batches sent to consumers {sorted(set(late))} after their exit was "
                      "reported: a dead consumer never acks (file_descriptor: a dup'ed fd per message, file_system: "
                      "+1 on the count); record it in self.dead and send only to live consumers")
    assert [ipc.checksum(b) for b in data] == want, f"[{strategy}, seed {seed}] send() changed the caller's tensors"
    return p, want


def check_run(p, want, killed, strategy, seed, before):
    where = f"[{strategy}, seed {seed}, killed {sorted(killed)}]"
    for c, got in p.received.items():
        if c in killed:
            assert got == want[:len(got)], f"{where} consumer {c} (killed) acked wrong values before it died"
        else:
            assert got == want, (f"{where} consumer {c} acked {len(got)} of {len(want)} batches, "
                                 f"{sum(a != b for a, b in zip(got, want))} with wrong values "
                                 "(a slot overwritten before every receiver acked it?)")
    for c, proc in enumerate(p.procs):
        assert proc.exitcode is not None, f"{where} consumer {c} is still running after close()"
        if c not in killed:
            assert proc.exitcode == 0, f"{where} consumer {c} exited with {proc.exitcode}"
    names, fds = my_names() - before[0], {fd: t for fd, t in my_shm_fds().items() if fd not in before[1]}
    if names or fds:  # give reference cycles a chance before calling it a leak
        gc.collect()
        names, fds = my_names() - before[0], {fd: t for fd, t in my_shm_fds().items() if fd not in before[1]}
    assert not names, f"{where} /dev/shm names left after close(): {sorted(names)}"
    assert not fds, f"{where} fds on torch shared memory left open in the producer after close(): {fds}"


@pytest.mark.points(0.5)
def test_leak_detector(ipc, clean_state, tmp_path):
    pid = os.getpid()
    mp.set_sharing_strategy("file_system")
    x = torch.zeros(100).share_memory_()
    name = x.untyped_storage()._share_filename_cpu_()[1].decode().lstrip("/")
    decoy = f"torch_{pid}9_1_0"  # another process whose pid starts with ours
    open(os.path.join(SHM, decoy), "wb").close()
    other = open(os.path.join(SHM, f"hpccourse_{pid}_x"), "wb")
    fake = open(tmp_path / f"torch_{pid}_1_0", "wb")  # named like a segment, not in /dev/shm
    try:
        got = ipc.shm_segments(pid)
        assert name in got and decoy not in got, f"shm_segments({pid}) = {sorted(got)}; {name} is ours, {decoy} is not"
        assert ipc.shm_segments(pid) == my_names()
        mp.set_sharing_strategy("file_descriptor")
        y = torch.zeros(100).share_memory_()  # shm object unlinked at once: only the fd shows it
        want = set(my_shm_fds())
        assert want and ipc.shm_fds(pid) == want, f"shm_fds({pid}) = {ipc.shm_fds(pid)}, the fds on torch shm: {want}"
        del x, y
        gc.collect()
        assert name not in ipc.shm_segments(pid) and ipc.shm_fds(pid) == set(my_shm_fds())
    finally:
        os.remove(os.path.join(SHM, decoy))
        other.close()
        os.remove(os.path.join(SHM, f"hpccourse_{pid}_x"))
        fake.close()


@pytest.mark.points(0.5)
def test_every_consumer_killed(ipc, guard, clean_state):
    """All consumers die (before their first message, or holding slots): sends go on, close() still sweeps."""
    for strategy in ("file_descriptor", "file_system"):
        p, want = run(ipc, guard, strategy, 7, kills=[(0, 0, 0.0), (0, 1, 0.0), (0, 2, 0.0)])
        check_run(p, want, {0, 1, 2}, strategy, 7, clean_state)
        p, want = run(ipc, guard, strategy, 8, n_slots=3, kills=[(2, 0, 0.004), (2, 1, 0.0), (5, 2, 0.001)])
        check_run(p, want, {0, 1, 2}, strategy, 8, clean_state)


@pytest.mark.points(1)
def test_values_exact_and_nothing_left(ipc, guard, clean_state):
    """No crash: every consumer acks every batch with the right checksum; 2 slots for 8 batches force reuse."""
    for strategy in ("file_descriptor", "file_system"):
        for seed, n_slots in ((1, 2), (2, 1), (3, 4)):
            p, want = run(ipc, guard, strategy, seed, n_slots=n_slots)
            check_run(p, want, set(), strategy, seed, clean_state)
        # slow consumers: close() starts while both slots are still unread
        p, want = run(ipc, guard, strategy, 4, n_batches=2, delay=0.5)
        check_run(p, want, set(), strategy, 4, clean_state)


def bystander(strategy, before):
    """A shared tensor that belongs to someone else in this process: close() must not touch it."""
    mp.set_sharing_strategy(strategy)
    names0, fds0 = my_names(), set(my_shm_fds())
    t = torch.full((64,), 7.0).share_memory_()
    _BYSTANDERS.append(t)  # never released: if a sweep unlinked its name, releasing it would abort the process
    names, fds = my_names() - names0, set(my_shm_fds()) - fds0
    assert names or fds
    before[0].update(names)
    before[1].update(fds)
    return t, names, fds


def check_bystander(t, names, fds, where):
    assert torch.equal(t, torch.full((64,), 7.0)), f"{where}: another shared tensor of this process was changed"
    assert names <= my_names(), f"{where}: close() unlinked a /dev/shm name it does not own: {sorted(names - my_names())}"
    assert fds <= set(my_shm_fds()), f"{where}: close() closed fds it does not own: {sorted(fds - set(my_shm_fds()))}"


def crash_runs(ipc, guard, strategy, seeds, before):
    t, names, fds = bystander(strategy, before)
    for seed in seeds:
        rng = random.Random(1000 + seed)
        victims = rng.sample(range(3), rng.choice([1, 1, 2]))
        kills = [(rng.randrange(-1, 8), c, rng.choice([0.0, 0.0005, 0.002, 0.006])) for c in victims]
        kills = [(max(k, 0), c, nap) for k, c, nap in kills]
        p, want = run(ipc, guard, strategy, seed, kills=kills)
        check_run(p, want, set(victims), strategy, seed, before)
        check_bystander(t, names, fds, f"[{strategy}, seed {seed}]")


@pytest.mark.points(1)
def test_consumer_killed_file_descriptor(ipc, guard, clean_state):
    crash_runs(ipc, guard, "file_descriptor", range(10), clean_state)


@pytest.mark.points(1)
def test_consumer_killed_file_system(ipc, guard, clean_state):
    crash_runs(ipc, guard, "file_system", range(10), clean_state)


