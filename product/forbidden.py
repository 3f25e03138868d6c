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

A mask is ``XY ^ (D & F[mc])`` (``product.guide`` explains X, Y, Z; ``XY = X | Y``, ``D = XY ^ (X | Z)``): the
tokens of F[mc] take their bit from ``X | Z`` instead of ``X | Y``.

Leaves out: which tokens a node allows (``product.guide``); the interval representation itself
(``bpe.automaton``).
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba import carray, njit, prange

from bpe.automaton import CanonicalAutomaton
from product._mask_cache import find as cache_find, holds as cache_holds, lookup as cache_lookup, take as cache_take
from product._pointers import int32_at, int64_at, uint32_at

__all__ = ["ForbiddenSets", "pack", "keep_mask", "copy_cached_mask", "batch_copy", "batch_compute", "batch_keep",
           "COMPUTE", "DONE", "NO_ROOM", "BATCH_FIELDS", "BATCH_CACHE", "BATCH_SLABS", "BATCH_NUM_STATES", "BATCH_FORBIDDEN",
           "BATCH_DESCRIPTORS", "BATCH_M", "BATCH_EOS", "BATCH_NUM_EOS", "parallel_threads", "PARALLEL_MIN_ROWS", "ROW_NONE", "ROW_SPARSE",
           "ROW_SPARSE_PACKED", "ROW_DENSE", "ROW_FIELDS"]

DENSE_MIN = 8192  # classes forbidding this many tokens or more are packed once (see the module docstring)
DENSE_BUDGET_BYTES = 256 << 20  # ... unless that exceeds this; then only the largest classes that fit

_KERNEL = dict(cache=True, nogil=True, boundscheck=False)
_BLOCK_BITS = 8  # the stabbing index's blocks: 256 positions (GPT-2: 2.0k intervals a block, Llama-3: 3.3k)
_UNPACK_MIN = 256  # dead_flags unpacks a class to test at least this many tokens against it
_HELD_TOKENS = 4  # dead_classes answers up to this many tokens for every class at once


@njit("void(uint32[::1], int32[::1])", **_KERNEL)
def _set_bits(words, tokens):
    for t in tokens:
        words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@njit("void(uint32[::1], uint32[::1], int32[::1], int32[::1], int32[::1], int64, int64)", **_KERNEL)
def _flip_forbidden(words, flips, order, starts, ends, lo, hi):
    """For every token t of intervals ``lo:hi`` (ids ``order[starts[i]:ends[i]]``): words ^= flips at bit t."""
    for i in range(lo, hi):
        for p in range(starts[i], ends[i]):
            t = order[p]
            w = t >> 5
            words[w] ^= flips[w] & (np.uint32(1) << np.uint32(t & 31))


# Membership of a token in F[mc] is a binary search over the class's intervals (sorted, disjoint) for the token's
# permutation position. The loops below write the search out: as a function called once per token (even with
# numba's inline="always") it cost 1.4-2x more, and a 16.8k-token bit test through a helper 40x.

@njit("void(uint32[::1], int32[::1], boolean, int32[::1], int32[::1], int32[::1], int64, int64)", **_KERNEL)
def _set_if_member(words, tokens, member, position, starts, ends, lo, hi):
    """Set the bit of each token whose membership in the intervals ``lo:hi`` is ``member``."""
    for t in tokens:
        p = position[t]
        a, b = lo, hi
        while a < b:  # a becomes the first interval starting after p
            mid = (a + b) >> 1
            if starts[mid] <= p:
                a = mid + 1
            else:
                b = mid
        if (a > lo and p < ends[a - 1]) == member:
            words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@njit(**_KERNEL)
def _all_members(tokens, member, position, starts, ends, lo, hi):
    """Whether every token's membership in the intervals ``lo:hi`` is ``member`` (stops at the first that is not)."""
    for t in tokens:
        p = position[t]
        a, b = lo, hi
        while a < b:
            mid = (a + b) >> 1
            if starts[mid] <= p:
                a = mid + 1
            else:
                b = mid
        if (a > lo and p < ends[a - 1]) != member:
            return False
    return True


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
_NUM_WORDS, _ORDER, _POSITION, _STARTS, _ENDS, _OFFSETS, _DENSE_ROW, _DENSE, _TABLE_SIZE = 0, 1, 3, 5, 7, 9, 11, 13, 15


@njit(inline="always")
def _int32s(table, k):
    return carray(int32_at(table[k]), table[k + 1])


