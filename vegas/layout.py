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

Keys of an object come in the schema's ``properties`` order, then the others in the instance's order;
``format_instance`` walks the schema for that (and for the choice between plain and quoted YAML strings), and
never validates: an invalid instance gets a text too, which the schema's guide rejects.
"""

from __future__ import annotations

import functools
import json
import re

from vegas.charset import escape_of
from automata.errors import CanonmergeError
from interegular.fsm import anything_else
from vegas import lexical
from vegas.lexical import is_plain_safe

__all__ = ["format_instance", "write_value", "write_key"]


def _position():
    from vegas.schema import TOP

    return TOP


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


def _scalar(value, style: str, lead: str, *, plain_ok: bool = True) -> str:
    if value is None:
        return lead + "null"
    if value is True or value is False:
        return lead + ("true" if value else "false")
    if isinstance(value, (int, float)):
        return lead + write_number(value, style)
    return lead + write_string(value, style, plain_ok=plain_ok)


def _collection(parts: list[str], opener: str, closer: str, style: str, pos) -> str:
    """``parts`` are entries already written for their position (YAML: ``key:`` + value, or ``-`` + value)."""
    if style == "json":
        return opener + ", ".join(parts) + closer
    if not parts:
        return pos.scalar_lead() + opener + closer
    lead, sep, _ = pos.block()
    return lead + sep.join(parts)


def write_value(value, style: str, pos=None) -> str:
    """``value`` in the layout, keys in the instance's order (no schema)."""
    from vegas.schema import Position

    pos = pos or _position()
    lead = pos.scalar_lead() if style == "yaml" else ""
    if isinstance(value, dict):
        inner = Position("key", pos.block()[2]) if style == "yaml" else pos
        parts = [write_key(str(k), style, declared=False) + write_value(v, style, inner) for k, v in value.items()]
        return _collection(parts, "{", "}", style, pos)
    if isinstance(value, (list, tuple)):
        inner = Position("item", pos.block()[2]) if style == "yaml" else pos
        dash = "-" if style == "yaml" else ""
        return _collection([dash + write_value(v, style, inner) for v in value], "[", "]", style, pos)
    return _scalar(value, style, lead)


