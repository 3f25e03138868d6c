"""The spellings of a number a schema's guide accepts beside the one ``format_instance`` writes (issue 37, part 0):
``1.0``, ``2.50``, ``1.50e-05``, ``1e-5`` where the value is allowed, never where it is not (bounds, ``not``,
``oneOf`` read on values, not on texts), every number bounded in digits, and a real model that writes ``1.0``
can stop. Oracles: ``jsonschema`` (the validator), ``json``, the ``tokenizers`` runtime, SmolLM2 itself."""

import json
import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import product
import vegas
from bpe.assets import reference_model
from tests.support import automaton_of, runtime_of
from vegas import format_instance, schema_regex
from vegas.lexical import MAX_FRACTION_DIGITS, MAX_INTEGER_DIGITS

STYLES = ("json", "yaml")


def _respellings(text: str, style: str) -> list[str]:
    """Texts of the same value as the canonical ``text``: a point and zeros after an integer, trailing zeros
    after a fraction or a mantissa, a small exponent's leading zero dropped."""
    out = []
    mantissa, e, exponent = text.partition("e")
    room = MAX_FRACTION_DIGITS - len(mantissa.partition(".")[2])
    if e:
        if "." not in mantissa:
            out.append(mantissa + ".0" + e + exponent)
        elif room >= 2:
            out.append(mantissa + "00" + e + exponent)
        if exponent.startswith("-0"):
            out.append(mantissa + e + "-" + exponent[2:])
    elif "." in text:
        out += [text + "0" * k for k in (1, 3) if k <= room]
    elif text.lstrip("-").isdigit():
        out += [text + ".0", text + ".00"]
    return out


_BOUNDS = st.one_of(st.none(), st.sampled_from([0, 1, -1, 0.5, 2.25, -459.67, 10, 0.1]),
                    st.floats(-1000, 1000).filter(lambda b: b == 0 or abs(b) >= 1e-4))
_VALUES = st.one_of(st.floats(-1000, 1000), st.integers(-1000, 1000), st.sampled_from([1.0, 2.5, 0.5, 1e-05, 3e-7, 1e16,
                                                                                        -2.5e20, 10.0, 0.1, 2.25]),
                    st.decimals(-100, 100, places=3).map(float))


@settings(max_examples=300, deadline=None)
@given(_BOUNDS, _BOUNDS, st.sampled_from([("minimum", "maximum"), ("exclusiveMinimum", "exclusiveMaximum")]),
       _VALUES)
def test_respellings_are_accepted_exactly_where_the_value_is_valid(lo, hi, keywords, x):
    schema = {"type": "number"}
    for keyword, bound in zip(keywords, (lo, hi)):
        if bound is not None:
            schema[keyword] = bound
    valid = jsonschema.Draft202012Validator(schema).is_valid(x)
    for style in STYLES:
        try:
            regex = re.compile(schema_regex(schema, style))
        except vegas.SchemaError:
            assert not valid
            continue
        text = format_instance(x, schema, style=style)
        assert bool(regex.fullmatch(text)) == valid, (schema, text)
        for other in _respellings(text, style):
            assert json.loads(other) == x
            assert bool(regex.fullmatch(other)) == valid, (schema, other)


@pytest.mark.parametrize("style", STYLES)
def test_set_operations_read_values_not_texts(style):
    """``not``/``oneOf``/``enum`` are decided on values; the extra spellings come after: ``1.0`` goes wherever 1
    goes and nowhere else."""
    cases = [
        ({"type": "number"}, ["1.0", "2.50", "1.50e-05", "1e-5", "-3.000", "0.0", "-0.0"], ["1.", "01.0", "+1", "1e5"]),
        ({"type": "number", "not": {"const": 1}}, ["2.0", "1.5", "0.50"], ["1", "1.0", "1.00"]),
        ({"type": "number", "not": {"const": 0}}, ["-0.5", "0.5", "-1.0"], ["0", "-0", "0.0", "-0.00"]),
        ({"type": "number", "not": {"enum": [1, 2.5]}}, ["2.0", "2.25", "2.0"], ["1.0", "2.5", "2.50", "2.500"]),
        # the integer-valued number excluded by oneOf: branch 1 is 1, branch 0 every number, so exactly one
        # branch holds for the numbers but 1
        ({"oneOf": [{"type": "number"}, {"const": 1}]}, ["2.0", "0.5", "1.5"], ["1", "1.0", "1.000"]),
        ({"oneOf": [{"type": "number", "minimum": 5}, {"type": "number", "maximum": 3}]}, ["5.0", "3.00", "7"],
         ["4.0", "4", "3.5"]),
        ({"type": "number", "exclusiveMinimum": 1}, ["1.5", "2.0", "1.000001"], ["1.0", "1", "0.50"]),
        ({"type": "number", "minimum": 0.5, "maximum": 2.25}, ["0.50", "2.250", "1.0"], ["0.49", "2.2500001", "2.26"]),
        # an integer is written with digits only; an enum or const as format_instance writes it
        ({"type": "integer"}, ["1", "-20"], ["1.0", "2.50"]),
        ({"enum": [1, 2.5]}, ["1", "2.5"], ["1.0", "2.50"]),
    ]
    for schema, accepted, rejected in cases:
        if style == "yaml":  # (YAML 1.1 reads an exponent form as a float only with a point in its mantissa)
            accepted = [t.replace("1e-5", "1.0e-5") for t in accepted]
        regex = re.compile(schema_regex(schema, style))
        validator = jsonschema.Draft202012Validator(schema)
        for text in accepted:
            assert validator.is_valid(json.loads(text)), (schema, text)
            assert regex.fullmatch(text), (schema, text)
        for text in rejected:
            assert not regex.fullmatch(text), (schema, text)


