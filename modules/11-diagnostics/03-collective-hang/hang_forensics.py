"""diag-03: find the rank and the collective behind a hang from per-rank flight-recorder dumps.

A dump is the dict that torch's flight recorder writes (torch._C._distributed_c10d._dump_fr_trace, unpickled):
{"version", "pg_config": {pg_name: {"name", "desc", "ranks": "[0, 1, 2]"}}, "entries": [...], ...}; each entry has
"process_group": (pg_name, desc), "collective_seq_id", "p2p_seq_id", "is_p2p", "profiling_name" ("gloo:all_reduce",
"nccl:send 0->1"), "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state", "record_id", ...
"""

import os
import pickle
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

KINDS = ("missing", "op", "size", "dtype", "state", "no_dump")


@dataclass(frozen=True)
class Verdict:
    pg: str                    # process-group name, entry["process_group"][0]
    seq: int                   # collective_seq_id of the first disagreement in that group
    collective: str            # the reference op at that seq, without the backend prefix ("all_reduce")
    kind: str                  # one of KINDS
    culprits: frozenset[int]   # global ranks blamed


def load_dumps(folder: str) -> dict[int, dict[str, Any]]:
    """Every file in `folder` whose name ends in digits, unpickled, keyed by those digits (the global rank)."""
    dumps = {}
    for name in sorted(os.listdir(folder)):
        m = re.search(r"(\d+)$", name)
        if m:
            with open(os.path.join(folder, name), "rb") as f:
                dumps[int(m.group(1))] = pickle.load(f)
    return dumps


def op_name(entry: dict[str, Any]) -> str:
    """'gloo:all_reduce' -> 'all_reduce'."""
    return entry["profiling_name"].split(":", 1)[1].split(" ")[0]


def group_members(dumps: dict[int, dict[str, Any]]) -> dict[str, list[int]]:
    """pg name -> sorted global ranks, from the pg_config of every dump."""
    members: dict[str, set[int]] = {}
    for dump in dumps.values():
        for pg, cfg in dump["pg_config"].items():
            members.setdefault(pg, set()).update(int(r) for r in re.findall(r"\d+", cfg["ranks"]))
    return {pg: sorted(ranks) for pg, ranks in members.items()}


def signature(entry: dict[str, Any]) -> tuple:
    """What must agree across the ranks of one collective, in the order the kinds are decided."""
    return (op_name(entry), repr((entry["input_sizes"], entry["output_sizes"])),
            repr((entry["input_dtypes"], entry["output_dtypes"])), entry["state"])


def diagnose_group(dumps: dict[int, dict[str, Any]], pg: str, members: list[int]) -> Verdict | None:
    """The first disagreement among the ranks of one process group, or None if its dumps agree."""
    present = [r for r in members if r in dumps]
    ### HINT: align on (pg, collective_seq_id) of collective entries only; a wrapped ring buffer starts late; majority decides
    ### BEGIN SOLUTION
    by_rank: dict[int, dict[int, dict[str, Any]]] = {}
    for r in present:
        by_rank[r] = {e["collective_seq_id"]: e for e in dumps[r]["entries"]
                      if e["process_group"][0] == pg and not e["is_p2p"]}
    held = [min(s) for s in by_rank.values() if s]
    if not held:
        return None
    start = max(held)
    last = max(max(s) for s in by_rank.values() if s)
    for seq in range(start, last + 1):
        have = [r for r in present if seq in by_rank[r]]
        if not have:
            continue
        missing = frozenset(r for r in present if seq not in by_rank[r])
        sigs = {r: signature(by_rank[r][seq]) for r in have}
        votes = Counter(sigs.values())
        best = max(votes.values())
        ref = next(sigs[r] for r in have if votes[sigs[r]] == best)
        if missing:
            return Verdict(pg, seq, ref[0], "missing", missing)
        culprits = sorted(r for r in have if sigs[r] != ref)
        if culprits:
            kind = next(k for k, a, b in zip(KINDS[1:5], ref, sigs[culprits[0]]) if a != b)
            return Verdict(pg, seq, ref[0], kind, frozenset(culprits))
    absent = frozenset(members) - frozenset(present)
    if absent:
        stuck = next(by_rank[r][last] for r in present if last in by_rank[r])
        return Verdict(pg, last, op_name(stuck), "no_dump", absent)
    return None
    ### END SOLUTION


def diagnose(dumps: dict[int, dict[str, Any]]) -> list[Verdict]:
    """One verdict per process group whose dumps disagree, sorted by pg name; [] for a clean run."""
    verdicts = []
    for pg, members in sorted(group_members(dumps).items()):
        v = diagnose_group(dumps, pg, members)
        if v is not None:
            verdicts.append(v)
    return verdicts
