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
where the instance it leads to is live (``_Linker`` solves this across instances; for a lazy guide, an instance the
pre-tokenizer proves live, ``proven_live``, is built only when a walk first enters it). Where a leaf
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

Here: compiling and reusing fragments (``FragmentLibrary``) and linking their instances into a ``StitchedGuide``
(``compile_stitched``). The cutting itself is ``product.compiler.skeleton``'s; serving the stitched guide is
``product.runtime.stitched``'s.

Leaves out (``StitchError``: the caller compiles the whole regex instead): fragments whose regex would be too
long to write out. ``tests/product/test_stitched.py`` checks every mask against the guide of the whole regex.
"""


from __future__ import annotations

import dataclasses
import enum
import functools
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from automata import MISSING, EmptyLanguageError
from automata.budget import CompileBudget, checkpoint, current_budget, running
from automata.dfa import DFA
from automata.errors import CanonmergeError, StateLimitError
from automata.regex import from_regex_exits
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.compiler.boundaries import universal_states
from product.compiler.counted import MIN_COUNT, counted_transitions
from product.compiler.skeleton import END, PLACEHOLDERS, FragmentTooLongError, Skeleton, StitchError
from product.compiler.tables import guide_eos, per_automaton, vocabulary_trie
from product.compiler.token_regex import TokenTransitions
from product.counted import CountedGuide, rebound_minimum
from product.runtime.guide import Guide
from product.runtime.keyed import _REJECTED, KeyedGuide
from product.runtime.lazy import LazyGuide
from product.runtime.stitched import StitchedGuide

__all__ = ["StitchedGuide", "StitchError", "FragmentTooLongError", "compile_stitched", "Fragment", "FragmentLibrary",
           "PLACEHOLDERS", "fragment_library"]

_COUNTED = re.compile(r"(?<!\\)\{(\d+),(\d+)\}")
_SHAPES_HELD = 256  # counted fragments held by shape, to serve other bounds (``FragmentLibrary._rebound``)


def _counted_loops(regex: str) -> list[re.Match]:
    """The repetitions ``{m,n}`` of ``regex`` with n - m >= ``MIN_COUNT`` (those a counter may carry)."""
    return [match for match in _COUNTED.finditer(regex) if int(match[2]) - int(match[1]) >= MIN_COUNT]


def _counted_shape(regex: str) -> tuple[str, int] | None:
    """(the regex with its one counted repetition's upper bound left out, that repetition's n - m), or None where
    it has none or several (``_counted_loops``)."""
    found = _counted_loops(regex)
    if len(found) != 1:
        return None
    match = found[0]
    return f"{regex[:match.start()]}{{{match[1]},}}\x00{regex[match.end():]}", int(match[2]) - int(match[1])


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
    exit_of_node: np.ndarray | None  # (None for a lazy guide: its nodes are built as it is walked)
    exit_sets: list[tuple[int, ...]]
    seconds: float  # compile time
    lazy_exits: list[tuple[int, int, tuple[int, ...]]] | None = None  # a lazy guide's ``cut_exits``

    @functools.cached_property
    def cut_exits(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """(node, pre-tokenizer context, exit set) of every final node at a cut exit: where a stitched guide
        moves on to the next instance (computed once per fragment, not per guide built from it). For a lazy guide
        (``LazyGuide``), whose nodes are not built yet, the node is its key ``state * contexts + context``, for
        every context a token can leave at that state (``_lazy_exits``)."""
        if self.lazy_exits is not None:
            return self.lazy_exits
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


@dataclass(eq=False)
class _KeyedInstance:
    """What a choice of keys' instance has in place of its fragment: the shared fragment and the instance's guide
    over it (``product.runtime.keyed.KeyedGuide``: the words told apart)."""
    shared: Fragment
    guide: KeyedGuide


class FragmentLibrary:
    """Compiled fragments of one canonical automaton in memory — the least recently used evicted past
    ``max_fragments`` fragments or ``max_bytes`` of their guides (``Guide.memory_bytes``; a guide already
    stitched into a guide stays alive there) — backed by a ``product.library.FragmentStore`` on disk when ``get``
    is given one. Thread-safe: the tables change under a lock; compiling happens outside it (two threads may
    compile one fragment at once; the second result replaces the first, both exact)."""

    def __init__(self, canonical: CanonicalAutomaton, max_fragments: int = 4096, max_bytes: int = 1 << 30):
        self.canonical = canonical
        self.max_fragments, self.max_bytes = max_fragments, max_bytes
        self._bytes = 0  # of the fragments held
        self._size: dict[tuple, int] = {}
        self._fragments: "OrderedDict[tuple, Fragment]" = OrderedDict()
        self._dead: set[tuple] = set()  # fragments with no live text (EmptyLanguageError), remembered
        self._soft: dict[str, set[int]] = {}  # fragment regexes found to have soft exits
        self._dfas: "OrderedDict[str, _ExitsDFA]" = OrderedDict()  # lazy fragments' DFAs, by regex
        self._uncounted: set[str] = set()  # regexes with counted loops no counter carries (``_compile_fragment``)
        self._shapes: "OrderedDict[tuple, Fragment]" = OrderedDict()  # counted fragments by shape (``_rebound``)
        self._max_dfa_states = 100_000
        self._lock = threading.Lock()

    def get(self, regex: str, entry_context: int, *, dead_exits: frozenset = frozenset(), canonical_only: bool,
            eos: tuple[int, ...], max_states: int, max_transitions: int, store=None,
            before_compile=None, lazy: bool = False) -> tuple[Fragment, bool]:
        """The fragment of ``regex`` entered in ``entry_context``, with the exits (k, context) of ``dead_exits``
        not final, and whether it was compiled now (False: from memory or disk). ``EmptyLanguageError`` if it
        has no live text. ``before_compile()`` runs first where it is compiled now. ``lazy``: a fragment compiled
        now is a ``LazyGuide``'s (kept in memory only: what it builds is built as it is walked); a compiled one held
        or stored is taken first."""
        key = (regex, entry_context, dead_exits, canonical_only, eos)
        with self._lock:
            for held in ((key, key + ("lazy",)) if lazy else (key,)):
                fragment = self._fragments.get(held)
                if fragment is not None:
                    self._fragments.move_to_end(held)
                    return fragment, False
            if key in self._dead:
                raise EmptyLanguageError("a fragment with no live text")
            if regex in self._soft:
                raise _SoftExits(self._soft[regex])
        compiled = False
        if store is not None:  # what an earlier process found instead of a fragment
            outcome = store.load_outcome(self.canonical, regex, key[1:])
            if outcome is not None:
                self._remember(outcome[0], key, set(outcome[1]))
        fragment = store.load(self.canonical, *key) if store is not None else None
        shape = _counted_shape(regex)
        if fragment is None and shape is not None:
            fragment = self._rebound(key, shape)
        if fragment is None:
            if before_compile is not None:
                before_compile()
            try:
                fragment = _compile_fragment(regex, entry_context, dead_exits, self.canonical,
                                             canonical_only=canonical_only, eos=eos, max_states=max_states,
                                             max_transitions=max_transitions, lazy=lazy,
                                             exits_dfa=self._exits_dfa if lazy else None,
                                             uncounted=self._uncounted)
            except _SoftExits as soft:
                if store is not None:
                    store.keep_outcome(self.canonical, "soft", regex, key[1:], tuple(soft.exits))
                self._remember("soft", key, soft.exits)
            except EmptyLanguageError:
                if store is not None:
                    store.keep_outcome(self.canonical, "empty", regex, key[1:])
                self._remember("empty", key, set())
            compiled = True
            if fragment.lazy_exits is not None:
                key += ("lazy",)
            elif store is not None:
                store.keep(self.canonical, fragment, dead_exits=dead_exits, canonical_only=canonical_only, eos=eos)
        if shape is not None:
            self._keep_shape(key, shape, fragment)
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

    def _rebound(self, key: tuple, shape: tuple[str, int]) -> Fragment | None:
        """The fragment of ``key`` (its regex's ``_counted_shape``: ``shape``) from one held for the same regex but
        its one counted loop's bound (a string of at most 4,096 characters from one of at most 255:
        ``CountedGuide.with_loop_bound``), where both bounds allow it; else None. Milliseconds, where compiling it
        costs ~0.1 s on Llama-3."""
        with self._lock:
            held = self._shapes.get((shape[0],) + key[1:])
        if held is None or shape[1] < rebound_minimum(self.canonical):
            return None
        guide = held.guide.with_loop_bound(shape[1])
        return Fragment(key[0], held.entry_context, guide, held.exit_of_node, held.exit_sets, 0.0)

    def _keep_shape(self, key: tuple, shape: tuple[str, int], fragment: Fragment) -> None:
        """Hold a counted fragment by its regex with the loop's bound left out (``shape``, ``_rebound``), where it can
        serve other bounds."""
        guide = fragment.guide
        if not isinstance(guide, CountedGuide) or guide.horizon is None:
            return
        if guide.loop_bound() != shape[1] or shape[1] < rebound_minimum(self.canonical):
            return
        with self._lock:
            self._shapes[(shape[0],) + key[1:]] = fragment
            self._shapes.move_to_end((shape[0],) + key[1:])
            while len(self._shapes) > _SHAPES_HELD:
                self._shapes.popitem(last=False)

    def _exits_dfa(self, regex: str) -> tuple:
        """``from_regex_exits(regex)``, kept for the fragment's other entry contexts and dead exits (a lazy
        fragment's compile is little more than its DFA)."""
        with self._lock:
            found = self._dfas.get(regex)
        if found is None:
            found = _ExitsDFA(*from_regex_exits(regex, max_states=self._max_dfa_states))
            with self._lock:
                self._dfas[regex] = found
                while len(self._dfas) > self.max_fragments:
                    self._dfas.popitem(last=False)
        return found

    def _remember(self, kind: str, key: tuple, exits: set[int]) -> None:
        """Keep in memory what compiling ``key`` found instead of a fragment, and raise it: soft exits (of the
        regex, whatever the rest of the key) or no live text (of this key)."""
        with self._lock:
            if kind == "soft":
                self._soft[key[0]] = exits
            else:
                self._dead.add(key)
        if kind == "soft":
            raise _SoftExits(exits)
        raise EmptyLanguageError("a fragment with no live text")

    def clear(self) -> None:
        """Drop every fragment held in memory (guides built from them keep theirs; the disk is untouched)."""
        with self._lock:
            self._fragments.clear()
            self._size.clear()
            self._dead.clear()
            self._soft.clear()
            self._dfas.clear()
            self._uncounted.clear()
            self._shapes.clear()
            self._bytes = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes of the fragments' guides held (at most ``max_bytes``, unless one fragment alone is larger)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._fragments)


