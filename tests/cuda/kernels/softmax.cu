// Row softmax, one warp per row, online (running max + rescaled sum) with butterfly shuffles.
#include <cuda_runtime.h>
#include <math_constants.h>

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    const int warps_per_block = blockDim.x / 32;
    const int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * cols;
    float m = -CUDART_INF_F, s = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        float v = xr[c];
        float m_new = fmaxf(m, v);
        s = s * __expf(m - m_new) + __expf(v - m_new);
        m = m_new;
    }
    for (int off = 16; off > 0; off >>= 1) {
        float m_o = __shfl_xor_sync(0xffffffffu, m, off);
        float s_o = __shfl_xor_sync(0xffffffffu, s, off);
        float m_new = fmaxf(m, m_o);
        s = (m == -CUDART_INF_F ? 0.0f : s * __expf(m - m_new)) + (m_o == -CUDART_INF_F ? 0.0f : s_o * __expf(m_o - m_new));
        m = m_new;
    }
    const float inv = 1.0f / s;
    for (int c = lane; c < cols; c += 32) y[(size_t)row * cols + c] = __expf(xr[c] - m) * inv;
}
