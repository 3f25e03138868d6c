"""CartesianMerge: a regex constraint intersected with the canonical automaton, served as next-token masks.

The token-level regex automaton (``product.token_regex``) says which token moves regex state ``q`` where; the
canonical automaton (``bpe.automaton``) says which token may follow in class (context, merge class). A guide
state is the triple (q, ctx, mc). The pair (q, ctx) is a *node*; nodes are few (the canonical contexts a regex
state meets), merge classes are many, so the product is never enumerated over merge classes:

    a token t leaving node (q, ctx) goes either *inside* the current piece (when ``inside_next[ctx, t]`` is set
    and t is not forbidden after mc) or across a boundary (``boundary_next``); either way the next merge class
    is ``after_class[t]``, which depends on t alone.

So per node three token sets suffice, whatever the merge class:

    X = boundary-only tokens whose target is live
    Y = tokens that may continue the piece, whose inside target is live           (allowed iff t not in F[mc])
    Z = tokens that may continue the piece, whose boundary target is live         (allowed iff t in F[mc])
    mask(q, ctx, mc) = X | (Y & ~F[mc]) | (Z & F[mc])       (+ EOS where q accepts and the text may end)

Liveness ("acceptance is still reachable") is a least fixpoint over nodes: the dead merge classes of a node are
all of them until the node accepts or one of its tokens reaches something live; after that,
``dead(q, ctx) = {mc : Y ⊆ F[mc] and Z ∩ F[mc] = ∅}`` (empty as soon as X is non-empty). A worklist from the
accepting nodes backwards converges in a few passes. This is ARCHITECTURE.md §3's D/A fixpoint, extended with
the pre-tokenizer contexts; it replaces the reference's enumeration of (regex state, class) pairs. Every
allowed token therefore leads to a live state: generation cannot dead-end.

``canonical_only=False`` swaps the canonical automaton for one that allows every tokenization (one context, one
merge class forbidding nothing): the peers' behaviour, for comparison.

Masks are packed 32-bit words (bit ``t % 32`` of word ``t // 32`` allows token t, the layout outlines-core,
llguidance and xgrammar use), computed on first use and kept in a bounded LRU cache per guide.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict, deque

import numpy as np

from automata import EmptyLanguageError, StateLimitError, from_regex
from automata.dfa import concat_aranges
from automata.errors import CanonmergeError
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.token_regex import TokenTransitions, VocabularyTrie

__all__ = ["Guide", "compile_regex", "InvalidTokenError"]


class InvalidTokenError(CanonmergeError, ValueError):
    """A token id outside the vocabulary."""


_TRIES: "weakref.WeakKeyDictionary[CanonicalAutomaton, VocabularyTrie]" = weakref.WeakKeyDictionary()
_ANY: "weakref.WeakKeyDictionary[CanonicalAutomaton, CanonicalAutomaton]" = weakref.WeakKeyDictionary()
_FORBIDDEN: "weakref.WeakKeyDictionary[CanonicalAutomaton, _Forbidden]" = weakref.WeakKeyDictionary()


def vocabulary_trie(canonical: CanonicalAutomaton) -> VocabularyTrie:
    """The byte trie of ``canonical``'s vocabulary, built once per automaton object."""
    trie = _TRIES.get(canonical)
    if trie is None:
        trie = _TRIES[canonical] = VocabularyTrie.build(canonical.token_bytes)
    return trie


def compile_regex(pattern: str, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                  max_states: int = 100_000, max_transitions: int = 50_000_000,
                  cache_size: int = 4096) -> "Guide":
    """The guide of the strings ``re.fullmatch(pattern, ·)`` accepts, tokenized canonically for ``canonical``'s
    tokenizer (or in any way, with ``canonical_only=False``).

    Errors: ``RegexError`` (syntax interegular cannot parse or does not support), ``EmptyLanguageError`` (no
    string matches, or none has a tokenization over this vocabulary), ``StateLimitError`` (the regex DFA or the
    product exceeds ``max_states`` nodes, or the token transitions exceed ``max_transitions`` entries).
    """
    dfa = from_regex(pattern, max_states=max_states)
    transitions = TokenTransitions.build(dfa, vocabulary_trie(canonical), max_entries=max_transitions)
    return Guide(transitions, canonical, canonical_only=canonical_only, max_states=max_states,
                 cache_size=cache_size, name=pattern)


