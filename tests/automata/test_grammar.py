"""Grammars read from GBNF and Lark: the example grammars of llama.cpp parse; the Earley recogniser on the IR agrees
with Lark's own parser (Lark grammars) and with strings known to be in or out (GBNF); the regex of a regular grammar
agrees with the recogniser; every refusal is typed and names its construct, line and column."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automata import Alphabet, EmptyLanguageError, from_regex
from automata.grammar import (
    COMMON,
    CharClass,
    Choice,
    Grammar,
    GrammarSyntaxError,
    Literal,
    Recognizer,
    Ref,
    Regex,
    Repeat,
    Rule,
    Sequence,
    Span,
    UndefinedRuleError,
    UnsupportedGrammarError,
    parse_grammar,
)
from automata.grammar.regular import call_regexes, to_regex
from automata.grammar.sample import sample
from bpe.assets import LLAMA_CPP_GRAMMARS, asset_path

REGULAR = ("chess", "english", "japanese", "list")
RECURSIVE = {"arithmetic": ("term", 3), "c": ("argList", 35), "json": ("object", 4), "json_arr": ("array", 19)}


def example(name: str) -> str:
    return asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8")


_RECOGNIZERS: dict = {}


def recognizer(name: str) -> Recognizer:
    if name not in _RECOGNIZERS:
        _RECOGNIZERS[name] = Recognizer(parse_grammar(example(name)))
    return _RECOGNIZERS[name]


# ------------------------------------------------------------------------------------------- llama.cpp's GBNF
@pytest.mark.parametrize("name", sorted(LLAMA_CPP_GRAMMARS))
def test_every_example_grammar_parses_and_its_recursion_is_found(name):
    grammar = parse_grammar(example(name))
    assert grammar.start == "root" and "root" in grammar.rules
    assert bool(grammar.recursive_rules()) == (name in RECURSIVE)
    assert grammar.left_recursive_rule() is None  # (llama.cpp refuses left recursion; none of them has any)


# strings llama.cpp's grammars accept and reject (read off the grammars by hand)
KNOWN = {
    "arithmetic": (["a=b\n", "(a+1)=x\n", "x = ((y)) \n", "ab1_ = (12*(c -d)/3)\n1+2=3\n"],
                   ["a=b", "a=(b\n", "A=b\n", "a=b+\n", "=b\n"]),
    "c": (["int main(){return 0;}", "int f(int x){while(x<10){x = x+1;}return x;}", "",
           "char c(){// hi\n/* a * b */return -( 1 );}"],
          ["int main(){return 0}", "int main() {}", "void f(){}", "int f(){x = ;}"]),
    "chess": (["1. e4 e5\n2. Nf3 Nc6\n", "1. O-O O-O-O+\n10. exd5 Qxd5#\n", "1. e8=Q Ka1\n2. a1 a2\n"],
              ["1. e4 e5\n", "1. e9 e5\n2. a1 a2\n", "1. e4 e5\n0. a1 a2\n", "1. e4  e5\n2. a1 a2\n"]),
    "english": (["Hello, world!", "a b\tc\nd", "x"], ["", " leading", "two  spaces", "trailing ", "café"]),
    "japanese": (["こんにちは", "カタカナ 漢字", "、。"], ["", "abc", "こんにちは ", "　"]),
    "json": (['{}', '{"a": [1, 2.5, {"b": null}]}', '{"k":"\\u00e9\\n","t":true} ', '{"x": -0.5e3}'],
             ['[]', '{"a": nul}', '{"a" 1}', "{'a': 1}", '{"a": 01}', '{"a": 1,}']),
    "json_arr": (['[\n]', '[\n{"a": 1},\n[]]', '[\n"x",\n1]'], ['[]', '[\n]\n', '{}', '[\n1,2]']),
    "list": (["- milk\n- eggs\n", "- a\n"], ["", "- milk", "-milk\n", "- \n", "- a\r\n"]),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_the_recognizer_accepts_what_llama_cpp_accepts(name):
    accepted, rejected = KNOWN[name]
    r = recognizer(name)
    assert [s for s in accepted if not r.accepts(s)] == []
    assert [s for s in rejected if r.accepts(s)] == []


def mutants(text: str, rng: random.Random, count: int = 4) -> list[str]:
    """Small edits of a string: a character inserted, deleted or replaced (in or out of the language)."""
    out = []
    for _ in range(count):
        i = rng.randrange(len(text) + 1)
        c = rng.choice('a0-"( \n{}[],.=:+#é')
        out.append(rng.choice([text[:i] + c + text[i:], text[:i] + text[i + 1:], text[:i] + c + text[i + 1:]]))
    return out


@pytest.mark.parametrize("name", REGULAR)
@settings(max_examples=25)
@given(rng=st.randoms(use_true_random=False))
def test_the_regex_of_a_regular_example_agrees_with_the_recognizer(name, rng):
    grammar = parse_grammar(example(name))
    dfa = _dfa(name)
    text = sample(grammar, rng)
    assert recognizer(name).accepts(text) and dfa.accepts(text), text
    for mutant in mutants(text, rng):
        assert dfa.accepts(mutant) == recognizer(name).accepts(mutant), mutant


_DFAS: dict = {}


def _dfa(name: str):
    if name not in _DFAS:
        _DFAS[name] = from_regex(to_regex(parse_grammar(example(name))))
    return _DFAS[name]


@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_recursive_examples_are_refused_as_regexes_naming_the_rule_and_line(name):
    with pytest.raises(UnsupportedGrammarError) as info:
        to_regex(parse_grammar(example(name)))
    rule, line = RECURSIVE[name]
    assert (info.value.construct, info.value.rule, info.value.line) == ("recursion", rule, line)
    assert f"line {line}:1" in str(info.value)


@pytest.mark.parametrize("name", sorted(RECURSIVE))
@settings(max_examples=10)
@given(rng=st.randoms(use_true_random=False))
def test_samples_of_recursive_examples_are_accepted(name, rng):
    grammar = parse_grammar(example(name))
    assert recognizer(name).accepts(sample(grammar, rng, max_depth=6))


# ---------------------------------------------------------------------------------------- GBNF's fine print
def test_gbnf_syntax_details_as_llama_cpp_reads_them():
    g = parse_grammar('root ::= "a" |\n  "b" (\n "c"\n | "d" ) x\nx ::= [a-] [\\]\\-] "\\x41\\u00e9\\U0001F600" .\n')
    r = Recognizer(g)
    assert r.accepts("a") and r.accepts("bd-]A" "é😀\n") and not r.accepts("ba]A" "é😀z")
    assert g.rules["x"].body.items[0] == CharClass.of([(ord("a"), ord("a")), (ord("-"), ord("-"))])
    # quantifiers: the whole preceding item; spaces inside braces; past 2000 the upper bound is none
    g = parse_grammar('root ::= "ab"{ 2 , 3 } [0-9]{2,3000} "x"{0,}\n# comment\n')
    a, b, c = g.rules["root"].body.items
    assert a == Repeat(Literal("ab"), 2, 3) and (b.min, b.max) == (2, None) and (c.min, c.max) == (0, None)
    # a rule defined twice keeps its last definition, as llama.cpp's parser does
    g = parse_grammar('root ::= "a"\nroot ::= "b"\n')
    assert Recognizer(g).accepts("b") and not Recognizer(g).accepts("a")
    # empty alternatives, empty literals, reversed ranges (nothing)
    r = Recognizer(parse_grammar('root ::= | "x" "" [b-a]?\n'))
    assert r.accepts("") and r.accepts("x") and not r.accepts("a")
    # "_" in rule names, as XGrammar's and vLLM's GBNF write them (vLLM's SQL grammar: select_stmt)
    r = Recognizer(parse_grammar('root ::= select_stmt\nselect_stmt ::= "SELECT " col_name\ncol_name ::= [a-z]+\n'))
    assert r.accepts("SELECT ab") and not r.accepts("SELECT ")


BAD_GBNF = [
    ('root ::= "a"\nx = "b"\n', GrammarSyntaxError, "expecting ::=", 2, 3),
    ('root ::= foo\n', UndefinedRuleError, "undefined rule", 1, 10),
    ('root ::= "a\\q"\n', GrammarSyntaxError, "escape", 1, 12),
    ('root ::= "a" <think> "b"\n', UnsupportedGrammarError, "token", 1, 14),
    ('root ::= !<[12]>\n', UnsupportedGrammarError, "token", 1, 10),
    ('root ::= x\nx ::= x "a" | "b"\n', UnsupportedGrammarError, "left recursion", 2, 1),
    ('main ::= "a"\n', UndefinedRuleError, "start rule", 0, 0),
    ('root ::= * "a"\n', GrammarSyntaxError, "quantifier without item", 1, 10),
    ('root ::= "abc\n', GrammarSyntaxError, "unterminated literal", 1, 10),
    ('root ::= ("a"\n', GrammarSyntaxError, "expecting )", 2, 1),
    ('root ::= "a"{2001}\n', GrammarSyntaxError, "repetition", 1, 19),
    ('root ::= "a"\n  | "b"\n', GrammarSyntaxError, "expecting name", 2, 3),
    ('root ::= "a" @\n', GrammarSyntaxError, "expecting newline or end", 1, 14),
    ('root ::= [a-z\n', GrammarSyntaxError, "unterminated class", 1, 10),
]


@pytest.mark.parametrize("text, error, construct, line, column", BAD_GBNF)
def test_gbnf_errors_are_typed_and_name_construct_and_place(text, error, construct, line, column):
    with pytest.raises(error) as info:
        parse_grammar(text)
    assert (info.value.construct, info.value.line, info.value.column) == (construct, line, column), str(info.value)
    if line:
        assert f"line {line}:{column}" in str(info.value)


# -------------------------------------------------------------------------------------------------- Lark
CALC = r"""
?start: sum
?sum: product
    | sum "+" product   -> add
    | sum "-" product