def fragment_library(canonical: CanonicalAutomaton) -> FragmentLibrary:
    """The in-memory library of ``canonical`` (one per automaton object)."""
    return per_automaton(canonical, "fragments", lambda: FragmentLibrary(canonical))


def _may_enter(sk: Skeleton, roots: frozenset, ctx: int, canonical: CanonicalAutomaton) -> bool:
    """False where no token that context ``ctx`` allows first starts with a byte the fragment from ``roots`` can
    start with: the fragment is then dead there without compiling it (it has no text, so not the empty one either).
    After a YAML line break and indentation GPT-2's pre-tokenizer context allows no token that starts with a
    space: every fragment entered there that starts with one was compiled (~0.5-2 s each) only to find that."""
    first = sk.first_bytes(roots)
    return first is None or any(_entry_first_bytes(canonical)[ctx, b] for b in first)


def _entry_context(sk: Skeleton, roots: frozenset, ctx: int, canonical: CanonicalAutomaton) -> int:
    """The context a fragment from ``roots`` entered in ``ctx`` is compiled in: the least open context that every
    token the fragment can start with (by its first byte) leaves as ``ctx`` does — to the same contexts, inside
    a piece and at a boundary. A fragment's product depends on its entry context only through its first token (the
    merge class before a cut forbids nothing), so the fragment is the same one, compiled once: after ``": `` and
    after ``, `` Llama-3's pre-tokenizer contexts differ, but not on the tokens that start with a space (its 20
    open contexts are 6 classes there), and every value fragment starts with one. ``ctx`` itself where the
    fragment's first bytes are not known or it may be empty."""
    first = sk.first_bytes(roots)
    if first is None or not 0 <= ctx < canonical.num_open_contexts:
        return ctx
    classes, memo = _entry_classes(canonical)
    key = (first, ctx)
    found = memo.get(key)
    if found is None:
        def of(c: int) -> tuple:
            return tuple(classes(b)[c] for b in sorted(first))

        mine = of(ctx)
        found = memo[key] = next(c for c in range(ctx + 1) if of(c) == mine)
    return found


