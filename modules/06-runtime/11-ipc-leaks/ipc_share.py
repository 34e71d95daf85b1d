"""Sharing CPU tensors between processes without leaks: a producer with a ring of shared buffers, consumers that
ack, a consumer that may die by SIGKILL at any instant, and a leak detector.

How torch.multiprocessing moves a tensor (torch/multiprocessing/reductions.py, `reduce_storage`):
- "file_descriptor" (Linux default): the storage lives in a shm object that is unlinked right after creation
  (/dev/shm shows nothing); pickling dups its fd into multiprocessing's resource_sharer, which hands the fd to
  the receiver over a Unix socket. Leak = an fd still open in some process (/proc/<pid>/fd -> "/dev/shm/torch_... (deleted)").
- "file_system": the storage is a named file /dev/shm/torch_<pid>_<random>_<n> with a reference count in its
  header; pickling increments it, the receiver's unpickling maps the file and decrements it; the name is unlinked
  when the count reaches 0. Leak = a name left in /dev/shm.

Contract:
    shm_segments(pid) -> set[str]      # names in /dev/shm created by process `pid`, spelled as os.listdir("/dev/shm")
                                       #   gives them: "torch_<pid>_<random>_<n>", no leading "/" (so are self.names)
    shm_fds(pid) -> set[int]           # fds of `pid` open on /dev/shm/torch_* objects, unlinked ones included
    p = Producer(n_consumers, n_slots, numel, strategy, delay)   # forks the consumers, then the buffer ring
    p.send(values)                     # copy into a free slot, send the slot to every live consumer
    p.close()                          # stop consumers, wait, join, release the ring, sweep what crashes left
    p.received[c]                      # checksums consumer c acked, in order
Protocol: a consumer receives (slot, tensor), computes checksum(tensor) and acks (slot, digest). A slot may be
overwritten only when every consumer it was sent to has acked it or died. Consumers can be SIGKILLed at any time.
"""

from __future__ import annotations

import collections
import gc
import hashlib
import multiprocessing.connection as mpc
import multiprocessing.resource_sharer as resource_sharer
import os
import signal
import time

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.reductions import StorageWeakRef

SHM_DIR = "/dev/shm"


def checksum(t: torch.Tensor) -> str:
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


# ---- leak detector ------------------------------------------------------------------------------------------
def shm_segments(pid: int) -> set[str]:
    """Names of the file_system-strategy segments that process `pid` created and that still exist."""
    ### HINT: torch names them torch_<creator pid>_<random>_<counter>; another process's torch_12_... must not match pid 1
    ### BEGIN SOLUTION
    prefix = f"torch_{pid}_"
    return {name for name in os.listdir(SHM_DIR) if name.startswith(prefix)}
    ### END SOLUTION


def shm_fds(pid: int) -> set[int]:
    """File descriptors of process `pid` that point at torch shared-memory objects (unlinked ones included)."""
    ### HINT: /proc/<pid>/fd/<n> is a symlink; an unlinked object reads "/dev/shm/torch_... (deleted)"; fds can close while you look
    ### BEGIN SOLUTION
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{SHM_DIR}/torch_"):
            out.add(int(fd))
    return out
    ### END SOLUTION


# ---- consumer -----------------------------------------------------------------------------------------------
def consume(data: mpc.Connection, ack: mpc.Connection, delay: float) -> None:
    """Consumer loop: messages are (slot, tensor) or None (stop); ack every tensor with (slot, checksum)."""
    ### HINT: the tensor is only valid until the ack: after it the producer may overwrite the slot
    ### BEGIN SOLUTION
    for slot, t in iter(data.recv, None):
        time.sleep(delay)  # work on the tensor
        ack.send((slot, checksum(t)))
    ### END SOLUTION


def _consumer_main(data, ack, delay) -> None:
    torch.set_num_threads(1)
    consume(data, ack, delay)


