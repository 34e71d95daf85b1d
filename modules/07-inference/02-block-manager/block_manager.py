"""infer-02: a PagedAttention block manager with ref counts, fork, copy-on-write and prefix caching.

The KV cache is ``num_blocks`` physical blocks of ``block_size`` token slots. A sequence owns a
*block table*: logical block i of the sequence (tokens i*block_size ... (i+1)*block_size - 1) lives in
physical block ``table[i]``. Here a slot stores the token id itself, standing in for its K/V vectors,
so reading a sequence back through its table must give its tokens.

Contract (the tests compare every step with a reference model, so the policy is pinned):

- ``ref_count[b]`` = how many block tables hold block b. A block with ref_count 0 is in ``free_queue``,
  exactly once; a block with ref_count > 0 is not.
- ``free_queue`` is a deque in eviction order: blocks are handed out from the left (``_take_free_block``,
  given) and a block whose ref_count drops to 0 is appended on the right. A freed sequence releases
  its blocks from the last to the first (so its tail is evicted before its prefix, as in vLLM v1).
- Prefix caching: a *full* block is registered in ``cached[h] = b`` (and ``block_hash[b] = h``) with
  ``h = hash_block(parent, tokens)``, ``parent`` being the hash of the previous block of the same
  sequence (``None`` for the first). A later registration of the same hash replaces the earlier one.
  A cached block stays reusable after its ref_count drops to 0, until ``_take_free_block`` hands it
  out again (eviction). Partly filled blocks are never cached.
- ``allocate(seq_id, prompt)``: reuse the longest chain of cached full blocks that matches the
  prompt's leading full blocks, then take fresh blocks for the rest, write the prompt into them and
  register the new full ones. Returns the number of prompt tokens found in the cache (every matching full
  block counts, even when that is the whole prompt: no vLLM-style ``num_tokens - 1`` cap, see README).
  The caller's ``prompt`` is not modified. Raises
  ``NoFreeBlocks`` *before changing anything* if the free queue cannot supply what it needs (a reused
  block whose ref_count is 0 is taken out of the free queue, so it counts).
- ``append(seq_id, token)``: write one token after the last. A full (or missing) last block means a
  fresh block. A partly filled last block that other tables share (ref_count > 1) is first copied
  (copy-on-write: ``_copy_block`` into a fresh block that replaces it in this table only). A block that
  becomes full is registered. Raises ``NoFreeBlocks`` before changing anything when a block is needed
  and none is free.
- ``fork(parent_id, child_id)``: the child shares all of the parent's blocks; nothing is copied.
- ``free(seq_id)``: drop the sequence (its table and its tokens) and its references.
Writes go through ``_write`` only. Given: ``hash_block``, ``_take_free_block``, ``_copy_block``,
``_write``, ``read``, ``num_free_blocks``.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import deque
from collections.abc import Sequence


class NoFreeBlocks(RuntimeError):
    """The free queue cannot supply the blocks an operation needs (the scheduler would preempt)."""


def hash_block(parent: int | None, tokens: Sequence[int]) -> int:
    """Hash of one full block, chained to the hash of the block before it."""
    h = hashlib.sha256(b"root" if parent is None else parent.to_bytes(8, "little"))
    h.update(array("q", tokens).tobytes())
    return int.from_bytes(h.digest()[:8], "little")


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_count: list[int] = [0] * num_blocks
        self.free_queue: deque[int] = deque(range(num_blocks))
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.slots: list[list[int | None]] = [[None] * block_size for _ in range(num_blocks)]
        self.tables: dict[int, list[int]] = {}
        self.seqs: dict[int, list[int]] = {}
        self.copies: list[tuple[int, int]] = []

    # ---- given helpers -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def _take_free_block(self) -> int:
        """Hand out the block at the head of the free queue, evicting its cached hash; ref_count 1."""
        if not self.free_queue:
            raise NoFreeBlocks("no free block")
        b = self.free_queue.popleft()
        h = self.block_hash[b]
        if h is not None:
            if self.cached.get(h) == b:
                del self.cached[h]
            self.block_hash[b] = None
        self.ref_count[b] = 1
        return b

    def _copy_block(self, src: int, dst: int) -> None:
        """Copy the KV of every slot of ``src`` into ``dst`` (a cudaMemcpy of one block on a GPU)."""
        self.slots[dst] = list(self.slots[src])
        self.copies.append((src, dst))

    def _write(self, block: int, slot: int, token: int) -> None:
        """Store the KV of ``token`` in one slot (the attention kernel's cache write)."""
        self.slots[block][slot] = token

    def read(self, seq_id: int) -> list[int]:
        """The sequence's tokens read back through its block table."""
        bs, table = self.block_size, self.tables[seq_id]
        return [self.slots[table[i // bs]][i % bs] for i in range(len(self.seqs[seq_id]))]

    # ---- the block manager ---------------------------------------------------------------------
    def allocate(self, seq_id: int, prompt: Sequence[int]) -> int:
        """Give a new sequence its blocks; returns how many prompt tokens were prefix-cache hits."""
        ### HINT: match full blocks only, chaining the hashes, and stop at the first miss; count what the free queue must give (fresh blocks + hit blocks now in it) before touching anything; take the hits out of the queue before taking fresh blocks
        ### BEGIN SOLUTION
        bs = self.block_size
        hits: list[int] = []
        parent: int | None = None
        for i in range(len(prompt) // bs):
            h = hash_block(parent, prompt[i * bs:(i + 1) * bs])
            b = self.cached.get(h)
            if b is None:
                break
            hits.append(b)
            parent = h
        num_blocks = -(-len(prompt) // bs)
        need = num_blocks - len(hits) + sum(1 for b in hits if self.ref_count[b] == 0)
        if need > len(self.free_queue):
            raise NoFreeBlocks(f"need {need} blocks, {len(self.free_queue)} free")
        for b in hits:
            if self.ref_count[b] == 0:
                self.free_queue.remove(b)
            self.ref_count[b] += 1
        table = list(hits)
        for i in range(len(hits), num_blocks):
            b = self._take_free_block()
            table.append(b)
            chunk = prompt[i * bs:(i + 1) * bs]
            for j, token in enumerate(chunk):
                self._write(b, j, token)
            if len(chunk) == bs:
                parent = hash_block(parent, chunk)
                self.block_hash[b] = parent
                self.cached[parent] = b
        self.tables[seq_id] = table
        self.seqs[seq_id] = list(prompt)
        return len(hits) * bs
        ### END SOLUTION

    def append(self, seq_id: int, token: int) -> None:
        """Append one decoded token to a sequence (copy-on-write if its last block is shared)."""
        ### HINT: the slot is len % block_size; slot 0 needs a fresh block; otherwise a shared last block is copied first and the old one loses this reference; register the block when its last slot is written
        ### BEGIN SOLUTION
        bs, table, tokens = self.block_size, self.tables[seq_id], self.seqs[seq_id]
        slot = len(tokens) % bs
        if slot == 0:
            b = self._take_free_block()
            table.append(b)
        else:
            b = table[-1]
            if self.ref_count[b] > 1:
                new = self._take_free_block()
                self._copy_block(b, new)
                self.ref_count[b] -= 1
                table[-1] = b = new
        self._write(b, slot, token)
        tokens.append(token)
        if slot == bs - 1:
            parent = self.block_hash[table[-2]] if len(table) > 1 else None
            h = hash_block(parent, tokens[-bs:])
            self.block_hash[b] = h
            self.cached[h] = b
        ### END SOLUTION

    def fork(self, parent_id: int, child_id: int) -> None:
        """The child starts as the parent: same tokens, same physical blocks."""
        ### BEGIN SOLUTION
        table = self.tables[parent_id]
        for b in table:
            self.ref_count[b] += 1
        self.tables[child_id] = list(table)
        self.seqs[child_id] = list(self.seqs[parent_id])
        ### END SOLUTION

    def free(self, seq_id: int) -> None:
        """Drop a finished (or preempted) sequence."""
        ### BEGIN SOLUTION
        for b in reversed(self.tables.pop(seq_id)):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                self.free_queue.append(b)
        del self.seqs[seq_id]
        ### END SOLUTION
