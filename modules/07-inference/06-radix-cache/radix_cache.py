"""infer-06: SGLang's RadixAttention prefix cache, on token ids.

Contract (the tests check all of it):
- Every non-root node owns one edge: `key` (token ids, non-empty) and `value` (the KV-pool slot of each of
  those tokens, same length). The path root -> node spells a cached prefix; siblings start with different
  tokens and `children` is keyed by that first token.
- `match_prefix(key)` returns (slots of the longest cached prefix of `key`, the node where it ends). A match
  that ends inside an edge splits that edge first, so the returned node ends exactly at the match.
  Every node on the walked path (both halves of a split included) gets `last_access = ` this call's tick.
- `insert(key, value)` caches `key`; returns the length that was already cached (the caller frees
  `value[:that]`, those slots are duplicates). Touches its path the same way.
- `inc_lock_ref(node)` / `dec_lock_ref(node)`: +1 / -1 on every node from `node` up to (not incl.) the root.
  A node with `lock_ref > 0` is protected; `protected_size` / `evictable_size` count the tokens of
  protected / unprotected nodes and change only when a node's lock_ref crosses 0.
- `evict(num_tokens)`: repeatedly removes the unlocked leaf with the smallest `last_access` (a parent whose
  last child went becomes a leaf and a candidate) until at least `num_tokens` tokens are freed or nothing
  is evictable; returns the freed slots, node by node in eviction order.
Nothing is ever merged back: a split node keeps its single child (as in SGLang).
"""

from __future__ import annotations

import heapq
import itertools


class Node:
    def __init__(self, key: list[int], value: list[int], parent: Node | None, tick: int) -> None:
        self.key = key
        self.value = value
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.lock_ref = 0
        self.last_access = tick

    def __lt__(self, other: Node) -> bool:  # heap order: least recently used first
        return self.last_access < other.last_access


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class RadixCache:
    def __init__(self) -> None:
        self._clock = itertools.count(1)
        self.root = Node([], [], None, 0)
        self.root.lock_ref = 1  # the root is never evicted
        self.evictable_size = 0
        self.protected_size = 0

    def tick(self) -> int:
        return next(self._clock)

    def _split(self, child: Node, pos: int) -> Node:
        """Cut `child`'s edge after `pos` tokens (0 < pos < len(child.key)); return the new upper node."""
        ### HINT: the upper node takes key[:pos]/value[:pos], the parent link and the lock count; child keeps the rest
        ### BEGIN SOLUTION
        parent = child.parent
        assert parent is not None and 0 < pos < len(child.key)
        upper = Node(child.key[:pos], child.value[:pos], parent, child.last_access)
        upper.lock_ref = child.lock_ref
        parent.children[child.key[0]] = upper
        child.key, child.value = child.key[pos:], child.value[pos:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper
        ### END SOLUTION

    def match_prefix(self, key: list[int]) -> tuple[list[int], Node]:
        ### HINT: walk edges from the root; stop at a missing child or a partial edge (split it); stamp the path
        ### BEGIN SOLUTION
        now = self.tick()
        node, slots, i = self.root, [], 0
        node.last_access = now
        while i < len(key) and key[i] in node.children:
            child = node.children[key[i]]
            child.last_access = now
            n = common_prefix_len(child.key, key[i:])
            if n < len(child.key):
                node = self._split(child, n)
                slots += node.value
                break
            slots += child.value
            node, i = child, i + n
        return slots, node
        ### END SOLUTION

    def insert(self, key: list[int], value: list[int]) -> int:
        assert len(key) == len(value)
        _, node = self.match_prefix(key)
        cached = self._depth(node)
        if cached < len(key):
            leaf = Node(key[cached:], value[cached:], node, node.last_access)
            node.children[key[cached]] = leaf
            self.evictable_size += len(leaf.key)
        return cached

    def _depth(self, node: Node) -> int:
        d = 0
        while node.parent is not None:
            d, node = d + len(node.key), node.parent
        return d

    def inc_lock_ref(self, node: Node) -> None:
        ### BEGIN SOLUTION
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable_size -= len(node.key)
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent
        ### END SOLUTION

    def dec_lock_ref(self, node: Node) -> None:
        ### BEGIN SOLUTION
        while node is not self.root:
            assert node.lock_ref > 0, "unlock without lock"
            if node.lock_ref == 1:
                self.evictable_size += len(node.key)
                self.protected_size -= len(node.key)
            node.lock_ref -= 1
            node = node.parent
        ### END SOLUTION

    def evictable_leaves(self) -> list[Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.lock_ref == 0:
                out.append(node)
        return out

    def evict(self, num_tokens: int) -> list[int]:
        ### HINT: a min-heap of evictable leaves by last_access; a parent left childless and unlocked joins the heap
        ### BEGIN SOLUTION
        heap = self.evictable_leaves()
        heapq.heapify(heap)
        freed: list[int] = []
        while len(freed) < num_tokens and heap:
            leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            freed += leaf.value
            self.evictable_size -= len(leaf.key)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, parent)
        return freed
        ### END SOLUTION
