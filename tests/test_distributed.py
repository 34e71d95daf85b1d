"""The Ray / torch.distributed runtime (`pytest_hpccourse.runtimes.ray.drills`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import pytest_hpccourse  # noqa: E402
from pytest_hpccourse.runtimes.ray import drills  # noqa: E402
from pytest_hpccourse.runtimes.ray.drills import (  # noqa: E402,F401 - ray_cluster is a fixture
    RankError,
    _Worker,
    ray_cluster,
    run_actors,
    run_ranks,
)

# Under xdist (`--dist loadgroup`, as scripts/test runs it) every Ray test goes to one worker:
# one Ray instance for the suite, not one per worker competing for the CI machine's two cores.
# The timeout only guards against a hang: on a saturated 2-core machine starting one actor (a
# Python process importing torch) was measured at up to ~25 s, and some tests start several.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("ray")]


# Rank functions live at module level: this test file is not importable inside the actors, so
# these also prove that test code travels by value.
def _identify(rank, world_size, scale):
    import torch.distributed as dist

    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)
    return rank, dist.get_rank(), dist.get_world_size(), world_size, x.item() * scale


def _raise_on(rank, world_size, bad):
    import torch.distributed as dist

    if rank == bad:
        raise ValueError(f"boom from rank {rank}")
    dist.barrier()  # the healthy ranks wait in a collective that will never complete
    return rank


def _sleep_on(rank, world_size, slow):
    if rank == slow:
        time.sleep(600)
    return rank


def _exit_on(rank, world_size, bad):
    import torch.distributed as dist

    if rank == bad:
        os._exit(3)  # a crash: the process is gone, no Python traceback
    dist.barrier()
    return rank


def _pid(rank, world_size):
    return os.getpid()


def _raise_everywhere(rank, world_size):
    time.sleep(0.2 * rank)  # rank 0 raises first, so it is the one blamed
    raise KeyError(f"rank {rank}")


def _group_state(rank, world_size):
    import torch.distributed as dist

    return dist.is_initialized()


def _group_state_plain(comm):
    import torch.distributed as dist

    return dist.is_initialized()


def _ring_messages(comm, sizes):
    right = (comm.rank + 1) % comm.world_size
    left = (comm.rank - 1) % comm.world_size
    for i, n in enumerate(sizes):  # several messages in flight: order must be kept
        comm.send(right, torch.full((n,), float(100 * comm.rank + i), dtype=torch.float64))
    got = [comm.recv(left) for _ in sizes]
    return [t.tolist() for t in got], comm.stats()


def _send_non_tensor(comm):
    comm.send((comm.rank + 1) % comm.world_size, [1, 2, 3])


def test_results_are_ordered_by_rank(ray_cluster):
    out = run_ranks(_identify, 3, 10.0)
    assert [o[0] for o in out] == [0, 1, 2]
    assert [o[1] for o in out] == [0, 1, 2]  # the group's ranks are the call's ranks
    assert all(o[2] == 3 and o[3] == 3 for o in out)
    assert all(o[4] == pytest.approx(60.0) for o in out)  # (1+2+3) * 10 on every rank


def test_rank_exception_names_rank_and_traceback(ray_cluster):
    run_ranks(_pid, 3)  # the actors exist before the clock starts: only the failing call is timed
    t0 = time.monotonic()
    with pytest.raises(RankError) as info:
        run_ranks(_raise_on, 3, 1, timeout=300)
    err = info.value
    assert err.rank == 1 and err.world_size == 3 and err.what == "raised"
    text = str(err)
    assert text.startswith("rank 1 of 3 raised")
    assert "ValueError: boom from rank 1" in text
    assert "_raise_on" in text and "test_distributed.py" in text  # the learner-facing traceback
    assert time.monotonic() - t0 < 60  # reported at once, not after the 300 s collective timeout (loose: CI is slow)


def test_timeout_names_hung_rank_and_where_it_is(ray_cluster):
    run_ranks(_pid, 2)  # the actors exist before the clock starts: only the hanging call is timed
    t0 = time.monotonic()
    with pytest.raises(RankError) as info:
        run_ranks(_sleep_on, 2, 1, timeout=3)
    assert time.monotonic() - t0 < 60  # the hung rank sleeps 600 s; loose bound for slow CI machines
    err = info.value
    assert err.rank == 1 and err.what.startswith("timed out")
    assert "_sleep_on" in str(err)  # the stack of the hung rank
    assert "ranks still running: [1]" in str(err)


def test_dead_rank_is_reported(ray_cluster):
    with pytest.raises(RankError) as info:
        run_ranks(_exit_on, 2, 0, timeout=30)
    assert info.value.rank == 0 and info.value.what == "died"


def test_failed_call_does_not_poison_later_calls(ray_cluster):
    with pytest.raises(RankError):
        run_ranks(_raise_on, 2, 0, timeout=30)
    out = run_ranks(_identify, 2, 1.0)
    assert [o[4] for o in out] == [3.0, 3.0]


def test_actors_are_reused_unless_a_rank_may_be_stuck(ray_cluster):
    # A group setup that failed (rare, on a loaded machine) is retried on other actors; only
    # calls without such a retry can show the pooling.
    retries = ray_cluster.setup_retries
    pids = run_ranks(_pid, 2)
    again = run_ranks(_pid, 2)
    assert again == pids or ray_cluster.setup_retries > retries  # pooled
    with pytest.raises(RankError) as info:
        run_ranks(_raise_everywhere, 2, timeout=30)
    assert info.value.rank == 0 and info.value.ranks_clean
    assert "(ranks [1] failed after it)" in str(info.value)
    retries, pids = ray_cluster.setup_retries, again
    again = run_ranks(_pid, 2)
    assert again == pids or ray_cluster.setup_retries > retries  # every rank came back: same actors
    pids = again
    with pytest.raises(RankError):
        run_ranks(_sleep_on, 2, 0, timeout=2)
    assert set(run_ranks(_pid, 2)).isdisjoint(pids)  # a hung rank: its actors were replaced


def test_group_is_destroyed_after_each_call(ray_cluster):
    assert run_ranks(_group_state, 2) == [True, True]
    # The same pooled actors, now without a group: nothing was left behind.
    assert run_actors(_group_state_plain, 2) == [False, False]


def _drive_rank0(fn, world_size, timeout):
    """Run rank 0 of a call in this process (no Ray) to see the actor side directly."""
    import torch.distributed as dist
    from ray import cloudpickle

    worker = _Worker(0)
    store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    worker._hosted = (0, store)  # what `host_store` leaves behind for the call's rank 0
    blob = cloudpickle.dumps((fn, (0,), {}))
    return worker.run_ranks(blob, 0, world_size, "127.0.0.1", store.port, "gloo", timeout, 0)


def test_group_is_destroyed_when_fn_raises():
    status, (_, tb, phase) = _drive_rank0(_raise_on, 1, 20)
    assert status == "err" and "boom from rank 0" in tb and phase == "drill"
    assert not torch.distributed.is_initialized()


def test_group_setup_failure_is_reported_as_setup():
    from torch.distributed import distributed_c10d

    try:
        status, (_, tb, phase) = _drive_rank0(_raise_on, 2, 1)  # rank 1 never shows up
    finally:
        distributed_c10d._world.group_count = 0  # what the failed setup left in this process
    assert status == "err" and phase == "setup" and "boom" not in tb
    assert not torch.distributed.is_initialized()


def test_failed_group_setup_is_retried_without_its_actors(ray_cluster):
    pids = run_ranks(_pid, 1)
    retries = ray_cluster.setup_retries
    with pytest.raises(RankError) as info:
        run_ranks(_pid, 1, backend="no-such-backend", timeout=30)
    assert ray_cluster.setup_retries == retries + drills._SETUP_ATTEMPTS - 1
    err = info.value
    assert err.in_setup and not err.ranks_clean and "no-such-backend" in str(err)
    # A rank whose setup failed keeps torch.distributed state that breaks its next setup (the
    # default group's name is a counter bumped before the rendezvous); mixed with a fresh rank it
    # would wait for keys nobody writes. Those actors must be gone.
    out = run_ranks(_pid, 2, timeout=60)
    assert len(set(out)) == 2 and set(out).isdisjoint(pids)


def test_run_actors_passes_messages_in_order_and_counts_bytes(ray_cluster):
    sizes = [3, 0, 7, 1]
    out = run_actors(_ring_messages, 3, sizes)
    for rank, (got, stats) in enumerate(out):
        left = (rank - 1) % 3
        assert got == [[float(100 * left + i)] * n for i, n in enumerate(sizes)]
        assert stats["bytes_sent"] == stats["bytes_received"] == 8 * sum(sizes)
        assert stats["messages_to"] == {(rank + 1) % 3: len(sizes)}


def test_comm_rejects_non_tensors(ray_cluster):
    with pytest.raises(RankError) as info:
        run_actors(_send_non_tensor, 2, timeout=20)
    assert "TypeError: Comm.send carries tensors only" in str(info.value)


def test_nccl_without_enough_gpus_fails_at_once(ray_cluster):
    import ray

    ranks = int(ray.cluster_resources().get("GPU", 0)) + 1
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="needs one GPU per rank"):
        run_ranks(_pid, ranks, backend="nccl")
    assert time.monotonic() - t0 < 30  # not left waiting for GPUs that do not exist


def test_world_size_is_validated(ray_cluster):
    with pytest.raises(ValueError):
        run_ranks(_identify, 0, 1.0)


def _load_unimportable(tmp_path, name, in_sys_modules):
    src = tmp_path / f"{name}.py"
    src.write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist

        OFFSET = 7.0

        def helper(x):
            return x + OFFSET

        def drill(rank, world_size):
            x = torch.tensor([helper(float(rank))])
            dist.all_reduce(x)
            return x.item()
    """))
    spec = importlib.util.spec_from_file_location(name, src)
    mod = importlib.util.module_from_spec(spec)
    if in_sys_modules:
        sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("in_sys_modules", [True, False])
