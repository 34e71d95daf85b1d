"""A simulator of PyTorch's CUDA caching allocator policy (c10/cuda/CUDACachingAllocator.cpp).

Contract (one device, one stream, no CUDA graphs, expandable_segments off):

    alloc = CachingAllocator("max_split_size_mb:32")   # PYTORCH_CUDA_ALLOC_CONF syntax, or ""
    b = alloc.malloc(25 << 20)      # -> Block; b.size == 26 MiB, a new 26 MiB segment
    alloc.free(b)                   # back to the cache, merged with free neighbours
    alloc.empty_cache()             # "cudaFree" every segment that is entirely free
    alloc.stats()                   # requested/allocated/active/reserved bytes, segment count
    alloc.snapshot()                # segments by address, each with its blocks in address order

The policy you write (the SOLUTION regions):
- `round_size`: requests are rounded up to a multiple of 512 B (kMinBlockSize); with
  roundup_power2_divisions = d > 1 and a request > 512*d, up to the next of d equal steps between two
  powers of two.
- pool: rounded size <= 1 MiB (kSmallSize) -> "small", else "large".
- `allocation_size`: a new segment is 2 MiB (kSmallBuffer) for the small pool, 20 MiB (kLargeBuffer) for
  sizes < 10 MiB (kMinLargeAlloc), else the size rounded up to 2 MiB (kRoundLarge).
- `_find_free_block`: best fit among the pool's cached blocks (smallest size >= request, ties: lowest
  address); with max_split_size set, a request below it never takes a block >= it, and a request >= it
  only takes a block smaller than request + 20 MiB.
- `should_split`: small pool: split when the remainder is >= 512 B; large pool: when the request is below
  max_split_size and the remainder is > 1 MiB.
- `free`: the block goes back to its pool, merged with a free neighbour on either side.
- `empty_cache`: releases exactly the segments that are one free block.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

KiB, MiB = 1 << 10, 1 << 20
kMinBlockSize = 512  # every size is rounded to a multiple of 512 B
kSmallSize = 1 * MiB  # largest "small" request
kSmallBuffer = 2 * MiB  # small-pool segment
kLargeBuffer = 20 * MiB  # large-pool segment for requests below kMinLargeAlloc
kMinLargeAlloc = 10 * MiB  # from here on a request gets a segment of its own size
kRoundLarge = 2 * MiB  # ... rounded up to a multiple of 2 MiB
NO_LIMIT = sys.maxsize  # max_split_size when unset


@dataclass(eq=False)
class Segment:
    """One cudaMalloc'ed range."""

    addr: int
    size: int
    pool: str  # "small" | "large"


@dataclass(eq=False)
class Block:
    """A piece of a segment; blocks of one segment form a doubly linked list in address order."""

    segment: Segment
    addr: int
    size: int
    allocated: bool = False
    requested: int = 0  # bytes the caller asked for (before rounding); 0 while cached
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)


def parse_conf(conf: str) -> tuple[int, list[int]]:
    """PYTORCH_CUDA_ALLOC_CONF -> (max_split_size in bytes, divisions per power-of-two interval).

    divisions[i] applies to sizes in [2^(20+i), 2^(21+i)) (i = 0 also covers everything below 1 MiB;
    the last of the 16 entries everything above), as c10/core/AllocatorConfig.cpp indexes them."""
    max_split, divisions = NO_LIMIT, [0] * 16
    for item in filter(None, (s.strip() for s in conf.split(","))):
        key, _, value = item.partition(":")
        if key == "max_split_size_mb":
            if int(value) < kLargeBuffer // MiB:
                raise ValueError("max_split_size_mb must be >= 20")
            max_split = int(value) * MiB
        elif key == "roundup_power2_divisions":
            divisions = [int(value)] * 16
        else:
            raise ValueError(f"option {key!r} is not simulated")
    return max_split, divisions


def divisions_for(size: int, divisions: list[int]) -> int:
    """The roundup_power2_divisions entry for `size` (interval index = log2(size) - 20, clamped to 0..15)."""
    return divisions[min(max(size.bit_length() - 1 - 20, 0), len(divisions) - 1)]


