// hpccourse CUDA emulator: force-included before a learner's .cu when it is compiled as C++.
//
// Every CUDA thread of a block runs as a user-space fiber (see hpccourse_runtime.hpp); the block's
// threads meet at __syncthreads, a warp's lanes meet at shuffles/votes/__syncwarp. Shared
// memory lives in one fixed arena (hpccourse_runtime.hpp); `__shared__` declarations are rewritten by
// pytest_hpccourse/runtimes/cuda/source.py into references into that arena, so the checked builds
// know every shared variable's extent.
//
// Macros a build defines: HPCCOURSE_CHECKED (race/bank build: every memory access of the
// kernel translation unit is instrumented with -fsanitize=thread and reported to our own
// hooks) and HPCCOURSE_ASAN (AddressSanitizer build).
#pragma once
#ifndef HPCCOURSE_CUDA_H
#define HPCCOURSE_CUDA_H 1

#define HPCCOURSE_CUDA_EMULATOR 1
#define __CUDACC__ 1
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 800
#endif
#define __CUDACC_VER_MAJOR__ 12
#define __CUDACC_VER_MINOR__ 4
#define CUDART_VERSION 12040
#define CUDA_VERSION 12040

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
// `__noinline__` is rewritten by source.py (libstdc++ 13+ spells `__attribute__((__noinline__))`).
#define __inline_hint__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __cluster_dims__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
#define __device_builtin__
// A `__shared__` that source.py could not rewrite (e.g. one produced by a macro) still
// compiles: it becomes a plain static, not tracked by the checked builds.
#define __shared__ static

#define HPC_NO_TSAN __attribute__((no_sanitize("thread")))
#define HPC_RA() __builtin_return_address(0)
#define HPC_LOC __FILE__, __LINE__

// ---------------------------------------------------------------- vector types
#define HPC_VEC1(T, N, A)                                                                       \
    struct __attribute__((aligned(A))) N##1 { T x; };                                           \
    static inline N##1 make_##N##1(T x) { N##1 r; r.x = x; return r; }
#define HPC_VEC2(T, N, A)                                                                       \
    struct __attribute__((aligned(A))) N##2 { T x, y; };                                        \
    static inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }
#define HPC_VEC3(T, N)                                                                          \
    struct N##3 { T x, y, z; };                                                                 \
    static inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }
#define HPC_VEC4(T, N, A)                                                                       \
    struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                                  \
    static inline N##4 make_##N##4(T x, T y, T z, T w) {                                        \
        N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
