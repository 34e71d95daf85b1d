// hpccourse CUDA emulator runtime: fibers, block scheduler, warp collectives, shared-memory
// arena, the checked build's access hooks, and the runner's main().
//
// Compiled once per build variant (fast / checked / asan) and linked with a learner's
// translation unit. Single OS thread: blocks run one after the other, the threads of a block
// run as fibers that switch only at synchronisation points (cooperative scheduling).
// the C++ library first: the emulation header's macros must not reach its headers
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "hpccourse_cuda.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifdef HPCCOURSE_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && defined(__linux__) && !defined(HPC_USE_UCONTEXT)
#define HPC_ASM_SWITCH 1
#endif

// The launch table and the learner's main(), generated into the kernel translation unit.
extern "C" const hpc::KernelEntry* hpc_kernel_table(int* n);
extern "C" int hpc_user_main_entry(int argc, char** argv);
extern "C" int hpc_has_user_main;
extern "C" char __executable_start;

namespace hpc {
ThreadCtx* g_cur = nullptr;
int g_atomic_yield = 0;  // 1 in the rand order: atomics on global memory may switch threads first
uint3 g_blockIdx;
dim3 g_blockDim;
dim3 g_gridDim;
}  // namespace hpc

using namespace hpc;

namespace {

// ------------------------------------------------------------------ context switch
#ifdef HPC_ASM_SWITCH
extern "C" void hpc_ctx_swap(void** save_sp, void* load_sp);
extern "C" void hpc_ctx_start();
__asm__(
    ".text\n"
    ".globl hpc_ctx_swap\n"
    ".type hpc_ctx_swap,@function\n"
    "hpc_ctx_swap:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size hpc_ctx_swap,.-hpc_ctx_swap\n"
    ".globl hpc_ctx_start\n"
    ".type hpc_ctx_start,@function\n"
    "hpc_ctx_start:\n"
    "  movq %r13, %rdi\n"
    "  callq *%r12\n"
    "  ud2\n"
    ".size hpc_ctx_start,.-hpc_ctx_start\n");
#endif

enum { F_RUNNABLE, F_BARRIER, F_WARP, F_ACTIVEMASK, F_DONE };

struct Fiber : ThreadCtx {
    void* sp;
    char* stack;            // usable stack, above the guard page
    size_t stack_size;
    int state;
    WarpOp* op;
    const char* wfile;
    int wline;
    const char* what;
    unsigned long long lone_sw, lone_wops;  // atomic_yield: st_switches/st_warp_ops when it last ran alone
#ifndef HPC_ASM_SWITCH
    ucontext_t uc;
#endif
#ifdef HPCCOURSE_ASAN
    void* fake_stack;
#endif
#ifdef HPCCOURSE_CHECKED
    std::unordered_map<uintptr_t, unsigned>* pc_count;
#endif
};

// ------------------------------------------------------------------ global state
Fiber* g_fibers = nullptr;
int g_fibers_cap = 0;
size_t g_stack_size = 64 * 1024;
char* g_stacks = nullptr;
size_t g_stacks_len = 0;
void* g_sched_sp = nullptr;
#ifndef HPC_ASM_SWITCH
ucontext_t g_sched_uc;
#endif
#ifdef HPCCOURSE_ASAN
const void* g_main_stack_bottom = nullptr;
size_t g_main_stack_size = 0;
#endif

int g_nthreads = 0, g_live = 0, g_bar_count = 0, g_bar_pred = 0;
int g_bar_last_count = 0, g_bar_last_n = 0;
EntryFn g_entry = nullptr;
void* g_entry_ctx = nullptr;
const void* g_kernel_fn = nullptr;
std::string g_kernel_name;
int g_order = 0;  // 0 fwd, 1 rev, 2 rand
unsigned long long g_rng = 0x9E3779B97F4A7C15ull;
bool g_abort = false;       // stop now (fatal error)
bool g_stop_after_block = false;
bool g_in_launch = false;
bool g_main_mode = false;
cudaError_t g_last_error = cudaSuccess;
unsigned long long g_block_linear = 0;
char g_result_path[4096] = "";
long long g_clock = 0;

// statistics
unsigned long long st_blocks = 0, st_threads = 0, st_barriers = 0, st_warp_ops = 0, st_switches = 0;

unsigned long long rng_next() {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}

// ------------------------------------------------------------------ reports
struct Report {
    char kind[32];
    char msg[1200];
    uintptr_t pc1, pc2;
    const char* file;
    int line;
    uint3 block, thread;
    int has_thread;
};
Report g_reports[8];
int g_nreports = 0;

uintptr_t pc_off(const void* pc) {
    return pc ? (uintptr_t)pc - (uintptr_t)&__executable_start : 0;
}

Fiber* cur() { return static_cast<Fiber*>(g_cur); }

bool seen_report(const char* kind, uintptr_t pc1, uintptr_t pc2) {
    for (int i = 0; i < g_nreports; i++)
        if (!strcmp(g_reports[i].kind, kind) && g_reports[i].pc1 == pc1 && g_reports[i].pc2 == pc2) return true;
    return false;
}

Report* add_report(const char* kind, uintptr_t pc1, uintptr_t pc2, const char* file, int line) {
    if (seen_report(kind, pc1, pc2)) return nullptr;
    if (g_nreports >= 8) return nullptr;
    Report* r = &g_reports[g_nreports++];
    memset(r, 0, sizeof *r);
    snprintf(r->kind, sizeof r->kind, "%s", kind);
    r->pc1 = pc1;
    r->pc2 = pc2;
    r->file = file;
    r->line = line;
    r->block = g_blockIdx;
    if (Fiber* f = cur()) {
        r->thread = f->tidx;
        r->has_thread = 1;
    }
    return r;
}

// ---- a tiny JSON writer (async-signal-safe enough: no malloc)
struct Out {
    char buf[1 << 16];
    size_t n = 0;
    void raw(const char* s) {
        while (*s && n + 1 < sizeof buf) buf[n++] = *s++;
    }
    void str(const char* s) {
        raw("\"");
        for (; s && *s && n + 8 < sizeof buf; s++) {
            unsigned char c = (unsigned char)*s;
            if (c == '"' || c == '\\') {
                buf[n++] = '\\';
                buf[n++] = (char)c;
            } else if (c < 0x20) {
                n += (size_t)snprintf(buf + n, sizeof buf - n, "\\u%04x", c);
            } else {
                buf[n++] = (char)c;
            }
        }
        raw("\"");
    }
    void num(unsigned long long v) {
        char t[32];
        snprintf(t, sizeof t, "%llu", v);
        raw(t);
    }
    void key(const char* k) {
        str(k);
        raw(":");
    }
};
Out g_out;

void write_stats(Out& o);

void write_report(Out& o, const Report& r) {
    o.raw("{");
    o.key("kind"); o.str(r.kind); o.raw(",");
    o.key("message"); o.str(r.msg); o.raw(",");
    o.key("pc1"); o.num(r.pc1); o.raw(",");
    o.key("pc2"); o.num(r.pc2); o.raw(",");
    o.key("file"); o.str(r.file ? r.file : ""); o.raw(",");
    o.key("line"); o.num((unsigned long long)(r.line > 0 ? r.line : 0)); o.raw(",");
    char t[160];
    snprintf(t, sizeof t, "[%u,%u,%u]", r.block.x, r.block.y, r.block.z);
    o.key("block"); o.raw(t); o.raw(",");
    if (r.has_thread) snprintf(t, sizeof t, "[%u,%u,%u]", r.thread.x, r.thread.y, r.thread.z);
    else snprintf(t, sizeof t, "null");
    o.key("thread"); o.raw(t);
    o.raw("}");
}

void write_result(bool ok) {
    if (!g_result_path[0]) return;
    Out& o = g_out;
    o.n = 0;
    o.raw("{");
    o.key("ok"); o.raw(ok ? "true" : "false"); o.raw(",");
    o.key("kernel"); o.str(g_kernel_name.c_str()); o.raw(",");
    o.key("kernel_pc"); o.num(g_kernel_fn ? pc_off(g_kernel_fn) : 0); o.raw(",");
    o.key("reports"); o.raw("[");
    for (int i = 0; i < g_nreports; i++) {
        if (i) o.raw(",");
        write_report(o, g_reports[i]);
    }
    o.raw("],");
    o.key("stats");
    write_stats(o);
    o.raw("}\n");
    int fd = open(g_result_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < o.n) {
            ssize_t w = write(fd, o.buf + off, o.n - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(fd);
    }
}

[[noreturn]] void finish_with_error(int code) {
    fflush(stdout);
    fflush(stderr);
    write_result(false);
    _exit(code);
}

// ------------------------------------------------------------------ shared-memory arena
constexpr size_t STATIC_CAP = 256 * 1024;
constexpr size_t DYN_OFF = 256 * 1024;
constexpr size_t DYN_CAP = 256 * 1024;
constexpr size_t ARENA = DYN_OFF + DYN_CAP + 4096;
// Every shared variable starts 128-byte aligned (more if declared so) in every build, so that an alignment
// error (a misaligned float4 or WMMA pointer) shows in all builds alike, not in some.
constexpr size_t SMEM_ALIGN = 128;
#if defined(HPCCOURSE_CHECKED) || defined(HPCCOURSE_ASAN)
constexpr size_t SMEM_RZ = 128;   // redzone after each shared variable
#else
constexpr size_t SMEM_RZ = 0;
#endif
alignas(4096) unsigned char g_arena[ARENA];
size_t g_static_used = SMEM_RZ;
size_t g_dyn_size = 0;
struct SmemVar {
    size_t off, size, elem;
    const char* name;
    const char* file;
    int line;
    unsigned ext[3];
};
std::vector<SmemVar> g_vars;
SmemVar g_dyn_var = {DYN_OFF, 0, 1, nullptr, nullptr, 0, {0, 0, 0}};

#ifdef HPCCOURSE_CHECKED
uint16_t g_region[ARENA];  // 0: not shared memory (redzone); k: g_vars[k-1]; 0xffff: dynamic
#endif

void poison_smem() {
    for (const SmemVar& v : g_vars) memset(g_arena + v.off, 0xff, v.size);
    if (g_dyn_size) memset(g_arena + DYN_OFF, 0xff, g_dyn_size);
}

// ------------------------------------------------------------------ global buffers
struct Buf {
    uintptr_t lo, hi;       // [lo, hi) the usable bytes
    char* base;             // what to free
    std::string name;
    int elem;
    bool from_malloc;
#ifdef HPCCOURSE_CHECKED
    struct GShadow* shadow;
    uint8_t* reads;         // per byte: how many thread-level loads read it (saturates at 255)
    unsigned long long loads, load_bytes, stores, store_bytes, atomics;
    unsigned long long load_requests, load_sectors, store_requests, store_sectors;  // warp-level requests, 32-byte sectors
#endif
};
std::vector<Buf> g_bufs;
#ifdef HPCCOURSE_CHECKED
constexpr size_t GMEM_RZ = 256;
#else
constexpr size_t GMEM_RZ = 0;
#endif

#ifdef HPCCOURSE_CHECKED
// ------------------------------------------------------------------ checked build: race, OOB, banks
struct SShadow {
    uint32_t wepoch, repoch, wpc, rpc, wwe, rwe;
    uint16_t wtid, rtid, rwarp;
    uint8_t atomic, multiwarp;
};
constexpr uint16_t MULTI = 0xffff;
SShadow* g_sshadow = nullptr;
struct GShadow {
    uint32_t block1, epoch, pc, we;
    uint16_t tid;
    uint8_t mask, atomic;
};
uint32_t g_epoch = 1, g_block_epoch0 = 1, g_launch_epoch0 = 1;
uint32_t g_wsync[32];
uintptr_t g_glo = ~(uintptr_t)0, g_ghi = 0;
bool g_banks = false;
bool g_hooks_on = false;

struct BankKey {
    uintptr_t pc;
    unsigned warp, occ;
    bool operator==(const BankKey& o) const { return pc == o.pc && warp == o.warp && occ == o.occ; }
};
struct BankKeyHash {
    size_t operator()(const BankKey& k) const { return (size_t)(k.pc * 0x9E3779B97F4A7C15ull) ^ (k.warp * 131u) ^ (k.occ * 7919u); }
};
struct BankGroup {
    uintptr_t pc;
    int size;
    bool write;
    int n;
    unsigned char lanes[32];
    uint32_t offs[32];
};
std::unordered_map<BankKey, int, BankKeyHash> g_bank_index;
std::vector<BankGroup> g_bank_groups;
// global/shared traffic counters (every launch of the checked build)
unsigned long long st_gmem_loads = 0, st_gmem_load_bytes = 0, st_gmem_stores = 0, st_gmem_store_bytes = 0;
unsigned long long st_gmem_atomics = 0, st_smem_atomics = 0;
unsigned long long st_ld_req = 0, st_st_req = 0, st_ld_wave = 0, st_st_wave = 0, st_ld_conf = 0, st_st_conf = 0;
std::unordered_map<uintptr_t, unsigned long long> g_conf_by_pc;

void bank_finalize() {
    for (const BankGroup& g : g_bank_groups) {
        int s = g.size;
        int per_phase = s <= 4 ? 32 : (s <= 8 ? 16 : 8);
        unsigned long long waves = 0, conf = 0;
        for (int phase = 0; phase < 32 / per_phase; phase++) {
            // distinct words per bank
            uint32_t words[32][32];
            int cnt[32] = {0};
            bool any = false;
            for (int i = 0; i < g.n; i++) {
                if (g.lanes[i] / per_phase != phase) continue;
                any = true;
                uint32_t w0 = g.offs[i] / 4, w1 = (g.offs[i] + (uint32_t)s - 1) / 4;
                for (uint32_t w = w0; w <= w1; w++) {
                    int b = (int)(w % 32);
                    bool dup = false;
                    for (int k = 0; k < cnt[b]; k++)
                        if (words[b][k] == w) { dup = true; break; }
                    if (!dup && cnt[b] < 32) words[b][cnt[b]++] = w;
                }
            }
            if (!any) continue;
            int deg = 1;
            for (int b = 0; b < 32; b++) deg = std::max(deg, cnt[b]);
            waves += (unsigned long long)deg;
            conf += (unsigned long long)(deg - 1);
        }
        if (g.write) { st_st_req++; st_st_wave += waves; st_st_conf += conf; }
        else { st_ld_req++; st_ld_wave += waves; st_ld_conf += conf; }
        if (conf) g_conf_by_pc[g.pc] += conf;
    }
    g_bank_groups.clear();
    g_bank_index.clear();
}

// Global-memory sectors per warp-level request: the lanes' accesses of one warp at one instruction (its k-th
// execution by each lane, the key of the bank-conflict groups) form one request; it touches the distinct 32-byte
// sectors of its lanes' bytes (offsets from the buffer start, as cudaMalloc's 256-byte alignment makes them).
struct GmemGroup {
    bool write;
    int n;
    uint16_t buf[32];
    uint32_t s0[32], s1[32];  // first and last sector of each lane's access
};
std::unordered_map<BankKey, int, BankKeyHash> g_gmem_index;  // open requests -> slot in g_gmem_groups
std::vector<GmemGroup> g_gmem_groups;
std::vector<int> g_gmem_free;
unsigned long long st_gld_req = 0, st_gld_sec = 0, st_gst_req = 0, st_gst_sec = 0;

void gmem_group_done(GmemGroup& g) {
    uint64_t sec[64];
    int m = 0;
    for (int i = 0; i < g.n; i++)
        for (uint32_t s = g.s0[i]; s <= g.s1[i] && m < 64; s++) sec[m++] = ((uint64_t)g.buf[i] << 40) | s;
    g.n = -1;  // closed
    std::sort(sec, sec + m);
    unsigned long long total = 0;
    for (int i = 0; i < m;) {
        // one buffer's run of sorted keys: count its distinct sectors
        int j = i;
        unsigned long long distinct = 0;
        while (j < m && (sec[j] >> 40) == (sec[i] >> 40)) {
            if (j == i || sec[j] != sec[j - 1]) distinct++;
            j++;
        }
        Buf& b = g_bufs[(size_t)(sec[i] >> 40)];
        if (g.write) { b.store_requests++; b.store_sectors += distinct; }
        else { b.load_requests++; b.load_sectors += distinct; }
        total += distinct;
        i = j;
    }
    if (g.write) { st_gst_req++; st_gst_sec += total; }
    else { st_gld_req++; st_gld_sec += total; }
}

void gmem_finalize() {
    for (GmemGroup& g : g_gmem_groups)
        if (g.n > 0) gmem_group_done(g);
    g_gmem_groups.clear();
    g_gmem_index.clear();
    g_gmem_free.clear();
}

void gmem_record(Fiber* f, uintptr_t pc, const Buf* b, uintptr_t a, size_t n, bool write) {
    unsigned occ = (*f->pc_count)[pc]++;
    BankKey k{pc, (unsigned)f->warp, occ};
    auto it = g_gmem_index.find(k);
    int gi;
    if (it == g_gmem_index.end()) {
        if (!g_gmem_free.empty()) {
            gi = g_gmem_free.back();
            g_gmem_free.pop_back();
        } else {
            gi = (int)g_gmem_groups.size();
            g_gmem_groups.emplace_back();
        }
        it = g_gmem_index.emplace(k, gi).first;
        g_gmem_groups[(size_t)gi].write = write;
        g_gmem_groups[(size_t)gi].n = 0;
    } else {
        gi = it->second;
    }
    GmemGroup& g = g_gmem_groups[(size_t)gi];
    if (g.n < 32) {
        uintptr_t off = a - b->lo;
        g.buf[g.n] = (uint16_t)(b - g_bufs.data());
        g.s0[g.n] = (uint32_t)(off / 32);
        g.s1[g.n] = (uint32_t)((off + (n ? n : 1) - 1) / 32);
        g.n++;
    }
    // every lane of the warp is in: the request is complete (lanes that exited or diverged are closed at the
    // next barrier or at the end of the block)
    if (g.n >= std::min(32, g_nthreads - f->warp * 32)) {
        gmem_group_done(g);
        g_gmem_index.erase(it);
        g_gmem_free.push_back(gi);
    }
}

void bank_record(Fiber* f, uintptr_t pc, size_t off, size_t n, bool write) {
    unsigned occ = (*f->pc_count)[pc]++;
    BankKey k{pc, (unsigned)f->warp, occ};
    auto it = g_bank_index.find(k);
    int gi;
    if (it == g_bank_index.end()) {
        gi = (int)g_bank_groups.size();
        g_bank_index.emplace(k, gi);
        BankGroup g;
        g.pc = pc;
        g.size = (int)n;
        g.write = write;
        g.n = 0;
        g_bank_groups.push_back(g);
    } else {
        gi = it->second;
    }
    BankGroup& g = g_bank_groups[(size_t)gi];
    if (g.n < 32) {
        g.lanes[g.n] = (unsigned char)f->lane;
        g.offs[g.n] = (uint32_t)off;
        g.n++;
    }
    if ((int)n > g.size) g.size = (int)n;
}

const char* smem_var_desc(size_t off, char* out, size_t cap) {
    // `name[i][j]` for an address inside a shared variable
    const SmemVar* v = nullptr;
    uint16_t r = g_region[off];
    if (r == 0xffff) v = &g_dyn_var;
    else if (r) v = &g_vars[r - 1];
    if (!v) { snprintf(out, cap, "shared offset %zu", off); return out; }
    size_t idx = (off - v->off) / (v->elem ? v->elem : 1);
    const char* nm = v->name ? v->name : "extern __shared__";
    if (v->ext[1] && v->ext[2]) snprintf(out, cap, "%s[%zu][%zu][%zu]", nm, idx / (v->ext[1] * v->ext[2]), idx / v->ext[2] % v->ext[1], idx % v->ext[2]);
    else if (v->ext[1]) snprintf(out, cap, "%s[%zu][%zu]", nm, idx / v->ext[1], idx % v->ext[1]);
    else if (v->ext[0] || v == &g_dyn_var) snprintf(out, cap, "%s[%zu]", nm, idx);
    else snprintf(out, cap, "%s", nm);
    return out;
}

bool warp_ordered(unsigned other_tid, uint32_t other_we, const Fiber* f) {
    return (int)(other_tid / 32) == f->warp && other_we < g_wsync[f->warp];
}

void tid_str(unsigned linear, char* out, size_t cap) {
    unsigned x = linear % g_blockDim.x, y = linear / g_blockDim.x % g_blockDim.y, z = linear / (g_blockDim.x * g_blockDim.y);
    snprintf(out, cap, "(%u,%u,%u)", x, y, z);
}

void race_report(const char* sub, const char* what, size_t off, Fiber* f, uintptr_t pc, unsigned other, uintptr_t opc,
                 bool other_read) {
    Report* r = add_report("race", pc, opc, nullptr, 0);
    if (!r) return;
    char var[128], me[48], them[48];
    smem_var_desc(off, var, sizeof var);
    tid_str((unsigned)f->linear, me, sizeof me);
    tid_str(other, them, sizeof them);
    snprintf(r->msg, sizeof r->msg,
             "%s race on shared memory `%s` in kernel {k}, block (%u,%u,%u): thread %s %s it at {1} while thread %s "
             "%s it at {2} in the same barrier interval (no __syncthreads()/__syncwarp() orders the two accesses)",
             sub, var, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, me, what, them, other_read ? "read" : "wrote");
    g_stop_after_block = true;
}

void smem_oob(size_t off, size_t n, int kind, Fiber* f, uintptr_t pc) {
    Report* r = add_report("smem-oob", pc, 0, nullptr, 0);
    g_stop_after_block = true;
    if (!r) return;
    // nearest variable below the address
    const SmemVar* best = nullptr;
    if (off >= DYN_OFF) best = &g_dyn_var;
    else
        for (const SmemVar& v : g_vars)
            if (v.off <= off && (!best || v.off > best->off)) best = &v;
    char me[48];
    tid_str((unsigned)f->linear, me, sizeof me);
    if (best) {
        long long past = (long long)off - (long long)(best->off + (best == &g_dyn_var ? g_dyn_size : best->size));
        const char* nm = best->name ? best->name : "extern __shared__";
        if (best == &g_dyn_var)
            snprintf(r->msg, sizeof r->msg,
                     "shared-memory overrun in kernel {k}: thread %s of block (%u,%u,%u) %s %zu bytes at byte %lld past the end of "
                     "the dynamic shared memory `%s` (%zu bytes given at launch) at {1}",
                     me, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, kind == 0 ? "read" : "wrote", n, past, nm, g_dyn_size);
        else
            snprintf(r->msg, sizeof r->msg,
                     "shared-memory overrun in kernel {k}: thread %s of block (%u,%u,%u) %s %zu bytes at byte %lld past the end of "
                     "`__shared__ %s` (%zu bytes, declared at %s:%d) at {1}",
                     me, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, kind == 0 ? "read" : "wrote", n, past, nm, best->size,
                     best->file ? best->file : "?", best->line);
    } else {
        snprintf(r->msg, sizeof r->msg, "shared-memory access outside every shared variable in kernel {k}: thread %s %s at {1}",
                 me, kind == 0 ? "read" : "wrote");
    }
}

void shared_access(size_t off, size_t n, int kind, uintptr_t pc) {
    Fiber* f = cur();
    for (size_t i = 0; i < n; i++)
        if (off + i >= ARENA || g_region[off + i] == 0) {
            smem_oob(off + i, n, kind, f, pc);
            return;
        }
    if (g_banks) bank_record(f, pc, off, n, kind != 0);
    if (kind == 2) st_smem_atomics++;
    const uint16_t me = (uint16_t)(f->linear + 1);
    const uint32_t we = g_wsync[f->warp];
    for (size_t i = 0; i < n; i++) {
        SShadow* e = &g_sshadow[off + i];
        if (kind == 0) {
            if (e->wepoch < g_block_epoch0) {
                Report* r = add_report("uninit", pc, 0, nullptr, 0);
                g_stop_after_block = true;
                if (r) {
                    char var[128], t[48];
                    smem_var_desc(off + i, var, sizeof var);
                    tid_str((unsigned)f->linear, t, sizeof t);
                    snprintf(r->msg, sizeof r->msg,
                             "read of uninitialised shared memory `%s` in kernel {k}: thread %s of block (%u,%u,%u) read it at "
                             "{1}, but no thread of this block has written it (shared memory starts undefined in every block)",
                             var, t, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
                }
                return;
            }
            if (e->wepoch == g_epoch && e->wtid != me && !warp_ordered(e->wtid - 1u, e->wwe, f)) {
                race_report(e->atomic ? "read-after-atomic" : "read-after-write", "read", off + i, f, pc, e->wtid - 1u,
                            e->wpc, false);
                return;
            }
            if (e->repoch == g_epoch && e->rtid != me && e->rtid != 0) {
                if (e->rtid != MULTI) {
                    unsigned other = e->rtid - 1u;
                    e->multiwarp = (int)(other / 32) != f->warp;
                    e->rwarp = (uint16_t)(other / 32);
                    e->rtid = MULTI;
                } else if (e->rwarp != f->warp) {
                    e->multiwarp = 1;
                }
                if (we > e->rwe) e->rwe = we;
            } else if (e->repoch != g_epoch || e->rtid == 0) {
                e->repoch = g_epoch;
                e->rtid = me;
                e->rwarp = (uint16_t)f->warp;
                e->multiwarp = 0;
                e->rwe = we;
                e->rpc = (uint32_t)pc;
            }
        } else {
            const bool atomic = kind == 2;
            if (e->wepoch == g_epoch && e->wtid != me && !(atomic && e->atomic) &&
                !warp_ordered(e->wtid - 1u, e->wwe, f)) {
                race_report(atomic ? "atomic-after-write" : (e->atomic ? "write-after-atomic" : "write-after-write"),
                            atomic ? "updated (atomically)" : "wrote", off + i, f, pc, e->wtid - 1u, e->wpc, false);
                return;
            }
            if (!atomic && e->repoch == g_epoch && e->rtid != 0 && e->rtid != me) {
                bool ordered;
                if (e->rtid == MULTI) ordered = !e->multiwarp && e->rwarp == f->warp && e->rwe < we;
                else ordered = warp_ordered(e->rtid - 1u, e->rwe, f);
                if (!ordered) {
                    unsigned other = e->rtid == MULTI ? (unsigned)e->rwarp * 32u : e->rtid - 1u;
                    race_report("write-after-read", "wrote", off + i, f, pc, other, e->rpc, true);
                    return;
                }
            }
            e->wepoch = g_epoch;
            e->wtid = me;
            e->wwe = we;
            e->wpc = (uint32_t)pc;
            e->atomic = atomic;
        }
    }
}

Buf* find_buf(uintptr_t a, bool* in_rz) {
    for (Buf& b : g_bufs) {
        if (a >= b.lo && a < b.hi) { *in_rz = false; return &b; }
    }
    for (Buf& b : g_bufs) {
        if ((a >= b.lo - GMEM_RZ && a < b.lo) || (a >= b.hi && a < b.hi + GMEM_RZ)) { *in_rz = true; return &b; }
    }
    return nullptr;
}

void global_access(uintptr_t a, size_t n, int kind, uintptr_t pc) {
    bool rz = false;
    Buf* b = find_buf(a, &rz);
    if (!b) return;
    Fiber* f = cur();
    if (rz || a + n > b->hi) {
        Report* r = add_report("gmem-oob", pc, 0, nullptr, 0);
        g_stop_after_block = true;
        if (r) {
            char me[48];
            tid_str((unsigned)f->linear, me, sizeof me);
            long long idx = ((long long)a - (long long)b->lo) / (b->elem > 0 ? b->elem : 1);
            long long count = (long long)(b->hi - b->lo) / (b->elem > 0 ? b->elem : 1);
            snprintf(r->msg, sizeof r->msg,
                     "out-of-bounds %s of global memory in kernel {k}: thread %s of block (%u,%u,%u) %s %zu bytes at index %lld "
                     "of `%s` (%lld elements of %d bytes) at {1}",
                     kind == 0 ? "read" : "write", me, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, kind == 0 ? "read" : "wrote",
                     n, idx, b->name.c_str(), count, b->elem);
        }
        return;
    }
    if (kind != 2) gmem_record(f, pc, b, a, n, kind != 0);
    if (kind == 0) {
        st_gmem_loads++;
        st_gmem_load_bytes += n;
        b->loads++;
        b->load_bytes += n;
        if (b->reads)
            for (size_t i = 0; i < n; i++) {
                uint8_t* c = &b->reads[a - b->lo + i];
                if (*c != 255) ++*c;
            }
        return;
    }
    if (kind == 2) {
        st_gmem_atomics++;
        b->atomics++;
    } else {
        st_gmem_stores++;
        st_gmem_store_bytes += n;
        b->stores++;
        b->store_bytes += n;
    }
    if (!b->shadow) return;
    for (uintptr_t w = (a - b->lo) / 4; w <= (a + n - 1 - b->lo) / 4; w++) {
        uintptr_t wlo = b->lo + w * 4;
        uint8_t mask = 0;
        for (int k = 0; k < 4; k++)
            if (wlo + (uintptr_t)k >= a && wlo + (uintptr_t)k < a + n) mask |= (uint8_t)(1u << k);
        GShadow* e = &b->shadow[w];
        const bool atomic = kind == 2;
        if (e->block1 && e->epoch >= g_launch_epoch0 && (e->mask & mask) && !(atomic && e->atomic)) {
            bool race = false;
            if (e->block1 != (uint32_t)(g_block_linear + 1)) race = true;
            else if (e->tid != (uint16_t)f->linear && e->epoch == g_epoch && !warp_ordered(e->tid, e->we, f)) race = true;
            if (race) {
                Report* r = add_report("global-race", pc, e->pc, nullptr, 0);
                g_stop_after_block = true;
                if (r) {
                    char me[48], them[48];
                    tid_str((unsigned)f->linear, me, sizeof me);
                    tid_str(e->tid, them, sizeof them);
                    unsigned long long ob = e->block1 - 1ull;
                    unsigned gx = g_gridDim.x, gy = g_gridDim.y;
                    long long idx = ((long long)wlo - (long long)b->lo) / (b->elem > 0 ? b->elem : 1);
                    snprintf(r->msg, sizeof r->msg,
                             "conflicting non-atomic writes to global memory `%s[%lld]` in kernel {k}: thread %s of block "
                             "(%u,%u,%u) wrote it at {1}, and thread %s of block (%llu,%llu,%llu) wrote it at {2} "
                             "%s; use atomicAdd/atomicMax/... or give each thread its own element",
                             b->name.c_str(), idx, me, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, them, ob % gx,
                             ob / gx % gy, ob / ((unsigned long long)gx * gy),
                             e->block1 == (uint32_t)(g_block_linear + 1) ? "in the same barrier interval"
                                                                         : "(blocks are not ordered within a launch)");
                }
                return;
            }
        }
        e->block1 = (uint32_t)(g_block_linear + 1);
        e->epoch = g_epoch;
        e->pc = (uint32_t)pc;
        e->we = g_wsync[f->warp];
        e->tid = (uint16_t)f->linear;
        e->mask = mask;
        e->atomic = atomic;
    }
}

inline void hook(const void* p, size_t n, int kind, const void* ret) {
    if (!g_hooks_on || !g_cur) return;
    uintptr_t a = (uintptr_t)p;
    uintptr_t pc = pc_off(ret);
    if (a - (uintptr_t)g_arena < ARENA) shared_access(a - (uintptr_t)g_arena, n, kind, pc);
    else if (a >= g_glo && a < g_ghi) global_access(a, n, kind, pc);
}
#endif  // HPCCOURSE_CHECKED

void write_stats(Out& o) {
    char t[1024];
    snprintf(t, sizeof t,
             "{\"blocks\":%llu,\"threads\":%llu,\"barriers\":%llu,\"warp_ops\":%llu,\"switches\":%llu,"
             "\"static_smem_bytes\":%zu,\"dynamic_smem_bytes\":%zu",
             st_blocks, st_threads, st_barriers, st_warp_ops, st_switches,
             [] { size_t s = 0; for (const SmemVar& v : g_vars) s += v.size; return s; }(), g_dyn_size);
    o.raw(t);
#ifdef HPCCOURSE_CHECKED
    snprintf(t, sizeof t,
             ",\"gmem_loads\":%llu,\"gmem_load_bytes\":%llu,\"gmem_stores\":%llu,\"gmem_store_bytes\":%llu,"
             "\"gmem_atomics\":%llu,\"smem_atomics\":%llu,\"gmem_load_requests\":%llu,\"gmem_load_sectors\":%llu,"
             "\"gmem_store_requests\":%llu,\"gmem_store_sectors\":%llu,\"gmem_by_arg\":{",
             st_gmem_loads, st_gmem_load_bytes, st_gmem_stores, st_gmem_store_bytes, st_gmem_atomics, st_smem_atomics,
             st_gld_req, st_gld_sec, st_gst_req, st_gst_sec);
    o.raw(t);
    bool first_buf = true;
    for (const Buf& b : g_bufs) {
        if (b.from_malloc && b.name.rfind("cudaMalloc'd", 0) == 0 && !b.loads && !b.stores && !b.atomics) continue;
        size_t nb = (size_t)(b.hi - b.lo);
        unsigned long long touched = 0;
        unsigned maxr = 0;
        if (b.reads)
            for (size_t i = 0; i < nb; i++) {
                if (b.reads[i]) touched++;
                if (b.reads[i] > maxr) maxr = b.reads[i];
            }
        if (!first_buf) o.raw(",");
        first_buf = false;
        o.str(b.name.c_str());
        snprintf(t, sizeof t,
                 ":{\"bytes\":%zu,\"elem\":%d,\"loads\":%llu,\"load_bytes\":%llu,\"bytes_read\":%llu,"
                 "\"max_reads_per_byte\":%u,\"stores\":%llu,\"store_bytes\":%llu,\"atomics\":%llu,"
                 "\"load_requests\":%llu,\"load_sectors\":%llu,\"store_requests\":%llu,\"store_sectors\":%llu}",
                 nb, b.elem, b.loads, b.load_bytes, touched, maxr, b.stores, b.store_bytes, b.atomics, b.load_requests,
                 b.load_sectors, b.store_requests, b.store_sectors);
        o.raw(t);
    }
    o.raw("}");
    if (g_banks) {
        snprintf(t, sizeof t,
                 ",\"smem_load_requests\":%llu,\"smem_store_requests\":%llu,\"smem_load_wavefronts\":%llu,"
                 "\"smem_store_wavefronts\":%llu,\"bank_conflicts_load\":%llu,\"bank_conflicts_store\":%llu,"
                 "\"bank_conflict_pcs\":[",
                 st_ld_req, st_st_req, st_ld_wave, st_st_wave, st_ld_conf, st_st_conf);
        o.raw(t);
        std::vector<std::pair<unsigned long long, uintptr_t>> v;
        for (auto& kv : g_conf_by_pc) v.push_back({kv.second, kv.first});
        std::sort(v.rbegin(), v.rend());
        for (size_t i = 0; i < v.size() && i < 16; i++) {
            snprintf(t, sizeof t, "%s[%llu,%llu]", i ? "," : "", (unsigned long long)v[i].second, v[i].first);
            o.raw(t);
        }
        o.raw("]");
    }
#endif
    o.raw("}");
}

// ------------------------------------------------------------------ fibers
void fiber_main(void* arg);

void switch_to_fiber(Fiber* f) {
    g_cur = f;
    st_switches++;
#ifdef HPCCOURSE_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, f->stack_size);
#endif
#ifdef HPC_ASM_SWITCH
    hpc_ctx_swap(&g_sched_sp, f->sp);
#else
    swapcontext(&g_sched_uc, &f->uc);
#endif
#ifdef HPCCOURSE_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    g_cur = nullptr;
}

void switch_to_scheduler(Fiber* f, bool dying) {
#ifdef HPCCOURSE_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f->fake_stack, g_main_stack_bottom, g_main_stack_size);
#else
    (void)dying;
#endif
#ifdef HPC_ASM_SWITCH
    hpc_ctx_swap(&f->sp, g_sched_sp);
#else
    swapcontext(&f->uc, &g_sched_uc);
#endif
#ifdef HPCCOURSE_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &g_main_stack_bottom, &g_main_stack_size);
#endif
}

void block_here(Fiber* f) {
    switch_to_scheduler(f, false);
}

void ensure_fibers(int n) {
    if (n <= g_fibers_cap) return;
    if (g_fibers) {
        // grow: drop the old ones (only between launches)
        munmap(g_stacks, g_stacks_len);
        delete[] g_fibers;
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t per = g_stack_size + (size_t)page;
    g_stacks_len = per * (size_t)n;
    g_stacks = (char*)mmap(nullptr, g_stacks_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_stacks == MAP_FAILED) {
        Report* r = add_report("oom", 0, 0, nullptr, 0);
        if (r) snprintf(r->msg, sizeof r->msg, "could not map %d fiber stacks of %zu bytes", n, g_stack_size);
        finish_with_error(3);
    }
    g_fibers = new Fiber[(size_t)n];
    for (int i = 0; i < n; i++) {
        char* base = g_stacks + per * (size_t)i;
        mprotect(base, (size_t)page, PROT_NONE);  // guard page below the stack
        g_fibers[i].stack = base + page;
        g_fibers[i].stack_size = g_stack_size;
#ifdef HPCCOURSE_CHECKED
        g_fibers[i].pc_count = new std::unordered_map<uintptr_t, unsigned>();
#endif
    }
    g_fibers_cap = n;
}

void init_fiber(Fiber* f, int linear) {
    f->linear = linear;
    f->lane = linear % 32;
    f->warp = linear / 32;
    f->tidx.x = (unsigned)linear % g_blockDim.x;
    f->tidx.y = (unsigned)linear / g_blockDim.x % g_blockDim.y;
    f->tidx.z = (unsigned)linear / (g_blockDim.x * g_blockDim.y);
    f->state = F_RUNNABLE;
    f->op = nullptr;
    f->wfile = nullptr;
    f->wline = 0;
    f->what = nullptr;
    f->lone_sw = ~0ull;
    f->lone_wops = 0;
#ifdef HPCCOURSE_ASAN
    f->fake_stack = nullptr;
#endif
#ifdef HPCCOURSE_CHECKED
    f->pc_count->clear();
#endif
#ifdef HPC_ASM_SWITCH
    uintptr_t top = ((uintptr_t)(f->stack + f->stack_size)) & ~(uintptr_t)15;
    uintptr_t* sp = (uintptr_t*)(top - 80);  // 16-byte aligned; 8 slots used
    unsigned csr[2] = {0x1F80u, 0x037Fu};      // default MXCSR, x87 control word
    memcpy(&sp[0], csr, 8);
    sp[1] = 0;                                 // r15
    sp[2] = 0;                                 // r14
    sp[3] = (uintptr_t)f;                      // r13: argument
    sp[4] = (uintptr_t)&fiber_main;            // r12: function
    sp[5] = 0;                                 // rbx
    sp[6] = 0;                                 // rbp
    sp[7] = (uintptr_t)&hpc_ctx_start;         // return address
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = nullptr;
    // makecontext passes ints; split the pointer
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)())(void (*)(unsigned, unsigned)) + [](unsigned lo, unsigned hi) {
        fiber_main((void*)(((uintptr_t)hi << 32) | lo));
    }, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
#endif
}

// Threads of a block waiting at different __syncthreads() calls: undefined in CUDA (the guide allows
// __syncthreads() in conditional code only when the condition is uniform across the block).
bool barrier_diverged() {
    const Fiber* first = nullptr;
    for (int i = 0; i < g_nthreads; i++) {
        const Fiber* g = &g_fibers[i];
        if (g->state != F_BARRIER) continue;
        if (!first) first = g;
        else if (g->wline != first->wline || g->wfile != first->wfile) return true;
    }
    return false;
}

void report_barrier_divergence() {
    Report* r = nullptr;
    std::string s;
    const Fiber* first = nullptr;
    for (int i = 0; i < g_nthreads; i++) {
        const Fiber* g = &g_fibers[i];
        if (g->state != F_BARRIER) continue;
        if (!first) {
            first = g;
            r = add_report("deadlock", 0, 0, g->wfile, g->wline);
        }
    }
    if (!r) return;
    // list each call site with its thread range
    std::vector<std::pair<const char*, int>> sites;
    for (int i = 0; i < g_nthreads; i++) {
        const Fiber* g = &g_fibers[i];
        if (g->state != F_BARRIER) continue;
        bool seen = false;
        for (auto& st : sites) seen |= st.first == g->wfile && st.second == g->wline;
        if (!seen) sites.push_back({g->wfile, g->wline});
    }
    for (auto& st : sites) {
        int lo = -1, hi = -1, count = 0;
        for (int i = 0; i < g_nthreads; i++) {
            const Fiber* g = &g_fibers[i];
            if (g->state == F_BARRIER && g->wfile == st.first && g->wline == st.second) {
                if (lo < 0) lo = i;
                hi = i;
                count++;
            }
        }
        const char* slash = st.first ? strrchr(st.first, '/') : nullptr;
        char t[256];
        snprintf(t, sizeof t, " %d threads (%d..%d) wait at the __syncthreads() of %s:%d;", count, lo, hi,
                 slash ? slash + 1 : (st.first ? st.first : "?"), st.second);
        if (s.size() < 700) s += t;
    }
    snprintf(r->msg, sizeof r->msg,
             "divergent __syncthreads() in kernel {k}, block (%u,%u,%u):%s a barrier inside a branch that not all "
             "threads of the block take is undefined behaviour (it hangs or mis-synchronises on a GPU)",
             g_blockIdx.x, g_blockIdx.y, g_blockIdx.z, s.c_str());
    r->has_thread = 0;
}

void release_barrier() {
    if (barrier_diverged()) {
        report_barrier_divergence();
        g_abort = true;
    }
    int count = 0, n = 0;
    for (int i = 0; i < g_nthreads; i++) {
        Fiber* g = &g_fibers[i];
        if (g->state == F_BARRIER) {
            g->state = F_RUNNABLE;
            n++;
        }
    }
    count = g_bar_pred;
    g_bar_last_count = count;
    g_bar_last_n = n;
    g_bar_count = 0;
    g_bar_pred = 0;
    st_barriers++;
#ifdef HPCCOURSE_CHECKED
    g_epoch++;
    if (g_banks) bank_finalize();
    gmem_finalize();
#endif
}

void fiber_main(void* arg) {
    Fiber* f = static_cast<Fiber*>(arg);
#ifdef HPCCOURSE_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_main_stack_bottom, &g_main_stack_size);
#endif
    g_entry(g_entry_ctx);
    f->state = F_DONE;
    g_live--;
    if (g_bar_count > 0 && g_bar_count == g_live) release_barrier();
    switch_to_scheduler(f, true);
    abort();  // never resumed
}

// ------------------------------------------------------------------ warp collectives
const char* op_name(const WarpOp* op) { return op->what ? op->what : "warp intrinsic"; }

bool ops_match(const WarpOp* a, const WarpOp* b) {
    return a->kind == b->kind && a->mask == b->mask && (a->kind != OP_CALLBACK || a->cb == b->cb);
}

unsigned long long lane_val(const WarpOp* op) {
    unsigned long long v = op->val;
    if (op->size > 0 && op->size < 8) v &= (1ull << (8 * op->size)) - 1ull;
    return v;
}

void compute_group(int warp, WarpOp* ops[32], unsigned mask) {
    const WarpOp* any = nullptr;
    for (int l = 0; l < 32; l++)
        if (ops[l]) { any = ops[l]; break; }
    const int kind = any->kind;
    st_warp_ops++;
    switch (kind) {
        case OP_SHFL:
        case OP_SHFL_UP:
        case OP_SHFL_DOWN:
        case OP_SHFL_XOR:
            for (int l = 0; l < 32; l++) {
                WarpOp* op = ops[l];
                if (!op) continue;
                int w = op->width;
                int base = l & ~(w - 1);
                int src;
                if (kind == OP_SHFL) src = base + (op->param & (w - 1));
                else if (kind == OP_SHFL_UP) src = (l - op->param < base) ? l : l - op->param;
                else if (kind == OP_SHFL_DOWN) src = (l + op->param >= base + w) ? l : l + op->param;
                else {
                    src = l ^ op->param;
                    if (src < 0 || src > 31 || (src & ~(w - 1)) != base) src = l;
                }
                op->result = (src >= 0 && src < 32 && ops[src]) ? ops[src]->val : op->val;
            }
            break;
        case OP_BALLOT:
        case OP_ANY:
        case OP_ALL: {
            unsigned bal = 0;
            for (int l = 0; l < 32; l++)
                if (ops[l] && ops[l]->param) bal |= 1u << l;
            unsigned long long r = kind == OP_BALLOT ? bal : kind == OP_ANY ? (bal != 0) : (bal == mask);
            for (int l = 0; l < 32; l++)
                if (ops[l]) ops[l]->result = r;
            break;
        }
        case OP_MATCH_ANY:
        case OP_MATCH_ALL: {
            bool all = true;
            for (int l = 0; l < 32; l++) {
                if (!ops[l]) continue;
                unsigned m = 0;
                for (int k = 0; k < 32; k++)
                    if (ops[k] && lane_val(ops[k]) == lane_val(ops[l])) m |= 1u << k;
                ops[l]->result = m;
                if (m != mask) all = false;
            }
            if (kind == OP_MATCH_ALL)
                for (int l = 0; l < 32; l++)
                    if (ops[l]) ops[l]->result = all ? mask : 0;
            break;
        }
        case OP_RED_ADD: case OP_RED_AND: case OP_RED_OR: case OP_RED_XOR:
        case OP_RED_MIN: case OP_RED_MAX: case OP_RED_UMIN: case OP_RED_UMAX: {
            bool first = true;
            unsigned acc = 0;
            for (int l = 0; l < 32; l++) {
                if (!ops[l]) continue;
                unsigned v = (unsigned)ops[l]->val;
                if (first) { acc = v; first = false; continue; }
                switch (kind) {
                    case OP_RED_ADD: acc += v; break;
                    case OP_RED_AND: acc &= v; break;
                    case OP_RED_OR: acc |= v; break;
                    case OP_RED_XOR: acc ^= v; break;
                    case OP_RED_MIN: acc = (unsigned)std::min((int)acc, (int)v); break;
                    case OP_RED_MAX: acc = (unsigned)std::max((int)acc, (int)v); break;
                    case OP_RED_UMIN: acc = std::min(acc, v); break;
                    case OP_RED_UMAX: acc = std::max(acc, v); break;
                }
            }
            for (int l = 0; l < 32; l++)
                if (ops[l]) ops[l]->result = acc;
            break;
        }
        case OP_SYNCWARP:
#ifdef HPCCOURSE_CHECKED
            g_wsync[warp]++;
#endif
            break;
        case OP_CALLBACK:
            any->cb(ops, 32);
            break;
    }
    (void)warp;
}

bool try_complete(int warp, const WarpOp* op) {
    WarpOp* ops[32] = {nullptr};
    const int base = warp * 32;
    for (int l = 0; l < 32; l++) {
        if (!(op->mask >> l & 1u)) continue;
        Fiber* g = &g_fibers[base + l];
        if (g->state != F_WARP || !ops_match(g->op, op)) return false;
        ops[l] = g->op;
    }
    compute_group(warp, ops, op->mask);
    for (int l = 0; l < 32; l++)
        if (ops[l]) g_fibers[base + l].state = F_RUNNABLE;
    return true;
}

// Hand the lanes of f's warp that wait at f's __activemask() call the mask of exactly those lanes.
void resolve_activemask_of(Fiber* f) {
    unsigned m = 0;
    const int base = f->warp * 32;
    for (int l = 0; l < 32 && base + l < g_nthreads; l++) {
        Fiber* g = &g_fibers[base + l];
        if (g->state == F_ACTIVEMASK && g->wline == f->wline && g->wfile == f->wfile) m |= 1u << l;
    }
    for (int l = 0; l < 32 && base + l < g_nthreads; l++) {
        if (!(m >> l & 1u)) continue;
        Fiber* g = &g_fibers[base + l];
        g->op->result = m;
        g->state = F_RUNNABLE;
    }
}

// Random order only: after a lane arrives at __activemask(), with probability 1/4 the lanes of its
// warp that are waiting there now get their mask at once, before the rest of the warp arrives. The
// CUDA Programming Guide promises only the lanes that are converged at the call, and since Volta
// the lanes of a warp need not be converged even without a divergent branch; code that uses
// __activemask() as if it named the whole warp then sees a partial mask (seeded, reproducible).
void maybe_split_activemask(Fiber* f) {
    if (g_order == 2 && f->state == F_ACTIVEMASK && (rng_next() >> 32) % 4 == 0) resolve_activemask_of(f);
}

bool resolve_activemask() {
    bool any = false;
    for (int i = 0; i < g_nthreads; i++) {
        if (g_fibers[i].state != F_ACTIVEMASK) continue;
        resolve_activemask_of(&g_fibers[i]);
        any = true;
    }
    return any;
}

[[noreturn]] void fatal_in_fiber() {
    g_abort = true;
    Fiber* f = cur();
    if (f) {
        switch_to_scheduler(f, true);
        abort();
    }
    finish_with_error(3);
}

// ------------------------------------------------------------------ deadlock report
void report_deadlock() {
    Report* r = add_report("deadlock", 0, 0, nullptr, 0);
    if (!r) return;
    r->has_thread = 0;
    std::string s = "deadlock in kernel {k}, block (" + std::to_string(g_blockIdx.x) + "," + std::to_string(g_blockIdx.y) +
                    "," + std::to_string(g_blockIdx.z) + "): no thread can make progress.";
    // group waiting threads by (state, place, intrinsic, mask)
    std::vector<bool> done((size_t)g_nthreads, false);
    const char* first_file = nullptr;
    int first_line = 0;
    for (int i = 0; i < g_nthreads; i++) {
        if (done[(size_t)i]) continue;
        Fiber* f = &g_fibers[i];
        if (f->state == F_DONE || f->state == F_RUNNABLE) { done[(size_t)i] = true; continue; }
        std::vector<int> ids;
        for (int j = i; j < g_nthreads; j++) {
            Fiber* g = &g_fibers[j];
            if (done[(size_t)j] || g->state != f->state || g->wline != f->wline || g->wfile != f->wfile) continue;
            if (f->state == F_WARP && !(g->op->mask == f->op->mask && g->op->kind == f->op->kind)) continue;
            ids.push_back(j);
            done[(size_t)j] = true;
        }
        std::string range;
        for (size_t k = 0; k < ids.size();) {
            size_t e = k;
            while (e + 1 < ids.size() && ids[e + 1] == ids[e] + 1) e++;
            if (!range.empty()) range += ",";
            range += std::to_string(ids[k]);
            if (e > k) range += "-" + std::to_string(ids[e]);
            k = e + 1;
        }
        char where[512];
        const char* fn = f->wfile ? f->wfile : "?";
        const char* slash = strrchr(fn, '/');
        if (!first_file) { first_file = f->wfile; first_line = f->wline; }
        if (f->state == F_BARRIER)
            snprintf(where, sizeof where, " Threads %s wait at __syncthreads() (%s:%d).", range.c_str(), slash ? slash + 1 : fn, f->wline);
        else if (f->state == F_WARP) {
            // which lanes of the mask are missing?
            std::string missing;
            const int base = f->warp * 32;
            for (int l = 0; l < 32; l++) {
                if (!(f->op->mask >> l & 1u)) continue;
                int t = base + l;
                Fiber* g = t < g_nthreads ? &g_fibers[t] : nullptr;
                const char* why = nullptr;
                if (!g) why = "does not exist";
                else if (g->state == F_DONE) why = "has exited";
                else if (g->state == F_BARRIER) why = "is parked at __syncthreads()";
                else if (g->state == F_WARP && !ops_match(g->op, f->op)) why = "waits at a different warp intrinsic or mask";
                else if (g->state == F_ACTIVEMASK) why = "waits at __activemask()";
                if (why) {
                    if (!missing.empty()) missing += "; ";
                    missing += "lane " + std::to_string(l) + " " + why;
                }
            }
            if (missing.size() > 400) missing = missing.substr(0, 400) + "...";
            snprintf(where, sizeof where, " Threads %s wait at %s(mask=0x%08x) (%s:%d)%s%s.", range.c_str(), op_name(f->op),
                     f->op->mask, slash ? slash + 1 : fn, f->wline, missing.empty() ? "" : " but ", missing.c_str());
        } else
            snprintf(where, sizeof where, " Threads %s wait at %s (%s:%d).", range.c_str(), f->what ? f->what : "?", slash ? slash + 1 : fn, f->wline);
        if (s.size() < 900) s += where;
    }
    if (g_live < g_nthreads) s += " (" + std::to_string(g_nthreads - g_live) + " threads of the block have exited.)";
    snprintf(r->msg, sizeof r->msg, "%s", s.c_str());
    r->file = first_file;
    r->line = first_line;
}

// ------------------------------------------------------------------ block & grid
std::vector<int> g_perm;

void shuffle(std::vector<int>& v) {
    for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[(size_t)(rng_next() % i)]);
}

void run_block() {
    const int n = g_nthreads;
    for (int i = 0; i < n; i++) init_fiber(&g_fibers[i], i);
    g_live = n;
    g_bar_count = 0;
    g_bar_pred = 0;
#ifdef HPCCOURSE_CHECKED
    g_epoch++;
    g_block_epoch0 = g_epoch;
#endif
    g_perm.resize((size_t)n);
    for (int i = 0; i < n; i++) g_perm[(size_t)i] = g_order == 1 ? n - 1 - i : i;
    st_blocks++;
    st_threads += (unsigned long long)n;
    while (g_live > 0) {
        if (g_order == 2) shuffle(g_perm);
        bool progressed = false;
        for (int k = 0; k < n; k++) {
            Fiber* f = &g_fibers[g_perm[(size_t)k]];
            if (f->state != F_RUNNABLE) continue;
            progressed = true;
            switch_to_fiber(f);
            if (g_abort) return;
            maybe_split_activemask(f);
        }
        if (g_live == 0) break;
        if (!progressed) {
            if (resolve_activemask()) continue;
            report_deadlock();
            g_abort = true;
            return;
        }
    }
#ifdef HPCCOURSE_CHECKED
    if (g_banks) bank_finalize();
    gmem_finalize();
#endif
}

}  // namespace

