"""Deterministic finite automata over an explicit integer alphabet, held in numpy arrays.

A ``DFA`` has states ``0 .. num_states-1`` and symbols ``0 .. num_symbols-1``. Invariants:
- ``transitions`` is int32 ``[num_states, num_symbols]``; ``MISSING`` (-1) marks an absent edge (the DFA is
  partial: a missing edge rejects).
- ``accepting`` is bool ``[num_states]``; ``start`` is a valid state.
- ``alphabet`` names what the symbols are (bytes or characters); it only matters for labels and for
  turning strings into symbol sequences.

Operations return new DFAs; nothing mutates in place. Minimisation and products are vectorised over states
(Python loops run over refinement rounds or BFS layers, never over (state, symbol) pairs); the graph walks
(reachability, co-reachability, breadth-first renumbering) are compiled loops: in numpy they cost one call per
BFS layer, ~1 ms of every small regex's compile, about a tenth of it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from numba import njit

from automata.errors import StateLimitError

__all__ = ["DFA", "Alphabet", "MISSING"]

MISSING = -1


@dataclass(frozen=True)
class Alphabet:
    """What the integer symbols stand for: ``kind`` is ``"bytes"`` (symbol i is byte i), ``"chars"``
    (symbol i is ``chars[i]``) or ``"labels"`` (symbol i is an opaque name ``chars[i]``, e.g. a token id)."""

    kind: str
    chars: tuple[str, ...] = ()

    @staticmethod
    def bytes() -> "Alphabet":
        return Alphabet("bytes")

    @staticmethod
    def of_chars(chars: Iterable[str]) -> "Alphabet":
        unique = tuple(dict.fromkeys(chars))
        if any(len(c) != 1 for c in unique):
            raise ValueError("a character alphabet holds single characters")
        return Alphabet("chars", unique)

    @property
    def size(self) -> int:
        return 256 if self.kind == "bytes" else len(self.chars)

    def label(self, symbol: int) -> str:
        """A readable name of one symbol (printable characters as themselves, others escaped)."""
        if self.kind == "bytes":
            return chr(symbol) if 0x21 <= symbol < 0x7F else f"\\x{symbol:02x}"
        c = self.chars[symbol]
        if self.kind == "labels":
            return c
        return c if c.isprintable() and not c.isspace() else repr(c)[1:-1]

    def encode(self, text: str) -> list[int] | None:
        """The symbol sequence of ``text``, or None if it uses a character outside the alphabet."""
        if self.kind == "bytes":
            try:
                return list(text.encode("utf-8"))
            except UnicodeEncodeError:  # lone surrogates have no UTF-8 form
                return None
        if self.kind == "labels":
            return None
        index = {c: i for i, c in enumerate(self.chars)}
        out = []
        for c in text:
            if c not in index:
                return None
            out.append(index[c])
        return out


@dataclass(frozen=True, eq=False)
class DFA:
    transitions: np.ndarray
    accepting: np.ndarray
    start: int
    alphabet: Alphabet

    def __post_init__(self) -> None:
        t, a = self.transitions, self.accepting
        if t.ndim != 2 or t.dtype != np.int32:
            raise ValueError("transitions must be a 2-d int32 array")
        if a.shape != (t.shape[0],) or a.dtype != bool:
            raise ValueError("accepting must be a bool array with one entry per state")
        if t.shape[1] != self.alphabet.size:
            raise ValueError(f"transitions have {t.shape[1]} symbols, alphabet has {self.alphabet.size}")
        if not 0 <= self.start < t.shape[0]:
            raise ValueError("start state out of range")
        if t.size and (t.min() < MISSING or t.max() >= t.shape[0]):
            raise ValueError("a transition targets a state that does not exist")

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_symbols(self) -> int:
        return self.transitions.shape[1]

    @property
    def num_transitions(self) -> int:
        return int((self.transitions != MISSING).sum())

    # ----------------------------------------------------------------------------------------- running

    def run(self, symbols: Sequence[int], state: int | None = None) -> int:
        """The state after reading ``symbols`` from ``state`` (default: start), or MISSING if rejected on the way."""
        s = self.start if state is None else state
        for x in symbols:
            if not 0 <= x < self.num_symbols:
                return MISSING
            s = int(self.transitions[s, x])
            if s == MISSING:
                return MISSING
        return s

    def accepts(self, sequence: Sequence[int] | str) -> bool:
        """Whether the DFA accepts a symbol sequence (or a string, encoded through the alphabet)."""
        if isinstance(sequence, str):
            encoded = self.alphabet.encode(sequence)
            if encoded is None:
                return False
            sequence = encoded
        s = self.run(sequence)
        return s != MISSING and bool(self.accepting[s])

    # ----------------------------------------------------------------------------------------- structure

    def reachable(self) -> np.ndarray:
        """bool[num_states]: states reachable from the start."""
        seen = np.zeros(self.num_states, dtype=bool)
        seen[bfs_order(self.transitions, self.start, self.num_states)] = True
        return seen

    def coreachable(self) -> np.ndarray:
        """bool[num_states]: states from which an accepting state can be reached."""
        return _coreachable(self.transitions, self.accepting)

    def _restrict(self, keep: np.ndarray) -> "DFA":
        """The DFA on the states where ``keep`` holds (the start state must be kept), renumbered in order."""
        new_id = np.full(self.num_states + 1, MISSING, dtype=np.int32)  # index -1 maps MISSING to MISSING
        new_id[np.flatnonzero(keep)] = np.arange(int(keep.sum()), dtype=np.int32)
        table = new_id[self.transitions[keep]]
        return DFA(table.astype(np.int32), self.accepting[keep].copy(), int(new_id[self.start]), self.alphabet)

    def trim(self) -> "DFA":
        """Keep only useful states: reachable from the start and co-reachable to acceptance.

        If the language is empty the result is the one-state DFA with no accepting state.
        """
        useful = self.reachable() & self.coreachable()
        if not useful[self.start]:
            return DFA(np.full((1, self.num_symbols), MISSING, np.int32), np.zeros(1, bool), 0, self.alphabet)
        return self._restrict(useful)

    def is_empty(self) -> bool:
        return not bool(self.coreachable()[self.start])

    def minimise(self) -> "DFA":
        """The minimal trim DFA of the same language, states in breadth-first order from the start (so the
        output is canonical: equal languages give equal arrays). One compiled call (``_minimal``): trim, partition
        refinement over the transitions that exist (``_coarsest``, Valmari and Lehtinen's), renumbering.

        States start split by acceptance; a block splits another where the states of the other lead into it on
        some symbol and out of it on the same symbol, until no block splits. A missing edge tells its state apart
        from every state that has that edge: exactly the implicit dead state.
        """
        minimal = minimal_table(self.transitions, self.accepting, self.start)
        if minimal is None:  # the empty language
            return self.trim()
        return DFA(*minimal, 0, self.alphabet)

    def minimise_labelled(self, labels: np.ndarray) -> tuple["DFA", np.ndarray]:
        """``minimise`` keeping states with different ``labels`` (int per state) apart: the minimal trim DFA in
        which every state carries one label, and those labels. (``product.counted`` labels the states that a
        counted repetition's iteration enters.)"""
        labels = np.asarray(labels).astype(np.int64)
        table, representative = _minimal(np.ascontiguousarray(self.transitions), self.accepting,
                                         labels * 2 + self.accepting, self.start)
        if len(representative) == 0:
            return self.trim(), np.zeros(1, dtype=np.int64)
        return DFA(table, self.accepting[representative], 0, self.alphabet), labels[representative]

    def intersect(self, other: "DFA", *, max_states: int = 1_000_000) -> "DFA":
        """The product DFA accepting the strings both accept. Only pairs reachable from the start pair are
        built, one BFS layer at a time; a pair (a, b) is coded as a * other.num_states + b."""
        if self.alphabet != other.alphabet:
            raise ValueError("cannot intersect DFAs over different alphabets")
        n2 = other.num_states
        known = np.array([self.start * n2 + other.start], dtype=np.int64)  # pair codes, in id order
        layer = known.copy()
        layer_codes = []
        while layer.size:
            ta, tb = self.transitions[layer // n2], other.transitions[layer % n2]
            codes = np.where((ta != MISSING) & (tb != MISSING), ta.astype(np.int64) * n2 + tb, -1)
            layer_codes.append(codes)
            fresh = np.setdiff1d(codes[codes >= 0], known)  # sorted, unique
            known = np.concatenate([known, fresh])
            if known.size > max_states:
                raise StateLimitError(f"product automaton exceeds {max_states} states")
            layer = fresh
        order = np.argsort(known)
        codes = np.concatenate(layer_codes)
        ids = order[np.searchsorted(known, np.maximum(codes, 0), sorter=order)]
        table = np.where(codes >= 0, ids, MISSING).astype(np.int32)
        accepting = self.accepting[known // n2] & other.accepting[known % n2]
        return DFA(table, accepting, 0, self.alphabet)

    def strings(self, max_count: int = 100_000) -> list[list[int]]:
        """All accepted symbol sequences of a finite language (raises ValueError if infinite or too many)."""
        dfa = self.trim()
        if dfa.is_empty():
            return []
        out: list[list[int]] = []
        stack: list[tuple[int, list[int], frozenset[int]]] = [(dfa.start, [], frozenset([dfa.start]))]
        while stack:
            s, path, on_path = stack.pop()
            if dfa.accepting[s]:
                out.append(path)
                if len(out) > max_count:
                    raise ValueError(f"language has more than {max_count} strings")
            for x in np.flatnonzero(dfa.transitions[s] != MISSING)[::-1]:
                n = int(dfa.transitions[s, x])
                if n in on_path:
                    raise ValueError("language is infinite")
                stack.append((n, path + [int(x)], on_path | {n}))
        return out


def minimal_table(transitions: np.ndarray, accepting: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``DFA.minimise`` on bare arrays (table, accepting; the start is state 0), None for the empty language: for
    callers that never needed a ``DFA`` object (``product.stitched``'s skeleton: building and checking two of them
    cost ~30 µs of a 1.5 ms warm compile)."""
    table, representative = _minimal(np.ascontiguousarray(transitions, dtype=np.int32), accepting,
                                     accepting.astype(np.int64), start)
    return None if len(representative) == 0 else (table, accepting[representative])


_KERNEL = dict(cache=True, nogil=True)


def minimal_edges(num_states: int, num_symbols: int, sources: np.ndarray, symbols: np.ndarray, targets: np.ndarray,
                  accepting: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``minimal_table`` of a DFA given by its edges (source, symbol, target), never laid out as a table: a
    skeleton's DFA before minimising has tens of thousands of states over hundreds of symbols (a YAML schema's key
    runs each a symbol), most of the table missing. Valmari's partition refinement over the edges
    (``_coarsest_edges``); the same result as ``minimal_table`` on the table."""
    out = _minimal_edges(num_states, num_symbols, np.asarray(sources, dtype=np.int64),
                         np.asarray(symbols, dtype=np.int64), np.asarray(targets, dtype=np.int64),
                         np.asarray(accepting, dtype=np.bool_), accepting.astype(np.int64), start)
    table, representative = out
    return None if len(representative) == 0 else (table, accepting[representative])


@njit(**_KERNEL)
def group_by(keys, values, num_keys):
    """``values`` grouped by their ``keys`` (counting sort, stable; negative keys dropped): the values of key k are
    ``grouped[bounds[k]:bounds[k + 1]]``: e.g. the predecessor lists of a graph, from its edges."""
    bounds = np.zeros(num_keys + 1, dtype=np.int64)
    for k in keys:
        if k >= 0:
            bounds[k + 1] += 1
    for k in range(num_keys):
        bounds[k + 1] += bounds[k]
    fill = bounds[:-1].copy()
    grouped = np.empty(bounds[num_keys], dtype=np.int64)
    for i in range(len(keys)):
        k = keys[i]
        if k >= 0:
            grouped[fill[k]] = values[i]
            fill[k] += 1
    return grouped, bounds


@njit(**_KERNEL)
def _coreachable(transitions, accepting):
    """Backward search from the accepting states over their predecessor lists."""
    n, k = transitions.shape
    source, start = group_by(transitions.ravel(), np.repeat(np.arange(n), k), n)
    return _search(np.flatnonzero(accepting), source, start, n)


@njit(**_KERNEL)
def _minimal(transitions, accepting, key, start):
    """``DFA.minimise`` in one call: (table, representative) of the minimal trim DFA whose states are blocks of
    states with equal ``key`` (the acceptance, or a label with it), numbered breadth-first from the start block,
    successors in symbol order; ``representative[b]``: an original state of block b. Empty arrays when no
    accepting state is reachable. (In numpy, the trim, the distinct columns, the refinement and the renumbering
    were a dozen calls of ~5-60 µs each on this machine: 340 µs for a 17-state skeleton, 20 µs now.)"""
    n, k = transitions.shape
    # trim: reachable from the start and co-reachable to acceptance; useful states renumbered in index order
    reach = np.zeros(n, dtype=np.bool_)
    reach[bfs_order(transitions, start, transitions.shape[0])] = True
    useful = reach & _coreachable(transitions, accepting)
    if not useful[start]:
        return np.empty((0, k), dtype=np.int32), np.empty(0, dtype=np.int64)
    new_id = np.full(n, -1, dtype=np.int64)
    m = 0
    for s in range(n):
        if useful[s]:
            new_id[s] = m
            m += 1
    old_id = np.flatnonzero(useful)
    # symbols every state treats alike refine nothing (most of a byte DFA's 256): one column of each kind
    column_hash = np.zeros(k, dtype=np.uint64)
    for j in range(k):
        h = np.uint64(1469598103934665603)
        for s in range(m):
            t = transitions[old_id[s], j]
            h = (h ^ np.uint64(new_id[t] + 2 if t >= 0 else 0)) * np.uint64(1099511628211)
        column_hash[j] = h
    distinct = np.empty(k, dtype=np.int64)
    num_distinct = 0
    for j in range(k):
        seen = False
        for d in range(num_distinct):
            i = distinct[d]
            if column_hash[i] == column_hash[j]:
                same = True
                for s in range(m):
                    a, b = transitions[old_id[s], i], transitions[old_id[s], j]
                    if (new_id[a] if a >= 0 else -1) != (new_id[b] if b >= 0 else -1):
                        same = False
                        break
                if same:
                    seen = True
                    break
        if not seen:
            distinct[num_distinct] = j
            num_distinct += 1
    table = np.empty((m, num_distinct), dtype=np.int64)
    for s in range(m):
        for d in range(num_distinct):
            t = transitions[old_id[s], distinct[d]]
            table[s, d] = new_id[t] if t >= 0 else -1
    block, num_blocks = _coarsest(table, _key_blocks(key[old_id]))
    # the block DFA over every symbol, renumbered breadth-first from the start's block
    representative = np.empty(num_blocks, dtype=np.int64)
    for s in range(m):
        representative[block[s]] = old_id[s]
    blocks = np.empty((num_blocks, k), dtype=np.int32)
    for b in range(num_blocks):
        for j in range(k):
            t = transitions[representative[b], j]
            blocks[b, j] = block[new_id[t]] if t >= 0 and new_id[t] >= 0 else -1
    return _breadth_first(blocks, block[new_id[start]], representative)


@njit(**_KERNEL)
def _key_blocks(keys):
    """The first partition of a minimisation: the states (dense ids) numbered by their key, in key order."""
    block = np.empty(len(keys), dtype=np.int64)
    order = np.argsort(keys, kind="mergesort")
    count = -1
    for r in range(len(keys)):
        if r == 0 or keys[order[r]] != keys[order[r - 1]]:
            count += 1
        block[order[r]] = count
    return block


@njit(**_KERNEL)
def _breadth_first(blocks, start_block, representative):
    """The minimal DFA's (table, representative) from its block table: blocks renumbered breadth-first from the
    start's block, successors in symbol order, those it does not reach dropped."""
    perm = bfs_order(blocks, start_block, blocks.shape[0])
    renumber = np.empty(blocks.shape[0], dtype=np.int32)
    for i in range(len(perm)):
        renumber[perm[i]] = i
    out = np.empty((len(perm), blocks.shape[1]), dtype=np.int32)
    for i in range(len(perm)):
        for j in range(blocks.shape[1]):
            t = blocks[perm[i], j]
            out[i, j] = renumber[t] if t >= 0 else -1
    return out, representative[perm]


@njit(**_KERNEL)
def _mark(elems, loc, sidx, first, mid, touched, num_touched, e):
    """Refinable partition (Valmari-Lehtinen): move element ``e`` into its set's marked part; the number of sets
    touched so far, ``touched`` listing them."""
    s = sidx[e]
    i, j = loc[e], mid[s]
    other = elems[j]
    elems[i], elems[j] = other, e
    loc[other], loc[e] = i, j
    if mid[s] == first[s]:
        touched[num_touched] = s
        num_touched += 1
    mid[s] += 1
    return num_touched


@njit(**_KERNEL)
def _split(elems, sidx, first, mid, end, touched, num_touched, num_sets):
    """Split every touched set into its marked and unmarked parts, the smaller becoming a new set (numbered from
    ``num_sets``); returns the new count of sets."""
    for t in range(num_touched):
        s = touched[t]
        if mid[s] == end[s]:  # every element marked: no split
            mid[s] = first[s]
            continue
        z = num_sets
        num_sets += 1
        if mid[s] - first[s] <= end[s] - mid[s]:  # the marked part is new
            first[z], end[z] = first[s], mid[s]
            first[s] = mid[s]
        else:  # the unmarked part is new
            first[z], end[z] = mid[s], end[s]
            end[s] = mid[s]
        mid[s], mid[z] = first[s], first[z]
        for i in range(first[z], end[z]):
            sidx[elems[i]] = z
    return num_sets


@njit(**_KERNEL)
def _partition(ids, num_sets, capacity):
    """A refinable partition (``_mark``, ``_split``) of the elements 0.. into the sets ``ids`` names (0..num_sets - 1),
    with room for ``capacity`` sets: (elems, loc, sidx, first, end, mid), each set's elements in increasing order."""
    elems, bounds = group_by(ids, np.arange(len(ids)), num_sets)
    loc = np.empty(len(ids), dtype=np.int64)
    loc[elems] = np.arange(len(ids))
    first = np.zeros(capacity, dtype=np.int64)
    end = np.zeros(capacity, dtype=np.int64)
    first[:num_sets] = bounds[:-1]
    end[:num_sets] = bounds[1:]
    return elems, loc, ids.astype(np.int64), first, end, first.copy()


@njit(**_KERNEL)
def _coarsest(table, block):
    """The coarsest refinement of the partition ``block`` (dense ids 0..) that ``table``'s successors respect, a
    missing transition (MISSING) telling its state apart from every state that has one (the states are trim), by
    Valmari and Lehtinen's algorithm for partial transition functions: a partition of the states and one of the
    transitions (first by symbol) refine each other — the sources of a set of transitions split the state blocks,
    the states of a block split the transition sets by their target — each new set the smaller half, so every
    transition is handled O(log n) times: O(m log n) for m transitions, not O(n k log n) over the complete table
    (a 9,152-state skeleton of 154 classes but 15,113 transitions: 49 ms over the complete table with a sink, ~1 ms
    here). Returns (block, count)."""
    n, k = table.shape
    m = 0
    for s in range(n):
        for j in range(k):
            if table[s, j] >= 0:
                m += 1
    tail = np.empty(m, dtype=np.int64)
    label = np.empty(m, dtype=np.int64)
    head = np.empty(m, dtype=np.int64)
    t = 0
    for s in range(n):
        for j in range(k):
            if table[s, j] >= 0:
                tail[t], label[t], head[t] = s, j, table[s, j]
                t += 1
    return _coarsest_edges(n, k, tail, label, head, block)


@njit(**_KERNEL)
def _coarsest_edges(n, k, tail, label, head, block):
    """``_coarsest`` of the DFA whose transitions are (tail, label, head), labels 0..k - 1."""
    m = len(tail)
    incoming, in_first = group_by(head, np.arange(m), n)  # incoming transitions of each state
    # the state partition, from ``block``; the transition partition, by symbol (a symbol no transition reads: an
    # empty set, which splits nothing)
    num_blocks = block.max() + 1 if n else 0
    b_elems, b_loc, b_sidx, b_first, b_end, b_mid = _partition(block, num_blocks, n + 1)
    num_cords = k
    c_elems, c_loc, c_sidx, c_first, c_end, c_mid = _partition(label, num_cords, k + m + 1)
    touched = np.empty(max(n, k + m) + 1, dtype=np.int64)
    b, c = 1, 0  # (every initial block but one splits the transitions; every transition set splits the blocks)
    while c < num_cords:
        num_touched = 0
        for i in range(c_first[c], c_end[c]):
            num_touched = _mark(b_elems, b_loc, b_sidx, b_first, b_mid, touched, num_touched, tail[c_elems[i]])
        num_blocks = _split(b_elems, b_sidx, b_first, b_mid, b_end, touched, num_touched, num_blocks)
        c += 1
        while b < num_blocks:
            num_touched = 0
            for i in range(b_first[b], b_end[b]):
                s = b_elems[i]
                for e in range(in_first[s], in_first[s + 1]):
                    num_touched = _mark(c_elems, c_loc, c_sidx, c_first, c_mid, touched, num_touched, incoming[e])
            num_cords = _split(c_elems, c_sidx, c_first, c_mid, c_end, touched, num_touched, num_cords)
            b += 1
    # dense ids in order of first state
    renumber = np.full(num_blocks, -1, dtype=np.int64)
    count = 0
    out = np.empty(n, dtype=np.int64)
    for s in range(n):
        if renumber[b_sidx[s]] < 0:
            renumber[b_sidx[s]] = count
            count += 1
        out[s] = renumber[b_sidx[s]]
    return out, count


@njit(**_KERNEL)
def _search(seeds, neighbours, starts, n):
    """States reached from ``seeds`` along ``group_by``'s lists: state s's neighbours
    ``neighbours[starts[s]:starts[s + 1]]``."""
    seen = np.zeros(n, dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for s in seeds:
        if not seen[s]:
            seen[s] = True
            stack[top] = s
            top += 1
    while top:
        top -= 1
        s = stack[top]
        for i in range(starts[s], starts[s + 1]):
            t = neighbours[i]
            if not seen[t]:
                seen[t] = True
                stack[top] = t
                top += 1
    return seen


@njit(**_KERNEL)
def _minimal_edges(n, k, sources, symbols, targets, accepting, key, start):
    """``_minimal`` of a DFA given by its edges (``minimal_edges``): the same (table, representative)."""
    successors, out_starts = group_by(sources, targets, n)
    predecessors, in_starts = group_by(targets, sources, n)
    reach = _search(np.array([start], dtype=np.int64), successors, out_starts, n)
    useful = reach & _search(np.flatnonzero(accepting), predecessors, in_starts, n)
    if not useful[start]:
        return np.empty((0, k), dtype=np.int32), np.empty(0, dtype=np.int64)
    new_id = np.full(n, -1, dtype=np.int64)
    old_id = np.flatnonzero(useful)
    for i in range(len(old_id)):
        new_id[old_id[i]] = i
    kept = np.flatnonzero(useful[sources] & useful[targets])
    tails, heads, labels = new_id[sources[kept]], new_id[targets[kept]], symbols[kept]
    block, num_blocks = _coarsest_edges(len(old_id), k, tails, labels, heads, _key_blocks(key[old_id]))
    representative = np.empty(num_blocks, dtype=np.int64)
    for s in range(len(old_id)):
        representative[block[s]] = old_id[s]
    blocks = np.full((num_blocks, k), -1, dtype=np.int32)
    for e in range(len(tails)):
        blocks[block[tails[e]], labels[e]] = block[heads[e]]
    return _breadth_first(blocks, block[new_id[start]], representative)


@njit(**_KERNEL)
def bfs_order(transitions, start, cap):
    """States in breadth-first order from ``start``, each state's successors in symbol order (reachable only); an
    empty order where more than ``cap`` states are reachable."""
    return bfs_within(transitions, start, cap, np.zeros(0, dtype=np.bool_))


@njit(**_KERNEL)
def bfs_within(transitions, start, cap, within):
    """``bfs_order`` through the states ``within`` only (bool per state; empty: every state)."""
    anywhere = len(within) == 0
    seen = np.zeros(transitions.shape[0], dtype=np.bool_)
    order = np.empty(max(min(cap, transitions.shape[0]), 1), dtype=np.int64)
    if cap < 1:
        return order[:0]
    order[0] = start
    seen[start] = True
    head, tail = 0, 1
    while head < tail:
        for t in transitions[order[head]]:
            if t >= 0 and not seen[t] and (anywhere or within[t]):
                if tail == len(order):
                    return order[:0]
                seen[t] = True
                order[tail] = t
                tail += 1
        head += 1
    return order[:tail]


@njit(**_KERNEL)
def reachable_code(transitions, start, cap):
    """The automaton reachable from ``start`` written out canonically: states numbered breadth-first (successors in
    symbol order, as ``bfs_order``), and per state in that order its edge count, then each edge as (symbol, target's
    number). Two starts have equal codes iff the automata reachable from them are isomorphic (as unlabelled graphs;
    labels are the caller's to add, in ``order``). Returns (order, code); both empty where more than ``cap`` states
    are reachable. Sparse rows make short codes: a literal's chain is two numbers a state, not a row of 256."""
    n = transitions.shape[0]
    number = np.full(n, -1, dtype=np.int64)
    order = np.empty(max(min(cap, n), 1), dtype=np.int64)
    code = np.empty(16, dtype=np.int32)
    if cap < 1:
        return order[:0], code[:0]
    order[0] = start
    number[start] = 0
    head, tail, size = 0, 1, 0
    while head < tail:
        row = transitions[order[head]]
        edges = 0
        for t in row:
            if t >= 0:
                edges += 1
        if size + 1 + 2 * edges > len(code):
            grown = np.empty(2 * (size + 1 + 2 * edges), dtype=np.int32)
            grown[:size] = code[:size]
            code = grown
        code[size] = edges
        size += 1
        for symbol in range(len(row)):
            t = row[symbol]
            if t < 0:
                continue
            if number[t] < 0:
                if tail == len(order):
                    return order[:0], code[:0]
                number[t] = tail
                order[tail] = t
                tail += 1
            code[size], code[size + 1] = symbol, number[t]
            size += 2
        head += 1
    return order[:tail], code[:size]


@njit(**_KERNEL)
def cycle_region(transitions, start, cap):
    """The states ``start`` shares a cycle with — its strongly connected component: reachable from it and reaching
    it — in breadth-first order from ``start`` inside the component (successors in symbol order); empty where
    ``start`` lies on no cycle or the component holds more than ``cap`` states. A path that leaves the component
    never comes back to it (``product.runtime.lazy`` shares the rows of a state by its component: a free string's
    body with its characters and escapes)."""
    n = transitions.shape[0]
    queue = bfs_order(transitions, start, n)
    tail = len(queue)
    # the reachable states' edges reversed (CSR by target), walked back from start
    starts = np.zeros(n + 1, dtype=np.int64)
    for i in range(tail):
        for t in transitions[queue[i]]:
            if t >= 0:
                starts[t + 1] += 1
    for s in range(n):
        starts[s + 1] += starts[s]
    sources = np.empty(starts[n], dtype=np.int64)
    filled = starts[:n].copy()
    for i in range(tail):
        for t in transitions[queue[i]]:
            if t >= 0:
                sources[filled[t]] = queue[i]
                filled[t] += 1
    back = np.zeros(n, dtype=np.bool_)
    back[start] = True
    stack = np.empty(n, dtype=np.int64)
    stack[0] = start
    depth = 1
    while depth:
        depth -= 1
        s = stack[depth]
        for k in range(starts[s], starts[s + 1]):
            p = sources[k]
            if not back[p]:
                back[p] = True
                stack[depth] = p
                depth += 1
    on_cycle = False
    for t in transitions[start]:
        if t >= 0 and back[t]:
            on_cycle = True
    if not on_cycle:
        return queue[:0]
    return bfs_within(transitions, start, cap, back)


def unique_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D array as (index of each one's first occurrence, inverse: the distinct row of
    every row) — ``np.unique(matrix, axis=0, return_index=True, return_inverse=True)`` up to the order of the
    distinct rows. Rows are compared as raw bytes, one sort of fixed-size keys: 4-8x faster than ``axis=0``
    (measured: 17 x 8 rows 112 -> 24 µs, 3000 x 40 rows 11.6 -> 3.0 ms), which matters in minimisation's
    rounds."""
    matrix = np.ascontiguousarray(matrix)
    keys = matrix.view(np.dtype((np.void, matrix.dtype.itemsize * matrix.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def find_sorted(values: Sequence[int], value: int, lo: int, hi: int) -> int:
    """The index of ``value`` in the ascending ``values[lo:hi]`` (a CSR row), or -1. For one lookup at a time:
    over a memoryview (whose items are Python ints) a bisect costs ~1 µs, numpy's searchsorted 1-6 µs a call."""
    i = bisect.bisect_left(values, value, lo, hi)
    return i if i < hi and values[i] == value else -1


@njit(inline="always")
def lower_bound(values, lo, hi, value):
    """The first index in ``lo:hi`` of the ascending ``values`` holding a value >= ``value`` (``hi`` if none): the
    binary search of compiled loops (``find_sorted`` is Python's)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def row_bounds(counts: np.ndarray) -> np.ndarray:
    """int64 bounds of compressed rows with ``counts`` entries each: row i is ``bounds[i]:bounds[i + 1]``."""
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return bounds


def concat_aranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(lo[i], hi[i])`` for all i, without a Python loop (shared by the packages
    that slice CSR rows: ``automata``, ``product``)."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    lengths = hi - lo
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(lo - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(total) + offsets
