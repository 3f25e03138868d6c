"""Regular expression -> DFA over an explicit alphabet.

``automata.parse`` reads the syntax canonmerge writes itself, interegular every other pattern, into interegular's
parse tree; ``automata.glushkov`` turns the parse tree into a DFA whose symbols are
*classes* of characters (all characters behaving the same in every state share one class, and
``anything_else`` stands for every character the pattern never names). Patterns with lookaheads go through
interegular's own FSM construction instead, which gives the same kind of DFA. We expand those classes onto the
target alphabet:

- a character alphabet: each character is looked up in the class map directly;
- the UTF-8 byte alphabet: every code point's class is tabulated, and the UTF-8 encodings of all code points
  are laid out as a byte trie whose identical subtrees are shared (bottom-up hashing with ``np.unique``).
  Each character state gets a copy of the trie's interior nodes, their leaves pointing at the class targets
  of that state. Trim and minimise then remove what is unused or duplicated.
  A pattern that reads no non-ASCII character needs no trie at all; one that reads them all alike reuses a
  trie built once.

Semantics are those of ``re.fullmatch``. Not supported (``RegexError``): backreferences, lookbehind, Unicode
property classes (``\\p{..}``). ``\\d``, ``\\w`` and ``\\s`` follow interegular's definitions (ASCII
digits/word characters, ASCII whitespace), which is what constrained-generation users expect.
"""

from __future__ import annotations

import functools

import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import InvalidSyntax, Pattern, Unsupported, _CharGroup, _Concatenation

from automata import glushkov, parse
from automata.budget import CompileBudgetError, checkpoint
from automata.dfa import DFA, MISSING, Alphabet, unique_rows
from automata.errors import EmptyLanguageError, RegexError, StateLimitError
from automata.parse import syntax_positions

__all__ = ["from_regex", "from_regex_exits", "exit_marker"]

_NUM_CODE_POINTS = 0x110000


def from_regex(pattern: str, alphabet: Alphabet | None = None, *, minimise: bool = True,
               max_states: int = 200_000) -> DFA:
    """The DFA of the strings ``re.fullmatch(pattern, ·)`` accepts, over ``alphabet`` (default: UTF-8 bytes).

    Raises ``RegexError`` for syntax interegular cannot parse or does not support, ``EmptyLanguageError`` if
    no string over the alphabet matches, ``StateLimitError`` if the automaton would exceed ``max_states``.
    """
    alphabet = alphabet or Alphabet.bytes()
    class_target, accepting, start, mapping = char_dfa(pattern, max_states)
    checkpoint()  # (the compile's budget, ``automata.budget``: between the stages, each bounded by max_states)
    if alphabet.kind == "bytes" and len(class_target) > 64:
        # Minimise over character classes before expanding: each state that reads multi-byte characters gets
        # its own copy of the UTF-8 trie, and the position construction leaves many equivalent states (a YAML
        # string's regex: 581 class states, 113 after minimising; a YAML object's byte automaton went from
        # 344k states, over the limit, to a few hundred).
        small = _class_dfa(class_target, accepting, start).minimise()
        class_target, accepting, start = small.transitions, small.accepting, small.start
        checkpoint()
    dfa = _expand(class_target, accepting, start, mapping, alphabet, max_states)
    checkpoint()
    dfa = dfa.minimise() if minimise else dfa.trim()  # both trim: an empty language keeps no accepting state
    checkpoint()
    if not dfa.accepting.any():
        raise EmptyLanguageError(f"regex {shown(pattern)} matches no string over the {alphabet.kind} alphabet")
    return dfa


def exit_marker(k: int) -> str:
    """The character that marks exit ``k`` in a pattern given to ``from_regex_exits``: a lone UTF-16 surrogate,
    which no UTF-8 text contains (so no string of the language reads it)."""
    if not 0 <= k < _MAX_EXITS:
        raise ValueError(f"exit {k} outside 0..{_MAX_EXITS - 1}")
    return chr(_EXIT_BASE + k)


_EXIT_BASE, _MAX_EXITS = 0xDC00, 0x400  # U+DC00..U+DFFF (``product.counted`` marks its loops in U+D800..)