// ------------------------------------------------------------------ API used by the header
namespace hpc {

void syncthreads(const char* file, int line) {
    Fiber* f = cur();
    if (!f) return;
    f->state = F_BARRIER;
    f->wfile = file;
    f->wline = line;
    f->what = "__syncthreads()";
    g_bar_count++;
    if (g_bar_count == g_live) release_barrier();
    if (g_abort) fatal_in_fiber();
    block_here(f);
}

int syncthreads_op(int op, int pred, const char* file, int line) {
    Fiber* f = cur();
    if (!f) return pred;
    if (pred) g_bar_pred++;
    syncthreads(file, line);
    if (op == 0) return g_bar_last_count;
    if (op == 1) return g_bar_last_count == g_bar_last_n;
    return g_bar_last_count > 0;
}

void yield_now() {
    Fiber* f = cur();
    if (f) block_here(f);
}

// Random order only (g_atomic_yield): just before an atomic on global memory, the thread gives way
// with probability 1/2 (seeded); the scheduler runs the rest of this round's shuffled threads first,
// as a GPU may run other threads between one thread's load and its atomic. A check-then-act
// (`if (t[s] == EMPTY) atomicCAS(&t[s], EMPTY, k);` that ignores the returned value) then lets two
// threads both see EMPTY and both take the slot. The thread stays runnable, so warp rendezvous,
// barriers and __activemask() are as after any other switch. Shared-memory atomics (privatized
// histograms: the hot loop) do not yield. A thread that found no other runnable thread at its last
// yield (the scheduler came straight back to it) skips the yield until it has been switched out or a
// warp intrinsic has completed (the only ways others become runnable meanwhile): one thread looping
// over atomics while the rest wait at a barrier would otherwise pay a whole scheduler round per atomic.
void atomic_yield(const void* address) {
    Fiber* f = cur();
    if (!f || (uintptr_t)address - (uintptr_t)g_arena < ARENA) return;
    if (f->lone_sw == st_switches && f->lone_wops == st_warp_ops) return;
    if (!((rng_next() >> 33) & 1u)) return;
    const unsigned long long before = st_switches;
    block_here(f);
    if (st_switches == before + 1) {  // nobody else ran
        f->lone_sw = st_switches;
        f->lone_wops = st_warp_ops;
    }
}

long long clock64() { return ++g_clock * 4; }

void fatal(const char* kind, const char* file, int line, const char* fmt, ...) {
    Report* r = add_report(kind, 0, 0, file, line);
    if (r) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->msg, sizeof r->msg, fmt, ap);
        va_end(ap);
    }
    fatal_in_fiber();
}

