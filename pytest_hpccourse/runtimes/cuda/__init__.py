"""CUDA C kernels for lesson tests, on a GPU (CuPy/NVRTC) or on the CPU emulator (see README.md here).

    from pytest_hpccourse.runtimes import cuda

    mod = cuda.load("reduce.cu")
    mod.block_sum[grid, block, shared_bytes](x, out, n)     # numpy / torch / scalars
    mod["scale<float>"][grid, block](y, 2.0, n)             # templates by explicit name
    res = cuda.check(mod.block_sum, (grid, block, smem), (x, out, n))   # every order + race + ASan

The backend is chosen once per process: the GPU when CuPy sees a device, else the CPU emulator;
`HPCCOURSE_CUDA=cpu|gpu` forces one. README.md beside this file has the details.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import cpu, gpu
from . import source as _source
from .args import (
    CudaArgumentError,
    Dims,
    ParamInfo,
    host_buffer,
    is_cupy,
    is_torch,
    launch_config,
    merge_params,
    pack_scalar,
)
from .errors import (
    CudaCompileError,
    CudaCrashError,
    CudaDeadlockError,
    CudaError,
    CudaLaunchError,
    CudaMisalignedError,
    CudaOrderDependenceError,
    CudaOutOfBoundsError,
    CudaRaceError,
    CudaTimeoutError,
    CudaUninitializedError,
    CudaUnsupportedError,
)

__all__ = [
    "CheckResult",
    "CudaArgumentError",
    "CudaCompileError",
    "CudaCrashError",
    "CudaDeadlockError",
    "CudaError",
    "CudaLaunchError",
    "CudaMisalignedError",
    "CudaOrderDependenceError",
    "CudaOutOfBoundsError",
    "CudaRaceError",
    "CudaTimeoutError",
    "CudaUninitializedError",
    "CudaUnsupportedError",
    "Kernel",
    "MainResult",
    "Module",
    "available",
    "backend",
    "check",
    "emulator_available",
    "gmem_counters",
    "load",
]

ORDERS = ("fwd", "rev", "rand")


# ----------------------------------------------------------------------------- backend choice

@functools.cache
def emulator_available() -> bool:
    """Whether the CPU emulator can build here (a POSIX system with a C++ compiler)."""
    ok, _ = cpu.supported_platform()
    if not ok:
        return False
    try:
        cpu.toolchain_id()
    except CudaError:
        return False
    return True


@functools.cache
def backend() -> str:
    """'gpu' or 'cpu', decided once: HPCCOURSE_CUDA=cpu|gpu forces it; else the GPU when CuPy sees one."""
    forced = os.environ.get("HPCCOURSE_CUDA", "").strip().lower()
    if forced in ("cpu", "emu", "emulator"):
        return "cpu"
    if forced == "gpu":
        if not gpu.available():
            raise CudaError("HPCCOURSE_CUDA=gpu, but CuPy is not installed or sees no CUDA device", kind="platform")
        return "gpu"
    return "gpu" if gpu.available() else "cpu"


def available() -> bool:
    """Whether CUDA C kernels can run here at all (GPU or emulator)."""
    try:
        return backend() == "gpu" or emulator_available()
    except CudaError:
        return False


def _default_timeout() -> float:
    try:
        return float(os.environ.get("HPCCOURSE_CUDA_TIMEOUT", "20"))
    except ValueError:
        return 20.0


def _norm_spec(spec: str) -> str:
    s = re.sub(r"\s+", " ", spec.strip())
    s = re.sub(r"\s*([<>,])\s*", r"\1", s)
    return s.replace(",", ", ")


# ----------------------------------------------------------------------------- modules & kernels

@dataclass
class MainResult:
    returncode: int
    stdout: str
    stderr: str


class Module:
    """A loaded `.cu` file. Kernels: `mod.name` (non-template) or `mod["name<args>"]`."""

    def __init__(self, path: str | os.PathLike, *, backend: str | None = None, build: str = "fast",
                 order: str = "fwd", seed: int = 0, banks: bool = False, timeout: float | None = None,
                 defines: dict[str, Any] | None = None, flags: Sequence[str] = (), nvcc_check: bool | None = None,
                 templates: Iterable[str] = ()) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(f"no CUDA source {self.path}")
        self.text = self.path.read_text(errors="replace")
        self.backend = backend or globals()["backend"]()
        if self.backend not in ("cpu", "gpu"):
            raise ValueError("backend must be 'cpu' or 'gpu'")
        if self.backend == "cpu" and not emulator_available():
            _ok, why = cpu.supported_platform()
            raise CudaUnsupportedError(why or f"no C++ compiler ({cpu.compiler()}) for the CUDA emulator",
                                       kind="platform")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}")
        self.variant = "race" if banks and build == "fast" else build
        self.order, self.seed, self.banks = order, seed, banks
        self.timeout = timeout if timeout is not None else _default_timeout()
        self.defines = {str(k): (None if v is None else str(v)) for k, v in (defines or {}).items()}
        self.flags = tuple(flags)
        self.nvcc_check = nvcc_check
        self._src_kernels = {k.name: k for k in _source.find_kernels(self.text)}
        self._templates: list[str] = [_norm_spec(t) for t in templates]
        self._builds: dict[tuple, cpu.Build] = {}
        self._gpu: dict[tuple, gpu.GpuModule] = {}
        self.has_main = _source.has_main(self.text)
        if self.backend == "gpu":
            if not self.has_main:      # NVRTC compiles device code only: a file with main() runs via nvcc
                self._gpu_module()
        else:
            self._build(self.variant)

    # -- builds
    def _build(self, variant: str) -> cpu.Build:
        key = (variant, tuple(self._templates))
        b = self._builds.get(key)
        if b is None:
            b = cpu.build(self.path, variant, templates=tuple(self._templates), defines=self.defines,
                          flags=self.flags, nvcc_check=self.nvcc_check)
            self._builds[key] = b
        return b

    def _gpu_module(self) -> gpu.GpuModule:
        if self.has_main:
            raise CudaUnsupportedError(
                f"{self.path.name} has host code (a main()): on the GPU run it with mod.main(); NVRTC compiles "
                f"device code only, so launch its kernels from Python with backend='cpu' or move them to their "
                f"own file", kind="platform")
        key = tuple(self._templates)
        m = self._gpu.get(key)
        if m is None:
            names = [k.name for k in self._src_kernels.values() if not k.is_template] + list(self._templates)
            m = gpu.GpuModule(self.path, self.text, names, self.defines, self.flags)
            self._gpu[key] = m
        return m

    def _need(self, spec: str, variant: str | None = None) -> None:
        """Make sure the builds include `spec` (a template instantiation is added on first use)."""
        base, _ = _source.split_template_name(spec)
        k = self._src_kernels.get(base)
        if k is not None and not k.is_template and spec == base:
            return
        if spec in self._templates:
            return
        self._templates.append(spec)
        try:
            if self.backend == "gpu" and variant in (None, "gpu"):
                self._gpu_module()
            else:
                self._build(variant or self.variant)
        except CudaError:
            self._templates.remove(spec)   # a misspelt name must not poison later builds
            raise

    # -- kernels
    @property
    def kernel_names(self) -> list[str]:
        return list(self._src_kernels)

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        k = self.__dict__.get("_src_kernels", {}).get(name)
        if k is None:
            raise AttributeError(f"{self.path.name} has no __global__ function `{name}` "
                                 f"(kernels: {', '.join(self._src_kernels) or 'none'})")
        if k.is_template:
            raise AttributeError(f"`{name}` is a template kernel: use mod[\"{name}<...>\"] with its template arguments")
        return self._kernel(name)

    def _kernel(self, spec: str) -> Kernel:
        objs = self.__dict__.setdefault("_kernel_objs", {})
        if spec not in objs:
            objs[spec] = Kernel(self, spec)
        return objs[spec]

    def __getitem__(self, spec: str) -> Kernel:
        spec = _norm_spec(spec)
        base, targs = _source.split_template_name(spec)
        k = self._src_kernels.get(base)
        if k is None:
            raise KeyError(f"{self.path.name} has no __global__ function `{base}`")
        if k.is_template and not targs and all(d is None for _, _, d in k.template_params):
            raise KeyError(f"`{base}` is a template kernel: name its template arguments, e.g. mod[\"{base}<float>\"]")
        return self._kernel(spec)

    def _text_params(self, spec: str):
        base, targs = _source.split_template_name(spec)
        return self._src_kernels[base].params(targs)

    def main(self, *argv: Any, timeout: float | None = None, build: str | None = None) -> MainResult:
        """Run the file's `main()` (CPU emulator, or nvcc + the GPU); returns its exit code and output."""
        t = timeout if timeout is not None else self.timeout
        if self.backend == "gpu":
            rc, out, err = gpu.run_main(self.path, list(argv), self.defines, t)
        else:
            b = self._build(build or self.variant)
            if not b.describe.get("main"):
                raise CudaLaunchError(f"{self.path.name} defines no main()", kind="launch")
            rc, out, err = cpu.run_main(b, list(argv), t)
        return MainResult(rc, out, err)

    def __repr__(self) -> str:
        return f"<cuda.Module {self.path.name} backend={self.backend} build={self.variant}>"


