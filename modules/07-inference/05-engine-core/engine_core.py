"""infer-05: vLLM V1's process split -- an engine core busy loop in its own process, a client and an
output processor in the caller's process, talking over ZeroMQ.

Wire protocol (the same socket pattern as vllm/v1/engine/core_client.py and core.py @ 00080ee13c):
  client -> core: the client's ROUTER binds ipc://<tmp>/input, the core's DEALER connects to it and first
                  sends READY (so the ROUTER learns its identity). Each request is the multipart message
                  [identity, kind, pickle(payload)] on the client side, [kind, pickle(payload)] on the core's:
                    ADD      (req_id, prompt: list[int], max_tokens)
                    ABORT    [req_id, ...]
                    STATS    None          -> the core answers with one ("stats", dict) message
                    SHUTDOWN None          -> the core loop returns
  core -> client: the core's PUSH connects to the client's PULL at ipc://<tmp>/output; one pickle per message:
                    ("outputs", step, [(req_id, token, finished), ...])   at most one per engine step
                    ("stats", {"num_blocks", "free_blocks", "running", "waiting", "steps"})

Core process (EngineCore): requests wait until their prompt's KV blocks are free, then run; each step
generates one token for every running request (the fake model `next_token`), grows its block list as the
sequence crosses a BLOCK_SIZE boundary, and frees the blocks of a request that reached max_tokens.
The busy loop blocks on the input socket while there is nothing to step, drains every waiting input
message before each step, and pushes each step's outputs.

Client process (EngineClient): add_request / abort / stream(req_id) / get_stats / shutdown. A background
output thread receives the core's messages and routes them (the output processor): tokens to the
request's RequestStream, stats to a queue. Outputs of a request the client aborted are dropped. If the
core process dies (even by SIGKILL, which runs no cleanup and sends no goodbye), every unfinished stream
and pending stats call gets EngineDeadError promptly, and later calls raise it.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import zmq

ADD, ABORT, STATS, SHUTDOWN, READY = b"ADD", b"ABORT", b"STATS", b"SHUTDOWN", b"READY"
BLOCK_SIZE = 4  # tokens per KV block
VOCAB = 50021


def next_token(prompt: list[int], generated: list[int]) -> int:
    """The fake model: a deterministic function of the sequence so far."""
    seq = prompt + generated
    return (seq[-1] * 31 + len(seq) * 17 + prompt[0]) % VOCAB


def blocks_for(num_tokens: int) -> int:
    return -(-num_tokens // BLOCK_SIZE)


class EngineDeadError(RuntimeError):
    """The engine core process is gone; no request in flight will ever finish."""


# ----------------------------------------------------------------------------------------------------------
# Core process
# ----------------------------------------------------------------------------------------------------------
class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free_ids = list(range(num_blocks))

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free_ids):
            raise MemoryError(f"{n} blocks asked, {len(self.free_ids)} free")
        out, self.free_ids = self.free_ids[:n], self.free_ids[n:]
        return out

    def free(self, ids: list[int]) -> None:
        self.free_ids.extend(ids)


@dataclass
class Req:
    req_id: str
    prompt: list[int]
    max_tokens: int
    generated: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)


class EngineCore:
    """Runs in the core process: scheduler + (fake) model executor + the busy loop."""

    def __init__(self, input_addr: str, output_addr: str, num_blocks: int, step_s: float) -> None:
        self.ctx = zmq.Context()
        self.input = self.ctx.socket(zmq.DEALER)
        self.input.setsockopt(zmq.IDENTITY, b"core0")
        self.input.connect(input_addr)
        self.output = self.ctx.socket(zmq.PUSH)
        self.output.connect(output_addr)
        self.input.send_multipart([READY, pickle.dumps(None)])
        self.pool = BlockPool(num_blocks)
        self.running: dict[str, Req] = {}
        self.waiting: deque[Req] = deque()
        self.step_s = step_s
        self.steps = 0

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def stats(self) -> dict[str, Any]:
        return {"num_blocks": self.pool.num_blocks, "free_blocks": len(self.pool.free_ids),
                "running": sorted(self.running), "waiting": [r.req_id for r in self.waiting],
                "steps": self.steps}

    def recv(self) -> tuple[bytes, Any]:
        kind, payload = self.input.recv_multipart()
        return kind, pickle.loads(payload)

    def send(self, msg: tuple) -> None:
        self.output.send(pickle.dumps(msg))

    def step(self) -> list[tuple[str, int, bool]]:
        """Admit waiting requests whose prompt blocks fit (FCFS), then one token for every running request."""
        while self.waiting and blocks_for(len(self.waiting[0].prompt)) <= len(self.pool.free_ids):
            req = self.waiting.popleft()
            req.blocks = self.pool.allocate(blocks_for(len(req.prompt)))
            self.running[req.req_id] = req
        outputs = []
        for req in list(self.running.values()):
            if not self.pool.free_ids and blocks_for(len(req.prompt) + len(req.generated) + 1) > len(req.blocks):
                continue  # no block for its next token this step (no preemption in this toy)
            req.generated.append(next_token(req.prompt, req.generated))
            need = blocks_for(len(req.prompt) + len(req.generated)) - len(req.blocks)
            req.blocks += self.pool.allocate(need)
            finished = len(req.generated) == req.max_tokens
            if finished:
                self.pool.free(req.blocks)
                del self.running[req.req_id]
            outputs.append((req.req_id, req.generated[-1], finished))
        self.steps += 1
        time.sleep(self.step_s)  # the "GPU" time of the step: the core sleeps, it does not spin
        return outputs

    def handle(self, kind: bytes, payload: Any) -> bool:
        """Apply one client message; False means: leave the busy loop."""
        if kind == STATS:
            self.send(("stats", self.stats()))
        elif kind == SHUTDOWN:
            return False
        ### HINT: ADD queues the request (blocks come at admission, in step); ABORT must give back every block the request holds, whether it is running or still waiting.
        ### BEGIN SOLUTION
        elif kind == ADD:
            req_id, prompt, max_tokens = payload
            self.waiting.append(Req(req_id, list(prompt), max_tokens))
        elif kind == ABORT:
            for req_id in payload:
                req = self.running.pop(req_id, None)
                if req is not None:
                    self.pool.free(req.blocks)
            self.waiting = deque(r for r in self.waiting if r.req_id not in payload)
        ### END SOLUTION
        return True

    def run_busy_loop(self) -> None:
        """Until SHUTDOWN: wait for input only while idle, apply all pending input, step, push the outputs."""
        ### HINT: zmq's Socket.poll(timeout=None) blocks until a message is there; poll(0) only looks. One "outputs" message per step.
        ### BEGIN SOLUTION
        while True:
            if not self.has_work():
                self.input.poll()  # idle: sleep in the kernel until the client sends something
            while self.input.poll(0):
                if not self.handle(*self.recv()):
                    return
            if self.has_work():
                outputs = self.step()
                self.send(("outputs", self.steps, outputs))
        ### END SOLUTION

    def close(self) -> None:
        self.input.close(linger=0)
        self.output.close(linger=1000)
        self.ctx.term()


def run_engine_core(input_addr: str, output_addr: str, num_blocks: int, step_s: float) -> None:
    """Entry point of the core process."""
    core = EngineCore(input_addr, output_addr, num_blocks, step_s)
    try:
        core.run_busy_loop()
    finally:
        core.close()


# ----------------------------------------------------------------------------------------------------------
# Client process: client + output processor
# ----------------------------------------------------------------------------------------------------------
FINISHED, ABORTED = "finished", "abort"


class RequestStream:
    """Per-request output state in the client process (vLLM: RequestState in output_processor.py)."""

    def __init__(self, req_id: str, arrivals: list[str]) -> None:
        self.req_id = req_id
        self.q: queue.Queue = queue.Queue()
        self.tokens: list[int] = []
        self.text = ""
        self.done = False  # no output may be pushed once done
        self.reason: str | None = None
        self._arrivals = arrivals

    def push(self, token: int) -> None:
        """One new token: the detokenize-like work happens here, then the reader is woken."""
        assert not self.done, f"{self.req_id}: output pushed after the stream ended"
        self.tokens.append(token)
        piece = f"<{token}>"  # stands in for incremental detokenization
        self.text += piece
        self._arrivals.append(self.req_id)
        self.q.put(token)

    def finish(self, reason: str | BaseException) -> None:
        if not self.done:
            self.done = True
            self.q.put(reason)


class EngineClient:
    def __init__(self, num_blocks: int = 64, step_s: float = 0.002, ready_timeout: float = 10.0) -> None:
        self.dir = tempfile.mkdtemp(prefix="infer05-")
        input_addr, output_addr = f"ipc://{self.dir}/input", f"ipc://{self.dir}/output"
        # fork before this process creates its zmq context: the child builds its own
        self.proc = mp.get_context("fork").Process(
            target=run_engine_core, args=(input_addr, output_addr, num_blocks, step_s), daemon=True)
        self.proc.start()
        self.ctx = zmq.Context()
        self.input = self.ctx.socket(zmq.ROUTER)
        self.input.bind(input_addr)
        self.output = self.ctx.socket(zmq.PULL)
        self.output.bind(output_addr)
        if not self.input.poll(int(ready_timeout * 1000)):
            self.shutdown()
            raise TimeoutError("engine core did not start")
        self.identity, _, _ = self.input.recv_multipart()
        self.streams: dict[str, RequestStream] = {}
        self.arrivals: list[str] = []  # request id of every token, in the order the client received them
        self.stats_q: queue.Queue = queue.Queue()
        self.lock = threading.Lock()  # guards the input socket and the streams
        self.dead = False
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self.output_loop, daemon=True, name="output-processor")
        self.thread.start()

    # -- sending ---------------------------------------------------------------------------------------
    def ensure_alive(self) -> None:
        if self.dead:
            raise EngineDeadError("engine core process died")

    def send(self, kind: bytes, payload: Any) -> None:
        self.ensure_alive()
        with self.lock:
            self.input.send_multipart([self.identity, kind, pickle.dumps(payload)])

    def add_request(self, req_id: str, prompt: list[int], max_tokens: int) -> None:
        with self.lock:
            self.streams[req_id] = RequestStream(req_id, self.arrivals)
        self.send(ADD, (req_id, list(prompt), max_tokens))

    def abort(self, req_ids: list[str]) -> None:
        """After abort returns, the streams of req_ids end with reason "abort" and receive nothing more;
        the core stops generating for them and frees their blocks."""
        ### BEGIN SOLUTION
        with self.lock:
            for req_id in req_ids:
                stream = self.streams.get(req_id)
                if stream is not None:
                    stream.finish(ABORTED)
        self.send(ABORT, list(req_ids))
        ### END SOLUTION

    def get_stats(self, timeout: float = 5.0) -> dict[str, Any]:
        self.send(STATS, None)
        try:
            got = self.stats_q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no stats from the engine core") from None
        if isinstance(got, BaseException):
            raise got
        return got

    # -- receiving: the output processor ---------------------------------------------------------------
    def stream(self, req_id: str, timeout: float = 5.0) -> Iterator[int]:
        """Yield req_id's tokens as they arrive; ends on finish/abort; raises what the output thread put."""
        s = self.streams[req_id]
        while True:
            try:
                item = s.q.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"{req_id}: no output for {timeout} s") from None
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, str):
                s.reason = item
                return
            yield item

    def fail_all(self, error: BaseException) -> None:
        """The core is gone: mark the client dead, end every open stream and a waiting get_stats with error."""
        self.dead = True
        with self.lock:
            for s in self.streams.values():
                s.finish(error)
        self.stats_q.put(error)

    def process_outputs(self, msg: tuple) -> None:
        """Route one message from the core: stats to stats_q, tokens to their streams."""
        if msg[0] == "stats":
            self.stats_q.put(msg[1])
            return
        _, _step, outputs = msg
        ### HINT: outputs of a request this client already ended (aborted) can still be in flight: the core learns of the abort later.
        ### BEGIN SOLUTION
        with self.lock:
            for req_id, token, finished in outputs:
                s = self.streams.get(req_id)
                if s is None or s.done:
                    continue
                s.push(token)
                if finished:
                    s.finish(FINISHED)
        ### END SOLUTION

    def output_loop(self) -> None:
        """The output thread: until shutdown, process the core's messages; notice promptly if the core died."""
        ### HINT: zmq.Poller can watch a plain file descriptor next to a socket; a Process has a `sentinel` fd that becomes readable when it ends.
        ### BEGIN SOLUTION
        poller = zmq.Poller()
        poller.register(self.output, zmq.POLLIN)
        poller.register(self.proc.sentinel, zmq.POLLIN)
        while not self.closing.is_set():
            events = dict(poller.poll(100))
            if self.output in events:
                self.process_outputs(pickle.loads(self.output.recv()))
            elif self.proc.sentinel in events:
                self.fail_all(EngineDeadError(f"engine core exited with code {self.proc.exitcode}"))
                return
        ### END SOLUTION

    def shutdown(self) -> None:
        """Stop the core (SHUTDOWN, then kill if it lingers), the output thread, the sockets; remove the ipc dir."""
        self.closing = getattr(self, "closing", threading.Event())
        self.closing.set()
        if self.proc.is_alive() and hasattr(self, "identity"):
            try:
                with self.lock:
                    self.input.send_multipart([self.identity, SHUTDOWN, pickle.dumps(None)], flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        self.proc.join(2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(2.0)
        if hasattr(self, "thread"):
            self.thread.join(2.0)
        self.input.close(linger=0)
        self.output.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self.dir, ignore_errors=True)