unsigned long long warp_collective(WarpOp* op) {
    Fiber* f = cur();
    if (!f) {  // host code: a warp of one
        if (op->kind == OP_BALLOT) return op->param ? 1 : 0;
        if (op->kind == OP_ANY || op->kind == OP_ALL) return op->param != 0;
        if (op->kind == OP_ACTIVEMASK) return 1;
        return op->val;
    }
    op->lane = f->lane;
    f->op = op;
    f->wfile = op->file;
    f->wline = op->line;
    f->what = op->what;
    if (op->kind == OP_ACTIVEMASK) {
        f->state = F_ACTIVEMASK;
        block_here(f);
        return op->result;
    }
    if (op->kind >= OP_SHFL && op->kind <= OP_SHFL_XOR) {
        int w = op->width;
        if (w < 1 || w > 32 || (w & (w - 1))) {
            Report* r = add_report("warp", 0, 0, op->file, op->line);
            if (r) snprintf(r->msg, sizeof r->msg, "%s: width %d is not a power of two in [1, 32] (kernel {k})", op_name(op), w);
            fatal_in_fiber();
        }
    }
    if (!(op->mask >> f->lane & 1u)) {
        Report* r = add_report("warp", 0, 0, op->file, op->line);
        if (r) {
            char t[48];
            snprintf(t, sizeof t, "(%u,%u,%u)", f->tidx.x, f->tidx.y, f->tidx.z);
            snprintf(r->msg, sizeof r->msg,
                     "%s(mask=0x%08x) called by thread %s (lane %d) whose own lane is not in the mask (undefined behaviour "
                     "in CUDA) in kernel {k}",
                     op_name(op), op->mask, t, f->lane);
        }
        fatal_in_fiber();
    }
    f->state = F_WARP;
    if (try_complete(f->warp, op)) return op->result;
    block_here(f);
    return op->result;
}

