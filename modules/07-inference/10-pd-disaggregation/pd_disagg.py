"""infer-10: prefill/decode disaggregation on Ray actors.

A toy transformer whose KV cache is real data: every token at position `pos` owns one row of shape
(LAYERS, 2, HEAD_DIM) float32 (K and V of each layer), and the next token is a function of the whole
cache (an attention readout) and the last token. So the decode side cannot continue without the
prompt's KV: it either recomputes it (prefill again) or receives it.

Roles
- PrefillWorker (actor, given): runs the prompt, returns (first_token, t_first) and the KVCache as two
  separate Ray objects (num_returns=2), so the small result and the big cache travel independently.
- DecodeWorker (actor): `decode(req_id, prompt, first, kv, max_tokens)` continues from the shipped cache
  and returns the remaining max_tokens - 1 tokens with the wall-clock time each was produced.
- Router (driver): sends each request to a prefill worker, hands the KV *reference* to a decode worker
  (the KV bytes go prefill -> object store -> decode, never through the router), collects the results,
  and survives a decode worker that dies: its requests are re-sent (with their KV) to a live one.
  Dispatch does not wait: every request's prefill and decode calls are issued before any result is awaited.
  `dead` lists the decode workers found dead and none of them gets another request; `resent` lists a req_id
  per re-send; a Result's decode_attempts = how many times that request was dispatched to a decode worker.
- latency_metrics: TTFT = first token time - arrival; TPOT = mean gap between consecutive tokens after
  the first = (t_last - t_first) / (n - 1); None for a request with a single token.

Accounting (counters()): KVCache counts, per process, every time one is deserialized (LOADS / LOADED_BYTES) and every
prefill computation (PREFILLS), so a test can see where KV bytes went and who recomputed what.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

LAYERS, HEAD_DIM = 4, 8
VOCAB = 32003
KV_BYTES_PER_TOKEN = LAYERS * 2 * HEAD_DIM * 4  # K and V, float32
_FREQ = (np.arange(1, LAYERS * 2 * HEAD_DIM + 1, dtype=np.float64) * 0.013).reshape(LAYERS, 2, HEAD_DIM)



def counters() -> dict[str, int]:
    """This process's KV accounting. Kept on the sys module, so there is one dict per process however
    often Ray ships this file's code to it by value (each shipment would bring its own module globals)."""
    return sys.__dict__.setdefault("_infer10_counters", {"loads": 0, "loaded_bytes": 0, "prefills": 0})


def kv_row(token: int, pos: int) -> np.ndarray:
    """K and V of one token at one position, all layers: (LAYERS, 2, HEAD_DIM) float32."""
    return np.sin(_FREQ * (token % 997 + 1) + 0.1 * pos).astype(np.float32)


def next_token(kv: np.ndarray, last: int) -> int:
    """Attention readout over the whole cache (n, LAYERS, 2, HEAD_DIM), hashed to a token id."""
    q = np.cos(_FREQ[:, 0, :] * (last % 991 + 1))
    s = np.einsum("nld,ld->n", kv[:, :, 0, :].astype(np.float64), q)
    w = np.exp(s - s.max())
    o = np.einsum("n,nld->ld", w / w.sum(), kv[:, :, 1, :].astype(np.float64))
    return (int(abs(o.sum()) * 1e6) + last) % VOCAB


def prefill_kv(prompt: list[int]) -> np.ndarray:
    counters()["prefills"] += 1
    return np.stack([kv_row(t, p) for p, t in enumerate(prompt)])


class KVCache:
    """The cache of one request's first `len(data)` positions; deserializing one is counted."""

    def __init__(self, req_id: str, data: np.ndarray) -> None:
        self.req_id, self.data = req_id, data

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        counters()["loads"] += 1
        counters()["loaded_bytes"] += self.data.nbytes


class PrefillWorker:
    def __init__(self, prefill_s: float = 0.01) -> None:
        self.prefill_s = prefill_s
        self.sent_bytes = 0

    def prefill(self, req_id: str, prompt: list[int]) -> tuple[tuple[int, float], KVCache]:
        kv = prefill_kv(prompt)
        time.sleep(self.prefill_s)  # the compute-bound prompt pass
        first = next_token(kv, prompt[-1])
        self.sent_bytes += kv.nbytes
        return (first, time.time()), KVCache(req_id, kv)

    def stats(self) -> dict:
        return {**counters(), "sent_bytes": self.sent_bytes}


