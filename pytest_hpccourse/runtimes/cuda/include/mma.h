// hpccourse CUDA emulator: nvcuda::wmma with the warp as the collective unit.
//
// A fragment holds rows*cols/32 elements per lane; element i of lane l is element
// f = i*32 + l of the tile in row-major order (the real mapping is unspecified, so code that
// only does element-wise work on `x[i]` behaves the same). load/store/fill work lane by lane;
// mma_sync is a warp rendezvous: the last lane to arrive gathers the 32 lanes' fragments,
// computes D = A*B + C in float (products exact, k ascending), and scatters D back.
#pragma once
#ifndef HPCCOURSE_MMA_H
#define HPCCOURSE_MMA_H 1
#include "hpccourse_cuda.h"
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

template <class Use, int M, int N, int K> struct frag_shape;
template <int M, int N, int K> struct frag_shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct frag_shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct frag_shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <class T> struct frag_storage { typedef T type; };
template <> struct frag_storage<precision::tf32> { typedef float type; };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    typedef typename frag_storage<T>::type element_type;
    typedef element_type storage_element_type;
    enum { num_rows = frag_shape<Use, M, N, K>::rows, num_cols = frag_shape<Use, M, N, K>::cols };
    static constexpr int num_elements = num_rows * num_cols / 32;
    static_assert(num_rows * num_cols % 32 == 0, "unsupported WMMA shape");
    element_type x[num_elements];
};

static inline float __float_to_tf32(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    std::memcpy(&f, &u, 4);
    return f;
}

namespace detail {
template <class L> struct is_row { static constexpr bool value = true; };
template <> struct is_row<col_major> { static constexpr bool value = false; };
template <class T> static inline T cvt(float v) { return T(v); }
template <class T> static inline float val(const T& v) { return (float)v; }
static inline int lane() { return ::hpc::g_cur ? ::hpc::g_cur->lane : 0; }
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L, class V>
static inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
    typedef typename fragment<Use, M, N, K, T, L>::element_type E;
    for (int i = 0; i < f.num_elements; i++) f.x[i] = E(v);
}

// The hardware contract (CUDA C++ Programming Guide, "Warp Matrix Functions"): mptr is 256-bit (32-byte)
// aligned and ldm is a multiple of 16 bytes (of 8 __half / 4 float elements); the pointer's element type is
// the fragment's (nvcc has an overload per fragment type, e.g. no store of a __half accumulator to a float*).
namespace detail {
template <class U, class T> struct check_elem {
    static_assert(std::is_same<typename std::remove_cv<U>::type, typename frag_storage<T>::type>::value,
                  "wmma::load_matrix_sync / store_matrix_sync: the pointer's element type must be the fragment's "
                  "element type (float for precision::tf32); nvcc has no overload for this pair");
    static constexpr bool value = true;
};
static inline __attribute__((always_inline)) void check_ptr(const char* fn, const void* p, unsigned ldm,
                                                            std::size_t elem, const char* file, int line) {
    if (((std::uintptr_t)p & 31u) || ((std::size_t)ldm * elem) % 16u) ::hpc::wmma_misaligned(fn, p, ldm, elem, file, line);
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L, class U>
static inline __attribute__((always_inline)) void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const U* p,
                                                                  unsigned ldm, const char* file = __builtin_FILE(),
                                                                  int line = __builtin_LINE()) {
    static_assert(!std::is_same<Use, accumulator>::value, "accumulator loads need a layout_t argument");
    static_assert(detail::check_elem<U, T>::value, "");
    typedef fragment<Use, M, N, K, T, L> F;
    typedef typename F::element_type E;
    detail::check_ptr("load_matrix_sync", p, ldm, sizeof(U), file, line);
    const int l = detail::lane();
    for (int i = 0; i < F::num_elements; i++) {
        int flat = i * 32 + l, r = flat / F::num_cols, c = flat % F::num_cols;
        f.x[i] = E(p[detail::is_row<L>::value ? r * ldm + c : c * ldm + r]);
    }
}
template <int M, int N, int K, class T, class U>
static inline __attribute__((always_inline)) void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f,
                                                                  const U* p, unsigned ldm, layout_t layout,
                                                                  const char* file = __builtin_FILE(),
                                                                  int line = __builtin_LINE()) {
    static_assert(detail::check_elem<U, T>::value, "");
    typedef fragment<accumulator, M, N, K, T, void> F;
    typedef typename F::element_type E;
    detail::check_ptr("load_matrix_sync", p, ldm, sizeof(U), file, line);
    const int l = detail::lane();
    for (int i = 0; i < F::num_elements; i++) {
        int flat = i * 32 + l, r = flat / F::num_cols, c = flat % F::num_cols;
        f.x[i] = E(p[layout == mem_row_major ? r * ldm + c : c * ldm + r]);
    }
}
template <int M, int N, int K, class T, class U>
static inline __attribute__((always_inline)) void store_matrix_sync(U* p, const fragment<accumulator, M, N, K, T, void>& f,
                                                                   unsigned ldm, layout_t layout,
                                                                   const char* file = __builtin_FILE(),
                                                                   int line = __builtin_LINE()) {
    static_assert(detail::check_elem<U, T>::value, "");
    typedef fragment<accumulator, M, N, K, T, void> F;
    detail::check_ptr("store_matrix_sync", p, ldm, sizeof(U), file, line);
    const int l = detail::lane();
    for (int i = 0; i < F::num_elements; i++) {
        int flat = i * 32 + l, r = flat / F::num_cols, c = flat % F::num_cols;
        p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = U(f.x[i]);
    }
}

