"""JSON Schema -> regex -> guide: the layout round-trips, the regex agrees with a JSON Schema validator, guides on
real tokenizers accept the runtime's encodings of valid instances, reject invalid ones, and random walks end in
text that parses, validates and is canonical. Oracles: ``jsonschema`` (the validator), ``json``/``yaml`` (the
readers), the ``tokenizers`` runtime (canonical encodings), the official JSON-Schema-Test-Suite."""

import contextlib
import datetime
import gc
import itertools
import json
import re
import signal
import time
import zlib

import jsonschema
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import product
import vegas
from automata import StateLimitError
from bpe.assets import json_schema_test_suite
from product.counted import CountedGuide
from tests.schema_cases import INVALID, PERSON, SCHEMAS, VALID
from tests.support import automaton_of, runtime_of, walk_to_accepting
from vegas import SchemaError, UnsupportedSchemaError, format_instance, schema_regex
from vegas.lexical import YAML_SPECIAL_WORDS, integer_regex, is_plain_safe, number_regex

STYLES = ("json", "yaml")

# ---- values that stress the layout: quotes, colons, '#', leading dashes, YAML words, numbers as strings ------
_TRICKY = st.sampled_from(sorted(YAML_SPECIAL_WORDS) + [
    "", " ", "a: b", "a #b", "#x", "- item", "-", "?", "'q'", '"q"', "1.0", "0x1F", "1e3", "12:30", "2024-01-01",
    "~", "null ", " lead", "trail ", "multi\nline", "tab\there", "back\\slash", "é café", "日本語", "emoji 🎉",
    "\u2028", "\x85", "\x7f", "\ufeff", "[a]", "{a}", "&anchor", "*alias", "!tag", "%dir", "@at", "`tick", "|", ">",
    "a,b", "key:", "_private", "Ok", "Hello, world!", "It's fine.", "C++ & Rust"])
_STRINGS = st.one_of(_TRICKY, st.text(max_size=12))
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), _FLOATS, _STRINGS)
_VALUES = st.recursive(_SCALARS, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(_STRINGS, children, max_size=4)), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_the_layout_reads_back_as_the_value(value):
    text = format_instance(value, {})
    assert text == json.dumps(value, ensure_ascii=False) or _has_integral_float(value)
    assert json.loads(text) == value
    assert yaml.safe_load(format_instance(value, {}, style="yaml")) == value


def _has_integral_float(value) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, list):
        return any(map(_has_integral_float, value))
    if isinstance(value, dict):
        return any(map(_has_integral_float, value.values()))
    return False


@given(_STRINGS)
def test_plain_yaml_strings_are_exactly_the_plain_safe_ones(text):
    written = format_instance(text, {"type": "string"}, style="yaml")
    assert (written == text) == is_plain_safe(text)
    assert yaml.safe_load(written) == text
    assert re.fullmatch(schema_regex({"type": "string"}, "yaml"), written)


@given(st.integers(-2000, 2000), st.integers(-2000, 2000), st.integers(-3000, 3000))
def test_integer_ranges_are_exact(lo, hi, n):
    regex = integer_regex(lo, hi)
    assert (regex is not None and re.fullmatch(regex, str(n)) is not None) == (lo <= n <= hi)
    assert (re.fullmatch(integer_regex(lo, None), str(n)) is not None) == (n >= lo)
    assert (re.fullmatch(integer_regex(None, hi), str(n)) is not None) == (n <= hi)


@given(st.integers(-50, 50), st.integers(-50, 50), st.booleans(), st.booleans(),
       st.one_of(st.integers(-100, 100), st.floats(-100, 100), st.floats(-1e-3, 1e-3), st.floats(1e15, 1e20)))
def test_number_ranges_are_exact(lo, hi, lo_x, hi_x, x):
    inside = (x > lo if lo_x else x >= lo) and (x < hi if hi_x else x <= hi)
    for style in STYLES:
        regex = number_regex(lo, hi, lo_exclusive=lo_x, hi_exclusive=hi_x, style=style)
        text = format_instance(x, {}, style=style)
        assert (regex is not None and re.fullmatch(regex, text) is not None) == inside, (text, regex)


_FRACTIONAL_BOUNDS = st.one_of(st.sampled_from([0.01, 0.5, -459.67, 10.5, 99999999999.99, -0.75, 2.25, 0.1, 64.0]),
                               st.floats(-1000, 1000).filter(lambda b: b == 0 or abs(b) >= 1e-4),
                               st.decimals(-100, 100, places=3).map(float).filter(lambda b: b == 0 or abs(b) >= 1e-4))
_NUMBERS = st.one_of(st.floats(-1000, 1000), st.decimals(-100, 100, places=4).map(float), st.integers(-1000, 1000),
                     st.floats(-1e-3, 1e-3), st.sampled_from([0.01, 0.0099, 0.5, 0.5000000000000001, -459.67, 10.5]))


@given(st.one_of(st.none(), _FRACTIONAL_BOUNDS), st.one_of(st.none(), _FRACTIONAL_BOUNDS),
       st.sampled_from([("minimum", "maximum"), ("exclusiveMinimum", "exclusiveMaximum"),
                        ("minimum", "exclusiveMaximum")]), _NUMBERS)
def test_fractional_number_bounds_agree_with_the_validator(lo, hi, keywords, x):
    """Decimal bounds (``0.01``, ``-459.67``) are compared digit by digit with the written number: the regex
    accepts the text of x iff the validator accepts x, also for x one float away from the bound."""
    schema = {"type": "number"}
    for keyword, bound in zip(keywords, (lo, hi)):
        if bound is not None:
            schema[keyword] = bound
    valid = jsonschema.Draft202012Validator(schema).is_valid(x)
    for style in STYLES:
        try:
            regex = schema_regex(schema, style)
        except SchemaError as empty:  # no number is within the bounds
            assert "no instance" in str(empty) and not valid
            continue
        assert (re.fullmatch(regex, format_instance(x, schema, style=style)) is not None) == valid, (schema, x)