def from_regex_exits(pattern: str, *, max_states: int = 200_000) -> tuple[DFA, np.ndarray, list[tuple[int, ...]]]:
    """A byte DFA whose strings end at *exits*: ``pattern`` ends every alternative with one exit marker
    (``exit_marker(k)``); the result accepts the strings that precede a marker. A string may precede several
    markers (alternatives that overlap): ``exit_sets[exit_of[q]]`` lists the exits of an accepting state ``q``
    (``exit_of[q]`` is -1 elsewhere). States with different exit sets are never merged, so a reader of the DFA
    knows where each accepted string may leave. (``product.stitched`` cuts constraints into fragments this way:
    each exit is a point where the next fragment starts.) Two shapes of fragment skip the position construction:
    a long leaf between a prefix and the exits (``_spliced_exits``) and a finite set of literal texts
    (``_literal_exits``).
    """
    spliced = _spliced_exits(pattern, max_states) or _literal_exits(pattern)
    if spliced is not None:
        return spliced
    class_target, accepting, start, mapping = char_dfa(pattern, max_states)
    checkpoint()
    class_target, exit_of, exit_sets = read_exits(class_target, accepting, mapping, pattern)
    small, exit_of = _class_dfa(class_target, exit_of >= 0, start).minimise_labelled(exit_of)
    checkpoint()
    dfa = _expand(small.transitions, small.accepting, small.start, mapping, Alphabet.bytes(), max_states)
    checkpoint()
    labels = np.concatenate([exit_of, np.full(dfa.num_states - small.num_states, -1, dtype=np.int64)])
    dfa, exit_of = dfa.minimise_labelled(labels)
    checkpoint()
    if not dfa.accepting.any():
        raise EmptyLanguageError(f"regex {shown(pattern)} matches no string over the bytes alphabet")
    return dfa, exit_of, exit_sets


# A pattern at least this long whose shape is (prefix)(?:leaf)(?:exits) has its leaf's DFA built once per process
# and spliced (``_spliced_exits``): a schema fragment holding an "anything" value or a format leaf, closed by
# punctuation that differs with every place the value stands.
_SPLICE_MIN_LEAF = 2_000
_LEAVES_KEPT = 32


def _spliced_exits(pattern: str, max_states: int) -> tuple[DFA, np.ndarray, list[tuple[int, ...]]] | None:
    """``from_regex_exits`` of a pattern written as a literal-free-of-exits prefix, a long group (the leaf) and a
    last group holding every exit marker, where the three DFAs join without a subset construction: the leaf's is
    built once per process (``_leaf_dfa``), the prefix's and the exits' are small. None where the pattern has not
    that shape or the DFAs do not join so (``_join``); the caller then builds the whole. The result is not
    minimised across the joins (a reader of the DFA needs no minimality: its states' futures differ but for the
    joins' few)."""
    if len(pattern) < _SPLICE_MIN_LEAF:
        return None
    groups = _top_level_groups(pattern)
    if len(groups) < 2 or groups[-1][1] != len(pattern) or groups[-2][1] != groups[-1][0]:
        return None
    (leaf_start, leaf_end), (exits_start, _) = groups[-2], groups[-1]
    head = pattern[:exits_start]
    if leaf_end - leaf_start < _SPLICE_MIN_LEAF or any(is_exit_marker(c) for c in head):
        return None
    try:
        leaf = _leaf_dfa(pattern[leaf_start:leaf_end], max_states)
        dfa = leaf if leaf_start == 0 else _join(from_regex(pattern[:leaf_start], max_states=max_states), leaf)
        if dfa is None:
            return None
        tail, tail_exit_of, exit_sets = from_regex_exits(pattern[exits_start:], max_states=max_states)
    except EmptyLanguageError:
        return None
    if tail_exit_of[tail.start] >= 0:
        return None
    joined = _join(dfa, tail)
    if joined is None or joined.num_states > max_states:
        return None
    exit_of = np.concatenate([np.full(dfa.num_states, -1, dtype=np.int64), tail_exit_of])
    return joined, exit_of, exit_sets


