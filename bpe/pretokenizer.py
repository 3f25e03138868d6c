"""The pre-tokenizer as an automaton: which boundaries the split regexes draw in any text.

A byte-level BPE tokenizer first cuts the text into *pieces* with a regex (GPT-2's ``'s|'t|…| ?\\p{L}+|…``),
then runs BPE inside each piece; merges never cross a piece boundary. Write ``#`` at every boundary: the
*marked* text. This module builds the DFA of all correctly marked texts, over an alphabet of character
*symbols* plus ``#`` — so "is this boundary here?" becomes "is ``#`` allowed here?", answerable before the
characters that decide it have been read (the DFA simply keeps both possibilities alive).

Semantics modelled (HF ``tokenizers`` ``Split``; ``ByteLevel(use_regex=True)`` is the GPT-2 pattern with
``isolated``): scanning left to right, the span at a position is the match of the *first* top-level alternative
that matches there, at that alternative's *longest* valid length; characters where no alternative matches form
gap spans. The behaviour then joins spans into pieces (``merged_with_previous``/``_next``, ``contiguous``: a
span boundary that is no piece boundary is an unmarked step of the construction) or drops them (``removed``:
text holding a dropped span never decodes back from the runtime's tokens, so it is not in the language);
``invert`` swaps which spans count as matches. Several rules (SmolLM2: digits, then GPT-2) apply in sequence, each
inside the pieces of the previous one, seeing a piece's end as the end of the text.

Assumptions, checked against the runtime in the tests: each alternative's backtracking match is its longest
match (true of every pre-tokenizer pattern in use: greedy quantifiers over disjoint classes); lookahead only as
a one-character class at the end of an alternative (``\\s+(?!\\S)``), and ``$`` only there too (DeepSeek's
``\\s+$``): the runtime's regex engine (Oniguruma, Ruby syntax) reads ``$`` as "before a newline or at the
end", which is the lookahead ``(?=\\n)`` that also holds at the end of the text; no alternative matches the empty
string. Patterns outside this get ``UnsupportedTokenizerError``.

Characters are reduced to *symbols* (``SymbolAlphabet``), the coarsest partition of the code points that every
pattern of the rule set treats alike, found by refining a fixed one:

- each ASCII character is its own symbol;
- the other characters fall into *categories*: their Unicode general category (Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me,
  Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po, Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Co, Cn) and whether they are
  White_Space (``\\s``), plus the two non-ASCII letters that case-insensitive matching folds onto ASCII (``ſ`` -> s,
  ``K`` (Kelvin) -> k). Which category a character is in is what the runtime's own regex engine says
  (``bpe.unicode_classes.category_cells`` probes it on every code point): its Unicode is newer than Python's
  ``unicodedata``, and the runtime is the oracle. Every ``\\p{..}`` of a general category or of a union of them
  (``\\p{L}``, ``\\p{S}``, ``\\p{LC}``, long names such as ``\\p{Symbol}``) is a union of categories;
- every *named set* — the non-ASCII members of one bracket class (its ranges and literal characters, e.g.
  DeepSeek's ``[一-龥ࠀ-一가-퟿]``), one non-ASCII character written outside a class (Metaspace's ``▁``), or the
  non-ASCII members of a script or other property (``\\p{Han}``, ``\\p{Hiragana}``: read from the runtime) —
  splits the categories it cuts: a symbol per non-empty cell of (category, membership in each named set).

A pattern tests a character only through its category (``\\p{L}``, ``\\s``...) and the named sets it writes, so
every character of a cell matches exactly where the others do. Patterns naming no non-ASCII set keep the
160 fixed symbols (with the tables of tokenizers 0.23.3). ``Segmentation.symbols`` maps code points to symbols for one rule set.

The construction is a subset construction over *threads*, each one hypothesis about the current piece plus
the obligations earlier pieces left behind ("alternative j must not produce a longer match here").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from automata import DFA, Alphabet, from_regex
from automata.errors import CanonmergeError
from automata.parse import syntax_positions
from bpe.errors import UnsupportedTokenizerError
from bpe.model import SplitRule
from bpe.unicode_classes import GENERAL_CATEGORIES, category_cells, general_categories, property_members

__all__ = ["Segmentation", "SymbolAlphabet", "build_segmentation", "symbol_alphabet"]

# ----------------------------------------------------------------------------------------------------------
# Symbols.

# Fixed symbols: 0..127 ASCII; the two letters (?i:) folds onto ASCII; then one per *cell* of the non-ASCII
# characters: its general category (``GENERAL_CATEGORIES``) and whether it is White_Space, as the runtime's
# regex engine says, for the ~31 cells that hold a character (``_cells()``).
LONG_S, KELVIN = 128, 129  # ſ (Ll), which (?i:) folds onto s, and the Kelvin sign (Lu), folded onto k
FIRST_CELL_SYMBOL = 130
MAX_SYMBOLS = 4096  # the refined alphabet's limit (the table is uint16 beyond 255 symbols)
# In the regexes rewritten over symbols, each non-ASCII symbol is one character: a private-use placeholder
# (the two folded letters stand for themselves, which (?i:) rewriting writes literally).
_FIRST_PLACEHOLDER = 0xE000  # symbol s >= 128 is chr(0xE000 + s - 128) (up to MAX_SYMBOLS stays in the PUA)
# The class escapes a pattern may write, besides \p{name} of a general category or one of its unions (any
# spelling Oniguruma reads: \p{S}, \p{Symbol}, \p{^S}) and \p{Script} (any property the runtime knows: its
# members are probed and become a named set): \s (White_Space). ``CLASSES`` lists the common ones (tests).
WHITE_SPACE = r"\s"
CLASSES = (r"\p{L}", r"\p{Lu}", r"\p{Ll}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}", r"\p{M}", r"\p{N}", r"\p{P}", r"\s")


@lru_cache(maxsize=1)
def _cells() -> tuple[tuple[str, bool], ...]:
    """The (general category, White_Space) cells that hold a non-ASCII character, in order; symbol
    ``FIRST_CELL_SYMBOL + i`` is cell i."""
    codes = np.unique(category_cells()[128:])
    return tuple((GENERAL_CATEGORIES[c // 2], bool(c % 2)) for c in codes.tolist() if c != 255)


def num_category_symbols() -> int:
    """ASCII, the two folded letters, and the cells: the symbols of a rule set that names no non-ASCII set."""
    return FIRST_CELL_SYMBOL + len(_cells())


def _category_of_symbol(symbol: int) -> tuple[str, bool]:
    """(general category, White_Space) of the characters of a non-ASCII category symbol."""
    if symbol == LONG_S:
        return "Ll", False
    if symbol == KELVIN:
        return "Lu", False
    return _cells()[symbol - FIRST_CELL_SYMBOL]


def _in_class(key: str, category: str, white: bool) -> bool:
    r"""Whether a character of ``category`` (White_Space or not) is in the class escape ``key`` (``\s`` or
    ``\p{name}`` of a general category)."""
    if key == WHITE_SPACE:
        return white
    return category in general_categories(key[3:-1])


# A named set: the non-ASCII code points one class (or one literal character) names, as sorted, disjoint,
# non-adjacent inclusive ranges.
CodePointSet = tuple[tuple[int, int], ...]


@lru_cache(maxsize=1)
def _category_symbols() -> np.ndarray:
    """uint8[0x110000]: the fixed symbol of every code point: ASCII itself, the others the category symbol of
    their general category and White_Space as the runtime's regex engine says (``bpe.unicode_classes``;
    surrogates, which no text holds: Cn's)."""
    cells = category_cells()
    symbol_of_code = np.zeros(256, dtype=np.int64)
    for i, (gc, white) in enumerate(_cells()):
        symbol_of_code[2 * GENERAL_CATEGORIES.index(gc) + white] = FIRST_CELL_SYMBOL + i
    symbol_of_code[255] = symbol_of_code[2 * GENERAL_CATEGORIES.index("Cn")]  # (surrogates)
    table = symbol_of_code[cells]
    table[:128] = np.arange(128)
    table[0x17F], table[0x212A] = LONG_S, KELVIN
    return table.astype(np.uint8)


