"""Regex -> DFA agrees with re.fullmatch; trim/minimise/intersect behave as specified."""

import re
import string

import interegular
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interegular.patterns import _CharGroup

from automata import DFA, MISSING, Alphabet, EmptyLanguageError, RegexError, StateLimitError, from_regex
from automata.dfa import cycle_region, reachable_code

PATTERNS = [
    r"(true|false)",
    r"[a-z]+",
    r"[^\"\\]*",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    r"(ab|a)*c?",
    r"x{2,4}y{0,2}",
    r"(0|1)*1(0|1){2}",
    r"[α-ω]+é?",
    r"[^a]€*",
    r"😀|😃+",
    r"(?i)yes|no",
    r"\d{4}-\d{2}-\d{2}",
    r"[ \t\n]*\{\"k\": (\"[^\"]*\"|null)\}",
    r"a.b",
    "[\x00-\x7f]+[\u0080-\u3000]",
]
CHARS = string.ascii_letters + string.digits + "-.+ \t\n\"\\{}:αβωé€😀😃"
text = st.text(alphabet=st.sampled_from(CHARS) | st.characters(blacklist_categories=("Cs",)), max_size=12)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=300, deadline=None)
@given(s=text)
def test_byte_dfa_agrees_with_re(pattern, s):
    dfa = _compiled(pattern, None)
    assert dfa.accepts(s) == bool(re.fullmatch(pattern, s))


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=300, deadline=None)
@given(s=st.text(alphabet=st.sampled_from(CHARS), max_size=12))
def test_char_dfa_agrees_with_re(pattern, s):
    dfa = _compiled(pattern, CHARS)
    assert dfa.accepts(s) == bool(re.fullmatch(pattern, s))


_cache: dict = {}


def _compiled(pattern, chars):
    key = (pattern, chars)
    if key not in _cache:
        _cache[key] = from_regex(pattern, Alphabet.of_chars(chars) if chars else None)
    return _cache[key]


def test_accepts_strings_of_a_finite_language_exactly():
    dfa = from_regex(r"(ab|c)(d|ef)?")
    got = sorted(bytes(s).decode() for s in dfa.strings())
    assert got == sorted(["ab", "c", "abd", "cd", "abef", "cef"])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_minimise_matches_interegular_minimal_count(pattern):
    """On a character alphabet covering every interegular class, the minimal trim DFA has exactly as many
    states as interegular's own minimised FSM minus its dead state (if it has one)."""
    fsm = interegular.parse_pattern(pattern).to_fsm().reduce()
    alphabet = fsm.alphabet
    chars = []
    for symbol, group in alphabet.by_transition.items():
        real = [c for c in group if isinstance(c, str)]
        chars.append(real[0] if real else "\U0010fffd")  # a character none of the pattern's classes names
    dfa = from_regex(pattern, Alphabet.of_chars(chars))
    live = [s for s in fsm.states if _coreachable(fsm, s)]
    assert dfa.num_states == len(live)


