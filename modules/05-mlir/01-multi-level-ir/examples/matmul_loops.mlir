// The same matmul after bufferization and convert-linalg-to-loops: three scf.for nested in a func.
func.func @matmul(%A: memref<?x?xf32>, %B: memref<?x?xf32>, %C: memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %M = memref.dim %A, %c0 : memref<?x?xf32>
  %K = memref.dim %A, %c1 : memref<?x?xf32>
  %N = memref.dim %B, %c1 : memref<?x?xf32>
  scf.for %i = %c0 to %M step %c1 {
    scf.for %j = %c0 to %N step %c1 {
      %init = memref.load %C[%i, %j] : memref<?x?xf32>
      %acc = scf.for %k = %c0 to %K step %c1 iter_args(%s = %init) -> (f32) {
        %a = memref.load %A[%i, %k] : memref<?x?xf32>
        %b = memref.load %B[%k, %j] : memref<?x?xf32>
        %p = arith.mulf %a, %b : f32
        %t = arith.addf %s, %p : f32
        scf.yield %t : f32
      }
      memref.store %acc, %C[%i, %j] : memref<?x?xf32>
    }
  }
  return
}
