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
from product.compiler.node_kernels import NodeTable, open_edges, pending_edges, pending_settled
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
        self._nodes = NodeTable()  # node ids by key q * contexts + ctx
        self._C = canonical.num_contexts
        self._candidates: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._live: dict[int, bool] = {}  # forced (node, merge class) pairs solved
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

    # ---- nodes ----------------------------------------------------------------------------------------------
    def _node(self, q: int, ctx: int) -> int:
        return int(self._nodes.ids(np.array([q * self._C + ctx], dtype=np.int64))[0])

    def _key(self, node: int) -> tuple[int, int]:
        """(regex state, context) of a node."""
        q, ctx = divmod(int(self._nodes.keys[node]), self._C)
        return q, ctx

    def _final(self, node: int) -> bool:
        q, ctx = self._key(node)
        return bool(self._accepting[q]) and bool(self._canonical.context_final[ctx])

    def _settled(self, node: int) -> bool:
        """Live in every merge class, known without looking further (module docstring)."""
        q, ctx = self._key(node)
        return self._final(node) or (ctx < self._num_open and bool(self._break[q, ctx]))

    def _edges(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, target nodes, kind, settled) of every token the regex state reads and the context lets through
        some way, before liveness: a token both inside and boundary-able appears twice (kinds Y and Z); settled:
        whether the target is (``_settled``). Only forced targets get a node id (-1 for the others: liveness never
        asks about them, and ``advance`` finds its target itself)."""
        if node not in self._candidates:
            q, ctx = self._key(node)
            if ctx >= self._num_open:
                self._build_pending([node])
                return self._candidates[node]
            tokens, targets = self._row(q)
            a = self._canonical
            tokens, qs, ctxs, kind, settled = open_edges(tokens, targets, a.inside_next[ctx], a.boundary_next[ctx],
                                                         self._accepting, a.context_final, self._break, self._num_open)
            ids = np.full(len(tokens), -1, dtype=np.int64)
            ids[~settled] = self._nodes.ids(qs[~settled] * self._C + ctxs[~settled])
            self._candidates[node] = (tokens, ids, kind, settled)
        return self._candidates[node]

    def _targets(self, qs: np.ndarray, ctxs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(node ids, settled) of the edges into (qs, ctxs): an id (-1 if settled) and whether the target is
        settled."""
        settled = self._accepting[qs] & self._canonical.context_final[ctxs]
        is_open = ctxs < self._num_open
        settled[is_open] |= self._break[qs[is_open], ctxs[is_open]]
        ids = np.full(len(qs), -1, dtype=np.int64)
        ids[~settled] = self._nodes.ids(qs[~settled] * self._C + ctxs[~settled])
        return ids, settled

    def _build_pending(self, nodes: list[int]) -> None:
        """``_edges`` of many nodes inside an unfinished character at once (one compiled pass,
        ``node_kernels.pending_edges``): the completing tokens their regex states read."""
        keys = [self._key(n) for n in nodes]
        states = sorted({q for q, _ in keys})
        rows = [self._row(q) for q in states]
        row_offsets = np.zeros(max(states) + 2, dtype=np.int64)
        sizes = np.zeros(max(states) + 1, dtype=np.int64)
        sizes[states] = [len(r[0]) for r in rows]
        row_offsets[1:] = np.cumsum(sizes)
        a = self._canonical
        none = np.full(max(states) + 1, -1, dtype=np.int64)
        counts, tokens, edge_keys = pending_edges(
            np.array([q for q, _ in keys], dtype=np.int64), np.array([c - self._num_open for _, c in keys], dtype=np.int64),
            a.pending_offsets, a.pending_tokens, a.pending_next, row_offsets,
            np.concatenate([r[0] for r in rows]).astype(np.int32), np.concatenate([r[1] for r in rows]),
            none, none, np.zeros((1, 1), dtype=np.uint32), self._C)
        qs, ctxs = np.divmod(edge_keys, self._C)
        targets, settled = self._targets(qs, ctxs)
        tokens = tokens.astype(np.int64)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for i, n in enumerate(nodes):
            lo, hi = bounds[i], bounds[i + 1]
            self._candidates[n] = (tokens[lo:hi], targets[lo:hi], np.full(hi - lo, _Y, np.int8), settled[lo:hi])

    def _row(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokens regex state ``q`` reads (ascending) and the states they reach: one walk of the vocabulary
        trie, on first use."""
        if q not in self._state_rows:
            tokens, targets = state_row(self._table, self._trie, q)
            self._state_rows[q] = tokens.astype(np.int64), targets.astype(np.int64)
        return self._state_rows[q]

    # ---- liveness --------------------------------------------------------------------------------------------
    # A (node, merge class) pair is the int ``node * M + mc``, as a state is.
    def _is_live(self, node: int, mc: int) -> bool:
        if self._settled(node):
            return True
        pair = node * self._M + mc
        if pair not in self._live:
            self._solve_region(np.array([pair], dtype=np.int64))
        return self._live[pair]

    def _solve_region(self, frontier: np.ndarray) -> None:
        """Liveness of the (forced node, merge class) pairs ``frontier`` (none known yet) and of every pair they
        depend on, a least fixpoint explored on demand. Each round decides the pairs one edge into a settled node
        keeps alive (``_alive_by_settled``: a compiled pass per regex state for the pending ones); only the rest —
        a few per cent: a completing token is usually forbidden because the merge that makes the character one
        token fires — have their forced edges followed, for that class, to the pairs they enter. When no new pair
        turns up, liveness flows back from the live pairs over those edges; what it does not reach is dead."""
        after, M = self._canonical.after_class, self._M
        found: dict[int, bool] = {}
        successors: dict[int, list[int]] = {}  # pairs not settled in one step -> the pairs their forced edges enter
        while len(frontier):
            alive = self._alive_by_settled(frontier)
            found.update(dict.fromkeys(frontier[alive].tolist(), True))
            undecided = frontier[~alive]
            unbuilt = [n for n in np.unique(undecided // M).tolist()
                       if n not in self._candidates and self._key(n)[1] >= self._num_open]
            if unbuilt:
                self._build_pending(unbuilt)
            entering: set[int] = set()
            for pair in undecided.tolist():
                n, c = divmod(pair, M)
                tokens, targets, kind, settled = self._edges(n)
                forced = ~settled
                tokens, targets, kind = tokens[forced], targets[forced], kind[forced]
                allowed = (kind == _X) | ((kind == _Y) != self._canonical.forbids(c, tokens))
                nexts = successors[pair] = (targets[allowed] * M + after[tokens[allowed]]).tolist()
                entering.update(nexts)
            frontier = np.array([p for p in entering if p not in self._live and p not in found and p not in successors],
                                dtype=np.int64)
        predecessors: dict[int, list[int]] = {}
        for pair, nexts in successors.items():
            for p in nexts:
                predecessors.setdefault(p, []).append(pair)
        stack = [p for p in predecessors if found.get(p, self._live.get(p, False))]
        while stack:
            for pair in predecessors.get(stack.pop(), ()):
                if not found.get(pair, False):
                    found[pair] = True
                    stack.append(pair)
        for pair in successors:
            found.setdefault(pair, False)
        self._live.update(found)

    def _alive_by_settled(self, pairs: np.ndarray) -> np.ndarray:
        """bool per (forced node, merge class) pair: whether one allowed edge reaches a settled node."""
        alive = np.zeros(len(pairs), dtype=bool)
        nodes, classes = np.divmod(pairs, self._M)
        qs, ctxs = np.divmod(self._nodes.keys[nodes], self._C)
        pending = ctxs >= self._num_open
        for n in np.unique(nodes[~pending]).tolist():  # open nodes (the rest of a literal): few, one query each
            where = np.flatnonzero(nodes == n)
            tokens, _, kind, sure = self._edges(n)
            if (kind[sure] == _X).any():  # a boundary token into a settled node: every class lives
                alive[where] = True
                continue
            dead = self._forbidden.dead_classes(tokens[sure & (kind == _Y)], tokens[sure & (kind == _Z)],
                                                classes[where])
            alive[where] = ~np.isin(classes[where], dead)
        a, f = self._canonical, self._forbidden
        for q in np.unique(qs[pending]).tolist():
            where = np.flatnonzero(pending & (qs == q))
            tokens, targets = self._row(q)
            alive[where] = pending_settled(ctxs[where] - self._num_open, classes[where], tokens, targets,
                                           a.pending_offsets, a.pending_tokens, a.pending_next, self._num_open,
                                           self._accepting, a.context_final, self._break, f.position, f.starts,
                                           f.ends, f.offsets, f.dense_row, f.dense)
        return alive

    def _live_rows(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X, Y, Z of a node (ascending): its candidates whose target is live for the merge class the token
        leaves."""
        if node not in self._rows:
            tokens, targets, kind, settled = self._edges(node)
            keep = settled.copy()
            forced = np.flatnonzero(~settled)
            if len(forced):
                pairs, inverse = np.unique(targets[forced] * self._M + self._canonical.after_class[tokens[forced]],
                                           return_inverse=True)
                unknown = np.array([p for p in pairs.tolist() if p not in self._live], dtype=np.int64)
                if len(unknown):
                    self._solve_region(unknown)
                keep[forced] = np.array([self._live[p] for p in pairs.tolist()], dtype=bool)[inverse]
            rows = tuple(tokens[keep & (kind == k)] for k in (_X, _Y, _Z))
            pending = self._key(node)[1] >= self._num_open  # (an open node's edges are in row order, ascending)
            self._rows[node] = tuple(np.sort(r) for r in rows) if pending else rows
        return self._rows[node]

    # ---- serving ---------------------------------------------------------------------------------------------
    def _split(self, state: int) -> tuple[int, int]:
        node, mc = divmod(int(state), self._M)
        if not 0 <= node < len(self._nodes):
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
        q, ctx = self._key(node)
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

