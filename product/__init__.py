"""Constraints intersected with the canonical automaton: token-level regex automata, guides, masks.

Public: ``compile_regex``, ``compile_grammar`` (GBNF and Lark grammars; ``grammar_regex`` the regex it compiles for a
regular one, ``PushdownGuide`` the guide of a recursive one), ``Guide``, ``TokenTransitions``, ``InvalidTokenError``; ``CompileBudget`` (every compile's
time and memory bound, and cancelling: ``automata.budget``) and its errors ``CompileBudgetError``,
``CompileTimeoutError``, ``CompileMemoryError``, ``CompileCancelledError``; for serving engines: ``Matcher``,
``fill_next_token_bitmasks``, ``RollbackError``, ``allocate_token_bitmask`` (docs/serving.md); for torch:
``apply_bitmask``, ``LogitsProcessor``, ``generate``, ``Generation`` (imported on first use: torch and
transformers take ~3 s to import, which mask-only users need not pay); for the schema layer above (``vegas``):
``compile_stitched``, ``StitchedGuide``, ``StitchError``, ``FragmentTooLongError``, ``PLACEHOLDERS``,
``FragmentStore``, ``default_library_dir``.

Layout: ``product.compiler`` builds a guide's tables (token transitions, product nodes, liveness, rows, counted
transitions, skeleton cuts) and never imports ``product.runtime``, which serves masks from them (``Guide``,
``Matcher``, the mask cache, the compiled kernels on CPU and device, generation). Above both: ``product.compile``
(``compile_regex``: counted or plain), ``product.grammar`` (``compile_grammar``: a regex, or a pushdown guide),
``product.counted`` (``CountedGuide``), ``product.stitched``
(``compile_stitched``: fragments compiled, reused and linked) and ``product.library`` (fragments on disk).
"""

from automata.budget import (
    CompileBudget,
    CompileBudgetError,
    CompileCancelledError,
    CompileMemoryError,
    CompileTimeoutError,
)
from product.compile import compile_regex
from product.compiler.tables import InvalidTokenError
from product.compiler.token_regex import TokenTransitions
from product.grammar import compile_grammar, grammar_regex
from product.library import FragmentStore, default_library_dir
from product.runtime.guide import Guide
from product.runtime.matcher import Matcher, RollbackError, allocate_token_bitmask, fill_next_token_bitmasks
from product.runtime.pushdown import PushdownGuide
from product.stitched import PLACEHOLDERS, FragmentTooLongError, StitchedGuide, StitchError, compile_stitched

__all__ = ["compile_regex", "compile_grammar", "grammar_regex", "PushdownGuide", "CompileBudget", "CompileBudgetError",
           "CompileTimeoutError", "CompileMemoryError", "CompileCancelledError", "Guide", "TokenTransitions", "InvalidTokenError",
           "apply_bitmask", "LogitsProcessor",
           "generate", "Generation", "Matcher", "RollbackError", "allocate_token_bitmask", "fill_next_token_bitmasks",
           "compile_stitched", "StitchedGuide", "StitchError", "FragmentTooLongError", "PLACEHOLDERS", "FragmentStore",
           "default_library_dir"]

_TORCH_API = ("apply_bitmask", "LogitsProcessor", "generate", "Generation")


def __getattr__(name: str):
    if name == "apply_bitmask":  # torch only: engines applying masks need not import transformers
        from product.runtime.kernels.device import apply_bitmask  # deferred: imports torch

        return apply_bitmask
    if name in _TORCH_API:
        from product.runtime import generation  # deferred: imports torch and transformers (~3 s)

        return getattr(generation, name)
    raise AttributeError(f"module 'product' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_TORCH_API))
