"""Tests for diag-03: the learner's verdict on real gloo flight-recorder dumps and on planted edge cases, against the
expected culprit and against torchfrtrace (torch/distributed/flight_recorder, run through its Python entry points on
the same folder). torchfrtrace blames the ranks that differ from the FIRST rank it loaded (os.walk order), so the
oracle loads the dumps lowest rank first; every case where torchfrtrace is compared keeps the lowest rank in the
majority. Verdicts are exact (ranks, seq numbers, names): no tolerance applies.
"""

import copy
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

FIXTURES = ["clean", "skip", "size", "order"]
EXPECTED = {  # case -> [(pg, seq, collective, kind, culprits)], from the planted bug in benchmarks/diag03_record_hangs.py
    "clean": [],
    "skip": [("0", 4, "all_reduce", "missing", {2})],
    "size": [("0", 4, "all_reduce", "size", {1})],
    "order": [("0", 4, "all_reduce", "op", {3})],
}


@pytest.fixture(scope="module")
def hf(lesson):
    return lesson.load("hang_forensics.py")


def as_tuples(verdicts):
    return [(v.pg, v.seq, v.collective, v.kind, set(v.culprits)) for v in verdicts]


def torchfrtrace(folder, allow_incomplete=False):
    """First failing collective per process group, as torchfrtrace's build_db reports it."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir
    from torch.distributed.flight_recorder.components.types import MatchState

    kinds = {MatchState.COLLECTIVE_TYPE_MISMATCH: "op", MatchState.SIZE_OR_SYNTAX_MISMATCH: "size",
             MatchState.COLLECTIVE_DTYPE_MISMATCH: "dtype", MatchState.COLLECTIVE_STATE_MISMATCH: "state"}
    args = JobConfig().parse_args([str(folder)] + (["--allow-incomplete-ranks"] if allow_incomplete else []))
    details, version = read_dir(args)
    details = dict(sorted(details.items(), key=lambda kv: kv[1]["rank"]))  # the lowest rank is its reference
    db = build_db(details, args, version)
    first = {}
    for c in db.collectives:
        # a missing rank comes back with pass_check=True and missing_ranks set (to_collective gets no errors)
        if (not c.pass_check or c.missing_ranks) and c.group_id not in first:
            first[c.group_id] = c
    out = []
    for pg, c in sorted(first.items()):
        name = c.collective_name.split(":", 1)[1]
        if c.missing_ranks:
            out.append((pg, c.collective_seq_id, name, "missing", set(c.missing_ranks)))
        else:
            lowest = min(c.mismatch_collectives)
            kind = kinds[c.mismatch_collectives[lowest].type_of_mismatch.state]
            out.append((pg, c.collective_seq_id, name, kind, set(c.mismatch_collectives)))
    return out


# ---- planted dumps in the flight recorder's own schema (version 2.10, as torch 2.13 writes it) ----

def entry(pg, seq, op, sizes, *, state="scheduled", dtype="Float", out_sizes=None, p2p_seq=0, is_p2p=False,
          backend="nccl"):
    return {"pg_id": int(pg), "process_group": (pg, {"0": "default_pg"}.get(pg, f"group{pg}")),
            "thread_name": "python", "thread_id": "1", "collective_seq_id": seq, "p2p_seq_id": p2p_seq,
            "profiling_name": f"{backend}:{op}", "input_sizes": sizes,
            "input_dtypes": [dtype] * len(sizes), "output_sizes": sizes if out_sizes is None else out_sizes,
            "output_dtypes": [dtype] * len(sizes if out_sizes is None else out_sizes), "state": state,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": False,
            "timeout_ms": 2000, "is_p2p": is_p2p}


def dumps_of(groups, entries_by_rank):
    """groups: {pg: [ranks]}; entries_by_rank: {rank: [entry, ...]} in issue order; record/op ids filled in."""
    dumps = {}
    for rank, entries in entries_by_rank.items():
        es = []
        for i, e in enumerate(entries):
            e = dict(e, record_id=i, op_id=i + 1, time_created_ns=10**9 + 1000 * i)
            es.append(e)
        cfg = {pg: {"name": pg, "desc": es_desc(pg), "ranks": str(ranks)} for pg, ranks in groups.items() if rank in ranks}
        dumps[rank] = {"version": "2.10", "pg_config": cfg, "pg_status": {}, "comm_lib_version": "", "entries": es}
    return dumps


def es_desc(pg):
    return {"0": "default_pg"}.get(pg, f"group{pg}")


def write(dumps, folder):
    os.makedirs(folder, exist_ok=True)
    for rank, d in dumps.items():
        with open(os.path.join(folder, f"rank_{rank}"), "wb") as f:
            pickle.dump(d, f)
    return folder


def ar(pg, seq, n, **kw):
    return entry(pg, seq, "all_reduce", [[n]], **kw)


def case_several_groups():
    """World of 4 with pair groups {0,1} and {2,3}; seq numbers count per group; the bug is in group 2 only."""
    groups = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}
    ranks = {}
    for r in range(4):
        sub = "1" if r < 2 else "2"
        es = [ar("0", 1, 8), ar(sub, 1, 3), ar(sub, 2, 3), ar("0", 2, 8)]
        es.append(ar(sub, 3, 5 if r == 3 else 4))        # rank 3: wrong size in its pair group
        es.append(ar("0", 3, 8))
        ranks[r] = es
    return groups, ranks, [("2", 3, "all_reduce", "size", {3})]


def case_p2p_entries():
    """Sends/recvs carry the collective_seq_id of the last collective: aligning them as collectives is wrong."""
    groups = {"0": [0, 1, 2]}
    ranks = {r: [ar("0", 1, 6), entry("0", 2, "broadcast", [[6]])] for r in range(3)}
    ranks[0] += [entry("0", 2, "send 0->1", [[2]], p2p_seq=1, is_p2p=True),
                 entry("0", 2, "send 0->1", [[2]], p2p_seq=2, is_p2p=True)]
    ranks[1] += [entry("0", 2, "recv 1<-0", [[2]], p2p_seq=1, is_p2p=True),
                 entry("0", 2, "recv 1<-0", [[2]], p2p_seq=2, is_p2p=True)]
    for r in (0, 1):
        ranks[r].append(ar("0", 3, 6))                   # rank 2 never issues collective 3
    return groups, ranks, [("0", 3, "all_reduce", "missing", {2})]


def case_state():
    """NCCL-style states: rank 2 never got collective 4 started while the others completed it."""
    groups = {"0": [0, 1, 2, 3]}
    ranks = {}
    for r in range(4):
        es = [ar("0", s, 16, state="completed") for s in (1, 2, 3)]
        es.append(ar("0", 4, 16, state="scheduled" if r == 2 else "completed"))
        if r != 2:
            es.append(entry("0", 5, "all_gather", [[16]], out_sizes=[[64]], state="started"))
        ranks[r] = es
    return groups, ranks, [("0", 4, "all_reduce", "state", {2})]


def case_dtype():
    groups = {"0": [0, 1, 2]}
    ranks = {r: [ar("0", 1, 4), ar("0", 2, 4, dtype="Half" if r == 1 else "Float")] for r in range(3)}
    return groups, ranks, [("0", 2, "all_reduce", "dtype", {1})]


def case_two_culprits():
    """Five ranks: rank 1 sends another size, rank 3 another op, at the same seq; kind from the lowest culprit."""
    groups = {"0": [0, 1, 2, 3, 4]}
    ranks = {}
    for r in range(5):
        last = ar("0", 2, 9 if r == 1 else 7) if r != 3 else entry("0", 2, "broadcast", [[7]])
        ranks[r] = [entry("0", 1, "all_gather", [[7]], out_sizes=[[35]]), last]
    return groups, ranks, [("0", 2, "all_reduce", "size", {1, 3})]


def case_two_groups_fail():
    """Both pair groups break, at different seqs: one verdict per group, sorted by pg name."""
    groups = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}
    ranks = {}
    for r in range(4):
        sub = "1" if r < 2 else "2"
        es = [ar("0", 1, 8), ar(sub, 1, 3)]
        if sub == "1":
            es.append(entry(sub, 2, "broadcast" if r == 1 else "all_reduce", [[3]]))
        else:
            es += [ar(sub, 2, 3), ar(sub, 3, 3)] if r == 2 else [ar(sub, 2, 3)]
        ranks[r] = es
    return groups, ranks, [("1", 2, "all_reduce", "op", {1}), ("2", 3, "all_reduce", "missing", {3})]


def case_size_before_dtype():
    """Rank 1 differs in size AND dtype: the kind is the first differing field in the order op, size, dtype, state."""
    groups = {"0": [0, 1, 2]}
    ranks = {r: [ar("0", 1, 7), ar("0", 2, 9, dtype="Half") if r == 1 else ar("0", 2, 7)] for r in range(3)}
    return groups, ranks, [("0", 2, "all_reduce", "size", {1})]


def case_missing_beats_mismatch():
    """At seq 2 rank 3 issued nothing, rank 0 a broadcast, ranks 1 and 2 an all_reduce: missing wins, and the
    collective is the majority's op, not the lowest holder's."""
    groups = {"0": [0, 1, 2, 3]}
    ranks = {r: [ar("0", 1, 8)] for r in range(4)}
    ranks[0].append(entry("0", 2, "broadcast", [[8]]))
    ranks[1].append(ar("0", 2, 8))
    ranks[2].append(ar("0", 2, 8))
    return groups, ranks, [("0", 2, "all_reduce", "missing", {3})]


def case_output_size():
    """all_gather on 4 ranks: same input [4], rank 2 gathers into 12 elements instead of 16 (output sizes count)."""
    groups = {"0": [0, 1, 2, 3]}
    ranks = {r: [ar("0", 1, 4), entry("0", 2, "all_gather", [[4]], out_sizes=[[12 if r == 2 else 16]])]
             for r in range(4)}
    return groups, ranks, [("0", 2, "all_gather", "size", {2})]


def case_member_without_entries():
    """Rank 1 has a dump and belongs to group 1 but never issued a collective there: it is missing, not absent."""
    groups = {"0": [0, 1, 2], "1": [0, 1]}
    ranks = {r: [ar("0", 1, 8)] for r in range(3)}
    ranks[0].append(ar("1", 1, 3))
    return groups, ranks, [("1", 1, "all_reduce", "missing", {1})]


def case_gap_in_window():
    """No rank holds seq 2: it is skipped, and the scan goes on to the size mismatch at seq 3."""
    groups = {"0": [0, 1, 2]}
    ranks = {r: [ar("0", 1, 6), ar("0", 3, 5 if r == 2 else 6)] for r in range(3)}
    return groups, ranks, [("0", 3, "all_reduce", "size", {2})]


def case_majority_missing():
    """Only rank 0 issued seq 2: ranks 1 and 2 lack it, and the ranks that lack a seq are blamed however many."""
    groups = {"0": [0, 1, 2]}
    ranks = {r: [ar("0", 1, 8)] for r in range(3)}
    ranks[0].append(ar("0", 2, 8))
    return dumps_of(groups, ranks), [("0", 2, "all_reduce", "missing", {1, 2})], True


def case_no_dump_empty_group():
    """Rank 2 left no dump; group 1 = {1, 2} has no entry on its only present member: no verdict for group 1."""
    groups = {"0": [0, 1, 2], "1": [1, 2]}
    dumps = dumps_of(groups, {r: [ar("0", 1, 8)] for r in range(3)})
    del dumps[2]
    return dumps, [("0", 1, "all_reduce", "no_dump", {2})], False   # torchfrtrace: "cannot decide", not compared


def case_desc_names_other_group():
    """Group 1's desc is "0", the world group's name: only process_group[0] says which group an entry is in."""
    groups = {"0": [0, 1, 2], "1": [0, 1]}

    def sub(seq):
        return dict(entry("1", seq, "broadcast", [[3]]), process_group=("1", "0"))
    ranks = {r: [ar("0", 1, 8)] + ([sub(1), sub(2)] if r < 2 else []) + [ar("0", 2, 9 if r == 2 else 8)]
             for r in range(3)}
    dumps = dumps_of(groups, ranks)
    for d in dumps.values():
        if "1" in d["pg_config"]:
            d["pg_config"]["1"]["desc"] = "0"
    return dumps, [("0", 2, "all_reduce", "size", {2})], True


EDGES = {"majority_missing": case_majority_missing, "no_dump_empty_group": case_no_dump_empty_group,
         "desc_names_other_group": case_desc_names_other_group}


RULES = {"size_before_dtype": case_size_before_dtype, "missing_beats_mismatch": case_missing_beats_mismatch,
         "output_size": case_output_size, "member_without_entries": case_member_without_entries,
         "gap_in_window": case_gap_in_window}


PLANTED = {"several_groups": case_several_groups, "p2p_entries": case_p2p_entries, "state": case_state,
           "dtype": case_dtype, "two_culprits": case_two_culprits, "two_groups_fail": case_two_groups_fail}
TORCHFRTRACE_AGREES = {"several_groups", "state", "dtype", "two_culprits", "two_groups_fail"}


# torchfrtrace takes the op of its reference rank (the lowest) as the collective's name: it names rank 0's broadcast
TORCHFRTRACE_NAMES = {"missing_beats_mismatch": "broadcast"}


@pytest.mark.points(1)
@pytest.mark.parametrize("name", sorted(EDGES))
def test_rule_edges(hf, name, tmp_path):
    """Rules 2-4 at their edges: the ranks lacking a seq are the culprits even as a majority; a group with no entry on
    any present member gives no verdict (no no_dump); entries belong to the group named by process_group[0] only."""
    dumps, want, compare = EDGES[name]()
    got = as_tuples(hf.diagnose(dumps))
    assert got == want, f"{name}: got {got}, expected {want}"
    if compare:
        assert torchfrtrace(write(dumps, tmp_path / name)) == want, "torchfrtrace disagrees with the expected verdict"


@pytest.mark.points(1)
@pytest.mark.parametrize("name", sorted(RULES))
def test_contract_rules(hf, name, tmp_path):
    """One planted case per rule of the contract: kind order, missing first, output sizes, a present member with no
    entry in the group, an empty seq inside the window."""
    groups, ranks, want = RULES[name]()
    dumps = dumps_of(groups, ranks)
    got = as_tuples(hf.diagnose(dumps))
    assert got == want, f"{name}: got {got}, expected {want}"
    theirs = [(pg, seq, TORCHFRTRACE_NAMES.get(name, op), kind, c) for pg, seq, op, kind, c in want]
    assert torchfrtrace(write(dumps, tmp_path / name)) == theirs, "torchfrtrace disagrees with the expected verdict"


@pytest.mark.points(1)
def test_missing_dump_does_not_hide_a_mismatch(hf, lesson, tmp_path):
    """Rank 3's dump is gone from the size case: the present ranks still disagree at seq 4, and that comes first."""
    dumps = hf.load_dumps(str(lesson.path("fixtures/size")))
    del dumps[3]
    want = [("0", 4, "all_reduce", "size", {1})]
    assert as_tuples(hf.diagnose(dumps)) == want
    assert torchfrtrace(write(dumps, tmp_path / "no3"), allow_incomplete=True) == want


