"""mlir-04 tests: the learner's xDSL op definitions of qlite (constraints, traits, assembly formats, a verifier).

- custom syntax: the documented examples and ~400 generated ops print exactly as the spec's syntax table says
  (the expected text is built here from the table), the custom text parses back to the same op, and the
  generic and the custom form of an op parse to structurally equal ops;
- constraints: generated ops with one violation each raise xDSL's VerifyException with the message of that
  violation;
- cross-check: upstream MLIR 22, with the spec loaded as IRDL (SPEC_IRDL below, written from the table),
  accepts and rejects the same generic IR, wherever IRDL can express the rule (it cannot express an optional
  attribute's type or the saturate rule of requant's verifier); MLIR also parses what xDSL prints;
- traits: Pure / Commutative are declared, and xDSL's CSE and DCE use them.
"""

from __future__ import annotations

import io
import random
import re
from dataclasses import dataclass, field

import pytest

from pytest_hpccourse.runtimes import mlirrun

# ---------------------------------------------------------------------------------------------------------
# The spec table (README.md, the docstring of qlite_ops.py)

STORAGE = ("i4", "i8", "i16")
MODES = ("nearest", "floor", "ceil")
SPEC = {  # operand slots, result slots, required attributes
    "quantize": (["F"], ["Q"], {"scale": "float", "zero_point": "int"}),
    "add": (["T", "T"], ["T"], {}),
    "sum": ("T*", ["T"], {}),
    "dequantize": (["Q"], ["F32"], {"scale": "float"}),
    "requant": (["Q"], ["Q"], {"round": "round"}),  # plus an optional unit attribute `saturate`
}
TRAITS = {"quantize": {"Pure"}, "add": {"Pure", "Commutative"}, "sum": {"Pure"}, "dequantize": {"Pure"},
          "requant": {"Pure"}}
ATTRS = {  # values as the printers print them
    "float": ["5.000000e-01 : f32", "1.250000e-02 : f64", "2.000000e+00 : f16", "-7.500000e-01 : bf16"],
    "int": ["3 : i32", "-3 : i8", "127 : i64", "7 : index"],
    "round": [f'#qlite.round<"{m}">' for m in MODES],
    "string": ['"floor"', '"0.5"'],
    "other": ["[1, 2]", "f32", "array<i32: 1>"],
}
EXTRA = ["tag = 1 : i64", 'note = "hot"', "hint = 7 : i32"]  # discardable attributes
GOOD_Q = [f"!qlite.q<{s}>" for s in STORAGE]
BUILTIN = ["f32", "f16", "i32", "bf16", "index", "i8"]
WIDTH = {f"!qlite.q<i{w}>": w for w in (4, 8, 16)}

# The same spec in IRDL, for upstream MLIR (everything IRDL can say; `saturate` is just a discardable attribute)
SPEC_IRDL = """
irdl.dialect @qlite {
  irdl.type @q {
    %a = irdl.is i4
    %b = irdl.is i8
    %c = irdl.is i16
    %s = irdl.any_of(%a, %b, %c)
    irdl.parameters(storage: %s)
  }
  irdl.attribute @round {
    %a = irdl.is "nearest"
    %b = irdl.is "floor"
    %c = irdl.is "ceil"
    %m = irdl.any_of(%a, %b, %c)
    irdl.parameters(mode: %m)
  }
  irdl.operation @quantize {
    %h = irdl.is f16
    %f = irdl.is f32
    %x = irdl.any_of(%h, %f)
    %y = irdl.base @qlite::@q
    %s = irdl.base "#builtin.float"
    %z = irdl.base "#builtin.integer"
    irdl.operands(x: %x)
    irdl.results(y: %y)
    irdl.attributes {"scale" = %s, "zero_point" = %z}
  }
  irdl.operation @add {
    %t = irdl.base @qlite::@q
    irdl.operands(lhs: %t, rhs: %t)
    irdl.results(out: %t)
  }
  irdl.operation @sum {
    %t = irdl.base @qlite::@q
    irdl.operands(ins: variadic %t)
    irdl.results(out: %t)
  }
  irdl.operation @dequantize {
    %q = irdl.base @qlite::@q
    %f = irdl.is f32
    %s = irdl.base "#builtin.float"
    irdl.operands(q: %q)
    irdl.results(y: %f)
    irdl.attributes {"scale" = %s}
  }
  irdl.operation @requant {
    %q = irdl.base @qlite::@q
    %r = irdl.base @qlite::@q
    %m = irdl.base @qlite::@round
    irdl.operands(q: %q)
    irdl.results(r: %r)
    irdl.attributes {"round" = %m}
  }
}
"""


