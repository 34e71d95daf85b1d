"""The CPU emulator backend: build a `.cu` with the system C++ compiler against the emulation
header, run each launch in a child process, and turn what went wrong into CudaError subclasses.

Builds are cached under `$HPCCOURSE_CACHE/cuda` (default `~/.cache/hpccourse/cuda`), keyed by the
source, its local includes, the header and runtime sources, the flags and the compiler version.
Three build variants:
  fast  - plain -O1 build;
  race  - every memory access of the kernel translation unit reported to our hooks
          (-fsanitize=thread instrumentation, linked against our own __tsan_* functions):
          shared-memory races / uninitialised reads / overruns, global redzone overruns,
          conflicting non-atomic global writes, and shared-memory bank-conflict counting;
  asan  - AddressSanitizer: global, shared (poisoned arena) and local out-of-bounds accesses.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import source as src
from .args import Dims
from .errors import KIND_TO_ERROR, CudaCompileError, CudaCrashError, CudaError, CudaTimeoutError, CudaUnsupportedError

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
# a translation unit, named .hpp so that pyproject's package-data ("**/*.h", "**/*.hpp") ships it in wheels
RUNTIME_SRC = INCLUDE / "hpccourse_runtime.hpp"
TABLE_FILE = "<hpccourse-launch-table>"
VARIANTS = ("fast", "race", "asan")
CACHE_VERSION = "v1"


def cache_root() -> Path:
    env = os.environ.get("HPCCOURSE_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hpccourse"
    return base / "cuda" / CACHE_VERSION


def compiler() -> str:
    return os.environ.get("CXX", "g++")


def supported_platform() -> tuple[bool, str]:
    """(ok, why-not). Linux on x86-64 is the tested platform; Linux on arm64 uses ucontext fibers."""
    system = platform.system()
    if system == "Windows":
        return False, ("the CUDA emulator needs Linux (fibers, signals, ELF symbolisation); on Windows use WSL2, "
                       "or a machine with an NVIDIA GPU and CuPy")
    if system != "Linux":
        return False, (f"the CUDA emulator runs on Linux (x86-64 tested, arm64 with ucontext fibers); on {system} "
                       "use a Linux container (docker run -v $PWD:/w python:3.12) or a machine with an NVIDIA GPU")
    return True, ""


@functools.cache
def toolchain_id() -> str:
    try:
        out = subprocess.run([compiler(), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise CudaCompileError(f"no C++ compiler for the CUDA emulator ({compiler()}): {e}") from None
    return (out.splitlines() or ["?"])[0] + "|" + platform.machine()


def _is_clang() -> bool:
    return "clang" in toolchain_id().lower()


def _tsan_flags() -> list[str]:
    """Compile-only flags of the race build: TSan instrumentation, no function entry/exit hooks."""
    if _is_clang():
        return ["-fsanitize=thread", "-mllvm", "-tsan-instrument-func-entry-exit=0"]
    return ["-fsanitize=thread", "--param", "tsan-instrument-func-entry-exit=0"]


def _tu_flags(variant: str) -> list[str]:
    """Compile flags of the kernel translation unit only (the runtime object has our own hooks):
    - every build: -fsanitize=alignment without recovery, so a load or store through a T* at an address that is
      not a multiple of alignof(T) (a float4 that is not 16-byte aligned) calls the runtime's
      __ubsan_handle_type_mismatch_v1_abort, which reports it (`misaligned`) as a GPU faults on it;
    - every build: -ftrivial-auto-var-init=pattern, so a local the kernel reads before writing it (`float acc[4][4];`
      without `= {}`) holds 0xFE bytes (about -1.7e38 as a float) instead of the zeros of a fresh fiber stack: on a
      GPU such a register holds whatever was there, and here the mistake shows in every run, not by chance;
    - the race build: TSan instrumentation of every access, and -fno-tree-sra: without it g++ splits a float4 copied
      into a local into four 4-byte loads, and the traffic counters would see four loads where nvcc makes one
      16-byte load (LDG.128)."""
    out = ["-fsanitize=alignment", "-fno-sanitize-recover=alignment", *_pattern_init_flags()]
    if variant == "race":
        out += _tsan_flags() + ["-fno-tree-sra"]
    return out


@functools.cache
def _pattern_init_flags() -> tuple[str, ...]:
    """-ftrivial-auto-var-init=pattern where the compiler has it (GCC >= 12, Clang >= 8), else nothing: an older
    compiler still builds the kernels, with uninitialised locals left to the stack's zeros."""
    flag = "-ftrivial-auto-var-init=pattern"
    with tempfile.TemporaryDirectory(prefix="hpccuda-init-") as d:
        c = os.path.join(d, "t.cpp")
        with open(c, "w") as fh:
            fh.write("int f(int x) { int y[4]; y[x & 3] = x; return y[0]; }\n")
        try:
            r = subprocess.run([compiler(), flag, "-c", c, "-o", os.path.join(d, "t.o")], capture_output=True,
                               timeout=120)
        except (OSError, subprocess.SubprocessError):
            return ()
    return (flag,) if r.returncode == 0 else ()


