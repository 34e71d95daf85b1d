// hpccourse CUDA emulator: 8-bit floating point (`__nv_fp8_e4m3`, `__nv_fp8_e5m2`, the x2 / x4 vectors
// and the `__nv_cvt_*` conversions) with the semantics of CUDA's <cuda_fp8.h>:
//   - e4m3 ("E4M3FN" of the OCP FP8 spec, torch.float8_e4m3fn): bias 7, no infinity, 0x7F / 0xFF are
//     NaN, largest finite 448 (0x7E), smallest subnormal 2^-9;
//   - e5m2 (torch.float8_e5m2): bias 15, IEEE-like, +-inf 0x7C / 0xFC, NaN 0x7D..0x7F, largest finite
//     57344 (0x7B), smallest subnormal 2^-16;
//   - narrowing conversions round to nearest, ties to even, on the fp8 grid (subnormals included);
//     |x| beyond max finite + half an ulp (e4m3: > 464, e5m2: >= 61440) and +-inf become
//     __NV_SATFINITE: +-max finite;  __NV_NOSAT: NaN (e4m3) or +-inf (e5m2);
//     NaN stays NaN (a float NaN becomes 0x7F in both formats: its sign is not kept);
//   - the class constructors use __NV_SATFINITE (as CUDA's do); constructors and conversion operators
//     are `explicit`, as in CUDA, so code that compiles here compiles with nvcc/NVRTC too;
//   - widening conversions are exact (every fp8 value is a half and a float); NaN becomes the
//     canonical positive NaN (half 0x7FFF, float 0x7FFFFFFF, as an H200 gives).
// tests/test_cuda_fp8.py checks every byte against torch and, on a GPU, against the real header.
// Not emulated: __nv_fp8_e8m0 / __nv_cvt_*_to_e8m0 (CUDA 12.8+), __nv_cvt_bfloat16raw2_to_fp8x2 (the emulator
// has no __nv_bfloat162_raw; the x2/x4 class constructors from __nv_bfloat162 work), fp8 arithmetic.
#pragma once
#ifndef HPCCOURSE_CUDA_FP8_H
#define HPCCOURSE_CUDA_FP8_H 1
#include "hpccourse_cuda.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <limits>

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