@pytest.mark.points(1)
def test_real_dumps_unchanged(hf, lesson):
    """The clean run's rank 0 holds world seqs 1, 2, then pair seq 1, then 3, 4, 5: the entry order must survive."""
    dumps = hf.load_dumps(str(lesson.path("fixtures/clean")))
    before = copy.deepcopy(dumps)
    assert hf.diagnose(dumps) == []
    assert dumps == before, "diagnose must not modify the dumps (entry order included)"
    assert hf.diagnose(dumps) == []


@pytest.mark.points(2)
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_edge_cases(hf, name, tmp_path):
    groups, ranks, want = PLANTED[name]()
    dumps = dumps_of(groups, ranks)
    before = copy.deepcopy(dumps)
    got = as_tuples(hf.diagnose(dumps))
    assert got == want, f"{name}: got {got}, expected {want}"
    assert dumps == before, "diagnose must not modify the dumps"
    assert as_tuples(hf.diagnose(dumps)) == want, "a second call gives another answer"
    if name in TORCHFRTRACE_AGREES:
        assert torchfrtrace(write(dumps, tmp_path / name)) == want, "torchfrtrace disagrees with the expected verdict"


@pytest.mark.points(2)
@pytest.mark.parametrize("case", FIXTURES)
def test_real_gloo_dumps_match_torchfrtrace(hf, lesson, case):
    folder = lesson.path(f"fixtures/{case}")
    got = as_tuples(hf.diagnose(hf.load_dumps(str(folder))))
    assert got == EXPECTED[case], f"{case}: got {got}, the planted bug is {EXPECTED[case]}"
    assert torchfrtrace(folder) == EXPECTED[case]


