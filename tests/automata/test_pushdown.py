"""A recursive grammar's call automaton and configurations, byte by byte, against the grammar's reference parsers:
llama.cpp's recursive example grammars (the Earley recogniser) and Lark grammars (Lark's own parser) accept exactly
the strings the configurations end in, on sampled strings nested deeper than any default bound and their one-character
mutants; left recursion is refused, naming the rule."""

from __future__ import annotations

import random

import lark
import pytest

from automata.dfa import MISSING
from automata.grammar import Recognizer, UnsupportedGrammarError, parse_grammar
from automata.grammar.pushdown import Configurations, call_automaton
from automata.grammar.sample import sample
from bpe.assets import asset_path
from tests.automata.test_grammar import CALC, JSON_LARK, RECURSIVE, lark_accepts, mutants


def accepts(configs: Configurations, text: str) -> bool:
    """Whether the configurations read ``text``'s UTF-8 bytes to one where the text may end."""
    config = configs.start
    for byte in text.encode("utf-8"):
        configs.expand([config])
        config = int(configs.table[config, byte])
        if config == MISSING:
            return False
    return bool(configs.accepting[config])


GRAMMARS = {name: (asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8"), "gbnf") for name in RECURSIVE}
GRAMMARS.update({"calc": (CALC, "lark"), "json (lark)": (JSON_LARK, "lark")})


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_configurations_accept_exactly_the_grammars_strings(name):
    text, syntax = GRAMMARS[name]
    grammar = parse_grammar(text, syntax)
    configs = Configurations(call_automaton(grammar))
    if syntax == "lark":
        parser = lark.Lark(text, parser="earley", lexer="dynamic_complete")
        reference = lambda s: lark_accepts(parser, s)  # noqa: E731
    else:
        reference = Recognizer(grammar).accepts
    rng = random.Random(name)
    inside = outside = 0
    for _ in range(40):
        string = sample(grammar, rng, max_depth=12, max_repeat=3)
        assert accepts(configs, string), string
        inside += 1
        for mutant in mutants(string, rng):
            if syntax == "lark" and not mutant.isascii():
                continue  # (Lark's regex terminals read \w as Python's re does, Unicode; canonmerge's regexes, ASCII)
            verdict = reference(mutant)
            outside += not verdict
            assert accepts(configs, mutant) == verdict, mutant
    assert outside >= 20
    assert max(configs.depth(int(stack)) for config in range(len(configs)) for stack in configs.items(config)[1]) > 4


# Each space may open any of three rules whose kinds the closing brackets tell apart only at the end: 3^k stacks.
NESTING_UNKNOWN = """root ::= e
e ::= ws ( "x" | c | d | f )
c ::= ws e "(" c? ")"
d ::= ws e "[" d? "]"
f ::= ws e "{" f? "}"
ws ::= " "
"""


def test_stacks_that_differ_below_the_top_are_shared_not_multiplied():
    """Where the text cannot tell yet which rules are open (``c``, ``d`` or ``f`` after each space), the 3^k stacks
    after k spaces are one node per level, shared: a configuration holds one item per state, and the nodes grow
    with the text, not with the stacks (a set of stacks per item reached 100,000 items at 17 spaces). The
    configurations still accept exactly the grammar's strings (the Earley recogniser, on nested strings and their
    mutants)."""
    grammar = parse_grammar(NESTING_UNKNOWN)
    configs = Configurations(call_automaton(grammar))
    reference = Recognizer(grammar).accepts
    closing = {"c": "()", "d": "[]", "f": "{}"}
    rng = random.Random("nesting")
    for k in (1, 6, 20, 40):
        kinds = [rng.choice("cdf") for _ in range(k)]
        string = " " * (2 * k + 1) + "x" + "".join(closing[kind] for kind in reversed(kinds))
        assert accepts(configs, string) and reference(string)
        for mutant in [string[:-1] + ")" if string[-1] != ")" else string[:-1] + "]", " " + string, string + "()"]:
            assert accepts(configs, mutant) == reference(mutant), mutant
    for config in range(len(configs)):
        states, stacks = configs.items(config)
        assert len(set(states.tolist())) == len(states)  # (one item per state)
    assert len(configs.stack_pairs) < 20 * 81  # (~8 nodes per space read; 3^40 stacks at the longest string)
    for _ in range(20):
        string = sample(grammar, rng, max_depth=10, max_repeat=2)
        assert accepts(configs, string), string


def test_regular_grammars_have_no_call_automaton():
    assert call_automaton(parse_grammar(asset_path("grammars/list.gbnf").read_text(encoding="utf-8"))) is None


@pytest.mark.parametrize("text, rule", [
    ('root ::= expr\nexpr ::= expr "+" "x" "(" expr ")" | "x"\n', "expr"),
    ('root ::= a\na ::= b "x" | "(" a ")"\nb ::= "y"? a "z" | "w"\n', "a"),  # through a nullable prefix
])
def test_left_recursion_is_refused_naming_the_rule(text, rule):
    with pytest.raises(UnsupportedGrammarError) as info:
        call_automaton(parse_grammar(text))
    assert info.value.construct == "left recursion" and info.value.rule in (rule, "b")
