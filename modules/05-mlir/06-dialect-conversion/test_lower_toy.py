"""mlir-06 tests: the learner's type converter, conversion target and Toy lowering patterns, run through the
dialect-conversion driver of conversion.py (MLIR's semantics), judged by upstream MLIR 22 and numpy:

- random Toy programs (fixed seed; 1x1 ... 6x6 and 1-D, arguments returned as they are, values used twice) are
  fully converted; nothing of toy and no `unrealized_conversion_cast` is left; MLIR's verifier accepts the result;
  lowered further to LLVM by upstream MLIR and JIT-executed, every program equals numpy (float64, bit for bit);
- legality: the target classifies ops as MLIR's would for this lowering (legal / illegal / unknown);
- partial vs full: Toy Ch-5's program keeps toy.print on a memref; an unknown op survives a partial conversion
  behind source/target materializations and makes a full conversion fail naming it; an illegal op with no pattern
  fails both, with MLIR's two messages.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from pytest_hpccourse.runtimes import mlirrun

CH5 = """func.func @main() -> !toy.tensor<3x2xf64> {
  %0 = toy.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf64> : !toy.tensor<2x3xf64>
  %2 = toy.transpose %0 : !toy.tensor<2x3xf64> to !toy.tensor<3x2xf64>
  %3 = toy.mul %2, %2 : !toy.tensor<3x2xf64>
  toy.print %3 : !toy.tensor<3x2xf64>
  return %3 : !toy.tensor<3x2xf64>
}"""


@pytest.fixture
def L(lesson):
    return lesson.load("lower_toy.py")


@pytest.fixture
def programs(lesson):
    return lesson.load("programs.py")


def op_names(module):
    return [op.name for op in module.walk()]


def lowered(L, text, full=True):
    module = L.toy.parse(text)
    module.verify()
    L.lower(module, full=full)
    module.verify()
    return module


def assert_fully_lowered(module, source):
    names = op_names(module)
    left = sorted({n for n in names if n.startswith(("toy.", "dbg."))})
    assert not left, f"toy ops left after a full conversion: {left}\n{source}\n--- became:\n{module}"
    assert "builtin.unrealized_conversion_cast" not in names, \
        f"a materialization survived the full conversion:\n{source}\n--- became:\n{module}"
    assert "!toy." not in str(module), f"a !toy.tensor type survived:\n{module}"


def assert_in_bounds(programs, module):
    oob = programs.out_of_bounds(module)
    assert not oob, f"out-of-bounds memory accesses in the lowered IR: {oob[:3]}\n{module}"


def special_programs(programs):
    """Edge cases: an argument returned untouched, 1x1, a value used twice, a constant returned, a 1-D vector."""
    t = programs.toy_type
    texts = {
        "q_id": f"func.func @q_id(%a0: {t((2, 3))}) -> {t((2, 3))} {{\n  return %a0 : {t((2, 3))}\n}}",
        "q_1x1": (f"func.func @q_1x1(%a0: {t((1, 1))}, %a1: {t((1, 1))}) -> {t((1, 1))} {{\n"
                  f"  %v0 = toy.mul %a0, %a1 : {t((1, 1))}\n  %v1 = toy.transpose %v0 : {t((1, 1))} to {t((1, 1))}\n"
                  f"  return %v1 : {t((1, 1))}\n}}"),
        "q_twice": (f"func.func @q_twice(%a0: {t((4, 1))}) -> {t((1, 4))} {{\n  %v0 = toy.add %a0, %a0 : {t((4, 1))}\n"
                    f"  %v1 = toy.mul %v0, %v0 : {t((4, 1))}\n  %v2 = toy.transpose %v1 : {t((4, 1))} to {t((1, 4))}\n"
                    f"  return %v2 : {t((1, 4))}\n}}"),
        "q_const": (f"func.func @q_const(%a0: {t((5,))}) -> {t((2, 3))} {{\n"
                    f"  %v0 = toy.constant {programs.dense(np.arange(6.0).reshape(2, 3) / 4 - 0.5)} : {t((2, 3))}\n"
                    f"  return %v0 : {t((2, 3))}\n}}"),
    }
    steps = {
        "q_id": ([(2, 3)], (2, 3), [], 0),
        "q_1x1": ([(1, 1), (1, 1)], (1, 1), [("mul", [0, 1], None), ("transpose", [2], None)], 3),
        "q_twice": ([(4, 1)], (1, 4), [("add", [0, 0], None), ("mul", [1, 1], None), ("transpose", [2], None)], 3),
        "q_const": ([(5,)], (2, 3), [("constant", [], np.arange(6.0).reshape(2, 3) / 4 - 0.5)], 1),
    }
    return [programs.Program(name, a, o, texts[name], s, out) for name, (a, o, s, out) in steps.items()]


@pytest.mark.points(2)
def test_lowered_programs_verify_and_match_numpy(L, programs):
    rng = random.Random(606)
    progs = [programs.random_program(rng, f"p{k}") for k in range(28)] + special_programs(programs)
    module = lowered(L, "\n".join(p.text for p in progs))
    assert_fully_lowered(module, "(the random programs)")
    assert_in_bounds(programs, module)
    funcs = "\n".join(str(op) for op in module.ops)
    try:
        mlirrun.verify("module {\n" + funcs + "\n}")
    except mlirrun.MlirError as e:
        raise AssertionError(f"MLIR's verifier rejects the lowered IR:\n{e}") from None
    bad = programs.run(funcs, progs)
    assert not bad, f"{len(bad)} of {len(progs)} programs compute differently from numpy; first:\n{bad[0]}"


@pytest.mark.points(1)
def test_ch5_example_lowers_and_runs(L, programs):
    """Toy tutorial Ch-5's example (print removed so the value can be returned): [[1,16],[4,25],[9,36]]."""
    text = "\n".join(line for line in CH5.splitlines() if "toy.print" not in line)
    module = lowered(L, text)
    assert_fully_lowered(module, text)
    assert_in_bounds(programs, module)
    names = op_names(module)
    assert names.count("memref.alloc") == 3 and names.count("scf.for") == 4, (
        f"Ch-5 lowers to 3 buffers (constant, transpose, mul) and two 2-deep loop nests:\n{module}")
    p = programs.Program("main", [], (3, 2), text, [("constant", [], np.arange(1.0, 7.0).reshape(2, 3)),
                                                     ("transpose", [0], None), ("mul", [1, 1], None)], 2)
    bad = programs.run("\n".join(str(op) for op in module.ops), [p])
    assert not bad, bad[0]


