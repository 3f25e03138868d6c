"""JSON Schema -> the regex of its instances' texts in one layout (``"json"`` or ``"yaml"``).

The walk normalises each schema node into *alternatives* (``$ref`` resolved, ``allOf`` merged, ``anyOf``/``oneOf``
distributed over the node's other keywords), each with the set of JSON types it admits, and writes one regex
per (alternative, type, position), with the layout's writers (``vegas.layout``, which knows nothing of this
walk); ``vegas.instances.format_instance`` writes instances by the same walk, so the two agree. ``Compiler.load``
sets a compiler up from a schema as the public functions take it; ``leaves=True`` writes the skeleton that
``product.compile_stitched`` cuts into fragments (``vegas.compile_schema``).

Exact, for instances written in the layout (``vegas.layout``): ``type`` (and lists), ``properties``, ``required``,
``additionalProperties`` (false, true or a schema; absent = true as the standard says, ``strict=True`` makes it
false), ``patternProperties`` (keys by region of the patterns they match: ``_other_keys``),
``minProperties`` 1, ``dependencies``/``dependentRequired``/``dependentSchemas`` (``_dependent``),
``items``/``prefixItems``/``additionalItems``, ``minItems``/``maxItems``, ``enum``, ``const``,
``anyOf``, ``oneOf`` (disjoint branches as a union: checked on their automata; overlapping branches each taken
with the others negated, where each has a positive negation: ``_exclusive``),
``allOf`` (merged), ``$ref`` to ``#...`` pointers, ``$defs``/``definitions`` (recursion unrolled ``max_recursion``
times, deeper instances are not generated); a schema without ``type`` admits every type, each constrained by its
own keywords, string ``minLength``/``maxLength``/``pattern``/``format`` (date, time, date-time, email, uuid, uri,
ipv4, ipv6, hostname; unknown formats are annotations, as the standard says; a length bound with a pattern or
format is shared out over the pattern's tree, ``lexical._bounded``), ``minimum``/``maximum``/
``exclusiveMinimum``/``exclusiveMaximum`` (decimal bounds compared digit by digit), ``multipleOf`` 1,
``nullable``, ``not`` written positively keyword by keyword (``_negated``: of ``type``, ``required``,
``properties``, ``not``, ``allOf``, ``anyOf``, ``$ref``, ``enum``/``const`` of scalars).

Left out (``UnsupportedSchemaError`` names keyword and pointer): other ``not`` (of a bound, a length, ``integer``
alone...), overlapping ``oneOf`` branches without such negations, ``if``/``then``/``else``,
``patternProperties`` too large to write by region, ``propertyNames``,
other ``min/maxProperties``, ``uniqueItems``, ``contains``, other ``multipleOf``, ``unevaluated*``, remote
``$ref``s, a fractional number bound within 1e-4 of zero, a ``pattern`` with a ``format``, a length bound several
open-ended parts of a pattern would share. Values of ``true`` schemas (anything) are generated up to
``any_depth`` levels of nesting. Additional keys are never one of the declared keys; duplicated additional keys
are not excluded (no regular language can).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from automata import RegexError, StateLimitError, from_regex
from automata.budget import checkpoint
from automata.grammar.regular import call_marker
from automata.parse import LOOP, LOOP_AFTER
from automata.regions import regions
from product import PLACEHOLDERS, StitchError
from vegas import lexical
from vegas.charset import ANY, CharSet, escape_of, literal, spelled, word_trie
from vegas.errors import SchemaError, UnsupportedSchemaError
from vegas.layout import (
    ANNOTATIONS,
    TOP,
    Position,
    json_equal,
    json_type,
    pattern_schema,
    with_pattern_schemas,
    write_key,
    write_value,
    yaml_always_quoted,
)

__all__ = ["schema_regex", "load_schema", "Compiler", "Alternative"]

TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
_SCALARS = ("null", "boolean", "number", "string")
_MAX_NEGATION_DEPTH = 8  # schemas nested in a negation (through $ref, properties, allOf...) at most
_MAX_EXCLUSIVE = 64  # alternatives at most from overlapping oneOf branches written exclusively (Compiler._exclusive)
_ANY_MARK = "*"  # on an alternative's stack: one level of a true schema's nesting
_ITEMS = ("items", "prefixItems", "additionalItems")
_UNSUPPORTED = {"not", "if", "then", "else", "propertyNames", "minProperties", "maxProperties", "uniqueItems", "contains",
                "minContains", "maxContains", "multipleOf", "unevaluatedProperties", "unevaluatedItems",
                "$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"}
_BY_TYPE = {
    "string": {"minLength", "maxLength", "pattern", "format"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "array": {"items", "prefixItems", "additionalItems", "minItems", "maxItems"},
    "object": {"properties", "required", "additionalProperties", "patternProperties"},
}
_BY_TYPE["integer"] = _BY_TYPE["number"]
# (style, strict, any_depth, position, depth) -> the regex of any value written there (``Compiler.value``)
_ANYTHING: dict[tuple, str | None] = {}
# A value's text past which the walk stops (``Compiler.value``; a skeleton's, or a whole regex's where no leaves are
# written — which no compile reads past 1.92M characters anyway): skeletons read literal runs as one position each,
# so a compiled one can be longer than a regex (1.92M characters, ``automata.glushkov``); MaskBench's largest
# compiled are ~0.3M. Unrolled recursion multiplies the text level by level (Github_hard o69211: 2.8M characters
# at one level, 60x that at the next, 19 GB before its budget stopped it).
_MAX_TEXT_CHARACTERS = 8_000_000
# Values (a schema at a position) one document writes at most: real schemas write a few hundred (the 40 largest
# first-sight MaskBench schemas at most 472); recursion unrolled through oneOf wrote 272k in 13 s before the
# skeleton's text reached its cap (JSON Schema Store's accelerator, YAML), and stops here in ~0.5 s.
_MAX_VALUES = 10_000


@dataclass
class Alternative:
    """One way a schema node can be satisfied: a merged keyword dict (no ``$ref``/``allOf``/``anyOf``/``oneOf``
    left), the JSON types it admits, and the ``$ref`` targets being expanded around it (for recursion)."""
    schema: dict
    pointer: str
    types: tuple[str, ...]
    stack: tuple[str, ...] = field(default=())
    call: str | None = None  # (``max_recursion=None``) a recursive ``$ref`` to this pointer: its rule is called


def _union(parts) -> str | None:
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    uniq = list(dict.fromkeys(parts))
    return uniq[0] if len(uniq) == 1 else "(" + "|".join(uniq) + ")"


def _ordered(entries: list[tuple[str, bool]], extra: str | None, sep: str,
             loops: bool = False) -> tuple[str | None, bool]:
    """The regex of the entries written in order, optional ones possibly absent, joined by ``sep``, then any
    number of ``extra`` entries; and whether the empty sequence is admitted. ``loops``: where the entries may all
    be absent, the extra entries written with ``automata.parse``'s loop operator (``extra`` once, not twice).

    Where what comes before may be absent, an entry must be written so that ``sep`` goes only between two: a required
    one as ``(before sep)?entry``, an optional one either as ``(before(sep entry)?|entry)`` or as ``((before
    sep)?entry|before)`` — each repeats one of the two, and the shorter is repeated. Always repeating the entry
    doubled a nested object's text at each level of optional properties (a GitHub schema's skeleton reached 1.2M
    characters, past the position cap); repeating the shorter side writes a large nested object once."""
    acc, guaranteed = None, False
    for regex, required in entries:
        if acc is None:
            acc, guaranteed = regex, required
        elif guaranteed:
            acc = f"{acc}{sep}{regex}" if required else f"{acc}({sep}{regex})?"
        elif required:
            acc, guaranteed = f"({acc}{sep})?{regex}", True
        else:
            acc = f"({acc}({sep}{regex})?|{regex})" if len(regex) <= len(acc) else f"(({acc}{sep})?{regex}|{acc})"
    if extra is not None:
        more = f"({sep}{extra})*"
        if acc is not None and guaranteed:
            acc = f"{acc}{more}"
        elif loops:
            acc = f"{LOOP}(?:{extra})(?:{sep})" if acc is None else f"{LOOP_AFTER}(?:{acc})(?:{extra})(?:{sep})"
        else:
            acc = f"({acc}{more}|{extra}{more})" if acc is not None else f"{extra}{more}"
    return acc, not guaranteed


_REF_ALONE_DRAFTS = re.compile(r"^https?://json-schema\.org/draft-0[3-7]/schema#?$")


def _ref_alone(root) -> bool:
    """Whether ``root`` declares a draft (3 to 7) in which ``$ref`` replaces the schema it sits in."""
    declared = root.get("$schema") if isinstance(root, dict) else None
    return isinstance(declared, str) and _REF_ALONE_DRAFTS.match(declared.strip()) is not None


class Compiler:
    """Walks one schema (the root of every ``$ref``) in one style. Regexes are memoised per (node, position)."""

    def __init__(self, root, style: str = "json", *, strict: bool = False, max_recursion: int | None = 3,
                 any_depth: int = 2, leaves: bool = False, any_leaf: bool = True, loops: bool = False):
        if style not in ("json", "yaml"):
            raise ValueError(f"style must be 'json' or 'yaml', not {style!r}")
        if not isinstance(root, (dict, bool)):
            raise SchemaError(f"a schema is an object or a boolean, not {type(root).__name__}", pointer="#")
        self.root, self.style, self.strict = root, style, strict
        # drafts 3 to 7: "$ref" replaces its schema, every keyword beside it is ignored (2019-09 on: applied too)
        self.ref_alone = _ref_alone(root)
        self.max_recursion, self.any_depth = max_recursion, any_depth
        self._memo: dict = {}
        self._written = 0  # values written (memo misses), against ``_MAX_VALUES``
        # max_recursion=None: recursive $ref targets called, not unrolled (pointer -> (schema, JSON types))
        self.calls: dict[str, tuple] = {}
        # leaves=True: scalar values and free keys are written as placeholder characters standing for their
        # regexes (``self.leaves``), so the regex left is the literal structure: the skeleton product.stitched cuts.
        self.leaves: dict[str, str] | None = {} if leaves else None
        self._leaf_of: dict[str, str] = {}
        # a free key's leaf stands for any key but the declared names: (any key, the names as written) per
        # placeholder, so that product.stitched can compile the fragments holding it once for every schema and
        # tell the names apart while the text is written (``compile_stitched``'s ``leaf_exceptions``)
        self.exceptions: dict[str, tuple[str, tuple[str, ...]]] = {}
        # any_leaf=False: "anything" values are written out in the skeleton like any other structure (a YAML one
        # holds whole blocks, whose line breaks the skeleton can cut where the leaf could not)
        self.any_leaf = any_leaf
        # loops=True: arrays and free keys written with ``automata.parse``'s loop operator (each item once), for a
        # reader of that syntax (a skeleton's); ``automata.parse.plain`` writes them out as regex syntax
        self.loops = loops

    @classmethod
    def load(cls, schema, style: str = "json", **options) -> Compiler:
        """The compiler of ``schema`` as the public functions take it: a dict/bool, a JSON string, or a class with
        ``model_json_schema()`` (``load_schema``); ``options`` are ``Compiler``'s."""
        return cls(load_schema(schema), style, **options)

    def document(self) -> str:
        """The regex of a whole document: the root written at the top (in skeleton mode, the skeleton).
        ``SchemaError`` if no instance satisfies the schema."""
        regex = self.value(self.root, "#", TOP)
        if regex is None:
            raise SchemaError("no instance satisfies the schema", pointer="#")
        return regex

    def leaf(self, regex: str | None) -> str | None:
        """``regex`` itself, or in skeleton mode the placeholder character standing for it."""
        if regex is None or self.leaves is None:
            return regex
        if regex not in self._leaf_of:
            if len(self._leaf_of) >= len(PLACEHOLDERS):
                raise StitchError(f"more than {len(PLACEHOLDERS)} distinct leaf regexes")
            char = chr(PLACEHOLDERS[len(self._leaf_of)])
            self._leaf_of[regex] = char
            self.leaves[char] = regex
        return self._leaf_of[regex]

    def expand(self, regex: str | None) -> str | None:
        """A skeleton regex with its placeholders replaced by what they stand for."""
        if regex is None or not self.leaves:
            return regex
        return "".join(f"(?:{self.leaves[c]})" if c in self.leaves else c for c in regex)

    # ---- normalisation -----------------------------------------------------------------------------------------
    def resolve_ref(self, ref, pointer: str) -> tuple[object, str]:
        if not isinstance(ref, str):
            raise SchemaError(f"$ref must be a string, not {ref!r}", keyword="$ref", pointer=pointer)
        if not ref.startswith("#"):
            raise UnsupportedSchemaError(f"$ref {ref!r}: only references inside the schema (#...) are supported",
                                         keyword="$ref", pointer=pointer)
        node = self.root
        path = unquote(ref[1:])
        if path and not path.startswith("/"):
            found = self._anchor(self.root, path)
            if found is None:
                raise SchemaError(f"$ref {ref!r} names no anchor or $id in the schema", keyword="$ref",
                                  pointer=pointer)
            return found
        for part in path.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise SchemaError(f"$ref {ref!r} resolves nowhere ({part!r} is missing)", keyword="$ref",
                                  pointer=pointer) from None
        return node, "#" + path

    def _anchor(self, node, name: str, pointer: str = "#"):
        if isinstance(node, dict):
            if node.get("$anchor") == name or node.get("$id") in (name, "#" + name):
                return node, pointer
            items = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            return None
        for key, child in items:
            found = self._anchor(child, name, f"{pointer}/{key}")
            if found:
                return found
        return None

    def alternatives(self, schema, pointer: str, stack: tuple[str, ...] = ()) -> list[Alternative]:
        """The node as a union of merged alternatives ([] if no instance satisfies it)."""
        if schema is True or schema == {}:
            # Anything: collections nest at most any_depth levels of "anything" (a tightening, never a loosening).
            deep = stack.count(_ANY_MARK) >= self.any_depth
            return [Alternative({}, pointer, _SCALARS if deep else TYPES, stack + (_ANY_MARK,))]
        if schema is False:
            return []
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema is an object or a boolean, not {json.dumps(schema)[:60]}", pointer=pointer)
        schema = dict(schema)
        if "$ref" in schema:
            target, target_pointer = self.resolve_ref(schema.pop("$ref"), pointer)
            rest = {} if self.ref_alone else {k: v for k, v in schema.items() if k not in ANNOTATIONS}
            if self.max_recursion is None and target_pointer in stack:
                return [self._call(target, target_pointer, pointer, stack, rest)]
            if self.max_recursion is not None and stack.count(target_pointer) >= self.max_recursion:
                return []  # recursion unrolled max_recursion times: deeper instances are not generated
            stack = stack + (target_pointer,)
            if not rest:
                return self.alternatives(target, target_pointer, stack)
            schema = {"allOf": [target, rest], **{k: v for k, v in schema.items() if k in ANNOTATIONS}}
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
            if schema.get(keyword):
                return self._dependent(schema, keyword, pointer, stack)
            schema.pop(keyword, None)
        if "not" in schema:
            positive = self._negated(schema["not"], f"{pointer}/not")
            if positive is not None:  # (otherwise refused below)
                rest = {k: v for k, v in schema.items() if k != "not"}
                return self.alternatives({"allOf": [rest, positive]} if rest else positive, pointer, stack)
        for keyword in schema:
            if keyword in _UNSUPPORTED and not self._trivial(keyword, schema[keyword], schema):
                value = json.dumps(schema[keyword])[:40]
                why = {"multipleOf": f"multipleOf {value} is not supported (only 1: the integers)",
                       "minProperties": f"minProperties {value} is not supported (only 1, or as many as required)",
                       "maxProperties": f"maxProperties {value} is not supported (only where the keys possible are "
                                        "no more)"}.get(keyword, f"{keyword} is not supported")
                raise UnsupportedSchemaError(why, keyword=keyword, pointer=pointer)
        if "allOf" in schema:
            parts = schema.pop("allOf")
            if not isinstance(parts, list) or not parts:
                raise SchemaError("allOf must be a non-empty array", keyword="allOf", pointer=pointer)
            alts = self._rest(schema, pointer, stack)
            for i, part in enumerate(parts):
                part_alts = self.alternatives(part, f"{pointer}/allOf/{i}", stack)
                alts = [merged for a in alts for b in part_alts if (merged := self._merge(a, b)) is not None]
            return alts
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                branches = schema.pop(keyword)
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(f"{keyword} must be a non-empty array", keyword=keyword, pointer=pointer)
                base = self._rest(schema, pointer, stack)
                alts = []
                for i, branch in enumerate(branches):
                    branch_alts = self.alternatives(branch, f"{pointer}/{keyword}/{i}", stack)
                    alts += [m for a in base for b in branch_alts if (m := self._merge(a, b)) is not None]
                if keyword == "oneOf" and len(alts) > 1:
                    try:
                        self._check_disjoint(alts, pointer)
                    except UnsupportedSchemaError as overlap:
                        exclusive = self._exclusive(schema, branches, pointer, stack)
                        if exclusive is None:
                            raise overlap
                        return exclusive
                return alts
        return [Alternative(schema, pointer, self._types(schema, pointer), stack)]

    def _rest(self, schema: dict, pointer: str, stack: tuple) -> list[Alternative]:
        """The alternatives of a node's keywords beside its ``allOf``/``anyOf``/``oneOf``, merged with each part: none
        left is no constraint, not a value of "anything" (whose nesting ``any_depth`` bounds: the merge with a part
        is the part's value, at the part's depth)."""
        if not schema:
            return [Alternative({}, pointer, TYPES, stack)]
        return self.alternatives(schema, pointer, stack)

    def _call(self, target, target_pointer: str, pointer: str, stack: tuple, rest: dict) -> Alternative:
        """A recursive ``$ref`` with ``max_recursion=None``: an alternative that calls the target's rule (its regex
        written once, ``call_bodies``), typed with the target's types (every type while they are being found)."""
        if self.style != "json":
            raise UnsupportedSchemaError("recursion at any depth (max_recursion=None) is for JSON: a YAML block's "
                                         "indentation grows with its depth; pass max_recursion=N", keyword="$ref",
                                         pointer=pointer)
        if rest:
            raise UnsupportedSchemaError(f"a recursive $ref beside {sorted(rest)} with max_recursion=None (the "
                                         "rule would have to be intersected); pass max_recursion=N",
                                         keyword="$ref", pointer=pointer)
        if target_pointer not in self.calls:
            self.calls[target_pointer] = (target, TYPES)
            inner = (target_pointer,)
            types = tuple(dict.fromkeys(t for alt in self.alternatives(target, target_pointer, inner)
                                        for t in alt.types))
            self.calls[target_pointer] = (target, types)
        return Alternative({}, target_pointer, self.calls[target_pointer][1], stack, call=target_pointer)

    def call_bodies(self) -> dict[str, str]:
        """(``max_recursion=None``) the regex of each called ``$ref`` target, its own recursive references calls
        (``automata.grammar.regular.call_marker``; the k-th target's marker is ``call_marker(k)``), in that order;
        writing one may call more targets, written too."""
        bodies: dict[str, str] = {}
        while len(bodies) < len(self.calls):
            target_pointer = list(self.calls)[len(bodies)]
            target = self.calls[target_pointer][0]
            regex = self.value(target, target_pointer, TOP, (target_pointer,))
            if regex is None:
                raise SchemaError("no instance satisfies the schema", pointer=target_pointer)
            bodies[target_pointer] = regex
        return bodies

    def _dependent(self, schema: dict, keyword: str, pointer: str, stack: tuple) -> list[Alternative]:
        """``dependencies`` / ``dependentRequired`` / ``dependentSchemas``, one key k at a time, as a union: the
        objects without k (``properties: {k: false}``), and those with k, its dependent keys required (or its
        dependent schema merged in). Each alternative keeps the other dependencies, so d of them give up to 2^d
        alternatives."""
        deps = schema[keyword]
        if not isinstance(deps, dict):
            raise SchemaError(f"{keyword} must be an object", keyword=keyword, pointer=pointer)
        key, dependent = next(iter(deps.items()))
        rest = {k: v for k, v in schema.items() if k != keyword}
        if len(deps) > 1:
            rest[keyword] = {k: v for k, v in deps.items() if k != key}
        where = f"{pointer}/{keyword}/{_escape_pointer(key)}"
        if isinstance(dependent, list) and keyword != "dependentSchemas":
            if not all(isinstance(name, str) for name in dependent):
                raise SchemaError(f"{keyword} of {key!r} must list property names", keyword=keyword, pointer=where)
            names, extra = dependent, True
        elif isinstance(dependent, (dict, bool)) and keyword != "dependentRequired":
            names, extra = [], dependent
        else:
            raise SchemaError(f"{keyword} of {key!r} must be an array of names or a schema", keyword=keyword,
                              pointer=where)
        absent = dict(rest, properties={**rest.get("properties", {}), key: False})
        present = dict(rest, required=list(dict.fromkeys(list(rest.get("required", [])) + [key] + names)))
        alts = self.alternatives(absent, pointer, stack)
        for a in self.alternatives(present, pointer, stack):
            alts += [m for b in self.alternatives(extra, where, stack) if (m := self._merge(a, b)) is not None]
        return alts

    def _exclusive(self, schema: dict, branches: list, pointer: str, stack: tuple) -> list[Alternative] | None:
        """Overlapping ``oneOf`` branches written exactly where each branch has a positive negation
        (``_negated``): branch i taken with the negation of every other, so each alternative satisfies exactly one
        branch (``oneOf: [{required: [a]}, {required: [b]}]``: a without b, or b without a). None where a branch
        has no such negation or the alternatives would be more than ``_MAX_EXCLUSIVE``."""
        negations = [self._negated(branch, f"{pointer}/oneOf/{j}") for j, branch in enumerate(branches)]
        if any(n is None for n in negations):
            return None
        # each branch's alternatives are at least the product of the others' negations' unions: past the bound,
        # refused before merging them (12 branches requiring two names each: 2^11 merges per branch)
        widths = [len(n["anyOf"]) if isinstance(n, dict) and isinstance(n.get("anyOf"), list) else 1
                  for n in negations]
        if any(math.prod(widths[:i] + widths[i + 1:]) > _MAX_EXCLUSIVE for i in range(len(widths))):
            return None
        alts: list[Alternative] = []
        for i, branch in enumerate(branches):
            others = [n for j, n in enumerate(negations) if j != i]
            alts += self.alternatives(dict(schema, allOf=[branch, *others]), f"{pointer}/oneOf/{i}", stack)
            if len(alts) > _MAX_EXCLUSIVE:
                return None
        return alts

    def _negated(self, negated, pointer: str, depth: int = 0):
        """A schema of exactly the instances ``negated`` rejects, for the forms written positively (None for the
        others, which are refused). An instance fails a schema when it fails one of its keywords, so the
        negation is the union of each keyword's (De Morgan): ``type``, its complement (not ``integer`` alone,
        whose complement holds the non-integral numbers); ``required``, an object lacking one of the names;
        ``properties`` (without ``additionalProperties``/``patternProperties``, which read it), an object whose
        value for one declared name fails that name's schema (negated in turn); ``not``, its schema; ``allOf``,
        failing one part; ``anyOf``, failing every branch; ``$ref``, its target's negation; ``enum``/``const`` of
        scalars, every other instance (``_all_but``). Keywords that only constrain one type (``required``
        objects...) are satisfied by every other type, so their negations hold only that type."""
        if negated is True or negated == {}:
            return False
        if negated is False:
            return True
        if not isinstance(negated, dict):
            raise SchemaError(f"not must be a schema, not {json.dumps(negated)[:60]}", keyword="not", pointer=pointer)
        keywords = {k: v for k, v in negated.items() if k not in ANNOTATIONS}
        if self.ref_alone and "$ref" in keywords:
            keywords = {"$ref": keywords["$ref"]}
        if depth > _MAX_NEGATION_DEPTH or "additionalProperties" in keywords or "patternProperties" in keywords:
            return None
        parts = []
        for keyword, value in keywords.items():
            part = self._negated_keyword(keyword, value, pointer, depth)
            if part is None:
                return None
            if part is not False:
                parts.append(part)
        return False if not parts else parts[0] if len(parts) == 1 else {"anyOf": parts}

    def _negated_keyword(self, keyword: str, value, pointer: str, depth: int):
        """``_negated`` of one keyword of a schema (False: nothing fails it; None: not written positively)."""
        if keyword == "type":
            named = self._types({"type": value}, pointer)  # (checked; "number" stands for "integer" too)
            if "integer" in named:
                return None  # the numbers that are not integers: no type names them
            rest = [t for t in TYPES if t not in named and not (t == "integer" and "number" in named)]
            return {"type": rest} if rest else False
        if keyword == "required":
            if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
                raise SchemaError("required must be an array of strings", keyword="required", pointer=pointer)
            names = list(dict.fromkeys(value))
            return {"type": "object", "anyOf": [{"properties": {n: False}} for n in names]} if names else False
        if keyword == "properties" and isinstance(value, dict):
            failing = []
            for name, sub in value.items():
                fails = self._negated(sub, f"{pointer}/properties/{_escape_pointer(name)}", depth + 1)
                if fails is None:
                    return None
                if fails is not False:
                    failing.append({"type": "object", "required": [name], "properties": {name: fails}})
            return False if not failing else failing[0] if len(failing) == 1 else {"anyOf": failing}
        if keyword == "not":
            return value
        if keyword in ("allOf", "anyOf") and isinstance(value, list) and value:
            each = [self._negated(part, f"{pointer}/{keyword}/{i}", depth + 1) for i, part in enumerate(value)]
            if any(n is None for n in each):
                return None
            if keyword == "allOf":
                each = [n for n in each if n is not False]
                return False if not each else {"anyOf": each}
            return False if any(n is False for n in each) else {"allOf": each}
        if keyword == "$ref":
            target, target_pointer = self.resolve_ref(value, pointer)
            return self._negated(target, target_pointer, depth + 1)
        if keyword in ("enum", "const"):
            if keyword == "enum" and not isinstance(value, list):
                raise SchemaError("enum must be an array", keyword="enum", pointer=pointer)
            return _all_but(value if keyword == "enum" else [value])
        return None

    @staticmethod
    def _trivial(keyword: str, value, schema: dict) -> bool:
        """Keywords that constrain nothing here: ``uniqueItems: false``, empty maps, and property counts that
        the node's own keywords already imply (as many required keys as ``minProperties``; no more possible keys
        than ``maxProperties``)."""
        if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
            return keyword == "uniqueItems" and value is False
        if keyword == "minProperties":  # (1: an object that is not empty, see _object)
            return value <= max(1, len(set(schema.get("required", []))))
        if keyword == "multipleOf":  # (1: a number that is an integer, see _number)
            return value == 1
        if keyword == "maxProperties":
            closed = schema.get("additionalProperties", True) is False and "patternProperties" not in schema
            return closed and len(set(schema.get("properties", {})) | set(schema.get("required", []))) <= value
        return keyword == "patternProperties" and value == {}

    def _types(self, schema: dict, pointer: str) -> tuple[str, ...]:
        declared = schema.get("type")
        if declared is None:  # no type: every type, each constrained by its own keywords (as the standard says)
            types = list(TYPES)
        else:
            types = [declared] if isinstance(declared, str) else declared
            if not isinstance(types, list) or any(t not in TYPES for t in types):
                raise SchemaError(f"type must be one of {TYPES} or a list of them, not {declared!r}", keyword="type",
                                  pointer=pointer)
        if schema.get("nullable") is True:
            types = list(types) + ["null"]
        if "number" in types:  # a number's texts include the integers'
            types = [t for t in types if t != "integer"]
        return tuple(dict.fromkeys(types))

    def _merge(self, a: Alternative, b: Alternative) -> Alternative | None:
        """The alternative satisfying both (None if none can), for allOf and for distributing anyOf/oneOf."""
        if a.call is not None or b.call is not None:  # a called rule merges only with types that admit it all
            call, other = (a, b) if a.call is not None else (b, a)
            if other.call is not None or any(k not in ANNOTATIONS and k != "type" for k in other.schema):
                raise UnsupportedSchemaError("a recursive $ref combined with other keywords (allOf, or the "
                                             "keywords beside anyOf/oneOf) with max_recursion=None; pass "
                                             "max_recursion=N", keyword="$ref", pointer=call.pointer)
            admitted = [t in other.types or (t == "integer" and "number" in other.types) for t in call.types]
            if all(admitted):
                return call
            if not any(admitted) and not ("number" in call.types and "integer" in other.types):
                return None  # (no type in common: no instance satisfies both)
            raise UnsupportedSchemaError(f"a recursive $ref restricted to the types {list(other.types)} of its "
                                         f"{list(call.types)} with max_recursion=None (the rule is called whole); "
                                         "pass max_recursion=N", keyword="$ref", pointer=call.pointer)
        sa, sb = a.schema, b.schema
        types = [t for t in a.types if t in b.types or (t == "integer" and "number" in b.types)] + \
            [t for t in b.types if t == "integer" and "number" in a.types and t not in a.types]
        if not types:
            return None
        merged = dict(sa)
        merged.pop("type", None)
        merged.pop("nullable", None)
        where = b.pointer
        for x, y, at in ((sa, sb, b.pointer), (sb, sa, a.pointer)):
            if x.get("patternProperties") and any(k in y for k in ("properties", "additionalProperties",
                                                                     "patternProperties")):
                raise UnsupportedSchemaError("allOf/anyOf combining patternProperties with other property keywords",
                                             keyword="patternProperties", pointer=at)
        for key, value in sb.items():
            if key in ("type", "nullable", "properties", "additionalProperties") or key in ANNOTATIONS:
                continue
            if key not in merged:
                merged[key] = value
            elif merged[key] == value:
                continue
            elif key in ("minLength", "minItems", "minimum", "exclusiveMinimum") and \
                    not isinstance(value, bool) and not isinstance(merged[key], bool):
                merged[key] = max(merged[key], value)
            elif key in ("maxLength", "maxItems", "maximum", "exclusiveMaximum") and \
                    not isinstance(value, bool) and not isinstance(merged[key], bool):
                merged[key] = min(merged[key], value)
            elif key == "required":
                merged[key] = list(dict.fromkeys(list(merged[key]) + list(value)))
            elif key in ("enum", "const"):
                mine = merged[key] if key == "enum" else [merged[key]]
                theirs = value if key == "enum" else [value]
                both = [v for v in mine if any(json_equal(v, w) for w in theirs)]
                if not both:
                    return None
                merged.pop(key)
                merged["enum"] = both if "enum" not in merged else \
                    [v for v in both if any(json_equal(v, w) for w in merged["enum"])]
            elif key == "pattern" and _EXCLUDED in sa and _EXCLUDED in sb:  # two negated enums: their union's
                merged[_EXCLUDED] = tuple(sorted({*sa[_EXCLUDED], *sb[_EXCLUDED]}))
                merged[key] = _exclusion_pattern(merged[_EXCLUDED])
            elif key is _EXCLUDED and "pattern" in sa and "pattern" in sb:
                continue  # (merged with the pattern)
            elif key in ("items", "prefixItems", "additionalItems"):
                continue  # below: item i of the merge satisfies item i of both sides
            else:
                raise UnsupportedSchemaError(f"allOf/anyOf combining two different {key!r} values",
                                             keyword=key, pointer=where)
        if any(k in sa for k in _ITEMS) and any(k in sb for k in _ITEMS):
            merged.update(self._merge_items(sa, sb))
        if "properties" in sa or "properties" in sb:
            merged["properties"] = self._merge_properties(sa, sb)
        if "additionalProperties" in sa and "additionalProperties" in sb:
            merged["additionalProperties"] = {"allOf": [sa["additionalProperties"], sb["additionalProperties"]]}
        elif "additionalProperties" in sb:
            merged["additionalProperties"] = sb["additionalProperties"]
        merged["type"] = list(dict.fromkeys(types))
        return Alternative(merged, a.pointer, tuple(dict.fromkeys(types)), _joined_stacks(a.stack, b.stack))

    @staticmethod
    def _merge_items(sa: dict, sb: dict) -> dict:
        """Item i of a merged array satisfies each side's schema for position i (its prefix slot, or its items)."""
        def slots(sch: dict) -> tuple[list, object]:
            items, prefix = sch.get("items", True), sch.get("prefixItems", [])
            return (items, sch.get("additionalItems", True)) if isinstance(items, list) else (prefix, items)

        (pa, ra), (pb, rb) = slots(sa), slots(sb)
        both = lambda x, y: x if y is True else y if x is True else {"allOf": [x, y]}  # noqa: E731
        prefix = [both(pa[i] if i < len(pa) else ra, pb[i] if i < len(pb) else rb) for i in range(max(len(pa), len(pb)))]
        return {"prefixItems": prefix, "items": both(ra, rb)}

    @staticmethod
    def _merge_properties(sa: dict, sb: dict) -> dict:
        """A key declared on one side only is, on the other side, an additional property: both constrain it."""
        pa, pb = sa.get("properties", {}), sb.get("properties", {})
        out = {}
        for key in list(pa) + [k for k in pb if k not in pa]:
            left = pa.get(key, sa.get("additionalProperties", True))
            right = pb.get(key, sb.get("additionalProperties", True))
            out[key] = left if right is True else right if left is True else {"allOf": [left, right]}
        return out

    def _check_disjoint(self, alts: list[Alternative], pointer: str) -> None:
        """oneOf is the union of its branches only when no instance satisfies two of them. A pair is disjoint
        when their merge (the schema of instances satisfying both) has no text; branches of scalar types only
        (one text per value) are compared on their automata instead when they cannot be merged (two patterns)."""
        for i in range(len(alts)):
            for j in range(i + 1, len(alts)):
                a, b = alts[i], alts[j]
                try:
                    both = self._merge(a, b)
                    overlap = both is not None and _union(self.typed(both, t, TOP) for t in both.types) is not None
                except UnsupportedSchemaError:
                    if not set(a.types + b.types) <= set(_SCALARS + ("integer",)):
                        raise UnsupportedSchemaError(f"oneOf branches {i} and {j} are not provably disjoint",
                                                     keyword="oneOf", pointer=pointer) from None
                    ra, rb = (self.expand(_union(self.typed(x, t, TOP) for t in x.types)) for x in (a, b))
                    overlap = ra is not None and rb is not None and not \
                        from_regex(ra).intersect(from_regex(rb)).is_empty()
                if overlap:
                    raise UnsupportedSchemaError(
                        f"oneOf branches {i} and {j} overlap (an instance can satisfy both)", keyword="oneOf",
                        pointer=pointer)

    # ---- regexes -----------------------------------------------------------------------------------------------
    def value(self, schema, pointer: str, pos: Position, stack: tuple[str, ...] = ()) -> str | None:
        """The regex of the texts of every instance of ``schema`` written at ``pos`` (None: no instance)."""
        key = (pointer, pos, stack, id(schema), self.leaves is None)
        if key not in self._memo and self.leaves is not None and (schema is True or schema == {}) \
                and self.any_leaf:
            # "anything" is one leaf in a skeleton: it is the same wherever it appears (at one position and
            # depth), so its fragment compiles once, and the skeleton keeps only the schema's own structure. Its
            # regex depends on nothing else (the options, the position, the depth): written once per process.
            anything = (self.style, self.strict, self.any_depth, pos, stack.count(_ANY_MARK))
            if anything not in _ANYTHING:
                leaves, self.leaves = self.leaves, None
                try:
                    regex = self.value(schema, pointer, pos, stack)
                finally:
                    self.leaves = leaves
                if len(_ANYTHING) >= 256:
                    _ANYTHING.clear()
                _ANYTHING[anything] = regex
            self._memo[key] = (schema, self.leaf(_ANYTHING[anything]))
        if key not in self._memo:
            checkpoint()  # (the compile's budget: unrolled recursion can multiply the values to write)
            self._written += 1
            if self._written > _MAX_VALUES:
                raise StateLimitError(f"the schema at {pointer} writes more than {_MAX_VALUES:,} values (each level of "
                                      "unrolled recursion multiplies them: pass a smaller max_recursion, or "
                                      "max_recursion=None in JSON)")
            parts = [self.typed(alt, t, pos) for alt in self.alternatives(schema, pointer, stack) for t in alt.types]
            regex = _union(self._merge_leaves(parts))
            if regex is not None and len(regex) > _MAX_TEXT_CHARACTERS:
                raise StateLimitError(f"the {'skeleton' if self.leaves is not None else 'regex'}'s text at {pointer} "
                                      f"outgrows {_MAX_TEXT_CHARACTERS:,} "
                                      "characters (each level of unrolled recursion multiplies it: pass a smaller "
                                      "max_recursion, or max_recursion=None in JSON)")
            self._memo[key] = (schema, regex)
        return self._memo[key][1]

    def _merge_leaves(self, parts: list[str | None]) -> list[str | None]:
        """In skeleton mode, alternatives that are each one leaf after the same lead become one leaf: the
        skeleton reads placeholders as distinct symbols, so two leaves whose languages overlap (an integer and a
        number) must not branch it."""
        if self.leaves is None:
            return parts
        out, merged = [], {}
        for part in parts:
            if part and part[-1] in self.leaves and part[-1] not in part[:-1] and not any(c in self.leaves for c in part[:-1]):
                lead = part[:-1]
                if lead not in merged:
                    merged[lead] = len(out)
                    out.append([lead])
                out[merged[lead]].append(self.leaves[part[-1]])
            else:
                out.append(part)
        return [p if not isinstance(p, list) else p[0] + self.leaf(_union(p[1:])) for p in out]

    def typed(self, alt: Alternative, type_: str, pos: Position) -> str | None:
        if alt.call is not None:  # (every type of a called rule: one call)
            return call_marker(list(self.calls).index(alt.call))
        s, p = alt.schema, alt.pointer
        if "enum" in s or "const" in s:
            return self._enum(alt, type_, pos)
        lead = pos.scalar_lead() if self.style == "yaml" else ""
        if type_ == "null":
            return lead + self.leaf("null")
        if type_ == "boolean":
            return lead + self.leaf("(true|false)")
        if type_ in ("integer", "number"):
            return self._number(s, p, type_, lead)
        if type_ == "string":
            return self._string(s, p, lead)
        if type_ == "array":
            return self._array(alt, pos)
        return self._object(alt, pos)

    def _enum(self, alt: Alternative, type_: str, pos: Position) -> str | None:
        values = alt.schema["enum"] if "enum" in alt.schema else [alt.schema["const"]]
        if not isinstance(values, list):
            raise SchemaError("enum must be an array", keyword="enum", pointer=alt.pointer)
        if "enum" in alt.schema and "const" in alt.schema:  # both, from two sides of a merge
            values = [v for v in values if json_equal(v, alt.schema["const"])]
        texts = [write_value(v, self.style, pos) for v in values if json_type(v, type_)
                 and _satisfies_scalar_keywords(v, alt.schema)]
        lead = pos.scalar_lead() if self.style == "yaml" and type_ not in ("object", "array") else ""
        if not texts:
            return None
        if not lead or not all(t.startswith(lead) for t in texts):
            return self.leaf(_union(literal(t) for t in texts))
        return lead + self.leaf(_union(literal(t[len(lead):]) for t in texts))

    def _number(self, s: dict, p: str, type_: str, lead: str) -> str | None:
        lo, hi, lo_x, hi_x = None, None, False, False
        if "multipleOf" in s:  # only 1 gets here (_trivial): the integers
            step = s["multipleOf"]
            if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0:
                raise SchemaError(f"multipleOf must be a number above 0, not {step!r}", keyword="multipleOf", pointer=p)
            type_ = "integer"
        for keyword, upper in (("minimum", False), ("maximum", True), ("exclusiveMinimum", False),
                               ("exclusiveMaximum", True)):
            value = s.get(keyword)
            if value is None or isinstance(value, bool):
                continue  # draft 4's boolean exclusive* modify minimum/maximum, below
            exclusive = keyword.startswith("exclusive") or s.get("exclusive" + keyword.capitalize()) is True
            if type_ == "integer":
                if not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise SchemaError(f"{keyword} must be a finite number, not {value!r}", keyword=keyword, pointer=p)
                bound = (math.floor(value) - (exclusive and value == math.floor(value))) if upper else \
                    (math.ceil(value) + (exclusive and value == math.ceil(value)))
                exclusive = False
            else:
                bound, exclusive = lexical.number_bound(value, keyword, p, exclusive=exclusive, upper=upper)
            if upper and (hi is None or bound < hi or (bound == hi and exclusive)):
                hi, hi_x, hi_keyword = bound, exclusive, keyword
            if not upper and (lo is None or bound > lo or (bound == lo and exclusive)):
                lo, lo_x, lo_keyword = bound, exclusive, keyword
        # (the spellings models write beside the canonical one, added to each value after every set operation
        # on values above, and at most MAX_INTEGER_DIGITS/MAX_FRACTION_DIGITS digits: every number ends)
        if type_ == "integer":
            regex = lexical.bounded_integer_regex(lo, hi)
        else:
            try:
                regex = lexical.number_regex(lo, hi, lo_exclusive=lo_x, hi_exclusive=hi_x, style=self.style,
                                             spellings=True)
            except ValueError as exc:  # a fractional bound within 1e-4 of zero
                keyword = lo_keyword if lexical.splits_exponent_forms(lo) else hi_keyword
                raise UnsupportedSchemaError(str(exc), keyword=keyword, pointer=p) from None
        return None if regex is None else lead + self.leaf(regex)

    def _string(self, s: dict, p: str, lead: str) -> str | None:
        lo, hi = _count(s, "minLength", 0, p), _count(s, "maxLength", None, p)
        if hi is not None and hi < lo:
            return None
        pattern, fmt = s.get("pattern"), s.get("format")
        fmt_regex = lexical.format_regex(fmt) if isinstance(fmt, str) else None
        bounded = lo > 0 or hi is not None
        if pattern is not None:
            body = lexical.pattern_regex(pattern, self.style, p, lo, hi,
                                         format_name=fmt if fmt_regex is not None else None)
            if body is None:
                return None
        elif fmt_regex is not None:
            body = lexical.format_body(fmt, self.style, p, lo, hi) if bounded else fmt_regex
            if body is None:
                return None
        elif self.style == "yaml" and not yaml_always_quoted(s):
            return lead + self.leaf(_union([lexical.plain_regex(), '"' + lexical.not_plain_body("yaml") + '"']))
        else:
            body = lexical.free_string_body(self.style, lo, hi)
        return lead + self.leaf(f'"{body}"')

    def _array(self, alt: Alternative, pos: Position) -> str | None:
        s, p = alt.schema, alt.pointer
        lo, hi = _count(s, "minItems", 0, p), _count(s, "maxItems", None, p)
        items, prefix = s.get("items", True), s.get("prefixItems", [])
        if isinstance(items, list):  # drafts 4 to 2019-09: an array of items is prefixItems
            prefix, items = items, s.get("additionalItems", True)
        if self.style == "json":
            lead, sep, dash, inner = "", ", ", "", pos
        else:
            lead, sep, column = pos.block()
            dash, inner = "-", Position("item", column)
        slots = [self.value(sub, f"{p}/prefixItems/{i}", inner, alt.stack) for i, sub in enumerate(prefix)]
        rest = self.value(items, f"{p}/items", inner, alt.stack)
        most = math.inf if hi is None else hi  # the longest list any instance can have
        for i, slot in enumerate(slots):
            if slot is None:
                most = min(most, i)
                break
        if rest is None:
            most = min(most, len(slots))
        if lo > most:
            return None
        nonempty = None
        if self.style == "yaml" and lead == sep and not slots and most >= 1 and rest is not None:
            # a block under a key: every item after the same line break and indentation, the first too, so the
            # items are one repetition and the item's text is written once (a first item apart doubled a nested
            # array's text at each level: a GitHub schema's skeleton reached 1.2M characters)
            items = lexical.repeat(f"{sep}{dash}{rest}", max(lo, 1), None if most == math.inf else most)
            return _union([items, pos.scalar_lead() + "\\[\\]" if lo == 0 else None])
        if most == math.inf and not slots and lo <= 1 and rest is not None and self.loops:
            # any number of items: the item written once (a nested array's text doubled at each level otherwise)
            nonempty = f"{LOOP}(?:{dash}{rest})(?:{sep})"
        elif most >= 1:
            # after[k]: the text after item k, each further item written with its separator; built from the end.
            m = max(len(slots), 1)
            after = ""
            if most > m:
                item = f"{sep}{dash}{rest}"
                after = lexical.repeat(item, max(0, lo - m), None if most == math.inf else most - m)
            for k in range(m - 1, 0, -1):
                if k >= most:
                    after = ""
                    continue
                piece = f"{sep}{dash}{slots[k]}{after}"  # slots[k] is item k + 1
                after = piece if k < lo else f"({piece})?"
            first = slots[0] if slots else rest
            nonempty = f"{dash}{first}{after}"
        if self.style == "json":
            return _union([f"\\[{nonempty}\\]" if nonempty else None, "\\[\\]" if lo == 0 else None])
        return _union([f"{lead}{nonempty}" if nonempty else None, pos.scalar_lead() + "\\[\\]" if lo == 0 else None])

    def _object(self, alt: Alternative, pos: Position) -> str | None:
        s, p = alt.schema, alt.pointer
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise SchemaError("properties must be an object", keyword="properties", pointer=p)
        required = s.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError("required must be an array of strings", keyword="required", pointer=p)
        additional = s.get("additionalProperties", False if self.strict else True)
        props = dict(props)
        for name in required:  # a required key that is not declared is an additional one, declared here
            if name not in props:
                props[name] = additional
        if self.style == "json":
            lead, sep, inner = "", ", ", pos
        else:
            lead, sep, column = pos.block()
            inner = Position("key", column)
        entries = []
        for name, sub in props.items():
            value = self.value(with_pattern_schemas(s, name, sub, self.style, p),
                               f"{p}/properties/{_escape_pointer(name)}", inner, alt.stack)
            if value is None:
                if name in required:
                    return None
                continue
            entries.append((literal(write_key(name, self.style)) + value, name in required))
        extra = None
        other_keys = self._other_keys(s, p, list(props), additional)
        if other_keys is not None:
            extras = []
            for key_body, sub, where in other_keys:
                value = self.value(sub, where, inner, alt.stack)
                if value is not None:
                    extras.append(self.leaf(f'"{key_body}"') + (": " if self.style == "json" else ":") + value)
            extra = _union(extras)
        elif additional is not False:
            value = self.value(additional, f"{p}/additionalProperties", inner, alt.stack)
            if value is not None:
                extra = self._other_key(list(props)) + value
        body, empty_ok = _ordered(entries, extra, sep, self.loops)
        empty_ok = empty_ok and not s.get("minProperties", 0)  # (more than 1 is refused unless required implies it)
        if self.style == "json":
            return _union([f"\\{{{body}\\}}" if body else None, "\\{\\}" if empty_ok else None])
        return _union([f"{lead}{body}" if body else None, pos.scalar_lead() + "\\{\\}" if empty_ok else None])

    def _other_keys(self, s: dict, p: str, declared: list[str], additional) -> list[tuple[str, object, str]] | None:
        """The keys an object may have beside the declared ones, by ``patternProperties``: (regex of the written
        keys, their value's schema, its pointer) per region — the keys matching exactly some set of patterns
        take all their schemas, the keys matching none ``additionalProperties`` (``automata.regions`` writes each
        region from one automaton of the patterns and "any key but the declared ones"). None when there are no
        patterns (the caller writes "any key but the declared ones" itself)."""
        patterns = s.get("patternProperties", {})
        if not isinstance(patterns, dict):
            raise SchemaError("patternProperties must be an object", keyword="patternProperties", pointer=p)
        if not patterns or (additional in (True, {}) and all(sub in (True, {}) for sub in patterns.values())):
            return None  # (every key takes any value anyway)
        names = list(patterns)
        bodies = [lexical.pattern_regex(n, self.style, f"{p}/patternProperties/{_escape_pointer(n)}") for n in names]
        try:
            found = regions(bodies + [_string_except(declared, self.style)])
        except (StateLimitError, RegexError) as exc:
            raise UnsupportedSchemaError(f"patternProperties: the keys of each pattern could not be written apart "
                                         f"({exc})", keyword="patternProperties", pointer=p) from None
        other = len(names)  # the region index of "any key but the declared ones"
        keys = []
        for region, regex in found.items():
            if other not in region:
                continue  # declared keys: their own entries (``pattern_schema`` adds the patterns' schemas)
            matched = sorted(region - {other})
            if matched:
                sub, where = pattern_schema(s, [names[i] for i in matched], p)
            else:
                sub, where = additional, f"{p}/additionalProperties"
            if sub is not False:
                keys.append((regex, sub, where))
        return keys

    def _other_key(self, declared: list[str]) -> str:
        """Any key but the declared ones, with what follows it up to the value (``": "`` or ``:``)."""
        char = self.leaf('"' + _string_except(declared, self.style) + '"')
        if self.leaves is not None and declared:
            self.exceptions[char] = ('"' + _any_string(self.style) + '"',
                                     tuple(sorted(_written_key(name, self.style) for name in set(declared))))
        return char + (": " if self.style == "json" else ":")


