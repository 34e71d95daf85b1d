"""mlir-07: lower a tiled linalg matmul + bias + ReLU on tensors, stage by stage, down to the LLVM dialect and run it.

You write two things (the BEGIN SOLUTION regions):
  tile_schedule(tm, tn, tk)  a transform-dialect library whose @__transform_main tiles the linalg.matmul
  stages(schedule_path)      the pass pipeline, as five named stages: tile, bufferize, loops, cf, llvm
The rest (the payload IR, running the stages, the JIT) is given.

    python lower.py          # prints the IR after every stage for a 37x53x29 problem and checks it against numpy
"""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np

from pytest_hpccourse.runtimes import mlirrun

STAGES = ("tile", "bufferize", "loops", "cf", "llvm")


def payload(m: int | None = None, n: int | None = None, k: int | None = None) -> str:
    """C = relu(A @ B + bias) on tensors, in destination-passing style.

    @mlp(A: MxK, B: KxN, bias: N, C: MxN) reads its memref arguments as tensors (bufferization.to_tensor restrict),
    computes on tensors and writes the value into C (bufferization.materialize_in_destination): the function's
    C interface is memrefs, its body is tensors. Sizes left None are dynamic (`?`)."""
    dims = [m, n, k]
    if any(d is None for d in dims) and not all(d is None for d in dims):
        raise ValueError("payload: give all of m, n, k or none")
    M, N, K = ("?" if d is None else str(d) for d in dims)
    ta, tb, tc = f"{M}x{K}xf32", f"{K}x{N}xf32", f"{M}x{N}xf32"
    if m is None:  # dynamic: the empty result tensor takes its sizes from A and B
        sizes = ("    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n"
                 f"    %m = tensor.dim %a, %c0 : tensor<{ta}>\n    %n = tensor.dim %b, %c1 : tensor<{tb}>\n")
        empty = "tensor.empty(%m, %n)"
    else:
        sizes, empty = "", "tensor.empty()"
    return f"""#rows = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
module {{
  func.func @mlp(%A: memref<{ta}>, %B: memref<{tb}>, %bias: memref<{N}xf32>, %C: memref<{tc}>)
      attributes {{llvm.emit_c_interface}} {{
    %a = bufferization.to_tensor %A restrict : memref<{ta}> to tensor<{ta}>
    %b = bufferization.to_tensor %B restrict : memref<{tb}> to tensor<{tb}>
    %bi = bufferization.to_tensor %bias restrict : memref<{N}xf32> to tensor<{N}xf32>
    %zero = arith.constant 0.0 : f32
{sizes}    %e = {empty} : tensor<{tc}>
    %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<{tc}>) -> tensor<{tc}>
    %mm = linalg.matmul ins(%a, %b : tensor<{ta}>, tensor<{tb}>) outs(%acc : tensor<{tc}>) -> tensor<{tc}>
    %out = linalg.generic {{indexing_maps = [#bias, #rows], iterator_types = ["parallel", "parallel"]}}
        ins(%bi : tensor<{N}xf32>) outs(%mm : tensor<{tc}>) {{
      ^bb0(%x: f32, %y: f32):
        %s = arith.addf %y, %x : f32
        %r = arith.maximumf %s, %zero : f32
        linalg.yield %r : f32
    }} -> tensor<{tc}>
    bufferization.materialize_in_destination %out in restrict writable %C : (tensor<{tc}>, memref<{tc}>) -> ()
    return
  }}
}}
"""