def _entry_classes(canonical: CanonicalAutomaton):
    """(``classes(b)``: per open context, a class id shared by the contexts that every token starting with byte b
    leaves alike, computed once per byte; a memo for ``_entry_context``)."""

    def build():
        first = _token_first_bytes(canonical)
        by_byte: dict[int, list[int]] = {}
        lock = threading.Lock()

        def classes(b: int) -> list[int]:
            with lock:
                found = by_byte.get(b)
                if found is None:
                    tokens = np.flatnonzero(first == b)
                    ids: dict[bytes, int] = {}
                    found = by_byte[b] = [
                        ids.setdefault(canonical.inside_next[c, tokens].tobytes()
                                       + canonical.boundary_next[c, tokens].tobytes(), len(ids))
                        for c in range(canonical.num_open_contexts)]
                return found

        return classes, {}

    return per_automaton(canonical, "entry classes", build)


def _entry_first_bytes(canonical: CanonicalAutomaton) -> np.ndarray:
    """[open context, byte]: whether some token that context allows (whatever the merge class before it: a fragment
    starts after a hard boundary) starts with that byte."""

    def build():
        has_bytes, first = canonical.token_has_bytes, _token_first_bytes(canonical)
        table = np.zeros((canonical.num_open_contexts, 256), dtype=bool)
        for ctx in range(canonical.num_open_contexts):
            allowed = has_bytes & ((canonical.inside_next[ctx] >= 0) | (canonical.boundary_next[ctx] >= 0))
            table[ctx, np.unique(first[allowed])] = True
        return table

    return per_automaton(canonical, "entry_first_bytes", build)


def _token_first_bytes(canonical: CanonicalAutomaton) -> np.ndarray:
    """Each token's first byte (-1: a token of no bytes), per automaton."""
    return per_automaton(canonical, "token first bytes", lambda: np.array(
        [b[0] if b else -1 for b in canonical.token_bytes], dtype=np.int64))


class _ExitsDFA(NamedTuple):
    """``automata.regex.from_regex_exits``' result."""
    dfa: DFA
    exit_of: np.ndarray
    exit_sets: list[tuple[int, ...]]