@pytest.mark.points(1)
def test_target_classifies_ops_like_the_lowering_needs(L):
    conv, toy = L.conversion, L.toy
    converter = L.make_type_converter()
    assert converter.convert_type(toy.ToyTensorType((2, 3))) == conv_memref((2, 3)), \
        "!toy.tensor<2x3xf64> must convert to memref<2x3xf64>"
    for t in (conv_memref((2, 3)), index_type(), f64_type()):
        assert converter.convert_type(t) == t, f"{t} is already legal: it must convert to itself"
    target = L.make_target(converter)
    src = """func.func @legal(%m: memref<2x3xf64>) -> memref<2x3xf64> {
  %c = arith.constant 0 : index
  %x = memref.load %m[%c, %c] : memref<2x3xf64>
  %y = arith.addf %x, %x : f64
  scf.for %i = %c to %c step %c {
    memref.store %y, %m[%i, %c] : memref<2x3xf64>
  }
  toy.print %m : memref<2x3xf64>
  return %m : memref<2x3xf64>
}
func.func @illegal(%a: !toy.tensor<2x3xf64>) -> !toy.tensor<3x2xf64> {
  %0 = toy.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf64> : !toy.tensor<2x3xf64>
  %1 = toy.add %0, %a : !toy.tensor<2x3xf64>
  %2 = toy.mul %1, %a : !toy.tensor<2x3xf64>
  %3 = toy.transpose %2 : !toy.tensor<2x3xf64> to !toy.tensor<3x2xf64>
  %4 = toy.reshape %3 : !toy.tensor<3x2xf64> to !toy.tensor<3x2xf64>
  toy.print %4 : !toy.tensor<3x2xf64>
  return %4 : !toy.tensor<3x2xf64>
}
func.func @unknown(%a: memref<2xf64>) -> memref<2xf64> {
  %0 = dbg.opaque %a : memref<2xf64>
  return %0 : memref<2xf64>
}"""
    module = toy.parse(src)
    want = {"legal": conv.Legality.LEGAL, "illegal": conv.Legality.ILLEGAL}
    for f in module.ops:
        for op in f.walk():
            got = target.legality(op)
            if op.name == "dbg.opaque":
                assert got is conv.Legality.UNKNOWN, f"dbg.opaque is no business of this target: unknown, not {got}"
            elif op.name in ("scf.yield",) or f.sym_name.data == "unknown":
                continue
            else:
                w = want[f.sym_name.data]
                if op.name.startswith(("arith.", "memref.", "scf.")):
                    w = conv.Legality.LEGAL
                assert got is w, f"{op.name} in @{f.sym_name.data}: the target says {got.value}, expected {w.value}"
    assert target.legality(module) is conv.Legality.LEGAL, \
        "builtin.module must be legal, or a full conversion fails on the module itself"