?product: atom
    | product "*" atom
    | product "/" atom
?atom: NUMBER
     | "-" atom
     | NAME
     | "(" sum ")"
     | "max"i "(" sum ("," sum)* ")"
NAME: /[a-z_]\w*/
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
"""

JSON_LARK = r"""
?start: value
?value: object
      | array
      | string
      | SIGNED_NUMBER      -> number
      | "true"             -> true
      | "false"            -> false
      | "null"             -> null
array  : "[" [value ("," value)*] "]"
object : "{" [pair ("," pair)*] "}"
pair   : string ":" value
string : ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""

CALL = r"""
start: _call+
_call: "<call>" NAME "(" [arg ("," arg)*] ")" "</call>" _NL?
!arg: NAME "=" (INT | STRING | BOOL)
BOOL.2: "true" | "false"
NAME: CNAME
STRING: "'" /[^'\n]{0,20}/ "'"
_NL: "\n"
%import common (CNAME, INT)
%ignore " "
"""

SELECT = r"""
start: "SELECT"i _ws columns _ws "FROM"i _ws NAME (_ws "WHERE"i _ws cond)? ";"
columns: "*" | NAME ("," " "? NAME)~0..3
cond: NAME OP (NUMBER | /'[^']*'/)
OP: "=" | "<" | ">" | "<=" | ">=" | "!="
_ws: " "+
NAME: /[a-z][a-z0-9_]*/
%import common.NUMBER
"""