def _coreachable(fsm, state):
    seen, todo = {state}, [state]
    while todo:
        s = todo.pop()
        if s in fsm.finals:
            return True
        for nxt in fsm.map.get(s, {}).values():
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def test_minimise_merges_equivalent_states_and_is_idempotent():
    # 0 -a-> 1, 0 -b-> 2, 1 -c-> 3, 2 -c-> 4; 3 and 4 accepting: 1~2 and 3~4, minimal has 3 states.
    t = np.full((5, 3), MISSING, dtype=np.int32)
    t[0, 0], t[0, 1], t[1, 2], t[2, 2] = 1, 2, 3, 4
    dfa = DFA(t, np.array([0, 0, 0, 1, 1], bool), 0, Alphabet.of_chars("abc"))
    m = dfa.minimise()
    assert m.num_states == 3
    assert m.minimise().num_states == 3
    assert all(m.accepts(w) for w in ["ac", "bc"]) and not m.accepts("a")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_minimise_agrees_with_table_filling_on_random_dfas(data):
    """The compiled refinement (Valmari and Lehtinen's, over the transitions that exist) against the textbook oracle: on the trimmed DFA, two states are equivalent iff no
    string tells them apart (table filling); the minimal DFA has one state per class and the same language."""
    n, k = data.draw(st.integers(1, 24)), data.draw(st.integers(1, 3))
    rows = data.draw(st.lists(st.lists(st.integers(-1, n - 1), min_size=k, max_size=k), min_size=n, max_size=n))
    accepting = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    dfa = DFA(np.array(rows, dtype=np.int32), accepting, 0, Alphabet.of_chars("abc"[:k]))
    trimmed, minimal = dfa.trim(), dfa.minimise()
    t, m = trimmed.transitions, trimmed.num_states
    apart = np.not_equal.outer(trimmed.accepting, trimmed.accepting)
    changed = True
    while changed:
        changed = False
        for p in range(m):
            for q in range(p + 1, m):
                if not apart[p, q] and any((t[p, j] < 0) != (t[q, j] < 0) or (t[p, j] >= 0 and apart[t[p, j], t[q, j]])
                                           for j in range(k)):
                    apart[p, q] = apart[q, p] = changed = True
    classes = len({tuple(np.flatnonzero(~apart[p])) for p in range(m)})
    assert minimal.num_states == classes
    words = [[]] + [[a] for a in range(k)] + [[a, b] for a in range(k) for b in range(k)]
    words += [w + [c] for w in words[-k * k:] for c in range(k)]
    accepts = lambda d, w: d.run(w) != MISSING and bool(d.accepting[d.run(w)])  # noqa: E731
    assert all(accepts(dfa, w) == accepts(minimal, w) for w in words)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_cycle_region_is_the_strongly_connected_component(data):
    """``cycle_region`` against networkx's components on random tables: the states a state shares a cycle with,
    breadth-first from it inside them (the first the state itself), none for a state on no cycle or past the cap."""
    n, k = data.draw(st.integers(1, 20)), data.draw(st.integers(1, 3))
    rows = data.draw(st.lists(st.lists(st.integers(-1, n - 1), min_size=k, max_size=k), min_size=n, max_size=n))
    table = np.array(rows, dtype=np.int32)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from((s, int(t)) for s in range(n) for t in table[s] if t >= 0)
    for state in range(n):
        component = next(c for c in nx.strongly_connected_components(graph) if state in c)
        on_cycle = len(component) > 1 or graph.has_edge(state, state)
        found = cycle_region(table, state, n)
        assert set(found.tolist()) == (component if on_cycle else set())
        if on_cycle:
            assert found[0] == state and len(set(found.tolist())) == len(found)
            assert not len(cycle_region(table, state, len(component) - 1))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_reachable_codes_name_automata_up_to_renumbering(data):
    """``reachable_code``: a table with its states renumbered gives every state the same code, its order mapped; two
    states with equal codes accept the same strings (their reachable automata are one graph); past the cap, none."""
    n, k = data.draw(st.integers(1, 16)), data.draw(st.integers(1, 3))
    rows = data.draw(st.lists(st.lists(st.integers(-1, n - 1), min_size=k, max_size=k), min_size=n, max_size=n))
    table = np.array(rows, dtype=np.int32)
    perm = np.array(data.draw(st.permutations(range(n))))
    renumbered = np.full_like(table, -1)
    renumbered[perm] = np.where(table >= 0, perm[np.maximum(table, 0)], -1)
    codes = {}
    for state in range(n):
        order, code = reachable_code(table, state, n)
        other_order, other_code = reachable_code(renumbered, int(perm[state]), n)
        assert np.array_equal(code, other_code) and np.array_equal(perm[order], other_order)
        assert order[0] == state and not len(reachable_code(table, state, len(order) - 1)[0])
        codes.setdefault(code.tobytes(), []).append(order)
    words = [[]] + [[a] for a in range(k)] + [[a, b] for a in range(k) for b in range(k)]
    for orders in codes.values():  # (equal codes: the same graph, states matched by order)
        for other in orders[1:]:
            for w in words:
                p, q = orders[0][0], other[0]
                for symbol in w:
                    p, q = (table[p, symbol], table[q, symbol]) if p >= 0 else (-1, -1)
                assert (p < 0) == (q < 0) and (p < 0 or list(orders[0]).index(p) == list(other).index(q))


def test_trim_removes_unreachable_and_dead_states():
    t = np.full((4, 2), MISSING, dtype=np.int32)
    t[0, 0], t[0, 1], t[3, 0] = 1, 2, 1  # 2 is a dead end, 3 unreachable
    dfa = DFA(t, np.array([0, 1, 0, 0], bool), 0, Alphabet.of_chars("ab")).trim()
    assert dfa.num_states == 2 and dfa.accepts("a") and not dfa.accepts("b")


@settings(max_examples=200, deadline=None)
@given(s=st.text(alphabet=st.sampled_from("ab01"), max_size=10))
def test_intersection_is_conjunction(s):
    left, right = _compiled(r"[ab01]*a[ab01]*", None), _compiled(r"[ab01]{0,6}", None)
    both = _intersections.setdefault("x", left.intersect(right))
    assert both.accepts(s) == (left.accepts(s) and right.accepts(s))


_intersections: dict = {}


