// cuda-07: one-pass (online) row softmax, one warp per row.
//
// softmax_rows(x, y, rows, cols): y[r][:] = softmax(x[r][:]) for a row-major rows x cols matrix.
// Launch: block (32, WARPS_PER_BLOCK); warp threadIdx.y of block b starts at row
// b * blockDim.y + threadIdx.y and strides by the number of warps in the grid (a grid-stride loop
// over rows, as in cuda-01), so any grid size works: ceil(rows / blockDim.y) gives one row per
// warp, a smaller grid gives each warp several. Every row must contain at least one finite value
// (-inf entries, e.g. a causal mask, are allowed).
//
// Pass 1 reads the row once and keeps, per lane, a running max m and a running sum
// d = sum_j exp(x_j - m); the 32 lane states are then merged with shuffles. Pass 2 reads the
// row again and writes exp(x - m) / d. Two reads + one write, instead of the three reads + one
// write of the max / sum / normalize formulation (the tests count the reads of x).
// Both solution regions are yours: the rescale helper below and the body of the row loop.

#define FULL_MASK 0xffffffffu
#ifndef LOADS
#define LOADS 8  // elements each lane loads per iteration (loads in flight); benchmarks/cuda_h200.py sweeps it
#endif
#ifndef CACHE
#define CACHE 32  // float4 registers per lane for a row kept in registers: rows up to 128 * CACHE = 4096 floats
#endif

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// HINT: a helper for the factor that brings a sum taken relative to m_old to m_new >= m_old; decide what it must be for an empty state (m_old = -inf, d = 0).
// BEGIN SOLUTION
// exp(m_old - m_new), the factor that rescales a sum taken relative to m_old so that it is
// relative to m_new (>= m_old). A state that has seen nothing (m_old = -inf) has d = 0 and must
// stay 0: computing exp(-inf - (-inf)) would give exp(NaN) = NaN.
__device__ __forceinline__ float rescale(float m_old, float m_new) {
    return m_old == neg_inf() ? 0.0f : expf(m_old - m_new);
}
// END SOLUTION

__global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    int lane = threadIdx.x;
    int warps_in_grid = gridDim.x * blockDim.y;
    // row depends on blockIdx and threadIdx.y only: the 32 lanes of a warp enter and leave the loop together
    for (int row = blockIdx.x * blockDim.y + threadIdx.y; row < rows; row += warps_in_grid) {
        const float* xr = x + (size_t)row * cols;
        float* yr = y + (size_t)row * cols;

        // HINT: online update per element: m' = max(m, x); d' = d * exp(m - m') + exp(x - m'); then merge (m, d) pairs across lanes the same way.
        // BEGIN SOLUTION
        float m = neg_inf();  // running max of the elements this lane has seen
        float d = 0.0f;       // running sum of exp(x_j - m) over those elements
        // Fast path: a row of at most 128 * CACHE floats whose start is 16-byte aligned (cols % 4 == 0)
        // is read from global memory ONCE: each lane loads its float4s (lane, lane + 32, ...: a warp
        // reads 512 contiguous bytes per load) into registers, all CACHE loads in flight together.
        // With the lane's elements in registers its max costs no memory traffic, so the lane state is
        // built exactly (max first, then the sum): one expf per element, and the CACHE expf are
        // independent of each other instead of a chain through the running d. Other rows stream
        // through global memory twice with the online update.
        bool in_registers = cols % 4 == 0 && cols <= 128 * CACHE;
        float4 v4[CACHE];
        if (in_registers) {
            const float4* xr4 = reinterpret_cast<const float4*>(xr);
            int n4 = cols / 4;
#pragma unroll
            for (int u = 0; u < CACHE; ++u) {
                int j = lane + 32 * u;  // float4 index in the row
                v4[u] = j < n4 ? xr4[j] : make_float4(neg_inf(), neg_inf(), neg_inf(), neg_inf());
            }
#pragma unroll
            for (int u = 0; u < CACHE; ++u) m = fmaxf(fmaxf(m, fmaxf(v4[u].x, v4[u].y)), fmaxf(v4[u].z, v4[u].w));
            // Keep e = exp(x - m_lane) in place of x: pass 2 only rescales it to the row's max.
#pragma unroll
            for (int u = 0; u < CACHE; ++u) {
                float4& v = v4[u];
                v = make_float4(rescale(v.x, m), rescale(v.y, m), rescale(v.z, m), rescale(v.w, m));
                d += (v.x + v.y) + (v.z + v.w);
            }
        } else {
            // Lane-strided, LOADS elements per iteration issued back to back (LOADS loads in flight per
            // lane). Elements past the end read as -inf, which rescale() turns into a contribution of 0.
            for (int j = lane; j < cols; j += 32 * LOADS) {
                float v[LOADS];
#pragma unroll
                for (int u = 0; u < LOADS; ++u) v[u] = j + 32 * u < cols ? xr[j + 32 * u] : neg_inf();
                float m_new = m;
#pragma unroll
                for (int u = 0; u < LOADS; ++u) m_new = fmaxf(m_new, v[u]);
                float batch = 0.0f;  // this batch's sum, taken relative to m_new
#pragma unroll
                for (int u = 0; u < LOADS; ++u) batch += rescale(v[u], m_new);
                d = d * rescale(m, m_new) + batch;
                m = m_new;
            }
        }

        const float m_lane = m;  // this lane's own max, before the merge
        // Merge the 32 lane states with a butterfly; afterwards every lane holds the row's (m, d).
        // The merge of (m_a, d_a) and (m_b, d_b) is the same rule as one element, with weights d.
        for (int offset = 16; offset > 0; offset >>= 1) {
            float m_o = __shfl_xor_sync(FULL_MASK, m, offset);
            float d_o = __shfl_xor_sync(FULL_MASK, d, offset);
            float m_new = fmaxf(m, m_o);
            d = d * rescale(m, m_new) + d_o * rescale(m_o, m_new);
            m = m_new;
        }

        // Pass 2: normalize. From the registers on the fast path; otherwise the row is read again
        // (from L2 when few enough rows are in flight).
        float inv_d = 1.0f / d;
        if (in_registers) {
            // e * exp(m_lane - m) / d = exp(x - m) / d; a lane that saw only -inf has e = 0 and factor 0.
            float s = rescale(m_lane, m) * inv_d;
            float4* yr4 = reinterpret_cast<float4*>(yr);
            int n4 = cols / 4;
#pragma unroll
            for (int u = 0; u < CACHE; ++u) {
                int j = lane + 32 * u;
                float4 v = v4[u];
                if (j < n4) yr4[j] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
            }
        } else {
            for (int j = lane; j < cols; j += 32 * LOADS) {
                float v[LOADS];
#pragma unroll
                for (int u = 0; u < LOADS; ++u) v[u] = j + 32 * u < cols ? xr[j + 32 * u] : 0.0f;
#pragma unroll
                for (int u = 0; u < LOADS; ++u)
                    if (j + 32 * u < cols) yr[j + 32 * u] = expf(v[u] - m) * inv_d;
            }
        }
        // END SOLUTION
    }
}
