"""CuTe C++ programs in lesson tests: build a lesson's driver with g++ (host) or nvcc (GPU), run it, return stdout.

    from pytest_hpccourse.runtimes.cute import cutecxx
    out = cutecxx.run(lesson.path("driver_host.cpp"))            # g++, host memory, no GPU needed
    if cutecxx.gpu_available():
        out = cutecxx.run(lesson.path("driver_gpu.cu"), gpu=True)  # nvcc -arch=sm_90a, a real kernel

CuTe's algorithms (`make_tiled_copy`, `partition_S`, `copy_if`, `make_tiled_mma`, `partition_C`, ...) are
`CUTE_HOST_DEVICE`, so a lesson's learner header compiles both into a host program and into a kernel. The host
build uses `pytest_hpccourse.runtimes.cute.oracles.compile_flags()` (CuTe headers of `nvidia-cutlass` plus the CUDA header
wheels) and a precompiled header of CuTe, the GPU build nvcc's own CUDA headers plus CuTe's include folder.

Builds are cached under `$HPCCOURSE_CACHE/cutecxx` (default `~/.cache/hpccourse/cutecxx`), keyed by the
content of the main file and of every C/C++ file in its folder (a lesson folder), the flags and the compiler,
so a test session compiles a driver once and `hpccourse check` compiles the reference once per machine.
A build that fails raises `CuteCompileError` with the first errors (full log in `.log`); a program that
exits non-zero, crashes or runs past `timeout` raises `CuteRunError` (`CuteTimeoutError`).
See cutecxx.md for the API, the mistake table and how host runs differ from a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import oracles as cute

CACHE_VERSION = "v1"
HOST_FLAGS = ("-O1", "-pthread", "-Wno-deprecated-declarations")  # -O1 builds faster than -O0 (less code emitted);
# -pthread (drivers may run lanes as threads) also defines _REENTRANT, so the precompiled header is built with it
GPU_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-O2", "-Wno-deprecated-declarations")
SOURCE_SUFFIXES = (".hpp", ".h", ".hh", ".cuh", ".inl", ".cpp", ".cc", ".cxx", ".cu")
MAX_ERRORS = 3  # compiler errors quoted in CuteCompileError
# What the precompiled header holds: CuTe's tensor, copy and MMA atoms (SM80) and the std headers drivers use.
PCH_HEADERS = (
    "cute/tensor.hpp", "cute/atom/copy_atom.hpp", "cute/atom/mma_atom.hpp", "cute/arch/mma_sm80.hpp",
    "cute/atom/mma_traits_sm80.hpp", "algorithm", "cmath", "condition_variable", "cstdint", "cstdio",
    "cstdlib", "cstring", "mutex", "thread", "vector",
)


class CuteError(Exception):
    """Base class of what this runtime raises about a lesson's C++ program."""


class CuteUnavailableError(CuteError):
    """The compiler or the CuTe headers (host), or nvcc or a GPU (gpu=True), are missing."""


class CuteCompileError(CuteError):
    """The program does not compile. `diagnostics`: the first errors; `log`: the file with all of them."""

    def __init__(self, source: Path, diagnostics: str, log: Path | None) -> None:
        self.source, self.diagnostics, self.log = source, diagnostics, log
        where = f" (full log: {log})" if log else ""
        super().__init__(f"{source.name} does not compile{where}:\n{diagnostics}")


