"""CartesianMerge, compiled: a regex constraint intersected with the canonical automaton, as the tables a guide
serves its next-token masks from.

The token-level regex automaton (``product.compiler.token_regex``) says which token moves regex state ``q`` where; the
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
accepting nodes backwards converges in a few passes. It is the fixpoint of two sets per node, D (the dead merge
classes) and A (does the node accept, or reach acceptance through a token allowed whatever the class), extended with
the pre-tokenizer contexts; it replaces enumerating every (regex state, merge class) pair. Every allowed token
therefore leads to a live state: generation cannot dead-end.

A node's edges are not kept token by token: tokens that every pre-tokenizer context moves alike share a
*signature* (GPT-2: 98, Llama-3: 196), and a regex state's row is grouped once by (target state, signature), so
each of its nodes holds a few hundred groups whatever the context (GPT-2's JSON object: 2,883 groups for 1.4 M
(node, token) edges). A group whose target has no dead merge class, or only dead ones, is decided whole; only
targets with some dead classes are tested token by token.

``canonical_only=False`` swaps the canonical automaton for one that allows every tokenization (one context, one
merge class forbidding nothing): the peers' behaviour, for comparison.

Here: ``CompiledGuide``, which explores the nodes, solves liveness and keeps each node's rows X, Y, Z (sparse token
arrays or packed words) with the *row descriptors* the mask kernels read (``product.compiler.forbidden`` defines
their layout), and writes and reads them as named arrays (``_to_arrays``: ``product.library``'s on-disk format);
and the tables shared by every guide of one automaton (forbidden sets, token signatures, packed rows).

Leaves out: serving — masks, the mask cache, ``advance`` (``product.runtime.guide.Guide``, a ``CompiledGuide``),
and choosing how a regex is compiled (``product.compile``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import weakref
from typing import NamedTuple

import numpy as np

from automata import EmptyLanguageError, StateLimitError
from automata.budget import checkpoint
from automata.dfa import concat_aranges, group_by, row_bounds
from automata.errors import CanonmergeError
from bpe.automaton import CanonicalAutomaton
from bpe.errors import MissingEOSError
from product.compiler.forbidden import (
    ROW_DENSE,
    ROW_FIELDS,
    ROW_SPARSE,
    ROW_SPARSE_PACKED,
    ForbiddenSets,
    pack,
    row_descriptor,
)
from product.compiler.node_kernels import (
    ALL_DEAD,
    NONE_DEAD,
    PARTIAL,
    NodeTable,
    any_live_crossing,
    context_edges,
    distinct_targets,
    entering_keys,
    group_row,
    group_segments,
    join_groups,
    live_inside,
    mark_dead,
    pending_edges,
    pending_links,
    split_rows,
    stale_predecessors,
)
from product.compiler.token_regex import Segments, TokenTransitions, VocabularyTrie

__all__ = ["CompiledGuide", "InvalidTokenError", "Seeds", "guide_eos", "per_automaton", "vocabulary_trie"]


class InvalidTokenError(CanonmergeError, ValueError):
    """A token id outside the vocabulary."""


class Seeds(NamedTuple):
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


def per_automaton(automaton: CanonicalAutomaton, what: str, build):
    """``build()``, called once per automaton object and dropped with it. What it returns must not refer to the
    automaton, or the automaton would never be freed."""
    built = _PER_AUTOMATON.setdefault(automaton, {})
    if what not in built:
        built[what] = build()
    return built[what]


def vocabulary_trie(canonical: CanonicalAutomaton) -> VocabularyTrie:
    """The byte trie of ``canonical``'s vocabulary, built once per automaton object."""
    return per_automaton(canonical, "trie", lambda: VocabularyTrie.build(canonical.token_bytes))


def guide_eos(canonical: CanonicalAutomaton, eos_token_ids) -> tuple[int, ...]:
    """The EOS ids a guide ends with: ``eos_token_ids`` if given, else the tokenizer's; none is an error (a guide
    without EOS could never end: its masks would be empty where the constraint is satisfied)."""
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


