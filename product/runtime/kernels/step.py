"""``Guide.advance``'s step as one compiled call: check the token against the state's cached mask, then move.

A step reads a dozen arrays (the node's regex state and context, the regex's token row, the canonical
automaton's moves and forbidden intervals, the cached mask row). In Python it was ~3 µs of memoryview reads,
bisects and dict lookups, ~6 µs in a decoding loop; compiled it is a few dozen nanoseconds of work, and the
arrays are handed over once, as one table of sizes and addresses (``StepTable``; see ``product.runtime.kernels.pointers``):
five ints a call (~0.3 µs).

The table holds raw addresses, so it keeps every array it points into alive (``StepTable.arrays``) and only
points into arrays that never change after a guide is compiled. The mask rows live in slabs the guide adds as
its cache grows; the table points to the guide's fixed array of slab addresses, which it fills in.

Leaves out: errors (the kernel returns a code; the guide raises the typed error and writes its message) and
counted or stitched guides (their steps move more than a node; they keep their own).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from automata.dfa import lower_bound
from product.compiler.forbidden import in_intervals
from product.runtime.kernels.pointers import int16_at as _i16
from product.runtime.kernels.pointers import int32_at as _i32
from product.runtime.kernels.pointers import int64_at as _i64
from product.runtime.kernels.pointers import uint32_at as _u32
from product.runtime.mask_cache import find as cache_find

__all__ = ["StepTable", "step", "BAD_STATE", "DISALLOWED", "UNCACHED", "INCONSISTENT"]

# What ``step`` returns besides a state (>= 0).
BAD_STATE = -1  # the state is no state of this guide
DISALLOWED = -2  # the token is not allowed in the state
UNCACHED = -3  # the state's mask is not cached and the caller did not say whether the token is allowed
INCONSISTENT = -4  # an allowed token without a move: the compiled guide is corrupt

# Slots of the table: sizes first, then addresses.
(_M, _NUM_NODES, _NUM_OPEN, _NUM_CONTEXTS, _VOCAB, _NUM_WORDS, _SLAB_ROWS, _NUM_EOS, _NUM_KEYS,
 _NODE_Q, _NODE_CTX, _OFFSETS, _TOKENS, _TARGETS, _KEYS, _KEY_NODES, _EOS,
 _INSIDE_NEXT, _BOUNDARY_NEXT, _AFTER_CLASS, _FORBID_OFFSETS, _FORBID_POSITION, _FORBID_STARTS, _FORBID_ENDS,
 _PENDING_OFFSETS, _PENDING_TOKENS, _PENDING_NEXT, _SLABS, _COMMON_TARGET, _COMMON_ROW, _COMMON_WORDS,
 _TABLE_SIZE) = range(32)


class StepTable:
    """The table ``step`` reads for one guide: ``table`` (int64[_TABLE_SIZE], at ``address``) and the arrays its addresses point
    into (``arrays``, kept alive with it; the mask slabs are the guide's, whose addresses it writes in
    ``slab_addresses`` as it adds them). Node lookup: ``keys`` (node q * contexts + ctx, ascending) with their
    node ids, so the kernel finds the node (q, ctx) by a binary search where Python used a dict.

    Invariant: every address points into an array of ``arrays`` of the dtype the kernel reads it as,
    C-contiguous; slab ``k``'s address is set before any slot of it is passed to ``step``."""

    def __init__(self, guide, slab_rows: int, slab_addresses: np.ndarray) -> None:
        A = guide._automaton
        R = guide._transitions
        common_target, common_row, common_words = R.common_arrays(guide.num_words)
        num_contexts = A.num_open_contexts + len(A.pending_offsets) - 1
        keys = guide._node_q.astype(np.int64) * num_contexts + guide._node_ctx.astype(np.int64)
        order = np.argsort(keys, kind="stable")
        arrays = {
            _NODE_Q: (guide._node_q, np.int32), _NODE_CTX: (guide._node_ctx, np.int32),
            _OFFSETS: (R.offsets, np.int64), _TOKENS: (R.tokens, np.int32), _TARGETS: (R.targets, np.int32),
            _KEYS: (keys[order], np.int64), _KEY_NODES: (order, np.int64),
            _EOS: (np.array(guide.eos_token_ids, dtype=np.int64), np.int64),
            _INSIDE_NEXT: (A.inside_next, np.int16), _BOUNDARY_NEXT: (A.boundary_next, np.int16),
            _AFTER_CLASS: (A.after_class, np.int32), _FORBID_OFFSETS: (A.forbid_offsets, np.int64),
            _FORBID_POSITION: (A.forbid_position, np.int32), _FORBID_STARTS: (A.forbid_starts, np.int32),
            _FORBID_ENDS: (A.forbid_ends, np.int32), _PENDING_OFFSETS: (A.pending_offsets, np.int64),
            _PENDING_TOKENS: (A.pending_tokens, np.int32), _PENDING_NEXT: (A.pending_next, np.int16),
            _SLABS: (slab_addresses, np.int64),  # the guide's, filled in as its cache grows
            _COMMON_TARGET: (common_target, np.int32), _COMMON_ROW: (common_row, np.int32),
            _COMMON_WORDS: (common_words, np.uint32),
        }
        self.table = np.zeros(_TABLE_SIZE, dtype=np.int64)
        self.table[:_NODE_Q] = (guide._M, len(guide._node_q), A.num_open_contexts, num_contexts,
                                A.inside_next.shape[1], guide.num_words, slab_rows, len(guide.eos_token_ids),
                                len(keys))
        self.arrays = []
        for slot, (array, dtype) in arrays.items():
            # a copy only where the dtype differs (the automaton's arrays are stored in these dtypes)
            array = np.ascontiguousarray(array, dtype=dtype)
            self.arrays.append(array)
            self.table[slot] = array.ctypes.data
        self.address = self.table.ctypes.data