def round_size(nbytes: int, divisions: list[int]) -> int:
    """The block size a request of `nbytes` gets (CUDACachingAllocator's round_size)."""
    ### HINT: result >= max(nbytes, 512) and a multiple of 512; a power of two stays itself; with d divisions the steps between 2^k and 2^(k+1) are 2^k/d wide
    ### BEGIN SOLUTION
    if nbytes < kMinBlockSize:
        return kMinBlockSize
    d = divisions_for(nbytes, divisions)
    if d > 1 and nbytes > kMinBlockSize * d:
        step = (1 << (nbytes.bit_length() - 1)) // d  # width of one of the d divisions above the power-of-two floor
        return -(-nbytes // step) * step
    return -(-nbytes // kMinBlockSize) * kMinBlockSize
    ### END SOLUTION


def allocation_size(size: int) -> int:
    """Bytes to cudaMalloc for a new segment that must hold a block of `size` (already rounded)."""
    ### HINT: three cases on the rounded size: <= kSmallSize, < kMinLargeAlloc, the rest
    ### BEGIN SOLUTION
    if size <= kSmallSize:
        return kSmallBuffer
    if size < kMinLargeAlloc:
        return kLargeBuffer
    return -(-size // kRoundLarge) * kRoundLarge
    ### END SOLUTION


def should_split(block: Block, size: int, max_split_size: int) -> bool:
    """Whether a cached `block` handed out for a request of `size` (rounded) is cut, the rest staying cached."""
    ### HINT: the two pools use different remainder thresholds; a large request >= max_split_size is never cut
    ### BEGIN SOLUTION
    remaining = block.size - size
    if block.segment.pool == "small":
        return remaining >= kMinBlockSize
    return size < max_split_size and remaining > kSmallSize
    ### END SOLUTION


class CachingAllocator:
    """The caching allocator's state: segments, cached (free) blocks per pool, allocated blocks."""

    def __init__(self, conf: str = "") -> None:
        self.max_split_size, self.divisions = parse_conf(conf)
        self.segments: list[Segment] = []
        self.pools: dict[str, set[Block]] = {"small": set(), "large": set()}  # cached, unallocated blocks
        self.active: set[Block] = set()  # blocks handed out and not yet freed
        self._next_addr = 1 << 40  # fake device addresses: every new segment above all earlier ones

    # ---- given: the "driver" and the bookkeeping -------------------------------------------------------
    def _cuda_malloc(self, pool: str, size: int) -> Block:
        """A new segment of `size` bytes; returns its one block (free, not in any pool yet)."""
        seg = Segment(self._next_addr, size, pool)
        self._next_addr += size
        self.segments.append(seg)
        return Block(seg, seg.addr, size)

    def _cuda_free(self, block: Block) -> None:
        """Return the segment of `block`, which must be the segment's only block and cached, to the driver."""
        assert block.prev is None and block.next is None and not block.allocated, "segment still in use"
        self.pools[block.segment.pool].discard(block)
        self.segments.remove(block.segment)

    def _split(self, block: Block, size: int) -> Block:
        """Cut `block` to `size` bytes; the rest becomes a new block right after it, cached in the pool."""
        rest = Block(block.segment, block.addr + size, block.size - size, prev=block, next=block.next)
        if block.next is not None:
            block.next.prev = rest
        block.next, block.size = rest, size
        self.pools[block.segment.pool].add(rest)
        return rest

    def _merge(self, block: Block, neighbour: Block) -> None:
        """Absorb the adjacent `neighbour` (prev or next of `block`) into `block`; it leaves the pool."""
        self.pools[block.segment.pool].discard(neighbour)
        if neighbour is block.prev:
            block.addr, block.prev = neighbour.addr, neighbour.prev
            if block.prev is not None:
                block.prev.next = block
        else:
            assert neighbour is block.next, "not a neighbour"
            block.next = neighbour.next
            if block.next is not None:
                block.next.prev = block
        block.size += neighbour.size

    def stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats()'s '<name>.all.current' values (no streams here, so active == allocated)."""
        allocated = sum(b.size for b in self.active)
        return {"requested_bytes": sum(b.requested for b in self.active), "allocated_bytes": allocated,
                "active_bytes": allocated, "reserved_bytes": sum(s.size for s in self.segments),
                "segment": len(self.segments)}

    def snapshot(self) -> list[dict]:
        """torch.cuda.memory_snapshot()'s shape: segments by address, blocks [size, state] in address order."""
        by_seg: dict[int, list[Block]] = {id(s): [] for s in self.segments}
        for b in [*self.active, *self.pools["small"], *self.pools["large"]]:
            by_seg.setdefault(id(b.segment), []).append(b)
        return [{"pool": s.pool, "total_size": s.size,
                 "blocks": [[b.size, "active_allocated" if b.allocated else "inactive"]
                            for b in sorted(by_seg[id(s)], key=lambda b: b.addr)]}
                for s in sorted(self.segments, key=lambda s: s.addr)]

    # ---- the policy ------------------------------------------------------------------------------------
    def _find_free_block(self, pool: str, size: int) -> Block | None:
        """The cached block of `pool` that a request of `size` (rounded) reuses, or None (-> new segment)."""
        ### HINT: candidates: cached blocks of this pool with size >= request; order by (size, addr); max_split_size bounds what a request may take
        ### BEGIN SOLUTION
        fits = [b for b in self.pools[pool] if b.size >= size]
        best = min(fits, key=lambda b: (b.size, b.addr), default=None)
        if best is None:
            return None
        if size < self.max_split_size and best.size >= self.max_split_size:
            return None  # an oversize block is never cut for a normal request
        if size >= self.max_split_size and best.size >= size + kLargeBuffer:
            return None  # an oversize request takes an oversize block only if it wastes < 20 MiB
        return best
        ### END SOLUTION

    def malloc(self, nbytes: int) -> Block:
        """Hand out a block for `nbytes` bytes: reuse a cached block or cudaMalloc a new segment; split."""
        ### HINT: round, pick the pool, reuse or _cuda_malloc(pool, allocation_size(...)), maybe _split; the block leaves the pool and joins self.active
        ### BEGIN SOLUTION
        size = round_size(nbytes, self.divisions)
        pool = "small" if size <= kSmallSize else "large"
        block = self._find_free_block(pool, size)
        if block is None:
            block = self._cuda_malloc(pool, allocation_size(size))
        self.pools[pool].discard(block)
        if should_split(block, size, self.max_split_size):
            self._split(block, size)
        block.allocated, block.requested = True, nbytes
        self.active.add(block)
        return block
        ### END SOLUTION

    def free(self, block: Block) -> None:
        """Return an allocated block to the cache (never to the driver), coalescing with free neighbours."""
        ### HINT: after free, no two adjacent blocks of a segment are both cached
        ### BEGIN SOLUTION
        self.active.discard(block)
        block.allocated, block.requested = False, 0
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.allocated:
                self._merge(block, neighbour)
        self.pools[block.segment.pool].add(block)
        ### END SOLUTION

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): give back to the driver every segment that holds no allocated byte."""
        ### BEGIN SOLUTION
        for pool in self.pools.values():
            for block in list(pool):
                if block.prev is None and block.next is None:
                    self._cuda_free(block)
        ### END SOLUTION


def replay(trace: list, conf: str = "") -> tuple[list[dict[str, int]], list[dict]]:
    """Run a trace (["alloc", id, nbytes] | ["free", id] | ["empty_cache"]); stats after every step, final snapshot."""
    alloc = CachingAllocator(conf)
    held: dict[int, Block] = {}
    rows = []
    for step in trace:
        if step[0] == "alloc":
            held[step[1]] = alloc.malloc(step[2])
        elif step[0] == "free":
            alloc.free(held.pop(step[1]))
        elif step[0] == "empty_cache":
            alloc.empty_cache()
        else:
            raise ValueError(f"unknown step {step!r}")
        rows.append(alloc.stats())
    return rows, alloc.snapshot()
