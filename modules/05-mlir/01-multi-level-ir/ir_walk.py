"""mlir-01: parse, verify, walk and print MLIR's IR through the upstream Python bindings (`mlir.ir`, LLVM 22).

The IR is a tree with three kinds of node (mlir/docs/LangRef.md, "High-Level Structure"):

    Operation --has--> Region* --has--> Block* --has--> Operation*   (and so on, as deep as you like)

An operation has operands, results, attributes, successors and 0..n regions; a region is a list of blocks;
a block has arguments and a list of operations, the last one usually a terminator. `builtin.module` is just
an operation whose one region holds one block. Everything below walks that tree.

Bindings cheat sheet (LLVM 22):
    module = ir.Module.parse(text, context=ctx)     # ir.MLIRError on invalid IR
    module.operation                                 # the builtin.module op (an ir.Operation)
    op.regions -> Region*, region.blocks -> Block*, block.operations -> OpView*, block.arguments -> Value*
    op.results, op.operands, op.name ("arith.addi"), op.get_asm(print_generic_op_form=True)
    opview.operation                                 # the ir.Operation behind a typed OpView (FuncOp, ForOp, ...)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from mlir import ir

from pytest_hpccourse.runtimes.mlirrun import MlirError


def load(text: str, context: ir.Context) -> ir.Module:
    """Parse `text` in `context` and verify it. Invalid IR (syntax, types, a missing terminator, a use that
    its definition does not dominate, an unregistered op ...) raises MlirError whose message is MLIR's own
    diagnostic text (str() of the bindings' ir.MLIRError)."""
    ### HINT: the bindings raise ir.MLIRError; the course's tests (and learners) expect pytest_hpccourse.runtimes.mlirrun.MlirError
    ### BEGIN SOLUTION
    try:
        module = ir.Module.parse(text, context=context)
        module.operation.verify()
    except ir.MLIRError as e:
        raise MlirError(str(e)) from None
    return module
    ### END SOLUTION


def walk(op: ir.Operation | ir.OpView, depth: int = 0) -> Iterator[tuple[ir.Operation, int]]:
    """Every operation nested in `op`, `op` itself first, in pre-order: an op, then its regions in order,
    each region's blocks in order, each block's operations in order (the order of MLIR's
    `Operation::walk<WalkOrder::PreOrder>`). Yields (ir.Operation, depth): depth is `depth` for `op` and
    one more for each region between `op` and the yielded operation."""
    ### HINT: yield plain ir.Operation objects (an OpView's `.name` is not always the op name: FuncOp.name is its symbol)
    ### BEGIN SOLUTION
    op = op.operation
    yield op, depth
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield from walk(child, depth + 1)
    ### END SOLUTION


def op_counts(module: ir.Module) -> Counter[str]:
    """How many operations of each name the module holds, the builtin.module op and every op in nested
    regions included (what `mlir-opt --print-op-stats` prints)."""
    ### BEGIN SOLUTION
    return Counter(op.name for op, _ in walk(module.operation))
    ### END SOLUTION


def dialect_counts(module: ir.Module) -> Counter[str]:
    """The same counts summed per dialect namespace: the part of the op name before the FIRST dot
    ("scf.reduce.return" -> "scf", "nvvm.read.ptx.sreg.tid.x" -> "nvvm")."""
    ### BEGIN SOLUTION
    counts: Counter[str] = Counter()
    for name, n in op_counts(module).items():
        counts[name.split(".", 1)[0]] += n
    return counts
    ### END SOLUTION


def summary(module: ir.Module) -> dict[str, int]:
    """The module's shape, counted over every operation (the builtin.module op included):
      operations       number of operations
      regions          number of regions (an external func.func declaration has one region with no block)
      blocks           number of blocks
      values           SSA values defined: operation results plus block arguments
      max_depth        the largest walk depth (the builtin.module op is at depth 0)"""
    ### HINT: one pass over walk(); block arguments live on blocks, so look inside each op's regions
    ### BEGIN SOLUTION
    s = dict(operations=0, regions=0, blocks=0, values=0, max_depth=0)
    for op, depth in walk(module.operation):
        s["operations"] += 1
        s["values"] += len(op.results)
        s["max_depth"] = max(s["max_depth"], depth)
        for region in op.regions:
            s["regions"] += 1
            for block in region.blocks:
                s["blocks"] += 1
                s["values"] += len(block.arguments)
    return s
    ### END SOLUTION


def to_generic(module: ir.Module) -> str:
    """The module printed in MLIR's generic form: every op as "dialect.op"(operands) ... : type, with its
    regions in ({ ... }); text that parses back to the same IR (what `mlir-opt --mlir-print-op-generic` prints)."""
    ### BEGIN SOLUTION
    return module.operation.get_asm(print_generic_op_form=True)
    ### END SOLUTION
