"""mlir-05 tests: the learner's canonicalization patterns and greedy driver, judged by upstream MLIR 22.

- semantics: random arith DAGs (fixed seed; i8..i64 and f32/f64, dead code, stores, opaque calls) are rewritten,
  verified by MLIR's verifier and JIT-executed before and after by MLIR's ExecutionEngine on inputs that include
  NaN, +-inf, -0.0 and the integer extremes; results and memory must be bit-identical (NaN == NaN);
- folding: every folded constant equals what MLIR's own arith folder produces (wrap-around at the type's width);
- fixpoint: the driver reports convergence, a second run rewrites nothing, xDSL's PatternRewriteWalker with the
  same patterns finds nothing, no op matching the contract is left, and shuffled worklist orders give the same ops;
- upstream: on integer DAGs MLIR's `canonicalize` leaves exactly the non-constant ops the learner left (DAGs where
  MLIR's extra reassociation patterns apply are skipped, see `upstream_does_more`);
- driver alone: checked with patterns that are not the learner's (toy patterns, xDSL's own arith patterns):
  benefit order, the rewrite count, the rewrite limit, erased ops never revisited, and linear work on long chains.
"""

from __future__ import annotations

import collections
import random

import pytest
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import StringAttr
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.transforms.canonicalization_patterns.arith import (
    SignlessIntegerBinaryOperationConstantProp,
    SignlessIntegerBinaryOperationZeroOrUnitRight,
)
from xdsl.transforms.dead_code_elimination import RemoveUnusedOperations, is_trivially_dead

from pytest_hpccourse.runtimes import mlirrun

COMMUTATIVE = (arith.AddiOp, arith.MuliOp, arith.AddfOp, arith.MulfOp)


@pytest.fixture
def canon(lesson):
    return lesson.load("canon.py")


@pytest.fixture
def dags(lesson):
    return lesson.load("dags.py")


def func_named(module, name):
    return next(op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == name)


def rewrite(canon, dags, dag, seed=None):
    """Parse the DAG's module, run the learner's driver with the learner's patterns; (module, result)."""
    module = canon.parse(dags.dag_module(dag))
    result = canon.apply_greedily(module, canon.PATTERNS, seed=seed)
    assert result.converged, f"@{dag.name}: the driver did not converge ({result.rewrites} rewrites):\n{dag.text}"
    return module, result


def upstream_verify(texts, dags, typs):
    """All functions in one module through MLIR's verifier; on failure, the first failing function alone."""
    decls = [dags.sink_decl(t) for t in sorted(set(typs))]
    try:
        mlirrun.verify("module {\n" + "\n".join(decls + texts) + "\n}")
    except mlirrun.MlirError:
        for text in texts:
            try:
                mlirrun.verify("module {\n" + "\n".join(decls + [text]) + "\n}")
            except mlirrun.MlirError as e:
                raise AssertionError(f"MLIR rejects the rewritten IR:\n{e}\n{text}") from None
        raise


def is_const(value):
    return isinstance(value.owner, arith.ConstantOp)


def int_const(value):
    op = value.owner
    if isinstance(op, arith.ConstantOp) and op.result.type.name == "integer_type":
        return op.value.value.data
    return None


def leftovers(module):
    """Ops the contract says must not survive (the spec, written as checks, not as rewrites)."""
    found = []
    for op in module.walk():
        if isinstance(op, (arith.AddiOp, arith.MuliOp)) and int_const(op.lhs) is not None \
                and int_const(op.rhs) is not None:
            found.append(f"{op.name} of two integer constants (fold it)")
        elif isinstance(op, COMMUTATIVE) and is_const(op.lhs) and not is_const(op.rhs):
            found.append(f"{op.name} with its constant on the left")
        elif isinstance(op, arith.AddiOp) and int_const(op.rhs) == 0:
            found.append("x + 0 on integers")
        elif isinstance(op, arith.MuliOp) and int_const(op.rhs) in (0, 1):
            found.append(f"x * {int_const(op.rhs)} on integers")
        if op.parent is not None and is_trivially_dead(op):
            found.append(f"dead {op.name}")
    return found