class CompiledGuide:
    """The compiled tables of one constraint: product nodes (q, ctx), their liveness while compiling, and per node
    the rows X, Y, Z a mask is computed from (see the module docstring). Building one is compiling; serving its
    masks is ``product.runtime.guide.Guide``'s (a subclass), which adds the mask cache.

    ``_plain_guide``: the guide is these tables alone (not a counted or a stitched guide built over them), so it is
    stored as arrays (``_to_arrays``) and shrunk after compiling.
    """

    _plain_guide = True

    def __init__(self, transitions: TokenTransitions, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                 max_states: int = 100_000, name: str = "", eos_token_ids: list[int] | None = None,
                 start_context: int = 0, exit_live: np.ndarray | None = None, _seeds: "Seeds | None" = None,
                 _keep_liveness: bool = False):
        if not 0 <= start_context < canonical.num_open_contexts or (start_context and not canonical_only):
            raise ValueError(f"start_context {start_context} is not an open context of the automaton")
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
        self.eos_token_ids = guide_eos(canonical, eos_token_ids)
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
            checkpoint()
            self._store_rows(node, *self._open_rows(node))
        # Pending nodes' rows are short Y rows (X = Z = ∅): kept as one table, pending node i's row being
        # pending_row_tokens[pending_row_bounds[i]:[i + 1]], ascending (``pending_edges`` lists a node's edges by
        # token; ``_allows`` searches them). One tuple per node cost 5 of the GPT-2 JSON object's 70 ms (2,176
        # pending nodes).
        Y, self._pending_row_bounds = self._pending_rows()
        self._pending_row_tokens = Y.astype(np.int32, copy=False)
        if self._plain_guide and _seeds is None:
            # What a plain guide keeps, shrunk (a counted guide reads its edges and pending table while it runs: kept
            # as compiled): token transitions compact, equal pending rows stored once. Over the 499 fragments of 48
            # MaskBench schemas on Llama-3, 3,902 -> 168 MB and 413 -> 109 MB (docs/optimizations.md).
            self._transitions = transitions.compact(self.vocab_size)
            if self._transitions.segments is not None:  # (only compiling reads them)
                self._transitions = dataclasses.replace(self._transitions, segments=None)
            self._pending_row_tokens, self._pending_row_bounds, shared = _share_equal_rows(
                self._pending_row_tokens, self._pending_row_bounds)
            self._pending_index[self._pending_nodes] = shared
        self._describe_rows()
        self._open_edges = self._successors = None  # only the rows (and liveness, for counted guides) from here on
        if _seeds is None:  # (``_keep_liveness``: a lazy guide asks ``_is_live`` of it, ``product.runtime.lazy``)
            self._entering = self._entering_bounds = self._narrow = None
            if not _keep_liveness:
                self._dead_bits = None
        self._pending_tokens = self._pending_inside = self._pending_edges = self._pending_unit_bounds = None

    # ---- storage (``product.library``): a compiled guide as named arrays, no pickle ---------------------------
    def _to_arrays(self) -> dict[str, np.ndarray]:
        """What a compiled plain guide needs at run time, as arrays (its rows flattened: kind per node — 0 none,
        1 sparse with X packed, 2 sparse, 3 dense — then the row's arrays one after another in ``row_data``,
        bounded by ``row_bounds``)."""
        if self._seeds is not None or not self._plain_guide:
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

    def _load_arrays(self, arrays: dict[str, np.ndarray], canonical: CanonicalAutomaton, name: str) -> None:
        """Become the tables ``_to_arrays`` wrote, for ``canonical`` (the automaton they were compiled for: the
        caller checks that), on an object made without ``__init__`` (``Guide._from_arrays``). ``ValueError`` if the
        arrays do not fit together."""
        canonical_only, start_context, initial_state = (int(v) for v in arrays["settings"])
        guide = self
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

    # ---- sizes --------------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        """Product nodes (regex state, canonical context) reached while compiling."""
        return len(self._node_q)

    @property
    def _num_states(self) -> int:
        """States are ints below this (``product.stitched`` numbers its fragments' states one after another)."""
        return self.num_nodes * self._M

    def _store_rows(self, node: int, X: np.ndarray, Y: np.ndarray, Z: np.ndarray) -> None:
        """Keep a node's rows of token ids: X (allowed whatever the merge class), Y (allowed unless in F[mc]),
        Z (allowed only if in F[mc]). Few class-dependent tokens: Y and Z as token arrays, tested against F[mc]
        one by one, over X as tokens or, when X is long, packed (``(True, X packed or None, X, Y, Z)``). Many:
        packed as ``XY = X | Y`` and ``D = XY ^ (X | Z)``, the mask being ``XY ^ (D & F[mc])``
        (``(False, XY, D)``). On the peers' Llama-3 guides 767 of the 1,561 nodes with long rows have at most 256
        class-dependent tokens (most of the float regex's have none): testing those beats walking F[mc]."""
        self.__dict__.get("_scalar_rows", {}).pop(node, None)  # its memoryviews, if ``_allows`` made them
        self._rows[node] = row_layout(X, Y, Z, self.num_words)
        if "_row_descriptors" in self.__dict__:  # a row replaced after compiling (tests do)
            self._describe_row(node)

    def _describe_row(self, node: int) -> None:
        """Write node ``node``'s row descriptor from ``_rows[node]`` (its arrays made C-contiguous of the dtypes the
        kernel reads, and kept there)."""
        row, packed = self._rows[node], _packed_rows(self._tokens)
        if row[0] and row[1] is not None:
            row = (True, packed.shared(_words(row[1])), _NO_TOKENS, _tokens(row[3]), _tokens(row[4]))
        elif row[0]:
            row = (True, None, _tokens(row[2]), _tokens(row[3]), _tokens(row[4]))
        else:
            row = (False, packed.shared(_words(row[1])), packed.shared(_words(row[2])))
        self._rows[node] = row
        kind, arrays = row_kind(row)
        self._row_descriptors[node] = row_descriptor(kind, self._final[node], *arrays)

    def _describe_rows(self) -> None:
        """``_row_descriptors``: each node's rows as the mask kernels read them (``product.compiler.forbidden`` defines the layout): kind,
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
    # The per-token loops are compiled (``product.compiler.node_kernels``).

    def _explore(self, max_states: int) -> None:
        """Breadth-first over nodes (q, ctx) reachable from (start, 0); per node, its candidate tokens with their
        inside/boundary target nodes and next merge class."""
        A, R = self._automaton, self._transitions
        num_open, num_ctx = A.num_open_contexts, A.num_contexts
        table = NodeTable()

        def node_ids(keys: np.ndarray) -> np.ndarray:
            ids = table.ids(keys)
            if len(table) > max_states:
                raise StateLimitError(f"constraint {self.name!r}: more than max_states={max_states} product nodes")
            return ids

        signature, inside_of_signature, boundary_of_signature = _token_signatures(A)
        row_groups: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}  # per regex state
        if R.segments is not None:  # rows kept as segments: each segment grouped once, a row's groups theirs
            segment_groups = _SegmentGroups(R.segments, signature, inside_of_signature.shape[1])
        common = R.common_arrays(self.num_words)  # (listed transitions: no common sets)
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
                checkpoint()  # (the compile's budget: automata.budget; a clock read per node)
                if q not in row_groups:
                    row_groups[q] = (group_row(*R.row(q), signature, inside_of_signature.shape[1])
                                     if R.segments is None else segment_groups.row(q))
                group_tokens, group_bounds, group_target, group_signature = row_groups[q]
                groups, inside, boundary, num_tokens = context_edges(
                    group_target, group_signature, group_bounds, inside_of_signature[ctx], boundary_of_signature[ctx],
                    num_ctx)
                inside, boundary = node_ids(inside), node_ids(boundary)
                self._open_edges[n] = _OpenEdges(groups, inside, boundary, group_tokens, group_bounds, num_tokens)
                self._successors[n] = distinct_targets(inside, boundary, len(table))
            checkpoint()
            if not is_open.all():  # completing tokens of the unfinished character that the regex also reads
                counts, tokens, keys = pending_edges(qs[~is_open], ctxs[~is_open] - num_open, A.pending_offsets,
                                                     A.pending_tokens, A.pending_next, R.offsets, R.tokens, R.targets,
                                                     *common, num_ctx)
                layers.append((frontier[~is_open], counts, tokens, node_ids(keys)))
        checkpoint()
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
        keys = [start_key]
        for e in self._open_edges.values():
            checkpoint()
            keys += [entering_keys(e.groups, targets, e.group_tokens, e.group_bounds, after_class, narrow, M)
                     for targets in (e.inside, e.boundary)]
        keys.append(entering_keys(self._pending_edges, self._pending_inside, self._pending_tokens,
                                  self._pending_unit_bounds, after_class, narrow, M))
        if seeds is not None:  # the classes that may enter a seed, as given
            keys.append(np.repeat(self._seed_ids, np.diff(seeds.entering_bounds)) * M + seeds.entering)
        checkpoint()
        distinct = NodeTable()  # a hash set: edges into a node share a few classes (sorting them all cost 0.3 s)
        keys = np.concatenate(keys)
        for lo in range(0, len(keys), _CHECKED_CHUNK):  # (tens of millions of edges: the budget checked between)
            checkpoint()
            distinct.ids(keys[lo:lo + _CHECKED_CHUNK])
        node, entering = np.divmod(np.sort(distinct.keys[:len(distinct)]), M)
        entering_bounds = np.searchsorted(node, np.arange(N + 1))
        # predecessors, from the successor lists of open nodes and the distinct targets of pending ones (GPT-2's
        # JSON object: 108k pending edges, 10.5k links in all), grouped by a counting sort
        sources = [np.full(len(s), n, dtype=np.int64) for n, s in self._successors.items()]
        targets = list(self._successors.values())
        pending_sources, pending_targets = pending_links(self._pending_nodes, self._pending_bounds,
                                                         self._pending_inside, N)
        checkpoint()
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
        checkpoint()
        narrow, entering, entering_bounds, pred_source, pred_bounds = self._entering_and_predecessors()
        checkpoint()
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
                checkpoint()
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
            checkpoint()
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


_CHECKED_CHUNK = 1 << 20  # keys per compiled call between two checks of the compile's budget
_SPARSE_LIMIT = 256  # at most this many class-dependent tokens: mask by direct membership tests
_NO_TOKENS = np.zeros(0, dtype=np.int32)


def row_layout(X: np.ndarray, Y: np.ndarray, Z: np.ndarray, num_words: int) -> tuple:
    """A node's rows X, Y, Z of token ids as a guide keeps them (``CompiledGuide._store_rows`` says why): few
    class-dependent tokens, ``(True, X packed or None, X, Y, Z)`` with Y, Z (and a short X) sorted int32 arrays;
    many, ``(False, XY, D)`` packed, the mask being ``XY ^ (D & F[mc])``."""
    if len(Y) + len(Z) <= _SPARSE_LIMIT:
        # rows come grouped (``_OpenEdges``); a mask walks token arrays faster in id order (its words in order)
        Y, Z = (np.sort(a).astype(np.int32, copy=False) for a in (Y, Z))
        if len(X) > _SPARSE_LIMIT:
            return True, pack(X, num_words), _NO_TOKENS, Y, Z
        return True, None, np.sort(X).astype(np.int32, copy=False), Y, Z
    X = pack(X, num_words)
    XY = X | pack(Y, num_words)
    return False, XY, XY ^ (X | pack(Z, num_words))


def row_kind(row: tuple) -> tuple[int, tuple]:
    """The mask kernels' kind of a ``row_layout`` row and the arrays its descriptor points to
    (``product.compiler.forbidden.row_descriptor``)."""
    if row[0] and row[1] is not None:
        return ROW_SPARSE_PACKED, (row[1], row[3], row[4])
    if row[0]:
        return ROW_SPARSE, row[2:]
    return ROW_DENSE, row[1:]


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
    return per_automaton(canonical, "packed rows", _PackedRows)


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
_NO_CLASSES = np.zeros(0, dtype=np.int64)


def _forbidden_index(automaton: CanonicalAutomaton) -> ForbiddenSets:
    return per_automaton(automaton, "forbidden", lambda: ForbiddenSets(automaton))


class _SegmentGroups:
    """A regex state's row grouped by (target, signature) from its segments (``TokenTransitions.segments``): each
    segment grouped once (``group_row``), a row's groups those of its segments one after another (``join_groups``).
    Groups of two segments may share a (target, signature): a node's edges are then a few more groups, moved
    alike."""

    def __init__(self, segments: Segments, signature: np.ndarray, num_signatures: int):
        self.segment_of = segments.segment_of
        offsets = segments.offsets if len(segments.offsets) > 1 else np.zeros(2, dtype=np.int64)  # (one, empty)
        (self.tokens, self.token_bounds, self.sizes, self.target, self.signature,
         self.group_bounds) = group_segments(segments.tokens, segments.targets, offsets, signature, num_signatures)

    def row(self, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``group_row``'s output for state ``q``: grouped tokens, group bounds, each group's target and signature."""
        return join_groups(self.segment_of[q], self.token_bounds, self.group_bounds, self.tokens, self.sizes,
                           self.target, self.signature)


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

    return per_automaton(automaton, "signatures", build)


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
            # one marked-DFA state that takes a boundary before every character
            marked_transitions=np.zeros((1, 2), np.int32), marked_final=np.ones(1, bool),
            symbol_starts=np.zeros(1, np.int32), symbol_values=np.zeros(1, np.int32),
            context_states=np.ones(1, np.uint64),
            token_blob=canonical.token_blob, token_offsets=canonical.token_offsets,
            token_has_bytes=canonical.token_has_bytes, eos_token_ids=canonical.eos_token_ids)

    return per_automaton(canonical, "any tokenization", build)