def test_bad_regexes_raise_typed_errors_naming_the_problem():
    with pytest.raises(RegexError, match="Group references"):
        from_regex(r"(a)\1")
    with pytest.raises(RegexError, match="lookbacks"):
        from_regex(r"(?<=a)b")
    with pytest.raises(RegexError, match=r"\[a-"):
        from_regex(r"[a-")
    with pytest.raises(RegexError, match="unicode properties"):
        from_regex(r"\p{L}")
    for unbalanced in ("(ab", "*a"):  # interegular's syntax errors with no message of their own say so
        with pytest.raises(RegexError, match="invalid syntax"):
            from_regex(unbalanced)


def test_empty_language_raises():
    with pytest.raises(EmptyLanguageError, match="matches no string"):
        from_regex(r"[^\s\S]")
    with pytest.raises(EmptyLanguageError):
        from_regex(r"z+", Alphabet.of_chars("ab"))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_utf8_shortcuts_build_the_same_dfa(pattern, monkeypatch):
    """Patterns that read no non-ASCII character skip the UTF-8 trie; those that read them all alike reuse one
    relabelled trie. Either way the DFA is the one the full expansion with a fresh trie gives."""
    import automata.regex as regex

    fast = from_regex(pattern)
    monkeypatch.setattr(regex, "_reads_only_ascii", lambda *_: False)
    monkeypatch.setattr(regex, "_utf8_trie", lambda mapping, other, dead: regex._build_utf8_trie(
        regex._code_point_classes(mapping, other, dead), dead))
    fresh = from_regex(pattern)
    assert fast.start == fresh.start
    assert np.array_equal(fast.transitions, fresh.transitions) and np.array_equal(fast.accepting, fresh.accepting)


def test_state_limit_is_enforced_before_building():
    with pytest.raises(StateLimitError, match="max_states"):
        from_regex(r"[a-z]{50}", max_states=20)


def test_positions_are_capped_whatever_max_states(monkeypatch):
    """A follow set costs as many bits as the positions before it: past the cap the construction stops with
    StateLimitError (a 1.2M-character schema regex once took 14 GB before failing), whatever ``max_states``."""
    from automata import glushkov

    monkeypatch.setattr(glushkov, "_MAX_POSITIONS", 1000)
    with pytest.raises(StateLimitError, match="1000 at most"):
        from_regex(r"(ab){600}", max_states=1_000_000)
    assert from_regex(r"(ab){400}", max_states=1_000_000).accepts(list(b"ab" * 400))
    # counted before any position is numbered (numbering grows follow sets as wide as the positions so far)
    numbered = []
    real_position = glushkov._Positions.position
    monkeypatch.setattr(glushkov._Positions, "position", lambda self, *a: numbered.append(1) or real_position(self, *a))
    for pattern in (r"(ab){600}", r"(?:x(y|z)*){334}", "q" * 1001):
        with pytest.raises(StateLimitError, match="1000 at most"):
            from_regex(pattern, max_states=1_000_000)
        assert not numbered, pattern
    assert from_regex(r"(?:x(y|z)*){333}", max_states=1_000_000).accepts(list(b"xyz" * 333)) and numbered


def test_the_follow_entry_cap_holds_when_a_subtree_is_copied(monkeypatch):
    """A subtree numbered by copying (``glushkov._Subtrees``) counts its follow entries under the same cap as
    numbering it: three alternatives, each a group whose loop links 64 x 64 positions, pass a cap that two fit
    under (the third is the copied one)."""
    from automata import glushkov, parse

    group = "(?:(?:" + "|".join(f"{a}{b}" for a in "abcdefgh" for b in "ijklmnop") + ")*z)"
    per_copy = 64 * 64 + 64 + 64  # the loop, each word's two letters, the loop's ends before z
    monkeypatch.setattr(glushkov, "_MAX_FOLLOW_ENTRIES", int(2.5 * per_copy))
    parse._GROUPS.clear()
    glushkov._SUBTREES.clear()
    assert from_regex("|".join([group] * 2), max_states=1_000_000).accepts(list(b"aiz"))
    parse._GROUPS.clear()
    glushkov._SUBTREES.clear()
    with pytest.raises(StateLimitError, match="follow entries"):
        from_regex("|".join([group] * 3), max_states=1_000_000)
    assert any(block is not None for _, block in glushkov._SUBTREES.table.values())  # (kept: the third was a copy)


def test_patterns_too_long_for_the_position_cap_are_refused_before_parsing(monkeypatch):
    """A pattern longer than 16 characters for each position the cap allows is refused before it is read (a
    29M-character schema regex took 51 s to parse); a long pattern within that ratio compiles."""
    from automata import glushkov, parse

    monkeypatch.setattr(glushkov, "_MAX_POSITIONS", 1000)
    read = []
    real_read = parse.read
    monkeypatch.setattr(parse, "read", lambda pattern: read.append(1) or real_read(pattern))
    with pytest.raises(StateLimitError, match="16,001 characters"):
        from_regex("a" * 16_001, max_states=1_000_000)
    with pytest.raises(StateLimitError, match="characters"):
        from_regex("[0-9a-zA-Z_]" * 1334, max_states=1_000_000)
    assert not read
    assert from_regex("(?:[0-9a-z]|[_-])" * 400, max_states=1_000_000).accepts(list(b"a" * 400)) and read
    # the length bound is the positions cap's, not max_states': a long class is one position
    wide = "[" + "".join(chr(0x4E00 + i) for i in range(0, 10_000, 2)) + "]x"
    assert from_regex(wide, max_states=64).accepts(list("丂x".encode()))


