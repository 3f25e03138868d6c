"""Choices of keys told apart as they are written (``product.runtime.keyed``) against the same skeletons with the
free key's trie written out and compiled (``compile_stitched`` without ``leaf_exceptions``): masks identical,
state by state, along the runtime's encodings of valid and invalid texts (declared names, their prefixes and
extensions, names declared elsewhere, escapes, non-ASCII) and along random walks biased towards the declared
names; and a walk's text validates."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
import yaml

from product.library import FragmentStore
from product.runtime.keyed import KeyedGuide
from product.runtime.lazy import LazyGuide
from product.stitched import Fragment, FragmentLibrary, compile_stitched
from tests.support import automaton_of, runtime_of, walk_alike
from vegas import format_instance
from vegas.schema import Compiler

NAMES = ["al", "alpha", "alphabet", "beta", "b", "gamma ray", 'quo"te', "naïve", "x_1", "alphz", "a\\b"]


def _schemas(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    values = [{"type": "integer"}, {"type": "string"}, {"type": "boolean"}, {"enum": ["on", "off"]},
              {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
              {"const": "on"}, {"type": "array", "maxItems": 0}]  # (literal values: no cut kept after the name)
    schemas = []
    for _ in range(count):
        names = rng.sample(NAMES, rng.randint(1, 5))
        schema = {"type": "object", "properties": {n: rng.choice(values) for n in names},
                  "required": rng.sample(names, rng.randint(0, min(2, len(names))))}
        extra = rng.choice([None, {"type": "integer"}, {"type": "string"}])
        if extra is not None:
            schema["additionalProperties"] = extra
        schemas.append(schema)
    return schemas


def _texts(schema: dict, style: str, rng: random.Random) -> list[str]:
    """Texts around the declared names: valid instances (declared keys, free keys near them) and invalid ones
    (a declared name written as a free key, with a free key's value)."""
    props, required = schema["properties"], schema["required"]
    sample = {"integer": 7, "string": "s", "boolean": True}
    extra = schema.get("additionalProperties", {})
    texts = []
    for _ in range(6):
        instance = {n: _value(props[n], sample) for n in props if n in required or rng.random() < 0.6}
        for name in rng.sample(NAMES, 3):  # declared ones (a duplicate or wrongly typed value), their neighbours
            key = rng.choice([name, name[:-1], name + "x", name.upper()])
            if key and key not in instance:
                instance[key] = _value(extra, sample) if isinstance(extra, dict) and extra else 1
        try:
            texts.append(format_instance(instance, schema, style=style))
        except Exception:  # an invalid instance has no text of its own: write it as JSON/YAML anyway
            texts.append(json.dumps(instance, ensure_ascii=False) if style == "json" else
                         yaml.safe_dump(instance, allow_unicode=True, sort_keys=False).rstrip("\n"))
    return texts


def _value(schema: dict, sample: dict):
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if schema.get("type") == "array":
        return [] if schema.get("maxItems") == 0 else [1]
    return sample.get(schema.get("type"), 3)


def _guides(schema: dict, style: str, name: str, lazy: bool = False):
    canonical = automaton_of(name)
    compiler = Compiler.load(schema, style, leaves=True)
    skeleton = compiler.document()
    plain = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical))
    keyed = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical),
                             leaf_exceptions=compiler.exceptions, lazy=lazy)
    return plain, keyed


def _same_along(plain, keyed, ids: list[int]) -> int:
    """Walk ``ids`` in both guides while the plain one allows them, comparing every mask; the steps walked."""
    a, b = plain.initial_state, keyed.initial_state
    for step, token in enumerate(ids):
        mask = plain.allowed(a)
        assert np.array_equal(mask, keyed.allowed(b)), f"masks differ after {step} tokens"
        assert plain.is_accepting(a) == keyed.is_accepting(b)
        if not mask[token]:
            return step
        a, b = plain.advance(a, token), keyed.advance(b, token)
    assert np.array_equal(plain.allowed(a), keyed.allowed(b)) and plain.is_accepting(a) == keyed.is_accepting(b)
    return len(ids)


@pytest.mark.parametrize("name, style, lazy", [("gpt2", "json", False), ("gpt2", "yaml", False),
                                               ("llama3", "json", False), ("llama3", "yaml", False),
                                               ("gpt2", "json", True), ("llama3", "json", True)])