@lru_cache(maxsize=1)
def _category_sizes() -> np.ndarray:
    return np.bincount(_category_symbols(), minlength=num_category_symbols())


@dataclass(frozen=True, eq=False)
class SymbolAlphabet:
    """The symbols of one rule set (see the module docstring). Build with ``symbol_alphabet``.

    ``table``: uint8[0x110000] (uint16 beyond 255 symbols), the symbol of every code point; ``category``:
    int[size], the category symbol each symbol refines (itself for ASCII and category symbols); ``members``:
    the symbols that make up each named set.
    """

    table: np.ndarray
    category: np.ndarray
    members: dict[CodePointSet, tuple[int, ...]]

    @property
    def size(self) -> int:
        return len(self.category)

    @property
    def end_of_text(self) -> int:
        """The index that stands for the end of the text where a lookahead reads the next symbol."""
        return self.size

    def placeholder(self, symbol: int) -> str:
        """The character that stands for ``symbol`` in a regex rewritten over symbols."""
        if symbol < 128:
            return chr(symbol)
        if symbol in (LONG_S, KELVIN):
            return "\u017f" if symbol == LONG_S else "\u212a"
        return chr(_FIRST_PLACEHOLDER + symbol - 128)

    def written(self, symbol: int) -> str:
        """``symbol`` as one literal inside ``[...]`` of a rewritten regex."""
        return _regex_char(symbol) if symbol < 128 else self.placeholder(symbol)

    @cached_property
    def regex_alphabet(self) -> Alphabet:
        """The alphabet of the rewritten regexes' DFAs: symbol i is its placeholder."""
        return Alphabet.of_chars([self.placeholder(s) for s in range(self.size)])

    def class_symbols(self, key: str) -> np.ndarray:
        r"""bool[size]: the symbols whose characters are in the class escape ``key`` (``\s``, or ``\p{name}`` of
        a general category or a union of them): the ASCII characters the runtime's regex engine puts in it, and
        every symbol refining a category symbol in it."""
        cached = self._class_symbols.get(key)
        if cached is None:
            ascii_cells = category_cells()[:128]
            cached = np.zeros(self.size, dtype=bool)
            for c in range(128):
                cached[c] = _in_class(key, GENERAL_CATEGORIES[ascii_cells[c] // 2], bool(ascii_cells[c] % 2))
            inside = {cat: _in_class(key, *_category_of_symbol(cat)) for cat in set(self.category[128:].tolist())}
            cached[128:] = [inside[cat] for cat in self.category[128:].tolist()]
            self._class_symbols[key] = cached
        return cached

    @cached_property
    def _class_symbols(self) -> dict[str, np.ndarray]:
        return {}

    def set_symbols(self, ascii: tuple[tuple[int, int], ...], named: CodePointSet) -> np.ndarray:
        """bool[size]: the symbols of a set of characters given as ASCII ranges and a named set."""
        out = np.zeros(self.size, dtype=bool)
        for lo, hi in ascii:
            out[lo : hi + 1] = True
        out[list(self.members.get(named, ()))] = True
        return out


@lru_cache(maxsize=16)
def symbol_alphabet(named_sets: tuple[CodePointSet, ...] = ()) -> SymbolAlphabet:
    """The category symbols refined by ``named_sets``: a symbol per non-empty cell of (category, membership in
    each named set). Cells outside every named set keep their category's symbol; a category that named sets
    cover entirely hands its symbol to its first cell; every other cell gets a new symbol (after the fixed ones)."""
    categories = _category_symbols()
    identity = np.arange(num_category_symbols())
    if not named_sets:
        return SymbolAlphabet(categories, identity, {})
    named = np.unique(np.concatenate([np.arange(lo, hi + 1) for ranges in named_sets for lo, hi in ranges]))

    def member(ranges: CodePointSet) -> np.ndarray:
        """bool over ``named``: the code points in ``ranges``."""
        inside = np.zeros(len(named), dtype=bool)
        for lo, hi in ranges:
            inside[np.searchsorted(named, lo):np.searchsorted(named, hi, side="right")] = True
        return inside

    # Refine one named set at a time: cells are numbered in the order of (category, membership bits).
    cell_of = categories[named].astype(np.int64)
    for ranges in named_sets:
        cell_of = np.unique(cell_of * 2 + member(ranges), return_inverse=True)[1].ravel()
    first = np.unique(cell_of, return_index=True)[1]
    covered = np.bincount(categories[named], minlength=num_category_symbols()) == _category_sizes()
    cell_symbol = np.empty(len(first), dtype=np.int64)
    category = identity.tolist()
    for cell, cat in enumerate(categories[named[first]].tolist()):
        if covered[cat]:
            covered[cat] = False  # the first cell of a covered category takes its symbol
            cell_symbol[cell] = cat
        else:
            cell_symbol[cell] = len(category)
            category.append(cat)
    if len(category) > MAX_SYMBOLS:
        raise UnsupportedTokenizerError(f"pre-tokenizer patterns split the characters into {len(category)} symbols "
                                        f"(at most {MAX_SYMBOLS})")
    table = categories.astype(np.uint8 if len(category) < 256 else np.uint16)
    table[named] = cell_symbol[cell_of]
    members = {ranges: tuple(np.unique(cell_symbol[cell_of[member(ranges)]]).tolist()) for ranges in named_sets}
    return SymbolAlphabet(table, np.array(category), members)


@dataclass(frozen=True, eq=False)
class Segmentation:
    """DFA over symbols plus ``#`` (the last column, ``hash_symbol``) of correctly marked texts.

    ``transitions`` int32[states, symbols + 1] (-1: rejected); ``final[s]``: the text may end in s; state 0 is
    the start; ``symbols`` (uint8 or uint16[0x110000]): the symbol of each code point. Trimmed: every state can
    still reach a final state. A tokenizer without split rules has one state that loops on every symbol and
    never allows ``#``.
    """

    transitions: np.ndarray
    final: np.ndarray
    symbols: np.ndarray = field(default_factory=lambda: symbol_alphabet().table)

    @property
    def num_states(self) -> int:
        return len(self.final)

    @property
    def hash_symbol(self) -> int:
        """The column of ``#``, after the character symbols."""
        return self.transitions.shape[1] - 1

    def marks(self, text: str) -> list[str] | None:
        """Pieces of ``text`` as this automaton draws them (for tests): one pass over the text, keeping every
        boundary choice still alive (the correct marking is the one that reaches a final state)."""
        symbols = self.symbols[[ord(c) for c in text]].tolist()
        # Dynamic programming over positions: reachable (state, boundary positions) — the marking is unique.
        frontier = {0: []}
        for i, sym in enumerate(symbols):
            nxt: dict[int, list[int]] = {}
            for s, cuts in frontier.items():
                if i > 0:
                    h = int(self.transitions[s, self.hash_symbol])
                    if h >= 0:
                        t = int(self.transitions[h, sym])
                        if t >= 0:
                            nxt.setdefault(t, cuts + [i])
                t = int(self.transitions[s, sym])
                if t >= 0:
                    nxt.setdefault(t, cuts)
            frontier = nxt
        ends = [cuts for s, cuts in frontier.items() if self.final[s]]
        if not ends:
            return None
        bounds = [0, *ends[0], len(text)]
        return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


# ----------------------------------------------------------------------------------------------------------
# Reading a split pattern: its classes, and the alternatives rewritten over the symbol alphabet.
#
# A pattern is cut into *parts*: text passed on unchanged to the regex over symbols (one character, or one
# escape, at a time), and classes (``_Class``): bracket classes, the Unicode class escapes, and non-ASCII
# characters written outside a class. The non-ASCII members of each class are a named set; once the alphabet
# is known, a class is rewritten as ``[...]`` over its ASCII members and the placeholders of its symbols.


@dataclass(frozen=True)
class _Class:
    negated: bool = False
    ascii: tuple[tuple[int, int], ...] = ()  # ASCII members: inclusive ranges
    unicode: tuple[tuple[str, bool], ...] = ()  # class escapes among the members (\s, \p{general category}), negated?
    named: CodePointSet = ()  # non-ASCII members written as characters or ranges
    properties: tuple[tuple[str, bool], ...] = ()  # \p{name} of other properties (scripts...), negated?


@lru_cache(maxsize=64)
def _property_sets(name: str) -> tuple[tuple[tuple[int, int], ...], CodePointSet]:
    r"""The members of the runtime's ``\p{name}``: ASCII ranges, and the non-ASCII ones (a named set)."""
    members = property_members(name[3:-1] if name.startswith("\\p{") else name)
    ranges = _ranges(np.flatnonzero(members))
    return (tuple((lo, min(hi, 127)) for lo, hi in ranges if lo < 128),
            tuple((max(lo, 128), hi) for lo, hi in ranges if hi >= 128))


def _ranges(code_points: np.ndarray) -> list[tuple[int, int]]:
    """Sorted code points as maximal inclusive ranges."""
    if not len(code_points):
        return []
    cuts = np.flatnonzero(np.diff(code_points) != 1)
    starts = np.r_[code_points[0], code_points[cuts + 1]]
    ends = np.r_[code_points[cuts], code_points[-1]]
    return list(zip(starts.tolist(), ends.tolist()))


# The control-character escapes of Oniguruma's Ruby syntax (rewritten as \xHH for the regex reader over symbols).
_CHARACTER_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D, "a": 0x07, "e": 0x1B}


# The key of a general-category class: the short name of the categories (one, or a union).
_CATEGORY_KEY = {(gc,): "\\p{" + gc + "}" for gc in GENERAL_CATEGORIES}
_CATEGORY_KEY.update({general_categories(u): "\\p{" + u + "}" for u in ("L", "LC", "M", "N", "P", "S", "Z", "C")})


def _is_property(key: str) -> bool:
    r"""Whether a class key is a property other than \s and the general categories (a named set)."""
    return key != WHITE_SPACE and general_categories(key[3:-1]) is None


def _read_escape(pattern: str, i: int) -> tuple[str | int, bool, int]:
    """The escape at ``pattern[i]`` (a backslash): ``(key of CLASSES, negated, end)`` for a class escape,
    ``(code point, False, end)`` for a character."""
    c = pattern[i + 1 : i + 2]
    if c in ("p", "P") and pattern[i + 2 : i + 3] == "{":
        end = pattern.find("}", i) + 1
        if not end:
            raise UnsupportedTokenizerError(f"pre-tokenizer class {pattern[i:]!r} is not closed")
        name, negated = pattern[i + 3 : end - 1], c == "P"
        if name.startswith("^"):  # Oniguruma's \p{^name}: \P{name}
            name, negated = name[1:], not negated
        if not name:
            raise UnsupportedTokenizerError(f"pre-tokenizer class {pattern[i:end]} is not supported")
        categories = general_categories(name)
        if categories is None:  # a script or another property: its members are read from the runtime
            property_members(name)  # (refused here, naming it, if the runtime does not know it)
            return "\\p{" + name + "}", negated, end
        return _CATEGORY_KEY[categories], negated, end
    if c in ("s", "S"):
        return r"\s", c == "S", i + 2
    if c in _CHARACTER_ESCAPES:
        return _CHARACTER_ESCAPES[c], False, i + 2
    if c == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", pattern[i + 2 : i + 6]):
        return int(pattern[i + 2 : i + 6], 16), False, i + 6
    hexadecimal = re.match(r"x(?:\{([0-9a-fA-F]{1,8})\}|([0-7][0-9a-fA-F]))", pattern[i + 1 :])
    if hexadecimal and int(hexadecimal.group(1) or hexadecimal.group(2), 16) <= 0x10FFFF:
        # (\xHH above 7F is a byte of a UTF-8 sequence to Oniguruma: not supported)
        return int(hexadecimal.group(1) or hexadecimal.group(2), 16), False, i + 1 + hexadecimal.end()
    if not c or (c.isascii() and c.isalnum()):
        raise UnsupportedTokenizerError(f"pre-tokenizer escape {pattern[i : i + 2]!r} is not supported")
    return ord(c), False, i + 2


def _read_class(pattern: str, i: int) -> tuple[_Class, int]:
    """The bracket class opening at ``pattern[i]`` and the index after it. Members: characters, escapes, ranges
    (an ASCII-to-non-ASCII range splits into both parts), Unicode class escapes; a ``]`` first is a member."""
    start, i = i, i + 1
    negated = pattern[i : i + 1] == "^"
    i += negated
    ascii_members, unicode, named, properties = [], [], [], []
    first = True
    while True:
        if i >= len(pattern):
            raise UnsupportedTokenizerError(f"pre-tokenizer class {pattern[start:]!r} is not closed")
        c = pattern[i]
        if c == "]" and not first:
            break
        first = False
        if c == "[" or pattern.startswith("&&", i):
            raise UnsupportedTokenizerError(f"pre-tokenizer class {pattern[start:]!r}: nested classes and "
                                            "intersections are not supported")
        if c == "\\":
            low, negated_member, i = _read_escape(pattern, i)
            if isinstance(low, str):
                (properties if _is_property(low) else unicode).append((low, negated_member))
                continue
        else:
            low, i = ord(c), i + 1
        high = low
        if pattern[i : i + 1] == "-" and pattern[i + 1 : i + 2] not in ("]", ""):
            if pattern[i + 1] == "\\":
                high, _, i = _read_escape(pattern, i + 1)
                if isinstance(high, str):
                    raise UnsupportedTokenizerError(f"pre-tokenizer range ending in a class in {pattern!r}")
            else:
                high, i = ord(pattern[i + 1]), i + 2
            if high < low:
                raise UnsupportedTokenizerError(f"pre-tokenizer range {chr(low)}-{chr(high)} in {pattern!r} is empty")
        if low < 128:
            ascii_members.append((low, min(high, 127)))
        if high >= 128:
            named.append((max(low, 128), high))
    return _Class(negated, tuple(ascii_members), tuple(unicode), _disjoint(named), tuple(properties)), i + 1


def _disjoint(ranges: list[tuple[int, int]]) -> CodePointSet:
    """Inclusive ranges as sorted, disjoint, non-adjacent ones (so equal sets are equal tuples)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _pattern_parts(pattern: str) -> list[str | _Class]:
    """``pattern`` cut into classes and pass-through text (see above); ASCII escapes are written the way the
    regex reader over symbols reads them."""
    parts: list[str | _Class] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[":
            cls, i = _read_class(pattern, i)
            parts.append(cls)
        elif c == "\\":
            value, negated, i = _read_escape(pattern, i)
            if isinstance(value, str):
                parts.append(_Class(properties=((value, negated),)) if _is_property(value)
                             else _Class(unicode=((value, negated),)))
            elif value >= 128:
                parts.append(_Class(named=((value, value),)))
            else:
                parts.append(_regex_char(value))
        elif ord(c) >= 128:
            parts.append(_Class(named=((ord(c), ord(c)),)))
            i += 1
        else:
            parts.append(c)
            i += 1
    return parts


def _regex_char(code: int) -> str:
    """An ASCII character as one literal in a regex, in or out of ``[...]``."""
    return re.escape(chr(code)) if 0x20 <= code < 0x7F else f"\\x{code:02x}"


def _named_sets(rules: tuple[SplitRule, ...]) -> tuple[CodePointSet, ...]:
    """Every named set of the rules' patterns, once each, in order."""
    sets = []
    for rule in rules:
        for part in _pattern_parts(_fold_extras(rule.pattern)):
            if isinstance(part, _Class):
                sets += [part.named] + [_property_sets(name)[1] for name, _ in part.properties]
    return tuple(dict.fromkeys(named for named in sets if named))


def _to_symbol_regex(parts: list[str | _Class], alphabet: SymbolAlphabet) -> str:
    """A pattern's parts over the symbol placeholders: each class as ``[...]`` of its ASCII members and the
    placeholders of the symbols it holds (interegular knows no \\p{..}, and the symbols refine no class)."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        members = alphabet.set_symbols(part.ascii, part.named)
        for key, negated in part.unicode:
            members |= alphabet.class_symbols(key) ^ negated
        for name, negated in part.properties:
            members |= alphabet.set_symbols(*_property_sets(name)) ^ negated
        if part.negated:
            members = ~members
        if not members.any():
            raise UnsupportedTokenizerError("a pre-tokenizer class that matches no character is not supported")
        out.append("[" + "".join(alphabet.written(s) for s in np.flatnonzero(members).tolist()) + "]")
    return "".join(out)


@dataclass(frozen=True)
class _Alternative:
    body: np.ndarray  # int32[states, symbols]; state 0 start
    accepting: np.ndarray
    lookahead: np.ndarray | None  # bool[symbols + 1] (last: end of text): where a match may end
    dead: int  # the absorbing non-accepting state added to make ``body`` total


def _top_level_split(pattern: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i in syntax_positions(pattern):
        c = pattern[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    parts.append(pattern[start:])
    return parts


_LOOKAHEAD = re.compile(r"^(.*)\(\?([!=])(\\[sSpPdDwW](?:\{\w+\})?|\[[^\]]*\]|.)\)$", re.DOTALL)


def _fold_extras(text: str) -> str:
    """Inside ``(?i:...)`` Oniguruma also matches ``ſ`` for s and the Kelvin sign for k (Unicode case folding);
    interegular folds ASCII only, so spell those two out. Non-ASCII characters written there would fold onto
    others: refused."""
    out, i = [], 0
    while (start := text.find("(?i:", i)) >= 0:
        depth, j = 0, start
        while True:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1 + (text[j] == "\\")
        if any(isinstance(part, _Class) and part.named for part in _pattern_parts(text[start:j])):
            raise UnsupportedTokenizerError(f"pre-tokenizer {text!r}: non-ASCII characters inside (?i:...) are not "
                                            "supported")
        body = re.sub(r"(?<![\\\[])[sS]", "[s\u017f]", text[start:j])
        body = re.sub(r"(?<![\\\[])[kK]", "[k\u212a]", body)
        out.append(text[i:start] + body)
        i = j
    return "".join(out) + text[i:]


def _alternative(text: str, pattern: str, alphabet: SymbolAlphabet) -> _Alternative:
    """One top-level alternative over the symbols: its body's DFA, and where a match of it may end (a final
    one-character lookahead; a final ``$``: before a newline or at the end of the text)."""
    lookahead = None
    text = _fold_extras(text)
    m = _LOOKAHEAD.match(text)
    if m:
        text, kind, cls = m.group(1), m.group(2), m.group(3)
        one = from_regex(_to_symbol_regex(_pattern_parts(cls), alphabet), alphabet.regex_alphabet, minimise=False)
        in_class = np.array([one.accepts([s]) for s in range(alphabet.size)])
        ends_ok = ~in_class if kind == "!" else in_class
        lookahead = np.append(ends_ok, kind == "!")  # end of text: (?!X) holds, (?=X) fails
    if "(?=" in text or "(?!" in text or "(?<" in text:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: lookaround other than a final one-character "
                                        "lookahead is not supported")
    parts = _pattern_parts(text)
    if lookahead is None and parts[-1:] == ["$"]:
        parts = parts[:-1]
        lookahead = np.append(np.arange(alphabet.size) == ord("\n"), True)
    if "^" in parts or "$" in parts:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: anchors other than a final $ are not supported")
    try:
        dfa = from_regex(_to_symbol_regex(parts, alphabet), alphabet.regex_alphabet)
    except CanonmergeError as exc:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: alternative {text!r}: {exc}") from None
    if dfa.accepting[dfa.start]:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: alternative {text!r} matches the empty string")
    # Minimised DFAs start in state 0; add an explicit dead state so that every body is total.
    dead = dfa.num_states
    body = np.vstack([np.where(dfa.transitions < 0, dead, dfa.transitions),
                      np.full((1, alphabet.size), dead)]).astype(np.int32)
    return _Alternative(body, np.append(dfa.accepting, False), lookahead, dead)


BEHAVIORS = ("isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous")


def _rule_alternatives(rule: SplitRule, alphabet: SymbolAlphabet) -> list[_Alternative]:
    if rule.behavior not in BEHAVIORS:
        raise UnsupportedTokenizerError(f"pre-tokenizer split behaviour {rule.behavior!r} is not supported "
                                        f"(supported: {', '.join(BEHAVIORS)})")
    return [_alternative(alt, rule.pattern, alphabet) for alt in _top_level_split(rule.pattern)]


# ----------------------------------------------------------------------------------------------------------
# The thread machine of one rule.
#
# A thread is (hypothesis, current, obligations):
#   hypothesis  "m": the current piece is a match; "g": it is a gap (no alternative matches inside it; a gap
#               is always followed by a match).
#   current     for "m": (body states of every alternative on the piece so far, best = smallest alternative
#               with a valid match at a shorter length, accepted_now = alternatives whose body accepts at the
#               current length); for "g": None. Length 0 is represented by accepted_now = None.
#   obligations frozenset of (states, bound, waiting): alternatives 0..bound started at an earlier position
#               must never produce a valid match; ``waiting`` holds those whose body accepted and whose
#               lookahead is decided by the next symbol. A piece end whose alternative is decided by the
#               next symbol's lookahead is an obligation with bound = -1 - (candidates tuple) (see _resolve).

_INF = 1 << 30


class _Rule:
    def __init__(self, alternatives: list[_Alternative], end_of_text: int, behavior: str = "isolated",
                 invert: bool = False):
        self.alts = alternatives
        self.end_of_text = end_of_text  # the symbol index a lookahead reads at the end of the text
        self.n = len(alternatives)
        self.starts = tuple(0 for _ in alternatives)
        self.dead = tuple(a.dead for a in alternatives)
        self.behavior = behavior
        self.invert = invert

    # Behaviour (HF ``NormalizedString::split``): the regex cuts the text into spans, matches ("m") and the gaps
    # between them ("g"); a span is *flagged* when it is a match, or a gap under ``invert``. The behaviour
    # decides which span boundaries are piece boundaries and which spans are dropped.
    def flagged(self, hypothesis: str) -> bool:
        return (hypothesis == "m") != self.invert

    def kept(self, hypothesis: str) -> bool:
        """Spans of this kind stay in the text. ``removed`` drops flagged spans, so text holding one never comes
        back from decoding what the runtime encodes: such text is not allowed at all."""
        return not (self.behavior == "removed" and self.flagged(hypothesis))

    def boundary(self, before: str, after: str) -> bool:
        """The boundary between a span of kind ``before`` and one of kind ``after`` is a piece boundary."""
        a, b = self.flagged(before), self.flagged(after)
        if self.behavior == "contiguous":
            return a != b
        if self.behavior == "merged_with_previous":
            return not (b and not a)
        if self.behavior == "merged_with_next":
            return not (a and not b)
        return True  # isolated, removed

    def valid_end(self, j: int, next_symbol: int) -> bool:
        """A body match of alternative j ending before ``next_symbol`` (``end_of_text``) is valid."""
        la = self.alts[j].lookahead
        return True if la is None else bool(la[next_symbol])

    def start_thread(self, hypothesis: str, obligations: frozenset) -> tuple:
        if hypothesis == "g":
            return ("g", None, obligations)
        return (hypothesis, (self.starts, _INF, None), obligations)

    def initial(self) -> frozenset:
        return frozenset({self.start_thread("m", frozenset()), self.start_thread("g", frozenset())})

    # Obligations -------------------------------------------------------------------------------------------
    def _advance_obligation(self, obligation, symbol: int):
        """None if violated; () if discharged; else the advanced obligation."""
        states, bound, waiting = obligation
        if isinstance(bound, tuple):  # a piece end waiting for this symbol to decide its alternative
            candidates, best = bound
            chosen = next((j for j in candidates if self.valid_end(j, symbol)), None)
            if chosen is None or chosen > best:
                return None
            bound = chosen
            states = states[: bound + 1]
            waiting = ()
        elif any(self.valid_end(j, symbol) for j in waiting):
            return None
        if symbol == self.end_of_text:
            return ()
        new_states = tuple(int(self.alts[j].body[q, symbol]) for j, q in enumerate(states))
        new_waiting = []
        for j, q in enumerate(new_states):
            if self.alts[j].accepting[q]:
                if self.alts[j].lookahead is None:
                    return None
                new_waiting.append(j)
        if new_states == self.dead[: len(new_states)]:
            return ()
        return (new_states, bound, tuple(new_waiting))

    def _advance_obligations(self, obligations: frozenset, symbol: int):
        out = set()
        for ob in obligations:
            nxt = self._advance_obligation(ob, symbol)
            if nxt is None:
                return None
            if nxt:
                out.add(nxt)
        return frozenset(out)

    # Steps -------------------------------------------------------------------------------------------------
    def step(self, thread: tuple, symbol: int) -> tuple | None:
        """Read one character symbol inside the current piece."""
        hypothesis, current, obligations = thread
        if hypothesis == "g":
            # No alternative may match starting at this position: a fresh obligation over all of them.
            obligations = obligations | {(self.starts, self.n - 1, ())}
        obligations = self._advance_obligations(obligations, symbol)
        if obligations is None:
            return None
        if hypothesis == "g":
            return ("g", True, obligations)  # current: None while the gap is empty, True once it is not
        states, best, accepted_now = current
        for j in accepted_now or ():
            if self.valid_end(j, symbol):
                best = min(best, j)
        states = tuple(
            int(self.alts[j].body[q, symbol]) if j <= best else self.alts[j].dead for j, q in enumerate(states)
        )
        accepted = tuple(j for j, q in enumerate(states) if self.alts[j].accepting[q])
        if not accepted and all(q == self.alts[j].dead for j, q in enumerate(states)):
            return None  # no alternative can still end this piece
        return (hypothesis, (states, best, accepted), obligations)

    def end_piece(self, thread: tuple) -> list[tuple]:
        """Read ``#``: close the current piece, open the next (as a match, or as a gap after a match)."""
        hypothesis, current, obligations = thread
        if hypothesis == "g":
            return [self.start_thread("m", obligations)] if current else []  # a gap ends where a match starts
        states, best, accepted_now = current
        if not accepted_now:
            return []
        candidates = tuple(j for j in accepted_now if j <= best)
        if not candidates:
            return []
        # Which alternative this piece is the match of depends on the next symbol's lookahead; until then all
        # alternatives up to the largest candidate must not match longer.
        pending = (states[: max(candidates) + 1], (candidates, best), ())
        obligations = obligations | {pending}
        return [self.start_thread("m", obligations), self.start_thread("g", obligations)]

    def at_end(self, thread: tuple) -> bool:
        hypothesis, current, obligations = thread
        if self._advance_obligations(obligations, self.end_of_text) is None:
            return False
        if hypothesis == "g":
            return bool(current)
        states, best, accepted_now = current
        return any(j <= best and self.valid_end(j, self.end_of_text) for j in accepted_now or ())