def test_multibyte_characters_become_byte_paths():
    dfa = from_regex(r"é")
    assert dfa.accepts(list("é".encode())) and dfa.num_states == 3
    assert not dfa.accepts([0xC3]) and not dfa.accepts(list("e".encode()))
    # No surrogate or overlong encodings sneak in through a negated class.
    neg = from_regex(r"[^a]")
    assert not neg.accepts([0xED, 0xA0, 0x80]) and not neg.accepts([0xC0, 0x80])
    assert neg.accepts(list("\U0010ffff".encode())) and not neg.accepts([0xF4, 0x90, 0x80, 0x80])
    assert set(string.printable) - {"a", "\n"} <= {c for c in string.printable if neg.accepts(c)}


# ---- the position construction (automata.glushkov) against interegular's own ---------------------------------

EQUIVALENCE_PATTERNS = PATTERNS + [
    r'\{"name": "[^"\\\x00-\x1f]*", "age": [0-9]{1,3}\}',
    r"((25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)",
    r"[a-z0-9._%+-]{1,40}@[a-z0-9.-]{1,40}\.[a-z]{2,6}",
    r"\[([0-9]{1,6}(, [0-9]{1,6})*)?\]",
    r"(?i)[a-c]x|ß", r"(?i:ab)c(?-i:d)", r"a{0}b", r"a{2,}", r"(a|)+", r"(a*)*b", r"((ab)?c){2,3}", r".{1,3}",
    r"(?s).\n?", r"[^a-z]{0,2}[a-z]", r"(x|xy|xyz){1,3}", r"()", r"a|b|",
]


def _minimal(pattern, use_positions, monkeypatch):
    import automata.glushkov as glushkov

    if not use_positions:
        monkeypatch.setattr(glushkov, "char_dfa", lambda tree, max_states: None)
    dfa = from_regex(pattern)
    monkeypatch.undo()
    return dfa


def _same_dfa(a, b):
    return a.start == b.start and np.array_equal(a.transitions, b.transitions) and np.array_equal(a.accepting,
                                                                                                   b.accepting)


@pytest.mark.parametrize("pattern", EQUIVALENCE_PATTERNS)
def test_position_construction_gives_interegulars_language(pattern, monkeypatch):
    """Minimal DFAs numbered breadth-first are equal iff their languages are: the position construction must
    give exactly the DFA interegular's FSM operations give."""
    assert _same_dfa(_minimal(pattern, True, monkeypatch), _minimal(pattern, False, monkeypatch))


_atom = st.sampled_from(["a", "b", "c", ".", "[ab]", "[^a]", "[^\\s\\S]", "\\d", "é", "(?i:a)"])


def _regex(children):
    return st.one_of(
        st.tuples(children, children).map(lambda t: t[0] + t[1]),
        st.tuples(children, children).map(lambda t: f"({t[0]}|{t[1]})"),
        children.map(lambda r: f"({r})*"), children.map(lambda r: f"({r})+"), children.map(lambda r: f"({r})?"),
        st.tuples(children, st.integers(0, 3), st.integers(0, 2)).map(lambda t: f"({t[0]}){{{t[1]},{t[1] + t[2]}}}"),
        st.tuples(children, st.integers(0, 2)).map(lambda t: f"({t[0]}){{{t[1]},}}"))


@settings(max_examples=150, deadline=None)
@given(pattern=st.recursive(_atom, _regex, max_leaves=6))
def test_position_construction_agrees_on_random_regexes(pattern):
    import automata.glushkov as glushkov

    try:
        positions = from_regex(pattern)
    except EmptyLanguageError:
        positions = None
    original = glushkov.char_dfa
    glushkov.char_dfa = lambda tree, max_states: None
    try:
        reference = from_regex(pattern)
    except EmptyLanguageError:
        reference = None
    finally:
        glushkov.char_dfa = original
    assert (positions is None) == (reference is None)
    if positions is not None:
        assert _same_dfa(positions, reference)


