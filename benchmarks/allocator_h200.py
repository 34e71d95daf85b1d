"""Record the CUDA caching allocator's ground truth on a GPU, for runtime-07's simulator tests.

    python3 benchmarks/allocator_h200.py --out DIR      # on a machine with a CUDA GPU and PyTorch

Each allocator configuration runs in a fresh process (the allocator reads PYTORCH_CUDA_ALLOC_CONF once, at
CUDA init); between traces every tensor is freed and `empty_cache()` returns every segment (checked: reserved
bytes back to 0), so each trace starts from an empty allocator. A trace only allocates through `torch.empty(n, dtype=torch.uint8, device="cuda")`, so every byte the allocator
holds is the trace's. After every step it records `torch.cuda.memory_stats()`'s current requested,
allocated, active and reserved bytes and the number of segments, and at the end the segments of
`torch.cuda.memory_snapshot()` (pool, total size, block sizes and states). The result is one JSON file,
`allocator_traces.json`, kept as a test fixture by runtime-07.

Trace steps: ["alloc", id, nbytes] | ["free", id] | ["empty_cache"].
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

KiB, MiB = 1 << 10, 1 << 20

# Single requests around every threshold of the policy (512 B rounding, 1 MiB small/large pools, 2 MiB and
# 20 MiB segments, the 10 MiB rule, 2 MiB rounding of large segments).
SINGLE_SIZES = [1, 511, 512, 513, 4 * KiB, 1 * MiB - 1, 1 * MiB, 1 * MiB + 1, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1,
                5 * MiB, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 12 * MiB, 20 * MiB, 25 * MiB, 100 * MiB + 1]


def hand_traces() -> dict[str, list]:
    t: dict[str, list] = {}
    for n in SINGLE_SIZES:
        t[f"single_{n}"] = [["alloc", 0, n]]
    # splitting and reuse in the small pool: two 512 KiB blocks out of one 2 MiB segment, free, reuse
    t["small_split_reuse"] = [["alloc", 0, 512 * KiB], ["alloc", 1, 512 * KiB], ["free", 0], ["alloc", 2, 256 * KiB],
                              ["alloc", 3, 1 * MiB], ["free", 1], ["free", 2], ["free", 3], ["alloc", 4, 1 * MiB]]
    # large pool: a 20 MiB segment split for 2 MiB requests, then a 9 MiB request fits in the remainder
    t["large_split"] = [["alloc", 0, 2 * MiB], ["alloc", 1, 3 * MiB], ["alloc", 2, 9 * MiB], ["free", 1],
                        ["alloc", 3, 3 * MiB], ["alloc", 4, 6 * MiB]]
    # >= 10 MiB requests get their own segment (rounded to 2 MiB); freed and reused by a smaller request
    t["big_own_segment"] = [["alloc", 0, 25 * MiB], ["free", 0], ["alloc", 1, 12 * MiB], ["alloc", 2, 12 * MiB],
                            ["free", 1], ["free", 2], ["empty_cache"], ["alloc", 3, 1 * MiB]]
    # fragmentation: free every other block, then ask for something larger than each hole
    frag = [["alloc", i, 4 * MiB] for i in range(10)] + [["free", i] for i in range(0, 10, 2)]
    t["fragmentation"] = frag + [["alloc", 100, 8 * MiB], ["empty_cache"], ["alloc", 101, 8 * MiB]]
    return t


def random_traces(count: int = 12, steps: int = 80) -> dict[str, list]:
    out: dict[str, list] = {}
    for seed in range(count):
        rng = random.Random(seed)
        live: list[int] = []
        trace: list = []
        next_id = 0
        for _ in range(steps):
            r = rng.random()
            if r < 0.03:
                trace.append(["empty_cache"])
            elif live and r < 0.45:
                trace.append(["free", live.pop(rng.randrange(len(live)))])
            else:
                # log-uniform sizes from 1 B to 48 MiB, some exactly on 512 B / MiB multiples
                n = int(2 ** rng.uniform(0, 25.6))
                if rng.random() < 0.2:
                    n = max(512, n // 512 * 512)
                trace.append(["alloc", next_id, n])
                live.append(next_id)
                next_id += 1
        out[f"random_{seed}"] = trace
    return out


CONFIGS = {"default": "", "max_split_32": "max_split_size_mb:32", "roundup_4": "roundup_power2_divisions:4"}


def run_one(trace: list) -> dict:
    """In this process, from an empty allocator: run `trace`, return the per-step stats and the final segments."""
    import torch

    assert torch.cuda.memory_stats().get("reserved_bytes.all.current", 0) == 0, "allocator not empty"
    held: dict[int, torch.Tensor] = {}
    rows = []
    for step in trace:
        if step[0] == "alloc":
            held[step[1]] = torch.empty(step[2], dtype=torch.uint8, device="cuda")
        elif step[0] == "free":
            del held[step[1]]
        else:
            torch.cuda.empty_cache()
        s = torch.cuda.memory_stats()
        rows.append({k: s.get(f"{k}.all.current", 0) for k in
                     ("requested_bytes", "allocated_bytes", "active_bytes", "reserved_bytes", "segment")})
    segments = [{"pool": "small" if seg["segment_type"] == "small" else "large", "total_size": seg["total_size"],
                 "blocks": [[b["size"], b["state"]] for b in seg["blocks"]]}
                for seg in sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])]
    held.clear()
    torch.cuda.empty_cache()
    return {"steps": rows, "segments": segments}


def run_config(traces: dict[str, list]) -> dict:
    return {name: {"trace": t, **run_one(t)} for name, t in traces.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one configuration in a fresh process: trace names in, JSON out
        traces = {**hand_traces(), **random_traces()}
        print(json.dumps(run_config({n: traces[n] for n in json.loads(args.child)})))
        return 0
    import torch

    traces = {**hand_traces(), **random_traces()}
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "configs": {}}
    for cname, conf in CONFIGS.items():
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        names = [n for n in traces if cname == "default" or n.startswith(("random_", "fragmentation", "large_split",
                                                                          "single_"))]
        proc = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--child", json.dumps(names)],
                              capture_output=True, text=True, env=env, check=True)
        result["configs"][cname] = {"PYTORCH_CUDA_ALLOC_CONF": conf, "traces": json.loads(proc.stdout)}
        print(cname, len(names), "traces", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "allocator_traces.json").write_text(json.dumps(result, indent=0))
    d = result["configs"]["default"]["traces"]
    for n in SINGLE_SIZES:
        s = d[f"single_{n}"]["steps"][-1]
        print(f"request {n:>10} B: allocated {s['allocated_bytes']:>10} reserved {s['reserved_bytes']:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
