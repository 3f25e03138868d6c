"""BPE tokenizers: loading every common format into one model, and their canonical automata.

Public: ``load_tokenizer``, ``Tokenizer``, ``SplitRule``, ``compile_tokenizer``, ``CanonicalAutomaton``,
``direct_merge``, the error types (``MissingEOSError``: no EOS known), and ``bpe.assets`` for the pinned real
tokenizers and texts used in tests, benchmarks and examples.
"""

from bpe.automaton import CacheError, CanonicalAutomaton, DisallowedTokenError, compile_tokenizer
from bpe.direct_merge import TokenDFA, direct_merge
from bpe.errors import MissingEOSError, TokenizerError, UnsupportedTokenizerError
from bpe.loaders import load_tokenizer
from bpe.model import SplitRule, Tokenizer

__all__ = ["load_tokenizer", "Tokenizer", "SplitRule", "compile_tokenizer", "CanonicalAutomaton", "direct_merge",
           "TokenDFA", "TokenizerError", "UnsupportedTokenizerError", "MissingEOSError", "DisallowedTokenError",
           "CacheError"]
