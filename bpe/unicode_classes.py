"""Which Unicode classes the runtime's regex engine puts each code point in, asked of the runtime itself.

Pre-tokenizer patterns test characters through Unicode classes (``\\p{L}``, ``\\p{N}``, ``\\s``...). The HF
``tokenizers`` runtime matches them with the Oniguruma it was built with, whose Unicode tables need not be
Python's: ``tokenizers`` 0.23 knows Unicode 16, Python 3.11's ``unicodedata`` Unicode 14, so a code point
assigned in between (U+31350, a CJK letter since Unicode 15) is ``\\p{L}`` to the runtime and unassigned to
Python. The runtime is the oracle, so the members of every class are read from it:

1. every code point except the surrogates (a Python string holding one cannot cross into Rust) is written, in
   order, into one string;
2. a ``Replace`` normaliser built on the runtime's own ``Regex`` (the engine ``Split`` pre-tokenizers use)
   deletes the runs of characters outside the union of the classes: what is left are the ~146k code points
   that are in some class;
3. the same deletion, one class at a time, over those leaves each class's members.

About 0.3 s (most of it the runtime's per-byte bookkeeping of the 1.1M-character string), once per process.
The answer depends only on the installed ``tokenizers`` (the Oniguruma its build bundles): ``unicode_source``
names it for the keys of cached automata.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["class_bits", "unicode_source"]

NUM_CODE_POINTS = 0x110000
SURROGATES = range(0xD800, 0xE000)


def unicode_source() -> str:
    """What the class tables come from: the installed ``tokenizers`` version (it pins its Oniguruma)."""
    import tokenizers

    return f"tokenizers {tokenizers.__version__}"


@lru_cache(maxsize=4)
def class_bits(classes: tuple[str, ...]) -> np.ndarray:
    """uint16[0x110000] (at most 16 classes): bit k is set where the runtime's regex engine matches
    ``classes[k]`` (each a class escape such as ``\\p{L}`` or ``\\s``, written inside ``[...]``) on the code
    point alone. Surrogates, which no text holds, are in no class."""
    code_points = np.r_[0 : SURROGATES.start, SURROGATES.stop : NUM_CODE_POINTS].astype(np.uint32)
    in_some_class = _members(_text(code_points), "".join(classes))
    candidates = _text(in_some_class)
    bits = np.zeros(NUM_CODE_POINTS, dtype=np.uint16)
    for k, escape in enumerate(classes):
        bits[_members(candidates, escape)] |= np.uint16(1 << k)
    return bits


def _text(code_points: np.ndarray) -> str:
    """The string of ``code_points`` (uint32, no surrogates), in order."""
    return code_points.astype("<u4").tobytes().decode("utf-32-le")


def _members(text: str, escapes: str) -> np.ndarray:
    """The code points of ``text`` that the runtime's regex ``[escapes]`` matches, in order (uint32)."""
    from tokenizers import Regex, normalizers

    kept = normalizers.Replace(Regex(f"[^{escapes}]+"), "").normalize_str(text)
    return np.frombuffer(kept.encode("utf-32-le"), dtype=np.uint32)
