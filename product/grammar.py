"""``compile_grammar``: a GBNF or Lark grammar's guide, exact and dead-end free, recursion included.

The grammar is read into ``automata.grammar``'s IR. Where its language is regular (no recursion, or recursion only
at the end or only at the start of its rules), it is written as one regex (``automata.grammar.regular``), which
``product.compile_regex`` compiles like any other. Other recursion (``"(" expr ")"``, JSON's nesting) gives a
``PushdownGuide`` (``product.runtime.pushdown``): the recursive rules as byte automata calling each other
(``automata.grammar.pushdown``), the guide built over the configurations a generation meets. Never loosened, never
unrolled to a silent depth: a depth bound is the caller's opt-in (``max_depth``: the strings nested at most that
deep, as a regex).

Leaves out: reading the syntaxes (``automata.grammar``), left recursion through other rules (refused, as llama.cpp
refuses it), recursive grammars for any-tokenization masks or tokenizers without pre-tokenizer splits (refused).
"""

from __future__ import annotations

from automata.budget import CompileBudget, running
from automata.grammar import UnsupportedGrammarError, parse_grammar
from automata.grammar.pushdown import call_automaton_of
from automata.grammar.regular import call_regexes, to_regex
from bpe.automaton import CanonicalAutomaton
from product.compile import compile_regex
from product.compiler.tables import guide_eos
from product.runtime.guide import Guide
from product.runtime.lazy import LazyGuide
from product.runtime.pushdown import PushdownGuide

__all__ = ["compile_grammar", "grammar_regex", "compile_call_regexes"]


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

    A grammar whose recursion a regex cannot express compiles to a ``PushdownGuide`` (any depth, built as it is
    walked). ``max_depth`` (opt-in) compiles such a grammar instead to the strings whose derivations nest at most
    ``max_depth`` recursive references (``automata.grammar.regular.to_regex``; JSON's ``value -> object -> value``
    is two per level of braces); deeper nesting is then not accepted, and the guide is exact for that smaller
    language. ``lazy``: as ``compile_regex``'s, for a regular grammar (a recursive one is always built so).

    Errors: ``automata.grammar.GrammarSyntaxError``, ``UndefinedRuleError`` and ``UnsupportedGrammarError`` (all
    ``GrammarError``, a ``CanonmergeError``, with ``construct``, ``line``, ``column``), the last also for left
    recursion, lookarounds in Lark regex terminals, and a recursive grammar with ``canonical_only=False`` or a
    tokenizer without pre-tokenizer splits; then ``compile_regex``'s (``EmptyLanguageError``, ``StateLimitError``,
    ``CompileBudgetError`` past ``budget``, ``bpe.MissingEOSError``).
    """
    grammar = parse_grammar(text, syntax, start)
    name = name if name is not None else f"{syntax} grammar"
    if max_depth is None and canonical_only and LazyGuide.helps(canonical):  # (the rules written once, either way)
        guide_eos(canonical, eos_token_ids)
        with running(budget):
            root, bodies = call_regexes(grammar)
            if bodies:
                return compile_call_regexes(root, bodies, canonical, eos_token_ids=eos_token_ids,
                                            max_states=max_states, cache_size=cache_size, name=name,
                                            rules=grammar.rules)
        return compile_regex(root, canonical, max_states=max_states, cache_size=cache_size,
                             eos_token_ids=eos_token_ids, name=name, budget=budget, lazy=lazy)
    try:
        regex = to_regex(grammar, max_depth=max_depth)
    except UnsupportedGrammarError as exc:
        if exc.construct != "recursion":
            raise
        raise _recursion_refused(exc, canonical_only) from None
    return compile_regex(regex, canonical, canonical_only=canonical_only, max_states=max_states,
                         cache_size=cache_size, eos_token_ids=eos_token_ids,
                         name=name, budget=budget, lazy=lazy)


def compile_call_regexes(root: str, bodies: dict[str, str], canonical: CanonicalAutomaton, *,
                         eos_token_ids=None, max_states: int = 100_000, cache_size: int = 4096,
                         name: str = "", rules=None) -> PushdownGuide:
    """The ``PushdownGuide`` of regexes that call rules (``automata.grammar.pushdown.call_automaton_of``: ``root``,
    and ``bodies`` whose k-th rule ``call_marker(k)`` calls) — what ``vegas`` compiles a recursive JSON Schema to.
    Errors: as ``compile_grammar``'s for a recursive grammar (``UnsupportedGrammarError`` for a tokenizer without
    pre-tokenizer splits or left recursion, naming the rule and its line where ``rules``, the grammar's, has it)."""
    if not LazyGuide.helps(canonical):
        raise UnsupportedGrammarError(
            "recursion at any depth needs a tokenizer whose pre-tokenizer splits text into pieces (this one reads "
            "the whole text as one piece, as SentencePiece BPE does)", construct="recursion")
    guide_eos(canonical, eos_token_ids)
    automaton = call_automaton_of(root, bodies, max_states=max_states, rules=rules)
    return PushdownGuide(automaton, canonical, eos_token_ids=eos_token_ids, cache_size=cache_size, name=name)


def _recursion_refused(refused: UnsupportedGrammarError, canonical_only: bool) -> UnsupportedGrammarError:
    """Why a grammar with recursion no regex expresses gets no guide here (any-tokenization masks, or a tokenizer
    without pre-tokenizer splits: ``compile_grammar`` builds its ``PushdownGuide`` otherwise), naming the rule."""
    why = ("a recursive grammar's guide gives canonical masks only: pass canonical_only=True" if not canonical_only
           else "a recursive grammar's guide needs a tokenizer whose pre-tokenizer splits text into pieces (this one "
                "reads the whole text as one piece, as SentencePiece BPE does)")
    return UnsupportedGrammarError(f"{refused} ({why}; or max_depth= for a depth-bounded regex)",
                                   construct="recursion", line=refused.line, column=refused.column, rule=refused.rule)
