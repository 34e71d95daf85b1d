"""mlir-07 tests. The oracle is MLIR itself plus numpy: the learner's schedule and stages run through the real pass
manager (LLVM 22); the IR after each stage is inspected with the MLIR bindings (op walk, loop bounds read from
their arith.constant operands); the final LLVM-dialect module is JIT-compiled by the ExecutionEngine and its result
compared with numpy in float64.

Tolerance: C = relu(A @ B + bias) in float32 with K products summed per element. The standard dot-product error
bound is |c - c_exact| <= gamma_(K+1) * (|A| @ |B| + |bias|)_ij with gamma_n ~= n * 2^-24; we allow 4x that, i.e.
a relative error of a few 1e-6 for K <= 70, far below any wrong-index bug (which moves whole products).
"""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_hpccourse.runtimes import mlirrun

TILES = [(8, 16, 4), (3, 5, 7), (16, 32, 8), (64, 64, 64)]


@pytest.fixture
def low(lesson):
    return lesson.load("lower.py")


def check_mlp(low, jit, m, n, k, rng, what):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = low.mlp(a, b, bias, jit)
    a64, b64, bias64 = a.astype(np.float64), b.astype(np.float64), bias.astype(np.float64)
    want = np.maximum(a64 @ b64 + bias64, 0.0)
    tol = 4 * (k + 2) * 2.0**-24 * (np.abs(a64) @ np.abs(b64) + np.abs(bias64)) + 1e-30
    bad = ~(np.abs(got - want) <= tol)  # NaN (an element never written) counts as bad
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise AssertionError(f"{what}: C[{i},{j}] = {got[i, j]!r}, numpy gives {want[i, j]:.7g} "
                             f"({int(bad.sum())} of {m * n} elements wrong; C was poisoned with NaN before the call)")


# ------------------------------------------------------------------------------------------ IR inspection helpers


def walk(ir_text):
    """[(op name, Operation)] in pre-order; call inside `with ir.Context()`."""
    from mlir import ir

    module = mlirrun.parse(ir_text, ir.Context.current)
    found = []

    def visit(op):
        found.append((op.name, op))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return module, found


def op_counts(ir_text):
    from mlir import ir

    with ir.Context():
        _, found = walk(ir_text)
        return Counter(name for name, _ in found)


def constant(value):
    """The integer an index value is defined as by arith.constant, else None."""
    from mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    return ir.IntegerAttr(owner.attributes["value"]).value


def matmul_nests(ir_text):
    """For each linalg.matmul: (its enclosing scf.for loops outer->inner as (lb, ub, step), operands are tensors)."""
    from mlir import ir

    with ir.Context():
        _module, found = walk(ir_text)
        nests = []
        for name, op in found:
            if name != "linalg.matmul":
                continue
            loops, parent = [], op.parent
            while parent is not None and parent.name != "builtin.module":
                if parent.name == "scf.for":
                    lb, ub, step = (constant(parent.operands[i]) for i in range(3))
                    loops.append((lb, ub, step))
                parent = parent.parent
            on_tensors = all(isinstance(v.type, ir.RankedTensorType) for v in op.operands)
            nests.append((loops[::-1], on_tensors))
        return nests


_LOWERED = {}  # (source of lower.py, payload, tiles, order) -> IR per stage: the same lowering serves several tests


def lowered(low, ir_text, tiles, order=None):
    key = (Path(low.__file__).read_text(), ir_text, tiles, tuple(order or ()))
    if key not in _LOWERED:
        _LOWERED[key] = low.lower(ir_text, tiles, order=order)
    return _LOWERED[key]


def lower_or_fail(low, ir_text, tiles, what):
    try:
        return lowered(low, ir_text, tiles)
    except mlirrun.MlirError as e:
        raise AssertionError(f"{what}: the pipeline failed:\n{e}") from None


# ---------------------------------------------------------------------------------------------------- the tests


@pytest.mark.points(2)
def test_matches_numpy_on_random_shapes(low):
    """One module with dynamic sizes per tile choice, run on 120 random shapes each plus the edge shapes:
    1x1x1, exact multiples of the tile, shapes smaller than one tile, a single row or column."""
    rng = np.random.default_rng(2025)
    for tiles in TILES:
        irs = lower_or_fail(low, low.payload(), tiles, f"tiles {tiles}, dynamic shapes")
        jit = low.Jit(irs["llvm"])
        tm, tn, tk = tiles
        edges = [(1, 1, 1), (tm, tn, tk), (2 * tm, 3 * tn, 2 * tk), (tm + 1, tn - 1 or 1, tk + 1), (1, 70, 1),
                 (70, 1, 70), (max(tm - 1, 1), max(tn - 1, 1), max(tk - 1, 1))]
        shapes = edges + [tuple(int(x) for x in rng.integers(1, 71, 3)) for _ in range(120)]
        for m, n, k in shapes:
            check_mlp(low, jit, m, n, k, rng, f"tiles {tiles}, M,N,K = {m},{n},{k} (dynamic shapes)")


