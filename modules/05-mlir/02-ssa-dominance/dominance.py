"""mlir-02: the dominator tree and dominance frontiers of an MLIR region's CFG, and the dominance rule for uses.

A region of a func.func (an SSACFG region, mlir/docs/LangRef.md "Control Flow and SSACFG Regions") is a CFG:
its blocks are the nodes, block 0 is the entry, and the successors of a block are those of its terminator
(cf.br: one; cf.cond_br: true then false; cf.switch: default then each case; func.return: none).

Block d dominates block b when every path from the entry to b passes through d; idom(b) is the closest strict
dominator. DF(d), the dominance frontier of d, holds the blocks b where d's dominance ends: d dominates a
predecessor of b but does not strictly dominate b. That is where SSA construction places block arguments (phi).

Blocks are numbered by their position in the region (0 = entry). Blocks not reachable from the entry have no
immediate dominator (None) and an empty frontier; edges out of them are ignored.
"""

from __future__ import annotations

from mlir import ir


def postorder(succ: list[list[int]], entry: int = 0) -> list[int]:
    """The blocks reachable from `entry` in DFS postorder (successors visited in list order; iterative, so
    CFGs of any length are fine). Reversed, this is the reverse postorder (RPO) Cooper-Harvey-Kennedy uses."""
    order, seen, stack = [], {entry}, [(entry, iter(succ[entry]))]
    while stack:
        node, it = stack[-1]
        nxt = next((s for s in it if s not in seen), None)
        if nxt is None:
            stack.pop()
            order.append(node)
        else:
            seen.add(nxt)
            stack.append((nxt, iter(succ[nxt])))
    return order


def cfg(region: ir.Region) -> list[list[int]]:
    """succ[i] = the block indices the terminator of block i branches to, in operand order, duplicates kept
    (cf.cond_br %c, ^bb1, ^bb1 gives [1, 1])."""
    ### HINT: a terminator is the last op of its block; ir.Block objects can be dict keys
    ### BEGIN SOLUTION
    blocks = list(region.blocks)
    index = {block: i for i, block in enumerate(blocks)}
    return [[index[s] for s in block.operations[-1].successors] for block in blocks]
    ### END SOLUTION


def immediate_dominators(succ: list[list[int]], entry: int = 0) -> list[int | None]:
    """idom[b] for every block: the immediate dominator of b; None for the entry and for unreachable blocks.
    (So b is reachable exactly when b == entry or idom[b] is not None.)"""
    ### HINT: Cooper-Harvey-Kennedy: number blocks by postorder, visit in reverse postorder until nothing changes; intersect() walks the two fingers up by postorder number
    ### BEGIN SOLUTION
    order = postorder(succ, entry)
    number = {b: i for i, b in enumerate(order)}  # postorder number: the entry has the largest
    preds: list[list[int]] = [[] for _ in succ]
    for b in order:
        for s in succ[b]:
            preds[s].append(b)
    idom: dict[int, int] = {entry: entry}

    def intersect(x: int, y: int) -> int:
        while x != y:
            while number[x] < number[y]:
                x = idom[x]
            while number[y] < number[x]:
                y = idom[y]
        return x

    changed = True
    while changed:
        changed = False
        for b in reversed(order[:-1]):  # reverse postorder, entry left out
            done = [p for p in preds[b] if p in idom]  # processed predecessors (RPO guarantees one)
            new = done[0]
            for p in done[1:]:
                new = intersect(p, new)
            if idom.get(b) != new:
                idom[b], changed = new, True
    return [None if b == entry else idom.get(b) for b in range(len(succ))]
    ### END SOLUTION


def dominance_frontiers(succ: list[list[int]], idom: list[int | None], entry: int = 0) -> list[set[int]]:
    """DF[d] for every block d, given the immediate dominators from immediate_dominators()."""
    ### HINT: for each join edge p -> b (p reachable), walk a runner from p up the dominator tree until idom(b); every block passed has b in its frontier
    ### BEGIN SOLUTION
    df: list[set[int]] = [set() for _ in succ]
    for p, targets in enumerate(succ):
        if p != entry and idom[p] is None:
            continue  # an unreachable predecessor contributes nothing
        for b in targets:
            runner = p
            while runner != idom[b]:  # b is not the entry: it has no predecessor in MLIR
                df[runner].add(b)
                if runner == entry:
                    break
                runner = idom[runner]
    return df
    ### END SOLUTION


def dominance_violations(region: ir.Region) -> list[tuple[int, int]]:
    """The ops of a single CFG region (a func.func body) whose operands break the dominance rule, as sorted
    (block index, op index) pairs, each listed once. The rule (what MLIR's verifier checks):

      - a result of the op at (A, i) may be used by the op at (B, j) when A == B and i < j, or when A properly
        dominates B;
      - an argument of block A may be used anywhere in a block B that A dominates (A == B included);
      - a use inside a nested region (the body of an scf.if ...) counts as a use by the op of this region that
        holds it; values defined inside that op are its own business and are not checked here;
      - uses inside unreachable blocks are never violations (MLIR does not check them); a definition in an
        unreachable block dominates nothing reachable."""
    ### HINT: first map every value defined at the top level of the region to where it is defined; then check each reachable op's operands and those of everything nested in it
    ### BEGIN SOLUTION
    blocks = list(region.blocks)
    idom = immediate_dominators(cfg(region))
    where: dict[ir.Value, tuple[int, int]] = {}  # value -> (block, op index); -1: a block argument
    for b, block in enumerate(blocks):
        for arg in block.arguments:
            where[arg] = (b, -1)
        for i, op in enumerate(block.operations):
            for res in op.results:
                where[res] = (b, i)

    def dominates(a: int, b: int) -> bool:  # block a dominates block b (b reachable)
        while b is not None and b != a:
            b = idom[b]
        return b == a

    def operands(op):  # operands of op and of every op nested in it
        yield from op.operands
        for r in op.regions:
            for blk in r.blocks:
                for inner in blk.operations:
                    yield from operands(inner)

    bad = []
    for b, block in enumerate(blocks):
        if b != 0 and idom[b] is None:
            continue
        for j, op in enumerate(block.operations):
            for v in operands(op):
                if v not in where:
                    continue  # defined inside op itself
                a, i = where[v]
                if not (dominates(a, b) and (a != b or i < j)):
                    bad.append((b, j))
                    break
    return bad
    ### END SOLUTION
