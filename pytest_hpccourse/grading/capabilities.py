"""Detect the capabilities a lesson can `require`, once per process.

A capability is a name from DESIGN.md's "Runtimes". Each detector is cheap and imports nothing
heavy unless that capability is actually asked for. `HPCCOURSE_CAPS_OFF=cuda,ray` pretends the
listed capabilities are missing (handy to see what a learner without them gets).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def has_cuda_gpu() -> bool:
    """True when CuPy is importable and sees at least one CUDA device."""
    if os.environ.get("HPCCOURSE_CUDA") == "cpu" or not _has_module("cupy"):
        return False
    try:
        import cupy  # type: ignore[import-not-found]

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


@functools.cache
def has_torch_cuda() -> bool:
    """True when PyTorch sees a CUDA device (imports torch only when torch is installed)."""
    if not _has_module("torch"):
        return False
    import torch

    return bool(torch.cuda.is_available())


def _has_cxx_compiler() -> bool:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return False
    try:
        subprocess.run([cxx, "--version"], capture_output=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


@functools.cache
def has_cute_dsl() -> bool:
    """True when the CuTe DSL (`nvidia-cutlass-dsl` >= 4.8.1) is installed and `cutlass.cute` imports.

    The import (about 1 s, MLIR's native libraries) happens only when a lesson asks for `cute-dsl`; its
    host-only `@cute.jit` code needs no GPU."""
    from pytest_hpccourse.runtimes.cute import oracles

    if not oracles.dsl_version_ok():
        return False
    try:
        import cutlass.cute  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        return False
    return True


def cute_include_dirs() -> tuple[str, ...]:
    """`-I` folders for compiling a host-only CuTe C++ program with g++ (CUTLASS's include folder, which
    holds `cute/layout.hpp`, first; then the CUDA headers CuTe includes). Empty when not installed.
    Flags: `pytest_hpccourse.runtimes.cute.oracles.compile_flags()`."""
    from pytest_hpccourse.runtimes.cute import oracles

    return tuple(str(d) for d in oracles.include_dirs())


def _cute_cxx() -> bool:
    return bool(cute_include_dirs()) and _has_cxx_compiler()


def _cute_gpu() -> bool:
    from pytest_hpccourse.runtimes.cute import cutecxx

    return cutecxx.gpu_available()


def has_verl() -> bool:
    """True when verl's `core_algos` imports (verl is installed `--no-deps`, so a missing or mismatched package it
    imports — transformers, omegaconf, tensordict, ... — shows only on import). Asked for only by the tests that
    compare with verl, which import it anyway (about 4 s once)."""
    if not _has_module("verl"):
        return False
    try:
        import verl.trainer.ppo.core_algos  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        return False
    return True


def has_hta() -> bool:
    """True when HolisticTraceAnalysis 0.5.0's `TraceAnalysis` imports (installed `--no-deps`: its jupyterlab
    requirement is for notebooks only; pandas, plotly, pydot, psutil and networkx come with the extra
    `diagnostics`). Module 11's timeline lesson compares its idle-time breakdown with HTA's."""
    if not _has_module("hta") or _dist_version("HolisticTraceAnalysis") != "0.5.0":
        return False
    try:
        import hta.trace_analysis  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        return False
    return True


def _cuda() -> bool:
    # CUDA C lessons run on a real GPU through CuPy, or on the CPU emulator (needs a C++ compiler).
    if os.environ.get("HPCCOURSE_CUDA") == "gpu":
        return has_cuda_gpu()
    return has_cuda_gpu() or _has_cxx_compiler()


DETECTORS: dict[str, Callable[[], bool]] = {
    "torch": lambda: _has_module("torch"),
    "numpy": lambda: _has_module("numpy"),
    "cuda": _cuda,
    "cuda-gpu": has_cuda_gpu,
    "triton": lambda: _has_module("triton") and _has_module("torch"),
    "ray": lambda: _has_module("ray") and _has_module("torch"),
    "mlir": lambda: _has_module("mlir") and _has_module("xdsl"),
    # Module 04's three oracles, detected separately (pytest_hpccourse/runtimes/cute/oracles.py): pycute (pure Python, from
    # `pip install --no-deps nvidia-cutlass==4.2.0.0`), the CuTe C++ headers of that wheel plus the CUDA
    # headers and g++, and the CuTe DSL (`nvidia-cutlass-dsl` >= 4.8.1; imported only when asked for).
    "cute": lambda: _has_module("pycute"),
    "cute-cxx": _cute_cxx,
    "cute-dsl": has_cute_dsl,
    # nvcc + an NVIDIA GPU + the CuTe headers: module 04's CuTe C++ drivers built and run as real kernels
    "cute-gpu": _cute_gpu,
    # NVIDIA's GEMM configuration selector (`nvidia-matmul-heuristics`, CPU only, predefined GPU profiles);
    # module 04's kernel-selection lesson compares the learner's choice with it.
    "matmul-heuristics": lambda: _has_module("nvMatmulHeuristics"),
    # OpenVINO's runtime (CPU plugin): module 07's custom-op lifecycle lesson runs a Python `Op` in a compiled model
    "openvino": lambda: _has_module("openvino"),
    # Megatron-core (`pip install --no-deps megatron-core==0.16.1`): module 09 compares pipeline schedule tables
    # and device-mesh rank groups with it
    "megatron-core": lambda: _has_module("megatron.core"),
    # Module 10's engines and oracles: gymnasium 1.x environments; torchrl's advantage functions (GAE, V-trace);
    # verl's `core_algos` (KL estimators, policy losses), installed `--no-deps` with the few packages it imports
    "gymnasium": lambda: _has_module("gymnasium") and _has_module("torch"),
    "torchrl": lambda: _has_module("torchrl") and _has_module("tensordict"),
    # TRL 1.16.0's source, read (not imported: trl needs datasets/accelerate) by module 10's loss oracles;
    # `pip install --no-deps trl==1.16.0`
    "trl": lambda: _has_module("trl") and _dist_version("trl") == "1.16.0",
    "verl": has_verl,
    # Module 11's timeline oracle: HolisticTraceAnalysis 0.5.0 (`pip install --no-deps HolisticTraceAnalysis==0.5.0`)
    "hta": has_hta,
}


def known() -> frozenset[str]:
    return frozenset(DETECTORS)


def _turned_off(name: str) -> bool:
    return name in {c.strip() for c in os.environ.get("HPCCOURSE_CAPS_OFF", "").split(",") if c.strip()}


@functools.cache
def available(name: str) -> bool:
    """Whether built-in capability `name` is present here. Unknown names are never available."""
    if _turned_off(name):
        return False
    detector = DETECTORS.get(name)
    return bool(detector and detector())


def missing(names: Iterable[str]) -> list[str]:
    """The built-in capabilities among `names` that this machine lacks, in the given order."""
    return [n for n in names if not available(n)]


class Capabilities:
    """The capabilities of one run: the built-in detectors and those plugins add (hook
    `pytest_hpccourse_capabilities`). A built-in detector goes through `available` (cached per process); any
    other runs at most once per instance. `HPCCOURSE_CAPS_OFF` applies to all."""

    def __init__(self, detectors: Mapping[str, Callable[[], bool]] | None = None) -> None:
        self.detectors: dict[str, Callable[[], bool]] = dict(DETECTORS if detectors is None else detectors)
        self._seen: dict[str, bool] = {}

    def known(self) -> frozenset[str]:
        return frozenset(self.detectors)

    def available(self, name: str) -> bool:
        detector = self.detectors.get(name)
        if detector is not None and detector is DETECTORS.get(name):
            return available(name)
        if name not in self._seen:
            self._seen[name] = not _turned_off(name) and bool(detector and detector())
        return self._seen[name]

    def missing(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if not self.available(n)]
