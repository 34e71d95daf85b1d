"""mlir-02 tests: CFG extraction, immediate dominators, dominance frontiers and the use-dominance rule.

Oracles:
  - networkx's `immediate_dominators` / `dominance_frontiers` (an independent implementation of
    Cooper-Harvey-Kennedy) on 400 random CFGs from a fixed seed plus named edge cases (a single block, self
    loops, irreducible loops, unreachable blocks and cycles, duplicate edges, a 300-block chain);
  - the CFGs written out as real MLIR (func.func bodies with cf.br / cf.cond_br / cf.switch), so the learner's
    CFG extraction feeds the analysis;
  - MLIR's own verifier (`mlirrun.verify`): on 220 random functions with planted uses that their definition
    does not dominate (later in the block, in a sibling branch, in an unreachable block, inside an scf.if
    region, the op's own result), the learner says "invalid" exactly when MLIR raises "operand #k does not
    dominate this use", and the op MLIR points at is one the learner lists.
The bindings expose no dominance API, so nothing here can be computed by calling MLIR's DominanceInfo.
"""

from __future__ import annotations

import random
import re

import networkx as nx
import pytest
from mlir import ir

from pytest_hpccourse.runtimes import mlirrun

SEED = 2202

# ---------------------------------------------------------------------------------------------------------
# CFGs


def random_cfg(rng: random.Random, n: int) -> list[list[int]]:
    """Successor lists of n blocks; nothing branches to the entry (MLIR forbids it). Edges go a little
    forward most of the time and anywhere otherwise: back edges, self loops, irreducible loops, blocks that
    nothing reaches."""
    if n == 1:
        return [[]]

    def pick(b):
        if rng.random() < 0.6:
            return min(n - 1, b + rng.randint(1, 3))
        return rng.randint(1, n - 1)

    succ = []
    for b in range(n):
        r = rng.random()
        if r < 0.15 and b:
            succ.append([])
        elif r < 0.5:
            succ.append([pick(b)])
        elif r < 0.85:
            succ.append([pick(b), pick(b)])
        else:
            succ.append([pick(b) for _ in range(rng.randint(2, 4))])
    return succ


NAMED_CFGS = {
    "single block": [[]],
    "two blocks": [[1], []],
    "self loop": [[1], [1, 2], []],
    "entry into a self loop only": [[1], [1]],
    "diamond": [[1, 2], [3], [3], []],
    "irreducible loop": [[1, 2], [2, 3], [1, 3], []],
    "irreducible, three entries": [[1, 2, 3], [2], [3], [1, 4], []],
    "unreachable cycle into the loop": [[1], [2], [1, 4], [4, 2], [3], []],
    "unreachable only": [[], [2], [1, 1]],
    "duplicate edges": [[1, 1], [2, 2, 3], [3], []],
    "nested loops": [[1], [2, 5], [3, 2], [4, 1], [1], []],
    "unreachable self loop": [[2], [1, 2], []],
    "blocks out of order": [[4], [], [1, 3], [2, 1], [3]],
}


def nx_graph(succ):
    g = nx.DiGraph()
    g.add_nodes_from(range(len(succ)))
    g.add_edges_from((b, s) for b, ss in enumerate(succ) for s in ss)
    return g


def nx_idom(succ, entry: int = 0) -> list[int | None]:
    got = nx.immediate_dominators(nx_graph(succ), entry)
    return [None if b == entry else got.get(b) for b in range(len(succ))]  # networkx < 3.5 also lists e -> e


def nx_frontiers(succ, entry: int = 0) -> list[set[int]]:
    got = nx.dominance_frontiers(nx_graph(succ), entry)
    return [set(got.get(b, ())) for b in range(len(succ))]


