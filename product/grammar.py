"""``compile_grammar``: a GBNF or Lark grammar's guide, exact and dead-end free, for the grammars whose language is
regular.

The grammar is read into ``automata.grammar``'s IR and written as one regex (``automata.grammar.regular``: rules
without recursion inlined, right- and left-linear cycles solved), which ``product.compile_regex`` compiles like any other:
the guide allows exactly the canonical tokenizations of the grammar's strings, and every allowed token keeps the
text completable. A grammar with any other recursion (``"(" expr ")"``, JSON's nesting) is refused with
``automata.grammar.UnsupportedGrammarError`` (construct "recursion", the rule and its line): its language may not
be regular, and a guide here is an automaton — unless the caller asks for a depth bound (``max_depth``): then the
strings nested at most that deep, exactly. Never loosened, never unrolled to a silent depth.

Leaves out: reading the syntaxes (``automata.grammar``), and recursive grammars (docs/design.md, "Grammars", says
what a construction for them takes).
"""

from __future__ import annotations

from automata.budget import CompileBudget
from automata.grammar import parse_grammar
from automata.grammar.regular import to_regex
from bpe.automaton import CanonicalAutomaton
from product.compile import compile_regex
from product.runtime.guide import Guide

__all__ = ["compile_grammar", "grammar_regex"]


def grammar_regex(text: str, *, syntax: str = "gbnf", start: str | None = None, max_depth: int | None = None) -> str:
    """The regex ``compile_grammar`` compiles for the grammar ``text`` (errors as ``compile_grammar``'s, but for
    the tokenizer's)."""
    return to_regex(parse_grammar(text, syntax, start), max_depth=max_depth)


def compile_grammar(text: str, canonical: CanonicalAutomaton, *, syntax: str = "gbnf", start: str | None = None,
                    max_depth: int | None = None, canonical_only: bool = True, eos_token_ids: list[int] | None = None, max_states: int = 100_000,
                    cache_size: int = 4096, name: str | None = None, budget: CompileBudget | None = None,
                    lazy: bool = False) -> Guide:
    """The guide of the strings the grammar ``text`` (``syntax``: "gbnf", llama.cpp's, or "lark") derives from
    ``start`` (default: GBNF's ``root``, Lark's ``start``), tokenized canonically for ``canonical``'s tokenizer
    (any tokenization with ``canonical_only=False``) and ended by ``eos_token_ids`` (default: the tokenizer's EOS).

    ``max_depth`` (opt-in; default None refuses): a grammar whose recursion a regex cannot express compiles to the
    strings whose derivations nest at most ``max_depth`` recursive references (``automata.grammar.regular.to_regex``;
    JSON's ``value -> object -> value`` is two per level of braces); deeper nesting is then not accepted, and the
    guide is exact for that smaller language. ``lazy``: as ``compile_regex``'s (built as it is walked).

    Errors: ``automata.grammar.GrammarSyntaxError``, ``UndefinedRuleError`` and ``UnsupportedGrammarError`` (all
    ``GrammarError``, a ``CanonmergeError``, with ``construct``, ``line``, ``column``), the last also for recursion
    a regex cannot express; then ``compile_regex``'s (``EmptyLanguageError``, ``StateLimitError``,
    ``CompileBudgetError`` past ``budget``, ``bpe.MissingEOSError``).
    """
    regex = grammar_regex(text, syntax=syntax, start=start, max_depth=max_depth)
    return compile_regex(regex, canonical, canonical_only=canonical_only, max_states=max_states,
                         cache_size=cache_size, eos_token_ids=eos_token_ids,
                         name=name if name is not None else f"{syntax} grammar", budget=budget, lazy=lazy)
