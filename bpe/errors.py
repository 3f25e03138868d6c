"""Errors raised while reading tokenizers (all subclasses of ``automata.errors.CanonmergeError``)."""

from automata.errors import CanonmergeError


class TokenizerError(CanonmergeError):
    """A tokenizer source is missing, malformed, or inconsistent (e.g. a merge names an unknown token)."""


class UnsupportedTokenizerError(TokenizerError):
    """A well-formed tokenizer uses a model, normaliser or pre-tokenizer canonmerge cannot model exactly."""
