"""DirectMerge: apply a BPE merge table, in order, to a character/byte DFA, giving the token-level DFA of
exactly the canonical tokenizations of the DFA's language (appendix Algorithms 1 and 2).

The automaton is kept sparse (dicts) with the four indexes the appendix suggests: forward edges, reverse
edges, and which states have a token as outgoing label. Each merge (a, b) -> ab rewrites only the states
with an incoming ``a`` and an outgoing ``b``:

- a != b (Algorithm 1): add ``ab`` edges from every a-predecessor to δ(S, b); then, depending on whether S is
  still needed by paths that did not arrive via ``a`` (C1: start state or a non-a incoming edge) and by
  paths that leave without ``b`` (C2: accepting or a non-b outgoing edge), split S, drop its incoming a
  edges, drop its b edge, or delete it.
- a == a (Algorithm 2): twin every state with an incoming and an outgoing ``a`` into an even and an odd
  copy, cross the ``a`` edges between parities, run Algorithm 1's step on each odd twin, then prune states
  that are unreachable or cannot reach acceptance. This is the appendix's version, not the notebook's,
  whose parity seeding drops canonical tokenizations (e.g. ``a+ba*`` with merge (a, a)).

Merges are applied in the order the runtime fires them, which is rank order except for lists converted from
tiktoken ranks (Llama-3): there a merge can wait for an operand that is built by a higher-ranked merge. Each
pair fires, wherever it occurs, at the clock ``max(rank, completed_at[a], completed_at[b])`` (the largest
rank applied when both operands exist: ``bpe.canonical`` derives it), so merges are applied sorted by that
clock; merges sharing a clock go after the merges that build their operands at that clock, then by rank
(the runtime takes the lowest-ranked pair present).

It is exact for a merge table alone: it knows nothing of pre-tokenizer boundaries, byte fallback or
``ignore_merges``, and its output can be much larger than its input (that is what CartesianMerge avoids). Use
it as the reference on small languages of single pre-tokens.
"""

from __future__ import annotations

import weakref
from collections import defaultdict

import numpy as np

from automata import DFA, MISSING, Alphabet
from bpe.canonical import derivations, pair_ranks
from bpe.errors import TokenizerError
from bpe.model import Tokenizer

__all__ = ["TokenDFA", "direct_merge"]


class TokenDFA:
    """A DFA over token ids: ``dfa`` reads symbols, symbol i standing for token ``token_ids[i]``."""

    def __init__(self, dfa: DFA, token_ids: np.ndarray):
        self.dfa, self.token_ids = dfa, token_ids
        self._symbol = {int(t): i for i, t in enumerate(token_ids)}

    def accepts(self, ids) -> bool:
        symbols = [self._symbol.get(int(t), -1) for t in ids]
        return -1 not in symbols and self.dfa.accepts(symbols)

    def sequences(self, max_count: int = 100_000) -> list[list[int]]:
        """All accepted token sequences of a finite language."""
        return [[int(self.token_ids[s]) for s in seq] for seq in self.dfa.strings(max_count)]


