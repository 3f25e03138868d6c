"""Counted repetitions ``x{m,n}`` served with a counter beside the state: ``CountedGuide``, and ``compile_counted``,
which builds one where the construction applies.

``product.compiler.counted`` says how the counter is read off the regex and why the masks are exact. A counted guide
is two guides over ``CountedTransitions``: G∞ (every loop unbounded; this guide's own tables) and G_H (the budget
layers, ``_layers``), compiled together; ``horizon`` is the smallest H in ``_HORIZONS`` for which they agree on every
node at budget H. A mask is G∞'s far from the bound, G_H's at it, and G∞'s fixed token by token between (the three
regimes of the compiler module's docstring).

Leaves out: reading the counter off the regex (``product.compiler.counted``); when a pattern is compiled with a counter
(``product.compile.compile_regex`` tries this first and falls back to the unrolled guide).
"""

from __future__ import annotations

import copy
import operator

import numpy as np

from automata.budget import CompileBudgetError
from automata.dfa import concat_aranges, find_sorted, row_bounds
from bpe.automaton import DisallowedTokenError
from product.compiler.counted import CountedTransitions, counted_transitions
from product.compiler.tables import Seeds, vocabulary_trie
from product.runtime.guide import Guide, _uint32_rows
from product.runtime.kernels.cpu import clear_bits

__all__ = ["CountedGuide", "compile_counted", "rebound_minimum"]

_HORIZONS = (2, 4, 8)  # budgets H tried for the layered guide, smallest first


def compile_counted(pattern: str, canonical, *, canonical_only: bool, max_states: int, max_transitions: int,
                    cache_size: int, name: str, eos_token_ids: list[int] | None):
    """A ``CountedGuide`` for ``pattern``, or None when it has no loop to compress, one this construction leaves
    out, or no horizon H passes the exactness check (the caller then compiles it unrolled)."""
    counted = counted_transitions(pattern, vocabulary_trie(canonical), max_states=max_states,
                                  max_entries=max_transitions)
    if counted is None:
        return None
    guide = CountedGuide(counted, canonical, canonical_only=canonical_only, max_states=max_states,
                         cache_size=cache_size, name=name, eos_token_ids=eos_token_ids)
    return guide if guide.horizon is not None else None


def rebound_minimum(canonical) -> int:
    """The least loop bound (n - m) from and to which ``CountedGuide.with_loop_bound`` is exact for this
    vocabulary: its longest token in bytes, plus the largest horizon, plus one."""
    return int(vocabulary_trie(canonical).lengths.max(initial=0)) + max(_HORIZONS) + 1