def _all_but(values: list) -> dict | None:
    """A schema of every instance but ``values`` (None where one is an array or an object): the types none of
    them has, the other boolean, strings but these (a ``pattern``: the complement of their trie), numbers between
    them (exclusive bounds, so ``1`` and ``1.0`` both go)."""
    if any(isinstance(v, (list, dict)) for v in values):
        return None
    strings = sorted({v for v in values if isinstance(v, str)})
    numbers = sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    booleans = [b for b in (True, False) if not any(v is b for v in values)]
    parts: list[dict] = [{"type": ["object", "array"]}]
    if not any(v is None for v in values):
        parts.append({"type": "null"})
    if booleans:
        parts.append({"type": "boolean"} if len(booleans) == 2 else {"type": "boolean", "enum": booleans})
    parts.append({"type": "string", "pattern": _exclusion_pattern(tuple(strings)), _EXCLUDED: tuple(strings)}
                 if strings else {"type": "string"})
    bounds = [None, *numbers, None]
    for lo, hi in zip(bounds, bounds[1:]):
        part = {"type": "number"}
        if lo is not None:
            part["exclusiveMinimum"] = lo
        if hi is not None:
            part["exclusiveMaximum"] = hi
        parts.append(part)
    return {"anyOf": parts}


class _Excluded:
    """The key under which ``_all_but``'s string schema carries the strings its ``pattern`` excludes, so that two
    of them met by ``allOf`` (a string unequal to two sets of values: two negated enums) merge into the pattern
    of the union. Not a string: no schema read from JSON can hold it."""

    def __repr__(self) -> str:
        return "<strings excluded>"


