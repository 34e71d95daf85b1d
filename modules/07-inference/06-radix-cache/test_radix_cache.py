"""Tests for infer-06: the radix prefix cache against a brute-force shadow model.

The shadow keeps one entry per cached prefix: `slot_of[tuple(tokens[:i])] = KV slot of token i-1`. It is
prefix-closed, so the longest cached prefix of a query is found by scanning i upwards, with no tree at all.
Every KV slot handed to `insert` is fresh and unique, so the slots that `match_prefix` returns and that
`evict` frees identify exactly which tokens they belong to. Eviction order is replayed on a snapshot of the
tree taken just before `evict`: each freed node must be the unlocked leaf with the smallest `last_access` at
that moment (equal ticks count as ties: an insert that splits an edge stamps both halves and the new leaf).
Structural invariant tested (SGLang's, not a fully compressed tree: a split node may keep a single child):
non-root edges are non-empty, key and value have equal length, `children[k].key[0] == k`, parent links agree,
`lock_ref(node) >= sum of its children's lock_ref`, and the tree spells exactly the shadow's prefixes.
"""

import random

import pytest


@pytest.fixture
def rc(lesson):
    return lesson.load("radix_cache.py")


class Shadow:
    def __init__(self, rc):
        self.cache = rc.RadixCache()
        self.slot_of = {}
        self.next_slot = 1000
        self.locks = []  # (node, prefix tuple) of every held lock

    def lcp(self, key):
        h = 0
        while h < len(key) and tuple(key[: h + 1]) in self.slot_of:
            h += 1
        return h

    def insert(self, key):
        value = list(range(self.next_slot, self.next_slot + len(key)))
        self.next_slot += len(key)
        want = self.lcp(key)
        got = self.cache.insert(list(key), value)
        assert got == want, f"insert({key}) reports {got} cached tokens, brute force says {want}"
        for i in range(want + 1, len(key) + 1):
            self.slot_of[tuple(key[:i])] = value[i - 1]

    def match(self, key):
        h = self.lcp(key)
        n_before = count_nodes(self.cache)
        slots, node = self.cache.match_prefix(list(key))
        check_stamps(self.cache, node, split=count_nodes(self.cache) == n_before + 1)
        want = [self.slot_of[tuple(key[:j])] for j in range(1, h + 1)]
        assert len(slots) == h, f"match_prefix({key}) hits {len(slots)} tokens, brute-force LCP is {h}"
        assert list(slots) == want, f"match_prefix({key}) returns slots {slots}, cached ones are {want}"
        assert spelled(node) == tuple(key[:h]), f"returned node ends at {spelled(node)}, not at the match {key[:h]}"
        return node, tuple(key[:h])

    def lock(self, key):
        node, prefix = self.match(key)
        self.cache.inc_lock_ref(node)
        self.locks.append((node, prefix))

    def unlock(self, i):
        node, _ = self.locks.pop(i)
        self.cache.dec_lock_ref(node)

    def protected(self):
        return len({p[:j] for _, p in self.locks for j in range(1, len(p) + 1)})

    def evict(self, n):
        snap = snapshot(self.cache)
        evictable = len(self.slot_of) - self.protected()
        freed = list(self.cache.evict(n))
        sizes = replay_lru(snap, freed)
        total = sum(sizes)
        if n <= evictable:
            assert total >= n, f"evict({n}) freed only {total} tokens with {evictable} evictable"
            assert not sizes or total - sizes[-1] < n, f"evict({n}) freed {total} tokens: it went on after reaching {n}"
        else:
            assert total == evictable, f"evict({n}) with {evictable} evictable freed {total}"
        gone = set(freed)
        for p in [p for p, s in self.slot_of.items() if s in gone]:
            del self.slot_of[p]
        for _, p in self.locks:
            assert all(p[:j] in self.slot_of for j in range(1, len(p) + 1)), f"locked prefix {p} was evicted"

    def check(self):
        c = self.cache
        paths = check_structure(c.root)
        assert paths == self.slot_of, "the tree does not hold exactly the cached prefixes (or their slots)"
        prot = self.protected()
        assert c.protected_size == prot, f"protected_size {c.protected_size}, locked paths cover {prot} tokens"
        assert c.evictable_size == len(self.slot_of) - prot, (
            f"evictable_size {c.evictable_size}, expected {len(self.slot_of) - prot}")