def _compile_fragment(regex: str, entry_context: int, dead_exits: frozenset, canonical: CanonicalAutomaton, *,
                      canonical_only: bool, eos: tuple[int, ...], max_states: int, max_transitions: int,
                      lazy: bool = False, exits_dfa=None, uncounted: set | None = None) -> Fragment:
    """``uncounted``: regexes whose counted construction was found not to apply (a property of the regex: not
    tried again for its other entry contexts and dead exits, 0.2-0.3 s each for a bounded URI); this one is added
    where it does not."""
    start = time.perf_counter()
    counted_regex = bool(_counted_loops(regex))
    lazy = lazy and canonical_only and LazyGuide.helps(canonical)
    if lazy and not counted_regex:
        return _compile_lazy_fragment(regex, entry_context, dead_exits, canonical, eos, exits_dfa(regex), start)
    trie = vocabulary_trie(canonical)
    num_contexts = canonical.num_contexts if canonical_only else 1
    # (a one-row mask cache: the stitched guides compute their rows through ``_fill_row`` and cache them; 64
    # rows per fragment were 1 MB each at 128k tokens, for masks never read)
    options = dict(canonical_only=canonical_only, max_states=max_states, cache_size=1, name="fragment",
                   eos_token_ids=list(eos), start_context=entry_context)
    guide = None
    if counted_regex and (uncounted is None or regex not in uncounted):
        # a counted repetition: compiled with a counter beside the state (``product.counted``) where that applies
        counted = counted_transitions(regex, trie, max_states=max_states, max_entries=max_transitions, exits=True)
        if counted is None and uncounted is not None:
            uncounted.add(regex)
        if counted is not None:
            exit_of, exit_sets = counted.exit_of, counted.exit_sets
            ends, exit_live = _exit_tables(exit_of, exit_sets, counted.goes_on, dead_exits, num_contexts)
            counted.over = dataclasses.replace(counted.over, accepting=ends)
            guide = CountedGuide(counted, canonical, exit_live=exit_live, **options)
            if guide.horizon is None:  # no budget horizon passed the exactness check: unrolled, as any other
                guide = None
    if guide is None and lazy:
        # a counted repetition the counter does not carry (a length-bounded format: each length its own copy of
        # the pattern) is built as the walk goes rather than unrolled over the whole vocabulary (a URI of at most
        # 255 characters on Llama-3: 765 states, 27M token transitions, 4.3 s)
        try:
            return _compile_lazy_fragment(regex, entry_context, dead_exits, canonical, eos, exits_dfa(regex), start)
        except StateLimitError:
            pass
    if guide is None:
        dfa, exit_of, exit_sets = from_regex_exits(regex, max_states=max_states)
        ends, exit_live = _exit_tables(exit_of, exit_sets, (dfa.transitions != MISSING).any(axis=1), dead_exits,
                                       num_contexts)
        checkpoint()
        transitions = TokenTransitions.build(dfa, trie, max_entries=max_transitions, compact=True)
        transitions = dataclasses.replace(transitions, accepting=ends)
        guide = Guide(transitions, canonical, exit_live=exit_live, **options)
    return Fragment(regex, entry_context, guide, exit_of[guide._node_q], exit_sets, time.perf_counter() - start)


def _compile_lazy_fragment(regex: str, entry_context: int, dead_exits: frozenset, canonical: CanonicalAutomaton,
                           eos: tuple[int, ...], exits_dfa: _ExitsDFA, start: float) -> Fragment:
    """A fragment whose guide is a ``LazyGuide``: its DFA (``exits_dfa``), its exit tables and the boundary test,
    nodes built as the stitched guide walks them. Its cut exits are listed per context a token can leave at the
    exit's state (``_contexts_after_byte``, by the bytes that enter it: one or two contexts where a cut follows
    JSON punctuation), each named by its node key; an exit in a context no walk reaches only adds an instance."""
    dfa, exit_of, exit_sets = exits_dfa
    ends, exit_live = _exit_tables(exit_of, exit_sets, (dfa.transitions != MISSING).any(axis=1), dead_exits,
                                   canonical.num_contexts)
    guide = LazyGuide(dfa, canonical, eos_token_ids=list(eos), cache_size=1, name="fragment",
                      start_context=entry_context, ends=ends, exit_live=exit_live, first_mask=False)
    cut = np.array([any(k >= 1 for k in e) for e in exit_sets] + [False], dtype=bool)[exit_of]
    after_byte = _contexts_after_byte(canonical)
    exits = []
    for q in np.flatnonzero(cut).tolist():
        entering = np.flatnonzero((dfa.transitions == q).any(axis=0))
        contexts = after_byte[entering].any(axis=0)
        contexts[entry_context] |= q == dfa.start  # (an exit before any token: the context the fragment starts in)
        for ctx in np.flatnonzero(contexts & exit_live[q, :canonical.num_open_contexts]).tolist():
            exits.append((q * canonical.num_contexts + ctx, ctx, exit_sets[exit_of[q]]))
    return Fragment(regex, entry_context, guide, None, exit_sets, time.perf_counter() - start, lazy_exits=exits)


def _contexts_after_byte(canonical: CanonicalAutomaton) -> np.ndarray:
    """bool[byte, open context]: whether some token ending with that byte leaves that context, from some context
    (inside a piece or after a boundary)."""

    def build():
        table = np.zeros((256, canonical.num_open_contexts), dtype=bool)
        last = np.array([b[-1] if b else -1 for b in canonical.token_bytes], dtype=np.int64)
        for nxt in (canonical.inside_next, canonical.boundary_next):  # [context, token] -> context after
            ctx, token = np.nonzero((nxt >= 0) & (nxt < canonical.num_open_contexts) & (last >= 0)[None, :])
            table[last[token], nxt[ctx, token]] = True
        return table

    return per_automaton(canonical, "contexts after byte", build)


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


