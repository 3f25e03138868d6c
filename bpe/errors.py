"""Errors raised while reading tokenizers (all subclasses of ``automata.errors.CanonmergeError``)."""

from automata.errors import CanonmergeError


class TokenizerError(CanonmergeError):
    """A tokenizer source is missing, malformed, or inconsistent (e.g. a merge names an unknown token)."""


class UnsupportedTokenizerError(TokenizerError):
    """A well-formed tokenizer uses a model, normaliser or pre-tokenizer canonmerge cannot model exactly."""


class MissingEOSError(TokenizerError, ValueError):
    """No end-of-sequence token is known for a tokenizer, so a guide built on it could never end; pass
    ``eos_token_ids=`` where the tokenizer is loaded or compiled."""
