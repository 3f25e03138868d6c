"""The forbidden sets F[mc] of one canonical automaton, in the forms a guide's masks and liveness need.

``bpe.automaton`` stores F[mc] as intervals of a token permutation (``forbid_order``): compact (Llama-3's
116 M (class, token) entries are 1.2 M intervals), but a mask needs F[mc] as bits over token *ids*, and turning
intervals of the permutation into scattered bits is the whole cost of a mask the first time a state is seen.
Measured on Llama-3 (128k vocabulary, one core; ``bench/peers.py``):

- numpy (expand the intervals, gather the ids, scatter into a boolean row, ``packbits``) took ~110 µs for a
  10k-token class and ~350 µs for the largest ones; every step is a separate pass with its own temporaries.
- A compiled loop (numba) that walks the intervals and flips each forbidden token's bit of the node's row in
  place costs ~2.5 ns a token with no temporaries: 25 µs at 10k tokens.
- Classes forbidding at least ``DENSE_MIN`` tokens are packed once per automaton (Llama-3: 3,078 of 36,465
  classes, 49 MB; GPT-2: 2 classes), so no mask ever walks more than ``DENSE_MIN`` tokens: a mask over a
  packed class is two word-wise operations.

A mask is ``XY ^ (D & F[mc])`` (``product.compiler.tables`` explains X, Y, Z; ``XY = X | Y``,
``D = XY ^ (X | Z)``): the tokens of F[mc] take their bit from ``X | Z`` instead of ``X | Y``.

Here: the sets (``ForbiddenSets``: sizes, the packed classes, the table the mask kernels read), liveness's set
relations (``dead_flags``, ``dead_classes``; one pair in compiled code: ``forbids``), and the layout of what the mask kernels read (a node's *row
descriptor*, the forbidden sets' table) with the two bit loops building and reading it (``set_bits``,
``flip_forbidden``).

Leaves out: computing masks from the rows (the kernels of ``product.runtime.kernels.cpu``, which read the layout
defined here); which tokens a node allows (``product.compiler.tables``); the interval representation itself
(``bpe.automaton``).
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from bpe.automaton import CanonicalAutomaton

__all__ = ["ForbiddenSets", "pack", "set_bits", "flip_forbidden", "forbids", "in_intervals", "DENSE_MIN", "ROW_NONE", "ROW_SPARSE",
           "ROW_SPARSE_PACKED", "ROW_DENSE", "ROW_FIELDS", "row_descriptor", "TABLE_NUM_WORDS", "TABLE_ORDER",
           "TABLE_POSITION", "TABLE_STARTS", "TABLE_ENDS", "TABLE_OFFSETS", "TABLE_DENSE_ROW", "TABLE_DENSE",
           "TABLE_SIZE"]

DENSE_MIN = 8192  # classes forbidding this many tokens or more are packed once (see the module docstring)
DENSE_BUDGET_BYTES = 256 << 20  # ... unless that exceeds this; then only the largest classes that fit

_KERNEL = dict(cache=True, nogil=True, boundscheck=False)
_BLOCK_BITS = 8  # the stabbing index's blocks: 256 positions (GPT-2: 2.0k intervals a block, Llama-3: 3.3k)
_UNPACK_MIN = 256  # dead_flags unpacks a class to test at least this many tokens against it
_HELD_TOKENS = 4  # dead_classes answers up to this many tokens for every class at once


@njit("void(uint32[::1], int32[::1])", **_KERNEL)
def set_bits(words, tokens):
    for t in tokens:
        words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@njit("void(uint32[::1], uint32[::1], int32[::1], int32[::1], int32[::1], int64, int64)", **_KERNEL)
def flip_forbidden(words, flips, order, starts, ends, lo, hi):
    """For every token t of intervals ``lo:hi`` (ids ``order[starts[i]:ends[i]]``): words ^= flips at bit t."""
    for i in range(lo, hi):
        for p in range(starts[i], ends[i]):
            t = order[p]
            w = t >> 5
            words[w] ^= flips[w] & (np.uint32(1) << np.uint32(t & 31))


@njit(inline="always")
def in_intervals(p, starts, ends, lo, hi):
    """Whether permutation position p lies in one of the intervals ``lo:hi`` (the last starting at or before it)."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) >> 1
        if starts[mid] <= p:
            a = mid + 1
        else:
            b = mid
    return a > lo and p < ends[a - 1]


@njit(**_KERNEL)
def _all_members(tokens, member, position, starts, ends, lo, hi):
    """Whether every token's membership in the intervals ``lo:hi`` is ``member`` (stops at the first that is not)."""
    for t in tokens:
        if in_intervals(position[t], starts, ends, lo, hi) != member:
            return False
    return True


