"""mlir-05: canonicalization patterns on arith and a greedy worklist driver, on IR held by xDSL.

The IR is upstream MLIR text (func + arith + memref) parsed by xDSL (`parse`), rewritten in place here and
printed back with `str(module)`; the tests hand the result to upstream MLIR (verifier, ExecutionEngine,
`canonicalize`). A pattern follows xDSL's protocol: `match_and_rewrite(op, rewriter)` returns nothing, and it
has "succeeded" exactly when it changed the IR through the rewriter (`rewriter.has_done_action`). Each pattern
class carries a `benefit`: the driver tries the patterns on an op from the highest benefit down.

Canonical form these patterns reach (integers = i8/i16/i32/i64, wrap-around two's complement like `arith`):
  - addi/muli of two integer constants is folded into one `arith.constant`
  - a commutative op (addi, muli, addf, mulf) with a constant lhs and a non-constant rhs has them swapped
  - x + 0 -> x, x * 1 -> x, x * 0 -> 0 on integers only (never on floats: NaN, inf and -0.0)
  - an op whose results are unused and that has no side effect is erased
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, memref
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.parser import Parser
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriterListener, RewritePattern
from xdsl.transforms.dead_code_elimination import is_trivially_dead
from xdsl.utils.worklist import Worklist

COMMUTATIVE = (arith.AddiOp, arith.MuliOp, arith.AddfOp, arith.MulfOp)


def parse(text: str) -> ModuleOp:
    """Upstream MLIR text (func, arith, memref) -> an xDSL module; `str(module)` prints it back."""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, memref.MemRef):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def is_constant(value: SSAValue) -> bool:
    return isinstance(value.owner, arith.ConstantOp)


def int_constant(value: SSAValue) -> int | None:
    """The integer held by `value` when an integer-typed `arith.constant` defines it, else None."""
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(value.type, IntegerType) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


def wrap(value: int, width: int) -> int:
    """`value` reduced modulo 2**width and returned as the signed two's-complement integer of that width."""
    ### HINT: arith.addi / arith.muli on iN compute modulo 2**N (no saturation, no UB without nsw/nuw flags)
    ### BEGIN SOLUTION
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value  # sign bit set -> negative
    ### END SOLUTION


class FoldConstants(RewritePattern):
    """addi/muli(c1, c2) -> arith.constant (c1 op c2 wrapped to the type's width)."""

    benefit = 3

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, (arith.AddiOp, arith.MuliOp)):
            return
        lhs, rhs = int_constant(op.lhs), int_constant(op.rhs)
        ### HINT: build the new constant with arith.ConstantOp(IntegerAttr(v, type)); replace op by it
        ### BEGIN SOLUTION
        if lhs is None or rhs is None:
            return
        typ = op.result.type
        value = lhs + rhs if isinstance(op, arith.AddiOp) else lhs * rhs
        rewriter.replace(op, arith.ConstantOp(IntegerAttr(wrap(value, typ.width.data), typ)))
        ### END SOLUTION


class ConstantsToRight(RewritePattern):
    """A commutative op with a constant lhs and a non-constant rhs gets its operands swapped."""

    benefit = 2

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, COMMUTATIVE):
            return
        ### HINT: modify in place (op.operands = ...), tell the rewriter (notify_op_modified); mind c1 + c2 on floats
        ### BEGIN SOLUTION
        if is_constant(op.lhs) and not is_constant(op.rhs):
            op.operands = (op.rhs, op.lhs)
            rewriter.notify_op_modified(op)
        ### END SOLUTION


class AddZero(RewritePattern):
    """x + 0 -> x on integers (a worked example: constants sit on the right after ConstantsToRight)."""

    benefit = 1

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if isinstance(op, arith.AddiOp) and int_constant(op.rhs) == 0:
            rewriter.replace(op, [], [op.lhs])  # no new op: the result is replaced by an existing value


class MulByConstant(RewritePattern):
    """x * 1 -> x and x * 0 -> 0 on integers."""

    benefit = 1

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        ### HINT: which of arith's multiplications may you touch? Reuse existing values rather than creating ops
        ### BEGIN SOLUTION
        if not isinstance(op, arith.MuliOp):
            return
        rhs = int_constant(op.rhs)
        if rhs == 1:
            rewriter.replace(op, [], [op.lhs])
        elif rhs == 0:
            rewriter.replace(op, [], [op.rhs])
        ### END SOLUTION


class EraseDead(RewritePattern):
    """An op whose results are all unused and that has no side effect is erased."""

    benefit = 4

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        ### HINT: stores, calls and terminators have effects beyond their results; xdsl's is_trivially_dead knows
        ### BEGIN SOLUTION
        if op.parent is not None and is_trivially_dead(op):
            rewriter.erase(op)
        ### END SOLUTION


PATTERNS: list[RewritePattern] = [FoldConstants(), ConstantsToRight(), AddZero(), MulByConstant(), EraseDead()]


@dataclass
class DriverResult:
    rewrites: int  # successful pattern applications
    converged: bool  # the worklist ran empty before max_rewrites was reached


def apply_greedily(root: Operation, patterns: Sequence[RewritePattern], *, max_rewrites: int = 10_000,
                   seed: int | None = None) -> DriverResult:
    """Rewrite the ops nested in `root` with `patterns` until none applies anywhere (a fixpoint).

    Each popped op is tried with the patterns by decreasing `benefit` (ties: list order); the first one that
    changes the IR counts as one rewrite and ends the op's turn. The worklist starts with every op nested in
    `root` in program order, shuffled by random.Random(seed) when `seed` is given. After a rewrite, every op the
    change may have enabled is (re)visited: new ops, modified ops (users of replaced values) and the defining
    ops of an erased op's operands; an erased op is never visited again. Stops with converged=False once
    `max_rewrites` rewrites are done and work remains."""
    ordered = sorted(patterns, key=lambda p: -getattr(p, "benefit", 1))  # stable: ties keep list order
    initial = [op for op in root.walk() if op is not root]
    if seed is not None:
        random.Random(seed).shuffle(initial)
    worklist: Worklist[Operation] = Worklist()  # LIFO stack with set semantics: push, pop, remove, bool()
    for op in reversed(initial):  # the first op of `initial` is popped first
        worklist.push(op)
    ### HINT: PatternRewriterListener(operation_{insertion,modification,removal}_handler=[...]); extend_from_listener
    ### HINT: the removal handler runs before the op is erased, so its operands are still attached
    ### HINT: a fresh PatternRewriter(op) per attempt; rewriter.has_done_action says whether the pattern succeeded
    ### BEGIN SOLUTION
    def erased(op: Operation) -> None:
        worklist.remove(op)
        for operand in op.operands:  # its operands lost a use: their definitions may now be dead
            if isinstance(operand.owner, Operation):
                worklist.push(operand.owner)

    listener = PatternRewriterListener(operation_insertion_handler=[worklist.push],
                                       operation_modification_handler=[worklist.push],
                                       operation_removal_handler=[erased])
    rewrites = 0
    while worklist:
        if rewrites >= max_rewrites:
            return DriverResult(rewrites, converged=False)
        op = worklist.pop()
        for pattern in ordered:
            rewriter = PatternRewriter(op)
            rewriter.extend_from_listener(listener)
            pattern.match_and_rewrite(op, rewriter)
            if rewriter.has_done_action:
                rewrites += 1
                break
    return DriverResult(rewrites, converged=True)
    ### END SOLUTION
