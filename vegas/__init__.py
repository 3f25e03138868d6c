"""JSON Schema constraints, written as JSON or YAML, tokenized canonically; and the ``canonmerge`` command line.

Public: ``compile_schema`` (a schema -> a ``product.Guide``), ``format_instance`` (a value -> the one text that
guide accepts for it), ``schema_regex`` (the regex both are built on), ``SchemaError``,
``UnsupportedSchemaError``. The layout and the supported keywords: ``vegas.layout`` and ``vegas.schema``.

    >>> import vegas
    >>> schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    >>> vegas.format_instance({"name": "Ada"}, schema)
    '{"name": "Ada"}'
    >>> vegas.format_instance({"name": "Ada"}, schema, style="yaml")
    'name: Ada'

What it leaves out for now: the schema is compiled as one regex (the Vegas fragment library — pieces between hard
token boundaries compiled once per tokenizer and stitched — is the next step).
"""

from __future__ import annotations

from vegas.errors import SchemaError, UnsupportedSchemaError
from vegas.layout import format_instance
from vegas.schema import schema_regex

__all__ = ["compile_schema", "format_instance", "schema_regex", "SchemaError", "UnsupportedSchemaError"]


def compile_schema(schema, canonical, *, style: str = "json", strict: bool = False, max_recursion: int = 3,
                   any_depth: int = 2, canonical_only: bool = True, max_states: int = 100_000,
                   max_transitions: int = 50_000_000, cache_size: int = 4096):
    """The guide of the texts of ``schema``'s instances in the layout of ``style`` (``"json"`` or ``"yaml"``),
    tokenized canonically for ``canonical``'s tokenizer (a ``bpe.compile_tokenizer`` automaton).

    ``schema``: a dict, a JSON string, or a class with ``model_json_schema()`` (pydantic). ``strict``: an object
    without ``additionalProperties`` admits no other keys (the standard admits any). ``max_recursion``: how many
    times a recursive ``$ref`` is unrolled. ``any_depth``: how deep values of ``true`` schemas nest. The other
    options are ``product.compile_regex``'s.

    Raises ``UnsupportedSchemaError`` (a keyword not compiled exactly; ``.keyword`` and ``.pointer`` name it),
    ``SchemaError`` (a malformed schema, or one no instance satisfies), and ``compile_regex``'s errors.
    """
    from product import compile_regex

    regex = schema_regex(schema, style, strict=strict, max_recursion=max_recursion, any_depth=any_depth)
    name = schema.get("title", "schema") if isinstance(schema, dict) else "schema"
    return compile_regex(regex, canonical, canonical_only=canonical_only, max_states=max_states,
                         max_transitions=max_transitions, cache_size=cache_size, name=f"{name} ({style})")