def compile_stitched(skeleton: str, leaves: dict[str, str], canonical: CanonicalAutomaton, *,
                     canonical_only: bool = True, max_states: int = 100_000, max_transitions: int = 50_000_000,
                     cache_size: int = 4096, eos_token_ids: list[int] | None = None, name: str = "",
                     library: FragmentLibrary | None = None, store=None, fine_cuts: bool = False,
                     budget: CompileBudget | None = None,
                     leaf_exceptions: dict[str, tuple[str, tuple[str, ...]]] | None = None,
                     lazy: bool = False) -> "StitchedGuide":
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

    ``leaf_exceptions``: placeholder -> (a regex, words): the leaf stands for the regex's texts but those words
    (its regex in ``leaves`` is the exact one; a free key: any key but the declared names). A fragment that is a
    choice between such a leaf and literal words (``Skeleton.key_choice``) is compiled with the regex itself,
    shared by every skeleton with the same prefix and closing, and the words are told apart as the text is written
    (``product.runtime.keyed``): the trie of the words is never compiled against the vocabulary.

    ``budget``: as ``compile_regex``'s, for the whole stitching. A fragment is kept (in ``library`` and ``store``)
    only once compiled whole, so a compile stopped by its budget leaves the fragments it finished, nothing else.

    ``lazy``: fragments not held or stored are compiled as ``LazyGuide``s (built as they are walked; kept in memory
    only), but those with a counted repetition, which stay compiled (a choice of keys' shared fragment is lazy too,
    under its ``KeyedGuide``).
    """
    with running(budget):
        return _compile_stitched(skeleton, leaves, canonical, canonical_only=canonical_only, max_states=max_states,
                                 max_transitions=max_transitions, cache_size=cache_size, eos_token_ids=eos_token_ids,
                                 name=name, library=library, store=store, fine_cuts=fine_cuts,
                                 leaf_exceptions=leaf_exceptions or {}, lazy=lazy)


def _compile_stitched(skeleton, leaves, canonical, *, canonical_only, max_states, max_transitions, cache_size,
                      eos_token_ids, name, library, store, fine_cuts, leaf_exceptions, lazy) -> "StitchedGuide":
    eos = guide_eos(canonical, eos_token_ids)
    library = fragment_library(canonical) if library is None else library
    sk = Skeleton(skeleton, leaves, canonical, max_states, fine_cuts)
    linker = _Linker(sk, canonical, library, leaf_exceptions, canonical_only=canonical_only, eos=eos,
                     max_states=max_states, max_transitions=max_transitions, store=store, defer=lazy, lazy=lazy)
    start = (frozenset([sk.start]), 0)
    linker.settle(start)
    if linker.defer:  # (every fragment written now: one too long to write must fail the compile, not a walk)
        linker.write_every_fragment()
    if linker.fragment_of[start] is None:
        raise EmptyLanguageError(f"constraint {name!r}: no string it accepts has a "
                                 f"{'canonical ' if canonical_only else ''}tokenization over this vocabulary")
    return StitchedGuide(linker, start, canonical, canonical_only=canonical_only, cache_size=cache_size, name=name,
                         eos=eos, link_all=not linker.defer)


class _Mark(enum.Enum):
    """``_Linker.fragment_of``'s marks for instances not built (an enum: identity survives a pickled copy)."""
    QUEUED = "queued"
    DEFERRED = "deferred"


_QUEUED, _DEFERRED = _Mark.QUEUED, _Mark.DEFERRED


