"""The emulator's seeded random order interleaves threads at global-memory atomics.

Fibers switch only at barriers, warp intrinsics and failed CAS, so without this a check-then-act on global
memory (read a slot, see it EMPTY, atomicCAS into it and ignore the returned value) never races in the
emulator, though on a GPU two threads can both read EMPTY and both believe they took the slot. In the `rand`
order a thread may switch to another just before each global atomic; `fwd`/`rev` are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_hpccourse.runtimes import cuda

pytestmark = pytest.mark.skipif(not cuda.emulator_available(), reason="no C++ compiler for the CUDA emulator")

SRC = r"""
#define EMPTY (-1)
// thread i claims slot i / 2 with key keys[i]: two different keys per slot
__global__ void claim_check_then_cas(const int* keys, int n, int* slot_keys, int* claims) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int s = i / 2;
    if (slot_keys[s] == EMPTY) {
        atomicCAS(&slot_keys[s], EMPTY, keys[i]);   // BUG: the result is ignored, the slot "is ours"
        atomicAdd(&claims[s], 1);
    }
}
__global__ void claim_cas(const int* keys, int n, int* slot_keys, int* claims) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int s = i / 2;
    if (slot_keys[s] == EMPTY && atomicCAS(&slot_keys[s], EMPTY, keys[i]) == EMPTY) atomicAdd(&claims[s], 1);
}
// open addressing, linear probing, the CAS loop done right: every key lands in exactly one slot
__global__ void insert(const int* keys, int n, int* table, int cap, int* where) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int k = keys[i];
    unsigned s = (unsigned)k * 2654435761u % (unsigned)cap;
    for (;;) {
        int cur = table[s];
        if (cur == EMPTY) {
            int old = atomicCAS(&table[s], EMPTY, k);
            if (old == EMPTY) { where[i] = (int)s; return; }
            cur = old;
        }
        if (cur == k) { where[i] = (int)s; return; }
        s = (s + 1) % (unsigned)cap;
    }
}
// the buggy insert: a slot read as EMPTY is taken, whatever the CAS returned
__global__ void insert_ignoring_cas(const int* keys, int n, int* table, int cap, int* where) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int k = keys[i];
    unsigned s = (unsigned)k * 2654435761u % (unsigned)cap;
    for (;;) {
        int cur = table[s];
        if (cur == EMPTY) { atomicCAS(&table[s], EMPTY, k); where[i] = (int)s; return; }
        if (cur == k) { where[i] = (int)s; return; }
        s = (s + 1) % (unsigned)cap;
    }
}
// warp-aggregated atomic: the leader's atomicAdd (which may yield) between two shuffles of the same warp
__global__ void aggregated_append(const int* flags, int n, int* counter, int* pos) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool want = i < n && flags[i] != 0;
    unsigned m = __ballot_sync(0xffffffffu, want);
    int leader = m ? __ffs(m) - 1 : 0;
    int base = 0;
    if (want && (threadIdx.x & 31) == leader) base = atomicAdd(counter, __popc(m));
    base = __shfl_sync(0xffffffffu, base, leader);
    if (want) pos[i] = base + __popc(m & ((1u << (threadIdx.x & 31)) - 1u));
}
"""


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    p = tmp_path_factory.mktemp("interleave") / "claim.cu"
    p.write_text(SRC)
    return p


def _claim(mod, kernel, n, order, seed=0):
    keys = np.arange(100, 100 + n, dtype=np.int32)
    slots = np.full(n // 2, -1, np.int32)
    claims = np.zeros(n // 2, np.int32)
    mod[kernel].launch(-(-n // 128), 128, keys, n, slots, claims, order=order, seed=seed)
    return slots, claims


def test_check_then_cas_ignoring_the_result_double_claims_in_the_random_order(src):
    mod = cuda.load(src, backend="cpu")
    n = 512
    for order in ("fwd", "rev"):  # unchanged: a thread runs from its load through its CAS undisturbed
        _, claims = _claim(mod, "claim_check_then_cas", n, order)
        assert (claims == 1).all()
    _, claims = _claim(mod, "claim_check_then_cas", n, "rand", seed=0)
    assert (claims == 2).sum() > 0, "both threads of a pair saw EMPTY and both counted the slot as theirs"
    assert set(np.unique(claims)) <= {1, 2}
    # reproducible per seed, and a different seed interleaves differently
    _, again = _claim(mod, "claim_check_then_cas", n, "rand", seed=0)
    np.testing.assert_array_equal(claims, again)
    _, other = _claim(mod, "claim_check_then_cas", n, "rand", seed=1)
    assert not np.array_equal(claims, other)
    # cuda.check sees the order dependence
    keys = np.arange(100, 100 + n, dtype=np.int32)
    with pytest.raises(cuda.CudaOrderDependenceError):
        cuda.check(mod.claim_check_then_cas, (n // 128, 128),
                   (keys, n, np.full(n // 2, -1, np.int32), np.zeros(n // 2, np.int32)), race=False, asan=False)


def test_cas_that_checks_its_result_stays_right_in_every_order(src):
    mod = cuda.load(src, backend="cpu")
    n = 512
    keys = np.arange(100, 100 + n, dtype=np.int32)
    for seed in range(4):
        slots, claims = _claim(mod, "claim_cas", n, "rand", seed=seed)
        assert (claims == 1).all()
        assert all(slots[s] in (keys[2 * s], keys[2 * s + 1]) for s in range(n // 2))
    r = cuda.check(mod.claim_cas, (n // 128, 128), (keys, n, np.full(n // 2, -1, np.int32), np.zeros(n // 2, np.int32)),
                   compare=[3], asan=False)
    assert (r.outputs[3] == 1).all()


def _insert(mod, kernel, keys, cap, order, seed=0):
    table = np.full(cap, -1, np.int32)
    where = np.full(keys.size, -7, np.int32)
    mod[kernel].launch(-(-keys.size // 256), 256, keys, keys.size, table, cap, where, order=order, seed=seed)
    return table, where


def test_hash_insert(src):
    mod = cuda.load(src, backend="cpu")
    rng = np.random.default_rng(5)
    uniq = rng.choice(1 << 20, 300, replace=False).astype(np.int32)
    keys = rng.permutation(np.concatenate([uniq, uniq[:200]])).astype(np.int32)  # duplicates too
    cap = 521
    for order, seed in (("fwd", 0), ("rev", 0), ("rand", 0), ("rand", 3)):
        table, where = _insert(mod, "insert", keys, cap, order, seed)
        assert sorted(table[table >= 0].tolist()) == sorted(uniq.tolist()), (order, seed)
        np.testing.assert_array_equal(table[where], keys)
    # the buggy insert is right in fwd (no interleaving there) and loses keys in rand
    table, where = _insert(mod, "insert_ignoring_cas", keys, cap, "fwd")
    np.testing.assert_array_equal(table[where], keys)
    bad = 0
    for seed in range(3):
        table, where = _insert(mod, "insert_ignoring_cas", keys, cap, "rand", seed)
        bad += int((table[where] != keys).sum())
    assert bad > 0


def test_warp_aggregated_atomic_with_shuffles_around_it(src):
    mod = cuda.load(src, backend="cpu")
    n = 1000
    flags = (np.random.default_rng(2).random(n) < 0.4).astype(np.int32)
    for seed in range(4):
        counter = np.zeros(1, np.int32)
        pos = np.full(n, -1, np.int32)
        mod.aggregated_append.launch(4, 256, flags, n, counter, pos, order="rand", seed=seed)
        assert counter[0] == flags.sum()
        assert sorted(pos[flags != 0].tolist()) == list(range(int(flags.sum())))


def test_fwd_counters_unchanged(src):
    """The race build (fwd order, as cuda.check runs it) counts what it counted before: thread 2k sees EMPTY
    and makes a CAS and an add; thread 2k+1 sees its partner's key and makes none."""
    mod = cuda.load(src, backend="cpu", build="race")
    n = 512
    keys = np.arange(100, 100 + n, dtype=np.int32)
    slots, claims = np.full(n // 2, -1, np.int32), np.zeros(n // 2, np.int32)
    k = mod.claim_check_then_cas
    k[n // 128, 128](keys, n, slots, claims)
    assert (claims == 1).all()
    assert k.stats["gmem_atomics"] == n
    assert cuda.gmem_counters(k.stats, "slot_keys")["atomics"] == n // 2