_BOUNDED_PATTERNS = ["^[a-zA-Z0-9_\\.]+$", "[0-9a-fA-F]+", "^https?://.+$", "^[0-9a-z-]*$", "^[a-zA-Z]+$", "ab|^c", "x",
                     "^(a|bc){0,3}d?$", "^$|^(?:\\S+\\s+){0,2}\\S+$"]


@settings(max_examples=400)
@given(st.sampled_from(_BOUNDED_PATTERNS), st.integers(0, 6), st.one_of(st.none(), st.integers(0, 14)),
       st.one_of(st.text("abcx019.-_:/ hpstAF\"\\é", max_size=16),
                 st.sampled_from(["http://x", "https://abc.de", "deadbeef", "a b c", "ab", "abcd", "bcbcd", "x"])))
def test_patterns_with_length_bounds_are_exact(pattern, lo, hi, text):
    """A ``pattern`` with ``minLength``/``maxLength``: the bound is shared out over the pattern's parts (counted
    in characters, not in written characters); the regex accepts the written text iff the pattern finds a match
    and the length is within the bounds (checked with Python's ``re``, which agrees with ECMA-262 here)."""
    schema = {"type": "string", "pattern": pattern, "minLength": lo, **({} if hi is None else {"maxLength": hi})}
    valid = re.search(pattern, text) is not None and lo <= len(text) and (hi is None or len(text) <= hi)
    for style in STYLES:
        try:
            regex = schema_regex(schema, style)
        except SchemaError as empty:
            assert "no instance" in str(empty) and not valid
            continue
        assert (re.fullmatch(regex, format_instance(text, schema, style=style)) is not None) == valid, (schema, text)


def _anchored_patterns():
    """ECMA-262 patterns with anchors anywhere and lookaheads in an alternative's sequence."""
    atoms = st.sampled_from(["a", "b", "[ab]", ".", "c", ""])
    body = st.recursive(atoms, lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join), st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
        inner.map(lambda x: f"({x})?"), inner.map(lambda x: f"(?:{x})+"), inner.map(lambda x: f"({x})*"),
        inner.map(lambda x: f"(?:{x}){{2,3}}"), inner.map(lambda x: "^" + x),
        inner.map(lambda x: x + "$")), max_leaves=6)
    looks = st.lists(st.sampled_from(["(?=a)", "(?!b)", "(?!.*c$)", "(?=.*b)", "(?!a|$)", "(?!^a)"]),
                     max_size=2).map("".join)
    tail = st.sampled_from(["", "|c$", "|^b", "(?=b)", "(?!a)c", "(?=.*c$)a"])
    return st.tuples(st.sampled_from(["", "^"]), looks, body, tail).map("".join)


@settings(max_examples=500)
@given(_anchored_patterns(), st.lists(st.text("abc. ", max_size=6), min_size=1, max_size=6))
def test_anchors_anywhere_and_lookaheads_are_exact(pattern, texts):
    """A pattern with ``^``/``$`` inside groups or alternatives (``(^a|b)c``, ``^(a|$)``, ``/^x$/``, which no string
    matches) and lookaheads in an alternative's sequence (``^(?!@@)``, ``(?=.*[A-Z])``, ``a*(?=[.]json)``): the regex accepts a
    string iff the pattern finds a match in it (Python's ``re``, which agrees with ECMA-262 here: no line breaks in
    the texts). A repeated anchor the reader refuses is refused by name."""
    schema = {"type": "string", "pattern": pattern}
    try:
        regex = schema_regex(schema)
    except UnsupportedSchemaError as refused:
        assert any(why in str(refused) for why in ("inside a lookahead not after", "'$' before a lookahead")), refused
        return
    except SchemaError as empty:  # no string matches
        assert "no instance" in str(empty)
        assert not any(re.search(pattern, text) for text in texts)
        return
    for text in texts:
        assert (re.fullmatch(regex, format_instance(text, schema)) is not None) == \
            (re.search(pattern, text) is not None), (pattern, text)


def test_lookbehind_and_lookaheads_inside_a_match_are_refused_by_name():
    for pattern, why in [("(?<=a)b", "lookbehind"), ("a(b(?=c))", "lookahead inside a group"),
                         ("(?:^a){20}", "inside a repetition"), ("(?=^a)", "'^' inside a lookahead not after")]:
        with pytest.raises(UnsupportedSchemaError, match=re.escape(why)):
            schema_regex({"type": "string", "pattern": pattern})


_PATTERNS_WITH_FORMATS = [("^([0-9]{4})(-([0-9]{2}))?(-([0-9]{2}))?$", "date"), ("^\\d{4}-\\d{2}-29$", "date"),
                          ("^[a-z.]+@example\\.(com|org)$", "email"), ("^10\\.", "ipv4"), ("T1", "date-time"),
                          ("^[0-9a-f-]+$", "uuid"), ("^https://", "uri"), ("^[^.]*$", "hostname"), ("^2", "time")]


@settings(max_examples=300)
@given(st.sampled_from(_PATTERNS_WITH_FORMATS), st.integers(0, 12), st.one_of(st.none(), st.integers(8, 40)),
       st.one_of(st.sampled_from(["2024-02-29", "2023-02-29", "2024-13-01", "2024", "a.b@example.com", "a@example.net",
                                  "10.0.0.1", "10.0.0.256", "11.0.0.1", "2024-01-01T10:00:00Z", "2024-01-01T20:00:00Z",
                                  "123e4567-e89b-12d3-a456-426614174000", "123E4567-e89b-12d3-a456-426614174000",
                                  "https://a.b/c", "http://a.b", "example.org", "localhost", "23:59:59Z",
                                  "12:00:00+01:00"]),
                 st.text("0123456789-:T.Zaex@", max_size=24)))