class CuteRunError(CuteError):
    """The program exited non-zero or was killed by a signal (an assert, a segfault, an abort)."""

    def __init__(self, message: str, returncode: int | None, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        super().__init__(message)


class CuteTimeoutError(CuteRunError):
    """The program ran longer than `timeout` seconds (an endless loop, lanes waiting at different mma calls)."""


@dataclass
class Stats:
    """What this process compiled: builds that ran (and their seconds) and builds found in the cache."""

    compiles: int = 0
    compile_seconds: float = 0.0
    cache_hits: int = 0


STATS = Stats()
_failed: dict[str, CuteCompileError] = {}  # failed builds of this process (not cached on disk: paths change)


# ---------------------------------------------------------------------------------------------
# where things are


def cache_root() -> Path:
    env = os.environ.get("HPCCOURSE_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hpccourse"
    return base / "cutecxx" / CACHE_VERSION


def compiler() -> str:
    return os.environ.get("CXX", "g++")


def nvcc() -> str | None:
    """nvcc on PATH, or under $CUDA_HOME/bin, or /usr/local/cuda/bin."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


@functools.cache
def _tool_version(tool: str) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def host_available() -> bool:
    """g++ (or $CXX) and the CuTe + CUDA headers are here (the `cute-cxx` capability)."""
    return bool(cute.compile_flags()) and bool(_tool_version(compiler()))


@functools.cache
def gpu_arch() -> str | None:
    """`sm_XY` of GPU 0 (`sm_90a` on Hopper, whose `a` features CUTLASS uses), `$HPCCOURSE_CUTE_ARCH` if set."""
    if os.environ.get("HPCCOURSE_CUTE_ARCH"):
        return os.environ["HPCCOURSE_CUTE_ARCH"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    if not re.fullmatch(r"\d+\.\d+", first):
        return None
    cc = first.replace(".", "")
    return f"sm_{cc}a" if cc in ("90", "100") else f"sm_{cc}"


def gpu_available() -> bool:
    """nvcc, an NVIDIA GPU (nvidia-smi) and CuTe's headers are here; `HPCCOURSE_CUTE_GPU=0` says no."""
    if os.environ.get("HPCCOURSE_CUTE_GPU") == "0":
        return False
    return nvcc() is not None and gpu_arch() is not None and cute.cutlass_include_dir() is not None


# ---------------------------------------------------------------------------------------------
# building


def _sources(main: Path) -> list[Path]:
    """The main file and every C/C++ file beside it: what a lesson driver can include."""
    others = sorted(p for p in main.parent.iterdir() if p.is_file() and p.suffix in SOURCE_SUFFIXES and p != main)
    return [main, *others]


def _key(main: Path, command: list[str], tool: str) -> str:
    h = hashlib.sha256()
    for part in (CACHE_VERSION, tool, _tool_version(tool), *command):
        h.update(part.encode() + b"\0")
    for p in _sources(main):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:24]


def _define_flags(defines: Mapping[str, object] | None) -> list[str]:
    return [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in sorted((defines or {}).items())]


def _pch_dir(flags: list[str]) -> Path | None:
    """A folder holding `cutecxx_pch.hpp` and its `.gch`, built once per flags and compiler; None if disabled
    or if it cannot be built (the build then simply parses CuTe's headers itself)."""
    if os.environ.get("HPCCOURSE_CUTECXX_PCH") == "0":
        return None
    key = hashlib.sha256("\0".join([compiler(), _tool_version(compiler()), *flags, *PCH_HEADERS]).encode())
    folder = cache_root() / "pch" / key.hexdigest()[:16]
    header, gch = folder / "cutecxx_pch.hpp", folder / "cutecxx_pch.hpp.gch"
    if gch.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    header.write_text("".join(f"#include <{h}>\n" for h in PCH_HEADERS))
    tmp = folder / f"cutecxx_pch.{os.getpid()}.gch"
    try:
        proc = subprocess.run([compiler(), *flags, "-x", "c++-header", str(header), "-o", str(tmp)],
                              capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.SubprocessError):
        proc = None
    if proc is None or proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return None
    os.replace(tmp, gch)
    return folder


def _trim(log: str, lesson_dir: Path) -> str:
    """The first MAX_ERRORS errors of a g++/nvcc log, each with the lines that point into the lesson's files."""
    lines = log.splitlines()
    here = str(lesson_dir)
    blocks: list[list[str]] = []
    context: list[str] = []
    for line in lines:
        if re.search(r"(^|\W)(fatal )?error\b\s*:", line) and "warning" not in line.split("error")[0]:
            blocks.append([*context[-4:], line])
            if len(blocks) == MAX_ERRORS:
                break
            context = []
        elif here in line or line.lstrip().startswith(("required from here", "static assertion")):
            context.append(line)
    if not blocks:
        blocks = [lines[-20:]]
    shown = "\n".join(ln if len(ln) <= 400 else ln[:400] + " ..." for b in blocks for ln in b)
    return shown.replace(here + os.sep, "")


def build(main: str | Path, *, gpu: bool = False, defines: Mapping[str, object] | None = None,
          timeout: float = 900.0) -> Path:
    """Compile `main` (and the files beside it that it includes) into an executable; return its path (cached)."""
    main = Path(main).resolve()
    if gpu:
        tool = nvcc()
        arch, inc = gpu_arch(), cute.cutlass_include_dir()
        if tool is None or arch is None or inc is None:
            raise CuteUnavailableError("the GPU build needs nvcc, an NVIDIA GPU and CuTe's headers "
                                       f"(pip install --no-deps nvidia-cutlass=={cute.CUTLASS_VERSION})")
        flags = [*GPU_FLAGS, f"-arch={arch}", f"-I{inc}", f"-I{main.parent}", *_define_flags(defines)]
        pch = None
    else:
        tool = compiler()
        base = cute.compile_flags()
        if not base or not _tool_version(tool):
            missing = cute.missing_parts() or [f"a C++17 compiler ({tool})"]
            raise CuteUnavailableError("cute-cxx needs " + "; ".join(missing))
        flags = [*base, *HOST_FLAGS, f"-I{main.parent}", *_define_flags(defines)]
        pch = _pch_dir([*base, *HOST_FLAGS])
    key = _key(main, flags, tool)
    if key in _failed:
        raise _failed[key]
    out_dir = cache_root() / ("gpu" if gpu else "host") / key
    exe = out_dir / main.stem
    if exe.is_file():
        STATS.cache_hits += 1
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"{main.stem}.{os.getpid()}.tmp"
    cmd = [tool, *flags, *(["-include", str(pch / "cutecxx_pch.hpp")] if pch else []), str(main), "-o", str(tmp)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, errors="replace")
    except subprocess.TimeoutExpired as e:
        raise CuteCompileError(main, f"the compiler ran past {timeout:g} s", None) from e
    STATS.compiles += 1
    STATS.compile_seconds += time.perf_counter() - started
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        fd, log_name = tempfile.mkstemp(prefix=f"{main.stem}-", suffix=".log", dir=out_dir)
        with os.fdopen(fd, "w") as f:
            f.write(" ".join(cmd) + "\n\n" + proc.stderr)
        err = CuteCompileError(main, _trim(proc.stderr, main.parent), Path(log_name))
        _failed[key] = err
        raise err
    os.replace(tmp, exe)
    return exe


# ---------------------------------------------------------------------------------------------
# running


def execute(exe: Path, *args: str, timeout: float = 60.0) -> str:
    """Run a built program; its stdout, or CuteRunError / CuteTimeoutError."""
    try:
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise CuteTimeoutError(f"{exe.name} ran past {timeout:g} s", None, out, "") from e
    if proc.returncode != 0:
        rc = proc.returncode
        how = f"was killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else \
            f"exited with status {rc}"
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise CuteRunError(f"{exe.name} {how}" + (f":\n{tail}" if tail else ""), rc, proc.stdout, proc.stderr)
    return proc.stdout


_runs: dict[tuple[Path, tuple[str, ...]], str | CuteRunError] = {}


def run(main: str | Path, *args: str, gpu: bool = False, defines: Mapping[str, object] | None = None,
        timeout: float = 60.0) -> str:
    """Build `main` (cached) and run it with `args`; its stdout. The same build and arguments run once per
    process (drivers are deterministic), so every test of a lesson can ask for the output."""
    exe = build(main, gpu=gpu, defines=defines)
    key = (exe, tuple(args))
    if key not in _runs:
        try:
            _runs[key] = execute(exe, *args, timeout=timeout)
        except CuteRunError as e:  # a crash or a hang is remembered too: one timeout per process, not per test
            _runs[key] = e
    found = _runs[key]
    if isinstance(found, CuteRunError):
        raise found
    return found
