"""``PushdownGuide`` (a recursive grammar's guide, built over its configurations) against a guide built another way:
the same grammar cut at a depth is regular, and its regex guide is exact for the strings nested at most that deep.
Along walks that stay inside the cut language, every token the cut guide allows the pushdown guide allows too (it
never refuses a live token), and where the text is too shallow for one token to reach the cut the two masks are
equal (it never allows a dead or non-canonical one). Real tokenizers, real grammar files."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from bpe.assets import asset_path
from product import compile_grammar
from product.runtime.pushdown import PushdownGuide
from tests.support import automaton_of, runtime_of

#: (grammar, depth bound, openers, closers, how deep the text may be where masks must be equal): a bound that no
#: token can reach from that depth (each bracket level costs one reference in the first grammar, two in the others)
CASES = {
    "lists": (r"""
root ::= value
value ::= "[" ws (value ws "," ws)* "]" | [0-9]+ | "\"" [a-z ]* "\""
ws ::= " "?
""", 12, "[", "]", 2),
    "parentheses": (r"""
root ::= expr
expr ::= "-"? atom ([-+*/] "-"? atom)*
atom ::= [0-9]+ | "(" expr ")" | "(" ")"
""", 12, "(", ")", 1),
    "json": (asset_path("grammars/json.gbnf").read_text(encoding="utf-8"), 6, "[{", "]}", 1),
}


def depth(text: str, openers: str, closers: str) -> int:
    """Brackets open at the end of ``text``, outside JSON-style strings (``"..."`` with backslash escapes)."""
    level, quoted, escaped = 0, False, False
    for c in text:
        if quoted:
            quoted, escaped = (escaped or c != '"'), (not escaped and c == "\\")
        elif c == '"':
            quoted = True
        else:
            level += (c in openers) - (c in closers)
    return level


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_masks_equal_the_depth_bounded_guide_where_no_token_reaches_the_bound(case, tokenizer):
    grammar, bound, openers, closers, shallow = CASES[case]
    canonical, runtime = automaton_of(tokenizer), runtime_of(tokenizer)
    pushdown = compile_grammar(grammar, canonical)
    assert isinstance(pushdown, PushdownGuide)
    bounded = compile_grammar(grammar, canonical, max_depth=bound, lazy=True)
    rng = np.random.default_rng(zlib.crc32(f"{case}:{tokenizer}".encode()))
    eos = list(pushdown.eos_token_ids)
    compared = 0
    bracketed = np.array([any(c in (runtime.id_to_token(t) or "") for c in openers + closers)
                          for t in range(runtime.get_vocab_size())])
    for _ in range(12):
        p, b, ids = pushdown.initial_state, bounded.initial_state, []
        for step in range(60):
            p_mask, b_mask = pushdown.allowed(p), bounded.allowed(b)
            assert p_mask.any(), f"dead end after {runtime.decode(ids)!r}"
            missing = np.flatnonzero(b_mask & ~p_mask)
            assert not len(missing), (runtime.decode(ids), [runtime.id_to_token(int(t)) for t in missing[:10]])
            text = runtime.decode(ids)
            if depth(text, openers, closers) <= shallow:
                extra = np.flatnonzero(p_mask & ~b_mask)
                assert not len(extra), (text, [runtime.id_to_token(int(t)) for t in extra[:10]])
                compared += 1
            if b_mask[eos].any() and (step > 25 or rng.random() < 0.1):
                break
            b_mask[eos] = False
            choices = np.flatnonzero(b_mask)
            if not len(choices):
                break
            # mostly brackets and short tokens (nesting and crossing tokens), sometimes anything allowed
            near = choices[bracketed[choices]]
            pool = near if len(near) and rng.random() < 0.6 else choices
            token = int(rng.choice(pool))
            ids.append(token)
            p, b = pushdown.advance(p, token), bounded.advance(b, token)
    assert compared >= 50


def test_a_pushdown_guide_pickles_mid_walk_and_serves_batches_with_other_guides():
    """It is a ``Guide``: pickled with the configurations it has met, it goes on building the same masks; a
    ``Matcher`` batch holds it beside a regex guide."""
    import pickle

    from product import Matcher, allocate_token_bitmask, compile_regex, fill_next_token_bitmasks

    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    grammar = CASES["json"][0]
    guide = compile_grammar(grammar, canonical)
    text = '{"a": [1, {"b": [[], {"c": "d"}]}], "e": {"f": null}}'
    ids = runtime.encode(text, add_special_tokens=False).ids
    state = guide.initial_state
    for token in ids[:6]:
        state = guide.advance(state, token)
    copy = pickle.loads(pickle.dumps(guide))
    fresh = compile_grammar(grammar, canonical)
    fresh_state = fresh.initial_state
    for token in ids[:6]:
        fresh_state = fresh.advance(fresh_state, token)
    for token in ids[6:]:
        assert (copy.allowed(state) == fresh.allowed(fresh_state)).all()
        state, fresh_state = copy.advance(state, token), fresh.advance(fresh_state, token)
    assert copy.is_accepting(state)
    regex = compile_regex(r'\{"ok": (true|false)\}', canonical)
    matchers = [Matcher(guide), Matcher(regex)]
    for token in ids[:3]:
        matchers[0].accept_token(token)
    bitmask = allocate_token_bitmask(2, guide.vocab_size)
    fill_next_token_bitmasks(matchers, bitmask)
    for row, (g, m) in enumerate(zip([guide, regex], matchers)):
        words = np.zeros(g.num_words, dtype=np.int32)
        g.fill_bitmask([m.state], words[None, :])
        assert np.array_equal(bitmask[row].numpy() if hasattr(bitmask, "numpy") else bitmask[row], words)


def test_recursion_that_never_ends_derives_nothing():
    """A rule that only recurses derives no string: the grammar is refused as empty, and a branch through such a rule
    is never offered (its first token would open a text no derivation finishes)."""
    from automata import EmptyLanguageError

    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    with pytest.raises(EmptyLanguageError):
        compile_grammar('root ::= "(" root ")"', canonical)
    guide = compile_grammar('root ::= "x" | "(" a ")"\na ::= "[" a "]"', canonical)
    allowed = guide.allowed(guide.initial_state)
    assert allowed[runtime.token_to_id("x")] and not allowed[runtime.token_to_id("(")]
    assert guide.accepts(runtime.encode("x", add_special_tokens=False).ids)