_MAX_LITERAL_TEXTS = 256  # texts of a finite pattern built as a trie (``_literal_exits``), at most


def _literal_exits(pattern: str) -> tuple[DFA, np.ndarray, list[tuple[int, ...]]] | None:
    """``from_regex_exits`` of a pattern that is a finite set of literal texts, each ending with its exit markers (a
    fragment of required keys, an enum's values and the punctuation after them: more than half of those a
    first-sight walk enters), as the trie of the texts' bytes, minimised as ``from_regex_exits`` minimises: no
    position construction. None for any other pattern."""
    if len(pattern) > 4 * _MAX_LITERAL_TEXTS:
        return None
    tree = parse.read(pattern)
    texts = None if tree is None else _texts(tree)
    if not texts:
        return None
    ends: dict[bytes, set[int]] = {}
    for text in texts:  # (each alternative ends with one marker: the regexes product.stitched writes)
        body, marker = text[:-1], text[-1:]
        if not marker or not is_exit_marker(marker) or any(is_exit_marker(c) for c in body):
            return None
        ends.setdefault(body.encode("utf-8", "surrogatepass"), set()).add(ord(marker) - _EXIT_BASE)
    children: list[dict[int, int]] = [{}]
    exits_at: dict[int, tuple[int, ...]] = {}
    for encoded, exits in ends.items():
        node = 0
        for byte in encoded:
            node = children[node].setdefault(byte, len(children))
            if node == len(children):
                children.append({})
        exits_at[node] = tuple(sorted(exits))
    table = np.full((len(children), 256), MISSING, dtype=np.int32)
    for node, edges in enumerate(children):
        for byte, child in edges.items():
            table[node, byte] = child
    exit_sets = sorted(set(exits_at.values()))
    exit_of = np.full(len(children), -1, dtype=np.int64)
    for node, exits in exits_at.items():
        exit_of[node] = exit_sets.index(exits)
    dfa, exit_of = DFA(table, exit_of >= 0, 0, Alphabet.bytes()).minimise_labelled(exit_of)
    return dfa, exit_of, exit_sets


def _texts(node) -> list[str] | None:
    """The texts of a tree of single characters, concatenations and alternations (None: anything else, or more
    than ``_MAX_LITERAL_TEXTS``)."""
    kind = type(node)
    if kind is _CharGroup:
        return [next(iter(node.chars))] if len(node.chars) == 1 and not node.negated else None
    if kind is _Concatenation:
        texts = [""]
        for part in node.parts:
            found = _texts(part)
            if found is None or len(texts) * len(found) > _MAX_LITERAL_TEXTS:
                return None
            texts = [a + b for a in texts for b in found]
        return texts
    if kind is Pattern and not node.added_flags and not node.removed_flags:
        texts = []
        for option in node.options:
            found = _texts(option)
            if found is None or len(texts) + len(found) > _MAX_LITERAL_TEXTS:
                return None
            texts += found
        return texts
    return None


def _top_level_groups(pattern: str) -> list[tuple[int, int]]:
    """(start, end) of each group at the pattern's top level, in order; empty where the top level has an
    alternation (the pattern is no concatenation)."""
    groups, depth, start = [], 0, 0
    for i in syntax_positions(pattern):
        c = pattern[i]
        if c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                groups.append((start, i + 1))
        elif c == "|" and depth == 0:
            return []
    return groups


@functools.lru_cache(maxsize=_LEAVES_KEPT)
def _leaf_dfa(leaf: str, max_states: int) -> DFA:
    return from_regex(leaf, max_states=max_states)