@pytest.mark.points(1)
def test_majority_not_first_rank(hf, tmp_path):
    """Rank 0 is the odd one out: torchfrtrace (lowest rank as reference) would blame ranks 1-3; the majority blames 0."""
    groups = {"0": [0, 1, 2, 3]}
    ranks = {r: [ar("0", 1, 5), ar("0", 2, 6 if r == 0 else 5)] for r in range(4)}
    got = as_tuples(hf.diagnose(dumps_of(groups, ranks)))
    assert got == [("0", 2, "all_reduce", "size", {0})], got
    ranks = {r: [ar("0", 1, 5), entry("0", 2, "broadcast" if r in (0, 2) else "all_reduce", [[5]])] for r in range(4)}
    got = as_tuples(hf.diagnose(dumps_of(groups, ranks)))   # 2 vs 2: the side holding the lowest rank is the reference
    assert got == [("0", 2, "broadcast", "op", {1, 3})], got


@pytest.mark.points(1)
def test_wrapped_ring_buffer_and_missing_dump(hf, lesson, tmp_path):
    dumps = hf.load_dumps(str(lesson.path("fixtures/size")))
    dumps[0]["entries"] = dumps[0]["entries"][2:]             # the ring buffer dropped the oldest entries
    dumps[2]["entries"] = dumps[2]["entries"][3:]
    want = [("0", 4, "all_reduce", "size", {1})]
    assert as_tuples(hf.diagnose(dumps)) == want
    # torchfrtrace aligns on record_id across ranks and here reports ranks {2, 3} missing from seq 3: not compared
    dumps = hf.load_dumps(str(lesson.path("fixtures/skip")))
    del dumps[2]                                              # rank 2 died without a dump
    assert as_tuples(hf.diagnose(dumps)) == [("0", 4, "all_reduce", "no_dump", {2})]
    with pytest.raises(AssertionError, match=r"Missing dump files from ranks \{2\}"):
        torchfrtrace(write(dumps, tmp_path / "nodump"))
    dumps = hf.load_dumps(str(lesson.path("fixtures/order")))
    del dumps[3]                                              # the culprit's dump is gone: nothing left to blame but it
    assert as_tuples(hf.diagnose(dumps)) == [("0", 4, "all_reduce", "no_dump", {3})]