_EXCLUDED = _Excluded()


def _exclusion_pattern(strings: tuple[str, ...]) -> str:
    """The ``pattern`` of every string but ``strings`` (sorted, distinct)."""
    return "^" + _trie_complement(word_trie(list(strings))) + "$"


def _trie_complement(node: dict) -> str:
    """An ECMA-262 pattern of the strings that are not a word of the trie ``node`` (``charset.word_trie``): the
    empty string unless a word ends here, a character no word goes on with followed by anything, or a character
    some word goes on with followed by the complement below it."""
    children = sorted(c for c in node if c)
    parts = [] if "" in node else [""]
    parts.append(("[^" + "".join(_ecma(c, True) for c in children) + "]" if children else "[\\s\\S]")
                 + "[\\s\\S]*")
    parts += [_ecma(c, False) + _trie_complement(node[c]) for c in children]
    return "(?:" + "|".join(parts) + ")"


def _ecma(char: str, in_class: bool) -> str:
    """``char`` as a literal in an ECMA-262 pattern (inside a class or not)."""
    return "\\" + char if char in ("\\]^-[" if in_class else "\\^$.|?*+()[]{}/") else char


def _written_key(name: str, style: str) -> str:
    """``name`` as a free key's leaf writes it (``_string_except``'s spelling, in double quotes)."""
    return '"' + "".join(escape_of(c, style) for c in name) + '"'