def test_patterns_beside_formats_are_exact(pattern_format, lo, hi, text):
    """A ``pattern`` beside a known ``format``: the regex accepts a string iff the pattern finds a match in it and
    the format's own regex matches it whole (each tested on its own elsewhere), within the length bounds."""
    pattern, fmt = pattern_format
    schema = {"type": "string", "pattern": pattern, "format": fmt, "minLength": lo,
              **({} if hi is None else {"maxLength": hi})}
    valid = (re.search(pattern, text) is not None and re.fullmatch(schema_regex({"type": "string", "format": fmt})[1:-1],
                                                                     text) is not None
             and lo <= len(text) and (hi is None or len(text) <= hi))
    for style in STYLES:
        try:
            regex = schema_regex(schema, style)
        except UnsupportedSchemaError as refused:  # only a length bound may make the pair too large to write
            assert hi is not None and f"length bound ({lo}..{hi})" in str(refused)
            continue
        except SchemaError as empty:
            assert "no instance" in str(empty) and not valid
            continue
        assert (re.fullmatch(regex, format_instance(text, schema, style=style)) is not None) == valid, (schema, text)


def test_a_pattern_beside_a_format_too_large_together_is_refused():
    with pytest.raises(UnsupportedSchemaError, match="pattern 'abc' with format 'uuid'") as info:
        schema_regex({"type": "object", "properties": {"id": {"type": "string", "pattern": "abc", "format": "uuid"}}})
    assert (info.value.keyword, info.value.pointer) == ("pattern", "#/properties/id")


def test_formats_with_length_bounds_are_exact_or_refused():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    cases = [("uuid", 0, 36, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567"]),
             ("date", 10, 10, ["2024-02-29"], ["2023-02-29"]),
             ("ipv4", 0, 9, ["10.0.0.1", "1.2.3.4"], ["192.168.0.1", "10.0.0.256"]),
             ("ipv6", 0, 15, ["::1", "fe80::1"], ["2001:db8:85a3::8a2e:370:7334", "::g"]),
             ("uri", 0, 20, ["https://a.b/c", "mailto:x@y"], ["https://example.org/long/path", "no scheme"])]
    for fmt, lo, hi, valid, invalid in cases:
        schema = {"type": "string", "format": fmt, "minLength": lo, "maxLength": hi}
        validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
        regex = re.compile(schema_regex(schema))
        for text in valid + invalid:
            if fmt in checker.checkers:  # (jsonschema checks uri only with an extra package installed)
                assert validator.is_valid(text) == (text in valid), text
            assert bool(regex.fullmatch(format_instance(text, schema))) == (text in valid), (fmt, text)
    with pytest.raises(UnsupportedSchemaError, match="format 'email' with a length bound") as info:
        schema_regex({"type": "string", "format": "email", "maxLength": 254})
    assert (info.value.keyword, info.value.pointer) == ("format", "#")


# ---- the regex agrees with a validator ------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_regex_accepts_exactly_the_valid_instances(name, style):
    schema, regex = SCHEMAS[name], re.compile(schema_regex(SCHEMAS[name], style))
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for instance in VALID[name] + INVALID[name]:
        valid = checker.is_valid(instance)
        assert valid == (instance in VALID[name]), instance  # the lists themselves are right
        text = format_instance(instance, schema, style=style)
        assert bool(regex.fullmatch(text)) == valid, text
        assert (json.loads(text) if style == "json" else yaml.safe_load(text)) == instance


_SUITE_EXPECTED_DIFFERENCES = {
    # The schema names one type's keywords and no type: canonmerge generates that type only (a tightening).
    "ignores", "all string formats ignore", "is only an annotation by default", "root pointer ref",
    "JavaScript pseudo-array is valid",
    # Values of "anything" nest at most any_depth=2 levels.
    "array of nested objects is valid",
    # A custom metaschema turning validation off.
    "no validation: invalid number, but it still validates",
}


@pytest.mark.parametrize("style", STYLES)
def test_the_json_schema_test_suite_never_accepts_an_invalid_instance(style):
    """Every schema of draft 2020-12 compiles or is refused with a typed error naming keyword and pointer; no
    invalid instance's text is accepted; valid ones are rejected only where canonmerge deliberately tightens."""
    compiled = refused = agreed = 0
    for file, groups in json_schema_test_suite().items():
        for group in groups:
            try:
                regex = re.compile(schema_regex(group["schema"], style))
            except UnsupportedSchemaError as exc:
                assert exc.keyword and exc.pointer.startswith("#") and exc.keyword in str(exc)
                refused += 1
                continue
            except SchemaError:
                refused += 1
                continue
            compiled += 1
            for test in group["tests"]:
                text = format_instance(test["data"], group["schema"], style=style)
                accepted = bool(regex.fullmatch(text))
                where = f"{file}: {group['description']}: {test['description']}: {text!r}"
                assert not (accepted and not test["valid"]), "invalid instance accepted: " + where
                if test["valid"] and not accepted:
                    assert any(d in test["description"] or d in group["description"]
                               for d in _SUITE_EXPECTED_DIFFERENCES), "valid instance rejected: " + where
                agreed += accepted == test["valid"]
    assert compiled >= 140 and agreed >= 400, (compiled, refused, agreed)


def test_bad_schemas_get_typed_errors_naming_keyword_and_pointer():
    cases = [
        ({"type": "object", "properties": {"a": {"not": {"minLength": 3}}}}, UnsupportedSchemaError, "not",
         "#/properties/a"),
        ({"type": "array", "uniqueItems": True}, UnsupportedSchemaError, "uniqueItems", "#"),
        ({"$ref": "http://example.com/schema.json"}, UnsupportedSchemaError, "$ref", "#"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, SchemaError, "$ref", "#/properties/a"),
        ({"type": "string", "pattern": "(unclosed"}, SchemaError, "pattern", "#"),
        ({"type": "string", "pattern": "(?<=a)b"}, UnsupportedSchemaError, "pattern", "#"),
        ({"type": "integer", "multipleOf": 3}, UnsupportedSchemaError, "multipleOf", "#"),
        ({"type": "number", "multipleOf": 0.01}, UnsupportedSchemaError, "multipleOf", "#"),
        ({"type": "object", "minProperties": 2}, UnsupportedSchemaError, "minProperties", "#"),
        ({"type": "number", "minimum": 0.00005}, UnsupportedSchemaError, "minimum", "#"),
        ({"type": "number", "minimum": -0.5, "maximum": 0.00005}, UnsupportedSchemaError, "maximum", "#"),
        ({"type": "wat"}, SchemaError, "type", "#"),
        ({"properties": {"o": {"patternProperties": {"(?<!a)b": {"type": "integer"}}}}}, UnsupportedSchemaError,
         "pattern", "#/properties/o/patternProperties/(?<!a)b"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, UnsupportedSchemaError, "oneOf", "#"),
    ]
    for schema, error, keyword, pointer in cases:
        with pytest.raises(error) as info:
            schema_regex(schema)
        assert (info.value.keyword, info.value.pointer) == (keyword, pointer), (schema, info.value)
    with pytest.raises(SchemaError):
        schema_regex([1, 2])
    with pytest.raises(SchemaError):
        schema_regex("{not json")
    with pytest.raises(SchemaError, match="no instance"):
        schema_regex({"type": "integer", "minimum": 5, "maximum": 3})
    with pytest.raises(ValueError):
        schema_regex({}, style="toml")


_ELEMENT = {"$ref": "#/definitions/element", "definitions": {"element": {
    "type": "object", "additionalProperties": False, "properties": {"tag": {"type": "string"}, "children": {
        "oneOf": [{"type": "string"}, {"$ref": "#/definitions/element"},
                  {"type": "array", "items": {"$ref": "#/definitions/element"}}]}}}}}


@pytest.mark.parametrize("max_recursion", [1, 2, 3, 4])
def test_recursion_through_one_of_unrolls_max_recursion_times(max_recursion):
    """A ``$ref`` met again under ``oneOf`` counts towards ``max_recursion`` (merged alternatives once dropped the
    repeat, and such a schema unrolled until Python's stack overflowed), and the merge with the node's empty rest is
    no "anything" value (its nesting bound, ``any_depth``, once cut the unrolling at 3 whatever ``max_recursion``)."""
    def nested(depth):
        value = {"tag": "leaf"}
        for _ in range(depth):
            value = {"tag": "node", "children": value if depth % 2 else [value]}
        return value

    regex = re.compile(schema_regex(_ELEMENT, max_recursion=max_recursion))
    for depth in range(6):
        assert jsonschema.Draft7Validator(_ELEMENT).is_valid(nested(depth))
        assert bool(regex.fullmatch(format_instance(nested(depth), _ELEMENT))) == (depth < max_recursion), depth


def test_unrolling_that_multiplies_the_skeleton_stops_with_a_typed_error(monkeypatch):
    """40 properties each recursing: each level of unrolling writes 40 times the objects of the one below. The walk
    stops past ``_MAX_VALUES`` values written (real schemas write a few hundred); it checks the compile's budget at
    every value (it once ran 127 s and 19 GB past a 30 s budget); and it refuses a text past
    ``_MAX_TEXT_CHARACTERS`` as soon as it is written, a skeleton's or, written whole, a regex's (a 4-key
    recursion unrolled 8 times wrote 0.5 GB of regex and was killed for memory)."""
    import vegas.schema
    from automata.budget import CompileBudget, CompileTimeoutError

    wide = {"$defs": {"n": {"type": "object", "properties": {
        f"p{i}": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]} for i in range(40)}}}, "$ref": "#/$defs/n"}
    canonical = automaton_of("gpt2")
    with pytest.raises(StateLimitError, match="writes more than 10,000 values"):
        vegas.compile_schema(wide, canonical, library_dir=False, lazy=True, max_recursion=4)
    monkeypatch.setattr(vegas.schema, "_MAX_VALUES", 10**9)  # (then the budget stops the walk)
    started = time.monotonic()
    with pytest.raises(CompileTimeoutError):
        vegas.compile_schema(wide, canonical, library_dir=False, lazy=True, max_recursion=4,
                             budget=CompileBudget(seconds=1.0))
    assert time.monotonic() - started < 2.0  # (within 2x the budget, as every compile's)
    monkeypatch.setattr(vegas.schema, "_MAX_TEXT_CHARACTERS", 100_000)
    with pytest.raises(StateLimitError, match="skeleton's text at #.* outgrows 100,000 characters"):
        vegas.compile_schema(wide, canonical, library_dir=False, lazy=True)
    monkeypatch.undo()
    fanned = {"$defs": {"n": {"type": "object", "properties": {k: {"$ref": "#/$defs/n"} for k in "abcd"}}},
              "$ref": "#/$defs/n"}
    with pytest.raises(StateLimitError, match="regex's text at #.* outgrows 8,000,000 characters"):
        schema_regex(fanned, max_recursion=8)