@settings(max_examples=200, deadline=None)
@given(pattern=st.recursive(_atom, _regex, max_leaves=6), flags=st.sampled_from(["", "(?i)", "(?s)"]))
def test_first_characters_are_what_the_start_state_reads(pattern, flags):
    """``glushkov.first_characters`` (read off the tree) equals the position construction's start state: whether it
    accepts, and the characters it has a transition on (None where one is a character the pattern never names)."""
    from interegular.fsm import anything_else

    import automata.glushkov as glushkov

    tree = glushkov.read_tree(flags + pattern, 10_000)
    dfa = glushkov.char_dfa(tree, 10_000)
    found = glushkov.first_characters(tree)
    assert (dfa is None) == (found is None)
    if dfa is not None:
        table, accepting, start, mapping = dfa
        chars = frozenset(ch for ch, c in mapping.items() if table[start, c] != MISSING)
        assert found == (bool(accepting[start]), None if anything_else in chars else chars), pattern


@settings(max_examples=60, deadline=None)
@given(inner=st.recursive(_atom, _regex, max_leaves=8), outer=st.recursive(_atom, _regex, max_leaves=4),
       case=st.booleans())
def test_long_groups_shared_between_patterns_give_the_same_dfas(inner, outer, case):
    """A long group read once (``automata.parse``) and numbered by copying once seen twice (``glushkov``) gives
    each pattern the DFA it gets read and numbered afresh: the group three times in one pattern, then in others,
    under the case-insensitive flag or not, against the same patterns with both memos cleared before each."""
    import automata.glushkov as glushkov
    import automata.parse as parse

    group = f"(?:{inner}|[0-9]{{2}}(x|y|z)w+({inner})*|{'q' * 70})"  # (>= 64 characters, >= 16 positions)
    flag = "(?i:" if case else "(?:"
    patterns = [f"{group}{outer}{group}*,{group}", f"{outer}({group}|{outer})", f"{flag}{group}){group}",
                f"a{group}{{0,2}}"]

    def compiled(fresh: bool):
        dfas = []
        for pattern in patterns:
            if fresh:
                parse._GROUPS.clear()
                glushkov._SUBTREES.clear()
            try:
                dfas.append(from_regex(pattern, max_states=20_000))
            except (EmptyLanguageError, StateLimitError) as error:
                dfas.append(type(error))
        return dfas

    shared = compiled(False) + compiled(False)  # (the second pass copies what the first kept)
    fresh = compiled(True)
    for a, b in zip(shared, fresh + fresh):
        assert a == b if isinstance(b, type) else _same_dfa(a, b)


def test_lookaheads_use_interegulars_construction():
    dfa = from_regex(r"a(?=b)[a-c]c")
    assert dfa.accepts("abc") and not dfa.accepts("acc")
    assert re.fullmatch(r"a(?=b)[a-c]c", "abc") and not re.fullmatch(r"a(?=b)[a-c]c", "acc")


def test_repetition_bounds_out_of_order_are_a_regex_error():
    with pytest.raises(RegexError, match=r"minimum exceeds the maximum"):
        from_regex(r"a{3,1}")


# ---- the fast reader (automata.parse) against interegular's parser --------------------------------------------

_READER_PATTERNS = [p for p in EQUIVALENCE_PATTERNS if not re.search(r"\(\?[^:]", p)] + [
    r'\ (?:"(([^\x00-\x1f"\\]|\\(["\\bfnrt]|u00(0[0-7bef]|1[0-9a-f]))))*")(?:,' + "\udc01" + r"|\}" + "\udc00)",
    r"[\d\s_-]+[^\W]*\W{2}", r"[a\-z]", r"[-a]", r"[a-]", r"[]a", r"[^]", r"[\b]x", r"\x41\x7e+?", r"a{3}?b{2,}?c*?",
    r"\.\*\+\?\(\)\[\]\{\}\|\\\/", r"}", r"a|(b|(c|))", "[\u00e9-\u00ff]\U0001f600", r"\t\n\r\f\v\a",
]
# Syntax the reader leaves to interegular (which implements it, or raises its own error)
_LEFT_TO_INTEREGULAR = [r"a(?=b)", r"(?i)a", r"(?P<n>a)", r"^a$", r"\1", r"\012", r"a{,3}", r"a{", r"a**", r"\u0041",
                        r"\p{L}", r"\bx", r"[\8]", r"\q", r"(a", r"a)", "\\", r"[z-a]", r"[\d-z]"]


@pytest.mark.parametrize("pattern", _READER_PATTERNS)
def test_reader_builds_interegulars_tree(pattern):
    """On the syntax canonmerge writes, ``automata.parse.read`` gives interegular's own parse tree (interegular
    simplifies its tree after parsing; the reader's, simplified, is the same)."""
    from automata import parse

    tree = parse.read(pattern)
    assert tree is not None and tree.simplify() == interegular.parse_pattern(pattern)
    assert parse.read(pattern).simplify() == tree.simplify()  # the class cache gives the same groups
    # runs of literals handed to ``runs`` (here: given back as they are) leave the tree as it was
    seen = []
    by_runs = parse.read(pattern, lambda text: seen.append(text) or text)
    assert by_runs.simplify() == tree.simplify()
    assert all(seen)


