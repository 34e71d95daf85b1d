"""mlir-06: lower the Toy dialect to arith + scf + memref + func with dialect conversion (Toy tutorial Ch-5,
with scf loops instead of affine ones and an explicit type converter !toy.tensor<SxE> -> memref<SxE>).

    func.func @f(%a: !toy.tensor<2x3xf64>) -> !toy.tensor<3x2xf64> {
      %t = toy.transpose %a : !toy.tensor<2x3xf64> to !toy.tensor<3x2xf64>
      return %t : !toy.tensor<3x2xf64>
    }
  ==>
    func.func @f(%a: memref<2x3xf64>) -> memref<3x2xf64> {
      %t = memref.alloc() : memref<3x2xf64>
      scf.for %i ... { scf.for %j ... { %x = memref.load %a[%j, %i]; memref.store %x, %t[%i, %j] } }
      return %t : memref<3x2xf64>
    }

`lower(module, full=...)` runs the conversion of conversion.py (MLIR's semantics) with the target, the type
converter and the patterns below. toy.print is not lowered here (as in Ch-5): it stays, legal once its operand is
a memref. toy.reshape has no lowering in this lesson.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from xdsl.builder import Builder
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import FloatAttr, IndexType, MemRefType, ModuleOp, f64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint


def _sibling(name: str):
    """conversion.py / toy.py next to this file, imported once under a name unique to this folder."""
    path = Path(__file__).with_name(f"{name}.py")
    key = f"hpccourse_mlir06_{name}_{abs(hash(str(path.resolve()))):x}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


conversion = _sibling("conversion")  # the dialect-conversion driver (MLIR's semantics)
toy = _sibling("toy")  # the Toy dialect
ConversionPattern, ConversionRewriter = conversion.ConversionPattern, conversion.ConversionRewriter
ConversionTarget, TypeConverter, unrealized_cast = conversion.ConversionTarget, conversion.TypeConverter, \
    conversion.unrealized_cast
ToyTensorType = toy.ToyTensorType


def index(builder: ConversionRewriter | Builder, i: int) -> SSAValue:
    return builder.insert(arith.ConstantOp.from_int_and_width(i, IndexType())).result


def lower_to_loops(rewriter: ConversionRewriter, memref_type: MemRefType,
                   body: Callable[[Builder, list[SSAValue]], SSAValue]) -> SSAValue:
    """Toy Ch-5's lowerOpToLoops with scf: allocate the result buffer, build a loop nest over its shape and, in the
    innermost body, store body(builder, ivs) at [ivs]. Returns the buffer (the op's replacement value)."""
    alloc = rewriter.insert(memref.AllocOp.get(memref_type.element_type, shape=memref_type.get_shape()))
    zero, one = index(rewriter, 0), index(rewriter, 1)
    ivs: list[SSAValue] = []
    builder: ConversionRewriter | Builder = rewriter
    for size in memref_type.get_shape():
        block = Block(arg_types=[IndexType()])
        builder.insert(scf.ForOp(zero, index(builder, size), one, [], block))
        ivs.append(block.args[0])
        builder = Builder(InsertPoint.at_end(block))
    value = body(builder, ivs)
    builder.insert(memref.StoreOp.get(value, alloc, ivs))
    for iv in reversed(ivs):  # close every loop body with its terminator
        Builder(InsertPoint.at_end(iv.owner)).insert(scf.YieldOp())
    return alloc.memref


def make_type_converter() -> TypeConverter:
    """!toy.tensor<SxE> -> memref<SxE>; every other type is already legal; unresolved casts become
    builtin.unrealized_conversion_cast (both directions) for a later pass to remove."""
    converter = TypeConverter()
    ### HINT: conversions are tried most-recently-added first; a type that needs no conversion must convert to itself
    ### BEGIN SOLUTION
    converter.add_conversion(lambda t: t)
    converter.add_conversion(
        lambda t: MemRefType(t.element_type, t.get_shape()) if isinstance(t, ToyTensorType) else None)
    converter.add_source_materialization(unrealized_cast)
    converter.add_target_materialization(unrealized_cast)
    ### END SOLUTION
    return converter


def make_target(converter: TypeConverter) -> ConversionTarget:
    """Legal after lowering: arith, scf, memref, the module, functions and returns whose types are legal, and
    toy.print on a memref. The whole toy dialect is illegal otherwise."""
    target = ConversionTarget()
    ### HINT: op-specific actions beat dialect actions; func.func, func.return, toy.print are legal for some types only
    ### BEGIN SOLUTION
    target.add_legal_dialect("arith", "scf", "memref")
    target.add_legal_op("builtin.module")
    target.add_illegal_dialect("toy")
    target.add_dynamically_legal_op("toy.print", lambda op: not isinstance(op.operands[0].type, ToyTensorType))
    target.add_dynamically_legal_op("func.func", lambda op: converter.is_signature_legal(op.function_type))
    target.add_dynamically_legal_op("func.return", lambda op: all(converter.is_legal(v.type) for v in op.operands))
    ### END SOLUTION
    return target


class ConstantLowering(ConversionPattern):
    """toy.constant -> memref.alloc + one arith.constant and one memref.store per element (row-major)."""

    root = "toy.constant"

    def __init__(self, converter: TypeConverter):
        self.converter = converter

    def match_and_rewrite(self, op: Operation, operands: Sequence[SSAValue], rewriter: ConversionRewriter) -> bool:
        memref_type = self.converter.convert_type(op.res.type)
        values = op.value.get_values()  # flat, row-major
        ### HINT: element k of the flat list sits at the row-major multi-index of k in the result's shape
        ### BEGIN SOLUTION
        shape = memref_type.get_shape()
        alloc = rewriter.insert(memref.AllocOp.get(memref_type.element_type, shape=shape))
        for k, v in enumerate(values):
            ivs, rest = [], k
            for size in reversed(shape):  # row-major: the last dimension varies fastest
                ivs.append(rest % size)
                rest //= size
            element = rewriter.insert(arith.ConstantOp(FloatAttr(v, f64))).result
            rewriter.insert(memref.StoreOp.get(element, alloc, [index(rewriter, i) for i in reversed(ivs)]))
        rewriter.replace_op(op, [alloc.memref])
        return True
        ### END SOLUTION


class ElementwiseLowering(ConversionPattern):
    """toy.add / toy.mul -> a loop nest of memref.load, arith.addf / arith.mulf, memref.store."""

    def __init__(self, root: str, arith_op: type[Operation], converter: TypeConverter):
        self.root, self.arith_op, self.converter = root, arith_op, converter

    def match_and_rewrite(self, op: Operation, operands: Sequence[SSAValue], rewriter: ConversionRewriter) -> bool:
        lhs, rhs = operands  # remapped: memrefs, even though op.lhs / op.rhs are still !toy.tensor values
        ### HINT: lower_to_loops(rewriter, memref_type, body) builds alloc + loops + store; body returns the element
        ### BEGIN SOLUTION
        def body(b: Builder, ivs: list[SSAValue]) -> SSAValue:
            x = b.insert(memref.LoadOp.get(lhs, ivs)).res
            y = b.insert(memref.LoadOp.get(rhs, ivs)).res
            return b.insert(self.arith_op(x, y)).result

        rewriter.replace_op(op, [lower_to_loops(rewriter, self.converter.convert_type(op.res.type), body)])
        return True
        ### END SOLUTION


class TransposeLowering(ConversionPattern):
    """toy.transpose (2-D) -> a loop nest over the result storing input[j, i] at [i, j]."""

    root = "toy.transpose"

    def __init__(self, converter: TypeConverter):
        self.converter = converter

    def match_and_rewrite(self, op: Operation, operands: Sequence[SSAValue], rewriter: ConversionRewriter) -> bool:
        (source,) = operands
        ### BEGIN SOLUTION
        def body(b: Builder, ivs: list[SSAValue]) -> SSAValue:
            return b.insert(memref.LoadOp.get(source, list(reversed(ivs)))).res

        rewriter.replace_op(op, [lower_to_loops(rewriter, self.converter.convert_type(op.res.type), body)])
        return True
        ### END SOLUTION


class PrintOperandUpdate(ConversionPattern):
    """toy.print is not lowered (Ch-5): it only switches to the remapped memref operand."""

    root = "toy.print"

    def match_and_rewrite(self, op: Operation, operands: Sequence[SSAValue], rewriter: ConversionRewriter) -> bool:
        ### BEGIN SOLUTION
        rewriter.update_operands(op, operands)
        return True
        ### END SOLUTION


def patterns(converter: TypeConverter) -> list[ConversionPattern]:
    return [ConstantLowering(converter), ElementwiseLowering("toy.add", arith.AddfOp, converter),
            ElementwiseLowering("toy.mul", arith.MulfOp, converter), TransposeLowering(converter),
            PrintOperandUpdate(), conversion.FuncSignatureConversion(converter), conversion.ReturnOperandsConversion()]


def lower(module: ModuleOp, *, full: bool) -> None:
    """Lower `module` in place; full=True: applyFullConversion, else applyPartialConversion (ConversionError)."""
    converter = make_type_converter()
    apply = conversion.apply_full_conversion if full else conversion.apply_partial_conversion
    apply(module, make_target(converter), patterns(converter), converter)
