"""Which Unicode classes the runtime's regex engine puts each code point in, asked of the runtime itself.

Pre-tokenizer patterns test characters through Unicode classes (``\\p{L}``, ``\\p{N}``, ``\\s``...). The HF
``tokenizers`` runtime matches them with the Oniguruma it was built with, whose Unicode tables need not be
Python's: ``tokenizers`` 0.23 knows Unicode 16, Python 3.11's ``unicodedata`` Unicode 14, so a code point
assigned in between (U+31350, a CJK letter since Unicode 15) is ``\\p{L}`` to the runtime and unassigned to
Python. The runtime is the oracle, so the members of every class are read from it:

1. every code point except the surrogates (a Python string holding one cannot cross into Rust) is written, in
   order, into one string;
2. a ``Replace`` normaliser built on the runtime's own ``Regex`` (the engine ``Split`` pre-tokenizers use)
   deletes the runs of characters outside the union of the classes: what is left are the ~146k code points
   that are in some class;
3. the same deletion, one class at a time, over those leaves each class's members.

About 0.3 s (most of it the runtime's per-byte bookkeeping of the 1.1M-character string), once per process.

The ``Digits`` and ``Punctuation`` pre-tokenizers use no regex: they test characters in Rust
(``char::is_numeric``; ASCII punctuation or the ``unicode_categories`` crate's punctuation), with Unicode
tables of their own. In ``tokenizers`` 0.23 Rust's numbers are Unicode 17's (13 more than the regex engine's
``\\p{N}``) and the crate's punctuation is older than Python's (no U+061D, and U+166D, a symbol since Unicode 12,
still in). ``pre_tokenizer_class`` reads their members from the runtime too, by running the pre-tokenizer
itself over every code point (~0.2 s), and writes them as a regex class the loaders give the ``Split`` rule.

The normalisers have tables of their own too (the ``unicode-normalization`` crate, Rust's lowercase), which
disagree with Python's both ways: under NFKC the runtime leaves U+10781-U+107BA (modifier letters Python
decomposes) unchanged, under NFD U+11938; Rust lowercases 55 characters Python leaves. ``rewritten_by`` reads
from the runtime which characters a normaliser changes when alone (see there, ~0.2 s per normaliser).

The answers depend only on the installed ``tokenizers`` (the Oniguruma, the crates and the Rust its build used):
``unicode_source`` names it for the keys of cached automata.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import tokenizers
from tokenizers import PreTokenizedString, Regex, normalizers, pre_tokenizers

from bpe.errors import UnsupportedTokenizerError

__all__ = ["GENERAL_CATEGORIES", "category_cells", "class_bits", "general_categories", "pre_tokenizer_class",
           "property_members", "rewritten_by", "unicode_source"]

NUM_CODE_POINTS = 0x110000
SURROGATES = range(0xD800, 0xE000)
# Between probed characters: a private-use character, which no normaliser changes, produces or composes with,
# and which, being a starter, keeps canonical reordering from moving marks across it.
SEPARATOR = "\ue000"
BLOCK = 64  # code points probed together in the first pass of ``rewritten_by``


# The Unicode general categories (Cs, the surrogates, which no text holds, aside) and the unions the runtime's
# regex engine names by one letter (and LC), with the long names it also accepts.
GENERAL_CATEGORIES = ("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi",
                      "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cn")
_GROUPS = {"L": ("Lu", "Ll", "Lt", "Lm", "Lo"), "LC": ("Lu", "Ll", "Lt"), "M": ("Mn", "Mc", "Me"),
           "N": ("Nd", "Nl", "No"), "P": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"), "S": ("Sm", "Sc", "Sk", "So"),
           "Z": ("Zs", "Zl", "Zp"), "C": ("Cc", "Cf", "Co", "Cn")}
_LONG_NAMES = {
    "letter": "L", "casedletter": "LC", "uppercaseletter": "Lu", "lowercaseletter": "Ll", "titlecaseletter": "Lt",
    "modifierletter": "Lm", "otherletter": "Lo", "mark": "M", "combiningmark": "M", "nonspacingmark": "Mn",
    "spacingmark": "Mc", "enclosingmark": "Me", "number": "N", "decimalnumber": "Nd", "letternumber": "Nl",
    "othernumber": "No", "punctuation": "P", "connectorpunctuation": "Pc", "dashpunctuation": "Pd",
    "openpunctuation": "Ps", "closepunctuation": "Pe", "initialpunctuation": "Pi", "finalpunctuation": "Pf",
    "otherpunctuation": "Po", "symbol": "S", "mathsymbol": "Sm", "currencysymbol": "Sc", "modifiersymbol": "Sk",
    "othersymbol": "So", "separator": "Z", "spaceseparator": "Zs", "lineseparator": "Zl",
    "paragraphseparator": "Zp", "other": "C", "control": "Cc", "format": "Cf", "privateuse": "Co",
    "unassigned": "Cn"}
_SHORT_NAMES = {name.lower(): name for name in (*GENERAL_CATEGORIES, *_GROUPS)}
_WHITE_SPACE = r"\s"


def general_categories(name: str) -> tuple[str, ...] | None:
    """The general categories ``\\p{name}`` stands for (``"S"`` -> Sm, Sc, Sk, So; ``"Letter"`` -> the five
    letter categories), or None when ``name`` is no general category (a script such as ``Han``, or another
    property). Oniguruma reads property names without regard to case, spaces, hyphens and underscores."""
    key = "".join(c for c in name.lower() if c not in " -_")
    short = _SHORT_NAMES.get(key) or _LONG_NAMES.get(key)
    if short is None:
        return None
    return _GROUPS.get(short, (short,))


@lru_cache(maxsize=1)
def category_cells() -> np.ndarray:
    """uint8[0x110000]: for every code point, ``2 * k + w`` where ``GENERAL_CATEGORIES[k]`` is its general
    category and ``w`` whether it is White_Space (``\\s``), both as the runtime's regex engine says; surrogates:
    255.

    One pass of the runtime's ``Split`` pre-tokenizer over every code point in order, with one alternative per
    cell (``[\\p{Lu}&&\\s]+|[\\p{Lu}&&\\S]+|...``), cuts the text into runs of one cell each (~4,100 runs); the
    first character of each run is then tested against every cell (a text of 4,100 characters): ~0.8 s in all."""
    cells = [(gc, white) for gc in GENERAL_CATEGORIES for white in (True, False)]
    spelled = [f"\\p{{{gc}}}&&" + ("\\s" if white else "\\S") for gc, white in cells]
    code_points = _every_code_point()
    pretokenized = PreTokenizedString(_text(code_points))
    pre_tokenizers.Split(Regex("|".join(f"[{cell}]+" for cell in spelled)), "isolated").pre_tokenize(pretokenized)
    lengths = np.array([len(piece) for piece, _, _ in pretokenized.get_splits(offset_type="byte")])
    if lengths.sum() != len(code_points):
        raise RuntimeError("the runtime's Split dropped characters of the category probe")
    firsts = code_points[np.r_[0, np.cumsum(lengths)[:-1]]]
    first_text = _text(firsts)
    cell_of_run = np.full(len(firsts), -1, dtype=np.int64)
    for k, cell in enumerate(spelled):
        runs = np.searchsorted(firsts, _members(first_text, cell))
        if (cell_of_run[runs] >= 0).any():
            raise RuntimeError(f"the runtime's regex engine puts a character in two general categories ({cell})")
        cell_of_run[runs] = 2 * (k // 2) + (k % 2 == 0)
    if (cell_of_run < 0).any():
        cp = int(firsts[np.flatnonzero(cell_of_run < 0)[0]])
        raise RuntimeError(f"the runtime's regex engine puts U+{cp:04X} in no general category")
    table = np.full(NUM_CODE_POINTS, 255, dtype=np.uint8)
    table[code_points] = np.repeat(cell_of_run, lengths)
    return table


@lru_cache(maxsize=64)
def property_members(name: str) -> np.ndarray:
    """bool[0x110000]: the code points the runtime's regex engine matches with ``\\p{name}`` (a script such as
    ``Han`` or ``Hiragana``, or any other property it knows; ~0.6 s). ``UnsupportedTokenizerError`` when the
    runtime does not know the property."""
    try:
        Regex(f"\\p{{{name}}}")
    except Exception as exc:  # (the runtime's own error type is a plain Exception)
        raise UnsupportedTokenizerError(f"pre-tokenizer class \\p{{{name}}} is not one the runtime knows: {exc}") from None
    members = np.zeros(NUM_CODE_POINTS, dtype=bool)
    members[_members(_text(_every_code_point()), f"\\p{{{name}}}")] = True
    return members


def unicode_source() -> str:
    """What the class tables come from: the installed ``tokenizers`` version (its build pins the Oniguruma and
    the Rust whose Unicode tables are read here)."""
    return f"tokenizers {tokenizers.__version__}"


@lru_cache(maxsize=4)
def class_bits(classes: tuple[str, ...]) -> np.ndarray:
    """uint16[0x110000] (at most 16 classes): bit k is set where the runtime's regex engine matches
    ``classes[k]`` (each a class escape such as ``\\p{L}`` or ``\\s``, written inside ``[...]``) on the code
    point alone. Surrogates, which no text holds, are in no class."""
    in_some_class = _members(_text(_every_code_point()), "".join(classes))
    candidates = _text(in_some_class)
    bits = np.zeros(NUM_CODE_POINTS, dtype=np.uint16)
    for k, escape in enumerate(classes):
        bits[_members(candidates, escape)] |= np.uint16(1 << k)
    return bits


@lru_cache(maxsize=2)
def pre_tokenizer_class(kind: str) -> str:
    """The regex class (``[...]`` of ``\\x{..}`` ranges) of the characters the runtime's ``Digits`` or
    ``Punctuation`` pre-tokenizer (``kind``) splits on. Run over every code point in its contiguous form, the
    pre-tokenizer cuts the text into runs of members and runs of the others, alternately; the runs holding a
    character that is a member in every Unicode (``0``, ``!``) are the members'."""
    splitter, member = {"Digits": (pre_tokenizers.Digits(individual_digits=False), "0"),
                        "Punctuation": (pre_tokenizers.Punctuation("contiguous"), "!")}[kind]
    pretokenized = PreTokenizedString(_text(_every_code_point()))
    splitter.pre_tokenize(pretokenized)
    pieces = [piece for piece, _, _ in pretokenized.get_splits(offset_type="byte")]  # (char offsets are slow)
    ends = np.cumsum([len(piece) for piece in pieces])
    first = int(np.searchsorted(ends, ord(member), side="right")) % 2  # (below the surrogates: index = code point)
    members = np.frombuffer("".join(pieces[first::2]).encode("utf-32-le"), dtype=np.uint32)
    runs = np.split(members, np.flatnonzero(np.diff(members) != 1) + 1)
    ranges = (f"\\x{{{run[0]:X}}}" + (f"-\\x{{{run[-1]:X}}}" if len(run) > 1 else "") for run in runs)
    return "[" + "".join(ranges) + "]"