class _Sparse:
    def __init__(self) -> None:
        self.fwd: list[dict[int, int]] = []
        self.rev: list[dict[int, set[int]]] = []
        self.sources: dict[int, set[int]] = defaultdict(set)  # token -> states with an outgoing edge on it
        self.accepting: set[int] = set()
        self.alive: set[int] = set()
        self.start = 0

    def new_state(self, accepting: bool) -> int:
        self.fwd.append({})
        self.rev.append(defaultdict(set))
        s = len(self.fwd) - 1
        self.alive.add(s)
        if accepting:
            self.accepting.add(s)
        return s

    def add(self, s: int, t: int, d: int) -> None:
        old = self.fwd[s].get(t)
        if old is not None:
            if old == d:
                return
            self.remove(s, t)
        self.fwd[s][t] = d
        self.rev[d][t].add(s)
        self.sources[t].add(s)

    def remove(self, s: int, t: int) -> None:
        d = self.fwd[s].pop(t)
        self.rev[d][t].discard(s)
        if not self.rev[d][t]:
            del self.rev[d][t]
        self.sources[t].discard(s)

    def delete(self, s: int) -> None:
        for t in list(self.fwd[s]):
            self.remove(s, t)
        for t, preds in list(self.rev[s].items()):
            for p in list(preds):
                self.remove(p, t)
        self.alive.discard(s)
        self.accepting.discard(s)

    def process_state(self, s: int, a: int, b: int, ab: int) -> None:
        """Algorithm 1's ProcessState(S, a, b); also used on odd twins with b == a."""
        sb = self.fwd[s][b]
        preds = set(self.rev[s].get(a, ()))
        for p in preds:
            self.add(p, ab, sb)
        c1 = s == self.start or any(x != a for x in self.rev[s])
        c2 = s in self.accepting or any(y != b for y in self.fwd[s])
        if c1 and c2:
            twin = self.new_state(s in self.accepting)
            for p in preds:
                self.add(p, a, twin)
            for y, d in list(self.fwd[s].items()):
                if y != b:
                    self.add(twin, y, d)
        elif c1:
            for p in preds:
                self.remove(p, a)
        elif c2:
            self.remove(s, b)
        else:
            self.delete(s)

    def merge_distinct(self, a: int, b: int, ab: int) -> None:
        affected = [s for s in self.sources.get(b, ()) if a in self.rev[s]]
        for s in affected:
            if s in self.alive and b in self.fwd[s] and a in self.rev[s]:
                self.process_state(s, a, b, ab)

    def merge_same(self, a: int, aa: int) -> None:
        evens = [s for s in self.sources.get(a, ()) if a in self.rev[s]]
        in_e = set(evens)
        odd = {s: self.new_state(s in self.accepting) for s in evens}
        twins = set(odd.values())
        for s in evens:
            for y, d in list(self.fwd[s].items()):
                if y == a and d in in_e:
                    self.add(s, a, odd[d])  # even -> odd
                    self.add(odd[s], a, d)  # odd -> even
                else:
                    self.add(odd[s], y, d)
        for s in evens:
            for p in list(self.rev[s].get(a, ())):
                if p not in in_e and p not in twins:
                    self.add(p, a, odd[s])  # from outside E, an a arrives with odd parity
        for s in evens:
            twin = odd[s]
            if twin in self.alive and a in self.fwd[twin]:
                self.process_state(twin, a, a, aa)
        self.prune()

    def prune(self) -> None:
        reach, todo = {self.start}, [self.start]
        while todo:
            for d in self.fwd[todo.pop()].values():
                if d not in reach:
                    reach.add(d)
                    todo.append(d)
        co, todo = set(self.accepting & reach), list(self.accepting & reach)
        while todo:
            for preds in self.rev[todo.pop()].values():
                for p in preds:
                    if p not in co and p in reach:
                        co.add(p)
                        todo.append(p)
        for s in list(self.alive):
            if s not in co and s != self.start:
                self.delete(s)


def _base_token_of_symbol(dfa: DFA, tokenizer: Tokenizer) -> np.ndarray:
    by_bytes = {tokenizer.token_bytes[t]: int(t) for t in tokenizer.base_token_ids}
    out = np.full(dfa.num_symbols, -1, dtype=np.int64)
    for x in range(dfa.num_symbols):
        key = bytes([x]) if dfa.alphabet.kind == "bytes" else dfa.alphabet.chars[x].encode("utf-8")
        out[x] = by_bytes.get(key, -1)
    return out


_FIRING_ORDER: weakref.WeakKeyDictionary[Tokenizer, list[tuple[int, int, int]]] = weakref.WeakKeyDictionary()


def _firing_order(tokenizer: Tokenizer) -> list[tuple[int, int, int]]:
    """The merge rows (left, right, result), first row of each pair only, in the order the runtime fires them
    (see the module docstring); computed once per tokenizer object (it runs BPE on every token: ~2 s on
    Llama-3)."""
    order = _FIRING_ORDER.get(tokenizer)
    if order is None:
        order = _FIRING_ORDER[tokenizer] = _compute_firing_order(tokenizer)
    return order


