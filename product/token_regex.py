"""Token-level regex automaton: which vocabulary token moves a byte-DFA state where.

``delta(q, t)`` is the state reached by walking token ``t``'s bytes from regex state ``q`` (the Outlines index).
It is computed for every state at once by walking the vocabulary as a trie, level by level, with numpy: the
frontier is the set of (trie node, origin state, current state) triples still alive, and one level of the walk
expands every triple to its node's children and drops those whose byte has no edge. A byte that dies skips the
node's whole subtree, so the work is the number of live (prefix, state) pairs, not states x vocabulary.

Leaves out: anything about canonical tokenizations (``product.guide`` intersects this with the canonical
automaton) and special tokens (they have no bytes and are never walked).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from automata.dfa import DFA, concat_aranges, unique_rows
from automata.errors import StateLimitError

__all__ = ["VocabularyTrie", "TokenTransitions"]


@dataclass(frozen=True, eq=False)
class VocabularyTrie:
    """The byte trie of a vocabulary, stored level by level.

    Invariants: level ``d`` (1-based depth) holds the distinct ``d``-byte prefixes of regular tokens, sorted by
    parent, as ``parents[d]`` (index into level ``d-1``; level 0 is the root alone) and ``byte_of[d]``;
    ``child_start[d-1][p]:child_start[d-1][p+1]`` are the children of node ``p`` of level ``d-1``.
    ``token_offsets[d]``/``token_ids[d]``: the tokens spelled exactly by each node of level ``d`` (several ids
    can share bytes, e.g. ``A`` and its byte-fallback ``<0x41>``).
    """

    vocab_size: int
    parents: list[np.ndarray]
    byte_of: list[np.ndarray]
    child_start: list[np.ndarray]
    token_offsets: list[np.ndarray]
    token_ids: list[np.ndarray]
    padded: np.ndarray  # uint8 [tokens with bytes, depth]: row r spells token ids[r], zero-padded
    lengths: np.ndarray
    ids: np.ndarray

    @property
    def depth(self) -> int:
        return len(self.parents) - 1

    @property
    def num_nodes(self) -> int:
        return sum(len(p) for p in self.parents)

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
        depth = padded.shape[1]
        parents, byte_of, child_start = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], []
        token_offsets, token_ids = [np.zeros(2, np.int64)], [np.zeros(0, np.int32)]
        node_of = np.zeros(len(ids), dtype=np.int64)  # each token's prefix node at the current level
        num_previous = 1
        for d in range(1, depth + 1):
            alive = lengths >= d
            keys = node_of[alive] * 256 + padded[alive, d - 1].astype(np.int64)
            unique, inverse = np.unique(keys, return_inverse=True)  # sorted by parent, then byte
            node_of[alive] = inverse
            parent, byte = unique // 256, unique % 256
            parents.append(parent)
            byte_of.append(byte)
            child_start.append(np.searchsorted(parent, np.arange(num_previous + 1)))
            ends_here = np.flatnonzero(lengths == d)
            order = np.argsort(node_of[ends_here], kind="stable")
            ending_nodes = node_of[ends_here][order]
            token_ids.append(ids[ends_here][order].astype(np.int32))
            token_offsets.append(np.searchsorted(ending_nodes, np.arange(len(unique) + 1)))
            num_previous = len(unique)
        child_start.append(np.zeros(num_previous + 1, dtype=np.int64))  # the deepest level has no children
        return VocabularyTrie(vocab_size, parents, byte_of, child_start, token_offsets, token_ids, padded, lengths, ids)

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
        return np.concatenate([[0], np.cumsum(self.lengths)])


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
        origin = np.arange(num_states, dtype=np.int64)  # frontier: (node at this level, origin, current)
        current = origin.copy()
        node = np.zeros(num_states, dtype=np.int64)
        found_origin, found_token, found_target = [], [], []
        total = 0
        for d in range(1, trie.depth + 1):
            starts = trie.child_start[d - 1]
            counts = starts[node + 1] - starts[node]
            if counts.sum() == 0:
                break
            repeat = np.repeat(np.arange(len(node)), counts)
            child = concat_aranges(starts[node], starts[node + 1])
            nxt = table[current[repeat], trie.byte_of[d][child]]
            keep = nxt >= 0
            node, origin, current = child[keep], origin[repeat[keep]], nxt[keep].astype(np.int64)
            # tokens spelled by the surviving nodes
            offsets = trie.token_offsets[d]
            per = offsets[node + 1] - offsets[node]
            if per.any():
                which = np.repeat(np.arange(len(node)), per)
                pos = concat_aranges(offsets[node], offsets[node + 1])
                found_origin.append(origin[which])
                found_token.append(trie.token_ids[d][pos])
                found_target.append(current[which])
                total += len(which)
                if total > max_entries:
                    raise StateLimitError(f"token transitions exceed max_entries={max_entries} "
                                          f"({num_states} regex states)")
        if found_origin:
            o, t, q = (np.concatenate(x) for x in (found_origin, found_token, found_target))
        else:
            o, t, q = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64)
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