class _Linker:
    """Builds a stitched constraint's instances — a fragment entered in a context — and decides where their exits
    lead: ``instance(key, number)`` for the stitched guide, which numbers the instances as it meets them.

    Liveness crosses fragments: an exit (k, ctx) is final in its fragment only if the instance it leads to is live.
    ``settle(key)`` builds an instance and, transitively, its successors, first with every exit live; an instance
    found dead (its fragment has no live text from its entry context) makes the exits into it dead, and the
    fragments holding them are built again with those exits dead (a different library entry), until nothing
    changes. Dead exits are rare (a YAML line break whose pre-tokenizer context needs a space after it, then a key):
    most fragments are built once.

    ``defer`` (lazy guides): a successor whose liveness follows from the pre-tokenizer alone (``proven_live``: a
    piece boundary at the cut stands whatever follows one of the fragment's first bytes) is not built; the stitched
    guide settles it when a walk first reaches it. Every other successor is settled with its predecessor, so an
    instance a walk can enter never has an exit into a dead one, and one settled later never changes an instance
    already handed out."""

    def __init__(self, sk: Skeleton, canonical: CanonicalAutomaton, library: "FragmentLibrary",
                 leaf_exceptions: dict, *, canonical_only: bool, eos: tuple[int, ...], max_states: int,
                 max_transitions: int, store, defer: bool, lazy: bool):
        self.sk, self.canonical, self.library, self.store = sk, canonical, library, store
        self.leaf_exceptions, self.canonical_only, self.lazy = leaf_exceptions, canonical_only, lazy
        self.eos, self.max_states, self.max_transitions = eos, max_states, max_transitions
        self.num_open = canonical.num_open_contexts if canonical_only else 1
        self.defer = defer and canonical_only and _live_after_cut(canonical) is not None
        self.counts = {False: 0, True: 0}  # fragments taken from the library / compiled now
        self.written: dict[tuple, tuple[str, list[int]]] = {}  # (roots, soft exits) -> regex, exits' cut states
        self.written_all = False
        # per instance (roots, entry context): its fragment (None: dead; _QUEUED, _DEFERRED: not built),
        # successors (guide node -> the instance its exits lead to) and the exits found dead
        self.fragment_of: dict[tuple, object] = {}
        self.successors: dict[tuple, dict] = {}
        # instance -> successor -> the exits leading there: (exit set, context) pairs, or for a choice of keys
        # ("word", w) / ("free",) where the key's class leads there
        self.exits_into: dict[tuple, dict[tuple, frozenset]] = {}
        self.dead_exits: dict[tuple, frozenset] = {}
        self.predecessors: dict[tuple, set] = {}
        self.written_out: set[tuple] = set()  # choices of keys written out (their free key's successor died)
        self.handed_out: set[tuple] = set()  # instances the stitched guide holds: never built again
        # the compile's budget: an instance a walk enters later is built under the same limits and cancel switch
        self.budget = current_budget()

    def _options(self) -> dict:
        return dict(canonical_only=self.canonical_only, eos=self.eos, max_states=self.max_states,
                    max_transitions=self.max_transitions, store=self.store,
                    before_compile=self.write_every_fragment)

    def write_every_fragment(self) -> None:
        """Before the first fragment is compiled (not in a warm compile, which compiles none), every cut state's
        fragment written: one too long to write raises FragmentTooLongError then, not after the compiles of the
        fragments met before it (YAML on Llama-3, Kubernetes kb_863: 17.6 s of compiles, then the error). The
        regexes are kept for the instances that read them."""
        if not self.written_all:
            self.written_all = True
            sk = self.sk
            for q in [sk.start] + [q for q, cut in enumerate(sk.cut) if cut]:
                checkpoint()
                if (frozenset([q]), frozenset()) not in self.written:
                    self.written[frozenset([q]), frozenset()] = sk.fragment(frozenset([q]))

    def settle(self, key: tuple) -> None:
        """Build ``key``'s instance (if not built) and every successor it needs built (module docstring)."""
        fragment_of = self.fragment_of
        if fragment_of.get(key, _DEFERRED) is not _DEFERRED:
            return
        fragment_of[key] = _QUEUED
        pending = [key]
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
            if key in self.handed_out:
                raise CanonmergeError("internal: an instance in use would be built again")
            self._build(key)
            if fragment_of[key] is None:  # dead: the exits into it die, and their fragments are built again
                for pred in self.predecessors.get(key, ()):
                    if isinstance(fragment_of[pred], (Fragment, _KeyedInstance)) and key in self.exits_into[pred]:
                        self.dead_exits[pred] = self.dead_exits.get(pred, frozenset()) | self.exits_into[pred][key]
                        rebuild[pred] = None
                continue
            successors = self.successors[key]
            dead = frozenset().union(*(self.exits_into[key][succ] for succ in successors.values()
                                       if fragment_of.get(succ, _QUEUED) is None))
            if dead:  # exits into instances already known dead: build again without them
                self.dead_exits[key] = self.dead_exits.get(key, frozenset()) | dead
                rebuild[key] = None
            for succ in successors.values():
                self.predecessors.setdefault(succ, set()).add(key)
                if succ not in fragment_of:
                    if self.defer and proven_live(self.sk, self.canonical, *succ):
                        fragment_of[succ] = _DEFERRED
                    else:
                        fragment_of[succ] = _QUEUED
                        pending.append(succ)

    def instance(self, key: tuple, number) -> "_Instance":
        """The instance ``key``, settled, its exits numbered by ``number(successor key)``; handed out for good.
        One a walk enters (deferred at compile time) is built under the compile's budget; where that stops it
        (``CompileBudgetError``, or a fragment's DFA past ``max_states``), the linker is put back as it was, so
        that the step can be tried again."""
        if self.fragment_of.get(key, _DEFERRED) is _DEFERRED:
            saved = self._saved()
            try:
                with running(self.budget):
                    self.settle(key)
            except BaseException:
                self._restore(saved)
                raise
        fragment = self.fragment_of[key]
        if fragment is None:
            raise CanonmergeError("internal: a live exit leads to a dead instance")
        self.handed_out.add(key)
        return _Instance(key[0], key[1], fragment, {node: number(succ) for node, succ in self.successors[key].items()})

    _TABLES = ("fragment_of", "successors", "exits_into", "dead_exits", "written", "counts")

    def _saved(self) -> tuple:
        """What ``settle`` changes, copied (its tables' values are replaced, never changed in place, but for the
        predecessor sets and the set of choices written out)."""
        return ({name: dict(getattr(self, name)) for name in self._TABLES},
                {k: set(v) for k, v in self.predecessors.items()}, set(self.written_out))

    def _restore(self, saved: tuple) -> None:
        tables, self.predecessors, self.written_out = saved
        for name, table in tables.items():
            setattr(self, name, table)

    def __getstate__(self) -> dict:
        """A stitched guide pickled (to a worker process) settles what it enters there from the copy's own
        in-memory library, without the disk store (neither pickles: locks and a writer thread)."""
        state = self.__dict__.copy()
        state["library"], state["store"] = None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.library = fragment_library(self.canonical)

    def _build(self, key: tuple) -> None:
        roots, ctx = key
        sk, canonical, fragment_of = self.sk, self.canonical, self.fragment_of
        if self.canonical_only and not _may_enter(sk, roots, ctx, canonical):
            fragment_of[key] = None  # no token the entry context allows starts a text of it: dead, not written out
            self.successors[key] = {}
            return
        if self.leaf_exceptions and key not in self.written_out:
            choice = sk.key_choice(roots, frozenset(), self.leaf_exceptions)
            if choice is not None and self._build_keyed(key, choice):
                return
            if choice is not None:  # written out from here on, its dead exits found again in its own numbering
                self.written_out.add(key)
                self.dead_exits.pop(key, None)
        soft = frozenset()
        while True:
            checkpoint()
            if (roots, soft) not in self.written:
                self.written[roots, soft] = sk.fragment(roots, soft)
            regex, exits = self.written[roots, soft]
            try:
                fragment, compiled = self.library.get(regex, _entry_context(sk, roots, ctx, canonical),
                                                      dead_exits=self.dead_exits.get(key, frozenset()),
                                                      lazy=self.lazy, **self._options())
                self.counts[compiled] += 1
                break
            except _SoftExits as found:
                soft |= {exits[k - 1] for k in found.exits}
            except EmptyLanguageError:
                fragment_of[key] = None
                self.successors[key] = {}
                return
        fragment_of[key] = fragment
        nxt, into = {}, {}
        for node, exit_ctx, exit_set in fragment.cut_exits:
            if exit_ctx >= self.num_open:
                raise StitchError(f"fragment {regex[:80]!r} exits inside a character")
            succ = (frozenset(END if k == 0 else exits[k - 1] for k in exit_set), exit_ctx)
            nxt[node] = succ
            into[succ] = into.get(succ, frozenset()) | {(exit_set, exit_ctx)}
        self.successors[key], self.exits_into[key] = nxt, into

    def _build_keyed(self, key: tuple, choice) -> bool:
        """``_build`` for a choice of keys: the shared fragment, and the instance's words; False where it must be
        written out instead (its free key's successor is dead, a text goes on past a cut, its exits overlap)."""
        roots, ctx = key
        dead = self.dead_exits.get(key, frozenset())
        if ("free",) in dead:
            return False
        rejected = {mark[1] for mark in dead if mark[0] == "word"}
        regex, exits = choice.regex()
        try:
            fragment, compiled = self.library.get(
                regex, _entry_context(self.sk, roots, ctx, self.canonical),
                dead_exits=frozenset(mark for mark in dead if not isinstance(mark[0], str)), lazy=self.lazy,
                **self._options())
        except (_SoftExits, EmptyLanguageError):
            return False
        nxt, into = {}, {}
        words = sorted(choice.excluded)
        for node, exit_ctx, exit_set in fragment.cut_exits:
            if exit_ctx >= self.num_open:
                raise StitchError(f"fragment {regex[:80]!r} exits inside a character")
            if 1 in exit_set and len(exit_set) > 1:
                return False
            if 1 not in exit_set:
                succ = (frozenset(END if k == 0 else exits[k - 1] for k in exit_set), exit_ctx)
                nxt[node, 0] = succ
                into[succ] = into.get(succ, frozenset()) | {(exit_set, exit_ctx)}
                continue
            succ = (frozenset([choice.leaf_exit]), exit_ctx)
            nxt[node, 0] = succ
            into[succ] = into.get(succ, frozenset()) | {("free",)}
            for w, word in enumerate(words):
                if word in choice.words and w not in rejected:
                    succ = (frozenset([choice.words[word]]), exit_ctx)
                    nxt[node, w + 1] = succ
                    into[succ] = into.get(succ, frozenset()) | {("word", w)}
        self.counts[compiled] += 1
        classes = [w + 1 if word in choice.words and w not in rejected else _REJECTED for w, word in enumerate(words)]
        texts = [(choice.prefix + word).encode("utf-8", "surrogatepass") for word in words]
        self.fragment_of[key] = _KeyedInstance(fragment, KeyedGuide(fragment.guide, self.canonical, texts, classes))
        self.successors[key], self.exits_into[key] = nxt, into
        return True


