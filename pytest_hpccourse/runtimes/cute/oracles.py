"""Where the CuTe oracles of module 04 live, for lesson tests that compile host-only CuTe C++ programs.

Three separate parts (each its own capability, `pytest_hpccourse/grading/capabilities.py`):
- `cute`: `pycute`, the pure-Python CuTe layout algebra shipped in the `nvidia-cutlass` wheel. Pinned to
  `CUTLASS_VERSION` and installed without that wheel's dependencies
  (`pip install --no-deps nvidia-cutlass==4.2.0.0`): pycute imports only the standard library.
- `cute-cxx`: the CuTe C++ headers from the same wheel (`cutlass_library/source/include`) plus g++. CuTe's
  headers include `<cuda_runtime_api.h>` and libcu++ (`<cuda/std/...>`) even in host-only code, so the
  CUDA headers are needed too (no nvcc, no GPU): the pip wheels `nvidia-cuda-runtime`, `nvidia-cuda-crt`
  and `nvidia-cuda-cccl` (CUDA 13, about 10 MB), a CUDA toolkit under `$CUDA_HOME`, or `/usr/local/cuda`.
- `cute-dsl`: the CuTe Python DSL (`nvidia-cutlass-dsl` >= `CUTLASS_DSL_MIN`), whose host-only
  `@cute.jit` code runs on a CPU.

Nothing here imports a CUTLASS package: the lookups read `find_spec` results and the file system only.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

CUTLASS_VERSION = "4.2.0.0"  # nvidia-cutlass: pycute and the CuTe C++ headers
CUTLASS_DSL_MIN = (4, 8, 1)  # nvidia-cutlass-dsl
CXX_STD = "-std=c++17"

# A header each include folder must provide.
_CUTE = "cute/layout.hpp"
_RUNTIME = "cuda_runtime_api.h"
_CRT = "crt/host_defines.h"  # included by cuda_runtime_api.h; a separate wheel (or nvcc's) in pip installs
_LIBCUXX = "cuda/std/utility"


def _spec_dirs(name: str) -> list[Path]:
    """The folders of package `name` (several for a namespace package), without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])]


def cutlass_include_dir() -> Path | None:
    """`cutlass_library/source/include` of the installed `nvidia-cutlass` wheel (holds `cute/` and `cutlass/`)."""
    for d in _spec_dirs("cutlass_library"):
        inc = d / "source" / "include"
        if (inc / _CUTE).is_file():
            return inc
    return None


def _cuda_header_sets() -> Iterator[list[Path]]:
    """Candidate CUDA header folder lists, most explicit first; each list comes from one installation."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            yield [Path(root) / "include", Path(root) / "include" / "cccl"]
    for nv in _spec_dirs("nvidia"):
        # CUDA 13 wheels (nvidia-cuda-runtime, -crt, -cccl) share one folder; libcu++ sits under cccl/.
        yield [nv / "cu13" / "include", nv / "cu13" / "include" / "cccl"]
        # CUDA 12 wheels: one folder per wheel; crt/ ships with nvidia-cuda-nvcc-cu12.
        yield [nv / "cuda_runtime" / "include", nv / "cuda_nvcc" / "include", nv / "cuda_cccl" / "include"]
    for root in ("/usr/local/cuda", "/opt/cuda"):
        yield [Path(root) / "include", Path(root) / "include" / "cccl"]


def _complete(dirs: list[Path]) -> list[Path] | None:
    dirs = [d for d in dirs if d.is_dir()]
    if all(any((d / h).is_file() for d in dirs) for h in (_RUNTIME, _CRT, _LIBCUXX)):
        return dirs
    return None


def cuda_include_dirs() -> list[Path] | None:
    """The CUDA header folders host-only CuTe code needs (runtime API, crt, libcu++), or None."""
    for dirs in _cuda_header_sets():
        found = _complete(dirs)
        if found:
            return found
    return None


@functools.cache
def include_dirs() -> tuple[Path, ...]:
    """The `-I` folders for a host-only CuTe program: CUTLASS's include folder first (it contains
    `cute/layout.hpp`), then the CUDA headers. Empty when either part is missing."""
    cutlass = cutlass_include_dir()
    cuda = cuda_include_dirs() if cutlass else None
    if not cutlass or not cuda:
        return ()
    return (cutlass, *cuda)


def compile_flags() -> list[str]:
    """g++ flags for a host-only CuTe program (`[]` when `include_dirs()` is empty)."""
    dirs = include_dirs()
    return [CXX_STD, *(f"-I{d}" for d in dirs)] if dirs else []


def missing_parts() -> list[str]:
    """What a learner must install for `cute-cxx`, for error messages."""
    out = []
    if cutlass_include_dir() is None:
        out.append(f"the CuTe headers (pip install --no-deps nvidia-cutlass=={CUTLASS_VERSION})")
    if cuda_include_dirs() is None:
        out.append("the CUDA headers (pip install nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl,"
                   " or a CUDA toolkit under $CUDA_HOME)")
    return out


def dsl_version_ok() -> bool:
    """Whether `nvidia-cutlass-dsl` >= CUTLASS_DSL_MIN is installed (metadata only, no import)."""
    if "cutlass" not in sys.modules and importlib.util.find_spec("cutlass") is None:
        return False
    try:
        from importlib.metadata import PackageNotFoundError, version

        v = version("nvidia-cutlass-dsl")
    except (ImportError, PackageNotFoundError):
        return False
    parts: list[int] = []
    for p in v.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit()) if p else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) >= CUTLASS_DSL_MIN
