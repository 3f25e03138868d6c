"""Context-free grammars over characters: GBNF and Lark read into one IR, recognised, written as a regex where their
language is regular, and as a call automaton where it is not.

``parse_grammar(text, syntax)`` (``parse_gbnf``, ``parse_lark``) gives a ``Grammar``: rules of literals, character
classes, regex terminals, references, sequences, choices and repetitions (``automata.grammar.ir``). ``Recognizer``
decides membership (Earley over characters); ``to_regex`` writes a grammar whose recursion is at most right- or
left-linear as one regex (``automata.grammar.regular``; others cut at an opt-in depth), what
``product.compile_grammar`` compiles; ``pushdown.call_automaton`` writes any other recursive grammar as rules that
call each other, run by ``pushdown.Configurations`` (``product.PushdownGuide`` compiles those); ``sample`` draws strings
of a grammar (``automata.grammar.sample``). Errors derive from ``GrammarError`` (a ``CanonmergeError``) and name the
construct, its line and column.

Leaves out: tokens (``product.grammar`` intersects a grammar's regex or call automaton with a tokenizer's canonical
automaton).
"""

from automata.grammar.earley import Recognizer
from automata.grammar.gbnf import parse_gbnf
from automata.grammar.ir import (
    ANY_CHAR,
    EMPTY,
    CharClass,
    Choice,
    Expr,
    Grammar,
    GrammarError,
    GrammarSyntaxError,
    Literal,
    Ref,
    Regex,
    Repeat,
    Rule,
    Sequence,
    Span,
    UndefinedRuleError,
    UnsupportedGrammarError,
)
from automata.grammar.lark import COMMON, parse_lark

__all__ = ["parse_grammar", "parse_gbnf", "parse_lark", "COMMON", "Recognizer", "Grammar", "Rule", "Span", "Literal",
           "CharClass", "Regex", "Ref", "Sequence", "Choice", "Repeat", "Expr", "EMPTY", "ANY_CHAR", "GrammarError",
           "GrammarSyntaxError", "UnsupportedGrammarError", "UndefinedRuleError", "SYNTAXES"]

SYNTAXES = ("gbnf", "lark")


def parse_grammar(text: str, syntax: str = "gbnf", start: str | None = None) -> Grammar:
    """The grammar of ``text`` in ``syntax`` ("gbnf" or "lark"), started at ``start`` (default: GBNF's ``root``,
    Lark's ``start``)."""
    if syntax == "gbnf":
        return parse_gbnf(text, "root" if start is None else start)
    if syntax == "lark":
        return parse_lark(text, "start" if start is None else start)
    raise ValueError(f"syntax must be one of {SYNTAXES}, not {syntax!r}")
