"""platform-06: gang + topology-aware placement of GPU pods.

The cluster is a tree: block ⊃ rack ⊃ NVLink domain ("nvl") ⊃ node. `topo[i]` holds the
(block, rack, nvl) labels of node i and `free[i]` its free GPUs. A job is a gang of `n_pods`
identical pods of `gpus` GPUs each (a pod never spans nodes).

- `place_gang` is the admission step of Kueue's Topology-Aware Scheduling: a `required` level
  means every pod must land inside one domain of that level (or the job waits); a `preferred`
  level means: the lowest level, starting there and going up, at which one domain can hold the
  whole gang, and if not even one block can, spread over the cluster. Among the domains that fit
  at that level it takes the tightest one (least capacity that still fits: BestFit).
- `Coscheduler` is the Permit stage of the scheduler-plugins coscheduling plugin: pods are
  assumed onto nodes one at a time and wait at Permit until `min_member` of their PodGroup are
  assumed; then all of them are allowed to bind. A PodGroup that cannot complete is rejected
  and its assumed pods are unreserved, so a partial gang never binds.
"""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = ("block", "rack", "nvl", "node")  # from the top of the tree down
Topo = list[tuple[int, int, int]]


@dataclass(frozen=True)
class Job:
    n_pods: int
    gpus: int  # per pod
    required: str | None = None  # one of LEVELS, or None
    preferred: str | None = None  # one of LEVELS, or None (ignored when required is set)


def domain_key(topo: Topo, node: int, level: str) -> tuple:
    """The domain of `node` at `level`: labels down to that level (a node is its own domain)."""
    if level == "node":
        return (*topo[node], node)
    return topo[node][: LEVELS.index(level) + 1]


def domains(topo: Topo, nodes: list[int], level: str) -> dict[tuple, list[int]]:
    """Group `nodes` by their domain at `level`, keys in sorted order."""
    out: dict[tuple, list[int]] = {}
    for i in sorted(nodes, key=lambda i: (domain_key(topo, i, level), i)):
        out.setdefault(domain_key(topo, i, level), []).append(i)
    return out


def capacity(free: list[int], nodes: list[int], gpus: int) -> int:
    """How many pods of `gpus` GPUs the nodes can still take."""
    return sum(free[i] // gpus for i in nodes)


def fill(free: list[int], topo: Topo, nodes: list[int], level: str, n: int, gpus: int) -> list[int]:
    """Put n pods into `nodes` (one domain at `level`, or the whole "cluster"; capacity >= n): BestFit one level down —
    the tightest child that holds all of them, or else the largest children first and the
    tightest child that holds the remainder. Returns the node of each pod."""
    if level == "node":
        return [nodes[0]] * n
    child = "block" if level == "cluster" else LEVELS[LEVELS.index(level) + 1]
    kids = sorted(domains(topo, nodes, child).values(), key=lambda d: -capacity(free, d, gpus))
    out: list[int] = []
    while n:
        fit = [d for d in kids if capacity(free, d, gpus) >= n]
        if fit:
            last = min(fit, key=lambda d: capacity(free, d, gpus))
            return out + fill(free, topo, last, child, n, gpus)
        take = capacity(free, kids[0], gpus)
        out += fill(free, topo, kids.pop(0), child, take, gpus)
        n -= take
    return out


def place_gang(free: list[int], topo: Topo, job: Job) -> list[int] | None:
    """The node of each of the job's pods, or None if the gang cannot be placed as a whole
    under its required level. Does not modify `free`."""
    everything = list(range(len(free)))
    ### HINT: which levels to try, in which order; at a level, keep the domains whose capacity >= n_pods and take the smallest
    ### BEGIN SOLUTION
    if job.required is not None:
        levels: list[str | None] = [job.required]
    else:
        start = LEVELS.index(job.preferred or "node")
        levels = [*LEVELS[start::-1], None]
    for level in levels:
        if level is None:  # not even one block holds the gang: spread over the cluster
            if capacity(free, everything, job.gpus) < job.n_pods:
                return None
            return fill(free, topo, everything, "cluster", job.n_pods, job.gpus)
        fits = [d for d in domains(topo, everything, level).values()
                if capacity(free, d, job.gpus) >= job.n_pods]
        if fits:
            best = min(fits, key=lambda d: capacity(free, d, job.gpus))
            return fill(free, topo, best, level, job.n_pods, job.gpus)
    return None
    ### END SOLUTION


class Coscheduler:
    """Permit / Unreserve of the coscheduling plugin for pods assumed one at a time."""

    def __init__(self, min_member: dict[str, int]) -> None:
        self.min_member = min_member
        self.waiting: dict[str, list[str]] = {}  # pod group -> pods assumed and waiting at Permit
        self.allowed: set[str] = set()  # groups that reached min_member: later pods pass at once

    def permit(self, group: str, pod: str) -> list[str]:
        """`pod` of `group` was just assumed on a node. Returns the pods allowed to bind now
        (possibly none: the pod waits)."""
        ### HINT: count the pod itself; once a group reached its quorum its later pods need not wait
        ### BEGIN SOLUTION
        if group in self.allowed:
            return [pod]
        self.waiting.setdefault(group, []).append(pod)
        if len(self.waiting[group]) >= self.min_member[group]:
            self.allowed.add(group)
            return self.waiting.pop(group)
        return []
        ### END SOLUTION

    def reject(self, group: str) -> list[str]:
        """A pod of `group` could not be placed (or Permit timed out): returns the waiting pods
        to unreserve; their resources go back to the cluster."""
        ### BEGIN SOLUTION
        return self.waiting.pop(group, [])
        ### END SOLUTION
