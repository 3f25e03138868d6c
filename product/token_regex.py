"""Token-level regex automaton: which vocabulary token moves a byte-DFA state where.

``delta(q, t)`` is the state reached by walking token ``t``'s bytes from regex state ``q`` (the Outlines index).
It is computed by walking the vocabulary as a byte trie, depth first, from every state (a compiled loop): a
byte with no edge skips the node's whole subtree, so the work is the number of live (prefix, state) pairs, not
states x vocabulary. (The walk was level by level in numpy — expand the frontier of (node, origin, current)
triples, drop the dead — at a pass and a temporary per step per level: 21 ms for the JSON object on GPT-2, 1.8 ms
compiled.)

Leaves out: anything about canonical tokenizations (``product.guide`` intersects this with the canonical
automaton) and special tokens (they have no bytes and are never walked).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from numba import njit

from automata.dfa import DFA, concat_aranges, row_bounds, unique_rows
from automata.errors import StateLimitError

__all__ = ["VocabularyTrie", "TokenTransitions"]


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


# Grouping tokens by byte-class sequence costs a pass over the whole vocabulary (30-160 ms at 50k-128k tokens);
# it pays only when the DFA has many byte edges. Measured (GPT-2 / Llama-3, plain vs grouped): enum 45 edges
# 2 vs 119-162 ms; JSON object 995 edges 29-67 vs 101-231 ms; sentence 4,358 edges 928-1,089 vs 261-452 ms;
# email 12,830 edges 732-1,605 vs 267-552 ms.
_GROUPING_MIN_EDGES = 2000


@dataclass(frozen=True, eq=False)
class TokenTransitions:
    """For each state ``q`` of a byte DFA: the tokens that can be read from ``q`` and the states they reach.

    ``tokens[offsets[q]:offsets[q+1]]`` are sorted token ids, ``targets[...]`` the matching states. States are
    the DFA's; ``accepting`` and ``start`` are copied from it.
    """

    offsets: np.ndarray
    tokens: np.ndarray
    targets: np.ndarray
    accepting: np.ndarray
    start: int

    @property
    def num_states(self) -> int:
        return len(self.accepting)

    def row(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.offsets[state], self.offsets[state + 1]
        return self.tokens[lo:hi], self.targets[lo:hi]

    def target(self, state: int, token: int) -> int:
        """``delta(state, token)``, or -1 if the token's bytes leave the language."""
        tokens, targets = self.row(state)
        i = np.searchsorted(tokens, token)
        return int(targets[i]) if i < len(tokens) and tokens[i] == token else -1

    @staticmethod
    def build(dfa: DFA, trie: VocabularyTrie, *, max_entries: int = 50_000_000) -> "TokenTransitions":
        """Walk the trie from every state of ``dfa`` at once (``dfa`` must be over the byte alphabet)."""
        if dfa.alphabet.kind != "bytes":
            raise ValueError("token transitions need a DFA over UTF-8 bytes")
        if dfa.num_states ** 2 * trie.vocab_size >= 1 << 62:  # (origin, token, target) packs into one int64
            raise StateLimitError(f"{dfa.num_states} regex states are too many for token transitions")
        trie_vocab = trie.vocab_size

        num_states = dfa.num_states
        # Bytes the DFA never tells apart form a class; walking class sequences shares all tokens that read alike.
        representative, class_of_byte = unique_rows(dfa.transitions.T)
        grouped = None
        if int((dfa.transitions >= 0).sum()) >= _GROUPING_MIN_EDGES and len(representative) < 256:
            grouped = trie.by_class(class_of_byte.astype(np.uint8))
        if grouped is not None:
            trie, members, member_bounds = grouped
            table = dfa.transitions[:, representative]
        else:
            table = dfa.transitions
        table = np.ascontiguousarray(table)
        walk = (table, trie.node_depth, trie.node_byte, trie.subtree_end, trie.token_lo, trie.node_tokens, max_entries)
        total = _walk(*walk, np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64))
        if total > max_entries:
            raise StateLimitError(f"token transitions exceed max_entries={max_entries} ({num_states} regex states)")
        o, t, q = np.empty(total, np.int64), np.empty(total, np.int32), np.empty(total, np.int64)
        _walk(*walk, o, t, q)
        if grouped is not None:  # representatives back to their member tokens
            count = member_bounds[t + 1] - member_bounds[t]
            total = int(count.sum())
            if total > max_entries:
                raise StateLimitError(f"token transitions exceed max_entries={max_entries} "
                                      f"({num_states} regex states)")
            o, q, t = np.repeat(o, count), np.repeat(q, count), members[concat_aranges(member_bounds[t], member_bounds[t + 1])]
        # Sort by (origin, token) with the target packed into the key: sorting plain int64 keys is 2-5x faster
        # than argsort + gathers (0.25 s for the 7 M entries of the email regex on Llama-3).
        keys = (o * trie_vocab + t.astype(np.int64)) * num_states + q
        keys.sort()
        origin_token, q = np.divmod(keys, num_states)
        o, t = np.divmod(origin_token, trie_vocab)
        offsets = np.searchsorted(o, np.arange(num_states + 1)).astype(np.int64)
        return TokenTransitions(offsets, t.astype(np.int32), q.astype(np.int32), dfa.accepting.copy(), int(dfa.start))


@njit(cache=True, nogil=True, boundscheck=False)
def _walk(table, node_depth, node_byte, subtree_end, token_lo, node_tokens, max_entries, origins, tokens, targets):
    """Walk the preorder trie from every state of ``table`` (states x symbols), writing (origin, token, target)
    of every token readable from each state into the output arrays — or, if they are empty, only counting them
    (stopping past ``max_entries``). Returns the count. One forward scan per origin: a live node records its
    state at its depth (its descendants read their parent's there), a dead one skips its subtree.

    Two passes (count, then fill arrays of the exact size) because growing the outputs inside the loop made the
    JSON object's walk on GPT-2 3.7x slower (6.8 vs 1.8 ms for 100k entries)."""
    fill = len(origins) > 0
    state_at = np.empty(int(node_depth.max()) + 1, dtype=np.int64)  # node_depth holds the root at least
    count = 0
    n = len(node_byte)
    for origin in range(table.shape[0]):
        state_at[0] = origin
        node = 1
        while node < n:
            depth = node_depth[node]
            state = table[state_at[depth - 1], node_byte[node]]
            if state < 0:
                node = subtree_end[node]
                continue
            state_at[depth] = state
            lo, hi = token_lo[node], token_lo[node + 1]
            if fill:
                for k in range(lo, hi):
                    origins[count], tokens[count], targets[count] = origin, node_tokens[k], state
                    count += 1
            else:
                count += hi - lo
                if count > max_entries:
                    return count
            node += 1
    return count


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
