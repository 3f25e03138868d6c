"""A llama-cpp-python logits processor that keeps generation inside a canonmerge guide, and a check that a GGUF
model's token ids are the guide's.

``Llama(...)(prompt, logits_processor=LogitsProcessorList([CanonicalLogitsProcessor(guide)]))``: llama-cpp-python
calls the processor at each step with the context's ids (prompt and generated, a 1-D numpy array) and the step's
scores (1-D float32 numpy); it advances a ``Matcher`` by the new ids and sets the scores of the tokens the guide
does not allow to ``-inf``, in place. One processor per call (or ``reset()`` between calls). llama.cpp stops at
the model's end-of-generation tokens: the guide's EOS must be one (SmolLM2's ``<|im_end|>`` is both).

The guide must be compiled for the model's own vocabulary: ``bpe.compile_tokenizer(path_to_the.gguf)`` reads the
same GGUF file llama.cpp loads. ``check_vocabulary(llama, canonical)`` compares every token's bytes as llama.cpp
spells them with the automaton's and raises where one differs.

The processor is a plain callable; only ``check_vocabulary`` imports ``llama_cpp``. Leaves out: llama.cpp's grammar
sampler (GBNF) and batched or speculative generation through llama-cpp-python.
"""

from __future__ import annotations

import ctypes

import numpy as np

from bpe.automaton import CanonicalAutomaton
from product.integrations.sequences import SequenceMatchers, mask_scores
from product.runtime.guide import Guide

__all__ = ["CanonicalLogitsProcessor", "check_vocabulary"]


class CanonicalLogitsProcessor:
    """A llama-cpp-python logits processor, ``(input_ids, scores) -> scores``: the guide's canonical next tokens
    only."""

    def __init__(self, guide: Guide):
        self.guide = guide
        self._rows = SequenceMatchers(guide)
        self._bitmask = np.zeros((1, guide.num_words), dtype=np.uint32)

    def reset(self) -> None:
        """Start a new generation."""
        self._rows.reset()

    def generated(self) -> list[int]:
        """The ids generated so far in this generation (EOS not included)."""
        return self._rows.generated(0)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if scores.shape[-1] < self.guide.vocab_size:
            raise ValueError(f"scores of {scores.shape[-1]} tokens for a guide of {self.guide.vocab_size}: the guide "
                             "was compiled for another tokenizer")
        self._rows.fill([input_ids], self._bitmask)
        return mask_scores(scores, self._bitmask)


def check_vocabulary(llama, canonical: CanonicalAutomaton) -> None:
    """Raise ``ValueError`` unless the ``llama_cpp.Llama`` model's vocabulary is ``canonical``'s: as many ids, and
    every non-special id spelling the same bytes (llama.cpp's ``llama_token_to_piece``) — so that masks index the
    model's logits by the right tokens. ~0.2 s for 50k tokens. (Not ``Llama.detokenize``: llama-cpp-python 0.3.36
    reads pieces into 32 bytes and returns ``b""`` for longer tokens, 47 of SmolLM2's.)"""
    import llama_cpp  # the client, imported where it is used: this module imports without it

    size = llama.n_vocab()
    if size != canonical.vocab_size:
        raise ValueError(f"the model has {size} tokens, the guide's tokenizer {canonical.vocab_size}")
    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    buffer = ctypes.create_string_buffer(256)

    def piece(token: int) -> bytes:
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, False)
        if n >= 0:
            return buffer.raw[:n]
        longer = ctypes.create_string_buffer(-n)  # (a negative length: the size the piece needs)
        return longer.raw[: llama_cpp.llama_token_to_piece(vocab, token, longer, -n, 0, False)]

    differ = [t for t, spelled in enumerate(canonical.token_bytes) if spelled is not None and piece(t) != spelled]
    if differ:
        shown = ", ".join(f"{t}: {piece(t)!r} vs {canonical.token_bytes[t]!r}" for t in differ[:5])
        raise ValueError(f"{len(differ)} token ids spell other bytes in the model than in the guide's tokenizer "
                         f"({shown})")
