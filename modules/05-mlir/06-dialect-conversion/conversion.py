"""A dialect-conversion driver with MLIR's semantics, on xDSL IR (xDSL 0.75 has none; MLIR's Python bindings
expose none). It follows mlir/docs/DialectConversion.md and mlir/lib/Transforms/Utils/DialectConversion.cpp
(llvmorg-22), simplified where noted:

- ConversionTarget: per op name or per dialect, an op is Legal, Illegal, Dynamic (a callback decides) or, when
  nothing is said about it, Unknown. An op-specific action wins over its dialect's.
- The driver walks the ops in preorder (the root included). A legal op is kept. Any other op is handed to the
  ConversionPatterns rooted at its name (highest benefit first) with its REMAPPED operands: values already
  converted, or a target materialization of an unconverted value. Ops a pattern creates must be legal (or be
  legalized by patterns in turn); an op a pattern updated in place must be legal afterwards.
- An op no pattern legalizes: a FULL conversion fails ("failed to legalize operation 'x'"); a PARTIAL one fails
  only when the op is illegal ("... that was explicitly marked illegal") and leaves unknown ops in place.
- Types: a result replaced by a value of another type keeps its old-type users working through a SOURCE
  materialization (new -> old type); a pattern that needs converted operands gets TARGET materializations
  (old -> new type). The driver builds both as `builtin.unrealized_conversion_cast` while it runs; at the end
  it erases the dead ones, folds cast(cast(x)) back to x, and hands each cast that is still used to the type
  converter's materialization callbacks. If no callback produces a value, the conversion fails with "failed to
  legalize unresolved materialization ... that remained live after conversion".
Simplifications: no rollback (a pattern must check before it changes anything; changing the IR and then
returning False is reported), no folding, no 1:N type conversions, no recursive legality.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from xdsl.builder import Builder
from xdsl.dialects.builtin import FunctionType, UnrealizedConversionCastOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter


class ConversionError(Exception):
    """The conversion failed; the message is MLIR's diagnostic text for the same failure."""


class Legality(enum.Enum):
    LEGAL = "legal"
    ILLEGAL = "illegal"
    UNKNOWN = "unknown"


LegalityFn = Callable[[Operation], bool]


class ConversionTarget:
    """What counts as legal after the conversion (mlir::ConversionTarget)."""

    def __init__(self) -> None:
        self._ops: dict[str, bool | LegalityFn] = {}
        self._dialects: dict[str, bool | LegalityFn] = {}

    def add_legal_dialect(self, *dialects: str) -> None:
        self._dialects.update(dict.fromkeys(dialects, True))

    def add_illegal_dialect(self, *dialects: str) -> None:
        self._dialects.update(dict.fromkeys(dialects, False))

    def add_dynamically_legal_dialect(self, dialect: str, fn: LegalityFn) -> None:
        self._dialects[dialect] = fn

    def add_legal_op(self, *names: str) -> None:
        self._ops.update(dict.fromkeys(names, True))

    def add_illegal_op(self, *names: str) -> None:
        self._ops.update(dict.fromkeys(names, False))

    def add_dynamically_legal_op(self, name: str, fn: LegalityFn) -> None:
        self._ops[name] = fn

    def legality(self, op: Operation) -> Legality:
        action = self._ops.get(op.name, self._dialects.get(op.name.split(".", 1)[0]))
        if action is None:
            return Legality.UNKNOWN
        if callable(action):
            return Legality.LEGAL if action(op) else Legality.ILLEGAL  # a failed dynamic check counts as illegal
        return Legality.LEGAL if action else Legality.ILLEGAL


Materialization = Callable[["ConversionRewriter", SSAValue, Attribute], SSAValue | None]


class TypeConverter:
    """How types convert (mlir::TypeConverter): conversions are tried most recently added first; a conversion
    returns the new type or None ("not mine, try the next"); no answer at all means "cannot convert"."""

    def __init__(self) -> None:
        self._conversions: list[Callable[[Attribute], Attribute | None]] = []
        self._source: list[Materialization] = []
        self._target: list[Materialization] = []

    def add_conversion(self, fn: Callable[[Attribute], Attribute | None]) -> None:
        self._conversions.append(fn)

    def add_source_materialization(self, fn: Materialization) -> None:
        """fn(rewriter, value_of_new_type, old_type) -> a value of old_type, or None."""
        self._source.append(fn)

    def add_target_materialization(self, fn: Materialization) -> None:
        """fn(rewriter, value_of_old_type, new_type) -> a value of new_type, or None."""
        self._target.append(fn)

    def convert_type(self, typ: Attribute) -> Attribute | None:
        for fn in reversed(self._conversions):
            out = fn(typ)
            if out is not None:
                return out
        return None

    def is_legal(self, typ: Attribute) -> bool:
        return self.convert_type(typ) == typ

    def is_signature_legal(self, ftype: FunctionType) -> bool:
        return all(self.is_legal(t) for t in (*ftype.inputs.data, *ftype.outputs.data))

    def materialize(self, kind: str, rewriter: ConversionRewriter, value: SSAValue, typ: Attribute):
        for fn in reversed(self._source if kind == "source" else self._target):
            out = fn(rewriter, value, typ)
            if out is not None:
                return out
        return None


