"""Recording torch.distributed calls (`pytest_hpccourse.runtimes.ray.collectives`), on a one-rank gloo group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from pytest_hpccourse.runtimes.ray.collectives import (  # noqa: E402
    COLLECTIVES,
    Collective,
    CollectiveLog,
    record_collectives,
)

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

# torch >= 2.12 deprecates the *_tensor names the drills use
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    """A world of one gloo rank in this process (a FileStore: no port, no Ray)."""
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _originals() -> dict[str, object]:
    return {name: getattr(dist, name) for name in (*COLLECTIVES, "P2POp") if hasattr(dist, name)}


def test_records_op_phase_async_bytes_and_numel(group: None) -> None:
    x = torch.arange(5, dtype=torch.float64)
    with record_collectives() as log:
        assert isinstance(log, CollectiveLog)
        dist.all_reduce(x)
        log.phase = "step"
        out = torch.zeros(3, dtype=torch.float32)
        torch.distributed.reduce_scatter_tensor(out, torch.ones(3, dtype=torch.float32))
        full = torch.zeros(4, dtype=torch.int64)
        dist.all_gather_into_tensor(full, torch.ones(4, dtype=torch.int64), async_op=False)
        dist.all_gather([torch.zeros(2)], torch.ones(2))
        dist.barrier()
    assert log.events == [
        Collective("all_reduce", "", False, (40,), 5),
        Collective("reduce_scatter_tensor", "step", False, (12, 12), 3),  # (output, input)
        Collective("all_gather_into_tensor", "step", False, (32, 32), 4),
        Collective("all_gather", "step", False, (8, 8), 2),  # a tensor list counts as one argument
        Collective("barrier", "step", False, (), 0),
    ]
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # the real collective ran


def test_work_touches_and_markers_keep_their_order(group: None) -> None:
    with record_collectives() as log:
        log.phase = "backward"
        work = dist.all_reduce(torch.ones(3), async_op=True)
        log.mark("ready", 2)
        log.phase = "finish"
        work.is_completed()
        work.wait()
        work.get_future().wait()
        assert work.source_rank is not None  # other attributes pass through unrecorded
    event = log.events[0]
    assert event.async_op and event.phase == "backward"
    assert event.touched == [("is_completed", "finish"), ("wait", "finish"), ("get_future", "finish")]
    assert log.events[1] == ("ready", 2) and log.collectives == [event]


def test_p2p_ops_are_async_and_batches_record_their_tensors(group: None) -> None:
    a, b = torch.ones(3), torch.zeros(6)
    real_isend = dist.isend
    with record_collectives() as log:
        # P2POp insists on the real isend/irecv: the recorded ones must still be accepted
        ops = [dist.P2POp(dist.isend, a, 0), dist.P2POp(dist.irecv, b, 0)]
        assert isinstance(ops[0], dist.P2POp) and ops[0].op is real_isend
        with pytest.raises(Exception):  # noqa: B017 - gloo refuses to pair a rank with itself
            dist.batch_isend_irecv(ops)
    assert log.events == [Collective("batch_isend_irecv", "", True, (12 + 24,), 3)]


def test_originals_restored_on_exit_and_on_exception(group: None) -> None:
    before = _originals()
    with record_collectives():
        assert all(getattr(dist, n) is not f for n, f in before.items())
    assert _originals() == before
    with pytest.raises(ZeroDivisionError), record_collectives() as log:
        dist.all_reduce(torch.ones(1))
        1 / 0  # noqa: B018
    assert _originals() == before and [e.op for e in log.collectives] == ["all_reduce"]
    dist.all_reduce(torch.ones(1))
    assert len(log.events) == 1  # nothing recorded after the block


def test_nesting_raises_and_leaves_the_outer_block_intact(group: None) -> None:
    before = _originals()
    with record_collectives() as outer:
        installed = _originals()
        with pytest.raises(RuntimeError, match="already active"), record_collectives():
            pass
        assert _originals() == installed
        dist.broadcast(torch.ones(2), src=0)
    assert _originals() == before and [e.op for e in outer.collectives] == ["broadcast"]