#define HPC_VECS(T, N, A1, A2, A4) HPC_VEC1(T, N, A1) HPC_VEC2(T, N, A2) HPC_VEC3(T, N) HPC_VEC4(T, N, A4)
HPC_VECS(signed char, char, 1, 2, 4)
HPC_VECS(unsigned char, uchar, 1, 2, 4)
HPC_VECS(short, short, 2, 4, 8)
HPC_VECS(unsigned short, ushort, 2, 4, 8)
HPC_VECS(int, int, 4, 8, 16)
HPC_VECS(unsigned int, uint, 4, 8, 16)
HPC_VECS(long, long, 8, 16, 16)
HPC_VECS(unsigned long, ulong, 8, 16, 16)
HPC_VECS(long long, longlong, 8, 16, 16)
HPC_VECS(unsigned long long, ulonglong, 8, 16, 16)
HPC_VECS(float, float, 4, 8, 16)
HPC_VECS(double, double, 8, 16, 16)

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---------------------------------------------------------------- the emulator's state
namespace hpc {
struct ThreadCtx {          // the head of hpccourse_runtime.hpp's Fiber
    uint3 tidx;
    int linear;             // linear thread index in the block
    int lane;               // linear % 32
    int warp;               // linear / 32
};
extern ThreadCtx* g_cur;    // the fiber running now (null in host code)
extern uint3 g_blockIdx;
extern dim3 g_blockDim;
extern dim3 g_gridDim;

// hpccourse_runtime.hpp
void syncthreads(const char* file, int line);
int syncthreads_op(int op, int pred, const char* file, int line);  // 0 count, 1 and, 2 or
void yield_now();
// the seeded random order: a thread may give way to another just before a global-memory atomic
extern int g_atomic_yield;
void atomic_yield(const void* address);
static inline void before_atomic(const void* address) {
    if (__builtin_expect(g_atomic_yield != 0, 0)) atomic_yield(address);
}
[[noreturn]] void fatal(const char* kind, const char* file, int line, const char* fmt, ...);
void* smem_static(std::size_t size, std::size_t align, std::size_t elem, const char* name,
                  const char* file, int line, unsigned e0, unsigned e1, unsigned e2);
void* smem_dynamic(std::size_t elem, const char* name, const char* file, int line);
void* device_malloc(std::size_t n, int kind);
void device_free(void* p);
long long clock64();
// mma.h: a WMMA load/store whose pointer is not 32-byte aligned or whose ldm is not a multiple of 16 bytes
[[noreturn]] void wmma_misaligned(const char* fn, const void* p, unsigned ldm, std::size_t elem, const char* file,
                                  int line);

struct WarpOp;
typedef void (*WarpCallback)(WarpOp** ops, int n);
struct WarpOp {
    int kind;
    unsigned mask;
    unsigned long long val;   // the lane's operand bits
    int param;                // srcLane / delta / laneMask / predicate
    int width;
    int size;                 // operand size in bytes
    const char* file;
    int line;
    const char* what;         // intrinsic name, for deadlock reports
    WarpCallback cb;          // kind == OP_CALLBACK
    void* ptr[4];
    unsigned long long result;
    int lane;                 // filled in by the runtime
};
enum {
    OP_SHFL = 1, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ANY, OP_ALL,
    OP_SYNCWARP, OP_MATCH_ANY, OP_MATCH_ALL, OP_RED_ADD, OP_RED_MIN, OP_RED_MAX,
    OP_RED_AND, OP_RED_OR, OP_RED_XOR, OP_RED_UMIN, OP_RED_UMAX, OP_ACTIVEMASK, OP_CALLBACK
};
unsigned long long warp_collective(WarpOp* op);

// checked builds: explicit hooks for accesses our own (uninstrumented) helpers make
#ifdef HPCCOURSE_CHECKED
void note_access(const void* p, std::size_t n, int kind, const void* pc);  // kind 0 read, 1 write, 2 atomic
#else
static inline void note_access(const void*, std::size_t, int, const void*) {}
#endif

template <class T> static inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> static inline T from_bits(unsigned long long b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
static inline unsigned long long warp_op(int kind, const char* what, unsigned mask, unsigned long long val,
                                         int size, int param, int width, const char* file, int line) {
    WarpOp op;
    op.kind = kind; op.mask = mask; op.val = val; op.param = param; op.width = width; op.size = size;
    op.file = file; op.line = line; op.what = what; op.cb = nullptr;
    op.ptr[0] = op.ptr[1] = op.ptr[2] = op.ptr[3] = nullptr;
    op.result = 0; op.lane = 0;
    return warp_collective(&op);
}
template <class T> static inline T shfl(int kind, const char* what, const char* file, int line, unsigned mask,
                                        T var, int p, int width = 32) {
    return from_bits<T>(warp_op(kind, what, mask, to_bits(var), (int)sizeof(T), p, width, file, line));
}
template <class T> static inline unsigned match_any(const char* file, int line, unsigned mask, T v) {
    return (unsigned)warp_op(OP_MATCH_ANY, "__match_any_sync", mask, to_bits(v), (int)sizeof(T), 0, 32, file, line);
}
template <class T> static inline unsigned match_all(const char* file, int line, unsigned mask, T v, int* pred) {
    unsigned long long r = warp_op(OP_MATCH_ALL, "__match_all_sync", mask, to_bits(v), (int)sizeof(T), 0, 32, file, line);
    if (pred) *pred = r != 0;
    return (unsigned)r;
}
}  // namespace hpc

#define threadIdx (static_cast<const uint3&>(::hpc::g_cur->tidx))
#define blockIdx (static_cast<const uint3&>(::hpc::g_blockIdx))
#define blockDim (static_cast<const dim3&>(::hpc::g_blockDim))
#define gridDim (static_cast<const dim3&>(::hpc::g_gridDim))
static constexpr int warpSize = 32;

// ---------------------------------------------------------------- synchronisation
#define __syncthreads() ::hpc::syncthreads(HPC_LOC)
#define __syncthreads_count(p) ::hpc::syncthreads_op(0, (p), HPC_LOC)
#define __syncthreads_and(p) ::hpc::syncthreads_op(1, (p), HPC_LOC)
#define __syncthreads_or(p) ::hpc::syncthreads_op(2, (p), HPC_LOC)
namespace hpc {
static inline void syncwarp(const char* f, int l, unsigned mask = 0xffffffffu) {
    warp_op(OP_SYNCWARP, "__syncwarp", mask, 0, 0, 0, 32, f, l);
}
static inline unsigned activemask(const char* f, int l) {
    return (unsigned)warp_op(OP_ACTIVEMASK, "__activemask", 0, 0, 0, 0, 32, f, l);
}
}  // namespace hpc
#define __syncwarp(...) ::hpc::syncwarp(HPC_LOC, ##__VA_ARGS__)
#define __activemask() ::hpc::activemask(HPC_LOC)
#define __shfl_sync(...) ::hpc::shfl(::hpc::OP_SHFL, "__shfl_sync", HPC_LOC, __VA_ARGS__)
#define __shfl_up_sync(...) ::hpc::shfl(::hpc::OP_SHFL_UP, "__shfl_up_sync", HPC_LOC, __VA_ARGS__)
#define __shfl_down_sync(...) ::hpc::shfl(::hpc::OP_SHFL_DOWN, "__shfl_down_sync", HPC_LOC, __VA_ARGS__)
#define __shfl_xor_sync(...) ::hpc::shfl(::hpc::OP_SHFL_XOR, "__shfl_xor_sync", HPC_LOC, __VA_ARGS__)
#define __ballot_sync(m, p) \
    ((unsigned)::hpc::warp_op(::hpc::OP_BALLOT, "__ballot_sync", (m), 0, 0, !!(p), 32, HPC_LOC))
#define __any_sync(m, p) ((int)::hpc::warp_op(::hpc::OP_ANY, "__any_sync", (m), 0, 0, !!(p), 32, HPC_LOC))
#define __all_sync(m, p) ((int)::hpc::warp_op(::hpc::OP_ALL, "__all_sync", (m), 0, 0, !!(p), 32, HPC_LOC))
#define __match_any_sync(m, v) ::hpc::match_any(HPC_LOC, (m), (v))
#define __match_all_sync(m, v, pred) ::hpc::match_all(HPC_LOC, (m), (v), (pred))
#define HPC_REDUCE(op, name, m, v) \
    ::hpc::warp_op(::hpc::op, name, (m), (unsigned long long)(unsigned)(v), 4, 0, 32, HPC_LOC)
#define __reduce_add_sync(m, v) ((unsigned)HPC_REDUCE(OP_RED_ADD, "__reduce_add_sync", m, v))
#define __reduce_and_sync(m, v) ((unsigned)HPC_REDUCE(OP_RED_AND, "__reduce_and_sync", m, v))
#define __reduce_or_sync(m, v) ((unsigned)HPC_REDUCE(OP_RED_OR, "__reduce_or_sync", m, v))
#define __reduce_xor_sync(m, v) ((unsigned)HPC_REDUCE(OP_RED_XOR, "__reduce_xor_sync", m, v))
namespace hpc {
static inline int reduce_min(const char* f, int l, unsigned m, int v) {
    return (int)warp_op(OP_RED_MIN, "__reduce_min_sync", m, (unsigned)v, 4, 0, 32, f, l);
}
static inline unsigned reduce_min(const char* f, int l, unsigned m, unsigned v) {
    return (unsigned)warp_op(OP_RED_UMIN, "__reduce_min_sync", m, v, 4, 0, 32, f, l);
}
static inline int reduce_max(const char* f, int l, unsigned m, int v) {
    return (int)warp_op(OP_RED_MAX, "__reduce_max_sync", m, (unsigned)v, 4, 0, 32, f, l);
}
static inline unsigned reduce_max(const char* f, int l, unsigned m, unsigned v) {
    return (unsigned)warp_op(OP_RED_UMAX, "__reduce_max_sync", m, v, 4, 0, 32, f, l);
}
}  // namespace hpc
#define __reduce_min_sync(m, v) ::hpc::reduce_min(HPC_LOC, (m), (v))
#define __reduce_max_sync(m, v) ::hpc::reduce_max(HPC_LOC, (m), (v))

static inline void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
static inline void __threadfence_block() { __asm__ __volatile__("" ::: "memory"); }
static inline void __threadfence_system() { __asm__ __volatile__("" ::: "memory"); }
static inline void __nanosleep(unsigned) { ::hpc::yield_now(); }
static inline long long clock64() { return ::hpc::clock64(); }
static inline long long __clock64() { return ::hpc::clock64(); }
static inline unsigned long long __globaltimer() { return (unsigned long long)::hpc::clock64(); }
#define __trap() ::hpc::fatal("trap", HPC_LOC, "__trap() called")
#define __brkpt() ::hpc::fatal("trap", HPC_LOC, "__brkpt() called")
static inline void __prof_trigger(int) {}

// ---------------------------------------------------------------- atomics
// One OS thread runs all fibers, so an atomic is a plain read-modify-write; the checked build
// is told that the access was atomic (no race between atomics). In the seeded random order a
// thread may first switch to another (before_atomic), so a check-then-act on global memory
// (`if (t[s] == EMPTY) atomicCAS(&t[s], EMPTY, k);`, ignoring the result) really races.
#define HPC_ATOMIC static inline __attribute__((noinline)) HPC_NO_TSAN
#define HPC_ATOMIC_RMW(NAME, T, EXPR)                                  \
    HPC_ATOMIC T NAME(T* address, T val) {                             \
        ::hpc::before_atomic(address);                                 \
        ::hpc::note_access(address, sizeof(T), 2, HPC_RA());           \
        T old = *address;                                              \
        *address = (EXPR);                                             \
        return old;                                                    \
    }
#define HPC_ATOMIC_ALL(NAME, T, EXPR) \
    HPC_ATOMIC_RMW(NAME, T, EXPR) HPC_ATOMIC_RMW(NAME##_block, T, EXPR) HPC_ATOMIC_RMW(NAME##_system, T, EXPR)
HPC_ATOMIC_ALL(atomicAdd, int, old + val)
HPC_ATOMIC_ALL(atomicAdd, unsigned int, old + val)
HPC_ATOMIC_ALL(atomicAdd, unsigned long long, old + val)
HPC_ATOMIC_ALL(atomicAdd, float, old + val)
HPC_ATOMIC_ALL(atomicAdd, double, old + val)
HPC_ATOMIC_ALL(atomicSub, int, old - val)
HPC_ATOMIC_ALL(atomicSub, unsigned int, old - val)
HPC_ATOMIC_ALL(atomicExch, int, val)
HPC_ATOMIC_ALL(atomicExch, unsigned int, val)
HPC_ATOMIC_ALL(atomicExch, unsigned long long, val)
HPC_ATOMIC_ALL(atomicExch, float, val)
HPC_ATOMIC_ALL(atomicMin, int, val < old ? val : old)
HPC_ATOMIC_ALL(atomicMin, unsigned int, val < old ? val : old)
HPC_ATOMIC_ALL(atomicMin, long long, val < old ? val : old)
HPC_ATOMIC_ALL(atomicMin, unsigned long long, val < old ? val : old)
HPC_ATOMIC_ALL(atomicMax, int, val > old ? val : old)
HPC_ATOMIC_ALL(atomicMax, unsigned int, val > old ? val : old)
HPC_ATOMIC_ALL(atomicMax, long long, val > old ? val : old)
HPC_ATOMIC_ALL(atomicMax, unsigned long long, val > old ? val : old)
HPC_ATOMIC_ALL(atomicAnd, int, old & val)
HPC_ATOMIC_ALL(atomicAnd, unsigned int, old & val)
HPC_ATOMIC_ALL(atomicAnd, unsigned long long, old & val)
HPC_ATOMIC_ALL(atomicOr, int, old | val)
HPC_ATOMIC_ALL(atomicOr, unsigned int, old | val)
HPC_ATOMIC_ALL(atomicOr, unsigned long long, old | val)
HPC_ATOMIC_ALL(atomicXor, int, old ^ val)
HPC_ATOMIC_ALL(atomicXor, unsigned int, old ^ val)
HPC_ATOMIC_ALL(atomicXor, unsigned long long, old ^ val)
HPC_ATOMIC_ALL(atomicInc, unsigned int, old >= val ? 0u : old + 1u)
HPC_ATOMIC_ALL(atomicDec, unsigned int, (old == 0u || old > val) ? val : old - 1u)
#define HPC_ATOMIC_CAS(NAME, T)                                                  \
    HPC_ATOMIC T NAME(T* address, T compare, T val) {                            \
        ::hpc::before_atomic(address);                                           \
        ::hpc::note_access(address, sizeof(T), 2, HPC_RA());                     \
        T old = *address;                                                        \
        if (old == compare) *address = val;                                      \
        else ::hpc::yield_now(); /* lets a spin lock's holder run */             \
        return old;                                                              \
    }
#define HPC_ATOMIC_CAS_ALL(T) HPC_ATOMIC_CAS(atomicCAS, T) HPC_ATOMIC_CAS(atomicCAS_block, T) HPC_ATOMIC_CAS(atomicCAS_system, T)
HPC_ATOMIC_CAS_ALL(int)
HPC_ATOMIC_CAS_ALL(unsigned int)
HPC_ATOMIC_CAS_ALL(unsigned long long)
HPC_ATOMIC_CAS_ALL(unsigned short)

// ---------------------------------------------------------------- math
using std::abs; using std::fabs; using std::sqrt; using std::cbrt; using std::exp; using std::exp2;
using std::expm1; using std::log; using std::log2; using std::log10; using std::log1p; using std::pow;
using std::sin; using std::cos; using std::tan; using std::asin; using std::acos; using std::atan;
using std::atan2; using std::sinh; using std::cosh; using std::tanh; using std::asinh; using std::acosh;
using std::atanh; using std::floor; using std::ceil; using std::round; using std::trunc; using std::rint;
using std::lrint; using std::llrint; using std::lround; using std::llround; using std::nearbyint;
using std::fmod; using std::remainder; using std::fmin; using std::fmax; using std::fdim; using std::fma;
using std::erf; using std::erfc; using std::lgamma; using std::tgamma; using std::hypot; using std::copysign;
using std::ldexp; using std::frexp; using std::modf; using std::scalbn; using std::ilogb; using std::logb;
using std::nextafter; using std::isnan; using std::isinf; using std::isfinite; using std::signbit;

#define HPC_MINMAX(T)                                                          \
    static inline T min(T a, T b) { return b < a ? b : a; }                    \
    static inline T max(T a, T b) { return a < b ? b : a; }
HPC_MINMAX(int)
HPC_MINMAX(unsigned int)
HPC_MINMAX(long)
HPC_MINMAX(unsigned long)
HPC_MINMAX(long long)
HPC_MINMAX(unsigned long long)
HPC_MINMAX(float)
HPC_MINMAX(double)
static inline unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
static inline unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
static inline unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
static inline unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }
static inline double min(float a, double b) { return min((double)a, b); }
static inline double min(double a, float b) { return min(a, (double)b); }
static inline double max(float a, double b) { return max((double)a, b); }
static inline double max(double a, float b) { return max(a, (double)b); }
static inline long long llmin(long long a, long long b) { return min(a, b); }
static inline long long llmax(long long a, long long b) { return max(a, b); }
static inline unsigned int umin(unsigned int a, unsigned int b) { return min(a, b); }
static inline unsigned int umax(unsigned int a, unsigned int b) { return max(a, b); }

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
// glibc declares __expf & co. itself (and exp10f/sincosf as GNU extensions), so CUDA's fast
// intrinsics of the same names are macros onto the accurate functions.
#define __expf(x) expf(x)
#define __exp10f(x) exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __log10f(x) log10f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf(x, y)
#define __sincosf(x, s, c) sincosf(x, s, c)
static inline void sincospif(float x, float* s, float* c) { *s = sinf((float)M_PI * x); *c = cosf((float)M_PI * x); }
static inline float sinpif(float x) { return sinf((float)M_PI * x); }
static inline float cospif(float x) { return cosf((float)M_PI * x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fsqrt_rz(float x) { return sqrtf(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fadd_rz(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmul_rz(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
static inline double __drcp_rn(double x) { return 1.0 / x; }
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
static inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }
static inline float erfcxf(float x) { return expf(x * x) * erfcf(x); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline long long __float2ll_rz(float x) { return (long long)x; }
static inline int __double2int_rn(double x) { return (int)std::nearbyint(x); }
static inline int __double2int_rz(double x) { return (int)x; }
static inline float __double2float_rn(double x) { return (float)x; }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline double __int2double_rn(int x) { return (double)x; }
static inline int __float_as_int(float x) { int r; std::memcpy(&r, &x, 4); return r; }
static inline unsigned __float_as_uint(float x) { unsigned r; std::memcpy(&r, &x, 4); return r; }
static inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
static inline float __uint_as_float(unsigned x) { float r; std::memcpy(&r, &x, 4); return r; }
static inline long long __double_as_longlong(double x) { long long r; std::memcpy(&r, &x, 8); return r; }
static inline double __longlong_as_double(long long x) { double r; std::memcpy(&r, &x, 8); return r; }
static inline int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
static inline int __double2loint(double x) { return (int)__double_as_longlong(x); }

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
static inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static inline int __mul24(int a, int b) { return (int)(((long long)(a << 8 >> 8)) * (b << 8 >> 8)); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffff) * (b & 0xffffff); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
static inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
static inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
static inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}
static inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    return __funnelshift_l(lo, hi, s > 32 ? 32 : s);
}
static inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    return s >= 32 ? hi : __funnelshift_r(lo, hi, s);
}
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}

// Cache-hinted loads and stores are plain accesses here.
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------- shared memory (see source.py)
namespace hpc {
template <class T> static inline T& smem_ref(std::size_t align, const char* name, const char* file, int line) {
    typedef typename std::remove_all_extents<T>::type E;
    std::size_t a = align > alignof(T) ? align : alignof(T);
    return *static_cast<T*>(smem_static(sizeof(T), a, sizeof(E), name, file, line, (unsigned)std::extent<T, 0>::value,
                                        (unsigned)std::extent<T, 1>::value, (unsigned)std::extent<T, 2>::value));
}
template <class T> static inline T& smem_extern(const char* name, const char* file, int line) {
    typedef typename std::remove_all_extents<T>::type E;
    return *static_cast<T*>(smem_dynamic(sizeof(E), name, file, line));
}
}  // namespace hpc

// ---------------------------------------------------------------- host runtime API
enum cudaError_t {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3, cudaErrorLaunchFailure = 4, cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101, cudaErrorInvalidDevicePointer = 17, cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700, cudaErrorLaunchOutOfResources = 701,
    cudaErrorUnknown = 999
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
};
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9
};
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrWarpSize = 10, cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
struct CUstream_st;
struct CUevent_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
#define cudaStreamDefault 0
#define cudaStreamNonBlocking 1
#define cudaEventDefault 0
#define cudaHostAllocDefault 0
#define cudaMemAttachGlobal 1
struct cudaDeviceProp {
    char name[256];
    std::size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerMultiprocessor, sharedMemPerBlockOptin,
        totalConstMem, memPitch;
    int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3],
        clockRate, multiProcessorCount, major, minor, l2CacheSize, maxThreadsPerMultiProcessor,
        maxBlocksPerMultiProcessor, memoryBusWidth, memoryClockRate, concurrentKernels, unifiedAddressing,
        managedMemory, integrated, canMapHostMemory, computeMode, ECCEnabled, asyncEngineCount, pciBusID,
        pciDeviceID;
};
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaMalloc(void** p, std::size_t n) {
    *p = ::hpc::device_malloc(n, 0);
    return *p || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T> static inline cudaError_t cudaMalloc(T** p, std::size_t n) {
    return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T> static inline cudaError_t cudaMallocManaged(T** p, std::size_t n, unsigned = 1) {
    return cudaMalloc(reinterpret_cast<void**>(p), n);
}
template <class T> static inline cudaError_t cudaMallocHost(T** p, std::size_t n) {
    *p = static_cast<T*>(std::malloc(n ? n : 1));
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T> static inline cudaError_t cudaHostAlloc(T** p, std::size_t n, unsigned) { return cudaMallocHost(p, n); }
static inline cudaError_t cudaFree(void* p) { ::hpc::device_free(p); return cudaSuccess; }
static inline cudaError_t cudaFreeHost(void* p) { std::free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void* d, const void* s, std::size_t n, cudaMemcpyKind = cudaMemcpyDefault) {
    if (n) std::memmove(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void* d, const void* s, std::size_t n, cudaMemcpyKind k = cudaMemcpyDefault,
                                          cudaStream_t = 0) {
    return cudaMemcpy(d, s, n, k);
}
static inline cudaError_t cudaMemcpy2D(void* d, std::size_t dp, const void* s, std::size_t sp, std::size_t w,
                                       std::size_t h, cudaMemcpyKind = cudaMemcpyDefault) {
    for (std::size_t r = 0; r < h; r++) std::memmove((char*)d + r * dp, (const char*)s + r * sp, w);
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void* d, int v, std::size_t n) {
    if (n) std::memset(d, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void* d, int v, std::size_t n, cudaStream_t = 0) { return cudaMemset(d, v, n); }
template <class T> static inline cudaError_t cudaMemcpyToSymbol(T& sym, const void* src, std::size_t n,
                                                                std::size_t off = 0, cudaMemcpyKind = cudaMemcpyHostToDevice) {
    std::memcpy(reinterpret_cast<char*>(&sym) + off, src, n);
    return cudaSuccess;
}
template <class T> static inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& sym, std::size_t n,
                                                                  std::size_t off = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost) {
    std::memcpy(dst, reinterpret_cast<const char*>(&sym) + off, n);
    return cudaSuccess;
}
template <class T> static inline cudaError_t cudaGetSymbolAddress(void** p, const T& sym) {
    *p = (void*)&sym;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
static inline cudaError_t cudaThreadSynchronize() { return cudaSuccess; }
static inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
static inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
static inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = nullptr; return cudaSuccess; }
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = nullptr; return cudaSuccess; }
static inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <class F> static inline cudaError_t cudaFuncSetCacheConfig(F, int) { return cudaSuccess; }
template <class F> static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int block,
                                                                                           std::size_t) {
    *n = block > 0 ? 2048 / block : 0;
    if (*n > 32) *n = 32;
    return cudaSuccess;
}
#define cudaFuncCachePreferShared 1
#define cudaFuncCachePreferL1 2

// ---------------------------------------------------------------- kernel launches
// `k<<<g, b, s, st>>>(args)` is rewritten by source.py into `k * hpc::Cfg(g, b, s, st)(args)`.
namespace hpc {
struct LaunchCfg {
    dim3 grid, block;
    std::size_t smem;
};
typedef void (*EntryFn)(void* ctx);
// Runs a whole grid now (the emulator is synchronous); false when the launch was refused.
bool run_grid(const LaunchCfg& cfg, EntryFn fn, void* ctx, const void* kernel);

template <class F> struct Thunk { F f; };
struct Cfg {
    LaunchCfg c;
    Cfg(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t = nullptr) { c.grid = g; c.block = b; c.smem = s; }
    template <class... A> auto operator()(A... a) const {
        LaunchCfg cfg = c;
        auto l = [cfg, a...](auto k) { launch(k, cfg, a...); };
        return Thunk<decltype(l)>{l};
    }
    template <class... P, class... A> static void launch(void (*k)(P...), const LaunchCfg& cfg, A... a) {
        auto call = [k, a...]() { k(a...); };
        typedef decltype(call) C;
        run_grid(cfg, [](void* p) { (*static_cast<C*>(p))(); }, &call, (const void*)k);
    }
};
template <class... P, class F> static inline void operator*(void (*k)(P...), Thunk<F>&& t) { t.f(k); }

// The launch table that build.py appends to the translation unit.
struct ParamDesc {
    int is_ptr, is_const, size, elem_size;
    char kind, elem_kind;   // f float, i signed, u unsigned, b bool, h half, B bfloat16, o other
};
struct KernelEntry {
    const char* name;
    const void* fn;
    void (*invoke)(const void* fn, void** args);
    int nparams;
    const ParamDesc* params;
};
template <class T> struct type_kind {
    static constexpr char value = std::is_same<T, bool>::value            ? 'b'
                                  : std::is_floating_point<T>::value      ? 'f'
                                  : std::is_integral<T>::value            ? (std::is_signed<T>::value ? 'i' : 'u')
                                  : std::is_enum<T>::value                ? 'i'
                                                                          : 'o';
};
template <class T> struct elem_info {
    typedef typename std::remove_cv<typename std::remove_pointer<T>::type>::type E;
    static constexpr int size = std::is_void<E>::value ? 1 : (int)sizeof(typename std::conditional<std::is_void<E>::value, char, E>::type);
    static constexpr char kind = std::is_void<E>::value ? 'o' : type_kind<typename std::conditional<std::is_void<E>::value, char, E>::type>::value;
};
template <class P> static constexpr ParamDesc describe_param() {
    typedef typename std::remove_cv<typename std::remove_reference<P>::type>::type T;
    return ParamDesc{std::is_pointer<T>::value ? 1 : 0,
                     std::is_pointer<T>::value && std::is_const<typename std::remove_pointer<T>::type>::value ? 1 : 0,
                     (int)sizeof(T), std::is_pointer<T>::value ? elem_info<T>::size : (int)sizeof(T),
                     std::is_pointer<T>::value ? 'p' : type_kind<T>::value,
                     std::is_pointer<T>::value ? elem_info<T>::kind : type_kind<T>::value};
}
template <class... P> struct Sig {
    static constexpr int n = sizeof...(P);
    static const ParamDesc* params() {
        static const ParamDesc d[sizeof...(P) + 1] = {describe_param<P>()..., ParamDesc{0, 0, 0, 0, 'o', 'o'}};
        return d;
    }
    template <std::size_t... I> static void call(void (*k)(P...), void** a, std::index_sequence<I...>) {
        k(*static_cast<typename std::remove_cv<typename std::remove_reference<P>::type>::type*>(a[I])...);
    }
    static void invoke(const void* f, void** a) {
        call(reinterpret_cast<void (*)(P...)>(const_cast<void*>(f)), a, std::index_sequence_for<P...>{});
    }
};
template <class... P> static inline KernelEntry make_entry(const char* name, void (*k)(P...)) {
    return KernelEntry{name, (const void*)k, &Sig<P...>::invoke, Sig<P...>::n, Sig<P...>::params()};
}
}  // namespace hpc

#endif  // HPCCOURSE_CUDA_H
