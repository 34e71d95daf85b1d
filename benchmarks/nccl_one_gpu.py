"""The NCCL path of `run_ranks` on a machine with ONE GPU (issue 20's part that a single H200 allows).

    python3 benchmarks/nccl_one_gpu.py      # repository root, on a CUDA machine with Ray installed

1. `run_ranks(fn, 1, backend="nccl")`: one Ray actor with one GPU forms an NCCL group of one and runs the
   collectives the course's drills use (all_reduce, reduce_scatter_tensor, all_gather_into_tensor,
   broadcast, all_to_all_single) on CUDA tensors; each result is compared with what a group of one must
   return, and the actor reports which GPU and NCCL version it saw.
2. The fail-fast path: asking for more NCCL ranks than the cluster has GPUs raises at once.
3. A gloo drill of 2 ranks on the same machine, to show the CPU path is unaffected by the GPU.
Two GPUs are needed for a real NCCL ring; that part of issue 20 is not this script.
"""

from __future__ import annotations

import time

import torch

from pytest_hpccourse.runtimes.ray.drills import ray_session, run_ranks, shutdown


def _nccl_drill(rank: int, world_size: int) -> dict:
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(7)
    x = torch.randn(1 << 20, device=dev, generator=g)
    checks = {}
    y = x.clone()
    dist.all_reduce(y)
    checks["all_reduce"] = bool(torch.equal(y, x))
    out = torch.empty_like(x)
    dist.reduce_scatter_tensor(out, x)
    checks["reduce_scatter_tensor"] = bool(torch.equal(out, x))
    gathered = torch.full_like(x, float("nan"))
    dist.all_gather_into_tensor(gathered, x)
    checks["all_gather_into_tensor"] = bool(torch.equal(gathered, x))
    b = x.clone()
    dist.broadcast(b, src=0)
    checks["broadcast"] = bool(torch.equal(b, x))
    a2a = torch.full_like(x, float("nan"))
    dist.all_to_all_single(a2a, x)
    checks["all_to_all_single"] = bool(torch.equal(a2a, x))
    torch.cuda.synchronize()
    return {"backend": dist.get_backend(), "gpu": torch.cuda.get_device_name(dev),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "checks": checks}


def _gloo_drill(rank: int, world_size: int) -> float:
    import torch.distributed as dist

    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    return t.item()


def main() -> None:
    import ray

    session = ray_session()
    print("ray", ray.__version__, "cluster GPUs:", ray.cluster_resources().get("GPU", 0), flush=True)
    t0 = time.monotonic()
    [res] = run_ranks(_nccl_drill, 1, backend="nccl", timeout=300)
    print(f"nccl world 1: {res} ({time.monotonic() - t0:.1f} s)", flush=True)
    assert res["backend"] == "nccl" and all(res["checks"].values()), res
    gpus = int(ray.cluster_resources().get("GPU", 0))
    t0 = time.monotonic()
    try:
        run_ranks(_nccl_drill, gpus + 1, backend="nccl")
        raise AssertionError("more NCCL ranks than GPUs did not fail")
    except RuntimeError as e:
        print(f"nccl world {gpus + 1} on {gpus} GPU(s): fails at once ({time.monotonic() - t0:.2f} s): {e}")
    print("gloo world 2:", run_ranks(_gloo_drill, 2))
    del session
    shutdown()
    print("OK")


if __name__ == "__main__":
    main()