def upstream_functions(text):
    """Parse MLIR's own output with MLIR's bindings: {function name: [(op name, attributes dict)]}."""
    from mlir import ir

    out = {}
    with ir.Context() as ctx:
        module = mlirrun.parse(text, ctx)
        for f in module.body.operations:
            ops = []
            if len(f.regions) and len(f.regions[0].blocks):
                for op in f.regions[0].blocks[0].operations:
                    value = op.attributes["value"] if "value" in op.attributes else None
                    ops.append((op.name, value.value if isinstance(value, ir.IntegerAttr) else None))
            out[ir.StringAttr(f.attributes["sym_name"]).value] = ops
    return out


def upstream_non_constant_ops(ops):
    return collections.Counter(name for name, _ in ops if name != "arith.constant")


def non_constant_ops(module_or_func):
    return collections.Counter(op.name for op in module_or_func.walk()
                               if op.name not in ("arith.constant", "builtin.module", "func.func"))


def random_dags(dags, seed, n, typs=None):
    rng = random.Random(seed)
    return [dags.random_dag(rng, f"f{seed}_{i}", typ=rng.choice(typs) if typs else None) for i in range(n)]


# ---------------------------------------------------------------------------------------------------------
# The whole pipeline on random DAGs


@pytest.mark.points(2)
def test_random_dags_verify_and_compute_the_same(canon, dags):
    cases = random_dags(dags, 505, 30, ["i8", "i16", "i32", "i64"]) + \
        random_dags(dags, 506, 14, ["f32", "f64"])
    pairs, texts = [], []
    for dag in cases:
        module, _ = rewrite(canon, dags, dag)
        module.verify()
        after = str(func_named(module, dag.name))
        pairs.append((dag, dag.text, after))
        texts.append(after)
    upstream_verify(texts, dags, [d.typ for d in cases])
    bad = dags.run(pairs)
    assert not bad, f"{len(bad)} of {len(cases)} DAGs compute differently after rewriting; first:\n{bad[0]}"


@pytest.mark.points(1)
def test_floats_keep_nan_inf_and_signed_zero(canon, dags):
    """x*0, 0*x, x+0 and x+(-0.0) on floats must survive (NaN*0 = NaN, inf*0 = NaN, -3*0 = -0, -0+0 = +0);
    float constants never fold, and c1 + c2 on floats must not make the driver loop."""
    bodies = {
        "mul0": ["%z = arith.constant 0.000000e+00 : {t}", "%r = arith.mulf %x0, %z : {t}"],
        "mul0l": ["%z = arith.constant 0.000000e+00 : {t}", "%r = arith.mulf %z, %x0 : {t}"],
        "mulm0": ["%z = arith.constant -0.000000e+00 : {t}", "%r = arith.mulf %x0, %z : {t}"],
        "add0": ["%z = arith.constant 0.000000e+00 : {t}", "%r = arith.addf %x0, %z : {t}"],
        "add0l": ["%z = arith.constant 0.000000e+00 : {t}", "%r = arith.addf %z, %x0 : {t}"],
        "cc": ["%a = arith.constant 2.000000e+00 : {t}", "%b = arith.constant 0.000000e+00 : {t}",
               "%r = arith.addf %a, %b : {t}"],
        "ccm": ["%a = arith.constant 0.000000e+00 : {t}", "%b = arith.constant 3.000000e+00 : {t}",
                "%s = arith.mulf %a, %b : {t}", "%r = arith.mulf %s, %x0 : {t}"],
        "mul1": ["%o = arith.constant 1.000000e+00 : {t}", "%r = arith.mulf %x0, %o : {t}"],
    }
    pairs, texts = [], []
    for t in ("f32", "f64"):
        for key, lines in bodies.items():
            name = f"{key}_{t}"
            dag = dags.Dag(name, t, 1, dags.func_text(name, t, 1, [s.format(t=t) for s in lines], "%r"))
            module, _ = rewrite(canon, dags, dag)
            after = str(func_named(module, name))
            pairs.append((dag, dag.text, after))
            texts.append(after)
    upstream_verify(texts, dags, ["f32", "f64"])
    bad = dags.run(pairs, rows=24, seed=3)
    assert not bad, "a float rewrite changed the result (floats: only x*1 -> x is exact):\n" + bad[0]


