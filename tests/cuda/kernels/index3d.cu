// 3D grids and blocks: every thread writes its global (x, y, z) coordinates.
__global__ void coords3d(int* __restrict__ out, int nx, int ny, int nz) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < nx && y < ny && z < nz) {
        size_t i = ((size_t)z * ny + y) * nx + x;
        out[3 * i + 0] = x;
        out[3 * i + 1] = y;
        out[3 * i + 2] = z;
    }
}

// 3D stencil (7-point) on the interior
__global__ void stencil7(const float* __restrict__ u, float* __restrict__ v, int nx, int ny, int nz) {
    dim3 p(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y,
           blockIdx.z * blockDim.z + threadIdx.z);
    int x = p.x, y = p.y, z = p.z;
    if (x < 1 || y < 1 || z < 1 || x >= nx - 1 || y >= ny - 1 || z >= nz - 1) return;
    auto at = [&](int a, int b, int c) { return u[((size_t)c * ny + b) * nx + a]; };
    v[((size_t)z * ny + y) * nx + x] = at(x - 1, y, z) + at(x + 1, y, z) + at(x, y - 1, z) + at(x, y + 1, z) +
                                       at(x, y, z - 1) + at(x, y, z + 1) - 6.0f * at(x, y, z);
}