@lru_cache(maxsize=5)
def rewritten_by(normalizer: str) -> np.ndarray:
    """bool[0x110000]: the code points that the runtime's normaliser ``normalizer`` (``"NFC"``, ``"NFKC"``,
    ``"NFD"``, ``"NFKD"`` or ``"Lowercase"``) changes when the character stands alone. Surrogates are not
    characters and are left False.

    A string that a normal form leaves unchanged is made of characters it leaves unchanged alone (a normalised
    string holds no character with a decomposition, nor an excluded composite), and lowercasing works character
    by character, so the probe narrows in two passes, each one call of the normaliser:

    1. every code point (the separator aside) in blocks of ``BLOCK`` consecutive ones, the blocks joined by
       ``SEPARATOR``: a block that comes back unchanged holds no rewritten character;
    2. the characters of the blocks that came back changed (by a rewrite, or by a composition or reordering
       between neighbours), each alone between separators: those that come back different are the rewritten.

    The separator confines each normalisation to its own block or character; that it comes back unchanged, and
    once per block, is checked (it is itself left False). The first pass costs nearly all of the ~0.2 s: the
    second reads 4k (Lowercase, NFC) to 23k (NFKD) characters."""
    normalize = getattr(normalizers, normalizer)().normalize_str
    if normalize(SEPARATOR) != SEPARATOR:
        raise RuntimeError(f"the runtime's {normalizer} changes the probe's separator U+{ord(SEPARATOR):04X}")
    code_points = _every_code_point()
    code_points = code_points[code_points != ord(SEPARATOR)]
    every = _text(code_points)
    blocks = [every[start : start + BLOCK] for start in range(0, len(every), BLOCK)]
    changed = [k for k, text in enumerate(_normalize_each(normalize, blocks)) if text != blocks[k]]
    candidates = "".join(blocks[k] for k in changed)
    rewritten = np.zeros(NUM_CODE_POINTS, dtype=bool)
    for character, text in zip(candidates, _normalize_each(normalize, candidates)):
        rewritten[ord(character)] = text != character
    return rewritten


def _normalize_each(normalize, texts: list[str] | str) -> list[str]:
    """``normalize`` applied to each of ``texts`` (strings, or the characters of one; none holding
    ``SEPARATOR``), in one call over them all joined by the separator."""
    if not texts:
        return []
    pieces = normalize(SEPARATOR.join(texts)).split(SEPARATOR)
    if len(pieces) != len(texts):
        raise RuntimeError("a normaliser produced or removed the probe's separator")
    return pieces


def _every_code_point() -> np.ndarray:
    """uint32: every code point but the surrogates, in order."""
    return np.r_[0 : SURROGATES.start, SURROGATES.stop : NUM_CODE_POINTS].astype(np.uint32)


def _text(code_points: np.ndarray) -> str:
    """The string of ``code_points`` (uint32, no surrogates), in order."""
    return code_points.astype("<u4").tobytes().decode("utf-32-le")


def _members(text: str, escapes: str) -> np.ndarray:
    """The code points of ``text`` that the runtime's regex ``[escapes]`` matches, in order (uint32)."""
    kept = normalizers.Replace(Regex(f"[^{escapes}]+"), "").normalize_str(text)
    return np.frombuffer(kept.encode("utf-32-le"), dtype=np.uint32)