namespace hpc {
// x (a double: every float, half and bfloat16 is one exactly) to fp8 bits.
static inline unsigned char f64_to_fp8_bits(double x, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
    const bool e4 = kind == __NV_E4M3;
    const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15, emin = 1 - bias;
    const double maxf = e4 ? 448.0 : 57344.0;
    const unsigned char maxcode = e4 ? 0x7E : 0x7B, overflow = e4 ? 0x7F : 0x7C;
    const unsigned char sign = std::signbit(x) ? 0x80 : 0x00;
    if (std::isnan(x)) {   // e4m3: the one NaN; e5m2: a quiet NaN keeping the top payload bit
        unsigned long long bits;
        std::memcpy(&bits, &x, 8);
        return (unsigned char)(sign | (e4 ? 0x7Fu : 0x7Eu | (unsigned)((bits >> 50) & 1u)));
    }
    const double a = std::fabs(x);
    if (std::isinf(a)) return (unsigned char)(sign | (sat == __NV_SATFINITE ? maxcode : overflow));
    // The grid spacing at a's binade (subnormal spacing below 2^emin); a / q is exact, nearbyint
    // rounds to nearest even in the default rounding mode.
    int e = 0;
    std::frexp(a, &e);                     // a = f * 2^e, f in [0.5, 1): leading bit 2^(e-1)
    const int lead = (a == 0.0 || e - 1 < emin) ? emin : e - 1;
    const double r = std::nearbyint(std::ldexp(a, mbits - lead));   // a rounded, in units of 2^(lead-mbits)
    const double v = std::ldexp(r, lead - mbits);
    if (v > maxf) return (unsigned char)(sign | (sat == __NV_SATFINITE ? maxcode : overflow));
    if (v == 0.0) return sign;
    int ve = 0;
    std::frexp(v, &ve);
    const int vlead = ve - 1;
    unsigned code;
    if (vlead < emin) {                    // subnormal: the count of 2^(emin-mbits) quanta
        code = (unsigned)std::ldexp(v, mbits - emin);
    } else {                               // normal: biased exponent, then the fraction bits
        const unsigned frac = (unsigned)std::ldexp(v, mbits - vlead) - (1u << mbits);
        code = ((unsigned)(vlead + bias) << mbits) | frac;
    }
    return (unsigned char)(sign | code);
}
// fp8 bits to float, exact.
static inline float fp8_bits_to_f32(unsigned char b, __nv_fp8_interpretation_t kind) {
    const bool nan = kind == __NV_E5M2 ? (b & 0x7Fu) > 0x7Cu : (b & 0x7Fu) == 0x7Fu;
    if (nan) return __int_as_float(0x7FFFFFFF);                                   // canonical NaN, as on a GPU
    if (kind == __NV_E5M2) return f16_bits_to_f32((unsigned short)(b << 8));     // e5m2 is the top byte of a half
    const unsigned e = (b >> 3) & 0xFu, m = b & 0x7u;
    float mag;
    if (e == 0) {
        mag = (float)m * 0x1p-9f;
    } else {
        mag = __uint_as_float(((e + 120u) << 23) | (m << 20));
    }
    return (b & 0x80u) ? -mag : mag;
}
static inline unsigned short fp8_bits_to_f16_bits(unsigned char b, __nv_fp8_interpretation_t kind) {
    float f = fp8_bits_to_f32(b, kind);
    if (std::isnan(f)) return 0x7FFFu;
    return f32_to_f16_bits(f);  // exact: every fp8 value is a half
}
// fp8 to an integer type: truncation toward zero, clamped to the type's range; NaN gives 0
// (0x8000000000000000 for the 64-bit types), as CUDA documents.
template <class I> static inline I fp8_to_int(unsigned char b, __nv_fp8_interpretation_t kind) {
    const float f = fp8_bits_to_f32(b, kind);
    if (std::isnan(f)) return sizeof(I) == 8 ? (I)0x8000000000000000ULL : (I)0;
    const double lo = (double)std::numeric_limits<I>::min(), hi = (double)std::numeric_limits<I>::max();
    const double t = std::trunc((double)f);
    return t <= lo ? std::numeric_limits<I>::min() : t >= hi ? std::numeric_limits<I>::max() : (I)t;
}
}  // namespace hpc

static inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(const double x, const __nv_saturation_t saturate,
                                                        const __nv_fp8_interpretation_t fp8_interpretation) {
    return ::hpc::f64_to_fp8_bits(x, saturate, fp8_interpretation);
}
static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(const float x, const __nv_saturation_t saturate,
                                                       const __nv_fp8_interpretation_t fp8_interpretation) {
    if (std::isnan(x)) return 0x7F;  // a float NaN becomes the positive canonical NaN first
    return ::hpc::f64_to_fp8_bits((double)x, saturate, fp8_interpretation);
}
static inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(const __half_raw x, const __nv_saturation_t saturate,
                                                         const __nv_fp8_interpretation_t fp8_interpretation) {
    return __nv_cvt_float_to_fp8(::hpc::f16_bits_to_f32(x.x), saturate, fp8_interpretation);
}
static inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(const __nv_bfloat16_raw x, const __nv_saturation_t saturate,
                                                             const __nv_fp8_interpretation_t fp8_interpretation) {
    return __nv_cvt_float_to_fp8(::hpc::bf16_bits_to_f32(x.x), saturate, fp8_interpretation);
}
// Pairs: element .x goes to the low byte, .y to the high byte (as in CUDA).
static inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(const double2 x, const __nv_saturation_t saturate,
                                                             const __nv_fp8_interpretation_t fp8_interpretation) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_double_to_fp8(x.x, saturate, fp8_interpretation) |
                                  (__nv_cvt_double_to_fp8(x.y, saturate, fp8_interpretation) << 8));
}
static inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(const float2 x, const __nv_saturation_t saturate,
                                                            const __nv_fp8_interpretation_t fp8_interpretation) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_float_to_fp8(x.x, saturate, fp8_interpretation) |
                                  (__nv_cvt_float_to_fp8(x.y, saturate, fp8_interpretation) << 8));
}
static inline __nv_fp8x2_storage_t __nv_cvt_halfraw2_to_fp8x2(const __half2_raw x, const __nv_saturation_t saturate,
                                                              const __nv_fp8_interpretation_t fp8_interpretation) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_halfraw_to_fp8(__half_raw{x.x}, saturate, fp8_interpretation) |
                                  (__nv_cvt_halfraw_to_fp8(__half_raw{x.y}, saturate, fp8_interpretation) << 8));
}
static inline __half_raw __nv_cvt_fp8_to_halfraw(const __nv_fp8_storage_t x, const __nv_fp8_interpretation_t fp8_interpretation) {
    return __half_raw{::hpc::fp8_bits_to_f16_bits(x, fp8_interpretation)};
}
static inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(const __nv_fp8x2_storage_t x,
                                                     const __nv_fp8_interpretation_t fp8_interpretation) {
    return __half2_raw{::hpc::fp8_bits_to_f16_bits((unsigned char)(x & 0xFFu), fp8_interpretation),
                       ::hpc::fp8_bits_to_f16_bits((unsigned char)(x >> 8), fp8_interpretation)};
}