def count_nodes(cache):
    n, stack = 0, [cache.root]
    while stack:
        node = stack.pop()
        n += 1
        stack.extend(node.children.values())
    return n


def check_stamps(cache, node, split):
    """After match_prefix: every node on the returned path (and the lower half of a split) carries this call's
    tick, the newest in the tree (one tick per call)."""
    newest, stack = None, list(cache.root.children.values())
    while stack:
        n = stack.pop()
        newest = n.last_access if newest is None or n.last_access > newest else newest
        stack.extend(n.children.values())
    path = []
    while node.parent is not None:
        path.append(node)
        node = node.parent
    if split:
        path.append(next(iter(path[0].children.values())))  # the old child, now the lower half
    ticks = [n.last_access for n in path]
    assert all(t == newest for t in ticks), (
        f"match_prefix stamped its path with ticks {ticks} (from the end of the match up; the lower half of a split "
        f"last), the call's tick is {newest}: every node on the path, both halves of a split, gets the same new tick")


def spelled(node):
    parts = []
    while node.parent is not None:
        parts.append(tuple(node.key))
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)


def check_structure(root):
    paths, stack = {}, [(root, ())]
    while stack:
        node, prefix = stack.pop()
        if node is not root:  # the root's lock_ref is pinned at 1
            assert node.lock_ref >= sum(ch.lock_ref for ch in node.children.values()), "lock_ref below its children's"
        assert node.lock_ref >= 0
        for k, ch in node.children.items():
            assert len(ch.key) > 0 and len(ch.key) == len(ch.value), "empty edge or key/value length mismatch"
            assert ch.key[0] == k and ch.parent is node, "children dict or parent link is inconsistent"
            for j in range(len(ch.key)):
                paths[prefix + tuple(ch.key[: j + 1])] = ch.value[j]
            stack.append((ch, prefix + tuple(ch.key)))
    return paths


def snapshot(cache):
    snap, stack = {}, [cache.root]
    while stack:
        node = stack.pop()
        snap[id(node)] = dict(value=list(node.value), t=node.last_access, lock=node.lock_ref,
                              parent=id(node.parent) if node.parent is not None else None,
                              children={id(c) for c in node.children.values()})
        stack.extend(node.children.values())
    return snap


def replay_lru(snap, freed):
    """Split `freed` into whole nodes and check each was the least recently used evictable leaf."""
    owner = {s: i for i, n in snap.items() for s in n["value"]}
    order, pos = [], 0
    while pos < len(freed):
        i = owner.get(freed[pos])
        assert i is not None, f"evict returned slot {freed[pos]} that the tree did not hold"
        n = snap[i]
        assert freed[pos: pos + len(n["value"])] == n["value"], "evict must return whole nodes' slots in order"
        cands = [j for j, m in snap.items() if not m["children"] and m["lock"] == 0 and m["parent"] is not None]
        assert i in cands, "evicted a node that was not an unlocked leaf at that moment (locked or inner node)"
        best = min(cands, key=lambda j: snap[j]["t"])
        assert n["t"] == snap[best]["t"], (
            f"evicted a leaf last used at tick {n['t']} while a leaf last used at tick {snap[best]['t']} was evictable")
        snap[n["parent"]]["children"].discard(i)
        del snap[i]
        order.append(len(n["value"]))
        pos += len(n["value"])
    return order


def random_key(rng, bases):
    base = rng.choice(bases)
    cut = rng.randint(0, len(base))
    return base[:cut] + [rng.randint(1, 6) for _ in range(rng.randint(1 if cut == 0 else 0, 9))]


