"""A choice of keys served: a fragment compiled once for any key, and the words it must tell apart as it is written.

A JSON object open to other keys reads, after a comma, either one of its declared keys or any key *but* the
declared ones. Written out, "any key but these" is a trie of the declared names, and each trie state is a string
state whose token row spans the vocabulary: such fragments were nearly all of a new schema's compile (JSON on
Llama-3, renamed Github_medium schemas: 95 %). Here the fragment is compiled for *any* key instead (one regex that
every schema with the same prefix and closing shares: ``product.compiler.skeleton.KeyChoice``), and the declared
names — the words — are told apart while the text is written:

- a state is (trie node, state of the shared fragment's guide): the trie of the words' texts (with the prefix),
  node 0 once the text has left it (the key is no word: the fragment's own masks and moves), a word's last node
  once the key is that word;
- a mask is the shared guide's, less the tokens that complete a word not allowed here (declared elsewhere in the
  object, or its value dead) and the tokens into a trie node from which nothing allowed goes on;
- at the fragment's exit the key's class picks the next instance: the word's own, or the free key's.

Exact, and never a dead end, because the shared guide's language is the key choice's without the words' values,
its masks are exact and dead-end free for it, and the key's texts are prefix-free (``KeyChoice``'s invariant): a
key is a word exactly when its text ends where the word's does. A trie node is live when the shared guide allows a
token there that leaves the trie (whatever follows is a key no word is, which the shared guide completes) or one
into a live node or an allowed word; the few tokens that stay in the trie are found by walking the trie, not the
vocabulary (``_relevant``).

Leaves out: compiling (``product.stitched``), cutting (``product.compiler.skeleton``).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict

import numpy as np

from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.compiler.skeleton import _single_byte_tokens
from product.compiler.tables import per_automaton, vocabulary_trie
from product.runtime.guide import Guide, _uint32_rows

__all__ = ["KeyedGuide"]

_REJECTED = -1  # a word's class where it is not allowed here
_OUT = 0  # the trie node of a text that left the trie


def _token_texts(canonical: CanonicalAutomaton) -> tuple[list[bytes], list[bytes], list[int], int]:
    """Every token's bytes (b"" for special tokens), the texts sorted with their ids (for the tokens starting with a
    given text: one ``bisect``), and the longest token's length."""
    def build():
        # (the vocabulary trie's preorder is the texts' sorted order, ties by id: read off it, not sorted again —
        # sorting 128k texts in Python was 0.28 s of the first choice of keys a process met)
        trie = vocabulary_trie(canonical)
        blob, offsets = canonical.token_blob.tobytes(), canonical.token_offsets.tolist()
        texts = [blob[a:b] if has else b"" for a, b, has in
                 zip(offsets[:-1], offsets[1:], canonical.token_has_bytes.tolist())]
        ids = trie.node_tokens.tolist()
        return texts, [texts[t] for t in ids], ids, trie.max_depth

    return per_automaton(canonical, "token texts, sorted", build)