def test_reader_hands_over_runs_of_unquantified_literals():
    from automata import parse

    seen = []
    tree = parse.read(r'\{"ab": (c|d\.)e*f+\}', lambda text: seen.append(text) or ("R" if len(text) > 1 else text))
    assert sorted(seen) == sorted(['{"ab": ', "c", "d.", "}"])  # e and f are quantified: not in runs
    assert len(tree.options[0].parts) == 5  # '{"ab": ' as one character R, the group, e*, f+, '}'
    assert tree.options[0].parts[0] == _CharGroup(frozenset("R"), False)


@pytest.mark.parametrize("pattern", _LEFT_TO_INTEREGULAR)
def test_reader_leaves_other_syntax_to_interegular(pattern):
    from automata import parse

    assert parse.read(pattern) is None


@settings(max_examples=300, deadline=None)
@given(pattern=st.recursive(st.sampled_from(["a", "b", ".", "[ab]", "[^a]", "[^\\s\\S]", "\\d", "é", "[\\x00-\\x1f\"]",
                                             "\\\\", "\\.", "[a-c\\-]", "\\W", "x{2}", "[^\\d_]"]),
                            _regex, max_leaves=8))
def test_reader_agrees_with_interegular_on_random_regexes(pattern):
    from automata import parse

    assert parse.read(pattern).simplify() == interegular.parse_pattern(pattern)


# ---- regions of several regexes (automata.regions) ------------------------------------------------------------

@pytest.mark.parametrize("patterns", [["[a-z]+", "x-.*"], ["a*", "b*", "(ab)*"], ['[^"\\\\]*', "ab|cd"],
                                      [".*", "a.*b"], ["[0-9]{2,4}", "1[0-9]*"], ["é+|ü", "[à-ÿ]*"]])
def test_regions_hold_the_strings_matched_by_exactly_those_patterns(patterns):
    """Every string over an alphabet that meets every class of the patterns falls in exactly the region of the
    patterns ``re.fullmatch`` accepts it with (no region if none)."""
    import itertools

    from automata.regions import regions

    found = {region: re.compile(regex) for region, regex in regions(patterns).items()}
    for length in range(5):
        for chars in itertools.product('abx-1"é\n', repeat=length):
            text = "".join(chars)
            truth = frozenset(i for i, p in enumerate(patterns) if re.fullmatch(p, text))
            assert [r for r, regex in found.items() if regex.fullmatch(text)] == ([truth] if truth else []), text


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["source", 0, 1, 2, 3]), st.sampled_from(["sink", 0, 1, 2, 3]),
                          st.sampled_from(["a", "b", "ab", ""])), min_size=1, max_size=12))
def test_state_elimination_writes_the_language_of_its_graph(triples):
    """``eliminate`` (kept incremental: neighbours and label lengths updated as edges come and go) writes a regex
    matching exactly the labels of the graph's paths from source to sink, cycles included."""
    import itertools

    from automata.regions import eliminate

    edges: dict = {}
    for a, b, label in triples:
        edges[a, b] = label if (a, b) not in edges else f"(?:{edges[a, b]}|{label})"
    regex = eliminate(edges, "source", "sink", 1_000_000)
    compiled = [(a, b, re.compile(label)) for (a, b), label in edges.items()]

    def spelled(text: str) -> bool:  # a path from source to sink reads ``text``: (node, position) reachability
        seen, todo = set(), [("source", 0)]
        while todo:
            node, i = todo.pop()
            if (node, i) in seen:
                continue
            seen.add((node, i))
            for a, b, label in compiled:
                if a == node:
                    todo += [(b, j) for j in range(i, len(text) + 1) if label.fullmatch(text, i, j)]
        return ("sink", len(text)) in seen

    for length in range(6):
        for chars in itertools.product("ab", repeat=length):
            text = "".join(chars)
            if regex == "" and text == "":
                continue  # '' is also what eliminate returns when no path leads to the sink
            assert (re.fullmatch(regex, text) is not None) == spelled(text), (edges, regex, text)


@settings(max_examples=150, deadline=None)
@given(pattern=st.one_of(st.sampled_from(EQUIVALENCE_PATTERNS), st.recursive(_atom, _regex, max_leaves=8)))
def test_sparse_and_bitset_subset_constructions_give_the_same_dfa(pattern):
    """Step 4 of the position construction has two implementations (follow lists in a compiled loop; Python-int
    bitsets where follow sets are too large to list): the same states, numbered alike, the same classes."""
    from interegular import parse_pattern

    import automata.glushkov as glushkov
    from automata import parse

    tree = parse.read(pattern) or parse_pattern(pattern)
    sparse = glushkov.char_dfa(tree, 10_000, sparse=True)
    bitset = glushkov.char_dfa(tree, 10_000, sparse=False)
    assert (sparse is None) == (bitset is None)
    if sparse is not None:
        assert np.array_equal(sparse.class_target, bitset.class_target)
        assert np.array_equal(sparse.accepting, bitset.accepting)
        assert sparse.mapping == bitset.mapping and sparse.start == bitset.start


