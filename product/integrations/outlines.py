"""An Outlines logits processor that keeps generation inside a canonmerge guide: ``outlines.Generator(model,
processor=CanonicalLogitsProcessor(guide, model.tensor_library_name))``.

Outlines (1.x) passes the processor to the model's own generation loop: ``model.generate`` with torch scores for
its ``Transformers`` model, ``Llama.__call__`` with numpy scores for its ``LlamaCpp`` model. At each step the
processor advances one ``Matcher`` per row by the ids generated since the last step
(``product.integrations.sequences``) and masks the scores: torch ones with ``product.apply_bitmask``, numpy ones in
place. ``Generator`` calls ``reset()`` before each generation, so one processor serves one generator.

The guide must be compiled for the model's tokenizer (the same ids: ``bpe.compile_tokenizer`` of the tokenizer the
Outlines model wraps, or of the GGUF file a LlamaCpp model loaded). ``generated(row)`` gives the ids a row wrote.

Importing this module imports ``outlines``. Leaves out: Outlines' ``output_type`` compilation (give the guide
instead), beam search, and streaming with the Transformers model (Outlines has none).
"""

from __future__ import annotations

import numpy as np
from outlines.processors import OutlinesLogitsProcessor

from product.integrations.sequences import SequenceMatchers, mask_scores
from product.runtime.guide import Guide

__all__ = ["CanonicalLogitsProcessor"]


class CanonicalLogitsProcessor(OutlinesLogitsProcessor):
    """An ``OutlinesLogitsProcessor`` allowing, at each step, exactly the guide's canonical next tokens.

    ``tensor_library_name``: the Outlines model's (``model.tensor_library_name``): ``"torch"`` for
    ``outlines.models.Transformers``, ``"numpy"`` for ``outlines.models.LlamaCpp``.
    """

    def __init__(self, guide: Guide, tensor_library_name: str = "torch"):
        if tensor_library_name not in ("torch", "numpy"):
            raise ValueError(f"canonmerge masks torch or numpy scores, not {tensor_library_name!r}")
        super().__init__(tensor_library_name)
        self.guide = guide
        self._rows = SequenceMatchers(guide)
        self._bitmask = None

    def reset(self) -> None:
        """Start a new generation (Outlines' generators call it before each one)."""
        self._rows.reset()
        self._bitmask = None

    def generated(self, row: int = 0) -> list[int]:
        """The ids row ``row`` generated in the last generation (EOS not included)."""
        return self._rows.generated(row)

    def process_logits(self, input_ids, logits):
        rows, width = logits.shape
        if width < self.guide.vocab_size:
            raise ValueError(f"scores of {width} tokens for a guide of {self.guide.vocab_size}: the guide was "
                             "compiled for another tokenizer")
        if self._bitmask is None or len(self._bitmask) != rows:
            self._bitmask = np.zeros((rows, self.guide.num_words), dtype=np.int32)
        self._rows.fill(input_ids.tolist(), self._bitmask)
        if isinstance(logits, np.ndarray):
            return mask_scores(logits, self._bitmask)
        # (torch scores: the Transformers model; product.apply_bitmask imports torch, numpy users need not)
        import torch

        from product.runtime.kernels.device import apply_bitmask  # deferred: imports torch

        return apply_bitmask(logits, torch.from_numpy(self._bitmask))
