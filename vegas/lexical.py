"""Regexes for scalar values as the layout writes them: numbers, integer ranges, strings, YAML plain scalars,
string formats, and ECMA-262 ``pattern``s translated to the written (escaped) text.

Every regex here matches *written text* (what follows a key's ``": "``), and ``vegas.layout`` writes values
with the same rules, so ``re.fullmatch(regex, text)`` is the test of both.

Numbers are written as ``json.dumps`` writes Python numbers, except that a float with an integral value below 1e16
is written as that integer (``30.0`` as ``30``: one text per value, as JSON Schema does not tell 30 from 30.0):
integers in decimal, other floats as ``repr`` (``1.5``, ``1e+16``, ``1.5e-05``). The regexes accept every such
spelling without redundant zeros (``number_regex(..., spellings=True)``, what schema guides use: also ``1.0``,
``2.50``, ``1e-5``, and at most ``MAX_INTEGER_DIGITS``/``MAX_FRACTION_DIGITS`` digits); they do not
enforce that a float's digits are the *shortest* round-trip ones (``0.30000000000000004`` vs ``0.3``), which no
regular language can.

YAML plain scalars: a string is written plain when it is *plain-safe*: it starts with a letter or ``_``, its other
characters are letters, digits, spaces or ``_.,'()/+-!?&;``, it does not end with a space, and it is not one of the
words YAML 1.1 or 1.2 readers turn into a boolean or null (``yes``, ``No``, ``on``, ``NULL``, ``y``, …). Every other
string is double-quoted (and so are strings whose schema bounds their length or gives a pattern or format). That
rule reads back the same string in every YAML 1.1 and 1.2 reader.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from functools import lru_cache

from automata.errors import StateLimitError
from vegas.charset import ANY, ESCAPED, CharSet, alternation, class_regex, literal, spelled, word_trie
from vegas.errors import SchemaError, UnsupportedSchemaError
from vegas.intersection import intersection

__all__ = ["integer_regex", "bounded_integer_regex", "number_regex", "MAX_INTEGER_DIGITS", "MAX_FRACTION_DIGITS",
           "free_string_body", "plain_regex", "not_plain_body", "is_plain_safe", "format_regex", "format_body", "repeat", "number_bound", "splits_exponent_forms",
           "pattern_regex", "YAML_SPECIAL_WORDS", "FORMATS"]

# ---- numbers ---------------------------------------------------------------------------------------------------

_NAT = "(0|[1-9][0-9]*)"
_FRACTION = r"\.([0-9]*[1-9]|0)"  # no redundant trailing zero: 1.5, 1.0, never 1.50
# repr writes exponents only below 1e-4 and from 1e16, with at least two digits: 1e-05, 1e+16, 1e+300.
_SMALL_EXPONENT = r"e-(0[5-9]|[1-9][0-9]|[1-3][0-9][0-9])"
_BIG_EXPONENT = r"e\+(1[6-9]|[2-9][0-9]|[1-3][0-9][0-9])"


def _same_length(lo: str, hi: str) -> str:
    """Decimal strings of len(lo) == len(hi) digits between lo and hi (inclusive), leading digits as given."""
    if lo == hi:
        return lo
    n = len(lo) - 1
    if lo[1:] == "0" * n and hi[1:] == "9" * n:  # every tail: one class and a count (huge bounds stay small)
        head = lo[0] if lo[0] == hi[0] else f"[{lo[0]}-{hi[0]}]"
        return head + ("" if n == 0 else "[0-9]" if n == 1 else f"[0-9]{{{n}}}")
    if lo[0] == hi[0]:
        return lo[0] + _same_length(lo[1:], hi[1:])
    parts = [lo[0] + _same_length(lo[1:], "9" * n)]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}][0-9]" + (f"{{{n}}}" if n > 1 else ""))
    parts.append(hi[0] + _same_length("0" * n, hi[1:]))
    return "(" + "|".join(parts) + ")"


def _naturals(lo: int, hi: int | None) -> str | None:
    """Canonical decimals (no leading zero) of the integers in [lo, hi], 0 <= lo; hi None: unbounded."""
    if hi is not None and hi < lo:
        return None
    parts = []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    first, last = len(str(lo)), len(str(top))
    for length in range(first, last + 1):
        a, b = max(lo, 10 ** (length - 1) if length > 1 else 0), min(top, 10 ** length - 1)
        if first < length < last:  # every number of this many digits: all such lengths in one counted class
            parts.append(f"[1-9][0-9]{{{length - 1},{last - 2}}}")
            break
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if first + 1 < last:
        parts.append(_same_length(str(10 ** (last - 1)), str(top)))
    if hi is None:
        parts.append(f"[1-9][0-9]{{{len(str(top))},}}")
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


@lru_cache(maxsize=4096)  # a schema's numbers share a few bounds; memoised, a warm compile writes none again
def integer_regex(lo: int | None = None, hi: int | None = None) -> str | None:
    """Canonical decimals of the integers in [lo, hi] (None: unbounded); None when the range is empty."""
    if lo is not None and hi is not None and hi < lo:
        return None
    parts = []
    if hi is None or hi >= 0:
        nonneg = _naturals(max(lo, 0) if lo is not None else 0, hi)
        if nonneg:
            parts.append(nonneg)
    if lo is None or lo < 0:  # -n for n in [max(1, -hi), -lo]
        neg = _naturals(max(1, -hi) if hi is not None else 1, -lo if lo is not None else None)
        if neg:
            parts.append("-" + neg)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


# ---- the spellings a schema's guide accepts beside the one ``format_instance`` writes (``spellings=True``) -------
#: Digits at most before a number's point where the schema sets no bound on that side (or as many as its bound
#: has, where that is longer), and after the point (trailing zeros included): so every number ends.
MAX_INTEGER_DIGITS = 20
MAX_FRACTION_DIGITS = 20


def _counted(atom: str, lo: int, hi: int) -> str:
    """``atom`` (one character or class) lo..hi times, written compactly."""
    if hi <= 0:
        return ""
    if lo == hi:
        return atom if lo == 1 else f"{atom}{{{lo}}}"
    return f"{atom}?" if (lo, hi) == (0, 1) else f"{atom}{{{lo},{hi}}}"


def _nonzero_digits(room: int) -> str | None:
    """Digit strings with a digit that is not 0 (a fraction's digits, trailing zeros allowed, whose value is not 0):
    at most room - 1 zeros, a digit 1-9, at most room - 1 digits after it, ``0{0,room-1}[1-9][0-9]{0,room-1}``.
    (At most ``room`` digits in all, ``0{i}[1-9][0-9]{0,room-1-i}`` for each i, is room times the regex: the
    free-value leaves of a YAML object, which hold numbers many times over, passed the 120,000 positions a
    fragment's character automaton may have.)"""
    if room <= 0:
        return None
    return _counted("0", 0, room - 1) + "[1-9]" + _counted("[0-9]", 0, room - 1)


def _fraction_spelled(lower: str, upper: str | None, room: int, nonzero_before: bool) -> str | None:
    """Digit strings T of at most ``room`` digits, trailing zeros allowed, with 0.T >= 0.lower and, unless
    ``upper`` is None, 0.T <= 0.upper, and (unless ``nonzero_before``) a digit that is not 0; None if there are none.
    ``_fraction`` with every canonical fraction's trailing zeros: the same values, so the same bounds decide."""
    alts = [""] if nonzero_before and not lower else []  # (0.T = 0 >= 0.lower only for lower = 0)
    if room > 0 and upper == "":  # 0.T <= 0: zeros only
        if nonzero_before and not lower:
            alts.append(_counted("0", 1, room))
    elif room > 0:
        low = int(lower[0]) if lower else -1  # digits above ``low`` and below ``high`` leave the rest free
        high = int(upper[0]) if upper is not None else 10
        free = range(max(low + 1, 0), min(high, 10))
        if 0 in free:
            rest = _counted("[0-9]", 0, room - 1) if nonzero_before else _nonzero_digits(room - 1)
            if rest is not None:
                alts.append("0" + rest)
        nonzero = [d for d in free if d >= 1]
        if nonzero:
            digit = str(nonzero[0]) if len(nonzero) == 1 else f"[{nonzero[0]}-{nonzero[-1]}]"
            alts.append(digit + _counted("[0-9]", 0, room - 1))
        for d in sorted({low, high} & set(range(max(low, 0), min(high, 9) + 1))):
            rest = _fraction_spelled(lower[1:] if d == low else "", upper[1:] if d == high else None, room - 1,
                                     nonzero_before or d != 0)
            if rest is not None:
                alts.append(f"{d}{rest}")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def _without(a: int, b: int, holes) -> list[tuple[int, int]]:
    """The integers of [a, b] outside the intervals ``holes`` ((x, y) pairs, empty where x > y), as ranges."""
    ranges = [(a, b)] if a <= b else []
    for x, y in holes:
        if x > y:
            continue
        out = []
        for p, q in ranges:
            if y < p or x > q:
                out.append((p, q))
                continue
            if p < x:
                out.append((p, x - 1))
            if y < q:
                out.append((y + 1, q))
        ranges = out
    return ranges


def _decimals_spelled(lo: Decimal, hi: Decimal, skip: tuple[int, int] = (1, 0)) -> str | None:
    """``_decimals`` with trailing zeros: texts ``n.T`` (n >= 0 outside ``skip``; T not all 0, as
    ``_nonzero_digits`` bounds it) whose value is in [lo, hi]; both bounds given (``number_regex`` caps the open
    ones, and writes the n of ``skip`` itself)."""
    a, f = _split(lo)
    b, g = _split(hi)
    if b < 0:
        return None
    parts = []
    for p, q in _without(max(0, a + 1 if f else a), b - 1, [skip]):
        parts.append(_naturals(p, q) + r"\." + _nonzero_digits(MAX_FRACTION_DIGITS))
    for n in sorted({a, b}):
        if n < 0 or n < a or n > b or skip[0] <= n <= skip[1]:
            continue
        lower = f if n == a else ""
        upper = g if n == b else None
        if not lower and upper is None:
            continue  # every fraction: counted above
        fraction = _fraction_spelled(lower, upper, MAX_FRACTION_DIGITS, False)
        if fraction is not None:
            parts.append(f"{n}\\.{fraction}")
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def _reach(other: Decimal | int | None, side: int) -> int:
    """How far an open side of a range goes (``side`` 1: up, -1: down): ``MAX_INTEGER_DIGITS`` digits, or as many
    as the other bound has where that bound lies beyond them on this side (``minimum: 1e30`` keeps its numbers)."""
    digits = MAX_INTEGER_DIGITS
    if other is not None and side * other > 0:
        digits = max(digits, len(str(abs(math.floor(other)))))
    return 10 ** digits - 1


@lru_cache(maxsize=4096)
def bounded_integer_regex(lo: int | None = None, hi: int | None = None) -> str | None:
    """``integer_regex`` with an open side capped (``_reach``): at most ``MAX_INTEGER_DIGITS`` digits there."""
    return integer_regex(-_reach(hi, -1) if lo is None else lo, _reach(lo, 1) if hi is None else hi)


@lru_cache(maxsize=4096)
def number_regex(lo: Decimal | int | None = None, hi: Decimal | int | None = None, *, lo_exclusive: bool = False,
                 hi_exclusive: bool = False, style: str = "json", spellings: bool = False) -> str | None:
    """Numbers (integers or floats) as written, within bounds (None: unbounded; ``number_bound`` reads them).

    A text ``n`` is the integer n; ``n.F`` (F not ending in 0, so integral values have one text) is a value in
    (n, n + 1), and ``-n.F`` one in (-(n + 1), -n). The integers admitted come from ``integer_regex``; for
    ``n.F``, every n strictly inside the bounds takes any fraction, and the integer part of a fractional bound
    takes the fractions on the admitted side of the bound's own digits (``_fraction``, digit by digit).
    ``lo_exclusive``/``hi_exclusive`` apply to integral bounds (``number_bound`` turns a fractional exclusive
    bound into the next float inward, inclusive). Exponent forms are values below 1e-4 or from 1e16 in
    magnitude, kept where the bounds admit all of them; a fractional bound between -1e-4 and 1e-4 (it would
    split them) raises ``ValueError``. YAML writes a dot in every exponent form's mantissa (``1.0e+16``: YAML 1.1
    readers read ``1e+16`` as a string).

    Comparing the written decimal with the bound's ``repr`` decides exactly for every text ``repr`` writes, and
    never admits a text whose float is out of bounds (rounding a decimal to a float is monotone).

    ``spellings=True``: also the spellings of the same values that models write (what a schema's guide accepts,
    ``vegas.schema``): an integral value with a point and zeros (``1.0``, ``2.000``), a fraction with trailing
    zeros (``2.50``), a mantissa with them (``1.50e-05``), a small exponent with one digit (``1e-5``); and
    every number ends: at most ``MAX_INTEGER_DIGITS`` digits before the point where a side is open (or the
    other bound's digits), ``MAX_FRACTION_DIGITS`` after it. Each extra text spells a value the canonical texts
    admit (the bounds are decided on values), so intersections of these languages stay those of the values."""
    lo = None if lo is None else Decimal(lo)
    hi = None if hi is None else Decimal(hi)
    for bound in (lo, hi):
        if splits_exponent_forms(bound):
            raise ValueError(f"a bound of {bound} splits the numbers written with an exponent (below 1e-4)")
    lo_int = None if lo is None else math.ceil(lo) + (1 if lo_exclusive and lo == math.ceil(lo) else 0)
    hi_int = None if hi is None else math.floor(hi) - (1 if hi_exclusive and hi == math.floor(hi) else 0)
    parts = []
    if spellings:  # the open sides capped (values, so exact beside the bounds); integral values may take ".0"
        lo_cap = Decimal(-_reach(hi, -1) - 1) if lo is None else lo  # (n.T with n below the cap: n.T < cap + 1)
        hi_cap = Decimal(_reach(lo, 1) + 1) if hi is None else hi
        lo_i = -_reach(hi, -1) if lo_int is None else lo_int
        hi_i = _reach(lo, 1) if hi_int is None else hi_int
        # n whose value and every n.T are admitted: all their spellings at once, n(.T)? (-0: a spelling of 0),
        # so that the digits after the point need not tell fractions from zeros (a small automaton)
        p0, p1 = max(0, lo_i), min(hi_i, math.floor(hi_cap) - 1)  # n.T < n + 1 <= hi
        q0, q1 = max(0 if lo_i <= 0 <= hi_i else 1, -hi_i), min(-lo_i, math.floor(-lo_cap) - 1)  # -(n + 1) >= lo
        any_point = "(\\." + _counted("[0-9]", 1, MAX_FRACTION_DIGITS) + ")?"
        if p0 <= p1:
            parts.append(_naturals(p0, p1) + any_point)
        if q0 <= q1:
            parts.append("-" + _naturals(q0, q1) + any_point)
        for x, y in _without(lo_i, hi_i, [(p0, p1), (-q1, -max(q0, 1))]):  # the other integers: a point and zeros
            parts.append(integer_regex(x, y) + "(\\." + _counted("0", 1, MAX_FRACTION_DIGITS) + ")?")
        positive = _decimals_spelled(lo_cap, hi_cap, (p0, p1))  # the other n.T
        negative = _decimals_spelled(-hi_cap, -lo_cap, (q0, q1))
    else:
        whole = integer_regex(lo_int, hi_int)
        if whole:
            parts.append(whole)
        positive = _decimals(lo, hi)  # n.F within [lo, hi]
        negative = _decimals(None if hi is None else -hi, None if lo is None else -lo)  # -n.F: n.F in [-hi, -lo]
    if positive:
        parts.append(positive)
    if negative:
        parts.append("-" + negative)
    mantissa = r"[1-9]\.([0-9]*[1-9]|0)" if style == "yaml" else r"[1-9](\.[0-9]*[1-9])?"
    small = _SMALL_EXPONENT
    if spellings:  # a mantissa's trailing zeros, a small exponent's one digit
        digits = _counted("[0-9]", 1, MAX_FRACTION_DIGITS)
        mantissa = rf"[1-9]\.{digits}" if style == "yaml" else rf"[1-9](\.{digits})?"
        small = r"e-([5-9]|0[5-9]|[1-9][0-9]|[1-3][0-9][0-9])"
    small_pos = (lo is None or lo <= 0) and (hi is None or hi >= _SMALL)
    small_neg = (hi is None or hi >= 0) and (lo is None or lo <= -_SMALL)
    big_pos, big_neg = hi is None and (lo is None or lo < 10 ** 16), lo is None and (hi is None or hi > -10 ** 16)
    for sign, exponent, admitted in (("", small, small_pos), ("-", small, small_neg),
                                     ("", _BIG_EXPONENT, big_pos), ("-", _BIG_EXPONENT, big_neg)):
        if admitted:
            parts.append(f"{sign}{mantissa}{exponent}")
    if not parts:
        return None
    return "(" + "|".join(parts) + ")"


_SMALL = Decimal("0.0001")  # repr writes an exponent below this magnitude


def splits_exponent_forms(bound: Decimal | int | None) -> bool:
    """Whether a bound falls among the numbers ``repr`` writes with a small exponent (0 < |bound| < 1e-4), which
    ``number_regex`` keeps or drops only as a whole."""
    return bound is not None and 0 < abs(Decimal(bound)) < _SMALL


def _split(bound: Decimal) -> tuple[int, str]:
    """A bound's integer part (floor) and the digits of its fractional part ('' when integral)."""
    floor = math.floor(bound)
    return floor, format(bound - floor, "f").partition(".")[2].rstrip("0")


def _decimals(lo: Decimal | None, hi: Decimal | None) -> str | None:
    """Texts ``n.F`` (n >= 0, F not ending in 0) whose value is in [lo, hi] (None: unbounded)."""
    a, f = _split(lo) if lo is not None else (-1, "")
    b, g = _split(hi) if hi is not None else (None, None)
    if b is not None and b < 0:
        return None
    parts = []
    # every fraction: n above the lower bound's integer part (or at it, when that bound is integral), below b
    every = _naturals(max(0, a + 1 if f else a), None if b is None else b - 1)
    if every:
        parts.append(every + r"\.[0-9]*[1-9]")
    for n in sorted({a, b} - {None}):  # the bounds' own integer parts, where only some fractions are inside
        if n < 0 or n < a or (b is not None and n > b):
            continue
        lower = f if n == a else ""
        upper = g if n == b else None
        if not lower and upper is None:
            continue  # every fraction: counted above
        fraction = _fraction(lower, upper, False)
        if fraction is not None:
            parts.append(f"{n}\\.{fraction}")
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def _fraction(lower: str, upper: str | None, nonzero_before: bool) -> str | None:
    """Digit strings T that end a fraction (the fraction ends in 1-9: T may be empty only after a digit that is
    not 0) with 0.T >= 0.lower and, unless ``upper`` is None, 0.T <= 0.upper; None if there are none. A first
    digit strictly between the bounds' first digits leaves the rest free; one equal to a bound's first digit
    carries that bound on to the rest."""
    if upper == "":  # 0.T <= 0: T is empty
        return "" if nonzero_before and not lower else None
    alts = [""] if nonzero_before and not lower else []
    low = int(lower[0]) if lower else -1  # digits above ``low`` and below ``high`` are free
    high = int(upper[0]) if upper is not None else 10
    free = range(max(low + 1, 0), min(high, 10))
    if 0 in free:
        alts.append("0[0-9]*[1-9]")
    nonzero = [d for d in free if d >= 1]
    if nonzero:
        digit = str(nonzero[0]) if len(nonzero) == 1 else f"[{nonzero[0]}-{nonzero[-1]}]"
        alts.append(digit + "([0-9]*[1-9])?")
    for d in sorted({low, high} & set(range(max(low, 0), min(high, 9) + 1))):  # (none if low > high)
        rest = _fraction(lower[1:] if d == low else "", upper[1:] if d == high else None, d != 0)
        if rest is not None:
            alts.append(f"{d}{rest}")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def number_bound(value, keyword: str, pointer: str, *, exclusive: bool, upper: bool) -> tuple[Decimal, bool]:
    """A ``minimum``/``maximum``/``exclusive*`` value as an exact decimal and whether it is exclusive. A
    fractional bound is its float's ``repr`` (the float a validator compares with); an exclusive one becomes the
    next float inward, inclusive (over floats, x > b iff x >= nextafter(b, +inf))."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SchemaError(f"{keyword} must be a finite number, not {value!r}", keyword=keyword, pointer=pointer)
    if value == int(value):
        return Decimal(int(value)), exclusive
    if exclusive:
        value, exclusive = math.nextafter(value, -math.inf if upper else math.inf), False
    return Decimal(repr(float(value))), exclusive


# ---- strings ---------------------------------------------------------------------------------------------------

def repeat(atom: str, lo: int, hi: int | None) -> str:
    """``atom`` repeated lo..hi times (hi None: unbounded)."""
    if hi == 0:
        return ""
    if hi is None:
        return f"({atom}){{{lo},}}" if lo > 1 else (f"({atom})+" if lo == 1 else f"({atom})*")
    if lo == hi:
        return f"({atom}){{{lo}}}" if lo != 1 else atom
    return f"({atom}){{{lo},{hi}}}"


def free_string_body(style: str, min_length: int = 0, max_length: int | None = None) -> str:
    """The written characters of any string of min..max characters, inside double quotes."""
    return repeat(spelled(ANY, style), min_length, max_length)


# YAML plain scalars: see the module docstring.
# Every non-ASCII character YAML prints raw counts as a letter: then every class of both string forms splits the
# non-ASCII range the same way (printable or not), and the byte automaton shares one UTF-8 trie shape across its
# states (finer splits gave the YAML object of the tests 361k byte states instead of a few thousand).
_LETTERS = CharSet.of([(ord("A"), ord("Z")), (ord("a"), ord("z")), (0xA0, 0x10FFFF)]) - ESCAPED["yaml"]
_PLAIN_FIRST = _LETTERS | CharSet.chars("_")
_PLAIN_REST = _LETTERS | CharSet.of([(ord("0"), ord("9"))]) | CharSet.chars(" _.,'()/+-!?&;")
_PLAIN_LAST = _PLAIN_REST - CharSet.chars(" ")
YAML_SPECIAL_WORDS = frozenset(
    "y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF null Null NULL".split())


def is_plain_safe(text: str) -> bool:
    return (bool(text) and text[0] in _PLAIN_FIRST and all(c in _PLAIN_REST for c in text[1:])
            and text[-1] in _PLAIN_LAST and text not in YAML_SPECIAL_WORDS)


@lru_cache(maxsize=1)
def plain_regex() -> str:
    """Every plain-safe string, written plain (no escapes): first letter, rest, no trailing space, not a special
    word. The words are cut out by walking their trie: a string leaves it at some character, or ends on a node
    that is no word."""
    rest, last = class_regex(_PLAIN_REST), class_regex(_PLAIN_LAST)
    tail_opt, tail_req = f"({rest}*{last})?", f"{rest}*{last}"
    trie = word_trie(YAML_SPECIAL_WORDS)

    def walk(node: dict, depth: int, after_space: bool) -> str:
        allowed = _PLAIN_FIRST if depth == 0 else _PLAIN_REST
        children = CharSet.chars("".join(c for c in node if c))
        alts = []
        if depth > 0 and "" not in node and not after_space:
            alts.append("")  # ends on a node that is no word
        other = allowed - children - CharSet.chars(" ")
        if other:
            alts.append(class_regex(other) + tail_opt)
        if depth > 0 and " " not in children:
            alts.append(" " + tail_req)
        alts += [literal(c) + walk(child, depth + 1, c == " ") for c, child in sorted(node.items()) if c]
        return "(" + "|".join(alts) + ")"

    return walk(trie, 0, False)


@lru_cache(maxsize=2)  # every free YAML string of a schema writes it
def not_plain_body(style: str) -> str:
    """The written characters (inside double quotes) of every string that is *not* plain-safe: empty; first
    character not a letter; a later character outside the plain set; a trailing space; a special word."""
    any_, first = spelled(ANY, style), spelled(_PLAIN_FIRST, style)
    alts = ["", f"{spelled(~_PLAIN_FIRST, style)}({any_})*", f"{first}({any_})*{spelled(~_PLAIN_REST, style)}({any_})*",
            f"{first}({any_})* ", alternation(YAML_SPECIAL_WORDS)]
    return "(" + "|".join(alts) + ")"


# ---- formats (over decoded characters; none of them contains a character the layout escapes) -----------------

_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_H16 = "[0-9a-fA-F]{1,4}"
_IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_LS32 = rf"({_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    h = f"{_H16}:"
    forms = [f"({h}){{6}}{_LS32}", f"::({h}){{5}}{_LS32}", f"({_H16})?::({h}){{4}}{_LS32}",
             f"(({h}){{0,1}}{_H16})?::({h}){{3}}{_LS32}", f"(({h}){{0,2}}{_H16})?::({h}){{2}}{_LS32}",
             f"(({h}){{0,3}}{_H16})?::{h}{_LS32}", f"(({h}){{0,4}}{_H16})?::{_LS32}",
             f"(({h}){{0,5}}{_H16})?::{_H16}", f"(({h}){{0,6}}{_H16})?::"]
    return "(" + "|".join(forms) + ")"


# A calendar date (validators check it with datetime.date.fromisoformat): years 0001-9999, each month's days,
# February 29th in leap years only (divisible by 4, centuries by 400: a finite rule on the four digits).
_YEAR = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
_DATE = (f"({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
         f"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP_YEAR}-02-29)")
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_URI_CHAR = r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]"
FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "email": rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{_LABEL}(\.{_LABEL})+",
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": rf"[A-Za-z][A-Za-z0-9+.-]*:{_URI_CHAR}+",
    "ipv4": _IPV4,
    "ipv6": _ipv6(),
    "hostname": rf"{_LABEL}(\.{_LABEL})*",
}


def format_regex(name: str) -> str | None:
    """The regex of a known ``format`` (None for formats the standard leaves as annotations we do not know)."""
    return FORMATS.get(name)


# ---- ECMA-262 patterns -----------------------------------------------------------------------------------------

_DIGIT = CharSet.of([(0x30, 0x39)])
_WORD = _DIGIT | CharSet.of([(0x41, 0x5A), (0x61, 0x7A)]) | CharSet.chars("_")
_SPACE = CharSet.chars("\t\n\x0b\x0c\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff") | CharSet.of([(0x2000, 0x200A)])
_LINE_TERMINATORS = CharSet.chars("\n\r\u2028\u2029")
_CLASS_ESCAPES = {"d": _DIGIT, "D": ~_DIGIT, "w": _WORD, "W": ~_WORD, "s": _SPACE, "S": ~_SPACE}
_QUANTIFIER = re.compile(r"\{[0-9]+(,[0-9]*)?\}")
_CHAR_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}


# The reader builds a small tree — ("set", CharSet), ("seq", parts), ("alt", options), ("rep", node, lo, hi) — so
# that a length bound can be applied to it (``_bounded``) before it is written out (``_spell``).

class _Pattern:
    """A recursive-descent reader of an ECMA-262 regex into the tree above (character atoms as sets of decoded
    characters; groups, alternation, quantifiers kept), with three zero-width nodes that ``_read`` resolves:
    ("bol",) for ``^``, ("eol",) for ``$`` and ("look", negated, tree) for a lookahead. Lookbehind,
    backreferences and word boundaries are refused."""

    def __init__(self, source: str, pointer: str, keyword: str = "pattern"):
        self.src, self.i, self.pointer, self.keyword = source, 0, pointer, keyword

    def fail(self, why: str, unsupported: bool = False):
        cls = UnsupportedSchemaError if unsupported else SchemaError
        raise cls(f"{self.keyword} {self.src!r}: {why} (at offset {self.i})", keyword=self.keyword,
                  pointer=self.pointer)

    def peek(self) -> str:
        return self.src[self.i] if self.i < len(self.src) else ""

    def alternatives(self) -> list[tuple]:
        """The alternatives up to the next unmatched ``)`` (or the end), each a ("seq", parts)."""
        alts = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.sequence())
        return alts

    def sequence(self) -> tuple:
        out = []
        while self.i < len(self.src) and self.peek() not in "|)":
            if self.peek() in "^$":
                out.append(("bol",) if self.peek() == "^" else ("eol",))
                self.i += 1
                if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._quantifier()):
                    self.fail(f"nothing to repeat before {self.peek()!r}")
                continue
            atom = self.atom()
            if atom[0] == "look" and (self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._quantifier())):
                self.fail("a quantified lookahead", unsupported=True)
            out.append(atom if atom[0] == "look" else self.quantified(atom))
        return ("seq", tuple(out))

    def atom(self) -> tuple:
        c = self.peek()
        if c == "(":
            self.i += 1
            look = None
            if self.src.startswith("?:", self.i):
                self.i += 2
            elif self.src.startswith(("?=", "?!"), self.i):
                look, self.i = self.src[self.i + 1] == "!", self.i + 2
            elif self.src.startswith("?<", self.i) and self.src[self.i + 2:self.i + 3] not in ("=", "!"):
                close = self.src.find(">", self.i)
                if close < 0:
                    self.fail("unterminated group name")
                self.i = close + 1
            elif self.peek() == "?":
                self.fail("lookbehind" if self.src.startswith("?<", self.i) else "an unknown group", unsupported=True)
            alts = self.alternatives()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.i += 1
            return ("alt", tuple(alts)) if look is None else ("look", look, ("alt", tuple(alts)))
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            self.i += 1
            return ("set", ~_LINE_TERMINATORS)
        if c == "\\":
            return ("set", self.escape(in_class=False))
        if c in "*+?" or (c == "{" and self._quantifier()):
            self.fail(f"nothing to repeat before {c!r}")
        if c == ")":
            self.fail("unbalanced ')'")
        self.i += 1
        return ("set", CharSet.chars(c))

    def _quantifier(self) -> str:
        """``{n}``, ``{n,}`` or ``{n,m}`` at the cursor ('' if none: then ``{`` is a literal, as in ECMA)."""
        found = _QUANTIFIER.match(self.src, self.i)
        return found.group(0) if found else ""

    def quantified(self, atom: tuple) -> tuple:
        c = self.peek()
        if c and c in "*+?":
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and self._quantifier():
            q = self._quantifier()
            self.i += len(q)
            low, comma, high = q[1:-1].partition(",")
            lo, hi = int(low), (int(high) if high else None) if comma else int(low)
            if hi is not None and hi < lo:
                self.fail(f"quantifier {q}: the minimum exceeds the maximum")
        else:
            return atom
        if self.peek() == "?":  # lazy: same language
            self.i += 1
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._quantifier()):
            self.fail("nested quantifier")
        return ("rep", atom, lo, hi)

    def escape(self, in_class: bool) -> CharSet:
        self.i += 1
        c = self.peek()
        if not c:
            self.fail("trailing backslash")
        self.i += 1
        if c in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[c]
        if c in _CHAR_ESCAPES and not (c == "0" and self.peek().isdigit()):
            return CharSet.chars(_CHAR_ESCAPES[c])
        if c == "b" and in_class:
            return CharSet.chars("\b")
        if c in "bB" or c.isdigit() or c == "k":
            self.fail(f"\\{c} (word boundary or backreference)", unsupported=True)
        if c == "x" or c == "u":
            width = 2 if c == "x" else 4
            digits = self.src[self.i:self.i + width]
            if c == "u" and self.peek() == "{":
                close = self.src.find("}", self.i)
                digits, width = self.src[self.i + 1:close], close - self.i + 1
            try:
                code = int(digits, 16)
            except ValueError:
                self.fail(f"bad \\{c} escape")
            self.i += width
            return CharSet.of([(code, code)])
        if c in "pP":
            self.fail("Unicode property classes", unsupported=True)
        if c == "c":
            letter = self.peek()
            self.i += 1
            return CharSet.chars(chr(ord(letter.upper()) % 32))
        return CharSet.chars(c)  # an escaped punctuation character, or an identity escape

    def char_class(self) -> CharSet:
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        members = CharSet(())
        first = True
        while True:
            c = self.peek()
            if not c:
                self.fail("missing ']'")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self.escape(in_class=True) if c == "\\" else self._take()
            if self.peek() == "-" and self.src[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self.escape(in_class=True) if self.peek() == "\\" else self._take()
                if lo.size() != 1 or hi.size() != 1:
                    self.fail("a range bound is a class")
                a, b = lo.ranges[0][0], hi.ranges[0][0]
                if a > b:
                    self.fail("range out of order")
                members = members | CharSet.of([(a, b)])
            else:
                members = members | lo
        return ~members if negated else members

    def _take(self) -> CharSet:
        c = self.peek()
        self.i += 1
        return CharSet.chars(c)


def _read(pattern: str, pointer: str, keyword: str = "pattern") -> tuple | None:
    """The tree of every string in which ``pattern`` finds a match (an unanchored ECMA-262 search: ``abc`` means
    "contains abc"; an alternative anchored at neither end gets any text around it); None where no string does
    (``a^b``: an anchor no match satisfies)."""
    if not isinstance(pattern, str):
        raise SchemaError(f"{keyword} must be a string, not {pattern!r}", keyword=keyword, pointer=pointer)
    reader = _Pattern(pattern, pointer, keyword)
    alts = reader.alternatives()
    if reader.i != len(pattern):
        reader.fail("unbalanced ')'")
    options = [tree for body in alts for tree in _searched(body, reader)]
    return ("alt", tuple(options)) if options else None


_AROUND = ("rep", ("set", ANY), 0, None)  # any text before or after a match
_EMPTY = ("seq", ())
_MAX_ANCHORED_COPIES = 16  # counted copies of a repeated tree holding an anchor, written out one by one


def _searched(body: tuple, reader: _Pattern) -> list[tuple]:
    """The strings in which one alternative of a pattern finds a match, as trees (none where it never matches).

    The usual forms — ``^`` first, ``$`` last, no other zero-width node — are the alternative with any text
    before it unless it starts with ``^`` and after it unless it ends with ``$``. Otherwise ``_to_end`` writes the
    string from the match's start on, and any text goes before it unless a ``^`` was passed."""
    parts = body[1]
    start = bool(parts) and parts[0] == ("bol",)
    end = len(parts) > start and parts[-1] == ("eol",)
    inner = parts[int(start): len(parts) - int(end)]
    if not any(_zero_width(part) for part in inner):
        return [("seq", (() if start else (_AROUND,)) + (("seq", inner),) + (() if end else (_AROUND,)))]
    return [tree if at_start else _seq(_AROUND, tree) for at_start, tree in _to_end(parts, reader).items()]


def _to_end(parts: tuple, reader: _Pattern) -> dict[bool, tuple]:
    """The strings from a position on to the end of the string in which the sequence ``parts`` matches from that
    position, per whether the match passes a ``^`` (then the position is the string's start). Anchors may stand
    anywhere (``_anchored`` splits the matches by the anchors they pass). A lookahead among the parts (not inside
    a group) constrains the rest of the string from where it stands: the strings from there on (the parts after
    it, then any text unless a ``$`` ends them) are intersected with each positive lookahead's strings and
    stripped of each negative one's (``vegas.intersection``)."""
    i = next((k for k, part in enumerate(parts) if part[0] == "look"), None)
    if i is None:
        out: dict[bool, list] = {}
        for (s, e), tree in _anchored(("seq", parts), reader).items():
            out.setdefault(s, []).append(_seq(tree, _EMPTY if e else _AROUND))
        return {s: _union(trees) for s, trees in out.items()}
    j = i
    while j < len(parts) and parts[j][0] == "look":
        j += 1
    before = _anchored(("seq", parts[:i]), reader)
    at_start = i > 0 and all(part == ("bol",) for part in parts[:i])  # (a "^" inside the lookahead holds there)
    positive, negative = [], []
    for _, negated, tree in parts[i:j]:
        ways = _anchored(tree, reader)
        if any(s for s, _ in ways) and not at_start:
            reader.fail("'^' inside a lookahead not after a leading '^'", unsupported=True)
        strings = [_seq(t, _EMPTY if e else _AROUND) for (_, e), t in ways.items()]  # what the rest starts with
        (negative if negated else positive).append(_union(strings) if strings else None)
    if any(t is None for t in positive):
        return {}
    after = {}
    for s, tree in _to_end(parts[j:], reader).items():
        try:
            tree = intersection(tree, *positive, excluded=[t for t in negative if t is not None])
        except StateLimitError as exc:
            reader.fail(f"lookahead: {exc}", unsupported=True)
        if tree is not None:
            after[s] = tree
    out = {}
    for (s1, e1), left in before.items():
        if e1:
            reader.fail("'$' before a lookahead", unsupported=True)
        for s2, right in after.items():
            if s2 and _lengths(left)[0]:  # a "^" after the lookahead: nothing before it
                continue
            out.setdefault(s1 or s2, []).append(_seq(_EMPTY if s2 else left, right))
    return {s: _union(trees) for s, trees in out.items()}


def _zero_width(node: tuple) -> bool:
    """Whether a tree holds an anchor or a lookahead."""
    kind = node[0]
    if kind in ("bol", "eol", "look"):
        return True
    if kind == "set":
        return False
    if kind == "rep":
        return _zero_width(node[1])
    return any(_zero_width(part) for part in node[1])


def _anchored(node: tuple, reader: _Pattern) -> dict[tuple[bool, bool], tuple]:
    """A tree with anchors, as trees without: per (holds ``^``, holds ``$``), the characters of the matches that
    pass anchors of those kinds (absent: none do). A match passing ``^`` starts the string, so nothing it reads
    comes before that ``^``; one passing ``$`` ends it, so nothing comes after. A repetition of an anchored tree is
    its counted copies in sequence (at most ``_MAX_ANCHORED_COPIES``) and, unbounded, a star: plain copies, where a
    copy passing ``^`` can only be the last to read anything before plain ones (those before it read nothing), and
    one passing ``$`` the first after which nothing is read (``(a($|/))*``)."""
    kind = node[0]
    if kind == "set":
        return {(False, False): node}
    if kind in ("bol", "eol"):
        return {(kind == "bol", kind == "eol"): _EMPTY}
    if kind == "look":
        reader.fail("a lookahead inside a group", unsupported=True)
    if kind == "rep":
        _, inner, lo, hi = node
        ways = _anchored(inner, reader)
        if set(ways) == {(False, False)}:
            return {(False, False): ("rep", ways[False, False], lo, hi)}
        if (hi if hi is not None else lo + 1) > _MAX_ANCHORED_COPIES:
            reader.fail("an anchor inside a repetition of more than "
                        f"{_MAX_ANCHORED_COPIES} counted copies", unsupported=True)
        # X{lo,hi} is lo copies, then hi - lo optional ones (or X* for no hi), each read as a part of a sequence
        rest = [("alt", (_EMPTY, inner))] * (hi - lo) if hi is not None else [("star", inner)]
        node, kind = ("seq", (inner,) * lo + tuple(rest)), "seq"
    if kind == "star":  # X*: plain copies, but for the last copy passing "^" first and the first passing "$" last
        ways = _anchored(node[1], reader)
        plain = ("rep", ways[False, False], 0, None) if (False, False) in ways else _EMPTY
        out = {(False, False): plain}
        if (True, False) in ways:
            out[True, False] = _seq(ways[True, False], plain)
        if (False, True) in ways:
            out[False, True] = _seq(plain, ways[False, True])
        both = ([_seq(_seq(ways[True, False], plain), ways[False, True])] if (True, False) in ways and
                (False, True) in ways else []) + ([ways[True, True]] if (True, True) in ways else [])
        if both:
            out[True, True] = _union(both)
        return out
    found: dict[tuple[bool, bool], list[tuple]] = {}
    if kind == "alt":
        for option in node[1]:
            for key, tree in _anchored(option, reader).items():
                found.setdefault(key, []).append(tree)
        return {key: _union(trees) for key, trees in found.items()}
    ways = {(False, False): _EMPTY}  # a sequence, part by part
    for part in node[1]:
        found = {}
        for (s1, e1), left in ways.items():
            for (s2, e2), right in _anchored(part, reader).items():
                if s2:  # a "^" in the part: what comes before it reads nothing
                    if _lengths(left)[0]:
                        continue
                    left_part = _EMPTY
                else:
                    left_part = left
                if e1:  # a "$" before the part: the part reads nothing
                    if _lengths(right)[0]:
                        continue
                    right = _EMPTY
                found.setdefault((s1 or s2, e1 or e2), []).append(_seq(left_part, right))
        ways = {key: _union(trees) for key, trees in found.items()}
    return ways


def _seq(a: tuple, b: tuple) -> tuple:
    return ("seq", tuple(x for t in (a, b) for x in (t[1] if t[0] == "seq" else (t,))))


def _union(trees: list[tuple]) -> tuple:
    unique = list(dict.fromkeys(trees))
    return unique[0] if len(unique) == 1 else ("alt", tuple(unique))


def _spell(node: tuple, style: str) -> str:
    """The regex of a tree's strings as written (each character in its written form)."""
    kind = node[0]
    if kind == "set":
        return spelled(node[1], style)
    if kind == "seq":
        return "".join(_spell(part, style) for part in node[1])
    if kind == "alt":
        return "(" + "|".join(_spell(option, style) for option in node[1]) + ")"
    _, inner, lo, hi = node
    if lo == hi and lo <= 1:
        return _spell(inner, style) if lo else ""
    q = "*" if (lo, hi) == (0, None) else "+" if (lo, hi) == (1, None) else "?" if (lo, hi) == (0, 1) else \
        f"{{{lo}}}" if lo == hi else f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    return f"({_spell(inner, style)}){q}"


def _lengths(node: tuple) -> tuple[int, int | None]:
    """The fewest and most characters of a tree's strings (None: unbounded). An empty class counts as one
    character: it only makes lengths looser, never excludes a string."""
    kind = node[0]
    if kind == "set":
        return 1, 1
    if kind == "seq":
        parts = [_lengths(p) for p in node[1]]
        return sum(a for a, _ in parts), (None if any(b is None for _, b in parts) else sum(b for _, b in parts))
    if kind == "alt":
        parts = [_lengths(p) for p in node[1]]
        return min(a for a, _ in parts), (None if any(b is None for _, b in parts) else max(b for _, b in parts))
    _, inner, lo, hi = node
    a, b = _lengths(inner)
    return a * lo, (None if hi is None or (b is None and hi > 0) else (b or 0) * hi)


_MAX_SPLITS = 256  # ways to share a length bound out among a sequence's parts, tried one by one
# The longest bound counted on an automaton where ``_bounded`` cannot share it out: state elimination over a counter
# grows fast with it (``^\d+\.\d+\.\d+.*$`` with at most 16 characters: a 15k-character regex; 32: past the cap).
_MAX_COUNTED_BOUND = 16


class _Unbounded(Exception):
    """A length bound this writer cannot apply exactly (several parts would share an open-ended count)."""


def _bounded(node: tuple, lo: int, hi: int | None, budget: list | None = None) -> tuple | None:
    """The tree of the strings of ``node`` with lo..hi characters (hi None: no upper bound); None if there are
    none. Exact: a repetition of a fixed-width item takes its count from the bound; a sequence shares the bound
    out among its parts (one part takes what the others leave; the others' lengths are tried one by one, at
    most ``_MAX_SPLITS`` ways). Raises ``_Unbounded`` beyond that, or past ``budget[0]`` calls in all."""
    budget = [20_000] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise _Unbounded
    a, b = _lengths(node)
    if a >= lo and (hi is None or (b is not None and b <= hi)):
        return node
    if (hi is not None and a > hi) or (b is not None and b < lo):
        return None
    kind = node[0]
    if kind == "alt":
        options = [o for o in (_bounded(option, lo, hi, budget) for option in node[1]) if o is not None]
        return ("alt", tuple(options)) if options else None
    if kind == "rep":
        _, inner, m, n = node
        w, w_max = _lengths(inner)
        if w == w_max and w > 0:  # k copies of a fixed-width item have k * w characters
            k_lo, k_hi = max(m, -(-lo // w)), (n if hi is None else hi // w if n is None else min(n, hi // w))
            return None if k_hi is not None and k_lo > k_hi else ("rep", inner, k_lo, k_hi)
        most = n if n is not None else (None if hi is None or w == 0 else hi // w)
        if most is None or most - m > _MAX_SPLITS:
            raise _Unbounded
        return _bounded(("alt", tuple(("seq", (inner,) * k) for k in range(m, most + 1))), lo, hi, budget)
    parts = list(node[1])  # a sequence
    ranges = [_lengths(p) for p in parts]
    fixed = sum(x for x, y in ranges if x == y)
    variable = [i for i, (x, y) in enumerate(ranges) if x != y]
    # each variable part's possible lengths given the others' fewest; the widest one takes what is left
    slack = None if hi is None else hi - fixed - sum(ranges[i][0] for i in variable)
    spans = {i: (ranges[i][0], ranges[i][1] if slack is None or ranges[i][1] is not None and
                 ranges[i][1] <= ranges[i][0] + slack else (None if slack is None else ranges[i][0] + slack))
             for i in variable}
    free = max(variable, key=lambda i: (spans[i][1] is None, (spans[i][1] or 0) - spans[i][0]))
    others = [i for i in variable if i != free]
    # with no upper bound, an open-ended part is tried at each length below the lower bound, then at "at least it"
    tops = {i: spans[i][1] if spans[i][1] is not None else max(spans[i][0], lo - fixed) for i in others}
    splits = 1
    for i in others:
        splits *= tops[i] - spans[i][0] + 1
    if splits > _MAX_SPLITS:
        raise _Unbounded
    options = []

    def share(k: int, taken: int, chosen: dict) -> None:
        if k == len(others):
            rest = _bounded(parts[free], max(0, lo - fixed - taken), None if hi is None else hi - fixed - taken,
                            budget)
            if rest is not None:
                options.append(("seq", tuple(rest if i == free else chosen.get(i, p) for i, p in enumerate(parts))))
            return
        i = others[k]
        for width in range(spans[i][0], tops[i] + 1):
            at_least = spans[i][1] is None and width == tops[i]
            part = _bounded(parts[i], width, None if at_least else width, budget)
            if part is not None:
                share(k + 1, taken + width, {**chosen, i: part})

    share(0, 0, {})
    return ("alt", tuple(options)) if options else None


def pattern_regex(pattern: str, style: str, pointer: str, min_length: int = 0, max_length: int | None = None,
                  keyword: str = "pattern", format_name: str | None = None, shown: str | None = None) -> str | None:
    """The written characters (inside double quotes) of every string in which ``pattern`` finds a match, with
    ``min_length``..``max_length`` characters and, given ``format_name`` (a known format), of that format (None when
    no string is all that). The bound is shared out over the tree's parts (``_bounded``), else it is one more
    automaton in an intersection (``vegas.intersection``), as a format is. ``UnsupportedSchemaError`` where the
    intersection has no regex of a reasonable size, naming the pattern as ``shown`` (default: its text)."""
    tree = _read(pattern, pointer, keyword)
    if tree is None:
        return None
    bounded = bool(min_length) or max_length is not None
    try:
        if format_name is not None:
            tree = intersection(tree, _read(f"^({FORMATS[format_name]})$", pointer, "format"))
        if tree is not None and bounded:
            try:
                tree = _bounded(tree, min_length, max_length)
            except _Unbounded:  # several open-ended parts would share the count: count on the automaton instead
                if max(min_length, max_length or 0) > _MAX_COUNTED_BOUND:
                    raise StateLimitError("several open-ended parts would share the count") from None
                tree = intersection(tree, ("rep", ("set", ANY), min_length, max_length))
    except StateLimitError as exc:
        with_format = f" with format {format_name!r}" if format_name is not None else ""
        with_bound = f" with a length bound ({min_length}..{max_length})" if bounded else ""
        raise UnsupportedSchemaError(f"{keyword} {shown or repr(pattern)}{with_format}{with_bound}: {exc}",
                                     keyword=keyword, pointer=pointer) from None
    return None if tree is None else _spell(tree, style)


def format_body(name: str, style: str, pointer: str, min_length: int = 0, max_length: int | None = None) -> str | None:
    """``pattern_regex`` for a known ``format`` (its regex, anchored at both ends; named by the format's name)."""
    return pattern_regex(f"^({FORMATS[name]})$", style, pointer, min_length, max_length, keyword="format",
                         shown=repr(name))