LARK_GRAMMARS = {"calc": CALC, "json": JSON_LARK, "call": CALL, "select": SELECT}
LARK_KNOWN = {
    "calc": (["1+2", " 1 + 2 * x ", "MAX(1,2)", "mAx( 1 , -2 )", "1.5e3*foo"], ["1+", "(1", "x y", "1 2"]),
    "json": (['{"a": [1, -2.5e3, true, null, {}]}', ' [ ] ', '"x\\"y"'], ['{"a" 1}', "[1,]", "'a'", "{,}"]),
    "call": (["<call>f(a=1, b='x')</call>\n<call>g()</call>", "<call>h(flag=true)</call>"],
             ["<call>f(a=1,)</call>", "<call>f(a='x\ny')</call>", "call f()"]),
    "select": (["SELECT * FROM t;", "select a, b,c FROM t WHERE a>=3;", "SELECT a FROM t WHERE b='x y';"],
               ["SELECT FROM t;", "SELECT a, b, c, d, e FROM t;", "SELECT * FROM T;"]),
}


def lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


_LARKS: dict = {}


def reference(name: str) -> lark.Lark:
    if name not in _LARKS:
        _LARKS[name] = lark.Lark(LARK_GRAMMARS[name], parser="earley", lexer="dynamic_complete")
    return _LARKS[name]


