"""Random arith expression DAGs as MLIR functions, and a harness that runs them on upstream MLIR's JIT.

A DAG function (upstream MLIR text) of element type T takes a 4-element scratch memref and its scalar inputs
and returns one value:

    func.func @f7(%m: memref<4xT>, %x0: T, %x1: T) -> T attributes {llvm.emit_c_interface}

Its body mixes `arith.constant`s (0, 1, -1 and the type's extremes among them), `arith.addi/muli` (integers)
or `arith.addf/mulf` (floats) on earlier values, `memref.store`s of values into elements 0-2 of %m, and calls
to the opaque `@sink_T`, which adds its argument into element 3 (a side effect) and returns it. Many values are
never used: dead code on purpose.

`run(pairs)` lowers all functions to the LLVM dialect with upstream MLIR, JITs them in ONE ExecutionEngine and
calls each before/after pair on the same random inputs and the same initial memory. (mlirrun.execute JITs one
module per call and passes memrefs only; this harness keeps the engine and passes scalars too.)
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import dataclass

import numpy as np

INT_WIDTHS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64}
NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}
FLOAT_CONSTANTS = ["0.000000e+00", "-0.000000e+00", "1.000000e+00", "-1.000000e+00", "2.000000e+00",
                   "5.000000e-01", "3.000000e+00"]  # exact in f32 and f64
TO_LLVM = ("builtin.module(convert-scf-to-cf, finalize-memref-to-llvm, convert-arith-to-llvm, convert-func-to-llvm,"
           " convert-cf-to-llvm, reconcile-unrealized-casts)")


@dataclass
class Dag:
    name: str
    typ: str
    n_in: int
    text: str  # the func.func

    @property
    def is_int(self) -> bool:
        return self.typ in INT_WIDTHS


def sink_decl(typ: str) -> str:
    return f"func.func private @sink_{typ}(memref<4x{typ}>, {typ}) -> {typ}"


def sink_def(typ: str) -> str:
    add = "arith.addi" if typ in INT_WIDTHS else "arith.addf"
    return f"""func.func @sink_{typ}(%m: memref<4x{typ}>, %v: {typ}) -> {typ} {{
  %c3 = arith.constant 3 : index
  %old = memref.load %m[%c3] : memref<4x{typ}>
  %new = {add} %old, %v : {typ}
  memref.store %new, %m[%c3] : memref<4x{typ}>
  return %v : {typ}
}}"""


def int_literal(rng: random.Random, typ: str) -> int:
    w = INT_WIDTHS[typ]
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    pick = rng.random()
    if pick < 0.25:
        return 0
    if pick < 0.45:
        return 1
    if pick < 0.55:
        return -1
    if pick < 0.7:
        return rng.choice([lo, hi, lo + 1, hi - 1, 2, 3, 1 << (w // 2)])
    return rng.randint(lo, hi)


def func_text(name: str, typ: str, n_in: int, lines: list[str], out: str) -> str:
    args = ", ".join([f"%m: memref<4x{typ}>"] + [f"%x{i}: {typ}" for i in range(n_in)])
    body = "\n  ".join(lines + [f"return {out} : {typ}"])
    return f"func.func @{name}({args}) -> {typ} attributes {{llvm.emit_c_interface}} {{\n  {body}\n}}"


def random_dag(rng: random.Random, name: str, typ: str | None = None, size: int | None = None) -> Dag:
    typ = typ or rng.choice(["i8", "i8", "i16", "i32", "i32", "i64", "i64", "f32", "f64"])
    size = size if size is not None else rng.randint(3, 28)
    is_int = typ in INT_WIDTHS
    n_in = rng.randint(1, 3)
    values = [f"%x{i}" for i in range(n_in)]
    lines: list[str] = []
    for i in range(size):
        pick = rng.random()
        if pick < 0.3:
            lit = int_literal(rng, typ) if is_int else rng.choice(FLOAT_CONSTANTS)
            lines.append(f"%v{i} = arith.constant {lit} : {typ}")
        elif pick < 0.85:
            op = rng.choice(["addi", "muli"] if is_int else ["addf", "mulf"])
            a, b = (rng.choice(values[-5:]) if rng.random() < 0.6 else rng.choice(values) for _ in range(2))
            lines.append(f"%v{i} = arith.{op} {a}, {b} : {typ}")
        elif pick < 0.93:
            lines.append(f"%k{i} = arith.constant {rng.randint(0, 2)} : index")
            lines.append(f"memref.store {rng.choice(values)}, %m[%k{i}] : memref<4x{typ}>")
            continue
        else:
            lines.append(f"%v{i} = func.call @sink_{typ}(%m, {rng.choice(values[-4:])}) "
                         f": (memref<4x{typ}>, {typ}) -> {typ}")
        values.append(f"%v{i}")
    out = rng.choice(values[-3:]) if rng.random() < 0.7 else rng.choice(values)
    return Dag(name, typ, n_in, func_text(name, typ, n_in, lines, out))


def dag_module(dag: Dag) -> str:
    """The module the rewriter works on: the DAG and the declaration of its sink."""
    return f"module {{\n{sink_decl(dag.typ)}\n{dag.text}\n}}"


def random_inputs(rng: np.random.Generator, typ: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = NUMPY[typ]
    if typ in INT_WIDTHS:
        info = np.iinfo(dt)
        special = np.array([0, 1, -1, 2, info.min, info.max, info.min + 1, info.max - 1], dtype=dt)
        out = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    else:
        info = np.finfo(dt)
        special = np.array([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, info.max, -info.max, info.tiny, 0.5],
                           dtype=dt)
        out = (rng.standard_normal(shape) * 4).astype(dt)
    mask = rng.random(shape) < 0.35
    out[mask] = rng.choice(special, size=int(mask.sum()))
    return out


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: bit-identical, or both NaN (-0.0 and +0.0 differ)."""
    if a.dtype.kind == "f":
        bits = a.view(f"u{a.itemsize}") == b.view(f"u{b.itemsize}")
        return bits | (np.isnan(a) & np.isnan(b))
    return a == b


