"""Random strings of a grammar: derivations drawn with a depth bound, for tests and benchmarks.

Each choice picks an option at random and each repetition a count, until the derivation is ``max_depth`` rules
deep; from there on every choice takes an option of least *height* (the fewest nested rules needed to finish) and
every repetition its minimum, so a draw always ends, even in recursive grammars. Characters of a class are drawn
from its ranges (printable ASCII favoured where the class has any, as text is mostly); a regex terminal's strings
come from a random walk on its DFA (``automata.from_regex`` over printable ASCII, tab, newlines and a few letters
beyond ASCII), which steers to an accepting state once long enough. Lark's ``%ignore`` text is drawn like any rule.

Leaves out: uniformity (strings are not drawn uniformly by length), and characters of a regex terminal outside that
alphabet.
"""

from __future__ import annotations

import random

import numpy as np

from automata.dfa import DFA, MISSING, Alphabet
from automata.grammar.ir import (
    CharClass,
    Choice,
    Expr,
    Grammar,
    Literal,
    Ref,
    Regex,
    Repeat,
    Rule,
    Sequence,
    Span,
)
from automata.grammar.regular import to_regex
from automata.regex import from_regex

__all__ = ["sample"]

_INF = float("inf")


def sample(grammar: Grammar, rng: random.Random, *, max_depth: int = 8, max_repeat: int = 4) -> str:
    """One string of ``grammar``'s language (recursion cut off past ``max_depth`` nested rules; unbounded
    repetitions draw at most ``max_repeat`` more than their minimum)."""
    return _Sampler(grammar.lowered(), rng, max_depth, max_repeat).rule(grammar.lowered().start, 0)


class _Sampler:
    def __init__(self, grammar: Grammar, rng: random.Random, max_depth: int, max_repeat: int):
        self.grammar, self.rng, self.max_depth, self.max_repeat = grammar, rng, max_depth, max_repeat
        self.heights = _heights(grammar)
        self.regexes: dict[Regex, object] = {}

    def rule(self, name: str, depth: int) -> str:
        return self.expr(self.grammar.rules[name].body, depth + 1)

    def expr(self, expr: Expr, depth: int) -> str:
        rng = self.rng
        if isinstance(expr, Literal):
            if not expr.ignore_case:
                return expr.text
            return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in expr.text)
        if isinstance(expr, CharClass):
            return _char(expr, rng)
        if isinstance(expr, Regex):
            return _regex_string(expr, rng)
        if isinstance(expr, Ref):
            return self.rule(expr.name, depth)
        if isinstance(expr, Sequence):
            return "".join(self.expr(item, depth) for item in expr.items)
        if isinstance(expr, Choice):
            options = expr.options
            if depth >= self.max_depth:
                least = min(_height(o, self.heights) for o in options)
                options = [o for o in options if _height(o, self.heights) == least]
            return self.expr(rng.choice(options), depth)
        high = expr.min + self.max_repeat if expr.max is None else min(expr.max, expr.min + self.max_repeat)
        count = expr.min if depth >= self.max_depth else rng.randint(expr.min, high)
        return "".join(self.expr(expr.item, depth) for _ in range(count))


def _heights(grammar: Grammar) -> dict[str, float]:
    """Per rule, the fewest nested rules a derivation of it needs (a least fixpoint)."""
    heights = {name: _INF for name in grammar.rules}
    changed = True
    while changed:
        changed = False
        for name, rule in grammar.rules.items():
            h = 1 + _height(rule.body, heights)
            if h < heights[name]:
                heights[name] = h
                changed = True
    return heights


def _height(expr: Expr, heights: dict[str, float]) -> float:
    if isinstance(expr, Ref):
        return heights[expr.name]
    if isinstance(expr, Sequence):
        return max((_height(item, heights) for item in expr.items), default=0)
    if isinstance(expr, Choice):
        return min(_height(option, heights) for option in expr.options)
    if isinstance(expr, Repeat):
        return _height(expr.item, heights) if expr.min else 0
    return 0


def _char(cls: CharClass, rng: random.Random) -> str:
    ranges = cls.positive_ranges()
    printable = [(max(lo, 0x20), min(hi, 0x7E)) for lo, hi in ranges if lo <= 0x7E and hi >= 0x20]
    if printable and rng.random() < 0.8:
        ranges = printable
    # surrogates are no text: draw again around them
    while True:
        lo, hi = rng.choice(ranges)
        c = rng.randint(lo, hi)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def _regex_string(expr: Regex, rng: random.Random, length: int = 12) -> str:
    """A string ``re.fullmatch`` accepts: a walk on the regex's character DFA (over ``_ALPHABET``), steered to an
    accepting state after ``length`` characters."""
    dfa = _dfa(expr)
    distance = _distances(dfa)
    q, out = dfa.start, []
    while True:
        moves = [(s, int(t)) for s, t in enumerate(dfa.transitions[q]) if t != MISSING and int(t) in distance]
        if dfa.accepting[q] and (not moves or len(out) >= length or rng.random() < 0.25):
            return "".join(out)
        if len(out) >= length:
            moves = [(s, t) for s, t in moves if distance[t] < distance[q]]
        s, q = rng.choice(moves)
        out.append(_ALPHABET.chars[s])


_ALPHABET = Alphabet.of_chars([chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n", "\r", "é", "λ", "中"])
_DFAS: dict[Regex, DFA] = {}


def _dfa(expr: Regex) -> DFA:
    if expr not in _DFAS:
        pattern = to_regex(Grammar({"r": Rule("r", expr, Span(0, 0), terminal=True)}, "r", (), "lark"))
        _DFAS[expr] = from_regex(pattern, _ALPHABET)
    return _DFAS[expr]


def _distances(dfa: DFA) -> dict[int, int]:
    """Per state that can reach acceptance, the fewest characters to it (backward breadth-first search)."""
    incoming: dict[int, list[int]] = {}
    for q in range(dfa.num_states):
        for t in dfa.transitions[q]:
            if t != MISSING:
                incoming.setdefault(int(t), []).append(q)
    distance = {int(q): 0 for q in np.flatnonzero(dfa.accepting)}
    frontier = list(distance)
    while frontier:
        nxt = []
        for t in frontier:
            for q in incoming.get(t, ()):
                if q not in distance:
                    distance[q] = distance[t] + 1
                    nxt.append(q)
        frontier = nxt
    return distance
