"""A small Toy dialect in xDSL (after MLIR's Toy tutorial, mlir/docs/Tutorials/Toy) and a `dbg` dialect.

    !toy.tensor<2x3xf64>                       a value-semantics tensor of f64 (no memory behind it)
    %c = toy.constant dense<[[1.0, 2.0]]> : tensor<1x2xf64> : !toy.tensor<1x2xf64>
    %s = toy.add %a, %b : !toy.tensor<2x3xf64>          elementwise
    %p = toy.mul %a, %b : !toy.tensor<2x3xf64>          elementwise
    %t = toy.transpose %a : !toy.tensor<2x3xf64> to !toy.tensor<3x2xf64>
    %r = toy.reshape %a : !toy.tensor<2x3xf64> to !toy.tensor<3x2xf64>   (this lesson has no lowering for it)
    toy.print %a : !toy.tensor<2x3xf64>      also accepts memref<2x3xf64> (Toy Ch-5's trick for partial lowering)

`dbg.opaque` (same type in and out) is an op of a dialect the conversion target knows nothing about.
Functions are plain `func.func`s whose arguments and results may be `!toy.tensor`s.
"""

from __future__ import annotations

import math
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    Float64Type,
    IntAttr,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


@irdl_attr_definition
class ToyTensorType(ParametrizedAttribute, TypeAttribute):
    """!toy.tensor<d0 x d1 x ... x f64>"""

    name = "toy.tensor"
    shape: ArrayAttr[IntAttr]
    element_type: Float64Type

    def __init__(self, shape, element_type: Attribute | None = None):
        super().__init__(ArrayAttr(IntAttr(d) for d in shape), element_type or builtin.f64)

    def get_shape(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            dims, elem = parser.parse_ranked_shape()
        return [ArrayAttr(IntAttr(d) for d in dims), elem]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + "".join(f"{d}x" for d in self.get_shape()))
        printer.print_attribute(self.element_type)
        printer.print_string(">")

    def verify(self) -> None:
        if not self.shape.data or any(d.data < 1 for d in self.shape.data):
            raise VerifyException(f"!toy.tensor needs a static shape of positive sizes, got {self.get_shape()}")


def numel(t: ToyTensorType | MemRefType) -> int:
    return math.prod(t.get_shape())


@irdl_op_definition
class ConstantOp(IRDLOperation):
    name = "toy.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    res = result_def(ToyTensorType)
    assembly_format = "$value attr-dict `:` type($res)"

    def __init__(self, value: DenseIntOrFPElementsAttr, res_type: ToyTensorType):
        super().__init__(properties={"value": value}, result_types=[res_type])

    def verify_(self) -> None:
        if tuple(self.value.get_shape()) != self.res.type.get_shape():
            raise VerifyException(f"toy.constant: value shape {self.value.get_shape()} != result shape "
                                  f"{self.res.type.get_shape()}")


class _Elementwise(IRDLOperation):
    T: ClassVar = VarConstraint("T", base(ToyTensorType))
    lhs = operand_def(T)
    rhs = operand_def(T)
    res = result_def(T)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($res)"

    def __init__(self, lhs, rhs):
        super().__init__(operands=[lhs, rhs], result_types=[lhs.type])


@irdl_op_definition
class AddOp(_Elementwise):
    name = "toy.add"


@irdl_op_definition
class MulOp(_Elementwise):
    name = "toy.mul"


@irdl_op_definition
class TransposeOp(IRDLOperation):
    name = "toy.transpose"
    input = operand_def(ToyTensorType)
    res = result_def(ToyTensorType)
    assembly_format = "$input attr-dict `:` type($input) `to` type($res)"

    def verify_(self) -> None:
        shape = self.input.type.get_shape()
        if len(shape) != 2 or self.res.type.get_shape() != shape[::-1]:
            raise VerifyException(f"toy.transpose: {shape} cannot become {self.res.type.get_shape()}")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    name = "toy.reshape"
    input = operand_def(ToyTensorType)
    res = result_def(ToyTensorType)
    assembly_format = "$input attr-dict `:` type($input) `to` type($res)"

    def verify_(self) -> None:
        if numel(self.input.type) != numel(self.res.type):
            raise VerifyException("toy.reshape must keep the number of elements")


@irdl_op_definition
class PrintOp(IRDLOperation):
    name = "toy.print"
    input = operand_def(base(ToyTensorType) | base(MemRefType))
    assembly_format = "$input attr-dict `:` type($input)"


@irdl_op_definition
class OpaqueOp(IRDLOperation):
    """An op from a dialect no conversion target mentions: 'unknown' to the target."""

    name = "dbg.opaque"
    T: ClassVar = VarConstraint("T", base(ToyTensorType) | base(MemRefType))
    input = operand_def(T)
    res = result_def(T)
    assembly_format = "$input attr-dict `:` type($res)"


Toy = Dialect("toy", [ConstantOp, AddOp, MulOp, TransposeOp, ReshapeOp, PrintOp], [ToyTensorType])
Dbg = Dialect("dbg", [OpaqueOp], [])


def context() -> Context:
    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith, memref.MemRef, scf.Scf, Toy, Dbg):
        ctx.load_dialect(d)
    return ctx


def parse(text: str) -> ModuleOp:
    """Toy program text (func + toy + dbg) -> an xDSL module."""
    return Parser(context(), text).parse_module()
