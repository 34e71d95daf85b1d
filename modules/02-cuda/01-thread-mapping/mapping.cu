// cuda-01: mapping threads to data.
//
// vec_add:     c[i] = a[i] + b[i] for i in [0, n), with a grid-stride loop, so that any grid
//              (even one far smaller than n / blockDim.x) covers every element exactly once.
// bias_add_2d: y[r][c] = x[r][c] + bias[c] on a row-major rows x cols matrix, with a 2D grid:
//              threadIdx.x / blockIdx.x walk the columns (the contiguous dimension, so the 32
//              lanes of a warp touch 32 consecutive floats = one 128-byte coalesced access) and
//              threadIdx.y / blockIdx.y walk the rows.

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
    // HINT: global index = block offset + thread offset; stride = total threads in the grid.
    // BEGIN SOLUTION
    // First element this thread owns: blocks before ours own blockDim.x elements each.
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // The whole grid advances together by the number of threads it has.
    int stride = blockDim.x * gridDim.x;
    for (; i < n; i += stride) {
        c[i] = a[i] + b[i];
    }
    // END SOLUTION
}

__global__ void bias_add_2d(const float* x, const float* bias, float* y, int rows, int cols) {
    // HINT: x-dimension -> column (contiguous), y-dimension -> row; guard both tails.
    // BEGIN SOLUTION
    int col = blockIdx.x * blockDim.x + threadIdx.x;  // consecutive lanes -> consecutive columns
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    // The grid is rounded up to whole blocks, so the last block column/row sticks out.
    if (row < rows && col < cols) {
        int idx = row * cols + col;  // row-major: a row is `cols` floats long
        y[idx] = x[idx] + bias[col];
    }
    // END SOLUTION
}
