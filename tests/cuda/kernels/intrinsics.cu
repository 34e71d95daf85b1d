// A tour of the intrinsics and qualifiers lessons use.
#include <cuda_runtime.h>

__device__ int g_counter;   // a __device__ global

__global__ void __launch_bounds__(128) vec_math(const float2* __restrict__ ab, float4* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float2 v = __ldg(&ab[i]);
    out[i] = make_float4(rsqrtf(v.x), __fdividef(v.x, v.y), fmaxf(v.x, v.y), __saturatef(v.y - 1.0f));
}

__global__ void int_vectors(const int4* in, int2* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int4 v = in[i];
        out[i] = make_int2(min(v.x, v.y) + max(v.z, v.w), __popc((unsigned)v.x) + __clz(v.y) + __ffs(v.z));
    }
}

// warp intrinsics beyond shuffles; odd lanes leave early so __activemask() sees the even ones
__global__ void warp_misc(const int* key, unsigned* active, unsigned* match, unsigned* red, int* counts) {
    int t = threadIdx.x;
    int c = __syncthreads_count(key[t] > 2);
    if (t == 0) counts[0] = c;
    unsigned m = __match_any_sync(0xffffffffu, key[t]);
    match[t] = m;
    red[t] = __reduce_add_sync(0xffffffffu, (unsigned)key[t]) + 1000u * __reduce_max_sync(0xffffffffu, (unsigned)key[t]);
    if (t % 2 == 1) return;
    active[t] = __activemask();
    __syncwarp(0x55555555u);
    if (t == 0) atomicAdd(&g_counter, 1);
}

__global__ void device_global(int* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) g_counter = 41;
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = ++g_counter;
}
