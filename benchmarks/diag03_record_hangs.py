"""diag-03: record real flight-recorder dumps of planted collective hangs on gloo ranks (torch >= 2.13, CPU only).

    python benchmarks/diag03_record_hangs.py modules/11-diagnostics/03-collective-hang/fixtures

Each case spawns its ranks with torch.multiprocessing, TORCH_FR_BUFFER_SIZE=64 and a 2 s process-group timeout.
Every rank runs the same warm-up (collectives on the world group and on a subgroup of ranks 0 and 1), then the planted
step; a rank whose collective times out or fails catches the error; then every rank dumps its own flight-recorder buffer
with torch._C._distributed_c10d._dump_fr_trace and writes it as <out>/<case>/rank_<r>.  The ranks wait for each other
before exiting, so a waiting rank sees a timeout, not a closed connection.

One repair, and only this one: gloo in torch 2.13 records the dump's pg_config under an empty group name
({'': {'name': '', 'desc': '', 'ranks': '[...]'}}), which makes torchfrtrace fail with KeyError; the harness rewrites
pg_config from torch.distributed's own view of each group the rank belongs to (group_name, group_desc,
get_process_group_ranks).  The entries are written exactly as the flight recorder returned them.
"""

import datetime
import os
import pickle
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT_S = 2.0
CASES = {  # case: (world size, planted culprit, what it does)
    "clean": (3, None, "no hang: every rank issues the same collectives"),
    "skip": (3, 2, "rank 2 skips the 4th all_reduce of the world group and then waits outside any collective"),
    "size": (4, 1, "rank 1 all-reduces a tensor of 6 elements where the others all-reduce 5"),
    "order": (4, 3, "rank 3 issues broadcast then all_reduce where the others issue all_reduce then broadcast"),
}


def _pg_config(groups: list) -> dict:
    config = {}
    for g in groups:
        name = g.group_name
        config[name] = {"name": name, "desc": g.group_desc, "ranks": str(dist.get_process_group_ranks(g))}
    return config


def _rank(rank: int, world: int, case: str, out: str, barrier) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out}/.store_{case}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    pair = dist.new_group([0, 1], group_desc="pair")        # every rank must call new_group
    mine = [dist.group.WORLD] + ([pair] if rank < 2 else [])
    culprit = CASES[case][1]
    try:
        x = torch.arange(5, dtype=torch.float32)
        dist.all_reduce(x)                                   # world seq 1
        g = [torch.empty(3) for _ in range(world)]
        dist.all_gather(g, torch.ones(3))                    # world seq 2
        if rank < 2:
            dist.all_reduce(torch.ones(2, 2), group=pair)    # pair seq 1
        dist.broadcast(x, src=0)                             # world seq 3
        if case == "skip" and rank == culprit:
            pass                                             # skips world seq 4, then waits below
        elif case == "size":
            dist.all_reduce(torch.ones(6 if rank == culprit else 5))
        elif case == "order" and rank == culprit:
            dist.broadcast(x, src=0)
            dist.all_reduce(x)
        elif case == "order":
            dist.all_reduce(x)
            dist.broadcast(x, src=0)
        else:
            dist.all_reduce(x)                               # world seq 4
        if case == "clean":
            dist.barrier()
    except Exception as e:  # the timeout (or the peer's error) of the planted step
        print(f"[{case}] rank {rank}: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
    dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(True, False, False))
    dump["pg_config"] = _pg_config(mine)                    # see the module docstring
    with open(os.path.join(out, case, f"rank_{rank}"), "wb") as f:
        pickle.dump(dump, f)
    barrier.wait(timeout=60)
    os._exit(0)                                              # no destroy_process_group after a failed collective


def record(out: str, case: str) -> None:
    os.makedirs(os.path.join(out, case), exist_ok=True)
    world = CASES[case][0]
    barrier = mp.get_context("spawn").Barrier(world)
    mp.spawn(_rank, args=(world, case, out, barrier), nprocs=world, join=True)
    store = os.path.join(out, f".store_{case}")
    if os.path.exists(store):
        os.remove(store)


if __name__ == "__main__":
    os.environ["TORCH_FR_BUFFER_SIZE"] = "64"
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "fr_dumps")
    for case in CASES:
        t0 = time.time()
        record(out, case)
        print(f"{case}: {time.time() - t0:.1f} s", flush=True)