@pytest.mark.points(1)
def test_folding_equals_mlirs_folder(canon, dags):
    """c1 + c2 and c1 * c2 at the extremes of i8..i64: the folded constant equals arith's folder (mod 2^w)."""
    for w in (8, 16, 32, 64):  # wrap() itself: the SIGNED value, exactly at the sign boundary too
        half, full = 1 << (w - 1), 1 << w
        for v in (half, half - 1, half + 1, -half, -half - 1, full, full - 1, -1, 0, 3 * full + 5, -full - 7,
                  half * half + half):
            want = int.from_bytes((v % full).to_bytes(w // 8, "little"), "little", signed=True)
            got = canon.wrap(v, w)
            assert got == want, f"wrap({v}, {w}) = {got}: the signed {w}-bit two's-complement value is {want}"
    rng = random.Random(11)
    funcs, want_names = [], []
    for t, w in dags.INT_WIDTHS.items():
        lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
        special = [lo, hi, -1, 1, 0, 2, lo + 1, hi - 1, 1 << (w // 2), -(1 << (w // 2)) - 1]
        for k in range(16):
            a = special[k % len(special)] if k < 2 * len(special) else rng.randint(lo, hi)
            b = rng.choice(special) if k % 2 else rng.randint(lo, hi)
            for op in ("addi", "muli"):
                name = f"c_{op}_{t}_{k}"
                lines = [f"%a = arith.constant {a} : {t}", f"%b = arith.constant {b} : {t}",
                         f"%r = arith.{op} %a, %b : {t}"]
                funcs.append(dags.Dag(name, t, 0, dags.func_text(name, t, 0, lines, "%r")))
                want_names.append(name)
    module = canon.parse("module {\n" + "\n".join(d.text for d in funcs) + "\n}")
    assert canon.apply_greedily(module, canon.PATTERNS).converged
    mine = {}
    for d in funcs:
        f = func_named(module, d.name)
        ops = [op for op in f.walk() if op is not f]
        assert [op.name for op in ops] == ["arith.constant", "func.return"], \
            f"@{d.name} should fold to one constant:\n{d.text}\n--- became:\n{f}"
        mine[d.name] = (ops[0].value.value.data, dags.INT_WIDTHS[d.typ])
    mlirrun.verify(str(module))
    theirs = upstream_functions(mlirrun.run_pipeline("\n".join(d.text for d in funcs), "builtin.module(canonicalize)"))
    for name in want_names:
        (want,) = [v for op, v in theirs[name] if op == "arith.constant"]
        value, width = mine[name]
        assert (value - want) % (1 << width) == 0, f"@{name}: you fold to {value}, MLIR's arith folder to {want}"


# ---------------------------------------------------------------------------------------------------------
# Fixpoint, order independence, and what upstream canonicalize would still do


@pytest.mark.points(1)
def test_fixpoint_and_worklist_order_independence(canon, dags):
    for dag in random_dags(dags, 77, 24):
        base = canon.parse(dags.dag_module(dag))
        shapes = set()
        for seed in (None, 1, 2, 3):
            module = base.clone()
            result = canon.apply_greedily(module, canon.PATTERNS, seed=seed)
            assert result.converged, f"@{dag.name} (seed {seed}) did not converge:\n{dag.text}"
            left = leftovers(module)
            assert not left, f"@{dag.name} (seed {seed}) is not canonical: {left}\n{func_named(module, dag.name)}"
            again = canon.apply_greedily(module, canon.PATTERNS)
            assert again.rewrites == 0 and again.converged, \
                f"@{dag.name}: a second run still rewrote {again.rewrites} times (not a fixpoint)"
            ordered = sorted(canon.PATTERNS, key=lambda p: -getattr(p, "benefit", 1))
            walker = PatternRewriteWalker(GreedyRewritePatternApplier(ordered, dce_enabled=False))
            assert not walker.rewrite_module(module), \
                f"@{dag.name}: xDSL's own greedy walker still applies your patterns to your result"
            shapes.add(tuple(sorted(non_constant_ops(module).items())))
        assert len(shapes) == 1, f"@{dag.name}: the result depends on the worklist order: {shapes}\n{dag.text}"


def upstream_does_more(f):
    """Sites where MLIR's arith canonicalization goes beyond this lesson's contract: reassociation
    (addi(addi(x, c0), c1) -> addi(x, c0 + c1), same for muli) and addi(x, muli(y, -1)) -> subi(x, y)."""
    for op in f.walk():
        if isinstance(op, (arith.AddiOp, arith.MuliOp)) and int_const(op.rhs) is not None \
                and type(op.lhs.owner) is type(op) and int_const(op.lhs.owner.rhs) is not None:
            return True
        if isinstance(op, arith.AddiOp) and any(isinstance(v.owner, arith.MuliOp) and int_const(v.owner.rhs) == -1
                                                for v in op.operands):
            return True
    return False


@pytest.mark.points(1)
def test_upstream_canonicalize_finds_nothing_more(canon, dags):
    cases = random_dags(dags, 2024, 40, ["i8", "i16", "i32", "i64"])
    mine = []
    for dag in cases:
        module, _ = rewrite(canon, dags, dag)
        mine.append(func_named(module, dag.name))
    decls = [dags.sink_decl(t) for t in dags.INT_WIDTHS]
    before = "module {\n" + "\n".join(decls + [d.text for d in cases]) + "\n}"
    after = "module {\n" + "\n".join(decls + [str(f) for f in mine]) + "\n}"
    on_input = upstream_functions(mlirrun.run_pipeline(before, "builtin.module(canonicalize)"))
    on_mine = upstream_functions(mlirrun.run_pipeline(after, "builtin.module(canonicalize)"))
    compared = 0
    for dag, f in zip(cases, mine):
        if upstream_does_more(f):
            continue
        compared += 1
        got = non_constant_ops(f)
        for label, theirs in (("on the input", on_input), ("on your output", on_mine)):
            want = upstream_non_constant_ops(theirs[dag.name])
            assert got == want, (f"@{dag.name}: MLIR's canonicalize {label} leaves {dict(want)}, you leave "
                                 f"{dict(got)}\n{dag.text}\n--- yours:\n{f}")
    assert compared >= len(cases) // 2


@pytest.mark.points(1)
def test_worked_example(canon):
    """The README's example, op by op."""
    src = """func.func @ex(%m: memref<4xi8>, %x: i8, %y: f32) -> (i8, f32) {
  %c0 = arith.constant 0 : i8
  %c1 = arith.constant 1 : i8
  %c100 = arith.constant 100 : i8
  %a = arith.addi %c100, %c100 : i8
  %b = arith.muli %c1, %x : i8
  %c = arith.addi %b, %c0 : i8
  %d = arith.muli %c, %c0 : i8
  %e = arith.addi %d, %a : i8
  %k = arith.constant 0 : index
  memref.store %c, %m[%k] : memref<4xi8>
  %dead = arith.muli %x, %x : i8
  %fz = arith.constant 0.000000e+00 : f32
  %f = arith.mulf %y, %fz : f32
  return %e, %f : i8, f32
}"""
    module = canon.parse(src)
    result = canon.apply_greedily(module, canon.PATTERNS)
    assert result.converged
    f = func_named(module, "ex")
    ops = [op for op in f.walk() if op is not f]
    names = collections.Counter(op.name for op in ops)
    assert names == {"arith.constant": 3, "memref.store": 1, "arith.mulf": 1, "func.return": 1}, f"got:\n{f}"
    ret = ops[-1]
    assert int_const(ret.operands[0]) in (-56, 200), f"100 + 100 in i8 wraps to -56:\n{f}"
    store = next(op for op in ops if op.name == "memref.store")
    assert store.operands[0] is f.body.block.args[1], f"the store must now store %x itself:\n{f}"
    mlirrun.verify(str(module))


# ---------------------------------------------------------------------------------------------------------
# The driver alone, with patterns that are not the learner's


class Tag(RewritePattern):
    """Toy pattern: replaces an un-tagged arith.addi by `arith.addi` tagged with this pattern's name."""

    def __init__(self, label, benefit):
        self.label, self.benefit = label, benefit

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if isinstance(op, arith.AddiOp) and "tag" not in op.attributes:
            new = arith.AddiOp(op.lhs, op.rhs)
            new.attributes["tag"] = StringAttr(self.label)
            rewriter.replace(op, new)


class PingPong(RewritePattern):
    """Swaps the operands of every addi, forever: a pattern that never reaches a fixpoint."""

    benefit = 1

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if isinstance(op, arith.AddiOp):
            op.operands = (op.rhs, op.lhs)
            rewriter.notify_op_modified(op)


class Counting(RewritePattern):
    """Wraps a pattern: counts the attempts and fails the test if an erased (detached) op is visited."""

    def __init__(self, inner, benefit, log):
        self.inner, self.benefit, self.log = inner, benefit, log

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        assert op.parent is not None, f"the driver visited an erased {op.name}"
        self.log.append(op)
        self.inner.match_and_rewrite(op, rewriter)


def xdsl_patterns(log):
    """xDSL's own arith canonicalizations and DCE: an independent implementation of the integer rules."""
    return [Counting(RemoveUnusedOperations(), 3, log),
            Counting(SignlessIntegerBinaryOperationConstantProp(), 2, log),
            Counting(SignlessIntegerBinaryOperationZeroOrUnitRight(), 1, log)]


class Log(RewritePattern):
    """Never rewrites: records the order in which the driver visits the ops."""

    def __init__(self, log):
        self.log, self.benefit = log, 1

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        self.log.append(op)


class KillNext(RewritePattern):
    """On an op tagged `killer`: erases the op right after it (an op still waiting on the worklist)."""

    benefit = 2

    def match_and_rewrite(self, op, rewriter: PatternRewriter, /):
        if "killer" in op.attributes and isinstance(op.next_op, arith.MuliOp):
            rewriter.erase(op.next_op)


@pytest.mark.points(1)
def test_driver_benefit_count_and_limit(canon):
    # the initial worklist: program order, or random.Random(seed)'s shuffle of it; nothing else reorders it
    src = """func.func @f(%x: i32, %y: i32) -> i32 {
  %a = arith.addi %x, %y : i32
  %b = arith.muli %a, %y : i32
  %c = arith.addi %b, %x : i32
  %d = arith.muli %c, %c : i32
  return %d : i32
}"""
    for seed in (None, 7, 8):
        module = canon.parse(src)
        initial = [op for op in module.walk() if op is not module]
        if seed is not None:
            random.Random(seed).shuffle(initial)
        for _ in range(2):  # the same seed twice: the same order
            log = []
            result = canon.apply_greedily(module, [Log(log)], seed=seed)
            assert (result.rewrites, result.converged) == (0, True), f"nothing applies: 0 rewrites, got {result}"
            assert [op.name for op in log] == [op.name for op in initial] and all(
                a is b for a, b in zip(log, initial)), (
                f"seed {seed}: visit order {[op.name for op in log]}, expected "
                f"{[op.name for op in initial]} (program order, shuffled by random.Random(seed))")
    # an op erased while it still waits on the worklist is never visited
    killer = """func.func @k(%x: i32) -> i32 {
  %a = arith.addi %x, %x {killer} : i32
  %b = arith.muli %x, %x : i32
  return %a : i32
}"""
    log = []
    module = canon.parse(killer)
    result = canon.apply_greedily(module, [KillNext(), Counting(Log([]), 1, log)])
    assert (result.rewrites, result.converged) == (1, True), f"1 rewrite expected, got {result}"
    assert not any(isinstance(op, arith.MuliOp) for op in module.walk())

    src = """func.func @f(%x: i32, %y: i32) -> i32 {
  %a = arith.addi %x, %y : i32
  %b = arith.addi %a, %y : i32
  %c = arith.addi %b, %x : i32
  return %c : i32
}"""
    module = canon.parse(src)
    result = canon.apply_greedily(module, [Tag("low", 1), Tag("high", 5), Tag("mid", 3)])
    tags = [op.attributes["tag"].data for op in module.walk() if isinstance(op, arith.AddiOp)]
    assert tags == ["high"] * 3, f"the highest-benefit pattern must win on every op, got {tags}"
    assert (result.rewrites, result.converged) == (3, True), f"3 rewrites expected, got {result}"

    module = canon.parse(src)
    result = canon.apply_greedily(module, [Tag("first", 2), Tag("second", 2)])
    tags = [op.attributes["tag"].data for op in module.walk() if isinstance(op, arith.AddiOp)]
    assert tags == ["first"] * 3, f"equal benefits: the pattern listed first wins, got {tags}"

    module = canon.parse(src)
    result = canon.apply_greedily(module, [PingPong()], max_rewrites=40)
    assert not result.converged and result.rewrites == 40, \
        f"a pattern that always applies must stop at max_rewrites=40 with converged=False, got {result}"

    chain = ["%c0 = arith.constant 0 : i16"] + [f"%v{i + 1} = arith.addi %v{i}, %c0 : i16" for i in range(30)]
    text = "func.func @g(%v0: i16) -> i16 {\n" + "\n".join(chain) + "\nreturn %v30 : i16\n}"
    log = []
    module = canon.parse(text)
    result = canon.apply_greedily(module, xdsl_patterns(log))
    # 30 x + 0 -> x, then the zero constant is dead: exactly 31 successful rewrites
    assert (result.rewrites, result.converged) == (31, True), f"31 rewrites expected, got {result}"


@pytest.mark.points(1)
def test_driver_revisits_what_a_rewrite_enables(canon, dags):
    """With xDSL's own patterns: any initial order reaches xDSL's fixpoint; erased ops are never visited; and
    the work is linear on two chains that a re-sweeping driver needs one full pass per element for."""
    for dag in random_dags(dags, 9, 24, ["i8", "i32", "i64"]):
        base = canon.parse(dags.dag_module(dag))
        for seed in (None, 4, 5):
            module, log = base.clone(), []
            result = canon.apply_greedily(module, xdsl_patterns(log), seed=seed)
            assert result.converged
            walker = PatternRewriteWalker(GreedyRewritePatternApplier(xdsl_patterns([])))
            assert not walker.rewrite_module(module), (
                f"@{dag.name} (seed {seed}): ops the rewrites enabled were not revisited:\n"
                f"{func_named(module, dag.name)}")
    n = 120
    dead = [f"%d{i + 1} = arith.muli %d{i}, %d{i} : i32" for i in range(n)]  # unused: erasing enables its operand
    zero = [f"%z{i + 1} = arith.muli %z{i}, %x : i32" for i in range(n)]  # %z0 = x*0: zero flows forward
    text = ("func.func @chains(%x: i32) -> i32 {\n%c0 = arith.constant 0 : i32\n%d0 = arith.addi %x, %x : i32\n"
            "%z0 = arith.muli %x, %c0 : i32\n" + "\n".join(dead + zero) + f"\nreturn %z{n} : i32\n}}")
    for seed in (None, 6):
        log = []
        module = canon.parse(text)
        ops = sum(1 for _ in module.walk())
        result = canon.apply_greedily(module, xdsl_patterns(log), seed=seed)
        assert result.converged and not leftovers(module)
        bound = 3 * 4 * (ops + result.rewrites)
        assert len(log) <= bound, (f"{len(log)} pattern attempts for {ops} ops and {result.rewrites} rewrites "
                                   f"(bound {bound}): revisit only what a rewrite touched, not the whole IR")
