"""A regex guide built as it is walked: a node's rows and its targets' liveness on first visit (issue 35).

``product.compiler.tables.CompiledGuide`` builds every product node (regex state, canonical context) and solves
liveness over all of them before the first mask; a generation visits about 1 % of them
(``bench/liveness_locality.py``). ``LazyGuide`` serves the same masks and builds only what is asked:

- a node's candidate tokens on first visit: the regex state's row (``TokenTransitions``) split as the canonical
  automaton splits it — X (a boundary must precede the token), Y (the token may continue the piece: allowed iff not
  forbidden after the merge class), Z (it may do either: its boundary target, taken iff forbidden);
- each candidate's target liveness, for the merge class the token leaves behind (``after_class``): a target where
  the text may end, or where some completion lets the pre-tokenizer place a piece boundary
  (``product.compiler.boundaries.break_possible``), is live in every merge class; the others are *forced* — the
  text must go on inside the current piece (the rest of a literal, an unfinished character) — and are decided by
  a least fixpoint over the forced region reachable from them, for the merge classes that enter it;
- ``mask(node, mc) = X | (Y & ~F[mc]) | (Z & F[mc])`` (+ EOS where the text may end): the node's rows stored as the
  eager guide stores them (few class-dependent tokens as arrays, many packed: ``CompiledGuide._store_rows``) and the
  mask filled by the same compiled kernel (``product.runtime.kernels.cpu.fill_mask``), cached per state.

So every allowed token still leads to a live state, and the masks equal the eager guide's (tested state by state
along walks). It serves what a generation loop calls (``allowed``, ``fill_bitmask``, ``advance``, ``forced_tokens``,
``is_accepting``, ``accepts``), first visits under a lock. Leaves out (for now): counted repetitions, stitched
fragments, batch kernels over many guides, the any-tokenization comparison mode, a compile budget for first visits;
the region fixpoint is Python over numpy (a tokenizer without pre-tokenizer splits, such as Mistral's, has no
boundary to settle anything: its forced region is the whole product, ``helps``).
"""

from __future__ import annotations

import threading

import numpy as np

from automata import EmptyLanguageError
from automata.dfa import DFA
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.compiler.boundaries import break_possible
from product.compiler.forbidden import ROW_DENSE, ROW_SPARSE, ROW_SPARSE_PACKED, pack, row_descriptor
from product.compiler.tables import _SPARSE_LIMIT, _forbidden_index, guide_eos, vocabulary_trie
from product.compiler.token_regex import state_row
from product.runtime.guide import Guide, _uint32_rows, forced_chain, only_allowed
from product.runtime.kernels.cpu import fill_mask

__all__ = ["LazyGuide"]

_X, _Y, _Z = 0, 1, 2  # how a candidate is allowed: always / iff not forbidden / iff forbidden