def relabelled_cfgs():
    """The named CFGs and 40 random ones with their blocks renumbered so that the entry is NOT block 0: the
    `entry` argument must be honoured (a function that always starts at block 0 gets other dominators)."""
    rng = random.Random(SEED + 1)
    cases = list(NAMED_CFGS.items()) + [(f"random#{i}", random_cfg(rng, rng.randint(2, 30))) for i in range(40)]
    out = []
    for name, succ in cases:
        n = len(succ)
        perm = list(range(n))  # old block -> new label
        rng.shuffle(perm)
        if n > 1 and perm[0] == 0:
            perm[0], perm[1] = perm[1], perm[0]
        new = [[] for _ in range(n)]
        for b, ss in enumerate(succ):
            new[perm[b]] = [perm[s] for s in ss]
        out.append((f"{name} (entry = block {perm[0]})", new, perm[0]))
    return out


def pure_cfgs():
    rng = random.Random(SEED)
    cases = list(NAMED_CFGS.items())
    cases += [(f"random#{i}", random_cfg(rng, rng.randint(1, 40))) for i in range(400)]
    cases += [("chain of 300", [[b + 1] for b in range(299)] + [[]]),
              ("ladder of 150 loops", [[b + 1, max(1, b - 1)] for b in range(149)] + [[]]),
              ("random of 250", random_cfg(rng, 250))]
    return cases


# ---------------------------------------------------------------------------------------------------------
# the same CFGs as MLIR functions, with defs and uses whose dominance the generator controls