def build_segmentation(rules: tuple[SplitRule, ...], *, max_states: int = 20_000) -> Segmentation:
    """The marked-text DFA of a sequence of split rules (see the module docstring)."""
    if not rules:
        transitions = np.zeros((1, symbol_alphabet().size + 1), dtype=np.int32)
        transitions[0, -1] = -1
        return Segmentation(transitions, np.array([True]))
    alphabet = symbol_alphabet(_named_sets(rules))
    hash_symbol = alphabet.size  # the column of '#', after the character symbols
    machines = [_Rule(_rule_alternatives(rule, alphabet), alphabet.end_of_text, rule.behavior, rule.invert)
                for rule in rules]
    symbols = _symbol_classes(machines)

    # A combined thread holds, per rule, (thread, grown): rule r+1's piece lives inside rule r's, and a piece
    # must be nonempty ("grown") before '#' may close it or the text may end. A rule's thread follows one span;
    # a span boundary that is no piece boundary (merged or contiguous behaviours) is an unmarked step from the
    # span's thread to the next span's, inside the same piece (``closure``).
    def fresh(r: int) -> list[tuple]:
        """All fresh combined threads for rules r.. (inner rules restart at an outer rule's boundary)."""
        if r == len(machines):
            return [()]
        return [((machines[r].start_thread(h, frozenset()), False),) + rest
                for h in "mg" if machines[r].kept(h) for rest in fresh(r + 1)]

    def span_ends(r: int, t: tuple, marked: bool) -> list[tuple]:
        """Threads of the span after the current one of rule r, where the boundary is (not) a piece boundary."""
        m = machines[r]
        return [t2 for t2 in m.end_piece(t) if m.kept(t2[0]) and m.boundary(t[0], t2[0]) == marked]

    def closure(threads: set) -> frozenset:
        todo = list(threads)
        while todo:
            c = todo.pop()
            for r, (t, grown) in enumerate(c):
                if machines[r].behavior in ("isolated", "removed"):
                    continue
                for t2 in span_ends(r, t, False):
                    c2 = c[:r] + ((t2, grown),) + c[r + 1 :]
                    if c2 not in threads:
                        threads.add(c2)
                        todo.append(c2)
        return frozenset(threads)

    def ends_here(c: tuple, first_rule: int) -> bool:
        """Rules first_rule.. may all see the end of their text (piece) here."""
        return all(grown and machines[r].at_end(t) for r, (t, grown) in enumerate(c) if r >= first_rule)

    start = frozenset(fresh(0))
    index = {start: 0}
    queue = [start]
    rows: list[list[int]] = []
    final: list[bool] = []
    while queue:
        state = queue.pop(0)
        row = [-1] * (hash_symbol + 1)
        final.append(state == start or any(ends_here(c, 0) for c in state))
        for rep, members in symbols:
            nxt = set()
            for c in state:
                stepped = [machines[r].step(t, rep) for r, (t, _) in enumerate(c)]
                if all(t is not None for t in stepped):
                    nxt.add(tuple((t, True) for t in stepped))
            target = _intern(closure(nxt), index, queue, max_states)
            for s in members:
                row[s] = target
        nxt = set()
        for c in state:
            # '#' closes the pieces of rules r.. for some r; the outer rules 0..r-1 do not see it.
            for r in range(len(machines)):
                t, grown = c[r]
                if not grown or not ends_here(c, r + 1):
                    continue
                for t2 in span_ends(r, t, True):
                    for rest in fresh(r + 1):
                        nxt.add(c[:r] + ((t2, False),) + rest)
        row[hash_symbol] = _intern(frozenset(nxt), index, queue, max_states)
        rows.append(row)
    segmentation = _minimised(np.array(rows, dtype=np.int32), np.array(final, dtype=bool))
    return Segmentation(segmentation.transitions, segmentation.final, alphabet.table)