@njit(**_KERNEL)
def forbids(c, t, position, starts, ends, offsets, dense_row, dense):
    """Whether F[c] holds token t (``ForbiddenSets``' arrays): a bit of a packed class, else a binary search in its
    intervals."""
    row = dense_row[c]
    if row >= 0:
        return (dense[row, t >> 5] >> np.uint32(t & 31)) & 1 == 1
    return in_intervals(position[t], starts, ends, offsets[c], offsets[c + 1])


@njit(**_KERNEL)
def _all_bits(words, tokens, member):
    """Whether every token's bit in ``words`` is ``member``."""
    for t in tokens:
        if ((words[t >> 5] >> np.uint32(t & 31)) & 1 == 1) != member:
            return False
    return True


# A node's rows as the mask kernels read them: a *row descriptor*, int64[ROW_FIELDS] (the guide builds one per
# node, ``Guide._row_descriptors``): (kind, final, a, len a, b, len b, c, len c), a/b/c the addresses of the row's
# arrays (kept alive by the guide). ROW_SPARSE: X, Y, Z as ascending int32 token ids; ROW_SPARSE_PACKED: X packed
# (uint32[num_words]), Y, Z; ROW_DENSE: XY and D packed, the mask being XY ^ (D & F[mc]); ROW_NONE: no token.
# ``final``: the EOS tokens are allowed too.
ROW_NONE, ROW_SPARSE, ROW_SPARSE_PACKED, ROW_DENSE = range(4)
ROW_FIELDS = 8
# The forbidden sets' table (``ForbiddenSets.table``) the kernels read: the words of a mask, then (address,
# length) of each array.
TABLE_NUM_WORDS, TABLE_ORDER, TABLE_POSITION, TABLE_STARTS, TABLE_ENDS, TABLE_OFFSETS, TABLE_DENSE_ROW, TABLE_DENSE, TABLE_SIZE = 0, 1, 3, 5, 7, 9, 11, 13, 15


def row_descriptor(kind: int, final: bool, *arrays: np.ndarray) -> list[int]:
    """The ROW_FIELDS fields describing a node's rows ``arrays`` (up to three, C-contiguous, of the dtypes the
    kind says; the caller keeps them alive)."""
    fields = [kind, int(final)]
    for array in arrays:
        fields += [array.ctypes.data, len(array)]
    return fields + [0] * (ROW_FIELDS - len(fields))

@njit(**_KERNEL)
def _dead_flags(class_bounds, classes, y_bounds, Y, z_bounds, Z, size, order, position, starts, ends, offsets,
                dense_row, dense, scratch, all_ones):
    """For row r and each class c of ``classes[class_bounds[r]:class_bounds[r + 1]]``: whether F[c] holds every
    token of the row's Y and none of its Z. Each class stops at its first counter-example (most fail on the
    first probe or two); packed classes answer a probe with one bit. A row with at least ``_UNPACK_MIN`` tokens
    to hold unpacks an unpacked class into ``scratch`` (all zero, and left so) first: |F[c]| >= |Y| bit flips,
    then a bit a probe, instead of a binary search a probe."""
    dead = np.zeros(len(classes), dtype=np.bool_)
    for r in range(len(class_bounds) - 1):
        need = y_bounds[r + 1] - y_bounds[r]
        for j in range(class_bounds[r], class_bounds[r + 1]):
            c = classes[j]
            if size[c] < need:
                continue
            row = dense_row[c]
            y, z = Y[y_bounds[r]:y_bounds[r + 1]], Z[z_bounds[r]:z_bounds[r + 1]]
            if row >= 0:
                ok = _all_bits(dense[row], y, True) and _all_bits(dense[row], z, False)
            elif need >= _UNPACK_MIN:
                flip_forbidden(scratch, all_ones, order, starts, ends, offsets[c], offsets[c + 1])
                ok = _all_bits(scratch, y, True) and _all_bits(scratch, z, False)
                flip_forbidden(scratch, all_ones, order, starts, ends, offsets[c], offsets[c + 1])
            else:
                lo, hi = offsets[c], offsets[c + 1]
                ok = (_all_members(y, True, position, starts, ends, lo, hi) and
                      _all_members(z, False, position, starts, ends, lo, hi))
            dead[j] = ok
    return dead