def test_schemas_come_as_dicts_json_strings_or_model_classes():
    class Model:  # anything with model_json_schema(), as pydantic models have
        @staticmethod
        def model_json_schema():
            return PERSON

    assert schema_regex(Model) == schema_regex(json.dumps(PERSON)) == schema_regex(PERSON)


def test_no_garbage_collection_runs_inside_a_compile_and_the_collector_is_restored():
    """A compile pauses the cyclic collector (vegas._gc_pause). With a threshold that starts a collection at
    almost every allocation, the same compile unpaused (``vegas._compile_schema``) starts over a thousand; paused,
    only the few around the pause. After it (also after an error, and when the collector was off) the collector
    is as it was."""
    canonical = automaton_of("gpt2")
    vegas.compile_schema(PERSON, canonical, library_dir=False)  # (fragments and imports in place first)
    started = [0]
    count = lambda phase, info: started.__setitem__(0, started[0] + (phase == "start"))  # noqa: E731
    threshold, was_enabled = gc.get_threshold(), gc.isenabled()
    gc.callbacks.append(count)
    try:
        gc.enable()
        gc.set_threshold(1)
        guide = vegas.compile_schema(PERSON, canonical, library_dir=False)
        paused, started[0] = started[0], 0
        options = dict(canonical_only=True, max_states=100_000, max_transitions=50_000_000, cache_size=4096,
                       eos_token_ids=None)
        vegas._compile_schema(PERSON, canonical, style="json", strict=False, max_recursion=3, any_depth=2,
                              library_dir=False, options=options)
        unpaused = started[0]
        assert unpaused > 500 and paused < 50, (paused, unpaused)
        assert gc.isenabled()
        with pytest.raises(UnsupportedSchemaError):
            vegas.compile_schema({"type": "array", "uniqueItems": True}, canonical, library_dir=False)
        assert gc.isenabled()
        gc.disable()
        vegas.compile_schema(PERSON, canonical, library_dir=False)
        assert not gc.isenabled()
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
        (gc.enable if was_enabled else gc.disable)()
    text = format_instance({"name": "Ada", "age": 36}, PERSON)
    assert guide.accepts(runtime_of("gpt2").encode(text, add_special_tokens=False).ids)


