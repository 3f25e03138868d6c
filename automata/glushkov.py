"""interegular's parse tree -> character-class DFA, by the position (Glushkov) construction.

interegular parses a pattern into a small tree — alternations (``Pattern``), concatenations, repetitions
(``_Repeated``), character groups (``_CharGroup``), the dot and the empty pattern — and builds its DFA by
combining whole FSMs operation by operation: ``x{3}`` concatenates three FSMs, each concatenation crawls a
product of state sets. That was most of a small constraint's compile (``to_fsm``: 2-18 ms of the benchmark's
patterns, e.g. 4.4 of the IPv4 regex's 5.7 ms). Here the tree is read once:

1. every character-group occurrence becomes a *position*; ``x{m,n}`` copies its operand m times, then n - m
   nested optional times (``x(x(x)?)?``), ``x*`` and ``x{m,}`` loop the last copy;
2. each subtree yields (nullable, first positions, last positions) and records ``follow[p]``, the positions that
   may come right after position p (as lists: different subtrees hold different positions, so unions are
   concatenations);
3. the characters the pattern names are grouped into classes by the set of positions that accept them; the
   characters it never names are one more class (interegular's ``anything_else``);
4. subset construction from a virtual start position whose follow set is the root's first positions: compiled,
   over follow lists (``_subsets_kernel``), or over bitsets for small patterns.

Follow sets are sparse in the regexes ``product.stitched`` writes (two positions each on average), so they are
lists, and the subset construction runs compiled over them; small patterns (under 128 positions) use Python-int
bitsets, whose setup is cheaper. Long groups come back in every fragment of a schema (a JSON string's body, "any
value"): ``automata.parse`` reads each once per process and shares its tree, and step 2 numbers a subtree it has
met twice by copying what it did (``_Subtrees``). On the 149 fragment regexes of four MaskBench schemas
(Kubernetes kb_1020, Github o64619, o10927, o10079; 336k characters) this construction took 920 ms with
bitsets and no sharing, 640 ms with lists, ~310 ms with shared subtrees (docs/optimizations.md).

The result is the same language as interegular's FSM (tests compare the minimal DFAs on many patterns), not
necessarily the same states: the caller minimises.

Leaves out: lookarounds (``_NonCapturing``) and the multiline flag. ``char_dfa`` returns None for those and the
caller falls back to interegular's own construction (which implements lookaheads and raises its errors).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import interegular
import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import _DOT, _EMPTY, Pattern, REFlags, _CharGroup, _Concatenation, _Repeated
from numba import njit

from automata import parse
from automata.budget import checkpoint
from automata.dfa import MISSING
from automata.errors import RegexError, StateLimitError
from automata.parse import Loop

__all__ = ["CharDFA", "char_dfa", "check_positions", "first_characters", "position_matcher", "read_tree"]


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


class _Block(NamedTuple):
    """What numbering one subtree did, to be done again by copying (``_Positions.replay``). Invariant: positions
    are counted from ``base``, the first one the subtree numbered; the follow entries are only the links inside it
    (those made while it was visited)."""
    keys: tuple  # the groups (characters, negated) of its positions, in order of first appearance
    local_groups: np.ndarray  # per position: its group among ``keys``
    follow: np.ndarray  # every position's follow entries, one after the other
    spans: tuple  # per position: (start, end) of its entries in ``follow``
    base: int
    nullable: bool
    first: np.ndarray
    last: np.ndarray


_Triple = tuple[bool, list, list]  # (nullable, first positions, last positions)
_NONE: list = []  # (an empty position list, shared: lists in triples are never changed in place)
_MULTILINE, _CASE_INSENSITIVE, _SINGLE_LINE = (f.value for f in (REFlags.MULTILINE, REFlags.CASE_INSENSITIVE,
                                                                 REFlags.SINGLE_LINE))


class _Positions:
    """Step 1-2: numbers the positions of a tree and collects their character sets and follow lists.

    Position sets are lists: the positions of different subtrees are different, so a union of alternatives or
    of a concatenation's ends is a concatenation of lists, and ``link`` costs the follow entries it adds. (As
    P-bit ints every operation cost O(P): listing the follow sets of Kubernetes kb_1020's 16 fragment regexes took
    93 ms that way, a third of their DFAs.) A follow list may name a position twice (a loop linked again);
    step 4 reads each once."""

    def __init__(self, max_positions: int):
        self.max_positions = max_positions
        # positions naming the same characters (equal sets, the same negation) form a group, numbered in order of
        # first appearance: per group its (characters, negated), per position its group
        self.group_of: dict[tuple[frozenset, bool], int] = {}
        self.group_keys: list[tuple[frozenset, bool]] = []
        self.groups: list[int] = []
        self.follow: list[list[int]] = []
        self.entries = 0  # follow entries so far (at most ``_MAX_FOLLOW_ENTRIES``)

    def position(self, chars: frozenset, negated: bool) -> _Triple:
        p = len(self.groups)
        if p >= self.max_positions:
            raise _too_many_positions(self.max_positions)
        if not p & 1023:
            checkpoint()  # the compile's budget (``automata.budget``)
        self.groups.append(self.group((chars, negated)))
        self.follow.append([])
        one = [p]
        return False, one, one

    def group(self, key: tuple[frozenset, bool]) -> int:
        g = self.group_of.get(key)
        if g is None:
            g = self.group_of[key] = len(self.group_keys)
            self.group_keys.append(key)
        return g

    def link(self, last: list, first: list) -> None:
        """Every position of ``last`` may be followed by every position of ``first``."""
        if first:
            self.count_entries(len(last) * len(first))
            follow = self.follow
            for p in last:
                follow[p] += first

    def count_entries(self, added: int) -> None:
        """``added`` more follow entries, past ``_MAX_FOLLOW_ENTRIES`` a ``StateLimitError``."""
        self.entries += added
        if self.entries > _MAX_FOLLOW_ENTRIES:
            raise StateLimitError(f"more than {_MAX_FOLLOW_ENTRIES:,} follow entries between character positions "
                                  "(a loop over many alternatives)")

    def block(self, offset: int, nullable: bool, first: list, last: list) -> _Block:
        """What visiting a subtree did, from position ``offset`` on (only links inside it so far)."""
        follow = self.follow[offset:]
        sizes = [len(f) for f in follow]
        flat = np.fromiter(itertools.chain.from_iterable(follow), dtype=np.int64, count=sum(sizes))
        bounds = list(itertools.accumulate(sizes, initial=0))
        local: dict[int, int] = {}  # the block's groups, in order of first appearance
        local_groups = np.array([local.setdefault(g, len(local)) for g in self.groups[offset:]], dtype=np.int64)
        keys = tuple(self.group_keys[g] for g in local)
        return _Block(keys, local_groups, flat, tuple(zip(bounds, bounds[1:])), offset, nullable,
                      np.array(first, dtype=np.int64), np.array(last, dtype=np.int64))

    def replay(self, block: _Block) -> _Triple:
        """A subtree numbered again from here, copied from its ``block``: each array shifted at once."""
        offset = len(self.groups)
        if offset + len(block.local_groups) > self.max_positions:
            raise _too_many_positions(self.max_positions)
        checkpoint()
        self.count_entries(len(block.follow))
        self.groups += np.array([self.group(key) for key in block.keys], dtype=np.int64)[block.local_groups].tolist()
        shift = offset - block.base
        shifted = (block.follow + shift).tolist()
        self.follow += [shifted[a:b] for a, b in block.spans]
        return block.nullable, (block.first + shift).tolist(), (block.last + shift).tolist()

    def then(self, a: _Triple, b: _Triple) -> _Triple:
        """The concatenation of a and b."""
        self.link(a[2], b[1])
        return a[0] and b[0], a[1] + b[1] if a[0] else a[1], b[2] + a[2] if b[0] else b[2]

    def visit(self, node, flags: int) -> _Triple:
        """(nullable, first, last) of ``node`` under ``flags`` (``REFlags`` as an int: enum operations cost
        ~3 µs each, a third of this construction when they were Flag objects). Nodes are told apart by their
        exact class (interegular's classes are ABCs: an ``isinstance`` costs ~1 µs), character groups first."""
        if flags & _MULTILINE:
            raise _Unsupported
        kind = type(node)
        if kind is _CharGroup:
            return self.position(_named(node, flags), node.negated)
        if kind is _Concatenation:
            result = (True, _NONE, _NONE)
            for part in node.parts:
                result = self.then(result, self.visit(part, flags))
            return result
        if kind is Pattern:  # alternation, possibly changing flags
            key = (id(node), flags)
            seen = _SUBTREES.table.get(key)
            if seen is not None and seen[0] is node and seen[1] is not None:
                return self.replay(seen[1])
            flags = (flags | node.added_flags.value) & ~node.removed_flags.value
            offset = len(self.groups)
            nullable, first, last = False, [], []
            for option in node.options:
                option_nullable, option_first, option_last = self.visit(option, flags)
                nullable = nullable or option_nullable
                first += option_first
                last += option_last
            if len(self.groups) - offset >= _BLOCK_POSITIONS:
                if seen is not None and seen[0] is node:  # the second time: kept, to be copied from now on
                    _SUBTREES.keep(key, node, self.block(offset, nullable, first, last))
                else:
                    _SUBTREES.seen(key, node)
            return nullable, first, last
        if kind is _Repeated:
            _check_bounds(node)
            result = (True, _NONE, _NONE)
            for _ in range(node.min):
                result = self.then(result, self.visit(node.base, flags))
            if node.max is None:  # x{m,}: one more copy that loops
                nullable, first, last = self.visit(node.base, flags)
                self.link(last, first)
                return self.then(result, (True, first, last))
            optional = (True, _NONE, _NONE)  # x{0,k} as (x(x(...)?)?)?, built from the inside out
            for _ in range(node.max - node.min):
                _, first, last = self.then(self.visit(node.base, flags), optional)
                optional = (True, first, last)
            return self.then(result, optional)
        if node is _DOT:  # any character but a newline, unless the single-line flag is set
            return self.position(frozenset() if flags & _SINGLE_LINE else frozenset("\n"), True)
        if node is _EMPTY:
            return True, _NONE, _NONE
        if kind is Loop:  # (head|item)(sep item)*: item's positions once, its last ones leading to sep's first
            head = (False, _NONE, _NONE) if node.head is None else self.visit(node.head, flags)
            item, sep = self.visit(node.item, flags), self.visit(node.sep, flags)
            begins_empty = head[0] or item[0]
            after = head[2] + item[2] + (sep[2] if item[0] else [])  # where a separator may come next
            self.link(after, sep[1])
            self.link(sep[2], item[1])
            if sep[0]:
                self.link(after, item[1])
            return begins_empty, head[1] + item[1] + (sep[1] if begins_empty else []), after
        raise _Unsupported  # lookarounds


def first_characters(tree: Pattern) -> tuple[bool, frozenset | None] | None:
    """What ``char_dfa``'s start state reads, without numbering positions: (whether the empty text matches, the
    characters a text may start with — None where a negated class or the dot may come first, which read characters
    the pattern never names). None where ``char_dfa`` leaves the pattern out (lookarounds, the multiline flag).
    Cost: the nodes a text's first character can be read in, where ``char_dfa`` numbers every position (a bounded
    ``format: uri`` leaf: 98k positions, 0.7 s, for its first letter)."""
    seen: dict[tuple[int, int], tuple[bool, frozenset | None]] = {}

    def visit(node, flags: int) -> tuple[bool, frozenset | None]:
        if flags & _MULTILINE:
            raise _Unsupported
        key = (id(node), flags)
        if key in seen:
            return seen[key]
        kind = type(node)
        if kind is _CharGroup:
            found = False, (None if node.negated else frozenset(c for c in _named(node, flags) if len(c) == 1))
        elif kind is _Concatenation or kind is Pattern or kind is _Repeated:
            if kind is Pattern:
                flags = (flags | node.added_flags.value) & ~node.removed_flags.value
                parts, every = node.options, False
            elif kind is _Concatenation:
                parts, every = node.parts, True
            else:
                _check_bounds(node)
                parts, every = (() if node.max == 0 else (node.base,)), True
            nullable, chars = every, frozenset()
            for part in parts:
                part_nullable, part_chars = visit(part, flags)
                chars = None if chars is None or part_chars is None else chars | part_chars
                if every and not part_nullable:
                    nullable = False
                    break
                nullable = nullable or part_nullable
            if kind is _Repeated and node.min == 0:
                nullable = True
            found = nullable, chars
        elif node is _DOT:
            found = False, None
        elif node is _EMPTY:
            found = True, frozenset()
        elif kind is Loop:  # (head|item), then a separator where that may be empty
            head = (False, frozenset()) if node.head is None else visit(node.head, flags)
            item, sep = visit(node.item, flags), visit(node.sep, flags)
            nullable = head[0] or item[0]
            parts = [head[1], item[1]] + ([sep[1]] if nullable else [])
            found = nullable, None if None in parts else frozenset().union(*parts)
        else:
            raise _Unsupported  # lookarounds
        seen[key] = found
        return found

    try:
        return visit(tree, 0)
    except _Unsupported:
        return None


def _named(group: _CharGroup, flags: int) -> frozenset:
    """The characters a group names under ``flags``: as interegular, both cases of each under ``(?i)``."""
    if flags & _CASE_INSENSITIVE:
        return frozenset({*(c.lower() for c in group.chars), *(c.upper() for c in group.chars)})
    return group.chars


def _check_bounds(node: _Repeated) -> None:
    if node.max is not None and node.min > node.max:
        raise RegexError(f"repetition {{{node.min},{node.max}}}: the minimum exceeds the maximum")


def _too_many_positions(cap: int) -> StateLimitError:
    return StateLimitError(f"more than {cap} character positions (max_states, or {_MAX_POSITIONS} at most: the "
                           f"follow sets would not fit in memory)")


def read_tree(pattern: str, max_states: int) -> Pattern:
    """interegular's parse tree of ``pattern`` (``automata.parse``'s reader, or interegular's parser for the syntax
    it leaves out), after ``_check_length``: every reader of a pattern in canonmerge (the regex, a grammar rule, the
    counted construction) comes here."""
    _check_length(pattern, max_states)
    return parse.read(pattern) or interegular.parse_pattern(pattern)


def _check_length(pattern: str, max_states: int) -> None:
    """Raises ``char_dfa``'s ``StateLimitError`` before parsing when ``pattern`` is longer than
    ``_CHARS_PER_POSITION`` characters per position any compile numbers (``_MAX_POSITIONS``, whatever
    ``max_states``): its positions would be past the cap in any regex written as schemas and grammars write them
    (~5 characters a position: a JSON string's body is ~50 characters for 10), and reading it would take seconds
    first (a 29M-character schema regex parsed in 51 s before ``check_positions`` could refuse it). ``max_states``
    is for the message only: the positions under a smaller cap are counted after parsing."""
    most = _CHARS_PER_POSITION * _MAX_POSITIONS
    if len(pattern) > most:
        raise StateLimitError(f"a regex of {len(pattern):,} characters: more than {most:,} ({_CHARS_PER_POSITION} "
                              f"characters for each of the {_MAX_POSITIONS} character positions a compile numbers at "
                              f"most, whatever max_states={max_states})")


def check_positions(tree: Pattern, max_states: int) -> None:
    """Raises ``char_dfa``'s ``StateLimitError`` when ``tree`` has more positions than it would number, counted
    without building them (repetitions multiply their operand's count): a regex past the cap then fails in the
    time of one walk over its tree, where numbering grows follow sets as wide as the positions before them (a
    1.2M-character schema regex took 15 s and 2.2 GB to reach the cap). Trees ``char_dfa`` leaves out pass."""
    cap = min(4 * max_states, _MAX_POSITIONS)

    def count(node) -> int:
        kind = type(node)
        if kind is _CharGroup or node is _DOT:
            return 1
        if kind is _Concatenation:
            return sum(map(count, node.parts))
        if kind is Pattern:
            return sum(map(count, node.options))
        if kind is _Repeated:
            if node.max is not None and node.min > node.max:
                raise RegexError(f"repetition {{{node.min},{node.max}}}: the minimum exceeds the maximum")
            copies = node.min + 1 if node.max is None else node.max
            return count(node.base) * copies if copies else 0
        if node is _EMPTY:
            return 0
        if kind is Loop:
            return (0 if node.head is None else count(node.head)) + count(node.item) + count(node.sep)
        raise _Unsupported

    try:
        if count(tree) > cap:
            raise _too_many_positions(cap)
    except _Unsupported:
        return


class CharEdges(NamedTuple):
    """``char_dfa``'s result as edges (``char_dfa(..., edges=True)``): states 0..num_states - 1 (0 the start),
    classes 0..num_classes - 1 (``mapping`` as ``CharDFA``'s), one (source, class, target) per transition."""

    num_states: int
    num_classes: int
    sources: np.ndarray
    classes: np.ndarray
    targets: np.ndarray
    accepting: np.ndarray
    mapping: dict


def char_dfa(tree: Pattern, max_states: int, *, sparse: bool | None = None,
             edges: bool = False) -> CharDFA | CharEdges | None:
    """The DFA of ``tree`` (interegular's parse), or None if it uses what this construction leaves out.

    Raises ``StateLimitError`` past ``max_states`` states (or 4x as many positions, at most ``_MAX_POSITIONS``) and
    ``RegexError`` for a repetition whose minimum exceeds its maximum. ``sparse`` picks step 4's implementation
    (None: by the size of the follow sets; both give the same DFA, numbered alike); ``edges``: the DFA as its
    edges (``CharEdges``), never laid out as a table.
    """
    positions = _Positions(min(4 * max_states, _MAX_POSITIONS))
    try:
        nullable, first, last = positions.visit(tree, 0)
    except _Unsupported:
        return None
    num_positions = len(positions.groups)

    # Step 3: classes. Two characters are in one class iff the same groups of positions (``_Positions``) name them.
    # Characters the pattern never names are class 0. A class accepts the plain positions naming it and the negated
    # positions not naming it.
    group_chars = [chars for chars, _ in positions.group_keys]
    group_negated = [negated for _, negated in positions.group_keys]
    naming: dict[str, list[int]] = {}  # character -> the groups naming it, in first-appearance order
    for g, chars in enumerate(group_chars):
        for c in chars:
            if len(c) == 1:  # case folding can name multi-character strings ('ß'.upper()); no character is one
                naming.setdefault(c, []).append(g)
    class_of_key: dict[tuple, int] = {(): 0}
    mapping = {anything_else: 0}
    for c, groups in naming.items():
        mapping[c] = class_of_key.setdefault(tuple(groups), len(class_of_key))
    num_classes = len(class_of_key)
    own: list[set] = [set() for _ in group_chars]  # per group: the classes of the characters it names
    for c, groups in naming.items():
        for g in groups:
            own[g].add(mapping[c])
    group_classes = [[k for k in range(num_classes) if k not in own[g]] if negated else sorted(own[g])
                     for g, negated in enumerate(group_negated)]
    # (per group: exactly the classes accepting its positions)

    # Step 4: subset construction; state 0 is the virtual start (position ``num_positions``), followed by the
    # root's first positions. Classes are tried in increasing order, so states are numbered as a walk over every
    # class would number them.
    follow = positions.follow + [first]
    if sparse is None:
        # Follow sets as lists cost their entries (two per position in a JSON fragment's regex); as bitsets, each
        # subset state costs a few operations on P-bit ints, O(P) each. A YAML fragment of MaskBench's o41692
        # (26,070 positions, 21,270 states): 2.8 s as bitsets. Below ~128 positions the bitsets are small and the
        # lists' setup costs more (a 97-character key set: 0.65 ms as bitsets, 0.76 as lists).
        sparse = num_positions >= _SPARSE_POSITIONS
    if sparse:
        sources, classes, targets, accepting = _sparse_subsets(follow, positions.groups, group_classes, num_classes,
                                                               last, max_states)
    else:
        classes_of = [group_classes[g] for g in positions.groups]
        sources, classes, targets, accepting = _bitset_subsets(follow, classes_of, num_classes, last, max_states)
    accepting[0] = nullable
    if edges:  # (a skeleton's: tens of thousands of states over hundreds of classes, the table mostly missing)
        return CharEdges(len(accepting), num_classes + 1, np.asarray(sources, dtype=np.int64),
                         np.asarray(classes, dtype=np.int64), np.asarray(targets, dtype=np.int64),
                         np.asarray(accepting, dtype=bool), mapping)
    class_target = np.full((len(accepting), num_classes + 1), MISSING, dtype=np.int32)
    class_target[sources, classes] = targets
    return CharDFA(class_target, accepting, 0, mapping)


# Positions at most, whatever max_states: numbering them is a walk over the tree in Python, and the subset
# construction's states hold lists of them (a 1.2M-character schema regex once reached 14 GB at ~300k positions
# before its StateLimitError; capped here it fails in seconds). The largest fragment regexes compiled have ~26k.
_MAX_POSITIONS = 120_000
_CHARS_PER_POSITION = 16  # characters of pattern per position at most (``_check_length``)
_SPARSE_POSITIONS = 128  # positions at least for the sparse subset construction


def position_matcher(tree: Pattern, max_positions: int = _MAX_POSITIONS):
    """A function telling whether a text matches ``tree`` whole, by running the position automaton of steps 1-2
    on it (no subset construction: each character costs the positions live after the one before), or None if the
    tree uses what this construction leaves out. For a pattern whose DFA is too large to build but whose texts are
    short (``vegas.format_instance`` choosing among alternatives). Raises ``StateLimitError`` past
    ``max_positions`` positions or ``_MAX_FOLLOW_ENTRIES`` follow entries."""
    positions = _Positions(max_positions)
    try:
        nullable, first, last = positions.visit(tree, 0)
    except _Unsupported:
        return None
    keys, group_of_position, follow, ends = positions.group_keys, positions.groups, positions.follow, set(last)

    def matches(text: str) -> bool:
        candidates, here = first, None
        for ch in text:
            here = set()
            for p in candidates:
                chars, negated = keys[group_of_position[p]]
                if (ch in chars) != negated:
                    here.add(p)
            if not here:
                return False
            candidates = {q for p in here for q in follow[p]}
        return nullable if here is None else not here.isdisjoint(ends)

    return matches
class _Subtrees:
    """Alternations (groups) numbered in this process: (node id, flags) -> (node, its block, or None where seen
    once). An alternation of ``_BLOCK_POSITIONS`` positions or more is numbered by copying once it has been seen
    twice (``_Positions.replay``): ``automata.parse`` shares the trees of long groups between patterns, and a
    schema's fragments repeat the same ones dozens of times (a JSON string's body, "any value"). The node is kept
    beside its id, so the id names it while it is held. All is dropped past ``_MAX_SEEN`` subtrees or
    ``_MAX_KEPT_POSITIONS`` positions in blocks (nested blocks each count theirs)."""

    def __init__(self):
        self.table: dict[tuple[int, int], tuple] = {}
        self.positions = 0

    def seen(self, key: tuple[int, int], node) -> None:
        if len(self.table) >= _MAX_SEEN:
            self.clear()
        self.table[key] = (node, None)

    def keep(self, key: tuple[int, int], node, block: _Block) -> None:
        size = len(block.local_groups)
        if self.positions + size > _MAX_KEPT_POSITIONS:
            self.clear()
        self.positions += size
        self.table[key] = (node, block)

    def clear(self) -> None:
        self.table.clear()
        self.positions = 0


_BLOCK_POSITIONS = 16
_MAX_KEPT_POSITIONS = 1 << 21
_MAX_SEEN = 1 << 14
_SUBTREES = _Subtrees()
_MAX_FOLLOW_ENTRIES = 1 << 25  # follow entries at most (int64 arrays: 256 MB)


def _sparse_subsets(follow: list[list[int]], groups: list[int], group_classes: list[list[int]], num_classes: int,
                    last: list[int], max_states: int):
    """Step 4 over follow and class lists (compiled: ``_subsets_kernel``): edges (sources, classes, targets) and
    per state whether it holds a last position."""
    sizes = [len(f) for f in follow]
    follow_start = np.zeros(len(follow) + 1, dtype=np.int64)
    np.cumsum(sizes, out=follow_start[1:])
    follow_pos = np.fromiter(itertools.chain.from_iterable(follow), dtype=np.int64, count=int(follow_start[-1]))
    class_start = np.zeros(len(group_classes) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in group_classes], out=class_start[1:])
    class_pos = np.fromiter(itertools.chain.from_iterable(group_classes), dtype=np.int64, count=int(class_start[-1]))
    group = np.array(groups, dtype=np.int64)
    result = _subsets_kernel(follow_start, follow_pos, group, class_start, class_pos, num_classes, max_states)
    state_start, state_pos, sources, classes, targets, ok = result
    if not ok:
        raise StateLimitError(f"more than max_states={max_states} character states")
    is_last = np.zeros(len(follow), dtype=bool)
    is_last[last] = True
    # every state holds at least one position, so each reduceat segment is its own
    accepting = np.logical_or.reduceat(is_last[state_pos[:state_start[-1]]], state_start[:-1])
    return sources, classes, targets, accepting