LIVE = textwrap.dedent('''
    import datetime, os, pickle, sys, time
    import torch, torch.distributed as dist

    rank, world, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=2))
    try:
        for step in range(3):
            dist.all_reduce(torch.ones(4))
            if not (rank == 1 and step == 2):          # rank 1 skips the gather of the last step
                dist.all_gather([torch.empty(2) for _ in range(world)], torch.ones(2))
        dist.barrier()
    except Exception:
        pass
    d = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, False, False))
    g = dist.group.WORLD
    d["pg_config"] = {g.group_name: {"name": g.group_name, "desc": g.group_desc,
                                     "ranks": str(dist.get_process_group_ranks(g))}}
    with open(os.path.join(out, f"part_{rank}"), "wb") as f:
        pickle.dump(d, f)
    os.rename(os.path.join(out, f"part_{rank}"), os.path.join(out, f"rank_{rank}"))
    deadline = time.time() + 60                        # wait for the others: a waiting rank must see its timeout,
    while time.time() < deadline and not all(         # not a closed connection
            os.path.exists(os.path.join(out, f"rank_{r}")) for r in range(world)):
        time.sleep(0.05)
    os._exit(0)                                        # no destroy_process_group after a failed collective
''')


def case_live_replica():
    """The live run's collectives, planted: the analyser must get this right before 3 ranks are started."""
    ranks = {}
    for r in range(3):
        es = []
        for step in range(3):
            es.append(ar("0", len(es) + 1, 4, backend="gloo"))
            if not (r == 1 and step == 2):
                es.append(entry("0", len(es) + 1, "all_gather", [[2]], out_sizes=[[2]] * 3, backend="gloo"))
        es.append(entry("0", len(es) + 1, "barrier", [], backend="gloo"))
        ranks[r] = es
    return {"0": [0, 1, 2]}, ranks, [("0", 6, "all_gather", "op", {1})]


@pytest.mark.points(1)
@pytest.mark.requires("torch")
@pytest.mark.timeout(120)
def test_live_gloo_hang(hf, tmp_path):
    """A fresh hang on 3 gloo ranks (2 s timeout): rank 1 skips the 6th collective (an all_gather) and runs on."""
    groups, ranks, want = case_live_replica()
    assert as_tuples(hf.diagnose(dumps_of(groups, ranks))) == want, "wrong on the planted copy of the live run"
    script = tmp_path / "hang.py"
    script.write_text(LIVE)
    out = tmp_path / "dumps"
    out.mkdir()
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="32")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "3", str(out)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for r in range(3)]
    try:
        errors = [p.communicate(timeout=100)[1] for p in procs]
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    assert all(p.returncode == 0 for p in procs), [e.decode()[-500:] for e in errors]
    os.remove(out / "store") if (out / "store").exists() else None
    got = as_tuples(hf.diagnose(hf.load_dumps(str(out))))
    assert got == want, got
    assert torchfrtrace(out) == got