def proven_live(sk: Skeleton, canonical: CanonicalAutomaton, roots: frozenset, ctx: int) -> bool:
    """Whether the instance (``roots``, ``ctx``) is live without building it: a piece boundary at its cut stands
    whatever follows one of the bytes its fragment's texts start with (``_live_after_cut``), and some text starting
    with that byte has a tokenization — any, where every text has one; else one of safe characters only
    (``_safe_bytes``: printable ASCII the tokenizer spells, whatever its normaliser), up to the end of the text
    (``Skeleton.safe_first_bytes``)."""
    table = _live_after_cut(canonical)
    if table is None:
        return False
    safe = _safe_bytes(canonical)
    if safe is not None:
        return bool(sk.safe_first_bytes(roots, safe, frozenset(np.flatnonzero(table[ctx]).tolist())))
    first = sk.first_bytes(roots)
    return bool(first) and any(b < 0x80 and table[ctx, b] for b in first)


def _live_after_cut(canonical: CanonicalAutomaton) -> np.ndarray | None:
    """bool[open context, ASCII byte]: with the text before a cut in that context, a piece boundary at the cut
    followed by that byte stands whatever text comes next — from some marked-DFA state of the context, ``#`` then
    the byte's symbol lead to a universal state (``boundaries.universal_states``). Then an instance entered there
    whose fragment can start with that byte is live: the tokens so far are the BPE of their pieces, and any
    completion of the constraint starting with the byte is tokenized on its own after them. (A JSON fragment after
    punctuation starts with ``"``, a digit, a letter or a space: every instance of the first-sight bench's schemas
    is proven so, GPT-2 and Llama-3; a tokenizer without pre-tokenizer splits, Mistral's, gets no byte.) None where
    no character is safe (``_safe_bytes``): the argument needs a completion that has a tokenization."""

    def build():
        if _safe_bytes(canonical) == frozenset():
            return None
        universal = universal_states(canonical)
        marked = canonical.marked_transitions
        hash_next = marked[:, -1]
        symbol = canonical.symbol_values[np.searchsorted(canonical.symbol_starts, np.arange(0x80), side="right") - 1]
        table = np.zeros((canonical.num_open_contexts, 0x80), dtype=bool)
        for ctx in range(canonical.num_open_contexts):
            states = int(canonical.context_states[ctx])
            for m in range(len(hash_next)):
                if states >> m & 1 and hash_next[m] >= 0:
                    after = marked[hash_next[m], symbol]
                    table[ctx] |= (after >= 0) & universal[np.maximum(after, 0)]
        return table

    return per_automaton(canonical, "live after cut", build)


