"""Where a constraint lets the pre-tokenizer settle a piece: liveness decided near a state, not over the product.

A guide state after text ``x`` is live when some completion ``w`` of the constraint is canonically tokenized after
the tokens so far. One sufficient condition needs no token at all: if the pre-tokenizer, on ``x + w``, places a
piece boundary at ``|x|``, the tokens of ``x``'s last piece are that piece's BPE (inside a piece a tokenization is
canonical iff every adjacent pair is, which every allowed token was checked for) and ``w``'s pieces are tokenized
on their own, so the whole is the canonical tokenization of a text of the language. Whether such a ``w`` exists
is a character-level question about the constraint's automaton and the pre-tokenizer's *marked-text DFA*
(``bpe.pretokenizer.Segmentation``: correctly marked texts, ``#`` at piece boundaries; an open context of the
canonical automaton is a set of its states): from a state ``m`` of the context, read ``#``, then the symbols of a
completion (with the boundaries the DFA puts among them) to a final state. It is the non-emptiness of a product
of the constraint's automaton with a DFA of 21-33 states — no token row, no merge class (docs/design.md,
"Liveness decided locally").

Here: ``character_edges`` (a byte DFA's transitions on whole characters, as marked-DFA symbols) and
``break_possible`` (per DFA state and open context). Where it is false, the text must go on inside the current
piece, and liveness depends on the merge class (a forced piece: the rest of a literal, an unfinished character);
deciding those is the token-level search this module leaves to its caller.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from automata.dfa import DFA
from bpe.automaton import CanonicalAutomaton

__all__ = ["character_edges", "break_possible"]

# UTF-8 lead bytes and the code points each continuation level covers (valid, shortest forms only: a byte DFA of
# ``automata.regex`` reads no other).
_LEADS = [(0xC2, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF4, 4)]


def character_edges(dfa: DFA, canonical: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, symbol, target) of every whole character a byte DFA reads from a state where a character starts:
    a byte path of one UTF-8 character, its code points mapped to the marked DFA's symbols (one edge per distinct
    (source, symbol, target)). Continuation bytes are followed as runs of equal targets, so a state that reads
    every character costs a few hundred runs, not a million code points."""
    T = dfa.transitions
    starts, values = canonical.symbol_starts, canonical.symbol_values
    src, sym, dst = [], [], []

    symbols_in: dict[tuple[int, int], list[int]] = {}  # (the same ranges recur in every state reading them)

    def add(q: int, lo: int, hi: int, target: int) -> None:
        found = symbols_in.get((lo, hi))
        if found is None:
            first = int(np.searchsorted(starts, lo, side="right")) - 1
            last = int(np.searchsorted(starts, hi, side="right")) - 1
            found = symbols_in[(lo, hi)] = np.unique(values[first:last + 1]).tolist()
        for s in found:
            src.append(q), sym.append(s), dst.append(target)

    def follow(q: int, state: int, lo: int, hi: int, need: int) -> None:
        """``need`` continuation bytes still to read from ``state``, where every byte prefix read so far leads and
        together they cover code points ``lo..hi`` (each remaining byte adds 6 bits)."""
        if need == 0:
            add(q, lo, hi, state)
            return
        row = T[state, 0x80:0xC0]
        if (row == row[0]).all():  # every next byte alike: the same code points, one byte further
            if row[0] >= 0:
                follow(q, int(row[0]), lo, hi, need - 1)
            return
        span = 1 << (6 * (need - 1))  # code points under one more byte
        for base in range(lo, hi + 1, 64 * span):  # each prefix on its own
            b = 0
            while b < 64:
                target, e = int(row[b]), b
                while e + 1 < 64 and int(row[e + 1]) == target:
                    e += 1
                if target >= 0:
                    follow(q, target, base + b * span, base + (e + 1) * span - 1, need - 1)
                b = e + 1

    ascii_q, ascii_b = np.nonzero(T[:, :0x80] >= 0)  # one byte, one character: all states at once
    ascii_symbol = values[np.searchsorted(starts, np.arange(0x80), side="right") - 1]
    src.extend(ascii_q.tolist()), sym.extend(ascii_symbol[ascii_b].tolist()), dst.extend(T[ascii_q, ascii_b].tolist())
    for q in np.flatnonzero((T[:, 0xC2:0xF5] >= 0).any(axis=1)).tolist():  # the few states reading longer ones
        for first, last, length in _LEADS:
            for lead in range(first, last + 1):
                target = int(T[q, lead])
                if target >= 0:
                    lo = (lead & (0xFF >> (length + 1))) << (6 * (length - 1))
                    follow(q, target, lo, lo + (1 << (6 * (length - 1))) - 1, length - 1)
    edges = np.unique(np.array([src, sym, dst], dtype=np.int64).reshape(3, -1), axis=1)
    return edges[0], edges[1], edges[2]