def _bits(positions: list[int]) -> int:
    """A list of positions as a bitset (small patterns: ``_bitset_subsets``)."""
    bits = 0
    for p in positions:
        bits |= 1 << p
    return bits


@njit(cache=True, nogil=True)
def _subsets_kernel(follow_start, follow_pos, group, class_start, class_pos, num_classes, max_states):
    """The subset construction from the virtual start (the last position). A state is a sorted list of positions,
    held in ``state_pos[state_start[s]:state_start[s + 1]]`` and found by an open-addressed hash table. Per
    state: the positions its positions may be followed by (``reach``, each once), bucketed by the classes that
    accept them (in increasing position order, so each target is sorted), then one target per class, classes in
    increasing order. Returns (state_start, state_pos, sources, classes, targets, False if past max_states)."""
    virtual = len(follow_start) - 2
    state_start = np.zeros(1024, dtype=np.int64)
    state_pos = np.empty(4096, dtype=np.int64)
    state_pos[0] = virtual
    state_start[1] = 1
    num_states = 1
    capacity = 1024
    table = np.full(capacity, -1, dtype=np.int64)
    table[_subset_hash(state_pos, 0, 1) & (capacity - 1)] = 0
    sources = np.empty(1024, dtype=np.int64)
    classes = np.empty(1024, dtype=np.int64)
    targets = np.empty(1024, dtype=np.int64)
    num_edges = 0
    mark = np.full(virtual + 1, -1, dtype=np.int64)
    reach = np.empty(virtual + 1, dtype=np.int64)
    count = np.zeros(num_classes, dtype=np.int64)
    offset = np.zeros(num_classes, dtype=np.int64)
    touched = np.empty(num_classes, dtype=np.int64)
    bucket = np.empty(16, dtype=np.int64)
    s = 0
    while s < num_states:
        # the positions that may follow this state's positions, each once, sorted
        r = 0
        for i in range(state_start[s], state_start[s + 1]):
            p = state_pos[i]
            for j in range(follow_start[p], follow_start[p + 1]):
                q = follow_pos[j]
                if mark[q] != s:
                    mark[q] = s
                    reach[r] = q
                    r += 1
        _sort_small(reach, r)
        reached = reach[:r]
        # bucket them by class: counts, offsets (classes in increasing order), then the positions
        t = 0
        total = 0
        for q in reached:
            for j in range(class_start[group[q]], class_start[group[q] + 1]):
                c = class_pos[j]
                if count[c] == 0:
                    touched[t] = c
                    t += 1
                count[c] += 1
                total += 1
        _sort_small(touched, t)
        order = touched[:t]
        if total > len(bucket):
            bucket = np.empty(2 * total, dtype=np.int64)
        at = 0
        for c in order:
            offset[c] = at
            at += count[c]
        for q in reached:
            for j in range(class_start[group[q]], class_start[group[q] + 1]):
                c = class_pos[j]
                bucket[offset[c]] = q
                offset[c] += 1
        for c in order:
            end = offset[c]
            begin = end - count[c]
            count[c] = 0
            size = end - begin
            # the target state: found, or added
            h = _subset_hash(bucket, begin, end)
            slot = h & (capacity - 1)
            target = -1
            while table[slot] >= 0:
                u = table[slot]
                a, b = state_start[u], state_start[u + 1]
                if b - a == size:
                    same = True
                    for k in range(size):
                        if state_pos[a + k] != bucket[begin + k]:
                            same = False
                            break
                    if same:
                        target = u
                        break
                slot = (slot + 1) & (capacity - 1)
            if target < 0:
                if num_states >= max_states:
                    return state_start[:num_states + 1], state_pos, sources[:num_edges], classes[:num_edges], \
                        targets[:num_edges], False
                target = num_states
                used = state_start[num_states]
                if used + size > len(state_pos):
                    state_pos = _grown(state_pos, used + size)
                state_pos[used:used + size] = bucket[begin:end]
                if num_states + 2 > len(state_start):
                    state_start = _grown(state_start, num_states + 2)
                state_start[num_states + 1] = used + size
                num_states += 1
                table[slot] = target
                if 2 * num_states > capacity:  # keep the table at most half full
                    capacity *= 2
                    table = np.full(capacity, -1, dtype=np.int64)
                    for u in range(num_states):
                        slot = _subset_hash(state_pos, state_start[u], state_start[u + 1]) & (capacity - 1)
                        while table[slot] >= 0:
                            slot = (slot + 1) & (capacity - 1)
                        table[slot] = u
            if num_edges >= len(sources):
                sources, classes, targets = _grown(sources, num_edges + 1), _grown(classes, num_edges + 1), \
                    _grown(targets, num_edges + 1)
            sources[num_edges], classes[num_edges], targets[num_edges] = s, c, target
            num_edges += 1
        s += 1
    return state_start[:num_states + 1], state_pos, sources[:num_edges], classes[:num_edges], targets[:num_edges], \
        True