class Kernel:
    """A kernel of a Module. `kernel[grid, block]` or `kernel[grid, block, shared_bytes]` gives a launcher."""

    def __init__(self, module: Module, spec: str) -> None:
        self.module = module
        self.spec = spec
        self.name, self.template_args = _source.split_template_name(spec)
        self.stats: dict = {}

    def __getitem__(self, cfg) -> _Launcher:
        if not isinstance(cfg, tuple):
            cfg = (cfg,)
        grid, block, smem = launch_config(cfg)
        return _Launcher(self, grid, block, smem)

    def launch(self, grid: Dims, block: Dims, *args: Any, smem: int = 0, build: str | None = None, order: str | None = None,
               seed: int | None = None, banks: bool | None = None, timeout: float | None = None) -> dict:
        g, b, s = launch_config((grid, block, smem))
        return self._run(g, b, s, list(args), build=build, order=order, seed=seed, banks=banks, timeout=timeout)

    def params(self, build: str | None = None) -> list[ParamInfo]:
        m = self.module
        text = m._text_params(self.spec)
        if m.backend == "gpu" and build in (None, "gpu"):
            m._need(self.spec, "gpu")
            return merge_params(text, None)
        m._need(self.spec, build or m.variant)
        b = m._build(build or m.variant)
        d = b.kernels.get(self.spec)
        return merge_params(text, d["params"] if d else None)

    def _run(self, grid, block, smem, args: list, *, build=None, order=None, seed=None, banks=None, timeout=None) -> dict:
        m = self.module
        use_gpu = m.backend == "gpu" and build in (None, "gpu")
        if use_gpu:
            params = self.params("gpu")
            _check_count(self.spec, params, args)
            self.stats = m._gpu_module().launch(self.spec, grid, block, smem, args, params)
            return self.stats
        variant = build if build not in (None, "gpu") else m.variant
        banks = m.banks if banks is None else banks
        if banks and variant == "fast":
            variant = "race"
        params = self.params(variant)
        _check_count(self.spec, params, args)
        marshalled, writebacks = [], []
        for i, (v, p) in enumerate(zip(args, params)):
            if p.is_ptr:
                if v is None:
                    marshalled.append(cpu.NullArg())
                    continue
                hb = host_buffer(v, p, i, self.spec)
                elem = p.elem_size if p.elem_size > 0 and p.elem_kind != "o" else hb.array.dtype.itemsize
                marshalled.append(cpu.BufArg(name=p.name or f"arg{i}", array=hb.array, const=p.is_const, elem=elem))
                if hb.writeback and not p.is_const:
                    writebacks.append(hb.writeback)
            else:
                marshalled.append(cpu.ValArg(pack_scalar(v, p, i, self.spec)))
        b = m._build(variant)
        self.stats = cpu.run_launch(b, self.spec, grid, block, smem, marshalled, order=order or m.order,
                                    seed=m.seed if seed is None else seed, banks=banks,
                                    timeout=timeout if timeout is not None else m.timeout)
        for wb in writebacks:
            wb()
        return self.stats

    def __repr__(self) -> str:
        return f"<cuda.Kernel {self.spec} of {self.module.path.name}>"


