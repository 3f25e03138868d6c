"""BPE tokenizers: loading every common format into one model, and (next) their canonical automata.

Public: ``load_tokenizer``, ``Tokenizer``, ``SplitRule``, the error types, and ``bpe.assets`` for the pinned
real tokenizers used in tests, benchmarks and examples.
"""

from bpe.errors import TokenizerError, UnsupportedTokenizerError
from bpe.loaders import load_tokenizer
from bpe.model import SplitRule, Tokenizer

__all__ = ["load_tokenizer", "Tokenizer", "SplitRule", "TokenizerError", "UnsupportedTokenizerError"]
