"""Tests for platform-08. Workers are real Ray actors; the injected faults SIGKILL their processes.

Reference: the same `Worker`s stepped in this process with nothing failing (the uninterrupted run); a run
that survives crashes must end with exactly those weights (float64, bit for bit), and its journal must
show every incarnation of the gang starting at the last committed checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes.ray.drills import ray_cluster, remote  # noqa: F401 - ray_cluster is a fixture

pytestmark = pytest.mark.timeout(300)

WORLD, STEPS, EVERY = 2, 10, 4


class Spawner:
    """`spawn(rank)` for the driver: a fresh Worker actor, numbered by incarnation of that rank."""

    def __init__(self, ft, cfg):
        self.ft, self.cfg = ft, cfg
        self.incarnations = Counter()
        self.actors = []

    def __call__(self, rank):
        inc = self.incarnations[rank]
        self.incarnations[rank] += 1
        actor = remote(self.ft.Worker, num_cpus=0, max_restarts=0).remote(rank, WORLD, self.cfg, inc)
        self.actors.append(actor)
        return actor


def uninterrupted(ft, cfg, steps):
    # in this process: no faults (a kill would hit pytest itself) and no journal lines
    cfg = dataclasses.replace(cfg, faults=(), journal_dir="", fault_dir="")
    workers = [ft.Worker(r, WORLD, cfg, 0) for r in range(WORLD)]
    for s in range(steps):
        avg = ft.average([w.grad(s) for w in workers])
        for w in workers:
            w.apply(avg, s)
    return workers[0].params


def run(ft, root: Path, name: str, faults=(), max_restarts=3, steps=STEPS):
    base = root / name
    for sub in ("ckpt", "journal", "faults"):
        (base / sub).mkdir(parents=True)
    cfg = ft.Config(journal_dir=str(base / "journal"), fault_dir=str(base / "faults"), faults=tuple(faults))
    spawn = Spawner(ft, cfg)
    try:
        result = ft.train(spawn, WORLD, base / "ckpt", steps, EVERY, max_restarts)
        error = None
    except Exception as e:  # noqa: BLE001 - the tests look at what came out
        result, error = None, e
    return {"cfg": cfg, "result": result, "error": error, "spawn": spawn, "dir": base}


def segments(base: Path, rank: int) -> list[list[int]]:
    """The steps a rank applied, split where it was set back (restored) or replaced by a new actor."""
    out: list[list[int]] = []
    last = None
    for line in (base / "journal" / f"rank{rank}.log").read_text().splitlines():
        inc, step = map(int, line.split())
        if last is None or (inc, step) != (last[0], last[1] + 1):
            out.append([])
        out[-1].append(step)
        last = (inc, step)
    return out


# One fixture per scenario, each run once per test session and only when a test asks for it (a wrong
# solution stops at its first failing test, so the costly scenarios run only for solutions that get there).
SCENARIOS = {
    "clean": {},
    # rank 1 dies computing step 6 (last commit: 4); the new gang's rank 0 dies halfway through
    # writing checkpoint 8, so 8 is never committed and the third gang starts at 4 again
    "crashes": {"faults": [("kill-grad", 1, 6), ("kill-save", 0, 8)], "max_restarts": 2},
    "bug": {"faults": [("raise", 0, 2)]},
    "budget": {"faults": [("kill-grad", 0, 1), ("kill-grad", 1, 2)], "max_restarts": 1},
}
_done: dict[str, dict] = {}


@pytest.fixture(scope="module")
def scenario(lesson, ray_cluster, tmp_path_factory):  # noqa: F811
    ft = lesson.load("ft_trainer.py")
    root = tmp_path_factory.mktemp("ft")

    def get(name):
        if name not in _done:
            _done[name] = run(ft, root, name, **SCENARIOS[name])
        return ft, _done[name]

    yield get
    _done.clear()


def _ok(r):
    if r["error"] is not None:
        raise AssertionError(f"train raised {type(r['error']).__name__}: {str(r['error'])[:400]}")
    return r["result"]


def test_latest_committed_needs_the_marker(lesson, tmp_path):
    ft = lesson.load("ft_trainer.py")
    assert ft.latest_committed(tmp_path) is None
    for s in (3, 12, 100):
        ft.step_dir(tmp_path, s).mkdir()
        ft.write_marker(ft.step_dir(tmp_path, s) / ft.COMMITTED)
    ft.step_dir(tmp_path, 200).mkdir()                     # a save that crashed: shards, no marker
    (ft.step_dir(tmp_path, 200) / "rank0.npz").write_bytes(b"x")
    ft.step_dir(tmp_path, 150).mkdir()
    (ft.step_dir(tmp_path, 150) / "COMMITTED.tmp").write_bytes(b"o")  # the marker's own temp file
    assert ft.latest_committed(tmp_path) == 100            # numeric, not lexical (100 > 12)


def test_clean_run_equals_the_uninterrupted_run(scenario):
    ft, r = scenario("clean")
    result = _ok(r)
    np.testing.assert_array_equal(result.params, uninterrupted(ft, r["cfg"], STEPS))
    assert result.restarts == 0 and result.resumed_from == [0]
    committed = sorted(p.parent.name for p in (r["dir"] / "ckpt").glob("step_*/COMMITTED"))
    assert committed == ["step_000004", "step_000008", "step_000010"]  # every ckpt_every steps and the end


@pytest.mark.points(2)
def test_crashes_lose_no_step_and_end_with_the_same_weights(scenario):
    ft, r = scenario("crashes")
    result = _ok(r)
    np.testing.assert_array_equal(result.params, uninterrupted(ft, r["cfg"], STEPS))
    assert result.restarts == 2
    assert result.resumed_from == [0, 4, 4], "each gang must start at the newest *committed* checkpoint"


def test_every_gang_resumes_exactly_at_the_checkpoint(scenario):
    _, r = scenario("crashes")
    _ok(r)
    for rank in range(WORLD):
        got = segments(r["dir"], rank)
        # gang 1 applies 0..5 (rank 1 dies computing 6), gang 2 resumes at 4 and applies 4..7 (rank 0 dies
        # saving 8), gang 3 resumes at 4 again and finishes; a survivor may be reused if it is set back too
        assert got == [list(range(6)), [4, 5, 6, 7], list(range(4, STEPS))], f"rank {rank} applied {got}"
    assert (r["dir"] / "ckpt" / "step_000010" / "COMMITTED").exists()


def test_a_bug_is_not_retried(scenario):
    _, r = scenario("bug")
    err = r["error"]
    assert err is not None, "a FloatingPointError in the training code must reach the caller"
    assert "loss is NaN" in str(err)
    assert sum(r["spawn"].incarnations.values()) == WORLD, "restarted the gang for a software bug"


def test_restart_budget_is_enforced(scenario):
    import ray

    _, r = scenario("budget")
    err = r["error"]
    assert isinstance(err, ray.exceptions.RayActorError), f"expected the worker's death to propagate, got {err!r}"
    fired = sorted(p.name for p in (r["dir"] / "faults").iterdir())
    assert fired == ["kill-grad-0-1", "kill-grad-1-2"], f"faults that happened: {fired} (one restart, then give up)"


def test_no_worker_outlives_train(scenario):
    import ray

    for name in SCENARIOS:
        _, r = scenario(name)
        assert len(r["spawn"].actors) >= WORLD, f"{name}: train started no workers"
        for actor in r["spawn"].actors:
            # ray.kill is asynchronous: a call made right after it may still be served, so give the kill
            # a few seconds to land (an actor nobody killed answers for all of them)
            deadline = time.monotonic() + 20
            while True:
                try:
                    ray.get(actor.pid.remote(), timeout=60)
                except ray.exceptions.RayActorError:
                    break
                assert time.monotonic() < deadline, f"{name}: a worker actor is still alive after train returned"
                time.sleep(0.5)