@njit(**_KERNEL)
def _fill_one(words, table, descriptor, merge_class, eos):
    """``words`` = the mask of merge class ``merge_class`` in the node ``descriptor`` describes (its address)."""
    row = int64_at(descriptor)
    kind, num_words = row[0], table[_NUM_WORDS]
    lo, hi = int64_at(table[_OFFSETS])[merge_class], int64_at(table[_OFFSETS])[merge_class + 1]
    if kind == ROW_DENSE:
        XY, D = uint32_at(row[2]), uint32_at(row[4])
        dense_row = int64_at(table[_DENSE_ROW])[merge_class]
        if dense_row >= 0:
            F = uint32_at(table[_DENSE] + 4 * dense_row * num_words)
            for w in range(num_words):
                words[w] = XY[w] ^ (D[w] & F[w])
        else:
            for w in range(num_words):
                words[w] = XY[w]
            _flip_forbidden(words, carray(D, num_words), _int32s(table, _ORDER), _int32s(table, _STARTS),
                            _int32s(table, _ENDS), lo, hi)
    else:
        if kind == ROW_SPARSE_PACKED:
            X = uint32_at(row[2])
            for w in range(num_words):
                words[w] = X[w]
        else:
            words[:] = 0
            if kind == ROW_SPARSE:
                _set_bits(words, carray(int32_at(row[2]), row[3]))
        if kind != ROW_NONE:
            position, starts, ends = _int32s(table, _POSITION), _int32s(table, _STARTS), _int32s(table, _ENDS)
            _set_if_member(words, carray(int32_at(row[4]), row[5]), False, position, starts, ends, lo, hi)
            _set_if_member(words, carray(int32_at(row[6]), row[7]), True, position, starts, ends, lo, hi)
    if row[1]:
        for t in eos:
            words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@njit("void(uint32[::1], int64[::1], int64, int64, int64[::1])", **_KERNEL)
def _fill_mask(words, table, descriptor, merge_class, eos):
    _fill_one(words, table, descriptor, merge_class, eos)


@njit("void(int64, int64[::1], int64, int64, int64[::1])", **_KERNEL)
def _fill_mask_at(address, table, descriptor, merge_class, eos):
    _fill_one(carray(uint32_at(address), table[_NUM_WORDS]), table, descriptor, merge_class, eos)


