"""Token-level regex automaton: which vocabulary token moves a byte-DFA state where.

``delta(q, t)`` is the state reached by walking token ``t``'s bytes from regex state ``q`` (the Outlines index).
It is computed by walking the vocabulary as a byte trie, depth first, from every state (a compiled loop): a
byte with no edge skips the node's whole subtree, so the work is the number of live (prefix, state) pairs, not
states x vocabulary. (The walk was level by level in numpy — expand the frontier of (node, origin, current)
triples, drop the dead — at a pass and a temporary per step per level: 21 ms for the JSON object on GPT-2, 1.8 ms
compiled.)

Leaves out: anything about canonical tokenizations (``product.compiler.tables`` intersects this with the canonical
automaton) and special tokens (they have no bytes and are never walked).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import njit

from automata.budget import checkpoint
from automata.dfa import DFA, find_sorted, row_bounds, unique_rows
from automata.errors import StateLimitError

__all__ = ["VocabularyTrie", "TokenTransitions", "Segments"]


@dataclass(frozen=True, eq=False)
class VocabularyTrie:
    """The byte trie of a vocabulary, nodes numbered in preorder (the root is node 0).

    Invariants: node ``g`` sits at depth ``node_depth[g]`` and is reached from its parent by ``node_byte[g]``;
    its subtree is the id range ``g:subtree_end[g]`` (so a walk that finds a byte dead skips straight to
    ``subtree_end[g]``, and a walk that lives reads every array front to back); the tokens spelled exactly by
    ``g`` are ``node_tokens[token_lo[g]:token_lo[g + 1]]`` (several ids can share bytes, e.g. ``A`` and its
    byte-fallback ``<0x41>``). ``padded``/``lengths``/``ids``: the tokens with bytes, as a zero-padded byte matrix.
    """

    vocab_size: int
    node_depth: np.ndarray
    node_byte: np.ndarray
    subtree_end: np.ndarray
    token_lo: np.ndarray
    node_tokens: np.ndarray
    padded: np.ndarray  # uint8 [tokens with bytes, depth]: row r spells token ids[r], zero-padded
    lengths: np.ndarray
    ids: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.node_byte)

    @cached_property
    def max_depth(self) -> int:
        """The deepest node's depth (the longest token's bytes): one pass over ``node_depth`` (~50 µs at 128k tokens,
        once per lazy row otherwise)."""
        return int(self.node_depth.max()) if len(self.node_depth) else 0

    @cached_property
    def subtree_bytes(self) -> np.ndarray:
        """uint64 [nodes, 4]: the bytes spelled anywhere in node g's subtree, g's own included, as 256 bits (a walk
        in a state that loops on all of them reads the whole subtree back into that state: ``state_row``)."""
        return _subtree_bytes(self.node_byte, self.subtree_end)

    @staticmethod
    def build(token_bytes: list[bytes | None]) -> "VocabularyTrie":
        ids = np.array([i for i, b in enumerate(token_bytes) if b], dtype=np.int64)
        lengths = np.array([len(token_bytes[i]) for i in ids], dtype=np.int64)
        depth = int(lengths.max()) if len(ids) else 0
        padded = np.zeros((len(ids), depth), dtype=np.uint8)  # row r: the bytes of token ids[r], zero-padded
        padded[np.arange(depth)[None, :] < lengths[:, None]] = np.frombuffer(
            b"".join(token_bytes[i] for i in ids), dtype=np.uint8)

        return VocabularyTrie._from_matrix(len(token_bytes), padded, lengths, ids)

    @staticmethod
    def _from_matrix(vocab_size: int, padded: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> "VocabularyTrie":
        # Preorder is the lexicographic order of the spellings, a prefix before its extensions: sort the
        # zero-padded rows as raw bytes, ties (a spelling and itself plus zero bytes) by length.
        by_length = np.argsort(lengths, kind="stable")
        rows = np.ascontiguousarray(padded[by_length])
        keys = rows.view(np.dtype((np.void, rows.shape[1]))).ravel() if rows.shape[1] else np.zeros(len(rows))
        order = by_length[np.argsort(keys, kind="stable")]
        node_depth, node_byte, subtree_end, node_of = _preorder_trie(np.ascontiguousarray(padded[order]),
                                                                     lengths[order])
        # tokens in spelling order have non-decreasing nodes: the CSR needs no further sort
        token_lo = np.searchsorted(node_of, np.arange(len(node_byte) + 1))
        return VocabularyTrie(vocab_size, node_depth, node_byte, subtree_end, token_lo,
                              ids[order].astype(np.int32), padded, lengths, ids)

    def by_class(self, class_of_byte: np.ndarray) -> tuple["VocabularyTrie", np.ndarray, np.ndarray] | None:
        """The trie of the tokens' byte-*class* sequences, for a DFA whose bytes fall into few classes (bytes a
        DFA never tells apart). Its "token ids" are representatives r; the tokens of r are
        ``members[bounds[r]:bounds[r+1]]``. Tokens with equal class sequences move every state alike, so the
        walk visits a few thousand class prefixes instead of every vocabulary prefix. ``None`` on a hash
        collision (then walk the byte trie)."""
        flat = class_of_byte[self.flat_bytes].astype(np.uint64)
        starts = self.flat_offsets[:-1]
        with np.errstate(over="ignore"):  # polynomial hash of each token's class sequence, modulo 2**64
            powers = np.cumprod(np.full(self.padded.shape[1], 0x100000001B3, dtype=np.uint64))
            from_end = np.repeat(self.flat_offsets[1:], self.lengths) - 1 - np.arange(len(flat))
            digest = np.add.reduceat(flat * powers[from_end], starts) + self.lengths.astype(np.uint64)
        _, first, inverse = np.unique(digest, return_index=True, return_inverse=True)
        own = np.arange(len(flat))
        theirs = np.repeat(starts[first][inverse] - starts, self.lengths) + own
        if not np.array_equal(flat[theirs], flat) or not np.array_equal(self.lengths[first][inverse], self.lengths):
            return None
        classes = class_of_byte[self.padded[first]]
        classes[np.arange(self.padded.shape[1])[None, :] >= self.lengths[first][:, None]] = 0
        trie = VocabularyTrie._from_matrix(len(first), classes, self.lengths[first], np.arange(len(first), dtype=np.int64))
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
        return trie, self.ids[order].astype(np.int32), bounds

    @property
    def flat_bytes(self) -> np.ndarray:
        return self.padded[np.arange(self.padded.shape[1])[None, :] < self.lengths[:, None]]

    @property
    def flat_offsets(self) -> np.ndarray:
        return row_bounds(self.lengths)


# Grouping tokens by byte-class sequence costs a pass over the whole vocabulary (100-200 ms at 128k tokens); it
# pays only when few classes collapse many tokens into one sequence and many edges walk them. Measured on Llama-3
# (plain vs grouped, ms): a sentence of words, 4 classes, 2,316 edges: 127 vs 88; ``( ?[A-Za-z]+){1,20}``, 3
# classes: 103 vs 89; but a JSON object's whole regex, 44 classes, 20,240 edges: 282 vs 462; "anything", 42
# classes: 52 vs 198; "any key but five", 37 classes: 110 vs 235 (docs/optimizations.md).
_GROUPING_MIN_EDGES = 2000
_GROUPING_MAX_CLASSES = 8


@dataclass(frozen=True, eq=False)
class TokenTransitions:
    """For each state ``q`` of a byte DFA: the tokens that can be read from ``q`` and the states they reach.

    ``tokens[offsets[q]:offsets[q+1]]`` are sorted token ids, ``targets[...]`` the matching states. States are
    the DFA's; ``accepting`` and ``start`` are copied from it.

    *Listed* (as built; compiling reads rows whole): every edge is in ``tokens``/``targets`` and the ``common_*``
    arrays are None. *Compact* (``compact``, what a compiled guide keeps): where one target takes most of a row —
    a free-text state, whose tokens nearly all lead back to it — the tokens reaching ``common_target[q]`` are the
    set bits of ``common_words[common_row[q]]`` (packed, shared by the states with equal sets) and only the others
    are listed; ``common_row[q] = -1`` where the row is all listed. A token is in one of the two, never both.
    """

    offsets: np.ndarray
    tokens: np.ndarray
    targets: np.ndarray
    accepting: np.ndarray
    start: int
    common_target: np.ndarray | None = None  # int32 [states]
    common_row: np.ndarray | None = None  # int32 [states], -1: none
    common_words: np.ndarray | None = None  # uint32 [distinct sets, vocabulary words]
    # Built by segments (``build(..., compact=True)``): the rows as the segments they were copied from, kept while
    # a guide compiles (it groups each segment's tokens once, not each row's) and dropped from what it keeps.
    segments: "Segments | None" = None

    @property
    def num_states(self) -> int:
        return len(self.accepting)

    @property
    def is_compact(self) -> bool:
        return self.common_row is not None

    @property
    def nbytes(self) -> int:
        arrays = [self.offsets, self.tokens, self.targets, self.common_target, self.common_row, self.common_words]
        return int(sum(a.nbytes for a in arrays if a is not None))

    def common_arrays(self, num_words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``common_target``, ``common_row`` and ``common_words`` — for listed transitions, none: every row -1 and
        no set (of ``num_words`` words)."""
        if self.is_compact:
            return self.common_target, self.common_row, self.common_words
        none = np.full(self.num_states, -1, dtype=np.int32)
        return none, none, np.zeros((0, num_words), dtype=np.uint32)

    def row(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokens readable from ``state`` (ascending) and the states they reach."""
        lo, hi = self.offsets[state], self.offsets[state + 1]
        tokens, targets = self.tokens[lo:hi], self.targets[lo:hi]
        if not self.is_compact or self.common_row[state] < 0:
            return tokens, targets
        common = np.flatnonzero(np.unpackbits(self.common_words[self.common_row[state]].view(np.uint8),
                                              bitorder="little")).astype(np.int32)
        all_tokens = np.concatenate([common, tokens])
        order = np.argsort(all_tokens, kind="stable")
        all_targets = np.concatenate([np.full(len(common), self.common_target[state], np.int32), targets])
        return all_tokens[order], all_targets[order]

    def compact(self, vocab_size: int) -> "TokenTransitions":
        """These transitions with each row's most common target stored as a shared bit set, where it takes at
        least a vocabulary word's worth of entries (the set then costs at most half of what listing them did).
        On Llama-3 the 499 fragments of 48 MaskBench schemas held 3.9 GB of listed edges, 98 % of them to their
        row's most common target (docs/optimizations.md)."""
        if self.is_compact:
            return self
        num_words = (vocab_size + 31) // 32
        one_segment_a_row = np.arange(self.num_states, dtype=np.int64)[:, None]
        offsets, tokens, targets, common_target, row_of, words = _split_common(
            one_segment_a_row, self.offsets, self.tokens, self.targets, max(self.num_states, 1), vocab_size,
            num_words, num_words, True)
        common_row, words = _distinct_sets(row_of, words)
        return TokenTransitions(offsets, tokens, targets, self.accepting, self.start, common_target, common_row,
                                words)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_scalar"}  # memoryviews do not pickle; rebuilt on use

    @cached_property
    def _scalar(self) -> tuple[memoryview, memoryview, memoryview]:
        # ``target`` runs once per generated token: bisect over memoryviews costs ~1 µs, a numpy searchsorted on
        # the row 3-6 µs (and ~20 µs when the needle's dtype differs: numpy first casts the whole row).
        return memoryview(self.offsets), memoryview(self.tokens), memoryview(self.targets)

    def target(self, state: int, token: int) -> int:
        """``delta(state, token)``, or -1 if the token's bytes leave the language."""
        if self.is_compact and self.common_row[state] >= 0 and \
                (int(self.common_words[self.common_row[state], token >> 5]) >> (token & 31)) & 1:
            return int(self.common_target[state])
        offsets, tokens, targets = self._scalar
        i = find_sorted(tokens, token, offsets[state], offsets[state + 1])
        return targets[i] if i >= 0 else -1

    @staticmethod
    def build(dfa: DFA, trie: VocabularyTrie, *, max_entries: int = 50_000_000,
              compact: bool = False) -> "TokenTransitions":
        """Walk the trie from every state of ``dfa`` at once (``dfa`` must be over the byte alphabet). ``compact``:
        where the rows are built by segments, compact ones straight from the segments, which are kept beside them
        (``segments``) for the guide that compiles from them; listed otherwise."""
        if dfa.alphabet.kind != "bytes":
            raise ValueError("token transitions need a DFA over UTF-8 bytes")
        if dfa.num_states * trie.vocab_size >= 1 << 62:  # (token, target) packs into one int64 (_sort_row)
            raise StateLimitError(f"{dfa.num_states} regex states are too many for token transitions")
        trie_vocab = trie.vocab_size

        num_states = dfa.num_states
        # Bytes the DFA never tells apart form a class; walking class sequences shares all tokens that read alike.
        representative, class_of_byte = unique_rows(dfa.transitions.T)
        grouped = None
        if (int((dfa.transitions >= 0).sum()) >= _GROUPING_MIN_EDGES
                and len(representative) <= _GROUPING_MAX_CLASSES):
            grouped = trie.by_class(class_of_byte.astype(np.uint8))
        if grouped is not None:
            trie, members, member_bounds = grouped
            table = dfa.transitions[:, representative]
        else:
            members, member_bounds = np.zeros(0, np.int32), np.zeros(1, np.int64)
            table = dfa.transitions
        table = np.ascontiguousarray(table)
        # A token's row entry depends only on the state its first symbol leads to: split the trie into the root's
        # subtrees (one per first symbol) and walk each subtree once per distinct state it is entered in; rows are
        # then copies of those segments. It pays when states share them: in the DFA of "any key but these five"
        # (43 states, 3.2M entries on Llama-3) every key-prefix state enters most subtrees in the free-string
        # state: 377 segments for 4,183 (state, subtree) pairs, 110 -> 23 ms. Where most pairs are distinct (a
        # JSON value of any type: 4,151 of 6,398) the per-state walk is faster (52 vs 86 ms).
        children = np.flatnonzero(trie.node_depth == 1)
        if num_states * len(children) <= _MAX_SEGMENT_TABLE:
            built = TokenTransitions._from_segments(dfa, table, trie, children, members, member_bounds, trie_vocab,
                                                    max_entries, compact)
            if built is not None:
                return built
        walk = (table, trie.node_depth, trie.node_byte, trie.subtree_end, trie.token_lo,
                trie.node_tokens, members, member_bounds, trie_vocab,
                trie.subtree_bytes if len(members) == 0 else np.zeros((0, 4), dtype=np.uint64))
        # Most constraints' rows fit in a few vocabularies' worth of entries: one pass fills arrays of that size.
        # When they outgrow it, the walk stops before the row that did not fit, counts the rest, and fills
        # exact-size arrays from there. (Counting everything first cost a second walk: 1 of 3.5 ms on GPT-2's
        # JSON object; growing the arrays by realloc instead cost the email regex 50 ms of page faults.)
        capacity = min(max_entries, _FIRST_CAPACITY_ROWS * trie_vocab)
        offsets = np.zeros(num_states + 1, dtype=np.int64)
        tokens, targets = np.empty(capacity, np.int32), np.empty(capacity, np.int32)
        origin = _walk_checked(walk, 0, False, max_entries, offsets, tokens, targets)
        if origin < num_states:
            if _walk_checked(walk, origin, True, max_entries, offsets, tokens, targets) < num_states:
                raise StateLimitError(f"more than max_transitions={max_entries} token transitions "
                                      f"({num_states} regex states)")
            done = offsets[origin]
            tokens, targets = (np.concatenate([a[:done], np.empty(offsets[-1] - done, np.int32)])
                               for a in (tokens, targets))
            stopped = _walk_checked(walk, origin, False, max_entries, offsets, tokens, targets)
            assert stopped == num_states, "the arrays were sized by counting the rows"
        total = offsets[-1]
        if total < capacity:
            tokens, targets = tokens[:total].copy(), targets[:total].copy()
        return TokenTransitions(offsets, tokens, targets, dfa.accepting.copy(), int(dfa.start))

    @staticmethod
    def _from_segments(dfa: DFA, table: np.ndarray, trie: VocabularyTrie, children: np.ndarray, members: np.ndarray,
                       member_bounds: np.ndarray, vocab_size: int, max_entries: int,
                       compact: bool = False) -> "TokenTransitions":
        """``build`` by segments: (first-symbol subtree, state after that symbol) pairs, each walked once; None
        when fewer than half the pairs repeat (then the per-state walk is faster)."""
        num_states = len(table)
        after = table[:, trie.node_byte[children]].astype(np.int64)  # [state, subtree]: state after its symbol
        live = after >= 0
        keys = (np.arange(len(children), dtype=np.int64)[None, :] * num_states + after)[live]
        distinct, inverse = np.unique(keys, return_inverse=True)
        if _MIN_SEGMENT_SHARING * len(distinct) > len(keys):
            return None
        segment_of = np.full(after.shape, -1, dtype=np.int64)
        segment_of[live] = inverse
        segment_child, segment_state = np.divmod(distinct, num_states)
        segment_offsets, segment_tokens, segment_targets = _walk_segments(
            table, trie.node_depth, trie.node_byte, trie.subtree_end, trie.token_lo, trie.node_tokens, members,
            member_bounds, children[segment_child], segment_state, vocab_size, max_entries,
            trie.subtree_bytes if len(members) == 0 else np.zeros((0, 4), dtype=np.uint64))
        if segment_offsets[-1] > max_entries:
            raise StateLimitError(f"more than max_transitions={max_entries} token transitions "
                                  f"({num_states} regex states)")
        lengths = np.diff(segment_offsets)
        row_lengths = np.where(live, lengths[np.maximum(segment_of, 0)], 0).sum(axis=1)
        offsets = np.concatenate([[0], np.cumsum(row_lengths)]).astype(np.int64)
        if offsets[-1] > max_entries:
            raise StateLimitError(f"more than max_transitions={max_entries} token transitions "
                                  f"({num_states} regex states)")
        if compact:
            # A free key's states (the declared names' trie) share most segments with the free string's: copying each
            # row out, sorting it, then splitting off its common target cost 70 % of such a fragment's compile.
            num_words = (vocab_size + 31) // 32
            offsets, tokens, targets, common_target, row_of, words = _split_common(
                segment_of, segment_offsets, segment_tokens, segment_targets, num_states, vocab_size, num_words,
                num_words, False)
            common_row, words = _distinct_sets(row_of, words)
            return TokenTransitions(offsets, tokens, targets, dfa.accepting.copy(), int(dfa.start), common_target,
                                    common_row, words,
                                    Segments(segment_of, segment_offsets, segment_tokens, segment_targets))
        tokens, targets = _rows_from_segments(segment_of, segment_offsets, segment_tokens, segment_targets, offsets,
                                              vocab_size, num_states)
        return TokenTransitions(offsets, tokens, targets, dfa.accepting.copy(), int(dfa.start))


# Rows are built from segments when the [states x first symbols] table of segments stays this small (int64
# entries); larger DFAs walk the whole trie per state.
_MAX_SEGMENT_TABLE = 1 << 23
_MIN_SEGMENT_SHARING = 2  # ... and every segment serves this many (state, subtree) pairs on average


@njit(cache=True, nogil=True, boundscheck=False)
def _walk_segments(table, node_depth, node_byte, subtree_end, token_lo, node_tokens, members, member_bounds,
                   segment_node, segment_state, vocab_size, max_entries, subtree_bytes):
    """Segment k: the tokens of the subtree under the depth-1 node ``segment_node[k]``, read from the state
    ``segment_state[k]`` that node's symbol leads to, with the states they reach, in trie order. Returns
    (offsets, tokens, targets), segment k being ``offsets[k]:offsets[k + 1]``; the outputs grow by doubling. Stops
    once past ``max_entries`` (the last offset then says so). A subtree below the top read back into the state it
    is entered from, every byte looping there, is taken whole (``_walk``)."""
    tokens, targets = np.empty(max(1024, 2 * vocab_size), np.int32), np.empty(max(1024, 2 * vocab_size), np.int32)
    offsets = np.zeros(len(segment_node) + 1, dtype=np.int64)
    state_at = np.empty(int(node_depth.max()) + 1, dtype=np.int64)
    loops = np.zeros((table.shape[0], 4), dtype=np.uint64)
    known = np.zeros(table.shape[0], dtype=np.int8)
    count = 0
    for k in range(len(segment_node)):
        top = segment_node[k]
        end = subtree_end[top]
        node = top
        while node < end:
            depth = node_depth[node]
            state = segment_state[k] if node == top else table[state_at[depth - 1], node_byte[node]]
            if state < 0:
                node = subtree_end[node]
                continue
            if node != top and len(subtree_bytes) and state == state_at[depth - 1] and known[state] == 0:
                _learn_loops(table, state, loops, known)
            if node != top and len(subtree_bytes) and state == state_at[depth - 1] and known[state] == 1 and \
                    subtree_end[node] - node >= _TAKEN_WHOLE_MIN and _loops_over(loops, state, subtree_bytes[node]):
                last = subtree_end[node]
                tokens, targets = _room(tokens, targets, count, token_lo[last] - token_lo[node])
                for j in range(token_lo[node], token_lo[last]):
                    tokens[count], targets[count] = node_tokens[j], state
                    count += 1
                node = last
                continue
            state_at[depth] = state
            for j in range(token_lo[node], token_lo[node + 1]):
                if len(members) == 0:  # the trie's tokens are the tokens
                    lo, hi, direct = 0, 1, True
                else:
                    lo, hi, direct = member_bounds[node_tokens[j]], member_bounds[node_tokens[j] + 1], False
                tokens, targets = _room(tokens, targets, count, hi - lo)
                for m in range(lo, hi):
                    tokens[count] = node_tokens[j] if direct else members[m]
                    targets[count] = state
                    count += 1
            node += 1
        offsets[k + 1] = count
        if count > max_entries:
            offsets[k + 1:] = count
            break
    return offsets, tokens[:count], targets[:count]


@njit(cache=True, nogil=True, boundscheck=False)
def _rows_from_segments(segment_of, segment_offsets, segment_tokens, segment_targets, offsets, vocab_size,
                        num_states):
    """Row q: the segments ``segment_of[q]`` (-1: none) one after another, then sorted by token."""
    total = offsets[-1]
    tokens, targets = np.empty(total, np.int32), np.empty(total, np.int32)
    seen = np.zeros((vocab_size + 31) // 32, dtype=np.uint32)  # _sort_row's scratch
    target_of = np.empty(vocab_size, dtype=np.int32)
    for q in range(segment_of.shape[0]):
        count = offsets[q]
        for c in range(segment_of.shape[1]):
            k = segment_of[q, c]
            if k < 0:
                continue
            lo, hi = segment_offsets[k], segment_offsets[k + 1]
            tokens[count:count + hi - lo] = segment_tokens[lo:hi]
            targets[count:count + hi - lo] = segment_targets[lo:hi]
            count += hi - lo
        _sort_row(tokens, targets, offsets[q], count, seen, target_of, num_states)
    return tokens, targets


@dataclass(frozen=True, eq=False)
class Segments:
    """Rows as segments: row q is the segments ``segment_of[q, c]`` (-1: none; c a first symbol of the trie), each
    segment k the entries ``tokens[offsets[k]:offsets[k + 1]]`` (with ``targets``), in trie order. A segment serves
    every state whose first symbol c leads to the same state."""

    segment_of: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    targets: np.ndarray


def _distinct_sets(row_of: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The common sets stored once each: per state the index of its set among the distinct ones (-1: none), and
    those sets, numbered in order of first use."""
    distinct: dict[bytes, int] = {}
    index = np.array([distinct.setdefault(w.tobytes(), len(distinct)) for w in words], dtype=np.int32)
    first = np.unique(index, return_index=True)[1]  # each distinct set's first row (sets numbered in order)
    common_row = np.where(row_of >= 0, index[np.maximum(row_of, 0)] if len(index) else -1, -1).astype(np.int32)
    return common_row, np.ascontiguousarray(words[first])


@njit(cache=True, nogil=True, boundscheck=False)
def _split_common(segment_of, segment_offsets, segment_tokens, segment_targets, num_states, vocab_size, num_words,
                  min_count, rows_sorted):
    """``TokenTransitions.compact``'s pass, over rows given as segments (row q: the segments ``segment_of[q, c]``,
    -1: none; a listed row is one segment): per row its most common target, where it takes ``min_count`` entries
    (-1: none) — those entries become bits of the row's set (``words[row_of[q]]``), the rest stay listed, sorted by
    token (as they come where ``rows_sorted``). Returns (offsets, tokens, targets) of the listed entries, the common
    targets, ``row_of`` and the sets. A row's counts are the sums of its segments' per-target counts, taken once
    per segment: rows that share segments (a free key's trie states) are not counted entry by entry again."""
    S, C = segment_of.shape
    K = len(segment_offsets) - 1
    counts = np.zeros(num_states, np.int64)
    # per segment, its distinct targets with their counts (a few each); sized by a first pass
    summary_offsets = np.zeros(K + 1, np.int64)
    for k in range(K):
        distinct = 0
        for i in range(segment_offsets[k], segment_offsets[k + 1]):
            if counts[segment_targets[i]] == 0:
                distinct += 1
            counts[segment_targets[i]] += 1
        for i in range(segment_offsets[k], segment_offsets[k + 1]):
            counts[segment_targets[i]] = 0
        summary_offsets[k + 1] = summary_offsets[k] + distinct
    summary_targets = np.empty(summary_offsets[K], np.int32)
    summary_counts = np.empty(summary_offsets[K], np.int64)
    for k in range(K):
        m = summary_offsets[k]
        for i in range(segment_offsets[k], segment_offsets[k + 1]):
            counts[segment_targets[i]] += 1
        for i in range(segment_offsets[k], segment_offsets[k + 1]):
            t = segment_targets[i]
            if counts[t] > 0:
                summary_targets[m], summary_counts[m] = t, counts[t]
                counts[t] = 0
                m += 1
    common = np.full(S, -1, np.int32)
    listed, sets = 0, 0
    for q in range(S):
        best, best_count, total = -1, 0, 0
        for c in range(C):
            k = segment_of[q, c]
            if k >= 0:
                total += segment_offsets[k + 1] - segment_offsets[k]
        if total >= min_count:
            for c in range(C):
                k = segment_of[q, c]
                if k < 0:
                    continue
                for j in range(summary_offsets[k], summary_offsets[k + 1]):
                    t = summary_targets[j]
                    counts[t] += summary_counts[j]
                    if counts[t] > best_count:
                        best, best_count = t, counts[t]
            for c in range(C):
                k = segment_of[q, c]
                if k < 0:
                    continue
                for j in range(summary_offsets[k], summary_offsets[k + 1]):
                    counts[summary_targets[j]] = 0
        if best_count >= min_count:
            common[q] = best
            sets += 1
            listed += total - best_count
        else:
            listed += total
    words = np.zeros((sets, num_words), np.uint32)
    row_of = np.full(S, -1, np.int32)
    offsets = np.zeros(S + 1, np.int64)
    tokens, targets = np.empty(listed, np.int32), np.empty(listed, np.int32)
    seen = np.zeros(num_words, dtype=np.uint32)  # _sort_row's scratch
    target_of = np.empty(vocab_size, dtype=np.int32)
    n, r = 0, 0
    for q in range(S):
        best = common[q]
        for c in range(C):
            k = segment_of[q, c]
            if k < 0:
                continue
            for i in range(segment_offsets[k], segment_offsets[k + 1]):
                t = segment_tokens[i]
                if best >= 0 and segment_targets[i] == best:
                    words[r, t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                else:
                    tokens[n], targets[n] = t, segment_targets[i]
                    n += 1
        if not rows_sorted:
            _sort_row(tokens, targets, offsets[q], n, seen, target_of, num_states)
        if best >= 0:
            row_of[q] = r
            r += 1
        offsets[q + 1] = n
    return offsets, tokens, targets, common, row_of, words


_FIRST_CAPACITY_ROWS = 4  # token transitions first try arrays for this many vocabulary-wide rows
_WALK_CHUNK = 1 << 20  # entries per ``_walk`` call between two budget checks (more than any one row: a vocabulary)


def state_row(table: np.ndarray, trie: VocabularyTrie, state: int) -> tuple[np.ndarray, np.ndarray]:
    """The tokens readable from one state of ``table`` (states x bytes, C-contiguous) over a byte trie, ascending,
    and the states they reach (a lazy guide's row on first visit): the walk ``GrowingRow`` makes over a table built
    whole, in one compiled call (a literal's state reads a few tokens, and ``GrowingRow``'s setup was two thirds of
    its ~40 µs)."""
    tokens, targets, count = _state_row(table, state, trie.node_depth, trie.node_byte, trie.subtree_end, trie.token_lo,
                                        trie.node_tokens, trie.max_depth, trie.vocab_size, trie.subtree_bytes)
    if 2 * count < len(tokens):  # (a short row does not hold the vocabulary-sized buffers: ``GrowingRow.step``)
        return tokens[:count].copy(), targets[:count].copy()
    return tokens[:count], targets[:count]


@njit(cache=True, nogil=True, boundscheck=False)
def _state_row(table, state, node_depth, node_byte, subtree_end, token_lo, node_tokens, max_depth, vocab_size,
               subtree_bytes):
    """``state_row``'s walk. A node whose byte loops on the state it is read in, and whose whole subtree spells only
    bytes looping there (``subtree_bytes``), hands its subtree's tokens to that state without walking it: a free
    string's body reads most of the vocabulary so (its ASCII tokens; a character of several bytes goes through
    states of its own), a third of the trie's nodes instead of all of them."""
    state_at = np.empty(max_depth + 1, dtype=np.int64)
    state_at[0] = state
    tokens, targets = np.empty(vocab_size, dtype=np.int32), np.empty(vocab_size, dtype=np.int32)
    loops = np.zeros((table.shape[0], 4), dtype=np.uint64)  # per state: the bytes that lead back to it
    known = np.zeros(table.shape[0], dtype=np.int8)
    count, node = 0, 1
    while node < len(node_byte):
        depth = node_depth[node]
        source = state_at[depth - 1]
        reached = table[source, node_byte[node]]
        if reached < 0:
            node = subtree_end[node]
            continue
        if reached == source and known[source] == 0:
            _learn_loops(table, source, loops, known)
        if reached == source and known[source] == 1 and subtree_end[node] - node >= _TAKEN_WHOLE_MIN and \
                _loops_over(loops, source, subtree_bytes[node]):
            end = subtree_end[node]
            for k in range(token_lo[node], token_lo[end]):
                tokens[count], targets[count] = node_tokens[k], source
                count += 1
            node = end
            continue
        state_at[depth] = reached
        for k in range(token_lo[node], token_lo[node + 1]):
            tokens[count], targets[count] = node_tokens[k], reached
            count += 1
        node += 1
    _sort_row(tokens, targets, 0, count, np.zeros((vocab_size + 31) // 32, dtype=np.uint32),
              np.empty(vocab_size if 16 * count >= (vocab_size + 31) // 32 else 0, dtype=np.int32), table.shape[0])
    return tokens, targets, count


class GrowingRow:
    """The row of one state of a table built as it is walked (``automata.grammar.pushdown``: a state's byte row is
    filled on request): one scan of the vocabulary trie that stops where it meets a state whose row is not built
    yet at a node with children (``step`` returns that state; the caller builds its row and calls ``step`` again
    with the grown table), and resumes there. ``tokens``/``targets`` once ``step`` returns None: ascending, as
    ``state_row``'s.

    ``nodes``: scan only those nodes' subtrees (disjoint), ``states`` being the states of their parents (default:
    the whole trie from the root, in state ``states``). ``exits`` (``step``'s; bool per state): a node whose state
    is flagged is not entered — its subtree's tokens are left out of the row and the node and its parent's state are
    listed in ``exit_nodes``, ``exit_parents`` instead (a relative configuration that pops below its base: the rest
    depends on the base)."""

    def __init__(self, trie: VocabularyTrie, states, nodes=None):
        self.trie, self.count, self.segment = trie, 0, 0
        if nodes is None:
            self.starts = np.array([1], dtype=np.int64)
            self.ends = np.array([len(trie.node_byte)], dtype=np.int64)
            self.parents = np.array([states], dtype=np.int64)
            size = trie.vocab_size
        else:
            self.starts = np.asarray(nodes, dtype=np.int64)
            self.ends = trie.subtree_end[self.starts].astype(np.int64)
            self.parents = np.asarray(states, dtype=np.int64)
            size = int((trie.token_lo[self.ends] - trie.token_lo[self.starts]).sum())
        self.node = int(self.starts[0]) if len(self.starts) else 0
        self.state_at = np.empty(trie.max_depth + 1, dtype=np.int64)
        self.tokens, self.targets = np.empty(size, np.int32), np.empty(size, np.int32)
        self.exit_nodes, self.exit_parents, self.num_exits = np.empty(64, np.int64), np.empty(64, np.int64), 0

    def step(self, table: np.ndarray, expanded: np.ndarray, exits: np.ndarray | None = None) -> int | None:
        """Scan on; the state whose row is wanted, or None when done. ``exits``: see the class (the current array,
        as the table grows)."""
        t = self.trie
        exits = exits if exits is not None else np.zeros(0, dtype=np.bool_)
        while True:
            self.segment, self.node, self.count, self.num_exits = _walk_growing(
                table, expanded, exits, t.node_depth, t.node_byte, t.subtree_end, t.token_lo, t.node_tokens,
                self.state_at, self.starts, self.ends, self.parents, self.segment, self.node, self.count, self.tokens,
                self.targets, self.exit_nodes, self.exit_parents, self.num_exits)
            if self.num_exits < len(self.exit_nodes):
                break
            self.exit_nodes = np.concatenate([self.exit_nodes, self.exit_nodes])  # (full: grown, then resumed)
            self.exit_parents = np.concatenate([self.exit_parents, self.exit_parents])
        if self.segment < len(self.starts):
            return int(table[self.state_at[t.node_depth[self.node] - 1], t.node_byte[self.node]])
        seen = np.zeros((t.vocab_size + 31) // 32, dtype=np.uint32)
        _sort_row(self.tokens, self.targets, 0, self.count, seen, np.empty(t.vocab_size, dtype=np.int32),
                  table.shape[0])
        # (a short row is copied out of the vocabulary-sized buffers: a lazy guide keeps its last 64 rows, and views
        # held them whole — 605 rows of a Github_medium walk on Llama-3 held 621 MB for 4.2 MB of entries)
        tokens, targets = self.tokens[:self.count], self.targets[:self.count]
        if 2 * self.count < len(self.tokens):
            tokens, targets = tokens.copy(), targets.copy()
        self.tokens, self.targets = tokens, targets
        self.exit_nodes, self.exit_parents = self.exit_nodes[:self.num_exits], self.exit_parents[:self.num_exits]
        return None


@njit(cache=True, nogil=True, boundscheck=False)
def _walk_growing(table, expanded, exits, node_depth, node_byte, subtree_end, token_lo, node_tokens, state_at, starts,
                  ends, parents, segment, node, count, tokens, targets, exit_nodes, exit_parents, num_exits):
    while segment < len(starts):
        state_at[node_depth[starts[segment]] - 1] = parents[segment]  # (the scan resumes inside it: set again)
        end = ends[segment]
        while node < end:
            depth = node_depth[node]
            state = table[state_at[depth - 1], node_byte[node]]
            if state < 0:
                node = subtree_end[node]
                continue
            if len(exits) and exits[state]:  # popped below the base: the subtree is the base's to read
                if num_exits == len(exit_nodes):
                    return segment, node, count, num_exits
                exit_nodes[num_exits], exit_parents[num_exits] = node, state_at[depth - 1]
                num_exits += 1
                node = subtree_end[node]
                continue
            if not expanded[state] and subtree_end[node] > node + 1:  # its children read its row: built first
                return segment, node, count, num_exits
            state_at[depth] = state
            for k in range(token_lo[node], token_lo[node + 1]):
                tokens[count], targets[count] = node_tokens[k], state
                count += 1
            node += 1
        segment += 1
        if segment < len(starts):
            node = starts[segment]
    return segment, node, count, num_exits


def _walk_checked(walk: tuple, origin: int, count_only: bool, max_entries: int, offsets: np.ndarray,
                  tokens: np.ndarray, targets: np.ndarray) -> int:
    """``_walk`` in calls of at most ``_WALK_CHUNK`` entries, the compile's budget checked between them
    (``automata.budget``: a 50M-entry walk is seconds of compiled code that cannot check)."""
    num_states = walk[0].shape[0]
    capacity = max_entries if count_only else len(tokens)
    chunk = _WALK_CHUNK
    while True:
        checkpoint()
        limit = min(int(offsets[origin]) + chunk, capacity)
        if count_only:
            stopped = _walk(*walk, origin, num_states, True, limit, offsets, tokens, targets)
        else:
            stopped = _walk(*walk, origin, num_states, False, max_entries, offsets, tokens[:limit], targets[:limit])
        if stopped == num_states or limit == capacity:
            return stopped
        chunk = _WALK_CHUNK if stopped > origin else capacity  # (a row longer than a chunk: the rest at once)
        origin = stopped


@njit(cache=True, nogil=True, boundscheck=False)
def _walk(table, node_depth, node_byte, subtree_end, token_lo, node_tokens, members, member_bounds, vocab_size,
          subtree_bytes, first_origin, end_origin, count_only, max_entries, offsets, tokens, targets):
    """Walk the preorder trie from the states ``first_origin..end_origin - 1`` of ``table`` (states x symbols): write the tokens
    readable from each state and the states they reach as row ``offsets[q]:offsets[q + 1]`` of
    ``tokens``/``targets``, sorted by token (``offsets[first_origin]`` must be set), stopping before the first row
    that does not fit; or, ``count_only``, set ``offsets`` alone, stopping past ``max_entries``. Returns the state
    it stopped at (``end_origin``: all done). One forward scan per origin: a live node records its state at its
    depth (its descendants read their parent's there), a dead one skips its subtree. The tokens of a trie of byte
    classes are representatives, each standing for ``members[member_bounds[r]:member_bounds[r + 1]]``
    (``members`` is empty for a trie of bytes). A subtree read back into the state it is entered from, every byte
    of it looping there (``subtree_bytes``, of a byte trie; empty: none known), is taken whole (``_state_row``).

    Rows come out in trie order and are sorted in place (``_sort_row``): sorting all (origin, token, target) keys
    at the end cost more than the walk. Growing the outputs token by token inside the loop made the JSON object's
    walk on GPT-2 3.7x slower (6.8 vs 1.8 ms for 100k entries)."""
    capacity = max_entries if count_only else len(tokens)
    state_at = np.empty(int(node_depth.max()) + 1, dtype=np.int64)  # node_depth holds the root at least
    seen = np.zeros((vocab_size + 31) // 32, dtype=np.uint32)  # _sort_row's scratch
    target_of = np.empty(vocab_size, dtype=np.int32)
    count = offsets[first_origin]
    n = len(node_byte)
    loops = np.zeros((table.shape[0], 4), dtype=np.uint64)  # per state: the bytes that lead back to it
    known = np.zeros(table.shape[0], dtype=np.int8)
    for origin in range(first_origin, end_origin):
        start = count
        state_at[0] = origin
        node = 1
        while node < n:
            depth = node_depth[node]
            source = state_at[depth - 1]
            state = table[source, node_byte[node]]
            if state < 0:
                node = subtree_end[node]
                continue
            if state == source and len(subtree_bytes) and known[source] == 0:
                _learn_loops(table, source, loops, known)
            if state == source and len(subtree_bytes) and known[source] == 1 and \
                    subtree_end[node] - node >= _TAKEN_WHOLE_MIN and _loops_over(loops, source, subtree_bytes[node]):
                end = subtree_end[node]
                if count + token_lo[end] - token_lo[node] > capacity:
                    return origin
                if count_only:
                    count += token_lo[end] - token_lo[node]
                else:
                    for k in range(token_lo[node], token_lo[end]):
                        tokens[count], targets[count] = node_tokens[k], state
                        count += 1
                node = end
                continue
            state_at[depth] = state
            if len(members) == 0:  # the trie's tokens are the tokens
                if count + token_lo[node + 1] - token_lo[node] > capacity:
                    return origin
                if count_only:
                    count += token_lo[node + 1] - token_lo[node]
                else:
                    for k in range(token_lo[node], token_lo[node + 1]):
                        tokens[count], targets[count] = node_tokens[k], state
                        count += 1
            else:
                for k in range(token_lo[node], token_lo[node + 1]):
                    lo, hi = member_bounds[node_tokens[k]], member_bounds[node_tokens[k] + 1]
                    if count + hi - lo > capacity:
                        return origin
                    if count_only:
                        count += hi - lo
                    else:
                        for m in range(lo, hi):
                            tokens[count], targets[count] = members[m], state
                            count += 1
            node += 1
        if not count_only:
            _sort_row(tokens, targets, start, count, seen, target_of, table.shape[0])
        offsets[origin + 1] = count
    return end_origin


# A subtree is taken whole (``_loops_over``) from this many nodes, and only by a state that loops on every ASCII
# letter and digit (``_learn_loops``): asking costs a few loads at every node a walk enters. A state looping on most
# bytes but not all (a free text that must hold some hex digits) asked at nearly every node and rarely gained
# (measured on such a DFA's wide rows, Llama-3: 93 ms walked plainly, 168 ms asking everywhere, 117 ms with the
# gate); a free string's body: 2.5 ms plainly, 1.36 ms from 16 nodes, 1.63 from 64, 2.06 from 256.
_TAKEN_WHOLE_MIN = 16
_DIGITS = np.uint64(0x03FF000000000000)  # bytes 0x30-0x39, in the first 64-bit word
_LETTERS = np.uint64(0x07FFFFFE07FFFFFE)  # bytes 0x41-0x5A and 0x61-0x7A, in the second


@njit(cache=True, nogil=True, boundscheck=False)
def _room(tokens, targets, count, more):
    """``tokens``, ``targets`` (their first ``count`` entries kept) with room for ``more`` past them: grown to twice
    their size and more where they are full."""
    if count + more <= len(tokens):
        return tokens, targets
    capacity = 2 * len(tokens) + more
    grown_tokens, grown_targets = np.empty(capacity, np.int32), np.empty(capacity, np.int32)
    grown_tokens[:count], grown_targets[:count] = tokens[:count], targets[:count]
    return grown_tokens, grown_targets


@njit(cache=True, nogil=True, boundscheck=False)
def _learn_loops(table, state, loops, known):
    """Fill ``loops[state]``, the bytes that lead ``state`` back to itself, and ``known[state]``: 1 where they
    include every ASCII letter and digit, else 2 (a subtree of 64 nodes or more nearly always spells some letter or
    digit: a state that does not loop on all of them is not asked node by node). ``known`` is 0 before."""
    for b in range(table.shape[1]):
        if table[state, b] == state:
            loops[state, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    known[state] = 2
    if (loops[state, 0] & _DIGITS) == _DIGITS and (loops[state, 1] & _LETTERS) == _LETTERS:
        known[state] = 1


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _loops_over(loops, state, spelled):
    """Whether every byte of ``spelled`` (256 bits) is among ``loops[state]``."""
    for w in range(4):
        if spelled[w] & ~loops[state, w]:
            return False
    return True


@njit(cache=True, nogil=True, boundscheck=False)
def _subtree_bytes(node_byte, subtree_end):
    n = len(node_byte)
    bits = np.zeros((n, 4), dtype=np.uint64)
    for g in range(n - 1, 0, -1):  # (children come after their parent in preorder: done before it)
        b = node_byte[g]
        bits[g, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
        child = g + 1
        while child < subtree_end[g]:
            for w in range(4):
                bits[g, w] |= bits[child, w]
            child = subtree_end[child]
    return bits


@njit(cache=True, nogil=True, boundscheck=False)
def _sort_row(tokens, targets, lo, hi, seen, target_of, num_states):
    """Sort entries ``lo:hi`` by token (tokens are distinct): a short row by sorting (token, target) keys, a long
    one by marking its tokens in the bitmap ``seen`` (all zero, and left so) and reading them back in order —
    linear in the row plus a word per 32 vocabulary tokens."""
    if 16 * (hi - lo) < len(seen):
        keys = tokens[lo:hi].astype(np.int64) * num_states + targets[lo:hi]
        keys.sort()
        for i in range(hi - lo):
            tokens[lo + i], targets[lo + i] = keys[i] // num_states, keys[i] % num_states
        return
    for i in range(lo, hi):
        t = tokens[i]
        seen[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        target_of[t] = targets[i]
    k = lo
    for w in range(len(seen)):
        if seen[w]:
            for b in range(32):
                if (seen[w] >> np.uint32(b)) & 1:
                    tokens[k] = w * 32 + b
                    targets[k] = target_of[w * 32 + b]
                    k += 1
            seen[w] = 0


@njit(cache=True, nogil=True, boundscheck=False)
def _preorder_trie(padded, lengths):
    """The trie of spellings given in lexicographic order: per node its depth, byte and subtree end (preorder
    ids), and each spelling's node. A spelling adds the nodes below its common prefix with the one before."""
    total = 1 + int(lengths.sum())
    node_depth = np.zeros(total, dtype=np.int64)
    node_byte = np.zeros(total, dtype=np.int64)
    node_of = np.empty(len(lengths), dtype=np.int64)
    path = np.zeros(padded.shape[1] + 1, dtype=np.int64)  # node ids along the current spelling
    n = 1
    for i in range(len(lengths)):
        length = lengths[i]
        common = 0
        if i > 0:
            most = min(length, lengths[i - 1])
            while common < most and padded[i, common] == padded[i - 1, common]:
                common += 1
        for d in range(common + 1, length + 1):
            node_depth[n], node_byte[n] = d, padded[i, d - 1]
            path[d] = n
            n += 1
        node_of[i] = path[length]
    # a subtree ends at the next node no deeper than its root
    subtree_end = np.full(n, n, dtype=np.int64)
    stack = np.empty(padded.shape[1] + 1, dtype=np.int64)
    top = 0
    for g in range(n):
        while top and node_depth[stack[top - 1]] >= node_depth[g]:
            top -= 1
            subtree_end[stack[top]] = g
        stack[top] = g
        top += 1
    return node_depth[:n], node_byte[:n], subtree_end, node_of
