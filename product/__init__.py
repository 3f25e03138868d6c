"""Constraints intersected with the canonical automaton: token-level regex automata, guides, masks.

Public: ``compile_regex``, ``Guide``, ``TokenTransitions``, ``InvalidTokenError``; for torch: ``apply_bitmask``,
``LogitsProcessor``, ``generate``, ``Generation``.
"""

from product.guide import Guide, InvalidTokenError, compile_regex
from product.generation import Generation, LogitsProcessor, apply_bitmask, generate
from product.token_regex import TokenTransitions

__all__ = ["compile_regex", "Guide", "TokenTransitions", "InvalidTokenError", "apply_bitmask", "LogitsProcessor",
           "generate", "Generation"]
