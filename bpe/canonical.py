"""The canonical automaton of a BPE merge table: which token may follow which (Algorithm 3 of the
DirectMerge appendix, for the language ".*").

Two invariants of that automaton make it tiny: every state accepts, and a token always leads to the same
state. So it is ``class_of[t]`` (the state after token t; class 0 = nothing read yet) plus, per class, the set
of tokens forbidden next. Algorithm 3 builds it merge by merge:

    for merge (a, b) -> ab, in priority order:
        S = state(a); Sb = state(b)                       (read before any update)
        if b in forbid(S): skip (ab is never produced)
        if a == b or S is shared by other tokens or S is the start: state(a) = new S' with forbid = forbid(S) + {b}
        else: forbid(S) += {b}
        state(ab) = Sb
        every state forbidding a now forbids ab           (step 5)

Representation (what makes it fast). Step 5 means a forbidden set is closed under *left extension*: if a is
forbidden, so is every token built as (a, ·), ((a, ·), ·), … by a later merge. Call the tree in which each
merged token hangs under its left operand the *left tree*. A generator b added at merge k forbids b plus the
subtrees of b's left-tree children created at or after merge k ("at" only when a == b: the same merge
forbids aa after the odd a). Ordering each node's children by merge index,
newest first, those subtrees follow b contiguously in DFS order: every forbidden set is a union of
intervals of one global token permutation. During the build a state keeps ``{generator: merge index}``
and membership walks b's left spine (a handful of steps); at the end identical sets are fused by their
merged interval lists. Measured before this representation, the reference's Python sets took 33 s and
3.5 GB for GPT-2 and 176 s / 14.7 GB for cl100k.

This module covers the merge table alone; pre-tokenizer boundaries and byte fallback still have to be
layered on top of it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

__all__ = ["MergeAutomaton", "build_merge_automaton", "build_pair_rule_automaton"]


@dataclass(frozen=True, eq=False)
class MergeAutomaton:
    """Result of Algorithm 3, fused.

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
    """Run Algorithm 3 over ``merge_table`` (rows: left, right, result) starting from ``base_token_ids``."""
    state_of = np.full(vocab_size, -1, dtype=np.int64)  # -1: not (yet) produced
    state_of[base_token_ids] = 0
    tokens_in_state = [len(base_token_ids)]
    generators: list[dict[int, int]] = [{}]  # state -> {generator token: merge index it was added at}
    parent = np.full(vocab_size, -1, dtype=np.int64)  # left operand of the merge that produced the token
    made_at = np.full(vocab_size, -1, dtype=np.int64)  # index of that merge

    def forbids(state: int, token: int) -> bool:
        """Whether ``token`` is in the forbidden set of ``state``: walk its left spine looking for a
        generator whose interval covers it."""
        gens = generators[state]
        if not gens:
            return False
        if token in gens:
            return True
        child = token
        node = int(parent[token])
        while node >= 0:
            added = gens.get(node)
            if added is not None and made_at[child] >= added:
                return True
            child, node = node, int(parent[node])
        return False

    for k, (a, b, ab) in enumerate(merge_table.tolist()):
        s, sb = int(state_of[a]), int(state_of[b])
        if s < 0 or sb < 0 or state_of[ab] >= 0:
            continue  # an operand is never produced, or ab already is (an earlier merge spelled it)
        if forbids(s, b):
            continue  # a is never directly followed by b: this merge never fires
        if a == b or s == 0 or tokens_in_state[s] > 1:
            new = len(generators)
            generators.append({**generators[s], b: k})
            tokens_in_state.append(1)
            tokens_in_state[s] -= 1
            state_of[a] = new
            if a == b:
                sb = s  # ab inherits b's old state (read before the update)
        else:
            generators[s][b] = k
        state_of[ab] = sb
        tokens_in_state[sb] += 1
        parent[ab], made_at[ab] = a, k

    return _fuse(state_of, generators, parent, made_at, vocab_size)


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

    child_made = {node: [-int(made_at[c]) for c in kids] for node, kids in children.items()}  # ascending

    def interval(gen: int, added: int) -> tuple[int, int]:
        # gen itself plus the subtrees of its children made at or after merge `added` (they come first; "at"
        # happens for a == b, where step 5 of the same merge forbids aa after the odd a).
        kids = children.get(gen)
        n_after = bisect.bisect_right(child_made[gen], -added) if kids else 0
        end = subtree_end[kids[n_after - 1]] if n_after else position[gen] + 1
        return int(position[gen]), int(end)

    class_id: dict[tuple, int] = {}
    state_class = np.full(len(generators), -1, dtype=np.int64)
    starts: list[int] = []
    ends: list[int] = []
    offsets = [0]
    live_states = np.unique(state_of[produced])
    for s in sorted(set(live_states.tolist()) | {0}):
        spans = sorted(interval(g, k) for g, k in generators[s].items())
        fused: list[list[int]] = []
        for lo, hi in spans:
            if fused and lo <= fused[-1][1]:
                fused[-1][1] = max(fused[-1][1], hi)
            else:
                fused.append([lo, hi])
        key = tuple(x for span in fused for x in span)
        if key not in class_id:
            class_id[key] = len(class_id)
            starts.extend(key[0::2])
            ends.extend(key[1::2])
            offsets.append(len(starts))
        state_class[s] = class_id[key]
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


def build_pair_rule_automaton(merge_table: np.ndarray, vocab_size: int, base_token_ids: np.ndarray) -> MergeAutomaton:
    """The sound fallback for merge lists whose merges do not happen in rank order: b may not follow a iff
    (a, b) is a merge. (Whatever order the runtime applies merges in, it stops only when no adjacent pair is
    mergeable, so this never rejects its output; it over-allows what Algorithm 3 would also forbid.)

    Needed for lists converted from tiktoken ranks (Llama-3: ``ignore_merges``): there a merge can fire
    after higher-ranked ones, once an operand that a later-ranked merge builds exists, and Algorithm 3's
    premise fails — measured on Llama-3, it rejects the runtime's ``' край'``, ``'ней'`` in ``' крайней'``.
    Every token some merge builds, or a base token, counts as produced."""
    produced = np.zeros(vocab_size, dtype=bool)
    produced[base_token_ids] = True
    produced[merge_table[:, 2]] = True
    # Left tree by first merge (any tree works: each forbidden set is a set of single positions).
    parent = np.full(vocab_size, -1, dtype=np.int64)
    made_at = np.full(vocab_size, -1, dtype=np.int64)
    for k, (a, _, ab) in enumerate(merge_table.tolist()):
        if parent[ab] < 0 and made_at[ab] < 0:
            parent[ab], made_at[ab] = a, k
    state_of = np.where(produced, 0, -1).astype(np.int64)
    generators: list[dict[int, int]] = [{}]
    rights: dict[int, dict[int, int]] = {}
    for a, b, _ in merge_table.tolist():
        rights.setdefault(a, {})[b] = 1 << 62  # "added after every merge": the interval is b alone
    for a, gens in rights.items():
        if produced[a]:
            state_of[a] = len(generators)
            generators.append(gens)
    return _fuse(state_of, generators, parent, made_at, vocab_size)