_LARK_RECOGNIZERS: dict = {}


def lark_recognizer(name: str) -> Recognizer:
    if name not in _LARK_RECOGNIZERS:
        _LARK_RECOGNIZERS[name] = Recognizer(parse_grammar(LARK_GRAMMARS[name], "lark"))
    return _LARK_RECOGNIZERS[name]


@pytest.mark.parametrize("name", sorted(LARK_GRAMMARS))
def test_lark_grammars_parse_and_agree_with_lark_on_known_strings(name):
    accepted, rejected = LARK_KNOWN[name]
    r, ref = lark_recognizer(name), reference(name)
    assert all(lark_accepts(ref, s) for s in accepted) and not any(lark_accepts(ref, s) for s in rejected)
    assert [s for s in accepted if not r.accepts(s)] == []
    assert [s for s in rejected if r.accepts(s)] == []


@pytest.mark.parametrize("name", sorted(LARK_GRAMMARS))
@settings(max_examples=20)
@given(rng=st.randoms(use_true_random=False))
def test_the_recognizer_agrees_with_lark_on_samples_and_their_mutants(name, rng):
    grammar = parse_grammar(LARK_GRAMMARS[name], "lark")
    text = sample(grammar, rng, max_depth=5, max_repeat=3)
    assert lark_accepts(reference(name), text), text
    assert lark_recognizer(name).accepts(text), text
    for mutant in mutants(text, rng, 3):
        assert lark_recognizer(name).accepts(mutant) == lark_accepts(reference(name), mutant), mutant


@settings(max_examples=200)
@given(body=st.text(st.sampled_from(list('ab"\'\\nxtu0e1{}/ ')), min_size=1, max_size=10))
def test_lark_literals_and_regexes_unescape_as_lark_does(body):
    for text, kind in ((f'"{body}"', "STRING"), (f"/{body}/", "REGEXP")):
        if ('"' if kind == "STRING" else "/") in body.replace("\\\\", "").replace("\\" + text[0], ""):
            continue  # (the literal would end early: two items, compared elsewhere)
        try:
            ours = parse_grammar(f"start: {text}\n", "lark").rules["start"].body
        except GrammarSyntaxError:
            ours = None
        try:
            theirs = lark.Lark(f"start: {text}\n", parser="earley", lexer="dynamic").terminals[0].pattern.value
        except Exception:  # lark's own errors for malformed literals (GrammarError, UnexpectedInput, ...)
            theirs = None
        if kind == "STRING" and ours is not None and theirs is not None:
            assert isinstance(ours, Literal) and ours.text == theirs
        elif kind == "REGEXP" and ours is not None and theirs is not None:
            assert isinstance(ours, Regex) and ours.pattern == theirs


BAD_LARK = [
    ("start: sep{a, b}\n", UnsupportedGrammarError, "template", 1, 8),
    ('_sep{x}: x ("," x)*\nstart: "a"\n', UnsupportedGrammarError, "template", 1, 5),
    ("start: A\n%declare A\n", UnsupportedGrammarError, "%declare", 2, 1),
    ("start: A\n%import other.A\n", UnsupportedGrammarError, "import", 2, 1),
    ("start: A\n%import .other.A\n", UnsupportedGrammarError, "import", 2, 1),
    ("start: a b\na: \"x\"\n", UndefinedRuleError, "undefined name", 1, 10),
    ('start: "a"\nstart: "b"\n', GrammarSyntaxError, "duplicate", 2, 1),
    ('start: "a" <|end|>\n', UnsupportedGrammarError, "special token", 1, 12),
    ('start: %json {"type": "object"}\n', GrammarSyntaxError, "expecting newline", 1, 8),
    ('start: A\nA: "x" b\nb: "y"\n', GrammarSyntaxError, "terminal uses a rule", 2, 8),
    ('start: A\nA: "x" A?\n', GrammarSyntaxError, "recursive terminal", 2, 1),
    ('start[lazy]: "a"\n', UnsupportedGrammarError, "rule attributes", 1, 6),
    ('start: ""\n', GrammarSyntaxError, "empty literal", 1, 8),
    ("start: /a(/\n", GrammarSyntaxError, "regex", 1, 8),
    ('start: "a" ~ 3..1\n', GrammarSyntaxError, "repetition", 1, 12),
    ("start: x\n", UndefinedRuleError, "undefined name", 1, 8),
    ('x: "a"\n', UndefinedRuleError, "start rule", 0, 0),
]