def _join(first: DFA, second: DFA) -> DFA | None:
    """The DFA of ``first``'s strings followed by ``second``'s, where each accepting state of ``first`` reads no
    byte ``second``'s start reads and ``second``'s start does not accept: then a string's split is never in doubt,
    and ``second``'s start row is copied onto ``first``'s accepting states (``second``'s states numbered after
    ``first``'s). None otherwise."""
    ends = np.flatnonzero(first.accepting)
    opening = second.transitions[second.start] != MISSING
    if second.accepting[second.start] or (first.transitions[ends][:, opening] != MISSING).any():
        return None
    offset = first.num_states
    tail = np.where(second.transitions != MISSING, second.transitions + offset, MISSING).astype(np.int32)
    table = np.concatenate([first.transitions, tail])
    table[np.ix_(ends, np.flatnonzero(opening))] = tail[second.start, opening]
    accepting = np.concatenate([np.zeros(offset, dtype=bool), second.accepting])
    return DFA(table, accepting, first.start, first.alphabet)


def read_exits(class_target: np.ndarray, accepting: np.ndarray, mapping: dict,
               pattern: str) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """The exits of a character DFA whose pattern ends its alternatives with exit markers: the table without the
    markers' columns (no string reads them), per state the index of its exit set (-1: none; a state is at exit k
    when reading marker k from it ends the pattern), and the exit sets. (``from_regex_exits``; ``product.counted``
    reads exits off its contracted DFA the same way.)"""
    at_states, at_exits = [], []  # (state, exit) pairs: a state may precede several markers
    marker_classes = []
    for char, c in mapping.items():
        if char is anything_else or not is_exit_marker(char):
            continue
        target = class_target[:, c]
        ends = np.flatnonzero((target != MISSING) & accepting[np.maximum(target, 0)])
        if not len(ends):
            # no marker here: a character of the markers' range that a class names (a leaf's "anything but ...",
            # ``automata.regions``), which no text holds; only a marker ends an alternative
            continue
        if sum(1 for k in mapping.values() if k == c) != 1:
            raise RegexError(f"regex {shown(pattern)}: exit marker U+{ord(char):04X} shares its class with other "
                             "characters")
        at_states.append(ends)
        at_exits.append(np.full(len(ends), ord(char) - _EXIT_BASE, dtype=np.int64))
        marker_classes.append(c)
    # each state's exits, sorted, as one tuple per state holding any (few states do: the ends of alternatives)
    exits_at: dict[int, list[int]] = {}
    if at_states:
        states, exits = np.concatenate(at_states), np.concatenate(at_exits)
        order = np.lexsort((exits, states))
        for q, k in zip(states[order].tolist(), exits[order].tolist()):
            exits_at.setdefault(q, []).append(k)
    set_id: dict[tuple[int, ...], int] = {}
    exit_of = np.full(len(class_target), -1, dtype=np.int64)
    for q, exits in exits_at.items():
        exit_of[q] = set_id.setdefault(tuple(exits), len(set_id))
    class_target = class_target.copy()
    class_target[:, marker_classes] = MISSING  # the markers themselves are read by no string
    return class_target, exit_of, sorted(set_id, key=set_id.get)


def is_exit_marker(char: str) -> bool:
    """Whether ``char`` is some ``exit_marker(k)``."""
    return _EXIT_BASE <= ord(char) < _EXIT_BASE + _MAX_EXITS


def shown(pattern: str, most: int = 300) -> str:
    """``pattern`` for an error message: its repr, cut after ``most`` characters (a schema's regex can be 1M)."""
    if len(pattern) <= most:
        return repr(pattern)
    return f"{pattern[:most]!r}... ({len(pattern):,} characters)"


def char_dfa(pattern: str, max_states: int) -> glushkov.CharDFA:
    """The character-class DFA of ``pattern`` (``glushkov``, or interegular's construction for lookaheads)."""
    try:
        tree = glushkov.read_tree(pattern, max_states)
        glushkov.check_positions(tree, max_states)
        return glushkov.char_dfa(tree, max_states) or _interegular_char_dfa(tree, max_states)
    except (InvalidSyntax, Unsupported) as exc:
        raise RegexError(f"regex {shown(pattern)}: {type(exc).__name__}: {str(exc) or 'invalid syntax'}") from None
    except (RegexError, StateLimitError) as exc:
        raise type(exc)(f"regex {shown(pattern)}: {exc}") from None
    except CompileBudgetError:
        raise
    except Exception as exc:  # interegular raises bare Exceptions for some malformed patterns
        raise RegexError(f"regex {shown(pattern)} could not be compiled: {exc}") from None


