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
a one-character class at the end of an alternative (``\\s+(?!\\S)``); no alternative matches the empty
string. Patterns outside this get ``UnsupportedTokenizerError``.

Characters are reduced to *symbols*: each ASCII character is its own symbol; other characters fall into
letters by case class (Lu, Ll, Lt, Lm, Lo), marks, numbers, punctuation, whitespace (the White_Space property)
and the rest, plus the two non-ASCII letters that case-insensitive matching folds onto ASCII (``ſ`` -> s,
``K`` (Kelvin) -> k), plus one symbol per non-ASCII character a pattern names literally
(``Segmentation.symbols`` maps code points to symbols for one rule set).
The construction is a subset construction over *threads*, each one hypothesis about the current piece plus
the obligations earlier pieces left behind ("alternative j must not produce a longer match here").
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from automata import Alphabet, from_regex
from automata.errors import CanonmergeError
from bpe.errors import UnsupportedTokenizerError
from bpe.model import SplitRule

__all__ = ["Segmentation", "build_segmentation", "symbol_table"]

# Symbols: 0..127 ASCII, then the non-ASCII categories the patterns in use distinguish (letters by case class,
# marks, numbers, White_Space, punctuation, the rest), then slots for non-ASCII characters a pattern names
# literally (Metaspace's "▁", a full-width bracket...), assigned per segmentation.
LETTER, NUMBER, SPACE, OTHER, LONG_S, KELVIN, PUNCT, UPPER, LOWER, TITLE, MODIFIER, MARK = range(128, 140)
_FIRST_SLOT = 140
LITERAL_SLOTS = 8
NUM_SYMBOLS = _FIRST_SLOT + LITERAL_SLOTS
_PLACEHOLDER = {LETTER: "\ue000", NUMBER: "\ue001", SPACE: "\ue002", OTHER: "\ue003", LONG_S: "\u017f",
                KELVIN: "\u212a", PUNCT: "\ue004", UPPER: "\ue005", LOWER: "\ue006", TITLE: "\ue007",
                MODIFIER: "\ue008", MARK: "\ue009"}
_PLACEHOLDER.update({_FIRST_SLOT + k: chr(0xE010 + k) for k in range(LITERAL_SLOTS)})
# The Unicode category each non-ASCII symbol stands for ("Zs" for the White_Space symbol, "Cn" for the rest).
_SYMBOL_CATEGORY = {LETTER: "Lo", NUMBER: "N", SPACE: "Zs", OTHER: "Cn", LONG_S: "Ll", KELVIN: "Lu", PUNCT: "P",
                    UPPER: "Lu", LOWER: "Ll", TITLE: "Lt", MODIFIER: "Lm", MARK: "M"}