void* smem_static(size_t size, size_t align, size_t elem, const char* name, const char* file, int line, unsigned e0,
                  unsigned e1, unsigned e2) {
    if (align < SMEM_ALIGN) align = SMEM_ALIGN;
    size_t off = (g_static_used + align - 1) / align * align;
    if (off + size + SMEM_RZ > STATIC_CAP) {
        Report* r = add_report("launch", 0, 0, file, line);
        if (r)
            snprintf(r->msg, sizeof r->msg,
                     "static shared memory exhausted: `__shared__ %s` (%zu bytes) does not fit in the emulator's %zu-byte "
                     "static shared-memory window (a GPU allows 48 KiB of static shared memory per block)",
                     name, size, STATIC_CAP);
        fatal_in_fiber();
    }
    g_static_used = off + size + SMEM_RZ;
    SmemVar v = {off, size, elem, name, file, line, {e0, e1, e2}};
    g_vars.push_back(v);
#ifdef HPCCOURSE_CHECKED
    for (size_t i = 0; i < size; i++) g_region[off + i] = (uint16_t)g_vars.size();
#endif
#ifdef HPCCOURSE_ASAN
    ASAN_UNPOISON_MEMORY_REGION(g_arena + off, size);
#endif
    memset(g_arena + off, 0xff, size);
    return g_arena + off;
}