@njit(inline="always")
def _forbids(table, merge_class, token):
    """Whether ``merge_class`` forbids ``token`` inside a piece: the forbidden interval starting last at or
    before the token's position must cover it (``CanonicalAutomaton.forbids`` for one token)."""
    offsets = _i64(table[_FORBID_OFFSETS])
    return in_intervals(_i32(table[_FORBID_POSITION])[token], _i32(table[_FORBID_STARTS]), _i32(table[_FORBID_ENDS]),
                        offsets[merge_class], offsets[merge_class + 1])


@njit("int64(int64, int64, int64, int64, int64)", cache=True)
def step(table_address, state, token, cache_address, allowed):
    """The state after ``token`` (0 <= token < V, checked by the caller) from ``state``, or a code. ``table_address``:
    a ``StepTable``'s ``address``. (Five ints and the GIL kept: ~0.2 µs less a call than an array argument and a
    GIL released for a step that takes well under a microsecond.)

    Whether the token is allowed: bit ``token`` of the state's cached mask, if the mask cache at ``cache_address``
    (``product.runtime.mask_cache``; 0: do not look) holds it, else ``allowed`` (0 or 1; -1: not known, answered
    ``UNCACHED``). EOS leaves the state as it is. Otherwise the regex moves by the
    token's edge from the node's state, the canonical context and merge class move as
    ``CanonicalAutomaton.class_after`` says for an allowed token, and the node (q', ctx') is looked up."""
    table = _i64(table_address)
    M = table[_M]
    node = state // M
    mc = state - node * M
    if state < 0 or node >= table[_NUM_NODES]:
        return BAD_STATE
    slot = cache_find(_i64(cache_address), state) if cache_address != 0 else -1
    if slot >= 0:
        rows = table[_SLAB_ROWS]
        words = _u32(_i64(table[_SLABS])[slot // rows])
        bit = (words[(slot % rows) * table[_NUM_WORDS] + (token >> 5)] >> np.uint32(token & 31)) & np.uint32(1)
        allowed = np.int64(bit)
    elif allowed < 0:
        return UNCACHED
    if allowed == 0:
        return DISALLOWED
    eos = _i64(table[_EOS])
    for k in range(table[_NUM_EOS]):
        if eos[k] == token:
            return state
    # the regex state's edge for this token: its row's common target if the token is in the row's set, else a
    # binary search in the row's listed tokens (ascending)
    q = np.int64(_i32(table[_NODE_Q])[node])
    common_row = np.int64(_i32(table[_COMMON_ROW])[q])
    if common_row >= 0 and (_u32(table[_COMMON_WORDS])[common_row * table[_NUM_WORDS] + (token >> 5)]
                            >> np.uint32(token & 31)) & np.uint32(1):
        target = np.int64(_i32(table[_COMMON_TARGET])[q])
    else:
        offsets, tokens = _i64(table[_OFFSETS]), _i32(table[_TOKENS])
        i = lower_bound(tokens, offsets[q], offsets[q + 1], token)
        if i == offsets[q + 1] or tokens[i] != token:
            return INCONSISTENT
        target = np.int64(_i32(table[_TARGETS])[i])
    # the canonical context after the token (class_after with known_allowed=True)
    ctx = np.int64(_i32(table[_NODE_CTX])[node])
    num_open = table[_NUM_OPEN]
    if ctx < num_open:
        at = ctx * table[_VOCAB] + token
        next_ctx = np.int64(_i16(table[_INSIDE_NEXT])[at])
        boundary = np.int64(_i16(table[_BOUNDARY_NEXT])[at])
        if next_ctx < 0 or (boundary >= 0 and _forbids(table, mc, token)):
            next_ctx = boundary
    else:
        row = ctx - num_open
        pending_offsets, pending_tokens = _i64(table[_PENDING_OFFSETS]), _i32(table[_PENDING_TOKENS])
        lo, hi = pending_offsets[row], pending_offsets[row + 1]
        j = lower_bound(pending_tokens, lo, hi, token)
        if j == hi or pending_tokens[j] != token:
            return INCONSISTENT
        next_ctx = np.int64(_i16(table[_PENDING_NEXT])[j])
    if next_ctx < 0:
        return INCONSISTENT
    next_mc = np.int64(_i32(table[_AFTER_CLASS])[token])
    # the node (target, next_ctx)
    keys = _i64(table[_KEYS])
    key = target * table[_NUM_CONTEXTS] + next_ctx
    k = lower_bound(keys, 0, table[_NUM_KEYS], key)
    if k == table[_NUM_KEYS] or keys[k] != key:
        return INCONSISTENT
    return _i64(table[_KEY_NODES])[k] * M + next_mc
