// A GPU kernel before outlining: gpu.launch's body region has 12 block arguments (block and thread ids,
// grid and block sizes); the scf.if guards the tail.
func.func @scale(%buf: memref<?xf32>, %n: index, %s: f32) {
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %nb = arith.ceildivui %n, %c128 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %nb, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c128, %sy = %c1, %sz = %c1) {
    %base = arith.muli %bx, %sx : index
    %i = arith.addi %base, %tx : index
    %in = arith.cmpi ult, %i, %n : index
    scf.if %in {
      %v = memref.load %buf[%i] : memref<?xf32>
      %w = arith.mulf %v, %s : f32
      memref.store %w, %buf[%i] : memref<?xf32>
    }
    gpu.terminator
  }
  return
}
