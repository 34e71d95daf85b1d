// hpccourse CUDA emulator: bfloat16 (`__nv_bfloat16`, `nv_bfloat16`) with CUDA's conversions.
#pragma once
#ifndef HPCCOURSE_CUDA_BF16_H
#define HPCCOURSE_CUDA_BF16_H 1
#include "hpccourse_cuda.h"
#include "cuda_fp16.h"

namespace hpc {
static inline unsigned short f32_to_bf16_bits(float f) {
    unsigned x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}
static inline float bf16_bits_to_f32(unsigned short h) {
    unsigned x = (unsigned)h << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
}  // namespace hpc

struct __nv_bfloat16_raw { unsigned short x; };
struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(::hpc::f32_to_bf16_bits(f)) {}
    __nv_bfloat16(double f) : __x(::hpc::f32_to_bf16_bits((float)f)) {}
    __nv_bfloat16(int i) : __x(::hpc::f32_to_bf16_bits((float)i)) {}
    operator float() const { return ::hpc::bf16_bits_to_f32(__x); }
    __nv_bfloat16& operator=(float f) { __x = ::hpc::f32_to_bf16_bits(f); return *this; }
    __nv_bfloat16& operator+=(const __nv_bfloat16& o) { *this = __nv_bfloat16(float(*this) + float(o)); return *this; }
    __nv_bfloat16& operator*=(const __nv_bfloat16& o) { *this = __nv_bfloat16(float(*this) * float(o)); return *this; }
};
typedef __nv_bfloat16 nv_bfloat16;
struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
typedef __nv_bfloat162 nv_bfloat162;
namespace hpc {
template <> struct type_kind<__nv_bfloat16> { static constexpr char value = 'B'; };
}
static inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) + float(b)); }
static inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) - float(b)); }
static inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) * float(b)); }
static inline __nv_bfloat16 operator/(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) / float(b)); }
static inline bool operator<(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) < float(b); }
static inline bool operator>(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) > float(b); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b)); }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2(float(h.x), float(h.y)); }
static inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
static inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __nv_bfloat16(fmaf(float(a), float(b), float(c)));
}
static inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) < float(b) ? b : a; }
static inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return float(b) < float(a) ? b : a; }
static inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
#endif