class LazyGuide:
    """Masks of the canonical tokenizations of a regex's language, nodes built on first visit. A state is
    ``node * num_merge_classes + merge_class``, as in ``Guide``."""

    @staticmethod
    def helps(canonical: CanonicalAutomaton) -> bool:
        """Whether the tokenizer's pre-tokenizer places piece boundaries at all: without them (SentencePiece BPE
        such as Mistral's: the whole text is one piece) nothing is settled locally, every liveness question is the
        whole product's, and the eager ``Guide`` answers it faster."""
        return bool((canonical.marked_transitions[:, -1] >= 0).any())

    def __init__(self, dfa: DFA, canonical: CanonicalAutomaton, *, eos_token_ids=None):
        self._canonical = canonical
        self._table = np.ascontiguousarray(dfa.transitions)
        self._trie = vocabulary_trie(canonical)
        self._state_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._accepting = dfa.accepting
        self._break = break_possible(dfa, canonical)  # [DFA state, open context]
        self._M, self._num_open = canonical.num_merge_classes, canonical.num_open_contexts
        self.vocab_size = canonical.vocab_size
        self.eos_token_ids = guide_eos(canonical, eos_token_ids)
        self._node_of: dict[tuple[int, int], int] = {}
        self._keys: list[tuple[int, int]] = []
        self._candidates: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._settled_edges: dict[int, np.ndarray] = {}
        self._live: dict[tuple[int, int], bool] = {}
        self._masks: dict[int, np.ndarray] = {}
        self._descriptors: dict[int, tuple[np.ndarray, tuple]] = {}  # node -> (row descriptor, the arrays it points to)
        self._forbidden = _forbidden_index(canonical)
        self._forbidden_table = self._forbidden.table
        self._eos_array = np.array(self.eos_token_ids, dtype=np.int64)
        self.num_words = (self.vocab_size + 31) // 32
        self._lock = threading.RLock()  # (first visits build shared tables)
        self._forced: dict[int, tuple[int, ...]] = {}
        start = self._node(dfa.start, 0)
        self.initial_state = start * self._M + canonical.start_class % self._M
        if not self._is_live(start, canonical.start_class % self._M):
            raise EmptyLanguageError("no string the regex accepts has a canonical tokenization over this vocabulary")

    # ---- nodes -----------------------------------------------------------------------------------------------
    def _node(self, q: int, ctx: int) -> int:
        key = (int(q), int(ctx))
        node = self._node_of.get(key)
        if node is None:
            node = self._node_of[key] = len(self._keys)
            self._keys.append(key)
        return node

    def _final(self, node: int) -> bool:
        q, ctx = self._keys[node]
        return bool(self._accepting[q]) and bool(self._canonical.context_final[ctx])

    def _settled(self, node: int) -> bool:
        """Live in every merge class, known without looking further (module docstring)."""
        q, ctx = self._keys[node]
        return self._final(node) or (ctx < self._num_open and bool(self._break[q, ctx]))

    def _edges_settled(self, node: int) -> np.ndarray:
        """Per edge of ``_edges(node)``: whether its target is settled (computed once per node)."""
        if node not in self._settled_edges:
            unique, inverse = np.unique(self._edges(node)[1], return_inverse=True)
            self._settled_edges[node] = np.array([self._settled(v) for v in unique.tolist()], dtype=bool)[inverse]
        return self._settled_edges[node]

    def _edges(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, target nodes, kind) of every token the regex state reads and the context lets through some
        way, before liveness: a token both inside and boundary-able appears twice (kinds Y and Z)."""
        if node not in self._candidates:
            q, ctx = self._keys[node]
            tokens, targets = self._row(q)
            a = self._canonical
            if ctx < self._num_open:
                inside, boundary = a.inside_next[ctx, tokens].astype(np.int64), a.boundary_next[ctx, tokens].astype(np.int64)
                x = (inside < 0) & (boundary >= 0)
                y = inside >= 0
                z = y & (boundary >= 0)
                parts = [(tokens[x], targets[x], boundary[x], _X), (tokens[y], targets[y], inside[y], _Y),
                         (tokens[z], targets[z], boundary[z], _Z)]
            else:
                row = ctx - self._num_open
                lo, hi = a.pending_offsets[row], a.pending_offsets[row + 1]
                finishers, nxt = a.pending_tokens[lo:hi].astype(np.int64), a.pending_next[lo:hi].astype(np.int64)
                where = np.searchsorted(tokens, finishers)
                hit = (where < len(tokens)) & (tokens[np.minimum(where, len(tokens) - 1)] == finishers)
                parts = [(finishers[hit], targets[where[hit]], nxt[hit], _Y)]
            out_t, out_n, out_k = [], [], []
            for toks, qs, ctxs, kind in parts:
                keys = qs * (1 << 32) + ctxs
                unique, inverse = np.unique(keys, return_inverse=True)
                ids = np.array([self._node(k >> 32, k & 0xFFFFFFFF) for k in unique.tolist()], dtype=np.int64)
                out_t.append(toks), out_n.append(ids[inverse]), out_k.append(np.full(len(toks), kind, np.int8))
            self._candidates[node] = (np.concatenate(out_t), np.concatenate(out_n), np.concatenate(out_k))
        return self._candidates[node]

    def _row(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokens regex state ``q`` reads (ascending) and the states they reach: one walk of the vocabulary
        trie, on first use."""
        if q not in self._state_rows:
            tokens, targets = state_row(self._table, self._trie, q)
            self._state_rows[q] = tokens.astype(np.int64), targets.astype(np.int64)
        return self._state_rows[q]

    # ---- liveness --------------------------------------------------------------------------------------------
    def _is_live(self, node: int, mc: int) -> bool:
        if self._settled(node):
            return True
        if (node, mc) not in self._live:
            self._solve_region({node: {mc}})
        return self._live[(node, mc)]

    def _solve_region(self, queries: dict[int, set[int]]) -> None:
        """Liveness of the (forced node, merge class) pairs asked and of every pair they depend on: the forced nodes
        reachable through forced nodes, each for the merge classes that enter it; a least fixpoint (live iff some
        allowed edge reaches a settled node or a live pair). One call for all the pairs a node's row asks about."""
        after = self._canonical.after_class
        need: dict[int, set[int]] = {n: set(classes) for n, classes in queries.items()}
        order, seen = list(need), set(need)
        while order:  # the forced region and the classes entering each of its nodes
            n = order.pop()
            tokens, targets, _ = self._edges(n)
            forced = ~self._edges_settled(n)
            for t, v in zip(tokens[forced].tolist(), targets[forced].tolist()):
                need.setdefault(v, set()).add(int(after[t]))
                if v not in seen:
                    seen.add(v)
                    order.append(v)
        live: dict[tuple[int, int], bool] = {}
        waiting: dict[int, tuple[list[int], list[int], list[int], list[int]]] = {}
        for n, classes in need.items():
            tokens, targets, kind = self._edges(n)
            sure = self._edges_settled(n)
            forced = np.flatnonzero(~sure)
            waiting[n] = (tokens[forced].tolist(), kind[forced].tolist(), targets[forced].tolist(),
                          after[tokens[forced]].tolist())
            todo = np.array(sorted(c for c in classes if (n, c) not in self._live), dtype=np.int64)
            if not len(todo):
                continue
            # classes an edge into a settled node keeps alive: all of them with an X edge, else those whose F does
            # not hold every such Y token or does hold a Z one (one batched query, ``ForbiddenSets.dead_classes``)
            if (kind[sure] == _X).any():
                dead = np.zeros(0, dtype=np.int64)
            else:
                dead = self._forbidden.dead_classes(tokens[sure & (kind == _Y)], tokens[sure & (kind == _Z)], todo)
            alive = ~np.isin(todo, dead)
            live.update(zip(((n, c) for c in todo.tolist()), alive.tolist()))
        changed = True
        while changed:  # (forced regions are small where the pre-tokenizer splits: a literal's tail, a character)
            changed = False
            for (n, c), ok in live.items():
                if ok:
                    continue
                tokens, kinds, targets, afters = waiting[n]
                for t, k, v, ac in zip(tokens, kinds, targets, afters):
                    if live.get((v, ac), self._live.get((v, ac), False)) and self._allows(k, c, t):
                        live[(n, c)] = changed = True
                        break
        self._live.update(live)

    def _allows(self, kind: int, mc: int, token: int) -> bool:
        return kind == _X or (kind == _Y) != bool(self._canonical.forbids(mc, token))

    def _live_rows(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X, Y, Z of a node: its candidates whose target is live for the merge class the token leaves."""
        if node not in self._rows:
            tokens, targets, kind = self._edges(node)
            keep = self._edges_settled(node).copy()
            forced = np.flatnonzero(~keep)
            pairs = list(zip(targets[forced].tolist(), self._canonical.after_class[tokens[forced]].tolist()))
            queries: dict[int, set[int]] = {}
            for v, c in pairs:
                if (v, c) not in self._live:
                    queries.setdefault(v, set()).add(c)
            if queries:
                self._solve_region(queries)
            keep[forced] = [self._live[p] for p in pairs]
            self._rows[node] = tuple(np.sort(tokens[keep & (kind == k)]) for k in (_X, _Y, _Z))
        return self._rows[node]

    # ---- serving ---------------------------------------------------------------------------------------------
    def _split(self, state: int) -> tuple[int, int]:
        node, mc = divmod(int(state), self._M)
        if not 0 <= node < len(self._keys):
            raise ValueError(f"{state} is not a state of this guide")
        return node, mc

    def is_accepting(self, state: int) -> bool:
        return self._final(self._split(state)[0])

    def _descriptor(self, node: int) -> np.ndarray:
        """The node's row descriptor for the mask kernel (``CompiledGuide._store_rows``' layout), built once."""
        if node not in self._descriptors:
            X, Y, Z = self._live_rows(node)
            n = self.num_words
            if len(Y) + len(Z) <= _SPARSE_LIMIT:
                Y, Z = (np.ascontiguousarray(a, dtype=np.int32) for a in (Y, Z))
                if len(X) > _SPARSE_LIMIT:
                    kind, arrays = ROW_SPARSE_PACKED, (pack(X, n), Y, Z)
                else:
                    kind, arrays = ROW_SPARSE, (np.ascontiguousarray(X, dtype=np.int32), Y, Z)
            else:
                packed_x = pack(X, n)
                inside = packed_x | pack(Y, n)
                kind, arrays = ROW_DENSE, (inside, inside ^ (packed_x | pack(Z, n)))
            descriptor = np.array(row_descriptor(kind, self._final(node), *arrays), dtype=np.int64)
            self._descriptors[node] = (descriptor, arrays)
        return self._descriptors[node][0]

    def _words(self, state: int) -> np.ndarray:
        """The mask of ``state`` as packed words (bit ``t % 32`` of word ``t // 32``), EOS included."""
        words = self._masks.get(state)
        if words is None:
            with self._lock:
                node, mc = self._split(state)
                words = np.zeros(self.num_words, dtype=np.uint32)
                fill_mask(words, self._forbidden_table, self._descriptor(node).ctypes.data, mc, self._eos_array)
                self._masks[state] = words
        return words

    def fill_bitmask(self, states, out, *, threads: int = 1) -> None:
        """``Guide.fill_bitmask``: the masks of ``states`` into the first rows of ``out`` (int32 or uint32
        ``[rows, num_words]``, numpy or a CPU torch tensor); every state is checked before a row is written.
        (``threads`` is accepted for the interface; the rows are copied one by one.)"""
        rows = _uint32_rows(out, len(states), self.num_words)
        masks = [self._words(int(state)) for state in states]
        for i, words in enumerate(masks):
            rows[i] = words

    def forced_tokens(self, state: int) -> tuple[int, ...]:
        """The chain of tokens that are the only choice from ``state`` (empty where there is a choice, EOS
        included): appending them needs no model call."""
        chain = self._forced.get(state)
        if chain is None:
            chain = self._forced[state] = forced_chain(int(state), self.is_accepting,
                                                       lambda s: only_allowed(self._words(s)), self.advance)
        return chain

    def token_id(self, token_id) -> int:
        """``token_id`` as an int of this vocabulary (``Guide.token_id``)."""
        return Guide.token_id(self, token_id)

    def accepts(self, token_ids) -> bool:
        """Whether ``token_ids`` (no EOS) is a complete text of the constraint, tokenized as the guide allows."""
        state = self.initial_state
        try:
            for t in token_ids:
                state = self.advance(state, int(t))
        except DisallowedTokenError:
            return False
        return self.is_accepting(state)

    def allowed(self, state: int) -> np.ndarray:
        """bool[V]: the tokens that may come next, EOS included where the text may end."""
        words = self._words(state)
        return np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)

    def advance(self, state: int, token_id: int) -> int:
        """The state after ``token_id`` (EOS where the text may end leaves it unchanged); ``DisallowedTokenError``
        for a token the mask does not allow. Decided for the one token: no mask is built."""
        node, mc = self._split(state)
        if token_id in self.eos_token_ids and self._final(node):
            return state
        if not 0 <= token_id < self.vocab_size:
            raise DisallowedTokenError(f"token {token_id} is outside the vocabulary")
        with self._lock:
            return self._advance(node, mc, int(token_id), state)

    def _advance(self, node: int, mc: int, token_id: int, state: int) -> int:
        q, ctx = self._keys[node]
        tokens, targets = self._row(q)
        i = int(np.searchsorted(tokens, token_id))
        if i == len(tokens) or tokens[i] != token_id:
            raise DisallowedTokenError(f"token {token_id} leaves the language in state {state}")
        a = self._canonical
        nxt = a.class_after(ctx * self._M + mc, token_id) // self._M  # (raises where the tokenization is not canonical)
        after = int(a.after_class[token_id])
        target = self._node(int(targets[i]), nxt)
        if not self._is_live(target, after):
            raise DisallowedTokenError(f"token {token_id} leads where no canonical completion exists (state {state})")
        return target * self._M + after

