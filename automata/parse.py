"""A fast reader for the regex syntax canonmerge writes itself, giving interegular's parse tree.

interegular's parser is a general combinator parser: ~20 µs per character, so the 4k-character regex of a JSON
key set took 85 ms to read before its automaton (a few ms) was built, and reading a schema's skeleton was most of
a warm schema compile. The regexes ``vegas`` and ``product.stitched`` write use a small part of the syntax:
literal characters, escapes of punctuation, ``\\xHH``, the class escapes ``\\d \\w \\s \\D \\W \\S`` and the
control escapes, ``.``, character classes with ranges and negation, groups ``(...)`` and ``(?:...)``,
alternation, and the quantifiers ``* + ? {n} {n,} {n,m}`` (lazy or not: same language). One operator is canonmerge's
own, written only into schema skeletons: ``LOOP`` before two groups, ``LOOP (?:x)(?:s)``, is ``x(sx)*``, and
``LOOP_AFTER (?:h)(?:x)(?:s)`` is ``(h|x)(sx)*`` — a JSON array's items or an object's free keys with ``x`` written
once, where a regex writes it twice and doubles a nested array's text at each level. ``read`` gives it as a ``Loop``
node (``automata.glushkov`` numbers ``x``'s positions once); ``plain`` writes it out as a regex for other readers.

``read`` builds exactly the tree interegular's ``parse_pattern`` builds for such a pattern (the tests compare
the trees), one pass with no backtracking, and returns None at anything else — lookarounds, flags, anchors,
octal and back-references, ``{`` that opens no quantifier, a malformed pattern — so the caller parses those with
interegular, which implements them or raises its own errors.

Leaves out on purpose: everything interegular's tree can say that canonmerge never writes.
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

from interegular.patterns import _CHAR_GROUPS, _DOT, Pattern, _CharGroup, _Concatenation, _Repeated

from automata.budget import checkpoint

__all__ = ["read", "syntax_positions", "plain", "Loop", "LOOP", "LOOP_AFTER"]

LOOP, LOOP_AFTER = "\udbff", "\udbfe"  # lone surrogates, in no text (below them: a skeleton's placeholders)


class Loop(NamedTuple):
    """``(head|item)(sep item)*``, or ``item(sep item)*`` where ``head`` is None (``LOOP``, ``LOOP_AFTER``)."""

    head: Pattern | None
    item: Pattern
    sep: Pattern

_SPECIAL = frozenset("+?*.$^\\()[|")  # not literal outside a class (as interegular)
_RESERVED = frozenset("NpPuUAZbB")  # escapes interegular refuses or reads otherwise outside a class
_HEX = frozenset("0123456789abcdefABCDEF")
_PLAIN = re.compile("[^+?*.$^\\\\()\\[|{\udbfe\udbff]+")  # characters that are literal outside a class
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


_CLASSES: dict[str, _CharGroup] = {}  # a class's text (between the brackets) -> its group
_GROUPS: dict[str, Pattern] = {}  # a long group's text (with its parentheses) -> its tree, across patterns
_GROUP_MEMO_CHARS = 64  # groups at least this long are looked up in ``_GROUPS``
_MAX_GROUP_CHARS = 1 << 23  # characters of the groups kept, in all (nested groups each keep their text)
_GROUP_CHARS = 0
_GROUP_TOKENS = re.compile(r"\\.|\[(?:\\.|[^\]\\])*\]|[()]", re.S)  # escapes and classes hide their parentheses
_LITERALS: dict[str, _CharGroup] = {}  # a character -> the group of that character alone (groups are immutable)


def _literal(c: str) -> _CharGroup:
    """The group of the single character ``c``, made once per process (a skeleton's keys are mostly these)."""
    group = _LITERALS.get(c)
    if group is None:
        group = _LITERALS[c] = _CharGroup(frozenset({c}), False)
    return group


class _Other(Exception):
    """Syntax this reader leaves to interegular."""


def read(pattern: str, runs: Callable[[str], str] | None = None) -> Pattern | None:
    """interegular's parse tree of ``pattern``, or None when the pattern uses syntax this reader leaves out.

    ``runs``: each maximal run of unquantified literal characters in a concatenation is given to it as a string,
    and the characters it returns stand for the run in the tree, one literal each (``product.stitched`` reads a
    skeleton's keys as single characters this way); by default the run's own characters."""
    reader = _Reader(pattern, runs)
    try:
        tree = reader.alternation()
    except (_Other, IndexError):
        return None
    return tree if reader.i == len(pattern) else None


def _combine(groups: list[_CharGroup], negate: bool) -> _CharGroup:
    """A class of several members (interegular's rule: negated members win over positive ones)."""
    positive = set().union(*(g.chars for g in groups if not g.negated))
    negative = set().union(*(g.chars for g in groups if g.negated))
    if negative:
        return _CharGroup(frozenset(negative - positive), not negate)
    return _CharGroup(frozenset(positive - negative), negate)


def _closing_parentheses(pattern: str) -> dict[int, int]:
    """Per opening parenthesis of a group, the index of the one closing it."""
    closing, open_at = {}, []
    for token in _GROUP_TOKENS.finditer(pattern):
        if token.group() == "(":
            open_at.append(token.start())
        elif token.group() == ")" and open_at:
            closing[open_at.pop()] = token.start()
    return closing


class _Reader:
    """One pass over a pattern. A group of ``_GROUP_MEMO_CHARS`` characters or more is read once per process and
    its tree shared (``_GROUPS``): the fragments of a schema repeat the same long groups (a JSON string's body,
    "any value", a free key), and ``automata.glushkov`` numbers the positions of a tree it has seen by copying."""

    def __init__(self, pattern: str, runs: Callable[[str], str] | None = None):
        self.s, self.i, self.runs = pattern, 0, runs
        self.steps = 0  # characters read, for the budget checks
        # (the trees of groups are shared only where runs are not read: runs change what a text's tree is)
        self.closing = _closing_parentheses(pattern) if runs is None and len(pattern) >= 2 * _GROUP_MEMO_CHARS \
            else None

    def alternation(self) -> Pattern:
        options = [self.concatenation()]
        while self.i < len(self.s) and self.s[self.i] == "|":
            self.i += 1
            options.append(self.concatenation())
        return Pattern(tuple(options))

    def concatenation(self) -> _Concatenation:
        s, parts, run = self.s, [], []
        while self.i < len(s) and s[self.i] not in "|)":
            c = s[self.i]
            self.i += 1
            self.steps += 1
            if not self.steps & 255:
                checkpoint()  # the compile's budget (``automata.budget``): a schema's regex can be 1M characters
            if c == "(":
                base = self.group()
            elif c == LOOP or c == LOOP_AFTER:
                groups = [self.operand() for _ in range(2 if c == LOOP else 3)]
                base = Loop(None, *groups) if c == LOOP else Loop(*groups)
            elif c == "[":
                base = self.cached_class()
            elif c == "\\":
                base = self.escape(inside_class=False)
            elif c == ".":
                base = _DOT
            elif c in _SPECIAL or c == "{":  # a quantifier with nothing before it, an anchor
                raise _Other
            elif self.runs is not None:  # a stretch of plain literals at once
                end = _PLAIN.match(s, self.i - 1).end()
                if end < len(s) and s[end] in "*+?{":
                    end -= 1  # the last one is quantified
                if end > self.i:
                    run.append(s[self.i - 1:end])
                    self.i = end
                    continue
                base = _literal(c)
            else:
                base = _literal(c)
            node = self.quantified(base)
            if self.runs is not None and node is base and _LITERALS.get(s[self.i - 1]) is base:
                run.append(s[self.i - 1])  # an unquantified literal character (written as itself or escaped)
                continue
            if run:
                parts.extend(map(_literal, self.runs("".join(run))))
                run.clear()
            parts.append(node)
        if run:
            parts.extend(map(_literal, self.runs("".join(run))))
        return _Concatenation(tuple(parts))

    def group(self) -> Pattern:
        """The group opening before the cursor (shared with earlier patterns where it is long)."""
        global _GROUP_CHARS
        s, opening = self.s, self.i - 1
        close = self.closing.get(opening, -1) if self.closing is not None else -1
        text = s[opening:close + 1] if close - opening >= _GROUP_MEMO_CHARS else None
        if text is not None:
            found = _GROUPS.get(text)
            if found is not None:
                self.i = close + 1
                return found
        if s.startswith("?:", self.i):
            self.i += 2
        elif s[self.i] == "?":
            raise _Other  # lookarounds, flags, named groups
        inner = self.alternation()
        if s[self.i] != ")":
            raise _Other
        self.i += 1
        if text is not None and self.i == close + 1:
            if len(_GROUPS) >= 4096 or _GROUP_CHARS + len(text) > _MAX_GROUP_CHARS:
                _GROUPS.clear()
                _GROUP_CHARS = 0
            _GROUPS[text] = inner
            _GROUP_CHARS += len(text)
        return inner

    def operand(self) -> Pattern:
        """A group following a loop operator."""
        if self.s[self.i] != "(":
            raise _Other
        self.i += 1
        return self.group()

    def quantified(self, base):
        s = self.s
        if self.i >= len(s) or s[self.i] not in "*+?{":
            return base
        c = s[self.i]
        self.i += 1
        if c == "*":
            node = _Repeated(base, 0, None)
        elif c == "+":
            node = _Repeated(base, 1, None)
        elif c == "?":
            node = _Repeated(base, 0, 1)
        else:
            close = s.find("}", self.i)
            lo, comma, hi = s[self.i:close].partition(",")
            if close < 0 or not lo.isdecimal() or (hi and not hi.isdecimal()) or not lo.isascii() \
                    or not hi.isascii():
                raise _Other  # {,n} and a literal '{' are left to interegular
            self.i = close + 1
            node = _Repeated(base, int(lo), (int(hi) if hi else None) if comma else int(lo))
        if self.i < len(s) and s[self.i] == "?":  # lazy: the same language
            self.i += 1
        if self.i < len(s) and s[self.i] in "*+?{":
            raise _Other  # a quantifier on a quantifier: interegular's syntax error
        return node

    def cached_class(self) -> _CharGroup:
        """The class opening before the cursor: the written regexes repeat a few classes thousands of times (a
        string's characters, its escapes), so each class text is read once per process."""
        s, end = self.s, self.i
        while s[end] != "]":
            end += 2 if s[end] == "\\" else 1
        text = s[self.i:end]
        group = _CLASSES.get(text)
        if group is None:
            group = self.char_class()
            if len(_CLASSES) >= 4096:
                _CLASSES.clear()
            _CLASSES[text] = group
        self.i = end + 1
        return group

    def char_class(self) -> _CharGroup:
        s = self.s
        negate = s[self.i] == "^"
        if negate:
            self.i += 1
        members = []
        while s[self.i] != "]":
            low = self.class_member()
            if s[self.i] == "-":
                if s[self.i + 1] == "]":  # a trailing '-' is literal
                    self.i += 1
                    members.append(_combine([low, _CharGroup(frozenset("-"), False)], False))
                    continue
                self.i += 1
                high = self.class_member()
                if len(low.chars) != 1 or len(high.chars) != 1 or low.negated or high.negated:
                    raise _Other
                a, b = ord(next(iter(low.chars))), ord(next(iter(high.chars)))
                if a > b:
                    raise _Other
                members.append(_CharGroup(frozenset(chr(k) for k in range(a, b + 1)), False))
            else:
                members.append(low)
        self.i += 1
        if len(members) == 1:
            return _CharGroup(members[0].chars, negate ^ members[0].negated)
        if not members:
            return _CharGroup(frozenset(), negate)
        return _combine(members, negate)

    def class_member(self) -> _CharGroup:
        c = self.s[self.i]
        self.i += 1
        if c == "\\":
            return self.escape(inside_class=True)
        return _literal(c)

    def escape(self, inside_class: bool) -> _CharGroup:
        c = self.s[self.i]
        self.i += 1
        if c == "x":
            digits = self.s[self.i:self.i + 2]
            if len(digits) != 2 or not set(digits) <= _HEX:
                raise _Other
            self.i += 2
            return _CharGroup(frozenset({chr(int(digits, 16))}), False)
        if c.isdigit() or (c in _RESERVED and not (inside_class and c == "b")):
            raise _Other  # octal, back-references, \u, \p, anchors: interegular decides
        if c in _CHAR_GROUPS:
            return _CHAR_GROUPS[c]
        if c in _ASCII_LETTERS or c.isalpha():
            raise _Other  # an unknown letter escape: interegular's syntax error
        return _literal(c)


def plain(pattern: str) -> str:
    """``pattern`` with its loop operators written out as regex syntax (each ``x`` twice: ``x(sx)*``), for a reader
    other than ``read`` (interegular, a grammar, the whole regex of a schema compiled in one piece)."""
    if LOOP not in pattern and LOOP_AFTER not in pattern:
        return pattern
    closing = _closing_parentheses(pattern)
    out, done = [], 0
    for i in syntax_positions(pattern):
        if i < done or pattern[i] not in (LOOP, LOOP_AFTER):
            continue
        out.append(pattern[done:i])
        groups, done = [], i + 1
        for _ in range(2 if pattern[i] == LOOP else 3):
            end = closing[done]
            groups.append(plain(pattern[done:end + 1]))
            done = end + 1
        *head, item, sep = groups
        out.append(f"(?:{'(?:' + head[0] + '|' + item + ')' if head else item}(?:{sep}{item})*)")
    out.append(pattern[done:])
    return "".join(out)


def syntax_positions(pattern: str):
    """The positions of a Python regex's characters outside escapes and character classes (where ``(``, ``|``,
    ``(?=`` mean what they say): a ``]`` first in a class, after its ``^`` or not, is a member of it."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class, i = True, i + 1
            i += pattern.startswith("^", i)
            i += pattern.startswith("]", i)
            continue
        else:
            yield i
        i += 1
