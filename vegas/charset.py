"""Sets of characters, and how each character of a string value is spelled inside a quoted scalar.

A JSON Schema constrains *decoded* strings; the text a model writes spells each character through the layout's
escapes (``"`` as ``\\"``, a newline as ``\\n``, …). Everything that turns a constraint on characters into a regex
over the written text goes through here, so the regexes and ``vegas.layout``'s writer agree on every character.

- ``CharSet``: an immutable set of code points as sorted, disjoint, inclusive ranges (no surrogates: a valid
  UTF-8 text never holds one).
- ``escape_of(c, style)``: the text of one character inside a double-quoted scalar of that style (``"json"`` is
  what ``json.dumps(..., ensure_ascii=False)`` writes; ``"yaml"`` also escapes what YAML readers reject or fold).
- ``spelled(charset, style)``: a regex matching the written form of exactly one character of the set.
- ``literal(text)``: a regex matching exactly ``text``.

Regexes use raw characters (interegular parses no ``\\u`` escapes) and ``\\xNN`` for control characters.
Leaves out: anything longer than one character (whole values are ``vegas.lexical``'s) and surrogates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["CharSet", "ANY", "ESCAPED", "escape_of", "spelled", "literal", "alternation", "class_regex",
           "word_trie"]

_MAX = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)


@dataclass(frozen=True)
class CharSet:
    """Code points as sorted, disjoint, non-adjacent inclusive ranges; surrogates are never members."""

    ranges: tuple[tuple[int, int], ...]

    @staticmethod
    def of(ranges) -> "CharSet":
        cut = []
        for lo, hi in ranges:  # drop the surrogate block from every range
            if hi < _SURROGATES[0] or lo > _SURROGATES[1]:
                cut.append((lo, hi))
            else:
                if lo < _SURROGATES[0]:
                    cut.append((lo, _SURROGATES[0] - 1))
                if hi > _SURROGATES[1]:
                    cut.append((_SURROGATES[1] + 1, hi))
        merged: list[list[int]] = []
        for lo, hi in sorted(cut):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return CharSet(tuple((lo, hi) for lo, hi in merged))

    @staticmethod
    def chars(text: str) -> "CharSet":
        return CharSet.of((ord(c), ord(c)) for c in text)

    def __or__(self, other: "CharSet") -> "CharSet":
        return CharSet.of(self.ranges + other.ranges)

    def __invert__(self) -> "CharSet":
        out, start = [], 0
        for lo, hi in self.ranges:
            if lo > start:
                out.append((start, lo - 1))
            start = hi + 1
        if start <= _MAX:
            out.append((start, _MAX))
        return CharSet.of(out)

    def __sub__(self, other: "CharSet") -> "CharSet":
        return self & ~other

    def __and__(self, other: "CharSet") -> "CharSet":
        out, i, j = [], 0, 0
        a, b = self.ranges, other.ranges
        while i < len(a) and j < len(b):
            lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return CharSet(tuple(out))

    def __contains__(self, char: str) -> bool:
        c = ord(char)
        i = bisect.bisect_right(self.ranges, (c, _MAX + 1)) - 1  # the last range starting at or before c
        return i >= 0 and c <= self.ranges[i][1]

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def members(self) -> list[str]:
        """Every character (only for small sets)."""
        return [chr(c) for lo, hi in self.ranges for c in range(lo, hi + 1)]

    def size(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.ranges)


ANY = ~CharSet(())

# ---- how one character is written inside a double-quoted scalar ----------------------------------------------

_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_CONTROLS = CharSet.of([(0, 0x1F)])
# Characters YAML readers reject raw (outside YAML's printable set) or read as line breaks inside a quoted
# scalar (NEL, LINE/PARAGRAPH SEPARATOR, folded to spaces), and the byte order mark.
_YAML_UNPRINTABLE = CharSet.of([(0x7F, 0x9F), (0x2028, 0x2029), (0xFEFF, 0xFEFF), (0xFFFE, 0xFFFF)])
ESCAPED = {"json": _CONTROLS | CharSet.chars('"\\'), "yaml": _CONTROLS | CharSet.chars('"\\') | _YAML_UNPRINTABLE}


def escape_of(char: str, style: str) -> str:
    """``char`` as written inside a double-quoted scalar: ``json.dumps``'s escapes (lowercase ``\\u00xx`` for
    controls without a short form), plus ``\\u`` escapes for YAML's unprintable characters in the yaml style."""
    if char in _SHORT:
        return _SHORT[char]
    if char in ESCAPED[style]:
        return f"\\u{ord(char):04x}"
    return char


