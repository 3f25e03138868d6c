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

A fragment of a stitched constraint ends at cut exits where the text goes on in another fragment: a completion may
stop there when the marked DFA accepts whatever text follows from the state it is in (``universal_states``), so the
boundary it placed stands for every continuation.

For a recursive grammar's call automaton (``automata.grammar.pushdown``) the completion runs through the rules on
the stack; ``call_summaries`` gives, per state and marked state, the marked states a completion of the state's rule
can end in (the Bar-Hillel construction over the 21-33 marked states), from which a configuration's test is a pass
over its stacks (``product.runtime.pushdown``).

Here: ``character_edges`` (a byte DFA's transitions on whole characters, as marked-DFA symbols),
``break_possible`` (per DFA state and open context) and ``universal_states``. Where it is false, the text must go on inside the current
piece, and liveness depends on the merge class (a forced piece: the rest of a literal, an unfinished character);
deciding those is the token-level search this module leaves to its caller.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from automata.dfa import DFA
from bpe.automaton import CanonicalAutomaton
from product.compiler.tables import per_automaton

__all__ = ["character_edges", "break_possible", "universal_states", "call_summaries", "after_hash_states"]

def character_edges(dfa: DFA, canonical: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, symbol, target) of every whole character a byte DFA reads from a state where a character starts:
    a byte path of one UTF-8 character, its code points mapped to the marked DFA's symbols (one edge per distinct
    (source, symbol, target)). Continuation bytes are followed as runs of equal targets (``_multibyte_ranges``), so
    a state that reads every character costs a few hundred runs, not a million code points."""
    T = np.ascontiguousarray(dfa.transitions)
    starts, values = canonical.symbol_starts, canonical.symbol_values
    ascii_q, ascii_b = np.nonzero(T[:, :0x80] >= 0)  # one byte, one character: all states at once
    ascii_symbol = values[np.searchsorted(starts, np.arange(0x80), side="right") - 1]
    readers = np.flatnonzero((T[:, 0xC2:0xF5] >= 0).any(axis=1))  # the few states reading longer ones
    q, lo, hi, target = _multibyte_ranges(T, readers.astype(np.int64))
    # each range's symbols: the symbol runs it meets
    first = np.searchsorted(starts, lo, side="right") - 1
    count = np.searchsorted(starts, hi, side="right") - first
    at = np.repeat(first - np.cumsum(np.append(0, count[:-1])), count) + np.arange(int(count.sum()))
    src = np.concatenate([ascii_q, np.repeat(q, count)]).astype(np.int64)
    sym = np.concatenate([ascii_symbol[ascii_b], values[at]]).astype(np.int64)
    dst = np.concatenate([T[ascii_q, ascii_b], np.repeat(target, count)]).astype(np.int64)
    num_symbols, num_states = int(values.max()) + 1, dfa.num_states
    key = np.unique((src * num_symbols + sym) * num_states + dst)
    rest, dst = np.divmod(key, num_states)
    src, sym = np.divmod(rest, num_symbols)
    return src, sym, dst


@njit(cache=True)
def _multibyte_ranges(T, states):
    """(state, first code point, last code point, target) for the multi-byte characters each of ``states`` reads,
    as ranges whose code points all lead to one target: a stack of (state reached, code points covered by the
    bytes read so far, continuation bytes still needed); a row of continuation bytes that all lead alike keeps the
    range whole, another splits it into its runs."""
    out_q = np.empty(1024, np.int64)
    out_lo = np.empty(1024, np.int64)
    out_hi = np.empty(1024, np.int64)
    out_t = np.empty(1024, np.int64)
    n = 0
    stack = np.empty((4096, 5), np.int64)  # q, state, lo, hi, need
    for q in states:
        top = 0
        for first, last, length in ((0xC2, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF4, 4)):
            for lead in range(first, last + 1):
                if T[q, lead] >= 0:
                    lo = (lead & (0xFF >> (length + 1))) << (6 * (length - 1))
                    stack[top, 0], stack[top, 1], stack[top, 2] = q, T[q, lead], lo
                    stack[top, 3], stack[top, 4] = lo + (1 << (6 * (length - 1))) - 1, length - 1
                    top += 1
        while top > 0:
            top -= 1
            state, lo, hi, need = stack[top, 1], stack[top, 2], stack[top, 3], stack[top, 4]
            if need == 0:
                if n == len(out_q):
                    out_q, out_lo = np.concatenate((out_q, out_q)), np.concatenate((out_lo, out_lo))
                    out_hi, out_t = np.concatenate((out_hi, out_hi)), np.concatenate((out_t, out_t))
                out_q[n], out_lo[n], out_hi[n], out_t[n] = q, lo, hi, state
                n += 1
                continue
            uniform = True
            for b in range(0x81, 0xC0):
                if T[state, b] != T[state, 0x80]:
                    uniform = False
                    break
            if uniform:  # every next byte alike: the same code points, one byte further
                if T[state, 0x80] >= 0:
                    stack[top, 1], stack[top, 4] = T[state, 0x80], need - 1
                    top += 1
                continue
            span = 1 << (6 * (need - 1))  # code points under one more byte
            for base in range(lo, hi + 1, 64 * span):  # each prefix on its own, split into runs of one target
                b = 0
                while b < 64:
                    target = T[state, 0x80 + b]
                    e = b
                    while e + 1 < 64 and T[state, 0x80 + e + 1] == target:
                        e += 1
                    if target >= 0:
                        if top == len(stack):
                            stack = np.concatenate((stack, stack))
                        stack[top, 0], stack[top, 1], stack[top, 2] = q, target, base + b * span
                        stack[top, 3], stack[top, 4] = base + (e + 1) * span - 1, need - 1
                        top += 1
                    b = e + 1
    return out_q[:n], out_lo[:n], out_hi[:n], out_t[:n]


def break_possible(dfa: DFA, canonical: CanonicalAutomaton, *, ends: np.ndarray | None = None,
                   exits: np.ndarray | None = None) -> np.ndarray:
    """bool[DFA states, open contexts]: whether, with the text so far in that context and the constraint in that
    state, some non-empty completion makes the pre-tokenizer place a piece boundary right here. (The text ending
    here instead is ``ends[q] and context_final[ctx]``.)

    ``ends`` (default ``dfa.accepting``): where the text may end. ``exits``: bool [DFA state, open context], where
    the text goes on past a cut into a fragment that is live from that context (``product.stitched``): a completion
    may stop at such a state in a marked-DFA state m from which every text has a correct marking
    (``universal_states``: whatever follows the cut, the boundary here stands) if every context holding m is live
    there (the context the tokens leave at the cut holds the marked state the text is in)."""
    marked, final = canonical.marked_transitions, canonical.marked_final
    src, sym, dst = character_edges(dfa, canonical)
    Q, S = dfa.num_states, len(final)
    ends = dfa.accepting if ends is None else ends
    seeds = ends[:, None] & final[None, :]
    states = canonical.context_states
    bits = ((states[:, None] >> np.arange(S, dtype=np.uint64)[None, :]) & np.uint64(1)).astype(bool)  # [ctx, S]
    if exits is not None:  # (q, m): no context holding m is dead at q
        dead_somewhere = (~exits[:, :, None] & bits[None, :, :]).any(axis=1)
        seeds |= exits.any(axis=1)[:, None] & universal_states(canonical)[None, :] & ~dead_somewhere
    # Incoming character edges per constraint state, and the marked DFA inverted (per symbol and target state, the
    # states it comes from; per state, the states whose '#' leads to it).
    order = np.argsort(dst, kind="stable")
    in_bounds = np.searchsorted(dst[order], np.arange(Q + 1)).astype(np.int64)
    in_src, in_sym = src[order].astype(np.int64), sym[order].astype(np.int64)
    hash_next = marked[:, -1].astype(np.int64)
    reach, after_char = _backward(Q, S, seeds, *_marked_inverse(canonical), in_bounds, in_src, in_sym)
    possible = np.zeros((Q, S), dtype=bool)  # [q, m]: '#' from m, then a character (a non-empty completion)
    has_hash = hash_next >= 0
    possible[:, has_hash] = after_char[:, hash_next[has_hash]]
    return (possible[:, None, :] & bits[None, :, :]).any(axis=2)


def universal_states(canonical: CanonicalAutomaton) -> np.ndarray:
    """bool[marked-DFA states]: from the state, every text (the empty one included) has a correct marking — the
    marked DFA with ``#`` read as an empty move accepts every text. Subsets of states reached by the same text, from
    each state alone (14 of Llama-3's 33 states, 26 subsets in all; GPT-2: 8 of 23), once per automaton (~40 ms)."""
    return per_automaton(canonical, "universal marked states", lambda: _universal_states(canonical))


def _universal_states(canonical: CanonicalAutomaton) -> np.ndarray:
    marked, final = canonical.marked_transitions, canonical.marked_final
    hash_next, num_symbols = marked[:, -1], marked.shape[1] - 1

    def closure(states) -> frozenset:
        found, stack = set(states), list(states)
        while stack:
            h = int(hash_next[stack.pop()])
            if h >= 0 and h not in found:
                found.add(h)
                stack.append(h)
        return frozenset(found)

    successors: dict[frozenset, list[frozenset]] = {}
    universal = np.zeros(len(final), dtype=bool)
    for m in range(len(final)):
        seen, stack, ok = set(), [closure([m])], True
        while stack and ok:
            subset = stack.pop()
            if subset in seen:
                continue
            seen.add(subset)
            ok = bool(final[list(subset)].any()) if subset else False
            if subset not in successors:
                successors[subset] = [closure([int(marked[x, k]) for x in subset if marked[x, k] >= 0])
                                      for k in range(num_symbols)]
            stack += successors[subset]
        universal[m] = ok
    return universal


def _marked_inverse(canonical: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The marked DFA read backwards, as CSR arrays: the states m with ``marked[m, symbol] == m2`` are
    ``by_symbol[symbol_starts[symbol * S + m2]:symbol_starts[symbol * S + m2 + 1]]``, those whose ``#`` leads to m
    ``by_hash[hash_starts[m]:hash_starts[m + 1]]`` (``_backward`` visits only these, not every state per edge: a
    fragment's boundary test 15 -> 4 ms on an "anything" value's ~770 states). Once per automaton."""
    def build():
        marked = canonical.marked_transitions.astype(np.int64)
        S = marked.shape[0]
        m, symbol = np.nonzero(marked[:, :-1] >= 0)
        key = symbol * S + marked[m, symbol]
        order = np.argsort(key, kind="stable")
        symbol_starts = np.searchsorted(key[order], np.arange((marked.shape[1] - 1) * S + 1)).astype(np.int64)
        hashed = np.flatnonzero(marked[:, -1] >= 0)
        target = marked[hashed, -1]
        hash_order = np.argsort(target, kind="stable")
        hash_starts = np.searchsorted(target[hash_order], np.arange(S + 1)).astype(np.int64)
        return symbol_starts, m[order].astype(np.int64), hash_starts, hashed[hash_order].astype(np.int64)

    return per_automaton(canonical, "marked DFA inverse", build)


@njit(cache=True)
def _backward(Q, S, seeds, symbol_starts, by_symbol, hash_starts, by_hash, in_bounds, in_src, in_sym):
    """reach[q, m]: from constraint state q and marked state m, some completion is read to a pair of ``seeds``
    (boundaries wherever the marked DFA allows them, each followed by a character); after_char[q, m]: the same, its
    first step a character. A backward search from the seeds over the product's edges (the marked DFA's inverse:
    ``_marked_inverse``)."""
    reach = np.zeros((Q, S), dtype=np.bool_)
    after_char = np.zeros((Q, S), dtype=np.bool_)
    stack = np.empty(2 * Q * S + 1, dtype=np.int64)
    top = 0
    for q in range(Q):
        for m in range(S):
            if seeds[q, m]:
                reach[q, m] = True
                stack[top] = q * S + m
                top += 1
    while top > 0:
        top -= 1
        q2, m2 = divmod(stack[top], S)
        for e in range(in_bounds[q2], in_bounds[q2 + 1]):  # a character read from (q, m) lands on (q2, m2)
            q, k = in_src[e], in_sym[e] * S + m2
            for i in range(symbol_starts[k], symbol_starts[k + 1]):
                m = by_symbol[i]
                if after_char[q, m]:
                    continue
                after_char[q, m] = True
                if not reach[q, m]:
                    reach[q, m] = True
                    stack[top] = q * S + m
                    top += 1
                for j in range(hash_starts[m], hash_starts[m + 1]):  # '#' from m0, then that character
                    m0 = by_hash[j]
                    if not reach[q, m0]:
                        reach[q, m0] = True
                        stack[top] = q * S + m0
                        top += 1
    return reach, after_char


def after_hash_states(canonical: CanonicalAutomaton) -> np.ndarray:
    """uint64 [open contexts]: per open context, the marked states reached by reading ``#`` from one of its states
    (as bits): where a completion starts when the pre-tokenizer places a boundary here. Once per automaton."""
    return per_automaton(canonical, "after hash states", lambda: _after_hash_states(canonical))


def _after_hash_states(canonical: CanonicalAutomaton) -> np.ndarray:
    marked = canonical.marked_transitions
    hash_next = marked[:, -1].astype(np.int64)
    out = np.zeros(canonical.num_open_contexts, dtype=np.uint64)
    for ctx in range(canonical.num_open_contexts):
        states = int(canonical.context_states[ctx])
        for m in range(len(hash_next)):
            if states >> m & 1 and hash_next[m] >= 0:
                out[ctx] |= np.uint64(1) << np.uint64(hash_next[m])
    return out


def call_summaries(automaton, canonical: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first_char, anything, nullable) of a ``CallAutomaton``: ``first_char[s, m]`` (uint64, bits of marked states)
    the marked states a non-empty completion of ``s``'s rule from s (to an accepting state of the rule, the rules it
    calls completed too) can end in, read from marked state m starting with a character (no ``#`` first);
    ``anything[s, m]`` the same for any completion, ``#`` moves anywhere and the empty one included;
    ``nullable[s]``: the rule can end from s reading nothing. A least fixpoint (``_summaries``)."""
    marked = canonical.marked_transitions
    S = marked.shape[0]
    if S > 64:
        raise ValueError(f"a marked DFA of {S} states does not fit the 64-bit sets of call_summaries")
    src, sym, dst = character_edges(automaton.dfa, canonical)
    order = np.argsort(-src, kind="stable")  # (rules number states forwards: completions propagate back faster)
    calls = automaton.calls
    return _summaries(automaton.num_states, S, automaton.accepting, src[order], sym[order], dst[order],
                      calls[:, 0].copy(), automaton.rule_start[calls[:, 1]].astype(np.int64), calls[:, 2].copy(),
                      marked.astype(np.int64), marked[:, -1].astype(np.int64))


@njit(cache=True)
def _summaries(Q, S, accepting, src, sym, dst, call_src, call_start, call_ret, marked, hash_next):
    """``call_summaries``' fixpoint: sweeps over the character edges, the calls and the leading ``#`` moves until
    nothing grows (sets only grow, so it ends)."""
    hash_closure = np.zeros(S, dtype=np.uint64)
    for m in range(S):
        x = m
        while x >= 0 and not (hash_closure[m] >> np.uint64(x)) & np.uint64(1):
            hash_closure[m] |= np.uint64(1) << np.uint64(x)
            x = hash_next[x]
    first = np.zeros((Q, S), dtype=np.uint64)
    anything = np.zeros((Q, S), dtype=np.uint64)
    nullable = accepting.copy()
    for s in range(Q):
        if accepting[s]:
            anything[s, :] = hash_closure
    changed = True
    while changed:
        changed = False
        for e in range(len(src)):
            s, c, t = src[e], sym[e], dst[e]
            for m in range(S):
                m2 = marked[m, c]
                if m2 < 0:
                    continue
                v = anything[t, m2]
                if v & ~first[s, m]:
                    first[s, m] |= v
                    changed = True
                if v & ~anything[s, m]:
                    anything[s, m] |= v
                    changed = True
        for e in range(len(call_src)):
            s, x0, r = call_src[e], call_start[e], call_ret[e]
            if nullable[x0] and nullable[r] and not nullable[s]:
                nullable[s] = True
                changed = True
            for m in range(S):
                via_any = np.uint64(0)
                via_first = np.uint64(0)
                bits_any, bits_first = anything[x0, m], first[x0, m]
                for m2 in range(S):
                    if (bits_any >> np.uint64(m2)) & np.uint64(1):
                        via_any |= anything[r, m2]
                    if (bits_first >> np.uint64(m2)) & np.uint64(1):
                        via_first |= anything[r, m2]
                if nullable[x0]:
                    via_first |= first[r, m]
                if via_first & ~first[s, m]:
                    first[s, m] |= via_first
                    changed = True
                if (via_any | via_first) & ~anything[s, m]:
                    anything[s, m] |= via_any | via_first
                    changed = True
        for s in range(Q):
            for m in range(S):
                h = hash_next[m]
                if h >= 0 and anything[s, h] & ~anything[s, m]:
                    anything[s, m] |= anything[s, h]
                    changed = True
    return first, anything, nullable