def run_workload(rc, seed, steps, lock_prob):
    rng = random.Random(seed)
    sh = Shadow(rc)
    bases = [[rng.randint(1, 6) for _ in range(rng.randint(5, 23))] for _ in range(5)]
    for _ in range(steps):
        r = rng.random()
        if r < 0.35:
            sh.insert(random_key(rng, bases))
        elif r < 0.6:
            sh.match(random_key(rng, bases))
        elif r < 0.6 + lock_prob:
            sh.lock(random_key(rng, bases))
        elif r < 0.6 + 2 * lock_prob and sh.locks:
            sh.unlock(rng.randrange(len(sh.locks)))
        else:
            sh.evict(rng.choice([0, 1, 2, 5, 13, 40, 400]))
        sh.check()
    return sh


@pytest.mark.points(1)
def test_match_inside_an_edge_splits_once_and_tree_stays_compressed(rc):
    sh = Shadow(rc)
    nodes = lambda: len(snapshot(sh.cache))  # noqa: E731
    sh.insert([7, 3, 9, 9, 4, 1, 8, 2, 5, 6, 3])
    assert nodes() == 2, "one fresh sequence is one edge under the root (a radix tree, not a per-token trie)"
    node, _ = sh.match([7, 3, 9, 9, 6])
    assert nodes() == 3 and list(node.key) == [7, 3, 9, 9], "a match ending inside an edge splits it once"
    sh.match([7, 3, 9, 9, 4, 1, 8, 2, 5, 6, 3, 3])
    sh.match([7, 3, 9, 9])
    assert nodes() == 3, "a match ending on a node boundary (or past the tree) must not create nodes"
    sh.insert([7, 3, 9, 9, 4, 1, 0, 0])
    assert nodes() == 5, "a branch inside an edge adds exactly the split node and the new leaf"
    sh.insert([7, 3, 9, 9, 4, 1, 0, 0, 8, 8, 8])
    assert nodes() == 6, "extending a leaf's path adds one edge"
    sh.lock([7, 3, 9, 9, 4, 1, 0, 0, 8, 8])  # splits a locked path's leaf ...
    sh.lock([7, 3])                           # ... and an edge that is already locked below
    sh.check()
    sh.unlock(1)
    sh.unlock(0)
    sh.check()


@pytest.mark.points(1)
def test_hits_equal_brute_force_longest_prefix(rc):
    for seed in range(6):
        run_workload(rc, seed, 140, lock_prob=0.0)


@pytest.mark.points(1)
def test_locked_paths_are_never_evicted_and_sizes_are_conserved(rc):
    for seed in range(100, 106):
        sh = run_workload(rc, seed, 160, lock_prob=0.08)
        while sh.locks:
            sh.unlock(0)
        sh.check()
        sh.evict(10**6)
        sh.check()
        assert not sh.slot_of and not sh.cache.root.children, "with no locks, evicting everything empties the tree"


@pytest.mark.points(1)
def test_eviction_is_lru_and_cascades_to_parents(rc):
    sh = Shadow(rc)
    seqs = [[s] + [s * 10 + j for j in range(4)] for s in (1, 2, 3, 4)]
    for s in seqs:
        sh.insert(s)
    sh.insert(seqs[2] + [99, 98])             # leaf [99, 98] under seq 3, last used at tick 5
    for i in (3, 0, 2, 1):                    # ticks 6..9: seq 4, 1, 3, 2; each edge is split after 3 tokens
        sh.match(seqs[i][:3])                 # both halves are stamped, [99, 98] below them is not
    sh.lock(seqs[0][:2])                      # tick 10 on [1, 10] and its lower half [11]
    sh.check()
    sh.evict(0)                               # nothing asked: nothing freed
    sh.check()
    sh.evict(1)                               # the oldest leaf is [99, 98] (tick 5), 2 tokens: stop
    assert (3, 30, 31, 32, 33, 99) not in sh.slot_of and (3, 30, 31, 32, 33) in sh.slot_of
    sh.evict(3)                               # [42, 43] (tick 6), then its parent [4, 40, 41] became a leaf
    assert (4,) not in sh.slot_of and (1, 10, 11, 12) in sh.slot_of
    sh.evict(2)                               # [12, 13] (tick 7); [11] (tick 10) stays
    assert (1, 10, 11, 12) not in sh.slot_of and (1, 10, 11) in sh.slot_of and (3, 30, 31, 32) in sh.slot_of
    sh.check()
    for seed in range(200, 206):
        run_workload(rc, seed, 120, lock_prob=0.05)