@functools.cache
def _sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(INCLUDE.rglob("*")):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _hash(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


_locks: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock across processes (pytest-xdist workers) and threads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tl = _locks.setdefault(str(path), threading.Lock())
    with tl, open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@functools.cache
def _rpath_flags() -> tuple[str, ...]:
    """Run-time paths of the compiler's own libstdc++/libasan (a compiler outside /usr, e.g. /opt/gcc,
    links against libraries the dynamic loader would not find, or would find older)."""
    out = []
    for lib in ("libstdc++.so", "libasan.so"):
        try:
            r = subprocess.run([compiler(), f"-print-file-name={lib}"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        p = r.stdout.strip()
        if os.path.isabs(p) and os.path.exists(p):
            d = os.path.dirname(os.path.realpath(p))
            if not d.startswith(("/usr/", "/lib")) and f"-Wl,-rpath,{d}" not in out:
                out.append(f"-Wl,-rpath,{d}")
    return tuple(out)


@functools.cache
def asan_available() -> bool:
    """Whether this compiler can build and run an AddressSanitizer program."""
    with tempfile.TemporaryDirectory(prefix="hpccuda-asan-") as d:
        c = os.path.join(d, "t.cpp")
        with open(c, "w") as fh:
            fh.write("#include <cstdlib>\nint main() { char* p = (char*)malloc(4); p[0] = 1; free(p); return 0; }\n")
        exe = os.path.join(d, "t")
        try:
            r = subprocess.run([compiler(), "-fsanitize=address", c, "-o", exe, *_rpath_flags()], capture_output=True,
                               timeout=120)
            if r.returncode:
                return False
            return subprocess.run([exe], capture_output=True, timeout=60,
                                  env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


def _flags(variant: str) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of a variant."""
    opt = os.environ.get("HPCCOURSE_CUDA_OPT", "-O1")
    common = ["-std=gnu++17", opt, "-g", "-fno-omit-frame-pointer", "-fno-threadsafe-statics", "-fno-strict-aliasing",
              "-w", "-fdiagnostics-color=never", "-I", str(INCLUDE)]
    common += os.environ.get("HPCCOURSE_CUDA_CXXFLAGS", "").split()
    link = ["-lm", *_rpath_flags()]
    if platform.system() == "Linux":
        common.append("-fno-pie")
        link.append("-no-pie")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        common.append("-DHPC_USE_UCONTEXT=1")
    if variant == "race":
        common += ["-DHPCCOURSE_CHECKED=1"]
    elif variant == "asan":
        common += ["-DHPCCOURSE_ASAN=1", "-fsanitize=address", "-fno-common"]
        link += ["-fsanitize=address"]
    return common, link


def runtime_object(variant: str) -> Path:
    cflags, _ = _flags(variant)
    key = _hash("rt", variant, cflags, _sources_hash(), toolchain_id())
    out = cache_root() / f"rt-{variant}-{key}.o"
    if out.exists():
        return out
    with _locked(out.with_suffix(".lock")):
        if out.exists():
            return out
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        cmd = [compiler(), *cflags, "-x", "c++", "-c", str(RUNTIME_SRC), "-o", str(tmp)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise CudaCompileError("the CUDA emulator's runtime did not compile with " + compiler() + ":\n" +
                                   r.stderr[-4000:], kind="compile")
        os.replace(tmp, out)
    return out


# ----------------------------------------------------------------------------- nvcc check

def _nvcc() -> str | None:
    mode = os.environ.get("HPCCOURSE_CUDA_NVCC", "auto").lower()
    if mode in ("0", "no", "off", "false"):
        return None
    return shutil.which("nvcc")


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _nvcc_cmd(nvcc: str, path: Path, defines: dict[str, str], out: Path) -> list[str]:
    cmd = [nvcc, "-c", "-x", "cu", "-std=c++17", "-arch=sm_80", "-w", f"-I{path.parent}", str(path), "-o", str(out)]
    for k, v in defines.items():
        cmd.insert(1, f"-D{k}={v}" if v is not None else f"-D{k}")
    return cmd


def _parse_diag(log: str, path: Path) -> tuple[str | None, int | None, str]:
    """(file, line, message) of the first error in a g++ / nvcc / NVRTC log."""
    for ln in log.splitlines():
        m = re.match(r"^(.*?):(\d+):(?:\d+:)? (?:fatal )?error: (.*)$", ln) or \
            re.match(r"^(.*?)\((\d+)\): (?:catastrophic )?error: (.*)$", ln)
        if m:
            return m.group(1), int(m.group(2)), m.group(3).strip()
    return None, None, (log.strip().splitlines() or ["unknown error"])[0]


def _compile_error(log: str, path: Path, who: str, kernel_spec: str | None = None) -> CudaCompileError:
    file, line, msg = _parse_diag(log, path)
    if file and (file.startswith(str(INCLUDE)) or file == "<command-line>"):
        # an error inside the emulation header: name the learner's line that led there
        for m in re.finditer(r"^(.*?):(\d+):\d+: ", log, flags=re.M):
            if m.group(1) == str(path):
                file, line = m.group(1), int(m.group(2))
                break
    where = f"{_show(file)}:{line}: " if file and line else ""
    text = f"{where}{msg}\n(compiled by {who}; full log below)\n{_trim(log)}"
    if file == TABLE_FILE and kernel_spec:
        text = f"could not instantiate kernel `{kernel_spec}`: {msg}\n{_trim(log)}"
    return CudaCompileError(text, file=file, line=line, kind="compile", log=log)


def _trim(log: str, n: int = 6000) -> str:
    return log if len(log) <= n else log[:n] + "\n..."


def _show(path: str | None) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


# ----------------------------------------------------------------------------- building

@dataclass
class Build:
    exe: Path
    variant: str
    source: Path
    describe: dict
    table: list[str]
    kernels: dict[str, dict] = field(default_factory=dict)


def _local_include_texts(path: Path, text: str, depth: int = 0) -> list[tuple[str, str]]:
    out = []
    if depth > 4:
        return out
    for inc in src.local_includes(text):
        p = (path.parent / inc)
        if p.is_file():
            t = p.read_text(errors="replace")
            out.append((inc, t))
            out += _local_include_texts(p, t, depth + 1)
    return out


def check_supported(path: Path, text: str) -> None:
    bad = src.scan_unsupported(text)
    if bad:
        first = bad[0]
        lines = "\n".join(f"  {_show(str(path))}:{u.line}: {u.feature}: {u.text}" for u in bad)
        raise CudaUnsupportedError(
            f"{_show(str(path))}:{first.line}: {first.feature} is not supported by the CPU CUDA emulator "
            f"(it grades on machines without a GPU):\n{lines}",
            file=str(path), line=first.line, kind="unsupported")


def _table_source(table: list[str], main: bool) -> str:
    entries = ",\n".join(f'  ::hpc::make_entry("{name}", &{name})' for name in table)
    lines = [
        f'#line 1 "{TABLE_FILE}"',
        'extern "C" const ::hpc::KernelEntry* hpc_kernel_table(int* n) {',
        f"  static const ::hpc::KernelEntry t[] = {{\n{entries}{',' if entries else ''}\n"
        "  ::hpc::KernelEntry{nullptr, nullptr, nullptr, 0, nullptr}};",
        f"  *n = {len(table)};",
        "  return t;",
        "}",
        "namespace hpc {",
        "static inline int call_main(int (*f)(), int, char**) { return f(); }",
        "static inline int call_main(int (*f)(int, char**), int c, char** v) { return f(c, v); }",
        "static inline int call_main(int (*f)(int, const char**), int c, char** v) { return f(c, (const char**)v); }",
        "}",
    ]
    if main:
        lines += ['extern "C" int hpc_has_user_main = 1;',
                  'extern "C" int hpc_user_main_entry(int c, char** v) { return ::hpc::call_main(&hpc_user_main, c, v); }']
    else:
        lines += ['extern "C" int hpc_has_user_main = 0;',
                  'extern "C" int hpc_user_main_entry(int, char**) { return 2; }']
    return "\n".join(lines) + "\n"


def build(path: Path, variant: str, *, templates: tuple[str, ...] = (), defines: dict[str, str] | None = None,
          flags: tuple[str, ...] = (), nvcc_check: bool | None = None) -> Build:
    ok, why = supported_platform()
    if not ok:
        raise CudaUnsupportedError(why, kind="platform")
    if variant not in VARIANTS:
        raise ValueError(f"unknown build variant {variant!r}; choose one of {VARIANTS}")
    path = Path(path).resolve()
    text = path.read_text(errors="replace")
    check_supported(path, text)
    defines = dict(defines or {})
    kernels = src.find_kernels(text)
    table = [k.name for k in kernels if not k.is_template] + [t for t in templates if t not in {k.name for k in kernels}]
    table = list(dict.fromkeys(table))
    main = src.has_main(text)
    includes = _local_include_texts(path, text)
    cflags, lflags = _flags(variant)
    dflags = [f"-D{k}={v}" if v is not None else f"-D{k}" for k, v in sorted(defines.items())]
    key = _hash(str(path), text, includes, variant, cflags, _tu_flags(variant), lflags, dflags, list(flags), table,
                main, _sources_hash(), toolchain_id())
    bdir = cache_root() / key
    exe = bdir / "runner"
    desc_file = bdir / "describe.json"
    if not (exe.exists() and desc_file.exists()):
        with _locked(cache_root() / f"{key}.lock"):
            if not (exe.exists() and desc_file.exists()):
                _compile(path, text, includes, variant, table, main, defines, cflags, lflags, dflags, list(flags),
                         bdir, nvcc_check, templates)
    describe = json.loads(desc_file.read_text())
    b = Build(exe=exe, variant=variant, source=path, describe=describe, table=table)
    for k in describe.get("kernels", []):
        b.kernels[k["name"]] = k
    return b


def _compile(path, text, includes, variant, table, main, defines, cflags, lflags, dflags, flags, bdir: Path,
             nvcc_check, templates) -> None:
    rt = runtime_object(variant)
    bdir.mkdir(parents=True, exist_ok=True)
    tu = bdir / (path.stem + ".emu.cpp")
    rewritten = src.rewrite_for_emulator(text)
    tu.write_text(f'#line 1 "{path}"\n' + rewritten + "\n" + _table_source(table, main))
    # nvcc validates the original source concurrently (cached by content)
    nvcc = _nvcc() if nvcc_check is not False else None
    nv_proc = nv_cache = None
    if nvcc:
        nv_key = _hash("nvcc", str(path), text, includes, sorted(defines.items()), _nvcc_version(nvcc))
        nv_cache = cache_root() / f"nvcc-{nv_key}"
        if not nv_cache.with_suffix(".ok").exists() and not nv_cache.with_suffix(".err").exists():
            nv_out = bdir / "nvcc-check.o"
            nv_proc = subprocess.Popen(_nvcc_cmd(nvcc, path, defines, nv_out), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    tmp_exe = bdir / f"runner.{os.getpid()}.tmp"
    # the kernel TU alone gets the instrumentation (the runtime object provides the hooks), then one link
    cmd = [compiler(), *cflags, *_tu_flags(variant), *dflags, *flags, "-Dmain=hpc_user_main", "-include",
           "hpccourse_cuda.h", "-iquote", str(path.parent), "-I", str(path.parent), "-c", str(tu), "-o",
           str(bdir / "tu.o")]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 0:
        # a lesson's own flags (e.g. -fsanitize=float-cast-overflow) reach the link too, except in the race build
        extra = flags if variant != "race" else []
        r = subprocess.run([compiler(), *extra, str(bdir / "tu.o"), str(rt), "-o", str(tmp_exe), *lflags],
                           capture_output=True, text=True)
    compile_s = time.perf_counter() - t0
    nv_log = None
    if nv_proc is not None:
        try:
            nv_log, _ = nv_proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            nv_proc.kill()
            nv_log = None
        if nv_log is not None:
            (nv_cache.with_suffix(".ok" if nv_proc.returncode == 0 else ".err")).write_text(nv_log)
    if nvcc and nv_cache is not None and nv_cache.with_suffix(".err").exists():
        log = nv_cache.with_suffix(".err").read_text()
        raise _compile_error(log, path, "nvcc -c (the real CUDA compiler)")
    if r.returncode != 0:
        err = _compile_error(r.stderr, path, f"{compiler()} with the CUDA emulation header",
                             kernel_spec=", ".join(templates) if templates else None)
        raise err
    (bdir / "build.log").write_text(f"{' '.join(cmd)}\n{r.stderr}\ncompile_seconds={compile_s:.3f}\n")
    d = subprocess.run([str(tmp_exe), "--describe"], capture_output=True, text=True, timeout=60)
    if d.returncode != 0:
        raise CudaCompileError(f"the emulator build of {_show(str(path))} does not start:\n{d.stderr[-3000:]}")
    os.replace(tmp_exe, bdir / "runner")
    (bdir / "describe.json").write_text(d.stdout)


# ----------------------------------------------------------------------------- running

def _shm_dir() -> str | None:
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


@dataclass
class BufArg:
    name: str
    array: object          # contiguous numpy array (what we write and read back)
    const: bool
    elem: int


@dataclass
class ValArg:
    data: bytes


@dataclass
class NullArg:
    pass


def _env(variant: str, timeout: float, result: Path) -> dict:
    env = dict(os.environ)
    env["HPCCOURSE_CUDA_RESULT"] = str(result)
    env["HPCCOURSE_CUDA_TIMEOUT"] = str(max(1, int(round(timeout))))
    if variant != "asan":
        env.setdefault("HPCCOURSE_CUDA_MEM_MB", os.environ.get("HPCCOURSE_CUDA_MEM_MB", "4096"))
    else:
        env["ASAN_OPTIONS"] = ("detect_leaks=0:halt_on_error=1:abort_on_error=0:symbolize=0:handle_segv=0:"
                               "handle_sigbus=0:handle_sigfpe=0:handle_abort=0:allow_user_segv_handler=1:"
                               "detect_stack_use_after_return=0:exitcode=6:print_summary=0:"
                               "detect_container_overflow=0")
    return env


def run_launch(b: Build, kernel: str, grid: Dims, block: Dims, smem: int, args: list, *, order: str = "fwd", seed: int = 0,
               banks: bool = False, timeout: float = 20.0) -> dict:
    """Run one launch; array arguments are written back in place. Returns the result's stats."""
    tmp = tempfile.mkdtemp(prefix="hpccuda-", dir=_shm_dir())
    try:
        lines = [f"kernel {kernel}", "grid {} {} {}".format(*map(int, grid)), "block {} {} {}".format(*map(int, block)), f"smem {int(smem)}",
                 f"order {order}", f"seed {int(seed)}", f"banks {1 if banks else 0}"]
        off = 0
        spans = []
        with open(os.path.join(tmp, "data.bin"), "wb") as fh:
            for a in args:
                if isinstance(a, BufArg):
                    mv = memoryview(a.array).cast("B")
                    pad = (-off) % 64
                    fh.write(b"\0" * pad)
                    off += pad
                    fh.write(mv)
                    spans.append((a, off, mv.nbytes))
                    lines.append(f"ptr {off} {mv.nbytes} {1 if a.const else 0} {max(1, a.elem)} {a.name or '?'}")
                    off += mv.nbytes
                elif isinstance(a, NullArg):
                    lines.append("null")
                else:
                    lines.append(f"val {len(a.data)} {a.data.hex() or '00'}")
        with open(os.path.join(tmp, "launch.txt"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
        result_path = Path(tmp) / "result.json"
        res = _run_child(b, [str(b.exe), "--launch", tmp], result_path, timeout, kernel)
        with open(os.path.join(tmp, "data.bin"), "rb") as fh:
            for a, o, n in spans:
                if a.const or n == 0:
                    continue
                fh.seek(o)
                fh.readinto(memoryview(a.array).cast("B"))
        return _stats(b, res.get("stats", {}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_main(b: Build, argv: list[str], timeout: float = 20.0) -> tuple[int, str, str]:
    tmp = tempfile.mkdtemp(prefix="hpccuda-", dir=_shm_dir())
    try:
        result_path = Path(tmp) / "result.json"
        proc = _spawn(b, [str(b.exe), "--main", *map(str, argv)], result_path, timeout)
        res = _read_result(result_path)
        if res is not None and not res.get("ok", False) or res is None and proc.returncode < 0:
            raise _error_from(b, res, proc, None)
        return proc.returncode, proc.stdout, proc.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _spawn(b: Build, cmd: list[str], result_path: Path, timeout: float) -> subprocess.CompletedProcess:
    env = _env(b.variant, timeout, result_path)
    try:
        return subprocess.run(cmd, capture_output=True, env=env, timeout=timeout + 15, errors="replace", text=True)
    except subprocess.TimeoutExpired as e:
        raise CudaTimeoutError(f"the kernel process did not finish within {timeout + 15:.0f} s and was killed",
                               kind="timeout", log=str(e.stderr or "")) from None


def _read_result(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _run_child(b: Build, cmd: list[str], result_path: Path, timeout: float, kernel: str) -> dict:
    proc = _spawn(b, cmd, result_path, timeout)
    if proc.stdout:
        sys.stdout.write(proc.stdout[:1_000_000])
    res = _read_result(result_path)
    if proc.returncode == 0 and res is not None and res.get("ok"):
        return res
    raise _error_from(b, res, proc, kernel)


# ----------------------------------------------------------------------------- errors

@functools.lru_cache(maxsize=64)
def _elf_base(exe: str) -> int:
    """The lowest PT_LOAD virtual address (0 for PIE, 0x400000 for a classic x86-64 executable)."""
    import struct
    try:
        with open(exe, "rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return 0
            phoff, = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
        base = None
        for i in range(phnum):
            p_type, = struct.unpack_from("<I", table, i * phentsize)
            if p_type == 1:
                vaddr, = struct.unpack_from("<Q", table, i * phentsize + 16)
                base = vaddr if base is None else min(base, vaddr)
        return base or 0
    except (OSError, struct.error):
        return 0


@functools.lru_cache(maxsize=64)
def _tu_source(tu: str) -> str:
    """The learner's file of a rewritten translation unit (its first line is `#line 1 "<path>"`). g++ names the
    TU itself, with the learner's line numbers, in the line table of the code it adds for -fsanitize checks."""
    try:
        with open(tu, encoding="utf-8", errors="replace") as fh:
            m = re.match(r'#line 1 "(.*)"\s*$', fh.readline())
        return m.group(1) if m else tu
    except OSError:
        return tu


def symbolize(exe: Path, pcs: list[int], *, return_address: list[bool]) -> dict[int, tuple[str, str | None, int | None]]:
    """{pc: (function, file, line)} for offsets from the executable's start (first learner frame)."""
    seen: dict[int, bool] = {}
    for p, ra in zip(pcs, return_address):
        if p and p not in seen:
            seen[p] = ra
    pcs = list(seen)
    if not pcs:
        return {}
    base = _elf_base(str(exe))
    adj = {p: base + (p - 1 if seen[p] else p) for p in pcs}
    try:
        out = subprocess.run(["addr2line", "-e", str(exe), "-f", "-C", "-i", "-a", *[hex(adj[p]) for p in pcs]],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    res: dict[int, tuple[str, str | None, int | None]] = {}
    blocks: list[list[str]] = []
    for ln in out.splitlines():
        if ln.startswith("0x"):
            blocks.append([])
        elif blocks:
            blocks[-1].append(ln)
    inc = str(INCLUDE)
    tu_dir = str(Path(exe).parent) + os.sep
    for p, lines in zip(pcs, blocks):
        frames = [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]
        for j, (fn, loc) in enumerate(frames):
            m = re.match(r"^(.*\.emu\.cpp):(\d+)", loc)
            if m and m.group(1).startswith(tu_dir):
                frames[j] = (fn, f"{_tu_source(m.group(1))}:{m.group(2)}")
        pick = None
        for fn, loc in frames:
            m = re.match(r"^(.*):(\d+)", loc)
            if not m or m.group(1) == "??" or m.group(1).startswith(inc) or m.group(1) == TABLE_FILE:
                continue
            pick = (fn, m.group(1), int(m.group(2)))
            break
        if pick is None and frames:
            fn, loc = frames[0]
            m = re.match(r"^(.*):(\d+)", loc)
            pick = (fn, m.group(1), int(m.group(2))) if m and m.group(1) != "??" else (fn, None, None)
        if pick:
            res[p] = pick
    return res


_SIGNAL_KINDS = {"segv", "fpe", "trap", "timeout", "abort"}


def _error_from(b: Build, res: dict | None, proc: subprocess.CompletedProcess, kernel: str | None) -> CudaError:
    stderr = proc.stderr or ""
    reports = (res or {}).get("reports", [])
    if not reports:
        if "AddressSanitizer" in stderr:
            reports = [{"kind": "asan", "message": "AddressSanitizer", "pc1": 0, "pc2": 0}]
        else:
            sig = -proc.returncode if proc.returncode < 0 else None
            why = f"killed by signal {sig}" if sig else f"exit status {proc.returncode}"
            if sig == 9:
                why += " (out of memory?)"
            return CudaCrashError(f"the emulated kernel {kernel or ''} crashed ({why}):\n{stderr[-3000:]}",
                                  kind="crash", kernel=kernel, log=stderr)
    pcs, ras = [], []
    for r in reports:
        for k in ("pc1", "pc2"):
            if r.get(k):
                pcs.append(r[k])
                ras.append(r["kind"] not in _SIGNAL_KINDS)
    kpc = (res or {}).get("kernel_pc") or 0
    if kpc:
        pcs.append(kpc)
        ras.append(False)
    syms = symbolize(b.exe, pcs, return_address=ras)
    kname = (res or {}).get("kernel") or (syms.get(kpc, ("?",))[0] if kpc else kernel) or "?"
    texts = []
    first_loc: tuple[str | None, int | None] = (None, None)
    for i, r in enumerate(reports):
        msg = r.get("message", "")

        def loc(pc: int, r=r) -> str:
            s = syms.get(pc)
            if r.get("file") and pc == r.get("pc1") and (not s or not s[1] or s[1].startswith(str(INCLUDE))):
                return f"{_show(r['file'])}:{r.get('line')}"   # the compiler's own location of the access
            if s and s[1]:
                return f"{_show(s[1])}:{s[2]}"
            return "an unknown place"

        if r["kind"] == "asan" and msg == "AddressSanitizer":
            msg = _asan_message(stderr, b, syms, r)
        msg = msg.replace("{1}", loc(r.get("pc1", 0))).replace("{2}", loc(r.get("pc2", 0))).replace("{k}", f"`{kname}`")
        texts.append(msg)
        if i == 0:
            s = syms.get(r.get("pc1", 0))
            if s and s[1] and not (r.get("file") and s[1].startswith(str(INCLUDE))):
                first_loc = (s[1], s[2])
            elif r.get("file"):
                first_loc = (r["file"], r.get("line") or None)
            elif r["kind"] == "asan":
                first_loc = _asan_location(stderr, b)
    first = reports[0]
    cls = KIND_TO_ERROR.get(first["kind"], CudaCrashError)
    if first["kind"] == "abort":
        m = re.search(r"^(.*?):(\d+): .*Assertion .* failed\.$", stderr, flags=re.M)
        if m:
            first_loc = (m.group(1).split(": ")[-1], int(m.group(2)))
            texts[0] = f"assertion failed at {_show(first_loc[0])}:{first_loc[1]} in kernel `{kname}`: " + \
                       stderr.strip().splitlines()[-1]
    if first_loc[0] and texts and "{" not in texts[0] and first_loc[0] not in texts[0] and first["kind"] in ("deadlock", "warp", "launch", "trap"):
        texts[0] = f"{_show(first_loc[0])}:{first_loc[1]}: {texts[0]}"
    return cls(texts[0], file=first_loc[0], line=first_loc[1], kind=first["kind"], kernel=kname,
               block=tuple(first.get("block") or ()) or None, thread=tuple(first["thread"]) if first.get("thread") else None,
               details=texts, log=stderr)


def _asan_frames(stderr: str, b: Build) -> list[int]:
    offs = []
    exe = str(b.exe)
    for m in re.finditer(r"#\d+ 0x[0-9a-f]+ \((.*?)\+0x([0-9a-f]+)\)", stderr):
        if m.group(1) == exe or m.group(1).endswith("/runner"):
            offs.append(int(m.group(2), 16))
    return offs


def _asan_location(stderr: str, b: Build) -> tuple[str | None, int | None]:
    frames = _asan_frames(stderr, b)
    syms = symbolize(b.exe, [f - _elf_base(str(b.exe)) for f in frames[:8]], return_address=[True] * len(frames[:8]))
    frames = [f - _elf_base(str(b.exe)) for f in frames]
    for f in frames[:8]:
        s = syms.get(f)
        if s and s[1]:
            return s[1], s[2]
    return None, None


def _asan_message(stderr: str, b: Build, syms, r) -> str:
    m = re.search(r"ERROR: AddressSanitizer: ([\w-]+) on address (0x[0-9a-f]+)", stderr)
    kind = m.group(1) if m else "memory error"
    acc = re.search(r"^(READ|WRITE) of size (\d+)", stderr, flags=re.M)
    where_m = re.search(r"^(0x[0-9a-f]+ is located .*)$", stderr, flags=re.M)
    file, line = _asan_location(stderr, b)
    at = f" at {_show(file)}:{line}" if file else ""
    what = f"{acc.group(1).lower()} of {acc.group(2)} bytes" if acc else "access"
    region = ""
    if kind == "use-after-poison" or (where_m and "g_arena" in where_m.group(1)):
        region = " past the end of a shared-memory variable (shared-memory overrun)"
    elif where_m:
        region = " — " + where_m.group(1)
    thread = r.get("thread")
    who = f" by thread ({thread[0]},{thread[1]},{thread[2]}) of block ({r['block'][0]},{r['block'][1]},{r['block'][2]})" \
        if thread else ""
    return f"AddressSanitizer: {kind}: out-of-bounds {what}{who} in kernel {{k}}{at}{region}"


def _stats(b: Build, stats: dict) -> dict:
    stats = dict(stats)
    if "bank_conflicts_load" in stats:
        stats["bank_conflicts"] = stats["bank_conflicts_load"] + stats["bank_conflicts_store"]
        stats["smem_accesses"] = stats["smem_load_requests"] + stats["smem_store_requests"]
        pcs = stats.pop("bank_conflict_pcs", [])
        syms = symbolize(b.exe, [p for p, _ in pcs], return_address=[True] * len(pcs))
        by_line: dict[str, int] = {}
        for p, n in pcs:
            s = syms.get(p)
            key = f"{_show(s[1])}:{s[2]}" if s and s[1] else hex(p)
            by_line[key] = by_line.get(key, 0) + n
        stats["bank_conflicts_by_line"] = by_line
    return stats
