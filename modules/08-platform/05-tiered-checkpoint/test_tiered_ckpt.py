"""platform-05 tests: real SIGKILLs of a writer process at instrumented and random points never
leave a torn or missing checkpoint; a recorder of os.fsync / os.replace / deletions proves the
power-loss ordering that a SIGKILL cannot show; save() snapshots and returns while the write runs."""

from __future__ import annotations

import inspect
import os
import random
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest


def make_state(step: int) -> dict[str, bytes]:
    rng = random.Random(1000 + step)
    keys = ["model", "optim", "rng"][: 1 + step % 3] + ["extra"] * (step % 2)
    return {k: bytes(rng.randrange(256) for _ in range(rng.choice([1, 37, 1000, 4099])))
            for k in dict.fromkeys(keys)}


# --------------------------------------------------------------------------- recorder
class Recorder:
    """Wraps the calls that order durability; each event: (kind, path or inode info)."""

    def __init__(self, monkeypatch, slow: float = 0.0) -> None:
        self.events: list[tuple] = []
        real = {n: getattr(os, n) for n in ("fsync", "replace", "rename", "mkdir", "unlink",
                                            "remove", "rmdir")}
        real_rmtree = shutil.rmtree

        def fsync(fd):
            st = os.fstat(fd)
            self.events.append(("fsync", st.st_ino, os.readlink(f"/proc/self/fd/{fd}")))
            if slow:
                time.sleep(slow)
            return real["fsync"](fd)

        def mover(name):
            def f(src, dst, *a, **k):
                self.events.append((name, str(src), str(dst)))
                return real[name](src, dst, *a, **k)
            return f

        def one(name):
            def f(path, *a, **k):
                self.events.append((name, str(path)))
                return real[name](path, *a, **k)
            return f

        def rmtree(path, *a, **k):
            self.events.append(("rmtree", str(path)))
            return real_rmtree(path, *a, **k)

        monkeypatch.setattr(os, "fsync", fsync)
        for n in ("replace", "rename"):
            monkeypatch.setattr(os, n, mover(n))
        for n in ("mkdir", "unlink", "remove", "rmdir"):
            monkeypatch.setattr(os, n, one(n))
        monkeypatch.setattr(shutil, "rmtree", rmtree)


def check_order(events: list[tuple], tier: Path, step: int, name: str) -> None:
    d = tier / f"step_{step:08d}"
    files = sorted(d.iterdir())
    ino = {p.name: p.stat().st_ino for p in files}
    d_ino, t_ino = d.stat().st_ino, tier.stat().st_ino
    commit = next((i for i, e in enumerate(events) if e[0] in ("replace", "rename")
                   and Path(e[2]) in (d / "MANIFEST.json", d)), None)
    assert commit is not None, f"{name}: MANIFEST.json must appear by os.replace/os.rename (of the file or of its directory)"
    fsynced = {e[1]: i for i, e in reversed(list(enumerate(events))) if e[0] == "fsync"}
    for f, n in ino.items():
        assert fsynced.get(n, commit) < commit, f"{name}: {f} was not fsync'd before the manifest became visible"
    last_in_dir = max([i for i, e in enumerate(events) if e[0] in ("replace", "rename") and Path(e[2]).parent == d]
                      + [i for i, e in enumerate(events) if e[0] == "fsync" and e[1] in ino.values()])
    dsync = [i for i, e in enumerate(events) if e[0] == "fsync" and e[1] == d_ino and i > last_in_dir]
    assert dsync, f"{name}: the step directory was not fsync'd after its entries were created/renamed"
    tier_changes = [i for i, e in enumerate(events)
                    if e[0] in ("mkdir", "rename", "replace") and Path(e[-1]).parent == tier
                    and Path(e[-1]).name.startswith(d.name)]
    tsync = [i for i, e in enumerate(events) if e[0] == "fsync" and e[1] == t_ino
             and i > max(tier_changes, default=-1)]
    assert tsync, f"{name}: the tier directory was not fsync'd after the step directory entered it"
    durable = max(dsync[0], tsync[0])
    for i, e in enumerate(events):
        if e[0] in ("rmtree", "unlink", "remove", "rmdir") and Path(e[1]).is_relative_to(tier) \
                and not Path(e[1]).is_relative_to(d) and "tmp" not in Path(e[1]).name:
            assert i > durable, f"{name}: {e[1]} deleted before step {step} was durable"


@pytest.mark.points(1)
def test_fsync_rename_and_gc_order(lesson, tmp_path, monkeypatch):
    m = lesson.load("tiered_ckpt.py")
    rec = Recorder(monkeypatch)
    w = m.CheckpointWriter(tmp_path / "local", tmp_path / "remote", keep=2)
    for tier in (tmp_path / "local", tmp_path / "remote"):  # leftovers of crashed attempts: no manifest
        for left in ("step_00000002", "step_00000005"):
            (tier / left).mkdir(parents=True)
            (tier / left / "model.bin").write_bytes(b"half a file")
        (tier / "step_00000005" / "MANIFEST.json.tmp").write_bytes(b"{")
    for step in (3, 4, 7, 8):
        start = len(rec.events)
        w.save(step, {k: bytearray(v) for k, v in make_state(step).items()})
        w.wait()
        for tier in (tmp_path / "local", tmp_path / "remote"):
            check_order(rec.events[start:], tier, step, f"{tier.name} step {step}")
    for tier in (tmp_path / "local", tmp_path / "remote"):
        assert sorted(p.name for p in tier.iterdir()) == ["step_00000007", "step_00000008"], \
            f"{tier.name}: keep=2 must leave exactly the two newest steps (and no manifest-less leftovers older than them)"
        got = m.load_latest(tier)
        assert got == (8, make_state(8))


