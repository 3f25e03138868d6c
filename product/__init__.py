"""Constraints intersected with the canonical automaton: token-level regex automata, guides, masks.

Public: ``compile_regex``, ``Guide``, ``TokenTransitions``, ``InvalidTokenError``; for serving engines: ``Matcher``,
``fill_next_token_bitmasks``, ``RollbackError``, ``allocate_token_bitmask`` (docs/serving.md); for torch:
``apply_bitmask``, ``LogitsProcessor``, ``generate``, ``Generation`` (imported on first use: torch and
transformers take ~3 s to import, which mask-only users need not pay); for the schema layer above (``vegas``):
``compile_stitched``, ``StitchedGuide``, ``StitchError``, ``FragmentTooLongError``, ``PLACEHOLDERS``,
``FragmentStore``, ``default_library_dir``.
"""

from product.guide import Guide, InvalidTokenError, compile_regex
from product.matcher import Matcher, RollbackError, allocate_token_bitmask, fill_next_token_bitmasks
from product.token_regex import TokenTransitions
from product.library import FragmentStore, default_library_dir
from product.stitched import PLACEHOLDERS, FragmentTooLongError, StitchedGuide, StitchError, compile_stitched

__all__ = ["compile_regex", "Guide", "TokenTransitions", "InvalidTokenError", "apply_bitmask", "LogitsProcessor",
           "generate", "Generation", "Matcher", "RollbackError", "allocate_token_bitmask", "fill_next_token_bitmasks",
           "compile_stitched", "StitchedGuide", "StitchError", "FragmentTooLongError", "PLACEHOLDERS", "FragmentStore",
           "default_library_dir"]

_TORCH_API = ("apply_bitmask", "LogitsProcessor", "generate", "Generation")


def __getattr__(name: str):
    if name == "apply_bitmask":  # torch only: engines applying masks need not import transformers
        from product._mask_kernel import apply_bitmask

        return apply_bitmask
    if name in _TORCH_API:
        from product import generation

        return getattr(generation, name)
    raise AttributeError(f"module 'product' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_TORCH_API))