def _intern(state: frozenset, index: dict, queue: list, max_states: int) -> int:
    if not state:
        return -1
    if state not in index:
        if len(index) >= max_states:
            raise UnsupportedTokenizerError(f"pre-tokenizer automaton exceeds {max_states} states")
        index[state] = len(index)
        queue.append(state)
    return index[state]


def _symbol_classes(machines: list[_Rule]) -> list[tuple[int, list[int]]]:
    """Group symbols that every alternative's body and lookahead treat alike: (representative, members)."""
    columns = []
    for m in machines:
        for a in m.alts:
            columns.append(a.body.T)
            if a.lookahead is not None:
                columns.append(a.lookahead[:-1, None].astype(np.int32))
    signature = np.hstack(columns)
    _, inverse = np.unique(signature, axis=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for s, g in enumerate(inverse.ravel().tolist()):
        groups.setdefault(g, []).append(s)
    return [(members[0], members) for members in groups.values()]


def _minimised(transitions: np.ndarray, final: np.ndarray) -> Segmentation:
    labels = Alphabet("labels", tuple(str(i) for i in range(transitions.shape[1])))
    dfa = DFA(transitions, final, 0, labels).minimise()  # trimmed, start renumbered to 0
    return Segmentation(np.ascontiguousarray(dfa.transitions), dfa.accepting.copy())
