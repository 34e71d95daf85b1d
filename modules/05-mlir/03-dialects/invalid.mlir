// mlir-03: IR that the qlite spec rejects, one case per chunk, each with the diagnostic MLIR must print.
// MLIR's own test harness checks it (every expected error produced, no other error). `expected-error-re` takes
// regexes in {{...}}: a shared constraint prints the whole bound type, a shared parameter only the parameter.
//   mlir-opt --irdl-file=qlite.mlir --split-input-file --verify-diagnostics invalid.mlir

func.func @wrong_operand_type(%x: i32) {
  // expected-error @below {{'i32' does not satisfy the constraint}}
  %0 = "qlite.quantize"(%x) {scale = 0.5 : f32, zero_point = 0 : i32} : (i32) -> !qlite.q<i8>
  return
}

// -----

func.func @dequantize_a_float(%x: f32) {
  // expected-error @below {{expected base type 'qlite.q'}}
  %0 = "qlite.dequantize"(%x) {scale = 0.5 : f32} : (f32) -> f32
  return
}

// -----

func.func @add_one_operand(%x: !qlite.q<i8>) {
  // expected-error @below {{op expects exactly 2 operands, but got 1}}
  %0 = "qlite.add"(%x) : (!qlite.q<i8>) -> !qlite.q<i8>
  return
}

// -----

func.func @add_mixed_storage(%x: !qlite.q<i8>, %y: !qlite.q<i4>) {
  // expected-error-re @below {{expected '{{(!qlite.q<)?}}i8{{>?}}' but got '{{(!qlite.q<)?}}i4{{>?}}'}}
  %0 = "qlite.add"(%x, %y) : (!qlite.q<i8>, !qlite.q<i4>) -> !qlite.q<i8>
  return
}

// -----

func.func @add_floats(%x: f32) {
  // expected-error @below {{expected base type 'qlite.q'}}
  %0 = "qlite.add"(%x, %x) : (f32, f32) -> f32
  return
}

// -----

func.func @add_result_differs(%x: !qlite.q<i8>) {
  // expected-error-re @below {{expected '{{(!qlite.q<)?}}i8{{>?}}' but got '{{(!qlite.q<)?}}i16{{>?}}'}}
  %0 = "qlite.add"(%x, %x) : (!qlite.q<i8>, !qlite.q<i8>) -> !qlite.q<i16>
  return
}

// -----

func.func @sum_mixed_storage(%x: !qlite.q<i16>, %y: !qlite.q<i8>) {
  // expected-error-re @below {{expected '{{(!qlite.q<)?}}i16{{>?}}' but got '{{(!qlite.q<)?}}i8{{>?}}'}}
  %0 = "qlite.sum"(%x, %x, %y) : (!qlite.q<i16>, !qlite.q<i16>, !qlite.q<i8>) -> !qlite.q<i16>
  return
}

// -----

func.func @sum_without_result(%x: !qlite.q<i8>) {
  // expected-error @below {{op expects exactly 1 results, but got 0}}
  "qlite.sum"(%x) : (!qlite.q<i8>) -> ()
  return
}

// -----

func.func @dequantize_without_scale(%x: !qlite.q<i8>) {
  // expected-error @below {{attribute "scale" is expected but not provided}}
  %0 = "qlite.dequantize"(%x) : (!qlite.q<i8>) -> f32
  return
}

// -----

func.func @dequantize_integer_scale(%x: !qlite.q<i8>) {
  // expected-error @below {{expected base attribute 'builtin.float' but got 'builtin.integer'}}
  %0 = "qlite.dequantize"(%x) {scale = 2 : i32} : (!qlite.q<i8>) -> f32
  return
}

// -----

func.func @requant_without_round(%x: !qlite.q<i8>) {
  // expected-error @below {{attribute "round" is expected but not provided}}
  %0 = "qlite.requant"(%x) {mode = #qlite.round<"floor">} : (!qlite.q<i8>) -> !qlite.q<i4>
  return
}

// -----

func.func @requant_string_round(%x: !qlite.q<i8>) {
  // expected-error @below {{expected base attribute}}
  %0 = "qlite.requant"(%x) {round = "floor"} : (!qlite.q<i8>) -> !qlite.q<i4>
  return
}

// -----

// expected-error @below {{'i32' does not satisfy the constraint}}
func.func @storage_i32(%x: !qlite.q<i32>) {
  return
}

// -----

// expected-error @below {{expected 1 type arguments, but had 2}}
func.func @two_parameters(%x: !qlite.q<i8, i8>) {
  return
}

// -----

func.func @unknown_mode(%x: !qlite.q<i8>) {
  // expected-error @below {{'"up"' does not satisfy the constraint}}
  %0 = "qlite.requant"(%x) {round = #qlite.round<"up">} : (!qlite.q<i8>) -> !qlite.q<i4>
  return
}

// -----

func.func @not_in_the_dialect(%x: !qlite.q<i8>) {
  // expected-error @below {{unregistered operation 'qlite.mul' found in dialect ('qlite') that does not allow unknown operations}}
  %0 = "qlite.mul"(%x, %x) : (!qlite.q<i8>, !qlite.q<i8>) -> !qlite.q<i8>
  return
}