@njit(cache=True, nogil=True)
def _sort_small(values, n):
    """Sort ``values[:n]`` in place: insertion sort for the few positions of most states, else numpy's."""
    if n > 16:
        values[:n] = np.sort(values[:n])
        return
    for i in range(1, n):
        v = values[i]
        j = i - 1
        while j >= 0 and values[j] > v:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = v


@njit(cache=True, nogil=True)
def _subset_hash(values, begin, end):
    h = np.uint64(end - begin) * np.uint64(0x9E3779B97F4A7C15)
    for i in range(begin, end):
        h = (h ^ np.uint64(values[i])) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return np.int64(h >> np.uint64(1))


@njit(cache=True, nogil=True)
def _grown(array, need):
    size = len(array)
    while size < need:
        size *= 2
    out = np.empty(size, dtype=array.dtype)
    out[:len(array)] = array
    return out


def _bitset_subsets(follow_lists: list[list[int]], classes_of: list[list[int]], num_classes: int,
                    last_positions: list[int], max_states: int):
    """Step 4 over bitsets (Python ints), for small patterns and follow sets too large to list: edges (sources,
    classes, targets) and per state whether it holds a last position."""
    follow = [_bits(f) for f in follow_lists]
    last = _bits(last_positions)
    members = [bytearray((len(follow) + 7) // 8) for _ in range(num_classes)]  # (an int built bit by bit: O(P^2))
    class_bits = []
    for p, classes in enumerate(classes_of):
        bits = 0
        for k in classes:
            members[k][p >> 3] |= 1 << (p & 7)
            bits |= 1 << k
        class_bits.append(bits)
    class_sets = [int.from_bytes(m, "little") for m in members]
    start = 1 << (len(follow) - 1)
    index = {start: 0}
    order = [start]
    sources, classes, targets = [], [], []
    source = -1
    while source + 1 < len(order):  # ``order`` grows as states are found
        source += 1
        if not source & 63:
            checkpoint()
        subset = order[source]
        reachable, candidates = 0, 0
        while subset:
            low = subset & -subset
            reachable |= follow[low.bit_length() - 1]
            subset ^= low
        rest = reachable
        while rest:
            low = rest & -rest
            candidates |= class_bits[low.bit_length() - 1]
            rest ^= low
        while candidates:
            low = candidates & -candidates
            c = low.bit_length() - 1
            candidates ^= low
            target = reachable & class_sets[c]
            state = index.get(target)
            if state is None:
                if len(order) >= max_states:
                    raise StateLimitError(f"more than max_states={max_states} character states")
                state = index[target] = len(order)
                order.append(target)
            sources.append(source)
            classes.append(c)
            targets.append(state)
    return sources, classes, targets, np.array([bool(s & last) for s in order], dtype=bool)