class _Launcher:
    def __init__(self, kernel: Kernel, grid, block, smem):
        self.kernel, self.grid, self.block, self.smem = kernel, grid, block, smem

    def __call__(self, *args: Any) -> None:
        self.kernel._run(self.grid, self.block, self.smem, list(args))


def _check_count(spec: str, params: list, args: list) -> None:
    if len(params) != len(args):
        sig = ", ".join(p.describe() for p in params)
        raise CudaArgumentError(f"kernel `{spec}({sig})` takes {len(params)} arguments, got {len(args)}")


def load(path: str | os.PathLike, **options: Any) -> Module:
    """Load a `.cu` file. Options: backend ('cpu'|'gpu'), build ('fast'|'race'|'asan'), order
    ('fwd'|'rev'|'rand'), seed, banks (count shared-memory bank conflicts), timeout (s per launch),
    defines ({'BLOCK': 256}), flags (extra compiler flags), nvcc_check, templates (names to build now)."""
    return Module(path, **options)


# ----------------------------------------------------------------------------- check

@dataclass
class CheckResult:
    outputs: dict[int, np.ndarray]          # argument index -> result of the first variant
    variants: list[str]
    stats: dict = field(default_factory=dict)

    @property
    def bank_conflicts(self) -> int | None:
        return self.stats.get("bank_conflicts")

    @property
    def smem_accesses(self) -> int | None:
        return self.stats.get("smem_accesses")

    @property
    def gmem_atomics(self) -> int | None:
        """Atomic operations on global memory (every thread-level atomic*, CAS included), race build only."""
        return self.stats.get("gmem_atomics")

    @property
    def smem_atomics(self) -> int | None:
        """Atomic operations on shared memory, race build only."""
        return self.stats.get("smem_atomics")

    @property
    def gmem_loads(self) -> int | None:
        """Thread-level loads from global memory (a float4 load is one load of 16 bytes), race build only."""
        return self.stats.get("gmem_loads")

    def gmem(self, name: str) -> dict:
        """Counters of one array argument, by its parameter name: `bytes` (its size), `loads`, `load_bytes`,
        `bytes_read` (distinct bytes read at least once), `max_reads_per_byte` (saturates at 255), `stores`,
        `store_bytes`, `atomics`. Race build only (KeyError otherwise)."""
        return gmem_counters(self.stats, name)