def _compute_firing_order(tokenizer: Tokenizer) -> list[tuple[int, int, int]]:
    table, V = tokenizer.merge_table, tokenizer.vocab_size
    pairs, first = pair_ranks(table, V)
    completed_at = derivations(table, V, tokenizer.base_token_ids, pairs, first).completed_at
    left, right = (pairs // V).astype(np.int64), (pairs % V).astype(np.int64)
    clock = np.maximum(first, np.maximum(completed_at[left], completed_at[right]))
    # A merge waiting for an operand built at its own clock goes after the merge that builds it: depth 0 for
    # merges whose operands exist before the clock, 1 + the depth of the operand's building merge otherwise.
    # Only clocks with a waiting merge need this; their groups are tiny, so relax depths until they settle.
    result = table[first, 2].astype(np.int64)
    depth = np.zeros(len(first), dtype=np.int64)
    waiting_clocks = np.unique(clock[clock > first])
    group_of = np.flatnonzero(np.isin(clock, waiting_clocks))
    group_of = group_of[np.argsort(clock[group_of], kind="stable")]
    bounds = np.searchsorted(clock[group_of], waiting_clocks.tolist() + [np.iinfo(np.int64).max])
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        group, at = group_of[lo:hi].tolist(), int(clock[group_of[lo]])
        for _ in range(len(group)):
            built = {}  # token built at this clock -> depth of its merge
            for i in group:
                built[int(result[i])] = min(built.get(int(result[i]), depth[i]), depth[i])
            changed = False
            for i in group:
                d = 1 + max([built.get(int(t), -1) for t in (left[i], right[i]) if completed_at[t] == at], default=-1)
                if d != depth[i]:
                    depth[i], changed = d, True
            if not changed:
                break
    rows = np.lexsort((first, depth, clock))
    return table[first[rows]].tolist()


def direct_merge(dfa: DFA, tokenizer: Tokenizer) -> TokenDFA:
    """The token-level DFA of the canonical tokenizations (merge table only) of ``dfa``'s language.

    ``dfa`` reads bytes (byte-level tokenizers) or characters (others); each symbol must be a base token of
    the tokenizer, or the edges reading it are dropped (they have no tokenization without byte fallback).
    """
    if dfa.alphabet.kind == "bytes" and not tokenizer.byte_level:
        raise TokenizerError("a byte-level DFA needs a byte-level tokenizer; build the DFA over characters")
    trimmed = dfa.trim()
    symbol_token = _base_token_of_symbol(trimmed, tokenizer)
    g = _Sparse()
    for s in range(trimmed.num_states):
        g.new_state(bool(trimmed.accepting[s]))
    g.start = trimmed.start
    src, sym = np.nonzero(trimmed.transitions != MISSING)
    for s, x in zip(src.tolist(), sym.tolist()):
        if symbol_token[x] >= 0:
            g.add(s, int(symbol_token[x]), int(trimmed.transitions[s, x]))
    g.prune()
    for a, b, ab in _firing_order(tokenizer):
        if not g.sources.get(b) or not g.sources.get(a):
            continue
        if a == b:
            g.merge_same(a, ab)
        else:
            g.merge_distinct(a, b, ab)
    g.prune()
    states = sorted(g.alive)
    index = {s: i for i, s in enumerate(states)}
    tokens = sorted({t for s in states for t in g.fwd[s]})
    column = {t: i for i, t in enumerate(tokens)}
    table = np.full((len(states), max(1, len(tokens))), MISSING, dtype=np.int32)
    for s in states:
        for t, d in g.fwd[s].items():
            table[index[s], column[t]] = index[d]
    accepting = np.array([s in g.accepting for s in states], dtype=bool)
    labels = Alphabet("labels", tuple(str(t) for t in tokens) or ("",))
    return TokenDFA(DFA(table, accepting, index[g.start], labels), np.array(tokens, dtype=np.int64))
