"""mlir-01 tests: the learner's walk, op counts, dialect counts and structural summary against MLIR itself.

Oracles (none of them is the learner's traversal):
  - `mlir-opt --print-op-stats` (the real tool, pytest_hpccourse.runtimes.mlirrun.opt) for op counts, on the given
    modules in examples/, on every stage of a linalg -> scf -> cf -> llvm lowering, and on 160 random modules
    (one mlir-opt process for all of them: --split-input-file prints one stats table per module);
  - MLIR's own walker (`Operation.walk(..., WalkOrder.PRE_ORDER)`, C++ `Operation::walk`) and the parent chain
    (`op.parent`) for the visiting order, the depths and the structural summary;
  - `mlir-opt --mlir-print-op-generic` for the generic form; the verifier's diagnostics for invalid IR.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest
from mlir import ir

from pytest_hpccourse.runtimes import mlirrun

SEED = 2201
N_RANDOM = 120
MAX_LINES = 90  # keeps the whole corpus near 6000 ops: the tests stay within a few seconds

# ---------------------------------------------------------------------------------------------------------
# oracles


def opt_stats(texts: list[str]) -> list[Counter]:
    """`mlir-opt --print-op-stats` on each module (one process, --split-input-file): {op name: count} each."""
    out = mlirrun.opt("\n// -----\n".join(texts), "--split-input-file", "--print-op-stats", "-o", "/dev/null")
    tables = out.split("Operations encountered:")[1:]
    assert len(tables) == len(texts), f"mlir-opt printed {len(tables)} stats tables for {len(texts)} modules"
    return [Counter({m[0]: int(m[1]) for m in re.findall(r"^\s*([\w.$]+)\s*,\s*(\d+)\s*$", t, re.M)})
            for t in tables]


def opt_generic(texts: list[str]) -> list[str]:
    """`mlir-opt --mlir-print-op-generic` on each module (one process)."""
    out = mlirrun.opt("\n// -----\n".join(texts), "--split-input-file", "--mlir-print-op-generic")
    chunks = out.split("// -----")
    assert len(chunks) == len(texts)
    return chunks


def mlir_preorder(root) -> list[tuple[str, int]]:
    """(op name, depth) in MLIR's own pre-order walk of `root` (a module or an op); depth = number of
    ancestor operations."""
    seen = []

    def visit(op):
        depth, parent = 0, op.parent
        while parent is not None:
            depth, parent = depth + 1, parent.parent
        seen.append((op.name, depth))
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return seen


def mlir_summary(module: ir.Module) -> dict[str, int]:
    s = dict(operations=0, regions=0, blocks=0, values=0, max_depth=0)

    def visit(op):
        s["operations"] += 1
        s["values"] += len(op.results)
        for region in op.regions:
            s["regions"] += 1
            blocks = list(region.blocks)
            s["blocks"] += len(blocks)
            s["values"] += sum(len(b.arguments) for b in blocks)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    s["max_depth"] = max(d for _, d in mlir_preorder(module))
    return s


def by_dialect(counts: Counter) -> Counter:
    out = Counter()
    for name, n in counts.items():
        out[name.split(".", 1)[0]] += n
    return out


def first_difference(got: list, want: list) -> str:
    i = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    return f": at position {i} you yield {got[i:i + 3]}, MLIR visits {want[i:i + 3]} ({len(got)} vs {len(want)} ops)"


def squash(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------------------
# random modules: scf.for / scf.if / scf.while / scf.execute_region / affine.for nests with arith and memref
# ops, and cf-based CFGs with block arguments


class ModuleGen:
    def __init__(self, rng: random.Random, max_depth: int):
        self.rng, self.max_depth, self.n = rng, max_depth, 0

    def v(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def pick(self, scope, ty):
        return self.rng.choice(scope[ty])

    def module(self) -> str:
        return "\n".join(self.func(f"f{k}") for k in range(self.rng.randint(1, 3)))

    def func(self, name: str) -> str:
        head = f"func.func @{name}(%a: i32, %b: i32, %n: index, %m: memref<?xi32>) -> i32 {{"
        scope = {"i32": ["%a", "%b"], "index": ["%n"], "i1": []}
        if self.rng.random() < 0.35:
            body = self.cfg(scope, 1, "  ", "return", "i32")
        else:
            body = self.block(scope, 1, "  ") + [f"  return {self.pick(scope, 'i32')} : i32"]
        return "\n".join([head, *body, "}"])

    def cfg(self, scope, depth, ind, term, ty):
        """A multi-block region: blocks 1.. take an i32 argument; branches go anywhere but the entry."""
        k = self.rng.randint(2, 5)
        lines = []
        for bb in range(k):
            sc = {t: list(vs) for t, vs in scope.items()}
            if bb:
                arg = self.v()
                sc["i32"].append(arg)
                lines.append(f"{ind[:-2]}^bb{bb}({arg}: i32):")
            lines += self.block(sc, depth, ind, max_ops=3)
            targets = [t for t in range(1, k)]
            r = self.rng.random()
            if bb == k - 1 or r < 0.2:
                lines.append(f"{ind}{term} {self.pick(sc, 'i32')} : {ty}")
            elif r < 0.6:
                lines.append(f"{ind}cf.br ^bb{self.rng.choice(targets)}({self.pick(sc, 'i32')} : i32)")
            else:
                c = self.cond(sc, ind, lines)
                t1, t2 = self.rng.choice(targets), self.rng.choice(targets)
                x, y = self.pick(sc, "i32"), self.pick(sc, "i32")
                lines.append(f"{ind}cf.cond_br {c}, ^bb{t1}({x} : i32), ^bb{t2}({y} : i32)")
        return lines

    def cond(self, sc, ind, lines):
        if sc["i1"] and self.rng.random() < 0.5:
            return self.pick(sc, "i1")
        c = self.v()
        pred = self.rng.choice(["slt", "eq", "ne", "sge", "ult"])
        lines.append(f"{ind}{c} = arith.cmpi {pred}, {self.pick(sc, 'i32')}, {self.pick(sc, 'i32')} : i32")
        sc["i1"].append(c)
        return c

    def index(self, sc, ind, lines):
        if self.rng.random() < 0.5:
            return self.pick(sc, "index")
        i = self.v()
        lines.append(f"{ind}{i} = arith.constant {self.rng.randint(0, 9)} : index")
        sc["index"].append(i)
        return i

    def block(self, sc, depth, ind, max_ops=6):
        """Ops for one block (no terminator); defines into `sc`."""
        lines = []
        kinds = ["const", "bin", "bin", "cmp", "select", "cast", "load", "store"]
        if depth <= self.max_depth:
            kinds += ["for", "if", "if", "while", "exec", "affine"]
        for _ in range(self.rng.randint(1, max_ops)):
            getattr(self, "op_" + self.rng.choice(kinds))(sc, depth, ind, lines)
        return lines

    def nested(self, sc, depth, ind, extra=None, yields=None):
        """The body of a nested single-block region: its own copy of the scope, then an optional yield."""
        inner = {t: list(vs) for t, vs in sc.items()}
        for t, name in extra or []:
            inner[t].append(name)
        lines = self.block(inner, depth + 1, ind + "  ", max_ops=3)
        if yields:
            lines.append(f"{ind}  {yields} {self.pick(inner, 'i32')} : i32")
        return lines

    def op_const(self, sc, depth, ind, lines):
        r = self.v()
        lines.append(f"{ind}{r} = arith.constant {self.rng.randint(-50, 50)} : i32")
        sc["i32"].append(r)

    def op_bin(self, sc, depth, ind, lines):
        r, op = self.v(), self.rng.choice(["addi", "subi", "muli", "andi", "xori", "maxsi", "shli"])
        lines.append(f"{ind}{r} = arith.{op} {self.pick(sc, 'i32')}, {self.pick(sc, 'i32')} : i32")
        sc["i32"].append(r)

    def op_cmp(self, sc, depth, ind, lines):
        self.cond(dict(sc, i1=[]), ind, lines)
        sc["i1"].append(f"%v{self.n}")

    def op_select(self, sc, depth, ind, lines):
        c = self.cond(sc, ind, lines)
        r = self.v()
        lines.append(f"{ind}{r} = arith.select {c}, {self.pick(sc, 'i32')}, {self.pick(sc, 'i32')} : i32")
        sc["i32"].append(r)

    def op_cast(self, sc, depth, ind, lines):
        r = self.v()
        lines.append(f"{ind}{r} = arith.index_cast {self.pick(sc, 'i32')} : i32 to index")
        sc["index"].append(r)

    def op_load(self, sc, depth, ind, lines):
        i, r = self.index(sc, ind, lines), self.v()
        lines.append(f"{ind}{r} = memref.load %m[{i}] : memref<?xi32>")
        sc["i32"].append(r)

    def op_store(self, sc, depth, ind, lines):
        i = self.index(sc, ind, lines)
        lines.append(f"{ind}memref.store {self.pick(sc, 'i32')}, %m[{i}] : memref<?xi32>")

    def op_for(self, sc, depth, ind, lines):
        lo, hi = self.index(sc, ind, lines), self.index(sc, ind, lines)
        st, iv = self.v(), self.v()
        lines.append(f"{ind}{st} = arith.constant {self.rng.randint(1, 4)} : index")
        sc["index"].append(st)
        if self.rng.random() < 0.5:
            r, acc = self.v(), self.v()
            lines.append(f"{ind}{r} = scf.for {iv} = {lo} to {hi} step {st} iter_args({acc} = "
                         f"{self.pick(sc, 'i32')}) -> (i32) {{")
            lines += self.nested(sc, depth, ind, [("index", iv), ("i32", acc)], "scf.yield")
            sc["i32"].append(r)
        else:  # no results: the scf.yield is implicit in the text, yet present in the IR
            lines.append(f"{ind}scf.for {iv} = {lo} to {hi} step {st} {{")
            lines += self.nested(sc, depth, ind, [("index", iv)])
        lines.append(f"{ind}}}")

    def op_if(self, sc, depth, ind, lines):
        c = self.cond(sc, ind, lines)
        if self.rng.random() < 0.5:
            r = self.v()
            lines.append(f"{ind}{r} = scf.if {c} -> (i32) {{")
            lines += self.nested(sc, depth, ind, yields="scf.yield")
            lines.append(f"{ind}}} else {{")
            lines += self.nested(sc, depth, ind, yields="scf.yield")
            sc["i32"].append(r)
        else:
            lines.append(f"{ind}scf.if {c} {{")
            lines += self.nested(sc, depth, ind)
            if self.rng.random() < 0.5:
                lines.append(f"{ind}}} else {{")
                lines += self.nested(sc, depth, ind)
        lines.append(f"{ind}}}")

    def op_while(self, sc, depth, ind, lines):
        r, w, z, c = self.v(), self.v(), self.v(), self.v()
        lines.append(f"{ind}{r} = scf.while ({w} = {self.pick(sc, 'i32')}) : (i32) -> i32 {{")
        lines.append(f"{ind}  {c} = arith.cmpi slt, {w}, {self.pick(sc, 'i32')} : i32")
        lines.append(f"{ind}  scf.condition({c}) {w} : i32")
        lines.append(f"{ind}}} do {{")
        lines.append(f"{ind}^bb0({z}: i32):")
        lines += self.nested(sc, depth, ind, [("i32", z)], "scf.yield")
        lines.append(f"{ind}}}")
        sc["i32"].append(r)

    def op_exec(self, sc, depth, ind, lines):
        r = self.v()
        lines.append(f"{ind}{r} = scf.execute_region -> i32 {{")
        lines += self.cfg({t: list(vs) for t, vs in sc.items()}, depth + 1, ind + "  ", "scf.yield", "i32")
        lines.append(f"{ind}}}")
        sc["i32"].append(r)

    def op_affine(self, sc, depth, ind, lines):
        iv = self.v()
        lines.append(f"{ind}affine.for {iv} = 0 to {self.rng.randint(1, 16)} {{")
        lines += self.nested(sc, depth, ind, [("index", iv)])
        lines.append(f"{ind}}}")


def deep_module(depth: int) -> str:
    """scf.for and scf.if alternately nested `depth` levels deep, an arith op at every level."""
    lines, ind = ["func.func @deep(%a: i32, %n: index, %c: i1) -> i32 {", "  %c0 = arith.constant 0 : index",
                  "  %c1 = arith.constant 1 : index"], "  "
    for k in range(depth):
        lines.append(f"{ind}%x{k} = arith.addi %a, %a : i32")
        lines.append(f"{ind}scf.for %i{k} = %c0 to %n step %c1 {{" if k % 2 == 0 else f"{ind}scf.if %c {{")
        ind += "  "
    lines.append(f"{ind}memref.alloca_scope {{\n{ind}  %y = arith.muli %a, %a : i32\n{ind}}}")
    for _ in range(depth):
        ind = ind[:-2]
        lines.append(f"{ind}}}")
    lines += ["  return %a : i32", "}"]
    return "\n".join(lines)


def random_modules() -> list[str]:
    rng = random.Random(SEED)
    mods = []
    while len(mods) < N_RANDOM:
        text = ModuleGen(rng, max_depth=rng.randint(1, 4)).module()
        if text.count("\n") < MAX_LINES:
            mods.append(text)
    return mods + [deep_module(d) for d in (1, 7, 40)]


# ---------------------------------------------------------------------------------------------------------
# the given modules and a progressive lowering

MATMUL_MEMREF = """
func.func @matmul(%A: memref<13x7xf32>, %B: memref<7x5xf32>, %C: memref<13x5xf32>) {
  linalg.matmul ins(%A, %B : memref<13x7xf32>, memref<7x5xf32>) outs(%C : memref<13x5xf32>)
  return
}
"""
LOWERING = [  # (stage name, pipeline from the previous stage)
    ("linalg", None),
    ("scf", "builtin.module(convert-linalg-to-loops)"),
    ("cf", "builtin.module(convert-scf-to-cf)"),
    ("llvm", "builtin.module(finalize-memref-to-llvm, convert-arith-to-llvm, convert-cf-to-llvm, "
             "convert-func-to-llvm, reconcile-unrealized-casts)"),
]


def lowering_stages() -> list[tuple[str, str]]:
    text, out = MATMUL_MEMREF, []
    for name, pipeline in LOWERING:
        if pipeline:
            text = mlirrun.run_pipeline(text, pipeline)
        out.append((name, text))
    return out


EXAMPLES = Path(__file__).parent / "examples"


def examples() -> list[tuple[str, str]]:
    files = sorted(EXAMPLES.glob("*.mlir"))
    assert len(files) >= 6
    return [(f.name, f.read_text()) for f in files]


@pytest.fixture(scope="module")
def corpus():
    """Every module of the tests as (name, text, mlir-opt's op counts)."""
    named = examples() + [(f"lowering:{n}", t) for n, t in lowering_stages()]
    named += [(f"random#{i}", t) for i, t in enumerate(random_modules())]
    stats = opt_stats([t for _, t in named])
    return [(n, t, s) for (n, t), s in zip(named, stats)]


# ---------------------------------------------------------------------------------------------------------
# tests


@pytest.mark.points(1)
def test_load_verifies_and_raises_mlirs_diagnostics(lesson):
    iw = lesson.load("ir_walk.py")
    bad = [
        "func.func @f() -> i32 {\n  %0 = arith.constant 1 : i64\n  return %0 : i64\n}",
        "func.func @f() {\n  %0 = arith.constant 1 : i32\n}",
        "func.func @f(%a: i32) -> i32 {\n  %0 = arith.addi %1, %a : i32\n  %1 = arith.muli %a, %a : i32\n"
        "  return %0 : i32\n}",
        'func.func @f() {\n  "toy.print"() : () -> ()\n  return\n}',
        "func.func @f() {\n  %0 = arith.addi %x, %x : i32\n  return\n}",
        "func.func @f(%a: i32) {\n  cf.br ^bb1\n^bb1(%x: i32):\n  return\n}",
        "func.func @f(%c: i1, %a: i32) -> i32 {\n  %r = scf.if %c -> (i32) {\n    scf.yield %a : i32\n  }\n"
        "  return %r : i32\n}",
        "func.func @f() {\n  return\n  return\n}",
        "func.func @f(%a: i32) -> i32 {\n  %0 = arith.addi %0, %a : i32\n  return %0 : i32\n}",
    ]
    for text in bad:
        with pytest.raises(mlirrun.MlirError) as want:
            mlirrun.verify(text)
        message = re.search(r'error: "[^"]*":\d+:\d+: (.*)', str(want.value)).group(1)
        with ir.Context() as ctx, ir.Location.unknown():
            try:
                iw.load(text, ctx)
            except mlirrun.MlirError as e:
                assert message in str(e), f"MlirError raised, but without MLIR's diagnostic {message!r}: {e}"
            except ir.MLIRError as e:
                raise AssertionError(f"load() let the bindings' ir.MLIRError escape; raise MlirError: {e}") from e
            else:
                raise AssertionError(f"load() accepted invalid IR (MLIR says: {message}):\n{text}")
    with ir.Context() as ctx:
        for _, text in examples():
            assert isinstance(iw.load(text, ctx), ir.Module)


@pytest.mark.points(1)
def test_walk_is_mlirs_preorder_with_region_depths(lesson, corpus):
    iw = lesson.load("ir_walk.py")
    with ir.Context() as ctx:
        for name, text, _ in corpus:
            module = iw.load(text, ctx)
            got = [(op.name, d) for op, d in iw.walk(module.operation)]
            want = mlir_preorder(module)
            assert got == want, f"{name}: walk() differs from MLIR's pre-order walk{first_difference(got, want)}"
            first = module.body.operations[0]  # a typed OpView (FuncOp, GPUModuleOp), walked from depth 5
            got = [(op.name, d) for op, d in iw.walk(first, 5)]
            want = [(n, d + 4) for n, d in mlir_preorder(first)]
            assert got == want, f"{name}: walk(<{want[0][0]} OpView>, depth=5) gives {got[:4]}..., want {want[:4]}..."


@pytest.mark.points(2)
def test_op_counts_equal_mlir_opt_print_op_stats(lesson, corpus):
    iw = lesson.load("ir_walk.py")
    with ir.Context() as ctx:
        for name, text, want in corpus:
            got = iw.op_counts(iw.load(text, ctx))
            assert dict(got) == dict(want), (
                f"{name}: op counts differ from mlir-opt --print-op-stats: yours - mlir-opt = "
                f"{dict(Counter(got) - want)}, mlir-opt - yours = {dict(want - Counter(got))}\n{text[:600]}")


@pytest.mark.points(1)
def test_dialect_counts_and_progressive_lowering(lesson, corpus):
    iw = lesson.load("ir_walk.py")
    with ir.Context() as ctx:
        for name, text, want in corpus:
            got = iw.dialect_counts(iw.load(text, ctx))
            assert dict(got) == dict(by_dialect(want)), f"{name}: dialect counts {dict(got)}, mlir-opt: " \
                                                        f"{dict(by_dialect(want))}"
        stages = {n[len("lowering:"):]: set(iw.dialect_counts(iw.load(t, ctx)))
                  for n, t, _ in corpus if n.startswith("lowering:")}
    # the documented levels: each lowering step removes one dialect and (at the end) leaves only llvm
    assert stages["linalg"] == {"builtin", "func", "linalg", "arith"}
    assert stages["scf"] == {"builtin", "func", "scf", "memref", "arith"}
    assert stages["cf"] == {"builtin", "func", "cf", "memref", "arith"}
    assert stages["llvm"] == {"builtin", "llvm"}


@pytest.mark.points(1)
def test_summary_equals_mlirs_walk(lesson, corpus):
    iw = lesson.load("ir_walk.py")
    with ir.Context() as ctx:
        for name, text, _ in corpus:
            module = iw.load(text, ctx)
            got, want = iw.summary(module), mlir_summary(module)
            assert dict(got) == want, f"{name}: summary {dict(got)}, MLIR's walk gives {want}\n{text[:600]}"
        # the README's worked example
        matmul = dict(examples())["matmul_linalg.mlir"]
        assert iw.summary(iw.load(matmul, ctx)) == dict(operations=11, regions=4, blocks=4, values=13, max_depth=3)


@pytest.mark.points(1)
def test_generic_form_is_mlir_opts_and_round_trips(lesson, corpus):
    iw = lesson.load("ir_walk.py")
    picked = [c for c in corpus if not c[0].startswith("random#")] + [c for c in corpus if c[0].startswith("random#")][::8]
    generic = opt_generic([t for _, t, _ in picked])
    with ir.Context() as ctx:
        for (name, text, want), ref in zip(picked, generic):
            module = iw.load(text, ctx)
            printed = iw.to_generic(module)
            assert squash(printed) == squash(ref), (
                f"{name}: to_generic() is not MLIR's generic form (compare mlir-opt --mlir-print-op-generic):\n"
                f"{printed[:400]}")
            again = iw.load(printed, ctx)
            assert dict(iw.op_counts(again)) == dict(want), f"{name}: the printed text parses to other op counts"
            assert iw.summary(again) == iw.summary(module), f"{name}: the printed text parses to another shape"
