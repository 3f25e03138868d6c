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

A node's edges are not kept token by token: tokens that every pre-tokenizer context moves alike share a
*signature* (GPT-2: 98, Llama-3: 196), and a regex state's row is grouped once by (target state, signature), so
each of its nodes holds a few hundred groups whatever the context (GPT-2's JSON object: 2,883 groups for 1.4 M
(node, token) edges). A group whose target has no dead merge class, or only dead ones, is decided whole; only
targets with some dead classes are tested token by token.

``canonical_only=False`` swaps the canonical automaton for one that allows every tokenization (one context, one
merge class forbidding nothing): the peers' behaviour, for comparison.

Masks are packed 32-bit words (bit ``t % 32`` of word ``t // 32`` allows token t, the layout outlines-core,
llguidance and xgrammar use), computed on first use by the compiled kernels of ``product.forbidden`` and kept
in a bounded LRU cache per guide whose rows are preallocated (computing a mask allocates nothing).
"""

from __future__ import annotations

import ctypes
import hashlib
import operator
import sys
import threading
import weakref
from functools import cached_property
from typing import NamedTuple

import numpy as np

from automata import EmptyLanguageError, StateLimitError, from_regex
from automata.dfa import concat_aranges, find_sorted, group_by, row_bounds
from automata.errors import CanonmergeError
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product._mask_cache import MaskCache
from product.forbidden import (BATCH_CACHE, BATCH_DESCRIPTORS, BATCH_EOS, BATCH_FIELDS, BATCH_FORBIDDEN, BATCH_M,
                               BATCH_NUM_EOS, BATCH_NUM_STATES, BATCH_SLABS, COMPUTE, DONE, NO_ROOM, ROW_DENSE, ROW_FIELDS, ROW_SPARSE,
                               ROW_SPARSE_PACKED, ForbiddenSets, batch_compute, batch_copy, batch_keep,
                               copy_cached_mask, keep_mask, pack, row_descriptor)
from product._step_kernel import BAD_STATE, DISALLOWED, UNCACHED, StepTable, step
from product.node_kernels import (ALL_DEAD, NONE_DEAD, PARTIAL, NodeTable, any_live_crossing, context_edges,
                                  distinct_targets, entering_keys, group_row, live_inside, mark_dead,
                                  pending_edges, pending_links, split_rows, stale_predecessors)
from product.token_regex import TokenTransitions, VocabularyTrie

__all__ = ["Guide", "compile_regex", "InvalidTokenError"]


class InvalidTokenError(CanonmergeError, ValueError):
    """A token id outside the vocabulary."""


class _Seeds(NamedTuple):
    """Extra roots of a guide's exploration (``product.counted`` builds its budget layers from them): node keys
    ``keys[i]`` (regex state * contexts + context), the merge classes that may enter each
    (``entering[entering_bounds[i]:entering_bounds[i + 1]]``), and which seeds must be treated as wide (their
    candidate dead classes taken from F's sizes, so every merge class has an exact liveness bit)."""
    keys: np.ndarray
    entering: np.ndarray
    entering_bounds: np.ndarray
    wide: np.ndarray


class _OpenEdges(NamedTuple):
    """The edges of an open node (q, ctx), by token group of q's row (``group_row``): group ``groups[j]``'s
    tokens ``group_tokens[group_bounds[g]:group_bounds[g + 1]]`` reach node ``inside[j]`` when they continue the
    piece and ``boundary[j]`` when they cross a boundary (-1: not that way). The grouped row is q's, shared by all
    of q's nodes; ``num_tokens`` counts the tokens of the kept groups."""
    groups: np.ndarray
    inside: np.ndarray
    boundary: np.ndarray
    group_tokens: np.ndarray
    group_bounds: np.ndarray
    num_tokens: int


_PER_AUTOMATON: "weakref.WeakKeyDictionary[CanonicalAutomaton, dict]" = weakref.WeakKeyDictionary()


def _per_automaton(automaton: CanonicalAutomaton, what: str, build):
    """``build()``, called once per automaton object and dropped with it. What it returns must not refer to the
    automaton, or the automaton would never be freed."""
    built = _PER_AUTOMATON.setdefault(automaton, {})
    if what not in built:
        built[what] = build()
    return built[what]


def vocabulary_trie(canonical: CanonicalAutomaton) -> VocabularyTrie:
    """The byte trie of ``canonical``'s vocabulary, built once per automaton object."""
    return _per_automaton(canonical, "trie", lambda: VocabularyTrie.build(canonical.token_bytes))


def compile_regex(pattern: str, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                  max_states: int = 100_000, max_transitions: int = 50_000_000,
                  cache_size: int = 4096, eos_token_ids: list[int] | None = None,
                  name: str | None = None) -> "Guide":
    """The guide of the strings ``re.fullmatch(pattern, ·)`` accepts, tokenized canonically for ``canonical``'s
    tokenizer (or in any way, with ``canonical_only=False``), ended by ``eos_token_ids`` (default: the
    tokenizer's EOS).

    Errors: ``RegexError`` (syntax interegular cannot parse or does not support), ``EmptyLanguageError`` (no
    string matches, or none has a tokenization over this vocabulary), ``StateLimitError`` (the regex DFA or the
    product exceeds ``max_states`` nodes, or the token transitions exceed ``max_transitions`` entries),
    ``bpe.MissingEOSError`` (no EOS known: pass ``eos_token_ids=``). ``name`` (default: the pattern) names the
    guide in its errors.
    """
    _guide_eos(canonical, eos_token_ids)  # before the expensive part
    name = pattern if name is None else name
    from product.counted import compile_counted  # counted repetitions: a counter beside the state
    counted = compile_counted(pattern, canonical, canonical_only=canonical_only, max_states=max_states,
                              max_transitions=max_transitions, cache_size=cache_size, name=name,
                              eos_token_ids=eos_token_ids)
    if counted is not None:
        return counted
    dfa = from_regex(pattern, max_states=max_states)
    transitions = TokenTransitions.build(dfa, vocabulary_trie(canonical), max_entries=max_transitions)
    return Guide(transitions, canonical, canonical_only=canonical_only, max_states=max_states,
                 cache_size=cache_size, name=name, eos_token_ids=eos_token_ids)


def _guide_eos(canonical: CanonicalAutomaton, eos_token_ids) -> tuple[int, ...]:
    """The EOS ids a guide ends with: ``eos_token_ids`` if given, else the tokenizer's; none is an error (a guide
    without EOS could never end: its masks would be empty where the constraint is satisfied)."""
    from bpe.errors import MissingEOSError

    if eos_token_ids is None:
        eos = tuple(int(t) for t in canonical.eos_token_ids)
    else:
        if isinstance(eos_token_ids, (int, str, bytes)) or not all(
                isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in eos_token_ids):
            raise TypeError(f"eos_token_ids must be a list of token ids, not {eos_token_ids!r}")
        eos = tuple(int(t) for t in eos_token_ids)
        bad = [t for t in eos if not 0 <= t < canonical.vocab_size]
        if bad:
            raise InvalidTokenError(f"eos_token_ids {bad} are outside the vocabulary of {canonical.vocab_size} tokens")
    if not eos:
        raise MissingEOSError("no EOS token is known for this tokenizer, so the guide could never end: pass "
                              "eos_token_ids=[...] (to compile_regex, or where the tokenizer is loaded or compiled: "
                              "load_tokenizer / compile_tokenizer)")
    return eos


class Guide:
    """Next-token masks for one constraint. States are ints; ``initial_state`` starts the text.

    Build with ``compile_regex`` (or, to compose constraints, from any ``TokenTransitions`` — the stitched
    fragments of the next layer are one). Thread-safe: requests in several threads may share one guide (a state
    is an int; the mask cache is locked), and guides compile in parallel.
    """

    def __init__(self, transitions: TokenTransitions, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                 max_states: int = 100_000, cache_size: int = 4096, name: str = "",
                 eos_token_ids: list[int] | None = None, start_context: int = 0,
                 exit_live: np.ndarray | None = None, _seeds: "_Seeds | None" = None):
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, not {cache_size}")
        if not 0 <= start_context < canonical.num_open_contexts or (start_context and not canonical_only):
            raise ValueError(f"start_context {start_context} is not an open context of the automaton")
        if transitions.is_compact:
            raise ValueError("a guide compiles from listed token transitions (TokenTransitions.build's)")
        self._start_context = start_context  # node 0 is (start, start_context): a fragment entered mid-text
        # exits of a fragment (``product.stitched``): ``exit_live[q, ctx]`` makes node (q, ctx) final where the
        # text goes on in another fragment that is live from context ctx, whether or not the text could end there
        self._exit_live = exit_live
        self.name = name
        self.canonical_only = canonical_only
        self._tokens = canonical
        self._automaton = canonical if canonical_only else _any_tokenization(canonical)
        self._forbidden = _forbidden_index(self._automaton)
        self._transitions = transitions
        self.vocab_size = canonical.vocab_size
        self.num_words = (self.vocab_size + 31) // 32
        self.eos_token_ids = _guide_eos(canonical, eos_token_ids)
        self._M = self._automaton.num_merge_classes
        self._seeds = _seeds
        self._explore(max_states)
        self._rows: list[tuple] = [()] * self.num_nodes
        self._solve_liveness()
        self.initial_state = self._automaton.start_class % self._M  # node 0, merge class 0 (forbids nothing)
        if not self._is_live(0, self.initial_state):
            raise EmptyLanguageError(f"constraint {name!r}: no string it accepts has a "
                                     f"{'canonical ' if canonical_only else ''}tokenization over this vocabulary")
        for node in np.flatnonzero(~self._is_pending).tolist():
            self._store_rows(node, *self._open_rows(node))
        # Pending nodes' rows are short Y rows (X = Z = ∅): kept as one table, pending node i's row being
        # pending_row_tokens[pending_row_bounds[i]:[i + 1]], ascending (``pending_edges`` lists a node's edges by
        # token; ``_allows`` searches them). One tuple per node cost 5 of the GPT-2 JSON object's 70 ms (2,176
        # pending nodes).
        Y, self._pending_row_bounds = self._pending_rows()
        self._pending_row_tokens = Y.astype(np.int32, copy=False)
        if type(self) is Guide and _seeds is None:
            # What a plain guide keeps, shrunk (a counted guide reads its edges and pending table while it runs: kept
            # as compiled): token transitions compact, equal pending rows stored once. Over the 499 fragments of 48
            # MaskBench schemas on Llama-3, 3,902 -> 168 MB and 413 -> 109 MB (docs/optimizations.md).
            self._transitions = transitions.compact(self.vocab_size)
            self._pending_row_tokens, self._pending_row_bounds, shared = _share_equal_rows(
                self._pending_row_tokens, self._pending_row_bounds)
            self._pending_index[self._pending_nodes] = shared
        self._describe_rows()
        self._open_edges = self._successors = None  # only the rows (and liveness, for counted guides) from here on
        if _seeds is None:
            self._dead_bits = self._entering = self._entering_bounds = self._narrow = None
        self._pending_tokens = self._pending_inside = self._pending_edges = self._pending_unit_bounds = None
        self._init_mask_cache(cache_size)
        self._mask(self.initial_state)  # the first step's mask is part of compiling (and warms the mask path)

    def _init_mask_cache(self, cache_size: int) -> None:
        self._cache_size = cache_size
        self._cache = MaskCache(cache_size, _SLAB_ROWS)  # cached state -> its slot (row of a slab), LRU order
        # One guide serves concurrent requests: the cache's slots and rows change under a lock. (Unlocked, 4
        # threads filling masks of one guide with a 3-row cache got 4,196 of 12,000 masks wrong.)
        self._lock = threading.Lock()
        self._slabs: list[np.ndarray] = []
        self._slab_views: list[memoryview] = []  # the same rows, for ``_cached_bit``
        self._slab_addresses = self._slab_address_table()
        self._slabs_address = self._slab_addresses.ctypes.data  # (numpy's ctypes.data costs ~1-2 µs a read)
        # built here, not on first use: on a guide just compiled, building it in the first advance cost ~35 µs
        self._step_table = self._new_step_table()
        self._cover_slabs()
        weakref.finalize(self, _SLAB_POOL.give, self._slabs)  # (the list, not the guide: it must be collectable)
        self._advanced: dict[int, int] = {}  # advance's pairs already taken: state * V + token -> next state
        self._forced: dict[int, tuple[int, ...]] = {}

    # ---- storage (``product.library``): a compiled guide as named arrays, no pickle ---------------------------
    def _to_arrays(self) -> dict[str, np.ndarray]:
        """What a compiled plain guide needs at run time, as arrays (its rows flattened: kind per node — 0 none,
        1 sparse with X packed, 2 sparse, 3 dense — then the row's arrays one after another in ``row_data``,
        bounded by ``row_bounds``)."""
        if self._seeds is not None or type(self) is not Guide:
            raise TypeError("only plain guides are stored as arrays (a counted guide writes its own)")
        return self._plain_arrays()

    def _plain_arrays(self) -> dict[str, np.ndarray]:
        """``_to_arrays`` without its check: the rows, not the liveness a guide with seeds also reads at run time
        (``product.counted`` stores that beside them)."""
        kinds, parts = np.zeros(self.num_nodes, dtype=np.int8), []
        for node, row in enumerate(self._rows):
            if not row:
                continue
            if row[0] and row[1] is not None:
                kinds[node] = 1
                parts += [row[1].view(np.int32), row[3], row[4]]
            elif row[0]:
                kinds[node] = 2
                parts += [row[2], row[3], row[4]]
            else:
                kinds[node] = 3
                parts += [row[1].view(np.int32), row[2].view(np.int32)]
        R = self._transitions
        common_target, common_row, common_words = R.common_arrays(self.num_words)
        return {
            "transitions_offsets": R.offsets, "transitions_tokens": R.tokens, "transitions_targets": R.targets,
            "transitions_accepting": R.accepting, "transitions_start": np.array(R.start),
            "transitions_common_target": common_target, "transitions_common_row": common_row,
            "transitions_common_words": common_words,
            "node_q": self._node_q, "node_ctx": self._node_ctx, "final": self._final,
            "row_kinds": kinds, "row_bounds": row_bounds(np.array([len(a) for a in parts], dtype=np.int64)),
            "row_data": np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32),
            "pending_row_tokens": self._pending_row_tokens, "pending_row_bounds": self._pending_row_bounds,
            "pending_index": self._pending_index, "eos_token_ids": np.array(self.eos_token_ids, dtype=np.int64),
            "settings": np.array([int(self.canonical_only), self._start_context, self.initial_state], dtype=np.int64),
        }

    @classmethod
    def _from_arrays(cls, arrays: dict[str, np.ndarray], canonical: CanonicalAutomaton, *, name: str = "",
                     cache_size: int = 1) -> "Guide":
        """The guide ``_to_arrays`` wrote, for ``canonical`` (the automaton it was compiled for: the caller
        checks that). ``ValueError`` if the arrays do not fit together."""
        canonical_only, start_context, initial_state = (int(v) for v in arrays["settings"])
        guide = cls.__new__(cls)
        guide.name, guide.canonical_only, guide._tokens = name, bool(canonical_only), canonical
        guide._automaton = canonical if canonical_only else _any_tokenization(canonical)
        guide._forbidden = _forbidden_index(guide._automaton)
        guide.vocab_size, guide.num_words = canonical.vocab_size, (canonical.vocab_size + 31) // 32
        guide._transitions = R = TokenTransitions(
            arrays["transitions_offsets"], arrays["transitions_tokens"], arrays["transitions_targets"],
            arrays["transitions_accepting"], int(arrays["transitions_start"]), arrays["transitions_common_target"],
            arrays["transitions_common_row"], arrays["transitions_common_words"])
        if (len(R.offsets) != R.num_states + 1 or len(R.tokens) != R.offsets[-1] or len(R.targets) != len(R.tokens)
                or len(R.common_target) != R.num_states or len(R.common_row) != R.num_states
                or R.common_words.ndim != 2 or R.common_words.shape[1] != guide.num_words
                or R.common_row.max(initial=-1) >= len(R.common_words)):
            raise ValueError("token transitions do not fit together")
        guide.eos_token_ids = tuple(int(t) for t in arrays["eos_token_ids"])
        guide._M, guide._seeds, guide._start_context, guide._exit_live = guide._automaton.num_merge_classes, None, \
            start_context, None
        guide._node_q, guide._node_ctx, guide._final = arrays["node_q"], arrays["node_ctx"], arrays["final"]
        N = len(guide._node_q)
        if len(guide._node_ctx) != N or len(guide._final) != N or len(arrays["row_kinds"]) != N:
            raise ValueError("node arrays of different lengths")
        guide._node_of = dict(zip(zip(guide._node_q.tolist(), guide._node_ctx.tolist()), range(N)))
        guide._is_pending = guide._node_ctx >= guide._automaton.num_open_contexts
        data, bounds = arrays["row_data"], arrays["row_bounds"]
        # copies, not views: the packed ones are then shared with other guides (``_PackedRows``) and the file's
        # row_data is not kept alive by the rest
        parts = [data[lo:hi].copy() for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
        rows: list[tuple] = [()] * N
        i = 0
        for node, kind in zip(np.flatnonzero(arrays["row_kinds"]).tolist(),
                              arrays["row_kinds"][arrays["row_kinds"] > 0].tolist()):
            if kind == 1:
                rows[node] = (True, parts[i].view(np.uint32), _NO_TOKENS, parts[i + 1], parts[i + 2])
                i += 3
            elif kind == 2:
                rows[node] = (True, None, parts[i], parts[i + 1], parts[i + 2])
                i += 3
            else:
                rows[node] = (False, parts[i].view(np.uint32), parts[i + 1].view(np.uint32))
                i += 2
        if i != len(parts):
            raise ValueError("row data does not match the row kinds")
        guide._rows = rows
        guide._pending_row_tokens, guide._pending_row_bounds = arrays["pending_row_tokens"], arrays["pending_row_bounds"]
        guide._pending_index = arrays["pending_index"]
        guide._describe_rows()
        guide.initial_state = initial_state
        guide._status = guide._dead_row = guide._dead_bits = None  # liveness is in the rows already
        guide._init_mask_cache(cache_size)
        return guide

    def __getstate__(self) -> dict:
        """A guide pickles (e.g. to a worker process) without its lock (the copy gets a fresh one) and memoryviews
        (rebuilt on use)."""
        state = self.__dict__.copy()
        del state["_lock"]
        for cached in ("_step_table", "_slab_addresses", "_slabs_address", "_batch_row", "_advanced", "_scalar_pending", "_scalar_rows", "_slab_views",
                       "_row_descriptors", "_descriptor_base"):
            state.pop(cached, None)  # memoryviews do not pickle; addresses are this process's
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        weakref.finalize(self, _SLAB_POOL.give, self._slabs)
        self._slab_views = [memoryview(slab) for slab in self._slabs]
        self._advanced = {}
        if "_rows" in state:  # a guide with rows of its own (a stitched guide has its fragments')
            self._describe_rows()
        self._slab_addresses = self._slab_address_table()
        self._slabs_address = self._slab_addresses.ctypes.data  # (numpy's ctypes.data costs ~1-2 µs a read)
        self._step_table = self._new_step_table()  # addresses: this process's copies of the arrays

    # ---- sizes --------------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Product nodes (regex state, canonical context) reached while compiling."""
        return len(self._node_q)

    @property
    def _num_states(self) -> int:
        """States are ints below this (``product.stitched`` numbers its fragments' states one after another)."""
        return self.num_nodes * self._M

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the compiled guide (transitions, node rows, the mask cache's rows allocated so far),
        excluding the canonical automaton and what it shares among its guides."""
        arrays = [a for rows in self._rows for a in rows[1:] if a is not None]
        arrays += [self._pending_row_tokens, self._pending_row_bounds, self._pending_index]
        arrays += [*self._slabs, self._cache.record]
        return self._transitions.nbytes + int(sum(a.nbytes for a in arrays))

    # ---- queries ------------------------------------------------------------------------------------------
    def _split(self, state: int) -> tuple[int, int]:
        try:
            node, mc = divmod(operator.index(state), self._M)
        except TypeError:
            raise TypeError(f"a guide state is an int, not {type(state).__name__} ({state!r})") from None
        if not 0 <= node < len(self._node_q):
            raise ValueError(f"{state} is not a state of this guide")
        return node, mc

    def is_accepting(self, state: int) -> bool:
        """Whether the text may end here (EOS is allowed exactly in these states)."""
        return bool(self._final[self._split(state)[0]])

    def allowed(self, state: int) -> np.ndarray:
        """bool[V]: the tokens that may come next, EOS included where the state accepts."""
        with self._lock:
            words = self._mask(state)
            return np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)

    def fill_bitmask(self, states, out: np.ndarray, *, threads: int = 1) -> None:
        """Write the masks of a batch of states into the first ``len(states)`` rows of ``out`` (int32 or uint32
        ``[rows, num_words]``, a numpy array or a CPU torch tensor): bit ``t % 32`` of word ``t // 32`` is set iff
        token t is allowed. ``threads``: spread the batch over up to that many threads (numba's;
        ``product.fill_next_token_bitmasks`` explains when that pays). A bad buffer or state raises
        ``TypeError``/``ValueError`` before any row is written."""
        address, row_bytes = _rows_address(out, len(states), self.num_words)
        if not address:  # a row's words are not adjacent: through a compact copy
            compact = np.empty((len(states), self.num_words), dtype=np.uint32)
            self.fill_bitmask(states, compact, threads=threads)
            _uint32_rows(out, len(states), self.num_words)[: len(states)] = compact
        elif len(states) == 1:  # a decoder's step: one row copied or computed in place, no batch bookkeeping
            self._fill_one(states[0], out, address)
        elif len(states):
            states = self._checked_states(states)
            rows = np.arange(len(states), dtype=np.int64) * row_bytes + address
            _fill_batch([self], np.zeros(len(states), dtype=np.int64), states, rows, threads)

    @cached_property
    def _batch_row(self) -> np.ndarray:
        """This guide's row of the batch kernels' guide table (``product.forbidden``), but for its cache's address
        (which moves as the cache grows): its slabs and, for a guide whose masks are its node rows', what computes
        them."""
        row = np.zeros(BATCH_FIELDS, dtype=np.int64)
        row[BATCH_SLABS] = self._slabs_address
        if self._plain_masks:
            row[BATCH_NUM_STATES] = self._num_states  # (checked by the kernel)
            row[BATCH_FORBIDDEN] = self._forbidden.table.ctypes.data
            row[BATCH_DESCRIPTORS] = self._descriptor_base
            row[BATCH_M] = self._M
            row[BATCH_EOS], row[BATCH_NUM_EOS] = self._eos_array.ctypes.data, len(self._eos_array)
        return row

    @property
    def _plain_masks(self) -> bool:
        """Whether a mask is its node's rows and merge class alone (the batch kernels compute it), not a counter's
        or a fragment's."""
        return type(self)._fill_row is Guide._fill_row

    def _mask_makers(self, states: np.ndarray) -> tuple[list[Guide], np.ndarray, np.ndarray]:
        """Who computes the masks of ``states`` (checked): plain guides ``makers``, state ``i`` by ``makers[maker_of[i]]``
        at its state ``inner[i]`` — or, where ``maker_of[i]`` is -1, this guide itself (``_fill_row``)."""
        if self._plain_masks:
            return [self], np.zeros(len(states), dtype=np.int64), states
        return [], np.full(len(states), -1, dtype=np.int64), states

    def _checked_states(self, states) -> np.ndarray:
        """``states`` as int64, each checked (``_split``'s errors) — a plain guide's range by the batch kernel
        (``BATCH_NUM_STATES``), not a Python call per state."""
        array = np.asarray(states)
        if array.dtype.kind not in "iu" or array.ndim != 1 or not self._plain_masks or array.dtype == np.uint64:
            for state in states:  # floats, bools, objects, a counter's states: each one's own error
                self._split(state)
            return np.array([operator.index(state) for state in states], dtype=np.int64)
        return array.astype(np.int64, copy=False)

    def _fill_one(self, state: int, out, address: int) -> None:
        """``fill_bitmask`` of one state into the first row of ``out``, at ``address`` (its words adjacent): a
        cached mask is one compiled call (look up, copy between addresses), under the lock; a new one is computed
        outside it, then kept."""
        self._split(state)  # a bad state raises before anything is written
        with self._lock:
            if copy_cached_mask(self._cache.address, self._slabs_address, _SLAB_ROWS, self.num_words, state,
                                address) >= 0:
                return
        self._fill_at(state, out, address)
        with self._lock:  # (kept unless another thread kept it meanwhile)
            if keep_mask(self._cache.address, self._slabs_address, _SLAB_ROWS, self.num_words, state, address) < 0:
                self._cache.reserve(1)
                self._cover_slabs()
                keep_mask(self._cache.address, self._slabs_address, _SLAB_ROWS, self.num_words, state, address)

    def advance(self, state: int, token_id: int) -> int:
        """The state after ``token_id``. EOS in an accepting state leaves the state unchanged.

        Raises ``InvalidTokenError`` for an id outside the vocabulary and ``DisallowedTokenError`` for a token the
        mask does not allow (it would leave the language, make the tokenization non-canonical, or dead-end).
        """
        # Pairs (state, token) advanced before are one dict lookup: the requests a guide serves meet the same
        # pairs again (a JSON key, a separator, a digit after a digit). The key state * V + token names the pair
        # uniquely because 0 <= token < V is checked first; only pairs that passed every check are stored, so
        # errors are raised exactly as before. Exact ints only (a numpy integer or a bool takes the checked path).
        # The table is cleared when full (no LRU bookkeeping on the hot path); dict reads and writes are atomic,
        # so threads may share it.
        if type(state) is int and type(token_id) is int and 0 <= token_id < self.vocab_size:
            key = state * self.vocab_size + token_id
            advanced = self._advanced
            nxt = advanced.get(key)
            if nxt is None:
                # ``_step``'s compiled call made here (~0.3 µs of calls less; a plain guide's step table only); a
                # code (not cached, an error) takes ``_step``, which answers it
                table = self._step_table
                if table is not None and 0 <= state <= _INT64_MAX:
                    with self._lock:
                        nxt = step(table.address, state, token_id, self._cache.address, -1)
                    if nxt < 0:
                        nxt = self._answer(state, token_id, nxt)
                else:
                    nxt = self._step(state, token_id)
                if len(advanced) >= _ADVANCED_LIMIT:
                    advanced.clear()
                advanced[key] = nxt
            return nxt
        self._split(state)  # TypeError / ValueError for a bad state, before the token is looked at
        return self._step(operator.index(state), self.token_id(token_id))

    def _step(self, state: int, token: int) -> int:
        """``advance`` without the table, for an int state and a token id inside the vocabulary: every check, then
        the move, in one compiled call (``product._step_kernel``; a counted guide overrides it to move its count
        too). The check reads the state's cached mask — a decoder advances from the state whose mask it just
        filled — under the cache's lock; a state whose mask is not cached has the token's bit read from its node's
        rows (``_allows``) instead of computing 16 KB of mask for one bit."""
        try:
            with self._lock:
                nxt = step(self._step_table.address, state, token, self._cache.address, -1)
        except OverflowError:  # an int beyond int64
            nxt = BAD_STATE
        return nxt if nxt >= 0 else self._answer(state, token, nxt)

    def _answer(self, state: int, token: int, code: int) -> int:
        """What ``step``'s first call (from the cached mask) left to answer: where the mask was not cached, the step
        with the token's bit read from the node's rows; then the typed error of any code left."""
        if code == UNCACHED:
            code = step(self._step_table.address, state, token, 0, int(self._allows(*divmod(state, self._M), token)))
            if code >= 0:
                return code
        if code == BAD_STATE:
            raise ValueError(f"{state} is not a state of this guide")
        if code == DISALLOWED:
            raise DisallowedTokenError(f"token {token} ({self._describe(token)}) is not allowed in state {state} "
                                       f"of {self.name!r}")
        raise CanonmergeError(f"guide {self.name!r} allows token {token} in state {state} but has no move for it: "
                              "its compiled arrays are inconsistent")

    def _new_step_table(self) -> StepTable | None:
        """What ``_step``'s compiled call reads (None for a guide whose steps are not ``Guide._step``'s)."""
        if type(self)._step is not Guide._step:
            return None
        return StepTable(self, _SLAB_ROWS, self._slab_addresses)

    def token_id(self, token_id) -> int:
        """``token_id`` as an int of this vocabulary, or ``InvalidTokenError`` (not an int, or out of range)."""
        try:
            token_id = operator.index(token_id)
        except TypeError:
            raise InvalidTokenError(f"a token id is an int, not {type(token_id).__name__} ({token_id!r})") from None
        if not 0 <= token_id < self.vocab_size:
            raise InvalidTokenError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")
        return token_id

    def forced_tokens(self, state: int) -> tuple[int, ...]:
        """The chain of tokens that are the only choice from ``state`` (empty if there is a choice, EOS included).
        Appending them needs no model call."""
        chain = self._forced.get(state)
        if chain is None:
            out, s = [], int(state)
            while not self.is_accepting(s) and len(out) < 4096:
                with self._lock:
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

    def _allows(self, node: int, mc: int, token: int) -> bool:
        """Bit ``token`` of the mask of state (node, mc), read from the node's rows without computing the mask
        (``_compute_mask``'s formula for one token): ``advance`` on a state whose mask is not cached — ``accepts``,
        checking a draft's tokens — would otherwise compute 16 KB of mask (10-30 µs at 128k) for one bit. The
        rows never change after compiling, so no lock is needed. They are read through memoryviews
        (``_scalar_rows``), whose items are Python ints: a numpy scalar per read cost ~0.1 µs, a fresh memoryview
        per search ~0.2 µs."""
        if token in self.eos_token_ids:  # special tokens are in no row; EOS is allowed where the text may end
            return bool(self._final[node])
        pending_index, pending_bounds, pending_tokens = self._scalar_pending
        i = pending_index[node]
        if i >= 0:
            return (find_sorted(pending_tokens, token, pending_bounds[i], pending_bounds[i + 1]) >= 0
                    and not self._automaton.forbids(mc, token))
        rows = self._scalar_rows.get(node) or self._view_rows(node)
        if rows[0]:  # sparse
            _, X_packed, X, Y, Z = rows
            if (X_packed is not None and (X_packed[token >> 5] >> (token & 31)) & 1) or _holds(X, token):
                return True
            in_y, in_z = _holds(Y, token), _holds(Z, token)
            if in_y == in_z:  # in both: allowed whatever F[mc] says; in neither: not allowed
                return in_y
            return in_y != self._automaton.forbids(mc, token)
        _, XY, D = rows  # the mask is XY ^ (D & F[mc])
        word, bit = token >> 5, token & 31
        allowed = (XY[word] >> bit) & 1 == 1
        if not (D[word] >> bit) & 1:
            return allowed
        return allowed != self._automaton.forbids(mc, token)

    def _cached_bit(self, state: int, token: int) -> bool | None:
        """Bit ``token`` of ``state``'s mask if the mask is cached, else None. A decoder advances from the state
        whose mask it just filled, so this is the usual answer, and one read where ``_allows`` may search three
        rows (it was half of ``advance``'s time on the peers bench)."""
        with self._lock:
            slot = self._cache.get(state)
            if slot < 0:
                return None
            return (self._slab_views[slot // _SLAB_ROWS][slot % _SLAB_ROWS, token >> 5] >> (token & 31)) & 1 == 1

    @cached_property
    def _scalar_pending(self) -> tuple[memoryview, memoryview, memoryview]:
        """The pending nodes' row table for ``_allows``, as memoryviews."""
        return (memoryview(self._pending_index), memoryview(self._pending_row_bounds),
                memoryview(self._pending_row_tokens))

    @cached_property
    def _scalar_rows(self) -> dict[int, tuple]:
        """``_rows[node]`` with its arrays as memoryviews, per node on first use (``_view_rows``)."""
        return {}

    def _view_rows(self, node: int) -> tuple:
        rows = self._scalar_rows[node] = tuple(memoryview(a) if isinstance(a, np.ndarray) else a
                                               for a in self._rows[node])
        return rows

    def _describe(self, token_id: int) -> str:
        if not self._tokens.token_has_bytes[token_id]:
            return "special"
        lo, hi = self._tokens.token_offsets[token_id: token_id + 2]
        return repr(self._tokens.token_blob[lo:hi].tobytes())

    # ---- masks --------------------------------------------------------------------------------------------
    def _mask(self, state: int) -> np.ndarray:
        """The packed mask of ``state``: a row of the cache, valid until the next ``_mask`` call evicts it. The
        caller holds ``_lock`` while it reads the row."""
        words = self._cached_row(state)
        if words is None:
            words = self._row_of(self._take_slot(state))
            self._fill_row(state, words)
        return words

    def _cached_row(self, state: int) -> np.ndarray | None:
        """The cached mask of ``state`` (now the most recently used), or None. The caller holds ``_lock``."""
        slot = self._cache.lookup(state)
        return self._row_of(slot) if slot >= 0 else None

    def _take_slot(self, state: int) -> int:
        """A slot for the new mask of ``state``: an unused one, or the least recently used one's (evicted). The
        caller holds ``_lock`` and fills the slot's row before it lets go."""
        slot = self._cache.take(state)
        self._cover_slabs()
        return slot

    def _row_of(self, slot: int) -> np.ndarray:
        return self._slabs[slot // _SLAB_ROWS][slot % _SLAB_ROWS]

    def _fill_row(self, state: int, words: np.ndarray) -> None:
        """Compute the mask of ``state`` into ``words`` (a counted guide decodes its counter here)."""
        self._compute_mask(*self._split(state), words)

    def _fill_at(self, state: int, out, address: int) -> None:
        """``_fill_row`` into the first row of ``out``, whose words are at ``address``: read without numpy where the
        guide can (a counted guide edits the row with numpy)."""
        node, mc = self._split(state)
        self._forbidden.fill_mask_at(address, self._descriptor_base + node * _DESCRIPTOR_BYTES, mc, self._eos_array)

    def _slab_address_table(self) -> np.ndarray:
        """Where each slab of the mask cache is, for the compiled kernels: int64[slabs the cache may need], the
        slabs already made filled in (``_cover_slabs`` fills in the others)."""
        addresses = np.zeros(-(-self._cache_size // _SLAB_ROWS), dtype=np.int64)
        addresses[: len(self._slabs)] = [slab.ctypes.data for slab in self._slabs]
        return addresses

    def _cover_slabs(self) -> None:
        """Slabs for every slot the cache has room for (``MaskCache.capacity``; it grows by doubling). Masks live in
        preallocated slabs of rows, so computing one allocates nothing (a fresh 16 KB array per mask cost up to ~1 ms
        right after a large compile: the allocator reorganising its free lists). A slab is left uninitialised (every
        mask writes its whole row): zeroing 256 rows cost each Llama-3 compile 0.23-0.4 ms, for rows most guides
        never use."""
        while _SLAB_ROWS * len(self._slabs) < self._cache.capacity:
            rows = min(_SLAB_ROWS, self._cache_size - _SLAB_ROWS * len(self._slabs))
            slab = _SLAB_POOL.take(self.num_words) if rows == _SLAB_ROWS else None
            self._slabs.append(np.empty((rows, self.num_words), dtype=np.uint32) if slab is None else slab)
            self._slab_views.append(memoryview(self._slabs[-1]))
            self._slab_addresses[len(self._slabs) - 1] = self._slabs[-1].ctypes.data

    def _store_rows(self, node: int, X: np.ndarray, Y: np.ndarray, Z: np.ndarray) -> None:
        """Keep a node's rows of token ids: X (allowed whatever the merge class), Y (allowed unless in F[mc]),
        Z (allowed only if in F[mc]). Few class-dependent tokens: Y and Z as token arrays, tested against F[mc]
        one by one, over X as tokens or, when X is long, packed (``(True, X packed or None, X, Y, Z)``). Many:
        packed as ``XY = X | Y`` and ``D = XY ^ (X | Z)``, the mask being ``XY ^ (D & F[mc])``
        (``(False, XY, D)``). On the peers' Llama-3 guides 767 of the 1,561 nodes with long rows have at most 256
        class-dependent tokens (most of the float regex's have none): testing those beats walking F[mc]."""
        n = self.num_words
        self.__dict__.get("_scalar_rows", {}).pop(node, None)  # its memoryviews, if ``_allows`` made them
        if len(Y) + len(Z) <= _SPARSE_LIMIT:
            # rows come grouped (``_OpenEdges``); a mask walks token arrays faster in id order (its words in order)
            Y, Z = (np.sort(a).astype(np.int32, copy=False) for a in (Y, Z))
            if len(X) > _SPARSE_LIMIT:
                self._rows[node] = (True, pack(X, n), _NO_TOKENS, Y, Z)
            else:
                self._rows[node] = (True, None, np.sort(X).astype(np.int32, copy=False), Y, Z)
        else:
            X = pack(X, n)
            XY = X | pack(Y, n)
            self._rows[node] = (False, XY, XY ^ (X | pack(Z, n)))
        if "_row_descriptors" in self.__dict__:  # a row replaced after compiling (tests do)
            self._describe_row(node)

    def _describe_row(self, node: int) -> None:
        """Write node ``node``'s row descriptor from ``_rows[node]`` (its arrays made C-contiguous of the dtypes the
        kernel reads, and kept there)."""
        row, packed = self._rows[node], _packed_rows(self._tokens)
        if row[0] and row[1] is not None:
            row = (True, packed.shared(_words(row[1])), _NO_TOKENS, _tokens(row[3]), _tokens(row[4]))
            kind, arrays = ROW_SPARSE_PACKED, (row[1], row[3], row[4])
        elif row[0]:
            row = (True, None, _tokens(row[2]), _tokens(row[3]), _tokens(row[4]))
            kind, arrays = ROW_SPARSE, row[2:]
        else:
            row = (False, packed.shared(_words(row[1])), packed.shared(_words(row[2])))
            kind, arrays = ROW_DENSE, row[1:]
        self._rows[node] = row
        self._row_descriptors[node] = row_descriptor(kind, self._final[node], *arrays)

    def _compute_mask(self, node: int, mc: int, out: np.ndarray) -> None:
        self._forbidden.fill_mask(out, self._descriptor_base + node * _DESCRIPTOR_BYTES, mc, self._eos_array)

    def _describe_rows(self) -> None:
        """``_row_descriptors``: each node's rows as the mask kernels read them (``product.forbidden``): kind,
        whether EOS is allowed, addresses and lengths of its arrays — those of ``_rows`` and, for a pending node,
        its slice of ``_pending_row_tokens``, which the guide keeps unchanged from here on."""
        descriptors = np.zeros((self.num_nodes, ROW_FIELDS), dtype=np.int64)
        descriptors[:, 1] = self._final
        self._pending_row_tokens = tokens = np.ascontiguousarray(self._pending_row_tokens, dtype=np.int32)
        pending = np.flatnonzero(self._pending_index >= 0)
        lo = self._pending_row_bounds[self._pending_index[pending]]
        hi = self._pending_row_bounds[self._pending_index[pending] + 1]
        descriptors[pending, 0] = ROW_SPARSE  # Y only
        descriptors[pending, 4], descriptors[pending, 5] = tokens.ctypes.data + 4 * lo, hi - lo
        self._row_descriptors = descriptors
        for node, row in enumerate(self._rows):
            if row:
                self._describe_row(node)
        self._descriptor_base = descriptors.ctypes.data
        self._eos_array = np.array(self.eos_token_ids, dtype=np.int64)

    # ---- compilation: explore nodes, then liveness --------------------------------------------------------
    #
    # Nodes come in two kinds. *Open* nodes (no unfinished character) are few — regex states times a few dozen
    # pre-tokenizer contexts — and their rows can span the vocabulary: their edges are kept per node. *Pending*
    # nodes (a token ended inside a UTF-8 character) can number thousands in a free-text state, each with a
    # short row of completing tokens: their edges are kept in one compressed-row table and handled in batches.
    # The per-token loops are compiled (``product.node_kernels``).

    def _explore(self, max_states: int) -> None:
        """Breadth-first over nodes (q, ctx) reachable from (start, 0); per node, its candidate tokens with their
        inside/boundary target nodes and next merge class."""
        A, R = self._automaton, self._transitions
        num_open, num_ctx, V = A.num_open_contexts, A.num_contexts, A.vocab_size
        table = NodeTable()

        def node_ids(keys: np.ndarray) -> np.ndarray:
            ids = table.ids(keys)
            if len(table) > max_states:
                raise StateLimitError(f"constraint {self.name!r}: more than max_states={max_states} product nodes")
            return ids

        signature, inside_of_signature, boundary_of_signature = _token_signatures(A)
        row_groups: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}  # per regex state
        self._open_edges: dict[int, _OpenEdges] = {}
        self._successors: dict[int, np.ndarray] = {}  # distinct target nodes of each open node
        layers = []  # per layer of pending nodes: (nodes, edges per node, tokens, inside targets)
        node_ids(np.array([R.start * num_ctx + self._start_context]))
        if self._seeds is not None:  # extra roots (``product.counted``): explored like the start
            self._seed_ids = node_ids(self._seeds.keys)
        done = 0
        while done < len(table):  # one breadth-first layer per pass
            frontier = np.arange(done, len(table))
            done = len(table)
            qs, ctxs = np.divmod(table.keys[frontier], num_ctx)
            is_open = ctxs < num_open
            for n, q, ctx in zip(frontier[is_open].tolist(), qs[is_open].tolist(), ctxs[is_open].tolist()):
                if q not in row_groups:
                    row_groups[q] = group_row(*R.row(q), signature, inside_of_signature.shape[1])
                group_tokens, group_bounds, group_target, group_signature = row_groups[q]
                groups, inside, boundary, num_tokens = context_edges(
                    group_target, group_signature, group_bounds, inside_of_signature[ctx], boundary_of_signature[ctx],
                    num_ctx)
                inside, boundary = node_ids(inside), node_ids(boundary)
                self._open_edges[n] = _OpenEdges(groups, inside, boundary, group_tokens, group_bounds, num_tokens)
                self._successors[n] = distinct_targets(inside, boundary, len(table))
            if not is_open.all():  # completing tokens of the unfinished character that the regex also reads
                counts, tokens, keys = pending_edges(qs[~is_open], ctxs[~is_open] - num_open, A.pending_offsets,
                                                     A.pending_tokens, A.pending_next, R.offsets, R.tokens, R.targets,
                                                     num_ctx)
                layers.append((frontier[~is_open], counts, tokens, node_ids(keys)))
        N = len(table)
        self._node_q, self._node_ctx = (a.astype(np.int64) for a in np.divmod(table.keys[:N], num_ctx))
        self._node_of = dict(zip(zip(self._node_q.tolist(), self._node_ctx.tolist()), range(N)))
        self._is_pending = self._node_ctx >= num_open
        self._final = R.accepting[self._node_q] & A.context_final[self._node_ctx]
        if self._exit_live is not None:
            open_ = ~self._is_pending
            self._final[open_] |= self._exit_live[self._node_q[open_], self._node_ctx[open_]]
        # the pending nodes' edges as one table: node pending_nodes[i] has edges pending_bounds[i]:[i + 1]
        parts = list(zip(*layers)) if layers else [[np.zeros(0, np.int64)], [np.zeros(0, np.int64)],
                                                    [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]]
        self._pending_nodes = np.concatenate(parts[0]).astype(np.int64)  # ascending (layers, then frontier order)
        self._pending_bounds = row_bounds(np.concatenate(parts[1]))
        self._pending_tokens = np.concatenate(parts[2]).astype(np.int32)
        self._pending_inside = np.concatenate(parts[3])
        # for entering_keys, which takes token groups, each pending edge is a group of one token
        self._pending_unit_bounds = np.arange(len(self._pending_tokens) + 1)
        self._pending_edges = self._pending_unit_bounds[:-1]
        self._pending_index = np.full(N, -1, dtype=np.int64)
        self._pending_index[self._pending_nodes] = np.arange(len(self._pending_nodes))

    def _is_live(self, node: int, mc: int) -> bool:
        status = self._status[node]
        if status == PARTIAL:
            return not (self._dead_bits[self._dead_row[node], mc >> 3] >> (mc & 7)) & 1
        return status == NONE_DEAD

    def _open_rows(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows X, Y, Z of an open node under the current liveness."""
        e = self._open_edges[node]
        return split_rows(e.groups, e.inside, e.boundary, e.group_tokens, e.group_bounds, self._automaton.after_class,
                          self._status, self._dead_row, self._dead_bits)

    def _pending_rows(self, which: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Row Y (and its bounds) of the pending nodes ``self._pending_nodes[which]`` (all if None): a pending
        node has only inside moves, so X = Z = ∅."""
        bounds, tokens, inside = self._pending_bounds, self._pending_tokens, self._pending_inside
        if which is not None:
            lo, hi = bounds[which], bounds[which + 1]
            edges = concat_aranges(lo, hi)
            bounds, tokens, inside = row_bounds(hi - lo), tokens[edges], inside[edges]
        return live_inside(bounds, tokens, inside, self._automaton.after_class, self._status, self._dead_row,
                           self._dead_bits)

    _WIDE_ROW = 4096  # open nodes with more candidate tokens take their candidate classes from F's sizes instead

    def _entering_and_predecessors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The merge classes that can enter each node (the after_class of the tokens reaching it), as a
        compressed-row table (``entering[entering_bounds[n]:entering_bounds[n + 1]]``; empty for wide open
        nodes, whose candidates come from F's sizes: ``narrow`` says which); and predecessor lists grouped by
        target (``pred_source[pred_bounds[n]:pred_bounds[n + 1]]``)."""
        N, M = self.num_nodes, self._M
        narrow = np.ones(N, dtype=bool)
        for n, e in self._open_edges.items():
            narrow[n] = e.num_tokens <= self._WIDE_ROW
        seeds = self._seeds
        if seeds is not None:
            narrow[self._seed_ids[seeds.wide]] = False
        after_class = self._automaton.after_class
        start_key = np.array([self._automaton.start_class % M], dtype=np.int64)  # node 0 is the start
        keys = [start_key] + [entering_keys(e.groups, targets, e.group_tokens, e.group_bounds, after_class, narrow, M)
                              for e in self._open_edges.values() for targets in (e.inside, e.boundary)]
        keys.append(entering_keys(self._pending_edges, self._pending_inside, self._pending_tokens,
                                  self._pending_unit_bounds, after_class, narrow, M))
        if seeds is not None:  # the classes that may enter a seed, as given
            keys.append(np.repeat(self._seed_ids, np.diff(seeds.entering_bounds)) * M + seeds.entering)
        distinct = NodeTable()  # a hash set: edges into a node share a few classes (sorting them all cost 0.3 s)
        distinct.ids(np.concatenate(keys))
        node, entering = np.divmod(np.sort(distinct.keys[:len(distinct)]), M)
        entering_bounds = np.searchsorted(node, np.arange(N + 1))
        # predecessors, from the successor lists of open nodes and the distinct targets of pending ones (GPT-2's
        # JSON object: 108k pending edges, 10.5k links in all), grouped by a counting sort
        sources = [np.full(len(s), n, dtype=np.int64) for n, s in self._successors.items()]
        targets = list(self._successors.values())
        pending_sources, pending_targets = pending_links(self._pending_nodes, self._pending_bounds,
                                                         self._pending_inside, N)
        pred_source, pred_bounds = group_by(np.concatenate(targets + [pending_targets]),
                                            np.concatenate(sources + [pending_sources]), N)
        return narrow, entering, entering_bounds, pred_source, pred_bounds

    def _solve_liveness(self) -> None:
        """Least fixpoint, in rounds: every node whose successors changed is recomputed (open nodes one by one,
        pending nodes in one batch), until nothing changes. Dead sets only shrink, whatever the order."""
        N = self.num_nodes
        self._status = np.where(self._final, NONE_DEAD, ALL_DEAD).astype(np.int8)
        # Partial nodes' dead merge classes, one bit row each (a gather per lookup, not a search).
        self._dead_row = np.full(N, -1, dtype=np.int64)
        self._dead_count = np.zeros(N, dtype=np.int64)
        self._dead_bits = np.zeros((16, (self._M + 7) // 8), dtype=np.uint8)
        self._num_dead_rows = 0
        narrow, entering, entering_bounds, pred_source, pred_bounds = self._entering_and_predecessors()
        self._narrow, self._entering, self._entering_bounds = narrow, entering, entering_bounds
        num_entering = np.diff(entering_bounds)

        # Gauss-Seidel rounds: results are applied at once, open nodes deepest first (breadth-first numbering
        # reversed), so most successors are final before their predecessors are computed; a node is recomputed
        # only if a successor changed after its last computation. (Email regex on GPT-2: 5 -> 2 passes.)
        clock, computed_at, changed_at = 0, np.zeros(N, dtype=np.int64), np.zeros(N, dtype=np.int64)

        def apply_one(n: int, dead: np.ndarray) -> None:
            """Record the dead classes of one node (the open nodes' path: scalar, no array set-up)."""
            if not len(dead):
                status = NONE_DEAD
            elif (narrow[n] and len(dead) == num_entering[n]) or len(dead) == self._M:
                status = ALL_DEAD
            else:
                status = PARTIAL
            if status == self._status[n] and (status != PARTIAL or len(dead) == self._dead_count[n]):
                return
            self._status[n] = status
            changed_at[n] = clock
            if status == PARTIAL:
                self._set_dead(np.array([n]), np.array([len(dead)]), dead)

        def apply(nodes: np.ndarray, dead_bounds: np.ndarray, dead: np.ndarray) -> None:
            """Record the dead classes of ``nodes`` (node i: ``dead[dead_bounds[i]:dead_bounds[i + 1]]``)."""
            count = np.diff(dead_bounds)
            status = np.where(count == 0, NONE_DEAD,
                              np.where(narrow[nodes] & (count == num_entering[nodes]), ALL_DEAD, PARTIAL))
            changed = (status != self._status[nodes]) | ((status == PARTIAL) & (count != self._dead_count[nodes]))
            self._status[nodes[changed]] = status[changed]
            changed_at[nodes[changed]] = clock
            partial = changed & (status == PARTIAL)
            if partial.any():
                self._set_dead(nodes[partial], count[partial], dead[concat_aranges(dead_bounds[:-1][partial],
                                                                                   dead_bounds[1:][partial])])

        dirty = np.flatnonzero(~self._final)
        while len(dirty):
            round_start = clock + 1
            for n in dirty[~self._is_pending[dirty]][::-1].tolist():
                clock += 1
                computed_at[n] = clock
                # A live crossing-only token keeps every class alive; finding one usually takes a few edges,
                # so only nodes without one split their rows here (rows are stored once, after the fixpoint:
                # storing them at each computation split every row 2.4 times on the JSON object).
                e = self._open_edges[n]
                if any_live_crossing(e.groups, e.inside, e.boundary, e.group_tokens, e.group_bounds,
                                     self._automaton.after_class, self._status, self._dead_row, self._dead_bits):
                    apply_one(n, _NO_CLASSES)
                    continue
                _, Y, Z = self._open_rows(n)
                candidates = (entering[entering_bounds[n]:entering_bounds[n + 1]] if narrow[n]
                              else self._forbidden.classes_by_size(len(Y)))
                apply_one(n, self._forbidden.dead_classes(Y, Z, candidates))
            pending = dirty[self._is_pending[dirty]]
            if len(pending):  # mc is dead iff every live completing token is in F[mc]
                clock += 1
                computed_at[pending] = clock
                Y, y_bounds = self._pending_rows(self._pending_index[pending])
                lo, hi = entering_bounds[pending], entering_bounds[pending + 1]
                candidates = entering[concat_aranges(lo, hi)]
                class_bounds = row_bounds(hi - lo)
                flags = self._forbidden.dead_flags(class_bounds, candidates, y_bounds, Y,
                                                   np.zeros(len(pending) + 1, np.int64), _NO_TOKENS)
                dead_bounds = row_bounds(flags)[class_bounds]
                apply(pending, dead_bounds, candidates[flags])
            changed = np.flatnonzero(changed_at >= round_start)
            if not len(changed):
                break
            dirty = stale_predecessors(changed, changed_at, computed_at, pred_bounds, pred_source, self._final)

    def _set_dead(self, nodes: np.ndarray, counts: np.ndarray, dead: np.ndarray) -> None:
        """Record the dead merge classes of partial nodes (node i: ``counts[i]`` classes of ``dead``, in order) in
        their bit rows, allocated on first use."""
        fresh = nodes[self._dead_row[nodes] < 0]
        if len(fresh):
            self._dead_row[fresh] = np.arange(self._num_dead_rows, self._num_dead_rows + len(fresh))
            self._num_dead_rows += len(fresh)
            if self._num_dead_rows > len(self._dead_bits):  # grow by doubling: rare reallocations
                grown = np.zeros((2 * self._num_dead_rows, self._dead_bits.shape[1]), dtype=np.uint8)
                grown[: len(self._dead_bits)] = self._dead_bits
                self._dead_bits = grown
        mark_dead(self._dead_bits, self._dead_row[nodes], counts, dead.astype(np.int64, copy=False))
        self._dead_count[nodes] = counts


_SPARSE_LIMIT = 256  # at most this many class-dependent tokens: mask by direct membership tests
_NO_TOKENS = np.zeros(0, dtype=np.int32)


class _PackedRows:
    """The packed rows (vocabulary-wide bit sets) of every guide of one tokenizer, each distinct row held once.
    Fragments of one schema and of different schemas repeat the same free-text rows: over the 48 bench schemas'
    fragments on Llama-3, 389 MB of rows, 19 MB distinct. Held weakly (a row goes with its last guide), looked up
    by a 128-bit hash and compared before being shared. A guide's ``memory_bytes`` still counts its shared rows."""

    def __init__(self) -> None:
        self._rows: "weakref.WeakValueDictionary[bytes, np.ndarray]" = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def shared(self, words: np.ndarray) -> np.ndarray:
        """The held row equal to ``words`` (C-contiguous uint32), or ``words`` itself (a copy if it is a view of a
        larger array), held from now on."""
        key = hashlib.blake2b(words, digest_size=16).digest()
        with self._lock:
            held = self._rows.get(key)
            if held is not None and np.array_equal(held, words):
                return held
            own = words if words.base is None else words.copy()
            if held is None:
                self._rows[key] = own
            return own


def _packed_rows(canonical: CanonicalAutomaton) -> _PackedRows:
    return _per_automaton(canonical, "packed rows", _PackedRows)


def _share_equal_rows(tokens: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``tokens[bounds[i]:bounds[i + 1]]`` with equal rows stored once: (tokens, bounds, row i's new index).
    Rows are grouped by a polynomial hash and length, then every row is compared with its group's first (a hash
    collision keeps the rows apart: nothing is shared)."""
    lengths = np.diff(bounds)
    if len(lengths) < 2:
        return tokens, bounds, np.arange(len(lengths))
    position = np.arange(len(tokens)) - np.repeat(bounds[:-1], lengths)
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(max(int(lengths.max()), 1), 1_000_003, dtype=np.uint64))
        terms = (tokens.astype(np.uint64) + np.uint64(1)) * powers[position]
        hashes = np.zeros(len(lengths), dtype=np.uint64)
        nonempty = lengths > 0
        hashes[nonempty] = np.add.reduceat(terms, bounds[:-1][nonempty])
    keys = np.stack([hashes, lengths.astype(np.uint64)], axis=1)
    _, first, group = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    group = group.ravel()
    representative = first[group]
    if not np.array_equal(tokens, tokens[concat_aranges(bounds[representative], bounds[representative + 1])]):
        return tokens, bounds, np.arange(len(lengths))
    kept = np.sort(first)  # the distinct rows, in their first row's order
    new_index = np.empty(len(lengths), dtype=np.int64)
    new_index[kept] = np.arange(len(kept))
    return (tokens[concat_aranges(bounds[kept], bounds[kept + 1])], row_bounds(lengths[kept]),
            new_index[representative])


def _tokens(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.int32)


def _words(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.uint32)
_MASK_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


class _SlabPool:
    """Full slabs of mask rows that freed guides gave back, lent to the next guides of the same vocabulary size.

    Memory fresh from the OS costs its first write a page fault per 4 KB: ~3 µs each on the development VM, so a
    new slab's rows cost 18–29 µs each at 200k tokens instead of 3 (and numpy's allocations of 4 MB or more ask
    for huge pages, one of which stalled a write for 8 ms). A guide's second slab, taken in the middle of a walk,
    made the slowest mask of the peers bench's walks (55–60 µs, every repetition). Slabs that were written once
    keep their pages. Bounded (``max_bytes``), LIFO, thread-safe (guides are freed in any thread)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes, self._bytes = max_bytes, 0
        self._free: dict[int, list[np.ndarray]] = {}  # num_words -> slabs of _SLAB_ROWS rows
        self._lock = threading.Lock()

    def take(self, num_words: int) -> np.ndarray | None:
        with self._lock:
            free = self._free.get(num_words)
            if not free:
                return None
            self._bytes -= free[-1].nbytes
            return free.pop()

    def give(self, slabs: list[np.ndarray]) -> None:
        with self._lock:
            for slab in slabs:
                if len(slab) == _SLAB_ROWS and self._bytes + slab.nbytes <= self._max_bytes:
                    self._free.setdefault(slab.shape[1], []).append(slab)
                    self._bytes += slab.nbytes


_SLAB_POOL = _SlabPool(64 << 20)


def _fill_batch(owners: list[Guide], owner_of: np.ndarray, states: np.ndarray, rows: np.ndarray,
                threads: int) -> None:
    """The masks of ``states[k]`` (checked) of guides ``owners[owner_of[k]]`` (distinct guides) into the rows at
    addresses ``rows[k]`` (distinct, alive), through the owners' mask caches: cached rows copied and the batch's new
    states kept under the owners' locks, the masks computed outside them (``product.forbidden``'s batch kernels;
    a counter's masks by its guide's ``_fill_row``). The locks are taken in one order (by id), so two batches
    sharing guides cannot deadlock."""
    num_words = owners[0].num_words
    fields = np.array([owner._batch_row for owner in owners]) if len(owners) > 1 else owners[0]._batch_row[None]
    locks = [owner._lock for owner in sorted(owners, key=id)] if len(owners) > 1 else [owners[0]._lock]
    _acquire(locks)
    try:
        fields[:, BATCH_CACHE] = [owner._cache.address for owner in owners]
        kind, source, computed = batch_copy(fields, owner_of, states, rows, num_words, _SLAB_ROWS, threads)
    finally:
        _release(locks)
    if computed < 0:  # a state out of range (an owner's ``_split`` says which and why); nothing written
        bad = -1 - computed
        owners[owner_of[bad]]._split(int(states[bad]))
        raise AssertionError("the batch kernel and _split disagree on a state")
    if computed:
        if all(owner._plain_masks for owner in owners):  # regex guides: each computes its own masks
            batch_compute(fields, owner_of, states, rows, num_words, kind, computed, threads)
        else:
            makers, maker_of, inner = _makers_of(owners, owner_of, states, kind)
            batch_compute(np.concatenate([fields, makers]), maker_of, inner, rows, num_words, kind, computed, threads)
            for k in np.flatnonzero((kind == COMPUTE) & (maker_of < 0)).tolist():  # a counter's mask
                owners[owner_of[k]]._fill_row(int(states[k]), _words_at(int(rows[k]), num_words))
    elif len(states) == 1 or not np.count_nonzero(kind):  # every mask was cached, one of each state: nothing to keep
        return
    _acquire(locks)
    try:
        fields[:, BATCH_CACHE] = [owner._cache.address for owner in owners]  # (another batch may have grown one)
        batch_keep(fields, owner_of, states, rows, num_words, _SLAB_ROWS, kind, source, threads)
        no_room = kind == NO_ROOM
        if no_room.any():  # caches that must grow first (their records move): then those states kept
            for g, count in enumerate(np.bincount(owner_of[no_room], minlength=len(owners)).tolist()):
                if count:
                    owners[g]._cache.reserve(count)
                    owners[g]._cover_slabs()
                    fields[g, BATCH_CACHE] = owners[g]._cache.address
            kind[no_room] = COMPUTE
            kind[~no_room] = DONE  # (done: the second pass keeps only those)
            batch_keep(fields, owner_of, states, rows, num_words, _SLAB_ROWS, kind, source, threads)
    finally:
        _release(locks)


def _makers_of(owners: list[Guide], owner_of: np.ndarray, states: np.ndarray, kind: np.ndarray):
    """For the entries to compute: the guides that compute their masks other than the owners (a schema's fragments),
    as rows of the batch kernels' table to append to the owners' rows, each entry's row in the whole table (-1: its
    owner computes it) and its state there."""
    extra: list[np.ndarray] = []
    row_of = {id(owner): g for g, owner in enumerate(owners) if owner._plain_masks}
    maker_of = np.full(len(states), -1, dtype=np.int64)
    inner = states.copy()
    for g, owner in enumerate(owners):
        entries = np.flatnonzero((owner_of == g) & (kind == COMPUTE))
        if not len(entries):
            continue
        makers, local, inner[entries] = owner._mask_makers(states[entries])
        for maker in makers:
            if id(maker) not in row_of:
                row_of[id(maker)] = len(owners) + len(extra)
                extra.append(maker._batch_row)
        table_rows = np.array([row_of[id(maker)] for maker in makers] + [-1], dtype=np.int64)
        maker_of[entries] = table_rows[local]  # (local -1: the last, -1)
    return np.array(extra, dtype=np.int64).reshape(-1, BATCH_FIELDS), maker_of, inner


def _words_at(address: int, num_words: int) -> np.ndarray:
    """The ``num_words`` uint32 words at ``address`` as a numpy array (the caller keeps the memory alive)."""
    return np.ctypeslib.as_array((ctypes.c_uint32 * num_words).from_address(address))


def _acquire(locks: list[threading.Lock]) -> None:
    for i, lock in enumerate(locks):
        try:
            lock.acquire()
        except BaseException:  # (a KeyboardInterrupt): let go of those taken
            _release(locks[:i])
            raise


def _release(locks: list[threading.Lock]) -> None:
    for lock in locks:
        lock.release()


def _buffer_error(out, rows: int, num_words: int) -> str:
    return (f"fill_bitmask needs an int32 or uint32 buffer of [at least {rows} rows, {num_words} words], not "
            f"{out.dtype} {list(out.shape)}")


def _rows_address(out, rows: int, num_words: int) -> tuple[int, int]:
    """For ``fill_bitmask``: where the first row of ``out`` (a numpy array or a CPU torch tensor, checked to hold
    ``rows`` masks as ``fill_bitmask`` says) is and how many bytes there are from one row to the next; (0, 0) where a
    row's words are not adjacent or rows overlap. A torch tensor is read without numpy: ``Tensor.numpy()`` and the
    uint32 view cost ~2 µs of a ~5 µs cached fill."""
    torch = sys.modules.get("torch")  # not imported: ``out`` is no tensor (guides do not import torch themselves)
    if torch is not None and isinstance(out, torch.Tensor):
        shape, dtype = out.shape, out.dtype  # (each access costs ~1 µs, ~5 on a first fill after compiling)
        if not out.is_cpu:
            raise TypeError(f"fill_bitmask writes CPU buffers, not a tensor on {out.device}")
        if (dtype is not torch.int32 and dtype is not torch.uint32) or len(shape) != 2 or shape[1] != num_words or \
                shape[0] < rows:
            raise ValueError(_buffer_error(out, rows, num_words))
        words_step, row_step = (out.stride(1), out.stride(0)) if num_words > 1 else (1, out.stride(0))
        apart = rows <= 1 or abs(row_step) >= num_words
        return (out.data_ptr(), 4 * row_step) if words_step == 1 and apart else (0, 0)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"fill_bitmask writes a numpy array or a CPU torch tensor, not {type(out).__name__}")
    _check_array(out, rows, num_words)
    adjacent = (out.strides[1] == 4 or num_words == 1) and (rows <= 1 or abs(out.strides[0]) >= 4 * num_words)
    return (out.ctypes.data, out.strides[0]) if adjacent else (0, 0)


def _uint32_rows(out, rows: int, num_words: int) -> np.ndarray:
    """``out`` (a numpy array or a CPU torch tensor) as a numpy uint32 array sharing its memory, checked to hold
    ``rows`` masks."""
    if not isinstance(out, np.ndarray):
        out = out.numpy()  # a CPU torch tensor: same memory (torch raises TypeError for other devices)
    _check_array(out, rows, num_words)
    return out.view(np.uint32)


def _check_array(out: np.ndarray, rows: int, num_words: int) -> None:
    """ValueError unless ``out`` is a writable int32/uint32 numpy array of at least ``rows`` masks."""
    if out.dtype not in _MASK_DTYPES or out.ndim != 2 or out.shape[1] != num_words or len(out) < rows:
        raise ValueError(_buffer_error(out, rows, num_words))
    if not out.flags.writeable:
        raise ValueError("fill_bitmask's buffer is read-only")
_NO_CLASSES = np.zeros(0, dtype=np.int64)
_DESCRIPTOR_BYTES = ROW_FIELDS * 8  # a node's row descriptor: ROW_FIELDS int64
_SLAB_ROWS = 32  # masks per preallocated slab (0.5 MB at a 128k vocabulary)
_INT64_MAX = (1 << 63) - 1
_ADVANCED_LIMIT = 1 << 16  # pairs in ``advance``'s table before it is cleared (~7 MB at most)


def _holds(sorted_tokens: memoryview, token: int) -> bool:
    """Whether ``sorted_tokens`` (ascending) holds ``token``."""
    return find_sorted(sorted_tokens, token, 0, len(sorted_tokens)) >= 0


def _forbidden_index(automaton: CanonicalAutomaton) -> ForbiddenSets:
    return _per_automaton(automaton, "forbidden", lambda: ForbiddenSets(automaton))


def _token_signatures(automaton: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens that every open context moves alike share a signature: ``signature[t]``, with
    ``inside_of_signature[ctx, s]`` and ``boundary_of_signature[ctx, s]`` the context after a token of signature
    s (-1: not that way). Signatures are few (GPT-2: 98, Llama-3: 196), so a node's edges are a few hundred
    groups of tokens instead of a row over the vocabulary (GPT-2's JSON object: 2,883 groups for 1.4 M edges)."""
    def build():
        columns = np.ascontiguousarray(np.concatenate([automaton.inside_next, automaton.boundary_next]).T)
        as_bytes = columns.view(np.dtype((np.void, columns.dtype.itemsize * columns.shape[1]))).ravel()
        _, first, signature = np.unique(as_bytes, return_index=True, return_inverse=True)  # one sort of V keys
        inside_of, boundary_of = np.split(columns[first].T.astype(np.int64), 2)
        return (signature.ravel().astype(np.int64), np.ascontiguousarray(inside_of),
                np.ascontiguousarray(boundary_of))

    return _per_automaton(automaton, "signatures", build)


def _any_tokenization(canonical: CanonicalAutomaton) -> CanonicalAutomaton:
    """An automaton with the same vocabulary that allows every tokenization: one context in which every token
    with bytes is allowed, one merge class forbidding nothing."""

    def build():
        V = canonical.vocab_size
        row = np.where(canonical.token_has_bytes, 0, -1).astype(np.int16)[None, :]
        return CanonicalAutomaton(
            merge_class=np.zeros(V, np.int32), after_class=np.zeros(V, np.int32),
            forbid_order=np.arange(V, dtype=np.int32), forbid_position=np.arange(V, dtype=np.int32),
            forbid_starts=np.zeros(0, np.int32), forbid_ends=np.zeros(0, np.int32),
            forbid_offsets=np.zeros(2, np.int64), boundary_next=row, inside_next=np.full_like(row, -1),
            pending_offsets=np.zeros(1, np.int64), pending_tokens=np.zeros(0, np.int32),
            pending_next=np.zeros(0, np.int16), context_final=np.ones(1, bool),
            token_blob=canonical.token_blob, token_offsets=canonical.token_offsets,
            token_has_bytes=canonical.token_has_bytes, eos_token_ids=canonical.eos_token_ids)

    return _per_automaton(canonical, "any tokenization", build)