class Engine:
    """Lower `text` to LLVM with upstream MLIR and keep one ExecutionEngine for many calls."""

    def __init__(self, text: str):
        from mlir import ir
        from mlir.execution_engine import ExecutionEngine

        from pytest_hpccourse.runtimes import mlirrun

        low = mlirrun.run_pipeline(text, TO_LLVM)
        self._ctx = ir.Context()
        with self._ctx, ir.Location.unknown():
            self._module = mlirrun.parse(low, self._ctx)
            self._engine = ExecutionEngine(self._module, opt_level=0, shared_libs=mlirrun.runtime_libs())
        self._funcs: dict = {}

    def call(self, func: str, mem: np.ndarray, xs: np.ndarray) -> np.generic:
        """@func(%m, %x0, ...) -> T through its C interface; `mem` is updated in place."""
        from mlir import runtime as rt

        if func not in self._funcs:  # ExecutionEngine.invoke looks the symbol up on every call: cache it
            self._funcs[func] = self._engine.lookup(func)
        ctype = np.ctypeslib.as_ctypes_type(xs.dtype)
        args = [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(mem)))]
        args += [(ctype * 1)(x) for x in xs.tolist()]
        res = (ctype * 1)()
        packed = (ctypes.c_void_p * (len(args) + 1))(*[ctypes.cast(a, ctypes.c_void_p) for a in [*args, res]])
        self._funcs[func](packed)
        return xs.dtype.type(res[0])


def run(pairs: list[tuple[Dag, str, str]], rows: int = 16, seed: int = 0) -> list[str]:
    """Each (dag, before_text, after_text): JIT both functions (renamed) and call them on the same random inputs
    and initial memory. Returns one message per DAG whose result or memory differs (empty: all equal)."""
    parts = []
    for dag, before, after in pairs:
        for tag, text in (("b", before), ("a", after)):
            parts.append(text.replace(f"@{dag.name}(", f"@{dag.name}_{tag}(", 1))
    parts += [sink_def(t) for t in sorted({d.typ for d, _, _ in pairs})]
    engine = Engine("module {\n" + "\n".join(parts) + "\n}")
    rng = np.random.default_rng(seed)
    bad = []
    for dag, _, after in pairs:
        xs = random_inputs(rng, dag.typ, (rows, dag.n_in))
        mem0 = random_inputs(rng, dag.typ, (rows, 4))
        for r in range(rows):
            mb, ma = mem0[r].copy(), mem0[r].copy()
            yb = engine.call(f"{dag.name}_b", mb, xs[r])
            ya = engine.call(f"{dag.name}_a", ma, xs[r])
            same = same_values(np.array([yb]), np.array([ya])).all() and same_values(mb, ma).all()
            if not same:
                bad.append(f"@{dag.name} ({dag.typ}) on inputs {xs[r].tolist()}, memory {mem0[r].tolist()}: "
                           f"result {yb!r} / memory {mb.tolist()} before, {ya!r} / {ma.tolist()} after rewriting:"
                           f"\n{after}")
                break
    return bad
