// fp16 conversions and arithmetic, float4 / half2 vector loads.
#include <cuda_fp16.h>

__global__ void to_half(const float* __restrict__ x, __half* __restrict__ h, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = __float2half(x[i]);
}

__global__ void from_half(const half* __restrict__ h, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __half2float(h[i]);
}

// y = a*x + b in half precision (fma), via half2 pairs
__global__ void haxpb2(const __half2* __restrict__ x, __half2* __restrict__ y, __half a, __half b, int npairs) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < npairs) y[i] = __hfma2(__half2half2(a), x[i], __half2half2(b));
}

// float4 loads: sum of squares of 4 consecutive elements
__global__ void sumsq4(const float4* __restrict__ x, float* __restrict__ out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = x[i];
        out[i] = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
}