// The scalar classes. Constructors saturate (__NV_SATFINITE); integers convert through float.
#define HPC_FP8_CLASS(NAME, KIND)                                                                           \
    struct __attribute__((aligned(1))) NAME {                                                               \
        __nv_fp8_storage_t __x;                                                                             \
        NAME() = default;                                                                                   \
        explicit NAME(const __half f) { __x = __nv_cvt_halfraw_to_fp8(static_cast<__half_raw>(f), __NV_SATFINITE, KIND); } \
        explicit NAME(const __nv_bfloat16 f) { __x = __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{f.__x}, __NV_SATFINITE, KIND); } \
        explicit NAME(const float f) { __x = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, KIND); }             \
        explicit NAME(const double f) { __x = __nv_cvt_double_to_fp8(f, __NV_SATFINITE, KIND); }           \
        explicit NAME(const unsigned short int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); } \
        explicit NAME(const unsigned int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); } \
        explicit NAME(const unsigned long int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); } \
        explicit NAME(const unsigned long long int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); } \
        explicit NAME(const short int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); }  \
        explicit NAME(const int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); }        \
        explicit NAME(const long int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); }   \
        explicit NAME(const long long int v) { __x = __nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND); } \
        explicit operator float() const { return ::hpc::fp8_bits_to_f32(__x, KIND); }                      \
        explicit operator double() const { return (double)::hpc::fp8_bits_to_f32(__x, KIND); }            \
        explicit operator __half() const { return __half(__nv_cvt_fp8_to_halfraw(__x, KIND)); }            \
        explicit operator __nv_bfloat16() const { return __nv_bfloat16(::hpc::fp8_bits_to_f32(__x, KIND)); } \
        explicit operator bool() const { return (__x & 0x7Fu) != 0u; }                                     \
        explicit operator unsigned char() const { return ::hpc::fp8_to_int<unsigned char>(__x, KIND); } \
        explicit operator signed char() const { return ::hpc::fp8_to_int<signed char>(__x, KIND); } \
        explicit operator char() const { return ::hpc::fp8_to_int<char>(__x, KIND); }    \
        explicit operator unsigned short int() const { return ::hpc::fp8_to_int<unsigned short>(__x, KIND); } \
        explicit operator short int() const { return ::hpc::fp8_to_int<short>(__x, KIND); } \
        explicit operator unsigned int() const { return ::hpc::fp8_to_int<unsigned int>(__x, KIND); } \
        explicit operator int() const { return ::hpc::fp8_to_int<int>(__x, KIND); }      \
        explicit operator long int() const { return ::hpc::fp8_to_int<long>(__x, KIND); }                 \
        explicit operator unsigned long int() const { return ::hpc::fp8_to_int<unsigned long>(__x, KIND); } \
        explicit operator long long int() const { return ::hpc::fp8_to_int<long long>(__x, KIND); } \
        explicit operator unsigned long long int() const { return ::hpc::fp8_to_int<unsigned long long>(__x, KIND); } \
    };
HPC_FP8_CLASS(__nv_fp8_e4m3, __NV_E4M3)
HPC_FP8_CLASS(__nv_fp8_e5m2, __NV_E5M2)
#undef HPC_FP8_CLASS