class FuncGen:
    """func.func @f(%a: i32, %s: i32, %c: i1) -> i32 whose body has the CFG `succ`. Every block b holds a
    few arith ops named %v<b>_<i>, maybe an scf.if whose region uses outer values, and a terminator;
    non-entry blocks take 0-2 i32 arguments %p<b>_<k>.

    mode "valid": every use is dominated; "single": exactly one use in a reachable block is not;
    "multi": each use in a reachable block is bad with probability 0.15. Uses inside unreachable blocks
    pick any value at all (MLIR does not check them). `bad` collects the (block, op) of the planted uses.

    Two texts come out, line for line the same: `text` with the planted uses, and `clean` with %a in their
    place (it parses: LLVM 22's parser always verifies). `patches` say how to turn the parsed `clean` into
    the IR of `text` through the bindings (op.operands[k] = value), so the learner gets a real ir.Region."""

    def __init__(self, rng: random.Random, succ: list[list[int]], mode: str):
        self.rng, self.succ, self.mode = rng, succ, mode
        self.n = len(succ)
        self.idom = nx_idom(succ)
        self.reach = [b == 0 or self.idom[b] is not None for b in range(self.n)]
        self.nargs = [0] + [rng.randint(0, 2) for _ in range(self.n - 1)]
        self.narith = [rng.randint(0, 3) for _ in range(self.n)]
        self.has_if = [rng.random() < 0.3 for _ in range(self.n)]
        self.bad: set[tuple[int, int]] = set()
        self.patches: list[tuple[tuple, int, tuple]] = []  # (op path, operand #, value ref)
        self.line_pos: dict[int, tuple[int, int]] = {}
        slots = [(b, j) for b in range(self.n) if self.reach[b] for j in range(self.ops_in(b))]
        self.single = rng.choice(slots) if mode == "single" else None
        self.path, self.k = None, 0

    def ops_in(self, b):
        return self.narith[b] + self.has_if[b] + 1

    def dominates(self, a, b):
        while b is not None and b != a:
            b = self.idom[b]
        return b == a

    def values(self):
        """Every i32 value defined at the top level: (name, block, op index or -1, value ref)."""
        if hasattr(self, "_values"):
            return self._values
        out = [("%a", 0, -1, ("arg", 0, 0)), ("%s", 0, -1, ("arg", 0, 1))]
        for b in range(self.n):
            out += [(f"%p{b}_{k}", b, -1, ("arg", b, k)) for k in range(self.nargs[b])]
            out += [(f"%v{b}_{i}", b, i, ("res", b, i)) for i in range(self.narith[b])]
        self._values = out
        return out

    def ok(self, value, b, j):
        _, a, i, _ = value
        return self.dominates(a, b) and (a != b or i < j)

    def start(self, path, k=0):
        self.path, self.k = path, k

    def use(self, b, j):
        """The next operand of the op being built (op j of block b, or an op nested in it)."""
        self.k += 1
        vals = self.values()
        if not self.reach[b]:
            return self.rng.choice(vals)[0]
        bad_ones = [v for v in vals if not self.ok(v, b, j)]
        plant = bad_ones and ((self.mode == "single" and self.single == (b, j))
                              or (self.mode == "multi" and self.rng.random() < 0.15))
        if not plant:
            return self.rng.choice([v for v in vals if self.ok(v, b, j)])[0]
        if self.mode == "single":
            self.single = None  # one use only
        v = self.rng.choice(bad_ones)
        self.bad.add((b, j))
        self.patches.append((self.path, self.k - 1, v[3]))
        return (v[0], "%a")

    def branch(self, b, j, t):
        args = [self.use(b, j) for _ in range(self.nargs[t])]
        return (f"^bb{t}(", *join(args), f" : {', '.join(['i32'] * len(args))})") if args else (f"^bb{t}",)

    def build(self):
        """The body as lines of pieces: a piece is a string or a (bad, clean) pair."""
        lines = [("func.func @f(%a: i32, %s: i32, %c: i1) -> i32 {",)]

        def emit(pieces, pos):
            lines.append(pieces)
            self.line_pos[len(lines)] = pos  # 1-based line number of this op in the text

        for b in range(self.n):
            if b:
                params = ", ".join(f"%p{b}_{k}: i32" for k in range(self.nargs[b]))
                lines.append((f"^bb{b}" + (f"({params}):" if params else ":"),))
            j = 0
            for i in range(self.narith[b]):
                op = self.rng.choice(["addi", "muli", "subi", "xori"])
                self.start(("top", b, j))
                x, y = self.use(b, j), self.use(b, j)
                emit((f"  %v{b}_{i} = arith.{op} ", x, ", ", y, " : i32"), (b, j))
                j += 1
            if self.has_if[b]:
                emit(("  scf.if %c {",), (b, j))
                self.start(("nested", b, j, 0))
                x, y = self.use(b, j), self.use(b, j)
                emit((f"    %w{b} = arith.addi ", x, ", ", y, " : i32"), (b, j))
                self.start(("nested", b, j, 1), 1)
                emit((f"    %x{b} = arith.muli %w{b}, ", self.use(b, j), " : i32"), (b, j))
                emit(("  }",), (b, j))
                j += 1
            emit(self.terminator(b, j), (b, j))
        lines.append(("}",))
        return lines

    def terminator(self, b, j):
        ss = self.succ[b]
        if not ss:
            self.start(("top", b, j))
            return ("  return ", self.use(b, j), " : i32")
        if len(ss) == 1:
            self.start(("top", b, j))
            return ("  cf.br ", *self.branch(b, j, ss[0]))
        if len(ss) == 2 and self.rng.random() < 0.6:
            self.start(("top", b, j), 1)  # operand #0 is %c
            t, f = self.branch(b, j, ss[0]), self.branch(b, j, ss[1])
            return ("  cf.cond_br %c, ", *t, ", ", *f)
        self.start(("top", b, j))  # operands: the flag, the default's arguments, each case's arguments
        flag = self.use(b, j)
        default = self.branch(b, j, ss[0])
        cases = [(f"{k}: ", *self.branch(b, j, t)) for k, t in enumerate(ss[1:])]
        return ("  cf.switch ", flag, " : i32, [default: ", *default, *[p for c in cases for p in (", ", *c)], "]")

    def texts(self) -> tuple[str, str]:
        lines = self.build()
        pick = lambda piece, w: piece if isinstance(piece, str) else piece[w]  # noqa: E731
        return tuple("\n".join("".join(pick(p, w) for p in line) for line in lines) for w in (0, 1))


def join(args):
    out = []
    for i, a in enumerate(args):
        out += [", "] * bool(i) + [a]
    return out