@dataclass
class Case:
    op: str
    operands: list[str]  # types
    results: list[str]
    attrs: dict[str, str]  # name -> printed value (spec attributes first, then discardable ones)
    saturate: bool = False
    fault: str | None = None  # None: valid
    phrase: str = ""  # the VerifyException must contain this
    irdl_can_say: bool = True  # False: IRDL cannot express the violated rule (MLIR accepts the IR)
    extra: list[str] = field(default_factory=list)

    def generic(self) -> str:
        args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(self.operands))
        names = ", ".join(f"%a{i}" for i in range(len(self.operands)))
        items = [f"{k} = {v}" for k, v in self.attrs.items()] + (["saturate"] if self.saturate else []) + self.extra
        attr = " {" + ", ".join(items) + "}" if items else ""
        res = {0: "", 1: "%r = "}.get(len(self.results), f"%r:{len(self.results)} = ")
        outs = self.results[0] if len(self.results) == 1 else f"({', '.join(self.results)})"
        sig = f"({', '.join(self.operands)}) -> {outs}"
        return f'func.func @f({args}) {{\n  {res}"qlite.{self.op}"({names}){attr} : {sig}\n  func.return\n}}\n'

    def custom(self) -> str:
        """The op's line in the custom syntax of the spec's table (valid cases only)."""
        def attr_dict(items):
            return " {" + ", ".join(items) + "}" if items else ""

        a = [f"%a{i}" for i in range(len(self.operands))]
        spec_attrs = [f"{k} = {v}" for k, v in self.attrs.items()]
        if self.op == "quantize":
            return f"%r = qlite.quantize {a[0]}{attr_dict(spec_attrs + self.extra)} : {self.operands[0]} -> " \
                   f"{self.results[0]}"
        if self.op == "add":
            return f"%r = qlite.add {a[0]}, {a[1]}{attr_dict(self.extra)} : {self.results[0]}"
        if self.op == "sum":
            ins = (" " + ", ".join(a)) if a else ""
            return f"%r = qlite.sum{ins}{attr_dict(self.extra)} : {self.results[0]}"
        if self.op == "dequantize":
            return f"%r = qlite.dequantize {a[0]}{attr_dict(spec_attrs + self.extra)} : {self.operands[0]}"
        mode = self.attrs["round"].removeprefix("#qlite.round")  # a known attribute type prints stripped
        sat = " saturate" if self.saturate else ""
        return f"%r = qlite.requant {a[0]} round {mode}{sat}{attr_dict(self.extra)} : " \
               f"({self.operands[0]}) -> {self.results[0]}"


def valid_case(rng: random.Random) -> Case:
    op = rng.choice(list(SPEC))
    slots, rslots, attrs = SPEC[op]
    t = rng.choice(GOOD_Q)
    pick = {"F": lambda: rng.choice(["f16", "f32"]), "F32": lambda: "f32", "T": lambda: t,
            "Q": lambda: rng.choice(GOOD_Q)}
    if slots == "T*":
        slots = ["T"] * rng.choice([0, 1, 2, 3, 5, 9])
    case = Case(op, [pick[s]() for s in slots], [pick[s]() for s in rslots],
                {k: rng.choice(ATTRS[kind]) for k, kind in attrs.items()})
    if op == "requant" and WIDTH[case.results[0]] < WIDTH[case.operands[0]]:
        case.saturate = rng.random() < 0.6  # only a narrowing requant may saturate
    if rng.random() < 0.3:
        case.extra = rng.sample(EXTRA, rng.choice([1, 2]))
    return case