def test_ships_code_from_unimportable_modules(ray_cluster, tmp_path, in_sys_modules):
    # Like `lesson.load`: a uniquely named module that no actor could import by name.
    name = f"hpccourse_learner_{os.getpid()}_{int(in_sys_modules)}"
    mod = _load_unimportable(tmp_path, name, in_sys_modules)
    try:
        assert run_ranks(mod.drill, 2) == [15.0, 15.0]  # (0+7) + (1+7)
    finally:
        sys.modules.pop(name, None)


def test_remote_ships_a_lesson_class_by_value_and_its_actor_can_be_killed(ray_cluster, tmp_path):
    import ray

    name = f"hpccourse_learner_{os.getpid()}_actor"
    mod = _load_unimportable(tmp_path, name, True)
    src = tmp_path / f"{name}_cls.py"
    src.write_text(textwrap.dedent("""
        import os

        class Counter:
            def __init__(self, start):
                self.n = start

            def bump(self):
                self.n += 1
                return self.n

            def pid(self):
                return os.getpid()
    """))
    spec = importlib.util.spec_from_file_location(f"{name}_cls", src)
    cls_mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cls_mod
    spec.loader.exec_module(cls_mod)
    try:
        actor = drills.remote(cls_mod.Counter, num_cpus=0).remote(41)
        assert ray.get(actor.bump.remote()) == 42
        assert ray.get(drills.remote(mod.helper).remote(1.0)) == 8.0  # plain function -> task
        os.kill(ray.get(actor.pid.remote()), 9)
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.bump.remote(), timeout=120)
    finally:
        sys.modules.pop(name, None)
        sys.modules.pop(spec.name, None)


