"""Recording the torch.distributed calls of one rank, for drills that grade *how* ranks talk.

`record_collectives()` swaps every collective and point-to-point function of `torch.distributed`
(`COLLECTIVES`: all-reduce, reduce-scatter, all-gather, send/recv, `batch_isend_irecv`, ...) for a
wrapper that logs the call and then calls the original. Leaving the `with` block, normally or by an
exception, puts the originals back, so a pooled Ray actor runs its next drill unrecorded. It is
meant for the inside of a `run_ranks` rank function::

    def _rank(rank, world_size, mod):
        with record_collectives() as log:
            log.phase = "backward"
            mod.train_step()
        return [(e.op, e.nbytes, e.phase, e.async_op, e.touched) for e in log.collectives]

Each call becomes a `Collective` in `log.events`: the op name, `log.phase` at the time of the call,
whether it was asynchronous, the byte size of each tensor / tensor-list argument in signature order
(reduce-scatter: (output, input)), and the numel of its first tensor. A returned `Work` handle is
wrapped so that `Collective.touched` lists the waiting methods (`WAITING`) called on it, each with
the phase it was called in. `log.mark(...)` appends a plain tuple into the same list, so a test can
interleave its own markers (gradient hooks, probes) with the collectives.

Only calls through the module attribute are seen (`dist.all_reduce(...)`,
`torch.distributed.all_reduce(...)`); a name bound before the block (`from torch.distributed import
all_reduce`) and torch's own internal calls are not. One block at a time per process: entering a
second one while another is active raises `RuntimeError`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COLLECTIVES", "WAITING", "Collective", "CollectiveLog", "record_collectives"]

COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
               "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
               "reduce_scatter_single", "all_to_all", "all_to_all_single", "gather", "scatter",
               "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv")
# Work methods that block on, or poll, the communication.
WAITING = ("wait", "get_future", "synchronize", "result", "is_completed", "exception")
_ALWAYS_ASYNC = ("isend", "irecv", "batch_isend_irecv")  # they have no async_op: they return Work
_MARK = "_hpccourse_recorded"  # attribute of an installed wrapper: its original function


@dataclass
class Collective:
    """One recorded torch.distributed call."""

    op: str  # the function's name in torch.distributed, e.g. "reduce_scatter_tensor"
    phase: str  # `CollectiveLog.phase` when it was called
    async_op: bool  # async_op=True, or an op that always returns Work (isend, irecv, batch)
    nbytes: tuple[int, ...]  # bytes of each tensor / tensor-list argument, in signature order
    numel: int  # elements of the first tensor argument (0 when there is none)
    touched: list[tuple[str, str]] = field(default_factory=list)  # (Work method, phase) in call order


class CollectiveLog:
    """The events of one `record_collectives()` block: `Collective`s and `mark()` tuples, in order."""

    def __init__(self) -> None:
        self.phase = ""  # a free label the test sets ("forward", "backward", ...); stamped on events
        self.events: list[Collective | tuple[Any, ...]] = []
        self._saved: dict[str, Any] = {}

    @property
    def collectives(self) -> list[Collective]:
        """The recorded calls alone, without the markers."""
        return [e for e in self.events if isinstance(e, Collective)]

    def mark(self, *fields: Any) -> None:
        """Append the tuple `fields` (e.g. `log.mark("ready", 3)` -> `("ready", 3)`) to `events`."""
        self.events.append(tuple(fields))

    # -- installing and removing the wrappers -------------------------------------------------
    def __enter__(self) -> CollectiveLog:
        import torch.distributed as dist

        if self._saved:
            raise RuntimeError("this CollectiveLog is already recording")
        if any(hasattr(getattr(dist, name, None), _MARK) for name in COLLECTIVES):
            raise RuntimeError("record_collectives() is already active in this process; "
                               "blocks cannot be nested: use the outer block's log")
        saved = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
        saved["P2POp"] = dist.P2POp
        wrappers = {name: self._wrap(name, orig) for name, orig in saved.items() if name != "P2POp"}
        wrappers["P2POp"] = _p2p_op_class(dist.P2POp)
        self._saved = saved
        for name, wrapper in wrappers.items():
            setattr(dist, name, wrapper)
        return self

    def __exit__(self, *exc: object) -> None:
        import torch.distributed as dist

        saved, self._saved = self._saved, {}
        for name, orig in saved.items():  # pooled actors run other drills afterwards
            setattr(dist, name, orig)

    def _wrap(self, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(orig)
        always_async = name in _ALWAYS_ASYNC

        @functools.wraps(orig)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # let the original report the bad call in its own words
                return orig(*args, **kwargs)
            groups = [ts for ts in map(_tensors, bound.arguments.values()) if ts is not None]
            first = next((ts[0] for ts in groups if ts), None)
            event = Collective(
                op=name, phase=self.phase,
                async_op=bool(bound.arguments.get("async_op", always_async)),
                nbytes=tuple(sum(t.numel() * t.element_size() for t in ts) for ts in groups),
                numel=first.numel() if first is not None else 0)
            self.events.append(event)
            return _wrap_work(orig(*args, **kwargs), event, self)

        setattr(recorded, _MARK, orig)
        return recorded


def record_collectives() -> CollectiveLog:
    """A context manager that records this process's torch.distributed calls; see the module doc."""
    return CollectiveLog()


def _tensors(value: Any) -> list[Any] | None:
    """The tensors an argument carries: a tensor, a P2POp, or a non-empty list of them; else None."""
    import torch
    import torch.distributed as dist

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dist.P2POp):
        return [value.tensor]
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, (torch.Tensor, dist.P2POp)) for v in value):
        return [v.tensor if isinstance(v, dist.P2POp) else v for v in value]
    return None


class _RecordedWork:
    """Stands in for a Work handle; logs which waiting methods were called on it, and when."""

    def __init__(self, work: Any, event: Collective, log: CollectiveLog) -> None:
        self._work, self._event, self._log = work, event, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._work, name)
        if name in WAITING and callable(attr):
            def touched(*args: Any, **kwargs: Any) -> Any:
                self._event.touched.append((name, self._log.phase))
                return attr(*args, **kwargs)
            return touched
        return attr

    def __repr__(self) -> str:
        return f"<recorded {self._work!r}>"


def _wrap_work(out: Any, event: Collective, log: CollectiveLog) -> Any:
    if isinstance(out, list):  # batch_isend_irecv: one Work per P2POp
        return [_wrap_work(w, event, log) for w in out]
    if out is not None and hasattr(out, "wait"):
        return _RecordedWork(out, event, log)
    return out


def _p2p_op_class(original: type) -> type:
    """P2POp accepts only the real isend/irecv (`op in [isend, irecv]`, and `op is isend` picks the
    peer argument): hand it the original behind a recorded `dist.isend`."""

    def unwrap(op: Any) -> Any:
        return getattr(op, _MARK, op)

    class P2POp(original):  # type: ignore[misc, valid-type]
        def __new__(cls, op: Any, *args: Any, **kwargs: Any) -> Any:
            return original.__new__(cls, unwrap(op), *args, **kwargs)

        def __init__(self, op: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(unwrap(op), *args, **kwargs)

    return P2POp