def invalid_case(rng: random.Random) -> Case:
    """A valid case with exactly one violation, the phrase xDSL must report, and whether IRDL can say it."""
    while True:
        case = valid_case(rng)
        slots, rslots, attrs = SPEC[case.op]
        fault = rng.choice(["operand_type", "result_type", "shared_not_q", "operand_count", "result_count",
                            "missing_attr", "attr_kind", "bad_storage", "bad_mode", "saturate_kind",
                            "saturate_widens"])
        case.fault = fault
        if fault == "operand_type" and case.operands:
            i = rng.randrange(len(case.operands))
            case.operands[i] = rng.choice([x for x in GOOD_Q + BUILTIN if _breaks(case, i, x)] or ["i32"])
            if not _breaks(case, i, case.operands[i]):
                continue
            case.phrase = "does not verify"
        elif fault == "result_type":
            new = rng.choice([x for x in GOOD_Q + BUILTIN if _breaks(case, len(case.operands), x)])
            case.results[0] = new
            case.phrase = "does not verify"
        elif fault == "shared_not_q" and case.op in ("add", "sum"):  # all types equal, but not a !qlite.q
            t = rng.choice(BUILTIN)
            case.operands, case.results = [t] * len(case.operands), [t]
            case.phrase = "does not verify"
        elif fault == "operand_count" and slots != "T*":
            case.operands = case.operands[:-1] if rng.random() < 0.5 else case.operands + case.operands[-1:]
            case.phrase = f"Expected {len(slots)} operand"
        elif fault == "result_count":
            case.results = [] if rng.random() < 0.5 else case.results * 2
            case.phrase = "Expected 1 result"
        elif fault == "missing_attr" and attrs:
            del case.attrs[rng.choice(sorted(case.attrs))]
            case.phrase = "expected in operation"
        elif fault == "attr_kind" and attrs:
            name = rng.choice(sorted(case.attrs))
            case.attrs[name] = rng.choice(ATTRS[rng.choice([k for k in ATTRS if k != attrs[name]])])
            case.phrase = "should be of base attribute"
        elif fault == "bad_storage":
            values = case.operands if case.operands and rng.random() < 0.5 else case.results
            values[rng.randrange(len(values))] = rng.choice(["!qlite.q<i32>", "!qlite.q<i1>", "!qlite.q<i2>"])
            case.phrase = "storage must be i4, i8 or i16"
        elif fault == "bad_mode" and case.op == "requant":
            case.attrs["round"] = rng.choice(['#qlite.round<"up">', '#qlite.round<"Floor">'])
            case.phrase = "unknown rounding mode"
        elif fault == "saturate_kind" and case.op == "requant":
            case.saturate = False
            case.extra = ["saturate = 1 : i32"]
            case.phrase, case.irdl_can_say = "should be of base attribute", False
        elif fault == "saturate_widens" and case.op == "requant":
            case.results[0] = rng.choice([q for q in GOOD_Q if WIDTH[q] >= WIDTH[case.operands[0]]])
            case.saturate = True
            case.phrase, case.irdl_can_say = "saturate needs a narrower storage", False
        else:
            continue
        return case


def _breaks(case: Case, i: int, new_type: str) -> bool:
    """Would type `new_type` at position i (operands, then the result) violate the spec?"""
    types = case.operands + case.results
    types = types[:i] + [new_type] + types[i + 1:]
    slots, rslots, _ = SPEC[case.op]
    slots = ["T"] * len(case.operands) if slots == "T*" else slots
    ok = {"F": lambda x: x in ("f16", "f32"), "F32": lambda x: x == "f32", "Q": lambda x: x in GOOD_Q,
          "T": lambda x: x in GOOD_Q}
    t_types = {x for x, s in zip(types, slots + rslots) if s == "T"}
    return not all(ok[s](x) for x, s in zip(types, slots + rslots)) or len(t_types) > 1