@njit("int64(int64, int64, int64, int64, int64, int64)", cache=True, boundscheck=False)
def copy_cached_mask(cache_address, slab_addresses, slab_rows, num_words, state, address):
    """If ``state``'s mask is cached (the cache's record at ``cache_address``, its slabs' address table at
    ``slab_addresses``): copy it to the ``num_words`` words at ``address``, the state becoming the most recently
    used, and return its slot; else -1. One compiled call for a cached mask, under the cache's lock, the GIL kept."""
    slot = cache_lookup(int64_at(cache_address), state)
    if slot >= 0:
        cached = uint32_at(int64_at(slab_addresses)[slot // slab_rows] + 4 * num_words * (slot % slab_rows))
        row = uint32_at(address)
        for w in range(num_words):
            row[w] = cached[w]
    return slot


@njit("int64(int64, int64, int64, int64, int64, int64)", cache=True, boundscheck=False)
def keep_mask(cache_address, slab_addresses, slab_rows, num_words, state, address):
    """Keep the mask of ``state`` just computed at ``address`` in the cache (``copy_cached_mask``'s arguments): a slot
    taken (the least recently used state evicted) and the row copied there, unless the state is cached already
    (another thread kept it). Returns the slot, or -1 when the cache's record needs room first (``reserve``)."""
    cache = int64_at(cache_address)
    slot = cache_find(cache, state)
    if slot >= 0:
        return slot
    slot = cache_take(cache, state)
    if slot >= 0:
        cached = uint32_at(int64_at(slab_addresses)[slot // slab_rows] + 4 * num_words * (slot % slab_rows))
        row = uint32_at(address)
        for w in range(num_words):
            cached[w] = row[w]
    return slot


# A batch of masks across guides, in three compiled calls. Entry k is state ``states[k]`` of the guide whose mask
# cache keeps it, ``owner_of[k]``; its mask is node rows' (merge class and all) of state ``inner[k]`` of guide
# ``maker_of[k]`` (the owner itself for a regex guide, a fragment's guide for a schema's; -1: the caller computes it,
# e.g. a counter's mask), and goes to the ``num_words`` words at ``out_addresses[k]`` (distinct rows). Row g of
# ``guides`` (int64[G, BATCH_FIELDS]) holds what an owner needs (its mask cache's record, ``product._mask_cache``,
# its slabs' address table and, when its states are exactly 0 .. n - 1, n: checked first) and what a maker needs (its forbidden table, its first row descriptor's address,
# M and its EOS ids). The caller holds every owner's lock around ``batch_copy`` and ``batch_keep``, not
# ``batch_compute``, so other threads use the guides while masks are computed (as ``Guide.fill_bitmask`` does for
# one state).
#   batch_copy (serial, then parallel): an entry repeating an earlier entry's (owner, state) is a repeat of it; an
#     entry whose state is cached (then the most recently used) copies its slot's row; the others are computed.
#   batch_compute (parallel): the masks of the entries to compute that have a maker, into their rows.
#   batch_keep (serial, then parallel): each computed state not cached meanwhile takes a slot (the least recently
#     used state evicted; NO_ROOM where the cache's record must grow first), and its row is copied there unless a
#     later entry of the batch took the slot (a batch of more new states than the cache holds); repeats copy their
#     first entry's row.
# The serial parts are ~50 ns an entry; copies and masks, split over numba's threads, are the batch's time.
(BATCH_CACHE, BATCH_SLABS, BATCH_NUM_STATES, BATCH_FORBIDDEN, BATCH_DESCRIPTORS, BATCH_M, BATCH_EOS, BATCH_NUM_EOS,
 BATCH_FIELDS) = range(9)
# an entry's kind; DONE: computed, cached meanwhile by another thread; NO_ROOM: to keep once the cache has grown
_COPY, COMPUTE, _REPEAT, DONE, NO_ROOM = range(5)


@njit(inline="always")
def _slot_row(guides, g, slot, num_words, slab_rows):
    return uint32_at(int64_at(guides[g, BATCH_SLABS])[slot // slab_rows] + 4 * num_words * (slot % slab_rows))


@njit(inline="always")
def _copy_words(to, source, num_words):
    for w in range(num_words):
        to[w] = source[w]


@njit(**_KERNEL)
def _plan(guides, owner_of, states, kind, source):
    """batch_copy's serial part: each entry's kind and source (_COPY: its slot; _REPEAT: the first entry); returns
    how many entries are to compute, or -1 - k when entry k's state is out of its owner's range (nothing done)."""
    n = len(states)
    for k in range(n):
        limit = guides[owner_of[k], BATCH_NUM_STATES]
        if states[k] < 0 or (limit > 0 and states[k] >= limit):
            return -1 - k
    computed = 0
    buckets = 1  # (owner, state) -> first entry, open addressing over 2n to 4n buckets
    while buckets < 2 * n:
        buckets *= 2
    first_owner = np.full(buckets, -1, dtype=np.int64)
    first_state = np.empty(buckets, dtype=np.int64)
    first_entry = np.empty(buckets, dtype=np.int64)
    for k in range(n):
        g, state = owner_of[k], states[k]
        b = ((state * -7046029254386353131 + g) >> 17) & (buckets - 1)
        while first_owner[b] != -1 and (first_owner[b] != g or first_state[b] != state):
            b = (b + 1) & (buckets - 1)
        if first_owner[b] != -1:
            kind[k], source[k] = _REPEAT, first_entry[b]
            continue
        first_owner[b], first_state[b], first_entry[b] = g, state, k
        source[k] = cache_lookup(int64_at(guides[g, BATCH_CACHE]), state)
        kind[k] = _COPY if source[k] >= 0 else COMPUTE
        computed += source[k] < 0
    return computed


@njit(inline="always")
def _copy_entry(guides, owner_of, out_addresses, num_words, slab_rows, kind, source, k):
    if kind[k] == _COPY:
        _copy_words(uint32_at(out_addresses[k]), _slot_row(guides, owner_of[k], source[k], num_words, slab_rows),
                    num_words)


@njit(inline="always")
def _compute_entry(guides, maker_of, inner, out_addresses, num_words, kind, k):
    g = maker_of[k]
    if kind[k] == COMPUTE and g >= 0:
        node = inner[k] // guides[g, BATCH_M]
        _fill_one(carray(uint32_at(out_addresses[k]), num_words),
                  carray(int64_at(guides[g, BATCH_FORBIDDEN]), _TABLE_SIZE),
                  guides[g, BATCH_DESCRIPTORS] + node * 8 * ROW_FIELDS, inner[k] - node * guides[g, BATCH_M],
                  carray(int64_at(guides[g, BATCH_EOS]), guides[g, BATCH_NUM_EOS]))


@njit(**_KERNEL)
def _take_slots(guides, owner_of, states, kind, source):
    """batch_keep's serial part: a slot for each computed state not cached meanwhile (else DONE), NO_ROOM where the
    cache's record is full below its limit (the caller grows it and keeps those again)."""
    for k in range(len(states)):
        if kind[k] == COMPUTE:
            cache = int64_at(guides[owner_of[k], BATCH_CACHE])
            if cache_find(cache, states[k]) >= 0:
                kind[k] = DONE
            else:
                source[k] = cache_take(cache, states[k])
                if source[k] < 0:
                    kind[k] = NO_ROOM


@njit(inline="always")
def _keep_entry(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source, k):
    row = uint32_at(out_addresses[k])
    if kind[k] == _REPEAT:
        _copy_words(row, uint32_at(out_addresses[source[k]]), num_words)
    elif kind[k] == COMPUTE and cache_holds(int64_at(guides[owner_of[k], BATCH_CACHE]), source[k], states[k]):
        _copy_words(_slot_row(guides, owner_of[k], source[k], num_words, slab_rows), row, num_words)


# Each pass serial and parallel (range / prange: one Python function compiled twice would share numba's on-disk
# cache entry, and the parallel one would be the serial one).
_COPY_SIGNATURE = "int64(int64[:, ::1], int64[::1], int64[::1], int64[::1], int64, int64, int64[::1], int64[::1])"
_COMPUTE_SIGNATURE = "void(int64[:, ::1], int64[::1], int64[::1], int64[::1], int64, int64[::1])"
_KEEP_SIGNATURE = "void(int64[:, ::1], int64[::1], int64[::1], int64[::1], int64, int64, int64[::1], int64[::1])"


@njit(_COPY_SIGNATURE, **_KERNEL)
def _batch_copy(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    computed = _plan(guides, owner_of, states, kind, source)
    for k in range(len(states) if computed >= 0 else 0):
        _copy_entry(guides, owner_of, out_addresses, num_words, slab_rows, kind, source, k)
    return computed


@njit(_COPY_SIGNATURE, parallel=True, **_KERNEL)
def _batch_copy_parallel(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    computed = _plan(guides, owner_of, states, kind, source)
    rows = len(states) if computed >= 0 else 0  # a bound numba's prange takes (not a conditional expression)
    for k in prange(rows):
        _copy_entry(guides, owner_of, out_addresses, num_words, slab_rows, kind, source, k)
    return computed


@njit(_COMPUTE_SIGNATURE, **_KERNEL)
def _batch_compute(guides, maker_of, inner, out_addresses, num_words, kind):
    for k in range(len(inner)):
        _compute_entry(guides, maker_of, inner, out_addresses, num_words, kind, k)


@njit(_COMPUTE_SIGNATURE, parallel=True, **_KERNEL)
def _batch_compute_parallel(guides, maker_of, inner, out_addresses, num_words, kind):
    for k in prange(len(inner)):
        _compute_entry(guides, maker_of, inner, out_addresses, num_words, kind, k)


@njit(_KEEP_SIGNATURE, **_KERNEL)
def _batch_keep(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    _take_slots(guides, owner_of, states, kind, source)
    for k in range(len(states)):
        _keep_entry(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source, k)


@njit(_KEEP_SIGNATURE, parallel=True, **_KERNEL)
def _batch_keep_parallel(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    _take_slots(guides, owner_of, states, kind, source)
    for k in prange(len(states)):
        _keep_entry(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source, k)


_BATCH_COPY = (_batch_copy, _batch_copy_parallel)
_BATCH_COMPUTE = (_batch_compute, _batch_compute_parallel)
_BATCH_KEEP = (_batch_keep, _batch_keep_parallel)


def _batch_kernel(kernels, threads: int, rows: int):
    """The serial or the parallel kernel of ``kernels`` for a batch of ``rows`` over up to ``threads`` threads."""
    if parallel_threads(threads) > 1 and rows >= PARALLEL_MIN_ROWS:
        numba.set_num_threads(parallel_threads(threads))  # numba's setting is per calling thread
        return kernels[1]
    return kernels[0]


def batch_copy(guides, owner_of, states, out_addresses, num_words: int, slab_rows: int, threads: int = 1):
    """The batch's plan — each entry's kind (``COMPUTE`` for a mask to compute) and source, and the number of masks
    to compute — and its cached rows copied; see the passes above. The number is -1 - k, and nothing is done, when
    entry k's state is outside its owner's ``BATCH_NUM_STATES`` (where that is not 0)."""
    kind, source = np.empty(len(states), dtype=np.int64), np.empty(len(states), dtype=np.int64)
    computed = _batch_kernel(_BATCH_COPY, threads, len(states))(guides, owner_of, states, out_addresses, num_words,
                                                                slab_rows, kind, source)
    return kind, source, computed


def batch_compute(guides, maker_of, inner, out_addresses, num_words: int, kind, computed: int,
                  threads: int = 1) -> None:
    """The ``computed`` masks to compute; see the passes above."""
    _batch_kernel(_BATCH_COMPUTE, threads, computed)(guides, maker_of, inner, out_addresses, num_words, kind)


def batch_keep(guides, owner_of, states, out_addresses, num_words: int, slab_rows: int, kind, source,
               threads: int = 1) -> None:
    """The new masks kept and the repeats copied; see the passes above."""
    _batch_kernel(_BATCH_KEEP, threads, len(states))(guides, owner_of, states, out_addresses, num_words, slab_rows,
                                                     kind, source)


# A parallel region costs ~3-10 µs to start on the development VM (ms with a busy CPU) and a mask ~1-15 µs: 24 new
# rows of ~1 µs each took 190 µs on one thread and 318 on two; with 16 as the threshold the bench's 64-row batches
# were 0.5-0.9x as fast on two threads as on one (docs/serving.md, "Threads"). A pass over fewer rows than this
# runs on the calling thread.
PARALLEL_MIN_ROWS = 64
_threadsafe_layer: bool | None = None
_LAYER_LOCK = threading.Lock()


def parallel_threads(threads: int) -> int:
    """How many of numba's threads a parallel kernel may use when the caller asks for ``threads``: at most numba's
    pool, and 1 unless numba's threading layer is OpenMP or TBB — its fallback ("workqueue") aborts the process
    when two Python threads launch parallel kernels at once, and a guide serves many threads. The layer is known
    after a first parallel launch, made once here. (Python threads were tried first: on the 2-CPU development VM
    handing a piece to a pool thread and back cost ~100 µs, more than a 64-row batch of masks; OpenMP's threads
    take a launch in ~2 µs.)"""
    global _threadsafe_layer
    if threads <= 1:
        return 1
    if _threadsafe_layer is None:
        with _LAYER_LOCK:
            if _threadsafe_layer is None:
                nothing = np.array([DONE], dtype=np.int64)  # one entry with nothing to do: the layer starts
                _BATCH_COMPUTE[1](np.zeros((1, BATCH_FIELDS), dtype=np.int64), nothing, nothing, nothing, 0, nothing)
                _threadsafe_layer = numba.threading_layer() in ("omp", "tbb")
    return min(threads, numba.config.NUMBA_NUM_THREADS) if _threadsafe_layer else 1


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
                _flip_forbidden(scratch, all_ones, order, starts, ends, offsets[c], offsets[c + 1])
                ok = _all_bits(scratch, y, True) and _all_bits(scratch, z, False)
                _flip_forbidden(scratch, all_ones, order, starts, ends, offsets[c], offsets[c + 1])
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
    _set_bits(words, np.ascontiguousarray(tokens, dtype=np.int32))
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
        _flip_forbidden(words, flips, self.order, self.starts, self.ends, int(self.offsets[mc]),
                        int(self.offsets[mc + 1]))

    # ---- masks --------------------------------------------------------------------------------------------
    def fill_mask(self, words: np.ndarray, descriptor: int, mc: int, eos: np.ndarray) -> None:
        """``words`` (uint32[num_words]) = the mask of merge class ``mc`` in the node whose row descriptor is at
        address ``descriptor``: X | (Y - F[mc]) | (Z & F[mc]), or XY ^ (D & F[mc]); the ``eos`` tokens too where
        the node is final. Nothing is allocated; the GIL is released."""
        _fill_mask(words, self.table, descriptor, mc, eos)

    def fill_mask_at(self, address: int, descriptor: int, mc: int, eos: np.ndarray) -> None:
        """``fill_mask`` into the ``num_words`` words at ``address`` (a caller's buffer, read without numpy)."""
        _fill_mask_at(address, self.table, descriptor, mc, eos)

    def _pointer_table(self) -> np.ndarray:
        """The table the mask kernels read (``_NUM_WORDS`` and (address, length) per array); the arrays it points
        into are this object's own, never changed after construction."""
        table = np.zeros(_TABLE_SIZE, dtype=np.int64)
        table[_NUM_WORDS] = self.num_words
        self._table_arrays = []
        for slot, array, dtype in ((_ORDER, self.order, np.int32), (_POSITION, self.position, np.int32),
                                   (_STARTS, self.starts, np.int32), (_ENDS, self.ends, np.int32),
                                   (_OFFSETS, self.offsets, np.int64), (_DENSE_ROW, self.dense_row, np.int64),
                                   (_DENSE, self.dense, np.uint32)):
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