class _Writer:
    """``format_instance``'s walk: the schema picks key order and YAML quoting; where several alternatives of a
    node fit the value's type, the first whose regex accepts its text wins (so a valid instance always gets a
    text its guide accepts)."""

    def __init__(self, compiler):
        self.compiler, self.style = compiler, compiler.style
        self._regexes: dict = {}

    def write(self, value, schema, pointer: str, pos, stack: tuple) -> str:
        from vegas.schema import _json_type

        try:
            alts = self.compiler.alternatives(schema, pointer, stack)
        except Exception:  # a schema the compiler refuses still formats: generically
            alts = []
        fits = [(alt, t) for alt in alts for t in alt.types if _json_type(value, t)]
        if not fits:
            return write_value(value, self.style, pos)
        if len(fits) > 1:
            for alt, t in fits:
                text = self.typed(value, alt, t, pos)
                regex = self._regex(alt, t, pos)
                if regex is not None and regex.fullmatch(text):
                    return text
        return self.typed(value, *fits[0], pos)

    def _regex(self, alt, type_: str, pos):
        key = (id(alt.schema), alt.pointer, alt.stack, type_, pos)
        if key not in self._regexes:
            regex = self.compiler.typed(alt, type_, pos)
            self._regexes[key] = (alt.schema, _Matcher.of(regex) if regex is not None else None)
        return self._regexes[key][1]

    def typed(self, value, alt, type_: str, pos) -> str:
        from vegas.schema import Position, yaml_always_quoted

        s, style = alt.schema, self.style
        lead = pos.scalar_lead() if style == "yaml" else ""
        if "enum" in s or "const" in s:  # the schema's own spelling of an equal member (its key order)
            from vegas.schema import _json_equal

            members = s["enum"] if "enum" in s else [s["const"]]
            same = [m for m in members if _json_equal(m, value)] if isinstance(members, list) else []
            return write_value(same[0] if same else value, style, pos)
        if type_ == "string":
            return _scalar(value, style, lead, plain_ok=not yaml_always_quoted(s))
        if type_ == "array":
            items, prefix = s.get("items", True), s.get("prefixItems", [])
            if isinstance(items, list):
                prefix, items = items, s.get("additionalItems", True)
            inner = Position("item", pos.block()[2]) if style == "yaml" else pos
            dash = "-" if style == "yaml" else ""
            parts = []
            for i, item in enumerate(value):
                sub, where = (prefix[i], f"{alt.pointer}/prefixItems/{i}") if i < len(prefix) else \
                    (items, f"{alt.pointer}/items")
                parts.append(dash + self.write(item, sub, where, inner, alt.stack))
            return _collection(parts, "[", "]", style, pos)
        if type_ == "object":
            props = dict(s.get("properties", {}))
            additional = s.get("additionalProperties", False if self.compiler.strict else True)
            for name in s.get("required", []):
                props.setdefault(name, additional)
            inner = Position("key", pos.block()[2]) if style == "yaml" else pos
            order = [k for k in props if k in value] + [k for k in value if k not in props]
            parts = []
            for name in order:
                if name in props:
                    sub = with_pattern_schemas(s, str(name), props[name], style, alt.pointer)
                    where = f"{alt.pointer}/properties/{name}"
                elif matched := matching_patterns(s, str(name), style):
                    sub, where = pattern_schema(s, matched, alt.pointer)
                else:
                    sub, where = additional, f"{alt.pointer}/additionalProperties"
                parts.append(write_key(str(name), style, declared=name in props) +
                             self.write(value[name], sub, where, inner, alt.stack))
            return _collection(parts, "{", "}", style, pos)
        return _scalar(value, style, lead)


class _Matcher:
    """``fullmatch`` of a schema regex in linear time, on its character DFA: Python's ``re`` backtracks, and on the
    nested alternatives of overlapping ``oneOf`` branches written exclusively (MaskBench's o84270) one match ran
    for minutes. An alternative whose DFA is too large matches nothing (the next one is tried)."""

    def __init__(self, regex: str):
        from automata.regex import _char_dfa

        self._rows = None  # (None: the DFA is too large; nothing matches)
        try:
            table, accepting, start, mapping = _char_dfa(regex, _MAX_MATCH_STATES)
        except CanonmergeError:
            return
        self._rows = table.tolist()
        self._accepting, self._start, self._mapping = accepting.tolist(), start, mapping
        self._other = mapping[anything_else]

    @staticmethod
    @functools.lru_cache(maxsize=256)
    def of(regex: str) -> "_Matcher":
        return _Matcher(regex)

    def fullmatch(self, text: str) -> bool:
        if self._rows is None:
            return False
        rows, mapping, other, q = self._rows, self._mapping, self._other, self._start
        for ch in text:
            q = rows[q][mapping.get(ch, other)]
            if q < 0:
                return False
        return self._accepting[q]


_MAX_MATCH_STATES = 100_000


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


def format_instance(instance, schema, *, style: str = "json", strict: bool = False, max_recursion: int = 3,
                    any_depth: int = 2) -> str:
    """The one text that the guide of ``schema`` (same options) accepts for ``instance``, if it is valid.

    >>> format_instance({"age": 36, "name": "Ada"}, {"properties": {"name": {"type": "string"}, "age": {}}})
    '{"name": "Ada", "age": 36}'
    >>> print(format_instance({"name": "Ada", "tags": ["math", "poetry"]}, {}, style="yaml"))
    name: Ada
    tags:
      - math
      - poetry
    """
    from vegas.schema import TOP, Compiler, load_schema

    compiler = Compiler(load_schema(schema), style, strict=strict, max_recursion=max_recursion, any_depth=any_depth)
    return _Writer(compiler).write(instance, compiler.root, "#", TOP, ())
