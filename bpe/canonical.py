"""The canonical automaton of a BPE merge table: which token may follow which, inside one pre-token piece.

The runtime (HF ``tokenizers``) repeatedly merges the lowest-ranked adjacent pair, leftmost first. A
tokenization inside a piece is canonical iff every adjacent pair (a, b) is: the runtime spells a's text
followed by b's text as exactly [a, b]. (A third token cannot rescue or spoil a pair: merges elsewhere only
lower the competition the pair's own crossing has to beat.) So the automaton is ``class_of[t]`` (the state
after token t; class 0 = nothing read yet) plus, per class, the set of tokens forbidden next.

When does a pair (a, b) fail? Three facts, each checked against the runtime:

1. *Every token is built the same way wherever it occurs*: the merges inside a token's span are those of the
   runtime run on its text alone (its *derivation*, ``derivations``), and it appears when the clock — the
   largest rank merged so far — reaches ``completed_at[t]``, the largest rank in its derivation. For merge
   lists in rank order (GPT-2, SentencePiece) that is the rank of its last merge; for lists converted from
   tiktoken ranks (Llama-3) a merge can fire after higher-ranked ones, once a later-ranked merge builds its
   operand, and only the clock is right.
2. The tokens a could still merge with on its right are its *right edge* over time: the right operand of its
   last merge, that token's right operand, ... Each edge token e lives from ``completed_at[e]`` until the
   clock at which its parent on that chain completes. Likewise b's *left edge*.
3. A merge (e, f) of rank r between a's edge e and b's edge f becomes possible at the clock
   ``T = max(r, completed_at[e], completed_at[f])`` and fires iff e is still alive then (strictly: a merge
   of e inside a that completes at T comes first, being further left) and f is alive then or dies exactly
   at T (the crossing is further left than f's own merge). On Llama-3, 49,619 merges have a rank below an
   operand's clock; on 162,341 pairs built around them and at random (91,265 non-canonical) this predicts
   the runtime every time (``tests/test_merge_automaton.py``). With T = r instead, 219 pairs come out wrong.

So, processed in clock order, this is the DirectMerge appendix's Algorithm 3 with merge indices replaced by
clocks: creating token x = (l, r) at ``completed_at[x]`` gives x the state of r as it is then (same right
edge history from there down), and crossing (e, f) at T adds f's *group* to e's state (copy on write when
the state is shared). For rank-ordered lists this is Algorithm 3 exactly: same classes as the reference
on Mistral (9,364 fused, 9,481 before fusion), GPT-2, Qwen3 and SmolLM2.

Representation (what makes it fast). f's group is f plus every token whose left edge passes through f while
f is alive at T: in the *left tree* (each token hangs under the left operand of its last merge), f plus the
subtrees of f's children completed at or after T. Ordering each node's children newest first, those
subtrees follow f contiguously in DFS order: every forbidden set is a union of intervals of one global
token permutation. During the build a state keeps ``{generator: clock}`` and membership walks a token's left
spine (a handful of steps); at the end identical sets are fused by their merged interval lists. Measured
before this representation, the reference's Python sets took 33 s and 3.5 GB for GPT-2 and 176 s / 14.7 GB
for cl100k.

This module covers the merge table alone; pre-tokenizer boundaries and byte fallback are layered on top of
it by ``bpe.automaton``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MergeAutomaton", "build_merge_automaton"]


@dataclass(frozen=True, eq=False)
class MergeAutomaton:
    """The fused canonical automaton of a merge table.

    - ``class_of``: int32[V], the class reached after each token (-1: the token is never produced).
    - ``order``: int32[V], a permutation of token ids (DFS order of the left tree);
      ``position[t]`` is t's index in it.
    - ``starts``/``ends``/``offsets``: class c forbids ``order[starts[i]:ends[i]]`` for i in
      ``offsets[c]:offsets[c+1]`` (disjoint, sorted intervals).
    - ``produced``: bool[V], tokens some canonical tokenization contains.
    """

    class_of: np.ndarray
    order: np.ndarray
    position: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    offsets: np.ndarray
    produced: np.ndarray
    pre_fusion_states: int

    @property
    def num_classes(self) -> int:
        return len(self.offsets) - 1

    def forbidden_mask(self, cls: int) -> np.ndarray:
        """bool[V]: tokens that may not follow a token of class ``cls``."""
        marks = np.zeros(len(self.order) + 1, dtype=np.int32)
        lo, hi = self.offsets[cls], self.offsets[cls + 1]
        np.add.at(marks, self.starts[lo:hi], 1)
        np.add.at(marks, self.ends[lo:hi], -1)
        in_order = np.cumsum(marks[:-1]) > 0
        return in_order[self.position]

    def forbidden_count(self, cls: int) -> int:
        lo, hi = self.offsets[cls], self.offsets[cls + 1]
        return int((self.ends[lo:hi] - self.starts[lo:hi]).sum())


def build_merge_automaton(merge_table: np.ndarray, vocab_size: int, base_token_ids: np.ndarray) -> MergeAutomaton:
    """The canonical automaton of ``merge_table`` (rows: left, right, result; row index = rank) over the
    symbols ``base_token_ids``, for the runtime's rule "merge the lowest-ranked adjacent pair, leftmost first"."""
    pairs, first = pair_ranks(merge_table, vocab_size)
    derivation = derivations(merge_table, vocab_size, base_token_ids, pairs, first)
    tau, right = derivation.completed_at, derivation.right
    produced = derivation.produced

    # Events: token x appears at tau[x] (it inherits its right operand's state: same right edge history);
    # crossing (e, f) at its effective time max(rank, tau[e], tau[f]) forbids f's group after e. At equal
    # times creations go first: "alive" is strict on the left (a crossing at the instant e is consumed is late).
    e, f = pairs // vocab_size, pairs % vocab_size
    live = produced[e] & produced[f]
    e, f, rank = e[live], f[live], first[live]
    crossing_time = np.maximum(rank, np.maximum(tau[e], tau[f]))
    made = np.flatnonzero(produced & (derivation.left >= 0))
    times = np.concatenate([tau[made], crossing_time])
    kinds = np.concatenate([np.zeros(len(made), np.int64), np.ones(len(e), np.int64)])
    # Among creations at one time, operands before results (a result is longer than its operands).
    sizes = np.concatenate([derivation.size[made], np.zeros(len(e), np.int64)])
    events = np.lexsort((sizes, kinds, times))
    subjects = np.concatenate([made, e]).tolist()
    objects = np.concatenate([right[made], f]).tolist()
    times_list = times.tolist()

    parent, tau_list = derivation.left.tolist(), tau.tolist()

    def covered(gens: dict[int, int], token: int, when: int) -> bool:
        """Whether a state's forbidden set already holds ``token``'s whole group at time ``when``: the token
        itself from an earlier time, or inside the subtree of an ancestor's generator (walk its left spine)."""
        if gens.get(token, when + 1) <= when:
            return True
        child, node = token, parent[token]
        while node >= 0:
            since = gens.get(node)
            if since is not None and tau_list[child] >= since:
                return True
            child, node = node, parent[node]
        return False

    state_of = np.where(produced, 0, -1).astype(np.int64)
    sharers = [int(produced.sum()) + 1]  # tokens per state; the start state keeps one extra: never mutated
    generators: list[dict[int, int]] = [{}]  # state -> {generator token: earliest crossing time}
    for i in events.tolist():
        x, y = subjects[i], objects[i]
        if i < len(made):  # creation of x = (left, y): share y's state as it is now
            s = int(state_of[y])
            sharers[state_of[x]] -= 1
            state_of[x] = s
            sharers[s] += 1
            continue
        s, when = int(state_of[x]), times_list[i]
        gens = generators[s]
        if covered(gens, y, when):
            continue
        if sharers[s] > 1:  # others snapshotted this history before now: copy on write
            gens = dict(gens)
            generators.append(gens)
            sharers[s] -= 1
            sharers.append(1)
            state_of[x] = len(generators) - 1
        gens[y] = when
    return _fuse(state_of, generators, derivation.left, tau, vocab_size)


