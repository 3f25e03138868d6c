"""A guide served: next-token masks, moves and acceptance from a compiled guide's tables, through a mask cache.

``Guide`` is a ``product.compiler.tables.CompiledGuide`` (the nodes, their rows X, Y, Z and row descriptors, built by
compiling) plus what serving needs: a bounded LRU cache of masks per guide whose rows live in preallocated slabs
(computing a mask allocates nothing; ``product.runtime.mask_cache`` indexes them, ``_SlabPool`` lends freed guides'
slabs to new ones), ``advance`` (one compiled step, ``product.runtime.kernels.step``, behind a table of pairs already
taken), ``fill_bitmask`` (one state, or a batch across guides: ``fill_batch``), ``forced_tokens`` and ``accepts``.

Masks are packed 32-bit words (bit ``t % 32`` of word ``t // 32`` allows token t, the layout outlines-core,
llguidance and xgrammar use), computed on first use by the compiled kernels of ``product.runtime.kernels.cpu`` and
kept in the cache.

Leaves out: compiling (``product.compiler``; the constructor compiles through ``CompiledGuide.__init__``), choosing
how a regex compiles (``product.compile``), several requests' bookkeeping (``product.runtime.matcher``), and logits
(``product.runtime.kernels.device``).
"""

from __future__ import annotations

import ctypes
import operator
import sys
import threading
import weakref
from functools import cached_property

import numpy as np

from automata.dfa import find_sorted
from automata.errors import CanonmergeError
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.compiler.forbidden import ROW_FIELDS
from product.compiler.tables import CompiledGuide, InvalidTokenError, Seeds
from product.compiler.token_regex import TokenTransitions
from product.runtime.kernels.cpu import (
    BATCH_CACHE,
    BATCH_DESCRIPTORS,
    BATCH_EOS,
    BATCH_FIELDS,
    BATCH_FORBIDDEN,
    BATCH_M,
    BATCH_NUM_EOS,
    BATCH_NUM_STATES,
    BATCH_SLABS,
    COMPUTE,
    DONE,
    NO_ROOM,
    batch_compute,
    batch_copy,
    batch_keep,
    copy_cached_mask,
    fill_mask,
    fill_mask_at,
    keep_mask,
)
from product.runtime.kernels.step import BAD_STATE, DISALLOWED, UNCACHED, StepTable, step
from product.runtime.mask_cache import MaskCache

__all__ = ["Guide", "InvalidTokenError", "fill_batch"]


class Guide(CompiledGuide):
    """Next-token masks for one constraint. States are ints; ``initial_state`` starts the text.

    Build with ``compile_regex`` (or, to compose constraints, from any ``TokenTransitions`` — the stitched
    fragments of the next layer are one): the constructor compiles (``CompiledGuide``), then readies the mask cache. Thread-safe: requests in several threads may share one guide (a state
    is an int; the mask cache is locked), and guides compile in parallel.
    """

    def __init__(self, transitions: TokenTransitions, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                 max_states: int = 100_000, cache_size: int = 4096, name: str = "",
                 eos_token_ids: list[int] | None = None, start_context: int = 0,
                 exit_live: np.ndarray | None = None, _seeds: "Seeds | None" = None, _keep_liveness: bool = False):
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, not {cache_size}")
        super().__init__(transitions, canonical, canonical_only=canonical_only, max_states=max_states, name=name,
                         eos_token_ids=eos_token_ids, start_context=start_context, exit_live=exit_live, _seeds=_seeds,
                         _keep_liveness=_keep_liveness)
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

    # ---- storage (``product.library``): the tables as named arrays (``CompiledGuide._to_arrays``) -----------------
    @classmethod
    def _from_arrays(cls, arrays: dict[str, np.ndarray], canonical: CanonicalAutomaton, *, name: str = "",
                     cache_size: int = 1) -> "Guide":
        """The guide ``_to_arrays`` wrote, for ``canonical`` (the automaton it was compiled for: the caller
        checks that). ``ValueError`` if the arrays do not fit together."""
        guide = cls.__new__(cls)
        guide._load_arrays(arrays, canonical, name)
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
            fill_batch([self], np.zeros(len(states), dtype=np.int64), states, rows, threads)

    @cached_property
    def _batch_row(self) -> np.ndarray:
        """This guide's row of the batch kernels' guide table (``product.runtime.kernels.cpu``), but for its cache's address
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
        the move, in one compiled call (``product.runtime.kernels.step``; a counted guide overrides it to move its count
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
            def only_token(s: int) -> int | None:
                with self._lock:  # (the mask's slot may be reused once the lock is released)
                    return only_allowed(self._mask(s))

            chain = self._forced[state] = forced_chain(int(state), self.is_accepting, only_token, self.advance)
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
        fill_mask_at(address, self._forbidden.table, self._descriptor_base + node * _DESCRIPTOR_BYTES, mc, self._eos_array)

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

    def _compute_mask(self, node: int, mc: int, out: np.ndarray) -> None:
        fill_mask(out, self._forbidden.table, self._descriptor_base + node * _DESCRIPTOR_BYTES, mc, self._eos_array)


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


def fill_batch(owners: list[Guide], owner_of: np.ndarray, states: np.ndarray, rows: np.ndarray,
                threads: int) -> None:
    """The masks of ``states[k]`` (checked) of guides ``owners[owner_of[k]]`` (distinct guides) into the rows at
    addresses ``rows[k]`` (distinct, alive), through the owners' mask caches: cached rows copied and the batch's new
    states kept under the owners' locks, the masks computed outside them (the batch kernels of ``product.runtime.kernels.cpu``;
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


def only_allowed(words: np.ndarray) -> int | None:
    """The one token a mask (packed words) allows, or None where it allows several or none."""
    if int(np.bitwise_count(words).sum()) != 1:
        return None
    w = int(np.flatnonzero(words)[0])
    return w * 32 + int(words[w]).bit_length() - 1


def forced_chain(state: int, is_accepting, only_token, advance) -> tuple[int, ...]:
    """The tokens that are the only choice from ``state`` on, one after another, until a state that accepts or
    allows more than one (``only_token(s)``: that one token, or None): what ``forced_tokens`` returns."""
    out = []
    while not is_accepting(state) and len(out) < 4096:
        token = only_token(state)
        if token is None:
            break
        out.append(token)
        state = advance(state, token)
    return tuple(out)


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
_DESCRIPTOR_BYTES = ROW_FIELDS * 8  # a node's row descriptor: ROW_FIELDS int64
_SLAB_ROWS = 32  # masks per preallocated slab (0.5 MB at a 128k vocabulary)
_INT64_MAX = (1 << 63) - 1
_ADVANCED_LIMIT = 1 << 16  # pairs in ``advance``'s table before it is cleared (~7 MB at most)

def _holds(sorted_tokens: memoryview, token: int) -> bool:
    """Whether ``sorted_tokens`` (ascending) holds ``token``."""
    return find_sorted(sorted_tokens, token, 0, len(sorted_tokens)) >= 0