def mlir_cases():
    """(name, succ, mode, bad text, clean text, patches, planted bad positions, line -> position)."""
    rng = random.Random(SEED + 1)
    cases = [(name, succ) for name, succ in NAMED_CFGS.items()]
    cases += [(f"random#{i}", random_cfg(rng, rng.randint(1, 9))) for i in range(200)]
    out = []
    for k, (name, succ) in enumerate(cases):
        mode = ("valid", "single", "multi")[k % 3]
        g = FuncGen(rng, succ, mode)
        text, clean = g.texts()
        out.append(dict(name=name, succ=succ, mode=mode, text=text, clean=clean, patches=g.patches,
                        bad=g.bad, line_pos=g.line_pos))
    return out


@pytest.fixture(scope="module")
def funcs():
    return mlir_cases()


def body(module: ir.Module) -> ir.Region:
    return module.body.operations[0].regions[0]


def build(case, ctx) -> ir.Module:
    """The IR of case["text"] as a module: parse the clean twin, then redirect the planted operands."""
    module = ir.Module.parse(case["clean"], ctx)
    blocks = list(body(module).blocks)
    for path, k, (kind, b, i) in case["patches"]:
        op = blocks[path[1]].operations[path[2]]
        if path[0] == "nested":
            op = op.regions[0].blocks[0].operations[path[3]]
        value = blocks[b].arguments[i] if kind == "arg" else blocks[b].operations[i].results[0]
        op.operands[k] = value
    return module


# ---------------------------------------------------------------------------------------------------------
# tests


@pytest.mark.points(1)
def test_cfg_is_read_from_the_terminators(lesson, funcs):
    dom = lesson.load("dominance.py")
    with ir.Context() as ctx:
        for case in funcs:
            module = build(case, ctx)  # keep the module alive while its region is in use
            got = dom.cfg(body(module))
            assert [list(s) for s in got] == case["succ"], (
                f"{case['name']}: cfg() = {got}, the terminators say {case['succ']}\n{case['text']}")
        module = ir.Module.parse(EXEC_REGION, ctx)
        nested = body(module).blocks[0].operations[0]
        assert [list(s) for s in dom.cfg(nested.regions[0])] == [[2, 1], [3], [3], []]


EXEC_REGION = """
func.func @g(%c: i1, %a: i32) -> i32 {
  %r = scf.execute_region -> i32 {
    cf.cond_br %c, ^bb2, ^bb1
  ^bb1:
    cf.br ^bb3(%a : i32)
  ^bb2:
    cf.br ^bb3(%a : i32)
  ^bb3(%x: i32):
    scf.yield %x : i32
  }
  return %r : i32
}
"""


@pytest.mark.points(1)
def test_immediate_dominators_equal_networkx(lesson):
    dom = lesson.load("dominance.py")
    source = lesson.path("dominance.py").read_text()
    assert "networkx" not in source and "import nx" not in source, "compute dominators yourself (networkx is the oracle)"
    for name, succ in pure_cfgs():
        got = list(dom.immediate_dominators(succ, 0))
        want = nx_idom(succ)
        assert got == want, f"{name}: succ = {succ}\nidom = {got}\nnetworkx: {want}"
    for name, succ, entry in relabelled_cfgs():
        got = list(dom.immediate_dominators(succ, entry))
        want = nx_idom(succ, entry)
        assert got == want, f"{name}: succ = {succ}, entry = {entry}\nidom = {got}\nnetworkx: {want}"


@pytest.mark.points(1)
def test_dominance_frontiers_equal_networkx(lesson):
    dom = lesson.load("dominance.py")
    for name, succ in pure_cfgs():
        got = [set(d) for d in dom.dominance_frontiers(succ, nx_idom(succ), 0)]
        want = nx_frontiers(succ)
        assert got == want, f"{name}: succ = {succ}\nDF = {got}\nnetworkx: {want}"
    for name, succ, entry in relabelled_cfgs():
        got = [set(d) for d in dom.dominance_frontiers(succ, nx_idom(succ, entry), entry)]
        want = nx_frontiers(succ, entry)
        assert got == want, f"{name}: succ = {succ}, entry = {entry}\nDF = {got}\nnetworkx: {want}"


