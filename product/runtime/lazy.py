"""A regex guide built as it is walked: a node's rows and its targets' liveness on first visit.

``product.compiler.tables.CompiledGuide`` builds every product node (regex state, canonical context) and solves
liveness over all of them before the first mask; a generation visits about 1 % of them
(``bench/liveness_locality.py``). ``LazyGuide`` serves the same masks and builds only what is asked:

- a node's candidate tokens on first visit: the regex state's row (one compiled walk of the vocabulary trie,
  ``token_regex.state_row``) split as the canonical automaton splits it — X (a boundary must precede the token), Y
  (the token may continue the piece: allowed iff not forbidden after the merge class), Z (it may do either: its
  boundary target, taken iff forbidden) — in one compiled pass (``node_kernels.open_edges``);
- each candidate's target liveness, for the merge class the token leaves behind (``after_class``): a target where
  the text may end, or where some completion lets the pre-tokenizer place a piece boundary
  (``product.compiler.boundaries.break_possible``), is *settled*: live in every merge class. The others are
  *forced* — the text must go on inside the current piece (the rest of a literal, an unfinished character) — and
  are decided by a least fixpoint explored on demand (``_solve_region``): most (forced node, class) pairs have an
  allowed edge into a settled node (one compiled pass per regex state over its row, ``node_kernels.pending_settled``
  and ``open_settled``), and only the others are followed further, a few successors a round, until one is live;
- ``mask(node, mc) = X | (Y & ~F[mc]) | (Z & F[mc])`` (+ EOS where the text may end): the node's rows stored as the
  eager guide stores them (few class-dependent tokens as arrays, many packed: ``CompiledGuide._store_rows``) and the
  mask filled by the same compiled kernel (``product.runtime.kernels.cpu.fill_mask``) into ``Guide``'s mask cache.

A node's rows depend only on its context and on its regex state's future (the labelled automaton reachable from
it), so they are shared by every lazy guide of the tokenizer (``_SharedRows``): a free string's body followed by the
same closing is built once per context, whichever fragment or schema meets it first. A state on a cycle (a string's
body followed by a schema's own text, a future met once) shares what stays in the cycle, fixed by the cycle and the
context, and reads only the tokens leaving it (``_Cycle``, ``_cycle_layout``).

So every allowed token still leads to a live state, and the masks equal the eager guide's (tested state by state
along walks). It is a ``Guide``: ``Matcher``, the batch kernels (which hand its states to ``_fill_row``) and the
clients take it; node ids are handed out in visit order, so two lazy guides of one regex number their states
differently. First visits grow shared tables under a lock of their own. ``product.compile_regex(..., lazy=True)``
builds one, and ``product.stitched`` builds fragments of schemas so (a start context, end states, live exits:
``boundaries.break_possible`` counts a cut exit). A forced region the search cannot cut down (past
``_MAX_REGION`` undecided pairs) is answered by the eager guide of the same constraint, compiled once.
Leaves out: counted repetitions (unrolled), the any-tokenization comparison mode, a budget for first visits; a
tokenizer without pre-tokenizer splits, such as Mistral's, has no boundary to settle anything (its forced region is
the whole product, ``helps``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import operator
import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from automata import EmptyLanguageError
from automata.dfa import DFA, MISSING, cycle_region, reachable_code
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.compiler.boundaries import break_possible
from product.compiler.forbidden import row_descriptor
from product.compiler.node_kernels import (
    NodeTable,
    open_edges,
    open_forced_steps,
    open_settled,
    pending_edges,
    pending_settled,
    read_tokens,
)
from product.compiler.tables import _forbidden_index, guide_eos, per_automaton, row_kind, row_layout, vocabulary_trie
from product.compiler.token_regex import TokenTransitions, state_row
from product.runtime.guide import Guide
from product.runtime.kernels.cpu import fill_mask, fill_mask_at

__all__ = ["LazyGuide"]

_X, _Y, _Z = 0, 1, 2  # how a candidate is allowed: always / iff not forbidden / iff forbidden
# Pairs one search may leave undecided before the whole product is compiled instead (``_compile_whole``): a free
# string's first node on Llama-3 leaves ~100; a region nothing settles leaves all of its pairs.
_MAX_REGION = 4096
_ROWS_KEPT = 64  # regex states' rows kept for reuse (``_row``)
# Rows shared across guides (``_SharedRows``): a state's future is compared up to ``_MAX_FUTURE_STATES`` states (longer
# ones are a schema's own text, met once); the shared rows of a tokenizer are kept up to ``_SHARED_BYTES``.
_MAX_FUTURE_STATES = 64
_SHARED_BYTES = 64 << 20
# A state on a cycle shares its rows by the cycle (``_Cycle``) up to ``_MAX_CYCLE_STATES`` states, where the tokens
# holding a byte that leaves it are at most 1/``_EXIT_TOKENS_SHARE`` of the vocabulary (they are read one by one). A
# state reading at least ``_WIDE_BYTES`` bytes takes the cycle it lies on among such states (a string's body, its
# characters' continuation bytes) before the whole strongly connected component (the body with the escapes, and in
# an "anything" value the object members around a key).
_MAX_CYCLE_STATES = 4096
_EXIT_TOKENS_SHARE = 4
_WIDE_BYTES = 32
_HOLDING_SETS_KEPT = 64  # sets of exit bytes whose tokens are kept (``_tokens_holding``: a bool per token each)
_NARROW_ROW = 1024  # candidates at most: the row is built from the walk, not combined (the walk is short)
# A forced node whose state reads at most ``_SHORT_ROW`` tokens is tested one step ahead from the row itself
# (``node_kernels.open_settled``: a pass over the row per pair), not from its edges.
_SHORT_ROW = 512
# The liveness search looks at this many successors of an undecided pair in its first round, twice as many the next
# (``_solve_region``): the first is live for most, and a pair proven live needs no more.
_SUCCESSORS_A_ROUND = 2
_ANYWHERE = np.zeros(0, dtype=bool)


class _Edges(NamedTuple):
    """A node's candidate edges (``LazyGuide._edges``), one entry per (token, way it is allowed)."""

    tokens: np.ndarray  # int64 token ids
    targets: np.ndarray  # int64 target node ids, -1 where settled (only forced targets become nodes)
    kind: np.ndarray  # int8 _X / _Y / _Z
    settled: np.ndarray  # bool: the target is live in every merge class
    states: np.ndarray  # int64 target regex states


