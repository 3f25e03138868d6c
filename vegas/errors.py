"""Errors about schemas: every one names the keyword and the JSON pointer of the schema node it is about.

Leaves out: errors of the compile below the schema (``automata``'s, ``bpe``'s, ``product``'s), which
``vegas.compile_schema`` passes through as they are.
"""

from __future__ import annotations

from automata.errors import CanonmergeError

__all__ = ["SchemaError", "UnsupportedSchemaError"]


class SchemaError(CanonmergeError):
    """A malformed schema: not an object or boolean, a ``$ref`` that resolves nowhere, a ``pattern`` that does not
    parse, a keyword with a value of the wrong kind, or a schema no instance satisfies."""

    def __init__(self, message: str, *, keyword: str = "", pointer: str = ""):
        self.keyword, self.pointer = keyword, pointer
        where = f" (keyword {keyword!r} at {pointer or '#'})" if keyword else (f" (at {pointer})" if pointer else "")
        super().__init__(message + where)


class UnsupportedSchemaError(SchemaError):
    """A keyword (or a use of one) that canonmerge does not compile exactly; refused rather than loosened."""