@njit(**_KERNEL)
def _block_index(starts, ends, num_blocks):
    """For each block of ``2**_BLOCK_BITS`` permutation positions, the intervals overlapping it:
    ``intervals[offsets[b]:offsets[b + 1]]``, ascending. (A counting sort like ``automata.dfa.group_by``, over
    (block, interval) pairs it never materialises: expanding the 1.6 M pairs of Llama-3's 1.2 M intervals for
    ``group_by`` took 35-50 ms and ~40 MB of temporaries, this 15-19 ms.)"""
    offsets = np.zeros(num_blocks + 1, dtype=np.int64)
    for i in range(len(starts)):
        for b in range(starts[i] >> _BLOCK_BITS, ((ends[i] - 1) >> _BLOCK_BITS) + 1):
            offsets[b + 1] += 1
    for b in range(num_blocks):
        offsets[b + 1] += offsets[b]
    fill = offsets[:-1].copy()
    intervals = np.empty(offsets[num_blocks], dtype=np.int32)
    for i in range(len(starts)):
        for b in range(starts[i] >> _BLOCK_BITS, ((ends[i] - 1) >> _BLOCK_BITS) + 1):
            intervals[fill[b]] = i
            fill[b] += 1
    return offsets, intervals


@njit(**_KERNEL)
def _classes_holding(positions, offsets, intervals, starts, ends, interval_class, num_classes):
    """bool[len(positions), num_classes]: whether F[c] holds the token at each permutation position, testing only
    the intervals that overlap the position's block."""
    held = np.zeros((len(positions), num_classes), dtype=np.bool_)
    for j in range(len(positions)):
        p = positions[j]
        for k in range(offsets[p >> _BLOCK_BITS], offsets[(p >> _BLOCK_BITS) + 1]):
            i = intervals[k]
            if starts[i] <= p < ends[i]:
                held[j, interval_class[i]] = True
    return held


def pack(tokens: np.ndarray, num_words: int) -> np.ndarray:
    """uint32[num_words] with the bits of ``tokens`` set (bit ``t % 32`` of word ``t // 32``)."""
    words = np.zeros(num_words, dtype=np.uint32)
    set_bits(words, np.ascontiguousarray(tokens, dtype=np.int32))
    return words