def conv_memref(shape):
    from xdsl.dialects.builtin import MemRefType, f64

    return MemRefType(f64, shape)


def index_type():
    from xdsl.dialects.builtin import IndexType

    return IndexType()


def f64_type():
    from xdsl.dialects.builtin import f64

    return f64


@pytest.mark.points(1)
def test_partial_lowering_keeps_print_on_a_memref(L):
    module = lowered(L, CH5, full=False)
    prints = [op for op in module.walk() if op.name == "toy.print"]
    assert len(prints) == 1, f"toy.print is not lowered in this lesson (Ch-5): it must stay\n{module}"
    operand = prints[0].operands[0]
    assert operand.type == conv_memref((3, 2)) and operand.owner.name == "memref.alloc", (
        f"toy.print must print the mul's buffer directly (its operand updated, no cast in between):\n{module}")
    assert "builtin.unrealized_conversion_cast" not in op_names(module), f"a cast survived:\n{module}"
    full = lowered(L, CH5, full=True)  # print is (dynamically) legal on a memref: the full conversion succeeds too
    assert [op.name for op in full.walk()].count("toy.print") == 1


@pytest.mark.points(1)
def test_unknown_op_partial_vs_full(L):
    text = """func.func @f(%a: !toy.tensor<2x2xf64>) -> !toy.tensor<2x2xf64> {
  %0 = toy.add %a, %a : !toy.tensor<2x2xf64>
  %1 = dbg.opaque %0 : !toy.tensor<2x2xf64>
  %2 = toy.mul %1, %a : !toy.tensor<2x2xf64>
  return %2 : !toy.tensor<2x2xf64>
}"""
    module = lowered(L, text, full=False)
    (opaque,) = [op for op in module.walk() if op.name == "dbg.opaque"]
    src = opaque.operands[0].owner
    assert src.name == "builtin.unrealized_conversion_cast" and src.operands[0].type == conv_memref((2, 2)), (
        f"partial conversion: dbg.opaque (unknown) stays and still gets a !toy.tensor, through a source "
        f"materialization of the add's buffer:\n{module}")
    users = [u.operation for u in opaque.results[0].uses]
    assert users and all(u.name == "builtin.unrealized_conversion_cast" and u.results[0].type == conv_memref((2, 2))
                         for u in users), f"the lowered mul reads dbg.opaque's result through a target " \
                                          f"materialization to memref:\n{module}"
    assert not [op for op in module.walk() if op.name.startswith("toy.")], f"toy ops left:\n{module}"
    with pytest.raises(L.conversion.ConversionError, match=r"^failed to legalize operation 'dbg\.opaque'$"):
        lowered(L, text, full=True)


@pytest.mark.points(1)
def test_illegal_op_without_a_pattern_fails_both_modes(L):
    text = """func.func @f(%a: !toy.tensor<2x3xf64>) -> !toy.tensor<3x2xf64> {
  %0 = toy.mul %a, %a : !toy.tensor<2x3xf64>
  %1 = toy.reshape %0 : !toy.tensor<2x3xf64> to !toy.tensor<3x2xf64>
  return %1 : !toy.tensor<3x2xf64>
}"""
    with pytest.raises(L.conversion.ConversionError,
                       match=r"^failed to legalize operation 'toy\.reshape' that was explicitly marked illegal"):
        lowered(L, text, full=False)
    with pytest.raises(L.conversion.ConversionError, match=r"^failed to legalize operation 'toy\.reshape'$"):
        lowered(L, text, full=True)
