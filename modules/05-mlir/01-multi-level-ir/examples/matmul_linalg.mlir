// Tensor-level matmul: C = A @ B on a zero-filled init tensor (what a frontend such as torch-mlir emits).
// linalg.fill and linalg.matmul print no region, yet each holds one: a scalar body ending in linalg.yield.
func.func @matmul(%A: tensor<64x32xf32>, %B: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<64x16xf32>
  %C = linalg.fill ins(%zero : f32) outs(%init : tensor<64x16xf32>) -> tensor<64x16xf32>
  %D = linalg.matmul ins(%A, %B : tensor<64x32xf32>, tensor<32x16xf32>)
                     outs(%C : tensor<64x16xf32>) -> tensor<64x16xf32>
  return %D : tensor<64x16xf32>
}