def _any_string(style: str) -> str:
    """The written characters of any string (``_string_except``'s, with no word to avoid)."""
    return f"({spelled(ANY, style)})*"


def _string_except(words: list[str], style: str) -> str:
    """The written characters of any string except ``words``: walk the words' trie; a string leaves it at some
    character, or ends on a node that is no word."""
    return _string_except_cached(tuple(words), style)


@functools.lru_cache(maxsize=1024)
def _string_except_cached(words: tuple[str, ...], style: str) -> str:
    trie = word_trie(list(words))
    any_ = _any_string(style)

    def walk(node: dict) -> str:
        alts = [] if "" in node else [""]
        others = _spelled_all_but("".join(sorted(c for c in node if c)), style)
        if others:
            alts.append(others + any_)
        alts += [literal(escape_of(c, style)) + walk(child) for c, child in sorted(node.items()) if c]
        return "(" + "|".join(alts) + ")"

    return walk(trie)


@functools.lru_cache(maxsize=1 << 14)
def _spelled_all_but(chars: str, style: str) -> str:
    """The written characters of any character but ``chars`` ('' where none is left): a trie node's way out, the
    same few sets at most nodes of every key trie (a node of a key's spelling goes on with one letter), so
    cached (they were most of the time a free key's leaf took)."""
    others = ANY - CharSet.chars(chars)
    return spelled(others, style) if others else ""