def tile_schedule(tm: int, tn: int, tk: int) -> str:
    """A transform-dialect library (a module with `transform.with_named_sequence`) whose named sequence
    @__transform_main(%root) tiles the linalg.matmul with tile sizes (tm, tn, tk) for its loops (m, n, k), as
    scf.for loops on tensors (transform.structured.tile_using_for). Sizes are >= 1."""
    ### HINT: the matmul's iteration domain is (d0, d1, d2) = (m, n, k); tile_using_for yields the tiled op and one loop handle per non-zero size
    ### BEGIN SOLUTION
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %mm = transform.structured.match ops{{["linalg.matmul"]}} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loops:3 = transform.structured.tile_using_for %mm tile_sizes [{tm}, {tn}, {tk}]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }}
}}
"""
    ### END SOLUTION


def stages(schedule_path: str) -> list[tuple[str, str]]:
    """The lowering as five (name, passes) stages, in this order: tile, bufferize, loops, cf, llvm. `passes` is a
    comma-separated pass list as inside `builtin.module(...)`; nest function passes as `func.func(...)`.

      tile       load the schedule (file `schedule_path`), apply it; the IR is still on tensors
      bufferize  tensors -> memrefs, in place: no memref.alloc, the result is computed inside C
      loops      no linalg op left (scf loops over memref.load / store)
      cf         no structured control flow left (scf, affine loops): only cf branches
      llvm       only the llvm dialect left; the ExecutionEngine runs it"""
    ### HINT: a pass only rewrites what it understands: every stage's output must be the input the next stage's passes expect
    ### BEGIN SOLUTION
    return [
        ("tile", f"transform-preload-library{{transform-library-paths={schedule_path}}}, transform-interpreter,"
                 " canonicalize, cse"),
        ("bufferize", "eliminate-empty-tensors, one-shot-bufferize, cse, canonicalize"),  # tensor.empty -> C, then in place
        ("loops", "func.func(convert-linalg-to-loops)"),
        ("cf", "expand-strided-metadata, lower-affine, convert-scf-to-cf"),  # subview -> affine.apply -> arith
        ("llvm", "convert-to-llvm, reconcile-unrealized-casts"),
    ]
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------- given: the driver


def lower(ir_text: str, tiles: tuple[int, int, int], order: list[str] | None = None) -> dict[str, str]:
    """Run the stages (in `order`, default STAGES) on `ir_text`; {stage name: IR after it}. MlirError on failure."""
    with tempfile.TemporaryDirectory(prefix="mlir07-") as tmp:
        path = Path(tmp) / "schedule.mlir"
        path.write_text(tile_schedule(*tiles))
        table = dict(stages(str(path)))
        out, ir = {}, ir_text
        for name in order or STAGES:
            ir = mlirrun.run_pipeline(ir, f"builtin.module({table[name]})")
            out[name] = ir
    return out


class Jit:
    """One ExecutionEngine for a lowered module: call it many times without compiling again."""

    def __init__(self, llvm_ir: str, func: str = "mlp"):
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        self._ctx = ir.Context()
        diagnostics: list[str] = []

        def keep(d):  # the engine's own exception says only "Failure while creating the ExecutionEngine."
            diagnostics.append(f"{d.location}: {str(d.severity).rsplit('.', 1)[-1].lower()}: {d.message}")
            return True

        with self._ctx, ir.Location.unknown():
            self._module = mlirrun.parse(llvm_ir, self._ctx)
            handler = self._ctx.attach_diagnostic_handler(keep)
            try:
                self._engine = ExecutionEngine(self._module, opt_level=2, shared_libs=mlirrun.runtime_libs())
            except Exception as e:  # noqa: BLE001 - MLIR reports translation failures as plain exceptions
                raise mlirrun.MlirError("\n".join([str(e), *diagnostics])) from None
            finally:
                handler.detach()
        self._func = func

    def __call__(self, *arrays: np.ndarray) -> None:
        from mlir import runtime as rt

        args = [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(a))) for a in arrays]
        self._engine.invoke(self._func, *args)


def mlp(a: np.ndarray, b: np.ndarray, bias: np.ndarray, jit: Jit) -> np.ndarray:
    """relu(a @ b + bias) through a compiled module; C is poisoned with NaN first, so unwritten elements show."""
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    jit(np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32),
        np.ascontiguousarray(bias, np.float32), c)
    return c


if __name__ == "__main__":
    M, N, K = 37, 53, 29
    irs = lower(payload(M, N, K), (8, 16, 4))
    for stage, text in irs.items():
        print(f"// ----- after {stage} -----\n{text}")
    rng = np.random.default_rng(0)
    A, B, bias = rng.standard_normal((M, K)), rng.standard_normal((K, N)), rng.standard_normal(N)
    got = mlp(A, B, bias, Jit(irs["llvm"]))
    print("max |error| vs numpy:", np.abs(got - np.maximum(A @ B + bias, 0)).max())
