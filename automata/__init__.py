"""Deterministic automata as numpy arrays: regex compilation, trimming, minimisation, products, exports.

Nothing here knows about tokenizers; ``bpe`` and ``product`` build on it.
"""

from automata.dfa import DFA, MISSING, Alphabet
from automata.errors import CanonmergeError, EmptyLanguageError, RegexError, StateLimitError
from automata.export import from_networkx, to_networkx, write_dot, write_graphml
from automata.regex import from_regex

__all__ = [
    "DFA", "MISSING", "Alphabet", "from_regex", "to_networkx", "from_networkx", "write_graphml", "write_dot",
    "CanonmergeError", "RegexError", "EmptyLanguageError", "StateLimitError",
]
