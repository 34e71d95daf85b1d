// Regions a printer hides or leaves empty: an external declaration (one region, no block), the implicit
// terminators of affine.for and scf.if, scf.parallel with scf.reduce, scf.while's two regions, and an
// scf.execute_region holding a small CFG of its own.
func.func private @external(f32) -> f32

func.func @sum(%m: memref<?xf32>, %n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %total = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> f32 {
    %v = memref.load %m[%i] : memref<?xf32>
    scf.reduce(%v : f32) {
    ^bb0(%l: f32, %r: f32):
      %s = arith.addf %l, %r : f32
      scf.reduce.return %s : f32
    }
  }
  affine.for %j = 0 to 8 {
    %w = affine.load %m[%j] : memref<?xf32>
    %pos = arith.cmpf ogt, %w, %zero : f32
    scf.if %pos {
      affine.store %zero, %m[%j] : memref<?xf32>
    }
  }
  %halved = scf.while (%x = %total) : (f32) -> f32 {
    %big = arith.cmpf ogt, %x, %zero : f32
    scf.condition(%big) %x : f32
  } do {
  ^bb0(%y: f32):
    %two = arith.constant 2.0 : f32
    %h = arith.divf %y, %two : f32
    scf.yield %h : f32
  }
  %picked = scf.execute_region -> f32 {
    %neg = arith.cmpf olt, %halved, %zero : f32
    cf.cond_br %neg, ^a, ^b
  ^a:
    %e = func.call @external(%halved) : (f32) -> f32
    scf.yield %e : f32
  ^b:
    scf.yield %halved : f32
  }
  return %picked : f32
}