void* smem_dynamic(size_t elem, const char* name, const char* file, int line) {
    if (!g_dyn_var.name) {
        g_dyn_var.name = name;
        g_dyn_var.file = file;
        g_dyn_var.line = line;
        g_dyn_var.elem = elem;
    }
    return g_arena + DYN_OFF;
}

#ifdef HPCCOURSE_CHECKED
void note_access(const void* p, size_t n, int kind, const void* pc) { hook(p, n, kind, pc); }
#endif

void* device_malloc(size_t n, int kind) {
    (void)kind;
    Buf b;
    size_t total = n + 2 * GMEM_RZ;
    // 256-byte aligned, as cudaMalloc's buffers are (GMEM_RZ is 0 or 256): vector and WMMA accesses that are
    // aligned on a GPU are aligned here
    void* base = nullptr;
    if (posix_memalign(&base, 256, total ? total : 1)) return nullptr;
    b.base = (char*)base;
    b.lo = (uintptr_t)b.base + GMEM_RZ;
    b.hi = b.lo + n;
    b.name = "cudaMalloc'd buffer #" + std::to_string(g_bufs.size());
    b.elem = 1;
    b.from_malloc = true;
#ifdef HPCCOURSE_CHECKED
    size_t words = (n + 3) / 4;
    b.shadow = words ? (GShadow*)mmap(nullptr, words * sizeof(GShadow), PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                     : nullptr;
    if (b.shadow == MAP_FAILED) b.shadow = nullptr;
    b.reads = n ? (uint8_t*)mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : nullptr;
    if (b.reads == MAP_FAILED) b.reads = nullptr;
    b.loads = b.load_bytes = b.stores = b.store_bytes = b.atomics = 0;
    b.load_requests = b.load_sectors = b.store_requests = b.store_sectors = 0;
    g_glo = std::min(g_glo, b.lo - GMEM_RZ);
    g_ghi = std::max(g_ghi, b.hi + GMEM_RZ);
#endif
    g_bufs.push_back(b);
    return (void*)b.lo;
}

void device_free(void* p) {
    for (size_t i = 0; i < g_bufs.size(); i++) {
        if (g_bufs[i].lo == (uintptr_t)p) {
#ifdef HPCCOURSE_CHECKED
            if (g_bufs[i].shadow) munmap(g_bufs[i].shadow, (g_bufs[i].hi - g_bufs[i].lo + 3) / 4 * sizeof(GShadow));
            if (g_bufs[i].reads) munmap(g_bufs[i].reads, g_bufs[i].hi - g_bufs[i].lo);
#endif
            free(g_bufs[i].base);
            g_bufs.erase(g_bufs.begin() + (long)i);
            return;
        }
    }
}

bool run_grid(const LaunchCfg& cfg, EntryFn fn, void* ctx, const void* kernel) {
    const dim3 b = cfg.block, g = cfg.grid;
    unsigned long long nthreads = (unsigned long long)b.x * b.y * b.z;
    const char* bad = nullptr;
    if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0) bad = "a grid or block dimension is 0";
    else if (nthreads > 1024) bad = "more than 1024 threads per block";
    else if (b.x > 1024 || b.y > 1024 || b.z > 64) bad = "block dimensions exceed (1024, 1024, 64)";
    else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) bad = "grid dimensions exceed (2^31-1, 65535, 65535)";
    else if (cfg.smem > 232448) bad = "more than 227 KiB of dynamic shared memory";
    g_kernel_fn = kernel;
    if (bad) {
        g_last_error = cudaErrorInvalidConfiguration;
        if (!g_main_mode) {
            Report* r = add_report("launch", 0, 0, nullptr, 0);
            if (r)
                snprintf(r->msg, sizeof r->msg,
                         "invalid launch of kernel {k}: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory: %s",
                         g.x, g.y, g.z, b.x, b.y, b.z, cfg.smem, bad);
            finish_with_error(3);
        }
        return false;
    }
    g_blockDim = b;
    g_gridDim = g;
    g_nthreads = (int)nthreads;
    g_entry = fn;
    g_entry_ctx = ctx;
    ensure_fibers(g_nthreads);
    // dynamic shared memory window
    g_dyn_size = cfg.smem;