@dataclass(frozen=True, eq=False)
class _Derivations:
    """How the runtime builds each token from its own bytes (a token inside any text is built exactly so).

    ``left``/``right``: operands of the last merge (-1 for base symbols and unproduced tokens);
    ``completed_at``: the largest rank among the merges that build it (-1 for base symbols), which is the
    clock (largest rank applied so far) at which it appears in any text; ``size``: base symbols it spans;
    ``produced``: the runtime spells the token's own text as this one token."""

    left: np.ndarray
    right: np.ndarray
    completed_at: np.ndarray
    size: np.ndarray
    produced: np.ndarray


def pair_ranks(merge_table: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted pair keys ``left * V + right`` and the rank (first row) of each pair's merge."""
    return np.unique(merge_table[:, 0].astype(np.int64) * vocab_size + merge_table[:, 1], return_index=True)


def derivations(merge_table: np.ndarray, vocab_size: int, base_token_ids: np.ndarray,
                 pairs: np.ndarray, first: np.ndarray) -> _Derivations:
    """Run the runtime's BPE on every token's base symbols at once: tokens of equal length in one array,
    one merge per row per step (lowest rank, leftmost), vectorised over the rows. ``pairs``/``first``:
    ``pair_ranks`` of the table."""
    V = vocab_size
    results = merge_table[first, 2].astype(np.int64)
    never = len(merge_table)

    # Base-symbol spelling of every token, by expanding merges (operands before results).
    spelling: list[list[int] | None] = [None] * V
    for t in np.asarray(base_token_ids).tolist():
        spelling[t] = [t]
    pending = merge_table.tolist()
    while pending:
        later = []
        for a, b, ab in pending:
            if spelling[ab] is not None:
                continue
            if spelling[a] is None or spelling[b] is None:
                later.append((a, b, ab))
            else:
                spelling[ab] = spelling[a] + spelling[b]
        if len(later) == len(pending):
            break  # operands no merge chain reaches
        pending = later

    left = np.full(V, -1, dtype=np.int64)
    right = np.full(V, -1, dtype=np.int64)
    completed_at = np.full(V, -1, dtype=np.int64)
    size = np.array([len(s) if s else 0 for s in spelling], dtype=np.int64)
    produced = np.zeros(V, dtype=bool)
    produced[np.asarray(base_token_ids, dtype=np.int64)] = True
    for length in np.unique(size[size > 1]).tolist():
        tokens = np.flatnonzero(size == length)
        seq = np.array([spelling[t] for t in tokens], dtype=np.int64)
        clock = np.full(len(tokens), -1, dtype=np.int64)
        alive = np.ones(len(tokens), dtype=bool)
        rows = np.arange(len(tokens))
        for width in range(length, 1, -1):
            keys = seq[:, :-1] * V + seq[:, 1:]
            where = np.minimum(np.searchsorted(pairs, keys), len(pairs) - 1)
            ranks = np.where(pairs[where] == keys, first[where], never)
            at = ranks.argmin(axis=1)  # leftmost lowest rank
            best = ranks[rows, at]
            alive &= best < never
            clock = np.maximum(clock, best)
            if width == 2:
                left[tokens], right[tokens] = seq[:, 0], seq[:, 1]
            merged = results[where[rows, at]]
            cols = np.arange(width - 1)
            shifted = np.where(cols[None, :] > at[:, None], seq[:, 1:], seq[:, :-1])
            shifted[rows, at] = merged
            seq = shifted
        ok = alive & (seq[:, 0] == tokens)
        produced[tokens[ok]] = True
        completed_at[tokens[ok]] = clock[ok]
    left[~produced], right[~produced] = -1, -1
    return _Derivations(left, right, completed_at, size, produced)


def _fuse(state_of, generators, parent, made_at, vocab_size) -> MergeAutomaton:
    """Lay the left tree out in DFS order, turn each state's generators into intervals, fuse equal sets."""
    produced = state_of >= 0
    # Children of each node, newest merge first; roots are tokens without a parent (in id order).
    children: dict[int, list[int]] = {}
    merged = np.flatnonzero(parent >= 0)
    for child in merged[np.argsort(-made_at[merged], kind="stable")].tolist():
        children.setdefault(int(parent[child]), []).append(child)
    order = np.empty(vocab_size, dtype=np.int64)
    subtree_end = np.empty(vocab_size, dtype=np.int64)
    position = np.empty(vocab_size, dtype=np.int64)
    n = 0
    for root in np.flatnonzero(parent < 0).tolist():
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                subtree_end[node] = n
                continue
            position[node] = n
            order[n] = node
            n += 1
            stack.append((node, True))
            for c in reversed(children.get(node, ())):
                stack.append((c, False))

    # Each generator (g, k) of a state stands for the interval [position[g], end): g itself plus the subtrees of
    # its children made at or after clock k (they come first; "at" happens for a == b, where step 5 of the same
    # merge forbids aa after the odd a). Computed for all generators at once: children in one flat array,
    # grouped by parent, newest first; a sorted key per child turns "how many were made at or after k" into
    # one searchsorted.
    kids_flat = np.array([c for node in sorted(children) for c in children[node]], dtype=np.int64)
    kid_parent = np.array([node for node in sorted(children) for _ in children[node]], dtype=np.int64)
    clock_span = int(max(made_at.max(), 0)) + 2
    kid_key = kid_parent * (2 * clock_span) + (clock_span - made_at[kids_flat])  # ascending
    kid_start = np.searchsorted(kid_parent, np.arange(vocab_size), side="left")

    states = np.array(sorted(set(np.unique(state_of[produced]).tolist()) | {0}), dtype=np.int64)
    counts = np.array([len(generators[st]) for st in states.tolist()], dtype=np.int64)
    total = int(counts.sum())
    gen = np.fromiter((g for st in states.tolist() for g in generators[st]), dtype=np.int64, count=total)
    added = np.fromiter((k for st in states.tolist() for k in generators[st].values()), dtype=np.int64, count=total)
    owner = np.repeat(np.arange(len(states)), counts)
    n_after = np.searchsorted(kid_key, gen * (2 * clock_span) + (clock_span - added), side="right") - kid_start[gen]
    lo = position[gen]
    last_kid = kids_flat[np.maximum(kid_start[gen] + n_after - 1, 0)] if len(kids_flat) else np.zeros_like(gen)
    hi = np.where(n_after > 0, subtree_end[last_kid], lo + 1)
    # Union of each state's intervals (touching ones join): sort by (state, lo); an offset per state keeps a
    # running maximum from crossing states.
    by = np.lexsort((lo, owner))
    offset = owner[by] * (2 * vocab_size + 2)
    lo_o, hi_o = lo[by] + offset, hi[by] + offset
    reach = np.maximum.accumulate(hi_o) if total else hi_o
    starts_run = np.ones(total, dtype=bool)
    starts_run[1:] = lo_o[1:] > reach[:-1]
    run_first = np.flatnonzero(starts_run)
    run_lo = lo_o[run_first] - offset[run_first]
    run_hi = np.maximum.reduceat(hi_o, run_first) - offset[run_first] if total else run_lo
    run_owner = owner[by][run_first]
    bounds = np.searchsorted(run_owner, np.arange(len(states) + 1), side="left")
    flat = np.stack([run_lo, run_hi], axis=1).astype(np.int64)

    class_id: dict[bytes, int] = {}
    state_class = np.full(len(generators), -1, dtype=np.int64)
    representative: list[int] = []  # per class, the first state index with its interval list
    blob = flat.tobytes()
    row = flat.itemsize * 2
    bounds_list = bounds.tolist()
    for i, st in enumerate(states.tolist()):
        key = blob[bounds_list[i] * row : bounds_list[i + 1] * row]
        c = class_id.get(key)
        if c is None:
            c = class_id[key] = len(representative)
            representative.append(i)
        state_class[st] = c
    rep = np.array(representative, dtype=np.int64)
    lengths = bounds[rep + 1] - bounds[rep]
    rows = np.repeat(bounds[rep] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
    starts, ends = flat[rows, 0], flat[rows, 1]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    class_of = np.where(produced, state_class[np.maximum(state_of, 0)], -1).astype(np.int32)
    return MergeAutomaton(
        class_of=class_of,
        order=order.astype(np.int32),
        position=position.astype(np.int32),
        starts=np.array(starts, dtype=np.int32),
        ends=np.array(ends, dtype=np.int32),
        offsets=np.array(offsets, dtype=np.int64),
        produced=produced,
        pre_fusion_states=len(generators),
    )
