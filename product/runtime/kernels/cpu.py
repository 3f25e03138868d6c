"""The compiled (numba) mask kernels on the CPU: a node's rows and a merge class into a mask, masks kept in and
copied from a guide's mask cache, batches of masks across guides, and packed masks applied to logits.

A mask is ``X | (Y - F[mc]) | (Z & F[mc])`` over a sparse row, or ``XY ^ (D & F[mc])`` over a dense one
(``product.compiler.tables`` explains X, Y, Z; ``product.compiler.forbidden`` the forbidden sets F[mc], why the
largest are packed once, and the layout of the row descriptors and of the forbidden sets' table read here). The
kernels take addresses (``product.runtime.kernels.pointers``), not arrays: numba charges ~0.1 µs per array argument,
more than a cached mask costs. Nothing here allocates per mask; the GIL is released (``nogil``) where masks are
computed.

Leaves out: which rows a node has (``product.compiler``), the cache index itself (``product.runtime.mask_cache``),
the guide's step (``product.runtime.kernels.step``) and logits on a device (``product.runtime.kernels.device``).
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba import carray, njit, prange

from product.compiler.forbidden import (
    ROW_DENSE,
    ROW_FIELDS,
    ROW_NONE,
    ROW_SPARSE,
    ROW_SPARSE_PACKED,
    TABLE_DENSE,
    TABLE_DENSE_ROW,
    TABLE_ENDS,
    TABLE_NUM_WORDS,
    TABLE_OFFSETS,
    TABLE_ORDER,
    TABLE_POSITION,
    TABLE_SIZE,
    TABLE_STARTS,
    flip_forbidden,
    set_bits,
)
from product.runtime.kernels.pointers import int32_at, int64_at, uint32_at
from product.runtime.mask_cache import find as cache_find
from product.runtime.mask_cache import holds as cache_holds
from product.runtime.mask_cache import lookup as cache_lookup
from product.runtime.mask_cache import take as cache_take

__all__ = ["fill_mask", "fill_mask_at", "keep_mask", "copy_cached_mask", "batch_copy", "batch_compute",
           "batch_keep", "clear_bits", "mask_logit_rows", "COMPUTE", "DONE", "NO_ROOM", "BATCH_FIELDS",
           "BATCH_CACHE", "BATCH_SLABS", "BATCH_NUM_STATES", "BATCH_FORBIDDEN", "BATCH_DESCRIPTORS", "BATCH_M",
           "BATCH_EOS", "BATCH_NUM_EOS", "parallel_threads", "PARALLEL_MIN_ROWS"]

_KERNEL = dict(cache=True, nogil=True, boundscheck=False)

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

@njit(inline="always")
def _int32s(table, k):
    return carray(int32_at(table[k]), table[k + 1])


@njit(**_KERNEL)
def _fill_one(words, table, descriptor, merge_class, eos):
    """``words`` = the mask of merge class ``merge_class`` in the node ``descriptor`` describes (its address)."""
    row = int64_at(descriptor)
    kind, num_words = row[0], table[TABLE_NUM_WORDS]
    lo, hi = int64_at(table[TABLE_OFFSETS])[merge_class], int64_at(table[TABLE_OFFSETS])[merge_class + 1]
    if kind == ROW_DENSE:
        XY, D = uint32_at(row[2]), uint32_at(row[4])
        dense_row = int64_at(table[TABLE_DENSE_ROW])[merge_class]
        if dense_row >= 0:
            F = uint32_at(table[TABLE_DENSE] + 4 * dense_row * num_words)
            for w in range(num_words):
                words[w] = XY[w] ^ (D[w] & F[w])
        else:
            for w in range(num_words):
                words[w] = XY[w]
            flip_forbidden(words, carray(D, num_words), _int32s(table, TABLE_ORDER), _int32s(table, TABLE_STARTS),
                            _int32s(table, TABLE_ENDS), lo, hi)
    else:
        if kind == ROW_SPARSE_PACKED:
            X = uint32_at(row[2])
            for w in range(num_words):
                words[w] = X[w]
        else:
            words[:] = 0
            if kind == ROW_SPARSE:
                set_bits(words, carray(int32_at(row[2]), row[3]))
        if kind != ROW_NONE:
            position, starts, ends = _int32s(table, TABLE_POSITION), _int32s(table, TABLE_STARTS), _int32s(table, TABLE_ENDS)
            _set_if_member(words, carray(int32_at(row[4]), row[5]), False, position, starts, ends, lo, hi)
            _set_if_member(words, carray(int32_at(row[6]), row[7]), True, position, starts, ends, lo, hi)
    if row[1]:
        for t in eos:
            words[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@njit("void(uint32[::1], int64[::1], int64, int64, int64[::1])", **_KERNEL)
def fill_mask(words, table, descriptor, merge_class, eos):
    """``words`` (uint32[num_words]) = the mask of merge class ``merge_class`` in the node whose row descriptor is
    at address ``descriptor``, with the forbidden sets' ``table`` (``ForbiddenSets.table``): X | (Y - F[mc]) |
    (Z & F[mc]), or XY ^ (D & F[mc]); the ``eos`` tokens too where the node is final. Nothing is allocated; the
    GIL is released."""
    _fill_one(words, table, descriptor, merge_class, eos)


@njit("void(int64, int64[::1], int64, int64, int64[::1])", **_KERNEL)
def fill_mask_at(address, table, descriptor, merge_class, eos):
    """``fill_mask`` into the ``num_words`` words at ``address`` (a caller's buffer, read without numpy)."""
    _fill_one(carray(uint32_at(address), table[TABLE_NUM_WORDS]), table, descriptor, merge_class, eos)


@njit(inline="always")
def _slot_row(slab_addresses, slab_rows, num_words, slot):
    """The cached mask in ``slot``: row ``slot % slab_rows`` of slab ``slot // slab_rows`` (the slabs' addresses at
    ``slab_addresses``)."""
    return uint32_at(int64_at(slab_addresses)[slot // slab_rows] + 4 * num_words * (slot % slab_rows))


@njit("int64(int64, int64, int64, int64, int64, int64)", cache=True, boundscheck=False)
def copy_cached_mask(cache_address, slab_addresses, slab_rows, num_words, state, address):
    """If ``state``'s mask is cached (the cache's record at ``cache_address``, its slabs' address table at
    ``slab_addresses``): copy it to the ``num_words`` words at ``address``, the state becoming the most recently
    used, and return its slot; else -1. One compiled call for a cached mask, under the cache's lock, the GIL kept."""
    slot = cache_lookup(int64_at(cache_address), state)
    if slot >= 0:
        cached = _slot_row(slab_addresses, slab_rows, num_words, slot)
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
        cached = _slot_row(slab_addresses, slab_rows, num_words, slot)
        row = uint32_at(address)
        for w in range(num_words):
            cached[w] = row[w]
    return slot


# A batch of masks across guides, in three compiled calls. Entry k is state ``states[k]`` of the guide whose mask
# cache keeps it, ``owner_of[k]``; its mask is node rows' (merge class and all) of state ``inner[k]`` of guide
# ``maker_of[k]`` (the owner itself for a regex guide, a fragment's guide for a schema's; -1: the caller computes it,
# e.g. a counter's mask), and goes to the ``num_words`` words at ``out_addresses[k]`` (distinct rows). Row g of
# ``guides`` (int64[G, BATCH_FIELDS]) holds what an owner needs (its mask cache's record, ``product.runtime.mask_cache``,
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
        _copy_words(uint32_at(out_addresses[k]), _slot_row(guides[owner_of[k], BATCH_SLABS], slab_rows, num_words, source[k]),
                    num_words)


@njit(inline="always")
def _compute_entry(guides, maker_of, inner, out_addresses, num_words, kind, k):
    g = maker_of[k]
    if kind[k] == COMPUTE and g >= 0:
        node = inner[k] // guides[g, BATCH_M]
        _fill_one(carray(uint32_at(out_addresses[k]), num_words),
                  carray(int64_at(guides[g, BATCH_FORBIDDEN]), TABLE_SIZE),
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
        _copy_words(_slot_row(guides[owner_of[k], BATCH_SLABS], slab_rows, num_words, source[k]), row, num_words)


# Each pass serial and parallel (range / prange: one Python function compiled twice would share numba's on-disk
# cache entry, and the parallel one would be the serial one). No signatures: a signature makes numba compile at
# import, and the batch passes (the parallel ones most of it, ~3.4 s) are compiled on their first call instead, so
# a process that never fills a batch does not pay for them (a fresh install's import: 11.9 -> 5.7 s).


@njit(**_KERNEL)
def _batch_copy(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    computed = _plan(guides, owner_of, states, kind, source)
    for k in range(len(states) if computed >= 0 else 0):
        _copy_entry(guides, owner_of, out_addresses, num_words, slab_rows, kind, source, k)
    return computed


@njit(parallel=True, **_KERNEL)
def _batch_copy_parallel(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    computed = _plan(guides, owner_of, states, kind, source)
    rows = len(states) if computed >= 0 else 0  # a bound numba's prange takes (not a conditional expression)
    for k in prange(rows):
        _copy_entry(guides, owner_of, out_addresses, num_words, slab_rows, kind, source, k)
    return computed


@njit(**_KERNEL)
def _batch_compute(guides, maker_of, inner, out_addresses, num_words, kind):
    for k in range(len(inner)):
        _compute_entry(guides, maker_of, inner, out_addresses, num_words, kind, k)


@njit(parallel=True, **_KERNEL)
def _batch_compute_parallel(guides, maker_of, inner, out_addresses, num_words, kind):
    for k in prange(len(inner)):
        _compute_entry(guides, maker_of, inner, out_addresses, num_words, kind, k)


@njit(**_KERNEL)
def _batch_keep(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source):
    _take_slots(guides, owner_of, states, kind, source)
    for k in range(len(states)):
        _keep_entry(guides, owner_of, states, out_addresses, num_words, slab_rows, kind, source, k)


@njit(parallel=True, **_KERNEL)
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


@njit(cache=True, nogil=True, boundscheck=False)
def clear_bits(words, tokens):
    """Clear the bits of ``tokens`` in ``words`` (a counted guide's mask near its bound)."""
    for t in tokens:
        words[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))


@njit(cache=True, nogil=True, boundscheck=False)
def mask_logit_rows(out, words, rows, covered, neg_inf):
    """Packed masks applied to logits on the CPU (``apply_bitmask``'s ``cpu`` backend, on an integer view of the
    logits): out[r, c] = neg_inf for r in rows, c < covered with bit c clear, and covered <= c < width. Whole words
    are decided at once (all set: skipped; all clear: a plain fill the compiler vectorises), mixed ones bit by
    bit."""
    width = out.shape[1]
    full = np.uint32(0xFFFFFFFF)
    for r in rows:
        line, bits = out[r], words[r]
        whole = covered >> 5
        for w in range(whole):
            x = bits[w]
            base = w << 5
            if x == full:
                continue
            if x == 0:
                for c in range(base, base + 32):
                    line[c] = neg_inf
                continue
            for j in range(32):  # branch-free: a select the compiler vectorises
                keep = (x >> np.uint32(j)) & np.uint32(1)
                line[base + j] = line[base + j] if keep else neg_inf
        if covered & 31:
            x = bits[whole]
            base = whole << 5
            for j in range(covered - base):
                if not (x >> np.uint32(j)) & np.uint32(1):
                    line[base + j] = neg_inf
        for c in range(covered, width):
            line[c] = neg_inf