# ---- guides on real tokenizers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3", "mistral", "qwen3", "smollm2"])
def test_guides_accept_the_runtime_encoding_of_valid_instances_only(tokenizer, style):
    canonical, runtime = automaton_of(tokenizer), runtime_of(tokenizer)
    for name in ("function", "oneOf", "tree", "labels", "open_keys", "area"):
        guide = vegas.compile_schema(SCHEMAS[name], canonical, style=style)
        for instance in VALID[name] + INVALID[name]:
            text = format_instance(instance, SCHEMAS[name], style=style)
            ids = runtime.encode(text, add_special_tokens=False).ids
            assert guide.accepts(ids) == (instance in VALID[name]), (tokenizer, style, text)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_random_walks_end_in_valid_canonical_text(tokenizer, style):
    """Random walks over the allowed tokens: never stuck; the text parses, validates and is the runtime's own
    encoding. Half of the steps pick among the allowed tokens holding a closing character (a uniform walk stays
    inside a free string nearly forever: thousands of tokens continue it, a few close it)."""
    canonical, runtime = automaton_of(tokenizer), runtime_of(tokenizer)
    closing = np.array([b is not None and any(c in b for c in b'"}],\n') for b in canonical.token_bytes])
    for name in ("function", "person", "order"):
        schema = SCHEMAS[name]
        guide = vegas.compile_schema(schema, canonical, style=style)
        validator = jsonschema.Draft202012Validator(schema)
        rng = np.random.default_rng(zlib.crc32(f"{tokenizer}:{style}:{name}".encode()))
        finished = 0
        for _ in range(5):
            ids = walk_to_accepting(guide, rng, steps=300, closing=closing, end_after=100, closer_share=0.6,
                                    describe=runtime.decode)
            if ids is None:
                continue  # a long walk cut off: nothing to check
            text = runtime.decode(ids)
            value = json.loads(text) if style == "json" else yaml.safe_load(text)
            assert validator.is_valid(value), text
            assert runtime.encode(text, add_special_tokens=False).ids == ids, text
            finished += 1
        assert finished >= 3, f"only {finished} of 5 walks reached an accepting state"


@pytest.mark.parametrize("style", STYLES)
def test_dependencies_and_merged_enums_agree_with_the_validator(style):
    """``dependencies`` (both forms), ``dependentRequired`` (chained) and ``dependentSchemas`` become a union of
    "without the key" and "with it and what it needs"; an ``enum`` and a ``const`` met in a merge intersect."""
    schemas = [
        ({"type": "object", "properties": {"cost": {"type": "number"}, "costModel": {"enum": ["a", "b"]}},
          "dependencies": {"cost": ["costModel"]}},
         [{}, {"cost": 1}, {"cost": 1, "costModel": "a"}, {"costModel": "b"}, {"cost": 2, "costModel": "b", "x": 1},
          {"cost": 1, "costModel": "c"}]),
        ({"type": "object", "properties": {"shape": {"enum": ["circle", "square"]}, "r": {"type": "number"}},
          "additionalProperties": False,
          "dependentSchemas": {"r": {"properties": {"shape": {"const": "circle"}}, "required": ["shape"]}}},
         [{}, {"r": 1}, {"r": 1, "shape": "circle"}, {"r": 1, "shape": "square"}, {"shape": "square"}]),
        ({"type": "object", "properties": {k: {"type": "integer"} for k in "abc"}, "additionalProperties": False,
          "dependentRequired": {"a": ["b"], "b": ["c"]}},
         [{k: 1 for k in keys} for n in range(4) for keys in itertools.combinations("abc", n)]),
        ({"allOf": [{"enum": [1, 2, 3]}, {"const": 2}]}, [1, 2, 3]),
    ]
    for schema, instances in schemas:
        # (draft 2020-12 ignores draft 7's "dependencies"; canonmerge reads it as draft 7 does: a tightening)
        _assert_agrees_with_validator(schema, instances, style, jsonschema.Draft7Validator if "dependencies" in schema
                                      else jsonschema.Draft202012Validator)


def _assert_agrees_with_validator(schema, instances, style, validator_class=jsonschema.Draft202012Validator):
    """The regex of ``schema`` matches the text of each instance exactly when ``validator_class`` finds it valid;
    the instances must include valid and invalid ones."""
    regex, validator = re.compile(schema_regex(schema, style)), validator_class(schema)
    verdicts = set()
    for instance in instances:
        valid = validator.is_valid(instance)
        verdicts.add(valid)
        assert bool(regex.fullmatch(format_instance(instance, schema, style=style))) == valid, (schema, instance)
    assert verdicts == {True, False}, schema


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("draft", ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#",
                                   "https://json-schema.org/draft/2019-09/schema", None])
def test_keywords_beside_a_ref_follow_the_declared_draft(style, draft):
    """Up to draft 7 a ``$ref`` replaces the schema it sits in (``required`` beside it is ignored, in ``not`` too);
    from 2019-09 on, and with no ``$schema``, the keywords beside it apply as well. The oracle is the validator of
    the declared draft."""
    schema = {"type": "object", "required": ["w"], "definitions": {"w": {"properties": {"id": {"type": "string"}}}},
              "properties": {"w": {"type": "object", "required": ["cfg"], "$ref": "#/definitions/w"},
                             "n": {"not": {"required": ["a"], "$ref": "#/definitions/w"}}}}
    if draft is not None:
        schema["$schema"] = draft
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    _assert_agrees_with_validator(schema, [{"w": {"id": "x"}}, {"w": {"id": "x", "cfg": 1}}, {"w": {"id": 1}},
                                           {"w": {"id": "x", "cfg": 1}, "n": {"b": 1}}, {"w": {"cfg": 2}, "n": 3},
                                           {"w": {"cfg": 2}, "n": {"a": 1, "id": 2}}, {}], style, validator_class)


