"""Stitched guides: a constraint cut at hard token boundaries into fragments, each compiled once and reused.

A position in a text is *hard* for a tokenizer when no vocabulary token contains the two bytes around it: no
token can then cross it (every intermediate BPE symbol is a vocabulary token, so no merge can join the two
sides), and a canonical tokenization of the whole is the canonical tokenizations of the two sides, one after
the other. Only the pre-tokenizer's context (``ctx``) carries over; the merge class of the last token does not
matter, since no token it could forbid starts at the boundary. So a guide for the text after a hard position
is the guide of that fragment's own regex, started in the context the text before left (``Guide``'s
``start_context``) — and it is the same guide in every constraint that has that fragment there.

The input is a *skeleton*: a regex whose leaves (string bodies, numbers, keys...) are placeholder characters,
each standing for a regex (``vegas.schema`` writes JSON Schema this way). Its character DFA is small: only the
literal structure (keys, punctuation) is in it, and each run of literals that no cut could split (every byte pair
in it inside some token) is one character of that DFA (``_skeleton_dfa``). A state of the skeleton is *cut* when
every edge into it reads a literal character x, every edge out of it a literal character y, and no token contains
the last byte of any x followed by the first byte of any y — unless only literal text lies between it and the cut
states on either side (``_literal_cuts_dropped``: a key is one fragment, not three). A fragment is what the
skeleton reads from a cut state (or the start) up to the next cut states, its *exits*: written as a regex
(placeholders replaced by their regexes, each exit by a marker, ``automata.regex.exit_marker``) and compiled by
``from_regex_exits`` into a byte DFA that knows which accepting state is which exit. Exit 0 is the end of the text.

At run time a state is (fragment instance, state of the instance's guide), numbered into one int. When a token
reaches an exit, the state moves to the next instance's initial state in the context the token left: an
instance is (cut states, entry context), built for every context an exit node of its predecessor has (several
cut states where overlapping leaves let one text end at several exits). So the masks are the fragment guides'
masks, unchanged, and every allowed token still leads to a live state: an exit is final in its fragment only
where the instance it leads to is live (``compile_stitched`` solves this across instances). Where a leaf
overlaps the literal before a cut, the text could go on past the exit inside the fragment: that cut is not made
there (a *soft* exit). Cycles inside a fragment are written by state elimination.

``fine_cuts`` (``compile_stitched``) also cuts where a byte pair around a state is inside tokens but no such
token, laid across the state, fits the skeleton's text around it and the pre-tokenizer's contexts after it
(``_Crossing``), and before leaves whose first characters are known. Slower to find (a second per large
skeleton), so ``vegas.compile_schema`` uses it only where the plain cuts leave a fragment too long to write.

Compiled fragments are kept per canonical automaton in ``FragmentLibrary`` (memory, and on disk when given a
directory: ``product.library``), keyed by their regex, entry context, EOS and options: a new constraint
compiles only the fragments no earlier one had.

A fragment whose regex has a counted repetition (``maxLength: 100``, ``{0,32}``) is compiled with a counter beside
the state (``product.counted`` reads the exit markers too; a ``CountedGuide`` is stored and loaded like a plain
fragment guide); where that construction does not apply, unrolled like any other.

Leaves out (``StitchError``: the caller compiles the whole regex instead): fragments whose regex would be too
long to write out. ``tests/test_stitched.py`` checks every mask against the guide of the whole regex.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import re
import threading
import time
from dataclasses import dataclass

import numpy as np

from automata import MISSING, EmptyLanguageError, glushkov, parse
from automata.errors import CanonmergeError, RegexError, StateLimitError
from automata.dfa import minimal_table
from automata.regex import _char_dfa, exit_marker, from_regex_exits, shown
from automata.regions import eliminate
from interegular.fsm import anything_else
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.counted import MIN_COUNT, CountedGuide, counted_transitions
from product.guide import Guide, _guide_eos, _per_automaton, vocabulary_trie
from product.token_regex import TokenTransitions

__all__ = ["StitchedGuide", "StitchError", "FragmentTooLongError", "compile_stitched", "Fragment", "FragmentLibrary", "PLACEHOLDERS"]

END = -1  # a root of an instance: the text may end where the instance starts
PLACEHOLDERS = range(0xD800, 0xDC00)  # placeholder characters of a skeleton: lone surrogates, in no text
_MAX_FRAGMENT_REGEX = 200_000  # characters: a fragment's regex is written as a tree; sharing is not kept
_COUNTED = re.compile(r"(?<!\\)\{(\d+),(\d+)\}")


class StitchError(CanonmergeError):
    """The skeleton cannot be cut into fragments this module compiles (see the module docstring)."""


class FragmentTooLongError(StitchError):
    """A fragment's regex would be too long to write out (its skeleton is not cut finely enough)."""


class _SoftExits(Exception):
    """A fragment's text can go on past these exits (a leaf that overlaps the literal before a cut state, e.g. a
    free key's opening quote): they must not be cut in this fragment."""

    def __init__(self, exits: set[int]):
        self.exits = exits


