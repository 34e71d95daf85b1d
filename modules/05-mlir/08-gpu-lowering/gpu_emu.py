"""Test helper for mlir-08 (given; not graded): run an outlined GPU kernel on the CPU, one thread at a time.

The kernel's gpu.func (after `outline`, still in the gpu dialect) becomes an ordinary func.func @emu whose first six
arguments are blockIdx.{x,y,z} and threadIdx.{x,y,z}: every `gpu.block_id x` reads an argument, `gpu.block_dim` /
`gpu.grid_dim` are the launch's constants. A driver @grid loops over every block and thread of the launch and calls
@emu. Both are lowered with MLIR's CPU pipeline and JIT-compiled, so what runs is the kernel body MLIR generated, with
its index arithmetic and bounds guards -- only the hardware's thread scheduling is replaced by loops (valid here: the
kernel has no barriers or shared memory).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

import numpy as np

from pytest_hpccourse.runtimes import mlirrun

CPU_PIPELINE = ("builtin.module(lower-affine, convert-scf-to-cf, expand-strided-metadata, lower-affine, "
                "convert-to-llvm, reconcile-unrealized-casts)")
_ID = re.compile(r"(%[\w$.-]+) = gpu\.(block_id|thread_id|block_dim|grid_dim)\s+([xyz])(?:\s+upper_bound\s+\d+)?")
_HEAD = re.compile(r"^gpu\.func @[\w$.-]+\((?P<args>.*?)\) kernel(?: attributes \{.*?\})? \{$", re.M)


def _const(value):
    from mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        raise AssertionError(f"launch dimension {value} is not an arith.constant")
    return ir.IntegerAttr(owner.attributes["value"]).value


@dataclass
class Launch:
    kernel: str  # @module::@func
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arg_types: list[str]  # of the kernel's arguments, as printed
    kernel_text: str  # the gpu.func as printed


def find_launch(outline_ir: str) -> Launch:
    """The single gpu.launch_func of the module and the gpu.func it launches."""
    from mlir import ir
    from mlir.dialects import gpu  # noqa: F401 - registers the gpu dialect's Python op classes

    with ir.Context() as ctx:
        module = mlirrun.parse(outline_ir, ctx)
        launches, funcs = [], {}

        def visit(op):
            if op.name == "gpu.launch_func":
                launches.append(op.opview)
            elif op.name == "gpu.func" and "gpu.kernel" in op.attributes:
                parent = op.parent
                mod = ir.StringAttr(parent.attributes["sym_name"]).value
                funcs[f"@{mod}::@{ir.StringAttr(op.attributes['sym_name']).value}"] = op
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        assert len(launches) == 1, f"expected one gpu.launch_func after `outline`, found {len(launches)}"
        lf = launches[0]
        name = str(lf.kernel)
        assert name in funcs, f"{name}: no kernel gpu.func of that name (found {sorted(funcs)})"
        grid = tuple(_const(v) for v in (lf.gridSizeX, lf.gridSizeY, lf.gridSizeZ))
        block = tuple(_const(v) for v in (lf.blockSizeX, lf.blockSizeY, lf.blockSizeZ))
        fn = funcs[name].opview
        arg_types = [str(t) for t in ir.FunctionType(ir.TypeAttr(fn.function_type).value).inputs]
        return Launch(name, grid, block, arg_types, str(funcs[name]))


def emulator_module(launch: Launch) -> str:
    """func.func @emu(bx, by, bz, tx, ty, tz, args...) from the kernel body, and @grid(args...) running every thread."""
    text = launch.kernel_text
    head = _HEAD.search(text)
    assert head, "cannot read the kernel's gpu.func header"
    dims = {"block_dim": dict(zip("xyz", launch.block)), "grid_dim": dict(zip("xyz", launch.grid))}

    def ids(m):
        name, what, axis = m.group(1), m.group(2), m.group(3)
        if what in dims:
            return f"{name} = arith.constant {dims[what][axis]} : index"
        arg = ("%emu_b" if what == "block_id" else "%emu_t") + axis
        return f"{name} = arith.addi {arg}, %emu_zero : index"

    idx = ", ".join(f"%emu_{p}{a}: index" for p in "bt" for a in "xyz")
    body = text[head.end():]
    body = _ID.sub(ids, body)
    body = re.sub(r"\bgpu\.return\b", "return", body)
    emu = (f"func.func @emu({idx}, {head.group('args')}) attributes {{llvm.emit_c_interface}} {{\n"
           f"  %emu_zero = arith.constant 0 : index\n  cf.br ^emu_entry\n^emu_entry:\n{body}")
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(launch.arg_types))
    names = ", ".join(f"%a{i}" for i in range(len(launch.arg_types)))
    types = ", ".join(["index"] * 6 + launch.arg_types)
    (gx, gy, gz), (bx, by, bz) = launch.grid, launch.block
    loops = "".join(f"scf.for %{v} = %z to %n{v} step %one {{\n" for v in ("gz", "gy", "gx", "tz", "ty", "tx"))
    consts = "".join(f"  %n{v} = arith.constant {c} : index\n"
                     for v, c in zip(("gz", "gy", "gx", "tz", "ty", "tx"), (gz, gy, gx, bz, by, bx)))
    grid = (f"func.func @grid({args}) attributes {{llvm.emit_c_interface}} {{\n"
            f"  %z = arith.constant 0 : index\n  %one = arith.constant 1 : index\n{consts}  {loops}"
            f"  func.call @emu(%gx, %gy, %gz, %tx, %ty, %tz, {names}) : ({types}) -> ()\n"
            + "}\n" * 6 + "  return\n}\n")
    return f"module {{\n{emu}\n{grid}}}\n"


class KernelOnCpu:
    """JIT of the emulator: `run(*arrays)` executes the whole grid; `thread(b, t, *arrays)` executes one thread."""

    def __init__(self, outline_ir: str):
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        self.launch = find_launch(outline_ir)
        scalars = [t for t in self.launch.arg_types if not t.startswith("memref<")]
        if scalars:  # the host would pass these values; the emulator (and the lesson's contract) takes only memrefs
            raise AssertionError(f"the kernel takes non-memref arguments {scalars}: constants were not sunk into it")
        self.source = emulator_module(self.launch)
        lowered = mlirrun.run_pipeline(self.source, CPU_PIPELINE)
        self._ctx = ir.Context()
        with self._ctx, ir.Location.unknown():
            self._module = mlirrun.parse(lowered, self._ctx)
            self._engine = ExecutionEngine(self._module, opt_level=2, shared_libs=mlirrun.runtime_libs())

    @staticmethod
    def _memrefs(arrays):
        from mlir import runtime as rt

        return [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(a))) for a in arrays]

    def _check(self, arrays):
        shapes = ["memref<" + "x".join(map(str, a.shape)) + "xf32>" for a in arrays]
        if shapes != self.launch.arg_types or any(a.dtype != np.float32 for a in arrays):
            raise AssertionError(f"kernel arguments {self.launch.arg_types}, given {shapes}")

    def run(self, *arrays: np.ndarray) -> None:
        self._check(arrays)
        self._engine.invoke("grid", *self._memrefs(arrays))

    def thread(self, block_id, thread_id, *arrays: np.ndarray) -> None:
        self._check(arrays)
        ids = [ctypes.pointer(ctypes.c_int64(v)) for v in (*block_id, *thread_id)]
        self._engine.invoke("emu", *ids, *self._memrefs(arrays))
