"""Compiled loops over the product's nodes and their edges: what a guide's compilation does per token.

A node's row can span the vocabulary (128k tokens on Llama-3), and a regex with counters has hundreds of such
nodes (the email regex: 7 M (node, token) edges). numpy needs a pass and a temporary per step — gather the
contexts, mask, compute keys, look ids up, test liveness twice, select three ways — and those passes were most
of a compile. Each loop here makes one pass with no temporaries. Measured on Llama-3 (guide construction,
after the regex and its token transitions): email 3.3 -> 0.9 s, JSON object 640 -> 230 ms.

- ``NodeTable``: ids of product nodes (regex state, context) by key ``q * num_contexts + ctx``, an
  open-addressing hash table (a direct table would need states x contexts entries: 190 M at 100k states on
  Llama-3's 1,934 contexts). New keys get the next ids in the order they are met. Also a hash set.
- ``open_edges``, ``distinct_targets``: the edges of a node with no unfinished character; its successors.
- ``any_live_crossing``: whether row X is non-empty (then no merge class of the node is dead).
- ``split_rows``: rows X, Y, Z of many nodes at once (see ``product.guide``), testing each edge's targets for
  liveness against the nodes' dead merge classes.
- ``entering_keys``, ``mark_dead``: the (node, merge class) pairs edges bring in; dead classes as bits.

Leaves out: what X, Y, Z mean and how liveness is solved (``product.guide``); masks (``product.forbidden``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["NodeTable", "open_edges", "distinct_targets", "any_live_crossing", "split_rows", "entering_keys",
           "mark_dead", "NONE_DEAD", "ALL_DEAD", "PARTIAL"]

_KERNEL = dict(cache=True, nogil=True, boundscheck=False)

NONE_DEAD, ALL_DEAD, PARTIAL = 0, 1, 2  # a node's liveness status: no merge class dead, all, some (bit row)


@njit(**_KERNEL)
def _lookup_or_insert(keys, done, ids, slot_keys, slot_ids, count, limit, new_keys):
    """Write the ids of ``keys[done:]`` into ``ids`` (-1 for negative keys), inserting unseen keys with ids
    ``count, count + 1, ...`` and recording them in ``new_keys[id]``. Stops before the table would hold more than
    ``limit`` keys; returns (keys done, keys in the table)."""
    mask = len(slot_keys) - 1
    for i in range(done, len(keys)):
        key = keys[i]
        if key < 0:
            ids[i] = -1
            continue
        slot = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
        while slot_keys[slot] != key and slot_keys[slot] >= 0:
            slot = (slot + 1) & mask
        if slot_keys[slot] < 0:
            if count == limit:
                return i, count
            slot_keys[slot] = key
            slot_ids[slot] = count
            new_keys[count] = key
            count += 1
        ids[i] = slot_ids[slot]
    return len(keys), count


class NodeTable:
    """Product node ids by key, or any set of non-negative int64 keys. Invariant: ids are ``0 .. len(self) - 1``,
    in the order keys were first met, ``keys[:len(self)]`` lists the keys by id, and the hash table is at most
    half full."""

    def __init__(self):
        self._slot_keys = np.full(1024, -1, dtype=np.int64)
        self._slot_ids = np.zeros(1024, dtype=np.int64)
        self.keys = np.zeros(512, dtype=np.int64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def ids(self, keys: np.ndarray) -> np.ndarray:
        """The ids of ``keys`` (int64; negative keys give -1), numbering unseen keys from ``len(self)``."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        ids = np.empty(len(keys), dtype=np.int64)
        done = 0
        while True:
            done, self._count = _lookup_or_insert(keys, done, ids, self._slot_keys, self._slot_ids, self._count,
                                                  len(self.keys), self.keys)
            if done == len(keys):
                return ids
            self._grow()

    def _grow(self) -> None:
        """Double the table and rehash the known keys (their ids do not change)."""
        capacity = 2 * len(self._slot_keys)
        self._slot_keys = np.full(capacity, -1, dtype=np.int64)
        self._slot_ids = np.zeros(capacity, dtype=np.int64)
        known = self.keys[: self._count]
        self.keys = np.zeros(capacity // 2, dtype=np.int64)
        _lookup_or_insert(known, 0, np.empty(len(known), dtype=np.int64), self._slot_keys, self._slot_ids, 0,
                          len(self.keys), self.keys)


@njit(**_KERNEL)
def mark_dead(dead_bits, rows, counts, dead):
    """Set, in bit row ``rows[i]`` of ``dead_bits`` (cleared first), the bits of the next ``counts[i]`` classes
    of ``dead``."""
    k = 0
    for i in range(len(rows)):
        dead_bits[rows[i]] = 0
        for _ in range(counts[i]):
            c = dead[k]
            dead_bits[rows[i], c >> 3] |= np.uint8(1 << (c & 7))
            k += 1


@njit(**_KERNEL)
def open_edges(tokens, targets, inside_row, boundary_row, after_class, num_contexts):
    """The edges of a node with no unfinished character: of the regex row (``tokens`` moving to ``targets``), the
    tokens the context allows inside the piece (``inside_row[t] >= 0``) or across a boundary, with the keys of
    the nodes they reach each way (-1: not that way) and the merge class each leaves behind."""
    n = len(tokens)
    kept = np.empty(n, dtype=np.int32)
    inside = np.empty(n, dtype=np.int64)
    boundary = np.empty(n, dtype=np.int64)
    classes = np.empty(n, dtype=np.int32)
    k = 0
    for i in range(n):
        t = tokens[i]
        a = inside_row[t]
        b = boundary_row[t]
        if a < 0 and b < 0:
            continue
        base = np.int64(targets[i]) * num_contexts
        kept[k] = t
        inside[k] = base + a if a >= 0 else -1
        boundary[k] = base + b if b >= 0 else -1
        classes[k] = after_class[t]
        k += 1
    return kept[:k], inside[:k], boundary[:k], classes[:k]


@njit(**_KERNEL)
def distinct_targets(inside, boundary, num_nodes):
    """The distinct node ids (>= 0) among ``inside`` and ``boundary``, ascending."""
    seen = np.zeros(num_nodes, dtype=np.bool_)
    for i in range(len(inside)):
        if inside[i] >= 0:
            seen[inside[i]] = True
        if boundary[i] >= 0:
            seen[boundary[i]] = True
    return np.flatnonzero(seen)


@njit(**_KERNEL)
def _live(node, mc, status, dead_row, dead_bits):
    if node < 0:
        return False
    s = status[node]
    if s == NONE_DEAD:
        return True
    if s == ALL_DEAD:
        return False
    return (dead_bits[dead_row[node], mc >> 3] >> (mc & 7)) & 1 == 0


@njit(**_KERNEL)
def any_live_crossing(inside, boundary, after_class, status, dead_row, dead_bits):
    """Whether some edge may only cross a boundary and reaches a live target (row X is not empty): then no merge
    class of the node is dead, whatever Y and Z hold. Stops at the first such edge."""
    for i in range(len(inside)):
        if inside[i] < 0 and _live(boundary[i], after_class[i], status, dead_row, dead_bits):
            return True
    return False


@njit(**_KERNEL)
def split_rows(bounds, tokens, inside, boundary, after_class, status, dead_row, dead_bits):
    """Rows X, Y, Z of the nodes whose edges are ``bounds[i]:bounds[i + 1]``: X = tokens that may only cross a
    boundary, to a live target; Y = tokens that may stay inside the piece, to a live target; Z = those of Y's
    candidates whose boundary target is live. Returns the three token arrays and their per-node bounds."""
    n = len(tokens)
    X = np.empty(n, dtype=np.int32)
    Y = np.empty(n, dtype=np.int32)
    Z = np.empty(n, dtype=np.int32)
    rows = len(bounds) - 1
    x_bounds = np.zeros(rows + 1, dtype=np.int64)
    y_bounds = np.zeros(rows + 1, dtype=np.int64)
    z_bounds = np.zeros(rows + 1, dtype=np.int64)
    nx = ny = nz = 0
    for r in range(rows):
        for i in range(bounds[r], bounds[r + 1]):
            mc = after_class[i]
            live_boundary = _live(boundary[i], mc, status, dead_row, dead_bits)
            if inside[i] < 0:
                if live_boundary:
                    X[nx] = tokens[i]
                    nx += 1
                continue
            if _live(inside[i], mc, status, dead_row, dead_bits):
                Y[ny] = tokens[i]
                ny += 1
            if live_boundary:
                Z[nz] = tokens[i]
                nz += 1
        x_bounds[r + 1], y_bounds[r + 1], z_bounds[r + 1] = nx, ny, nz
    return X[:nx], x_bounds, Y[:ny], y_bounds, Z[:nz], z_bounds


@njit(**_KERNEL)
def entering_keys(targets, after_class, narrow, num_merge_classes):
    """``target * num_merge_classes + after_class`` of the edges whose target is a narrow node (see
    ``product.guide``: the merge classes that can enter it are its liveness candidates)."""
    keys = np.empty(len(targets), dtype=np.int64)
    k = 0
    for i in range(len(targets)):
        t = targets[i]
        if t >= 0 and narrow[t]:
            keys[k] = t * num_merge_classes + after_class[i]
            k += 1
    return keys[:k]