namespace detail {
template <class FD, class FA, class FB, class FC> static void mma_cb(::hpc::WarpOp** ops, int n) {
    enum { M = FA::num_rows, K = FA::num_cols, N = FB::num_cols };
    typedef typename FD::element_type DE;
    typedef typename std::conditional<std::is_integral<DE>::value, long long, float>::type Acc;
    static Acc A[M * K], B[K * N], C[M * N];
    for (int l = 0; l < n; l++) {
        const FA* a = static_cast<const FA*>(ops[l]->ptr[1]);
        const FB* b = static_cast<const FB*>(ops[l]->ptr[2]);
        const FC* c = static_cast<const FC*>(ops[l]->ptr[3]);
        for (int i = 0; i < FA::num_elements; i++) A[i * 32 + l] = (Acc)(float)a->x[i];
        for (int i = 0; i < FB::num_elements; i++) B[i * 32 + l] = (Acc)(float)b->x[i];
        for (int i = 0; i < FC::num_elements; i++) C[i * 32 + l] = (Acc)(float)c->x[i];
    }
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            Acc s = C[r * N + c];
            for (int k = 0; k < K; k++) s += A[r * K + k] * B[k * N + c];
            C[r * N + c] = s;
        }
    for (int l = 0; l < n; l++) {
        FD* d = static_cast<FD*>(ops[l]->ptr[0]);
        for (int i = 0; i < FD::num_elements; i++) d->x[i] = DE((float)C[i * 32 + l]);
    }
}
}  // namespace detail

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
static inline void mma_sync_at(const char* file, int line, fragment<accumulator, M, N, K, TD, void>& d,
                               const fragment<matrix_a, M, N, K, TA, LA>& a, const fragment<matrix_b, M, N, K, TB, LB>& b,
                               const fragment<accumulator, M, N, K, TC, void>& c, bool = false) {
    ::hpc::WarpOp op;
    std::memset(&op, 0, sizeof op);
    op.kind = ::hpc::OP_CALLBACK;
    op.mask = 0xffffffffu;
    op.file = file;
    op.line = line;
    op.what = "wmma::mma_sync";
    op.cb = &detail::mma_cb<fragment<accumulator, M, N, K, TD, void>, fragment<matrix_a, M, N, K, TA, LA>,
                            fragment<matrix_b, M, N, K, TB, LB>, fragment<accumulator, M, N, K, TC, void>>;
    op.ptr[0] = &d;
    op.ptr[1] = const_cast<void*>(static_cast<const void*>(&a));
    op.ptr[2] = const_cast<void*>(static_cast<const void*>(&b));
    op.ptr[3] = const_cast<void*>(static_cast<const void*>(&c));
    ::hpc::warp_collective(&op);
}
#define mma_sync(...) mma_sync_at(__FILE__, __LINE__, __VA_ARGS__)
}  // namespace wmma
}  // namespace nvcuda
#endif