@pytest.mark.points(1)
def test_worked_example_of_the_readme(lesson):
    """README: the CFG of the loop-with-an-if below; blocks 0..6."""
    dom = lesson.load("dominance.py")
    with ir.Context() as ctx:
        module = ir.Module.parse(README_EXAMPLE, ctx)
        succ = [list(s) for s in dom.cfg(body(module))]
    assert succ == [[1], [2, 6], [3, 4], [5], [5], [1], []]
    idom = list(dom.immediate_dominators(succ, 0))
    assert idom == [None, 0, 1, 2, 2, 2, 1]
    df = [set(d) for d in dom.dominance_frontiers(succ, idom, 0)]
    assert df == [set(), {1}, {1}, {5}, {5}, {1}, set()]


README_EXAMPLE = """
func.func @sum_pos(%n: i32, %m: memref<?xi32>) -> i32 {
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  cf.br ^bb1(%zero, %zero : i32, i32)
^bb1(%i: i32, %acc: i32):
  %more = arith.cmpi slt, %i, %n : i32
  cf.cond_br %more, ^bb2, ^bb6
^bb2:
  %idx = arith.index_cast %i : i32 to index
  %x = memref.load %m[%idx] : memref<?xi32>
  %pos = arith.cmpi sgt, %x, %zero : i32
  cf.cond_br %pos, ^bb3, ^bb4
^bb3:
  %y = arith.addi %acc, %x : i32
  cf.br ^bb5(%y : i32)
^bb4:
  cf.br ^bb5(%acc : i32)
^bb5(%acc2: i32):
  %next = arith.addi %i, %one : i32
  cf.br ^bb1(%next, %acc2 : i32, i32)
^bb6:
  return %acc : i32
}
"""


def verdict(run) -> tuple[int, int] | None:
    """None when MLIR accepts; else (line, operand #) of its dominance diagnostic."""
    try:
        run()
    except (mlirrun.MlirError, ir.MLIRError) as e:
        m = re.search(r'error: "[^"]*":(\d+):\d+: operand #(\d+) does not dominate this use', str(e))
        assert m, f"MLIR rejected the generated IR for another reason:\n{e}"
        return int(m.group(1)), int(m.group(2))
    return None


@pytest.mark.points(2)
def test_violations_agree_with_mlirs_verifier(lesson, funcs):
    dom = lesson.load("dominance.py")
    with ir.Context() as ctx:
        for case in funcs:
            name, mode, text, bad = case["name"], case["mode"], case["text"], case["bad"]
            want = verdict(lambda text=text: ir.Module.parse(text, ctx))  # LLVM 22's parser runs the verifier
            if not name.startswith("random#") or int(name[7:]) % 10 == 0:  # the course's entry point agrees
                assert verdict(lambda text=text: mlirrun.verify(text)) == want
            module = build(case, ctx)
            assert verdict(module.operation.verify) == want, f"test harness broken on {name}"
            assert (want is None) == (not bad), f"test generator broken on {name}: {want}, {bad}"
            got = [tuple(p) for p in dom.dominance_violations(body(module))]
            said = "MLIR accepts it" if want is None else \
                f"MLIR: line {want[0]}: operand #{want[1]} does not dominate this use"
            assert (not got) == (want is None), (
                f"{name} ({mode}): you say {'valid' if not got else 'invalid at ' + str(got)}, {said}\n{text}")
            if want is not None:
                assert case["line_pos"][want[0]] in got, (
                    f"{name}: MLIR rejects the op at (block, op) = {case['line_pos'][want[0]]} ({said}); "
                    f"you list {got}\n{text}")
            assert got == sorted(bad), f"{name} ({mode}): violations {got}, expected {sorted(bad)}\n{text}"