# ---- regexes ----------------------------------------------------------------------------------------------------

_META = set(".^$*+?{}[]\\|()")
_CLASS_META = set("\\]^-[")


def _char_regex(c: int, in_class: bool) -> str:
    if c < 0x20 or c == 0x7F:
        return f"\\x{c:02x}"
    ch = chr(c)
    if ch in (_CLASS_META if in_class else _META):
        return "\\" + ch
    return ch


def literal(text: str) -> str:
    """A regex matching exactly ``text``."""
    return text.translate(_LITERAL_ESCAPES)


# ``_char_regex`` outside a class for every character it changes (one ``str.translate``: a schema's keys)
_LITERAL_ESCAPES = {c: _char_regex(c, False) for c in [*range(0x20), 0x7F, *map(ord, _META)]}


def class_regex(charset: CharSet) -> str:
    """A regex character class for the set (no escaping of the layout: the characters as they are). Large sets
    are written as the negation of their complement: regex parsers expand a class into its members, and
    ``[ -\U0010ffff]`` has a million of them (interegular took 7 s for one such class, 0.03 s for ``[^"]``);
    the negation also admits surrogates, which no UTF-8 text holds."""
    if not charset:
        raise ValueError("empty character set")
    if len(charset.ranges) == 1 and charset.ranges[0][0] == charset.ranges[0][1]:
        return _char_regex(charset.ranges[0][0], False)
    complement = ~charset
    if complement.size() < charset.size():
        return "[^" + _ranges(complement) + "]" if complement else "[^\x00]|\x00"
    return "[" + _ranges(charset) + "]"


def _ranges(charset: CharSet) -> str:
    parts = []
    for lo, hi in charset.ranges:
        if lo == hi:
            parts.append(_char_regex(lo, True))
        elif hi == lo + 1:
            parts.append(_char_regex(lo, True) + _char_regex(hi, True))
        else:
            parts.append(f"{_char_regex(lo, True)}-{_char_regex(hi, True)}")
    return "".join(parts)


def word_trie(words) -> dict:
    """The trie of ``words``: nested dicts keyed by character; the key ``""`` marks the end of a word."""
    trie: dict = {}
    for word in words:
        node = trie
        for c in word:
            node = node.setdefault(c, {})
        node[""] = {}
    return trie


def alternation(texts) -> str:
    """A compact regex matching exactly the given strings: a trie whose sibling leaves share one class
    (``\\u001[0-9a-f]`` rather than sixteen alternatives)."""
    return _trie_regex(word_trie(texts))


def _trie_regex(node: dict) -> str:
    ends = "" in node
    leaves = sorted(c for c, child in node.items() if c and set(child) == {""})
    inner = sorted(c for c, child in node.items() if c and set(child) != {""})
    parts = []
    if leaves:
        parts.append(class_regex(CharSet.chars("".join(leaves))))
    parts += [literal(c) + _trie_regex(node[c]) for c in inner]
    if not parts:
        return ""
    body = parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"
    return f"({body})?" if ends else body


@lru_cache(maxsize=4096)
def spelled(charset: CharSet, style: str) -> str:
    """A regex matching the written form of exactly one character of ``charset`` inside a double-quoted scalar
    of ``style``: the characters written raw as one class, the escaped ones as their escapes."""
    raw = charset - ESCAPED[style]
    escaped = charset & ESCAPED[style]
    parts = [class_regex(raw)] if raw else []
    if escaped:
        parts.append(alternation(escape_of(c, style) for c in escaped.members()))
    if not parts:
        raise ValueError("empty character set")
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"
