"""Counted repetitions (``product.counted``, ``product.compiler.counted``): the counter guide against the unrolled
guide (exact, tested in test_guide.py) and against the real runtime; node counts independent of the bound; the
fallbacks."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automata import StateLimitError, from_regex
from product import Guide, TokenTransitions, compile_regex
from product.compiler import counted
from product.compiler.tables import vocabulary_trie
from product.counted import CountedGuide
from tests.support import automaton_of, runtime_of, runtime_trie

JSON_CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'


@pytest.fixture(autouse=True)
def small_loops_counted(monkeypatch):
    """Compress loops from 8 iterations on (production: from ``MIN_COUNT`` = 32), so that the unrolled guide —
    the oracle these tests compare with — stays small enough to build in every test."""
    monkeypatch.setattr(counted, "MIN_COUNT", 8)

EQUIVALENCE_PATTERNS = [
    r'"[^"]{0,12}"',
    r"[a-c]{0,10}",
    r"(ab|a){0,9}c",
    r"x[a-z ]{2,14}\.",
    r'"' + JSON_CHAR + r'{0,10}"',
    r'\{"a": "' + JSON_CHAR + r'{1,9}", "b": "[^"]{0,11}"\}',
    r"\[(\d{1,2}(, \d{1,2}){0,9})?\]",  # minItems/maxItems style
    r"[^\n]{0,12}",
]


def _unrolled(pattern, automaton):
    """The plain construction (every iteration its own regex states): exact, and the reference here."""
    return Guide(TokenTransitions.build(from_regex(pattern), vocabulary_trie(automaton)), automaton, name=pattern)


def _walk_pairs(counted, unrolled, rng, limit, prefer_short, fanout=4):
    """Visit state pairs reachable by the same tokens in both guides (random picks; ``prefer_short`` favours
    one- and two-byte tokens so that walks reach the end of the budget), comparing masks and acceptance."""
    lengths = automaton_of_cache["lengths"]
    seen = {(counted.initial_state, unrolled.initial_state)}
    todo = [(counted.initial_state, unrolled.initial_state)]
    compared = 0
    eos = set(unrolled.eos_token_ids)
    while todo and compared < limit:
        a, b = todo.pop(int(rng.integers(len(todo))))
        allowed_a, allowed_b = counted.allowed(a), unrolled.allowed(b)
        differ = np.flatnonzero(allowed_a != allowed_b)
        assert not len(differ), f"masks differ on {len(differ)} tokens, e.g. {differ[:5]}"
        assert counted.is_accepting(a) == unrolled.is_accepting(b)
        compared += 1
        choices = np.array([t for t in np.flatnonzero(allowed_b) if t not in eos])
        if not len(choices):
            continue
        if prefer_short:
            short = choices[lengths[choices] <= 2]
            choices = short if len(short) else choices
        for t in rng.choice(choices, size=min(len(choices), fanout), replace=False).tolist():
            pair = (counted.advance(a, t), unrolled.advance(b, t))
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return compared


automaton_of_cache: dict = {}


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
@pytest.mark.parametrize("pattern", EQUIVALENCE_PATTERNS)
def test_counter_guide_masks_equal_the_unrolled_guide(name, pattern):
    """Every visited state pair (random walks, long tokens and short ones) has the same mask and acceptance in
    the counter guide as in the unrolled one."""
    automaton = automaton_of(name)
    automaton_of_cache["lengths"] = np.array([len(b) if b else 0 for b in automaton.token_bytes])
    counted = compile_regex(pattern, automaton)
    assert isinstance(counted, CountedGuide), "the pattern's loop should be compressed"
    unrolled = _unrolled(pattern, automaton)
    rng = np.random.default_rng(7)
    compared = _walk_pairs(counted, unrolled, rng, 150, prefer_short=False)
    compared += _walk_pairs(counted, unrolled, rng, 150, prefer_short=True)
    assert compared > 20


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_every_reachable_state_of_a_small_counted_language(name):
    """Exhaustive over a finite language: every reachable state pair agrees."""
    automaton = automaton_of(name)
    automaton_of_cache["lengths"] = np.array([len(b) if b else 0 for b in automaton.token_bytes])
    pattern = r"x[ab]{0,8}y"
    counted, unrolled = compile_regex(pattern, automaton), _unrolled(pattern, automaton)
    assert isinstance(counted, CountedGuide)
    assert _walk_pairs(counted, unrolled, np.random.default_rng(0), 5000, prefer_short=False, fanout=10**9) > 9


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
@pytest.mark.parametrize("pattern", [r"x[ab]{0,8}y", r"(ab|b){1,9}", r"[a ]{0,9}"])
def test_counter_guide_masks_are_the_runtime_continuations(name, pattern):
    """The trie oracle of test_guide.py: at every prefix of the runtime's encodings of the (finite) language,
    allowed = the prefix's continuations, EOS exactly where a string ends."""
    guide = compile_regex(pattern, automaton_of(name))
    assert isinstance(guide, CountedGuide)
    eos = set(guide.eos_token_ids)
    for prefix, following in runtime_trie(name, pattern).items():
        state = guide.initial_state
        for t in prefix:
            state = guide.advance(state, t)
        allowed = set(np.flatnonzero(guide.allowed(state)).tolist())
        assert allowed == {t for t in following if t >= 0} | (eos if -1 in following else set()), prefix
        assert guide.is_accepting(state) == (-1 in following)