@dataclasses.dataclass(frozen=True, eq=False)
class _Cycle:
    """The cycle a regex state lies on — a strongly connected set of states (``automata.dfa.cycle_region``: of the
    states reading many bytes, or of all) — as ``LazyGuide`` shares rows by it. Invariants: ``order`` lists its states
    breadth-first from the state (``rank`` inverts it, -1 outside); ``digest`` names the labelled cycle — its
    transitions renumbered by rank (-2 for an edge leaving it), where the text may end, where a boundary is possible
    (``LazyGuide._break``); ``exit_tokens`` are the tokens holding a byte some state of it leaves on (ascending;
    ``holds_exit`` per token). A token holding none stays in the cycle from any state of it, byte by byte, or stops
    reading: so two states with equal digests read the same such tokens, to the same ranks and the same
    settledness. A token holding one may leave the cycle and come back: it is each guide's own."""

    digest: bytes
    order: np.ndarray
    rank: np.ndarray
    inside: np.ndarray  # bool per regex state
    exit_tokens: np.ndarray
    holds_exit: np.ndarray  # bool per token


def kept(rows: OrderedDict, key, build):
    """``rows[key]``, built by ``build(key)`` if absent; the ``_ROWS_KEPT`` most recently used rows are kept."""
    if key in rows:
        rows.move_to_end(key)
        return rows[key]
    rows[key] = found = build(key)
    if len(rows) > _ROWS_KEPT:
        rows.popitem(last=False)
    return found


class _SharedRows:
    """The mask rows of lazy nodes by (the node's future, its context), for every lazy guide of one tokenizer: what a
    node allows depends only on the text that may follow its regex state — the labelled automaton reachable from
    it: transitions, where the text may end, which cut exits lead on — and on its context, so nodes of different
    guides whose futures are isomorphic have the same rows (a free string's body followed by the same closing, in
    fragment after fragment and schema after schema). Least recently used dropped past ``_SHARED_BYTES``."""

    def __init__(self):
        self.rows: OrderedDict = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            found = self.rows.get(key)
            if found is not None:
                self.rows.move_to_end(key)
            return found

    def clear(self) -> None:
        with self.lock:
            self.rows.clear()
            self.bytes = 0

    def put(self, key, value: tuple[int, tuple]) -> None:
        size = sum(a.nbytes for a in value[1])
        with self.lock:
            if key in self.rows:
                return
            self.rows[key] = value
            self.bytes += size
            while self.bytes > _SHARED_BYTES and len(self.rows) > 1:
                _, (_, arrays) = self.rows.popitem(last=False)
                self.bytes -= sum(a.nbytes for a in arrays)


def _shared_rows(canonical: CanonicalAutomaton) -> _SharedRows:
    return per_automaton(canonical, "lazy rows by future", _SharedRows)


def _tokens_by_byte(canonical: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray]:
    """(offsets [257], tokens): the tokens whose bytes hold byte b are ``tokens[offsets[b]:offsets[b + 1]]``,
    ascending, each once."""
    def build():
        lengths = np.diff(canonical.token_offsets)
        owner = np.repeat(np.arange(canonical.vocab_size, dtype=np.int64), lengths)
        keys = np.unique(canonical.token_blob.astype(np.int64) * canonical.vocab_size + owner)
        by, tokens = np.divmod(keys, canonical.vocab_size)
        return np.searchsorted(by, np.arange(257)).astype(np.int64), tokens
    return per_automaton(canonical, "tokens by byte", build)


