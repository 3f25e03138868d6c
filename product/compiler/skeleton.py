"""Cutting a skeleton into fragments: the analysis behind ``product.stitched``'s stitched guides.

A skeleton is a regex whose leaves are placeholder characters (``PLACEHOLDERS``), each standing for a regex
(``product.stitched``'s docstring says why cuts at *hard* positions — byte pairs no token contains — are exact). Here:
the byte pairs inside tokens (``_inner_pairs``, ``_inner_occurrences``), the skeleton's character DFA with runs of
literals no cut could split as one character each (``_skeleton_dfa``, ``_Runs``), the cut states and each
fragment's regex between them (``Skeleton``, ``_literal_cuts_dropped``), and the finer cuts where no token laid
across a state fits the text around it (``_Crossing``, ``fine_cuts``).

Leaves out: compiling the fragments into guides, reusing them and joining them into one guide (``product.stitched``,
``product.runtime.stitched``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
from interegular.fsm import anything_else

from automata import MISSING, EmptyLanguageError, glushkov, parse
from automata.dfa import DFA, Alphabet, minimal_edges, minimal_table
from automata.errors import CanonmergeError, RegexError, StateLimitError
from automata.regex import char_dfa, exit_marker, shown
from automata.regions import eliminate
from bpe.automaton import CanonicalAutomaton
from product.compiler.tables import per_automaton

__all__ = ["PLACEHOLDERS", "END", "KeyChoice", "Skeleton", "StitchError", "FragmentTooLongError"]

END = -1  # a root of an instance: the text may end where the instance starts
PLACEHOLDERS = range(0xD800, 0xDBFE)  # placeholder characters of a skeleton: lone surrogates, in no text (above them:
# ``automata.parse``'s loop operators)
_MAX_FRAGMENT_REGEX = 200_000  # characters: a fragment's regex is written as a tree; sharing is not kept
_MAX_FRAGMENTS_WRITTEN = 20_000_000  # characters of the texts of a fragment's states, together (``fragment``)


class StitchError(CanonmergeError):
    """The skeleton cannot be cut into fragments this module compiles (see ``product.stitched``'s docstring)."""


class FragmentTooLongError(StitchError):
    """A fragment's regex would be too long to write out (its skeleton is not cut finely enough)."""


def _inner_bytes(canonical: CanonicalAutomaton) -> bytes:
    """``_inner_pairs`` as bytes: index x * 256 + y (a Python lookup, ~30 ns, where a numpy element costs ~100)."""
    return per_automaton(canonical, "inner byte pairs as bytes", lambda: _inner_pairs(canonical).tobytes())


def _inner_letter_bytes(canonical: CanonicalAutomaton) -> bytes:
    """``_inner_bytes`` of the pairs of two ASCII letters only: the runs fine cuts read as one character. The finer
    test may cut where a token holds the bytes around a position (a line break, an indentation), but inside a key's
    letters some token laid across fits wherever one holds them, and a run only ever forgoes cuts."""
    def build():
        letters = np.zeros(256, dtype=bool)
        letters[[*range(65, 91), *range(97, 123)]] = True
        return (_inner_pairs(canonical) & letters[:, None] & letters[None, :]).tobytes()

    return per_automaton(canonical, "inner letter pairs as bytes", build)


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

    return per_automaton(canonical, "inner byte pairs", build)


_MAX_CROSSING_PLACES = 20_000  # a byte pair inside more tokens than this is taken as crossed (time, not need)
_FIRST_PLACES = 16  # places of a pair tried one by one before the sieve
_SIEVE = 8  # bytes on either side of a pair that _Crossing._may_fit compares at once
_LOOKAHEAD = 32  # characters read after a token laid across a state, at most, before it is taken as fitting


class Skeleton:
    """The skeleton's character DFA, its edges by class, and its cut states."""

    def __init__(self, pattern: str, leaves: dict[str, str], canonical: CanonicalAutomaton, max_states: int,
                 fine_cuts: bool = False):
        # runs of literal characters that no cut can split read as one character each (with fine cuts, runs of
        # ASCII letters only: the finer test may cut where a token holds the bytes around a position, and a run
        # only ever forgoes cuts — a key's letters, whose every position some token laid across fits)
        dfa, mapping, runs = _skeleton_dfa(
            pattern, _inner_letter_bytes(canonical) if fine_cuts else _inner_bytes(canonical), max_states)
        # states with the same future made one: an instance is (cut states, context), so a skeleton of repeated
        # structure (a recursive $ref unrolled, anyOf branches ending alike) has fewer instances to write and
        # look up (Github_easy---o58839: 5,290 states -> 1,234); from the DFA's edges where the position
        # construction gave them (the table of a large skeleton, states x key runs, is mostly missing)
        if isinstance(dfa, glushkov.CharEdges):
            minimal = minimal_edges(dfa.num_states, dfa.num_classes, dfa.sources, dfa.classes, dfa.targets,
                                    dfa.accepting, 0)
        else:
            minimal = minimal_table(*dfa)
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
        # (the cut states only literal text surrounds are dropped, but stay known: a choice of keys ends its
        # declared names there, ``key_choice``)
        self.cut, self._cut_possible = _literal_cuts_dropped(cut, edges, self.strings, start), cut
        # per state, its edges: target -> the regex of the characters that lead there (edges come in row order,
        # so a target's classes in increasing order, as a walk along the row meets them)
        classes_into: list[dict[int, list[int]]] = [{} for _ in range(n)]
        for q, c, t in edges:
            classes_into[q].setdefault(t, []).append(c)
        self.edges = [{t: label[cs[0]] if len(cs) == 1 else _alternation([label[c] for c in cs])
                       for t, cs in by_target.items()} for by_target in classes_into]
        self._classes_into, self._chars_of = classes_into, chars_of  # (read by ``key_choice``)
        self._leaves = leaves
        self._safe_memo: dict[frozenset, dict[int, bool]] = {}  # (``safe_first_bytes``: state -> safe to the end)
        # per state, what its texts may start with: the first bytes of its literal classes and its leaves' regexes
        # (``first_bytes``, read only where a fragment's entry is checked)
        self._first_literal: list[set[int]] = [set() for _ in range(n)]
        self._first_leaves: list[set[str]] = [set() for _ in range(n)]
        for q, c, _ in edges:
            if self.strings[c] is not None:
                self._first_literal[q] |= first[c]
            else:  # a class of leaves, perhaps with literal characters beside them
                for ch in chars_of[c]:
                    if ch in leaves:
                        self._first_leaves[q].add(leaves[ch])
                    else:
                        self._first_literal[q].add(ch.encode("utf-8", "surrogatepass")[0])

    def first_bytes(self, roots: frozenset) -> frozenset | None:
        """The bytes a fragment's text from ``roots`` can start with; None where it may be empty (a root ends
        the text) or a leaf's first characters are not known. (``product.stitched`` finds a fragment dead at once
        when no token its entry context allows starts with one of them.)"""
        found: set[int] = set()
        for root in roots:
            if root == END or self.accepting[root]:
                return None
            found |= self._first_literal[root]
            for leaf in self._first_leaves[root]:
                openings = _leaf_openings(leaf)
                if openings is None:
                    return None
                found |= {ch.encode("utf-8", "surrogatepass")[0] for ch in openings}
        return frozenset(found)

    def safe_first_bytes(self, roots: frozenset, safe: frozenset, wanted: frozenset | None = None) -> frozenset:
        """The bytes that some text starting at ``roots`` and running to the end of the whole text, made of
        ``safe`` characters only (ASCII, as bytes), can start with (``product.stitched.proven_live``: a tokenizer
        that cannot spell every text can spell those); with ``wanted``, as soon as one of those is found, that one
        (literal ways asked first). Empty where none is known (a leaf whose DFA is too large)."""
        found: set[int] = set()
        edges = [(t, c) for root in roots if root != END for t, classes in self._classes_into[root].items()
                 for c in classes]
        edges.sort(key=lambda edge: self.strings[edge[1]] is None)  # (literal ways first: no DFA to build)
        for t, c in edges:
            openings = self._safe_openings(c, safe) - found
            if wanted is not None:
                openings &= wanted
            if openings and self._safe_to_end(t, safe):
                found |= openings
                if wanted is not None:
                    break
        return frozenset(found)

    def _safe_to_end(self, start: int, safe: frozenset) -> bool:
        """Whether some text of safe characters leads from ``start`` to the end of the text: a search over literal
        edges, taking a leaf's edge (its character DFA asked) only when the literal ways reached so far do not get
        there, one at a time — JSON's closing brackets mostly do, and asking every leaf of a schema cost 1.4 of 3.3 s
        over 12 schemas (Qwen3). Remembered per state."""
        memo = self._safe_memo.setdefault(safe, {})
        if start in memo:
            return memo[start]
        seen, frontier, leaf_edges = {start}, [start], []
        found = False
        while not found:
            while frontier:  # literal edges only
                q = frontier.pop()
                if self.accepting[q] or memo.get(q):
                    found = True
                    break
                for t, classes in self._classes_into[q].items():
                    if t in seen:
                        continue
                    if any(self.strings[c] is not None and self._safe_openings(c, safe) for c in classes):
                        seen.add(t)
                        frontier.append(t)
                    elif any(self.strings[c] is None for c in classes):
                        leaf_edges.append((t, classes))
            while not found and leaf_edges and not frontier:  # then one leaf's edge out of what was reached
                t, classes = leaf_edges.pop(0)
                if t not in seen and any(self._safe_openings(c, safe) for c in classes):
                    seen.add(t)
                    frontier.append(t)
            if not frontier:
                break
        memo[start] = found
        return found

    def _safe_openings(self, c: int, safe: frozenset) -> frozenset:
        """The first bytes of the class's texts made of safe characters only."""
        if self.strings[c] is not None:
            return frozenset(text[0] for text in self.strings[c] if text and all(b in safe for b in text))
        found: set[int] = set()
        for ch in self._chars_of[c]:
            if ch in self._leaves:
                found |= _leaf_safe_openings(self._leaves[ch], safe)
            elif len(ch) == 1 and ord(ch) in safe:
                found.add(ord(ch))
        return frozenset(found)

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
            # (a state's text holds its successors': the regex is the longest text, and the texts together are
            # what writing it costs — a chain of states before a long leaf is quadratic there, not in the regex)
            size[0] += len(text)
            if len(text) > _MAX_FRAGMENT_REGEX or size[0] > _MAX_FRAGMENTS_WRITTEN:
                raise FragmentTooLongError("a fragment's regex is too long to write out")
            written[q] = text
            return text

        try:
            parts = [exit_marker(0) if root == END else write(root, True) for root in sorted(roots)]
        except _Cycle:
            return self._eliminated(roots, soft)
        return _alternation(parts), exits

    def key_choice(self, roots: frozenset, soft: frozenset, exceptions: dict) -> KeyChoice | None:
        """The fragment from ``roots`` as a ``KeyChoice`` where it has that shape: from one root, every way to the
        next cut states literal, but one: a literal prefix, a leaf of ``exceptions`` (placeholder -> (its generic
        regex, the words it excludes)), a literal closing; each other way either the prefix, a word of the leaf's
        and the closing, or a text that does not start as the prefix and a leaf's text do. None otherwise (the
        caller writes the fragment out, ``fragment``).

        The literal ways end at the cut states or, where that does not give the shape, at the first state that
        could be cut (``_literal_cuts_dropped`` drops the cut states only literal text surrounds): a declared name
        whose value is literal (an empty array, a constant) ends after its closing all the same."""
        if len(roots) != 1 or not exceptions:
            return None
        (root,) = roots
        if root == END:
            return None
        paths = self._paths_to_cuts(root, soft, exceptions, self.cut)
        choice = None if paths is None else self._key_choice_of(paths, exceptions)
        if choice is not None:
            return choice
        # the leaf's closing, from the ways cut at every state that could be; then the literal ways end at the
        # first such state after a closing
        paths = self._paths_to_cuts(root, soft, exceptions, self._cut_possible)
        keyed = [] if paths is None else [path for path in paths if path[1] in exceptions]
        if len(keyed) != 1:
            return None
        paths = self._paths_to_cuts(root, soft, exceptions, self._cut_possible, closing=keyed[0][2])
        return None if paths is None else self._key_choice_of(paths, exceptions)

    def _key_choice_of(self, paths: list, exceptions: dict) -> KeyChoice | None:
        """``key_choice`` from the ways ``_paths_to_cuts`` found, where they have its shape: one way through a leaf
        of ``exceptions`` (the key's); the others literal or through another leaf (a ``null`` or ``[]`` beside an
        object), each written whole where none of its texts starts as a key's does (the prefix, then a character
        the key's leaf may start with)."""
        keyed = [path for path in paths if path[1] in exceptions]
        if len(keyed) != 1:
            return None
        ((prefix, leaf, closing, leaf_exit),) = keyed
        if leaf_exit == END:
            return None
        generic, excluded = exceptions[leaf]
        openings = _leaf_openings(generic)
        if openings is None or not _prefix_free(generic):
            return None
        words, others = {}, []
        for text, other_leaf, after, cut in paths:
            if other_leaf in exceptions:
                continue
            if other_leaf is not None:  # (texts: text, a text of the leaf, after)
                if not _starts_apart(text, _leaf_openings(self._leaves[other_leaf]), prefix, openings):
                    return None
                others.append((f"{_escape(text)}(?:{self._leaves[other_leaf]}){_escape(after)}", cut))
                continue
            if not (text.startswith(prefix) and len(text) > len(prefix) and text[len(prefix)] in openings):
                others.append((_escape(text), cut))  # (no text of the key's way starts so: exits apart)
                continue
            word = text[len(prefix): len(text) - len(closing)]
            if not text.endswith(closing) or word not in excluded:
                return None  # a literal text the leaf's texts may share a start with, not a word of it
            words[word] = cut
        return KeyChoice(prefix, generic, closing, leaf_exit, tuple(excluded), words, tuple(others))

    def _paths_to_cuts(self, root: int, soft: frozenset, exceptions: dict, literal_stop: list[bool],
                       closing: str = "", limit: int = 512):
        """Every way from ``root`` to the first cut state on it (a way without a leaf: the first cut state, or the
        first state of ``literal_stop`` its text ends with ``closing`` at, or ``END`` where it ends the text and
        nothing can follow): (literal text before a leaf, the leaf or None, literal text after it, the cut state);
        None where one reads a class of several characters with a leaf among them, two leaves, may end the text or
        go on, has a cycle, or there are more than ``limit``."""
        found = []
        todo = [("", None, "", root, 0)]
        while todo:
            before, leaf, after, q, depth = todo.pop()
            if depth and q not in soft and (self.cut[q] if leaf is not None else
                                            self.cut[q] or literal_stop[q] and before.endswith(closing)):
                found.append((before, leaf, after, q))
            elif depth and self.accepting[q] and not self._classes_into[q]:
                found.append((before, leaf, after, END))  # a way that ends the text (an empty object, a null)
            elif self.accepting[q] or depth > 256 or not self._classes_into[q]:
                return None
            else:
                for t, classes in self._classes_into[q].items():
                    for c in classes:
                        texts = self._literal_texts([c])
                        if texts is not None:
                            todo += [(before + x, leaf, after, t, depth + 1) if leaf is None else
                                     (before, leaf, after + x, t, depth + 1) for x in texts]
                            continue
                        chars = self._chars_of[c]
                        if leaf is not None or len(chars) != 1 or chars[0] not in self._leaves:
                            return None
                        todo.append((before, chars[0], "", t, depth + 1))
            if len(found) + len(todo) > limit:
                return None
        return found

    def _literal_texts(self, classes: list[int]) -> list[str] | None:
        """The texts of literal classes (None: a leaf among them)."""
        texts = []
        for c in classes:
            if self.strings[c] is None:
                return None
            texts += [b.decode("utf-8", "surrogatepass") for b in self.strings[c]]
        return texts

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


@dataclass(frozen=True)
class KeyChoice:
    """A fragment of a skeleton that is a choice of keys (``Skeleton.key_choice``): after ``prefix``, either a text
    of ``generic`` (any key) but none of ``excluded`` (the declared ones) followed by ``closing``, up to the cut
    state ``leaf_exit``; or a word of ``excluded`` followed by ``closing`` (``words``: word -> its cut state; the
    words not there are not allowed here); or one of ``others`` (a regex, cut state or ``END``: the text ends
    there, as after the ``{}`` of an empty top-level object), whose texts start unlike any key's.
    Invariant: ``generic``'s language is prefix-free, so a key's text is a word exactly when it ends where one does.
    """

    prefix: str
    generic: str
    closing: str
    leaf_exit: int
    excluded: tuple[str, ...]
    words: dict
    others: tuple[tuple[str, int], ...]  # (regex, cut state or END)

    def regex(self) -> tuple[str, list[int]]:
        """The fragment every schema with this shape shares: the prefix, then any key and the closing (exit 1), or
        one of the others (exits 2, ...); and the cut state of each exit. The words are told apart while the text
        is written (``product.runtime.keyed``)."""
        exits = [self.leaf_exit] + list(dict.fromkeys(cut for _, cut in self.others if cut != END))
        parts = [f"{_escape(self.prefix)}(?:{self.generic}){_escape(self.closing)}{exit_marker(1)}"]
        parts += [regex + exit_marker(0 if cut == END else exits.index(cut, 1) + 1)
                  for regex, cut in self.others]  # (whole texts: one may start with the prefix, as "{}" does)
        return "(?:" + "|".join(parts) + ")", exits


def _starts_apart(text: str, leaf_openings: frozenset | None, prefix: str, openings: frozenset) -> bool:
    """Whether no text of ``text`` followed by a leaf whose texts start with ``leaf_openings`` (None: not known)
    starts as a key's does: ``prefix``, then a character of ``openings``."""
    n, m = len(prefix), len(text)
    if text[:n] != prefix[:m]:
        return True  # (the two differ within both)
    if m > n:
        return text[n] not in openings
    if leaf_openings is None:
        return False
    return prefix[m] not in leaf_openings if m < n else not leaf_openings & openings


@functools.lru_cache(maxsize=256)
def _prefix_free(regex: str) -> bool:
    """Whether no text of ``regex`` goes on into a longer one (no accepting state of its DFA has a way on)."""
    try:
        table, accepting, _, _ = char_dfa(regex, _MAX_LEAF_STATES)
    except StateLimitError:
        return False
    table = np.asarray(table)
    return not bool((table[np.asarray(accepting, dtype=bool)] != MISSING).any())


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

    def __init__(self, skeleton: "Skeleton", edges: list[tuple[int, int, int]], canonical: CanonicalAutomaton):
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
        self._after: dict[int, int | None] = {}  # token -> the open contexts after it, as bits (``_contexts_after``)
        self._steps: dict[int, list[int] | tuple] = {}  # byte -> per open context, the contexts after it (``_step``)
        self._window_of: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # (``_windows``)

    def crossed(self, q: int, pairs_q: list[tuple[int, int]]) -> bool:
        pair_starts = self.occurrences[1]
        ranges = [(int(pair_starts[x * 256 + y]), int(pair_starts[x * 256 + y + 1])) for x, y in pairs_q]
        if sum(hi - lo for lo, hi in ranges) > _MAX_CROSSING_PLACES:
            return True
        # the first few places of each pair one by one (the shortest tokens: inside a key, one of them fits and
        # ends the test), the others through the sieve
        first = [k for lo, hi in ranges for k in range(lo, min(hi, lo + _FIRST_PLACES))]
        if self._fits(q, first):
            return True
        rest = []
        for lo, hi in ranges:
            if hi > lo + _FIRST_PLACES:
                keep = self._may_fit(q, lo, hi)
                keep[:_FIRST_PLACES] = False  # (tried above)
                rest += (lo + np.flatnonzero(keep)).tolist()
        return len(rest) > 0 and self._fits(q, rest)

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
            if contexts and any(self._lives(r, contexts, _LOOKAHEAD) for r in ends):
                return True
        return False

    def _may_fit(self, q: int, lo: int, hi: int) -> np.ndarray:
        """A first sieve over the places ``lo:hi`` of a byte pair around q (all at once): each of the token's bytes
        within ``_SIEVE`` bytes of the pair must be one the skeleton may read at that distance from q, on any path
        (the places' bytes there read from ``_windows``: one gather for all distances)."""
        allowed = np.ones((2 * _SIEVE, 257), dtype=bool)  # [distance, byte]; byte 256: outside the token
        allowed[:_SIEVE, :256] = self._bytes_at(q, 1)
        allowed[_SIEVE:, :256] = self._bytes_at(q, -1)
        windows, of_place = self._windows(lo, hi)
        return allowed[np.arange(2 * _SIEVE), windows].all(axis=1)[of_place]

    def _windows(self, lo: int, hi: int) -> np.ndarray:
        """(int16 [windows, 2 * _SIEVE], the window of each place): the bytes of the tokens of places ``lo:hi`` (one
        byte pair's) at distances 1.._SIEVE after the pair's second byte, then before its first (256 outside the
        token), each distinct window once (runs of spaces share theirs); kept per pair (a skeleton's candidate
        states have a few pairs, each met at thousands of states)."""
        found = self._window_of.get((lo, hi))
        if found is None:
            at, tokens = self.at_array[lo:hi], self.token_array[lo:hi]
            begin, end = self.offsets[tokens], self.offsets[tokens + 1]
            d = np.arange(1, _SIEVE + 1)
            after, before = at[:, None] + 1 + d[None, :], at[:, None] - d[None, :]
            pos = np.concatenate([after, before], axis=1)
            inside = np.concatenate([after < end[:, None], before >= begin[:, None]], axis=1)
            read = self.blob_array[np.clip(pos, 0, len(self.blob_array) - 1)].astype(np.int16)  # (room for 256)
            windows, of_place = np.unique(np.where(inside, read, np.int16(256)), axis=0, return_inverse=True)
            found = self._window_of[lo, hi] = windows, of_place.ravel()
        return found

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
        """Whether some path into q reads ``text`` at its end (a leaf may end with anything). An edge's one-byte
        characters are looked up by the text's last byte (``_by_length``), its longer ones compared."""
        if not text:
            return True
        for chars, a in self.in_edges.get(q, ()):
            if chars is None:
                return True
            single, longer = _by_length(chars)
            if text[-1] in single and (len(text) == 1 or self._reads_backward(a, text[:-1])):
                return True
            for encoded in longer:
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
            single, longer = _by_length(chars)
            if text[0] in single:
                more = self._ends_forward(b, text[1:])
                if more is None:
                    return None
                ends |= more
            for encoded in longer:
                if not _agrees(encoded, text):
                    continue
                if len(encoded) > len(text):
                    return None
                more = self._ends_forward(b, text[len(encoded):])
                if more is None:
                    return None
                ends |= more
        return ends

    def _contexts_after(self, token: int) -> int | None:
        """The open contexts token ``token`` leads to from any open context, as bits (None: some is not open)."""
        if token not in self._after:
            if 0x80 <= self.blob[self.offsets[token]] < 0xC0:  # it may follow an unfinished character
                self._after[token] = None
                return None
            nxt = np.concatenate([self.inside_next[:, token], self.boundary_next[:, token]])
            nxt = np.unique(nxt[nxt >= 0])
            self._after[token] = None if (nxt >= self.num_open).any() else _bits(nxt)
        return self._after[token]

    def _step(self, contexts: int, byte: int) -> int | None:
        """The open contexts (bits) after ``byte``'s single-byte token from ``contexts``, inside a piece or after a
        boundary (None: no such token, or it leaves some context unfinished)."""
        table = self._steps.get(byte)
        if table is None:
            token, table = int(self.single[byte]), None
            if token >= 0:
                nxt = [np.concatenate([self.inside_next[c, token:token + 1], self.boundary_next[c, token:token + 1]])
                       for c in range(self.num_open)]
                if not any((n >= self.num_open).any() for n in nxt):
                    table = [_bits(n[n >= 0]) for n in nxt]
            table = self._steps[byte] = table or ()
        if not table:
            return None
        out = 0
        while contexts:
            low = contexts & -contexts
            out |= table[low.bit_length() - 1]
            contexts ^= low
        return out

    def _lives(self, q: int, contexts: int, depth: int) -> bool:
        """Whether the marked text may go on from state q in one of ``contexts`` (bits), along some path (up to
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
                    if not nxt:
                        break
                if nxt is None or nxt and (chars is None or self._lives(b, nxt, depth - 1)):
                    return True
        return False


@functools.lru_cache(maxsize=1 << 14)
def _by_length(chars: tuple[bytes, ...]) -> tuple[frozenset, tuple[bytes, ...]]:
    """A class's characters (UTF-8) split into the bytes of its one-byte ones and its longer ones."""
    return frozenset(c[0] for c in chars if len(c) == 1), tuple(c for c in chars if len(c) != 1)


def _bits(contexts: np.ndarray) -> int:
    """A set of open contexts as the bits of an int."""
    out = 0
    for c in np.unique(contexts).tolist():
        out |= 1 << c
    return out


def _single_byte_tokens(canonical: CanonicalAutomaton) -> np.ndarray:
    """int64[256]: a token spelling just that byte, produced inside pieces (-1: none)."""
    def build():
        offsets = np.asarray(canonical.token_offsets, dtype=np.int64)
        blob = np.frombuffer(canonical.token_blob.tobytes(), dtype=np.uint8)
        one = np.flatnonzero((offsets[1:] - offsets[:-1] == 1) & (np.asarray(canonical.merge_class) >= 0))
        single = np.full(256, -1, dtype=np.int64)
        single[blob[offsets[one]][::-1]] = one[::-1]  # the lowest id of each byte
        return single

    return per_automaton(canonical, "single-byte tokens", build)


class _Cycle(Exception):
    """The tree writer met a cycle inside a fragment."""


def _agrees(encoded: bytes, text: bytes) -> bool:
    """Whether a character's bytes and ``text`` agree where both have bytes."""
    n = min(len(encoded), len(text))
    return encoded[:n] == text[:n]


_MAX_LEAF_STATES = 100_000  # a leaf's character DFA, built only for its first characters (fine cuts)


@functools.lru_cache(maxsize=4096)
def _leaf_safe_openings(regex: str, safe: frozenset) -> frozenset:
    """The first characters (as bytes) of the texts of ``regex`` made of ``safe`` characters only (ASCII, as bytes);
    empty where its character DFA is too large to build."""
    try:
        table, accepting, start, mapping = char_dfa(regex, _MAX_LEAF_STATES)
    except StateLimitError:
        return frozenset()
    table = np.asarray(table)
    other = mapping[anything_else]
    column = {b: mapping.get(chr(b), other) for b in safe}
    columns = sorted(set(column.values()))
    # the states from which safe characters reach acceptance: the leaf's DFA over its safe classes only
    safe_only = DFA(np.ascontiguousarray(table[:, columns], dtype=np.int32), np.asarray(accepting, dtype=bool), start,
                    Alphabet("labels", tuple(str(k) for k in columns)))
    good = safe_only.coreachable()
    return frozenset(b for b, k in column.items() if table[start, k] != MISSING and good[table[start, k]])


@functools.lru_cache(maxsize=4096)
def _leaf_openings(regex: str) -> frozenset | None:
    """The characters a text of ``regex`` can start with; None when it may be empty, start with characters the
    regex does not name, or its character DFA is too large to build (a string of ``maxLength: 10000``). Read off
    the tree (``glushkov.first_characters``: what the DFA's start state reads), not the DFA, wherever the position
    construction takes the tree: a bounded ``format: uri`` leaf (98k positions) cost 0.7 s of a YAML schema's first
    mask for its first letter."""
    try:
        tree = glushkov.read_tree(regex, _MAX_LEAF_STATES)
        glushkov.check_positions(tree, _MAX_LEAF_STATES)
    except StateLimitError:
        return None
    except Exception:  # (unreadable: the DFA's construction says why, below)
        tree = None
    found = None if tree is None else glushkov.first_characters(tree)
    if found is not None:
        nullable, chars = found
        return None if nullable or chars is None else chars
    try:
        table, accepting, start, mapping = char_dfa(regex, _MAX_LEAF_STATES)
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
    """``char_dfa`` of a skeleton — as ``glushkov.CharEdges`` where the position construction takes it, else the
    (table, accepting, start) of ``automata.regex.char_dfa`` —, its mapping, and the runs it reads as one character
    each (character -> its text): every
    maximal run of literal characters in a concatenation whose neighbouring bytes are marked in ``inner_pairs``
    (inside some token: ``_inner_bytes``; with fine cuts, also ASCII letters: ``_inner_letter_bytes``; None: no
    runs). No state inside such a run can be cut, and a skeleton is mostly keys and punctuation: read as runs, a
    median MaskBench skeleton has ~60 positions instead of ~130, and the steps after it (determinising,
    minimising, cutting, writing fragments) work per position or state."""
    runs = _Runs(inner_pairs) if inner_pairs is not None and not _RUN_CHARACTER.search(pattern) else None
    tree = parse.read(pattern, runs) if runs is not None else None
    try:
        dfa = None if tree is None else glushkov.char_dfa(tree, max_states, edges=True)
    except (RegexError, StateLimitError) as exc:
        raise type(exc)(f"regex {shown(pattern)}: {exc}") from None
    if dfa is None:  # (no runs, or syntax the position construction leaves out)
        class_target, accepting, start, mapping = char_dfa(pattern, max_states)
        return (class_target, accepting, start), mapping, {}
    return dfa, dfa.mapping, {ch: text for text, ch in runs.runs.items()}


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
