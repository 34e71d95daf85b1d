"""Tests for infer-02: the block manager against a reference model and its invariants.

The reference model below keeps the same pinned policy (README / module docstring) but stores no ref
counts: it recounts them from the block tables, and it tracks every sequence's tokens densely. Hypothesis
drives random allocate / append / fork / free sequences (a fixed, derandomized profile with a bounded
number of examples, so the run is deterministic and takes a few seconds) on a small pool, so that running
out of blocks, evictions and prefix hits all happen. After every step: same return value or same
NoFreeBlocks, same tables and free queue as the reference, and the invariants: no leak, free count
conserved, ref counts = table references, ceil(len / block_size) blocks per table, tokens read back through
the table equal the dense model, and no write lands in a block that another table shares.
"""

import random
from collections import deque

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

PROFILE = settings(max_examples=40, stateful_step_count=30, derandomize=True, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck), print_blob=False)


@pytest.fixture
def bm(lesson):
    return lesson.load("block_manager.py")


class RefModel:
    """Obviously-correct model of the pinned policy; ref counts are recounted, never stored."""

    def __init__(self, mod, num_blocks, bs):
        self.mod, self.bs, self.n = mod, bs, num_blocks
        self.free_queue = deque(range(num_blocks))
        self.hash_of = {}            # block -> hash
        self.cached = {}             # hash -> block
        self.tables, self.seqs, self.copies = {}, {}, 0

    def refs(self, b):
        return sum(t.count(b) for t in self.tables.values())

    def take(self):
        b = self.free_queue.popleft()
        h = self.hash_of.pop(b, None)
        if h is not None and self.cached.get(h) == b:
            del self.cached[h]
        return b

    def register(self, seq_id, i):
        toks = self.seqs[seq_id]
        parent = None
        for j in range(i + 1):       # recompute the whole chain from the first block
            parent = self.mod.hash_block(parent, toks[j * self.bs:(j + 1) * self.bs])
        b = self.tables[seq_id][i]
        self.hash_of[b] = parent
        self.cached[parent] = b

    def allocate(self, seq_id, prompt):
        hits, parent = [], None
        for i in range(len(prompt) // self.bs):
            parent = self.mod.hash_block(parent, prompt[i * self.bs:(i + 1) * self.bs])
            if parent not in self.cached:
                break
            hits.append(self.cached[parent])
        n_blocks = (len(prompt) + self.bs - 1) // self.bs
        if n_blocks - len(hits) + len([b for b in hits if b in self.free_queue]) > len(self.free_queue):
            return "NoFreeBlocks"
        for b in hits:
            if b in self.free_queue:
                self.free_queue.remove(b)
        table = hits + [self.take() for _ in range(n_blocks - len(hits))]
        self.tables[seq_id], self.seqs[seq_id] = table, list(prompt)
        for i in range(len(hits), len(prompt) // self.bs):
            self.register(seq_id, i)
        return len(hits) * self.bs

    def append(self, seq_id, token):
        table, toks = self.tables[seq_id], self.seqs[seq_id]
        if len(toks) % self.bs == 0:
            if not self.free_queue:
                return "NoFreeBlocks"
            table.append(self.take())
        elif self.refs(table[-1]) > 1:
            if not self.free_queue:
                return "NoFreeBlocks"
            table[-1] = self.take()
            self.copies += 1
        toks.append(token)
        if len(toks) % self.bs == 0:
            self.register(seq_id, len(toks) // self.bs - 1)
        return None

    def fork(self, parent_id, child_id):
        self.tables[child_id] = list(self.tables[parent_id])
        self.seqs[child_id] = list(self.seqs[parent_id])

    def free_seq(self, seq_id):
        table = self.tables.pop(seq_id)
        del self.seqs[seq_id]
        for b in reversed(table):
            if self.refs(b) == 0 and b not in self.free_queue:
                self.free_queue.append(b)


def call(fn, *args):
    """Run one operation; NoFreeBlocks becomes a value so learner and reference can be compared."""
    try:
        return fn(*args)
    except Exception as e:
        if type(e).__name__ == "NoFreeBlocks":
            return "NoFreeBlocks"
        raise


def snapshot(m):
    return ({k: list(v) for k, v in m.tables.items()}, list(m.free_queue))


def watch_writes(m):
    """Record every write with the ref count of the block at that moment."""
    log = []
    original = m._write

    def write(block, slot, token):
        log.append((block, m.ref_count[block]))
        original(block, slot, token)
    m._write = write
    return log


def check_invariants(m, ref, writes):
    bs, n = m.block_size, m.num_blocks
    used = {b for t in m.tables.values() for b in t}
    assert len(m.free_queue) == len(set(m.free_queue)), f"a block is twice in the free queue: {list(m.free_queue)}"
    assert not used & set(m.free_queue), f"blocks both in a table and free: {sorted(used & set(m.free_queue))}"
    assert len(m.free_queue) + len(used) == n, f"leak: {len(m.free_queue)} free + {len(used)} used != {n} blocks"
    for b in range(n):
        holders = sum(t.count(b) for t in m.tables.values())
        assert m.ref_count[b] == holders, f"block {b}: ref_count {m.ref_count[b]}, held by {holders} tables"
    for s, toks in ref.seqs.items():
        assert len(m.tables[s]) == -(-len(toks) // bs), f"seq {s}: {len(m.tables[s])} blocks for {len(toks)} tokens"
        assert m.read(s) == toks, f"seq {s}: read back {m.read(s)}, expected {toks}"
    for h, b in m.cached.items():
        assert m.block_hash[b] == h, f"cached[{h}] = {b} but block_hash[{b}] = {m.block_hash[b]}"
    shared = [(b, r) for b, r in writes if r != 1]
    assert not shared, f"write into a block shared by {shared[0][1]} tables (block {shared[0][0]})"
    writes.clear()


@pytest.mark.points(1)
def test_fork_shares_blocks_and_copy_on_write_copies_once(bm):
    m = bm.BlockManager(12, 4)
    writes = watch_writes(m)
    assert m.allocate(0, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]) == 0          # 3 blocks: 4 + 4 + 2
    for child in (1, 2, 3):
        m.fork(0, child)
    assert m.num_free_blocks == 9 and m.copies == [], "fork must share blocks, not copy them"
    last = m.tables[0][-1]
    assert m.ref_count[last] == 4
    for s in (0, 1, 2, 3):
        m.append(s, 100 + s)
    # three writers copy the shared partial block; the fourth finds it unshared and writes in place
    assert len(m.copies) == 3 and all(src == last for src, _ in m.copies), m.copies
    assert m.num_free_blocks == 6 and m.ref_count[last] == 1
    assert [m.read(s)[-3:] for s in range(4)] == [[13, 14, 100 + s] for s in range(4)]
    assert all(r == 1 for _, r in writes[-4:]), "a token was written into a shared block"
    m2 = bm.BlockManager(6, 4)                                              # full last block: no copy needed
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    m2.allocate(0, prompt)
    m2.fork(0, 1)
    m2.append(0, 9)
    m2.append(1, 10)
    assert m2.copies == [] and m2.num_free_blocks == 2 and m2.read(1) == [1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert prompt == [1, 2, 3, 4, 5, 6, 7, 8], "the caller's prompt list was modified (stored without a copy?)"
    m2.free(0)
    m2.free(1)
    assert sorted(m2.free_queue) == list(range(6)) and not any(m2.ref_count)
    assert not m2.tables and not m2.seqs, f"free must drop the sequence's table and tokens: {m2.tables}, {m2.seqs}"


@pytest.mark.points(1)
def test_prefix_cache_reuses_full_blocks_only(bm):
    m = bm.BlockManager(10, 4)
    a = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert m.allocate(0, a) == 0
    assert m.allocate(1, a[:9] + [99]) == 8, "two full blocks match, the partial third never does"
    assert m.num_free_blocks == 6 and m.tables[1][:2] == m.tables[0][:2] and m.tables[1][2] != m.tables[0][2]
    assert m.allocate(2, [5, 6, 7, 8] + a[:4]) == 0, "a block matches only after the same prefix (chained hash)"
    assert m.allocate(3, a[:6]) == 4 and m.num_free_blocks == 3
    m.free(0)
    m.free(1)                                                               # blocks stay cached while free
    m.free(3)
    assert m.allocate(4, a) == 8 and m.num_free_blocks == 5, "hits on free cached blocks leave the free queue"
    for t in (11, 12, 13, 14, 15, 16):                                      # decode fills and caches block 3
        m.append(4, t)
    assert m.allocate(5, a + [11, 12, 13, 14, 15, 16, 77]) == 16
    assert m.read(5) == a + [11, 12, 13, 14, 15, 16, 77]
    m.free(4)
    m.free(5)
    m.free(2)
    assert m.num_free_blocks == 10
    h = bm.BlockManager(4, 2)                 # a cached free block at the head of the free queue is a hit:
    h.allocate(0, [1, 2])                     # it must leave the queue before a fresh block is taken,
    h.free(0)                                 # or the fresh take hands it out again (and evicts it)
    h.allocate(1, [9] * 6)
    h.free(1)
    assert list(h.free_queue)[0] == h.block_hash.index(bm.hash_block(None, [1, 2]))
    assert h.allocate(2, [1, 2, 5]) == 2 and h.read(2) == [1, 2, 5] and len(set(h.tables[2])) == 2, h.tables
    m.allocate(6, list(range(200, 240)))                                    # takes every block: evicts all
    m.free(6)
    assert m.allocate(7, a) == 0, "evicted blocks must not be found in the cache"
    assert m.allocate(8, a[:8]) == 8, (
        "a prompt whose every block is cached is a full hit (no vLLM-style num_tokens - 1 cap, README)")


@pytest.mark.points(1)
def test_out_of_blocks_changes_nothing(bm):
    m = bm.BlockManager(5, 4)
    m.allocate(0, [1, 2, 3, 4, 5, 6])
    m.fork(0, 1)
    m.allocate(2, list(range(10, 22)))                                     # 3 blocks: pool now empty
    before = ({k: list(v) for k, v in m.tables.items()}, list(m.free_queue), list(m.ref_count), dict(m.cached))
    for op in (lambda: m.allocate(3, [1, 2, 3, 4, 9]), lambda: m.append(0, 7), lambda: m.append(2, 7)):
        with pytest.raises(bm.NoFreeBlocks):
            op()
        after = ({k: list(v) for k, v in m.tables.items()}, list(m.free_queue), list(m.ref_count), dict(m.cached))
        assert after == before, "a failed operation must leave the state unchanged"
    m.free(2)                                                              # 3 free again, all cached
    before = ({k: list(v) for k, v in m.tables.items()}, list(m.free_queue), list(m.ref_count), dict(m.cached))
    with pytest.raises(bm.NoFreeBlocks):                                    # 2 hits taken off the queue + 2 fresh > 3
        m.allocate(3, list(range(10, 18)) + [9] * 5)
    after = ({k: list(v) for k, v in m.tables.items()}, list(m.free_queue), list(m.ref_count), dict(m.cached))
    assert after == before, "allocate failed half-way: reusing a free cached block also takes it off the free queue"
    assert m.allocate(3, list(range(10, 18)) + [9]) == 8 and m.num_free_blocks == 0


def run_machine(bm, seed):
    class Machine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            rng = random.Random(seed)
            self.bs = rng.choice([1, 2, 3, 4])
            self.m = bm.BlockManager(rng.randint(4, 14), self.bs)
            self.ref = RefModel(bm, self.m.num_blocks, self.bs)
            self.writes = watch_writes(self.m)
            self.next_id = 0
            self.bases = [[rng.randint(0, 3) for _ in range(12)] for _ in range(3)]

        def live(self):
            return sorted(self.ref.seqs)

        @rule(base=st.integers(0, 2), keep=st.integers(0, 12), tail=st.lists(st.integers(0, 3), max_size=5))
        def allocate(self, base, keep, tail):
            prompt = self.bases[base][:keep] + tail
            if not prompt:
                prompt = [7]
            s = self.next_id
            self.next_id += 1
            want = self.ref.allocate(s, prompt)
            got = call(self.m.allocate, s, prompt)
            assert got == want, f"allocate({s}, {prompt}) -> {got}, reference {want}"
            self.same()

        @precondition(lambda self: self.ref.seqs)
        @rule(pick=st.integers(0, 50), token=st.integers(0, 3))
        def append(self, pick, token):
            s = self.live()[pick % len(self.live())]
            want = self.ref.append(s, token)
            got = call(self.m.append, s, token)
            assert got == want, f"append({s}, {token}) -> {got}, reference {want}"
            self.same()

        @precondition(lambda self: self.ref.seqs)
        @rule(pick=st.integers(0, 50))
        def fork(self, pick):
            s = self.live()[pick % len(self.live())]
            c = self.next_id
            self.next_id += 1
            self.ref.fork(s, c)
            self.m.fork(s, c)
            self.same()

        @precondition(lambda self: self.ref.seqs)
        @rule(pick=st.integers(0, 50))
        def free(self, pick):
            s = self.live()[pick % len(self.live())]
            self.ref.free_seq(s)
            self.m.free(s)
            self.same()

        def same(self):
            assert sorted(self.m.seqs) == self.live(), f"sequences {sorted(self.m.seqs)}, expected {self.live()}"
            assert snapshot(self.m) == (self.ref.tables, list(self.ref.free_queue)), (
                f"state differs from the reference\n  yours: {snapshot(self.m)}\n"
                f"  reference: {(self.ref.tables, list(self.ref.free_queue))}")
            assert len(self.m.copies) == self.ref.copies, f"{len(self.m.copies)} block copies, reference {self.ref.copies}"

        @invariant()
        def invariants(self):
            check_invariants(self.m, self.ref, self.writes)

    Machine.TestCase.settings = PROFILE
    Machine.TestCase().runTest()


@pytest.mark.points(2)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_operation_sequences_match_reference(bm, seed):
    run_machine(bm, seed)