#ifdef HPCCOURSE_CHECKED
    for (size_t i = 0; i < DYN_CAP; i++) g_region[DYN_OFF + i] = i < g_dyn_size ? 0xffff : 0;
    g_epoch++;
    g_launch_epoch0 = g_epoch;
    g_hooks_on = true;
#endif
#ifdef HPCCOURSE_ASAN
    ASAN_POISON_MEMORY_REGION(g_arena + DYN_OFF, DYN_CAP);
    if (g_dyn_size) ASAN_UNPOISON_MEMORY_REGION(g_arena + DYN_OFF, g_dyn_size);
#endif
    const unsigned long long nblocks = (unsigned long long)g.x * g.y * g.z;
    std::vector<unsigned long long> order;
    if (g_order != 0) {
        order.resize((size_t)nblocks);
        for (unsigned long long i = 0; i < nblocks; i++) order[(size_t)i] = g_order == 1 ? nblocks - 1 - i : i;
        if (g_order == 2)
            for (size_t i = order.size(); i > 1; i--) std::swap(order[i - 1], order[(size_t)(rng_next() % i)]);
    }
    g_in_launch = true;
    for (unsigned long long i = 0; i < nblocks; i++) {
        unsigned long long bl = g_order == 0 ? i : order[(size_t)i];
        g_block_linear = bl;
        g_blockIdx.x = (unsigned)(bl % g.x);
        g_blockIdx.y = (unsigned)(bl / g.x % g.y);
        g_blockIdx.z = (unsigned)(bl / ((unsigned long long)g.x * g.y));
        poison_smem();
        run_block();
        if (g_abort || g_stop_after_block) break;
    }
    g_in_launch = false;
#ifdef HPCCOURSE_CHECKED
    g_hooks_on = false;
#endif
    if (g_abort || g_nreports) {
        g_last_error = cudaErrorLaunchFailure;
        finish_with_error(3);
    }
    return true;
}

}  // namespace hpc

// ------------------------------------------------------------------ checked build: -fsanitize=thread hooks
#ifdef HPCCOURSE_CHECKED
extern "C" {
#define HPC_TSAN_RW(N)                                                                                     \
    void __tsan_read##N(void* p) { hook(p, N, 0, __builtin_return_address(0)); }                          \
    void __tsan_write##N(void* p) { hook(p, N, 1, __builtin_return_address(0)); }                         \
    void __tsan_unaligned_read##N(void* p) { hook(p, N, 0, __builtin_return_address(0)); }                \
    void __tsan_unaligned_write##N(void* p) { hook(p, N, 1, __builtin_return_address(0)); }               \
    void __tsan_volatile_read##N(void* p) { hook(p, N, 0, __builtin_return_address(0)); }                 \
    void __tsan_volatile_write##N(void* p) { hook(p, N, 1, __builtin_return_address(0)); }                \
    void __tsan_unaligned_volatile_read##N(void* p) { hook(p, N, 0, __builtin_return_address(0)); }       \
    void __tsan_unaligned_volatile_write##N(void* p) { hook(p, N, 1, __builtin_return_address(0)); }
HPC_TSAN_RW(1)
HPC_TSAN_RW(2)
HPC_TSAN_RW(4)
HPC_TSAN_RW(8)
HPC_TSAN_RW(16)
void __tsan_read_range(void* p, unsigned long n) { hook(p, n, 0, __builtin_return_address(0)); }
void __tsan_write_range(void* p, unsigned long n) { hook(p, n, 1, __builtin_return_address(0)); }
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_atomic_thread_fence(int) {}
void __tsan_atomic_signal_fence(int) {}
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
    hook(s, n, 0, __builtin_return_address(0));
    hook(d, n, 1, __builtin_return_address(0));
    return memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
    hook(s, n, 0, __builtin_return_address(0));
    hook(d, n, 1, __builtin_return_address(0));
    return memmove(d, s, n);
}
void* __tsan_memset(void* d, int c, unsigned long n) {
    hook(d, n, 1, __builtin_return_address(0));
    return memset(d, c, n);
}
// atomics (std::atomic / __atomic builtins in a kernel): one OS thread, so plain operations
#define HPC_TSAN_ATOMIC(N, T)                                                                               \
    T __tsan_atomic##N##_load(const volatile T* a, int) { hook((const void*)a, sizeof(T), 0, __builtin_return_address(0)); return *a; } \
    void __tsan_atomic##N##_store(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); *a = v; } \
    T __tsan_atomic##N##_exchange(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = v; return o; } \
    T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = o + v; return o; } \
    T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = o - v; return o; } \
    T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = o & v; return o; } \
    T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = o | v; return o; } \
    T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = o ^ v; return o; } \
    T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { hook((void*)a, sizeof(T), 2, __builtin_return_address(0)); T o = *a; *a = ~(o & v); return o; } \
    int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                 \
        hook((void*)a, sizeof(T), 2, __builtin_return_address(0));                                       \
        if (*a == *c) { *a = v; return 1; }                                                              \
        *c = *a; return 0; }                                                                             \
    int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                   \
        hook((void*)a, sizeof(T), 2, __builtin_return_address(0));                                       \
        if (*a == *c) { *a = v; return 1; }                                                              \
        *c = *a; return 0; }                                                                             \
    T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                       \
        hook((void*)a, sizeof(T), 2, __builtin_return_address(0));                                       \
        T o = *a; if (o == c) *a = v; return o; }