class Guide:
    """Next-token masks for one constraint. States are ints; ``initial_state`` starts the text.

    Build with ``compile_regex`` (or, to compose constraints, from any ``TokenTransitions`` — the stitched
    fragments of the next layer are one). Thread-compatible, not thread-safe (the mask cache is shared).
    """

    def __init__(self, transitions: TokenTransitions, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                 max_states: int = 100_000, cache_size: int = 4096, name: str = ""):
        self.name = name
        self.canonical_only = canonical_only
        self._tokens = canonical
        self._automaton = canonical if canonical_only else _any_tokenization(canonical)
        self._forbidden = _forbidden_index(self._automaton)
        self._transitions = transitions
        self.vocab_size = canonical.vocab_size
        self.num_words = (self.vocab_size + 31) // 32
        self.eos_token_ids = tuple(int(t) for t in canonical.eos_token_ids)
        self._eos, self._no_eos = np.array(self.eos_token_ids, dtype=np.int32), np.zeros(0, dtype=np.int32)
        self._M = self._automaton.num_merge_classes
        self._explore(max_states)
        self._solve_liveness()
        start = self._node_of[(transitions.start, 0)]
        self.initial_state = start * self._M + self._automaton.start_class % self._M
        if not self._alive(np.array([start]), np.array([self.initial_state % self._M]))[0]:
            raise EmptyLanguageError(f"constraint {name!r}: no string it accepts has a "
                                     f"{'canonical ' if canonical_only else ''}tokenization over this vocabulary")
        self._rows: list[tuple] = [()] * len(self._node_q)
        for node in np.flatnonzero(~self._is_pending).tolist():  # open nodes: few, with large rows
            tokens, inside, boundary, mcs = self._edges[node]
            self._store_rows(node, *(tokens[k] for k in self._row_selectors(inside, boundary, mcs)))
        pending = np.flatnonzero(self._is_pending)
        if len(pending):  # many short rows: one vectorised liveness pass, then split
            parts = [self._edges[n] for n in pending.tolist()]
            X, Y, Z = self._row_selectors(*(np.concatenate([p[i] for p in parts]) for i in (1, 2, 3)))
            bounds = np.concatenate([[0], np.cumsum([len(p[0]) for p in parts])])
            for i, node in enumerate(pending.tolist()):
                lo, hi = bounds[i], bounds[i + 1]
                self._store_rows(node, *(parts[i][0][k[lo:hi]] for k in (X, Y, Z)))
        self._edges = None  # only the rows are needed from here on
        self._masks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._forced: dict[int, tuple[int, ...]] = {}

    # ---- sizes --------------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Product nodes (regex state, canonical context) reached while compiling."""
        return len(self._node_q)

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the compiled guide (transitions, node rows, liveness), excluding the mask cache and the
        shared canonical automaton."""
        arrays = [self._transitions.offsets, self._transitions.tokens, self._transitions.targets]
        arrays += [a for rows in self._rows for a in rows[1:] if a is not None]
        arrays += list(self._dead.values())
        return int(sum(a.nbytes for a in arrays))

    # ---- queries ------------------------------------------------------------------------------------------
    def _split(self, state: int) -> tuple[int, int]:
        node, mc = divmod(int(state), self._M)
        if not 0 <= node < len(self._node_q):
            raise ValueError(f"{state} is not a state of this guide")
        return node, mc

    def is_accepting(self, state: int) -> bool:
        """Whether the text may end here (EOS is allowed exactly in these states)."""
        return bool(self._final[self._split(state)[0]])

    def allowed(self, state: int) -> np.ndarray:
        """bool[V]: the tokens that may come next, EOS included where the state accepts."""
        words = self._mask(state)
        return np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)

    def fill_bitmask(self, states, out: np.ndarray) -> None:
        """Write the masks of a batch of states into ``out`` (int32 or uint32 ``[len(states), num_words]``, a numpy
        array or a CPU torch tensor): bit ``t % 32`` of word ``t // 32`` is set iff token t is allowed."""
        if not isinstance(out, np.ndarray):
            out = out.numpy()  # a CPU torch tensor: same memory
        view = out.view(np.uint32)
        for i, state in enumerate(states):
            view[i] = self._mask(state)

    def advance(self, state: int, token_id: int) -> int:
        """The state after ``token_id``. EOS in an accepting state leaves the state unchanged.

        Raises ``InvalidTokenError`` for an id outside the vocabulary and ``DisallowedTokenError`` for a token the
        mask does not allow (it would leave the language, make the tokenization non-canonical, or dead-end).
        """
        node, mc = self._split(state)
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise InvalidTokenError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        words = self._mask(state)
        if not (int(words[token_id >> 5]) >> (token_id & 31)) & 1:
            raise DisallowedTokenError(f"token {token_id} ({self._describe(token_id)}) is not allowed in state {state} "
                                       f"of {self.name!r}")
        if token_id in self.eos_token_ids:
            return int(state)
        ctx = self._node_ctx[node]
        q = self._transitions.target(self._node_q[node], token_id)
        cls = self._automaton.class_after(ctx * self._M + mc, token_id)
        nxt_ctx, nxt_mc = divmod(cls, self._M)
        return self._node_of[(q, nxt_ctx)] * self._M + nxt_mc

    def forced_tokens(self, state: int) -> tuple[int, ...]:
        """The chain of tokens that are the only choice from ``state`` (empty if there is a choice, EOS included).
        Appending them needs no model call."""
        chain = self._forced.get(state)
        if chain is None:
            out, s = [], int(state)
            while not self.is_accepting(s) and len(out) < 4096:
                words = self._mask(s)
                if int(np.bitwise_count(words).sum()) != 1:
                    break
                w = int(np.flatnonzero(words)[0])
                t = w * 32 + int(words[w]).bit_length() - 1
                out.append(t)
                s = self.advance(s, t)
            chain = self._forced[state] = tuple(out)
        return chain

    def accepts(self, token_ids) -> bool:
        """Whether ``token_ids`` (no EOS) is a complete text of the constraint, tokenized as the guide allows."""
        state = self.initial_state
        try:
            for t in token_ids:
                state = self.advance(state, t)
        except (DisallowedTokenError, InvalidTokenError):
            return False
        return self.is_accepting(state)

    def _describe(self, token_id: int) -> str:
        if not self._tokens.token_has_bytes[token_id]:
            return "special"
        lo, hi = self._tokens.token_offsets[token_id: token_id + 2]
        return repr(self._tokens.token_blob[lo:hi].tobytes())

    # ---- masks --------------------------------------------------------------------------------------------
    def _mask(self, state: int) -> np.ndarray:
        words = self._masks.get(state)
        if words is not None:
            self._masks.move_to_end(state)
            return words
        node, mc = self._split(state)
        words = self._compute_mask(node, mc)
        self._masks[state] = words
        if len(self._masks) > self._cache_size:
            self._masks.popitem(last=False)
        return words

    def _store_rows(self, node: int, X: np.ndarray, Y: np.ndarray, Z: np.ndarray) -> None:
        """Keep a node's rows of token ids: X (allowed whatever the merge class), Y (allowed unless in F[mc]),
        Z (allowed only if in F[mc]). Few tokens: token arrays, tested against F[mc] one by one; many: packed."""
        if len(Y) + len(Z) <= _SPARSE_LIMIT and len(X) <= _SPARSE_LIMIT:
            self._rows[node] = (True, X.astype(np.int32), Y.astype(np.int32), Z.astype(np.int32))
        else:
            n = self.num_words
            self._rows[node] = (False, _pack(X, n), _pack(Y, n), _pack(Z, n) if len(Z) else None)

    def _compute_mask(self, node: int, mc: int) -> np.ndarray:
        sparse, X, Y, Z = self._rows[node]
        eos = self._eos if self._final[node] else self._no_eos
        if sparse:  # few tokens depend on the merge class: test them against F[mc] directly
            forbids = self._automaton.forbids
            return _pack(np.concatenate([X, Y[~forbids(mc, Y)], Z[forbids(mc, Z)], eos]), self.num_words)
        if self._forbidden.size[mc] <= _FEW_FORBIDDEN:  # Y-or-X everywhere, then fix F's few bits
            words = X | Y
            for t in self._forbidden.tokens(mc).tolist():
                w, bit = t >> 5, np.uint32(1 << (t & 31))
                keep = (X[w] & bit) | (Z[w] & bit if Z is not None else 0)
                words[w] = (words[w] & ~bit) | keep
        else:
            forbidden = self._forbidden.words(mc, self.num_words)
            words = X | (Y & ~forbidden)
            if Z is not None:
                words |= Z & forbidden
        for t in eos.tolist():
            words[t >> 5] |= np.uint32(1 << (t & 31))
        return words

    # ---- compilation: explore nodes, then liveness --------------------------------------------------------
    #
    # Nodes come in two kinds. *Open* nodes (no unfinished character) are few — regex states times a few dozen
    # pre-tokenizer contexts — and their rows can span the vocabulary: they are handled one at a time. *Pending*
    # nodes (a token ended inside a UTF-8 character) can number thousands in a free-text state, each with a
    # short row of completing tokens: they are handled in vectorised batches.

    def _explore(self, max_states: int) -> None:
        """Breadth-first over nodes (q, ctx) reachable from (start, 0); per node, its candidate tokens with their
        inside/boundary target nodes and next merge class (``self._edges``)."""
        A, R = self._automaton, self._transitions
        num_open, num_ctx, V = A.num_open_contexts, A.num_contexts, A.vocab_size
        self._node_q: list[int] = []
        self._node_ctx: list[int] = []
        self._node_of: dict[tuple[int, int], int] = {}
        self._edges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._successors: list[np.ndarray] = []  # distinct target nodes per node
        entry_state = np.repeat(np.arange(R.num_states, dtype=np.int64), np.diff(R.offsets))
        entry_keys = entry_state * V + R.tokens  # ascending: rows are sorted by token

        def node_ids(qs: np.ndarray, ctxs: np.ndarray) -> np.ndarray:
            out = np.full(len(qs), -1, dtype=np.int64)
            ok = ctxs >= 0
            keys = qs[ok].astype(np.int64) * num_ctx + ctxs[ok]
            unique, inverse = np.unique(keys, return_inverse=True)
            ids = np.empty(len(unique), dtype=np.int64)
            for i, key in enumerate(unique.tolist()):
                pair = divmod(key, num_ctx)
                found = self._node_of.get(pair)
                if found is None:
                    if len(self._node_q) >= max_states:
                        raise StateLimitError(f"constraint {self.name!r}: more than max_states={max_states} "
                                              f"product nodes")
                    found = self._node_of[pair] = len(self._node_q)
                    self._node_q.append(pair[0])
                    self._node_ctx.append(pair[1])
                ids[i] = found
            out[ok] = ids[inverse]
            return out

        node_ids(np.array([R.start]), np.array([0]))
        done = 0
        while done < len(self._node_q):
            frontier = range(done, len(self._node_q))
            done = len(self._node_q)
            pending = [n for n in frontier if self._node_ctx[n] >= num_open]
            rows: dict[int, tuple] = {}
            for n in frontier:
                if self._node_ctx[n] < num_open:
                    q, ctx = self._node_q[n], self._node_ctx[n]
                    tokens, targets = R.row(q)
                    inside = A.inside_next[ctx, tokens].astype(np.int64)
                    boundary = A.boundary_next[ctx, tokens].astype(np.int64)
                    keep = (inside >= 0) | (boundary >= 0)
                    tokens, targets, inside, boundary = tokens[keep], targets[keep], inside[keep], boundary[keep]
                    inside, boundary = node_ids(targets, inside), node_ids(targets, boundary)
                    successors = np.unique(np.concatenate([inside, boundary]))
                    rows[n] = (tokens, inside, boundary, successors[successors >= 0])
            if pending:  # all pending rows at once: completing tokens of the context that the regex also allows
                nodes = np.array(pending)
                row = np.array([self._node_ctx[n] for n in pending]) - num_open
                lo, hi = A.pending_offsets[row], A.pending_offsets[row + 1]
                entries = concat_aranges(lo, hi)
                owner = np.repeat(np.arange(len(nodes)), hi - lo)
                qs = np.array([self._node_q[n] for n in pending], dtype=np.int64)[owner]
                keys = qs * V + A.pending_tokens[entries]
                at = np.minimum(np.searchsorted(entry_keys, keys), max(len(entry_keys) - 1, 0))
                hit = entry_keys[at] == keys if len(entry_keys) else np.zeros(len(keys), bool)
                entries, owner, at = entries[hit], owner[hit], at[hit]
                inside_all = node_ids(R.targets[at], A.pending_next[entries].astype(np.int64))
                tokens_all = A.pending_tokens[entries]
                bounds = np.searchsorted(owner, np.arange(len(nodes) + 1))
                links = np.unique(owner * (max_states + 1) + inside_all)  # distinct (pending node, target) pairs
                link_owner, link_target = np.divmod(links, max_states + 1)
                link_bounds = np.searchsorted(link_owner, np.arange(len(nodes) + 1))
                for i, n in enumerate(pending):
                    sl = slice(bounds[i], bounds[i + 1])
                    rows[n] = (tokens_all[sl], inside_all[sl], np.full(bounds[i + 1] - bounds[i], -1, np.int64),
                               link_target[link_bounds[i]:link_bounds[i + 1]])
            for n in frontier:
                tokens, inside, boundary, successors = rows[n]
                self._edges.append((tokens.astype(np.int32), inside, boundary, A.after_class[tokens].astype(np.int32)))
                self._successors.append(successors)
        self._is_pending = np.array(self._node_ctx) >= num_open
        q_accepting = R.accepting[np.array(self._node_q)]
        self._final = q_accepting & A.context_final[np.array(self._node_ctx)]

    def _alive(self, nodes: np.ndarray, mcs: np.ndarray) -> np.ndarray:
        """Whether (node, mc) is live, elementwise (-1 nodes are not)."""
        valid = nodes >= 0
        status = np.where(valid, self._status[np.maximum(nodes, 0)], _ALL_DEAD)
        alive = status == _NONE_DEAD
        partial = np.flatnonzero(status == _PARTIAL)
        if len(partial):
            if self._dead_keys is None:  # all partial dead sets as one sorted array of node * M + mc
                self._dead_keys = np.sort(np.concatenate(
                    [n * self._M + d.astype(np.int64) for n, d in self._dead.items()]))
            keys = nodes[partial].astype(np.int64) * self._M + mcs[partial]
            at = np.minimum(np.searchsorted(self._dead_keys, keys), len(self._dead_keys) - 1)
            alive[partial] = self._dead_keys[at] != keys
        return alive

    def _row_selectors(self, inside, boundary, mcs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which candidate edges belong to rows X, Y, Z (see ``_store_rows``), as boolean selectors."""
        inside_ok = inside >= 0
        live_inside = self._alive(inside, mcs)
        live_boundary = self._alive(boundary, mcs)
        return ~inside_ok & live_boundary, live_inside, inside_ok & live_boundary

    _WIDE_ROW = 4096  # nodes with more candidate tokens take their candidate classes from F's sizes instead

    def _entering_and_predecessors(self) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """Per node: the merge classes that can enter it (after_class of the tokens reaching it; ``None`` for
        wide nodes, whose candidates come from F's sizes), and predecessor lists grouped by target."""
        N, M = len(self._node_q), self._M
        width = np.array([len(e[0]) for e in self._edges])
        narrow = width <= self._WIDE_ROW
        parts_target, parts_class = [np.array([self._node_of[(self._transitions.start, 0)]])], \
            [np.array([self._automaton.start_class % M])]
        for tokens, inside, boundary, mcs in self._edges:
            for target in (inside, boundary):
                keep = target >= 0
                keep[keep] = narrow[target[keep]]
                if keep.any():
                    parts_target.append(target[keep])
                    parts_class.append(mcs[keep])
        pairs = np.unique(np.concatenate(parts_target) * M + np.concatenate(parts_class))
        node, cls = np.divmod(pairs, M)
        bounds = np.searchsorted(node, np.arange(N + 1))
        entering = [cls[bounds[n]:bounds[n + 1]] if narrow[n] else None for n in range(N)]
        count = np.array([len(x) for x in self._successors])
        links = np.unique(np.concatenate(self._successors) * N + np.repeat(np.arange(N), count))
        pred_target, pred_source = np.divmod(links, N)
        return entering, pred_target, pred_source, np.searchsorted(pred_target, np.arange(N + 1))

    def _solve_liveness(self) -> None:
        """Least fixpoint, in rounds: every node whose successors changed is recomputed (open nodes one by one,
        pending nodes in one batch), until nothing changes. Dead sets only shrink."""
        N = len(self._node_q)
        self._status = np.where(self._final, _NONE_DEAD, _ALL_DEAD).astype(np.int8)
        self._dead: dict[int, np.ndarray] = {}  # partial nodes: their sorted dead merge classes
        self._dead_keys = None
        entering, pred_target, pred_source, pred_bounds = self._entering_and_predecessors()
        by_size = self._forbidden.classes_by_size

        dirty = np.flatnonzero(~self._final)
        while len(dirty):
            results: dict[int, np.ndarray | None] = {}
            for n in dirty[~self._is_pending[dirty]].tolist():
                tokens, inside, boundary, mcs = self._edges[n]
                X, Y, Z = (tokens[k] for k in self._row_selectors(inside, boundary, mcs))
                candidates = entering[n] if entering[n] is not None else by_size(len(Y))
                results[n] = None if len(X) else self._forbidden.dead_classes(Y, Z, candidates)
            results.update(self._pending_dead(dirty[self._is_pending[dirty]], entering))
            changed = []
            for n, dead in results.items():
                if dead is None or not len(dead):
                    status = _NONE_DEAD
                elif entering[n] is not None and len(dead) == len(entering[n]):
                    status = _ALL_DEAD
                else:
                    status = _PARTIAL
                old = self._status[n]
                if status == old and (status != _PARTIAL or len(dead) == len(self._dead[n])):
                    continue
                self._status[n] = status
                self._dead_keys = None
                if status == _PARTIAL:
                    self._dead[n] = dead
                else:
                    self._dead.pop(n, None)
                changed.append(n)
            if not changed:
                break
            changed = np.array(changed)
            preds = concat_aranges(pred_bounds[changed], pred_bounds[changed + 1])
            dirty = np.unique(pred_source[preds])
            dirty = dirty[~self._final[dirty]]

    def _pending_dead(self, nodes: np.ndarray, entering: list[np.ndarray]) -> dict[int, np.ndarray]:
        """Dead merge classes of many pending nodes at once. A pending node has only inside moves (X = Z = ∅), so
        mc is dead iff every live completing token is in F[mc]: probe each (node, mc) pair with the node's live
        tokens in turn until one is not forbidden; pairs still standing when a node's tokens run out are dead."""
        if not len(nodes):
            return {}
        edges = [self._edges[n] for n in nodes.tolist()]
        tokens = np.concatenate([e[0] for e in edges])
        inside = np.concatenate([e[1] for e in edges])
        mcs = np.concatenate([e[3] for e in edges])
        owner = np.repeat(np.arange(len(nodes)), [len(e[0]) for e in edges])
        live = self._alive(inside, mcs)
        tokens, owner = tokens[live], owner[live]
        live_count = np.bincount(owner, minlength=len(nodes))
        live_start = np.searchsorted(owner, np.arange(len(nodes)))
        classes = [entering[n] for n in nodes.tolist()]
        pair_node = np.repeat(np.arange(len(nodes)), [len(c) for c in classes])
        pair_class = np.concatenate(classes) if classes else np.zeros(0, np.int64)
        # a class forbidding fewer tokens than the node has cannot forbid them all
        standing = np.flatnonzero(self._forbidden.size[pair_class] >= live_count[pair_node])
        probe = 0
        while len(standing):
            exhausted = live_count[pair_node[standing]] <= probe
            standing_open = standing[~exhausted]
            if not len(standing_open):
                break
            token = tokens[live_start[pair_node[standing_open]] + probe]
            forbidden = self._forbidden.member(pair_class[standing_open], self._forbidden.a.forbid_position[token])
            standing = np.concatenate([standing[exhausted], standing_open[forbidden]])
            probe += 1
        dead = np.zeros(len(pair_class), dtype=bool)
        dead[standing] = True
        out = {}
        bounds = np.searchsorted(pair_node, np.arange(len(nodes) + 1))
        for i, n in enumerate(nodes.tolist()):
            out[n] = pair_class[bounds[i]:bounds[i + 1]][dead[bounds[i]:bounds[i + 1]]]
        return out


_NONE_DEAD, _ALL_DEAD, _PARTIAL = 0, 1, 2
_SPARSE_LIMIT = 256  # at most this many class-dependent tokens: mask by direct membership tests
_FEW_FORBIDDEN = 32  # a forbidden set this small is applied bit by bit instead of as a packed row
_DENSE_PACK = 8192  # more tokens than this are packed through a boolean row of the whole vocabulary


def _pack(tokens: np.ndarray, num_words: int) -> np.ndarray:
    """uint32[num_words] with the bits of ``tokens`` (distinct ids) set."""
    if len(tokens) > _DENSE_PACK:
        flags = np.zeros(num_words * 32, dtype=bool)
        flags[tokens] = True
        return np.packbits(flags, bitorder="little").view(np.uint32).copy()
    # Distinct bits of a word add up to their OR, exactly even in float64 (bincount's weights).
    tokens = np.asarray(tokens, dtype=np.int64)
    return np.bincount(tokens >> 5, weights=np.left_shift(1, tokens & 31), minlength=num_words).astype(np.uint32)


class _Forbidden:
    """Queries on one automaton's forbidden sets F[mc] (stored as intervals of a token permutation)."""

    def __init__(self, automaton: CanonicalAutomaton, cache_size: int = 8192):
        self.a = automaton
        M = automaton.num_merge_classes
        counts = np.diff(automaton.forbid_offsets)
        self.interval_class = np.repeat(np.arange(M), counts)
        self.size = np.bincount(self.interval_class, weights=automaton.forbid_ends - automaton.forbid_starts,
                                minlength=M)
        self._by_size = np.argsort(-self.size, kind="stable")
        self._sorted_sizes = -self.size[self._by_size]
        # class-major search keys: interval i of class c starts at keys[i] - c * (V + 1); ascending
        self.keys = self.interval_class.astype(np.int64) * (automaton.vocab_size + 1) + automaton.forbid_starts
        self._words: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def tokens(self, mc: int) -> np.ndarray:
        """The token ids of F[mc]."""
        a = self.a
        lo, hi = a.forbid_offsets[mc], a.forbid_offsets[mc + 1]
        if hi - lo > 8:  # many intervals: one vectorised gather
            return a.forbid_order[concat_aranges(a.forbid_starts[lo:hi], a.forbid_ends[lo:hi])]
        return np.concatenate([a.forbid_order[s:e] for s, e in zip(a.forbid_starts[lo:hi].tolist(),
                                                                     a.forbid_ends[lo:hi].tolist())] or [np.zeros(0, np.int32)])

    def words(self, mc: int, num_words: int) -> np.ndarray:
        """F[mc] as packed words, cached (LRU). A set over half the vocabulary is packed through its
        complement (the gaps between its intervals), so no miss scatters more than V / 2 bits."""
        words = self._words.get(mc)
        if words is None:
            a = self.a
            if self.size[mc] * 2 > a.vocab_size:
                lo, hi = a.forbid_offsets[mc], a.forbid_offsets[mc + 1]
                gaps = concat_aranges(np.r_[0, a.forbid_ends[lo:hi]], np.r_[a.forbid_starts[lo:hi], a.vocab_size])
                words = ~_pack(a.forbid_order[gaps], num_words)
                words[-1] &= np.uint32((1 << (a.vocab_size - 32 * (num_words - 1))) - 1)  # no bits past V
            else:
                words = _pack(self.tokens(mc), num_words)
            self._words[mc] = words
            if len(self._words) > self._cache_size:
                self._words.popitem(last=False)
        else:
            self._words.move_to_end(mc)
        return words

    def dead_classes(self, Y: np.ndarray, Z: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """The merge classes mc among ``classes`` (ascending) with Y ⊆ F[mc] and Z ∩ F[mc] = ∅."""
        candidates = classes[self.size[classes] >= len(Y)]
        if len(Y) and len(candidates):
            candidates = candidates[self._hits(candidates, Y) == len(Y)]
        if len(Z) and len(candidates):
            candidates = candidates[self._hits(candidates, Z, stop_at_first=True) == 0]
        return candidates

    def classes_by_size(self, at_least: int) -> np.ndarray:
        """The merge classes whose forbidden set has at least ``at_least`` tokens, ascending."""
        return np.sort(self._by_size[: np.searchsorted(self._sorted_sizes, -at_least, side="right")])

    def member(self, classes: np.ndarray, positions) -> np.ndarray:
        """Whether F[c] holds the token at permutation position p, for each (c, p) (broadcast)."""
        a = self.a
        i = np.searchsorted(self.keys, classes.astype(np.int64) * (a.vocab_size + 1) + positions, side="right") - 1
        i = np.maximum(i, 0)
        return (self.interval_class[i] == classes) & (a.forbid_starts[i] <= positions) & (a.forbid_ends[i] > positions)

    def _hits(self, classes: np.ndarray, tokens: np.ndarray, stop_at_first: bool = False) -> np.ndarray:
        """For each class, how many of ``tokens`` (distinct) it forbids (with ``stop_at_first``: 0 or not).

        Two strategies, by estimated cost: probe each token in each class (binary search on the class-major
        interval keys: |classes| x |tokens| x log(intervals)), or scan the classes' intervals once against the
        sorted token positions (their interval count x log|tokens|). Small token sets meet many classes, large
        ones few, so each case gets the cheap one."""
        a = self.a
        positions = a.forbid_position[tokens].astype(np.int64)
        num_intervals = int((a.forbid_offsets[classes + 1] - a.forbid_offsets[classes]).sum())
        if len(classes) * len(tokens) * 20 < num_intervals * 4:
            # probe: Y ⊆ F keeps the classes holding every token so far; Z ∩ F drops them at their first hit
            hits = np.zeros(len(classes), dtype=np.int64)
            undecided = np.arange(len(classes))
            for p in positions.tolist():
                inside = self.member(classes[undecided], p)
                if stop_at_first:
                    hits[undecided[inside]] = 1
                    undecided = undecided[~inside]
                else:
                    hits[undecided[~inside]] = -1
                    undecided = undecided[inside]
                if not len(undecided):
                    break
            if not stop_at_first:
                hits[undecided] = len(tokens)
            return hits
        if len(classes) == a.num_merge_classes:
            intervals = slice(None)
        else:
            intervals = concat_aranges(a.forbid_offsets[classes], a.forbid_offsets[classes + 1])
        positions = np.sort(positions)
        inside = (np.searchsorted(positions, a.forbid_ends[intervals])
                  - np.searchsorted(positions, a.forbid_starts[intervals]))
        per_class = np.bincount(self.interval_class[intervals], weights=inside, minlength=a.num_merge_classes)
        return per_class[classes].astype(np.int64)


def _forbidden_index(automaton: CanonicalAutomaton) -> _Forbidden:
    index = _FORBIDDEN.get(automaton)
    if index is None:
        index = _FORBIDDEN[automaton] = _Forbidden(automaton)
    return index


def _any_tokenization(canonical: CanonicalAutomaton) -> CanonicalAutomaton:
    """An automaton with the same vocabulary that allows every tokenization: one context in which every token
    with bytes is allowed, one merge class forbidding nothing."""
    found = _ANY.get(canonical)
    if found is None:
        V = canonical.vocab_size
        row = np.where(canonical.token_has_bytes, 0, -1).astype(np.int16)[None, :]
        found = _ANY[canonical] = CanonicalAutomaton(
            merge_class=np.zeros(V, np.int32), after_class=np.zeros(V, np.int32),
            forbid_order=np.arange(V, dtype=np.int32), forbid_position=np.arange(V, dtype=np.int32),
            forbid_starts=np.zeros(0, np.int32), forbid_ends=np.zeros(0, np.int32),
            forbid_offsets=np.zeros(2, np.int64), boundary_next=row, inside_next=np.full_like(row, -1),
            pending_offsets=np.zeros(1, np.int64), pending_tokens=np.zeros(0, np.int32),
            pending_next=np.zeros(0, np.int16), context_final=np.ones(1, bool),
            token_blob=canonical.token_blob, token_offsets=canonical.token_offsets,
            token_has_bytes=canonical.token_has_bytes, eos_token_ids=canonical.eos_token_ids)
    return found
