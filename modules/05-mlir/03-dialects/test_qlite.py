"""mlir-03 tests: the learner's IRDL definition of `qlite` is loaded into upstream MLIR 22 and MLIR's own
verifier judges IR against it.

- the given corpora: valid.mlir verifies (Python bindings and the real mlir-opt); invalid.mlir is checked by
  MLIR's test harness (`mlir-opt --split-input-file --verify-diagnostics`: each annotated error, no other);
- hundreds of generated cases (fixed seed): an oracle computed here from the spec table below (not from
  MLIR, not from the learner's IRDL) says whether each case must verify and, if not, which error MLIR reports
  first and on which line; MLIR's verdict and diagnostic must agree.

How MLIR checks an IRDL op (mlir/lib/Dialect/IRDL/IRDLLoading.cpp, LLVM 22): while parsing, every type and
attribute is built and verified where it is written (`!qlite.q<i32>` fails at that spot); then the op
verifier checks the operand count, the result count, the attributes (in hash order), the operands left to
right, the results. Every constraint SSA value is a variable: its first check binds it, later uses must be
equal (`expected '!qlite.q<i8>' but got '!qlite.q<i4>'`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import pytest

from pytest_hpccourse.runtimes import mlirrun

# ---------------------------------------------------------------------------------------------------------
# The spec table (README.md): the oracle is computed from this alone.

STORAGE = ("i4", "i8", "i16")
MODES = ("nearest", "floor", "ceil")
FLOAT_OPERAND = ("f16", "f32")

# slot kinds: "F" f16|f32, "F32" exactly f32, "Q" any !qlite.q (its own variable), "T" the op's shared Q variable
# attribute kinds: "float" builtin FloatAttr, "int" builtin IntegerAttr, "round" #qlite.round
SPEC = {
    "quantize": dict(operands=["F"], results=["Q"], attrs={"scale": "float", "zero_point": "int"}),
    "dequantize": dict(operands=["Q"], results=["F32"], attrs={"scale": "float"}),
    "add": dict(operands=["T", "T"], results=["T"], attrs={}),
    "sum": dict(operands="T*", results=["T"], attrs={}),  # variadic: any number of T
    "requant": dict(operands=["Q"], results=["Q"], attrs={"round": "round"}),
}

# Type and attribute values a case draws from: (text, kind). A type's kind: "F16"/"F32"/"other" builtin,
# ("Q", storage) a well-formed qlite type, ("badQ", phrase) a qlite type whose parameters are wrong.
GOOD_Q = [(f"!qlite.q<{s}>", ("Q", s)) for s in STORAGE]
BUILTIN_TYPES = [("f32", "F32"), ("f16", "F16"), ("i32", "other"), ("index", "other"), ("i8", "other"),
                 ("bf16", "other")]
BAD_Q = [("!qlite.q<i32>", ("badQ", "'i32' does not satisfy the constraint")),
         ("!qlite.q<f32>", ("badQ", "'f32' does not satisfy the constraint")),
         ("!qlite.q<i1>", ("badQ", "'i1' does not satisfy the constraint")),
         ("!qlite.q<i8, i8>", ("badQ", "expected 1 type arguments, but had 2")),
         ("!qlite.q<i4, i16, i4>", ("badQ", "expected 1 type arguments, but had 3"))]
ATTRS = {
    "float": ["0.5 : f32", "1.25e-2 : f64", "2.0 : f16", "-0.75 : bf16"],
    "int": ["0 : i32", "-3 : i8", "127 : i64", "7 : index"],
    "string": ['"floor"', '"0.5"'],
    "round": [f'#qlite.round<"{m}">' for m in MODES],
    "other": ["[1, 2]", "unit", "array<i32: 1>", "f32"],
}
BAD_ROUND = ['#qlite.round<"up">', '#qlite.round<"Floor">', '#qlite.round<"even">']

# Phrases of MLIR's diagnostics, by what went wrong. A type constraint can be written several correct ways
# (irdl.is / irdl.any_of / irdl.base / irdl.parametric); each prints its own phrase, all of these.
TYPE_ERROR = ("does not satisfy the constraint", "expected base type", "expected '")
ATTR_ERROR = ("expected base attribute", "does not satisfy the constraint", "expected '")


@dataclass
class Case:
    op: str
    operands: list  # [(text, kind)]
    results: list  # [(text, kind)]
    attrs: dict  # name -> (text, kind); kind "badround:<phrase>" for a #qlite.round with a wrong mode
    extra: dict = field(default_factory=dict)  # discardable attributes outside the spec

    def text(self) -> str:
        """Line 1: the signature (operand types), line 2: the op, so a diagnostic's line says where it is."""
        args = ", ".join(f"%a{i}: {t}" for i, (t, _) in enumerate(self.operands))
        names = ", ".join(f"%a{i}" for i in range(len(self.operands)))
        attrs = {**{k: v[0] for k, v in self.attrs.items()}, **self.extra}
        attr_text = (" {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}") if attrs else ""
        res = {0: "", 1: "%r = "}.get(len(self.results), f"%r:{len(self.results)} = ")
        sig = f"({', '.join(t for t, _ in self.operands)}) -> ({', '.join(t for t, _ in self.results)})"
        return (f"func.func @case({args}) {{\n  {res}\"qlite.{self.op}\"({names}){attr_text} : {sig}\n"
                f"  return\n}}\n")


