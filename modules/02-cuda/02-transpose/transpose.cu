// cuda-02: coalesced matrix transpose through shared memory.
//
// out (cols x rows) = transpose(in (rows x cols)), both row-major fp32.
// Launch: block (TILE_DIM, BLOCK_ROWS) = (32, 8), grid (ceil(cols/32), ceil(rows/32)).
// Each block moves one 32x32 tile; each thread copies TILE_DIM/BLOCK_ROWS = 4 elements.

#define TILE_DIM 32
#define BLOCK_ROWS 8

// The naive version, for comparison: reads are coalesced (consecutive lanes read consecutive
// columns of a row), but writes are strided by `rows` floats, so each warp store touches 32
// different 32-byte sectors instead of 4.
__global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * TILE_DIM + threadIdx.x;
    int r0 = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        int r = r0 + j;
        if (r < rows && c < cols) out[c * rows + r] = in[r * cols + c];
    }
}

__global__ void transpose_tiled(const float* in, float* out, int rows, int cols) {
    // HINT: stage the tile in shared memory with one padding column; read rows of `in`, write rows of `out`.
    // BEGIN SOLUTION
    // One extra column shifts row k of the tile by k banks, so a column of the tile
    // (tile[0..31][c]) lands in 32 different banks instead of all in bank c.
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];

    // Load: lane x reads column (tile_col + x) of input row (tile_row + y + j) -> coalesced.
    int c = blockIdx.x * TILE_DIM + threadIdx.x;
    int r = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (r + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[(r + j) * cols + c];
    }

    // Every element of the tile must be in shared memory before any thread reads it back.
    __syncthreads();

    // Store: the block's tile goes to block (y, x) of `out`; lane x now writes consecutive
    // columns of an output row (= consecutive rows of the input), so the store is coalesced
    // and the transposition happens in the shared-memory read tile[x][y + j].
    int oc = blockIdx.y * TILE_DIM + threadIdx.x;  // output column = input row
    int orow = blockIdx.x * TILE_DIM + threadIdx.y;  // output row = input column
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (orow + j < cols && oc < rows) out[(orow + j) * rows + oc] = tile[threadIdx.x][threadIdx.y + j];
    }
    // END SOLUTION
}
