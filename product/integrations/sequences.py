"""A ``Matcher`` per row of a batch, advanced by the whole token sequences that client libraries hand a logits
processor at each step, and the masks of those rows applied to numpy scores.

Transformers, Outlines and llama-cpp-python call a logits processor with every row's ids so far (the prompt, then
what was generated) and that step's scores. ``SequenceMatchers`` takes the first call's ids as the prompt, then
feeds each row's new ids to its matcher: EOS ends the row (afterwards only EOS is allowed, as engines pad
finished rows with it) and a token the guide refuses raises ``bpe.DisallowedTokenError`` (a processor that
masks every step never sees one). ``generated(row)`` is what the row wrote, EOS left out.

Leaves out: rows that change order or number between steps (beam search), and prompts whose rows change
length (one processor serves one generation call; ``reset`` starts another).
"""

from __future__ import annotations

import numpy as np

from product.runtime.guide import Guide
from product.runtime.matcher import Matcher

__all__ = ["SequenceMatchers", "mask_scores"]


class SequenceMatchers:
    """The guide's state for each row of one generation call, kept in step with the ids the client passes."""

    def __init__(self, guide: Guide):
        if not isinstance(guide, Guide):
            raise TypeError(f"a canonmerge processor needs a product.Guide, not {type(guide).__name__}")
        self.guide = guide
        self.reset()

    def reset(self) -> None:
        """Forget the rows: the next call's ids are a new prompt."""
        self._matchers: list[Matcher] = []
        self._generated: list[list[int]] = []
        self._seen = 0  # ids per row already fed (the prompt's at the first call)

    def generated(self, row: int = 0) -> list[int]:
        """The ids row ``row`` has generated so far (the tokens fed to its matcher), EOS not included."""
        return list(self._generated[row])

    def fill(self, sequences, bitmask: np.ndarray) -> None:
        """Advance each row by the ids of ``sequences`` (one id sequence per row, all the same length) past the
        last call's, then write each row's next-token mask into ``bitmask`` (uint32 or int32 ``[rows,
        guide.num_words]``, a numpy array or a CPU torch tensor)."""
        rows = len(sequences)
        length = len(sequences[0]) if rows else 0
        if not self._matchers:
            self._matchers = [Matcher(self.guide, max_rollback=0) for _ in range(rows)]
            self._generated = [[] for _ in range(rows)]
            self._seen = length
        elif rows != len(self._matchers) or length < self._seen:
            raise ValueError(f"a canonmerge processor follows one generation call: {rows} rows of {length} ids "
                             f"after {len(self._matchers)} rows of {self._seen} (call reset() between calls)")
        for matcher, generated, ids in zip(self._matchers, self._generated, sequences):
            for token in ids[self._seen:]:
                token = int(token)
                if matcher.is_terminated:
                    continue  # padding after EOS
                matcher.accept_token(token)
                if not matcher.is_terminated:
                    generated.append(token)
        self._seen = length
        for row, matcher in enumerate(self._matchers):
            matcher.fill_next_token_bitmask(bitmask, row)


def mask_scores(scores: np.ndarray, bitmask: np.ndarray) -> np.ndarray:
    """Set ``scores[i, t] = -inf`` in place wherever bit t of ``bitmask[i]`` is clear (1-D scores: row 0's bits),
    columns past the bitmask's tokens included (a model's padded vocabulary); returns ``scores``. Strided views
    (llama-cpp-python passes a field of a record array) are written through. numpy scores: torch tensors go
    through ``product.apply_bitmask``."""
    words = np.ascontiguousarray(bitmask).view(np.uint32)
    allowed = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").astype(bool)
    if scores.ndim == 1:
        allowed = allowed[0]
    width = scores.shape[-1]
    if width > allowed.shape[-1]:
        allowed = np.concatenate([allowed, np.zeros(allowed.shape[:-1] + (width - allowed.shape[-1],), bool)], -1)
    scores[~allowed[..., :width]] = -np.inf
    return scores
