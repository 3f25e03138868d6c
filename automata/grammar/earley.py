"""A character-level Earley recogniser for the grammar IR: whether a grammar derives a string (the reference the
tests hold regexes and guides compiled from grammars to, beside Lark's own parser).

The grammar (lowered: ``%ignore`` written into its rules) is flattened into productions over symbols that are
either nonterminals or *scanners*: a character class (one character) or a regex terminal (any span that
``re.fullmatch`` accepts; one that also matches the empty string gets an empty alternative, so scanners never read
nothing). Sequences, choices and repetitions get nonterminals of their own; ``x{m,n}`` is unrolled (a recogniser
for tests: grammars with large counts are slow here, not wrong). The chart is Earley's, with nullable
nonterminals completed at prediction (Aycock and Horspool), so empty rules need no special case. Time is cubic in
the string's length in the worst case: meant for strings of a few hundred characters.

Leaves out: parse trees, error recovery, anything about tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from automata.grammar.ir import (
    CharClass,
    Choice,
    Expr,
    Grammar,
    Literal,
    Ref,
    Regex,
    Sequence,
    python_flags,
)

__all__ = ["Recognizer"]


@dataclass(frozen=True)
class _Scan:
    """A scanner: a character class (``chars``) or a compiled regex terminal (``regex``)."""
    chars: CharClass | None = None
    regex: re.Pattern | None = None


class Recognizer:
    """Earley over characters for one grammar: ``accepts(text)``.

    Invariant: ``productions[n]`` lists the right-hand sides of nonterminal ``n`` (ints: nonterminals, ``_Scan``:
    scanners); nonterminal 0 is the start; ``nullable`` is the set of nonterminals deriving the empty string."""

    def __init__(self, grammar: Grammar):
        grammar = grammar.lowered()
        self.productions: list[list[tuple]] = []
        self._rule_ids: dict[str, int] = {}
        self._memo: dict[Expr, int] = {}
        self._rules = grammar.rules
        start = self._rule(grammar.start)
        assert start == 0
        self.nullable = self._nullable()

    # ---- flattening --------------------------------------------------------------------------------------
    def _new(self) -> int:
        self.productions.append([])
        return len(self.productions) - 1

    def _rule(self, name: str) -> int:
        if name not in self._rule_ids:
            self._rule_ids[name] = n = self._new()
            self.productions[n] = [self._symbols(self._rules[name].body)]
        return self._rule_ids[name]

    def _symbols(self, expr: Expr) -> tuple:
        """``expr`` as a sequence of symbols."""
        if isinstance(expr, Sequence):
            return tuple(s for item in expr.items for s in self._symbols(item))
        if isinstance(expr, Literal):
            if expr.ignore_case:
                return (_Scan(regex=re.compile(re.escape(expr.text), re.IGNORECASE)),)
            return tuple(_Scan(chars=CharClass.of([(ord(c), ord(c))])) for c in expr.text)
        if isinstance(expr, CharClass):
            return (_Scan(chars=expr),)
        if isinstance(expr, Ref):
            return (self._rule(expr.name),)
        return (self._nonterminal(expr),)

    def _nonterminal(self, expr: Expr) -> int:
        """A nonterminal deriving exactly ``expr`` (a choice, repetition or regex), made once per expression."""
        if expr in self._memo:
            return self._memo[expr]
        n = self._memo[expr] = self._new()
        if isinstance(expr, Choice):
            self.productions[n] = [self._symbols(option) for option in expr.options]
        elif isinstance(expr, Regex):
            regex = re.compile(expr.pattern, python_flags(expr.flags))
            self.productions[n] = [(_Scan(regex=regex),)] + ([()] if regex.fullmatch("") else [])
        else:  # Repeat: x{m} then (x (x ...)?)? or x*
            item = self._symbols(expr.item)
            if expr.max is None:
                star = self._new()
                self.productions[star] = [(), (star,) + item]  # (left recursion: linear for Earley)
                self.productions[n] = [item * expr.min + (star,)]
            else:
                tail: tuple = ()
                for _ in range(expr.max - expr.min):
                    optional = self._new()
                    self.productions[optional] = [(), item + tail]
                    tail = (optional,)
                self.productions[n] = [item * expr.min + tail]
        return n

    def _nullable(self) -> set[int]:
        found: set[int] = set()
        changed = True
        while changed:
            changed = False
            for n, rhss in enumerate(self.productions):
                if n not in found and any(all(isinstance(s, int) and s in found for s in rhs) for rhs in rhss):
                    found.add(n)
                    changed = True
        return found

    # ---- recognising -------------------------------------------------------------------------------------
    def _chart(self, text: str) -> list[set]:
        """Earley sets 0..len(text); an item is (nonterminal, production index, dot, origin)."""
        n = len(text)
        sets: list[set] = [set() for _ in range(n + 1)]
        # per set, the items whose next symbol is a nonterminal, by that nonterminal (what a completion advances)
        waiting: list[dict[int, list]] = [{} for _ in range(n + 1)]
        sets[0].update((0, p, 0, 0) for p in range(len(self.productions[0])))
        productions, nullable = self.productions, self.nullable
        for i in range(n + 1):
            current, agenda = sets[i], list(sets[i])

            def add(item):
                if item not in current:
                    current.add(item)
                    agenda.append(item)

            while agenda:
                head, p, dot, origin = agenda.pop()
                rhs = productions[head][p]
                if dot == len(rhs):  # complete: advance the items waiting for ``head`` at ``origin``
                    for w_head, w_p, w_dot, w_origin in waiting[origin].get(head, ()):
                        add((w_head, w_p, w_dot + 1, w_origin))
                    continue
                symbol = rhs[dot]
                if isinstance(symbol, int):  # predict (and step over it at once if it may be empty)
                    waiting[i].setdefault(symbol, []).append((head, p, dot, origin))
                    for q in range(len(productions[symbol])):
                        add((symbol, q, 0, i))
                    if symbol in nullable:
                        add((head, p, dot + 1, origin))
                elif i < n:  # scan
                    for end in _ends(symbol, text, i):
                        sets[end].add((head, p, dot + 1, origin))
        return sets

    def accepts(self, text: str) -> bool:
        """Whether the grammar derives ``text``."""
        last = self._chart(text)[-1]
        return any(head == 0 and origin == 0 and dot == len(self.productions[0][p])
                   for head, p, dot, origin in last)


def _ends(scan: _Scan, text: str, i: int) -> list[int]:
    """The positions where a scanner starting at ``i`` may stop (after reading at least one character)."""
    if scan.chars is not None:
        return [i + 1] if scan.chars.contains(text[i]) else []
    return [j for j in range(i + 1, len(text) + 1) if scan.regex.fullmatch(text, i, j)]
