"""mlir-04: the qlite dialect of mlir-03, now as Python op definitions (xDSL 0.75) with custom syntax.

ODS (TableGen) is how upstream MLIR defines ops in C++ projects; xDSL's `irdl_op_definition` takes the same
fields in Python (README.md maps them one by one). Each op below declares
  - its operands / results / attributes with constraints   (ODS `arguments`, `results`)
  - shared type variables                                   (ODS `AllTypesMatch`, `SameOperandsAndResultType`)
  - traits                                                  (ODS trait list: `Pure`, `Commutative`)
  - a declarative assembly format                           (ODS `assemblyFormat`)
  - a hand-written verifier where constraints cannot say it (ODS `hasVerifier = 1`)

The spec (README.md has the same table). "Q" is any !qlite.q<...>; attributes are inherent ATTRIBUTES
(`attr_def`), not properties: the cross-check loads the same dialect into upstream MLIR through IRDL, and
IRDL-defined (extensible) dialects do not support properties.

  op               operands / results             attributes                          traits
  qlite.quantize   (x: f16|f32) -> (y: Q)          scale: FloatAttr, zero_point: IntegerAttr   Pure      (given)
  qlite.add        (lhs: T, rhs: T) -> (out: T)    -                                   Pure, Commutative
  qlite.sum        (ins: T, variadic) -> (out: T)  -                                   Pure
  qlite.dequantize (q: Q) -> (y: f32)              scale: FloatAttr                    Pure
  qlite.requant    (q: Q) -> (r: Q)                round: RoundAttr, saturate: optional UnitAttr   Pure
     verifier: with `saturate`, the result storage must be narrower than the operand's:
               VerifyException("saturate needs a narrower storage: i8 -> i16")

Custom syntax (exactly what the printer must print; attributes not named in the format go to the attr-dict):

  %y = qlite.quantize %x {scale = 5.000000e-01 : f32, zero_point = 3 : i32} : f32 -> !qlite.q<i8>
  %r = qlite.add %a, %b : !qlite.q<i8>
  %s = qlite.sum %a, %b, %c : !qlite.q<i8>            %z = qlite.sum : !qlite.q<i4>
  %f = qlite.dequantize %q {scale = 2.000000e+00 : f16} : !qlite.q<i8>
  %n = qlite.requant %q round <"floor"> saturate : (!qlite.q<i8>) -> !qlite.q<i4>
  %w = qlite.requant %q round <"ceil"> {tag = 1 : i64} : (!qlite.q<i4>) -> !qlite.q<i16>
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import (
    Builtin,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    UnitAttr,
    f16,
    f32,
)
from xdsl.dialects.func import Func
from xdsl.ir import Dialect, ParametrizedAttribute, TypeAttribute

# Some of these names are not used by the reference: they are here so that a learner (and the lesson's
# mutants) can use them without editing the imports.
from xdsl.irdl import (  # noqa: F401
    AnyAttr,
    EqAttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    attr_def,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    param_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Commutative, Pure
from xdsl.utils.exceptions import VerifyException

STORAGE = (IntegerType(4), IntegerType(8), IntegerType(16))
MODES = ("nearest", "floor", "ceil")


@irdl_attr_definition
class QType(ParametrizedAttribute, TypeAttribute):
    """!qlite.q<storage>: a quantized value stored as i4, i8 or i16."""

    name = "qlite.q"
    storage: IntegerType = param_def(IntegerType)

    def verify(self) -> None:
        if self.storage not in STORAGE:
            raise VerifyException(f"storage must be i4, i8 or i16, got {self.storage}")


@irdl_attr_definition
class RoundAttr(ParametrizedAttribute):
    """#qlite.round<"mode">: the rounding mode of a requantization."""

    name = "qlite.round"
    mode: StringAttr = param_def(StringAttr)

    def verify(self) -> None:
        if self.mode.data not in MODES:
            raise VerifyException(f"unknown rounding mode {self.mode}")


@irdl_op_definition
class QuantizeOp(IRDLOperation):
    """Worked example: a constraint per operand/result, two required attributes, a trait, a format."""

    name = "qlite.quantize"
    x = operand_def(EqAttrConstraint(f16) | EqAttrConstraint(f32))  # ODS: AnyTypeOf<[F16, F32]>:$x
    y = result_def(QType)  # a class as constraint: any QType
    scale = attr_def(FloatAttr)
    zero_point = attr_def(IntegerAttr)
    traits = traits_def(Pure())
    assembly_format = "$x attr-dict `:` type($x) `->` type($y)"


### HINT: one VarConstraint per op whose types must all match; a type the constraints fix needs no type() directive
### BEGIN SOLUTION
@irdl_op_definition
class AddOp(IRDLOperation):
    name = "qlite.add"
    T: ClassVar = VarConstraint("T", base(QType))  # ODS: SameOperandsAndResultType
    lhs = operand_def(T)
    rhs = operand_def(T)
    out = result_def(T)
    traits = traits_def(Pure(), Commutative())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($out)"


@irdl_op_definition
class SumOp(IRDLOperation):
    name = "qlite.sum"
    T: ClassVar = VarConstraint("T", base(QType))
    ins = var_operand_def(T)  # ODS: Variadic<QType>:$ins plus AllTypesMatch
    out = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$ins attr-dict `:` type($out)"


@irdl_op_definition
class DequantizeOp(IRDLOperation):
    name = "qlite.dequantize"
    q = operand_def(QType)
    y = result_def(EqAttrConstraint(f32))  # fixed type: the parser infers it
    scale = attr_def(FloatAttr)
    traits = traits_def(Pure())
    assembly_format = "$q attr-dict `:` type($q)"


@irdl_op_definition
class RequantOp(IRDLOperation):
    name = "qlite.requant"
    q = operand_def(QType)
    r = result_def(QType)
    round = attr_def(RoundAttr)
    saturate = opt_attr_def(UnitAttr)
    traits = traits_def(Pure())
    assembly_format = "$q `round` $round (`saturate` $saturate^)? attr-dict `:` functional-type($q, $r)"

    def verify_(self) -> None:  # ODS: hasVerifier = 1
        src, dst = self.q.type.storage, self.r.type.storage
        if self.saturate is not None and dst.width.data >= src.width.data:
            raise VerifyException(f"saturate needs a narrower storage: {src} -> {dst}")
### END SOLUTION


QLite = Dialect("qlite", [QuantizeOp, AddOp, SumOp, DequantizeOp, RequantOp], [QType, RoundAttr])


def context() -> Context:
    """An xDSL context with builtin, func and qlite loaded."""
    ctx = Context()
    for d in (Builtin, Func, QLite):
        ctx.load_dialect(d)
    return ctx


__all__ = ["QType", "RoundAttr", "QuantizeOp", "AddOp", "SumOp", "DequantizeOp", "RequantOp", "QLite", "context",
           "Float16Type", "Float32Type"]
