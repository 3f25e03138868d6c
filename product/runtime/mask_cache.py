"""Which state's mask a guide keeps in which slot, least recently used out first, as one int64 array that compiled
code reads and changes.

A guide keeps the masks it computed in rows of preallocated slabs (slot ``s``: row ``s % slab_rows`` of slab
``s // slab_rows``; ``product.runtime.guide``). This module is the index over them. It was an ``OrderedDict``; as
an array, a batch of masks is looked up, evicted, computed and copied in three compiled calls (the batch kernels
``batch_copy``, ``batch_compute``, ``batch_keep`` of ``product.runtime.kernels.cpu``) and ``advance``'s step reads its
state's slot itself (``product.runtime.kernels.step``). With the dict, a batch of 64
masks spent ~1 µs of Python a row, and on two threads it was no faster than on one (bench/gpu_masks.py).

The record (``MaskCache.record``, int64), at ``MaskCache.address``:

    header   capacity (slots it has room for), limit (the most slots it may ever have), buckets - 1, used (slots
             0 .. used - 1 hold a state), oldest, newest (ends of the recency list; -1 when empty)
    keys     [buckets] a state, or -1: open addressing with linear probing, removal by backward shift (no
             tombstones), buckets a power of two >= 2 x capacity
    slot_of  [buckets] the slot of the state in ``keys``
    state_of [capacity] the state in a slot
    older, newer [capacity] the recency list, a doubly linked list of the used slots (-1 at its ends)

Invariants: the states in ``keys`` are exactly ``state_of[0 .. used - 1]``, each once; ``used <= capacity <= limit``;
a slot is evicted only when ``used == limit``. Every function here is called with the guide's lock held.

Leaves out: the masks (the guide's slabs) and growing (``MaskCache.reserve`` makes a bigger record, slots kept).
A record starts at one slab's slots and doubles, so a guide that uses few masks does not pay for 4,096 slots.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from product.runtime.kernels.pointers import int64_at

__all__ = ["MaskCache", "find", "holds", "lookup", "take"]

_CAPACITY, _LIMIT, _MASK, _USED, _OLDEST, _NEWEST, _HEADER = range(7)
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as an int64: spreads consecutive states over the buckets


@njit(inline="always")
def _offsets(rec):
    """Where ``keys``, ``slot_of``, ``state_of``, ``older``, ``newer`` start in the record."""
    buckets, capacity = rec[_MASK] + 1, rec[_CAPACITY]
    keys = _HEADER
    state_of = keys + 2 * buckets
    return keys, keys + buckets, state_of, state_of + capacity, state_of + 2 * capacity


@njit(inline="always")
def _bucket(rec, state):
    h = state * _GOLDEN  # (wraps around)
    return (h ^ (h >> 31)) & rec[_MASK]


@njit(inline="always")
def find(rec, state):
    """The slot holding ``state``, or -1. ``rec``: ``int64_at(address)``."""
    keys, slot_of = _offsets(rec)[:2]
    b = _bucket(rec, state)
    while True:
        key = rec[keys + b]
        if key == state:
            return rec[slot_of + b]
        if key == -1:
            return -1
        b = (b + 1) & rec[_MASK]


@njit(inline="always")
def _insert(rec, state, slot):
    keys, slot_of = _offsets(rec)[:2]
    b = _bucket(rec, state)
    while rec[keys + b] != -1:
        b = (b + 1) & rec[_MASK]
    rec[keys + b] = state
    rec[slot_of + b] = slot


@njit(inline="always")
def _remove(rec, state):
    """Take ``state`` (present) out of ``keys``; the entries after it in its run move back over the hole when their
    own bucket does not lie between the hole and them (backward-shift deletion)."""
    keys, slot_of = _offsets(rec)[:2]
    mask = rec[_MASK]
    hole = _bucket(rec, state)
    while rec[keys + hole] != state:
        hole = (hole + 1) & mask
    j = hole
    while True:
        j = (j + 1) & mask
        key = rec[keys + j]
        if key == -1:
            break
        home = _bucket(rec, key)
        if (hole <= j and hole < home <= j) or (hole > j and (home > hole or home <= j)):
            continue  # its probe sequence starts after the hole: it stays
        rec[keys + hole] = key
        rec[slot_of + hole] = rec[slot_of + j]
        hole = j
    rec[keys + hole] = -1


@njit(inline="always")
def _unlink(rec, slot):
    older, newer = _offsets(rec)[3:]
    before, after = rec[older + slot], rec[newer + slot]
    if before >= 0:
        rec[newer + before] = after
    else:
        rec[_OLDEST] = after
    if after >= 0:
        rec[older + after] = before
    else:
        rec[_NEWEST] = before


@njit(inline="always")
def _push_newest(rec, slot):
    older, newer = _offsets(rec)[3:]
    rec[older + slot] = rec[_NEWEST]
    rec[newer + slot] = -1
    if rec[_NEWEST] >= 0:
        rec[newer + rec[_NEWEST]] = slot
    else:
        rec[_OLDEST] = slot
    rec[_NEWEST] = slot


@njit(inline="always")
def lookup(rec, state):
    """``find``, the slot (if any) becoming the most recently used."""
    slot = find(rec, state)
    if slot >= 0 and slot != rec[_NEWEST]:
        _unlink(rec, slot)
        _push_newest(rec, slot)
    return slot


@njit(inline="always")
def take(rec, state):
    """A slot for ``state`` (not cached), now the most recently used: the next unused one, else the least recently
    used one's, whose state leaves the cache. -1 when the record is full but below its limit (reserve first)."""
    state_of = _offsets(rec)[2]
    if rec[_USED] < rec[_CAPACITY]:
        slot = rec[_USED]
        rec[_USED] += 1
    elif rec[_CAPACITY] < rec[_LIMIT]:
        return -1
    else:
        slot = rec[_OLDEST]
        _remove(rec, rec[state_of + slot])
        _unlink(rec, slot)
    rec[state_of + slot] = state
    _insert(rec, state, slot)
    _push_newest(rec, slot)
    return slot