_LETTER_SYMBOL = {"Lo": LETTER, "Lu": UPPER, "Ll": LOWER, "Lt": TITLE, "Lm": MODIFIER}
# Unicode White_Space outside ASCII (what Oniguruma's \s matches; Python's str.isspace differs on \x1c-\x1f).
_NON_ASCII_SPACE = [0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
_ASCII_SPACE = "\t\n\x0b\x0c\r "
# The classes a pattern may use, as tests on (character, its category, whether it is White_Space).
_CLASSES = {
    r"\p{L}": lambda cat, space: cat[0] == "L",
    r"\p{Lu}": lambda cat, space: cat == "Lu",
    r"\p{Ll}": lambda cat, space: cat == "Ll",
    r"\p{Lt}": lambda cat, space: cat == "Lt",
    r"\p{Lm}": lambda cat, space: cat == "Lm",
    r"\p{Lo}": lambda cat, space: cat == "Lo",
    r"\p{M}": lambda cat, space: cat[0] == "M",
    r"\p{N}": lambda cat, space: cat[0] == "N",
    r"\p{P}": lambda cat, space: cat[0] == "P",
    r"\s": lambda cat, space: space,
}


def _class_members(test, extra: dict[str, int]) -> str:
    """The text inside [...] of a class over the symbol alphabet: ASCII members, symbol placeholders, slots."""
    members = [chr(c) for c in range(128)
               if test(unicodedata.category(chr(c)), chr(c) in _ASCII_SPACE)]
    members += [_PLACEHOLDER[s] for s, cat in _SYMBOL_CATEGORY.items() if test(cat if cat != "Zs" else "Zs", s == SPACE)]
    members += [_PLACEHOLDER[slot] for char, slot in extra.items()
                if test(unicodedata.category(char), ord(char) in _NON_ASCII_SPACE)]
    return "".join("\\" + c if c in "\\]^-[" else c for c in members)


_CLASS_TEXT = {key: _class_members(test, {}) for key, test in _CLASSES.items()}


@lru_cache(maxsize=1)
def symbol_table() -> np.ndarray:
    """uint8[0x110000]: the symbol of every code point."""
    table = np.full(0x110000, OTHER, dtype=np.uint8)
    table[:128] = np.arange(128)
    for cp in range(128, 0x110000):
        cat = unicodedata.category(chr(cp))
        if cat[0] == "L":
            table[cp] = _LETTER_SYMBOL.get(cat, LETTER)
        elif cat[0] == "N":
            table[cp] = NUMBER
        elif cat[0] == "P":
            table[cp] = PUNCT
        elif cat[0] == "M":
            table[cp] = MARK
    table[_NON_ASCII_SPACE] = SPACE
    table[0x17F], table[0x212A] = LONG_S, KELVIN
    return table


def _literal_class_text(slots: dict[str, int]) -> dict[str, str]:
    """_CLASS_TEXT with each literal slot added to the classes its character belongs to."""
    if not slots:
        return _CLASS_TEXT
    return {key: _class_members(test, slots) for key, test in _CLASSES.items()}


def _literal_slots(rules: tuple[SplitRule, ...]) -> dict[str, int]:
    """Non-ASCII characters the patterns name literally (outside escapes), each given a symbol of its own."""
    chars: list[str] = []
    for rule in rules:
        i = 0
        while i < len(rule.pattern):
            c = rule.pattern[i]
            if c == "\\":
                i += 2
                continue
            if ord(c) >= 128 and c not in "\u017f\u212a" and c not in chars:
                chars.append(c)
            i += 1
    if len(chars) > LITERAL_SLOTS:
        raise UnsupportedTokenizerError(f"pre-tokenizer patterns name {len(chars)} distinct non-ASCII characters "
                                        f"(at most {LITERAL_SLOTS})")
    return {c: _FIRST_SLOT + k for k, c in enumerate(chars)}


def _segmentation_symbols(slots: dict[str, int]) -> np.ndarray:
    if not slots:
        return symbol_table()
    table = symbol_table().copy()
    for char, slot in slots.items():
        table[ord(char)] = slot
    return table


@dataclass(frozen=True, eq=False)
class Segmentation:
    """DFA over symbols plus ``HASH`` (column ``NUM_SYMBOLS``) of correctly marked texts.

    ``transitions`` int32[states, NUM_SYMBOLS + 1] (-1: rejected); ``final[s]``: the text may end in s;
    state 0 is the start. Trimmed: every state can still reach a final state. A tokenizer without split rules
    has one state that loops on every symbol and never allows ``#``.
    """

    transitions: np.ndarray
    final: np.ndarray
    symbols: np.ndarray = field(default_factory=lambda: symbol_table())  # uint8[0x110000]: symbol of each code point

    HASH = NUM_SYMBOLS

    @property
    def num_states(self) -> int:
        return len(self.final)

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
                    h = int(self.transitions[s, self.HASH])
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
# Parsing a split pattern into alternatives over the symbol alphabet.


@dataclass(frozen=True)
class _Alternative:
    body: np.ndarray  # int32[states, NUM_SYMBOLS]; state 0 start
    accepting: np.ndarray
    lookahead: np.ndarray | None  # bool[NUM_SYMBOLS + 1] (last: end of text): where a match may end
    dead: int  # the absorbing non-accepting state added to make ``body`` total


def _top_level_split(pattern: str) -> list[str]:
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _to_symbol_regex(pattern: str, slots: dict[str, int] | None = None) -> str:
    """Rewrite Unicode classes as classes over the symbol placeholders (interegular knows no \\p{..}), and
    literal non-ASCII characters as their slots' placeholders."""
    slots = slots or {}
    classes = _literal_class_text(slots)
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            esc = pattern[i : i + 5] if pattern[i + 1 : i + 2] in "pP" and pattern[i + 2 : i + 3] == "{" else pattern[i : i + 2]
            if esc.startswith(r"\p{") or esc.startswith(r"\P{"):
                close = pattern.index("}", i)
                esc = pattern[i : close + 1]
                key = r"\p" + esc[2:]
                if key not in classes:
                    raise UnsupportedTokenizerError(f"pre-tokenizer class {esc} is not supported")
                negate = esc[1] == "P"
            elif esc in (r"\s", r"\S"):
                key, negate = r"\s", esc == r"\S"
            elif esc in (r"\d", r"\w", r"\D", r"\W", r"\b", r"\B"):
                raise UnsupportedTokenizerError(f"pre-tokenizer escape {esc} is not supported")
            else:
                out.append(esc)
                i += len(esc)
                continue
            if in_class:
                if negate:
                    raise UnsupportedTokenizerError(f"negated class {esc} inside [...] is not supported")
                out.append(classes[key])
            else:
                out.append(("[^" if negate else "[") + classes[key] + "]")
            i += len(esc)
            continue
        if in_class and c == "]":
            in_class = False
        elif not in_class and c == "[":
            in_class = True
            out.append(c)
            i += 1
            for prefix in ("^", "]"):
                if pattern[i : i + 1] == prefix:
                    out.append(prefix)
                    i += 1
            continue
        out.append(_PLACEHOLDER[slots[c]] if c in slots else c)
        i += 1
    return "".join(out)


_SYMBOL_ALPHABET = Alphabet.of_chars([chr(i) for i in range(128)] + [_PLACEHOLDER[s] for s in range(128, NUM_SYMBOLS)])
_LOOKAHEAD = re.compile(r"^(.*)\(\?([!=])(\\[sSpPdDwW](?:\{\w+\})?|\[[^\]]*\]|.)\)$", re.S)


def _fold_extras(text: str) -> str:
    """Inside ``(?i:...)`` Oniguruma also matches ``ſ`` for s and the Kelvin sign for k (Unicode case folding);
    interegular folds ASCII only, so spell those two out."""
    out, i = [], 0
    while (start := text.find("(?i:", i)) >= 0:
        depth, j = 0, start
        while True:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1 + (text[j] == "\\")
        body = re.sub(r"(?<![\\\[])[sS]", "[s\u017f]", text[start:j])
        body = re.sub(r"(?<![\\\[])[kK]", "[k\u212a]", body)
        out.append(text[i:start] + body)
        i = j
    return "".join(out) + text[i:]


def _alternative(text: str, pattern: str, slots: dict[str, int]) -> _Alternative:
    lookahead = None
    text = _fold_extras(text)
    m = _LOOKAHEAD.match(text)
    if m:
        text, kind, cls = m.group(1), m.group(2), m.group(3)
        one = from_regex(_to_symbol_regex(cls, slots), _SYMBOL_ALPHABET, minimise=False)
        in_class = np.array([one.accepts([s]) for s in range(NUM_SYMBOLS)])
        ends_ok = ~in_class if kind == "!" else in_class
        lookahead = np.append(ends_ok, kind == "!")  # end of text: (?!X) holds, (?=X) fails
    if "(?=" in text or "(?!" in text or "(?<" in text:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: lookaround other than a final one-character "
                                        "lookahead is not supported")
    try:
        dfa = from_regex(_to_symbol_regex(text, slots), _SYMBOL_ALPHABET)
    except CanonmergeError as exc:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: alternative {text!r}: {exc}") from None
    if dfa.accepting[dfa.start]:
        raise UnsupportedTokenizerError(f"pre-tokenizer {pattern!r}: alternative {text!r} matches the empty string")
    # Minimised DFAs start in state 0; add an explicit dead state so that every body is total.
    dead = dfa.num_states
    body = np.vstack([np.where(dfa.transitions < 0, dead, dfa.transitions),
                      np.full((1, NUM_SYMBOLS), dead)]).astype(np.int32)
    return _Alternative(body, np.append(dfa.accepting, False), lookahead, dead)


