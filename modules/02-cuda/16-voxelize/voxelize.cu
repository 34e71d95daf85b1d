// cuda-16: point-cloud voxelization with a GPU hash table (spconv's PointToVoxel structure).
//
// points is P x F fp32 (row-major, F >= 3: x, y, z, then features such as intensity).
// The grid: voxel sizes (vx, vy, vz), range minimum (xmin, ymin, zmin) and nx x ny x nz voxels, so
// the range is [xmin, xmin + nx*vx) x [ymin, ymin + ny*vy) x [zmin, zmin + nz*vz).
// A point's voxel is ix = floor((x - xmin) / vx) computed in fp32 (iy, iz alike); the point is
// kept iff 0 <= ix < nx, 0 <= iy < ny and 0 <= iz < nz, tested on the float values: a NaN
// coordinate fails every comparison and is dropped; float -> int conversion happens only after
// the test (converting NaN or 1e30 to int is undefined behaviour in C++/CUDA: a GPU's cvt gives 0
// for NaN and the emulator's trapping build stops).
// key = (iz * ny + iy) * nx + ix: the row-major linear index of the grid (nx*ny*nz < 2^31).
//
// The hash table: `capacity` slots (a power of two, at least the number of distinct voxels),
// table_keys[s] (EMPTY_KEY = -1 where no voxel lives; the caller fills it), table_counts[s]
// (points of that voxel; the caller zeroes it), table_vals[s] (voxel id, written by voxel_assign).
// Open addressing with linear probing: a key's probe sequence starts at hash_key(key) & (capacity-1)
// (any hash is allowed) and steps by one slot, wrapping around the end of the table.
//
// Three kernels, each a 1-D grid of any block size (a multiple of 32):
//   voxel_insert (one thread per point, grid ceil(P/B)):
//     kept point i:    point_slot[i] = the slot that holds its voxel's key,
//                      point_rank[i] = the value of table_counts[slot] before its own +1 (its arrival
//                      rank inside the voxel: 0, 1, 2, ... in whatever order the atomics happen);
//     dropped point i: point_slot[i] = point_rank[i] = -1.
//   voxel_assign (one thread per slot, grid ceil(capacity/B)), for every occupied slot s:
//     table_vals[s] = a voxel id from an atomic counter (*num_voxels, zeroed by the caller, ends at
//     the number of distinct voxels); if the id is < max_voxels: coors[id] = (iz, iy, ix) decoded
//     from the key and num_points[id] = min(table_counts[s], max_points). Voxels whose id is
//     >= max_voxels are dropped (their points too).
//   voxel_scatter (one thread per point, grid ceil(P/B)): a kept point whose voxel id v is
//     < max_voxels and whose rank r is < max_points is copied (all F floats) to voxels[v][r]
//     (voxels is max_voxels x max_points x F); the others (overflow points) are counted in
//     table_counts but not stored. Rows r >= num_points[v] of a voxel are left as they were.
// Every output element has one writer. Which max_points points of an overflowing voxel are kept,
// and which voxel gets which id, depend on the order of the atomics: both vary from run to run.

#define EMPTY_KEY (-1)

// murmur3's 32-bit finalizer: neighbouring keys land on unrelated slots.
__device__ __forceinline__ unsigned int hash_key(unsigned int k) {
    k ^= k >> 16;
    k *= 0x85ebca6bu;
    k ^= k >> 13;
    k *= 0xc2b2ae35u;
    k ^= k >> 16;
    return k;
}

__global__ void voxel_insert(const float* __restrict__ points, int P, int F,
                             float xmin, float ymin, float zmin, float vx, float vy, float vz,
                             int nx, int ny, int nz,
                             int* table_keys, int* table_counts, int capacity,
                             int* point_slot, int* point_rank) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= P) return;
    const float* p = points + (size_t)i * F;
    // HINT: range test on the floored float values (NaN must fail it), then insert-or-find the key with atomicCAS along the probe sequence (wrap with the mask), then take a rank with atomicAdd on that slot's count.
    // BEGIN SOLUTION
    const float fx = floorf((p[0] - xmin) / vx);
    const float fy = floorf((p[1] - ymin) / vy);
    const float fz = floorf((p[2] - zmin) / vz);
    // written as !(inside) so that a NaN (every comparison false) is dropped, before any float -> int conversion
    if (!(fx >= 0.0f && fx < (float)nx && fy >= 0.0f && fy < (float)ny && fz >= 0.0f && fz < (float)nz)) {
        point_slot[i] = -1;
        point_rank[i] = -1;
        return;
    }
    const int ix = (int)fx, iy = (int)fy, iz = (int)fz;
    const int key = (iz * ny + iy) * nx + ix;
    const unsigned int mask = (unsigned int)capacity - 1u;
    unsigned int s = hash_key((unsigned int)key) & mask;
    for (int probe = 0; probe < capacity; ++probe) {
        // claim the slot if it is empty; either way learn which key lives there
        const int prev = atomicCAS(&table_keys[s], EMPTY_KEY, key);
        if (prev == EMPTY_KEY || prev == key) {
            point_slot[i] = (int)s;
            point_rank[i] = atomicAdd(&table_counts[s], 1);
            return;
        }
        s = (s + 1u) & mask;  // occupied by another voxel: next slot, wrapping around
    }
    point_slot[i] = -1;  // the table is full (capacity < distinct voxels): the caller broke the contract
    point_rank[i] = -1;
    // END SOLUTION
}

__global__ void voxel_assign(const int* __restrict__ table_keys, const int* __restrict__ table_counts, int capacity,
                             int nx, int ny, int max_voxels, int max_points,
                             int* table_vals, int* num_voxels, int* coors, int* num_points) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= capacity) return;
    // HINT: one thread per occupied slot takes an id from the counter; only ids below max_voxels get coors (z, y, x order) and a count capped at max_points.
    // BEGIN SOLUTION
    const int key = table_keys[s];
    if (key == EMPTY_KEY) return;
    const int id = atomicAdd(num_voxels, 1);
    table_vals[s] = id;
    if (id >= max_voxels) return;  // over the voxel budget: dropped with its points
    coors[3 * id + 0] = key / (nx * ny);
    coors[3 * id + 1] = key / nx % ny;
    coors[3 * id + 2] = key % nx;
    num_points[id] = min(table_counts[s], max_points);
    // END SOLUTION
}

__global__ void voxel_scatter(const float* __restrict__ points, int P, int F, const int* __restrict__ point_slot,
                              const int* __restrict__ point_rank, const int* __restrict__ table_vals,
                              int max_voxels, int max_points, float* voxels) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= P) return;
    // HINT: a point is stored only if it was kept, its voxel's id is under max_voxels and its rank under max_points.
    // BEGIN SOLUTION
    const int s = point_slot[i];
    if (s < 0) return;
    const int id = table_vals[s];
    const int r = point_rank[i];
    if (id >= max_voxels || r >= max_points) return;  // voxel over budget, or an overflow point: counted, not stored
    float* dst = voxels + ((size_t)id * max_points + r) * F;
    for (int f = 0; f < F; ++f) dst[f] = points[(size_t)i * F + f];
    // END SOLUTION
}