@dataclass(eq=False)
class Fragment:
    """A compiled fragment: its guide (started in ``entry_context``), and per guide node the exits it is at,
    ``exit_sets[exit_of_node[node]]`` (-1: none; exit 0 is the end of the text, k >= 1 the fragment's k-th cut
    exit; a text may be at several when alternatives overlap)."""
    regex: str
    entry_context: int
    guide: Guide
    exit_of_node: np.ndarray
    exit_sets: list[tuple[int, ...]]
    seconds: float  # compile time

    @functools.cached_property
    def cut_exits(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """(node, pre-tokenizer context, exit set) of every final node at a cut exit: where a stitched guide
        moves on to the next instance (computed once per fragment, not per guide built from it)."""
        cuts = np.array([any(k >= 1 for k in e) for e in self.exit_sets] + [False], dtype=bool)[self.exit_of_node]
        nodes = np.flatnonzero(cuts & self.guide._final)
        return list(zip(nodes.tolist(), self.guide._node_ctx[nodes].tolist(),
                        [self.exit_sets[e] for e in self.exit_of_node[nodes].tolist()]))


@dataclass(eq=False)
class _Instance:
    """A fragment where the skeleton reaches the cut states ``roots`` (``END`` among them: the text may also
    end there) in context ``entry_context``. ``next_of_node``: per node of the fragment's guide at a cut exit,
    the instance its exits lead to."""
    roots: frozenset
    entry_context: int
    fragment: Fragment
    next_of_node: dict[int, int]


class FragmentLibrary:
    """Compiled fragments of one canonical automaton in memory — the least recently used evicted past
    ``max_fragments`` fragments or ``max_bytes`` of their guides (``Guide.memory_bytes``; a guide already
    stitched into a guide stays alive there) — backed by a ``product.library.FragmentStore`` on disk when ``get``
    is given one. Thread-safe: the tables change under a lock; compiling happens outside it (two threads may
    compile one fragment at once; the second result replaces the first, both exact)."""

    def __init__(self, canonical: CanonicalAutomaton, max_fragments: int = 4096, max_bytes: int = 1 << 30):
        from collections import OrderedDict

        self.canonical = canonical
        self.max_fragments, self.max_bytes = max_fragments, max_bytes
        self._bytes = 0  # of the fragments held
        self._size: dict[tuple, int] = {}
        self._fragments: "OrderedDict[tuple, Fragment]" = OrderedDict()
        self._dead: set[tuple] = set()  # fragments with no live text (EmptyLanguageError), remembered
        self._soft: dict[str, set[int]] = {}  # fragment regexes found to have soft exits
        self._lock = threading.Lock()

    def get(self, regex: str, entry_context: int, *, dead_exits: frozenset = frozenset(), canonical_only: bool,
            eos: tuple[int, ...], max_states: int, max_transitions: int, store=None) -> tuple[Fragment, bool]:
        """The fragment of ``regex`` entered in ``entry_context``, with the exits (k, context) of ``dead_exits``
        not final, and whether it was compiled now (False: from memory or disk). ``EmptyLanguageError`` if it
        has no live text."""
        key = (regex, entry_context, dead_exits, canonical_only, eos)
        with self._lock:
            fragment = self._fragments.get(key)
            if fragment is not None:
                self._fragments.move_to_end(key)
                return fragment, False
            if key in self._dead:
                raise EmptyLanguageError("a fragment with no live text")
            if regex in self._soft:
                raise _SoftExits(self._soft[regex])
        compiled = False
        fragment = store.load(self.canonical, *key) if store is not None else None
        if fragment is None:
            try:
                fragment = _compile_fragment(regex, entry_context, dead_exits, self.canonical,
                                             canonical_only=canonical_only, eos=eos, max_states=max_states,
                                             max_transitions=max_transitions)
            except _SoftExits as soft:
                with self._lock:
                    self._soft[regex] = soft.exits
                raise
            except EmptyLanguageError:
                with self._lock:
                    self._dead.add(key)
                raise
            compiled = True
            if store is not None:
                store.save(self.canonical, fragment, dead_exits=dead_exits, canonical_only=canonical_only, eos=eos)
        size = fragment.guide.memory_bytes
        with self._lock:
            self._bytes += size - self._size.get(key, 0)
            self._fragments[key], self._size[key] = fragment, size
            self._fragments.move_to_end(key)
            while len(self._fragments) > 1 and (len(self._fragments) > self.max_fragments
                                                or self._bytes > self.max_bytes):
                evicted, _ = self._fragments.popitem(last=False)
                self._bytes -= self._size.pop(evicted)
        return fragment, compiled

    def clear(self) -> None:
        """Drop every fragment held in memory (guides built from them keep theirs; the disk is untouched)."""
        with self._lock:
            self._fragments.clear()
            self._size.clear()
            self._dead.clear()
            self._soft.clear()
            self._bytes = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes of the fragments' guides held (at most ``max_bytes``, unless one fragment alone is larger)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._fragments)


def fragment_library(canonical: CanonicalAutomaton) -> FragmentLibrary:
    """The in-memory library of ``canonical`` (one per automaton object)."""
    return _per_automaton(canonical, "fragments", lambda: FragmentLibrary(canonical))


def _compile_fragment(regex: str, entry_context: int, dead_exits: frozenset, canonical: CanonicalAutomaton, *,
                      canonical_only: bool, eos: tuple[int, ...], max_states: int, max_transitions: int) -> Fragment:
    start = time.perf_counter()
    trie = vocabulary_trie(canonical)
    num_contexts = canonical.num_contexts if canonical_only else 1
    # (a one-row mask cache: the stitched guides compute their rows through ``_fill_row`` and cache them; 64
    # rows per fragment were 1 MB each at 128k tokens, for masks never read)
    options = dict(canonical_only=canonical_only, max_states=max_states, cache_size=1, name="fragment",
                   eos_token_ids=list(eos), start_context=entry_context)
    guide = None
    if any(int(hi) - int(lo) >= MIN_COUNT for lo, hi in _COUNTED.findall(regex)):
        # a counted repetition: compiled with a counter beside the state (``product.counted``) where that applies
        counted = counted_transitions(regex, trie, max_states=max_states, max_entries=max_transitions, exits=True)
        if counted is not None:
            exit_of, exit_sets = counted.exit_of, counted.exit_sets
            ends, exit_live = _exit_tables(exit_of, exit_sets, counted.goes_on, dead_exits, num_contexts)
            counted.over = dataclasses.replace(counted.over, accepting=ends)
            guide = CountedGuide(counted, canonical, exit_live=exit_live, **options)
            if guide.horizon is None:  # no budget horizon passed the exactness check: unrolled, as any other
                guide = None
    if guide is None:
        dfa, exit_of, exit_sets = from_regex_exits(regex, max_states=max_states)
        ends, exit_live = _exit_tables(exit_of, exit_sets, (dfa.transitions != MISSING).any(axis=1), dead_exits,
                                       num_contexts)
        transitions = TokenTransitions.build(dfa, trie, max_entries=max_transitions)
        transitions = dataclasses.replace(transitions, accepting=ends)
        guide = Guide(transitions, canonical, exit_live=exit_live, **options)
    return Fragment(regex, entry_context, guide, exit_of[guide._node_q], exit_sets, time.perf_counter() - start)


def _exit_tables(exit_of: np.ndarray, exit_sets: list[tuple[int, ...]], goes_on: np.ndarray, dead_exits: frozenset,
                 num_contexts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per regex state of a fragment: whether the text may end there (EOS: only at exit 0), and per (state,
    context) whether a cut exit there is live (``Guide``'s ``exit_live``: every cut exit but ``dead_exits``).
    ``_SoftExits`` where the text goes on past a cut exit (``goes_on``: some byte leads on)."""
    soft = {k for q in np.flatnonzero(goes_on & (exit_of >= 0)).tolist() for k in exit_sets[exit_of[q]] if k >= 1}
    if soft:
        raise _SoftExits(soft)
    ends = np.array([0 in e for e in exit_sets] + [False], dtype=bool)[exit_of]
    exit_live = np.zeros((len(exit_of), num_contexts), dtype=bool)
    exit_live[np.array([any(k >= 1 for k in e) for e in exit_sets] + [False], dtype=bool)[exit_of]] = True
    for exits, ctx in dead_exits:
        exit_live[exit_of == exit_sets.index(exits), ctx] = False
    return ends, exit_live


# ---------------------------------------------------------------------------------------------- cutting ---

def _inner_bytes(canonical: CanonicalAutomaton) -> bytes:
    """``_inner_pairs`` as bytes: index x * 256 + y (a Python lookup, ~30 ns, where a numpy element costs ~100)."""
    return _per_automaton(canonical, "inner byte pairs as bytes", lambda: _inner_pairs(canonical).tobytes())


def _inner_pairs(canonical: CanonicalAutomaton) -> np.ndarray:
    """bool[256, 256]: byte x followed by byte y inside some token's bytes (so a token may cross between them)."""
    return _inner_occurrences(canonical)[0]


def _inner_occurrences(canonical: CanonicalAutomaton) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_inner_pairs``, and every place a byte pair occurs inside a token: the places of pair x * 256 + y are
    columns ``pair_starts[p]:pair_starts[p + 1]`` of ``places`` (int64[2, n]: the index of the pair's first byte
    in the token blob, and the token)."""
    def build():
        blob = np.frombuffer(canonical.token_blob.tobytes(), dtype=np.uint8)
        offsets = np.asarray(canonical.token_offsets, dtype=np.int64)
        follows = np.ones(len(blob), dtype=bool)  # byte i and byte i + 1 are in one token
        follows[np.maximum(offsets[1:] - 1, 0)] = False
        follows[-1:] = False
        i = np.flatnonzero(follows)
        pairs = np.zeros((256, 256), dtype=bool)
        pairs[blob[i], blob[i + 1]] = True
        key = blob[i].astype(np.int64) * 256 + blob[i + 1]
        order = np.argsort(key, kind="stable")  # by pair, then by token id (short, early merges first)
        i = i[order]
        places = np.stack([i, np.searchsorted(offsets, i, side="right") - 1])
        pair_starts = np.searchsorted(key[order], np.arange(65537))
        return pairs, pair_starts, places

    return _per_automaton(canonical, "inner byte pairs", build)


_MAX_CROSSING_PLACES = 20_000  # a byte pair inside more tokens than this is taken as crossed (time, not need)
_FIRST_PLACES = 16  # places of a pair tried one by one before the sieve
_SIEVE = 8  # bytes on either side of a pair that _Crossing._may_fit compares at once
_LOOKAHEAD = 32  # characters read after a token laid across a state, at most, before it is taken as fitting


class _Skeleton:
    """The skeleton's character DFA, its edges by class, and its cut states."""

    def __init__(self, pattern: str, leaves: dict[str, str], canonical: CanonicalAutomaton, max_states: int,
                 fine_cuts: bool = False):
        # runs of literal characters that no cut can split read as one character each (not with fine cuts,
        # whose test walks the skeleton's texts character by character)
        class_target, accepting, start, mapping, runs = _skeleton_dfa(
            pattern, None if fine_cuts else _inner_bytes(canonical), max_states)
        # states with the same future made one: an instance is (cut states, context), so a skeleton of repeated
        # structure (a recursive $ref unrolled, anyOf branches ending alike) has fewer instances to write and
        # look up (Github_easy---o58839: 5,290 states -> 1,234)
        minimal = minimal_table(class_target, accepting, start)
        if minimal is None:
            raise EmptyLanguageError("the skeleton accepts no text")
        (class_target, accepting), start = minimal, 0
        self.accepting, self.start = np.asarray(accepting).tolist(), start
        chars_of: dict[int, list[str]] = {}
        for char, c in mapping.items():
            if char is not anything_else:
                chars_of.setdefault(c, []).append(char)
        for chars in chars_of.values():
            if any(ord(ch) in PLACEHOLDERS and ch not in leaves for ch in chars):
                raise StitchError("the skeleton has a character in the placeholder range that is no placeholder")
        # per class: its regex label; its characters' UTF-8 bytes when all are literal (None: a leaf is among
        # them); the characters its texts start with (a leaf's: its regex's first characters; None: not known);
        # the first and last bytes of those (of a leaf, the last are not read: no state after a leaf is cut)
        label, first, last = {}, {}, {}
        self.strings, self.opening = {}, {}
        for c, chars in chars_of.items():
            if not any(ch in leaves for ch in chars):  # literal characters (or runs of them)
                label[c], self.strings[c], self.opening[c], first[c], last[c] = _literal_class(
                    tuple(sorted(runs.get(ch, ch) for ch in chars)))
                continue
            label[c] = _alternation([f"(?:{leaves[ch]})" if ch in leaves else _escape(ch) for ch in sorted(chars)])
            self.strings[c] = None
            # (only fine cuts read a leaf's first characters: without them a state before a leaf is not cut)
            openings = [(_leaf_openings(leaves[ch]) if fine_cuts else None) if ch in leaves else frozenset(ch)
                        for ch in chars]
            self.opening[c] = None if None in openings else frozenset().union(*openings)
            # the first bytes of a leaf's texts where they are known; its last are not read (no state after a
            # leaf is cut)
            encoded = [ch.encode("utf-8", "surrogatepass") for ch in (self.opening[c] or chars)]
            first[c], last[c] = {b[0] for b in encoded}, {b[-1] for b in encoded}
        # cut states, over the edges (source, class, target) on named characters: per state, the last bytes of
        # the characters read into it and the first bytes of those read out of it, and whether a leaf comes in or
        # goes out (fine cuts: a leaf whose first characters are not known). (Plain Python: a skeleton has tens
        # of states, and numpy's calls cost 5-60 µs each here: ~0.2 ms a skeleton.)
        inner = _inner_bytes(canonical)  # byte x * 256 + y: nonzero where a token holds x y
        n = len(class_target)
        source, cls = np.nonzero(class_target[:, :-1] != MISSING)  # (the last column is no class)
        target = class_target[source, cls]
        source, cls, target = source.tolist(), cls.tolist(), target.tolist()
        into: list[set] = [set() for _ in range(n)]
        out: list[set] = [set() for _ in range(n)]
        blocked = [False] * n  # a leaf leads into the state or (not known to start so) out of it
        blocked[start] = True
        edges = []
        for q, c, t in zip(source, cls, target):
            if c not in chars_of:
                continue
            edges.append((q, c, t))
            literal = self.strings[c] is not None
            into[t] |= last[c]
            out[q] |= first[c]
            if not literal:
                blocked[t] = True
                if not fine_cuts or self.opening[c] is None:
                    blocked[q] = True
        cut = [False] * n
        crossed: list[int] = []  # candidates some token may cross (between q's last and next byte)
        for q in range(n):
            if blocked[q] or not into[q] or not out[q]:
                continue
            if any(inner[x * 256 + y] for x in into[q] for y in out[q]):
                crossed.append(q)
            else:
                cut[q] = True
        # where some token holds a byte pair around q, q is still cut when no such token fits there (_Crossing)
        if fine_cuts and crossed:
            test = _Crossing(self, edges, canonical)
            for q in crossed:
                pairs_q = [(x, y) for x in sorted(into[q]) for y in sorted(out[q]) if inner[x * 256 + y]]
                cut[q] = not test.crossed(q, pairs_q)
        self.cut = _literal_cuts_dropped(cut, edges, self.strings, start)
        # per state, its edges: target -> the regex of the characters that lead there (edges come in row order,
        # so a target's classes in increasing order, as a walk along the row meets them)
        classes_into: list[dict[int, list[int]]] = [{} for _ in range(n)]
        for q, c, t in edges:
            classes_into[q].setdefault(t, []).append(c)
        self.edges = [{t: label[cs[0]] if len(cs) == 1 else _alternation([label[c] for c in cs])
                       for t, cs in by_target.items()} for by_target in classes_into]

    def fragment(self, roots: frozenset, soft: frozenset = frozenset()) -> tuple[str, list[int]]:
        """The regex of what the skeleton reads from any of ``roots`` (cut states, or ``END``: the text ends) up
        to its exits, and the cut state of each exit (exit k >= 1 is ``exits[k - 1]``). Cut states in ``soft``
        are written through, not cut."""
        exits: list[int] = []
        written: dict[int, str] = {}
        on_path: set[int] = set()
        size = [0]

        def write(q: int, at_root: bool) -> str:
            if self.cut[q] and not at_root and q not in soft:
                if q not in exits:
                    exits.append(q)
                return exit_marker(exits.index(q) + 1)
            if q in written:
                return written[q]
            if q in on_path:
                raise _Cycle
            on_path.add(q)
            edges = self.edges[q]
            if len(edges) == 1 and not self.accepting[q]:  # most states: one way on (a key's pieces, a comma)
                (t, label), = edges.items()
                text = label + write(t, False)
            else:
                parts = [exit_marker(0)] if self.accepting[q] else []
                parts += [label + write(t, False) for t, label in edges.items()]
                text = _alternation(parts)
            on_path.discard(q)
            size[0] += len(text)
            if size[0] > _MAX_FRAGMENT_REGEX:
                raise FragmentTooLongError("a fragment's regex is too long to write out")
            written[q] = text
            return text

        try:
            parts = [exit_marker(0) if root == END else write(root, True) for root in sorted(roots)]
        except _Cycle:
            return self._eliminated(roots, soft)
        return _alternation(parts), exits

    def _eliminated(self, roots: frozenset, soft: frozenset) -> tuple[str, list[int]]:
        """``fragment`` for a fragment with a cycle (a YAML block whose line breaks are inside tokens): the
        classic state elimination (``automata.regions.eliminate``) over its states, a new source and sink, and one
        node per exit."""
        SOURCE, SINK = "source", "sink"
        exits: list[int] = []
        edges: dict = {}  # (from, to) -> regex

        def add(a, b, regex):
            edges[a, b] = regex if (a, b) not in edges else _alternation([edges[a, b], regex])

        seen, todo = set(), []
        for root in sorted(roots):
            if root == END:
                add(SOURCE, SINK, exit_marker(0))
            else:
                add(SOURCE, ("state", root), "")
                todo.append(root)
        while todo:
            q = todo.pop()
            if q in seen:
                continue
            seen.add(q)
            if self.accepting[q]:
                add(("state", q), SINK, exit_marker(0))
            for t, label in self.edges[q].items():
                if self.cut[t] and t not in soft:
                    if t not in exits:
                        exits.append(t)
                    add(("state", q), ("exit", t), label)
                else:
                    add(("state", q), ("state", t), label)
                    todo.append(t)
        for t in exits:
            add(("exit", t), SINK, exit_marker(exits.index(t) + 1))
        try:
            return eliminate(edges, SOURCE, SINK, _MAX_FRAGMENT_REGEX), exits
        except StateLimitError:
            raise FragmentTooLongError("a fragment's regex is too long to write out") from None


def _literal_cuts_dropped(cut: list[bool], edges: list[tuple[int, int, int]], strings: dict, start: int) -> list[bool]:
    """``cut`` without the cut states that only literal text surrounds: every path from the cut states (or the
    start) before q up to q, and from q up to the cut states after it, reads literal classes (keys, punctuation;
    no leaf). Such pieces are schema-specific text, cheap to compile as one fragment, and each instance costs a
    warm compile a regex written and a library lookup (the key ``"customer_name":`` on Llama-3 was three
    instances: ``{"customer``, ``_name``, ``":``). Two linear passes: the states a leaf lies ahead of (before any
    cut), marked back from the leaves' edges, and those a leaf lies behind, marked forward."""
    n = len(cut)
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    ahead, behind = [False] * n, [False] * n  # a leaf on some path from / to the state, no cut between
    for q, c, t in edges:
        succ[q].append(t)
        pred[t].append(q)
        if strings[c] is None:
            ahead[q] = behind[t] = True
    for marked, onward, stop in ((ahead, pred, -1), (behind, succ, start)):
        todo = [q for q in range(n) if marked[q] and not cut[q] and q != stop]
        while todo:  # (paths stop at cut states and, behind, at the start)
            for q in onward[todo.pop()]:
                if not marked[q]:
                    marked[q] = True
                    if not cut[q] and q != stop:
                        todo.append(q)
    return [is_cut and (ahead[q] or behind[q]) for q, is_cut in enumerate(cut)]


class _Crossing:
    """Whether a token can be laid across a state q of a skeleton although a byte pair around q is inside tokens.

    A token t crosses q in a canonical tokenization only if (1) its bytes up to the pair's first byte are what
    some path into q reads, and from the pair's second byte on what a path out of q reads, and (2) the
    pre-tokenizer lets t's bytes be inside one piece there and the text go on after it. (2) is read off the
    canonical automaton: from every open context (a superset of those before t), t leads to the contexts
    ``inside_next`` / ``boundary_next`` give; from there the characters the skeleton reads next are taken one
    single-byte token at a time, with or without a boundary before each (a superset of the contexts any
    tokenization reaches); where none is left on every path, the marked text dies, and no canonical
    tokenization has t there. A leaf whose characters are not known, a character of several bytes, the text's
    end and ``_LOOKAHEAD`` characters are taken to fit: the test errs towards "crossed", never cuts where a token
    could cross. On Llama-3 it cuts a YAML line after its line break and before the last space of the
    indentation (pieces "\n", "   ", " key"), which the byte pairs alone cannot: tokens hold "\n" + " "
    (whitespace ending in a line break) and runs of spaces."""

    def __init__(self, skeleton: "_Skeleton", edges: list[tuple[int, int, int]], canonical: CanonicalAutomaton):
        self.sk = skeleton
        self.blob = canonical.token_blob.tobytes()
        self.offsets = np.asarray(canonical.token_offsets, dtype=np.int64)
        self.inside_next, self.boundary_next = canonical.inside_next, canonical.boundary_next
        self.num_open = canonical.num_open_contexts
        self.occurrences = _inner_occurrences(canonical)
        places = self.occurrences[2]
        self.at_array, self.token_array = places[0].copy(), places[1].copy()
        self.at, self.tokens = memoryview(self.at_array), memoryview(self.token_array)
        self.blob_array = np.frombuffer(self.blob, dtype=np.uint8)
        self.offset_list = memoryview(self.offsets)
        self.single = _single_byte_tokens(canonical)
        # per state: its edges out as (the bytes of each character read, or None for a leaf, leaf openings, target)
        self.out_edges: dict[int, list] = {}
        self.in_edges: dict[int, list] = {}
        for a, c, b in edges:
            strings, openings = skeleton.strings[c], skeleton.opening[c]
            opening_bytes = None if openings is None else [ch.encode("utf-8") for ch in openings]
            self.out_edges.setdefault(a, []).append((strings, opening_bytes, b))
            self.in_edges.setdefault(b, []).append((strings, a))
        self._after: dict[int, np.ndarray] = {}

    def crossed(self, q: int, pairs_q: list[tuple[int, int]]) -> bool:
        pair_starts = self.occurrences[1]
        ranges = [(int(pair_starts[x * 256 + y]), int(pair_starts[x * 256 + y + 1])) for x, y in pairs_q]
        if sum(hi - lo for lo, hi in ranges) > _MAX_CROSSING_PLACES:
            return True
        # the first few places of each pair one by one (the shortest tokens: inside a key, one of them fits and
        # ends the test), the others through the sieve
        first = [k for lo, hi in ranges for k in range(lo, min(hi, lo + _FIRST_PLACES))]
        rest = np.concatenate([np.arange(lo + _FIRST_PLACES, hi) for lo, hi in ranges if hi > lo + _FIRST_PLACES]
                              or [np.zeros(0, dtype=np.int64)])
        if self._fits(q, first):
            return True
        return len(rest) > 0 and self._fits(q, rest[self._may_fit(q, rest)].tolist())

    def _fits(self, q: int, places: list[int]) -> bool:
        """Whether one of these places of byte pairs (their tokens) fits across q."""
        left_fits: dict[bytes, bool] = {}
        right_ends: dict[bytes, object] = {}
        offsets = self.offset_list
        for k in places:
            i, token = self.at[k], self.tokens[k]
            begin, end = offsets[token], offsets[token + 1]
            before, after = self.blob[begin:i + 1], self.blob[i + 1:end]
            if before not in left_fits:
                left_fits[before] = self._reads_backward(q, before)
            if not left_fits[before]:
                continue
            if after not in right_ends:
                right_ends[after] = self._ends_forward(q, after)
            ends = right_ends[after]
            if ends is None:
                return True  # the token runs into what the skeleton does not spell out
            if not ends:
                continue
            contexts = self._contexts_after(token)
            if contexts is None:
                return True
            if len(contexts) and any(self._lives(r, contexts, _LOOKAHEAD) for r in ends):
                return True
        return False

    def _may_fit(self, q: int, places: np.ndarray) -> np.ndarray:
        """A first sieve over the places of byte pairs around q (all at once): each of the token's bytes within
        ``_SIEVE`` bytes of the pair must be one the skeleton may read at that distance from q, on any path."""
        at, tokens = self.at_array[places], self.token_array[places]
        begin, end = self.offsets[tokens], self.offsets[tokens + 1]
        keep = np.ones(len(places), dtype=bool)
        last = len(self.blob_array) - 1
        for direction in (1, -1):
            for d, allowed in enumerate(self._bytes_at(q, direction), start=1):
                pos = at + 1 + d if direction == 1 else at - d
                inside = (pos < end) if direction == 1 else (pos >= begin)
                keep &= ~inside | allowed[self.blob_array[np.minimum(np.maximum(pos, 0), last)]]
        return keep

    def _bytes_at(self, q: int, direction: int) -> list[np.ndarray]:
        """Per distance 1.._SIEVE from the byte next to q (after q for ``direction`` 1, before it for -1): the
        bytes some path may read there (bool[256]; all of them past a leaf)."""
        allowed = [np.zeros(256, dtype=bool) for _ in range(_SIEVE)]
        todo, seen = [(q, 0)], set()
        while todo:
            state, d = todo.pop()
            if (state, d) in seen or d > _SIEVE:
                continue
            seen.add((state, d))
            edges = self.out_edges.get(state, ()) if direction == 1 else self.in_edges.get(state, ())
            for edge in edges:
                chars, nxt = edge[0], edge[-1]
                if chars is None:
                    for far in allowed[max(d, 1) - 1:]:
                        far[:] = True
                    continue
                for encoded in chars:
                    for j, byte in enumerate(encoded if direction == 1 else encoded[::-1]):
                        if 1 <= d + j <= _SIEVE:
                            allowed[d + j - 1][byte] = True
                    todo.append((nxt, d + len(encoded)))
        return allowed

    def _reads_backward(self, q: int, text: bytes) -> bool:
        """Whether some path into q reads ``text`` at its end (a leaf may end with anything)."""
        if not text:
            return True
        for chars, a in self.in_edges.get(q, ()):
            if chars is None:
                return True
            for encoded in chars:
                if (encoded.endswith(text) if len(encoded) >= len(text) else
                        text.endswith(encoded) and self._reads_backward(a, text[:-len(encoded)])):
                    return True
        return False

    def _ends_forward(self, q: int, text: bytes) -> set | None:
        """The states where paths out of q that read ``text`` at their start are when it is read (a set, maybe
        empty); None where such a path reads it partly into a leaf or a character."""
        if not text:
            return {q}
        ends: set[int] = set()
        for chars, openings, b in self.out_edges.get(q, ()):
            if chars is None:
                if openings is None or any(_agrees(opening, text) for opening in openings):
                    return None
                continue
            for encoded in chars:
                if not _agrees(encoded, text):
                    continue
                if len(encoded) > len(text):
                    return None
                more = self._ends_forward(b, text[len(encoded):])
                if more is None:
                    return None
                ends |= more
        return ends

    def _contexts_after(self, token: int) -> np.ndarray | None:
        """The open contexts token ``token`` leads to from any open context (None: some is not open)."""
        if token not in self._after:
            if 0x80 <= self.blob[self.offsets[token]] < 0xC0:  # it may follow an unfinished character
                self._after[token] = None
                return None
            nxt = np.concatenate([self.inside_next[:, token], self.boundary_next[:, token]])
            nxt = np.unique(nxt[nxt >= 0])
            self._after[token] = None if (nxt >= self.num_open).any() else nxt
        return self._after[token]

    def _step(self, contexts: np.ndarray, byte: int) -> np.ndarray | None:
        token = int(self.single[byte])
        if token < 0:
            return None
        nxt = np.concatenate([self.inside_next[contexts, token], self.boundary_next[contexts, token]])
        return np.unique(nxt[nxt >= 0])

    def _lives(self, q: int, contexts: np.ndarray, depth: int) -> bool:
        """Whether the marked text may go on from state q in one of ``contexts``, along some path (up to
        ``depth`` characters; a leaf's first character, then it is taken to fit)."""
        if depth == 0 or self.sk.accepting[q]:
            return True
        for chars, openings, b in self.out_edges.get(q, ()):
            if chars is None and openings is None:
                return True
            for encoded in (openings if chars is None else chars):
                nxt = contexts
                for byte in encoded:
                    nxt = self._step(nxt, byte) if byte < 0x80 else None  # (a longer character: not followed)
                    if nxt is None or not len(nxt):
                        break
                if nxt is None or len(nxt) and (chars is None or self._lives(b, nxt, depth - 1)):
                    return True
        return False


def _single_byte_tokens(canonical: CanonicalAutomaton) -> np.ndarray:
    """int64[256]: a token spelling just that byte, produced inside pieces (-1: none)."""
    def build():
        offsets = np.asarray(canonical.token_offsets, dtype=np.int64)
        blob = np.frombuffer(canonical.token_blob.tobytes(), dtype=np.uint8)
        one = np.flatnonzero((offsets[1:] - offsets[:-1] == 1) & (np.asarray(canonical.merge_class) >= 0))
        single = np.full(256, -1, dtype=np.int64)
        single[blob[offsets[one]][::-1]] = one[::-1]  # the lowest id of each byte
        return single

    return _per_automaton(canonical, "single-byte tokens", build)


class _Cycle(Exception):
    """The tree writer met a cycle inside a fragment."""


def _agrees(encoded: bytes, text: bytes) -> bool:
    """Whether a character's bytes and ``text`` agree where both have bytes."""
    n = min(len(encoded), len(text))
    return encoded[:n] == text[:n]


_MAX_LEAF_STATES = 100_000  # a leaf's character DFA, built only for its first characters (fine cuts)


@functools.lru_cache(maxsize=4096)
def _leaf_openings(regex: str) -> frozenset | None:
    """The characters a text of ``regex`` can start with; None when it may be empty, start with characters the
    regex does not name, or its character DFA is too large to build (a string of ``maxLength: 10000``)."""
    try:
        table, accepting, start, mapping = _char_dfa(regex, _MAX_LEAF_STATES)
    except StateLimitError:
        return None
    if accepting[start]:
        return None
    chars = frozenset(ch for ch, c in mapping.items() if table[start, c] != MISSING)
    return None if anything_else in chars else chars


@functools.lru_cache(maxsize=1 << 16)
def _literal_class(texts: tuple[str, ...]) -> tuple[str, tuple[bytes, ...], frozenset, frozenset, frozenset]:
    """A skeleton class of literal texts: its regex label, their bytes, first characters, first and last bytes
    (a pure function of the texts, which recur across schemas: ``", "``, ``": "``, a key)."""
    encoded = tuple(text.encode("utf-8", "surrogatepass") for text in texts)
    return (_alternation([_escape(text) for text in texts]), encoded, frozenset(text[0] for text in texts),
            frozenset(b[0] for b in encoded), frozenset(b[-1] for b in encoded))


def _alternation(parts: list[str]) -> str:
    if len(parts) == 1:  # most states of a skeleton: one literal character
        return parts[0]
    parts = list(dict.fromkeys(parts))
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _escape(text: str) -> str:
    return re.escape(text) if text.isascii() else "".join(re.escape(ch) if ch.isascii() else ch for ch in text)


_RUNS = range(0xDC00, 0xE000)  # characters that stand for runs in a skeleton's DFA (no text has lone surrogates)


def _skeleton_dfa(pattern: str, inner_pairs: bytes | None, max_states: int):
    """``_char_dfa`` of a skeleton, and the runs it reads as one character each (character -> its text): every
    maximal run of literal characters in a concatenation whose neighbouring bytes are inside some token
    (``inner_pairs``; None: no runs). No state inside such a run can be cut, and a skeleton is mostly keys and
    punctuation: read as runs, a median MaskBench skeleton has ~60 positions instead of ~130, and the steps
    after it (determinising, minimising, cutting, writing fragments) work per position or state."""
    runs = _Runs(inner_pairs) if inner_pairs is not None and not _RUN_CHARACTER.search(pattern) else None
    tree = parse.read(pattern, runs) if runs is not None else None
    if tree is None:
        return (*_char_dfa(pattern, max_states), {})
    try:
        dfa = glushkov.char_dfa(tree, max_states)
    except (RegexError, StateLimitError) as exc:
        raise type(exc)(f"regex {shown(pattern)}: {exc}") from None
    if dfa is None:
        return (*_char_dfa(pattern, max_states), {})
    return (*dfa, {ch: text for text, ch in runs.runs.items()})


_RUN_CHARACTER = re.compile(f"[{chr(_RUNS[0])}-{chr(_RUNS[-1])}]")
_PLACEHOLDER = re.compile(f"([{chr(PLACEHOLDERS[0])}-{chr(PLACEHOLDERS[-1])}])")


class _Runs:
    """Splits a run of literal characters (``automata.parse.read``'s ``runs``) where no token holds the bytes
    around a position, or around a placeholder; each piece of two or more characters becomes one character of
    ``_RUNS`` (``runs``: text -> its character), the others stay themselves."""

    def __init__(self, inner_pairs: bytes):
        self.inner = inner_pairs  # byte x * 256 + y: nonzero where x y is inside a token
        self.runs: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        characters = []
        for piece in _run_pieces(self.inner, text):
            ch = piece if len(piece) == 1 else self.runs.get(piece)
            if ch is None and len(self.runs) < len(_RUNS):
                ch = self.runs[piece] = chr(_RUNS[0] + len(self.runs))
            characters.append(piece if ch is None else ch)
        return "".join(characters)


@functools.lru_cache(maxsize=1 << 14)
def _run_pieces(inner: bytes, text: str) -> tuple[str, ...]:
    """``text`` split where no token holds the bytes around a position (``inner``: ``_inner_bytes``), and around
    each placeholder. A pure function of its arguments, and the texts recur (``}``, ``", "``, a key in every
    object that has it): cached, the splits were a fifth of a warm schema compile."""
    pieces = []
    for part in _PLACEHOLDER.split(text):  # a leaf is a piece of its own
        if len(part) < 2:
            pieces += [part] if part else []
            continue
        if part.isascii():
            encoded = part.encode()
            ends = [i for i in range(1, len(encoded)) if not inner[encoded[i - 1] * 256 + encoded[i]]]
        else:
            encoded = [ch.encode("utf-8", "surrogatepass") for ch in part]
            ends = [i for i in range(1, len(part)) if not inner[encoded[i - 1][-1] * 256 + encoded[i][0]]]
        pieces += [part[i:j] for i, j in zip([0, *ends], [*ends, len(part)])]
    return tuple(pieces)


# ---------------------------------------------------------------------------------------------- guides ---

def compile_stitched(skeleton: str, leaves: dict[str, str], canonical: CanonicalAutomaton, *,
                     canonical_only: bool = True, max_states: int = 100_000, max_transitions: int = 50_000_000,
                     cache_size: int = 4096, eos_token_ids: list[int] | None = None, name: str = "",
                     library: FragmentLibrary | None = None, store=None, fine_cuts: bool = False) -> "StitchedGuide":
    """The guide of ``skeleton`` with each placeholder character (a key of ``leaves``, in ``PLACEHOLDERS``)
    standing for its regex, stitched from fragments of ``library`` (default: the automaton's in-memory one),
    backed by ``store`` (a ``product.library.FragmentStore``; None: memory only).
    Raises ``StitchError`` where it cannot cut (the caller compiles the whole regex instead) and
    ``EmptyLanguageError`` if no text has a tokenization.

    Liveness crosses fragments: an exit (k, ctx) is final in its fragment only if the instance it leads to is
    live. Instances are first built with every exit live; an instance found dead (its fragment has no live
    text from its entry context) makes the exits into it dead, and the fragments holding them are compiled
    again with those exits dead (a different library entry), until nothing changes. Dead exits are rare (a YAML
    line break whose pre-tokenizer context needs a space after it, then a key): most fragments compile once.
    """
    eos = _guide_eos(canonical, eos_token_ids)
    library = fragment_library(canonical) if library is None else library
    counts = {False: 0, True: 0}  # fragments taken from the library / compiled now
    sk = _Skeleton(skeleton, leaves, canonical, max_states, fine_cuts)
    written: dict[frozenset, tuple[str, list[int]]] = {}
    num_open = canonical.num_open_contexts if canonical_only else 1
    options = dict(canonical_only=canonical_only, eos=eos, max_states=max_states, max_transitions=max_transitions,
                   store=store)

    # instances (roots, entry context): their fragment (None: dead), successors and the exits found dead
    fragment_of: dict[tuple, Fragment | None] = {}
    successors: dict[tuple, dict[int, tuple]] = {}  # guide node -> the instance its exits lead to
    exits_into: dict[tuple, dict[tuple, tuple]] = {}  # instance -> successor -> (exit set, context) leading there
    dead_exits: dict[tuple, frozenset] = {}
    predecessors: dict[tuple, set] = {}

    def build(key: tuple) -> None:
        roots, ctx = key
        soft = frozenset()
        while True:
            if (roots, soft) not in written:
                written[roots, soft] = sk.fragment(roots, soft)
            regex, exits = written[roots, soft]
            try:
                fragment, compiled = library.get(regex, ctx, dead_exits=dead_exits.get(key, frozenset()), **options)
                counts[compiled] += 1
                break
            except _SoftExits as found:
                soft |= {exits[k - 1] for k in found.exits}
            except EmptyLanguageError:
                fragment_of[key] = None
                successors[key] = {}
                return
        fragment_of[key] = fragment
        nxt, into = {}, {}
        for node, exit_ctx, exit_set in fragment.cut_exits:
            if exit_ctx >= num_open:
                raise StitchError(f"fragment {regex[:80]!r} exits inside a character")
            succ = (frozenset(END if k == 0 else exits[k - 1] for k in exit_set), exit_ctx)
            nxt[node] = succ
            into[succ] = (exit_set, exit_ctx)
        successors[key], exits_into[key] = nxt, into

    start = (frozenset([sk.start]), 0)
    queued = object()  # fragment_of's mark for an instance waiting to be built
    fragment_of[start] = queued
    pending = [start]
    # instances to build again with more exits dead: taken once no new instance waits, so that the deaths of
    # several successors cost one more compile of their predecessor, not one each (YAML on Llama-3, o45160:
    # 207 -> 107 fragment compiles)
    rebuild: dict[tuple, None] = {}
    while pending or rebuild:
        if pending:
            key = pending.pop()
        else:
            key = next(iter(rebuild))
            del rebuild[key]
            if fragment_of[key] is None:
                continue
        build(key)
        if fragment_of[key] is None:  # dead: the exits into it die, and their fragments are built again
            for pred in predecessors.get(key, ()):
                if isinstance(fragment_of[pred], Fragment) and key in exits_into[pred]:
                    dead_exits[pred] = dead_exits.get(pred, frozenset()) | {exits_into[pred][key]}
                    rebuild[pred] = None
            continue
        dead = {exits_into[key][succ] for succ in successors[key].values()
                if succ in fragment_of and fragment_of[succ] is None}
        if dead:  # exits into instances already known dead: build again without them
            dead_exits[key] = dead_exits.get(key, frozenset()) | dead
            rebuild[key] = None
        for succ in successors[key].values():
            predecessors.setdefault(succ, set()).add(key)
            if succ not in fragment_of:
                fragment_of[succ] = queued
                pending.append(succ)
    if fragment_of[start] is None:
        raise EmptyLanguageError(f"constraint {name!r}: no string it accepts has a "
                                 f"{'canonical ' if canonical_only else ''}tokenization over this vocabulary")
    # number the live instances reachable from the start
    order, index = [start], {start: 0}
    for key in order:
        for succ in successors[key].values():
            if succ not in index and fragment_of[succ] is not None:
                index[succ] = len(order)
                order.append(succ)
    instances = []
    for key in order:
        if any(fragment_of[succ] is None for succ in successors[key].values()):
            raise StitchError("internal: a live exit leads to a dead instance")
        next_of_node = {node: index[succ] for node, succ in successors[key].items()}
        instances.append(_Instance(key[0], key[1], fragment_of[key], next_of_node))
    return StitchedGuide(instances, canonical, canonical_only=canonical_only, cache_size=cache_size, name=name,
                         eos=eos, reused=counts[False], compiled=counts[True])


class StitchedGuide(Guide):
    """A ``Guide`` over fragment instances (``compile_stitched``): state = ``base[i]`` + a state of instance
    i's guide. Masks, advance and acceptance are the fragment guides'; a token that reaches an exit moves the
    state to the next instance's start. ``fragments_reused`` / ``fragments_compiled`` say how it was built."""

    def __init__(self, instances: list[_Instance], canonical: CanonicalAutomaton, *, canonical_only: bool,
                 cache_size: int, name: str, eos: tuple[int, ...], reused: int, compiled: int):
        self.name = name
        self.canonical_only = canonical_only
        self._tokens = canonical
        self.vocab_size = canonical.vocab_size
        self.num_words = (self.vocab_size + 31) // 32
        self.eos_token_ids = eos
        self._instances = instances
        self._guides = [inst.fragment.guide for inst in instances]
        self._M = self._guides[0]._M
        sizes = [g._num_states for g in self._guides]
        self._base = list(itertools.accumulate(sizes[:-1], initial=0))
        self._end = sum(sizes)
        # per instance, exit node -> the next instance's initial state, as one global state
        starts = [b + g.initial_state for b, g in zip(self._base, self._guides)]
        self._jump = [{node: starts[i] for node, i in inst.next_of_node.items()} for inst in instances]
        self.initial_state = self._guides[0].initial_state
        self.fragments_reused, self.fragments_compiled = reused, compiled
        self._init_mask_cache(cache_size)
        self._mask(self.initial_state)

    def _new_step_table(self) -> None:
        return None  # advance goes through the fragments' own guides

    # ---- sizes ----
    @property
    def num_nodes(self) -> int:
        """Product nodes over the distinct fragments this guide uses."""
        return sum(g.num_nodes for g in {id(g): g for g in self._guides}.values())

    @property
    def num_fragments(self) -> int:
        """Distinct fragments (regex, entry context) this guide uses."""
        return len({id(inst.fragment) for inst in self._instances})

    @property
    def memory_bytes(self) -> int:
        fragments = {id(g): g for g in self._guides}.values()
        own = [*self._slabs, self._cache.record]
        return int(sum(g.memory_bytes for g in fragments) + sum(a.nbytes for a in own))

    # ---- states ----
    def _locate(self, state: int) -> tuple[int, int]:
        """(instance, state of its guide)."""
        try:
            state = int(state.__index__())
        except (AttributeError, TypeError):
            raise TypeError(f"a guide state is an int, not {type(state).__name__} ({state!r})") from None
        if not 0 <= state < self._end:
            raise ValueError(f"{state} is not a state of this guide")
        i = bisect.bisect_right(self._base, state) - 1
        return i, state - self._base[i]

    def _split(self, state: int) -> tuple[int, int]:
        i, inner = self._locate(state)
        self._guides[i]._split(inner)
        return i, inner

    def is_accepting(self, state: int) -> bool:
        i, inner = self._locate(state)
        return self._guides[i].is_accepting(inner)

    def _fill_row(self, state: int, words: np.ndarray) -> None:
        i, inner = self._locate(state)
        self._guides[i]._fill_row(inner, words)

    def _fill_at(self, state: int, out, address: int) -> None:
        i, inner = self._locate(state)
        self._guides[i]._fill_at(inner, out, address)

    @property
    def _num_states(self) -> int:
        return self._end

    @functools.cached_property
    def _instance_makers(self) -> tuple[np.ndarray, list[Guide], np.ndarray]:
        """Each instance's first global state (ascending), the distinct fragment guides whose masks are their node
        rows', and each instance's index among them (-1: a counted fragment, whose masks ``_fill_row`` computes)."""
        makers = list({id(g): g for g in self._guides if g._plain_masks}.values())
        index = {id(g): i for i, g in enumerate(makers)}
        return (np.array(self._base, dtype=np.int64), makers,
                np.array([index.get(id(g), -1) for g in self._guides], dtype=np.int64))

    def _mask_makers(self, states: np.ndarray) -> tuple[list[Guide], np.ndarray, np.ndarray]:
        """Each state's fragment guide and its state there (``_locate`` for a batch, one ``searchsorted``)."""
        bases, makers, maker_of_instance = self._instance_makers
        instance = np.searchsorted(bases, states, side="right") - 1
        return makers, maker_of_instance[instance], states - bases[instance]

    def advance(self, state: int, token_id: int) -> int:
        i, inner = self._locate(state)
        guide = self._guides[i]
        try:
            after = guide.advance(inner, token_id)
        except DisallowedTokenError:
            raise DisallowedTokenError(f"token {token_id} ({guide._describe(token_id)}) is not allowed in state "
                                       f"{state} of {self.name!r}") from None
        jump = self._jump[i].get(after // self._M)  # (none past the nodes of a counted fragment's loop, k > 0)
        return jump if jump is not None else self._base[i] + after