// Two and four values in one word: element 0 in the lowest byte.
#define HPC_FP8X2_CLASS(NAME, KIND)                                                                         \
    struct __attribute__((aligned(2))) NAME {                                                               \
        __nv_fp8x2_storage_t __x;                                                                           \
        NAME() = default;                                                                                   \
        explicit NAME(const __half2 f) {                                                                    \
            __x = __nv_cvt_halfraw2_to_fp8x2(__half2_raw{f.x.__x, f.y.__x}, __NV_SATFINITE, KIND);           \
        }                                                                                                   \
        explicit NAME(const __nv_bfloat162 f) {                                                             \
            __x = (__nv_fp8x2_storage_t)(__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{f.x.__x}, __NV_SATFINITE, KIND) | \
                                         (__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{f.y.__x}, __NV_SATFINITE, KIND) << 8)); \
        }                                                                                                   \
        explicit NAME(const float2 f) { __x = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, KIND); }         \
        explicit NAME(const double2 f) { __x = __nv_cvt_double2_to_fp8x2(f, __NV_SATFINITE, KIND); }       \
        explicit operator __half2() const {                                                                 \
            __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(__x, KIND);                                          \
            return __half2(__half(__half_raw{r.x}), __half(__half_raw{r.y}));                               \
        }                                                                                                   \
        explicit operator float2() const {                                                                  \
            return make_float2(::hpc::fp8_bits_to_f32((unsigned char)(__x & 0xFFu), KIND),                  \
                               ::hpc::fp8_bits_to_f32((unsigned char)(__x >> 8), KIND));                    \
        }                                                                                                   \
    };
HPC_FP8X2_CLASS(__nv_fp8x2_e4m3, __NV_E4M3)
HPC_FP8X2_CLASS(__nv_fp8x2_e5m2, __NV_E5M2)
#undef HPC_FP8X2_CLASS

#define HPC_FP8X4_CLASS(NAME, KIND)                                                                         \
    struct __attribute__((aligned(4))) NAME {                                                               \
        __nv_fp8x4_storage_t __x;                                                                           \
        NAME() = default;                                                                                   \
        explicit NAME(const __half2 flo, const __half2 fhi) {                                               \
            unsigned lo = __nv_cvt_halfraw2_to_fp8x2(__half2_raw{flo.x.__x, flo.y.__x}, __NV_SATFINITE, KIND); \
            unsigned hi = __nv_cvt_halfraw2_to_fp8x2(__half2_raw{fhi.x.__x, fhi.y.__x}, __NV_SATFINITE, KIND); \
            __x = lo | (hi << 16);                                                                          \
        }                                                                                                   \
        explicit NAME(const __nv_bfloat162 flo, const __nv_bfloat162 fhi) {                                 \
            __x = 0;                                                                                        \
            const __nv_bfloat16 v[4] = {flo.x, flo.y, fhi.x, fhi.y};                                        \
            for (int i = 0; i < 4; ++i)                                                                     \
                __x |= (unsigned)__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{v[i].__x}, __NV_SATFINITE, KIND) << (8 * i); \
        }                                                                                                   \
        explicit NAME(const float4 f) {                                                                     \
            unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(f.x, f.y), __NV_SATFINITE, KIND);            \
            unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(f.z, f.w), __NV_SATFINITE, KIND);            \
            __x = lo | (hi << 16);                                                                          \
        }                                                                                                   \
        explicit NAME(const double4 f) {                                                                    \
            unsigned lo = __nv_cvt_double2_to_fp8x2(make_double2(f.x, f.y), __NV_SATFINITE, KIND);          \
            unsigned hi = __nv_cvt_double2_to_fp8x2(make_double2(f.z, f.w), __NV_SATFINITE, KIND);          \
            __x = lo | (hi << 16);                                                                          \
        }                                                                                                   \
        explicit operator float4() const {                                                                  \
            return make_float4(::hpc::fp8_bits_to_f32((unsigned char)(__x & 0xFFu), KIND),                  \
                               ::hpc::fp8_bits_to_f32((unsigned char)((__x >> 8) & 0xFFu), KIND),           \
                               ::hpc::fp8_bits_to_f32((unsigned char)((__x >> 16) & 0xFFu), KIND),          \
                               ::hpc::fp8_bits_to_f32((unsigned char)(__x >> 24), KIND));                   \
        }                                                                                                   \
    };
HPC_FP8X4_CLASS(__nv_fp8x4_e4m3, __NV_E4M3)
HPC_FP8X4_CLASS(__nv_fp8x4_e5m2, __NV_E5M2)
#undef HPC_FP8X4_CLASS

#endif
