// cuda-17: fake quantization for quantization-aware training (QAT), per channel: the forward, the
// straight-through-estimator (STE) backward with the clamp mask, and the LSQ gradients of the scale
// and zero point.
//
// QAT puts y = fake_quant(x) into the forward pass: x is rounded to the integer grid it will have at
// inference and mapped back to float, so training sees the rounding and clamping error. Per channel c
// (fp32 scale s > 0, int32 zero point z with qmin <= z <= qmax):
//
//     inv_s = 1.0f / s                      rounded to float
//     code  = z + nearbyint(x * inv_s)      x * inv_s rounded to float, then round half to even;
//                                           the integer z is added after rounding
//     y     = (clamp(code, qmin, qmax) - z) * s
//
// This is, bit for bit, torch.fake_quantize_per_channel_affine on the CPU with an int32 zero point
// (aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp). Its docs write x / scale; the
// code multiplies by the float reciprocal, and the two differ in the last bit, which moves ties.
//
// Layout: x is contiguous, viewed as (outer, C, inner): torch's `axis` is the middle dimension, the
// dimensions before it are folded into `outer`, those after it into `inner`. Element (o, c, j) is
// x[(o * C + c) * inner + j]. A (C_out, K) weight, axis 0: outer = 1, inner = K; (T, C)
// activations, axis 1: outer = T, inner = 1. Sizes: outer * C * inner < 2^31.
//
// fake_quant_fwd: y = fake_quant(x).
// fake_quant_bwd: the STE with the clamp mask (torch's autograd of fake_quantize_per_channel_affine):
//     dx = dy where qmin <= code <= qmax (the code BEFORE clamping), else 0.
//     Both: any 1-D grid and block; a grid-stride loop covers every element.
// lsq_bwd: the backward of LSQ (learned step size quantization, Esser et al., ICLR 2020) as
//     torch._fake_quantize_learnable_per_channel_affine computes it: dx as in fake_quant_bwd, and
//     dscale[c] = g * sum over channel c of dy * ( round(x/s) - x/s   if qmin <= code <= qmax
//                                                  qmin - z            if code < qmin
//                                                  qmax - z            if code > qmax )
//     dzero[c]  = g * sum over channel c of dy * ( 0 in range, -s when clamped )
//     with g = grad_factor and round(x/s) the rounded value nearbyint(x * inv_s) from above.
//     One block per channel (a grid-stride loop over channels: any 1-D grid), block = T threads, a
//     multiple of 32 up to 1024. dscale and dzero are written, never accumulated into.

#define FULL_MASK 0xffffffffu

// Sum of v over the whole block; every thread gets the total. All threads of the block must call it
// (it holds barriers); `red` is 32 floats of shared memory, reusable right after the call returns.
__device__ float block_sum(float v, float* red) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();  // a previous call may still be reading red
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < (int)blockDim.x / 32 ? red[lane] : 0.0f;  // every warp adds up the warp totals
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

// HINT: the quantization rule in one place (optional helpers for the three kernels): the code before clamping, as the header defines it.
// BEGIN SOLUTION
// The integer code of x before clamping, rounded exactly as torch rounds it: x times the float
// reciprocal of s, rounded to float; rintf rounds half to even (the default rounding mode); the
// integer zero point is added afterwards, exactly (adding it before rounding would round
// x * inv_s + z to float once more and can move a value across a .5 boundary).
__device__ __forceinline__ float quant_code(float x, float s, int z) {
    const float inv_s = 1.0f / s;
    return (float)z + rintf(x * inv_s);
}

__device__ __forceinline__ bool in_range(float code, int qmin, int qmax) {
    return code >= (float)qmin && code <= (float)qmax;
}
// END SOLUTION

__global__ void fake_quant_fwd(const float* x, const float* scale, const int* zero_point, float* y, int outer,
                               int C, int inner, int qmin, int qmax) {
    // HINT: element i belongs to channel (i / inner) % C; clamp the code, subtract the zero point, scale back.
    // BEGIN SOLUTION
    const int n = outer * C * inner;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int c = (i / inner) % C;
        const float s = scale[c];
        const int z = zero_point[c];
        const float code = quant_code(x[i], s, z);
        const float q = fminf(fmaxf(code, (float)qmin), (float)qmax);
        y[i] = (q - (float)z) * s;  // q - z is a small integer: exact, so one rounding, as torch's
    }
    // END SOLUTION
}

__global__ void fake_quant_bwd(const float* x, const float* dy, const float* scale, const int* zero_point,
                               float* dx, int outer, int C, int inner, int qmin, int qmax) {
    // HINT: the mask is decided by the rounded code before it is clamped; the bounds themselves pass the gradient.
    // BEGIN SOLUTION
    const int n = outer * C * inner;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int c = (i / inner) % C;
        const float code = quant_code(x[i], scale[c], zero_point[c]);
        dx[i] = in_range(code, qmin, qmax) ? dy[i] : 0.0f;
    }
    // END SOLUTION
}

__global__ void lsq_bwd(const float* x, const float* dy, const float* scale, const int* zero_point, float* dx,
                        float* dscale, float* dzero, int outer, int C, int inner, int qmin, int qmax,
                        float grad_factor) {
    __shared__ float red[32];
    // HINT: the block walks its channel's outer * inner elements with its threads (consecutive j to consecutive threads), keeps two running sums, reduces them with block_sum, and one thread writes them.
    // BEGIN SOLUTION
    const int per_channel = outer * inner;
    for (int c = blockIdx.x; c < C; c += gridDim.x) {  // block-uniform: every thread reaches block_sum
        const float s = scale[c], inv_s = 1.0f / s;
        const int z = zero_point[c];
        float ds = 0.0f, dz = 0.0f;
        for (int k = threadIdx.x; k < per_channel; k += blockDim.x) {
            const int o = k / inner, j = k - o * inner;
            const int i = (o * C + c) * inner + j;
            const float xv = x[i], g = dy[i];
            const float code = quant_code(xv, s, z);
            if (in_range(code, qmin, qmax)) {
                dx[i] = g;
                ds += g * ((code - (float)z) - xv * inv_s);  // round(x/s) - x/s, in [-1/2, 1/2]
            } else {
                dx[i] = 0.0f;
                ds += g * (float)((code < qmin ? qmin : qmax) - z);
                dz -= g * s;
            }
        }
        ds = block_sum(ds, red);
        dz = block_sum(dz, red);
        if (threadIdx.x == 0) {
            dscale[c] = ds * grad_factor;
            dzero[c] = dz * grad_factor;
        }
    }
    // END SOLUTION
}