def unrealized_cast(rewriter: ConversionRewriter, value: SSAValue, typ: Attribute) -> SSAValue:
    """A materialization callback: `builtin.unrealized_conversion_cast value : A to typ` (left for a later pass)."""
    return rewriter.insert(UnrealizedConversionCastOp.get([value], [typ])).results[0]


class ConversionPattern:
    """Rewrites one op rooted at `root` (an op name). `match_and_rewrite(op, operands, rewriter)` gets the
    remapped operands and returns True on success; it must not change the IR when it returns False."""

    root: str = ""
    benefit: int = 1

    def match_and_rewrite(self, op: Operation, operands: Sequence[SSAValue], rewriter: ConversionRewriter) -> bool:
        raise NotImplementedError


class ConversionRewriter:
    """What a pattern may do: insert ops before the op being converted, replace or erase ops, update an op's
    operands in place, convert the signature of a block."""

    def __init__(self, driver: _Driver, op: Operation):
        self._driver = driver
        self.op = op
        self.created: list[Operation] = []
        self.changed = False
        self.insertion_point = InsertPoint.before(op)

    def insert(self, new_op: Operation) -> Operation:
        Rewriter.insert_op(new_op, self.insertion_point)
        self.created.append(new_op)
        self.changed = True
        return new_op

    def builder_at_end(self, block: Block) -> Builder:
        """An xDSL Builder for a block of an op this rewriter created (a loop body): builder.insert(op)."""
        return Builder(InsertPoint.at_end(block))

    def replace_op(self, op: Operation, values: Sequence[SSAValue]) -> None:
        self._driver.replace(op, values)
        self.changed = True

    def erase_op(self, op: Operation) -> None:
        self._driver.erase(op)
        self.changed = True

    def update_operands(self, op: Operation, values: Sequence[SSAValue]) -> None:
        op.operands = list(values)
        self.changed = True

    def convert_block_signature(self, block: Block) -> None:
        self._driver.convert_block_signature(block)
        self.changed = True