def _stamp(rank, world_size, mod, tag):
    if mod.VALUE < 0:
        raise ValueError("negative VALUE")
    return mod.VALUE, tag, time.time_ns()


def test_drill_once_runs_once_per_source_and_keeps_failures(ray_cluster, tmp_path):
    from pytest_hpccourse.grading.fixtures import LessonFiles

    (tmp_path / "lesson.toml").write_text('id = "x-01"\n')
    lesson = LessonFiles(tmp_path, "x-01")
    (tmp_path / "learner.py").write_text("VALUE = 3\n")
    first = drills.drill_once(lesson, "learner.py", _stamp, 2, "a")
    assert [r[:2] for r in first] == [(3, "a"), (3, "a")]
    assert drills.drill_once(lesson, "learner.py", _stamp, 2, "a") == first  # cached: same stamps
    (tmp_path / "learner.py").write_text("VALUE = -1\n")  # new source: runs again, and fails
    for _ in range(2):  # the failure is kept and raised for every test that asks
        with pytest.raises(RankError, match="negative VALUE"):
            drills.drill_once(lesson, "learner.py", _stamp, 2, "a")
    (tmp_path / "learner.py").write_text("VALUE = 3\n")
    assert drills.drill_once(lesson, "learner.py", _stamp, 2, "a") == first


def test_ray_address_connects_to_the_running_cluster(ray_cluster, tmp_path):
    import ray

    address = ray.get_runtime_context().gcs_address
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent("""
        from pytest_hpccourse.runtimes.ray.drills import ray_session, run_ranks, shutdown

        def drill(rank, world_size):
            import torch, torch.distributed as dist
            x = torch.tensor([rank + 1.0]); dist.all_reduce(x); return x.item()

        s = ray_session()
        print("ADDRESS", s.address, "CPUS", s.num_cpus)
        print("RESULT", run_ranks(drill, 2))
        shutdown()
    """))
    root = pytest_hpccourse.package_parent()  # not the runtimes folder: its ray/ would shadow Ray
    env = dict(os.environ, RAY_ADDRESS=address,
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=100, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"ADDRESS {address} CPUS None" in proc.stdout
    assert "RESULT [3.0, 3.0]" in proc.stdout
    # Our own session survived the client's shutdown (it only disconnected).
    assert run_ranks(_identify, 2, 1.0)[0][4] == 3.0