def cases(seed: int, n: int, make) -> list[Case]:
    rng = random.Random(seed)
    return [make(rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------------------
# Helpers around xDSL and MLIR


def parse(mod, text: str, ctx=None):
    from xdsl.parser import Parser

    module = Parser(ctx or mod.context(), text).parse_module()
    module.verify()
    return module


def print_op(op, generic: bool = False) -> str:
    from xdsl.printer import Printer

    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(op)
    return out.getvalue()


OP_LINE = re.compile(r'^\s*(%\S+ = )?"?qlite\.')


def qlite_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if OP_LINE.match(ln)]


def qlite_line(text: str) -> str:
    lines = qlite_lines(text)
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def mod(lesson):
    return lesson.load("qlite_ops.py")


def batch(cases_: list[Case]) -> str:
    """All cases as one module, one function each (xDSL parses a module much faster than many)."""
    return "".join(c.generic().replace("func.func @f(", f"func.func @f{i}(") for i, c in enumerate(cases_))


# ---------------------------------------------------------------------------------------------------------
# Tests

DOCUMENTED = """func.func @f(%x: f32, %a: !qlite.q<i8>, %b: !qlite.q<i8>, %q: !qlite.q<i4>) {
  %y = qlite.quantize %x {scale = 5.000000e-01 : f32, zero_point = 3 : i32} : f32 -> !qlite.q<i8>
  %r = qlite.add %a, %b : !qlite.q<i8>
  %s = qlite.sum %a, %b, %r : !qlite.q<i8>
  %z = qlite.sum : !qlite.q<i4>
  %f = qlite.dequantize %a {scale = 2.000000e+00 : f16} : !qlite.q<i8>
  %n = qlite.requant %a round <"floor"> saturate : (!qlite.q<i8>) -> !qlite.q<i4>
  %w = qlite.requant %q round <"ceil"> {tag = 1 : i64} : (!qlite.q<i4>) -> !qlite.q<i16>
  func.return
}
"""
DOCUMENTED_GENERIC = """func.func @f(%x: f32, %a: !qlite.q<i8>, %b: !qlite.q<i8>, %q: !qlite.q<i4>) {
  %y = "qlite.quantize"(%x) {scale = 5.000000e-01 : f32, zero_point = 3 : i32} : (f32) -> !qlite.q<i8>
  %r = "qlite.add"(%a, %b) : (!qlite.q<i8>, !qlite.q<i8>) -> !qlite.q<i8>
  %s = "qlite.sum"(%a, %b, %r) : (!qlite.q<i8>, !qlite.q<i8>, !qlite.q<i8>) -> !qlite.q<i8>
  %z = "qlite.sum"() : () -> !qlite.q<i4>
  %f = "qlite.dequantize"(%a) {scale = 2.000000e+00 : f16} : (!qlite.q<i8>) -> f32
  %n = "qlite.requant"(%a) {round = #qlite.round<"floor">, saturate} : (!qlite.q<i8>) -> !qlite.q<i4>
  %w = "qlite.requant"(%q) {round = #qlite.round<"ceil">, tag = 1 : i64} : (!qlite.q<i4>) -> !qlite.q<i16>
  func.return
}
"""


@pytest.mark.points(1)
def test_documented_syntax_round_trips_and_equals_the_generic_form(mod):
    custom = parse(mod, DOCUMENTED)
    generic = parse(mod, DOCUMENTED_GENERIC)
    assert custom.is_structurally_equivalent(generic), "the custom and the generic form are different ops"
    printed = print_op(custom)
    want, got = qlite_lines(DOCUMENTED), qlite_lines(printed)
    assert got == want, "\n".join(f"printed: {g}\nspec:    {w}" for g, w in zip(got, want) if g != w)
    from xdsl.utils.exceptions import VerifyException

    with pytest.raises(VerifyException, match="qlite.q"):  # all types match, but the constraint on T does not hold
        parse(mod, "func.func @f(%x: f32) {\n  %r = qlite.add %x, %x : f32\n  func.return\n}\n")
    with pytest.raises(VerifyException, match="saturate needs a narrower storage: i8 -> i16"):
        parse(mod, "func.func @f(%a: !qlite.q<i8>) {\n  %n = qlite.requant %a round <\"floor\"> saturate : "
                   "(!qlite.q<i8>) -> !qlite.q<i16>\n  func.return\n}\n")


@pytest.mark.points(1)
def test_generated_ops_round_trip_through_the_custom_syntax(mod):
    batch_cases = cases(seed=4, n=150, make=valid_case)
    ctx = mod.context()
    generic = batch(batch_cases)
    m1 = parse(mod, generic, ctx)
    assert qlite_lines(print_op(m1, generic=True)) == qlite_lines(generic)
    custom = print_op(m1)
    for case, line in zip(batch_cases, qlite_lines(custom), strict=True):
        assert line == case.custom(), (f"custom syntax differs from the spec\n  printed: {line}\n"
                                       f"  spec:    {case.custom()}\nfor the op\n{case.generic()}")
    m2 = parse(mod, custom, ctx)  # the custom form parses back ...
    for _case, l1, l2 in zip(batch_cases, qlite_lines(print_op(m1, generic=True)),
                            qlite_lines(print_op(m2, generic=True)), strict=True):
        assert l1 == l2, f"the custom form parses to another op:\n  {l2}\ninstead of\n  {l1}"
    assert m2.is_structurally_equivalent(m1)  # ... to the very same ops


@pytest.mark.points(1)
def test_constraint_violations_raise_verify_exception(mod):
    from xdsl.utils.exceptions import VerifyException

    bad = cases(seed=5, n=160, make=invalid_case)
    assert {c.fault for c in bad} >= {"operand_type", "result_type", "shared_not_q", "missing_attr", "saturate_widens"}
    ctx = mod.context()
    for case in bad:
        with pytest.raises(VerifyException) as info:
            parse(mod, case.generic(), ctx)
        assert case.phrase in str(info.value), (
            f"{case.fault}: expected a VerifyException saying '{case.phrase}', got:\n{info.value}\n"
            f"for\n{case.generic()}")


class MlirJudge:
    """Upstream MLIR with SPEC_IRDL loaded: `error(text)` -> None or MLIR's diagnostic."""

    def __init__(self):
        from mlir import ir

        self.ir, self.ctx = ir, ir.Context()
        with self.ctx, ir.Location.unknown():
            mlirrun.load_irdl(SPEC_IRDL, self.ctx)

    def error(self, text: str) -> str | None:
        with self.ctx, self.ir.Location.unknown():
            try:
                mlirrun.parse(text, self.ctx).operation.verify()
            except (mlirrun.MlirError, self.ir.MLIRError) as e:
                return str(e)
        return None


@pytest.mark.points(1)
def test_upstream_mlir_agrees_and_reads_what_xdsl_prints(mod):
    from xdsl.utils.exceptions import VerifyException

    judge = MlirJudge()
    ctx = mod.context()
    printed = print_op(parse(mod, batch(cases(seed=6, n=120, make=valid_case)), ctx), generic=True)
    err = judge.error(printed)  # xDSL's generic form of the learner's ops: MLIR must take it
    assert err is None, f"upstream MLIR rejects what xDSL printed:\n{err}"
    for case in cases(seed=7, n=120, make=invalid_case):
        try:
            parse(mod, case.generic(), ctx)
            xdsl_rejects = False
        except VerifyException:
            xdsl_rejects = True
        mlir_err = judge.error(case.generic())
        if case.irdl_can_say:
            assert xdsl_rejects and mlir_err is not None, (
                f"{case.fault}: xDSL {'rejects' if xdsl_rejects else 'accepts'}, upstream MLIR "
                f"{'rejects' if mlir_err else 'accepts'}:\n{case.generic()}{mlir_err or ''}")
        else:  # a rule only the xDSL definition states: MLIR's IRDL dialect accepts, xDSL must reject
            assert xdsl_rejects and mlir_err is None, f"{case.fault}:\n{case.generic()}{mlir_err or ''}"


@pytest.mark.points(1)
def test_traits_are_declared_and_used_by_cse_and_dce(mod):
    from xdsl.traits import Commutative, Pure
    from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    classes = {c.name.removeprefix("qlite."): c for c in mod.QLite.operations}
    assert set(classes) == set(SPEC), f"the dialect holds {sorted(classes)}"
    for name, want in TRAITS.items():
        for trait, cls in (("Pure", Pure), ("Commutative", Commutative)):
            assert classes[name].has_trait(cls) == (trait in want), f"qlite.{name}: {trait} should be " \
                                                                     f"{'declared' if trait in want else 'absent'}"
    text = """func.func @f(%a: !qlite.q<i8>, %b: !qlite.q<i8>) -> !qlite.q<i8> {
  %0 = qlite.add %a, %b : !qlite.q<i8>
  %1 = qlite.add %a, %b : !qlite.q<i8>
  %2 = qlite.sum %0, %1 : !qlite.q<i8>
  %3 = qlite.sum %0, %1 : !qlite.q<i8>
  %dead = qlite.dequantize %3 {scale = 5.000000e-01 : f32} : !qlite.q<i8>
  %4 = qlite.requant %2 round <"floor"> saturate : (!qlite.q<i8>) -> !qlite.q<i4>
  %5 = qlite.requant %4 round <"floor"> : (!qlite.q<i4>) -> !qlite.q<i8>
  func.return %5 : !qlite.q<i8>
}
"""
    m = parse(mod, text)
    CommonSubexpressionElimination().apply(mod.context(), m)
    DeadCodeElimination().apply(mod.context(), m)
    names = [op.name for op in m.walk() if op.name.startswith("qlite.")]
    assert names == ["qlite.add", "qlite.sum", "qlite.requant", "qlite.requant"], (
        f"after CSE + DCE: {names} (Pure ops with equal operands merge, unused Pure ops vanish)")