class CountedGuide(Guide):
    """A ``Guide`` whose states also count the iterations of the compressed loop they are in
    (``product.compiler.counted``'s docstring says how). A state is ``(k * nodes + node) * merge_classes + mc``; k is
    0 outside counted loops, so states without a counter are the plain guide's. ``horizon`` is the H that passed the exactness check (None:
    none did; the guide must not be used).

    ``start_context`` and ``exit_live`` (a fragment of ``product.stitched``, over the regex states of
    ``counted.over``) are ``Guide``'s, given to both guides: an exit is one more final node, the same in G∞ and in
    every budget layer, so the exactness argument is unchanged."""

    _plain_guide = False  # stored with its counts and layers (``_to_arrays`` below)

    def __init__(self, counted: CountedTransitions, canonical, *, canonical_only: bool = True,
                 max_states: int = 100_000, cache_size: int = 4096, name: str = "",
                 eos_token_ids: list[int] | None = None, start_context: int = 0,
                 exit_live: np.ndarray | None = None):
        self._counted = counted
        self._layers = None
        self.horizon = None
        no_seeds = Seeds(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, bool))
        super().__init__(counted.over, canonical, canonical_only=canonical_only, max_states=max_states,
                         cache_size=cache_size, name=name, eos_token_ids=eos_token_ids, start_context=start_context,
                         exit_live=exit_live, _seeds=no_seeds)
        N, C = self.num_nodes, self._automaton.num_contexts
        q_of = self._node_q
        self._relevant_node = counted.relevant[q_of]
        for H in _HORIZONS:
            ids = counted.layer_ids(H)
            width = np.where(self._relevant_node, H + 1, 1)
            seed_node = np.repeat(np.arange(N), width)
            seed_budget = np.arange(len(seed_node)) - np.repeat(np.cumsum(width) - width, width)
            keys = ids[q_of[seed_node], seed_budget] * C + self._node_ctx[seed_node]
            lo, hi = self._entering_bounds[seed_node], self._entering_bounds[seed_node + 1]
            narrow = self._narrow[seed_node]
            lo, hi = np.where(narrow, lo, 0), np.where(narrow, hi, 0)
            seeds = Seeds(keys.astype(np.int64), self._entering[concat_aranges(lo, hi)].astype(np.int64),
                           row_bounds(hi - lo), ~narrow)
            layered_exit_live = None
            if exit_live is not None:  # layered state ids[q, b] is at q's exits
                q_of_layered = np.zeros(int(ids.max()) + 1, dtype=np.int64)
                q_of_layered[ids] = np.arange(len(ids))[:, None]
                layered_exit_live = exit_live[q_of_layered]
            try:
                layers = Guide(counted.layered(H), canonical, canonical_only=canonical_only,
                                        max_states=max_states, cache_size=cache_size, name=f"{name} (budgets 0..{H})",
                                        eos_token_ids=list(self.eos_token_ids), start_context=start_context,
                                        exit_live=layered_exit_live, _seeds=seeds)
            except CompileBudgetError:
                raise
            except Exception:  # e.g. the layered guide's language is empty: no horizon
                return
            top = layers._seed_ids[np.cumsum(width) - 1]  # each node at budget H (or its only copy)
            if self._agrees(layers, top):
                self.horizon, self._layers = H, layers
                self._layer_of = layers._seed_ids  # seed i: node seed_node[i] at budget seed_budget[i]
                self._layer_first = np.cumsum(width) - width
                break
        if self._layers is None:
            return
        self._forced = {}
        self._cache.clear()
        self._prepare_fixups()

    # ---- storage (``product.library``): both guides and the counts as named arrays, no pickle -----------------
    def _to_arrays(self) -> dict[str, np.ndarray]:
        """G∞'s rows (``Guide._plain_arrays``), the budget layers' rows (``layers_``) with the liveness their masks
        read at run time, the layer of each (node, budget), and each entry's counts (``counted_``)."""
        if self._layers is None:
            raise TypeError("a counted guide with no horizon is not stored")
        arrays = self._plain_arrays()
        layers = self._layers
        arrays.update({f"layers_{key}": a for key, a in layers._plain_arrays().items()})
        arrays.update(layers_status=layers._status, layers_dead_row=layers._dead_row,
                      layers_dead_bits=layers._dead_bits[:layers._num_dead_rows], layer_of=self._layer_of,
                      counted_pre=self._counted.pre, counted_enter=self._counted.enter,
                      counted_bound=self._counted.bound, counted_horizon=np.array(self.horizon, dtype=np.int64))
        return arrays

    @classmethod
    def _from_arrays(cls, arrays: dict[str, np.ndarray], canonical, *, name: str = "",
                     cache_size: int = 1) -> "CountedGuide":
        """The guide ``_to_arrays`` wrote (``ValueError`` if the arrays do not fit together)."""
        arrays = dict(arrays)
        layer_arrays = {key[len("layers_"):]: arrays.pop(key) for key in list(arrays) if key.startswith("layers_")}
        status, dead_row, dead_bits = (layer_arrays.pop(key) for key in ("status", "dead_row", "dead_bits"))
        layer_of, pre, enter, bound, horizon = (arrays.pop(key) for key in (
            "layer_of", "counted_pre", "counted_enter", "counted_bound", "counted_horizon"))
        guide = super()._from_arrays(arrays, canonical, name=name, cache_size=cache_size)
        H = int(horizon)
        layers = Guide._from_arrays(layer_arrays, canonical, name=f"{name} (budgets 0..{H})", cache_size=cache_size)
        R = guide._transitions
        if not (len(pre) == len(enter) == len(R.tokens) and len(bound) == R.num_states and H in _HORIZONS):
            raise ValueError("counts do not fit the transitions")
        guide._counted = counted = CountedTransitions(R, pre, enter, bound)
        guide._relevant_node = counted.relevant[guide._node_q]
        width = np.where(guide._relevant_node, H + 1, 1)
        if (len(layer_of) != width.sum() or len(status) != layers.num_nodes or len(dead_row) != layers.num_nodes
                or layer_of.max(initial=0) >= layers.num_nodes or dead_row.max(initial=-1) >= len(dead_bits)
                or dead_bits.shape[1:] != ((layers._M + 7) // 8,)):
            raise ValueError("budget layers do not fit the guide")
        layers._status, layers._dead_row, layers._dead_bits = status, dead_row, dead_bits
        layers._num_dead_rows = len(dead_bits)  # (so that a loaded guide is written again as it was read)
        guide.horizon, guide._layers = H, layers
        guide._layer_of, guide._layer_first = layer_of, np.cumsum(width) - width
        guide._forced = {}
        guide._prepare_fixups()
        return guide

    # ---- exactness check ------------------------------------------------------------------------------------
    def _live_many(self, guide, nodes: np.ndarray, classes: np.ndarray) -> np.ndarray:
        status = guide._status[nodes]
        rows = guide._dead_row[nodes]
        partial = status == 2
        bits = np.zeros(len(nodes), dtype=bool)
        if partial.any():
            c = classes[partial]
            bits[partial] = (guide._dead_bits[rows[partial], c >> 3] >> (c & 7)) & 1 == 1
        return (status == 0) | (partial & ~bits)

    def _agrees(self, layers, top: np.ndarray) -> bool:
        """Whether every node's live merge classes in this (unbounded) guide equal those of its budget-H copy in
        ``layers``, over the classes that can enter it (all classes for wide nodes)."""
        M = self._M
        narrow = self._narrow
        lo, hi = self._entering_bounds[:-1], self._entering_bounds[1:]
        nodes = np.repeat(np.arange(self.num_nodes), np.where(narrow, hi - lo, 0))
        classes = self._entering[concat_aranges(np.where(narrow, lo, 0), np.where(narrow, hi, 0))].astype(np.int64)
        if not np.array_equal(self._live_many(self, nodes, classes), self._live_many(layers, top[nodes], classes)):
            return False
        all_classes = np.arange(M, dtype=np.int64)
        for n in np.flatnonzero(~narrow).tolist():
            a = self._live_many(self, np.full(M, n), all_classes)
            b = self._live_many(layers, np.full(M, top[n]), all_classes)
            if not np.array_equal(a, b):
                return False
        return True

    # ---- the same pattern with another bound ----------------------------------------------------------------
    def loop_bound(self) -> int | None:
        """n - m of the guide's one compressed loop (None: it has several)."""
        bounds = np.unique(self._counted.bound[self._counted.bound >= 0])
        return int(bounds[0]) if len(bounds) == 1 else None

    def with_loop_bound(self, bound: int) -> "CountedGuide":
        """This guide for the pattern whose one compressed loop has n - m = ``bound`` instead (``x{0,255}`` ->
        ``x{0,4096}``): a copy sharing every table, with its own counter bound, masks cache and fix-ups. Exact where
        both bounds are at least ``rebound_minimum``: the vocabulary walk then never stops a token at the bound (no
        token holds more iterations than bytes), no token enters the loop with fewer than H iterations left, so G∞,
        the budget layers and the exactness check are the same for both; only the counter's ceiling moves.
        ``ValueError`` elsewhere."""
        old = self.loop_bound()
        least = rebound_minimum(self._tokens)
        if self._layers is None or old is None or min(old, bound) < least:
            raise ValueError(f"a counted guide is re-bounded only from and to bounds of at least {least} "
                             f"(its loop: {old}, asked: {bound})")
        # the compiled tables shared (read-only once compiled); not ``copy.copy``, whose ``Guide.__setstate__`` would
        # hand this guide's mask slabs back to the pool when the copy dies
        other = self.__class__.__new__(self.__class__)
        other.__dict__.update(self.__dict__)
        other.__dict__.pop("_batch_row", None)  # (its mask cache's address: this guide's own, made below)
        other._counted = copy.copy(self._counted)
        other._counted.bound = np.where(self._counted.bound >= 0, bound, -1).astype(self._counted.bound.dtype)
        other._init_mask_cache(self._cache_size)
        other._prepare_fixups()
        return other

    # ---- states ---------------------------------------------------------------------------------------------
    def _decode(self, state: int) -> tuple[int, int, int]:
        try:
            rest, mc = divmod(operator.index(state), self._M)
        except TypeError:
            raise TypeError(f"a guide state is an int, not {type(state).__name__} ({state!r})") from None
        k, node = divmod(rest, self.num_nodes)
        if state < 0 or (k and (not self._relevant_node[node] or k > self._bound_of(node))):
            raise ValueError(f"{state} is not a state of this guide")
        return node, mc, k

    def _bound_of(self, node: int) -> int:
        return int(self._counted.bound[self._node_q[node]])

    def _split(self, state: int) -> tuple[int, int]:
        node, mc, _ = self._decode(state)
        return node, mc

    @property
    def _num_states(self) -> int:
        return (int(self._counted.bound.max(initial=0)) + 1) * self.num_nodes * self._M

    @property
    def num_nodes_total(self) -> int:
        """Nodes of both guides: the unbounded one and the budget layers."""
        return self.num_nodes + (self._layers.num_nodes if self._layers is not None else 0)

    @property
    def memory_bytes(self) -> int:
        own = super().memory_bytes
        c = self._counted
        own += c.pre.nbytes + c.enter.nbytes
        return own + (self._layers.memory_bytes if self._layers is not None else 0)

    # ---- masks ----------------------------------------------------------------------------------------------
    def _prepare_fixups(self) -> None:
        """The entries that enter a loop with fewer than H iterations left (checked at every budget), per regex
        state; the entries by ``pre`` descending are sorted per state on first use (``_by_pre``)."""
        c, R, H = self._counted, self._counted.over, self.horizon
        tgt = R.targets
        low_entry = np.flatnonzero((c.enter >= 0) & c.relevant[tgt] & (c.bound[tgt] - c.enter < H))
        cuts = np.searchsorted(low_entry, R.offsets)
        self._always = [low_entry[cuts[q]:cuts[q + 1]] for q in range(R.num_states)]
        self._has_always = np.diff(cuts) > 0
        self._by_pre_rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._layer_ids = c.layer_ids(H)
        keys = self._layers._node_q * self._automaton.num_contexts + self._layers._node_ctx
        self._layer_keys_order = np.argsort(keys)
        self._layer_keys_sorted = keys[self._layer_keys_order]

    def _by_pre(self, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """State q's entries by ``pre`` descending, their counts and tokens (computed under the mask lock)."""
        got = self._by_pre_rows.get(q)
        if got is None:
            R = self._counted.over
            lo = int(R.offsets[q])
            pre = self._counted.pre[lo:int(R.offsets[q + 1])]
            order = np.argsort(-pre, kind="stable")
            got = self._by_pre_rows[q] = (order + lo, pre[order], R.tokens[order + lo])
        return got

    def _budget(self, node: int, k: int) -> int | None:
        return self._bound_of(node) - k if self._relevant_node[node] else None

    def _fill_row(self, state: int, words: np.ndarray) -> None:
        node, mc, k = self._decode(state)
        self._compute_counted(node, mc, k, words)

    def _fill_at(self, state: int, out, address: int) -> None:
        self._fill_row(state, _uint32_rows(out, 1, self.num_words)[0])

    def _compute_counted(self, node: int, mc: int, k: int, out: np.ndarray) -> None:
        if self._layers is None:  # during the base constructor: the start state, which has no counter
            self._compute_mask(node, mc, out)
            return
        q = int(self._node_q[node])
        r = self._budget(node, k)
        H = self.horizon
        if r is not None and r <= H:  # at the bound: the layered guide's node, exactly
            layer = self._layer_of[self._layer_first[node] + r]
            self._layers._compute_mask(int(layer), mc, out)
            return
        self._compute_mask(node, mc, out)
        picks = []
        if r is not None and r < H + self._counted.max_pre[q]:
            # entries with pre > r - H: a prefix of the state's entries by pre descending
            entries, pre, tokens = self._by_pre(q)
            too_long = int(np.searchsorted(-pre, -r, side="left"))  # pre > r: cleared, whatever their target
            clear_bits(out, tokens[:too_long])
            picks.append(entries[too_long:int(np.searchsorted(-pre, -(r - H), side="left"))])
        if self._has_always[q]:
            picks.append(self._always[q])
        if picks:
            self._fix(node, mc, r, np.concatenate(picks), out)

    def _fix(self, node: int, mc: int, r: int | None, entries: np.ndarray, out: np.ndarray) -> None:
        """Clear, in G∞'s mask ``out``, the bits of the tokens of ``entries`` (of the node's regex state) that do
        not fit budget r or whose target is dead at its budget (below H: the layered guide's liveness)."""
        c, R, A, H = self._counted, self._counted.over, self._automaton, self.horizon
        tokens = R.tokens[entries].astype(np.int64)
        on = ((out[tokens >> 5] >> (tokens & 31).astype(np.uint32)) & 1).astype(bool)
        entries, tokens = entries[on], tokens[on]
        if not len(tokens):
            return
        pre, enter, tgt = c.pre[entries], c.enter[entries], R.targets[entries].astype(np.int64)
        clear = np.zeros(len(tokens), dtype=bool)
        if r is not None:
            clear |= pre > r
        budget = np.where(enter >= 0, c.bound[tgt] - enter, (r if r is not None else 0) - pre)
        check = ~clear & c.relevant[tgt] & (budget < H) & (budget >= 0)
        if check.any():
            t, b, q2 = tokens[check], budget[check], tgt[check]
            ctx = int(self._node_ctx[node])
            if ctx < A.num_open_contexts:
                inside, boundary = A.inside_next[ctx, t].astype(np.int64), A.boundary_next[ctx, t].astype(np.int64)
                ctx2 = np.where((inside >= 0) & ~A.forbids(mc, t), inside, boundary)
            else:
                row = ctx - A.num_open_contexts
                plo, phi = A.pending_offsets[row], A.pending_offsets[row + 1]
                i = np.searchsorted(A.pending_tokens[plo:phi], t) + plo
                ctx2 = A.pending_next[i].astype(np.int64)
            keys = self._layer_ids[q2, b] * A.num_contexts + ctx2
            at = np.searchsorted(self._layer_keys_sorted, keys)
            if (at >= len(self._layer_keys_sorted)).any() or not np.array_equal(self._layer_keys_sorted[at], keys):
                raise AssertionError("a budget layer node was not explored (seeds cover every node)")
            layer_nodes = self._layer_keys_order[at]
            live = self._live_many(self._layers, layer_nodes, A.after_class[t].astype(np.int64))
            idx = np.flatnonzero(check)
            clear[idx[~live]] = True
        clear_bits(out, tokens[clear].astype(np.int32))

    # ---- moves ----------------------------------------------------------------------------------------------
    def _allows_counted(self, node: int, mc: int, k: int, token: int) -> bool:
        """Bit ``token`` of the state's mask, from the rows (``Guide._allows``) and, where the budget matters,
        the token's own count and target, without computing the mask."""
        if self._layers is None:
            return self._allows(node, mc, token)
        r = self._budget(node, k)
        H = self.horizon
        if r is not None and r <= H:
            return self._layers._allows(int(self._layer_of[self._layer_first[node] + r]), mc, token)
        if not self._allows(node, mc, token):
            return False
        if token in self.eos_token_ids:
            return True
        c, R = self._counted, self._counted.over
        q = int(self._node_q[node])
        i = find_sorted(memoryview(R.tokens), token, int(R.offsets[q]), int(R.offsets[q + 1]))
        pre, enter, q2 = int(c.pre[i]), int(c.enter[i]), int(R.targets[i])
        if r is not None and pre > r:
            return False
        if not c.relevant[q2]:
            return True
        budget = int(c.bound[q2]) - enter if enter >= 0 else (r if r is not None else 0) - pre
        if budget >= H:
            return True
        cls = self._automaton.class_after(int(self._node_ctx[node]) * self._M + mc, token, known_allowed=True)
        ctx2, mc2 = divmod(cls, self._M)
        layer = self._layers._node_of[(int(self._layer_ids[q2, budget]), ctx2)]
        return self._layers._is_live(layer, mc2)

    def _step(self, state: int, token_id: int) -> int:
        """The state after ``token_id`` (``Guide.advance`` checks the id and remembers the result); the count moves
        with the token."""
        node, mc, k = self._decode(state)
        allowed = self._cached_bit(state, token_id)
        if allowed is None:
            allowed = self._allows_counted(node, mc, k, token_id)
        if not allowed:
            raise DisallowedTokenError(f"token {token_id} ({self._describe(token_id)}) is not allowed in state {state} "
                                       f"of {self.name!r}")
        if token_id in self.eos_token_ids:
            return int(state)
        R, c = self._counted.over, self._counted
        q = int(self._node_q[node])
        i = find_sorted(memoryview(R.tokens), token_id, int(R.offsets[q]), int(R.offsets[q + 1]))
        q2 = int(R.targets[i])
        cls = self._automaton.class_after(int(self._node_ctx[node]) * self._M + mc, token_id, known_allowed=True)
        ctx2, mc2 = divmod(cls, self._M)
        node2 = self._node_of[(q2, ctx2)]
        k2 = 0
        if c.relevant[q2]:
            k2 = int(c.enter[i]) if c.enter[i] >= 0 else k + int(c.pre[i])
        return (k2 * self.num_nodes + node2) * self._M + mc2