@pytest.mark.parametrize("text, error, construct, line, column", BAD_LARK)
def test_lark_errors_are_typed_and_name_construct_and_place(text, error, construct, line, column):
    with pytest.raises(error) as info:
        parse_grammar(text, "lark")
    assert (info.value.construct, info.value.line, info.value.column) == (construct, line, column), str(info.value)


def test_lark_directive_json_is_refused_as_unsupported():
    with pytest.raises(UnsupportedGrammarError) as info:
        parse_grammar('start: x\n%json {"type": "object"}\n', "lark")
    assert (info.value.construct, info.value.line) == ("%json", 2)


# ----------------------------------------------------------------------------------- regexes of grammars
RIGHT_LINEAR = r"""
root ::= item rest
rest ::= ", " item rest | more
more ::= "" | ";" root
item ::= [a-z]+ ("=" [0-9]{1,3})?
"""


@settings(max_examples=40)
@given(rng=st.randoms(use_true_random=False))
def test_right_linear_recursion_becomes_a_regex_that_agrees_with_the_recognizer(rng):
    grammar = parse_grammar(RIGHT_LINEAR)
    assert grammar.recursive_rules()
    dfa, r = _right_linear()
    text = sample(grammar, rng)
    assert dfa.accepts(text) and r.accepts(text)
    for mutant in mutants(text, rng):
        assert dfa.accepts(mutant) == r.accepts(mutant), mutant


_RL: list = []


def _right_linear():
    if not _RL:
        grammar = parse_grammar(RIGHT_LINEAR)
        _RL.extend([from_regex(to_regex(grammar)), Recognizer(grammar)])
    return _RL


def test_lark_regex_flags_and_case_insensitive_literals_in_regexes():
    grammar = parse_grammar('start: "Hi"i " " /y[a-z]+/i /./s\n', "lark")
    dfa = from_regex(to_regex(grammar))
    assert dfa.accepts("hI YeS\n") and dfa.accepts("HI yes.") and not dfa.accepts("Hi_yes.")
    with pytest.raises(UnsupportedGrammarError) as info:
        to_regex(parse_grammar("start: /a b/x\n", "lark"))
    assert info.value.construct == "regex flags x"
    # a lookaround may look past the terminal's text: refused naming the terminal and its line, in both compiles
    for text in ["start: A B\nA: /[?](?![a-z])/\nB: \"b\"\n", 'start: "(" start ")" | A\nA: /a(?<!b)/\n']:
        for write in (to_regex, call_regexes):
            with pytest.raises(UnsupportedGrammarError) as info:
                write(parse_grammar(text, "lark"))
            assert (info.value.construct, info.value.line, info.value.rule) == ("lookaround", 2, "A"), str(info.value)


# ------------------------------------------------------------------ random grammars: the regex is the grammar
_ALPHABET = "abc"


