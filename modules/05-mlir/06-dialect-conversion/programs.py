"""Random Toy programs with a numpy reference, and a harness that runs lowered functions on upstream MLIR's JIT.

A program is one `func.func @pK(%a0: !toy.tensor<...>, ...) -> !toy.tensor<...>` built from toy.constant
(values k/4, exact in f64 and in any printed form), toy.add, toy.mul and toy.transpose on 2-D shapes from 1x1 to
6x6 (and 1-D vectors without transposes). `Program.reference(args)` evaluates it with numpy in float64.

`run(module_text, programs, args)` adds, per program, a wrapper `@run_pK(%a0, ..., %out)` that calls `@pK` and
copies its result into %out, lowers everything to the LLVM dialect with upstream MLIR (`TO_LLVM`), JITs it in one
ExecutionEngine and calls every wrapper with numpy arrays as memrefs. (mlirrun.execute JITs one module per call:
too slow for dozens of programs, so this harness keeps the engine.)
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import dataclass, field

import numpy as np

TO_LLVM = ("builtin.module(convert-scf-to-cf, finalize-memref-to-llvm, convert-arith-to-llvm, convert-func-to-llvm,"
           " convert-cf-to-llvm, reconcile-unrealized-casts)")


def toy_type(shape) -> str:
    return "!toy.tensor<" + "".join(f"{d}x" for d in shape) + "f64>"


def memref_type(shape) -> str:
    return "memref<" + "".join(f"{d}x" for d in shape) + "f64>"


def dense(values: np.ndarray) -> str:
    def fmt(a):
        return "[" + ", ".join(fmt(x) for x in a) + "]" if isinstance(a, list) else repr(float(a))
    shape = "x".join(str(d) for d in values.shape)
    return f"dense<{fmt(values.tolist())}> : tensor<{shape}xf64>"


@dataclass
class Program:
    name: str
    arg_shapes: list[tuple[int, ...]]
    out_shape: tuple[int, ...]
    text: str
    steps: list = field(default_factory=list)  # (kind, operand indices, payload) in value order; args first
    out: int = -1  # index of the returned value (arguments first, then one value per step)

    def reference(self, args: list[np.ndarray]) -> np.ndarray:
        vals = list(args)
        for kind, ops, payload in self.steps:
            if kind == "constant":
                vals.append(payload)
            elif kind == "add":
                vals.append(vals[ops[0]] + vals[ops[1]])
            elif kind == "mul":
                vals.append(vals[ops[0]] * vals[ops[1]])
            elif kind == "transpose":
                vals.append(vals[ops[0]].T.copy())
        return vals[self.out]


def random_program(rng: random.Random, name: str) -> Program:
    if rng.random() < 0.2:
        base = (rng.randint(1, 7),)
    else:
        base = (rng.randint(1, 6), rng.randint(1, 6))
    shapes = [base] if len(base) == 1 else [base, base[::-1]]
    n_args = rng.randint(1, 3)
    arg_shapes = [rng.choice(shapes) for _ in range(n_args)]
    values: list[tuple[str, tuple[int, ...]]] = [(f"%a{i}", s) for i, s in enumerate(arg_shapes)]
    lines, steps = [], []
    for k in range(rng.randint(0, 9)):
        kind = rng.choice(["constant", "add", "add", "mul", "mul", "transpose"])
        if kind == "transpose" and len(base) == 1:
            kind = "add"
        res = f"%v{k}"
        if kind == "constant":
            shape = rng.choice(shapes)
            payload = np.array([rng.randint(-40, 40) / 4 for _ in range(int(np.prod(shape)))]).reshape(shape)
            lines.append(f"{res} = toy.constant {dense(payload)} : {toy_type(shape)}")
            steps.append(("constant", [], payload))
        elif kind in ("add", "mul"):
            i = rng.randrange(len(values)) if rng.random() < 0.4 else len(values) - 1
            shape = values[i][1]
            same = [j for j, (_, s) in enumerate(values) if s == shape]
            j = rng.choice(same)
            lines.append(f"{res} = toy.{kind} {values[i][0]}, {values[j][0]} : {toy_type(shape)}")
            steps.append((kind, [i, j], None))
        else:
            i = rng.randrange(len(values)) if rng.random() < 0.4 else len(values) - 1
            shape = values[i][1][::-1]
            lines.append(f"{res} = toy.transpose {values[i][0]} : {toy_type(values[i][1])} to {toy_type(shape)}")
            steps.append(("transpose", [i], None))
        values.append((res, shape))
    out = len(values) - 1 if rng.random() < 0.8 else rng.randrange(len(values))
    out_name, out_shape = values[out]
    args = ", ".join(f"%a{i}: {toy_type(s)}" for i, s in enumerate(arg_shapes))
    body = "\n  ".join(lines + [f"return {out_name} : {toy_type(out_shape)}"])
    text = f"func.func @{name}({args}) -> {toy_type(out_shape)} {{\n  {body}\n}}"
    return Program(name, arg_shapes, out_shape, text, steps, out)


def wrapper(p: Program) -> str:
    args = ", ".join([f"%a{i}: {memref_type(s)}" for i, s in enumerate(p.arg_shapes)]
                     + [f"%out: {memref_type(p.out_shape)}"])
    call_args = ", ".join(f"%a{i}" for i in range(len(p.arg_shapes)))
    call_types = ", ".join(memref_type(s) for s in p.arg_shapes)
    out = memref_type(p.out_shape)
    return f"""func.func @run_{p.name}({args}) attributes {{llvm.emit_c_interface}} {{
  %r = func.call @{p.name}({call_args}) : ({call_types}) -> {out}
  memref.copy %r, %out : {out} to {out}
  return
}}"""


def out_of_bounds(module) -> list[str]:
    """memref.load/store whose indices are constants or scf.for induction variables with constant bounds and that
    can leave the memref's shape (checked before JIT execution: an out-of-bounds store would corrupt memory)."""
    from xdsl.dialects import arith, memref, scf
    from xdsl.ir import BlockArgument

    def value_range(v):
        if isinstance(v.owner, arith.ConstantOp):
            c = v.owner.value.value.data
            return c, c
        if isinstance(v, BlockArgument) and isinstance(v.owner.parent_op(), scf.ForOp):
            loop = v.owner.parent_op()
            lb, ub = value_range(loop.lb), value_range(loop.ub)
            if lb and ub:
                return lb[0], ub[1] - 1
        return None

    bad = []
    for op in module.walk():
        if isinstance(op, (memref.LoadOp, memref.StoreOp)):
            shape = op.memref.type.get_shape()
            for axis, (v, size) in enumerate(zip(op.indices, shape)):
                r = value_range(v)
                if r is not None and (r[0] < 0 or r[1] >= size):
                    bad.append(f"{op.name} index {axis} ranges over [{r[0]}, {r[1]}] on {op.memref.type}")
    return bad


