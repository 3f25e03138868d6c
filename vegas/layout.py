"""The layout: the one text canonmerge writes for each JSON value, in JSON or YAML.

JSON (``style="json"``) is ``json.dumps(value, ensure_ascii=False)``: separators ``", "`` and ``": "``, no other
whitespace, strings escaped as ``json.dumps`` escapes them, numbers as it writes Python numbers.

YAML (``style="yaml"``) is block style with two-space indentation::

    name: Ada                       # plain: plain-safe (vegas.lexical), and the schema bounds no length, gives
                                    # no pattern or format, and constrains something (not true/{})
    motto: "Yes: and #1"            # double-quoted otherwise, with JSON's escapes (+ \\u for YAML's unprintables)
    tags:                           # a non-empty sequence under a key: items indented two spaces
      - math
    address:                        # a non-empty mapping under a key: entries indented two spaces
      city: London
    jobs:
      - title: analyst              # a mapping inside a sequence starts on the dash's line
        year: 1843
    empty: []                       # empty collections in flow style: [] and {}
    "other": 1                      # keys the schema does not declare: double-quoted

Floats with an integral value below 1e16 are written as integers (one text per value). Floats keep a dot in the
mantissa of exponent forms (``1.0e+16``), which YAML 1.1 readers need to read a float.
Every text reads back as the value: ``json.loads`` for JSON, any YAML 1.1 or 1.2 reader (``yaml.safe_load``).

Keys of an object come in the schema's ``properties`` order, then the others in the instance's order.

Here: the writers (``write_value`` and its parts), where a value is written (``Position``, ``TOP``), the layout's
reading of a schema node (``yaml_always_quoted``; ``matching_patterns``, ``pattern_schema``,
``with_pattern_schemas``: the schema a key's value takes from ``patternProperties``) and JSON equality and types,
all of which ``vegas.schema`` writes its regexes with. Left out: walking a schema (``vegas.schema``) and choosing
an instance's text by that walk (``vegas.instances.format_instance``). Imports nothing from either.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from automata import CanonmergeError
from vegas import lexical
from vegas.charset import escape_of
from vegas.lexical import is_plain_safe

__all__ = ["Position", "TOP", "write_value", "write_key", "write_string", "write_number", "write_scalar",
           "write_collection", "yaml_always_quoted", "ANNOTATIONS", "json_equal", "json_type", "matching_patterns",
           "with_pattern_schemas", "pattern_schema"]

# Keywords that annotate a schema and constrain nothing (a schema of only these is "anything").
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "example", "$schema", "$id", "id", "$comment", "readOnly",
    "writeOnly", "deprecated", "$anchor", "contentMediaType", "contentEncoding", "contentSchema", "discriminator",
    "$defs", "definitions", "$vocabulary", "xml", "externalDocs"})


@dataclass(frozen=True)
class Position:
    """Where a value is written. JSON ignores it. YAML: ``top`` (the document), ``key`` (after ``key:``) or
    ``item`` (after a sequence's ``-``); ``indent`` is the column of that key or dash."""
    where: str = "top"
    indent: int = 0

    def scalar_lead(self) -> str:
        return "" if self.where == "top" else " "

    def block(self) -> tuple[str, str, int]:
        """(text before the first entry, text between entries, column of the entries) of a block collection."""
        if self.where == "top":
            return "", "\n", 0
        inner = "\n" + " " * (self.indent + 2)
        return (inner if self.where == "key" else " "), inner, self.indent + 2


TOP = Position()


def write_string(text: str, style: str, *, plain_ok: bool = True) -> str:
    if style == "yaml" and plain_ok and is_plain_safe(text):
        return text
    return '"' + "".join(escape_of(c, style) for c in text) + '"'


def write_number(value, style: str) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        value = int(value)  # one text per value: 30.0 is 30 (vegas.lexical)
    text = json.dumps(value)
    if style == "yaml" and "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def write_key(name: str, style: str, *, declared: bool = True) -> str:
    """A key with what separates it from its value's text: ``"name": `` (JSON) or ``name:`` (YAML; the value's
    text starts with its own space or line break). YAML writes keys the schema declares plain where safe, and
    other keys double-quoted."""
    if style == "json":
        return json.dumps(name, ensure_ascii=False) + ": "
    return write_string(name, "yaml", plain_ok=declared) + ":"


def write_scalar(value, style: str, lead: str, *, plain_ok: bool = True) -> str:
    """``lead`` (YAML: the space after ``key:`` or ``-``), then the scalar's text; ``plain_ok=False``: a YAML
    string double-quoted even where it is plain-safe."""
    if value is None:
        return lead + "null"
    if value is True or value is False:
        return lead + ("true" if value else "false")
    if isinstance(value, (int, float)):
        return lead + write_number(value, style)
    return lead + write_string(value, style, plain_ok=plain_ok)


def write_collection(parts: list[str], opener: str, closer: str, style: str, pos) -> str:
    """``parts`` are entries already written for their position (YAML: ``key:`` + value, or ``-`` + value)."""
    if style == "json":
        return opener + ", ".join(parts) + closer
    if not parts:
        return pos.scalar_lead() + opener + closer
    lead, sep, _ = pos.block()
    return lead + sep.join(parts)


def write_value(value, style: str, pos: Position = TOP) -> str:
    """``value`` in the layout, keys in the instance's order (no schema)."""
    lead = pos.scalar_lead() if style == "yaml" else ""
    if isinstance(value, dict):
        inner = Position("key", pos.block()[2]) if style == "yaml" else pos
        parts = [write_key(str(k), style, declared=False) + write_value(v, style, inner) for k, v in value.items()]
        return write_collection(parts, "{", "}", style, pos)
    if isinstance(value, (list, tuple)):
        inner = Position("item", pos.block()[2]) if style == "yaml" else pos
        dash = "-" if style == "yaml" else ""
        return write_collection([dash + write_value(v, style, inner) for v in value], "[", "]", style, pos)
    return write_scalar(value, style, lead)


def yaml_always_quoted(schema: dict) -> bool:
    """Whether a YAML string of this schema is double-quoted even where it is plain-safe: strings with a length
    bound, a pattern or a known format (a regex could not split their plain and quoted forms), and strings of
    schemas that constrain nothing (``true``, ``{}``: keeps the regex of "any value" small)."""
    fmt = schema.get("format")
    return (schema.get("minLength", 0) > 0 or schema.get("maxLength") is not None or "pattern" in schema
            or (isinstance(fmt, str) and lexical.format_regex(fmt) is not None)
            or not (schema.keys() - ANNOTATIONS))


def json_equal(a, b) -> bool:
    """Equality of JSON values (``1 == 1.0``, but ``True != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return a == b


def json_type(value, type_: str) -> bool:
    """Whether ``value`` (a Python value read from JSON) has the JSON Schema type ``type_``."""
    if type_ == "null":
        return value is None
    if type_ == "boolean":
        return isinstance(value, bool)
    if type_ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if type_ == "string":
        return isinstance(value, str)
    if type_ == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def matching_patterns(schema: dict, name: str, style: str) -> list[str]:
    """The patterns of ``schema``'s ``patternProperties`` that the key ``name`` matches (in the schema's order)."""
    patterns = schema.get("patternProperties")
    if not isinstance(patterns, dict) or not patterns:
        return []
    written = write_key(name, style, declared=False)
    text = written[1:written.rindex('"')]  # the key as an other (quoted) key writes it
    found = []
    for pattern in patterns:
        try:
            if _written_keys(pattern, style).fullmatch(text):
                found.append(pattern)
        except CanonmergeError:
            continue
    return found


def with_pattern_schemas(schema: dict, name: str, sub, style: str, pointer: str):
    """The schema of the declared key ``name`` (``sub``), with the schemas of the patterns it matches: the
    compiler and the writer both take a declared key's value this way, so its text and its regex agree."""
    matched = matching_patterns(schema, name, style)
    return {"allOf": [sub, pattern_schema(schema, matched, pointer)[0]]} if matched else sub


def pattern_schema(schema: dict, patterns: list[str], pointer: str) -> tuple[object, str]:
    """The schema a key matching ``patterns`` (a non-empty list) takes from them, and its pointer."""
    subs = [schema["patternProperties"][p] for p in patterns]
    where = f"{pointer}/patternProperties/{patterns[0]}"
    return (subs[0], where) if len(subs) == 1 else ({"allOf": subs}, where)


@functools.lru_cache(maxsize=1024)
def _written_keys(pattern: str, style: str) -> re.Pattern:
    """The compiled regex of the keys, as written, in which ``pattern`` finds a match (read once per pattern)."""
    return re.compile(lexical.pattern_regex(pattern, style, "#"))