@njit(inline="always")
def holds(rec, slot, state):
    """Whether ``slot`` (used) holds ``state``."""
    return rec[_offsets(rec)[2] + slot] == state


# ---- called from Python (addresses in, ints out) -------------------------------------------------------------
@njit("int64(int64, int64, boolean)", cache=True)
def _find_or_lookup(address, state, touch):
    rec = int64_at(address)
    return lookup(rec, state) if touch else find(rec, state)


@njit("int64(int64, int64)", cache=True)
def _take(address, state):
    return take(int64_at(address), state)


@njit("void(int64, int64)", cache=True)
def _copy_into(old_address, new_address):
    """The slots of the record at ``old_address`` (states, recency list) into the larger empty one at
    ``new_address``, slot numbers kept."""
    old, new = int64_at(old_address), int64_at(new_address)
    _, _, old_state_of, old_older, old_newer = _offsets(old)
    _, _, state_of, older, newer = _offsets(new)
    for slot in range(old[_USED]):
        new[state_of + slot] = old[old_state_of + slot]
        new[older + slot] = old[old_older + slot]
        new[newer + slot] = old[old_newer + slot]
        _insert(new, old[old_state_of + slot], slot)
    new[_USED], new[_OLDEST], new[_NEWEST] = old[_USED], old[_OLDEST], old[_NEWEST]


def _new_record(capacity: int, limit: int) -> np.ndarray:
    buckets = 1 << (2 * capacity - 1).bit_length()
    record = np.full(_HEADER + 2 * buckets + 3 * capacity, -1, dtype=np.int64)
    record[:_HEADER] = (capacity, limit, buckets - 1, 0, -1, -1)
    return record


class MaskCache:
    """The index of a guide's cached masks (see the module docstring): states to slots, at most ``limit`` of them,
    the least recently used evicted first. ``address`` changes when the record grows (``reserve``, ``take``);
    compiled callers read it afresh on every call. The guide's lock is held around every method."""

    def __init__(self, limit: int, first_capacity: int) -> None:
        self.limit = limit
        self._set(_new_record(min(limit, first_capacity), limit))

    def _set(self, record: np.ndarray) -> None:
        self.record = record
        self.address = record.ctypes.data

    def reserve(self, new_states: int) -> None:
        """Room for ``new_states`` more states without eviction, or for ``limit`` states (slot numbers kept)."""
        record = self.record
        capacity = int(record[_CAPACITY])
        wanted = min(self.limit, int(record[_USED]) + new_states)
        if wanted > capacity:
            record = _new_record(max(wanted, min(self.limit, 2 * capacity)), self.limit)
            _copy_into(self.address, record.ctypes.data)
            self._set(record)

    def get(self, state: int) -> int:
        """The slot of ``state`` or -1 (its recency unchanged)."""
        return _find_or_lookup(self.address, state, False)

    def lookup(self, state: int) -> int:
        """The slot of ``state`` or -1, the slot becoming the most recently used."""
        return _find_or_lookup(self.address, state, True)

    def take(self, state: int) -> int:
        """A slot for ``state``, which is not cached (the least recently used state evicted when full)."""
        slot = _take(self.address, state)
        if slot < 0:
            self.reserve(1)
            slot = _take(self.address, state)
        return slot

    def clear(self) -> None:
        self._set(_new_record(int(self.record[_CAPACITY]), self.limit))

    @property
    def capacity(self) -> int:
        """Slots the record has room for now."""
        return int(self.record[_CAPACITY])

    def __setstate__(self, state: dict) -> None:  # (a guide pickled to another process: the record is a copy)
        self._set(state["record"])
        self.limit = state["limit"]

    def __len__(self) -> int:
        return int(self.record[_USED])

    def __contains__(self, state: int) -> bool:
        return self.get(state) >= 0

    def slots(self) -> dict[int, int]:
        """state -> slot, least recently used first."""
        state_of = _HEADER + 2 * (int(self.record[_MASK]) + 1)
        newer = state_of + 2 * int(self.record[_CAPACITY])
        order, slot = {}, int(self.record[_OLDEST])
        while slot >= 0:
            order[int(self.record[state_of + slot])] = slot
            slot = int(self.record[newer + slot])
        return order
