// mlir-03: the `qlite` dialect (quantization-lite), defined in IRDL and loaded into upstream MLIR 22.
//
// The spec (README.md has the same table and the meaning of each line):
//
//   type  !qlite.q<storage>     storage is exactly one of i4, i8, i16
//   attr  #qlite.round<mode>    mode is exactly one of "nearest", "floor", "ceil" (a string)
//
//   op  qlite.quantize    (x: f16 | f32)      -> (y: any Q)    attrs: scale = float attr, zero_point = integer attr
//   op  qlite.dequantize  (q: any Q)          -> (y: f32)      attrs: scale = float attr
//   op  qlite.add         (lhs: T, rhs: T)    -> (out: T)      T: one Q type shared by all three
//   op  qlite.sum         (ins: T, variadic)  -> (out: T)      any number of operands (also 0), all of one Q type T
//   op  qlite.requant     (q: any Q)          -> (r: any Q)    attrs: round = #qlite.round; the storage may change
//
// "any Q" is any !qlite.q<...>; "float attr" is a builtin FloatAttr (0.5 : f32), "integer attr" a builtin
// IntegerAttr (3 : i32). Attributes not in the spec are allowed (MLIR keeps them as discardable attributes).
//
// Check it by hand:  mlir-opt --irdl-file=qlite.mlir valid.mlir
//                    mlir-opt --irdl-file=qlite.mlir --split-input-file --verify-diagnostics invalid.mlir

irdl.dialect @qlite {
  // HINT: a type or attribute lists its parameters with irdl.parameters(name: %c); %c accepts exactly the allowed values
  // BEGIN SOLUTION
  irdl.type @q {
    %i4 = irdl.is i4
    %i8 = irdl.is i8
    %i16 = irdl.is i16
    %storage = irdl.any_of(%i4, %i8, %i16)
    irdl.parameters(storage: %storage)
  }

  irdl.attribute @round {
    %nearest = irdl.is "nearest"
    %floor = irdl.is "floor"
    %ceil = irdl.is "ceil"
    %mode = irdl.any_of(%nearest, %floor, %ceil)
    irdl.parameters(mode: %mode)
  }
  // END SOLUTION

  // Worked example: one operand, one result, two required attributes.
  irdl.operation @quantize {
    %f16 = irdl.is f16
    %f32 = irdl.is f32
    %x = irdl.any_of(%f16, %f32)
    %y = irdl.base @qlite::@q
    %scale = irdl.base "#builtin.float"
    %zp = irdl.base "#builtin.integer"
    irdl.operands(x: %x)
    irdl.results(y: %y)
    irdl.attributes {"scale" = %scale, "zero_point" = %zp}
  }

  // HINT: every constraint SSA value is a variable: all its uses in one op must see the same type or attribute
  // BEGIN SOLUTION
  irdl.operation @dequantize {
    %q = irdl.base @qlite::@q
    %f32 = irdl.is f32
    %scale = irdl.base "#builtin.float"
    irdl.operands(q: %q)
    irdl.results(y: %f32)
    irdl.attributes {"scale" = %scale}
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

  irdl.operation @requant {
    %in = irdl.base @qlite::@q
    %out = irdl.base @qlite::@q
    %round = irdl.base @qlite::@round
    irdl.operands(q: %in)
    irdl.results(r: %out)
    irdl.attributes {"round" = %round}
  }
  // END SOLUTION
}
