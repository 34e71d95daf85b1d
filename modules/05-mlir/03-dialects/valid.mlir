// mlir-03: IR that the qlite spec accepts. Every function here must verify with your qlite.mlir loaded:
//   mlir-opt --irdl-file=qlite.mlir valid.mlir

// A quantized dot-product step: quantize two activations, add them, requantize down to i4, dequantize.
func.func @dot_step(%a: f32, %b: f16) -> f32 {
  %qa = "qlite.quantize"(%a) {scale = 0.125 : f32, zero_point = 0 : i32} : (f32) -> !qlite.q<i8>
  %qb = "qlite.quantize"(%b) {scale = 0.125 : f32, zero_point = -3 : i8} : (f16) -> !qlite.q<i8>
  %s = "qlite.add"(%qa, %qb) : (!qlite.q<i8>, !qlite.q<i8>) -> !qlite.q<i8>
  %r = "qlite.requant"(%s) {round = #qlite.round<"nearest">} : (!qlite.q<i8>) -> !qlite.q<i4>
  %y = "qlite.dequantize"(%r) {scale = 2.5e-1 : f64} : (!qlite.q<i4>) -> f32
  return %y : f32
}

// qlite.sum is variadic: zero, one or many operands, all of one type, the result of that type.
func.func @sums(%x: !qlite.q<i16>, %y: !qlite.q<i16>) -> !qlite.q<i16> {
  %zero = "qlite.sum"() : () -> !qlite.q<i4>
  %one = "qlite.sum"(%x) : (!qlite.q<i16>) -> !qlite.q<i16>
  %many = "qlite.sum"(%x, %y, %one, %x, %y) : (!qlite.q<i16>, !qlite.q<i16>, !qlite.q<i16>, !qlite.q<i16>, !qlite.q<i16>) -> !qlite.q<i16>
  return %many : !qlite.q<i16>
}

// requant may change the storage type, in either direction; every rounding mode is accepted.
func.func @requant_modes(%x: !qlite.q<i4>) -> !qlite.q<i4> {
  %a = "qlite.requant"(%x) {round = #qlite.round<"floor">} : (!qlite.q<i4>) -> !qlite.q<i16>
  %b = "qlite.requant"(%a) {round = #qlite.round<"ceil">} : (!qlite.q<i16>) -> !qlite.q<i8>
  %c = "qlite.requant"(%b) {round = #qlite.round<"nearest">} : (!qlite.q<i8>) -> !qlite.q<i4>
  return %c : !qlite.q<i4>
}

// Attributes outside the spec are discardable attributes: the verifier ignores them.
func.func @extra_attrs(%x: !qlite.q<i8>) -> f32 {
  %s = "qlite.add"(%x, %x) {note = "hot loop"} : (!qlite.q<i8>, !qlite.q<i8>) -> !qlite.q<i8>
  %y = "qlite.dequantize"(%s) {scale = 1.0 : f16, round = #qlite.round<"floor">} : (!qlite.q<i8>) -> f32
  return %y : f32
}