def _allowed_bits(words: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """bool per token of ``tokens`` (int64): its bit in the packed mask ``words``."""
    return ((words[tokens >> 5] >> (tokens & 31).astype(np.uint32)) & 1).astype(bool)


# bytes whose tokens are tried first to show a trie node live (a token that leaves the trie): digits first, which
# pre-tokenizers split from letters and punctuation (a piece boundary: no merge forbids them after a key's token),
# then common key characters
_WITNESS_BYTES = b"0123456789_-etaoinsrhldcumfpgwybvkxjqzETAOINSRHLDCUMFPGWYBVKXJQZ"
_WITNESSES = 12


class _KeyTrie:
    """The trie of a choice of keys' words (their texts, prefix included): node 1 the root (nothing read), node 0
    (``_OUT``) a text that left it; per node its children by byte and the word ending there (None: none). What each
    node's tokens do is computed once per trie (``relevant``, ``witnesses``) and shared by its instances."""

    def __init__(self, canonical: CanonicalAutomaton, words: tuple[bytes, ...]):
        self.children: list[dict[int, int]] = [{}, {}]
        self.word: list[int | None] = [None, None]
        for w, text in enumerate(words):
            node = 1
            for byte in text:
                nxt = self.children[node].get(byte)
                if nxt is None:
                    nxt = self.children[node][byte] = len(self.children)
                    self.children.append({})
                    self.word.append(None)
                node = nxt
            self.word[node] = w
        self._texts, self._sorted, self._sorted_ids, self._longest = _token_texts(canonical)
        self._single = _single_byte_tokens(canonical)
        self._relevant: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._witnesses: dict[int, list[int]] = {}
        self.lock = threading.Lock()

    def walk(self, node: int, text: bytes) -> int:
        """The node after ``text`` from ``node``: ``_OUT`` once it leaves the trie, a word's end once it reaches
        one (the rest of the text is the shared guide's closing)."""
        for byte in text:
            node = self.children[node].get(byte, _OUT)
            if node == _OUT or self.word[node] is not None:
                return node
        return node

    def relevant(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokens that from ``node`` stay in the trie or reach a word's end, and the node each reaches: walked
        along the trie (each text a dictionary's lookup, the tokens past a word's end one range of the sorted
        texts), never along the vocabulary."""
        with self.lock:
            found = self._relevant.get(node)
            if found is None:
                tokens, reached = [], []
                todo = [(node, b"")]
                while todo:
                    at, text = todo.pop()
                    for byte, child in self.children[at].items():
                        longer = text + bytes([byte])
                        if self.word[child] is not None:  # a word's end: every token starting so reaches it
                            lo = bisect.bisect_left(self._sorted, longer)
                            hi = bisect.bisect_left(self._sorted, longer + b"\xff" * (self._longest + 1), lo)
                            tokens += self._sorted_ids[lo:hi]
                            reached += [child] * (hi - lo)
                            continue
                        i = bisect.bisect_left(self._sorted, longer)
                        if i < len(self._sorted) and self._sorted[i] == longer:
                            tokens.append(self._sorted_ids[i])
                            reached.append(child)
                        if len(longer) < self._longest:
                            todo.append((child, longer))
                found = self._relevant[node] = (np.array(tokens, dtype=np.int64), np.array(reached, dtype=np.int64))
            return found

    def witnesses(self, node: int) -> list[int]:
        """A few single-byte tokens that leave the trie from ``node`` (candidates to show it is live)."""
        with self.lock:
            found = self._witnesses.get(node)
            if found is None:
                children = self.children[node]
                found = [int(self._single[b]) for b in _WITNESS_BYTES if b not in children and self._single[b] >= 0]
                found = self._witnesses[node] = found[:_WITNESSES]
            return found


_MAX_TRIES = 1024  # tries kept per automaton for the next guide over the same words (a guide keeps its own)


def _key_trie(canonical: CanonicalAutomaton, words: tuple[bytes, ...]) -> _KeyTrie:
    """The trie of ``words``, one per automaton and word list (the instances of one object share it); the least
    recently used forgotten past ``_MAX_TRIES``, so a server compiling schema after schema does not grow."""
    tries, lock = per_automaton(canonical, "key tries", lambda: (OrderedDict(), threading.Lock()))
    with lock:
        trie = tries.get(words)
        if trie is None:
            trie = tries[words] = _KeyTrie(canonical, words)
            if len(tries) > _MAX_TRIES:
                tries.popitem(last=False)
        else:
            tries.move_to_end(words)
        return trie


class KeyedGuide:
    """The guide of one instance of a key choice: ``inner`` (the shared fragment's guide) and ``words`` (the texts,
    prefix included, of the words the key must be told apart from), ``classes[w]`` the class of word w here
    (1, 2, ...: ``exit_key`` reports it at the exit; ``_REJECTED``: not allowed). States: inner state * trie nodes +
    trie node (the inner guide may be a ``LazyGuide``, whose states are numbered as met: no size is fixed). Read by
    ``StitchedGuide`` as a fragment guide (masks through ``_fill_row``)."""

    _plain_masks = False

    def __init__(self, inner, canonical: CanonicalAutomaton, words: list[bytes], classes: list[int]):
        self._inner = inner
        self._M = inner._M
        self.num_words = inner.num_words
        self._trie = _key_trie(canonical, tuple(words))
        self._size = len(self._trie.children)  # (trie nodes: a state's low part)
        self._inner_exit_key = getattr(inner, "exit_key", None)  # (a LazyGuide names its exits by node key)
        self._classes = list(classes)
        self._texts = self._trie._texts
        self._live_of: dict[tuple[int, int], bool] = {}
        self._plain_inner = type(inner)._step is Guide._step
        self._lock = threading.RLock()
        self.initial_state = inner.initial_state * self._size + 1

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # ---- what StitchedGuide reads ----
    @property
    def num_nodes(self) -> int:
        return self._inner.num_nodes

    @property
    def memory_bytes(self) -> int:
        return self._inner.memory_bytes

    def _split(self, state: int) -> tuple[int, int]:
        inner, node = divmod(state, self._size)
        if inner < 0:
            raise ValueError(f"{state} is not a state of this guide")
        self._inner._split(inner)
        return node, inner

    def _describe(self, token_id: int) -> str:
        return self._inner._describe(token_id)

    def is_accepting(self, state: int) -> bool:
        return self._inner.is_accepting(state // self._size)

    def exit_key(self, state: int) -> tuple[int, int]:
        """(the shared guide's node — a lazy one's node key, ``state * contexts + context`` —, the key's class: 0 for a
        key that is no word, or another way out)."""
        inner, node = divmod(state, self._size)
        word = self._trie.word[node] if node != _OUT else None
        at = self._inner_exit_key(inner) if self._inner_exit_key is not None else inner // self._M
        return at, self._classes[word] if word is not None and self._classes[word] > 0 else 0

    def _fill_row(self, state: int, words: np.ndarray) -> None:
        node, inner = self._split(state)
        with self._inner._lock:
            words[:] = self._inner._mask(inner)
        if self._in_trie(node):
            with self._lock:
                for token in self._disallowed(node, inner, words):
                    words[token >> 5] &= ~np.uint32(1 << (token & 31))

    def _fill_at(self, state: int, out, address: int) -> None:
        self._fill_row(state, _uint32_rows(out, 1, self.num_words)[0])

    def advance(self, state: int, token_id: int) -> int:
        node, inner = self._split(state)
        after = self._inner.advance(inner, token_id)  # DisallowedTokenError where the shared guide disallows it
        if not self._in_trie(node):
            return after * self._size + node
        reached = self._trie.walk(node, self._texts[token_id]) if token_id < len(self._texts) else _OUT
        if self._in_trie(reached):
            with self._lock:
                ok = self._live(reached, after)
        else:
            ok = reached == _OUT or self._classes[self._trie.word[reached]] != _REJECTED
        if not ok:
            raise DisallowedTokenError(f"token {token_id} ({self._describe(token_id)}) is not allowed in state "
                                       f"{state}: it writes a key that is not allowed here")
        return after * self._size + reached

    def _allows(self, inner: int, token: int) -> bool:
        """Whether the shared guide allows ``token`` in ``inner``: one bit of its rows (``Guide._allows``), not a
        mask; a counted guide's through its step."""
        if self._plain_inner:
            return self._inner._allows(*divmod(inner, self._M), token)
        try:
            self._inner.advance(inner, token)
        except DisallowedTokenError:
            return False
        return True

    # ---- the trie ----
    def _in_trie(self, node: int) -> bool:
        """A node the key's class is not known at yet (not out of the trie, no word's end)."""
        return node != _OUT and self._trie.word[node] is None

    def _disallowed(self, node: int, inner: int, words: np.ndarray) -> list[int]:
        """The tokens the shared guide allows in ``inner`` (its mask ``words``) that this instance does not: those
        completing a word not allowed here, those into a trie node from which nothing allowed goes on."""
        tokens, reached = self._trie.relevant(node)
        allowed = _allowed_bits(words, tokens)
        out = []
        for token, at in zip(tokens[allowed].tolist(), reached[allowed].tolist()):
            if self._in_trie(at):
                if not self._live(at, self._inner.advance(inner, token)):
                    out.append(token)
            elif self._classes[self._trie.word[at]] == _REJECTED:
                out.append(token)
        return out

    def _live(self, node: int, inner: int) -> bool:
        """Whether some text allowed here goes on from (trie node, shared guide's state) to the fragment's exit:
        first a few single-byte tokens that leave the trie, each one step of the shared guide (a token it allows
        there leads to a state it completes, with a key no word is); else from the whole mask."""
        key = (node, inner)
        live = self._live_of.get(key)
        if live is not None:
            return live
        for token in self._trie.witnesses(node):
            if self._allows(inner, token):
                live = True
                break
        else:
            with self._inner._lock:
                words = self._inner._mask(inner).copy()
            tokens, _ = self._trie.relevant(node)
            eos = self._inner.eos_token_ids if self._inner.is_accepting(inner) else ()
            special = int(_allowed_bits(words, np.unique(np.asarray(eos, dtype=np.int64))).sum()) if eos else 0
            allowed = int(np.bitwise_count(words).sum()) - special
            staying = int(_allowed_bits(words, tokens).sum())
            live = allowed > staying or len(self._disallowed(node, inner, words)) < staying
        self._live_of[key] = live
        return live