HPC_TSAN_ATOMIC(8, unsigned char)
HPC_TSAN_ATOMIC(16, unsigned short)
HPC_TSAN_ATOMIC(32, unsigned int)
HPC_TSAN_ATOMIC(64, unsigned long long)
}
#endif

// ------------------------------------------------------------------ misaligned accesses
// The kernel translation unit of every build is compiled with -fsanitize=alignment
// -fno-sanitize-recover=alignment (cpu.py): before a load or store through a T* whose address is not a
// multiple of alignof(T) (a float4 at an address that is not 16-byte aligned, a float2 at a non-8 one)
// the compiler calls __ubsan_handle_type_mismatch_v1_abort below (no UBSan runtime is linked). A GPU
// stops the kernel on the same access with "misaligned address" (cudaErrorMisalignedAddress).
namespace {
struct UbsanLoc { const char* file; unsigned line, column; };
struct UbsanType { unsigned short kind, info; char name[1]; };
struct UbsanMismatch { UbsanLoc loc; const UbsanType* type; unsigned char log_alignment, check_kind; };

// "element 3 (byte 12) of `x` (4-byte elements)" / "byte 8 of `__shared__ As`", for an address
void describe_address(uintptr_t a, char* out, size_t cap) {
    snprintf(out, cap, "address %p", (void*)a);
    if (a - (uintptr_t)g_arena < ARENA) {
        size_t off = a - (uintptr_t)g_arena;
        const SmemVar* best = nullptr;
        if (off >= DYN_OFF) best = &g_dyn_var;
        else
            for (const SmemVar& v : g_vars)
                if (v.off <= off && off < v.off + v.size) best = &v;
        if (best == &g_dyn_var)
            snprintf(out, cap, "byte %zu of the dynamic shared memory `%s`", off - DYN_OFF,
                     best->name ? best->name : "extern __shared__");
        else if (best)
            snprintf(out, cap, "byte %zu of `__shared__ %s` (declared at %s:%d)", off - best->off, best->name,
                     best->file ? best->file : "?", best->line);
        else
            snprintf(out, cap, "shared-memory offset %zu", off);
        return;
    }
    for (const Buf& b : g_bufs) {
        if (a >= b.lo && a < b.hi) {
            int e = b.elem > 0 ? b.elem : 1;
            size_t off = (size_t)(a - b.lo);
            if (off % (size_t)e)
                snprintf(out, cap, "byte %zu of `%s` (inside element %zu; %d-byte elements)", off, b.name.c_str(),
                         off / (size_t)e, e);
            else
                snprintf(out, cap, "byte %zu of `%s` (element %zu; %d-byte elements)", off, b.name.c_str(), off / (size_t)e, e);
            return;
        }
    }
}

[[noreturn]] void misaligned_fatal(const char* access, const char* type, uintptr_t a, size_t align, const char* file,
                                   int line, uintptr_t pc) {
    Report* r = add_report("misaligned", pc, 0, file, line);
    if (r) {
        char where[400], who[160] = "in host code";
        describe_address(a, where, sizeof where);
        if (Fiber* f = cur())
            snprintf(who, sizeof who, "by thread (%u,%u,%u) of block (%u,%u,%u) in kernel {k}", f->tidx.x, f->tidx.y,
                     f->tidx.z, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
        snprintf(r->msg, sizeof r->msg,
                 "misaligned address: %s `%s` (needs %zu-byte alignment) at %s, %zu bytes past a %zu-byte boundary, "
                 "%s at {1}. A GPU stops the kernel here with \"misaligned address\" (cudaErrorMisalignedAddress): a "
                 "vector access (float2, float4, int4, half2, ...) needs an address that is a multiple of its size "
                 "(argument buffers start 256-byte aligned, as cudaMalloc's do)",
                 access, type, align, where, (size_t)(a % align), align, who);
    }
    fatal_in_fiber();
}

[[noreturn]] void ubsan_mismatch(void* data, void* ptr, const void* ra) {
    const UbsanMismatch* d = static_cast<const UbsanMismatch*>(data);
    uintptr_t a = (uintptr_t)ptr;
    size_t align = (size_t)1 << d->log_alignment;
    // the type's name as the compiler spells it: 'const struct float4' -> const float4
    char type[96];
    size_t n = 0;
    for (const char* s = d->type ? d->type->name : "?"; *s && n + 1 < sizeof type; s++) {
        if (*s == '\'') continue;
        if (!strncmp(s, "struct ", 7)) { s += 6; continue; }
        type[n++] = *s;
    }
    type[n] = 0;
    const char* access = d->check_kind == 0 ? "load of" : d->check_kind == 1 ? "store to" : "access to";
    misaligned_fatal(access, type, a, align ? align : 1, d->loc.file, (int)d->loc.line, pc_off(ra));
}
}  // namespace

extern "C" {
__attribute__((noinline)) void __ubsan_handle_type_mismatch_v1_abort(void* data, void* ptr) {
    ubsan_mismatch(data, ptr, __builtin_return_address(0));
}
__attribute__((noinline)) void __ubsan_handle_type_mismatch_v1(void* data, void* ptr) {
    ubsan_mismatch(data, ptr, __builtin_return_address(0));
}
}

namespace hpc {
__attribute__((noinline)) void wmma_misaligned(const char* fn, const void* p, unsigned ldm, size_t elem, const char* file,
                                               int line) {
    uintptr_t a = (uintptr_t)p;
    Report* r = add_report("misaligned", pc_off(__builtin_return_address(0)), 0, file, line);
    if (r && a % 32) {
        char where[400];
        describe_address(a, where, sizeof where);
        snprintf(r->msg, sizeof r->msg,
                 "misaligned address: wmma::%s with a pointer to %s, %zu bytes past a 32-byte boundary, in kernel {k} "
                 "at {1}. The pointer must be 256-bit (32-byte) aligned (CUDA C++ Programming Guide, \"Warp Matrix "
                 "Functions\"); a GPU stops the kernel with \"misaligned address\"",
                 fn, where, (size_t)(a % 32));
    } else if (r) {
        snprintf(r->msg, sizeof r->msg,
                 "wmma::%s with ldm = %u elements of %zu bytes = %zu bytes in kernel {k} at {1}: ldm must be a multiple "
                 "of 16 bytes (of 8 __half or 4 float elements; CUDA C++ Programming Guide, \"Warp Matrix Functions\"), "
                 "or the rows after the first start at misaligned addresses",
                 fn, ldm, elem, (size_t)ldm * elem);
    }
    fatal_in_fiber();
}
}  // namespace hpc

// ------------------------------------------------------------------ generic runtime API
namespace {
struct Event { struct timespec t; };
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "hpccourse CPU emulator (sm_80-like)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->sharedMemPerBlockOptin = 232448;
    p->totalConstMem = 64 * 1024;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->clockRate = 1000000;
    p->multiProcessorCount = 1;
    p->major = 8;
    p->minor = 0;
    p->l2CacheSize = 4 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->memoryBusWidth = 256;
    p->memoryClockRate = 1000000;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->managedMemory = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    switch (a) {
        case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMultiProcessorCount: *v = 1; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; break;
        case cudaDevAttrComputeCapabilityMajor: *v = 8; break;
        case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = 232448; break;
        default: *v = 0; return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        default: return "cudaErrorUnknown";
    }
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        default: return "unknown error";
    }
}
cudaError_t cudaGetLastError() {
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return g_last_error; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = reinterpret_cast<cudaEvent_t>(new Event());
    clock_gettime(CLOCK_MONOTONIC, &reinterpret_cast<Event*>(*e)->t);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    clock_gettime(CLOCK_MONOTONIC, &reinterpret_cast<Event*>(e)->t);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    const struct timespec& x = reinterpret_cast<Event*>(a)->t;
    const struct timespec& y = reinterpret_cast<Event*>(b)->t;
    *ms = (float)((double)(y.tv_sec - x.tv_sec) * 1e3 + (double)(y.tv_nsec - x.tv_nsec) / 1e6);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete reinterpret_cast<Event*>(e);
    return cudaSuccess;
}

// ------------------------------------------------------------------ signals
namespace {
char g_altstack[64 * 1024];

void on_signal(int sig, siginfo_t* si, void* ucv) {
    uintptr_t pc = 0;
#if defined(__x86_64__) && defined(__linux__)
    pc = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__) && defined(__linux__)
    pc = (uintptr_t)((ucontext_t*)ucv)->uc_mcontext.pc;
#else
    (void)ucv;
#endif
    const char* kind = sig == SIGALRM ? "timeout" : sig == SIGSEGV ? "segv" : sig == SIGBUS ? "segv" : sig == SIGFPE ? "fpe"
                                                                                            : sig == SIGILL ? "trap" : "abort";
    Report* r = &g_reports[g_nreports < 8 ? g_nreports++ : 7];
    memset(r, 0, sizeof *r);
    snprintf(r->kind, sizeof r->kind, "%s", kind);
    r->pc1 = pc >= (uintptr_t)&__executable_start ? pc - (uintptr_t)&__executable_start : 0;
    r->block = g_blockIdx;
    Fiber* f = cur();
    if (f) {
        r->thread = f->tidx;
        r->has_thread = 1;
    }
    char where[160] = "in host code";
    if (f)
        snprintf(where, sizeof where, "in kernel {k}, thread (%u,%u,%u) of block (%u,%u,%u)", f->tidx.x, f->tidx.y, f->tidx.z,
                 g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
    if (sig == SIGALRM) {
        snprintf(r->msg, sizeof r->msg, "time limit exceeded %s, last seen running at {1} (an infinite loop, or a spin-wait "
                 "on another thread or block that the emulator never schedules?)", where);
    } else if (sig == SIGSEGV || sig == SIGBUS) {
        uintptr_t a = (uintptr_t)si->si_addr;
        bool guard = false;
        if (g_stacks && a >= (uintptr_t)g_stacks && a < (uintptr_t)g_stacks + g_stacks_len) {
            size_t per = g_stack_size + (size_t)sysconf(_SC_PAGESIZE);
            guard = (a - (uintptr_t)g_stacks) % per < (size_t)sysconf(_SC_PAGESIZE);
        }
        if (guard)
            snprintf(r->msg, sizeof r->msg, "stack overflow %s at {1}: a thread's local variables exceed the emulator's "
                     "%zu-byte stack (set HPCCOURSE_CUDA_STACK_KB)", where, g_stack_size);
        else
            snprintf(r->msg, sizeof r->msg, "illegal memory access (address %p) %s at {1}", si->si_addr, where);
    } else if (sig == SIGFPE) {
        snprintf(r->msg, sizeof r->msg, "arithmetic exception (integer division by zero?) %s at {1}", where);
    } else if (sig == SIGILL) {
        snprintf(r->msg, sizeof r->msg, "illegal instruction / trap %s at {1}", where);
    } else {
        snprintf(r->msg, sizeof r->msg, "aborted (failed assert()?) %s", where);
    }
    finish_with_error(sig == SIGALRM ? 5 : 4);
}

void install_signals(int timeout_s) {
    stack_t ss;
    ss.ss_sp = g_altstack;
    ss.ss_size = sizeof g_altstack;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) sigaction(s, &sa, nullptr);
    if (timeout_s > 0) alarm((unsigned)timeout_s);
}

