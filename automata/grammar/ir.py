"""The grammar IR both front-ends (``automata.grammar.gbnf``, ``automata.grammar.lark``) read into, its errors,
and the analyses every back-end needs: references, nullable rules, recursion, left recursion, and Lark's
``%ignore`` made explicit.

A grammar is a set of named rules over *characters* (Unicode code points). An expression is a literal, a
character class, a regex terminal (Lark's ``/.../``, in Python ``re`` syntax), a reference to a rule, or a
sequence, choice or bounded/unbounded repetition of expressions. A rule is a *terminal* (Lark's upper-case
definitions: lexed, so ``%ignore`` never enters it) or a plain rule; GBNF rules are all plain. The language of a
grammar is the set of strings its start rule derives, with ``%ignore`` text allowed before every token of a
plain rule and at the end (``Grammar.lowered`` writes that into the rules). That is Lark's Earley parser with
``lexer="dynamic_complete"``; GBNF has no lexer, so it is llama.cpp's language exactly.

Leaves out: parsing (the front-ends), recognising (``automata.grammar.earley``), regexes (``automata.grammar
.regular``), and anything about tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Union

import networkx as nx

from automata.errors import CanonmergeError

__all__ = ["Span", "Literal", "CharClass", "Regex", "Ref", "Sequence", "Choice", "Repeat", "Expr", "Rule", "Grammar",
           "GrammarError", "GrammarSyntaxError", "UnsupportedGrammarError", "UndefinedRuleError", "EMPTY", "ANY_CHAR",
           "MAX_CODE_POINT", "IGNORED", "START"]

MAX_CODE_POINT = 0x10FFFF
#: The names ``Grammar.lowered`` gives the ignored text and the new start rule: no front-end accepts '%' in a name.
IGNORED, START = "%ignored", "%start"


# ---------------------------------------------------------------------------------------------------- errors
class GrammarError(CanonmergeError):
    """A grammar that cannot be read or used. ``construct`` names what was wrong (``"expecting ::="``, ``"token"``,
    ``"recursion"``, ...), ``line`` and ``column`` (1-based) where it is in the grammar's text (0: not tied to a
    place), ``rule`` the rule concerned where there is one."""

    def __init__(self, message: str, *, construct: str, line: int = 0, column: int = 0, rule: str | None = None):
        self.construct, self.line, self.column, self.rule = construct, line, column, rule
        where = f" at line {line}:{column}" if line else ""
        super().__init__(f"{message}{where}")


class GrammarSyntaxError(GrammarError):
    """The text is not a grammar of its syntax (what the syntax's own parser would refuse)."""


class UnsupportedGrammarError(GrammarError):
    """Valid syntax that canonmerge does not support: GBNF token matches (``<[id]>``, ``<think>``), Lark templates,
    ``%declare``/``%override``, imports other than ``common``; and, when compiling to a guide, recursion that is
    not right-linear (``construct="recursion"``, ``rule`` the recursive rule, its line and column)."""


class UndefinedRuleError(GrammarError):
    """A reference to a rule (or terminal) the grammar never defines, or a start rule that does not exist."""


# --------------------------------------------------------------------------------------------------- the IR
@dataclass(frozen=True)
class Span:
    """A place in the grammar's text: 1-based line and column."""
    line: int
    column: int


@dataclass(frozen=True)
class Literal:
    """The string ``text`` (``""``: the empty string); ``ignore_case``: Lark's ``"..."i``, matched as Python's
    ``re.IGNORECASE`` matches it."""
    text: str
    ignore_case: bool = False


@dataclass(frozen=True)
class CharClass:
    """One character in ``ranges`` (inclusive code point pairs, sorted, disjoint and not adjacent), or not in them
    when ``negated``. ``CharClass((), True)`` is any character; ``CharClass(())`` none."""
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    @staticmethod
    def of(ranges, negated: bool = False) -> "CharClass":
        """The class of ``ranges`` (any order, overlapping, empty pairs dropped), normalised."""
        merged: list[list[int]] = []
        for lo, hi in sorted((lo, hi) for lo, hi in ranges if lo <= hi):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return CharClass(tuple((lo, hi) for lo, hi in merged), negated)

    def contains(self, char: str) -> bool:
        c = ord(char)
        return any(lo <= c <= hi for lo, hi in self.ranges) != self.negated

    def positive_ranges(self) -> tuple[tuple[int, int], ...]:
        """The same set as ranges, not negated."""
        if not self.negated:
            return self.ranges
        out, low = [], 0
        for lo, hi in self.ranges:
            if lo > low:
                out.append((low, lo - 1))
            low = hi + 1
        if low <= MAX_CODE_POINT:
            out.append((low, MAX_CODE_POINT))
        return tuple(out)


@dataclass(frozen=True)
class Regex:
    """A Lark regex terminal ``/pattern/flags``: the strings ``re.fullmatch(pattern, ·, flags)`` accepts."""
    pattern: str
    flags: str = ""


@dataclass(frozen=True)
class Ref:
    """A reference to the rule ``name``, written at ``at``."""
    name: str
    at: Span = field(default=Span(0, 0), compare=False)


@dataclass(frozen=True)
class Sequence:
    items: tuple["Expr", ...]


@dataclass(frozen=True)
class Choice:
    options: tuple["Expr", ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max`` None: unbounded). Invariant: ``0 <= min <= max``."""
    item: "Expr"
    min: int
    max: int | None


Expr = Union[Literal, CharClass, Regex, Ref, Sequence, Choice, Repeat]
EMPTY = Sequence(())  # the empty string
ANY_CHAR = CharClass((), True)


@dataclass(frozen=True)
class Rule:
    """A named rule, defined at ``at``. ``terminal``: a Lark terminal (upper-case name), which refers only to
    terminals and is never recursive."""
    name: str
    body: Expr
    at: Span
    terminal: bool = False


@dataclass(frozen=True)
class Grammar:
    """Rules by name and the start rule; ``ignore`` (Lark's ``%ignore``): text allowed before each token of a plain
    rule and at the end. Invariants (the front-ends check them): every ``Ref`` names a rule of ``rules``; ``start``
    is one; terminals refer only to terminals. ``syntax``: "gbnf" or "lark", what it was read from."""
    rules: Mapping[str, Rule]
    start: str
    ignore: tuple[Expr, ...] = ()
    syntax: str = "gbnf"

    def with_start(self, start: str | None) -> "Grammar":
        """The same rules started at ``start`` (None: unchanged); ``UndefinedRuleError`` if there is no such rule."""
        if start is None or start == self.start:
            return self
        if start not in self.rules:
            raise UndefinedRuleError(f"no rule {start!r} to start from", construct="start rule", rule=start)
        return Grammar(self.rules, start, self.ignore, self.syntax)

    # ---- analyses ------------------------------------------------------------------------------------------
    def reachable(self) -> list[str]:
        """The rules the start rule uses, directly or not, the start first."""
        seen, order, stack = {self.start}, [], [self.start]
        while stack:
            name = stack.pop()
            order.append(name)
            for ref in references(self.rules[name].body):
                if ref.name not in seen:
                    seen.add(ref.name)
                    stack.append(ref.name)
        return order

    def nullable(self) -> set[str]:
        """The rules that derive the empty string (a least fixpoint)."""
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, rule in self.rules.items():
                if name not in found and derives_empty(rule.body, found):
                    found.add(name)
                    changed = True
        return found

    def recursive_rules(self) -> list[str]:
        """Reachable rules that refer to themselves through other rules (in the start's order); empty: the grammar
        is a finite nest of regular pieces."""
        return [name for name in self.reachable() if name in cyclic_rules(self)]

    def left_recursive_rule(self) -> str | None:
        """A rule that derives a string starting with itself (``X -> ... -> X w``, every step past a nullable
        prefix), or None. llama.cpp refuses such grammars; an Earley parser does not mind."""
        cycle = cyclic_rules(self, left_corner=True)
        return next((name for name in self.reachable() if name in cycle), None)

    def lowered(self) -> "Grammar":
        """The same language with ``%ignore`` written into the rules: a rule ``%ignored`` (the ignored text, any
        number of times) before every token of every plain rule, and a start ``%start`` that allows it at the
        end. A grammar without ``ignore`` is returned as it is."""
        if not self.ignore:
            return self
        rules = {}
        for name, rule in self.rules.items():
            body = rule.body if rule.terminal else _prefix_tokens(rule.body, self.rules)
            rules[name] = Rule(name, body, rule.at, rule.terminal)
        ignored = Repeat(self.ignore[0] if len(self.ignore) == 1 else Choice(self.ignore), 0, None)
        rules[IGNORED] = Rule(IGNORED, ignored, Span(0, 0), terminal=True)
        rules[START] = Rule(START, Sequence((Ref(self.start), Ref(IGNORED))), Span(0, 0))
        return Grammar(rules, START, (), self.syntax)


def references(expr: Expr) -> Iterator[Ref]:
    """Every ``Ref`` inside ``expr``, in writing order."""
    return _leaves(expr, Ref)


def regexes(expr: Expr) -> Iterator[Regex]:
    """Every ``Regex`` inside ``expr``, in writing order."""
    return _leaves(expr, Regex)


def _leaves(expr: Expr, kind: type) -> Iterator:
    """Every expression of type ``kind`` inside ``expr``, in writing order."""
    if isinstance(expr, kind):
        yield expr
    elif isinstance(expr, Sequence):
        for item in expr.items:
            yield from _leaves(item, kind)
    elif isinstance(expr, Choice):
        for option in expr.options:
            yield from _leaves(option, kind)
    elif isinstance(expr, Repeat):
        yield from _leaves(expr.item, kind)


def derives_empty(expr: Expr, nullable: set[str]) -> bool:
    """Whether ``expr`` matches the empty string, given the rules known to (``nullable``)."""
    if isinstance(expr, Literal):
        return expr.text == ""
    if isinstance(expr, CharClass):
        return False
    if isinstance(expr, Regex):
        return re.fullmatch(expr.pattern, "", python_flags(expr.flags)) is not None
    if isinstance(expr, Ref):
        return expr.name in nullable
    if isinstance(expr, Sequence):
        return all(derives_empty(item, nullable) for item in expr.items)
    if isinstance(expr, Choice):
        return any(derives_empty(option, nullable) for option in expr.options)
    return expr.min == 0 or derives_empty(expr.item, nullable)


def python_flags(flags: str) -> int:
    """Lark's regex flags (``imslux``) as Python ``re`` flags."""
    table = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "l": 0, "u": re.UNICODE, "x": re.VERBOSE}
    value = 0
    for f in flags:
        value |= table[f]
    return value


def _left_refs(expr: Expr, nullable: set[str]) -> Iterator[Ref]:
    """The references that can come first in ``expr``'s strings (after a prefix that may be empty)."""
    if isinstance(expr, Ref):
        yield expr
    elif isinstance(expr, Sequence):
        for item in expr.items:
            yield from _left_refs(item, nullable)
            if not derives_empty(item, nullable):
                break
    elif isinstance(expr, Choice):
        for option in expr.options:
            yield from _left_refs(option, nullable)
    elif isinstance(expr, Repeat):
        yield from _left_refs(expr.item, nullable)


def cyclic_rules(grammar: Grammar, *, left_corner: bool = False) -> set[str]:
    """The rules on a cycle of the reference graph (``left_corner``: of the left-corner graph, whose edges are
    the references that can come first)."""
    graph = nx.DiGraph()
    nullable = grammar.nullable() if left_corner else set()
    for name, rule in grammar.rules.items():
        graph.add_node(name)
        refs = _left_refs(rule.body, nullable) if left_corner else references(rule.body)
        graph.add_edges_from((name, ref.name) for ref in refs)
    cyclic = set()
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1 or any(graph.has_edge(n, n) for n in component):
            cyclic |= component
    return cyclic


def _is_token(expr: Expr, rules: Mapping[str, Rule]) -> bool:
    return isinstance(expr, (Literal, CharClass, Regex)) or (isinstance(expr, Ref) and rules[expr.name].terminal)


def _prefix_tokens(expr: Expr, rules: Mapping[str, Rule]) -> Expr:
    """``expr`` with ``%ignored`` before each of its tokens (literals, classes, regexes, terminal references)."""
    if _is_token(expr, rules):
        return Sequence((Ref(IGNORED), expr))
    if isinstance(expr, Sequence):
        return Sequence(tuple(_prefix_tokens(item, rules) for item in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(_prefix_tokens(option, rules) for option in expr.options))
    if isinstance(expr, Repeat):
        return Repeat(_prefix_tokens(expr.item, rules), expr.min, expr.max)
    return expr