def gmem_counters(stats: dict, name: str) -> dict:
    """The per-argument global-memory counters of a race-build launch's `stats` (see CheckResult.gmem)."""
    by_arg = stats.get("gmem_by_arg")
    if by_arg is None:
        raise KeyError("no global-memory counters in these stats: they come from the emulator's race build "
                       "(cuda.load(path, backend='cpu', build='race'), or cuda.check(..., race=True) on the CPU)")
    if name not in by_arg:
        raise KeyError(f"no array argument named `{name}` (arguments: {', '.join(by_arg) or 'none'})")
    return dict(by_arg[name])


def _snapshot(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.copy()
    if is_torch(v):
        return v.detach().clone()
    if is_cupy(v):
        return v.copy()
    return v


def _as_numpy(v: Any) -> np.ndarray | None:
    if isinstance(v, np.ndarray):
        return v
    if is_torch(v):
        import torch

        t = v.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.cpu().numpy()
    if is_cupy(v):
        return v.get()
    return None


def _tolerances(dtype: np.dtype, rtol: float | None, atol: float | None, cross: bool) -> tuple[float, float]:
    if dtype.kind != "f" and dtype.kind != "c":
        return 0.0, 0.0
    if dtype.itemsize <= 2:
        r, a = 1e-2, 1e-3
    elif cross:
        r, a = 1e-4, 1e-5
    else:
        r, a = 1e-5, 1e-6
    return (rtol if rtol is not None else r), (atol if atol is not None else a)


def _compare(ref: dict[int, np.ndarray], got: dict[int, np.ndarray], params: list[ParamInfo], ref_name: str,
             name: str, kname: str, rtol, atol, cross: bool, only: set[int] | None) -> None:
    for i, r in ref.items():
        if only is not None and i not in only:
            continue
        g = got[i]
        with np.errstate(invalid="ignore", over="ignore"):
            r_ = r.astype(np.float64) if r.dtype.kind == "f" else r
            g_ = g.astype(np.float64) if g.dtype.kind == "f" else g
        rt, at = _tolerances(r.dtype, rtol, atol, cross)
        if r.dtype.kind == "f":
            same = np.isclose(g_, r_, rtol=rt, atol=at, equal_nan=True)
        else:
            same = g_ == r_
        if not np.all(same):
            bad = np.argwhere(~np.asarray(same))
            idx = tuple(int(x) for x in bad[0]) if bad.size else ()
            pname = params[i].name or f"arg{i}"
            raise CudaOrderDependenceError(
                f"kernel `{kname}`: argument `{pname}` differs between the {ref_name} and the {name} run "
                f"({len(bad)} of {r.size} elements; first at index {idx if len(idx) > 1 else idx[0] if idx else ''}: "
                f"{r[idx] if idx else r!r} vs {g[idx] if idx else g!r}). The result depends on the order threads or "
                f"blocks run in: a missing __syncthreads()/__syncwarp(), a race between blocks, or a read of "
                f"memory no thread wrote.", kind="order", kernel=kname)


def check(kernel: Kernel, launch: tuple, args: Sequence[Any], *, orders: Sequence[str] = ORDERS, race: bool = True,
          asan: bool = True, banks: bool = False, rtol: float | None = None, atol: float | None = None,
          compare: bool | Iterable[int] = True, seed: int = 0, timeout: float | None = None) -> CheckResult:
    """Run `kernel` on `args` in every variant and compare every result.

    Variants: on a GPU machine the GPU run first; then the emulator in each thread/block order of
    `orders` (fwd, rev, seeded rand), the race build (shared-memory races, uninitialised shared
    reads, overruns, conflicting global writes; with `banks=True` it also counts bank conflicts)
    and the AddressSanitizer build. The first variant's results are written into `args` (so the
    test compares them with its reference); any error raises the matching CudaError, and results
    that differ between variants raise CudaOrderDependenceError.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError("check() takes a kernel of a loaded module: cuda.check(mod.my_kernel, (grid, block), args)")
    grid, block, smem = launch_config(tuple(launch))
    args = list(args)
    m = kernel.module
    for o in orders:
        if o not in ORDERS:
            raise ValueError(f"unknown order {o!r}; use {ORDERS}")
    variants: list[tuple[str, str | None, str]] = []   # (build, order, label)
    if m.backend == "gpu":
        variants.append(("gpu", None, "GPU"))
    emu_too = os.environ.get("HPCCOURSE_CUDA_CHECK_EMULATOR", "1").lower() not in ("0", "no", "off", "false")
    if m.backend == "cpu" or (emu_too and emulator_available()):
        for o in orders:
            variants.append(("fast", o, f"emulator ({o} order)" if o != "rand" else f"emulator (random order, seed {seed})"))
        if race or banks:
            variants.append(("race", "fwd", "race-checked emulator build"))
        if asan:
            if cpu.asan_available():
                variants.append(("asan", "fwd", "AddressSanitizer emulator build"))
            else:
                import warnings

                warnings.warn(f"{cpu.compiler()} cannot build AddressSanitizer programs here: the ASan variant of "
                              f"cuda.check() is skipped (the race build still checks bounds)", stacklevel=2)
    if not variants:
        variants.append(("fast", "fwd", "emulator"))
    params = kernel.params("gpu" if m.backend == "gpu" else "fast")
    _check_count(kernel.spec, params, args)
    out_idx = [i for i, p in enumerate(params) if p.is_ptr and not p.is_const and args[i] is not None]
    only = None if compare is True else (set() if compare is False else set(compare))
    pristine = [_snapshot(a) for a in args]
    ref: dict[int, np.ndarray] | None = None
    ref_name = ""
    stats: dict = {}
    labels = []
    for n, (build, order, label) in enumerate(variants):
        run_args = args if n == 0 else [_snapshot(a) for a in pristine]
        if build != "gpu" and m.backend == "gpu":
            run_args = [(_as_numpy(a).copy() if (is_torch(a) or is_cupy(a)) else a) for a in run_args]
        try:
            st = kernel._run(grid, block, smem, run_args, build=build, order=order, seed=seed,
                             banks=banks if build == "race" else False, timeout=timeout)
        except CudaError as e:
            e.variant = label
            raise
        labels.append(label)
        if build == "race" or not stats:
            stats = dict(st)
        outs = {i: np.array(_as_numpy(run_args[i]), copy=True) for i in out_idx}
        if ref is None:
            ref, ref_name = outs, label
        elif compare is not False:
            _compare(ref, outs, params, ref_name, label, kernel.spec, rtol, atol, cross=(variants[0][0] == "gpu"),
                     only=only)
    return CheckResult(outputs=ref or {}, variants=labels, stats=stats)