class ForbiddenSets:
    """Queries on one automaton's forbidden sets F[mc]: masks (packed words) and liveness (set relations).

    Invariant: ``dense_row[mc] >= 0`` iff F[mc] is packed in ``dense[dense_row[mc]]``; those are the classes
    with the most tokens, each at least ``DENSE_MIN``. It keeps the automaton's interval arrays, not the automaton:
    guides cache one per automaton in a weak-keyed table, which a reference back to the key would keep alive.
    """

    def __init__(self, automaton: CanonicalAutomaton):
        self.order, self.position = automaton.forbid_order, automaton.forbid_position
        self.starts, self.ends, self.offsets = automaton.forbid_starts, automaton.forbid_ends, automaton.forbid_offsets
        self.num_merge_classes = M = automaton.num_merge_classes
        self.vocab_size = automaton.vocab_size
        self.num_words = (automaton.vocab_size + 31) // 32
        counts = np.diff(automaton.forbid_offsets)
        self.size = np.bincount(np.repeat(np.arange(M), counts), minlength=M,
                                weights=automaton.forbid_ends - automaton.forbid_starts).astype(np.int64)
        self._by_size = np.argsort(-self.size, kind="stable")
        self._sorted_sizes = -self.size[self._by_size]

        most = DENSE_BUDGET_BYTES // (4 * self.num_words)
        dense = self._by_size[: min(int(np.searchsorted(self._sorted_sizes, -DENSE_MIN, side="right")), most)]
        self.dense_row = np.full(M, -1, dtype=np.int64)
        self.dense_row[dense] = np.arange(len(dense))
        self.dense = np.zeros((len(dense), self.num_words), dtype=np.uint32)
        self._per_thread = threading.local()  # _dead_flags' scratch: guides of one automaton compile in parallel
        self._stabbing = None  # (block offsets, block intervals, class of each interval), built on first use
        self._all_ones = np.full(self.num_words, np.uint32(0xFFFFFFFF))
        for row, mc in enumerate(dense.tolist()):
            self._flip(self.dense[row], self._all_ones, mc)
        self.table = self._pointer_table()

    def __getstate__(self) -> dict:
        """Pickled with a guide (e.g. to a worker process), without the per-thread scratch rows."""
        state = self.__dict__.copy()
        for unpicklable in ("_per_thread", "table", "_table_arrays"):  # addresses are this process's
            del state[unpicklable]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._per_thread = threading.local()
        self.table = self._pointer_table()

    def _scratch(self) -> np.ndarray:
        """This thread's row for ``_dead_flags`` to unpack a class into (all zero between calls)."""
        scratch = getattr(self._per_thread, "scratch", None)
        if scratch is None:
            scratch = self._per_thread.scratch = np.zeros(self.num_words, dtype=np.uint32)
        return scratch

    def _flip(self, words: np.ndarray, flips: np.ndarray, mc: int) -> None:
        flip_forbidden(words, flips, self.order, self.starts, self.ends, int(self.offsets[mc]),
                        int(self.offsets[mc + 1]))

    def _pointer_table(self) -> np.ndarray:
        """The table the mask kernels read (``TABLE_NUM_WORDS`` and (address, length) per array); the arrays it points
        into are this object's own, never changed after construction."""
        table = np.zeros(TABLE_SIZE, dtype=np.int64)
        table[TABLE_NUM_WORDS] = self.num_words
        self._table_arrays = []
        for slot, array, dtype in ((TABLE_ORDER, self.order, np.int32), (TABLE_POSITION, self.position, np.int32),
                                   (TABLE_STARTS, self.starts, np.int32), (TABLE_ENDS, self.ends, np.int32),
                                   (TABLE_OFFSETS, self.offsets, np.int64), (TABLE_DENSE_ROW, self.dense_row, np.int64),
                                   (TABLE_DENSE, self.dense, np.uint32)):
            array = np.ascontiguousarray(array, dtype=dtype)  # a copy only if the automaton stored another dtype
            self._table_arrays.append(array)
            table[slot], table[slot + 1] = array.ctypes.data, len(array)
        return table

    # ---- liveness -----------------------------------------------------------------------------------------
    def dead_flags(self, class_bounds: np.ndarray, classes: np.ndarray, y_bounds: np.ndarray, Y: np.ndarray,
                   z_bounds: np.ndarray, Z: np.ndarray) -> np.ndarray:
        """For many rows at once (row r: candidate classes ``classes[class_bounds[r]:class_bounds[r + 1]]``,
        token sets ``Y[y_bounds[r]:...]`` and ``Z[z_bounds[r]:...]``): bool per candidate, whether
        Y ⊆ F[c] and Z ∩ F[c] = ∅."""
        return _dead_flags(class_bounds, classes.astype(np.int64, copy=False), y_bounds, Y, z_bounds, Z,
                           self.size, self.order, self.position, self.starts, self.ends, self.offsets,
                           self.dense_row, self.dense, self._scratch(), self._all_ones)

    def dead_classes(self, Y: np.ndarray, Z: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """The merge classes mc among ``classes`` with Y ⊆ F[mc] and Z ∩ F[mc] = ∅ (one row of ``dead_flags``).

        A node with a wide row can have every class as a candidate (14k on GPT-2, 36k on Llama-3), and probing a
        class costs a binary search over its intervals (Llama-3, Y of one token over 36k classes: 7 ms). So with
        many candidates, up to ``_HELD_TOKENS`` tokens (Y's first) are answered for every class at once from a
        stabbing index (the intervals overlapping each block of positions), and only the classes that pass are
        probed with the rest. With nothing to hold or avoid, every candidate is dead."""
        if not len(Y) and not len(Z):
            return classes
        if len(classes) > 256:
            in_y = Y[:_HELD_TOKENS]
            in_z = Z[: _HELD_TOKENS - len(in_y)]
            positions = self.position[np.concatenate([in_y, in_z]).astype(np.int64)].astype(np.int64)
            held = _classes_holding(positions, *self._stabbing_index(), self.num_merge_classes)
            dead = held[: len(in_y)].all(axis=0) & ~held[len(in_y):].any(axis=0)
            classes = classes[dead[classes]]
            if len(in_y) + len(in_z) == len(Y) + len(Z) or not len(classes):
                return classes
        one = lambda n: np.array([0, n], dtype=np.int64)  # noqa: E731
        flags = self.dead_flags(one(len(classes)), classes, one(len(Y)), Y.astype(np.int32, copy=False),
                                one(len(Z)), Z.astype(np.int32, copy=False))
        return classes[flags]

    def _stabbing_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._stabbing is None:
            num_blocks = (self.vocab_size >> _BLOCK_BITS) + 1
            offsets, intervals = _block_index(self.starts, self.ends, num_blocks)
            interval_class = np.repeat(np.arange(self.num_merge_classes, dtype=np.int32), np.diff(self.offsets))
            self._stabbing = (offsets, intervals, self.starts, self.ends, interval_class)
        return self._stabbing

    def classes_by_size(self, at_least: int) -> np.ndarray:
        """The merge classes whose forbidden set has at least ``at_least`` tokens, largest first."""
        return self._by_size[: np.searchsorted(self._sorted_sizes, -at_least, side="right")]