#ifdef HPCCOURSE_ASAN
void asan_death() {
    Report* r = &g_reports[g_nreports < 8 ? g_nreports++ : 7];
    memset(r, 0, sizeof *r);
    snprintf(r->kind, sizeof r->kind, "asan");
    r->block = g_blockIdx;
    Fiber* f = cur();
    if (f) {
        r->thread = f->tidx;
        r->has_thread = 1;
    }
    uintptr_t a = (uintptr_t)__asan_get_report_address();
    void* pc = __asan_get_report_pc();
    r->pc1 = pc ? pc_off(pc) : 0;   // a return address (of the __asan_report_* call): Python subtracts 1
    const char* desc = __asan_get_report_description();
    int write = __asan_get_report_access_type();
    size_t n = __asan_get_report_access_size();
    char who[160] = "in host code";
    if (f)
        snprintf(who, sizeof who, "by thread (%u,%u,%u) of block (%u,%u,%u) in kernel {k}", f->tidx.x, f->tidx.y, f->tidx.z,
                 g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
    char what[600] = "";
    if (a - (uintptr_t)g_arena < ARENA) {
        size_t off = a - (uintptr_t)g_arena;
        const SmemVar* best = nullptr;
        if (off >= DYN_OFF) best = &g_dyn_var;
        else
            for (const SmemVar& v : g_vars)
                if (v.off <= off && (!best || v.off > best->off)) best = &v;
        if (best == &g_dyn_var)
            snprintf(what, sizeof what, " at byte %zu of the dynamic shared memory `%s` (%zu bytes given at launch): a "
                     "shared-memory overrun", off - DYN_OFF, best->name ? best->name : "extern __shared__", g_dyn_size);
        else if (best)
            snprintf(what, sizeof what, " %zu bytes past the end of `__shared__ %s` (%zu bytes, declared at %s:%d): a "
                     "shared-memory overrun", off - (best->off + best->size), best->name, best->size,
                     best->file ? best->file : "?", best->line);
        else
            snprintf(what, sizeof what, " outside every shared-memory variable");
    } else {
        for (const Buf& b : g_bufs) {
            if (a + 4096 >= b.lo && a < b.hi + 4096) {
                long long idx = ((long long)a - (long long)b.lo) / (b.elem > 0 ? b.elem : 1);
                snprintf(what, sizeof what, " at index %lld of `%s` (%lld elements of %d bytes)", idx, b.name.c_str(),
                         (long long)(b.hi - b.lo) / (b.elem > 0 ? b.elem : 1), b.elem);
                break;
            }
        }
    }
    snprintf(r->msg, sizeof r->msg, "AddressSanitizer: %s: out-of-bounds %s of %zu bytes %s at {1}%s", desc ? desc : "error",
             write ? "write" : "read", n, who, what);
    fflush(stdout);
    write_result(false);
}
#endif

// ------------------------------------------------------------------ runner
const KernelEntry* find_kernel(const char* name) {
    int n = 0;
    const KernelEntry* t = hpc_kernel_table(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return nullptr;
}

int describe() {
    int n = 0;
    const KernelEntry* t = hpc_kernel_table(&n);
    printf("{\"main\":%s,\"kernels\":[", hpc_has_user_main ? "true" : "false");
    for (int i = 0; i < n; i++) {
        printf("%s{\"name\":\"%s\",\"params\":[", i ? "," : "", t[i].name);
        for (int j = 0; j < t[i].nparams; j++) {
            const ParamDesc& d = t[i].params[j];
            printf("%s{\"ptr\":%d,\"const\":%d,\"size\":%d,\"elem_size\":%d,\"kind\":\"%c\",\"elem_kind\":\"%c\"}", j ? "," : "",
                   d.is_ptr, d.is_const, d.size, d.elem_size, d.kind, d.elem_kind);
        }
        printf("]}");
    }
    printf("]}\n");
    return 0;
}

struct Arg {
    bool ptr;
    bool is_const;
    size_t off, n;
    int elem;
    std::string name;
    std::vector<unsigned char> bytes;
    void* dev;
};

int launch(const char* dir) {
    std::string d = dir;
    FILE* f = fopen((d + "/launch.txt").c_str(), "r");
    if (!f) { fprintf(stderr, "hpccourse runner: cannot read %s/launch.txt\n", dir); return 2; }
    char key[64], name[1024];
    LaunchCfg cfg;
    cfg.smem = 0;
    std::string kernel;
    std::vector<Arg> args;
    while (fscanf(f, "%63s", key) == 1) {
        std::string k = key;
        if (k == "kernel") {
            if (fscanf(f, " %1023[^\n]", name) != 1) return 2;
            kernel = name;
        } else if (k == "grid") {
            if (fscanf(f, "%u %u %u", &cfg.grid.x, &cfg.grid.y, &cfg.grid.z) != 3) return 2;
        } else if (k == "block") {
            if (fscanf(f, "%u %u %u", &cfg.block.x, &cfg.block.y, &cfg.block.z) != 3) return 2;
        } else if (k == "smem") {
            if (fscanf(f, "%zu", &cfg.smem) != 1) return 2;
        } else if (k == "order") {
            if (fscanf(f, "%63s", name) != 1) return 2;
            g_order = !strcmp(name, "rev") ? 1 : !strcmp(name, "rand") ? 2 : 0;
            g_atomic_yield = g_order == 2;
        } else if (k == "seed") {
            unsigned long long s;
            if (fscanf(f, "%llu", &s) != 1) return 2;
            g_rng = s * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
            if (!g_rng) g_rng = 1;
        } else if (k == "banks") {
            int b;
            if (fscanf(f, "%d", &b) != 1) return 2;
#ifdef HPCCOURSE_CHECKED
            g_banks = b != 0;
#endif
        } else if (k == "ptr") {
            Arg a;
            int c;
            if (fscanf(f, "%zu %zu %d %d %1023s", &a.off, &a.n, &c, &a.elem, name) != 5) return 2;
            a.ptr = true;
            a.is_const = c != 0;
            a.name = name;
            args.push_back(a);
        } else if (k == "null") {
            Arg a;
            a.ptr = true;
            a.is_const = true;
            a.off = a.n = 0;
            a.elem = 1;
            a.dev = nullptr;
            a.name = "null";
            a.off = (size_t)-1;
            args.push_back(a);
        } else if (k == "val") {
            Arg a;
            size_t n;
            if (fscanf(f, "%zu %1023s", &n, name) != 2) return 2;
            a.ptr = false;
            a.n = n;
            for (size_t i = 0; i < n; i++) {
                unsigned v;
                sscanf(name + 2 * i, "%2x", &v);
                a.bytes.push_back((unsigned char)v);
            }
            args.push_back(a);
        }
    }
    fclose(f);
    const KernelEntry* e = find_kernel(kernel.c_str());
    if (!e) { fprintf(stderr, "hpccourse runner: no kernel named %s\n", kernel.c_str()); return 2; }
    g_kernel_name = kernel;
    if ((int)args.size() != e->nparams) { fprintf(stderr, "hpccourse runner: argument count mismatch\n"); return 2; }
    int fd = open((d + "/data.bin").c_str(), O_RDWR);
    std::vector<void*> slots(args.size());
    std::vector<void*> ptrs(args.size());
    for (size_t i = 0; i < args.size(); i++) {
        Arg& a = args[i];
        if (a.ptr) {
            if (a.off == (size_t)-1) {
                ptrs[i] = nullptr;
            } else {
#ifdef HPCCOURSE_ASAN
                // exactly sized: AddressSanitizer's redzones sit right after it; 256-byte aligned like cudaMalloc's
                if (posix_memalign(&a.dev, 256, a.n ? a.n : 1)) a.dev = nullptr;
                Buf b; b.base = (char*)a.dev; b.lo = (uintptr_t)a.dev; b.hi = b.lo + a.n; b.name = a.name; b.elem = a.elem;
                b.from_malloc = true;
                g_bufs.push_back(b);
#else
                a.dev = device_malloc(a.n, 0);
                g_bufs.back().name = a.name;
                g_bufs.back().elem = a.elem;
#endif
                if (a.n && pread(fd, a.dev, a.n, (off_t)a.off) != (ssize_t)a.n) { fprintf(stderr, "short read\n"); return 2; }
                ptrs[i] = a.dev;
            }
            slots[i] = &ptrs[i];
        } else {
            // a copy with the alignment of any parameter type (the kernel reads it as its own type)
            void* v = nullptr;
            if (posix_memalign(&v, 64, a.bytes.size() + 64)) return 2;
            memcpy(v, a.bytes.data(), a.bytes.size());
            slots[i] = v;
        }
    }
    LaunchCfg c = cfg;
    struct Ctx { const KernelEntry* e; void** slots; } ctx = {e, slots.data()};
    run_grid(c, [](void* p) { Ctx* x = static_cast<Ctx*>(p); x->e->invoke(x->e->fn, x->slots); }, &ctx, e->fn);
    for (size_t i = 0; i < args.size(); i++) {
        Arg& a = args[i];
        if (a.ptr && !a.is_const && a.off != (size_t)-1 && a.n)
            if (pwrite(fd, a.dev, a.n, (off_t)a.off) != (ssize_t)a.n) { fprintf(stderr, "short write\n"); return 2; }
    }
    close(fd);
    fflush(stdout);
    write_result(true);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && !strcmp(argv[1], "--describe")) return describe();
    const char* tmo = getenv("HPCCOURSE_CUDA_TIMEOUT");
    const char* res = getenv("HPCCOURSE_CUDA_RESULT");
    if (res) snprintf(g_result_path, sizeof g_result_path, "%s", res);
    const char* stk = getenv("HPCCOURSE_CUDA_STACK_KB");
    if (stk && atoi(stk) > 0) g_stack_size = (size_t)atoi(stk) * 1024;
#ifdef HPCCOURSE_ASAN
    if (!stk) g_stack_size = 256 * 1024;
    __sanitizer_set_death_callback(asan_death);
    ASAN_POISON_MEMORY_REGION(g_arena, ARENA);
#else
    const char* mem = getenv("HPCCOURSE_CUDA_MEM_MB");
    if (mem && atol(mem) > 0) {
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)atol(mem) << 20;
        setrlimit(RLIMIT_AS, &rl);
    }
#endif
#ifdef HPCCOURSE_CHECKED
    g_sshadow = (SShadow*)mmap(nullptr, ARENA * sizeof(SShadow), PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
#endif
    install_signals(tmo ? atoi(tmo) : 0);
    if (argc >= 3 && !strcmp(argv[1], "--launch")) return launch(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "--main")) {
        if (!hpc_has_user_main) { fprintf(stderr, "hpccourse runner: the source defines no main()\n"); return 2; }
        g_main_mode = true;
        int rc = hpc_user_main_entry(argc - 1, argv + 1);
        fflush(stdout);
        write_result(true);
        return rc;
    }
    fprintf(stderr, "usage: %s --describe | --launch DIR | --main [ARGS...]\n", argv[0]);
    return 2;
}