def _tokens_holding(canonical: CanonicalAutomaton, byte_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tokens holding one of the bytes (ascending), and as a bool per token; kept per set of bytes (the few a
    string body or a keyword leaves on)."""
    table = per_automaton(canonical, "tokens holding bytes", OrderedDict)
    key = np.asarray(byte_values, dtype=np.uint8).tobytes()
    found = table.get(key)
    if found is None:
        while len(table) >= _HOLDING_SETS_KEPT:
            table.popitem(last=False)
        offsets, by_byte = _tokens_by_byte(canonical)
        tokens = np.unique(np.concatenate([np.zeros(0, np.int64)]
                                          + [by_byte[offsets[b]:offsets[b + 1]] for b in byte_values]))
        holds = np.zeros(canonical.vocab_size, dtype=bool)
        holds[tokens] = True
        found = table.setdefault(key, (tokens, holds))
    return found


class LazyGuide(Guide):
    """Masks of the canonical tokenizations of a regex's language, nodes built on first visit: a ``Guide`` (states
    ``node * num_merge_classes + merge_class``; the mask cache, ``fill_bitmask``, ``advance``, ``Matcher`` and the
    clients as for any guide) whose node ids are handed out as the walk meets them."""

    _plain_guide = False  # (its rows are built on first visit, not stored as a compiled table)
    _shares_rows = True  # (a node's rows depend only on its future and context: ``_SharedRows``)

    @staticmethod
    def helps(canonical: CanonicalAutomaton) -> bool:
        """Whether the tokenizer's pre-tokenizer places piece boundaries at all: without them (SentencePiece BPE
        such as Mistral's: the whole text is one piece) nothing is settled locally, every liveness question is the
        whole product's, and the eager ``Guide`` answers it faster."""
        return bool((canonical.marked_transitions[:, -1] >= 0).any())

    def __init__(self, dfa: DFA, canonical: CanonicalAutomaton, *, eos_token_ids=None, cache_size: int = 4096,
                 name: str = "", start_context: int = 0, ends: np.ndarray | None = None,
                 exit_live: np.ndarray | None = None, first_mask: bool = True):
        """The guide of ``dfa``'s language. For a fragment of a stitched constraint (``product.stitched``), as
        ``Guide``'s: ``start_context`` (the open context the text before left), ``ends`` (bool per DFA state: where
        the text may end, EOS allowed; default ``dfa.accepting``) and ``exit_live`` (bool [DFA state, context]: a
        cut exit leading to a fragment live from that context — the node is final, live in every merge class).
        ``first_mask``: compute the initial state's mask now (a stitched guide's fragments wait to be walked: most of
        a schema's are never entered by a given text, and their first masks were 6 % of a first-sight compile)."""
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, not {cache_size}")
        if not 0 <= start_context < canonical.num_open_contexts:
            raise ValueError(f"start_context {start_context} is not an open context of the automaton")
        self.name, self.canonical_only = name, True
        self._canonical = self._tokens = self._automaton = canonical
        self._trie = vocabulary_trie(canonical)
        self._state_rows: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._M, self._num_open = canonical.num_merge_classes, canonical.num_open_contexts
        start_state = self._init_constraint(dfa, ends, exit_live)
        self.vocab_size = canonical.vocab_size
        self.eos_token_ids = guide_eos(canonical, eos_token_ids)
        self._nodes = NodeTable()  # node ids by key q * contexts + ctx
        self._C = canonical.num_contexts
        self._candidates: dict[int, _Edges] = {}
        self._node_rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._live: dict[int, bool] = {}  # forced (node, merge class) pairs solved
        self._descriptors: dict[int, tuple[np.ndarray, tuple]] = {}  # node -> (row descriptor, the arrays it points to)
        self._futures: dict[int, bytes | None] = {}  # regex state -> digest of its future (``_future``)
        self._cycles: dict[int, _Cycle | None] = {}  # regex state -> the cycle it lies on (``_cycle``)
        self._wide: np.ndarray | None = None  # (``_wide_table``)
        self._shared = _shared_rows(canonical)
        self._forbidden = _forbidden_index(canonical)
        self._eos_array = np.array(self.eos_token_ids, dtype=np.int64)
        self.num_words = (self.vocab_size + 31) // 32
        # First visits grow shared tables: under this lock, taken after the mask cache's (``Guide._lock``) where
        # both are held, never before it.
        self._build_lock = threading.RLock()
        self._start_context, self._whole = start_context, None
        start = self._node(start_state, start_context)
        self.initial_state = start * self._M + canonical.start_class % self._M
        if not self._is_live(start, canonical.start_class % self._M):
            raise EmptyLanguageError("no string the regex accepts has a canonical tokenization over this vocabulary")
        self._init_mask_cache(cache_size)
        if first_mask:
            self._mask(self.initial_state)

    def _init_constraint(self, dfa: DFA, ends: np.ndarray | None, exit_live: np.ndarray | None) -> int:
        """Set the constraint's tables — ``_table`` (states x bytes), ``_accepting``, ``_exit_live`` and ``_break``
        ([state, open context]: settled without the product: a boundary here is possible, or a live cut exit) —
        and return its start state."""
        self._dfa = dfa
        self._table = np.ascontiguousarray(dfa.transitions)
        self._accepting = dfa.accepting if ends is None else np.asarray(ends, dtype=bool)
        if exit_live is None:
            self._exit_live = None
            self._break = break_possible(dfa, self._canonical, ends=self._accepting)
        else:
            self._exit_live = np.ascontiguousarray(exit_live[:, : self._num_open], dtype=bool)
            self._break = break_possible(dfa, self._canonical, ends=self._accepting, exits=self._exit_live)
            self._break |= self._exit_live
        return dfa.start

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        del state["_build_lock"], state["_shared"]
        state["_descriptors"] = {}  # (addresses are this process's; rebuilt on use)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._build_lock = threading.RLock()
        self._shared = _shared_rows(self._canonical)

    @property
    def num_nodes(self) -> int:
        """Product nodes met so far (a node's rows are built when its mask or a step out of it is first asked)."""
        return len(self._nodes)

    @property
    def memory_bytes(self) -> int:
        arrays = [a for rows in self._node_rows.values() for a in rows]
        arrays += [a for rows in self._candidates.values() for a in rows]
        arrays += [a for rows in self._state_rows.values() for a in rows]
        arrays += [a for descriptor, held in self._descriptors.values() for a in (descriptor, *held)]
        arrays += [self._table, self._break, *self._slabs, self._cache.record]
        arrays += [] if self._wide is None else [self._wide]  # (``_wide_table``, once a cycle was asked for)
        return int(sum(a.nbytes for a in arrays))

    # ---- nodes ----------------------------------------------------------------------------------------------
    def _node(self, q: int, ctx: int) -> int:
        return int(self._nodes.ids(np.array([q * self._C + ctx], dtype=np.int64))[0])

    def _key(self, node: int) -> tuple[int, int]:
        """(regex state, context) of a node."""
        q, ctx = divmod(int(self._nodes.keys[node]), self._C)
        return q, ctx

    def _ends(self, node: int) -> bool:
        """Whether the text may end at the node (EOS), or go on past a live cut exit there."""
        q, ctx = self._key(node)
        return self._at_live_exit(node) or (bool(self._accepting[q]) and bool(self._canonical.context_final[ctx]))

    def exit_key(self, state: int) -> int:
        """The key a stitched guide names an exit of this fragment by: the state's node's ``q * contexts + ctx``
        (node ids are handed out as walks meet them, so its exits are listed by key before their nodes exist)."""
        return int(self._nodes.keys[state // self._M])

    def _at_live_exit(self, node: int) -> bool:
        """Whether the node is at a cut exit that leads on (a stitched guide moves to the next fragment there)."""
        q, ctx = self._key(node)
        return self._exit_live is not None and ctx < self._num_open and bool(self._exit_live[q, ctx])

    def _settled(self, node: int) -> bool:
        """Live in every merge class, known without looking further (module docstring; ``_break`` holds the live
        cut exits too)."""
        q, ctx = self._key(node)
        return bool(self._settled_at(np.array([q]), np.array([ctx]))[0])

    def _edges(self, node: int) -> _Edges:
        """Every token the regex state reads and the context lets through some way, before liveness: a token both
        inside and boundary-able appears twice (kinds Y and Z); settled: whether the target is (``_settled``). Only
        forced targets get a node id (-1 for the others: liveness never asks about them, and ``advance`` finds its
        target itself)."""
        if node not in self._candidates:
            q, ctx = self._key(node)
            if ctx >= self._num_open:
                self._build_pending([node])
                return self._candidates[node]
            tokens, targets = self._row(q)
            a = self._canonical
            tokens, qs, ctxs, kind, settled = open_edges(tokens, targets, a.inside_next[ctx], a.boundary_next[ctx],
                                                         self._accepting, a.context_final, self._break, self._num_open)
            self._candidates[node] = _Edges(tokens, self._forced_ids(qs, ctxs, settled), kind, settled, qs)
        return self._candidates[node]

    def _settled_at(self, qs: np.ndarray, ctxs: np.ndarray) -> np.ndarray:
        """``_settled`` of the nodes (qs, ctxs), built or not (the kernels' ``node_kernels.settled`` over arrays)."""
        settled = self._accepting[qs] & self._canonical.context_final[ctxs]
        is_open = ctxs < self._num_open
        settled[is_open] |= self._break[qs[is_open], ctxs[is_open]]
        return settled

    def _forced_ids(self, qs: np.ndarray, ctxs: np.ndarray, settled: np.ndarray) -> np.ndarray:
        """Node ids of the edges' targets (qs, ctxs), -1 where settled: only forced targets become nodes here."""
        ids = np.full(len(qs), -1, dtype=np.int64)
        ids[~settled] = self._nodes.ids(qs[~settled] * self._C + ctxs[~settled])
        return ids

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
        settled = self._settled_at(qs, ctxs)
        targets = self._forced_ids(qs, ctxs, settled)
        tokens = tokens.astype(np.int64)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for i, n in enumerate(nodes):
            lo, hi = bounds[i], bounds[i + 1]
            self._candidates[n] = _Edges(tokens[lo:hi], targets[lo:hi], np.full(hi - lo, _Y, np.int8), settled[lo:hi],
                                         qs[lo:hi])

    def _row(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokens regex state ``q`` reads (ascending) and the states they reach (``_build_row``), on use; the
        last ``_ROWS_KEPT`` rows are kept (int32: a row spanning Llama-3's vocabulary is 1 MB, and a node's masks come
        from its own rows once built, so a long walk need not keep every state's)."""
        return kept(self._state_rows, q, self._build_row)

    def _build_row(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """``_row`` of a state not kept: one walk of the vocabulary trie."""
        return state_row(self._table, self._trie, q)

    def _read(self, q: int, token: int) -> int:
        """The regex state after ``token``'s bytes from ``q`` (-1: it leaves the language; a special token has no
        bytes and reads none): the token's own bytes run through the DFA, not the state's row (a node whose rows
        were shared, ``_SharedRows``, has none built)."""
        a = self._canonical
        if not a.token_has_bytes[token]:
            return MISSING
        return self._dfa.run(a.token_blob[a.token_offsets[token]:a.token_offsets[token + 1]].tolist(), q)

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
        keeps alive (``_alive_by_settled``: a compiled pass per regex state); the rest have their forced edges
        followed, for that class, to the pairs they enter (``_expand``), and the next round looks at a few of those
        per pair (``_SUCCESSORS_A_ROUND``, doubling each round): one proven live makes the pair live, and liveness
        flows back at once to the pairs that entered it, which then look no further. The search ends when no pair
        that is not live has a successor left to look at: those pairs are dead (each of their successors was looked
        at and is dead or not live either)."""
        if self._whole is not None:
            self._live.update(zip(frontier.tolist(), self._whole_live(frontier)))
            return
        found: dict[int, bool] = {}  # pairs proven live in this search
        successors: dict[int, list[int]] = {}  # pairs not settled in one step -> the pairs their forced edges enter
        looked: dict[int, int] = {}  # such a pair -> how many of its successors have been looked at
        predecessors: dict[int, list[int]] = {}

        def live(pair: int) -> None:
            found[pair] = True
            stack = [pair]
            while stack:
                for entering in predecessors.get(stack.pop(), ()):
                    if not found.get(entering, False):
                        found[entering] = True
                        stack.append(entering)

        while len(frontier):
            if len(successors) > _MAX_REGION:  # nothing settles this region: the whole product answers instead
                self._compile_whole()
                asked = np.array(sorted(set(found) | set(successors) | set(frontier.tolist())), dtype=np.int64)
                self._live.update(zip(asked.tolist(), self._whole_live(asked)))
                return
            alive = self._alive_by_settled(frontier)
            for pair in frontier[alive].tolist():
                live(pair)
            undecided = np.array([p for p in frontier[~alive].tolist() if not found.get(p, False)], dtype=np.int64)
            successors.update(self._expand(undecided))
            looked.update(dict.fromkeys(undecided.tolist(), 0))
            # the next pairs to look at: of each pair not live yet, as many new ones as it has looked at already
            # (_SUCCESSORS_A_ROUND at first), so that a dead pair's successors take a few rounds, not one a round each
            queued: set[int] = set()
            for pair in [p for p, k in looked.items() if not found.get(p, False) and k < len(successors[p])]:
                nexts, k, taken = successors[pair], looked[pair], 0
                allowance = max(_SUCCESSORS_A_ROUND, k)
                while k < len(nexts) and taken < allowance and not found.get(pair, False):
                    after = nexts[k]
                    k += 1
                    predecessors.setdefault(after, []).append(pair)
                    if found.get(after, False) or self._live.get(after, False):
                        live(pair)
                    elif after not in self._live and after not in successors and after not in queued:
                        queued.add(after)
                        taken += 1
                looked[pair] = len(nexts) if found.get(pair, False) else k
            frontier = np.array(sorted(queued), dtype=np.int64)
        for pair in successors:
            found.setdefault(pair, False)
        self._live.update(found)

    def _expand(self, pairs: np.ndarray) -> dict[int, list[int]]:
        """The pairs the allowed edges into forced nodes enter, for each of ``pairs``."""
        after, M = self._canonical.after_class, self._M
        unbuilt = sorted({n for n in (pairs // M).tolist()
                          if n not in self._candidates and self._key(n)[1] >= self._num_open})
        if unbuilt:
            self._build_pending(unbuilt)
        out = self._open_steps(pairs)
        for pair in pairs.tolist():
            if pair not in out:
                n, c = divmod(pair, M)
                tokens, targets, kind, settled, _ = self._edges(n)
                forced = ~settled
                tokens, targets, kind = tokens[forced], targets[forced], kind[forced]
                allowed = (kind == _X) | ((kind == _Y) != self._canonical.forbids(c, tokens))
                out[pair] = (targets[allowed] * M + after[tokens[allowed]]).tolist()
        return out

    def _read_from_row(self, node: int, q: int) -> bool:
        """Whether the liveness search reads the open node (state ``q``) from its state's row, one compiled pass
        per state (``open_settled``, ``open_forced_steps``), rather than from its edges: a short row, no edges built."""
        return node not in self._candidates and len(self._row(q)[0]) <= _SHORT_ROW

    def _open_steps(self, pairs: np.ndarray) -> dict[int, list[int]]:
        """The pairs the allowed edges into forced nodes enter, for the (open node, merge class) pairs among
        ``pairs`` whose node has a short row and no edges built: from the row, one compiled pass per regex state
        (``node_kernels.open_forced_steps``)."""
        nodes, classes = np.divmod(pairs, self._M)
        qs, ctxs = np.divmod(self._nodes.keys[nodes], self._C)
        by_state: dict[int, list[int]] = {}
        for i, (n, q, ctx) in enumerate(zip(nodes.tolist(), qs.tolist(), ctxs.tolist())):
            if ctx < self._num_open and self._read_from_row(n, q):
                by_state.setdefault(q, []).append(i)
        a, f = self._canonical, self._forbidden
        out: dict[int, list[int]] = {}
        for q, where in by_state.items():
            tokens, targets = self._row(q)
            counts, keys, leaves = open_forced_steps(ctxs[where], classes[where], tokens, targets, a.inside_next,
                                                     a.boundary_next, a.after_class, self._num_open, self._C,
                                                     self._accepting, a.context_final, self._break, f.position,
                                                     f.starts, f.ends, f.offsets, f.dense_row, f.dense)
            nexts = (self._nodes.ids(keys) * self._M + leaves).tolist()
            bounds = [0, *itertools.accumulate(counts.tolist())]
            for k, i in enumerate(where):
                out[int(pairs[i])] = nexts[bounds[k]:bounds[k + 1]]
        return out

    def _compile_whole(self) -> None:
        """The eager guide of the same constraint (every node, liveness by the whole fixpoint), for a forced region
        the boundary test does not cut down (a fragment whose only way out is a dead exit, a tokenizer without
        splits): the compiled fixpoint does in one pass what the on-demand search would do pair by pair."""
        transitions = dataclasses.replace(TokenTransitions.build(self._dfa, self._trie, compact=True),
                                          accepting=self._accepting)
        exit_live = None
        if self._exit_live is not None:
            exit_live = np.zeros((len(self._accepting), self._C), dtype=bool)
            exit_live[:, : self._num_open] = self._exit_live
        self._whole = Guide(transitions, self._canonical, cache_size=1, eos_token_ids=list(self.eos_token_ids),
                            start_context=self._start_context, exit_live=exit_live, _keep_liveness=True)

    def _whole_live(self, pairs: np.ndarray) -> list[bool]:
        """Liveness of (node, merge class) pairs by the eager guide (its node of the same key; a node it never
        reached is reached by no text, so dead)."""
        out = []
        for pair in pairs.tolist():
            node, mc = divmod(pair, self._M)
            whole = self._whole._node_of.get(self._key(node))
            out.append(whole is not None and bool(self._whole._is_live(whole, mc)))
        return out

    def _alive_by_settled(self, pairs: np.ndarray, within: np.ndarray | None = None,
                          unless: np.ndarray | None = None) -> np.ndarray:
        """bool per (forced node, merge class) pair: whether one allowed edge reaches a settled node (one whose
        regex state is ``within``, bool per state, by a token not ``unless``, bool per token, where given:
        ``_cycle_rows`` proves liveness inside a cycle)."""
        alive = np.zeros(len(pairs), dtype=bool)
        nodes, classes = np.divmod(pairs, self._M)
        qs, ctxs = np.divmod(self._nodes.keys[nodes], self._C)
        pending = ctxs >= self._num_open
        # open nodes (the rest of a literal): a class is dead in one step iff F holds every Y token into a settled
        # node and none of the Z ones (``ForbiddenSets.dead_flags``, every node's row in one call)
        # (a short row not split into edges yet: one compiled pass over the row per regex state, ``open_settled``)
        a, f = self._canonical, self._forbidden
        asked, ys, zs = [], [], []
        by_node: dict[int, list[int]] = {}
        by_state: dict[int, list[int]] = {}
        for i in np.flatnonzero(~pending).tolist():
            n, q = int(nodes[i]), int(qs[i])
            if self._read_from_row(n, q):
                by_state.setdefault(q, []).append(i)
            else:
                by_node.setdefault(n, []).append(i)
        for q, where in by_state.items():
            tokens, targets = self._row(q)
            if unless is not None:
                tokens, targets = tokens[~unless[tokens]], targets[~unless[tokens]]
            alive[where] = open_settled(ctxs[where], classes[where], tokens, targets, a.inside_next, a.boundary_next,
                                        _ANYWHERE if within is None else within, self._num_open, self._accepting,
                                        a.context_final, self._break, f.position, f.starts, f.ends, f.offsets,
                                        f.dense_row, f.dense)
        for n, where in by_node.items():
            tokens, _, kind, sure, states = self._edges(n)
            if within is not None:
                sure = sure & within[states]
            if unless is not None:
                sure = sure & ~unless[tokens]
            if (kind[sure] == _X).any():  # a boundary token into a settled node: every class lives
                alive[where] = True
                continue
            asked.append(where)
            ys.append(tokens[sure & (kind == _Y)].astype(np.int32))
            zs.append(tokens[sure & (kind == _Z)].astype(np.int32))
        if asked:
            bounds = [np.array([0, *itertools.accumulate(len(x) for x in parts)], dtype=np.int64)
                      for parts in (asked, ys, zs)]
            where = np.array([i for part in asked for i in part], dtype=np.int64)
            alive[where] = ~self._forbidden.dead_flags(bounds[0], classes[where], bounds[1], np.concatenate(ys),
                                                       bounds[2], np.concatenate(zs))  # (nothing to hold: dead)
        for q in (np.unique(qs[pending]).tolist() if pending.any() else ()):
            where = np.flatnonzero(pending & (qs == q))
            tokens, targets = self._row(q)
            if within is not None:
                keep = within[targets] if unless is None else within[targets] & ~unless[tokens]
                tokens, targets = tokens[keep], targets[keep]
            alive[where] = pending_settled(ctxs[where] - self._num_open, classes[where], tokens, targets,
                                           a.pending_offsets, a.pending_tokens, a.pending_next, self._num_open,
                                           self._accepting, a.context_final, self._break, f.position, f.starts,
                                           f.ends, f.offsets, f.dense_row, f.dense)
        return alive

    def _live_pairs(self, targets: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """bool per edge into a forced node (``targets``, node ids) by ``tokens``: whether the target is live for
        the merge class the token leaves (solved where not known yet)."""
        pairs = (targets * self._M + self._canonical.after_class[tokens]).tolist()
        unknown = sorted({p for p in pairs if p not in self._live})
        if unknown:
            self._solve_region(np.array(unknown, dtype=np.int64))
        return np.fromiter((self._live[p] for p in pairs), dtype=bool, count=len(pairs))

    def _live_rows(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X, Y, Z of a node (ascending): its candidates whose target is live for the merge class the token
        leaves."""
        if node not in self._node_rows:
            tokens, targets, kind, settled, _ = self._edges(node)
            keep = settled.copy()
            forced = ~settled
            keep[forced] = self._live_pairs(targets[forced], tokens[forced])
            rows = tuple(tokens[keep & (kind == k)] for k in (_X, _Y, _Z))
            pending = self._key(node)[1] >= self._num_open  # (an open node's edges are in row order, ascending)
            self._node_rows[node] = tuple(np.sort(r) for r in rows) if pending else rows
            if self._settled(node):  # (no pair ever asks for its edges again: only forced nodes' are kept)
                del self._candidates[node]
        return self._node_rows[node]

    # ---- serving (``Guide``'s interface over nodes built on first visit) -----------------------------------------
    def _split(self, state: int) -> tuple[int, int]:
        try:
            node, mc = divmod(operator.index(state), self._M)
        except TypeError:
            raise TypeError(f"a guide state is an int, not {type(state).__name__} ({state!r})") from None
        if not 0 <= node < len(self._nodes):
            raise ValueError(f"{state} is not a state of this guide")
        return node, mc

    def is_accepting(self, state: int) -> bool:
        return self._ends(self._split(state)[0])

    def _future(self, q: int) -> bytes | None:
        """A digest of the labelled automaton reachable from regex state ``q`` (``_SharedRows``): its transitions
        renumbered in breadth-first order, where the text may end, which cut exits lead on; None past
        ``_MAX_FUTURE_STATES`` states."""
        if q not in self._futures:
            digest = None
            order, code = reachable_code(self._table, q, _MAX_FUTURE_STATES)
            if len(order):
                found = hashlib.blake2b(code.tobytes(), digest_size=16)
                found.update(self._accepting[order].tobytes())
                found.update(b"-" if self._exit_live is None else self._exit_live[order].tobytes())
                digest = found.digest()
            self._futures[q] = digest
        return self._futures[q]

    def _wide_table(self) -> np.ndarray:
        """The regex table with only the states reading at least ``_WIDE_BYTES`` bytes and the edges between them."""
        if self._wide is None:
            table = self._table
            wide = (table >= 0).sum(axis=1) >= _WIDE_BYTES
            self._wide = np.where((table >= 0) & wide[:, None] & wide[np.maximum(table, 0)], table, MISSING)
        return self._wide

    def _cycle(self, q: int) -> _Cycle | None:
        """The cycle regex state ``q`` lies on (``_Cycle``): among the states reading many bytes where it lies on
        one there, else its strongly connected component; None where it lies on none, the cycle is longer than
        ``_MAX_CYCLE_STATES`` or too many tokens hold a byte leaving it."""
        if q not in self._cycles:
            found = None
            order = cycle_region(self._wide_table(), q, _MAX_CYCLE_STATES)
            if not len(order):
                order = cycle_region(self._table, q, _MAX_CYCLE_STATES)
            if len(order):
                inside = np.zeros(len(self._table), dtype=bool)
                inside[order] = True
                rank = np.full(len(self._table), -1, dtype=np.int64)
                rank[order] = np.arange(len(order))
                table = self._table[order]
                to = np.maximum(table, 0)
                leaves = (table >= 0) & ~inside[to]
                offsets, by_byte = _tokens_by_byte(self._canonical)
                exit_bytes = np.flatnonzero(leaves.any(axis=0))
                if (offsets[exit_bytes + 1] - offsets[exit_bytes]).sum() <= self.vocab_size // _EXIT_TOKENS_SHARE:
                    exit_tokens, holds_exit = _tokens_holding(self._canonical, exit_bytes)
                    rows, symbols = np.nonzero(table >= 0)  # (its edges, as (state, byte, target), -2 leaving it)
                    targets = np.where(leaves[rows, symbols], -2, rank[to[rows, symbols]])
                    digest = hashlib.blake2b(np.stack([rows, symbols, targets]).astype(np.int32).tobytes(), digest_size=16)
                    digest.update(self._accepting[order].tobytes())
                    digest.update(np.ascontiguousarray(self._break[order]).tobytes())
                    found = _Cycle(digest.digest(), order, rank, inside, exit_tokens, holds_exit)
            self._cycles[q] = found
        return self._cycles[q]

    def _cycle_rows(self, node: int, cycle: _Cycle) -> tuple:
        """What every guide with the same cycle and context shares of the node's rows (``_SharedRows`` value
        ``(True, arrays)``; ``(False, ())`` for a narrow row, cheaper built than combined): its edges staying in
        the cycle, which the cycle's digest fixes — X, Y, Z into settled nodes, and those into forced nodes
        (tokens, kind, the target's rank in the cycle and its context) with whether an allowed edge inside the
        cycle takes the target to a settled node for the merge class the token leaves (then it is live whatever
        lies past the cycle; the others are each guide's to solve, ``_cycle_layout``). Only tokens holding no byte
        that leaves the cycle are here (the others may leave it and come back)."""
        edges = self._edges(node)
        if len(edges.tokens) <= _NARROW_ROW:
            return False, ()
        stays = cycle.inside[edges.states] & ~cycle.holds_exit[edges.tokens]
        sure = edges.settled & stays
        settled_rows = tuple(edges.tokens[sure & (edges.kind == k)].astype(np.int32) for k in (_X, _Y, _Z))
        into = ~edges.settled & stays
        tokens, targets = edges.tokens[into], edges.targets[into]
        pairs, inverse = np.unique(targets * self._M + self._canonical.after_class[tokens], return_inverse=True)
        proven = self._alive_by_settled(pairs, within=cycle.inside, unless=cycle.holds_exit)[inverse.ravel()]
        contexts = self._nodes.keys[targets] % self._C
        return True, (*settled_rows, tokens.astype(np.int32), edges.kind[into],
                      cycle.rank[edges.states[into]].astype(np.int32), contexts.astype(np.int32), proven)

    def _cycle_layout(self, node: int, cycle: _Cycle) -> tuple[int, tuple] | None:
        """The node's rows laid out (as ``_layout``) from what guides with its cycle share (``_cycle_rows``, built
        here if none has it yet) and what is this guide's own: the edges into forced nodes of the cycle not proven
        live there, and the edges of the tokens holding a byte that leaves the cycle — read through the table
        (``node_kernels.read_tokens``: a free string's closing quote and what follows it, its escapes, a few
        thousand tokens) rather than a walk of the vocabulary. None for a narrow row."""
        q, ctx = self._key(node)
        key = ("cycle", cycle.digest, ctx)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._cycle_rows(node, cycle)
            self._shared.put(key, shared)
        wide, arrays = shared
        if not wide:
            return None
        X, Y, Z, in_tokens, in_kind, in_rank, in_context, proven = arrays
        kept_inside = proven.copy()
        ask = ~proven
        targets = self._nodes.ids(cycle.order[in_rank[ask]] * self._C + in_context[ask])
        kept_inside[ask] = self._live_pairs(targets, in_tokens[ask].astype(np.int64))
        a = self._canonical
        reached = read_tokens(self._table, q, cycle.exit_tokens, a.token_blob, a.token_offsets)
        leaves = reached >= 0  # (out of the cycle, or out and back)
        tokens, qs, ctxs, kind, settled = open_edges(cycle.exit_tokens[leaves], reached[leaves], a.inside_next[ctx],
                                                     a.boundary_next[ctx], self._accepting, a.context_final,
                                                     self._break, self._num_open)
        kept = settled.copy()
        kept[~settled] = self._live_pairs(self._forced_ids(qs, ctxs, settled)[~settled], tokens[~settled])
        rows = [np.concatenate([base, in_tokens[kept_inside & (in_kind == k)], tokens[kept & (kind == k)]])
                for base, k in ((X, _X), (Y, _Y), (Z, _Z))]
        if self._settled(node):  # (no pair asks for its edges again)
            self._candidates.pop(node, None)
        return row_kind(row_layout(*rows, self.num_words))

    def _layout(self, node: int) -> tuple[int, tuple]:
        """The node's rows as the mask kernel reads them (``tables.row_layout``: kind, arrays): another guide's
        where one has a node of the same future and context (``_SharedRows``), combined from what guides with its
        cycle share where it lies on one (``_cycle_layout``), else built here; offered to the others by its
        future."""
        q, ctx = self._key(node)
        future = self._future(q) if self._shares_rows else None
        found = None if future is None else self._shared.get((future, ctx))
        if found is not None:
            return found
        cycle = self._cycle(q) if self._shares_rows and ctx < self._num_open else None
        built = None if cycle is None else self._cycle_layout(node, cycle)
        if built is None:
            built = row_kind(row_layout(*self._live_rows(node), self.num_words))
        built = built[0], tuple(np.ascontiguousarray(a) for a in built[1])  # (the kernel reads them by address)
        if future is not None:
            self._shared.put((future, ctx), built)
        return built

    def _descriptor(self, node: int) -> int:
        """The address of the node's row descriptor for the mask kernels, built on first use (``_layout``)."""
        if node not in self._descriptors:
            with self._build_lock:
                kind, arrays = self._layout(node)
                descriptor = np.array(row_descriptor(kind, self._ends(node), *arrays), dtype=np.int64)
                self._descriptors[node] = (descriptor, arrays)
                self._node_rows.pop(node, None)  # (the descriptor's arrays hold them; rebuilt from _edges if asked)
        return self._descriptors[node][0].ctypes.data

    def _fill_row(self, state: int, words: np.ndarray) -> None:
        node, mc = self._split(state)
        fill_mask(words, self._forbidden.table, self._descriptor(node), mc, self._eos_array)

    def _fill_at(self, state: int, out, address: int) -> None:
        node, mc = self._split(state)
        fill_mask_at(address, self._forbidden.table, self._descriptor(node), mc, self._eos_array)

    def _step(self, state: int, token: int) -> int:
        """``advance`` for an int state and a token id inside the vocabulary, decided for the one token (the mask's
        bit where it is cached; else the token's row entry, its canonical step and its target's liveness)."""
        node, mc = self._split(state)
        if token in self.eos_token_ids:
            if self._ends(node):
                return state
            raise DisallowedTokenError(f"EOS is not allowed in state {state} of {self.name!r}: the text is unfinished")
        allowed = self._cached_bit(state, token)
        if allowed is False:
            raise DisallowedTokenError(f"token {token} ({self._describe(token)}) is not allowed in state {state} "
                                       f"of {self.name!r}")
        with self._build_lock:
            q, ctx = self._key(node)
            reached = self._read(q, token)
            if reached < 0:
                raise DisallowedTokenError(f"token {token} ({self._describe(token)}) leaves the language in state "
                                           f"{state} of {self.name!r}")
            a = self._canonical
            nxt = a.class_after(ctx * self._M + mc, token) // self._M  # (raises where it is not canonical)
            after = int(a.after_class[token])
            target = self._node(reached, nxt)
            if not allowed and not self._is_live(target, after):
                raise DisallowedTokenError(f"token {token} ({self._describe(token)}) leads where no canonical "
                                           f"completion exists (state {state} of {self.name!r})")
            return target * self._M + after