def test_every_number_is_bounded_in_digits():
    regex = re.compile(schema_regex({"type": "number"}))
    integers = re.compile(schema_regex({"type": "integer"}))
    assert regex.fullmatch("9" * MAX_INTEGER_DIGITS) and not regex.fullmatch("9" * (MAX_INTEGER_DIGITS + 1))
    assert integers.fullmatch("-" + "9" * MAX_INTEGER_DIGITS)
    assert not integers.fullmatch("-" + "9" * (MAX_INTEGER_DIGITS + 1))
    assert regex.fullmatch("1." + "0" * MAX_FRACTION_DIGITS) and not regex.fullmatch("1." + "0" * (MAX_FRACTION_DIGITS + 1))
    assert regex.fullmatch("0." + "0" * (MAX_FRACTION_DIGITS - 1) + "1")
    assert regex.fullmatch("1.5" + "0" * (MAX_FRACTION_DIGITS - 1))
    assert not regex.fullmatch("1.5" + "0" * MAX_FRACTION_DIGITS)
    # a bound longer than the cap is the schema's own: kept
    big = re.compile(schema_regex({"type": "integer", "minimum": 10 ** 30}))
    assert big.fullmatch(str(10 ** 30 + 7)) and not big.fullmatch(str(10 ** 31))
    # ... only on its own side: the open side below still stops at the cap
    wide = re.compile(schema_regex({"type": "integer", "maximum": 10 ** 30}))
    assert wide.fullmatch(str(10 ** 30)) and wide.fullmatch("-" + "9" * MAX_INTEGER_DIGITS)
    assert not wide.fullmatch("-" + "9" * (MAX_INTEGER_DIGITS + 1))


@pytest.mark.parametrize("style", STYLES)
def test_guides_accept_the_spellings_canonically_tokenized(style):
    canonical, runtime = automaton_of("smollm2"), runtime_of("smollm2")
    schema = {"type": "object", "properties": {"price": {"type": "number", "not": {"const": 1}},
                                               "qty": {"type": "integer"}},
              "required": ["price", "qty"], "additionalProperties": False}
    guide = vegas.compile_schema(schema, canonical, style=style, library_dir=False)
    head = ('{"price": ', ', "qty": 3}') if style == "json" else ("price: ", "\nqty: 3")
    for value, ok in (("2.0", True), ("2.50", True), ("1.5e-05", True), ("1.0", False), ("1", False)):
        text = head[0] + value + head[1]
        assert guide.accepts(runtime.encode(text, add_special_tokens=False).ids) == ok, text


@pytest.mark.slow  # (the model's load and two answers: 30-60 s on 2 cores)
def test_a_model_that_writes_1_0_stops():
    """SmolLM2, greedy, asked for ``1.0``: it writes ``1.0`` and then the closing brace (before, only a digit
    that is not 0 could follow, and it wrote ``1.00000000000000002``)."""
    canonical, runtime = automaton_of("smollm2"), runtime_of("smollm2")
    schema = {"type": "object", "properties": {"temperature": {"type": "number"}}, "required": ["temperature"],
              "additionalProperties": False}
    guide = vegas.compile_schema(schema, canonical, library_dir=False)
    model = reference_model()
    for question, value in (("Reply in JSON. Set the temperature to 1.0.", 1.0),
                            ("Reply in JSON with temperature 0.50.", 0.5)):
        prompt = runtime.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n",
                                add_special_tokens=False).ids
        result = product.generate(model, guide, prompt, max_new_tokens=40)
        text = runtime.decode(result.token_ids)
        assert result.finished and len(result.token_ids) < 20, text
        assert json.loads(text) == {"temperature": value}, text
        assert runtime.encode(text, add_special_tokens=False).ids == result.token_ids