@pytest.mark.points(1)
def test_matches_numpy_on_static_shapes(low):
    """The worked example 37x53x29 (no size a multiple of a tile), an exact multiple, and 1x1x1, compiled with
    static shapes (the tile loops then have constant bounds and partial tiles come from affine.min)."""
    rng = np.random.default_rng(7)
    for (m, n, k), tiles in [((37, 53, 29), (8, 16, 4)), ((16, 32, 8), (8, 16, 4)), ((1, 1, 1), (8, 16, 4)),
                             ((37, 53, 29), (1, 1, 1)), ((48, 20, 33), (16, 32, 8))]:
        irs = lower_or_fail(low, low.payload(m, n, k), tiles, f"{m}x{n}x{k}, tiles {tiles}")
        jit = low.Jit(irs["llvm"])
        for _ in range(3):
            check_mlp(low, jit, m, n, k, rng, f"static {m}x{n}x{k}, tiles {tiles}")


@pytest.mark.points(1)
def test_tile_stage_holds_the_tile_loops_on_tensors(low):
    """After `tile`: still tensors, no transform op left in the payload, and the one linalg.matmul sits in three
    scf.for loops 0..M step tm, 0..N step tn, 0..K step tk (any nesting order)."""
    m, n, k = 37, 53, 29
    for tiles in [(8, 16, 4), (4, 8, 2), (16, 32, 8), (5, 7, 3), (2, 9, 11)]:
        ir_text = lower_or_fail(low, low.payload(m, n, k), tiles, f"tiles {tiles}")["tile"]
        counts = op_counts(ir_text)
        leftover = sorted(name for name in counts if name.startswith("transform."))
        assert not leftover, f"tiles {tiles}: transform ops left in the payload after `tile`: {leftover}"
        nests = matmul_nests(ir_text)
        assert len(nests) == 1, f"tiles {tiles}: expected one linalg.matmul after tiling, found {len(nests)}"
        loops, on_tensors = nests[0]
        assert on_tensors, f"tiles {tiles}: after `tile` the matmul should still work on tensors (tile before bufferizing)"
        want = sorted([(0, m, tiles[0]), (0, n, tiles[1]), (0, k, tiles[2])])
        assert sorted(loops) == want, (
            f"tiles {tiles} for (m, n, k) = ({m}, {n}, {k}): the matmul's enclosing scf.for loops are "
            f"{loops} as (lb, ub, step); expected {want}")


@pytest.mark.points(1)
def test_each_stage_leaves_what_the_next_expects(low):
    """bufferize: no tensor left; loops: no linalg op; cf: no scf / affine loop; llvm: only the llvm dialect."""
    for ir_text, what in [(low.payload(37, 53, 29), "static 37x53x29"), (low.payload(), "dynamic sizes")]:
        irs = lower_or_fail(low, ir_text, (8, 16, 4), what)
        assert list(irs) == list(low.STAGES)
        counts = {stage: op_counts(text) for stage, text in irs.items()}
        assert "tensor<" not in irs["bufferize"], f"{what}: tensor types left after `bufferize`"
        left = {
            "loops": [o for o in counts["loops"] if o.startswith("linalg.")],
            "cf": [o for o in counts["cf"] if o.startswith("scf.") or o in ("affine.for", "affine.parallel", "affine.if")],
            "llvm": [o for o in counts["llvm"] if not o.startswith("llvm.") and o != "builtin.module"],
        }
        for stage, ops in left.items():
            assert not ops, f"{what}: after `{stage}` these ops are still there: {sorted(ops)}"


@pytest.mark.points(1)
def test_bufferization_is_in_place(low):
    """Destination-passing style: tensor.empty becomes C itself, every linalg op writes into (a view of) C.
    No memref.alloc / alloca after `bufferize`: no temporary buffer, no copy of the result."""
    for ir_text, what in [(low.payload(37, 53, 29), "static 37x53x29"), (low.payload(), "dynamic sizes")]:
        irs = lower_or_fail(low, ir_text, (8, 16, 4), what)
        counts = op_counts(irs["bufferize"])
        allocs = {o: counts[o] for o in ("memref.alloc", "memref.alloca") if counts[o]}
        assert not allocs, f"{what}: `bufferize` allocated {allocs}: the result is not computed in place in C"


@pytest.mark.points(1)
def test_wrong_orders_fail_with_mlirs_own_error(low):
    """Lowering to LLVM before bufferizing, or scf -> cf before linalg -> loops, is rejected by MLIR (a verifier
    error in a pass, or the LLVM translation in the ExecutionEngine); the stages in their order are not."""
    ir_text = low.payload(37, 53, 29)
    irs = lower_or_fail(low, ir_text, (8, 16, 4), "the stages in order")
    low.Jit(irs["llvm"])  # must not raise
    for order in (["tile", "llvm", "bufferize", "loops", "cf"], ["tile", "bufferize", "cf", "loops", "llvm"]):
        with pytest.raises(mlirrun.MlirError, match=r"error: "):  # MLIR's diagnostic, e.g. "expected add/mul op in the body"
            low.Jit(lowered(low, ir_text, (8, 16, 4), order=order)["llvm"])
