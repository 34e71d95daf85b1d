"""Distributed drills on Ray actors (capability `ray`).

One Ray instance per test session: a local one sized to the machine (no dashboard, no driver
logs, a temp dir of its own), or the cluster at `RAY_ADDRESS` so the same drills run on real
hardware. On top of it:

* `run_ranks(fn, world_size, *args)` runs `fn(rank, world_size, *args)` on `world_size` actors
  that form a `torch.distributed` process group (gloo on CPU, NCCL when `backend="nccl"` and the
  actors get a GPU each) and returns the per-rank results, ordered by rank.
* `run_actors(fn, world_size, *args)` runs `fn(comm, *args)` on plain actors that talk through a
  `Comm` (point-to-point `send`/`recv` over Ray actor calls, with byte accounting), for drills
  that implement collectives themselves.

A rank that raises, dies or does not finish in time fails the call with a `RankError` naming the
rank and carrying its traceback (or, for a hang, where it was stuck). Actors are pooled for the
session; a call that may have left a rank stuck, or whose group never formed, kills the actors it
used, so it cannot poison the next one. A group that fails to form (before any drill code ran) is
tried again without the actors it used.

Usage in a lesson test (the session fixture `ray_cluster` starts Ray once and shuts it down)::

    from pytest_hpccourse.runtimes.ray.drills import run_ranks

    def _allreduce(rank, world_size, n):
        import torch, torch.distributed as dist
        x = torch.full((n,), float(rank))
        dist.all_reduce(x)
        return x

    def test_sum(ray_cluster):
        out = run_ranks(_allreduce, 3, 5)          # [tensor, tensor, tensor]
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

__all__ = [
    "Comm",
    "RankError",
    "RaySession",
    "ray_cluster",
    "ray_session",
    "drill_once",
    "remote",
    "run_actors",
    "run_ranks",
    "shutdown",
]

DEFAULT_TIMEOUT = 60.0  # seconds a whole call may take (process-group init included)
_STACK_TIMEOUT = 3.0  # seconds to wait for a hung rank to tell where it is stuck
_MAX_CONCURRENCY = 8  # actor threads: the drill itself + message deliveries + stack dumps
# Tries to form a group. Gloo's full-mesh connect fails now and then on a loaded machine ("Connection
# closed by peer", ~2 of 60 calls with both cores of a 2-core box busy); that is no fault of the drill.
_SETUP_ATTEMPTS = 3


class RankError(RuntimeError):
    """A rank of a distributed call raised, died or did not finish in time."""

    def __init__(self, rank: int, world_size: int, what: str, detail: str) -> None:
        self.rank = rank
        self.world_size = world_size
        self.what = what  # "raised" | "timed out" | "died"
        self.detail = detail
        self.ranks_clean = False  # every rank came back from its drill: its actors are reusable
        self.in_setup = False  # the group never formed: no rank reported a failure of drill code
        super().__init__(f"rank {rank} of {world_size} {what}:\n{detail.rstrip()}")


# --------------------------------------------------------------------------------------------
# Actor side. Everything in this section runs inside Ray worker processes; it must not refer to
# the driver-side state further below.
# --------------------------------------------------------------------------------------------


class Comm:
    """Point-to-point messages between the ranks of a `run_actors` call.

    `send` is asynchronous (it returns once the message is handed to Ray) and copies the tensor,
    like a real network would; `recv(src)` blocks until the next message from `src` arrives.
    Messages from one sender to one receiver arrive in the order they were sent.
    Only tensors travel; every byte sent/received is counted.
    """

    def __init__(self, worker: _Worker, rank: int, world_size: int, peers: list, call_id: int,
                 deadline: float) -> None:
        self.rank = rank
        self.world_size = world_size
        self._worker = worker
        self._peers = peers
        self._call_id = call_id
        self._deadline = deadline
        self._send_seq: Counter[int] = Counter()
        self._recv_seq: Counter[int] = Counter()
        self.bytes_sent = 0
        self.bytes_received = 0
        self.messages_to: Counter[int] = Counter()  # destination rank -> number of messages

    def _check_peer(self, peer: int) -> None:
        if not isinstance(peer, int) or not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"rank {self.rank}: invalid peer {peer!r} (world_size {self.world_size})")

    def send(self, dst: int, tensor: Any) -> None:
        import torch

        self._check_peer(dst)
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"Comm.send carries tensors only, got {type(tensor).__name__}")
        payload = tensor.detach().contiguous()
        seq = self._send_seq[dst]
        self._send_seq[dst] += 1
        self.bytes_sent += payload.numel() * payload.element_size()
        self.messages_to[dst] += 1
        # Ray serializes the arguments right here, so later writes to `tensor` do not leak.
        self._peers[dst].deliver.remote(self._call_id, self.rank, seq, payload)

    def recv(self, src: int) -> Any:
        self._check_peer(src)
        seq = self._recv_seq[src]
        self._recv_seq[src] += 1
        msg = self._worker.take(self._call_id, src, seq, self._deadline)
        if msg is None:
            raise TimeoutError(f"rank {self.rank}: recv from rank {src} (message #{seq}) timed out")
        self.bytes_received += msg.numel() * msg.element_size()
        return msg

    def stats(self) -> dict[str, Any]:
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "messages_to": dict(self.messages_to)}


class _Worker:
    """One rank. Pooled for the session; runs one drill at a time on a threaded actor."""

    def __init__(self, num_gpus: float) -> None:
        import torch

        torch.set_num_threads(1)  # ranks share a few cores; intra-op threads would oversubscribe
        if num_gpus and torch.cuda.is_available():
            torch.cuda.set_device(0)  # Ray exposes exactly the GPU it assigned to this actor
        self._cv = threading.Condition()
        self._mailbox: dict[tuple[int, int, int], Any] = {}
        self._call_id = -1
        self._thread_id: int | None = None
        self._hosted: tuple[int, Any] | None = None  # (call id, TCPStore) while rank 0 of a call

    def ready(self) -> bool:
        return True

    def host_store(self, call_id: int, timeout: float) -> tuple[str, int]:
        """Host the rendezvous store of call `call_id` (this actor is its rank 0).

        The OS picks the port while the store binds it, so no other process can take the port
        between choosing and binding it (as with "find a free port, close it, bind it again").
        """
        import datetime

        import ray
        import torch.distributed as dist

        host = ray.util.get_node_ip_address()
        store = dist.TCPStore(host, 0, None, True, timeout=datetime.timedelta(seconds=timeout),
                              wait_for_workers=False)
        self._hosted = (call_id, store)
        return host, store.port

    def _call_store(self, call_id: int, rank: int, host: str, port: int, timeout: float) -> Any:
        """The store of this call, under a prefix of its own: keys of two calls never meet."""
        import datetime

        import torch.distributed as dist

        hosted, self._hosted = self._hosted, None
        if rank == 0 and hosted is not None and hosted[0] == call_id:
            store = hosted[1]
        else:
            store = dist.TCPStore(host, port, None, False,
                                  timeout=datetime.timedelta(seconds=timeout))
        return dist.PrefixStore(f"hpccourse/call{call_id}", store)

    # -- messages -----------------------------------------------------------------------------
    def deliver(self, call_id: int, src: int, seq: int, payload: Any) -> None:
        with self._cv:
            if call_id >= self._call_id:  # messages of an older, abandoned call are dropped
                self._mailbox[(call_id, src, seq)] = payload
                self._cv.notify_all()

    def take(self, call_id: int, src: int, seq: int, deadline: float) -> Any:
        key = (call_id, src, seq)
        with self._cv:
            while key not in self._mailbox:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(left)
            return self._mailbox.pop(key)

    def _begin(self, call_id: int) -> None:
        import torch

        with self._cv:
            self._call_id = call_id
            self._mailbox = {k: v for k, v in self._mailbox.items() if k[0] == call_id}
        self._thread_id = threading.get_ident()
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)

    def stack(self) -> str:
        """Where the drill thread is right now (asked for when a rank hangs)."""
        frame = sys._current_frames().get(self._thread_id or -1)
        if frame is None:
            return "(not running)\n"
        entries = traceback.extract_stack(frame)
        # Drop Ray's own frames: start at our run_ranks / run_actors.
        starts = [i for i, e in enumerate(entries) if e.name in ("run_ranks", "run_actors")]
        return "".join(traceback.format_list(entries[starts[-1] if starts else 0:]))

    # -- drills -------------------------------------------------------------------------------
    def run_ranks(self, blob: bytes, rank: int, world_size: int, host: str, port: int,
                  backend: str, timeout: float, call_id: int) -> tuple[str, Any]:
        """One rank of a call: join the group, run the drill, leave the group.

        A failure comes back as ("err", (when, traceback, phase)); phase "setup" means the group
        never formed here, so no drill code ran on this rank.
        """
        import datetime

        import torch.distributed as dist
        from ray import cloudpickle

        self._begin(call_id)
        phase = "setup"
        try:
            fn, args, kwargs = cloudpickle.loads(blob)
            if dist.is_initialized():  # left over by a drill that created its own group
                dist.destroy_process_group()
            dist.init_process_group(backend, store=self._call_store(call_id, rank, host, port,
                                                                    timeout),
                                    rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout))
            phase = "drill"
            try:
                return "ok", fn(rank, world_size, *args, **kwargs)
            except BaseException:  # noqa: BLE001 - every failure goes back to the driver
                # Stamped before the group is torn down: peers fail only after this.
                return "err", (time.time(), traceback.format_exc(), phase)
            finally:
                dist.destroy_process_group()
        except BaseException:  # noqa: BLE001
            return "err", (time.time(), traceback.format_exc(), phase)
        finally:
            self._thread_id = None

    def run_actors(self, blob: bytes, rank: int, world_size: int, peers: list, timeout: float,
                   call_id: int) -> tuple[str, Any]:
        from ray import cloudpickle

        self._begin(call_id)
        try:
            fn, args, kwargs = cloudpickle.loads(blob)
            comm = Comm(self, rank, world_size, peers, call_id, time.monotonic() + timeout)
            return "ok", fn(comm, *args, **kwargs)
        except BaseException:  # noqa: BLE001
            return "err", (time.time(), traceback.format_exc(), "drill")
        finally:
            self._thread_id = None


# --------------------------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------------------------


def _machine_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


_INSTALLED_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix,
              *(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    if p
)
_by_value: set[str] = set()


def _register_local_modules() -> None:
    """Make cloudpickle ship code from modules the actors cannot import, by value.

    Test files and learner files (`lesson.load` gives them unique module names) live outside any
    installed location, so a Ray worker cannot import them by name. Every module loaded from such a
    place is pickled by value; installed packages (torch, pytest, ...) still travel by reference.
    """
    from ray import cloudpickle

    for name, mod in list(sys.modules.items()):
        if name in _by_value or name == "__main__" or mod is None:
            continue
        path = getattr(mod, "__file__", None)
        if not path or os.path.realpath(path).startswith(_INSTALLED_ROOTS):
            continue
        if getattr(mod, "__name__", None) != name:  # an alias entry; cloudpickle needs the real name
            continue
        try:
            cloudpickle.register_pickle_by_value(mod)
        except ValueError:
            continue
        _by_value.add(name)


class RaySession:
    """The Ray connection of this process plus its pool of rank actors."""

    def __init__(self, owned: bool, address: str | None, num_cpus: int | None,
                 temp_dir: str | None) -> None:
        self.owned = owned  # True: we started the local instance and shut it down at the end
        self.address = address  # RAY_ADDRESS when connected to a cluster, else None
        self.num_cpus = num_cpus
        self._temp_dir = temp_dir
        self._pools: dict[float, list] = {}  # num_gpus per actor -> actor handles
        self._lock = threading.RLock()
        self._calls = itertools.count()
        self.setup_retries = 0  # failed group setups that were tried again on other actors
        self.closed = False

    # -- context manager: `with ray_session() as s:` shuts down what it started ---------------
    def __enter__(self) -> RaySession:
        return self

    def __exit__(self, *exc: object) -> None:
        shutdown()

    # -- actor pool ---------------------------------------------------------------------------
    def _acquire(self, n: int, num_gpus: float) -> list:
        import ray

        pool = self._pools.setdefault(num_gpus, [])
        if len(pool) < n:
            gpus = ray.cluster_resources().get("GPU", 0)
            if num_gpus and gpus < n * num_gpus:  # Ray would wait forever to place the actors
                raise RuntimeError(f"backend='nccl' needs one GPU per rank: {n} ranks, but the Ray "
                                   f"cluster has {gpus:g} GPU(s); use backend='gloo' on CPU")
            _register_local_modules()  # a dev checkout ships this very module by value
            cls = ray.remote(_Worker).options(num_cpus=0, num_gpus=num_gpus,
                                              max_concurrency=_MAX_CONCURRENCY)
            fresh = [cls.remote(num_gpus) for _ in range(n - len(pool))]
            ray.get([a.ready.remote() for a in fresh])
            pool.extend(fresh)
        return pool[:n]

    def _discard(self, actors: Sequence) -> None:
        import ray

        for pool in self._pools.values():
            pool[:] = [a for a in pool if a not in actors]
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass

    def _kill_all(self) -> None:
        for pool in list(self._pools.values()):
            self._discard(list(pool))
        self._pools.clear()

    # -- calls --------------------------------------------------------------------------------
    def run_ranks(self, fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo",
                  timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> list[Any]:
        """Run `fn(rank, world_size, *args, **kwargs)` on a `torch.distributed` group.

        If the group itself fails to form (a rendezvous or connection error before any drill code
        ran), the call is tried again without the actors it used, `_SETUP_ATTEMPTS` times in all:
        that failure says nothing about `fn`.
        """
        import ray

        num_gpus = 1 if backend == "nccl" else 0
        with self._lock:
            blob = ray.put(_dumps(fn, args, kwargs))
            attempt = 1
            while True:
                actors = self._acquire(_check_world(world_size), num_gpus)
                try:
                    call_id = next(self._calls)
                    host, port = ray.get(actors[0].host_store.remote(call_id, timeout),
                                         timeout=timeout)
                    refs = [a.run_ranks.remote(blob, r, world_size, host, port, backend, timeout,
                                               call_id) for r, a in enumerate(actors)]
                    return _gather(refs, actors, timeout)
                except BaseException as e:
                    if not getattr(e, "ranks_clean", False):
                        self._discard(actors)  # ranks may be stuck in a collective: never reuse them
                    if getattr(e, "in_setup", False) and attempt < _SETUP_ATTEMPTS:
                        attempt += 1
                        self.setup_retries += 1
                        continue
                    raise

    def run_actors(self, fn: Callable[..., Any], world_size: int, *args: Any,
                   timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> list[Any]:
        """Run `fn(comm, *args, **kwargs)` on plain actors that exchange messages via `comm`."""
        import ray

        with self._lock:
            actors = self._acquire(_check_world(world_size), 0)
            try:
                blob = ray.put(_dumps(fn, args, kwargs))
                call_id = next(self._calls)
                refs = [a.run_actors.remote(blob, r, world_size, actors, timeout, call_id)
                        for r, a in enumerate(actors)]
                return _gather(refs, actors, timeout)
            except BaseException as e:
                if not getattr(e, "ranks_clean", False):
                    self._discard(actors)  # a rank may still be blocked in recv
                raise


def _check_world(world_size: int) -> int:
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    return world_size


def _dumps(fn: Callable[..., Any], args: tuple, kwargs: dict) -> bytes:
    from ray import cloudpickle

    _register_local_modules()
    return cloudpickle.dumps((fn, args, kwargs))


def _gather(refs: list, actors: list, timeout: float) -> list[Any]:
    """Results ordered by rank; the first failure (or a hang past `timeout`) raises RankError."""
    import ray

    n = len(refs)
    pending = {ref: rank for rank, ref in enumerate(refs)}
    results: list[Any] = [None] * n
    deadline = time.monotonic() + timeout + 2.0  # the ranks enforce `timeout` themselves too
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1,
                            timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            raise _hang_error(sorted(pending.values()), actors, timeout)
        for ref in ready:
            rank = pending.pop(ref)
            status, payload = _outcome(ref, rank)
            if status != "ok":
                raise _root_cause(rank, payload, pending, n)
            results[rank] = payload
    return results


def _outcome(ref: Any, rank: int) -> tuple[str, Any]:
    """("ok", result) or ("err", (when, text, phase)) for one rank."""
    import ray
    from ray.exceptions import RayError

    try:
        return ray.get(ref)
    except RayError as e:  # the actor process died (crash, os._exit, out of memory, ...)
        # When it died is unknown; a crash is the likeliest root cause, so it sorts first.
        return "err", (float("-inf"), f"rank {rank} died:\n{e}", "died")


def _root_cause(rank: int, payload: tuple[float, str, str], pending: dict, n: int) -> RankError:
    """When one rank fails, its peers often fail right after (their collective lost a member).
    Give them a moment to report and blame the rank that died, else the one that raised first."""
    import ray

    failures = {rank: payload}
    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=2.0)
    for ref in ready:
        status, other = _outcome(ref, pending[ref])
        if status != "ok":
            failures[pending[ref]] = other
    first = min(failures, key=lambda r: (failures[r][0], r))
    _, detail, phase = failures[first]
    also = sorted(set(failures) - {first})
    if also:
        detail += f"\n(ranks {also} failed after it)"
    err = RankError(first, n, "died" if phase == "died" else "raised", detail)
    phases = {f[2] for f in failures.values()}
    # All ranks are back, each left its group in `finally`, none died, and every group formed: a
    # rank whose group setup failed may keep torch.distributed state that breaks its next setup
    # (the default group's name is a per-process counter bumped before the rendezvous).
    err.ranks_clean = len(ready) == len(pending) and phases == {"drill"}
    err.in_setup = phases == {"setup"}
    return err


def _hang_error(hung: list[int], actors: list, timeout: float) -> RankError:
    import ray

    stacks = []
    for r in hung:
        try:
            where = ray.get(actors[r].stack.remote(), timeout=_STACK_TIMEOUT)
        except Exception:  # noqa: BLE001
            where = "(stack unavailable)\n"
        stacks.append(f"--- rank {r} was at:\n{where}")
    return RankError(hung[0], len(actors), f"timed out after {timeout:g} s",
                     f"ranks still running: {hung}\n" + "".join(stacks))


_SESSION: RaySession | None = None
_SESSION_LOCK = threading.Lock()


def ray_session(num_cpus: int | None = None) -> RaySession:
    """Start (or connect to) Ray once per process and return the session; later calls reuse it.

    With `RAY_ADDRESS` set, connects to that cluster. Otherwise starts a local instance sized to
    this machine (`HPCCOURSE_RAY_CPUS` overrides), without dashboard or driver logs, in a temp dir
    of its own. If Ray is already initialized in this process, that connection is used and left
    running at shutdown.
    """
    global _SESSION
    import ray

    with _SESSION_LOCK:
        if _SESSION is not None and not _SESSION.closed and ray.is_initialized():
            return _SESSION
        address = os.environ.get("RAY_ADDRESS") or None
        if ray.is_initialized():
            _SESSION = RaySession(owned=False, address=address, num_cpus=None, temp_dir=None)
        elif address:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
            _SESSION = RaySession(owned=True, address=address, num_cpus=None, temp_dir=None)
        else:
            cpus = num_cpus or int(os.environ.get("HPCCOURSE_RAY_CPUS", 0)) or _machine_cpus()
            temp_dir = tempfile.mkdtemp(prefix="hpcray-")  # short: Ray's socket paths are capped
            # address="local": never attach to some other cluster recorded on this machine
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
                     _temp_dir=temp_dir, object_store_memory=128 * 1024**2,
                     logging_level="WARNING", ignore_reinit_error=True)
            _SESSION = RaySession(owned=True, address=None, num_cpus=cpus, temp_dir=temp_dir)
        return _SESSION


def shutdown() -> None:
    """Kill the pooled actors and, if this process started or connected Ray, shut it down."""
    global _SESSION
    with _SESSION_LOCK:
        session, _SESSION = _SESSION, None
    if session is None or session.closed:
        return
    session.closed = True
    import ray

    if ray.is_initialized():
        session._kill_all()
        if session.owned:
            ray.shutdown()
    if session._temp_dir:
        shutil.rmtree(session._temp_dir, ignore_errors=True)


atexit.register(shutdown)


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo",
              timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> list[Any]:
    """Run `fn(rank, world_size, *args, **kwargs)` on `world_size` Ray actors in one
    `torch.distributed` process group; return the results ordered by rank.

    `backend="gloo"` runs on CPU; `backend="nccl"` gives every actor one GPU. The group is created
    before `fn` runs and destroyed after it, whatever happens. A rank that raises, dies or is still
    running after `timeout` seconds fails the call with `RankError` (rank id + traceback or stack).
    `fn` and `args` are shipped with cloudpickle; functions from test and learner files travel by
    value, so they need not be importable in the actors.
    """
    return ray_session().run_ranks(fn, world_size, *args, backend=backend, timeout=timeout,
                                   **kwargs)


def run_actors(fn: Callable[..., Any], world_size: int, *args: Any,
               timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> list[Any]:
    """Run `fn(comm, *args, **kwargs)` on `world_size` plain Ray actors; results ordered by rank.

    `comm` is a `Comm`: `comm.rank`, `comm.world_size`, `comm.send(dst, tensor)`,
    `comm.recv(src)`, and the counters `comm.bytes_sent` / `comm.bytes_received` /
    `comm.messages_to`. No process group is formed: the drill moves every byte itself.
    """
    return ray_session().run_actors(fn, world_size, *args, timeout=timeout, **kwargs)


_DRILLS: dict[tuple, tuple[bool, Any]] = {}


def drill_once(lesson: Any, name: str, fn: Callable[..., Any], world_size: int, *args: Any,
               **kwargs: Any) -> list[Any]:
    """`run_ranks(fn, world_size, lesson.load(name), *args, **kwargs)`, run once per test session for each
    content of the learner's file `name` (and `fn`, `world_size`), so that several tests grade one Ray run.

    The arguments must be the same on every call with the same key (build them from fixed seeds). A
    failure is kept too and raised again in every test that asks: each of them fails, the drill ran once."""
    source = hashlib.sha256(lesson.path(name).read_bytes()).hexdigest()
    key = (str(lesson.dir), name, source, fn.__qualname__, world_size)
    if key not in _DRILLS:
        try:
            _DRILLS[key] = (True, run_ranks(fn, world_size, lesson.load(name), *args, **kwargs))
        except Exception as err:  # noqa: BLE001 - a failed drill fails each test grading it, once
            _DRILLS[key] = (False, err)
    ok, value = _DRILLS[key]
    if not ok:
        raise value
    return value


def remote(obj: Any, **options: Any) -> Any:
    """`ray.remote(obj)`, with `.options(**options)` when given, for actors and tasks a drill makes itself.

    Use it where `run_ranks` / `run_actors` do not fit (a drill that kills and restarts its own actors, a
    pool of servers): code from test files and `lesson.load` modules, which no Ray worker can import by
    name, is made to travel by value first, as `run_ranks` does. Call it after the lesson is loaded and
    inside a test that uses the `ray_cluster` fixture (Ray must be up)."""
    import ray

    _register_local_modules()
    handle = ray.remote(obj)
    return handle.options(**options) if options else handle


@pytest.fixture(scope="session")
def ray_cluster() -> Any:
    """Session fixture: Ray up (local or `RAY_ADDRESS`) for the whole session, shut down at the end."""
    session = ray_session()
    yield session
    shutdown()