def test_sparse_subset_construction_stops_at_max_states():
    import automata.glushkov as glushkov
    from automata import parse

    tree = parse.read("[ab]{0,40}c")
    for sparse in (True, False):
        with pytest.raises(StateLimitError, match="max_states=20 character states"):
            glushkov.char_dfa(tree, 20, sparse=sparse)


@pytest.mark.parametrize("pattern", ["[^a\u2028]*", "é+|ü", "[α-ω]{2}x", '[^"\\\\\u2028\u2029]*"', "(日本|語)+", ".*é.*",
                                     "[\u0080-\u07ff]+", "[^éê]{3}", "[^\U0001f600]?z"])
def test_the_utf8_trie_of_a_few_named_characters_is_the_one_built_for_the_pattern(pattern, monkeypatch):
    """A pattern naming a few non-ASCII characters reads its UTF-8 trie from a template per partition of them
    (relabelled to its classes): the byte DFA is the one the trie built over every code point gives."""
    import automata.regex as regex_module

    templated = from_regex(pattern).minimise()
    monkeypatch.setattr(regex_module, "_MAX_NAMED_NON_ASCII", -1)
    built = from_regex(f"(?:{pattern})").minimise()  # (another text: no cache between the two)
    assert templated.start == built.start
    assert np.array_equal(templated.transitions, built.transitions)
    assert np.array_equal(templated.accepting, built.accepting)


def _same_exits(a, b) -> bool:
    """Whether two exit DFAs (``from_regex_exits``) read the same strings to the same exit sets: a walk of the
    product from the starts (both trimmed: a byte is read by both or by neither)."""
    (d1, e1, s1), (d2, e2, s2) = a, b
    seen, todo = set(), [(d1.start, d2.start)]
    while todo:
        p, q = todo.pop()
        if (p, q) in seen:
            continue
        seen.add((p, q))
        exits_p = s1[e1[p]] if e1[p] >= 0 else ()
        exits_q = s2[e2[q]] if e2[q] >= 0 else ()
        if exits_p != exits_q or not np.array_equal(d1.transitions[p] >= 0, d2.transitions[q] >= 0):
            return False
        todo += [(int(d1.transitions[p, x]), int(d2.transitions[q, x]))
                 for x in np.flatnonzero(d1.transitions[p] >= 0)]
    return True


@pytest.mark.parametrize("prefix, closing", [(r"\ ", r"(?:,{1}|\}}(?:,{2}|\]{0}))"), (r"\ \[", r"(?:\],{1}|,{2})"),
                                             ("", r"(?:\}}{0})")])
def test_a_long_leaf_between_a_prefix_and_its_exits_is_spliced_into_the_same_dfa(prefix, closing, monkeypatch):
    """``from_regex_exits`` of (prefix)(?:leaf)(?:exits) with a long leaf joins the leaf's DFA (built once) to the
    prefix's and the exits': the same strings to the same exits as the whole construction; where an accepting state
    of the leaf reads a byte the exits start with (a number followed by a digit), it builds the whole."""
    from automata import regex as regex_module
    from automata.regex import exit_marker, from_regex_exits

    markers = [exit_marker(k) for k in range(3)]
    words = "|".join(f"w{i:04d}" for i in range(400))  # (a leaf past the splice's length)
    leaf = rf'(?:"([^"\\]|\\["\\nt])*"|-?(0|[1-9][0-9]*)(\.[0-9]+)?|{words}|é+)'
    pattern = prefix + leaf + closing.format(*markers)
    assert regex_module._spliced_exits(pattern, 10 ** 5) is not None
    spliced = from_regex_exits(pattern)
    monkeypatch.setattr(regex_module, "_SPLICE_MIN_LEAF", 10 ** 9)
    whole = from_regex_exits(pattern)
    assert _same_exits(spliced, whole) and _same_exits(whole, spliced)
    clash = prefix + leaf + f"(?:[0-9]{markers[1]}|,{markers[2]})"  # (a digit may go on a number)
    monkeypatch.undo()
    assert regex_module._spliced_exits(clash, 10 ** 5) is None


