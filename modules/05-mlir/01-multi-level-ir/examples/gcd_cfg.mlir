// Control flow as a CFG: blocks, successors and block arguments (the cf dialect, what scf becomes after
// convert-scf-to-cf). Euclid's gcd, then a switch that classifies the result.
func.func @gcd_class(%a0: i32, %b0: i32) -> i32 {
  %zero = arith.constant 0 : i32
  cf.br ^loop(%a0, %b0 : i32, i32)
^loop(%a: i32, %b: i32):
  %done = arith.cmpi eq, %b, %zero : i32
  cf.cond_br %done, ^exit(%a : i32), ^body
^body:
  %r = arith.remui %a, %b : i32
  cf.br ^loop(%b, %r : i32, i32)
^exit(%g: i32):
  cf.switch %g : i32, [
    default: ^big,
    1: ^small(%zero : i32),
    2: ^small(%g : i32)
  ]
^small(%s: i32):
  return %s : i32
^big:
  %m = arith.muli %g, %g : i32
  return %m : i32
}