@st.composite
def regular_grammars(draw):
    """A small grammar over a, b, c: leaf rules ``L0..L2`` (no recursion; each may use later leaves) and a
    right- or left-linear cycle ``R0..R2`` (each alternative: leaf material, then at most one rule of the cycle; or
    that rule first)."""

    def leaf_expr(depth: int, after: int):
        kinds = ["lit", "class"] + (["ref"] if after < 3 else []) + (["seq", "alt", "rep"] if depth < 3 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "lit":
            return Literal(draw(st.text(_ALPHABET, max_size=2)))
        if kind == "class":
            chars = draw(st.sets(st.sampled_from(_ALPHABET), min_size=1, max_size=2))
            return CharClass.of([(ord(c), ord(c)) for c in chars], draw(st.booleans()))
        if kind == "ref":
            return Ref(f"L{draw(st.integers(after, 2))}")
        if kind == "seq":
            return Sequence(tuple(leaf_expr(depth + 1, after) for _ in range(draw(st.integers(2, 3)))))
        if kind == "alt":
            return Choice(tuple(leaf_expr(depth + 1, after) for _ in range(draw(st.integers(2, 3)))))
        low = draw(st.integers(0, 2))
        return Repeat(leaf_expr(depth + 1, after), low, draw(st.sampled_from([None, low, low + 1])))

    rules = {}
    for k in range(3):
        rules[f"L{k}"] = Rule(f"L{k}", leaf_expr(1, k + 1), Span(k + 1, 1))
    left = draw(st.booleans())  # the cycle's references all heads (left-linear) or all tails (right-linear)

    def linear(material, ref):
        return Sequence((ref, material) if left else (material, ref))

    for k in range(3):
        options = []
        for _ in range(draw(st.integers(1, 3))):
            material = leaf_expr(2, 0)
            other = draw(st.sampled_from([None, "R0", "R1", "R2"]))
            options.append(material if other is None else linear(material, Ref(other)))
        if draw(st.booleans()):  # an optional reference: x R? (R? x)
            options.append(linear(leaf_expr(2, 0), Repeat(Ref(f"R{draw(st.integers(0, 2))}"), 0, 1)))
        rules[f"R{k}"] = Rule(f"R{k}", Choice(tuple(options)), Span(4 + k, 1))
    return Grammar(rules, draw(st.sampled_from(["R0", "L0"])), (), "gbnf")


_SHORT_STRINGS = ["".join(p) for n in range(5) for p in itertools.product(_ALPHABET + "d", repeat=n)]


@settings(max_examples=20)
@given(grammar=regular_grammars())
def test_random_right_and_left_linear_grammars_become_regexes_that_agree_with_the_recognizer(grammar):
    regex = to_regex(grammar)
    recognizer = Recognizer(grammar)
    language = {s for s in _SHORT_STRINGS if recognizer.accepts(s)}
    try:
        dfa = from_regex(regex, Alphabet.of_chars(_ALPHABET + "d"))
    except EmptyLanguageError:
        assert not language and not any(recognizer.accepts(s) for s in ("aaaaaa", "abcabc"))
        return
    assert {s for s in _SHORT_STRINGS if dfa.accepts(s)} == language, regex


def _lark_shipped(name: str) -> str:
    return (Path(lark.__file__).parent / "grammars" / name).read_text(encoding="utf-8")


@pytest.mark.slow  # (~15 s: Lark's complete-lexing Earley parser is slow on its own grammar)
# Lark matches an %ignore terminal greedily at its start (lark.lark's COMMENT runs to the line's end: "a//:" is not a
# grammar; here a comment may end anywhere): the known difference docs/design.md names. strict: passes once fixed.
@pytest.mark.xfail(strict=True, reason="%ignore pieces are not greedy here, as Lark's are")
@settings(max_examples=6)
@given(rng=st.randoms(use_true_random=False))
def test_larks_own_grammar_of_lark_parses_and_the_recognizer_agrees_with_lark(rng):
    text = _lark_shipped("lark.lark")
    grammar = parse_grammar(text, "lark")
    if "lark.lark" not in _LARKS:
        _LARKS["lark.lark"] = lark.Lark(text, parser="earley", lexer="dynamic_complete")
        _LARK_RECOGNIZERS["lark.lark"] = Recognizer(grammar)
    reference, recognizer = _LARKS["lark.lark"], _LARK_RECOGNIZERS["lark.lark"]
    source = sample(grammar, rng, max_depth=6, max_repeat=2)
    assert lark_accepts(reference, source) and recognizer.accepts(source), source
    for mutant in mutants(source, rng, 3):
        try:
            verdict = lark_accepts(reference, mutant)
        except RuntimeError:  # (Lark's own "Earley should not generate multiple start symbol items" bug: no verdict)
            continue
        assert recognizer.accepts(mutant) == verdict, mutant


def test_larks_own_grammar_parses_and_its_examples_agree_with_lark():
    text = _lark_shipped("lark.lark")
    recognizer, reference = Recognizer(parse_grammar(text, "lark")), lark.Lark(text, parser="earley")
    for source in ['start: a\n', 'start: "x" | b+\nb: /y/i\n', '%import common.WS\n', 'start: a -> b\n',
                   '?x.2: "a".."z"~2..3 [y] (z)*\n%ignore WS\n', 'start a\n', 'start: (a\n', 'start: a ~ \n']:
        assert recognizer.accepts(source) == lark_accepts(reference, source), source


def test_larks_python_grammar_is_refused_at_its_first_template():
    with pytest.raises(UnsupportedGrammarError) as info:
        parse_grammar(_lark_shipped("python.lark"), "lark")
    assert info.value.construct == "template" and info.value.line > 1 and "comprehension" in str(info.value)


@pytest.mark.parametrize("name, depth", [("arithmetic", 4), ("json", 6), ("json_arr", 4)])
@settings(max_examples=10)
@given(rng=st.randoms(use_true_random=False))
def test_a_depth_bound_gives_a_regex_of_the_grammars_strings_nested_at_most_that_deep(name, depth, rng):
    dfa = _bounded(name, depth)
    text = sample(parse_grammar(example(name)), rng, max_depth=4)
    for s in [text, *mutants(text, rng)]:
        if dfa.accepts(s):
            assert recognizer(name).accepts(s), s  # the bounded language is inside the grammar's
    shallow = sample(parse_grammar(example(name)), rng, max_depth=2)
    assert dfa.accepts(shallow), shallow


_BOUNDED: dict = {}


def _bounded(name: str, depth: int):
    if (name, depth) not in _BOUNDED:
        _BOUNDED[name, depth] = from_regex(to_regex(parse_grammar(example(name)), max_depth=depth))
    return _BOUNDED[name, depth]


def test_a_depth_bound_cuts_exactly_at_the_depth():
    dfa = _bounded("arithmetic", 4)  # expr@0 -> term@1 -> "(" expr@2 -> term@3 -> "(" expr@4 -> term@5: too deep
    assert dfa.accepts("a=(b)\n") and dfa.accepts("(a+b*c)=(d)\n")
    assert not dfa.accepts("((a))=b\n") and recognizer("arithmetic").accepts("((a))=b\n")


_COMMON_NAMES = [line.split(":")[0] for line in COMMON.strip().splitlines() if not line.startswith("_")]


@pytest.mark.parametrize("name", _COMMON_NAMES)
def test_every_common_terminal_matches_what_lark_matches(name):
    text = f"start: {name}\n%import common.{name}\n"
    grammar, reference = parse_grammar(text, "lark"), lark.Lark(text, parser="earley", lexer="dynamic_complete")
    recognizer, rng = Recognizer(grammar), random.Random(name)
    for _ in range(12):
        source = sample(grammar, rng, max_repeat=3)
        assert lark_accepts(reference, source) and recognizer.accepts(source), source
        for mutant in mutants(source, rng, 3) + ['"a\\"', '"a"b"', "/* a */ b */", "1e", ".5", "-"]:
            assert recognizer.accepts(mutant) == lark_accepts(reference, mutant), mutant


def test_left_linear_lark_lists_become_regexes_and_mixed_recursion_is_refused():
    grammar = parse_grammar('start: list ";"\nlist: list "," item | item\nitem: /[a-z]+/ | "(" n ")"\n'
                            'n: n "+" /[0-9]/ | /[0-9]/\n', "lark")
    dfa = from_regex(to_regex(grammar))
    assert dfa.accepts("a,(1+2+3),b;") and not dfa.accepts("a,;") and not dfa.accepts("(1+);")
    # heads and tails of one rule: b* c a*, regular
    dfa = from_regex(to_regex(parse_grammar('start: x\nx: x "a" | "b" x | "c"\n', "lark")))
    assert dfa.accepts("bbcaaa") and dfa.accepts("c") and not dfa.accepts("ac")
    with pytest.raises(UnsupportedGrammarError) as info:  # b^n c a^n: a head and a tail through two rules
        to_regex(parse_grammar('start: x\nx: y "a" | "c"\ny: "b" x\n', "lark"))
    assert (info.value.construct, info.value.rule, info.value.line) == ("recursion", "x", 2)


def test_left_recursive_sums_inside_a_nesting_cycle_cost_no_depth():
    # sum: sum "+" product; atom: "(" sum ")": depth counts parentheses only (sum -> product -> atom -> sum: three
    # references a level), not the length of a sum
    grammar = parse_grammar(CALC, "lark")
    dfa = from_regex(to_regex(grammar, max_depth=5))
    assert dfa.accepts("1+2+3+4+5+6+7+8+9*x") and dfa.accepts("-(1+2+3)")
    assert not dfa.accepts("((1))") and Recognizer(grammar).accepts("((1))")