# ---- producer -----------------------------------------------------------------------------------------------
class Producer:
    def __init__(self, n_consumers: int, n_slots: int, numel: int, strategy: str, delay: float = 0.0,
                 timeout: float = 20.0) -> None:
        self.strategy, self._old_strategy = strategy, mp.get_sharing_strategy()
        mp.set_sharing_strategy(strategy)
        self.deadline = time.monotonic() + timeout
        ctx = mp.get_context("fork")  # the children inherit the imported torch: no 3 s import per consumer
        self.data, self.acks, self.procs = [], [], []
        for _ in range(n_consumers):
            data_r, data_w = ctx.Pipe(duplex=False)
            ack_r, ack_w = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_consumer_main, args=(data_r, ack_w, delay), daemon=True)
            proc.start()
            # the producer keeps its copies of every pipe end open: writing to a consumer that just died never
            # raises, and a dead consumer's ack pipe never reads EOF (its death is seen through the sentinel)
            self.data.append((data_r, data_w))
            self.acks.append((ack_r, ack_w))
            self.procs.append(proc)
        # the ring is created after the fork so that no consumer inherits its fds or mappings
        self.slots = [torch.zeros(numel, dtype=torch.float64).share_memory_() for _ in range(n_slots)]
        # file_system: the /dev/shm name of every slot, as os.listdir("/dev/shm") spells it ("torch_<pid>_<random>_<n>":
        # torch's handle "/torch_..." without its leading "/"); none for file_descriptor
        self.names = [s.untyped_storage()._share_filename_cpu_()[1].decode().lstrip("/") for s in self.slots] \
            if strategy == "file_system" else []
        self._refs = [StorageWeakRef(s.untyped_storage()) for s in self.slots]
        self.free = collections.deque(range(n_slots))  # slots that may be overwritten
        self.pending = {slot: set() for slot in range(n_slots)}  # slot -> consumers that still have to ack it
        self.received = {c: [] for c in range(n_consumers)}
        self.dead: set[int] = set()

    # ---- given helpers ------------------------------------------------------------------------------------
    def live(self) -> list[int]:
        return [c for c in range(len(self.procs)) if c not in self.dead]

    def _events(self) -> list[tuple[int, str, tuple | None]]:
        """Block until something happens; then every available ack as (c, "ack", (slot, digest)), followed by
        (c, "exit", None) for each consumer whose process is gone (its acks are always reported before its exit)."""
        live = self.live()
        objs = [self.acks[c][0] for c in live] + [self.procs[c].sentinel for c in live]
        if not objs:
            return []
        left = self.deadline - time.monotonic()
        ready = mpc.wait(objs, timeout=max(left, 0))
        if not ready and left <= 0:
            raise TimeoutError("producer waited too long for acks: is a dead consumer still counted as pending?")
        events = []
        for c in live:
            while self.acks[c][0].poll():
                events.append((c, "ack", self.acks[c][0].recv()))
        for c in live:
            if self.procs[c].sentinel in ready:
                events.append((c, "exit", None))
        return events

    def _settle(self, slots) -> None:
        """Put every slot in `slots` whose pending set is empty back into self.free (each slot at most once)."""
        for s in slots:
            if not self.pending[s] and s not in self.free:
                self.free.append(s)

    def _join_consumers(self) -> None:
        for proc in self.procs:
            proc.join(max(self.deadline - time.monotonic(), 0.1))
            if proc.exitcode is None:
                proc.kill()
                proc.join()

    def _release_ring(self) -> None:
        """Drop the producer's references to the ring (the slots are gone from self afterwards)."""
        self.slots = None
        if not all(ref.expired() for ref in self._refs):
            gc.collect()  # slow (~0.4 s with torch loaded): only when reference cycles kept a slot alive
        if not all(ref.expired() for ref in self._refs):
            raise RuntimeError("a ring buffer is still referenced somewhere: it cannot be swept safely")

    @staticmethod
    def _unlink(name: str) -> None:
        """Remove /dev/shm/<name> ("torch_<pid>_<random>_<n>", as in self.names and shm_segments; no error if it is
        already gone). Only for segments nobody will release again: unlinking one whose count can still reach 0 makes
        that last release abort the process."""
        try:
            os.unlink(f"{SHM_DIR}/{name}")
        except FileNotFoundError:
            pass

    def _restore_strategy(self) -> None:
        mp.set_sharing_strategy(self._old_strategy)

    # ---- the protocol ---------------------------------------------------------------------------------------
    def _poll(self) -> None:
        """Wait for at least one event; record acks, forget consumers that are gone, free fully acked slots."""
        ### HINT: an "exit" means that consumer will never ack again: it must stop holding any slot; self._settle frees slots nobody waits on
        ### BEGIN SOLUTION
        for c, what, payload in self._events():
            if what == "ack":
                slot, digest = payload
                self.received[c].append(digest)
                self.pending[slot].discard(c)
                touched = [slot]
            else:
                self.dead.add(c)
                touched = [s for s, waiting in self.pending.items() if c in waiting]
                for s in touched:
                    self.pending[s].discard(c)
            self._settle(touched)
        ### END SOLUTION

    def send(self, values: torch.Tensor) -> None:
        """Copy `values` into a free slot and send that slot to every live consumer."""
        ### HINT: wait (self._poll) until a slot is free; the slot is busy until every receiver acks or dies
        ### BEGIN SOLUTION
        while not self.free:
            self._poll()
        slot = self.free.popleft()
        self.slots[slot].copy_(values)
        self.pending[slot] = set(self.live())
        for c in self.pending[slot]:
            self.data[c][1].send((slot, self.slots[slot]))
        self._settle([slot])  # frees it at once only if nobody alive received it
        ### END SOLUTION

    def close(self) -> None:
        """Stop every consumer, wait for the last acks, join, release the ring, sweep what dead consumers left."""
        try:
            ### HINT: order matters: nothing may be swept while a consumer can still receive or a slot is referenced; what a crash leaves behind depends on the strategy
            ### BEGIN SOLUTION
            for c in self.live():
                self.data[c][1].send(None)
            while any(self.pending.values()):
                self._poll()
            self._join_consumers()
            self._release_ring()
            if self.strategy == "file_system":
                for name in self.names:  # counts a dead consumer incremented can never reach 0
                    self._unlink(name)
            else:
                resource_sharer.stop()  # closes the fds of messages a dead consumer never picked up
            ### END SOLUTION
        finally:
            for pair in self.data + self.acks:
                for conn in pair:
                    conn.close()
            self._restore_strategy()


def kill(proc) -> None:
    """SIGKILL a consumer that is still running (a reaped pid may belong to someone else: never signal it)."""
    if proc.exitcode is None:
        os.kill(proc.pid, signal.SIGKILL)