def _safe_bytes(canonical: CanonicalAutomaton) -> frozenset | None:
    """None where every text has a tokenization (``_spells_every_text``); otherwise the printable ASCII characters
    (as bytes) that have one in any text of them: each read alone by the canonical automaton — so no normaliser
    rewrites it (``Lowercase``: not A-Z) and the vocabulary spells it — for a tokenizer whose normaliser rewrites
    only non-ASCII characters otherwise (Qwen3's NFC) or whose vocabulary lacks some bytes (SmolLM2: control bytes).
    Empty (nothing proven) where the normaliser is not one of those (a ``Replace`` may rewrite any ASCII text)."""

    def build():
        if _spells_every_text(canonical):
            return None
        if not _reads(canonical, "\u212b") and not _reads(canonical, "\u00c5"):
            return frozenset()  # (something beyond a Unicode normal form rewrites what NFC keeps: trust nothing)
        return frozenset(b for b in range(0x20, 0x7F) if _reads(canonical, chr(b)))

    return per_automaton(canonical, "safe bytes", build)


def _reads(canonical: CanonicalAutomaton, text: str) -> bool:
    """Whether the canonical automaton reads ``text`` as a whole text in some split into tokens of up to 3 bytes."""
    def short_tokens() -> dict[bytes, int]:
        blob, offsets = canonical.token_blob, canonical.token_offsets
        lengths = np.diff(offsets) * canonical.token_has_bytes
        return {bytes(blob[offsets[t]:offsets[t + 1]]): int(t) for t in np.flatnonzero((lengths >= 1) & (lengths <= 3))}

    token_of = per_automaton(canonical, "short tokens by bytes", short_tokens)

    def walk(raw: bytes, class_id: int) -> bool:
        if not raw:
            return canonical.can_end(class_id)
        for k in range(1, min(3, len(raw)) + 1):
            token = token_of.get(raw[:k])
            if token is not None:
                try:
                    after = canonical.class_after(class_id, token)
                except DisallowedTokenError:
                    continue
                if walk(raw[k:], after):
                    return True
        return False

    return walk(text.encode("utf-8"), canonical.start_class)


def _spells_every_text(canonical: CanonicalAutomaton) -> bool:
    """Whether every text has a tokenization: every byte that valid UTF-8 holds is a token of its own (byte-level
    BPE, byte fallback) and the normaliser rewrites no character. Probed with ``A`` (``Lowercase`` rewrites it) and
    U+212B ANGSTROM SIGN (every Unicode normal form rewrites it): the canonical automaton reads neither where the
    normaliser rewrites it, in any split into tokens."""
    blob, offsets = canonical.token_blob, canonical.token_offsets
    single = np.flatnonzero((np.diff(offsets) == 1) & canonical.token_has_bytes)
    if not {b for b in range(0xF5) if b not in (0xC0, 0xC1)} <= set(blob[offsets[single]].tolist()):
        return False
    return _reads(canonical, "A") and _reads(canonical, "\u212b")
