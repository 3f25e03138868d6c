"""Recursive JSON Schemas at any depth (``compile_schema(..., max_recursion=None)``: the recursive ``$ref`` targets
compiled as rules that call each other, a ``PushdownGuide``): instances nested deeper than the bounded default
are accepted in the runtime's own encoding, invalid ones are refused (the ``jsonschema`` validator decides), random
walks end in valid canonical text, and what it cannot compile is refused by keyword and pointer."""

from __future__ import annotations

import json
import zlib

import jsonschema
import numpy as np
import pytest

import vegas
from product import PushdownGuide
from tests.schema_cases import TREE
from tests.support import automaton_of, runtime_of, walk_to_accepting
from vegas import UnsupportedSchemaError, format_instance

LINKED = {"$defs": {"node": {"type": "object", "properties": {
    "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
    "required": ["v", "next"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
# mutual recursion through two definitions, and the root itself referred to
EXPRESSION = {"$defs": {
    "sum": {"type": "object", "properties": {"plus": {"type": "array", "items": {"$ref": "#/$defs/term"},
                                                      "minItems": 1}}, "required": ["plus"], "additionalProperties": False},
    "term": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/sum"}, {"$ref": "#"}]}},
    "type": "object", "properties": {"neg": {"$ref": "#/$defs/term"}}, "required": ["neg"], "additionalProperties": False}


def nested(depth: int, leaf, wrap):
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


CASES = {
    "tree": (TREE, [nested(9, {"value": 0}, lambda v: {"value": 1, "children": [v, {"value": 2}]})],
             [nested(9, {"value": "x"}, lambda v: {"value": 1, "children": [v]}),
              nested(9, {"value": 0, "extra": 1}, lambda v: {"value": 1, "children": [v]})]),
    "linked": (LINKED, [nested(12, {"v": 0, "next": None}, lambda v: {"v": 1, "next": v})],
               [nested(12, {"v": 0}, lambda v: {"v": 1, "next": v}),
                nested(12, {"v": 0, "next": None}, lambda v: {"v": 1.5, "next": v})]),
    "expression": (EXPRESSION, [nested(7, {"neg": 3}, lambda v: {"neg": {"plus": [1, v, {"plus": [v]}]}})],
                   [nested(7, {"neg": 3}, lambda v: {"neg": {"plus": [v, []]}}),
                    nested(7, {"neg": {"plus": []}}, lambda v: {"neg": {"plus": [v]}})]),
}


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_instances_nested_past_any_bound_are_accepted_and_invalid_ones_refused(name, tokenizer):
    schema, valid, invalid = CASES[name]
    canonical, runtime = automaton_of(tokenizer), runtime_of(tokenizer)
    guide = vegas.compile_schema(schema, canonical, max_recursion=None)
    assert isinstance(guide, PushdownGuide)
    bounded = vegas.compile_schema(schema, canonical)  # the default unrolls three levels
    validator = jsonschema.Draft202012Validator(schema)
    for instance in valid + invalid:
        assert validator.is_valid(instance) == (instance in valid)
        text = format_instance(instance, schema) if instance in valid else json.dumps(instance, separators=(", ", ": "))
        ids = runtime.encode(text, add_special_tokens=False).ids
        assert guide.accepts(ids) == (instance in valid), text
        if instance in valid:
            assert not bounded.accepts(ids), text  # deeper than the default bound
            cut = len(ids) // 2
            other = runtime.encode(text[:len(runtime.decode(ids[:cut])) + 1], add_special_tokens=False).ids
            if other != ids[:len(other)]:  # (a split the runtime never makes, then the rest as it encodes it)
                assert not guide.accepts(other + runtime.encode(runtime.decode(ids)[len(runtime.decode(other)):],
                                                                add_special_tokens=False).ids)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_random_walks_end_in_valid_canonical_text(tokenizer):
    canonical, runtime = automaton_of(tokenizer), runtime_of(tokenizer)
    closing = np.array([b is not None and any(c in b for c in b'"}],') for b in canonical.token_bytes])
    for name in sorted(CASES):
        schema = CASES[name][0]
        guide = vegas.compile_schema(schema, canonical, max_recursion=None)
        validator = jsonschema.Draft202012Validator(schema)
        rng = np.random.default_rng(zlib.crc32(f"{tokenizer}:{name}".encode()))
        finished = 0
        for _ in range(6):
            ids = walk_to_accepting(guide, rng, steps=250, closing=closing, end_after=60, closer_share=0.7,
                                    describe=runtime.decode)
            if ids is None:
                continue
            text = runtime.decode(ids)
            assert validator.is_valid(json.loads(text)), text
            assert runtime.encode(text, add_special_tokens=False).ids == ids, text
            finished += 1
        assert finished >= 2, (name, finished)


def test_what_recursion_at_any_depth_cannot_compile_is_refused_by_keyword_and_pointer():
    canonical = automaton_of("gpt2")
    beside = {"$defs": {"n": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n", "minProperties": 1}}}},
              "$ref": "#/$defs/n"}
    # a rule of objects or null, called where only objects are allowed: the call cannot be cut down to a type
    narrowed = {"$defs": {"n": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "k": {"type": "object", "anyOf": [{"$ref": "#/$defs/n"}]}}, "additionalProperties": False}]}},
        "$ref": "#/$defs/n"}
    for schema, style, tokenizer, says in [(TREE, "yaml", "gpt2", "YAML"), (beside, "json", "gpt2", "beside"),
                                           (TREE, "json", "mistral", "pre-tokenizer"),
                                           (narrowed, "json", "gpt2", "restricted to the types")]:
        with pytest.raises(UnsupportedSchemaError) as info:
            vegas.compile_schema(schema, automaton_of(tokenizer), style=style, max_recursion=None)
        assert info.value.keyword == "$ref" and says in str(info.value), str(info.value)
    flat = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert not isinstance(vegas.compile_schema(flat, canonical, max_recursion=None), PushdownGuide)
