"""product.runtime.lazy.LazyGuide: the eager guide's masks, state by state, with only the visited nodes built.

Oracle: ``Guide`` (the eager construction: every node, liveness by the fixpoint over the whole product), walked
alongside on the same random tokens (``tests.support.walk_alike``), on real tokenizers of four pre-tokenizer
families; the eager guide itself is held to the runtime elsewhere (tests/product/test_guide.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automata import EmptyLanguageError, from_regex
from bpe.automaton import DisallowedTokenError
from product.compiler.tables import vocabulary_trie
from product.compiler.token_regex import TokenTransitions
from product.runtime.guide import Guide
from product.runtime.lazy import LazyGuide
from tests.product.test_boundaries import PATTERNS, _patterns
from tests.support import automaton_of, runtime_of, walk_alike


def _pair(tokenizer: str, pattern: str) -> tuple[Guide, LazyGuide]:
    canonical = automaton_of(tokenizer)
    dfa = from_regex(pattern)
    return Guide(TokenTransitions.build(dfa, vocabulary_trie(canonical)), canonical), LazyGuide(dfa, canonical)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3", "qwen3", "smollm2"])
def test_masks_equal_the_eager_guides_along_walks(tokenizer):
    rng = np.random.default_rng(0)
    for pattern in PATTERNS:
        eager, lazy = _pair(tokenizer, pattern)
        for _ in range(8):
            walk_alike(eager, lazy, rng, 40)
        assert len(lazy._rows) < max(eager.num_nodes, 12)  # (only visited nodes get rows)


@settings(max_examples=40, deadline=None)
@given(_patterns(), st.sampled_from(["gpt2", "llama3"]), st.integers(0, 2**32 - 1))
def test_random_patterns_walk_alike(pattern, tokenizer, seed):
    try:
        eager, lazy = _pair(tokenizer, pattern)
    except EmptyLanguageError:  # (both refuse alike: checked below)
        return
    rng = np.random.default_rng(seed)
    for _ in range(3):
        walk_alike(eager, lazy, rng, 30)


def test_a_valid_text_is_accepted_in_its_canonical_tokenization_only():
    canonical, runtime = automaton_of("llama3"), runtime_of("llama3")
    lazy = LazyGuide(from_regex(r'\{"name": "[^"]{0,20}", "n": [0-9]+\}'), canonical)
    text = '{"name": "Zoë Tatum", "n": 2025}'
    ids = runtime.encode(text, add_special_tokens=False).ids
    state = lazy.initial_state
    for t in ids:
        state = lazy.advance(state, t)
    assert lazy.is_accepting(state)
    assert lazy.allowed(state)[canonical.eos_token_ids[0]]
    refused = 0
    for cut in range(1, len(text), 2):  # two encodings glued: the same text, other tokens where they differ
        other = runtime.encode(text[:cut], add_special_tokens=False).ids + runtime.encode(
            text[cut:], add_special_tokens=False).ids
        if other == ids:
            continue
        state = lazy.initial_state
        with pytest.raises(DisallowedTokenError):
            for t in other:
                state = lazy.advance(state, t)
        refused += 1
    assert refused >= 5


def test_it_says_where_it_helps():
    assert LazyGuide.helps(automaton_of("llama3")) and not LazyGuide.helps(automaton_of("mistral"))


def test_the_generation_interface_matches_the_eager_guides():
    """What a generation loop calls: batched bitmasks (numpy and torch buffers), forced chains, acceptance.
    (``product.Matcher`` and the clients take ``Guide``s: a lazy guide is not one of them yet.)"""
    import torch

    eager, lazy = _pair("llama3", r'\{"id": [0-9]{1,4}, "tags": \["[a-z]{1,6}"(, "[a-z]{1,6}")*\]\}')
    rng = np.random.default_rng(3)
    a, b, pairs = eager.initial_state, lazy.initial_state, []
    for _ in range(30):
        pairs.append((a, b))
        assert eager.forced_tokens(a) == lazy.forced_tokens(b)
        allowed = np.flatnonzero(eager.allowed(a)[: eager.vocab_size])
        token = int(rng.choice(allowed))
        if token in eager.eos_token_ids:
            break
        a, b = eager.advance(a, token), lazy.advance(b, token)
    expected = np.zeros((len(pairs), eager.num_words), dtype=np.int32)
    eager.fill_bitmask([p[0] for p in pairs], expected)
    got = np.zeros_like(expected)
    lazy.fill_bitmask([p[1] for p in pairs], got)
    assert np.array_equal(got, expected)
    tensor = torch.zeros((len(pairs) + 1, lazy.num_words), dtype=torch.int32)
    lazy.fill_bitmask([p[1] for p in pairs], tensor)
    assert np.array_equal(tensor[:-1].numpy(), expected) and not tensor[-1].any()
    with pytest.raises(ValueError):
        lazy.fill_bitmask([lazy.initial_state], np.zeros((1, lazy.num_words - 1), dtype=np.int32))

    runtime = runtime_of("llama3")
    text = '{"id": 42, "tags": ["red", "blue"]}'
    ids = runtime.encode(text, add_special_tokens=False).ids
    assert lazy.accepts(ids) and eager.accepts(ids)
    assert not lazy.accepts(ids[:-1]) and not lazy.accepts(runtime.encode('{"id": 42}', add_special_tokens=False).ids)