class _Driver:
    def __init__(self, target: ConversionTarget, patterns: Sequence[ConversionPattern],
                 converter: TypeConverter | None, full: bool):
        self.target, self.converter, self.full = target, converter, full
        self.patterns = sorted(patterns, key=lambda p: -p.benefit)  # stable: ties keep list order
        self.casts: dict[Operation, str] = {}  # materializations built while converting -> "source" | "target"

    # -- conversion ----------------------------------------------------------------------------------------
    def run(self, root: Operation) -> None:
        for op in list(root.walk()):
            if op is not root and op.parent is None:
                continue  # erased or replaced by an earlier pattern
            if not self.legalize(op):
                self.fail(op)
        self.finalize()

    def fail(self, op: Operation, note: str = "") -> None:
        if self.full:
            raise ConversionError(f"failed to legalize operation '{op.name}'{note}")
        if self.target.legality(op) is Legality.ILLEGAL:
            raise ConversionError(f"failed to legalize operation '{op.name}' that was explicitly marked illegal{note}")

    def legalize(self, op: Operation) -> bool:
        if self.target.legality(op) is Legality.LEGAL:
            return True
        for pattern in self.patterns:
            if pattern.root != op.name:
                continue
            rewriter = ConversionRewriter(self, op)
            operands = self.remap(op, rewriter)
            if operands is None:
                continue  # an operand type the converter cannot convert: the pattern does not apply
            if not pattern.match_and_rewrite(op, operands, rewriter):
                if any(new.parent is not None for new in rewriter.created) or op.parent is None:
                    raise ConversionError(f"pattern {type(pattern).__name__} changed the IR and then returned False "
                                          f"(this driver cannot roll back)")
                continue
            for new in [o for created in rewriter.created for o in created.walk()]:
                if new not in self.casts and new.parent is not None and not self.legalize(new):
                    note = f"\n  note: pattern {type(pattern).__name__} created '{new.name}', which is not legal"
                    self.fail(op, note)
                    if not self.full:
                        return True
            if op.parent is not None and self.target.legality(op) is not Legality.LEGAL:
                self.fail(op, f"\n  note: pattern {type(pattern).__name__} updated it in place, but it is still "
                              "not legal")
            return True
        return False

    def remap(self, op: Operation, rewriter: ConversionRewriter) -> list[SSAValue] | None:
        out = []
        for value in op.operands:
            owner = value.owner
            if isinstance(owner, Operation) and self.casts.get(owner) == "source":
                out.append(owner.operands[0])  # the converted value behind a source materialization
                continue
            if self.converter is None:
                out.append(value)
                continue
            new_type = self.converter.convert_type(value.type)
            if new_type is None:
                return None
            if new_type == value.type:
                out.append(value)
                continue
            cast = UnrealizedConversionCastOp.get([value], [new_type])  # target materialization
            Rewriter.insert_op(cast, InsertPoint.before(op))
            self.casts[cast] = "target"
            out.append(cast.results[0])
        return out

    def replace(self, op: Operation, values: Sequence[SSAValue]) -> None:
        if len(values) != len(op.results):
            raise ConversionError(f"replace_op({op.name}): {len(values)} values for {len(op.results)} results")
        for result, value in zip(op.results, values):
            if value.type != result.type:  # source materialization: old-type users keep a value of the old type
                cast = UnrealizedConversionCastOp.get([value], [result.type])
                Rewriter.insert_op(cast, InsertPoint.before(op))
                self.casts[cast] = "source"
                value = cast.results[0]
            result.replace_all_uses_with(value)
        self.erase(op)

    def erase(self, op: Operation) -> None:
        for result in op.results:
            if result.uses:
                raise ConversionError(f"erase_op({op.name}): its result is still used")
        Rewriter.erase_op(op)

    def convert_block_signature(self, block: Block) -> None:
        for index in range(len(block.args)):
            old = block.args[index]
            new_type = self.converter.convert_type(old.type) if self.converter else old.type
            if new_type is None:
                raise ConversionError(f"cannot convert block argument type {old.type}")
            if new_type == old.type:
                continue
            new = block.insert_arg(new_type, index)
            cast = UnrealizedConversionCastOp.get([new], [old.type])  # source materialization for the old users
            Rewriter.insert_op(cast, InsertPoint.at_start(block))
            self.casts[cast] = "source"
            old.replace_all_uses_with(cast.results[0])
            block.erase_arg(old)

    # -- end of the conversion: reconcile and materialize --------------------------------------------------
    def finalize(self) -> None:
        changed = True
        while changed:
            changed = False
            for cast in list(self.casts):
                if cast.parent is None:
                    continue
                result, source = cast.results[0], cast.operands[0]
                inner = source.owner
                if not result.uses:
                    Rewriter.erase_op(cast)
                    del self.casts[cast]
                    changed = True
                elif isinstance(inner, Operation) and inner in self.casts and inner.operands[0].type == result.type:
                    result.replace_all_uses_with(inner.operands[0])  # cast(cast(x : A -> B) : B -> A) is x
                    Rewriter.erase_op(cast)
                    del self.casts[cast]
                    changed = True
        for cast, kind in list(self.casts.items()):
            source, result = cast.operands[0], cast.results[0]
            rewriter = ConversionRewriter(self, cast)
            value = self.converter.materialize(kind, rewriter, source, result.type) if self.converter else None
            if value is None:
                user = next(iter(result.uses)).operation
                raise ConversionError(
                    f"failed to legalize unresolved materialization from ('{source.type}') to ('{result.type}') "
                    f"that remained live after conversion\n  note: see existing live user here: {user}")
            result.replace_all_uses_with(value)
            Rewriter.erase_op(cast)
            del self.casts[cast]


def apply_partial_conversion(root: Operation, target: ConversionTarget, patterns: Sequence[ConversionPattern],
                             converter: TypeConverter | None = None) -> None:
    """mlir::applyPartialConversion: unknown ops that no pattern converts may stay. ConversionError on failure."""
    _Driver(target, patterns, converter, full=False).run(root)


def apply_full_conversion(root: Operation, target: ConversionTarget, patterns: Sequence[ConversionPattern],
                          converter: TypeConverter | None = None) -> None:
    """mlir::applyFullConversion: every op must end up legal. ConversionError on failure."""
    _Driver(target, patterns, converter, full=True).run(root)


# -- generic patterns (MLIR: populateFunctionOpInterfaceTypeConversionPattern, populateReturnOpTypeConversionPattern)


class FuncSignatureConversion(ConversionPattern):
    """func.func: convert the function type and the entry block's arguments with the type converter."""

    root = "func.func"

    def __init__(self, converter: TypeConverter):
        self.converter = converter

    def match_and_rewrite(self, op, operands, rewriter) -> bool:
        ftype = op.function_type
        inputs = [self.converter.convert_type(t) for t in ftype.inputs.data]
        outputs = [self.converter.convert_type(t) for t in ftype.outputs.data]
        if any(t is None for t in (*inputs, *outputs)):
            return False
        if op.body.blocks:
            rewriter.convert_block_signature(op.body.blocks[0])
        op.function_type = FunctionType.from_lists(inputs, outputs)
        rewriter.changed = True
        return True


class ReturnOperandsConversion(ConversionPattern):
    """func.return: return the remapped (converted) operands."""

    root = "func.return"

    def match_and_rewrite(self, op, operands, rewriter) -> bool:
        rewriter.update_operands(op, operands)
        return True