def slot_ok(slot: str, kind, bound: dict) -> bool:
    """Does a type of `kind` fit `slot`? Binds the op's shared variable T on first use (IRDL's semantics)."""
    if slot == "F":
        return kind in ("F16", "F32")
    if slot == "F32":
        return kind == "F32"
    is_q = isinstance(kind, tuple) and kind[0] == "Q"
    if slot == "Q":
        return is_q
    if "T" in bound:  # a later use of T: must be the very type the first use bound
        return kind == bound["T"]
    if is_q:
        bound["T"] = kind
    return is_q


def first_error(case: Case) -> tuple[int, tuple[str, ...]] | None:
    """The oracle: None when the spec accepts the case, else (line, phrases): the first diagnostic MLIR
    must print, on that line, containing one of the phrases."""
    if case.op not in SPEC:
        return 2, (f"unregistered operation 'qlite.{case.op}' found in dialect ('qlite')",)
    # 1. parsing builds and verifies types and attributes in textual order: signature, attr-dict, result types
    for _t, kind in case.operands:
        if kind[0] == "badQ":
            return 1, (kind[1],)
    for _text, kind in case.attrs.values():
        if kind.startswith("badround:"):
            return 2, (kind.split(":", 1)[1],)
    for _t, kind in case.results:
        if kind[0] == "badQ":
            return 2, (kind[1],)
    spec = SPEC[case.op]
    # 2. the op verifier: counts, attributes, operands, results
    if spec["operands"] != "T*" and len(case.operands) != len(spec["operands"]):
        return 2, (f"op expects exactly {len(spec['operands'])} operands, but got {len(case.operands)}",)
    if len(case.results) != len(spec["results"]):
        return 2, (f"op expects exactly {len(spec['results'])} results, but got {len(case.results)}",)
    attr_errors = []  # MLIR walks the attribute constraints in hash order: any of them may come first
    for name, want in spec["attrs"].items():
        if name not in case.attrs:
            attr_errors.append(f'attribute "{name}" is expected but not provided')
        elif case.attrs[name][1] != want:
            attr_errors.extend(ATTR_ERROR)
    if attr_errors:
        return 2, tuple(attr_errors)
    bound: dict = {}
    for (_t, kind), slot in zip(case.operands + case.results, _slots(spec, case.operands) + spec["results"]):
        if not slot_ok(slot, kind, bound):
            return 2, TYPE_ERROR  # a bound variable prints "expected '<bound>' but got '<this>'"
    return None


# ---------------------------------------------------------------------------------------------------------
# Random cases: a well-formed op of the spec, then 0, 1 or 2 faults of the kinds below.

FAULTS = ("operand_type", "result_type", "bad_parameter", "shared_type", "shared_not_q", "operand_count",
          "result_count", "missing_attr", "attr_kind", "round_mode", "unknown_op")


