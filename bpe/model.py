"""The tokenizer model every other part of canonmerge reads: vocabulary bytes, merge order, and the text
transformations (normaliser, pre-tokenizer) applied before merges.

A ``Tokenizer`` is plain data. It is built by ``bpe.loaders`` from any supported file format and is the
same whatever the source, so that the canonical automaton never looks at a file format.

Invariants (checked in ``__post_init__``):
- ``token_bytes[i]`` is the byte string token ``i`` decodes to, or ``None`` for special tokens, which text
  never encodes to.
- ``merge_table[k] = (left, right, result)`` with ``token_bytes[left] + token_bytes[right] ==
  token_bytes[result]``, in priority order (row 0 is applied first).
- ``base_token_ids`` are the tokens no merge produces: the starting symbols of BPE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from bpe.errors import TokenizerError

__all__ = ["GPT2_PATTERN", "SplitRule", "Tokenizer", "bytes_to_unicode"]

# The pre-tokenizer regex of GPT-2 (and of ByteLevel(use_regex=True) in HF tokenizers).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters used in byte-level vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


@dataclass(frozen=True)
class SplitRule:
    """One regex split of the pre-tokenizer, with HF ``tokenizers`` semantics.

    ``behavior`` is one of ``isolated``, ``removed``, ``merged_with_previous``, ``merged_with_next``,
    ``contiguous``; ``invert`` splits on the complement of the matches.
    """

    pattern: str
    behavior: str = "isolated"
    invert: bool = False


@dataclass(frozen=True, eq=False)
class Tokenizer:
    """A BPE tokenizer reduced to what decides its canonical tokenizations."""

    token_bytes: list[bytes | None]
    merge_table: np.ndarray  # int32 [num_merges, 3]: left, right, result
    eos_token_ids: tuple[int, ...]
    byte_level: bool  # vocabulary over bytes (GPT-2 style); else over characters (SentencePiece style)
    byte_fallback: bool  # <0xNN> tokens spell characters missing from the vocabulary
    ignore_merges: bool  # a pre-token found whole in the vocabulary is one token
    pre_tokenizer: tuple[SplitRule, ...]  # applied in order; empty when there is none
    normalizer: tuple[tuple[str, ...], ...]  # steps like ("nfc",), ("prepend", "▁"), ("replace", " ", "▁")
    special_token_ids: frozenset[int] = frozenset()
    added_token_ids: frozenset[int] = frozenset()  # added tokens that are not special (matched before BPE)
    # Vocabulary tokens BPE can never produce (spelled outside the byte alphabet); also in special_token_ids (never
    # allowed), but plain vocabulary entries, not added tokens, in the runtime built from the model.
    unreachable_token_ids: frozenset[int] = frozenset()
    token_strings: list[str | None] = field(default_factory=list, repr=False)  # the vocabulary's own spelling

    def __post_init__(self) -> None:
        table = self.merge_table
        if table.ndim != 2 or table.shape[1] != 3:
            raise TokenizerError(f"merge_table must have shape [n, 3], got {table.shape}")
        n = len(self.token_bytes)
        if len(table) and (table.min() < 0 or table.max() >= n):
            raise TokenizerError("merge_table names a token id outside the vocabulary")
        for t in self.eos_token_ids:
            if not 0 <= t < n:
                raise TokenizerError(f"EOS id {t} is outside the vocabulary of {n} tokens")

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    @property
    def merges(self) -> list[tuple[int, int]]:
        """The merge rules in priority order, as (left_id, right_id)."""
        return [(int(a), int(b)) for a, b in self.merge_table[:, :2]]

    @property
    def base_token_ids(self) -> np.ndarray:
        """Ids of regular tokens that no merge produces (single bytes/characters, byte-fallback tokens)."""
        produced = np.zeros(self.vocab_size, dtype=bool)
        produced[self.merge_table[:, 2]] = True
        regular = np.array([b is not None for b in self.token_bytes], dtype=bool)
        for t in self.added_token_ids:
            regular[t] = False
        return np.flatnonzero(regular & ~produced)

    @property
    def byte_fallback_ids(self) -> dict[int, int]:
        """byte value -> id of its ``<0xNN>`` token (empty without byte fallback)."""
        if not self.byte_fallback:
            return {}
        found = {}
        for i, s in enumerate(self.token_strings):
            if s is not None and len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
                try:
                    found[int(s[3:5], 16)] = i
                except ValueError:
                    continue
        return found

    def summary(self) -> str:
        """A few human-readable lines describing the tokenizer."""
        pre = "; ".join(f"{r.behavior}{' inverted' if r.invert else ''} split on {r.pattern!r}" for r in self.pre_tokenizer) or "none"
        norm = ", ".join("/".join(step) for step in self.normalizer) or "none"
        return "\n".join(
            [
                f"vocabulary      {self.vocab_size} tokens ({len(self.base_token_ids)} base, "
                f"{len(self.special_token_ids)} special, {len(self.added_token_ids)} added)",
                f"merges          {len(self.merge_table)}",
                f"alphabet        {'bytes (byte-level)' if self.byte_level else 'characters'}",
                f"byte fallback   {self.byte_fallback}",
                f"ignore_merges   {self.ignore_merges}",
                f"normaliser      {norm}",
                f"pre-tokenizer   {pre}",
                f"EOS ids         {list(self.eos_token_ids)}",
            ]
        )