def _joined_stacks(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """The stack of two merged alternatives: both grew from the node's own stack, so ``a`` and what ``b`` adds past
    their common start. Repeats stay: a ``$ref`` entered again under ``oneOf`` counts towards ``max_recursion``
    (dropping them let a recursive ``oneOf`` unroll without end)."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return a + b[common:]


def _count(schema: dict, keyword: str, default, pointer: str):
    """A length or item count bound: a non-negative integer (``2.0`` is 2)."""
    value = schema.get(keyword, default)
    if value is default:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise SchemaError(f"{keyword} must be a non-negative integer, not {value!r}", keyword=keyword,
                          pointer=pointer)
    return int(value)


def _escape_pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _satisfies_scalar_keywords(value, schema: dict) -> bool:
    """Enum values must satisfy the node's other keywords too; the scalar ones are checked here, and object or
    array keywords beside an enum are refused by the caller's keyword check (they are rare)."""
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", math.inf):
            return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            return False
        if schema.get("multipleOf") == 1 and value != int(value):
            return False
        ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if isinstance(ex_lo, (int, float)) and not isinstance(ex_lo, bool) and value <= ex_lo:
            return False
        if isinstance(ex_hi, (int, float)) and not isinstance(ex_hi, bool) and value >= ex_hi:
            return False
    return True


def schema_regex(schema, style: str = "json", *, strict: bool = False, max_recursion: int = 3,
                 any_depth: int = 2) -> str:
    """The regex (``re.fullmatch`` semantics) of the texts of all instances of ``schema`` in the layout of
    ``style``. ``schema`` is a dict, a JSON string, or a class with ``model_json_schema()`` (pydantic)."""
    return Compiler.load(schema, style, strict=strict, max_recursion=max_recursion, any_depth=any_depth).document()


def load_schema(schema):
    """A schema given as a dict/bool, a JSON string, or a pydantic-style model class."""
    if hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc}") from None
    if not isinstance(schema, (dict, bool)):
        raise SchemaError(f"a schema is an object or a boolean, not {type(schema).__name__}", pointer="#")
    return schema