BEHAVIORS = ("isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous")


def _rule_alternatives(rule: SplitRule, slots: dict[str, int]) -> list[_Alternative]:
    if rule.behavior not in BEHAVIORS:
        raise UnsupportedTokenizerError(f"pre-tokenizer split behaviour {rule.behavior!r} is not supported "
                                        f"(supported: {', '.join(BEHAVIORS)})")
    return [_alternative(alt, rule.pattern, slots) for alt in _top_level_split(rule.pattern)]


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
    def __init__(self, alternatives: list[_Alternative], behavior: str = "isolated", invert: bool = False):
        self.alts = alternatives
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
        """A body match of alternative j ending before ``next_symbol`` (NUM_SYMBOLS: end of text) is valid."""
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
        if symbol == NUM_SYMBOLS:
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
        if self._advance_obligations(obligations, NUM_SYMBOLS) is None:
            return False
        if hypothesis == "g":
            return bool(current)
        states, best, accepted_now = current
        return any(j <= best and self.valid_end(j, NUM_SYMBOLS) for j in accepted_now or ())

def build_segmentation(rules: tuple[SplitRule, ...], *, max_states: int = 20_000) -> Segmentation:
    """The marked-text DFA of a sequence of split rules (see the module docstring)."""
    if not rules:
        transitions = np.zeros((1, NUM_SYMBOLS + 1), dtype=np.int32)
        transitions[0, NUM_SYMBOLS] = -1
        return Segmentation(transitions, np.array([True]))
    slots = _literal_slots(rules)
    machines = [_Rule(_rule_alternatives(rule, slots), rule.behavior, rule.invert) for rule in rules]
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
        row = [-1] * (NUM_SYMBOLS + 1)
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
        row[NUM_SYMBOLS] = _intern(frozenset(nxt), index, queue, max_states)
        rows.append(row)
    segmentation = _minimised(np.array(rows, dtype=np.int32), np.array(final, dtype=bool))
    return Segmentation(segmentation.transitions, segmentation.final, _segmentation_symbols(slots))


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
                columns.append(a.lookahead[:NUM_SYMBOLS, None].astype(np.int32))
    signature = np.hstack(columns)
    _, inverse = np.unique(signature, axis=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for s, g in enumerate(inverse.ravel().tolist()):
        groups.setdefault(g, []).append(s)
    return [(members[0], members) for members in groups.values()]


def _minimised(transitions: np.ndarray, final: np.ndarray) -> Segmentation:
    from automata import DFA

    labels = Alphabet("labels", tuple(str(i) for i in range(NUM_SYMBOLS + 1)))
    dfa = DFA(transitions, final, 0, labels).minimise()  # trimmed, start renumbered to 0
    return Segmentation(np.ascontiguousarray(dfa.transitions), dfa.accepting.copy())