def test_keys_told_apart_as_written_have_the_masks_of_the_written_out_trie(name, style, lazy):
    """... and where the stitched guide is lazy, the shared fragment under the words is a ``LazyGuide`` (built as
    walked; its exits named by node key)."""
    runtime = runtime_of(name)
    rng = random.Random(f"{name}{style}")
    keyed_instances = 0
    for schema in _schemas(seed=len(name) + len(style), count=4):
        plain, keyed = _guides(schema, style, name, lazy)
        for text in _texts(schema, style, rng):
            ids = runtime.encode(text, add_special_tokens=False).ids
            walked = _same_along(plain, keyed, ids)
            if walked == len(ids) and keyed.is_accepting(keyed_state(keyed, ids)):
                instance = json.loads(text) if style == "json" else yaml.safe_load(text)
                jsonschema.validate(instance, schema)  # what both accept is valid
        toward = _toward_names(schema, runtime, style)

        def pick(allowed):  # half the steps along a declared name's text
            near = allowed[toward[allowed]]
            return rng.choice(near if len(near) and rng.random() < 0.5 else allowed)

        for _ in range(12):
            walk_alike(plain, keyed, rng, 48, pick)
        keyed_instances += sum(isinstance(g, KeyedGuide) and isinstance(g._inner, LazyGuide) == lazy
                               for g in keyed._guides)
    # the schemas' choices of keys were told apart as written, not written out (in YAML the key after a value
    # shares its fragment with that value: not yet a choice of keys, written out as before)
    assert keyed_instances > 0 or style == "yaml"


def _toward_names(schema: dict, runtime, style: str) -> np.ndarray:
    """bool[V]: the tokens whose text is a piece of a declared name as a key writes it (quoted or plain, with what
    comes before and after it)."""
    pieces = set()
    for name in schema["properties"]:
        for written in (json.dumps(name, ensure_ascii=False), name):
            text = f' {written}: '
            pieces |= {text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1)}
    vocab = runtime.get_vocab_size()
    return np.array([runtime.decode([t]) in pieces for t in range(vocab)], dtype=bool)


def keyed_state(guide, ids: list[int]) -> int:
    state = guide.initial_state
    for token in ids:
        state = guide.advance(state, token)
    return state


def test_a_name_declared_elsewhere_is_no_free_key_and_a_free_key_is_any_other():
    """The keyed guide alone, on texts whose verdicts are known: a declared name may not be written again as a free
    key, a prefix or extension of one may; the next key's value is the declared one's."""
    schema = {"type": "object", "properties": {"alpha": {"type": "integer"}, "beta": {"type": "string"}},
              "required": ["alpha"], "additionalProperties": {"type": "boolean"}}
    runtime = runtime_of("gpt2")
    _, keyed = _guides(schema, "json", "gpt2")
    assert any(isinstance(g, KeyedGuide) for g in keyed._guides)
    assert keyed.accepts(runtime.encode('{"alpha": 1, "beta": "x", "alph": true}', add_special_tokens=False).ids)
    assert keyed.accepts(runtime.encode('{"alpha": 1, "alphas": false}', add_special_tokens=False).ids)
    for text in ['{"alpha": 1, "alpha": true}', '{"alpha": 1, "beta": "x", "beta": true}',
                 '{"alpha": 1, "beta": true}', '{"alpha": 1, "alph": 3}']:
        assert not keyed.accepts(runtime.encode(text, add_special_tokens=False).ids), text


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_a_declared_name_whose_value_is_literal_is_told_apart_too(name):
    """A declared name whose value is literal text (a constant, an empty array) has no cut kept after it (only
    literal text around); the choice of keys ends the name after its closing all the same: keyed, with the masks of
    the written-out trie, and the right verdicts."""
    schema = {"type": "object", "properties": {"gamma": {"type": "integer"}, "alpha": {"const": "on"},
                                               "beta": {"type": "array", "maxItems": 0}},
              "required": ["gamma"], "additionalProperties": {"type": "string"}}
    runtime = runtime_of(name)
    plain, keyed = _guides(schema, "json", name)
    # the choices after gamma's value (alpha, beta or a free key; beta or a free key; a free key) all keyed
    assert sum(isinstance(g, KeyedGuide) for g in keyed._guides) >= 3
    for text, verdict in [('{"gamma": 1, "alpha": "on", "beta": []}', True), ('{"gamma": 1, "alp": "on"}', True),
                          ('{"gamma": 1, "beta": [], "betas": "x"}', True), ('{"gamma": 1, "alpha": "off"}', False),
                          ('{"gamma": 1, "beta": "x"}', False), ('{"gamma": 1, "gamma": "x"}', False),
                          ('{"gamma": 1, "beta": [], "alpha": "on"}', False)]:  # (declared names in their order)
        ids = runtime.encode(text, add_special_tokens=False).ids
        _same_along(plain, keyed, ids)
        assert keyed.accepts(ids) == plain.accepts(ids) == verdict, text


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_a_choice_whose_literal_way_runs_into_a_nested_key_and_whose_empty_object_goes_on_is_told_apart(name):
    """An object value that may be empty and is followed by more keys (``{}, "after":`` reads on past a cut into the
    next choice), whose declared name's value opens an array of objects with a required first key (``"beta":
    [{"x":``: literal text past the dropped cut into a nested name): the ways end at the first cut or, after a
    name's closing, at the first state that could be cut. Keyed (it was written out: a 28k-character regex on
    Kubernetes' ServiceSpec, 100 ms on Llama-3), with the written-out trie's masks and verdicts."""
    item = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x"]}
    outer = {"type": "object", "properties": {"beta": {"type": "array", "items": item}, "gamma": {"type": "integer"}},
             "additionalProperties": {"type": "string"}}
    schema = {"type": "object", "properties": {"outer": outer, "after": {"type": "integer"}},
              "additionalProperties": {"type": "integer"}}
    runtime = runtime_of(name)
    plain, keyed = _guides(schema, "json", name)
    written = [i.fragment.regex for i in keyed._instances if isinstance(i.fragment, Fragment)]
    assert written and not [r for r in written if '"gamma"' in r], "the choice of outer's keys was written out"
    for text, verdict in [('{"outer": {}, "after": 3}', True), ('{"outer": {"beta": [{"x": 1}], "z": "q"}}', True),
                          ('{"outer": {"beta": []}, "w": 1}', True), ('{"outer": {"gam": "q"}}', True),
                          ('{"outer": {"gamma": "q"}}', False), ('{"outer": {"beta": [{"y": 1}]}}', False)]:
        ids = runtime.encode(text, add_special_tokens=False).ids
        _same_along(plain, keyed, ids)
        assert keyed.accepts(ids) == plain.accepts(ids) == verdict, text