def run(lowered_funcs: str, programs: list[Program], seed: int = 0) -> list[str]:
    """Execute every program's lowered function (text of func.funcs, already arith/scf/memref/func) on random
    inputs; returns a message per program whose result differs from numpy."""
    from mlir import ir
    from mlir import runtime as rt
    from mlir.execution_engine import ExecutionEngine

    from pytest_hpccourse.runtimes import mlirrun

    text = "module {\n" + lowered_funcs + "\n" + "\n".join(wrapper(p) for p in programs) + "\n}"
    low = mlirrun.run_pipeline(text, TO_LLVM)
    rng = np.random.default_rng(seed)
    bad = []
    with ir.Context() as ctx, ir.Location.unknown():
        engine = ExecutionEngine(mlirrun.parse(low, ctx), opt_level=0, shared_libs=mlirrun.runtime_libs())
        for p in programs:
            args = [rng.standard_normal(s) * 3 for s in p.arg_shapes]
            want = p.reference([a.copy() for a in args])
            out = np.full(p.out_shape, np.nan)  # poison: an element never written stays NaN
            ptrs = [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(a))) for a in [*args, out]]
            engine.invoke(f"run_{p.name}", *ptrs)
            if not np.array_equal(out, want):
                bad.append(f"@{p.name}: got\n{out}\nnumpy says\n{want}\nfor the program\n{p.text}")
    return bad
