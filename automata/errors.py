"""The exception hierarchy shared by every canonmerge package (they all import it from here)."""


class CanonmergeError(Exception):
    """Base class of every error canonmerge raises on bad input or a broken asset."""


class RegexError(CanonmergeError):
    """A regular expression could not be parsed or uses syntax canonmerge does not support."""


class EmptyLanguageError(CanonmergeError):
    """A constraint accepts no string at all (or none over the given alphabet)."""


class StateLimitError(CanonmergeError):
    """An automaton would exceed the configured state bound; raised before memory is exhausted."""
