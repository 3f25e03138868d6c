"""``format_instance``: the one text of a JSON value that a schema's guide accepts for it, in the layout.

The text is the layout's (``vegas.layout``), chosen by walking the schema as ``vegas.schema`` does: the schema
picks the order of an object's keys (its ``properties`` first) and whether a YAML string is plain or quoted;
where several alternatives of a node (``anyOf`` branches...) fit the value's type, the first whose regex accepts
its text wins, matched on the regex's character DFA (``_Matcher``).

Leaves out validation: an invalid instance gets a text too (written generically where the schema says nothing
of it), which the schema's guide rejects.
"""

from __future__ import annotations

import functools

from interegular.fsm import anything_else

from automata import CanonmergeError, glushkov
from automata.regex import char_dfa
from vegas.layout import (
    TOP,
    Position,
    json_equal,
    json_type,
    matching_patterns,
    pattern_schema,
    with_pattern_schemas,
    write_collection,
    write_key,
    write_scalar,
    write_value,
    yaml_always_quoted,
)
from vegas.schema import Compiler

__all__ = ["format_instance"]


class _Writer:
    """``format_instance``'s walk: the schema picks key order and YAML quoting; where several alternatives of a
    node fit the value's type, the first whose regex accepts its text wins (so a valid instance always gets a
    text its guide accepts)."""

    def __init__(self, compiler: Compiler):
        self.compiler, self.style = compiler, compiler.style
        self._regexes: dict = {}

    def write(self, value, schema, pointer: str, pos, stack: tuple) -> str:
        try:
            alts = self.compiler.alternatives(schema, pointer, stack)
        except Exception:  # a schema the compiler refuses still formats: generically
            alts = []
        fits = [(alt, t) for alt in alts for t in alt.types if json_type(value, t)]
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
        s, style = alt.schema, self.style
        lead = pos.scalar_lead() if style == "yaml" else ""
        if "enum" in s or "const" in s:  # the schema's own spelling of an equal member (its key order)
            members = s["enum"] if "enum" in s else [s["const"]]
            same = [m for m in members if json_equal(m, value)] if isinstance(members, list) else []
            return write_value(same[0] if same else value, style, pos)
        if type_ == "string":
            return write_scalar(value, style, lead, plain_ok=not yaml_always_quoted(s))
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
            return write_collection(parts, "[", "]", style, pos)
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
            return write_collection(parts, "{", "}", style, pos)
        return write_scalar(value, style, lead)


class _Matcher:
    """``fullmatch`` of a schema regex in linear time, on its character DFA: Python's ``re`` backtracks, and on the
    nested alternatives of overlapping ``oneOf`` branches written exclusively (MaskBench's o84270) one match ran
    for minutes. Where the DFA is too large (an ``anyOf`` of twenty recursive object types, JSON Schema Store's
    accelerator), the regex's position automaton is run instead (``glushkov.position_matcher``: slower per
    character, built in the time of one walk of the tree); past that too, nothing matches (the next alternative is
    tried)."""

    def __init__(self, regex: str):
        self._rows, self._positions = None, None  # (both None: nothing matches)
        try:
            table, accepting, start, mapping = char_dfa(regex, _MAX_MATCH_STATES)
        except CanonmergeError:
            try:
                self._positions = glushkov.position_matcher(glushkov.read_tree(regex, _MAX_MATCH_STATES),
                                                            _MAX_MATCH_POSITIONS)
            except CanonmergeError:
                pass
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
            return self._positions is not None and self._positions(text)
        rows, mapping, other, q = self._rows, self._mapping, self._other, self._start
        for ch in text:
            q = rows[q][mapping.get(ch, other)]
            if q < 0:
                return False
        return self._accepting[q]


_MAX_MATCH_STATES = 100_000
# Positions of a regex matched on its position automaton at most: its follow lists are the memory (the 540k-character
# alternatives of JSON Schema Store's accelerator have ~150-250k positions; the follow entries stay capped).
_MAX_MATCH_POSITIONS = 1_000_000


def format_instance(instance, schema, *, style: str = "json", strict: bool = False, max_recursion: int = 3,
                    any_depth: int = 2) -> str:
    """The one text that the guide of ``schema`` (same options) accepts for ``instance``, if it is valid.

    >>> format_instance({"age": 36, "name": "Ada"}, {"properties": {"name": {"type": "string"}, "age": {}}})
    '{"name": "Ada", "age": 36}'
    >>> strings = {"type": "array", "items": {"type": "string"}}
    >>> print(format_instance({"name": "Ada", "tags": ["math", "poetry"]},
    ...                       {"properties": {"name": {"type": "string"}, "tags": strings}}, style="yaml"))
    name: Ada
    tags:
      - math
      - poetry
    """
    compiler = Compiler.load(schema, style, strict=strict, max_recursion=max_recursion, any_depth=any_depth)
    return _Writer(compiler).write(instance, compiler.root, "#", TOP, ())
