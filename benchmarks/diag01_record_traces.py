"""Record diag-01's traces on a GPU: four small training-like steps, each with one planted cause of GPU idle time.

    python benchmarks/diag01_record_traces.py modules/11-diagnostics/01-timeline-attribution/fixtures

Writes <out>/h200_<cause>.json.gz for cause in item_sync, tiny_loop, loader_stall, cuda_graph (the exact Chrome
trace `torch.profiler.profile(activities=[CPU, CUDA]).export_chrome_trace` writes, gzip'd) and <out>/h200_record.json
(torch / CUDA / device / date). The prefix is the GPU's short name ("h200" on an H200). Without a CUDA GPU it only
checks that the four steps run on the CPU and writes nothing (use --cpu-trace to export CPU-only traces for a look).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

WAIT, WARMUP, ACTIVE = 1, 2, 4          # profiler schedule: 4 recorded steps, as in the planted traces


def step_item_sync(dev: str):
    """6 × (matmul + add), a sum, then loss.item() in the step: cudaMemcpyAsync DtoH + cudaStreamSynchronize."""
    w = torch.randn(2048, 2048, device=dev)
    x = torch.randn(2048, 2048, device=dev)

    def step():
        h = x
        for _ in range(6):
            h = torch.mm(h, w).add_(1.0)
        return h.sum().item()            # the planted sync
    return step


def step_tiny_loop(dev: str):
    """40 in-place adds on a 1024-element tensor from a Python loop: each kernel ~2 µs, shorter than its launch."""
    t = torch.zeros(1024, device=dev)

    def step():
        for _ in range(40):
            t.add_(1.0)
    return step


class SlowLoader:
    """A data loader whose __next__ sleeps (the planted stall) and hands over a pinned batch."""

    def __init__(self, dev: str, sleep_s: float = 0.0015):
        self.batch = torch.randn(1024, 1024).pin_memory() if dev == "cuda" else torch.randn(1024, 1024)
        self.sleep_s = sleep_s

    def __iter__(self):
        return self

    def __next__(self):
        with torch.profiler.record_function("enumerate(DataLoader)#SlowLoader.__next__"):
            time.sleep(self.sleep_s)
            return self.batch


def step_loader_stall(dev: str):
    """The loader sleeps ~1.5 ms with nothing queued, then an H2D copy and 5 × (matmul + relu)."""
    loader = SlowLoader(dev)
    w = torch.randn(1024, 1024, device=dev)

    def step():
        h = next(loader).to(dev, non_blocking=True)
        for _ in range(5):
            h = torch.relu(torch.mm(h, w))
        return h
    return step


def step_cuda_graph(dev: str):
    """tiny_loop's 40 adds captured once as a CUDA graph: one cudaGraphLaunch per step."""
    t = torch.zeros(1024, device=dev)
    if dev != "cuda":
        return step_tiny_loop(dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                         # warm up on a side stream before capture
        for _ in range(3):
            t.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(40):
            t.add_(1.0)

    def step():
        g.replay()
    return step


STEPS = {"item_sync": step_item_sync, "tiny_loop": step_tiny_loop, "loader_stall": step_loader_stall,
         "cuda_graph": step_cuda_graph}


def record(name: str, dev: str, out: Path | None, prefix: str) -> None:
    step = STEPS[name](dev)
    for _ in range(5):                                   # warm-up outside the profiler (cuBLAS handles, allocator)
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with profile(activities=activities, schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            step()
            prof.step()
    if dev == "cuda":
        torch.cuda.synchronize()
    if out is None:
        print(f"{name}: ran {WAIT + WARMUP + ACTIVE} profiled steps on {dev}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        json.loads(raw.read_text())                       # it parses
        dest = out / f"{prefix}_{name}.json.gz"
        with open(raw, "rb") as src, gzip.GzipFile(dest, "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    print(f"{name}: wrote {dest}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, nargs="?", help="folder for the traces (the lesson's fixtures/)")
    ap.add_argument("--cpu-trace", action="store_true", help="without a GPU, still export CPU-only traces")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = args.out if (dev == "cuda" or args.cpu_trace) else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    prefix = "cpu"
    if dev == "cuda":
        gpu = torch.cuda.get_device_name(0)
        prefix = next((p.lower() for p in ("H200", "H100", "A100", "L40S") if p in gpu), "gpu")
    else:
        print("no CUDA GPU: running the steps on the CPU only (CUDA graph capture skipped)")
    for name in STEPS:
        record(name, dev, out, prefix)
    if out is not None:
        info = {"torch": torch.__version__, "cuda": torch.version.cuda, "date": datetime.date.today().isoformat(),
                "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
                "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE}}
        (out / f"{prefix}_record.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