def break_possible(dfa: DFA, canonical: CanonicalAutomaton) -> np.ndarray:
    """bool[DFA states, open contexts]: whether, with the text so far in that context and the constraint in that
    state, some non-empty completion makes the pre-tokenizer place a piece boundary right here. (The text ending
    here instead is ``accepting[q] and context_final[ctx]``.)"""
    marked, final = canonical.marked_transitions, canonical.marked_final
    src, sym, dst = character_edges(dfa, canonical)
    Q, S = dfa.num_states, len(final)
    # Incoming character edges per constraint state, and the marked DFA inverted (per symbol and target state, the
    # states it comes from; per state, the states whose '#' leads to it).
    order = np.argsort(dst, kind="stable")
    in_bounds = np.searchsorted(dst[order], np.arange(Q + 1)).astype(np.int64)
    in_src, in_sym = src[order].astype(np.int64), sym[order].astype(np.int64)
    hash_next = marked[:, -1].astype(np.int64)
    reach, after_char = _backward(Q, S, dfa.accepting, final, marked.astype(np.int64), hash_next, in_bounds, in_src,
                                  in_sym)
    possible = np.zeros((Q, S), dtype=bool)  # [q, m]: '#' from m, then a character (a non-empty completion)
    has_hash = hash_next >= 0
    possible[:, has_hash] = after_char[:, hash_next[has_hash]]
    states = canonical.context_states
    bits = ((states[:, None] >> np.arange(S, dtype=np.uint64)[None, :]) & np.uint64(1)).astype(bool)  # [ctx, S]
    return (possible[:, None, :] & bits[None, :, :]).any(axis=2)


@njit(cache=True)
def _backward(Q, S, accepting, final, marked, hash_next, in_bounds, in_src, in_sym):
    """reach[q, m]: from constraint state q and marked state m, some completion is read to an accepting, final
    pair (boundaries wherever the marked DFA allows them, each followed by a character); after_char[q, m]: the
    same, its first step a character. A backward search from the accepting pairs over the product's edges."""
    reach = np.zeros((Q, S), dtype=np.bool_)
    after_char = np.zeros((Q, S), dtype=np.bool_)
    stack = np.empty(2 * Q * S + 1, dtype=np.int64)
    top = 0
    for q in range(Q):
        if accepting[q]:
            for m in range(S):
                if final[m]:
                    reach[q, m] = True
                    stack[top] = q * S + m
                    top += 1
    while top > 0:
        top -= 1
        q2, m2 = divmod(stack[top], S)
        for e in range(in_bounds[q2], in_bounds[q2 + 1]):  # a character read from (q, m) lands on (q2, m2)
            q, symbol = in_src[e], in_sym[e]
            for m in range(S):
                if marked[m, symbol] != m2 or after_char[q, m]:
                    continue
                after_char[q, m] = True
                if not reach[q, m]:
                    reach[q, m] = True
                    stack[top] = q * S + m
                    top += 1
                for m0 in range(S):  # '#' from m0, then that character
                    if hash_next[m0] == m and not reach[q, m0]:
                        reach[q, m0] = True
                        stack[top] = q * S + m0
                        top += 1
    return reach, after_char
