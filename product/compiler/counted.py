"""Counted repetitions ``x{m,n}`` without multiplying the guide by n: a counter beside the state — the token
transitions with their counts.

Unrolled, ``"[^"]{0,40}"`` is 41 copies of the loop's regex states, and each copy meets every canonical context
a free-text state meets (Llama-3: ~1,900 unfinished-character contexts): 75,564 product nodes, 2.8 s. Here the
loop is compiled once, as ``x{m}`` then ``x*``, and the guide state carries the iteration count k beside the
product node. The budget r = n - k decides the masks in three regimes (``docs/optimizations-counted.md`` has
the measurements and the alternatives weighed):

1. *Far from the bound* (r >= H + the longest count of the node's row): the mask of the ``x*`` guide (G∞),
   unchanged: every token fits and every target still has a budget of at least H.
2. *At the bound* (r <= H): the mask of node (q, r) of the *layered* guide G_H, whose regex states are (q, b)
   for budgets b = 0..H (a token of count c moves b to b - c; a token entering a loop with v iterations moves to
   min(n - v, H)); exact.
3. *Between*: G∞'s mask with the tokens of count > r cleared and the tokens whose target budget falls below H
   checked against G_H's liveness, token by token (vectorised).

Why this is exact. G∞ (every loop unbounded) over-approximates liveness; G_H (budgets clamped down to H)
under-approximates it (its fixpoint only derives facts the true system derives). Compiling checks that the two
agree on every node (regex state, context) at budget H, for every merge class that can enter it (G_H is seeded
with every G∞ node at every budget, with G∞'s entering classes). Liveness grows with the budget, so then for any
budget r >= H: under(H) <= truth(r) <= over = under(H); below H the layers of G_H solve the true equations with
the true values of everything else, so they are the truth (least solutions of the same equations). If the check
fails for H = 2, 4, 8 the pattern is compiled unrolled, as before. The counter only exists where a loop's next
iteration can still be started: elsewhere k is 0, so states stay canonical ints.

How the counter is read off the regex. Each compressed loop ``x{m,n}`` (n - m >= ``MIN_COUNT``, x not nullable,
no compressed loop inside) is rewritten ``x{m} E (M x)*`` with two marker characters (UTF-16 surrogates: no
UTF-8 text contains them, and negated classes are told to exclude them). In the character DFA the markers are
contracted away: each character edge is preceded by the one marker path that reads it (two paths for one edge:
the iteration boundary is ambiguous, e.g. ``a{0,9}a*``; the pattern is then compiled unrolled), and the edge's
target state is split by that path's effect (M: one more iteration; E: a new loop, counter reset). After UTF-8
expansion a byte walk of the vocabulary trie sums the effects along each token: ``pre`` iterations of the loop it
starts in (allowed iff pre <= r), and ``v`` (-1: none) iterations of the loop it enters last.

Here: reading the counter off the regex (``counted_transitions``: the loops rewritten with markers, the markers
contracted, the vocabulary walked with counts) into ``CountedTransitions``: G∞'s token transitions, each entry's
``pre`` and ``v``, and the layered transitions of G_H (``CountedTransitions.layered``).

Leaves out: the guide over them — G∞ and G_H compiled, the exactness check, masks and moves with a counter
(``product.counted.CountedGuide``); loops inside lookarounds or under flags (``(?i)``, ``(?s)``...), the dot, and
nested compressed loops (the inner one is compressed, the outer unrolled). Those patterns compile unrolled, exactly
as before.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import _DOT, _EMPTY, Pattern, _CharGroup, _Concatenation, _Repeated
from numba import njit

from automata import glushkov
from automata.budget import CompileBudgetError, checkpoint
from automata.dfa import MISSING, unique_rows
from automata.errors import RegexError, StateLimitError
from automata.regex import is_exit_marker, read_exits, utf8_dfa
from product.compiler.token_regex import TokenTransitions, VocabularyTrie, _sort_row

__all__ = ["MIN_COUNT", "CountedTransitions", "counted_transitions"]

MIN_COUNT = 32  # x{m,n} with n - m below this is unrolled: the copies cost less than the two guides, and masks near
# the bound cost 100-1300 µs uncached against ~10 unrolled (the peers bench's sentence regex, {1,12} and {2,12}: 16 -> 1,324 µs)
_MAX_LOOPS = 256  # markers: U+D800 + 2l (E) and U+D801 + 2l (M) for loop l
_MARKERS = frozenset(chr(0xD800 + i) for i in range(2 * _MAX_LOOPS))


class _NotCounted(Exception):
    """The pattern has no loop this construction compresses, or one it cannot (see the module docstring)."""


def _nullable(node) -> bool:
    if isinstance(node, Pattern):
        return any(_nullable(o) for o in node.options)
    if isinstance(node, _Concatenation):
        return all(_nullable(p) for p in node.parts)
    if isinstance(node, _Repeated):
        return node.min == 0 or _nullable(node.base)
    if isinstance(node, _CharGroup) or node is _DOT:
        return False
    if node is _EMPTY:
        return True
    raise _NotCounted


def _rewrite(node, bounds: list[int], excluded: frozenset, groups: dict | None = None):
    """(tree with compressed loops, whether it holds one). ``bounds[l]`` gets loop l's n - m. Negated classes
    exclude the characters of ``excluded`` (the loop markers, and the pattern's exit markers), each distinct class
    rewritten once (``groups``: a schema's whole regex repeats the string class tens of thousands of times, and
    each union with the 512 markers cost ~15 µs)."""
    checkpoint()  # the compile's budget (``automata.budget``): a YAML schema's whole regex is millions of nodes
    groups = {} if groups is None else groups
    if isinstance(node, Pattern):
        if node.added_flags.value or node.removed_flags.value:
            raise _NotCounted
        parts = [_rewrite(o, bounds, excluded, groups) for o in node.options]
        return Pattern(tuple(p for p, _ in parts)), any(h for _, h in parts)
    if isinstance(node, _Concatenation):
        parts = [_rewrite(p, bounds, excluded, groups) for p in node.parts]
        return _Concatenation(tuple(p for p, _ in parts)), any(h for _, h in parts)
    if isinstance(node, _Repeated):
        base, inner = _rewrite(node.base, bounds, excluded, groups)
        if (inner or node.max is None or node.max - node.min < MIN_COUNT or _nullable(node.base)
                or len(bounds) >= _MAX_LOOPS):
            return _Repeated(base, node.min, node.max), inner
        loop = len(bounds)
        bounds.append(node.max - node.min)
        enter = _CharGroup(frozenset({chr(0xD800 + 2 * loop)}), False)
        again = _CharGroup(frozenset({chr(0xD801 + 2 * loop)}), False)
        return _Concatenation((_Repeated(base, node.min, node.min), enter,
                               _Repeated(_Concatenation((again, base)), 0, None))), True
    if isinstance(node, _CharGroup):
        if not node.negated:
            return node, False
        group = groups.get(node.chars)
        if group is None:
            group = groups[node.chars] = _CharGroup(node.chars | excluded, True)
        return group, False
    if node is _EMPTY:
        return node, False
    raise _NotCounted  # the dot, lookarounds


class CountedTransitions:
    """Token transitions of the compressed pattern with each entry's counter effect.

    ``over`` is the token-level automaton with every compressed loop unbounded (G∞'s); entry i of its row also has
    ``pre[i]`` (iterations of the current loop the token starts before leaving it or ending; allowed iff it fits the
    budget) and ``enter[i]`` (-1, or the iterations of the loop the token enters last, its new count).
    ``bound[q]`` is n - m of the loop whose next iteration state q can start (-1: none; then the count is 0).
    ``layered(H)`` is G_H's automaton: state (q, b) for b = 0..H where ``bound[q] >= 0``, and q elsewhere.
    A pattern with exit markers (``counted_transitions(exits=True)``) has ``exit_sets[exit_of[q]]`` at state q
    (-1: none), as ``automata.regex.from_regex_exits``, and ``goes_on[q]``: some byte leads on from q."""

    def __init__(self, over: TokenTransitions, pre: np.ndarray, enter: np.ndarray, bound: np.ndarray):
        self.over, self.pre, self.enter, self.bound = over, pre, enter, bound
        self.exit_of, self.exit_sets, self.goes_on = np.full(over.num_states, -1, dtype=np.int64), [], None
        self.relevant = bound >= 0
        S = over.num_states
        rows = np.repeat(np.arange(S), np.diff(over.offsets))
        self.max_pre = np.zeros(S, dtype=np.int64)
        np.maximum.at(self.max_pre, rows, pre)

    def layer_ids(self, H: int) -> np.ndarray:
        """int64[S, H + 1]: the layered state of (q, b) (every b the same for a state without a counter)."""
        width = np.where(self.relevant, H + 1, 1)
        first = np.concatenate([[0], np.cumsum(width)[:-1]])
        return first[:, None] + np.where(self.relevant[:, None], np.arange(H + 1)[None, :], 0)

    def layered(self, H: int) -> TokenTransitions:
        R, S = self.over, self.over.num_states
        ids = self.layer_ids(H)
        num_layered = int(ids.max()) + 1
        counts = np.diff(R.offsets)
        rows = np.repeat(np.arange(S), counts)
        parts_tok, sizes = [], np.zeros(num_layered, dtype=np.int64)
        for b in range(H + 1):
            sources = self.relevant[rows] if b else np.ones(len(rows), bool)  # budget 0 also stands for "no counter"
            keep = sources & (self.pre <= b) if b else sources & ((self.pre == 0) | ~self.relevant[rows])
            idx = np.flatnonzero(keep)
            tgt = R.targets[idx]
            e = self.enter[idx]
            budget = np.where(e >= 0, np.minimum(self.bound[tgt] - e, H), b - self.pre[idx])
            budget = np.where(self.relevant[tgt], np.clip(budget, 0, H), 0)
            src = ids[rows[idx], b]
            order = np.argsort(src, kind="stable")  # rows stay sorted by token within a source
            parts_tok.append((src[order], R.tokens[idx][order], ids[tgt, budget][order]))
        src = np.concatenate([p[0] for p in parts_tok])
        order = np.argsort(src, kind="stable")
        src = src[order]
        tokens = np.concatenate([p[1] for p in parts_tok])[order].astype(np.int32)
        targets = np.concatenate([p[2] for p in parts_tok])[order].astype(np.int32)
        np.add.at(sizes, src, 1)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        accepting = np.zeros(num_layered, dtype=bool)
        accepting[ids.ravel()] = np.repeat(R.accepting, H + 1)
        return TokenTransitions(offsets, tokens, targets, accepting, int(ids[R.start, 0]))


def counted_transitions(pattern: str, trie: VocabularyTrie, *, max_states: int, max_entries: int,
                        exits: bool = False) -> CountedTransitions | None:
    """The compressed pattern's transitions, or None when it has no loop to compress or one this construction
    leaves out (the caller compiles it unrolled). Errors of the pattern itself are left to the unrolled path.

    ``exits``: the pattern ends each alternative with an exit marker, as ``automata.regex.from_regex_exits``
    reads them (a fragment of ``product.stitched``); the accepting states are then those at an exit, and
    ``exit_of``/``exit_sets`` say which."""
    try:
        bounds: list[int] = []
        excluded = _MARKERS | {ch for ch in pattern if is_exit_marker(ch)} if exits else _MARKERS
        tree, has_loop = _rewrite(glushkov.read_tree(pattern, max_states), bounds, excluded)
        if not has_loop:
            return None
        char = glushkov.char_dfa(tree, max_states)
    except _NotCounted:
        return None
    except CompileBudgetError:
        raise
    except Exception:  # unparsable or unsupported: the unrolled path reports it
        return None
    if char is None:
        return None
    checkpoint()
    contracted = _contract(char, bounds, max_states)
    if contracted is None:
        return None
    class_target, accepting, mapping, labels, label_table = contracted
    exit_of, exit_sets = np.full(len(class_target), -1, dtype=np.int64), []
    if exits:  # the markers were read as plain characters: the states they leave from are the exits
        try:
            class_target, exit_of, exit_sets = read_exits(class_target, accepting, mapping, pattern)
        except RegexError:
            return None
        accepting = exit_of >= 0
    other = mapping[anything_else]
    checkpoint()
    byte_dfa = utf8_dfa(class_target, accepting, 0, mapping, other, class_target.shape[1] - 1, max_states)
    # one label per state for the minimisation: the counter effect entering it, and its exit set
    E = len(exit_sets) + 1
    byte_labels = np.zeros(byte_dfa.num_states, dtype=np.int64)
    byte_labels[: len(labels)] = labels * E + exit_of + 1
    checkpoint()
    dfa, byte_labels = byte_dfa.minimise_labelled(byte_labels)
    checkpoint()
    labels, exit_of = byte_labels // E, byte_labels % E - 1
    if not dfa.accepting.any():
        return None
    bound = _counter_bounds(dfa.transitions, labels, label_table, np.array(bounds, dtype=np.int64))
    if bound is None:
        return None
    counted = _walk_counted(dfa, labels, label_table, bounds, trie, max_entries, bound)
    counted.exit_of, counted.exit_sets = exit_of, exit_sets
    counted.goes_on = (dfa.transitions != MISSING).any(axis=1)
    return counted


# A label is the effect of the marker path before a character: (inc, inc_loop, reset_loop, v): inc iterations
# of the current loop (inc_loop's), then, if reset_loop >= 0, a new count v in reset_loop.
_NONE = (0, -1, -1, 0)


def _contract(char: glushkov.CharDFA, bounds: list[int], max_states: int):
    """The character DFA without marker classes: each edge reads its character after the one marker path that
    allows it; states are split by the label of the edge entering them. None if a path is ambiguous."""
    class_target, accepting, start, mapping = char
    marker_class = {}
    for c, k in mapping.items():
        if c is not anything_else and c in _MARKERS:
            j = ord(c) - 0xD800
            if j // 2 < len(bounds):
                marker_class[k] = j
    num_classes = class_target.shape[1] - 1
    plain = [a for a in range(num_classes) if a not in marker_class]

    def closure(q: int):
        """(state, label) pairs reachable from q by marker moves."""
        out, stack = [], [(q, _NONE, 0)]
        while stack:
            p, label, depth = stack.pop()
            out.append((p, label))
            if depth > 2 * len(bounds) + 2:
                raise _NotCounted
            for k, j in marker_class.items():
                t = class_target[p, k]
                if t == MISSING:
                    continue
                inc, inc_loop, reset_loop, v = label
                loop = j // 2
                if j % 2 == 0:  # E: a new loop, count 0
                    nxt = (inc, inc_loop, loop, 0)
                elif reset_loop >= 0:  # M after E in the same path
                    if reset_loop != loop:
                        raise _NotCounted
                    nxt = (inc, inc_loop, reset_loop, v + 1)
                else:
                    if inc:
                        raise _NotCounted
                    nxt = (1, loop, -1, 0)
                stack.append((int(t), nxt, depth + 1))
        return out

    label_ids = {_NONE: 0}
    index = {(start, 0): 0}
    order = [(start, 0)]
    rows = []
    acc = []
    try:
        while len(rows) < len(order):
            if not len(rows) & 63:
                checkpoint()  # the compile's budget (``automata.budget``)
            q, _ = order[len(rows)]
            reach = closure(q)
            row = np.full(num_classes + 1, MISSING, dtype=np.int32)
            for a in plain:
                hits = {(int(class_target[p, a]), label) for p, label in reach if class_target[p, a] != MISSING}
                if len(hits) > 1:
                    raise _NotCounted
                if hits:
                    t, label = hits.pop()
                    lid = label_ids.setdefault(label, len(label_ids))
                    key = (t, lid)
                    if key not in index:
                        if len(order) >= max_states:
                            raise StateLimitError(f"more than max_states={max_states} character states")
                        index[key] = len(order)
                        order.append(key)
                    row[a] = index[key]
            rows.append(row)
            acc.append(any(accepting[p] and label[1] < 0 for p, label in reach))  # E paths only: no iteration
    except _NotCounted:
        return None
    table = np.array(rows, dtype=np.int32)
    for k in marker_class:
        table[:, k] = MISSING
    mapping = {c: k for c, k in mapping.items() if c is anything_else or c not in _MARKERS}
    labels = np.array([lid for _, lid in order], dtype=np.int64)
    label_table = np.array(sorted(label_ids, key=label_ids.get), dtype=np.int64).reshape(-1, 4)
    return table, np.array(acc, dtype=bool), mapping, labels, label_table


def _counter_bounds(table: np.ndarray, labels: np.ndarray, label_table: np.ndarray,
                    bounds: np.ndarray) -> np.ndarray | None:
    """Per byte state, the loop whose next iteration it can start before any reset (-1: none), as that loop's
    n - m; None if some state could start iterations of two loops, or counts a loop it did not enter last."""
    S = len(table)
    inc_loop, reset_loop = label_table[labels, 1], label_table[labels, 2]
    loop = np.full(S, -1, dtype=np.int64)
    src, byte = np.nonzero(table >= 0)
    dst = table[src, byte]
    direct = inc_loop[dst] >= 0
    for _ in range(S + 1):
        checkpoint()
        new = loop.copy()
        cand = np.where(direct, inc_loop[dst], np.where(reset_loop[dst] < 0, loop[dst], -1))
        has = cand >= 0
        if has.any():
            lo = np.full(S, np.iinfo(np.int64).max)
            hi = np.full(S, -1)
            np.minimum.at(lo, src[has], cand[has])
            np.maximum.at(hi, src[has], cand[has])
            if (lo[hi >= 0] != hi[hi >= 0]).any():
                return None
            new = np.where(hi >= 0, hi, -1)
        if np.array_equal(new, loop):
            break
        loop = new
    # the loop entered last on every path to a state must be the one it counts
    current = _last_reset(table, reset_loop)
    counting = loop >= 0
    if (current[counting] != loop[counting]).any():
        return None
    return np.where(counting, bounds[np.maximum(loop, 0)], -1)


@njit(cache=True, nogil=True, boundscheck=False)
def _last_reset(table, reset_loop):
    """Per state, the loop of the last reset on every path from the start to it (-1: none yet; -3: paths
    disagree), by a worklist (a state changes value at most twice)."""
    S = table.shape[0]
    current = np.full(S, -2, dtype=np.int64)
    current[0] = -1
    stack = [0]
    while len(stack):
        s = stack.pop()
        for b in range(table.shape[1]):
            d = table[s, b]
            if d < 0:
                continue
            came = reset_loop[d] if reset_loop[d] >= 0 else current[s]
            if current[d] == -2:
                current[d] = came
                stack.append(d)
            elif current[d] != came and current[d] != -3:
                current[d] = -3
                stack.append(d)
    return current


_GROUPED: "weakref.WeakKeyDictionary[VocabularyTrie, OrderedDict]" = weakref.WeakKeyDictionary()
_GROUPED_KEEP = 16  # class maps kept per vocabulary (JSON strings of any bound share one)
_GROUPED_LOCK = threading.Lock()


def _grouped_trie(trie: VocabularyTrie, class_of_byte: np.ndarray):
    """``trie.by_class(class_of_byte)``, kept per vocabulary for the last few class maps: the pass over the
    vocabulary costs 100-270 ms on Llama-3, and every JSON string (whatever its bound) has the same classes."""
    key = class_of_byte.tobytes()
    with _GROUPED_LOCK:
        kept = _GROUPED.setdefault(trie, OrderedDict())
        if key in kept:
            kept.move_to_end(key)
            return kept[key]
    grouped = trie.by_class(class_of_byte)
    with _GROUPED_LOCK:
        kept[key] = grouped
        while len(kept) > _GROUPED_KEEP:
            kept.popitem(last=False)
    return grouped


# ASCII punctuation, space and line breaks each in a class of its own (``_byte_classes``)
_APART = np.zeros(256, dtype=np.int32)
for _b in b" \t\n\r!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~":
    _APART[_b] = _b + 1


def _byte_classes(transitions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a representative byte per class, the class of each byte): the bytes ``transitions`` reads alike, with
    punctuation and whitespace apart, numbered by their first byte. The same string body before different
    punctuation (``"..."{1,255}`` then ``,`` or ``}`` or ``]}``, a schema's fragments) then reads the same classes,
    so its grouped trie is built once (``_grouped_trie``): 6 counted fragments of Github o9785 on Llama-3 took
    100-276 ms each, ~114 of them in ``by_class``."""
    columns = np.concatenate([transitions.T, _APART[:, None]], axis=1)
    first, inverse = unique_rows(columns)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse]


def _walk_counted(dfa, labels, label_table, bounds, trie: VocabularyTrie, max_entries: int,
                  bound: np.ndarray) -> CountedTransitions:
    S = dfa.num_states
    inc = label_table[labels, 0]
    inc_bound = np.where(label_table[labels, 1] >= 0, np.array(bounds + [0])[label_table[labels, 1]], 0)
    reset_v = np.where(label_table[labels, 2] >= 0, label_table[labels, 3], -1)
    reset_bound = np.where(label_table[labels, 2] >= 0, np.array(bounds + [0])[label_table[labels, 2]], 0)
    max_count = int(trie.lengths.max()) + 1 if len(trie.lengths) else 1
    P = max_count + 1
    vocab_size = trie.vocab_size
    # as TokenTransitions.build: walk the trie of byte-class sequences (tokens that read alike share a path)
    representative, class_of_byte = _byte_classes(dfa.transitions)
    grouped = _grouped_trie(trie, class_of_byte.astype(np.uint8)) if len(representative) < 256 else None
    if grouped is not None:
        trie, members, member_bounds = grouped
        table = np.ascontiguousarray(dfa.transitions[:, representative])
    else:
        members, member_bounds = np.zeros(0, np.int32), np.zeros(1, np.int64)
        table = np.ascontiguousarray(dfa.transitions)
    offsets = np.zeros(S + 1, dtype=np.int64)
    walk = (table, inc, inc_bound, reset_v, reset_bound, trie.node_depth, trie.node_byte, trie.subtree_end,
            trie.token_lo, trie.node_tokens, members, member_bounds, vocab_size)
    total = _counted_walk(*walk, True, max_entries, offsets, np.zeros(0, np.int32), np.zeros(0, np.int32), S, P)
    if total > max_entries:
        raise StateLimitError(f"more than max_transitions={max_entries} token transitions ({S} regex states)")
    tokens, payload = np.empty(total, np.int32), np.empty(total, np.int32)
    if S * P * (P + 1) >= 1 << 31:
        raise StateLimitError(f"{S} regex states are too many for counted token transitions")
    _counted_walk(*walk, False, max_entries, offsets, tokens, payload, S, P)
    targets = (payload % S).astype(np.int32)
    pre = (payload // S) % P
    enter = payload // (S * P) - 1
    over = TokenTransitions(offsets, tokens, targets, dfa.accepting.copy(), int(dfa.start))
    return CountedTransitions(over, pre.astype(np.int64), enter.astype(np.int64), bound)


@njit(cache=True, nogil=True, boundscheck=False)
def _counted_walk(table, inc, inc_bound, reset_v, reset_bound, node_depth, node_byte, subtree_end, token_lo,
                  node_tokens, members, member_bounds, vocab_size, count_only, max_entries, offsets, tokens, payload, num_states, P):
    """``token_regex._walk`` for a labelled DFA: along each token, entering a state applies its label (inc more
    iterations of the current loop; then, for a reset, a new count), and a count past its loop's bound kills the
    subtree. Row entries pack (target, pre, enter + 1) into ``payload``; rows come out sorted by token."""
    depth_max = int(node_depth.max()) + 1
    state_at = np.empty(depth_max, dtype=np.int64)
    pre_at = np.empty(depth_max, dtype=np.int64)
    v_at = np.empty(depth_max, dtype=np.int64)
    seen = np.zeros((vocab_size + 31) // 32, dtype=np.uint32)
    target_of = np.empty(vocab_size, dtype=np.int32)
    count = 0
    n = len(node_byte)
    for origin in range(table.shape[0]):
        start = count
        state_at[0], pre_at[0], v_at[0] = origin, 0, -1
        node = 1
        while node < n:
            depth = node_depth[node]
            state = table[state_at[depth - 1], node_byte[node]]
            if state < 0:
                node = subtree_end[node]
                continue
            pre, v = pre_at[depth - 1], v_at[depth - 1]
            if inc[state]:
                if v >= 0:
                    v += inc[state]
                    over = v > inc_bound[state]
                else:
                    pre += inc[state]
                    over = pre > inc_bound[state]
                if over:
                    node = subtree_end[node]
                    continue
            if reset_v[state] >= 0:
                v = reset_v[state]
                if v > reset_bound[state]:
                    node = subtree_end[node]
                    continue
            state_at[depth], pre_at[depth], v_at[depth] = state, pre, v
            packed = state + num_states * (pre + P * (v + 1))
            for j in range(token_lo[node], token_lo[node + 1]):
                if len(members) == 0:  # the trie's tokens are the tokens
                    if not count_only:
                        tokens[count], payload[count] = node_tokens[j], packed
                    count += 1
                else:  # a representative of the tokens members[member_bounds[r]:member_bounds[r + 1]]
                    r = node_tokens[j]
                    for m in range(member_bounds[r], member_bounds[r + 1]):
                        if not count_only:
                            tokens[count], payload[count] = members[m], packed
                        count += 1
            node += 1
        if not count_only:
            _sort_row(tokens, payload, start, count, seen, target_of, num_states * P * (P + 1))
        offsets[origin + 1] = count
        if count_only and count > max_entries:
            return count
    return count
