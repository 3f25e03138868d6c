"""product.compiler.boundaries: a piece boundary the constraint can reach settles liveness without the product.

The claim (docs/design.md, "Liveness decided locally"): where some completion makes the pre-tokenizer put a piece
boundary right after the text so far, the state is live in every merge class. The oracle is the eager guide's
liveness fixpoint over the whole product, on the real tokenizers' automata (five pre-tokenizer families)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automata import from_regex
from product.compiler.boundaries import break_possible, character_edges
from product.compiler.node_kernels import NONE_DEAD
from product.compiler.tables import vocabulary_trie
from product.compiler.token_regex import TokenTransitions
from product.runtime.guide import Guide
from tests.support import automaton_of
from vegas import schema_regex

PATTERNS = [
    r'"[^"\\]*"',
    r"(true|false|null)",
    r'\{"name": "[a-z]{1,8}", "age": [0-9]+\}',
    r"[a-zA-Z_][a-zA-Z0-9_]*( [a-zA-Z_]+)*",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r"(ab|abc|a b)+",
    "[\u00e0-\u00ff\u4e00-\u4e10 ]+x\U0001F600?",
    r"(\n  )+[a-z]+:( [a-z]+)?",
    r"'s|'t|x's ?",
    schema_regex({"type": "object", "properties": {"id": {"type": "integer"}, "tags": {
        "type": "array", "items": {"type": "string", "maxLength": 6}}, "ok": {"type": "boolean"}},
        "required": ["id"], "additionalProperties": False}),
]


def _decided(tokenizer: str, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """Per open node of the eager guide: (break possible, no merge class dead)."""
    canonical = automaton_of(tokenizer)
    dfa = from_regex(pattern)
    guide = Guide(TokenTransitions.build(dfa, vocabulary_trie(canonical)), canonical)
    possible = break_possible(dfa, canonical)
    open_ = ~guide._is_pending
    q, ctx = guide._node_q[open_], guide._node_ctx[open_]
    return possible[q, ctx], guide._status[open_] == NONE_DEAD


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3", "mistral", "qwen3", "smollm2"])
def test_a_reachable_boundary_means_every_merge_class_is_live(tokenizer):
    decided = live = 0
    for pattern in PATTERNS:
        possible, none_dead = _decided(tokenizer, pattern)
        assert not (possible & ~none_dead).any(), (tokenizer, pattern)
        decided, live = decided + possible.sum(), live + none_dead.sum()
    if (automaton_of(tokenizer).marked_transitions[:, -1] >= 0).any():
        assert decided >= live // 2  # (and it is not vacuous: it settles most live nodes)
    else:  # Mistral's SentencePiece BPE: no pre-tokenizer split, the whole text is one piece
        assert decided == 0


def test_forced_pieces_are_left_to_the_token_search():
    """Inside a literal's letters no completion breaks the piece: the boundary test says no, whatever the merge
    classes do (after ``tr`` in ``true`` the guide finds every class dead; the test must not claim otherwise)."""
    canonical = automaton_of("gpt2")
    dfa = from_regex("true")
    possible = break_possible(dfa, canonical)
    tr = canonical.token_bytes.index(b"tr")
    ctx = canonical.class_after(canonical.start_class, tr) // canonical.num_merge_classes
    assert not possible[dfa.run(b"tr"), ctx]
    paren = canonical.token_bytes.index(b"(")
    ctx = canonical.class_after(canonical.start_class, paren) // canonical.num_merge_classes
    assert possible[dfa.start, ctx]  # after "(": a boundary, then "true"
    assert not possible[dfa.start, 0]  # (at the start of the text there is no boundary to place)


def test_character_edges_read_whole_utf8_characters_as_symbols():
    canonical = automaton_of("llama3")
    dfa = from_regex("a\u00e9\u4e2d\U0001F600")  # one, two, three and four bytes
    src, sym, dst = character_edges(dfa, canonical)
    path = [dfa.start]
    for char in "a\u00e9\u4e2d\U0001F600":
        path.append(dfa.run(char.encode(), path[-1]))
    for q, char, q2 in zip(path, "a\u00e9\u4e2d\U0001F600", path[1:]):
        symbol = canonical.symbol_values[np.searchsorted(canonical.symbol_starts, ord(char), side="right") - 1]
        assert ((src == q) & (sym == symbol) & (dst == q2)).sum() == 1
    assert len(src) == 4  # nothing else: no partial characters, no other symbols


_ATOMS = ["a", "b", "ab", " ", "  ", "1", "12", ",", "\"", "\\(", "'s", "\n", "\u00e9", "[a-c]", "[0-9]", "[ ,.]",
          "[^\"]"]


@st.composite
def _patterns(draw):
    """Small regexes mixing letters, digits, punctuation, spaces and accents: where pieces split differs most."""
    def expr(depth):
        kind = draw(st.integers(0, 4 if depth else 0))
        if kind == 0:
            return draw(st.sampled_from(_ATOMS))
        if kind == 1:
            return "".join(expr(depth - 1) for _ in range(draw(st.integers(2, 3))))
        if kind == 2:
            return f"({expr(depth - 1)}|{expr(depth - 1)})"
        return f"({expr(depth - 1)}){draw(st.sampled_from(['*', '+', '?', '{1,3}']))}"
    return expr(3)


@settings(max_examples=60, deadline=None)
@given(_patterns(), st.sampled_from(["gpt2", "llama3"]))
def test_random_patterns_never_claim_a_dead_class_live(pattern, tokenizer):
    possible, none_dead = _decided(tokenizer, pattern)
    assert not (possible & ~none_dead).any(), pattern