def _valid_type(slot: str, rng: random.Random, t_choice):
    if slot == "F":
        return rng.choice([("f16", "F16"), ("f32", "F32")])
    if slot == "F32":
        return ("f32", "F32")
    return t_choice if slot == "T" else rng.choice(GOOD_Q)


def _slots(spec: dict, operands: list) -> list:
    return ["T"] * len(operands) if spec["operands"] == "T*" else spec["operands"]


def _apply(fault: str, case: Case, rng: random.Random) -> None:
    """Spoil `case` in place (a fault that does not apply to this op changes nothing)."""
    spec = SPEC.get(case.op)
    if fault == "unknown_op":
        case.op = rng.choice(["mul", "quantise", "Add", "concat", "dequant"])
    elif fault in ("operand_type", "result_type", "bad_parameter") and spec:
        values = case.operands if fault == "operand_type" or (fault == "bad_parameter" and rng.random() < 0.5) \
            else case.results
        if values:
            pool = BAD_Q if fault == "bad_parameter" else GOOD_Q + BUILTIN_TYPES
            values[rng.randrange(len(values))] = rng.choice(pool)
    elif fault == "shared_type" and spec and "T" in str(spec["operands"]) + str(spec["results"]):
        values = case.operands + case.results
        i = rng.randrange(len(values))
        others = [q for q in GOOD_Q if q != values[i]]
        target = case.operands if i < len(case.operands) else case.results
        target[i if i < len(case.operands) else i - len(case.operands)] = rng.choice(others)
    elif fault == "shared_not_q" and spec and "T" in spec["results"]:  # add, sum: every slot is T
        t = rng.choice(BUILTIN_TYPES)  # consistent, but not a !qlite.q
        case.operands[:] = [t] * len(case.operands)
        case.results[:] = [t] * len(case.results)
    elif fault == "operand_count" and spec and spec["operands"] != "T*":
        if case.operands and rng.random() < 0.5:
            case.operands.pop()
        else:
            case.operands.append(case.operands[-1] if case.operands else rng.choice(GOOD_Q))
    elif fault == "result_count":
        if case.results and rng.random() < 0.5:
            case.results.pop()
        else:
            case.results.append(case.results[-1])
    elif fault in ("missing_attr", "attr_kind") and case.attrs:
        name = rng.choice(sorted(case.attrs))
        if fault == "missing_attr":
            del case.attrs[name]
        else:
            want = case.attrs[name][1]
            kind = rng.choice([k for k in ATTRS if k != want])
            case.attrs[name] = (rng.choice(ATTRS[kind]), kind)
    elif fault == "round_mode" and "round" in case.attrs:
        bad = rng.choice(BAD_ROUND)
        mode = bad.split('"')[1]
        case.attrs["round"] = (bad, f"badround:'\"{mode}\"' does not satisfy the constraint")


def random_case(rng: random.Random) -> Case:
    op = rng.choice(list(SPEC))
    spec = SPEC[op]
    t_choice = rng.choice(GOOD_Q)
    slots = ["T"] * rng.choice([0, 1, 2, 3, 5, 8]) if spec["operands"] == "T*" else spec["operands"]
    operands = [_valid_type(s, rng, t_choice) for s in slots]
    results = [_valid_type(s, rng, t_choice) for s in spec["results"]]
    attrs = {name: (rng.choice(ATTRS[want]), want) for name, want in spec["attrs"].items()}
    extra = {}
    if rng.random() < 0.3:  # discardable attributes: never an error
        extra[rng.choice(["note", "tag", "mode", "qlite_hint"])] = rng.choice(
            ATTRS["string"] + ATTRS["int"] + ATTRS["round"])
    case = Case(op, operands, results, attrs, extra)
    faults = rng.sample(FAULTS, rng.choice([0, 0, 0, 1, 1, 1, 2]))
    for fault in ["unknown_op"] if "unknown_op" in faults else faults:  # an unknown op: no other fault
        _apply(fault, case, rng)
    return case