class SpyState(dict):
    """The training state; records reads by any thread but the training (main) thread."""

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.late: list[str] = []

    def _seen(self, what: str) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.late.append(f"{what} in thread {threading.current_thread().name}")

    def items(self):
        self._seen("items()")
        return super().items()

    def values(self):
        self._seen("values()")
        return super().values()

    def keys(self):
        self._seen("keys()")
        return super().keys()

    def __iter__(self):
        self._seen("iteration")
        return super().__iter__()

    def __getitem__(self, k):
        self._seen("[]")
        return super().__getitem__(k)


@pytest.mark.points(1)
def test_save_snapshots_then_returns_while_writing(lesson, tmp_path, monkeypatch):
    m = lesson.load("tiered_ckpt.py")
    Recorder(monkeypatch, slow=0.03)  # every fsync takes 30 ms: the write lasts well over 0.2 s
    w = m.CheckpointWriter(tmp_path / "l", tmp_path / "r", keep=1)
    state = SpyState({k: bytearray(v) for k, v in make_state(5).items()})
    t0 = time.perf_counter()
    w.save(5, state)
    returned = time.perf_counter() - t0
    for v in state.values():  # the training step right after save() mutates the tensors
        v[:] = bytes(len(v))
    steps = 0
    while w._thread is not None and w._thread.is_alive():
        steps += 1
        time.sleep(0.005)
    total = time.perf_counter() - t0
    w.wait()
    assert returned < 0.25 * total, f"save() blocked for {returned:.3f}s of a {total:.3f}s write"
    assert steps >= 5, "training did not proceed while the checkpoint was written"
    for tier in (tmp_path / "l", tmp_path / "r"):
        assert m.load_latest(tier) == (5, make_state(5)), "the checkpoint must hold the state at save() time"
    assert not state.late, (f"the writer thread read the live state ({state.late[0]}): the snapshot must be "
                            "taken by save() itself, before it returns")
    rec = Recorder(monkeypatch, slow=0.01)
    w.save(6, {k: bytearray(v) for k, v in make_state(6).items()})
    w.save(7, {k: bytearray(v) for k, v in make_state(7).items()})  # waits for step 6 first
    w.wait()
    assert m.load_latest(tmp_path / "r") == (7, make_state(7))
    where = [(i, "00000007" in str(e)) for i, e in enumerate(rec.events)
             if "0000000" in str(e) and e[0] in ("fsync", "replace", "rename", "mkdir")]
    last6 = max(i for i, seven in where if not seven)
    first7 = min(i for i, seven in where if seven)
    assert last6 < first7, "the writes of step 6 and step 7 overlapped: one save in flight at a time"


CHILD = textwrap.dedent('''
    import builtins, importlib.util, io, os, random, shutil, signal, sys
    from pathlib import Path
    path, root, kill_at, when, make_state_src = sys.argv[1:6]
    exec(make_state_src)
    spec = importlib.util.spec_from_file_location("ckpt", path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    count = [0]
    def hook(real):
        def f(*a, **k):
            count[0] += 1
            hit = count[0] == int(kill_at)
            if hit and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            r = real(*a, **k)
            if hit:
                os.kill(os.getpid(), signal.SIGKILL)
            return r
        return f
    for mod, names in ((os, ["fsync", "replace", "rename", "mkdir", "unlink", "remove", "rmdir"]),
                       (shutil, ["rmtree"]), (builtins, ["open"]), (io, ["open"])):
        for n in names:
            setattr(mod, n, hook(getattr(mod, n)))
    root = Path(root)
    w = m.CheckpointWriter(root / "local", root / "remote", keep=2)
    got = m.load_latest(root / "local")
    start = got[0] if got else 0
    for step in range(start + 1, start + 4):
        state = {k: bytearray(v) for k, v in make_state(step).items()}
        w.save(step, state)
        for v in state.values():
            v[:1] = b"X"
        w.wait()
        print(step, flush=True)
''')


def run_child(lesson, root: Path, kill_at: int, when: str, delay: float | None) -> int:
    """Run a writer process; returns the last step whose save() + wait() completed."""
    args = [sys.executable, "-S", "-c", CHILD, str(lesson.path("tiered_ckpt.py")), str(root),
            str(kill_at), when, inspect.getsource(make_state)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if delay is not None:
        time.sleep(delay)
        p.kill()
    out, err = p.communicate(timeout=60)
    assert p.returncode in (0, -9), f"writer crashed by itself:\n{err[-2000:]}"
    done = [int(x) for x in out.split()]
    return done[-1] if done else 0


@pytest.mark.points(2)
@pytest.mark.timeout(120)
def test_sigkill_never_leaves_a_torn_or_lost_checkpoint(lesson, tmp_path):
    m = lesson.load("tiered_ckpt.py")
    rng = random.Random(2024)
    for seed in range(10):
        root = tmp_path / f"run{seed}"
        floor = 0
        for _round in range(2):
            if seed < 8:
                done = run_child(lesson, root, rng.randrange(1, 60), rng.choice(["before", "after"]), None)
            else:
                done = run_child(lesson, root, 10**9, "before", rng.uniform(0.03, 0.12))
            floor = max(floor, done)
            for tier in ("local", "remote"):
                try:
                    got = m.load_latest(root / tier)
                except m.TornCheckpoint as e:
                    pytest.fail(f"seed {seed}: torn checkpoint in {tier} after SIGKILL: {e}")
                step = got[0] if got else 0
                assert step >= floor, (f"seed {seed}: {tier} holds step {step} but step {floor} "
                                       "had completed before the kill: a committed checkpoint was lost")
                if got:
                    assert got[1] == make_state(step), f"seed {seed}: {tier} step {step} has wrong contents"