_BOUND = 12
_JSON_STRING = re.compile(r'"' + JSON_CHAR + r'{0,%d}"' % _BOUND)
_iteration = st.one_of(st.characters(blacklist_characters='"\\', blacklist_categories=("Cs", "Cc")),
                       st.sampled_from(['\\"', "\\\\", "\\/", "\\n", "\\t", "\\u00e9", "\\uABCD"]))


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_iteration, min_size=0, max_size=_BOUND + 1))
def test_runtime_encodings_within_the_bound_are_accepted_and_one_more_is_rejected(name, parts):
    guide = _json_string_guide(name)
    text = '"' + "".join(parts) + '"'
    ids = runtime_of(name).encode(text, add_special_tokens=False).ids
    assert guide.accepts(ids) == (len(parts) <= _BOUND) == bool(_JSON_STRING.fullmatch(text))


_guides: dict = {}


def _json_string_guide(name):
    if name not in _guides:
        _guides[name] = compile_regex(r'"' + JSON_CHAR + r'{0,%d}"' % _BOUND, automaton_of(name))
        assert isinstance(_guides[name], CountedGuide)
    return _guides[name]


def test_nodes_do_not_grow_with_the_bound():
    automaton = automaton_of("gpt2")
    small, large = (compile_regex(r'"[^"]{0,%d}"' % n, automaton) for n in (20, 500))
    assert isinstance(small, CountedGuide) and isinstance(large, CountedGuide)
    assert large.num_nodes_total == small.num_nodes_total


def test_walks_to_the_bound_end_in_the_closing_quote():
    """A walk that always takes the shortest allowed token reaches the bound and then can only close."""
    automaton = automaton_of("llama3")
    guide = compile_regex(r'"[a-z]{0,30}"', automaton)
    assert isinstance(guide, CountedGuide)
    spelling = automaton.token_bytes
    lengths = np.array([len(b) if b else 10**6 for b in spelling])
    state, text = guide.initial_state, b""
    while not guide.is_accepting(state):
        allowed = np.flatnonzero(guide.allowed(state))
        letters = [t for t in allowed if spelling[t] and spelling[t][-1:] != b'"']
        t = min(letters, key=lambda t: lengths[t]) if letters else allowed[0]
        text += spelling[t]
        state = guide.advance(state, int(t))
    assert re.fullmatch(rb'"[a-z]{30}"', text), text


@pytest.mark.parametrize("pattern", [r"a{0,9}a*", r"(a{0,9})*b", r"(\d{1,2}, ){0,9}\d", r"(?i)[a-c]{0,9}", r".{0,9}", r"a{0,3}"])
def test_what_is_not_compressed_compiles_unrolled(pattern):
    """The fallback is the plain construction itself: a ``Guide`` (no counter) whose masks and acceptance equal
    those of the guide built directly from the pattern's token transitions, along walks over short and long tokens,
    and whose states stay plain (below nodes x merge classes: no count beside them)."""
    automaton = automaton_of("gpt2")
    automaton_of_cache["lengths"] = np.array([len(b) if b else 0 for b in automaton.token_bytes])
    guide = compile_regex(pattern, automaton)
    assert type(guide) is Guide  # e.g. "a{0,9}a*": whether an "a" starts an iteration is not decided by the text
    unrolled = _unrolled(pattern, automaton)
    assert guide.num_nodes == unrolled.num_nodes
    rng = np.random.default_rng(3)
    compared = _walk_pairs(guide, unrolled, rng, 60, prefer_short=False)
    compared += _walk_pairs(guide, unrolled, rng, 60, prefer_short=True)
    assert compared >= 3
    assert guide._num_states == guide.num_nodes * guide._M


def test_bad_states_are_refused():
    guide = compile_regex(r'"[^"]{0,20}"', automaton_of("gpt2"))
    with pytest.raises(ValueError):
        guide.allowed(10**12)
    with pytest.raises(TypeError):
        guide.allowed("0")


def test_long_bounds_fit_small_state_limits():
    """Unrolled, this pattern needs well over 50 states; counted, its regex states do not depend on the bounds."""
    guide = compile_regex(r"[a-z]{0,40}[0-9]{0,40}", automaton_of("gpt2"), max_states=50)
    assert isinstance(guide, CountedGuide)
    ids = runtime_of("gpt2").encode("abc" * 13 + "a" + "1" * 40, add_special_tokens=False).ids
    assert guide.accepts(ids)
    ids = runtime_of("gpt2").encode("abc" * 13 + "ab" + "1" * 40, add_special_tokens=False).ids
    assert not guide.accepts(ids)


def test_a_pattern_too_long_to_compile_is_refused_before_the_counted_construction_reads_it(monkeypatch):
    """The counted construction reads its pattern through ``glushkov.read_tree``, as every other reader does: past
    the length bound it gives up without parsing (a 2.4M-character pattern took 5.8 s there before the whole-regex
    compile refused it), and the compile raises the same ``StateLimitError``."""
    from automata import glushkov, parse

    monkeypatch.setattr(glushkov, "_MAX_POSITIONS", 1000)
    read = []
    real_read = parse.read
    monkeypatch.setattr(parse, "read", lambda pattern: read.append(1) or real_read(pattern))
    pattern = "(?:" + "|".join(f"k{i:05d}" for i in range(3000)) + ")[a-z]{0,40}"
    canonical = automaton_of("gpt2")
    assert counted.counted_transitions(pattern, vocabulary_trie(canonical), max_states=10_000,
                                       max_entries=1 << 20) is None
    with pytest.raises(StateLimitError, match="characters for each of the 1000 character positions"):
        compile_regex(pattern, canonical)
    assert not read
