// hpccourse CUDA emulator: IEEE binary16 (`__half`, `half`, `__half2`) with CUDA's conversions.
// Arithmetic is done in float and rounded to nearest-even, as the hardware's half ALU does for
// products (exact in float) and, up to rare double-rounding cases, for sums.
#pragma once
#ifndef HPCCOURSE_CUDA_FP16_H
#define HPCCOURSE_CUDA_FP16_H 1
#include "hpccourse_cuda.h"

namespace hpc {
static inline unsigned short f32_to_f16_bits(float f) {
    unsigned x;
    std::memcpy(&x, &f, 4);
    unsigned sign = (x >> 16) & 0x8000u;
    unsigned exp = (x >> 23) & 0xffu;
    unsigned mant = x & 0x7fffffu;
    if (exp == 0xffu) return (unsigned short)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (unsigned short)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (unsigned short)sign;
        mant |= 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        unsigned h = mant >> shift;
        unsigned rem = mant & ((1u << shift) - 1u);
        unsigned halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u))) h++;
        return (unsigned short)(sign | h);
    }
    unsigned h = ((unsigned)e << 10) | (mant >> 13);
    unsigned rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (unsigned short)(sign | h);
}
static inline float f16_bits_to_f32(unsigned short h) {
    unsigned sign = (unsigned)(h & 0x8000u) << 16;
    unsigned exp = (h >> 10) & 0x1fu;
    unsigned mant = h & 0x3ffu;
    unsigned bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            int e = -14;
            while (!(mant & 0x400u)) { mant <<= 1; e--; }
            mant &= 0x3ffu;
            bits = sign | ((unsigned)(e + 127) << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
}  // namespace hpc

struct __half_raw { unsigned short x; };
struct __attribute__((aligned(2))) __half {
    unsigned short __x;
    __half() = default;
    constexpr __half(__half_raw r) : __x(r.x) {}
    __half(float f) : __x(::hpc::f32_to_f16_bits(f)) {}
    __half(double f) : __x(::hpc::f32_to_f16_bits((float)f)) {}
    __half(int i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(unsigned i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(long long i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(unsigned long long i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(long i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(unsigned long i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(short i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    __half(unsigned short i) : __x(::hpc::f32_to_f16_bits((float)i)) {}
    operator float() const { return ::hpc::f16_bits_to_f32(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
    __half& operator=(float f) { __x = ::hpc::f32_to_f16_bits(f); return *this; }
    __half& operator=(double f) { __x = ::hpc::f32_to_f16_bits((float)f); return *this; }
    __half& operator+=(const __half& o) { *this = __half(float(*this) + float(o)); return *this; }
    __half& operator-=(const __half& o) { *this = __half(float(*this) - float(o)); return *this; }
    __half& operator*=(const __half& o) { *this = __half(float(*this) * float(o)); return *this; }
    __half& operator/=(const __half& o) { *this = __half(float(*this) / float(o)); return *this; }
};
typedef __half half;
struct __attribute__((aligned(4))) __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
};
typedef __half2 half2;
struct __half2_raw { unsigned short x, y; };

namespace hpc {
template <> struct type_kind<__half> { static constexpr char value = 'h'; };
template <> struct type_kind<const __half> { static constexpr char value = 'h'; };
}  // namespace hpc

static inline __half operator+(__half a, __half b) { return __half(float(a) + float(b)); }
static inline __half operator-(__half a, __half b) { return __half(float(a) - float(b)); }
static inline __half operator*(__half a, __half b) { return __half(float(a) * float(b)); }
static inline __half operator/(__half a, __half b) { return __half(float(a) / float(b)); }
static inline __half operator-(__half a) { __half r = a; r.__x ^= 0x8000u; return r; }
static inline __half operator+(__half a) { return a; }
static inline bool operator==(__half a, __half b) { return float(a) == float(b); }
static inline bool operator!=(__half a, __half b) { return float(a) != float(b); }
static inline bool operator<(__half a, __half b) { return float(a) < float(b); }
static inline bool operator>(__half a, __half b) { return float(a) > float(b); }
static inline bool operator<=(__half a, __half b) { return float(a) <= float(b); }
static inline bool operator>=(__half a, __half b) { return float(a) >= float(b); }
static inline __half2 operator+(__half2 a, __half2 b) { return __half2(a.x + b.x, a.y + b.y); }
static inline __half2 operator-(__half2 a, __half2 b) { return __half2(a.x - b.x, a.y - b.y); }
static inline __half2 operator*(__half2 a, __half2 b) { return __half2(a.x * b.x, a.y * b.y); }
static inline __half2 operator/(__half2 a, __half2 b) { return __half2(a.x / b.x, a.y / b.y); }

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double d) { return __half((float)d); }
static inline float __half2float(__half h) { return float(h); }
static inline __half __int2half_rn(int i) { return __half((float)i); }
static inline __half __uint2half_rn(unsigned i) { return __half((float)i); }
static inline int __half2int_rn(__half h) { return (int)nearbyintf(float(h)); }
static inline int __half2int_rz(__half h) { return (int)float(h); }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __short_as_half(short s) { return __half(__half_raw{(unsigned short)s}); }
static inline __half __ushort_as_half(unsigned short s) { return __half(__half_raw{s}); }
static inline __half __hadd(__half a, __half b) { return a + b; }
static inline __half __hsub(__half a, __half b) { return a - b; }
static inline __half __hmul(__half a, __half b) { return a * b; }
static inline __half __hdiv(__half a, __half b) { return a / b; }
static inline __half __hneg(__half a) { return -a; }
static inline __half __habs(__half a) { __half r = a; r.__x &= 0x7fffu; return r; }
static inline __half __hfma(__half a, __half b, __half c) { return __half(fmaf(float(a), float(b), float(c))); }
static inline __half __hmax(__half a, __half b) { return float(a) < float(b) ? b : a; }
static inline __half __hmin(__half a, __half b) { return float(b) < float(a) ? b : a; }
static inline bool __heq(__half a, __half b) { return a == b; }
static inline bool __hne(__half a, __half b) { return a != b; }
static inline bool __hlt(__half a, __half b) { return a < b; }
static inline bool __hle(__half a, __half b) { return a <= b; }
static inline bool __hgt(__half a, __half b) { return a > b; }
static inline bool __hge(__half a, __half b) { return a >= b; }
static inline bool __hisnan(__half a) { return std::isnan(float(a)); }
static inline int __hisinf(__half a) { float f = float(a); return std::isinf(f) ? (f > 0 ? 1 : -1) : 0; }
static inline __half hexp(__half a) { return __half(expf(float(a))); }
static inline __half hlog(__half a) { return __half(logf(float(a))); }
static inline __half hsqrt(__half a) { return __half(sqrtf(float(a))); }
static inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf(float(a))); }
static inline __half hrcp(__half a) { return __half(1.0f / float(a)); }
static inline __half htanh(__half a) { return __half(tanhf(float(a))); }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline float2 __half22float2(__half2 h) { return make_float2(float(h.x), float(h.y)); }
static inline __half2 __float22half2_rn(float2 f) { return __half2(__half(f.x), __half(f.y)); }
static inline float __low2float(__half2 h) { return float(h.x); }
static inline float __high2float(__half2 h) { return float(h.y); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }
static inline __half2 __hadd2(__half2 a, __half2 b) { return a + b; }
static inline __half2 __hsub2(__half2 a, __half2 b) { return a - b; }
static inline __half2 __hmul2(__half2 a, __half2 b) { return a * b; }
static inline __half2 __h2div(__half2 a, __half2 b) { return a / b; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); }
static inline __half2 __hmax2(__half2 a, __half2 b) { return __half2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
static inline __half2 __hmin2(__half2 a, __half2 b) { return __half2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }

HPC_ATOMIC __half atomicAdd(__half* address, __half val) {
    ::hpc::note_access(address, sizeof(__half), 2, HPC_RA());
    __half old = *address;
    *address = old + val;
    return old;
}
HPC_ATOMIC __half2 atomicAdd(__half2* address, __half2 val) {
    ::hpc::note_access(address, sizeof(__half2), 2, HPC_RA());
    __half2 old = *address;
    *address = old + val;
    return old;
}
#endif