def test_a_choice_of_keys_loaded_from_the_disk_library_serves_the_same_masks(tmp_path):
    """A new process finds the shared key fragment on disk (no compile) and tells the names apart as before."""
    schema = {"type": "object", "properties": {"alpha": {"type": "integer"}, "al": {"type": "string"}},
              "required": ["alpha"]}
    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    compiler = Compiler.load(schema, "json", leaves=True)
    skeleton = compiler.document()
    store = FragmentStore(tmp_path, min_compile_seconds=0.0)  # every fragment written, however fast it compiled
    first = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical), store=store,
                             leaf_exceptions=compiler.exceptions)
    store.flush()
    again = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical),
                             store=FragmentStore(tmp_path), leaf_exceptions=compiler.exceptions)
    assert again.fragments_compiled == 0 and any(isinstance(g, KeyedGuide) for g in again._guides)
    for text in ['{"alpha": 1, "al": "x", "alp": 2}', '{"alpha": 1, "alpha": 2}', '{"alpha": 1, "a": {}}']:
        ids = runtime.encode(text, add_special_tokens=False).ids
        assert _same_along(first, again, ids) >= 1
        assert first.accepts(ids) == again.accepts(ids)


def test_a_choice_writes_its_other_ways_whole_and_may_end_the_text():
    """``KeyChoice.regex``: a way that starts with the prefix but no key (the ``{}`` of an empty object) is written
    once, not after the prefix again (``{{}`` is no text of it), and one that ends the text (a top-level empty
    object: ``END``) is exit 0; the key's way and a way to another cut state keep their exits; a way through
    another leaf (``null`` or ``[]`` beside an object) is written as its regex."""
    from automata.regex import from_regex_exits
    from product.compiler.skeleton import END, KeyChoice

    choice = KeyChoice(prefix="{", generic='"[a-z]*"', closing=":", leaf_exit=7, excluded=("a",), words={},
                       others=((r"\{\}", END), (r"\{\},", 9), ("(?:null|\\[\\])", 9)))
    regex, exits = choice.regex()
    assert exits == [7, 9]
    dfa, exit_of, exit_sets = from_regex_exits(regex)

    def exits_after(text: str):
        state = dfa.start
        for b in text.encode():
            state = int(dfa.transitions[state, b])
            if state < 0:
                return None
        return exit_sets[exit_of[state]] if exit_of[state] >= 0 else ()

    assert exits_after('{"ab":') == (1,) and exits_after("{}") == (0,) and exits_after("{},") == (2,)
    assert exits_after("{{}") is None and exits_after("{{},") is None and exits_after("{") == ()
    assert exits_after("null") == exits_after("[]") == (2,) and exits_after("[") == ()


@pytest.mark.parametrize("name", ["gpt2", "mistral"])
def test_the_sorted_token_texts_are_the_vocabulary_tries_preorder(name):
    """``_token_texts`` reads the sorted texts off the vocabulary trie's preorder (ties by id: Mistral's ``A`` and
    its byte-fallback ``<0x41>``) instead of sorting them: the same lists as sorting."""
    from product.runtime.keyed import _token_texts

    canonical = automaton_of(name)
    texts, sorted_texts, sorted_ids, longest = _token_texts(canonical)
    assert texts == [text or b"" for text in canonical.token_bytes]
    order = sorted((text, t) for t, text in enumerate(texts) if text)
    assert sorted_texts == [text for text, _ in order] and sorted_ids == [t for _, t in order]
    assert longest == max(len(text) for text in texts)