def generated_cases(seed: int = 3, n: int = 700) -> list[Case]:
    rng = random.Random(seed)
    return [random_case(rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------------
# MLIR as the judge


class Judge:
    """One MLIR context with the learner's dialect loaded; `check(text)` -> None or MLIR's diagnostics."""

    def __init__(self, irdl_text: str):
        from mlir import ir

        self.ir = ir
        self.ctx = ir.Context()
        self.ctx.allow_unregistered_dialects = False
        with self.ctx, ir.Location.unknown():
            mlirrun.load_irdl(irdl_text, self.ctx)

    def check(self, text: str) -> str | None:
        with self.ctx, self.ir.Location.unknown():
            try:
                module = mlirrun.parse(text, self.ctx)  # the parser verifies what it builds
                module.operation.verify()
            except mlirrun.MlirError as e:
                return str(e)
            except self.ir.MLIRError as e:
                return str(e)
        return None


def first_diagnostic(message: str) -> tuple[int, str]:
    m = re.search(r'error: "-":(\d+):\d+: (.*)', message)
    assert m, f"no located error in MLIR's output:\n{message}"
    return int(m.group(1)), m.group(2)


@pytest.fixture
def irdl(lesson) -> str:
    return lesson.path("qlite.mlir").read_text()


@pytest.fixture
def judge(irdl) -> Judge:
    return Judge(irdl)


# ---------------------------------------------------------------------------------------------------------
# Tests


@pytest.mark.points(1)
def test_valid_corpus_verifies(lesson, irdl):
    """valid.mlir: the bindings verify it, and the real mlir-opt loads the dialect with --irdl-file and prints
    IR that parses again to the same text (a round trip through the generic form)."""
    text = lesson.path("valid.mlir").read_text()
    mlirrun.verify(text, dialects=[irdl])
    once = mlirrun.opt(text, f"--irdl-file={lesson.path('qlite.mlir')}")
    twice = mlirrun.opt(once, f"--irdl-file={lesson.path('qlite.mlir')}")
    assert once == twice
    for op in SPEC:
        assert f'"qlite.{op}"' in once, f"valid.mlir lost qlite.{op}"


@pytest.mark.points(1)
def test_invalid_corpus_gives_the_annotated_diagnostics(lesson):
    """invalid.mlir: MLIR's own harness checks that each chunk fails with exactly the annotated error."""
    mlirrun.opt(lesson.path("invalid.mlir").read_text(), f"--irdl-file={lesson.path('qlite.mlir')}",
                "--split-input-file", "--verify-diagnostics")


def _agree(judge: Judge, case: Case) -> str | None:
    """None when MLIR and the oracle agree on `case`, else a message saying how they differ."""
    text = case.text()
    want = first_error(case)
    got = judge.check(text)
    if want is None and got is None:
        return None
    if want is None:
        return f"the spec accepts this IR but MLIR rejects it:\n{text}{got}"
    if got is None:
        return f"the spec rejects this IR ({want[1][0]}...) but MLIR accepts it:\n{text}"
    line, msg = first_diagnostic(got)
    if line != want[0] or not any(ph in msg for ph in want[1]):
        return (f"MLIR rejects this IR for another reason than the spec's first violation:\n{text}"
                f"expected on line {want[0]} one of {list(want[1])}\nMLIR said (line {line}): {msg}")
    return None


@pytest.mark.points(1)
def test_generated_valid_ir_verifies(judge):
    cases = [c for c in generated_cases() if first_error(c) is None]
    assert len(cases) > 250  # the generator's mix: the oracle must accept a good share
    for case in cases:
        problem = _agree(judge, case)
        assert problem is None, problem


@pytest.mark.points(1)
def test_generated_invalid_ir_is_rejected_with_mlirs_diagnostic(judge):
    cases = [c for c in generated_cases() if first_error(c) is not None]
    kinds = {first_error(c)[1][0][:16] for c in cases}
    assert len(cases) > 250 and len(kinds) >= 8  # every kind of violation occurs
    for case in cases:
        problem = _agree(judge, case)
        assert problem is None, problem