def _loop_patterns(rng, depth: int = 0) -> str:
    """A random pattern over a b c with loop operators (``automata.parse.LOOP``, ``LOOP_AFTER``), nullable parts
    among them."""
    from automata.parse import LOOP, LOOP_AFTER

    k = rng.random()
    if depth > 2 or k < 0.4:
        return rng.choice(["a", "b", "ab", "(a|)", "b*", "(ab)?", "[ab]", "c"])
    if k < 0.6:
        return _loop_patterns(rng, depth + 1) + _loop_patterns(rng, depth + 1)
    if k < 0.75:
        return f"(?:{_loop_patterns(rng, depth + 1)}|{_loop_patterns(rng, depth + 1)})"
    groups = 2 if k < 0.88 else 3
    return (LOOP if groups == 2 else LOOP_AFTER) + "".join(f"(?:{_loop_patterns(rng, depth + 1)})"
                                                           for _ in range(groups))


def test_loop_operators_match_what_their_plain_regex_matches():
    """``LOOP (?:x)(?:s)`` is ``x(sx)*`` and ``LOOP_AFTER (?:h)(?:x)(?:s)`` is ``(h|x)(sx)*``, nested and with
    empty-matching parts: the DFA built from the operators (x's positions once) accepts what ``re.fullmatch`` of
    ``plain``'s text accepts, and its start reads the characters ``first_characters`` names."""
    import random

    from automata import glushkov
    from automata.parse import plain

    rng = random.Random(0)
    for _ in range(300):
        pattern = _loop_patterns(rng)
        written = plain(pattern)
        dfa = from_regex(pattern)
        for length in range(7):
            for text in {"".join(rng.choice("abc") for _ in range(length)) for _ in range(40)}:
                state = dfa.run(list(text.encode()))
                assert (state >= 0 and bool(dfa.accepting[state])) == bool(re.fullmatch(written, text)), \
                    (pattern, text)
        nullable, chars = glushkov.first_characters(glushkov.read_tree(pattern, 10_000))
        assert nullable == bool(dfa.accepting[dfa.start])
        assert chars == {chr(b) for b in range(128) if dfa.transitions[dfa.start, b] >= 0}


def test_minimising_from_edges_gives_the_tables_minimal_dfa():
    """``minimal_edges`` (a skeleton's DFA given by its transitions, never laid out as a table) returns what
    ``minimal_table`` returns for the same DFA as a table — the same minimal table, numbered breadth-first, and the
    same representatives — on random partial DFAs, the empty language included."""
    from automata.dfa import minimal_edges, minimal_table

    rng = np.random.default_rng(0)
    empty = 0
    for _ in range(2000):
        n, k = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        table = np.where(rng.random((n, k)) < rng.random(), rng.integers(0, n, (n, k)), MISSING).astype(np.int32)
        accepting = rng.random(n) < 0.3
        start = int(rng.integers(0, n))
        sources, symbols = np.nonzero(table >= 0)
        expected = minimal_table(table, accepting, start)
        found = minimal_edges(n, k, sources, symbols, table[sources, symbols], accepting, start)
        empty += expected is None
        assert (found is None) == (expected is None)
        if expected is not None:
            assert np.array_equal(found[0], expected[0]) and np.array_equal(found[1], expected[1])
    assert 0 < empty < 2000


def test_a_finite_set_of_literal_texts_with_exits_builds_the_same_dfa_as_the_position_construction(monkeypatch):
    """``from_regex_exits`` of literal texts each ending with an exit marker (required keys, enum values and the
    punctuation after them) is built as a trie (``_literal_exits``): the same minimal DFA, and each state the same
    exits, as the position construction's; patterns with a class or a repetition are left to it."""
    import random

    from automata import regex as regex_module
    from automata.regex import exit_marker, from_regex_exits

    rng = random.Random(1)
    words = ["a", "ab", "abc", "b", "ünï", '"k":', ", ", "}", "]}", "x y"]
    for _ in range(200):
        options = []
        for _ in range(rng.randint(1, 6)):
            text = "".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
            options.append(re.escape(text) + exit_marker(rng.randint(0, 4)))
        pattern = "(?:" + "|".join(options) + ")"
        if rng.random() < 0.3:  # a literal prefix, then the alternatives
            pattern = re.escape(rng.choice(words)) + pattern
        fast = regex_module._literal_exits(pattern)
        assert fast is not None, pattern
        monkeypatch.setattr(regex_module, "_literal_exits", lambda p: None)
        whole = from_regex_exits(pattern)
        monkeypatch.undo()
        assert np.array_equal(fast[0].transitions, whole[0].transitions) and fast[0].start == whole[0].start
        assert [fast[2][i] if i >= 0 else None for i in fast[1]] == [whole[2][i] if i >= 0 else None for i in whole[1]]
    assert regex_module._literal_exits("(?:a[bc]" + exit_marker(1) + ")") is None
    assert regex_module._literal_exits("(?:ab*" + exit_marker(1) + ")") is None
