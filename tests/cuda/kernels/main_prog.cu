// A complete CUDA program: runtime API, <<<>>> launches, error checks.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("error %s\n", cudaGetErrorString(e)); return 1; } } while (0)

__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

template <typename T>
__global__ void fill(T* p, T v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    size_t bytes = n * sizeof(float);
    float *ha = (float*)malloc(bytes), *hc = (float*)malloc(bytes);
    for (int i = 0; i < n; i++) ha[i] = (float)i;
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    fill<float><<<(n + 255) / 256, 256>>>(db, 0.5f, n);
    CHECK(cudaGetLastError());
    add<<<(n + 127) / 128, 128, 0>>>(da, db, dc, n);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    double s = 0;
    for (int i = 0; i < n; i++) s += hc[i];
    add<<<1, 2048>>>(da, db, dc, n);   // too many threads: the launch fails
    printf("n=%d sum=%.1f bad_launch=%s\n", n, s, cudaGetErrorString(cudaGetLastError()));
    cudaFree(da); cudaFree(db); cudaFree(dc);
    free(ha); free(hc);
    return 0;
}