def _class_dfa(class_target: np.ndarray, accepting: np.ndarray, start: int) -> DFA:
    return DFA(class_target.astype(np.int32), accepting, start, _class_labels(class_target.shape[1]))


@functools.lru_cache(maxsize=1024)
def _class_labels(num_classes: int) -> Alphabet:
    return Alphabet("labels", tuple(str(i) for i in range(num_classes)))


def _expand(class_target: np.ndarray, accepting: np.ndarray, start: int, mapping: dict, alphabet: Alphabet,
            max_states: int) -> DFA:
    """A character-class DFA over ``alphabet``'s symbols (characters, or UTF-8 bytes through the trie)."""
    other = mapping[anything_else]  # class of characters the pattern never names
    if alphabet.kind == "chars":
        symbol_class = np.array([mapping.get(c, other) for c in alphabet.chars], dtype=np.int64)
        return DFA(class_target[:, symbol_class], accepting, start, alphabet)
    return utf8_dfa(class_target, accepting, start, mapping, other, class_target.shape[1] - 1, max_states)


def _interegular_char_dfa(tree, max_states: int) -> glushkov.CharDFA:
    """interegular's own construction, for what ``glushkov`` leaves out (lookaheads)."""
    fsm = tree.to_fsm()
    if len(fsm.states) > max_states:
        raise StateLimitError(f"{len(fsm.states)} character states exceed max_states={max_states}")
    states = sorted(fsm.states, key=repr)
    index = {s: i for i, s in enumerate(states)}
    mapping = dict(fsm.alphabet._symbol_mapping)
    num_classes = max(mapping.values(), default=-1) + 1
    mapping = {c: k for c, k in mapping.items() if c is anything_else or len(c) == 1}  # (?i)ß names 'SS' too
    class_target = np.full((len(states), num_classes + 1), MISSING, dtype=np.int32)  # last column: no class
    for s, row in fsm.map.items():
        for symbol, nxt in row.items():
            class_target[index[s], symbol] = index[nxt]
    mapping.setdefault(anything_else, num_classes)  # characters the pattern never names: no class
    return glushkov.CharDFA(class_target, np.array([s in fsm.finals for s in states], dtype=bool),
                            index[fsm.initial], mapping)


