"""The canonical automaton of a real tokenizer: which token may come next in a canonical tokenization.

A token sequence is *canonical* when it is exactly what the tokenizer produces for the text it decodes to,
encoded as a continuation: no BOS or other added tokens, no dummy prefix (see the README). Three layers decide
it, and this module composes them:

1. **Merges** (``bpe.canonical``): inside one pre-token piece, a tokenization is canonical iff every adjacent
   pair is — the pair test ``next not in forbidden[merge_class[previous]]``, built by Algorithm 3 run on the
   clock of the runtime's merges (exact also for lists converted from tiktoken ranks, like Llama-3's, where
   merges do not fire in rank order).
2. **Pieces** (``bpe.pretokenizer``): the marked-text DFA says where piece boundaries (``#``) may fall. Between
   two tokens there is either a boundary (no merge constraint) or not (the pair test applies); tokens never
   contain one.
3. **Characters**: byte-level tokens may end or start inside a UTF-8 character; byte-fallback tokens
   (``<0xNN>``) spell exactly the characters the vocabulary lacks.

A *context* is what the layers 2-3 remember after a token: the set of marked-DFA states still possible (the
boundary after the token is undecided until the next token) and the bytes of an unfinished character. The
automaton's state — called a *class* in the public API — is the pair (context, merge class of the last
token), packed as ``context * num_merge_classes + merge_class``. Masks need no pair table:

    open context (no unfinished character):
        allowed = boundary_ok[ctx] | (inside_ok[ctx] & ~forbidden[merge_class])
    unfinished character: only tokens completing it, and always inside a piece:
        allowed = completes[ctx] & ~forbidden[merge_class]

Contexts are few (tens with no unfinished character; the rest are sparse rows over the few hundred tokens
that begin with continuation bytes), which is what keeps the automaton as small as the merge table's.

Deliberately not exact, and measured in the tests and README (each errs towards *allowing*, so the runtime's
own output is never rejected): under an NFC normaliser, a base character followed by a combining mark NFC would
compose (characters that never occur in NFC text are excluded); ``ignore_merges`` tokenizers: a whole piece
that is a vocabulary token is that token, and its BPE spelling is allowed too; non-special added tokens
spelled out by regular tokens.
Special tokens are never produced by text and never allowed; EOS is the constraint layer's business.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from automata.dfa import find_sorted, row_bounds, unique_rows
from bpe.canonical import build_merge_automaton
from bpe.errors import TokenizerError, UnsupportedTokenizerError
from bpe.loaders import checked_eos, load_tokenizer
from bpe.model import Tokenizer
from bpe.pretokenizer import Segmentation, build_segmentation
from bpe.storage import atomic_file
from bpe.storage import cache_dir as default_cache_dir
from bpe.unicode_classes import rewritten_by, unicode_source

__all__ = ["CanonicalAutomaton", "DisallowedTokenError", "compile_tokenizer"]

FORMAT_VERSION = 9


class DisallowedTokenError(TokenizerError):
    """A token that may not follow the current class (it would make the tokenization non-canonical)."""


def _utf8_length(lead: int) -> int:
    """Bytes of a UTF-8 character starting with ``lead``; 0 for F8–FF, which start none (a token ending in one
    leaves no unfinished character but undecodable bytes, so no text produces it)."""
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4 if lead < 0xF8 else 0


def _unfinished(tail: bytes) -> tuple[int, int, int, tuple[int, int]]:
    """For the unfinished character ``tail``: its length, the bytes it still needs, the payload bits it holds, and
    the code point range of characters of that length (``(payload << 6 * need) | rest`` must fall in it)."""
    length = _utf8_length(tail[0])
    payload = tail[0] & (0x7F >> length)
    for b in tail[1:]:
        payload = payload << 6 | (b & 0x3F)
    return length, length - len(tail), payload, ((0, 0, 0x80, 0x800, 0x10000)[length],
                                                 (0, 0, 0x7FF, 0xFFFF, 0x10FFFF)[length])


@dataclass(frozen=True, eq=False)
class CanonicalAutomaton:
    """Which tokens may follow, per class, for one tokenizer. Build with ``compile_tokenizer``.

    Arrays (all numpy; the on-disk format stores exactly these):

    - ``merge_class``: int32[V], the merge-table class of each token (-1: never produced inside a piece).
    - ``forbid_order``/``forbid_position``/``forbid_starts``/``forbid_ends``/``forbid_offsets``: merge class c
      forbids ``forbid_order[forbid_starts[i]:forbid_ends[i]]`` for i in ``forbid_offsets[c]:[c+1]``. The last
      merge class forbids everything (a token that must end its piece: ``ignore_merges`` whole pieces).
    - ``after_class``: int32[V], the merge class a token leaves behind (``merge_class`` except for whole-piece
      and byte-fallback tokens).
    - ``boundary_next``/``inside_next``: int32[open contexts, V]: context after the token when a boundary
      precedes it / when it may also continue the piece (-1: not allowed that way).
    - ``pending_offsets``/``pending_tokens``/``pending_next``: sparse rows for contexts with an unfinished
      character (context ids ``num_open ..``).
    - ``context_final``: bool[contexts]: the text may end here.
    - ``marked_transitions``/``marked_final``: the pre-tokenizer's marked-text DFA (``bpe.pretokenizer.
      Segmentation``: int32[states, symbols + 1], the last column ``#``), ``symbol_starts``/``symbol_values``: its
      symbol of each code point as runs (code points ``symbol_starts[i]..`` up to the next start have symbol
      ``symbol_values[i]``), ``context_states``: uint64[open contexts], the marked-DFA states each open context may
      be in (bit s: state s). What a character-level question about piece boundaries needs
      (``product.compiler.boundaries``).
    - ``token_blob``/``token_offsets``/``token_has_bytes``/``eos_token_ids``: the vocabulary itself (token t is
      ``token_blob[token_offsets[t]:token_offsets[t+1]]``; special tokens have no bytes), so a compiled
      automaton is all a constraint compiler needs.
    """

    merge_class: np.ndarray
    after_class: np.ndarray
    forbid_order: np.ndarray
    forbid_position: np.ndarray
    forbid_starts: np.ndarray
    forbid_ends: np.ndarray
    forbid_offsets: np.ndarray
    boundary_next: np.ndarray
    inside_next: np.ndarray
    pending_offsets: np.ndarray
    pending_tokens: np.ndarray
    pending_next: np.ndarray
    context_final: np.ndarray
    marked_transitions: np.ndarray
    marked_final: np.ndarray
    symbol_starts: np.ndarray
    symbol_values: np.ndarray
    context_states: np.ndarray
    token_blob: np.ndarray
    token_offsets: np.ndarray
    token_has_bytes: np.ndarray
    eos_token_ids: np.ndarray

    # ---- sizes --------------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.merge_class)

    @property
    def num_merge_classes(self) -> int:
        return len(self.forbid_offsets) - 1

    @property
    def num_open_contexts(self) -> int:
        return self.boundary_next.shape[0]

    @property
    def num_contexts(self) -> int:
        return len(self.context_final)

    @property
    def num_classes(self) -> int:
        """Size of the class space (contexts x merge classes); ids below it are valid classes."""
        return self.num_contexts * self.num_merge_classes

    @property
    def forbidden_entries(self) -> int:
        """Total size of all forbidden sets (the merge table's part of the automaton)."""
        return int((self.forbid_ends - self.forbid_starts).sum())

    @property
    def start_class(self) -> int:
        return 0  # context 0 (nothing read), merge class 0 (forbids nothing)

    @property
    def token_bytes(self) -> list[bytes | None]:
        """The bytes of every token (``None`` for special tokens), as ``Tokenizer.token_bytes``."""
        blob, offsets = self.token_blob.tobytes(), self.token_offsets.tolist()
        return [blob[offsets[t]:offsets[t + 1]] if has else None
                for t, has in enumerate(self.token_has_bytes.tolist())]

    # ---- queries ------------------------------------------------------------------------------------------
    def _split(self, class_id: int) -> tuple[int, int]:
        num_classes, num_merge_classes, _, _ = self._sizes
        if not 0 <= class_id < num_classes:
            raise ValueError(f"class {class_id} is outside 0..{num_classes - 1}")
        return divmod(int(class_id), num_merge_classes)

    @cached_property
    def _sizes(self) -> tuple[int, int, int, int]:
        """(classes, merge classes, vocabulary, open contexts) as plain ints: ``class_after`` runs once per
        generated token, and reading them through the properties above was a third of its time."""
        return self.num_classes, self.num_merge_classes, self.vocab_size, self.num_open_contexts

    def forbidden(self, merge_class: int) -> np.ndarray:
        """bool[V]: tokens that may not follow a token of ``merge_class`` inside one piece."""
        marks = np.zeros(self.vocab_size + 1, dtype=np.int32)
        lo, hi = self.forbid_offsets[merge_class], self.forbid_offsets[merge_class + 1]
        np.add.at(marks, self.forbid_starts[lo:hi], 1)
        np.add.at(marks, self.forbid_ends[lo:hi], -1)
        return (np.cumsum(marks[:-1]) > 0)[self.forbid_position]

    def forbids(self, merge_class: int, tokens: np.ndarray | int) -> np.ndarray | bool:
        """bool per token: whether ``merge_class`` forbids it (a binary search in the class's intervals); for one
        token given as an int, a bool."""
        if type(tokens) is int:
            return self._forbids(merge_class, tokens)
        tokens = np.asarray(tokens)
        lo, hi = self.forbid_offsets[merge_class], self.forbid_offsets[merge_class + 1]
        if lo == hi or not tokens.size:
            return np.zeros(tokens.shape, dtype=bool)
        pos = self.forbid_position[tokens]
        i = np.searchsorted(self.forbid_starts[lo:hi], pos, side="right") - 1
        return (i >= 0) & (pos < self.forbid_ends[lo:hi][np.maximum(i, 0)])

    # One token at a time (``class_after``, run once per generated token), numpy's per-call overhead dominates:
    # a searchsorted on a slice costs 3-6 µs here, ``bisect`` over a memoryview of the same array ~1 µs, and a
    # memoryview item is a Python int. Measured on Llama-3: ``class_after`` 4-11 µs -> ~2 µs.
    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_scalar"}  # memoryviews do not pickle; rebuilt on use

    @cached_property
    def _scalar(self) -> dict[str, memoryview]:
        names = ("forbid_offsets", "forbid_position", "forbid_starts", "forbid_ends", "inside_next", "boundary_next",
                 "pending_offsets", "pending_tokens", "pending_next", "after_class")
        return {name: memoryview(np.ascontiguousarray(getattr(self, name))) for name in names}

    def _forbids(self, merge_class: int, token: int) -> bool:
        """``forbids`` for one token: the interval starting last at or before its position must cover it."""
        s = self._scalar
        position, starts = s["forbid_position"][token], s["forbid_starts"]
        lo = s["forbid_offsets"][merge_class]
        i = bisect.bisect_right(starts, position, lo, s["forbid_offsets"][merge_class + 1])
        return i > lo and position < s["forbid_ends"][i - 1]

    def allowed_after(self, class_id: int) -> np.ndarray:
        """bool[V]: the tokens that may come next in class ``class_id`` (no special tokens, no EOS)."""
        ctx, mc = self._split(class_id)
        if ctx < self.num_open_contexts:
            inside = self.inside_next[ctx] >= 0
            return (self.boundary_next[ctx] >= 0) | (inside & ~self.forbidden(mc))
        lo, hi = self.pending_offsets[ctx - self.num_open_contexts : ctx - self.num_open_contexts + 2]
        out = np.zeros(self.vocab_size, dtype=bool)
        out[self.pending_tokens[lo:hi]] = True
        return out & ~self.forbidden(mc)

    def class_after(self, class_id: int, token_id: int, *, known_allowed: bool = False) -> int:
        """The class reached by appending ``token_id`` in class ``class_id``; ``DisallowedTokenError`` if the
        token may not come next.

        ``known_allowed``: the caller knows the token may come next (a guide's mask said so), so the forbidden-set
        search runs only for the tokens that may either continue the piece or start a new one (0.05% of (context,
        token) pairs on GPT-2 and Llama-3); for any other token the one move it has is the answer. (The search was
        half of a guide's ``advance``.) The result is unspecified for a token that may not come next."""
        ctx, mc = self._split(class_id)
        _, num_merge_classes, vocab_size, num_open_contexts = self._sizes
        if not 0 <= token_id < vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary of {vocab_size}")
        s = self._scalar
        nxt = -1
        if ctx < num_open_contexts:
            inside, boundary = s["inside_next"][ctx, token_id], s["boundary_next"][ctx, token_id]
            if inside >= 0 and ((known_allowed and boundary < 0) or not self._forbids(mc, token_id)):
                nxt = inside
            else:
                nxt = boundary
        else:
            row = ctx - num_open_contexts
            i = find_sorted(s["pending_tokens"], token_id, s["pending_offsets"][row], s["pending_offsets"][row + 1])
            if i >= 0 and (known_allowed or not self._forbids(mc, token_id)):
                nxt = s["pending_next"][i]
        if nxt < 0:
            raise DisallowedTokenError(f"token {token_id} may not follow class {class_id}")
        return nxt * num_merge_classes + s["after_class"][token_id]

    def can_end(self, class_id: int) -> bool:
        """Whether the text may end in class ``class_id`` (no unfinished character or pending boundary)."""
        return bool(self.context_final[self._split(class_id)[0]])

    def accepts(self, token_ids) -> bool:
        """Whether ``token_ids`` is exactly the canonical tokenization of the text it decodes to."""
        c = self.start_class
        try:
            for t in token_ids:
                c = self.class_after(c, int(t))
        except (DisallowedTokenError, ValueError):
            return False
        return self.can_end(c)

    # ---- storage ------------------------------------------------------------------------------------------
    _FIELDS = ("merge_class", "after_class", "forbid_order", "forbid_position", "forbid_starts", "forbid_ends",
               "forbid_offsets", "boundary_next", "inside_next", "pending_offsets", "pending_tokens",
               "pending_next", "context_final", "marked_transitions", "marked_final", "symbol_starts", "symbol_values",
               "context_states", "token_blob", "token_offsets", "token_has_bytes", "eos_token_ids")

    def digest(self, key: str) -> str:
        """SHA-256 over ``key``, the format version and every array (what a saved file is checked against; also
        a name for this automaton that caches built on it can key on)."""
        digest = hashlib.sha256(f"{FORMAT_VERSION}:{key}".encode())
        for name in self._FIELDS:
            a = getattr(self, name)
            digest.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            digest.update(np.ascontiguousarray(a).data)
        return digest.hexdigest()

    def save(self, path: str | os.PathLike, key: str = "") -> None:
        """Write atomically (temp file + rename) as ``.npz`` with a SHA-256 of every array; no pickle."""
        meta = json.dumps({"format": FORMAT_VERSION, "key": key, "sha256": self.digest(key)})
        with atomic_file(path) as f:
            np.savez(f, meta=np.array(meta), **{n: getattr(self, n) for n in self._FIELDS})

    @classmethod
    def load(cls, path: str | os.PathLike, key: str | None = None) -> CanonicalAutomaton:
        """Read and verify a saved automaton (``CacheError`` if it is corrupt, from another format version, or
        — when ``key`` is given — built for another tokenizer)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                arrays = {n: data[n] for n in cls._FIELDS}
        except Exception as exc:
            raise CacheError(f"{path}: not a readable canonical automaton ({type(exc).__name__}: {exc})") from None
        if meta.get("format") != FORMAT_VERSION:
            raise CacheError(f"{path}: format {meta.get('format')}, expected {FORMAT_VERSION}")
        if key is not None and meta.get("key") != key:
            raise CacheError(f"{path}: built for another tokenizer")
        automaton = cls(**arrays)
        if automaton.digest(meta.get("key", "")) != meta.get("sha256"):
            raise CacheError(f"{path}: checksum mismatch (corrupt or modified)")
        return automaton


class CacheError(TokenizerError):
    """A cached automaton that cannot be used (corrupt, other version, other tokenizer)."""


# ----------------------------------------------------------------------------------------------------------
# Building.


def tokenizer_key(tokenizer: Tokenizer) -> str:
    """SHA-256 of everything that decides the canonical automaton: the tokenizer, the format, and where the
    character classes of the pre-tokenizer come from (the installed ``tokenizers``: an automaton built on
    another runtime's Unicode tables is rebuilt, not trusted)."""
    digest = hashlib.sha256()
    for b in tokenizer.token_bytes:
        digest.update(b"\x00" if b is None else len(b).to_bytes(4, "little") + b)
    digest.update(np.ascontiguousarray(tokenizer.merge_table, dtype=np.int32).data)
    digest.update(repr((tokenizer.byte_level, tokenizer.byte_fallback, tokenizer.ignore_merges,
                        [(r.pattern, r.behavior, r.invert) for r in tokenizer.pre_tokenizer],
                        tokenizer.normalizer, sorted(tokenizer.special_token_ids),
                        sorted(tokenizer.added_token_ids), FORMAT_VERSION, unicode_source())).encode())
    if any(step[0] in _PROBED_NORMALIZERS for step in tokenizer.normalizer):
        # the characters these normalisers rewrite are the runtime's since this tag (they were Python's, whose
        # older Unicode disagrees on them; on NFC it agrees): automata cached before it are rebuilt, the others
        # keep their keys
        digest.update(b"normalisers probed from the runtime")
    return digest.hexdigest()


_PROBED_NORMALIZERS = ("nfkc", "nfd", "nfkd", "lowercase")


def compile_tokenizer(source, cache_dir: str | os.PathLike | None = None, *, progress=None,
                      eos_token_ids: list[int] | None = None) -> CanonicalAutomaton:
    """The canonical automaton of ``source`` (anything ``load_tokenizer`` accepts, or a ``Tokenizer``).

    Cached under ``cache_dir`` (default: ``<canonmerge cache>/automata``) by the tokenizer's content hash; a
    corrupt or stale cache file is rebuilt. ``progress(message)`` is called at each build stage.
    ``eos_token_ids`` replaces the EOS ids the source names (or that were guessed from its token names).
    """
    if isinstance(source, Tokenizer):
        tokenizer = source
        if eos_token_ids is not None:
            tokenizer = dataclasses.replace(tokenizer, eos_token_ids=tuple(checked_eos(eos_token_ids)))
    else:
        tokenizer = load_tokenizer(source, eos_token_ids=eos_token_ids)
    key = tokenizer_key(tokenizer)
    path = _cache_file(key, cache_dir)
    automaton = None
    if path.exists():
        try:
            automaton = CanonicalAutomaton.load(path, key)
        except CacheError as exc:
            if progress:
                progress(f"rebuilding: {exc}")
    if automaton is None:
        automaton = build_canonical_automaton(tokenizer, progress=progress)
        automaton.save(path, key)
    eos = np.array(tokenizer.eos_token_ids, dtype=np.int32)
    if not np.array_equal(automaton.eos_token_ids, eos):  # EOS does not decide the automaton, nor its cache key
        automaton = dataclasses.replace(automaton, eos_token_ids=eos)
    return automaton


def cache_path(source, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``compile_tokenizer`` keeps the automaton of ``source``."""
    tokenizer = source if isinstance(source, Tokenizer) else load_tokenizer(source)
    return _cache_file(tokenizer_key(tokenizer), cache_dir)


def _cache_file(key: str, cache_dir: str | os.PathLike | None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "automata"
    return root / f"canonical-{key[:32]}.npz"


def build_canonical_automaton(tokenizer: Tokenizer, *, progress=None) -> CanonicalAutomaton:
    """Build without the cache (see the module docstring for the three layers)."""
    say = progress or (lambda message: None)
    t0 = time.perf_counter()
    V = tokenizer.vocab_size
    say("merge table")
    merges = build_merge_automaton(tokenizer.merge_table, V, tokenizer.base_token_ids)
    say(f"  {merges.num_classes} merge classes in {time.perf_counter() - t0:.1f} s")
    say("pre-tokenizer boundaries")
    segmentation = build_segmentation(tokenizer.pre_tokenizer)
    if segmentation.num_states > 63:
        raise UnsupportedTokenizerError(f"pre-tokenizer automaton has {segmentation.num_states} states (at most 63)")
    say(f"  {segmentation.num_states} marked-text states")
    shapes = _TokenShapes(tokenizer, merges.produced, segmentation.symbols)
    say("contexts")
    builder = _ContextBuilder(tokenizer, segmentation, shapes, merges)
    builder.run()
    say(f"  {builder.num_open} open + {len(builder.pending_rows)} unfinished-character contexts "
        f"in {time.perf_counter() - t0:.1f} s")

    whole_piece_class = merges.num_classes  # forbids everything: the piece must end after the token
    starts = np.append(merges.starts, 0).astype(np.int32)
    ends = np.append(merges.ends, V).astype(np.int32)
    offsets = np.append(merges.offsets, merges.offsets[-1] + 1).astype(np.int64)
    after = merges.class_of.astype(np.int32).copy()
    after[shapes.whole_piece_only] = whole_piece_class
    after[shapes.byte_fallback | shapes.boundary_token] = 0
    after[after < 0] = 0  # never allowed anyway; keeps class ids in range

    pending_offsets = row_bounds(np.array([len(t) for t, _ in builder.pending_rows], dtype=np.int64))
    cat = lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)  # noqa: E731
    index_type = np.int16 if builder.num_contexts < 2**15 else np.int32
    return CanonicalAutomaton(
        merge_class=merges.class_of.astype(np.int32),
        after_class=after,
        forbid_order=merges.order,
        forbid_position=merges.position,
        forbid_starts=starts,
        forbid_ends=ends,
        forbid_offsets=offsets,
        boundary_next=np.array(builder.boundary_rows, dtype=index_type).reshape(builder.num_open, V),
        inside_next=np.array(builder.inside_rows, dtype=index_type).reshape(builder.num_open, V),
        pending_offsets=pending_offsets,
        pending_tokens=cat([t for t, _ in builder.pending_rows], np.int32),
        pending_next=cat([n for _, n in builder.pending_rows], index_type),
        context_final=np.array(builder.final, dtype=bool),
        **_marked_arrays(segmentation, builder.open_states),
        **_vocabulary_arrays(tokenizer),
    )


def _marked_arrays(segmentation: Segmentation, open_states: list[int]) -> dict[str, np.ndarray]:
    table = np.asarray(segmentation.symbols)
    starts = np.flatnonzero(np.diff(table, prepend=np.array([-1], dtype=np.int64)) != 0)
    return {"marked_transitions": segmentation.transitions.astype(np.int32),
            "marked_final": segmentation.final.astype(bool),
            "symbol_starts": starts.astype(np.int32), "symbol_values": table[starts].astype(np.int32),
            "context_states": np.array(open_states, dtype=np.uint64)}


def _vocabulary_arrays(tokenizer: Tokenizer) -> dict[str, np.ndarray]:
    lengths = np.array([len(b) if b is not None else 0 for b in tokenizer.token_bytes], dtype=np.int64)
    offsets = row_bounds(lengths)
    return {
        "token_blob": np.frombuffer(b"".join(b for b in tokenizer.token_bytes if b is not None), dtype=np.uint8).copy(),
        "token_offsets": offsets,
        "token_has_bytes": np.array([b is not None for b in tokenizer.token_bytes], dtype=bool),
        "eos_token_ids": np.array(tokenizer.eos_token_ids, dtype=np.int32),
    }


def excluded_code_points(tokenizer: Tokenizer) -> np.ndarray | None:
    """bool[0x110000]: characters the normaliser never lets reach BPE (None: no such normaliser). The first
    Unicode normal form decides (see the module docstring): a character it changes on its own is rewritten in
    every context, so never occurs in its output; ``Lowercase`` excludes every character it changes. Both tables
    are the runtime's own (``bpe.unicode_classes.rewritten_by``), not Python's older ``unicodedata``."""
    forms = [step[0].upper() for step in tokenizer.normalizer if step[0] in ("nfc", "nfkc", "nfd", "nfkd")]
    lowercase = any(step[0] == "lowercase" for step in tokenizer.normalizer)
    if not forms and not lowercase:
        return None
    table = rewritten_by(forms[0]).copy() if forms else np.zeros(0x110000, dtype=bool)
    if lowercase:
        table |= rewritten_by("Lowercase")
    return table


class _TokenShapes:
    """Each token cut into: continuation bytes finishing a character begun before it (``lead``), the
    symbols of the whole characters it holds (``symbols``, padded with -1), and the bytes of a character it
    leaves unfinished (``tail_id`` into ``tails``; 0 = none). Also which tokens may appear at all and how."""

    def __init__(self, tokenizer: Tokenizer, produced: np.ndarray, table: np.ndarray):
        V = tokenizer.vocab_size
        self.lead = np.zeros(V, dtype=np.int8)
        self.tail_id = np.zeros(V, dtype=np.int32)
        self.tails: list[bytes] = [b""]
        tail_index = {b"": 0}
        rows: list[list[int]] = []
        valid = np.zeros(V, dtype=bool)
        fallback = tokenizer.byte_fallback_ids
        self.byte_fallback = np.zeros(V, dtype=bool)
        self.byte_fallback[list(fallback.values())] = True
        self.excluded = excluded = excluded_code_points(tokenizer)
        for t, raw in enumerate(tokenizer.token_bytes):
            row: list[int] = []
            rows.append(row)
            if raw is None:
                continue
            i = 0
            while i < len(raw) and i < 3 and 0x80 <= raw[i] < 0xC0:
                i += 1
            j = len(raw)  # start of an unfinished last character
            k = len(raw) - 1
            while k >= i and 0x80 <= raw[k] < 0xC0 and len(raw) - k < 4:
                k -= 1
            if k >= i and raw[k] >= 0xC0 and len(raw) - k < _utf8_length(raw[k]):
                j = k
            try:
                text = raw[i:j].decode("utf-8")
            except UnicodeDecodeError:
                continue  # no text has these bytes inside one token
            if excluded is not None and text and excluded[[ord(c) for c in text]].any():
                continue  # a character the normaliser rewrites whatever surrounds it never reaches BPE
            row.extend(table[[ord(c) for c in text]].tolist())
            self.lead[t] = i
            tail = raw[j:]
            if tail not in tail_index:
                tail_index[tail] = len(self.tails)
                self.tails.append(tail)
            self.tail_id[t] = tail_index[tail]
            valid[t] = True
        width = max(1, max(len(r) for r in rows))
        self.symbols = np.full((V, width), -1, dtype=np.int16)
        self.length = np.array([len(r) for r in rows], dtype=np.int32)
        for t, r in enumerate(rows):
            if r:
                self.symbols[t, : len(r)] = r

        regular = valid.copy()
        regular[list(tokenizer.special_token_ids)] = False
        added = np.zeros(V, dtype=bool)
        added[list(tokenizer.added_token_ids - tokenizer.special_token_ids)] = True
        regular &= ~added
        regular[_holding_added_text(tokenizer, added)] = False
        self.boundary_token = added & valid  # non-special added tokens: matched before pre-tokenization
        self.in_piece = regular & produced & ~self.byte_fallback  # produced by BPE inside a piece
        self.whole_piece_only = (regular & ~produced & ~self.byte_fallback) if tokenizer.ignore_merges else np.zeros(V, bool)
        # Characters the vocabulary spells (byte fallback spells exactly the others): a byte-fallback token
        # holding a whole such character (<0x41> for "A") is never produced.
        self.vocab_chars: set[str] = set()
        if tokenizer.byte_fallback:
            for t in np.flatnonzero(self.in_piece | self.boundary_token).tolist():  # added tokens: matched first
                text = tokenizer.token_bytes[t].decode("utf-8", errors="ignore")
                if len(text) == 1:
                    self.vocab_chars.add(text)
            for t in np.flatnonzero(self.byte_fallback & (self.length == 1)).tolist():
                if tokenizer.token_bytes[t].decode("utf-8", errors="ignore") in self.vocab_chars:
                    self.byte_fallback[t] = False
        self.byte_fallback &= regular


def _holding_added_text(tokenizer: Tokenizer, added: np.ndarray) -> np.ndarray:
    """Ids of regular tokens whose bytes hold a non-special added token's text: the runtime cuts that text out
    before BPE wherever it occurs, so it never produces them."""
    contents = {tokenizer.token_bytes[t] for t in np.flatnonzero(added).tolist() if tokenizer.token_bytes[t]}
    if not contents:
        return np.zeros(0, dtype=np.int64)
    lengths = np.array([len(b) if b is not None else 0 for b in tokenizer.token_bytes], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])  # one NUL after each token: no match spans two
    blob = b"\x00".join(b if b is not None else b"" for b in tokenizer.token_bytes)
    hits: set[int] = set()
    for content in contents:
        if b"\x00" in content:
            continue
        at = blob.find(content)
        while at >= 0:
            hits.add(int(np.searchsorted(starts, at, side="right")) - 1)
            at = blob.find(content, at + 1)
    ids = np.array(sorted(hits), dtype=np.int64)
    return ids[~added[ids]] if len(ids) else ids


class _ContextBuilder:
    """Breadth-first exploration of contexts (see the module docstring)."""

    def __init__(self, tokenizer, segmentation: Segmentation, shapes: _TokenShapes, merges):
        self.tok = tokenizer
        self.seg = segmentation
        self.shapes = shapes
        n = segmentation.num_states
        self.trans = np.vstack([segmentation.transitions, np.full((1, segmentation.hash_symbol + 1), -1, np.int32)])
        self.trans[self.trans < 0] = n  # n: dead
        self.final_mask = sum(1 << s for s in range(n) if segmentation.final[s])
        # States where a piece may end: whole-piece tokens must leave the boundary DFA in one of them.
        self.closable_bits = np.uint64(sum(1 << s for s in range(n) if segmentation.final[s]
                                           or segmentation.transitions[s, segmentation.hash_symbol] >= 0))
        self.walk = self._walk_all()  # [n + 1, V]: state after the token's whole characters
        self.bit = np.array([1 << s for s in range(n)] + [0], dtype=np.uint64)
        self.completions: dict[bytes, tuple[bytes, int]] = {}
        self.representative: dict[tuple[int, bytes], bytes] = {}
        self.index: dict[tuple[int, bytes], int] = {}
        self.open_keys: list[int] = []
        self.pending_keys: list[tuple[int, bytes]] = []
        self.boundary_rows: list[np.ndarray] = []
        self.inside_rows: list[np.ndarray] = []
        self.pending_rows: list[tuple[np.ndarray, np.ndarray]] = []
        self.final: list[bool] = []
        self.excluded = shapes.excluded
        self.vocab_code_points = np.zeros(0x110000, dtype=bool)  # characters the vocabulary spells
        self.vocab_code_points[[ord(c) for c in shapes.vocab_chars]] = True
        # Per unfinished character a token leaves: the states from which it can still be completed.
        self.live_by_tail = np.array([self._prefix_info(tail)[1] for tail in shapes.tails], dtype=np.uint64)
        # Tokens that begin with continuation bytes: the only ones that can finish a character. Per finisher:
        # its leading continuation bytes' payload bits (as many as it has, up to 3), and whether it is nothing
        # but continuation bytes.
        self.finishers = np.flatnonzero((shapes.lead > 0) & (shapes.in_piece | shapes.byte_fallback))
        self.finisher_lead = shapes.lead[self.finishers].astype(np.int64)
        self.finisher_payload = np.zeros((4, len(self.finishers)), dtype=np.int64)  # [k]: first k bytes' bits
        for i, t in enumerate(self.finishers.tolist()):
            raw = tokenizer.token_bytes[t]
            for k in range(1, int(self.finisher_lead[i]) + 1):
                self.finisher_payload[k, i] = self.finisher_payload[k - 1, i] << 6 | (raw[k - 1] & 0x3F)
        self.finisher_only_continuation = np.array([len(tokenizer.token_bytes[t]) for t in self.finishers.tolist()],
                                                   dtype=np.int64) == self.finisher_lead

    @property
    def num_open(self) -> int:
        return len(self.boundary_rows)

    @property
    def num_contexts(self) -> int:
        return len(self.boundary_rows) + len(self.pending_rows)

    def _walk_all(self) -> np.ndarray:
        shapes = self.shapes
        n = self.seg.num_states
        V = len(shapes.length)
        state = np.repeat(np.arange(n + 1, dtype=np.int32)[:, None], V, axis=1)
        order = np.argsort(-shapes.length, kind="stable")
        for col in range(shapes.symbols.shape[1]):
            k = int((shapes.length > col).sum())
            if k == 0:
                break
            idx = order[:k]
            state[:, idx] = self.trans[state[:, idx], shapes.symbols[idx, col].astype(np.int64)]
        return state

    def _prefix_info(self, tail: bytes) -> tuple[bytes, int]:
        """For an unfinished character ``tail``: a key equal for all prefixes whose completions behave alike
        (same symbol — or "spelled by the vocabulary" under byte fallback — for every continuation), and the
        bitmask of marked-DFA states from which some completion can be read.

        Keying contexts by behaviour rather than by bytes matters: single continuation-byte tokens reach every
        UTF-8 prefix (20k three-byte prefixes of four-byte characters), but almost all behave alike."""
        if not tail:
            return b"", (1 << self.seg.num_states) - 1
        if tail not in self.completions:
            length, need, payload, (lowest, highest) = _unfinished(tail)
            lo = max(payload << (6 * need), lowest)
            hi = min((payload << (6 * need)) | ((1 << (6 * need)) - 1), highest)
            well_formed = length > 1 and need > 0 and all(0x80 <= b < 0xC0 for b in tail[1:])
            if not well_formed or lo > hi:
                self.completions[tail] = (b"dead", 0)
                return self.completions[tail]
            cps = np.arange(lo, hi + 1)
            behaviour = self.seg.symbols[cps]  # a copy (uint8, or uint16 for large alphabets)
            never = np.iinfo(behaviour.dtype).max  # no symbol's id: marks code points no text reads here
            behaviour[(cps >= 0xD800) & (cps <= 0xDFFF)] = never  # surrogates are not characters
            if self.excluded is not None:  # characters the normaliser always rewrites never reach BPE
                behaviour[self.excluded[cps]] = never
            if self.tok.byte_fallback:  # byte fallback spells only what the vocabulary lacks
                behaviour[self.vocab_code_points[cps]] = never
            syms = np.unique(behaviour[behaviour != never])
            live = 0
            for s in range(self.seg.num_states):
                if len(syms) and (self.trans[s, syms] < self.seg.num_states).any():
                    live |= 1 << s
            self.completions[tail] = (bytes([need]) + behaviour.tobytes(), live)
        return self.completions[tail]

    def _context(self, states: int, tail: bytes) -> int:
        """Id of the context (states, tail), creating it; -1 if nothing can follow from it."""
        behaviour, live = self._prefix_info(tail)
        states &= live
        if not states:
            return -1
        key = (states, behaviour)
        if key not in self.index:
            self.index[key] = len(self.index)  # discovery order; renumbered (open contexts first) at the end
            (self.pending_keys if tail else self.open_keys).append(key)
            self.representative[key] = tail
        return self.index[key]

    def _open_row(self, states: int) -> tuple[np.ndarray, np.ndarray]:
        shapes = self.shapes
        V = len(shapes.length)
        members = [s for s in range(self.seg.num_states) if states >> s & 1]
        inside = np.zeros(V, dtype=np.uint64)
        boundary = np.zeros(V, dtype=np.uint64)
        for s in members:
            inside |= self.bit[self.walk[s]]
            h = int(self.seg.transitions[s, self.seg.hash_symbol])
            if h >= 0:
                boundary |= self.bit[self.walk[h]]
        starts_clean = shapes.lead == 0
        inside[~(shapes.in_piece | shapes.byte_fallback) | ~starts_clean] = 0
        boundary_ok = (shapes.in_piece | shapes.byte_fallback | shapes.whole_piece_only) & starts_clean
        boundary[~boundary_ok] = 0
        whole = shapes.whole_piece_only
        boundary[whole] &= self.closable_bits
        boundary[whole & (shapes.tail_id > 0)] = 0
        boundary_next = self._contexts_of(boundary, shapes.tail_id)
        inside_next = self._contexts_of(inside | boundary, shapes.tail_id)
        inside_next[(inside & self.live_by_tail[shapes.tail_id]) == 0] = -1  # continuing the piece must itself be viable
        # Added tokens sit between independently tokenized segments: the segment so far must be complete.
        if states & self.final_mask:
            for t in np.flatnonzero(shapes.boundary_token).tolist():
                boundary_next[t] = self._context(1, b"")
        return boundary_next, inside_next

    def _contexts_of(self, sets: np.ndarray, tail_id: np.ndarray) -> np.ndarray:
        out = np.full(len(sets), -1, dtype=np.int64)
        live = np.flatnonzero(sets != 0)
        if len(live) == 0:
            return out
        pairs = np.stack([sets[live], tail_id[live].astype(np.uint64)], axis=1)
        first, inverse = unique_rows(pairs)
        ids = np.array([self._context(int(s), self.shapes.tails[int(t)]) for s, t in pairs[first].tolist()],
                       dtype=np.int64)
        out[live] = ids[inverse]
        return out

    def _pending_row(self, states: int, pending: bytes) -> tuple[np.ndarray, np.ndarray]:
        """The tokens that may follow an unfinished character ``pending`` in marked-DFA states ``states``, and
        the contexts they lead to; vectorised over the finishers (a loop over them, per context, was 12 s of
        Llama-3's build)."""
        shapes = self.shapes
        _, need, payload, (lowest, highest) = _unfinished(pending)
        lead, tokens = self.finisher_lead, self.finishers
        nexts = np.full(len(tokens), -1, dtype=np.int64)
        # Tokens of continuation bytes only, too short to finish it: the character stays unfinished.
        for i in np.flatnonzero((lead < need) & self.finisher_only_continuation).tolist():
            nexts[i] = self._context(states, pending + self.tok.token_bytes[int(tokens[i])])
        # Tokens whose leading continuation bytes finish it: the code point, then the whole-character walk.
        finish = np.flatnonzero(lead == need)
        cp = (payload << (6 * need)) | self.finisher_payload[need, finish]
        ok = (cp >= lowest) & (cp <= highest) & ~((cp >= 0xD800) & (cp < 0xE000))  # what UTF-8 decoding accepts
        finish, cp = finish[ok], cp[ok]
        if self.tok.byte_fallback:  # byte fallback spells only what the vocabulary lacks
            keep = ~self.vocab_code_points[cp] & shapes.byte_fallback[tokens[finish]]
            finish, cp = finish[keep], cp[keep]
        if self.excluded is not None:
            keep = ~self.excluded[cp]
            finish, cp = finish[keep], cp[keep]
        sym = self.seg.symbols[cp].astype(np.int64)
        finished = tokens[finish]
        after = np.zeros(len(finish), dtype=np.uint64)
        for s in range(self.seg.num_states):
            if states >> s & 1:
                after |= self.bit[self.walk[self.trans[s, sym], finished]]
        nexts[finish] = self._contexts_of(after, shapes.tail_id[finished])
        keep = nexts != -1
        return tokens[keep].astype(np.int32), nexts[keep]

    def run(self) -> None:
        self._context(1, b"")  # the start: marked-DFA state 0, nothing unfinished
        done_open = done_pending = 0
        open_rows: list[tuple[np.ndarray, np.ndarray]] = []
        pending_rows: list[tuple[np.ndarray, np.ndarray]] = []
        while done_open < len(self.open_keys) or done_pending < len(self.pending_keys):
            if done_open < len(self.open_keys):
                open_rows.append(self._open_row(self.open_keys[done_open][0]))
                done_open += 1
            else:
                key = self.pending_keys[done_pending]
                pending_rows.append(self._pending_row(key[0], self.representative[key]))
                done_pending += 1
        # Number contexts: open ones first (in discovery order), then unfinished-character ones.
        renumber = np.empty(len(self.index) + 1, dtype=np.int64)
        renumber[-1] = -1  # index -1 (nothing follows) stays -1
        for i, key in enumerate(self.open_keys + self.pending_keys):
            renumber[self.index[key]] = i
        self.boundary_rows = [renumber[b] for b, _ in open_rows]
        self.inside_rows = [renumber[i] for _, i in open_rows]
        self.pending_rows = [(t, renumber[n]) for t, n in pending_rows]
        self.final = [bool(states & self.final_mask) for states, _ in self.open_keys] + [False] * len(self.pending_keys)
        self._merge_equivalent_contexts()

    def _merge_equivalent_contexts(self) -> None:
        """Merge contexts that no continuation can tell apart (Moore's partition refinement): same kind (open or
        unfinished character), same finality, and rows equal once their targets are replaced by their blocks.
        Contexts are keyed by what the layers remember, not by what follows, so many coincide: GPT-2 4,983 ->
        1,103 contexts, Llama-3 7,847 -> 1,934. A guide's product nodes are (regex state, context) pairs, so the
        unfinished-character nodes of a free-text string shrink alike (the peers benchmark's JSON object on GPT-2:
        9,347 -> 2,239 nodes)."""
        num_open = len(self.boundary_rows)
        block = np.array([0] * num_open + [1] * len(self.pending_rows), dtype=np.int64) * 2 + self.final
        count = len(np.unique(block))
        while True:
            target = np.append(block, -1)  # index -1 (nothing follows) stays its own block
            rows = [(target[b].tobytes(), target[i].tobytes()) for b, i in
                    zip(self.boundary_rows, self.inside_rows)]
            rows += [(t.tobytes(), target[n].tobytes()) for t, n in self.pending_rows]
            ids: dict[tuple, int] = {}
            refined = np.array([ids.setdefault((int(b), row), len(ids)) for b, row in zip(block, rows)], np.int64)
            if len(ids) == count:
                break
            block, count = refined, len(ids)
        # One representative per block, numbered in first-occurrence order: open contexts stay first, the start
        # stays 0. Representatives' rows are redirected to blocks.
        first = np.unique(block, return_index=True)[1]
        keep = np.sort(first)
        renumber = np.empty(count + 1, dtype=np.int64)
        renumber[block[keep]] = np.arange(count)
        renumber[-1] = -1
        new_of = renumber[np.append(block, count)]  # old context (or -1) -> new context (or -1)
        kept_open = keep[keep < num_open].tolist()
        kept_pending = (keep[keep >= num_open] - num_open).tolist()
        self.boundary_rows = [new_of[self.boundary_rows[c]] for c in kept_open]
        self.inside_rows = [new_of[self.inside_rows[c]] for c in kept_open]
        self.pending_rows = [(self.pending_rows[r][0], new_of[self.pending_rows[r][1]]) for r in kept_pending]
        self.final = [self.final[c] for c in keep.tolist()]
        self.open_states = [self.open_keys[c][0] for c in kept_open]  # (a block's members are alike on every token)