@pytest.mark.parametrize("style", STYLES)
def test_not_of_a_type_or_of_required_agrees_with_the_validator(style):
    """``not`` written positively: a ``type`` alone is its complement (``number`` takes ``integer`` with it), a
    ``required`` alone an object lacking one of the names (anything else satisfies ``required``, so is rejected);
    other forms are refused by name."""
    schemas = [
        ({"type": "object", "required": ["foo"], "properties": {"foo": {"not": {"type": "number"}}}},
         [{"foo": 1}, {"foo": 1.5}, {"foo": "1"}, {"foo": None}, {"foo": [1]}, {"foo": {"a": 1}}, {}, 3]),
        ({"not": {"type": ["string", "null"]}, "anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
         [1, -7, "x", None, 2.5, True]),
        ({"type": "object", "properties": {"body": {"type": "string"}, "bodyValue": {"type": "string"}},
          "not": {"required": ["body", "bodyValue"]}},
         [{}, {"body": "a"}, {"bodyValue": "b"}, {"body": "a", "bodyValue": "b"}, {"other": 1}, [], "s"]),
        ({"not": {"required": ["a"], "description": "no a"}}, [{}, {"a": 1}, {"b": 2}, 1, "x", None, []]),
        ({"properties": {"x": {"not": {}}}}, [{}, {"x": 1}, {"x": None}, {"y": 1}]),
    ]
    for schema, instances in schemas:
        _assert_agrees_with_validator(schema, instances, style)
    for negated in ({"type": "integer"}, {"enum": [[1, 2]]}, {"required": ["a"], "minProperties": 2}):
        with pytest.raises(UnsupportedSchemaError) as raised:
            schema_regex({"properties": {"p": {"not": negated}}}, style)
        assert raised.value.keyword == "not" and raised.value.pointer == "#/properties/p"


@pytest.mark.parametrize("style", STYLES)
def test_negations_of_several_keywords_agree_with_the_validator(style):
    """An instance fails a schema when it fails one of its keywords: ``not`` of ``properties``, ``allOf``,
    ``anyOf``, ``not``, ``$ref``, ``enum``/``const`` (other types, strings outside a trie, numbers between the
    values) and of several keywords at once, each written positively."""
    shape = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    schemas = [
        dict(shape, **{"not": {"properties": {"b": {"type": "string"}}, "required": ["a"]}}),
        dict(shape, **{"not": {"allOf": [{"required": ["a"]}, {"required": ["b"]}]}}),
        dict(shape, **{"not": {"anyOf": [{"required": ["a"]}, {"not": {"required": ["b"]}}]}}),
        {"$defs": {"named": {"type": "object", "required": ["name"]}},
         "properties": {"x": {"not": {"$ref": "#/$defs/named"}}}},
        {"properties": {"x": {"not": {"type": ["object", "string"], "properties": {"n": {"type": "null"}}}}}},
        {"properties": {"x": {"not": {"enum": ["s", "s2", "", "a\"b", 1, 2.5, True, None]}}}},
        {"properties": {"x": {"type": "string", "not": {"const": "intramural"}}}},
        {"properties": {"x": {"type": "integer", "not": {"enum": [1, 3]}}}},
        # two negated enums on one string: the strings outside both sets (one pattern, of the union)
        {"properties": {"x": {"type": "string", "allOf": [{"not": {"enum": ["s", "a\"b"]}}, {"not": {"const": "s2"}}]}}},
        # Glaive's calculate_area: oneOf branches told apart by a const, each negating the others'
        {"properties": {"x": {"type": "object", "oneOf": [{"properties": {"k": {"const": c}}} for c in ("s", "s2", "s3")],
                              "required": ["k"]}}},
    ]
    values = [None, 1, "s", [1], {}, {"a": 1}, {"b": "s"}, {"a": 1, "b": "s"}, {"name": 1}, {"n": None}, {"n": 1},
              "", "s2", "s3", "a\"b", "a", 2, 2.5, 1.0, 3, -7, 0.5, False, True, "intramural", "intramurals", "intra",
              {"k": "s"}, {"k": "s3"}, {"k": "s4"}, {"k": 1}]
    for schema in schemas:
        instances = values + [{"x": v} for v in values] + [{"a": "no"}, {"b": 2}]
        _assert_agrees_with_validator(schema, instances, style)


@pytest.mark.parametrize("style", STYLES)
def test_overlapping_one_of_branches_are_written_exclusively(style):
    """``oneOf`` branches that overlap, each with a positive negation: branch i with every other negated, so each
    instance satisfies exactly one (Glaive's ``oneOf: [{required: [radius]}, {required: [length, width]}]``).
    Branches with no such negation are still refused by name."""
    shape = {"type": "object", "properties": {name: {"type": "number"} for name in ("radius", "length", "width")}}
    schemas = [
        dict(shape, oneOf=[{"required": ["radius"]}, {"required": ["length", "width"]}]),
        dict(shape, required=["length"], oneOf=[{"required": ["length", "width"]}, {"required": ["radius"]}]),
        {"oneOf": [{"type": "string"}, {"type": ["string", "null"]}, {"type": "boolean"}]},
        {"type": "object", "oneOf": [{"properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
                                     {"properties": {"error": {"type": "string"}}, "required": ["error"]}]},
    ]
    values = [1, 2.5, "s", None, True]
    keys = ["radius", "length", "width", "ok", "error"]
    rng = np.random.default_rng(zlib.crc32(style.encode()) + 1)
    instances = values + [{}]
    for _ in range(120):
        chosen = rng.choice(len(keys), size=rng.integers(0, 4), replace=False)
        instances.append({keys[k]: values[rng.integers(len(values))] for k in chosen})
    for schema in schemas:
        _assert_agrees_with_validator(schema, instances, style)
    # 20 branches requiring two names each: 2^19 alternatives per branch, refused before they are merged
    many = {"type": "object", "oneOf": [{"required": [f"a{i}", f"b{i}"]} for i in range(20)]}
    for schema in ({"oneOf": [{"type": "string", "minLength": 2}, {"type": "string", "maxLength": 5}]}, many):
        with _alarm(20):
            with pytest.raises(UnsupportedSchemaError) as raised:
                schema_regex(schema, style)
        assert (raised.value.keyword, raised.value.pointer) == ("oneOf", "#")


@pytest.mark.parametrize("style", STYLES)
def test_pattern_properties_agree_with_the_validator(style):
    """Keys matching several patterns take all their schemas, declared keys matching a pattern take its schema
    too, keys matching none take ``additionalProperties`` (open, a schema or false): random objects over keys
    chosen to fall in every region, checked against jsonschema."""
    schemas = [
        {"type": "object", "patternProperties": {"^a": {"type": "string"}, "b$": {"type": "string", "maxLength": 2}},
         "properties": {"ab": {"enum": ["x", "yy", "zzz"]}, "c": {"type": "integer"}}},
        {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
        {"type": "object", "patternProperties": {".*": {"type": "integer"}},
         "properties": {"n": {"type": "integer", "minimum": 5}}, "additionalProperties": False},
        {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer", "minimum": 0}, "^[0-9]+$": {"const": True}}},
    ]
    keys = ["a", "ab", "b", "abb", "cb", "c", "x-1", "x-", "y", "n", "12", "ab1", "", "Z", "a\"b"]
    values = [1, -1, 7, "x", "yy", "zzz", "q", True, False, None, [1], {"k": 1}]
    rng = np.random.default_rng(zlib.crc32(style.encode()))
    for schema in schemas:
        instances = []
        for _ in range(150):
            chosen = rng.choice(len(keys), size=rng.integers(0, 5), replace=False)
            instances.append({keys[k]: values[rng.integers(len(values))] for k in chosen})
        _assert_agrees_with_validator(schema, instances, style)


@contextlib.contextmanager
def _alarm(seconds: int):
    """A hang becomes a failure: ``TimeoutError`` after ``seconds``."""
    def too_slow(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_formatting_picks_an_alternative_in_linear_time():
    """Where several alternatives fit a value, ``format_instance`` tries each one's regex on the value's text: with
    Python's ``re`` an item matched by either of two overlapping branches backtracked over every split (2^n for n
    items: 0.5 s at 20, minutes at 30, as overlapping ``oneOf`` branches written exclusively made common); on the
    regex's DFA it is one pass."""
    schema = {"anyOf": [{"type": "array", "items": {"anyOf": [{"type": "string"},
                                                                {"type": "string", "maxLength": 3}]}},
                        {"type": "array"}]}
    value = ["ab"] * 40 + [1]  # the first alternative fails only at the last item
    with _alarm(30):
        for style in STYLES:
            text = format_instance(value, schema, style=style)
            assert (json.loads(text) if style == "json" else yaml.safe_load(text)) == value


def test_combinators_keep_each_sides_additional_properties():
    """A branch's ``additionalProperties: false`` survives distribution over the node's other keywords (it was
    dropped once, and a MaskBench instance with a key the branch forbids was accepted)."""
    schema = {"type": "object", "oneOf": [
        {"properties": {"kind": {"enum": ["a"]}}, "required": ["kind"], "additionalProperties": False},
        {"properties": {"kind": {"enum": ["b"]}, "extra": {"type": "integer"}}, "required": ["kind"],
         "additionalProperties": False}]}
    for style in STYLES:
        regex = re.compile(schema_regex(schema, style))
        for instance, valid in (({"kind": "a"}, True), ({"kind": "b", "extra": 1}, True),
                                ({"kind": "a", "extra": 1}, False), ({"kind": "a", "other": 1}, False)):
            assert bool(regex.fullmatch(format_instance(instance, schema, style=style))) == valid, instance


def test_property_counts_implied_by_the_node_itself_are_accepted():
    implied = [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "minProperties": 1},
               {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "maxProperties": 2}]
    for schema in implied:
        assert re.fullmatch(schema_regex(schema), format_instance({"a": 1}, schema))
    non_empty = {"type": "object", "minProperties": 1}  # 1: any object but the empty one
    assert re.fullmatch(schema_regex(non_empty), format_instance({"x": None}, non_empty))
    assert not re.fullmatch(schema_regex(non_empty), format_instance({}, non_empty))
    for schema in ({"type": "object", "minProperties": 2}, {"type": "object", "properties": {"a": {}},
                                                             "maxProperties": 1}):
        with pytest.raises(UnsupportedSchemaError):
            schema_regex(schema)


_DATE = re.compile(schema_regex({"type": "string", "format": "date"}))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32))
def test_dates_are_calendar_dates(year, month, day):
    """format: date (and date-time) admits exactly what datetime.date.fromisoformat does: each month's days,
    February 29th in leap years (MaskBench's invalid instances include February 30th)."""
    text = f"{year:04d}-{month:02d}-{day:02d}"
    try:
        datetime.date.fromisoformat(text)
        valid = True
    except ValueError:
        valid = False
    assert bool(_DATE.fullmatch(f'"{text}"')) == valid


def test_february_29th_in_leap_years_only():
    for leap in ("2000-02-29", "2024-02-29", "0004-02-29"):
        assert _DATE.fullmatch(f'"{leap}"')
    for not_leap in ("1900-02-29", "2023-02-29", "2100-02-29", "0000-01-01"):
        assert not _DATE.fullmatch(f'"{not_leap}"')


def test_long_length_bounds_compile_within_the_default_state_limit():
    """maxLength: 100 on three strings (issue: unrolled, one such string exceeded 100,000 product nodes on
    Llama-3): compiled with the iteration count beside the state, in the fragments that hold the strings; exact
    at the bound."""
    bounded = {"type": "string", "maxLength": 100}
    schema = {"type": "object", "properties": {"a": bounded, "b": bounded, "c": bounded},
              "required": ["a", "b", "c"], "additionalProperties": False}
    canonical, runtime = automaton_of("llama3"), runtime_of("llama3")
    guide = vegas.compile_schema(schema, canonical)
    assert isinstance(guide, product.StitchedGuide)
    counted = [g for g in guide._guides if isinstance(g, CountedGuide)]
    assert counted and all(g.num_nodes < 100_000 for g in counted)
    for length, valid in ((0, True), (37, True), (100, True), (101, False)):
        instance = {"a": "x" * length, "b": "é" * min(length, 100), "c": "go " * (length // 3)}
        text = format_instance(instance, schema)
        assert guide.accepts(runtime.encode(text, add_special_tokens=False).ids) == valid, length
    assert type(product.compile_regex(r"[A-Z][a-z]{1,12}( [a-z]{1,12}){2,12}\.", canonical)) is product.Guide


@pytest.mark.parametrize("style", STYLES)
def test_a_very_long_length_bound_compiles(style):
    """maxLength: 10000 (a MaskBench Snowplow schema): the string's leaf has a character DFA past any state limit,
    which the skeleton once built just to learn its first characters (StateLimitError in JSON, gigabytes in
    YAML); the counter compiles it, exact at both bounds."""
    schema = {"type": "object", "properties": {"message": {"type": "string", "minLength": 1, "maxLength": 10000},
                                               "notify": {"type": "boolean"}},
              "required": ["message"], "additionalProperties": False}
    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    guide = vegas.compile_schema(schema, canonical, style=style)
    for length, valid in ((0, False), (1, True), (10_000, True), (10_001, False)):
        text = format_instance({"message": "ab c" * (length // 4) + "d" * (length % 4), "notify": True}, schema,
                               style=style)
        assert guide.accepts(runtime.encode(text, add_special_tokens=False).ids) == valid, (style, length)


@pytest.mark.parametrize("style", ["json", "yaml"])
def test_an_alternative_too_large_for_its_dfa_still_picks_the_layout(style, monkeypatch):
    """``format_instance`` writes a value in the layout of the first alternative whose regex accepts its text; an
    alternative whose DFA is too large is matched on its position automaton instead (JSON Schema Store's
    accelerator: an ``anyOf`` of twenty recursive object types, each with its own key order). Forced here by a cap
    of 2 states: the value fits the second branch only, whose key order the guide holds it to."""
    import vegas.instances

    schema = {"anyOf": [
        {"type": "object", "properties": {"k": {"const": 1}, "x": {"type": "integer"}, "y": {"type": "integer"}},
         "required": ["k"], "additionalProperties": False},
        {"type": "object", "properties": {"y": {"type": "integer"}, "x": {"type": "integer"}, "k": {"const": 2}},
         "required": ["k"], "additionalProperties": False}]}
    value = {"x": 1, "y": 2, "k": 2}
    expected = format_instance(value, schema, style=style)
    monkeypatch.setattr(vegas.instances, "_MAX_MATCH_STATES", 2)
    vegas.instances._Matcher.of.cache_clear()
    written = format_instance(value, schema, style=style)
    vegas.instances._Matcher.of.cache_clear()
    assert written == expected
    assert written.index("y") < written.index("k")  # (the only y and k are the keys: the second branch's order)
    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    guide = vegas.compile_schema(schema, canonical, style=style, library_dir=False)
    assert guide.accepts(runtime.encode(written, add_special_tokens=False).ids)


def _nested_arrays(depth: int) -> dict:
    node: dict = {"type": "integer"}
    for _ in range(depth):
        node = {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}, "kids": node},
                                           "required": ["n"], "additionalProperties": {"type": "boolean"}}}
    return node


@pytest.mark.parametrize("style", ["json", "yaml"])
def test_nested_arrays_and_free_keys_are_written_once_with_the_same_guide(style):
    """A skeleton writes an array's items and an object's free keys with ``automata.parse``'s loop operator: arrays
    of objects nested six deep grow its text by about the same per level (as regex syntax, ``x(, x)*``, JSON's
    text doubles at each); the stitched guide of the loop skeleton has the plain skeleton's masks along random
    walks, and its verdicts on instances are the validator's."""
    from automata.parse import plain
    from product.stitched import FragmentLibrary, compile_stitched
    from tests.support import automaton_of, runtime_of, walk_alike
    from vegas.schema import Compiler

    sizes = {depth: len(Compiler.load(_nested_arrays(depth), style, leaves=True, loops=True).document())
             for depth in (3, 6)}
    assert sizes[6] < 3 * sizes[3]
    schema = _nested_arrays(3)
    compiler = Compiler.load(schema, style, leaves=True, loops=True)
    skeleton = compiler.document()
    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    guides = [compile_stitched(text, compiler.leaves, canonical, library=FragmentLibrary(canonical),
                               leaf_exceptions=compiler.exceptions) for text in (skeleton, plain(skeleton))]
    rng = np.random.default_rng(3)
    for _ in range(12):
        walk_alike(guides[1], guides[0], rng, 60)
    instances = [[{"n": 1, "kids": [{"n": 2, "x": True, "kids": [{"n": 3, "kids": 4}]}, {"n": 6}]}], [],
                 [{"n": 1, "kids": [{"x": True}]}], [{"n": 1, "kids": [{"n": 2, "kids": [{"n": 3, "kids": [4]}]}]}]]
    for instance in instances:
        valid = jsonschema.Draft202012Validator(schema).is_valid(instance)
        text = vegas.format_instance(instance, schema, style=style) if valid else \
            json.dumps(instance) if style == "json" else yaml.safe_dump(instance, sort_keys=False).rstrip("\n")
        ids = runtime.encode(text, add_special_tokens=False).ids
        assert guides[0].accepts(ids) == valid, text
    assert sum(jsonschema.Draft202012Validator(schema).is_valid(i) for i in instances) == 2
