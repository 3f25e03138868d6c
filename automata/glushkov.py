"""interegular's parse tree -> character-class DFA, by the position (Glushkov) construction.

interegular parses a pattern into a small tree — alternations (``Pattern``), concatenations, repetitions
(``_Repeated``), character groups (``_CharGroup``), the dot and the empty pattern — and builds its DFA by
combining whole FSMs operation by operation: ``x{3}`` concatenates three FSMs, each concatenation crawls a
product of state sets. That was most of a small constraint's compile (``to_fsm``: 2-18 ms of the benchmark's
patterns, e.g. 4.4 of the IPv4 regex's 5.7 ms). Here the tree is read once:

1. every character-group occurrence becomes a *position*; ``x{m,n}`` copies its operand m times, then n - m
   nested optional times (``x(x(x)?)?``), ``x*`` and ``x{m,}`` loop the last copy;
2. each subtree yields (nullable, first positions, last positions) and records ``follow[p]``, the positions that
   may come right after position p (sets are Python ints used as bitsets);
3. the characters the pattern names are grouped into classes by the set of positions that accept them; the
   characters it never names are one more class (interegular's ``anything_else``);
4. subset construction from a virtual start position whose follow set is the root's first positions.

The result is the same language as interegular's FSM (tests compare the minimal DFAs on many patterns), not
necessarily the same states: the caller minimises.

Leaves out: lookarounds (``_NonCapturing``) and the multiline flag. ``char_dfa`` returns None for those and the
caller falls back to interegular's own construction (which implements lookaheads and raises its errors).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import _DOT, _EMPTY, Pattern, REFlags, _CharGroup, _Concatenation, _Repeated

from automata.dfa import MISSING
from automata.errors import RegexError, StateLimitError

__all__ = ["CharDFA", "char_dfa"]


class CharDFA(NamedTuple):
    """A DFA over character classes. Invariants: ``class_target`` is int32 ``[states, classes + 1]`` whose last
    column (no class: code points that cannot occur) is all MISSING; ``mapping`` sends every character the
    pattern names, and ``anything_else``, to its class (``anything_else`` may map to the no-class column when
    the pattern accepts no unnamed character)."""
    class_target: np.ndarray
    accepting: np.ndarray
    start: int
    mapping: dict


class _Unsupported(Exception):
    """A node or flag this construction leaves to interegular."""


_Triple = tuple[bool, int, int]  # (nullable, first positions, last positions)
_MULTILINE, _CASE_INSENSITIVE, _SINGLE_LINE = (f.value for f in (REFlags.MULTILINE, REFlags.CASE_INSENSITIVE,
                                                                 REFlags.SINGLE_LINE))


class _Positions:
    """Step 1-2: numbers the positions of a tree and collects their character sets and follow sets."""

    def __init__(self, max_positions: int):
        self.max_positions = max_positions
        self.chars: list[frozenset] = []  # per position: the characters it names
        self.negated: list[bool] = []  # ... and whether it accepts every character but those
        self.follow: list[int] = []

    def position(self, chars: frozenset, negated: bool) -> _Triple:
        p = len(self.chars)
        if p >= self.max_positions:
            raise StateLimitError(f"more than {self.max_positions} character positions (max_states)")
        self.chars.append(chars)
        self.negated.append(negated)
        self.follow.append(0)
        return False, 1 << p, 1 << p

    def link(self, last: int, first: int) -> None:
        """Every position of ``last`` may be followed by every position of ``first``."""
        while last:
            low = last & -last
            self.follow[low.bit_length() - 1] |= first
            last ^= low

    def then(self, a: _Triple, b: _Triple) -> _Triple:
        """The concatenation of a and b."""
        self.link(a[2], b[1])
        return a[0] and b[0], a[1] | (b[1] if a[0] else 0), b[2] | (a[2] if b[0] else 0)

    def visit(self, node, flags: int) -> _Triple:
        """(nullable, first, last) of ``node`` under ``flags`` (``REFlags`` as an int: enum operations cost
        ~3 µs each, a third of this construction when they were Flag objects). Nodes are told apart by their
        exact class (interegular's classes are ABCs: an ``isinstance`` costs ~1 µs), character groups first."""
        if flags & _MULTILINE:
            raise _Unsupported
        kind = type(node)
        if kind is _CharGroup:
            chars = node.chars
            if flags & _CASE_INSENSITIVE:  # as interegular: both cases of every named character
                chars = frozenset({*(c.lower() for c in chars), *(c.upper() for c in chars)})
            return self.position(chars, node.negated)
        if kind is _Concatenation:
            result = (True, 0, 0)
            for part in node.parts:
                result = self.then(result, self.visit(part, flags))
            return result
        if kind is Pattern:  # alternation, possibly changing flags
            flags = (flags | node.added_flags.value) & ~node.removed_flags.value
            nullable, first, last = False, 0, 0
            for option in node.options:
                n, f, l = self.visit(option, flags)
                nullable, first, last = nullable or n, first | f, last | l
            return nullable, first, last
        if kind is _Repeated:
            if node.max is not None and node.min > node.max:
                raise RegexError(f"repetition {{{node.min},{node.max}}}: the minimum exceeds the maximum")
            result = (True, 0, 0)
            for _ in range(node.min):
                result = self.then(result, self.visit(node.base, flags))
            if node.max is None:  # x{m,}: one more copy that loops
                nullable, first, last = self.visit(node.base, flags)
                self.link(last, first)
                return self.then(result, (True, first, last))
            optional = (True, 0, 0)  # x{0,k} as (x(x(...)?)?)?, built from the inside out
            for _ in range(node.max - node.min):
                _, first, last = self.then(self.visit(node.base, flags), optional)
                optional = (True, first, last)
            return self.then(result, optional)
        if node is _DOT:  # any character but a newline, unless the single-line flag is set
            return self.position(frozenset() if flags & _SINGLE_LINE else frozenset("\n"), True)
        if node is _EMPTY:
            return True, 0, 0
        raise _Unsupported  # lookarounds


def char_dfa(tree: Pattern, max_states: int) -> CharDFA | None:
    """The DFA of ``tree`` (interegular's parse), or None if it uses what this construction leaves out.

    Raises ``StateLimitError`` past ``max_states`` states (or 4x as many positions) and ``RegexError`` for a
    repetition whose minimum exceeds its maximum.
    """
    positions = _Positions(4 * max_states)
    try:
        nullable, first, last = positions.visit(tree, 0)
    except _Unsupported:
        return None
    num_positions = len(positions.chars)

    # Step 3: per named character, the positions accepting it; classes are the distinct such sets.
    accepts_anything_else = sum(1 << p for p, negated in enumerate(positions.negated) if negated)
    named: dict[str, int] = {}
    for p, chars in enumerate(positions.chars):
        for c in chars:
            if len(c) == 1:  # case folding can name multi-character strings ('ß'.upper()); no character is one
                named[c] = named.get(c, 0) | 1 << p
    class_of_set: dict[int, int] = {}
    mapping = {anything_else: class_of_set.setdefault(accepts_anything_else, 0)}
    for c, toggled in named.items():  # a named character flips the negated positions naming it off, the rest on
        mapping[c] = class_of_set.setdefault(accepts_anything_else ^ toggled, len(class_of_set))
    class_sets = list(class_of_set)

    # Per position, the classes that accept it, as a bitset: a named position's are its characters' classes, a
    # negated one is accepted by almost every class. A subset state tries only its positions' classes (a
    # skeleton's state has one or two positions of one class each, among dozens of classes).
    every_class = (1 << len(class_sets)) - 1
    classes_of = [every_class if negated else 0 for negated in positions.negated]
    for c, toggled in named.items():
        while toggled:
            low = toggled & -toggled
            classes_of[low.bit_length() - 1] |= 1 << mapping[c]
            toggled ^= low

    # Step 4: subset construction; state 0 is the virtual start, followed by the root's first positions. Classes
    # are tried in increasing order, so states are numbered as a walk over every class would number them.
    start = 1 << num_positions
    follow = positions.follow + [first]
    index = {start: 0}
    order = [start]
    sources, classes, targets = [], [], []  # the edges, as arrays
    source = -1
    while source + 1 < len(order):  # ``order`` grows as states are found
        source += 1
        subset = order[source]
        reachable, candidates = 0, 0
        while subset:
            low = subset & -subset
            reachable |= follow[low.bit_length() - 1]
            subset ^= low
        rest = reachable
        while rest:
            low = rest & -rest
            candidates |= classes_of[low.bit_length() - 1]
            rest ^= low
        while candidates:
            low = candidates & -candidates
            c = low.bit_length() - 1
            candidates ^= low
            target = reachable & class_sets[c]
            if not target:
                continue
            state = index.get(target)
            if state is None:
                if len(order) >= max_states:
                    raise StateLimitError(f"more than max_states={max_states} character states")
                state = index[target] = len(order)
                order.append(target)
            sources.append(source)
            classes.append(c)
            targets.append(state)
    class_target = np.full((len(order), len(class_sets) + 1), MISSING, dtype=np.int32)
    class_target[sources, classes] = targets
    accepting = np.array([bool(s & last) for s in order], dtype=bool)
    accepting[0] = nullable
    return CharDFA(class_target, accepting, 0, mapping)