def _utf8_trie(mapping: dict, other: int, dead_class: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The byte trie of all UTF-8 encodings, with shared subtrees, for interegular's class ``mapping``
    (characters it does not name are in class ``other``; no code point: ``dead_class``).

    Returns ``root`` (int64[256]) and ``levels``. ``levels[h-1]`` is int64 ``[nodes, 64]``: for each interior
    node of height h and continuation byte 0x80+i, its child, which is a character class when h == 1 and a
    node id of height h-1 otherwise. Root entries are packed as ``height * 2**32 + id`` (height 0: a class,
    for ASCII bytes and invalid lead bytes).

    Most patterns name no non-ASCII character, or a few (JSON's and ECMA-262's line separators U+2028/9): the trie
    has one shape per partition of those few into classes, whatever the classes' numbers; it is built once per
    partition and relabelled (building it over the 1.1M code points is ~20 ms of every such compile).
    """
    named: dict[int, list[int]] = {}  # class -> the non-ASCII code points named in it
    for c, symbol in mapping.items():
        if c is not anything_else and ord(c) >= 0x80 and not 0xD800 <= ord(c) < 0xE000 and symbol != other:
            named.setdefault(symbol, []).append(ord(c))
    if sum(map(len, named.values())) > _MAX_NAMED_NON_ASCII:
        return _build_utf8_trie(_code_point_classes(mapping, other, dead_class), dead_class)
    groups = tuple(sorted(tuple(sorted(points)) for points in named.values()))
    template_root, template_levels = _utf8_template(groups)
    root = template_root.copy()
    root[root == _DEAD] = dead_class
    root[:0x80] = _ascii_classes(mapping, other)
    # template labels: _DEAD (-2), _NON_ASCII (-1), group i (i)
    label = np.array([dead_class, other] + [mapping[chr(group[0])] for group in groups], dtype=np.int64)
    return root, [label[template_levels[0] + 2]] + template_levels[1:]


def _code_point_classes(mapping: dict, other: int, dead_class: int) -> np.ndarray:
    """int32[0x110000]: every code point's class (surrogates, which have no UTF-8 encoding: ``dead_class``)."""
    code_point_class = np.full(_NUM_CODE_POINTS, other, dtype=np.int32)
    for c, symbol in mapping.items():
        if c is not anything_else:
            code_point_class[ord(c)] = symbol
    code_point_class[0xD800:0xE000] = dead_class
    return code_point_class


def _ascii_classes(mapping: dict, other: int) -> np.ndarray:
    return np.array([mapping.get(chr(b), other) for b in range(0x80)], dtype=np.int64)


_NON_ASCII, _DEAD = -1, -2  # labels of a template: a non-ASCII code point named by no group, no code point
_MAX_NAMED_NON_ASCII = 64  # named non-ASCII code points at most for a template (more: the trie built for the pattern)


@functools.lru_cache(maxsize=64)
def _utf8_template(groups: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The trie with group i's code points labelled i, other non-ASCII ones ``_NON_ASCII`` (ASCII is filled in per
    pattern)."""
    code_point_class = np.full(_NUM_CODE_POINTS, _NON_ASCII, dtype=np.int32)
    for i, group in enumerate(groups):
        code_point_class[list(group)] = i
    code_point_class[:0x80] = _DEAD
    code_point_class[0xD800:0xE000] = _DEAD
    return _build_utf8_trie(code_point_class, _DEAD)


def _build_utf8_trie(code_point_class: np.ndarray, dead_class: int) -> tuple[np.ndarray, list[np.ndarray]]:
    K = 1 << 32
    root = np.full(256, dead_class, dtype=np.int64)
    root[:0x80] = code_point_class[:0x80]
    levels: list[list[np.ndarray]] = [[], [], []]  # rows per height, collected then deduplicated
    counts = [0, 0, 0]

    def build(lead_lo: int, lead_hi: int, length: int, cp_min: int, cp_max: int) -> None:
        leads = np.arange(lead_lo, lead_hi + 1, dtype=np.int64)
        shape = (len(leads),) + (64,) * (length - 1)
        cp = (leads & (0xFF >> (length + 1))).reshape((-1,) + (1,) * (length - 1)) << (6 * (length - 1))
        for k in range(1, length):
            cont = np.arange(64, dtype=np.int64).reshape((1,) * k + (64,) + (1,) * (length - 1 - k))
            cp = cp + (cont << (6 * (length - 1 - k)))
        cp = np.broadcast_to(cp, shape)
        valid = (cp >= cp_min) & (cp <= cp_max)
        node = np.where(valid, code_point_class[np.clip(cp, 0, _NUM_CODE_POINTS - 1)], dead_class)
        # Collapse from the last byte upwards: each row of 64 children becomes one node id at its height.
        for height in range(1, length):
            uniq, inverse = _unique_rows(node.reshape(-1, 64))
            levels[height - 1].append(uniq)
            ids = inverse.ravel() + counts[height - 1]
            counts[height - 1] += len(uniq)
            node = ids.reshape(node.shape[:-1])
        root[lead_lo : lead_hi + 1] = node + (length - 1) * K

    build(0xC2, 0xDF, 2, 0x80, 0x7FF)
    build(0xE0, 0xEF, 3, 0x800, 0xFFFF)
    build(0xF0, 0xF4, 4, 0x10000, 0x10FFFF)
    return root, [np.concatenate(rows) for rows in levels]


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)``, fast when most rows are constant.

    Code points come in long runs of one class, so nearly every row of 64 consecutive code points is
    constant; those are keyed by their single value and only the rest go through the row sort. (Measured:
    the plain row sort over the 20k four-byte rows made every regex compile cost ~0.4 s.)
    """
    constant = (rows == rows[:, :1]).all(axis=1)
    values, const_inverse = np.unique(rows[constant, 0], return_inverse=True)
    uniq = [np.repeat(values[:, None], 64, axis=1)]
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[constant] = const_inverse.ravel()
    if not constant.all():
        mixed = rows[~constant]
        first, mixed_inverse = unique_rows(mixed)
        uniq.append(mixed[first])
        inverse[~constant] = mixed_inverse + len(values)
    return np.concatenate(uniq), inverse


def _uniform_non_ascii_class(mapping: dict, other: int) -> int | None:
    """The class of every non-ASCII code point (surrogates aside) if they all share one, else None: they do
    unless the pattern names a non-ASCII character outside the class of the characters it does not name."""
    named = (symbol for c, symbol in mapping.items() if c is not anything_else and ord(c) >= 0x80
             and not 0xD800 <= ord(c) < 0xE000)
    return other if all(symbol == other for symbol in named) else None


def _reads_only_ascii(class_target: np.ndarray, mapping: dict, other: int) -> bool:
    """Whether no state has an edge on any non-ASCII character (most patterns: ~10 ms saved per compile)."""
    c = _uniform_non_ascii_class(mapping, other)
    return c is not None and bool((class_target[:, c] == MISSING).all())


def utf8_dfa(class_target: np.ndarray, accepting: np.ndarray, start: int, mapping: dict, other: int,
              dead_class: int, max_states: int) -> DFA:
    """Expand a character-class DFA into a byte DFA (see the module docstring)."""
    if _reads_only_ascii(class_target, mapping, other):  # no trie needed: multi-byte leads go nowhere
        table = np.full((class_target.shape[0], 256), MISSING, dtype=np.int32)
        table[:, :0x80] = class_target[:, _ascii_classes(mapping, other)]
        return DFA(table, accepting.copy(), start, Alphabet.bytes())
    K = 1 << 32
    root, levels = _utf8_trie(mapping, other, dead_class)
    num_char_states = class_target.shape[0]
    # Only states with an edge on some multi-byte character get a copy of the trie's interior (a JSON object:
    # 2 of 39 states, the two strings'); the others' multi-byte lead bytes go nowhere.
    reads_multibyte = (class_target[:, np.unique(levels[0])] != MISSING).any(axis=1)
    copy_of = np.where(reads_multibyte, np.cumsum(reads_multibyte) - 1, MISSING)
    copies = int(reads_multibyte.sum())
    offsets = np.cumsum([num_char_states] + [copies * len(level) for level in levels])
    total = int(offsets[-1])
    if total > max_states:
        raise StateLimitError(f"byte-level automaton would have {total} states, over max_states={max_states}")
    table = np.full((total, 256), MISSING, dtype=np.int32)

    def resolve(entries: np.ndarray, height_of_children: np.ndarray, states: np.ndarray) -> np.ndarray:
        """Targets, for each char state of ``states`` (rows), of trie entries that are classes (height 0) or
        nodes (height h: the node in that state's copy of the trie, MISSING if it has none)."""
        out = np.full((len(states), entries.size), MISSING, dtype=np.int64)
        flat_h, flat_id = height_of_children.ravel(), entries.ravel()
        is_class = flat_h == 0
        out[:, is_class] = class_target[states][:, flat_id[is_class]]
        copy = copy_of[states][:, None]
        for h in (1, 2, 3):
            sel = flat_h == h
            if sel.any():
                node = offsets[h - 1] + copy * len(levels[h - 1]) + flat_id[sel][None, :]
                out[:, sel] = np.where(copy >= 0, node, MISSING)
        return out

    heights = root // K
    table[:num_char_states] = resolve(root % K, heights, np.arange(num_char_states))
    for h, level in enumerate(levels, start=1):
        n = len(level)
        child_h = np.full(level.shape, h - 1)
        block = resolve(level, child_h, np.flatnonzero(reads_multibyte)).reshape(copies, n, 64)
        rows = table[offsets[h - 1] : offsets[h]].reshape(copies, n, 256)
        rows[:, :, 0x80:0xC0] = block
    table[table == np.int64(MISSING)] = MISSING
    return DFA(table, np.concatenate([accepting, np.zeros(total - num_char_states, bool)]), start, Alphabet.bytes())
