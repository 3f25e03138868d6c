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
llguidance and xgrammar use), computed on first use by the compiled kernels of ``product.forbidden`` and kept
in a bounded LRU cache per guide whose rows are preallocated (computing a mask allocates nothing).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import numpy as np

from automata import EmptyLanguageError, StateLimitError, from_regex
from automata.dfa import concat_aranges
from automata.errors import CanonmergeError
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.forbidden import ForbiddenSets, pack
from product.token_regex import TokenTransitions, VocabularyTrie

__all__ = ["Guide", "compile_regex", "InvalidTokenError"]


class InvalidTokenError(CanonmergeError, ValueError):
    """A token id outside the vocabulary."""


_TRIES: "weakref.WeakKeyDictionary[CanonicalAutomaton, VocabularyTrie]" = weakref.WeakKeyDictionary()
_ANY: "weakref.WeakKeyDictionary[CanonicalAutomaton, CanonicalAutomaton]" = weakref.WeakKeyDictionary()
_FORBIDDEN: "weakref.WeakKeyDictionary[CanonicalAutomaton, ForbiddenSets]" = weakref.WeakKeyDictionary()


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
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, not {cache_size}")
        self.name = name
        self.canonical_only = canonical_only
        self._tokens = canonical
        self._automaton = canonical if canonical_only else _any_tokenization(canonical)
        self._forbidden = _forbidden_index(self._automaton)
        self._transitions = transitions
        self.vocab_size = canonical.vocab_size
        self.num_words = (self.vocab_size + 31) // 32
        self.eos_token_ids = tuple(int(t) for t in canonical.eos_token_ids)
        self._M = self._automaton.num_merge_classes
        self._explore(max_states)
        self._rows: list[tuple] = [()] * len(self._node_q)
        self._solve_liveness()  # stores the rows of the open nodes it computes
        start = self._node_of[(transitions.start, 0)]
        self.initial_state = start * self._M + self._automaton.start_class % self._M
        if not self._alive(np.array([start]), np.array([self.initial_state % self._M]))[0]:
            raise EmptyLanguageError(f"constraint {name!r}: no string it accepts has a "
                                     f"{'canonical ' if canonical_only else ''}tokenization over this vocabulary")
        for node in np.flatnonzero(~self._is_pending & self._final).tolist():  # the open nodes liveness skipped
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
        self._edges = self._dead_bits = None  # only the rows are needed from here on
        self._cache_size = cache_size
        self._slot_of: OrderedDict[int, int] = OrderedDict()  # cached state -> its row in the slab, LRU order
        self._slabs: list[np.ndarray] = []
        self._add_slab()
        self._forced: dict[int, tuple[int, ...]] = {}
        self._mask(self.initial_state)  # the first step's mask is part of compiling (and warms the mask path)

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
        arrays += self._slabs
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
        """The packed mask of ``state``: a row of the cache, valid until the next ``_mask`` call evicts it."""
        slot = self._slot_of.get(state)
        if slot is not None:
            self._slot_of.move_to_end(state)
            return self._slabs[slot // _SLAB_ROWS][slot % _SLAB_ROWS]
        node, mc = self._split(state)
        if len(self._slot_of) < self._cache_size:
            slot = len(self._slot_of)
            if slot // _SLAB_ROWS == len(self._slabs):
                self._add_slab()
        else:
            _, slot = self._slot_of.popitem(last=False)
        words = self._slabs[slot // _SLAB_ROWS][slot % _SLAB_ROWS]
        self._compute_mask(node, mc, words)
        self._slot_of[state] = slot
        return words

    def _add_slab(self) -> None:
        """Masks live in preallocated slabs of rows, so computing one allocates nothing (a fresh 16 KB array per
        mask cost up to ~1 ms right after a large compile: the allocator reorganising its free lists)."""
        rows = min(_SLAB_ROWS, self._cache_size - _SLAB_ROWS * len(self._slabs))
        self._slabs.append(np.zeros((rows, self.num_words), dtype=np.uint32))

    def _store_rows(self, node: int, X: np.ndarray, Y: np.ndarray, Z: np.ndarray) -> None:
        """Keep a node's rows of token ids: X (allowed whatever the merge class), Y (allowed unless in F[mc]),
        Z (allowed only if in F[mc]). Few class-dependent tokens: Y and Z as token arrays, tested against F[mc]
        one by one, over X as tokens or, when X is long, packed (``(True, X packed or None, X, Y, Z)``). Many:
        packed as ``XY = X | Y`` and ``D = XY ^ (X | Z)``, the mask being ``XY ^ (D & F[mc])``
        (``(False, XY, D)``). On the peers' Llama-3 guides 767 of the 1,561 nodes with long rows have at most 256
        class-dependent tokens (most of the float regex's have none): testing those beats walking F[mc]."""
        n = self.num_words
        if len(Y) + len(Z) <= _SPARSE_LIMIT:
            tokens = [np.asarray(a, dtype=np.int32) for a in (X, Y, Z)]
            if len(X) > _SPARSE_LIMIT:
                self._rows[node] = (True, pack(X, n), _NO_TOKENS, tokens[1], tokens[2])
            else:
                self._rows[node] = (True, None, *tokens)
        else:
            X = pack(X, n)
            XY = X | pack(Y, n)
            self._rows[node] = (False, XY, XY ^ (X | pack(Z, n)))

    def _compute_mask(self, node: int, mc: int, out: np.ndarray) -> None:
        sparse, *rows = self._rows[node]
        if sparse:
            self._forbidden.sparse_mask(*rows, mc, out)
        else:
            self._forbidden.dense_mask(*rows, mc, out)
        if self._final[node]:
            for t in self.eos_token_ids:
                out[t >> 5] |= np.uint32(1 << (t & 31))

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
        self._edges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._successors: list[np.ndarray] = []  # distinct target nodes per node
        entry_state = np.repeat(np.arange(R.num_states, dtype=np.int64), np.diff(R.offsets))
        entry_keys = entry_state * V + R.tokens  # ascending: rows are sorted by token
        # Node ids by key q * num_ctx + ctx: a direct table when the key space is small (a gather per lookup),
        # else sorted known keys (a search per lookup).
        dense = R.num_states * num_ctx <= _DENSE_NODE_KEYS
        id_of_key = np.full(R.num_states * num_ctx if dense else 0, -1, dtype=np.int32)
        known_keys, known_ids = np.zeros(0, np.int64), np.zeros(0, np.int64)

        def lookup(keys: np.ndarray) -> np.ndarray:
            if dense:
                return id_of_key[keys].astype(np.int64)
            if not len(known_keys):
                return np.full(len(keys), -1, dtype=np.int64)
            at = np.minimum(np.searchsorted(known_keys, keys), len(known_keys) - 1)
            return np.where(known_keys[at] == keys, known_ids[at], -1)

        def node_ids(qs: np.ndarray, ctxs: np.ndarray) -> np.ndarray:
            """The node ids of (q, ctx) pairs (-1 where ctx is -1), numbering new pairs in key order."""
            nonlocal known_keys, known_ids
            out = np.full(len(qs), -1, dtype=np.int64)
            ok = ctxs >= 0
            keys = qs[ok].astype(np.int64) * num_ctx + ctxs[ok]
            ids = lookup(keys)
            unseen = ids < 0
            if unseen.any():
                fresh = np.unique(keys[unseen])
                if len(self._node_q) + len(fresh) > max_states:
                    raise StateLimitError(f"constraint {self.name!r}: more than max_states={max_states} "
                                          f"product nodes")
                fresh_ids = np.arange(len(self._node_q), len(self._node_q) + len(fresh))
                self._node_q.extend((fresh // num_ctx).tolist())
                self._node_ctx.extend((fresh % num_ctx).tolist())
                if dense:
                    id_of_key[fresh] = fresh_ids
                else:
                    known_keys, known_ids = np.concatenate([known_keys, fresh]), np.concatenate([known_ids, fresh_ids])
                    order = np.argsort(known_keys, kind="stable")
                    known_keys, known_ids = known_keys[order], known_ids[order]
                ids[unseen] = lookup(keys[unseen])
            out[ok] = ids
            return out

        node_ids(np.array([R.start]), np.array([0]))
        done = 0
        while done < len(self._node_q):  # one breadth-first layer per pass
            frontier = np.arange(done, len(self._node_q))
            done = len(self._node_q)
            self._edges += [None] * len(frontier)
            self._successors += [None] * len(frontier)
            qs = np.array(self._node_q[frontier[0]:], dtype=np.int64)
            ctxs = np.array(self._node_ctx[frontier[0]:], dtype=np.int64)
            is_open = ctxs < num_open
            # Open nodes one by one: few, with long rows (one batch would sort millions of entries at once).
            for n, q, ctx in zip(frontier[is_open].tolist(), qs[is_open].tolist(), ctxs[is_open].tolist()):
                tokens, targets = R.row(q)  # the regex row of q, kept where the context allows the token at all
                inside = A.inside_next[ctx, tokens].astype(np.int64)
                boundary = A.boundary_next[ctx, tokens].astype(np.int64)
                keep = (inside >= 0) | (boundary >= 0)
                tokens, targets, inside, boundary = tokens[keep], targets[keep], inside[keep], boundary[keep]
                inside, boundary = node_ids(targets, inside), node_ids(targets, boundary)
                both = np.concatenate([inside, boundary])
                self._edges[n] = (tokens.astype(np.int32), inside, boundary, A.after_class[tokens].astype(np.int32))
                self._successors[n] = np.flatnonzero(np.bincount(both[both >= 0]))  # distinct, ascending
            # Pending nodes at once: many, with short rows.
            if not is_open.all():  # completing tokens of the unfinished character that the regex also allows
                pending, q, row = frontier[~is_open], qs[~is_open], ctxs[~is_open] - num_open
                lo, hi = A.pending_offsets[row], A.pending_offsets[row + 1]
                entries = concat_aranges(lo, hi)
                owner = np.repeat(np.arange(len(pending)), hi - lo)
                keys = q[owner] * V + A.pending_tokens[entries]
                at = np.minimum(np.searchsorted(entry_keys, keys), max(len(entry_keys) - 1, 0))
                hit = entry_keys[at] == keys if len(entry_keys) else np.zeros(len(keys), bool)
                entries, owner, at = entries[hit], owner[hit], at[hit]
                inside = node_ids(R.targets[at], A.pending_next[entries].astype(np.int64))
                tokens = A.pending_tokens[entries]
                mcs, tokens = A.after_class[tokens].astype(np.int32), tokens.astype(np.int32)
                boundary = np.full(len(inside), -1, np.int64)  # only inside moves complete a character
                bounds = np.searchsorted(owner, np.arange(len(pending) + 1))
                links = np.unique(owner * (max_states + 1) + inside)
                link_owner, link_target = np.divmod(links, max_states + 1)  # distinct (node, target) pairs
                link_bounds = np.searchsorted(link_owner, np.arange(len(pending) + 1))
                for i, n in enumerate(pending.tolist()):
                    sl = slice(bounds[i], bounds[i + 1])
                    self._edges[n] = (tokens[sl], inside[sl], boundary[sl], mcs[sl])
                    self._successors[n] = link_target[link_bounds[i]:link_bounds[i + 1]]
        self._node_of = {pair: n for n, pair in enumerate(zip(self._node_q, self._node_ctx))}
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
            rows, classes = self._dead_row[nodes[partial]], mcs[partial]
            alive[partial] = (self._dead_bits[rows, classes >> 3] >> (classes & 7).astype(np.uint8)) & 1 == 0
        return alive

    def _row_selectors(self, inside, boundary, mcs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which candidate edges belong to rows X, Y, Z (see ``_store_rows``), as boolean selectors."""
        inside_ok = inside >= 0
        live_inside = self._alive(inside, mcs)
        live_boundary = self._alive(boundary, mcs)
        return ~inside_ok & live_boundary, live_inside, inside_ok & live_boundary

    _WIDE_ROW = 4096  # nodes with more candidate tokens take their candidate classes from F's sizes instead

    def _entering_and_predecessors(self) -> tuple[list, np.ndarray, np.ndarray]:
        """Per node: the merge classes that can enter it (after_class of the tokens reaching it; ``None`` for
        wide nodes, whose candidates come from F's sizes), and predecessor lists grouped by target
        (``pred_source[pred_bounds[n]:pred_bounds[n + 1]]``)."""
        N, M = len(self._node_q), self._M
        width = np.array([len(e[0]) for e in self._edges])
        narrow = width <= self._WIDE_ROW
        # (target, class) of every edge: open nodes one by one (few, long rows), pending nodes at once (many,
        # short rows of inside moves only)
        parts = [(np.array([self._node_of[(self._transitions.start, 0)]]), np.array([self._automaton.start_class % M]))]
        parts += [(target, mcs) for n in np.flatnonzero(~self._is_pending).tolist()
                  for target, mcs in ((self._edges[n][1], self._edges[n][3]), (self._edges[n][2], self._edges[n][3]))]
        pending = [self._edges[n] for n in np.flatnonzero(self._is_pending).tolist()]
        if pending:
            parts.append((np.concatenate([e[1] for e in pending]), np.concatenate([e[3] for e in pending])))
        keys = []
        for target, mcs in parts:
            keep = target >= 0
            keep[keep] = narrow[target[keep]]
            keys.append(target[keep] * M + mcs[keep])
        pairs = np.unique(np.concatenate(keys))
        node, cls = np.divmod(pairs, M)
        bounds = np.searchsorted(node, np.arange(N + 1))
        entering = [cls[bounds[n]:bounds[n + 1]] if narrow[n] else None for n in range(N)]
        count = np.array([len(x) for x in self._successors])
        links = np.unique(np.concatenate(self._successors) * N + np.repeat(np.arange(N), count))
        pred_target, pred_source = np.divmod(links, N)
        return entering, pred_source, np.searchsorted(pred_target, np.arange(N + 1))

    def _solve_liveness(self) -> None:
        """Least fixpoint, in rounds: every node whose successors changed is recomputed (open nodes one by one,
        pending nodes in one batch), until nothing changes. Dead sets only shrink, whatever the order."""
        N = len(self._node_q)
        self._status = np.where(self._final, _NONE_DEAD, _ALL_DEAD).astype(np.int8)
        # Partial nodes' dead merge classes, one bit row each (a gather per lookup, not a search).
        self._dead_row = np.full(N, -1, dtype=np.int64)
        self._dead_count = np.zeros(N, dtype=np.int64)
        self._dead_bits = np.zeros((0, (self._M + 7) // 8), dtype=np.uint8)
        self._num_dead_rows = 0
        entering, pred_source, pred_bounds = self._entering_and_predecessors()
        by_size = self._forbidden.classes_by_size

        # Gauss-Seidel rounds: results are applied at once, open nodes deepest first (breadth-first numbering
        # reversed), so most successors are final before their predecessors are computed; a node is recomputed
        # only if a successor changed after its last computation. (Email regex on GPT-2: 5 -> 2 passes.)
        clock, computed_at, changed_at = 0, np.zeros(N, dtype=np.int64), np.zeros(N, dtype=np.int64)

        def apply(n: int, dead: np.ndarray | None) -> None:
            if dead is None or not len(dead):
                status = _NONE_DEAD
            elif entering[n] is not None and len(dead) == len(entering[n]):
                status = _ALL_DEAD
            else:
                status = _PARTIAL
            if status == self._status[n] and (status != _PARTIAL or len(dead) == self._dead_count[n]):
                return
            self._status[n] = status
            if status == _PARTIAL:
                self._set_dead(n, dead)
            changed_at[n] = clock

        dirty = np.flatnonzero(~self._final)
        while len(dirty):
            round_start = clock + 1
            for n in dirty[~self._is_pending[dirty]][::-1].tolist():
                clock += 1
                computed_at[n] = clock
                tokens, inside, boundary, mcs = self._edges[n]
                X, Y, Z = (tokens[k] for k in self._row_selectors(inside, boundary, mcs))
                # A node's last computation sees its successors' final status (else it would be recomputed):
                # its rows are final then.
                self._store_rows(n, X, Y, Z)
                candidates = entering[n] if entering[n] is not None else by_size(len(Y))
                apply(n, None if len(X) else self._forbidden.dead_classes(Y, Z, candidates))
            pending = dirty[self._is_pending[dirty]]
            if len(pending):
                clock += 1
                computed_at[pending] = clock
                for n, dead in self._pending_dead(pending, entering).items():
                    apply(n, dead)
            changed = np.flatnonzero(changed_at >= round_start)
            if not len(changed):
                break
            links = concat_aranges(pred_bounds[changed], pred_bounds[changed + 1])
            successor_change = np.repeat(changed_at[changed], pred_bounds[changed + 1] - pred_bounds[changed])
            stale = pred_source[links][computed_at[pred_source[links]] <= successor_change]
            dirty = np.unique(stale)
            dirty = dirty[~self._final[dirty]]

    def _set_dead(self, node: int, dead: np.ndarray) -> None:
        """Record the dead merge classes of a partial node in its bit row (allocated on first use)."""
        row = int(self._dead_row[node])
        if row < 0:
            row = self._dead_row[node] = self._num_dead_rows
            self._num_dead_rows += 1
            if row == len(self._dead_bits):  # grow by doubling: rare reallocations
                grown = np.zeros((max(16, 2 * row), self._dead_bits.shape[1]), dtype=np.uint8)
                grown[:row] = self._dead_bits
                self._dead_bits = grown
        flags = np.zeros(self._dead_bits.shape[1] * 8, dtype=bool)
        flags[dead] = True
        self._dead_bits[row] = np.packbits(flags, bitorder="little")
        self._dead_count[node] = len(dead)

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
_NO_TOKENS = np.zeros(0, dtype=np.int32)
_SLAB_ROWS = 256  # masks per preallocated slab (4 MB at a 128k vocabulary)
_DENSE_NODE_KEYS = 1 << 22  # regex states x contexts up to this: node ids from a direct table (16 MB at most)


def _forbidden_index(automaton: CanonicalAutomaton) -> ForbiddenSets:
    index = _FORBIDDEN.get(automaton)
    if index is None:
        index = _FORBIDDEN[automaton] = ForbiddenSets(automaton)
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