class DecodeWorker:
    def __init__(self, step_s: float = 0.004) -> None:
        self.step_s = step_s
        self.started: list[str] = []
        self.finished: list[str] = []

    def decode(self, req_id: str, prompt: list[int], first: tuple[int, float], kv: KVCache,
               max_tokens: int) -> tuple[list[int], list[float]]:
        """Tokens 2..max_tokens of the request and the time each was produced (first = (token, t))."""
        self.started.append(req_id)
        tokens: list[int] = []
        times: list[float] = []
        ### HINT: the shipped cache covers the prompt only; each generated token's row (kv_row at its position) joins the cache before the next token is computed.
        ### BEGIN SOLUTION
        cache = kv.data
        last = first[0]
        for pos in range(len(prompt), len(prompt) + max_tokens - 1):
            cache = np.concatenate([cache, kv_row(last, pos)[None]])
            last = next_token(cache, last)
            time.sleep(self.step_s)  # one memory-bound decode step
            tokens.append(last)
            times.append(time.time())
        ### END SOLUTION
        self.finished.append(req_id)
        return tokens, times

    def stats(self) -> dict:
        return {**counters(), "started": list(self.started), "finished": list(self.finished)}


def latency_metrics(arrival: float, token_times: list[float]) -> tuple[float, float | None]:
    """(TTFT, TPOT) of one request from its arrival time and the times of all its tokens, first included."""
    ### BEGIN SOLUTION
    ttft = token_times[0] - arrival
    if len(token_times) < 2:
        return ttft, None
    return ttft, (token_times[-1] - token_times[0]) / (len(token_times) - 1)
    ### END SOLUTION


@dataclass
class Request:
    req_id: str
    prompt: list[int]
    max_tokens: int


@dataclass
class Result:
    req_id: str
    tokens: list[int]
    arrival: float
    token_times: list[float]
    ttft: float = 0.0
    tpot: float | None = None
    decode_attempts: int = 1


@dataclass
class Router:
    prefill_workers: list  # Ray actor handles
    decode_workers: list
    resent: list[str] = field(default_factory=list)  # req_ids re-sent after their decode worker died
    dead: list = field(default_factory=list)

    def serve(self, requests: list[Request], timeout: float = 30.0) -> dict[str, Result]:
        """Run every request through prefill then decode; return a Result per request."""
        import ray
        from ray.exceptions import RayActorError

        deadline = time.monotonic() + timeout
        arrival = {r.req_id: time.time() for r in requests}
        results: dict[str, Result] = {}
        ### HINT: ray.wait on the pending decode refs; a RayActorError from ray.get means that worker is gone (not the request).
        ### BEGIN SOLUTION
        pending: dict = {}  # decode ref -> (request, meta ref, kv ref, worker, attempt)
        rr = 0

        def dispatch(req: Request, meta_ref, kv_ref, attempt: int) -> None:
            nonlocal rr
            live = [w for w in self.decode_workers if w not in self.dead]
            worker = live[rr % len(live)]
            rr += 1
            ref = worker.decode.remote(req.req_id, req.prompt, meta_ref, kv_ref, req.max_tokens)
            pending[ref] = (req, meta_ref, kv_ref, worker, attempt)

        for i, req in enumerate(requests):
            pw = self.prefill_workers[i % len(self.prefill_workers)]
            meta_ref, kv_ref = pw.prefill.options(num_returns=2).remote(req.req_id, req.prompt)
            dispatch(req, meta_ref, kv_ref, 1)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                raise TimeoutError(f"{len(pending)} requests unfinished")
            req, meta_ref, kv_ref, worker, attempt = pending.pop(done[0])
            try:
                tokens, times = ray.get(done[0])
            except RayActorError:
                self.dead.append(worker)
                self.resent.append(req.req_id)
                dispatch(req, meta_ref, kv_ref, attempt + 1)  # same KV ref: no second prefill
                continue
            first, t_first = ray.get(meta_ref)
            results[req.req_id] = Result(req.req_id, [first] + tokens, arrival[req.req_id],
                                         [t_first] + times, decode_attempts=attempt)
        ### END SOLUTION
        for res in results.values():
            res.ttft, res.tpot = latency_metrics(res.arrival, res.token_times)
        return results


def make_workers(n_prefill: int, n_decode: int, prefill_s: float = 0.01, step_s: float = 0.004) -> tuple[list, list]:
    """Start the actors (no CPU reservation: the toy work sleeps; threaded so stats() answers mid-decode)."""
    from pytest_hpccourse.runtimes.ray.drills import remote  # ray.remote, with this file shipped to the actors by value

    p = remote(PrefillWorker, num_cpus=0, max_concurrency=4)
    d = remote(DecodeWorker, num_cpus=0, max_concurrency=16)
    return ([p.remote(prefill_s) for _ in range(n_prefill)], [d.remote(step_s) for _ in range(n_decode)])
