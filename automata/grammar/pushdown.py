"""Recursive grammars as call automata: each recursive rule a byte DFA, references to them calls, configurations
built on first visit.

A grammar whose recursion no regex expresses (``"(" expr ")"``, JSON's nesting) is written by
``regular.call_regexes`` as regexes over characters and *call markers*, one per recursive rule. Here each becomes a
DFA over bytes whose marker edges are kept aside as *calls* (state s, callee rule k, return state r): the
``CallAutomaton``, every rule's DFA in one table (rule 0 is the start rule's regex, the *root*).

A *configuration* is what the text so far can be in: a set of items (state, stacks), the stacks being the return
states of the rules called and not finished, as a *node* that stands for a set of stacks shared as a graph
(``Configurations``: a node is (return state, parent node) pairs and maybe the empty stack; node 0 is the empty
stack). It is closed under calls (an item at a state with a call to k also stands at k's start, its stacks pushed
with the return state, unless that state only returns: a tail call pushes nothing) and returns (an item at an
accepting state of a called rule stands at the return state on top of each of its stacks, popped); of the closure
only the items that read a byte are kept, those at one state merged into one item (the union of their nodes), and
whether one sits at an accepting state of the root with the empty stack — where the text may end. So a
configuration holds at most one item per state, however many ways the rules open so far can nest. ``Configurations`` numbers
configurations as they are met and fills a configuration's row over the 256 bytes on request (``expand``): a
deterministic automaton over bytes, infinite in general, built only where a walk goes. Its table has the layout of
``automata.dfa.DFA``'s, so the vocabulary-trie walks of regex guides read it unchanged.

``relative=True``: stacks are above an unnamed *base*, and the empty stack is that base, not the root's: an item at an
accepting state with the empty stack pops below the base, so ``accepting`` then flags configurations whose text
*exits* (what follows depends on the base; ``product.runtime.pushdown`` reads the rest of such a token with the base
known). There is no start configuration.

Invariants: a configuration's items stand at distinct states and each reads some byte (or the configuration is the
text's end only); equal closures are one configuration; ``MISSING`` marks a byte no item reads (and a row not yet expanded,
``expanded`` says which). Left recursion (a rule that can call itself before reading a byte) is refused when the
automaton is built: its closure would never end. A closure past ``max_items`` items raises ``StateLimitError``.

Leaves out: tokens (``product.runtime.pushdown`` builds guides over configurations), grammars whose recursion a
regex expresses (``regular.to_regex``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import _DOT, _EMPTY, Pattern, REFlags, _CharGroup, _Concatenation, _Repeated

from automata import glushkov
from automata.dfa import DFA, MISSING, Alphabet
from automata.errors import EmptyLanguageError, StateLimitError
from automata.grammar.ir import Grammar, UnsupportedGrammarError
from automata.grammar.regular import call_marker, call_regexes, is_call_marker
from automata.regex import _interegular_char_dfa, shown, utf8_dfa

__all__ = ["CallAutomaton", "Configurations", "call_automaton", "call_automaton_of"]


@dataclass(frozen=True)
class CallAutomaton:
    """The rules of a recursive grammar side by side. ``dfa``: one byte table over every rule's states (start: the
    root's start); ``accepting[s]``: the rule of ``s`` may end there. ``calls``: int64 [n, 3] rows (state, callee
    rule, return state), sorted by state; ``rule_start[k]``: the start state of rule k (rule 0: the root, never
    called); ``rule_names[k]`` its name."""

    dfa: DFA
    calls: np.ndarray
    rule_start: np.ndarray
    rule_names: tuple[str, ...]

    @property
    def accepting(self) -> np.ndarray:
        return self.dfa.accepting

    @property
    def num_states(self) -> int:
        return self.dfa.num_states


def call_automaton(grammar: Grammar, *, max_states: int = 100_000) -> CallAutomaton | None:
    """The call automaton of ``grammar``, or None where its language is regular (``regular.to_regex`` writes it).
    Errors: ``UnsupportedGrammarError`` (left recursion, naming the rule), ``StateLimitError``, ``RegexError``."""
    root, bodies = call_regexes(grammar)
    if not bodies:
        return None
    return call_automaton_of(root, bodies, max_states=max_states, rules=grammar.rules)


def call_automaton_of(root: str, bodies: dict[str, str], *, max_states: int = 100_000, rules=None) -> CallAutomaton:
    """The call automaton of regexes written as ``regular.call_regexes`` writes them: ``root`` and each rule's
    body, where ``call_marker(k)`` calls the k-th rule of ``bodies`` (``vegas`` writes recursive JSON Schemas so).
    Errors: ``UnsupportedGrammarError`` (left recursion, naming the rule and its line where ``rules`` has it),
    ``StateLimitError``, ``RegexError``."""
    names = ("<start>", *bodies)
    tables, accepting, starts, calls = [], [], [], []
    offset = 0
    for k, pattern in enumerate((root, *bodies.values())):
        table, ends, start, rule_calls = _rule_dfa(pattern, max_states)
        tables.append(np.where(table >= 0, table + offset, MISSING).astype(np.int32))
        accepting.append(ends)
        starts.append(start + offset)
        calls += [(s + offset, callee + 1, r + offset) for s, callee, r in rule_calls]  # (rule 0 is the root)
        offset += len(table)
        if offset > max_states:
            raise StateLimitError(f"the grammar's rules have more than max_states={max_states} states")
    table, ends = np.concatenate(tables), np.concatenate(accepting)
    calls_array = np.array(sorted(calls), dtype=np.int64).reshape(-1, 3)
    table, calls_array, live = _trimmed(table, ends, calls_array, np.array(starts, dtype=np.int64))
    if not live[starts[0]]:
        raise EmptyLanguageError("the grammar derives no string (every derivation recurses forever)")
    automaton = CallAutomaton(DFA(table, ends, starts[0], Alphabet.bytes()), calls_array,
                              np.array(starts, dtype=np.int64), names)
    _refuse_left_recursion(automaton, rules or {})
    return automaton


def _trimmed(table: np.ndarray, accepting: np.ndarray, calls: np.ndarray,
             starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The table and calls without what no text completes, and which states are live: a state is *live* when its
    rule can end from it, through bytes and calls of rules whose start is live, returning to live states (a least
    fixpoint). Edges into other states and calls of other rules are dropped, so every item of every configuration can
    finish its rule and every frame's return state too: no configuration is a dead end for the grammar
    (``root ::= "(" root ")"`` would otherwise grow one frame per byte, forever)."""
    live = accepting.copy()
    src, dst = np.nonzero(table >= 0)
    dst = table[src, dst]
    while True:
        grown = live.copy()
        grown[src[live[dst]]] = True
        callee_live = live[starts[calls[:, 1]]] & live[calls[:, 2]]
        grown[calls[callee_live, 0]] = True
        if (grown == live).all():
            break
        live = grown
    trimmed = np.where((table >= 0) & live[np.maximum(table, 0)], table, MISSING).astype(np.int32)
    keep = live[starts[calls[:, 1]]] & live[calls[:, 2]]
    return trimmed, calls[keep], live


def _rule_dfa(pattern: str, max_states: int) -> tuple[np.ndarray, np.ndarray, int, list[tuple[int, int, int]]]:
    """(byte table, accepting, start, calls (state, rule, return state)) of one rule's regex with call markers."""
    markers = frozenset(c for c in pattern if is_call_marker(c))
    tree = glushkov.read_tree(pattern, max_states)
    tree = _markers_unmatched(tree, markers, pattern)
    glushkov.check_positions(tree, max_states)
    class_target, accepting, start, mapping = (glushkov.char_dfa(tree, max_states)
                                               or _interegular_char_dfa(tree, max_states))
    class_target = np.array(class_target, dtype=np.int32)
    calls = []
    for char in markers:
        c = mapping[char]
        if sum(1 for k in mapping.values() if k == c) != 1:  # (each marker is named alone: its own class)
            raise AssertionError(f"call marker U+{ord(char):04X} shares its class in {shown(pattern)}")
        for s in np.flatnonzero(class_target[:, c] >= 0).tolist():
            calls.append((s, ord(char) - ord(call_marker(0)), int(class_target[s, c])))
        class_target[:, c] = MISSING  # no text reads a marker
    dfa = utf8_dfa(class_target, np.asarray(accepting, dtype=bool), int(start), mapping, mapping[anything_else],
                   class_target.shape[1] - 1, max_states)
    return dfa.transitions, dfa.accepting, dfa.start, calls


def _markers_unmatched(tree, markers: frozenset, pattern: str, flags: REFlags = REFlags(0)):
    """``tree`` with every negated class (``[^...]``, ``.``) leaving the markers out: only a marker itself reads
    one, so a call is an edge of the places the grammar refers to the rule, nowhere else."""
    if tree is _DOT:  # (``.``: every character but a newline, or every one under the s flag)
        return _CharGroup(markers if flags & REFlags.SINGLE_LINE else markers | {"\n"}, True)
    if isinstance(tree, _CharGroup):
        return _CharGroup(tree.chars | markers, True) if tree.negated else tree
    if isinstance(tree, Pattern):
        inner = (flags | tree.added_flags) & ~tree.removed_flags
        return Pattern(tuple(_markers_unmatched(o, markers, pattern, inner) for o in tree.options),
                       tree.added_flags, tree.removed_flags)
    if isinstance(tree, _Concatenation):
        return _Concatenation(tuple(_markers_unmatched(p, markers, pattern, flags) for p in tree.parts))
    if isinstance(tree, _Repeated):
        return _Repeated(_markers_unmatched(tree.base, markers, pattern, flags), tree.min, tree.max)
    if tree is _EMPTY:
        return tree
    raise UnsupportedGrammarError(f"a lookaround in a rule of a recursive grammar: {shown(pattern)}",
                                  construct="lookaround")


def _refuse_left_recursion(automaton: CallAutomaton, rules) -> None:
    """Refuse a rule that can call itself before reading a byte (directly or through other rules): the closure of
    a configuration would push forever."""
    accepting, calls, starts = automaton.accepting, automaton.calls, automaton.rule_start
    by_state: dict[int, list[tuple[int, int]]] = {}
    for s, k, r in calls.tolist():
        by_state.setdefault(s, []).append((k, r))
    # nullable[s]: from s the rule can end reading nothing (through calls of rules that can end so)
    nullable = accepting.copy()
    changed = True
    while changed:
        changed = False
        for s, k, r in calls.tolist():
            if not nullable[s] and nullable[starts[k]] and nullable[r]:
                nullable[s] = changed = True
    first_calls: dict[int, set[int]] = {}
    for k, start in enumerate(starts.tolist()):
        seen, stack, called = {start}, [start], set()
        while stack:
            for callee, r in by_state.get(stack.pop(), ()):
                called.add(callee)
                if nullable[starts[callee]] and r not in seen:
                    seen.add(r)
                    stack.append(r)
        first_calls[k] = called
    for k in range(1, len(starts)):
        seen, stack = set(), list(first_calls[k])
        while stack:
            j = stack.pop()
            if j == k:
                name = automaton.rule_names[k]
                rule = rules.get(name)
                raise UnsupportedGrammarError(
                    f"rule {name!r} is left-recursive (it can refer to itself before any text): not supported, as in "
                    "llama.cpp; write the repetition with * or +", construct="left recursion",
                    line=rule.at.line if rule else 0, column=rule.at.column if rule else 0, rule=name)
            if j not in seen:
                seen.add(j)
                stack.extend(first_calls[j])


class Configurations:
    """The configurations of a ``CallAutomaton`` met so far, numbered from 0 (the start), and their byte rows.

    ``table``: int32 [capacity, 256] (rows ``0..len(self)-1`` are configurations; a row is filled by ``expand``,
    ``MISSING`` before); ``accepting[c]``: the text may end in configuration c. ``items(c)``: its (states, stacks)
    arrays, one item per state.

    A *stack node* stands for a set of stacks, shared as a graph: ``stack_empty[i]`` (the set holds the empty stack)
    and ``stack_pairs[i]``, (return state, parent node) pairs with distinct return states, sorted — the stacks with
    that return state on top of one of the parent's. Node 0 is the empty stack alone; a plain stack is one pair
    without the empty stack (``stack_simple``: plain all the way down).
    Items of a configuration that stand at the same state are one item whose node is the union of theirs
    (``merge``): a grammar whose open rules can nest in several ways before the text tells them apart (``e ::= ws
    ...``, ``c ::= ws e "(" c? ")"``, ``d ::= ws e "[" ...``: each space may open any of them) keeps one item per
    state and a node per level, where a set of separate stacks would grow as 3 to the number of spaces. Invariant:
    nodes are interned by (empty, pairs) with each pair's parent interned first, so one set of stacks written alike
    is one node."""

    def __init__(self, automaton: CallAutomaton, *, max_items: int = 100_000, relative: bool = False):
        self.automaton, self.max_items = automaton, max_items
        T = automaton.dfa.transitions
        self._transitions = T
        self._reads = (T >= 0).any(axis=1)
        self._calls_at: dict[int, list[tuple[int, int]]] = {}
        for s, k, r in automaton.calls.tolist():
            self._calls_at.setdefault(s, []).append((int(automaton.rule_start[k]), r))
        # A call whose return state only returns (accepting, reading nothing, calling nothing) pushes nothing: the
        # callee's return is its caller's (``"-" factor`` read 64 times in one token stays one frame deep)
        self._only_returns = automaton.accepting & ~self._reads
        self._only_returns[list(self._calls_at)] = False
        self.stack_empty, self.stack_pairs = [True], [()]
        self.stack_depth, self.stack_simple = [0], [True]
        self._stack_ids: dict[tuple, int] = {(True, ()): 0}
        self._merged: dict[frozenset, int] = {}
        self._ids: dict[tuple, int] = {}
        self._closures: dict[tuple[int, int], tuple[frozenset, bool]] = {}
        self._columns: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self._items: list[tuple[np.ndarray, np.ndarray]] = []
        self.table = np.full((64, 256), MISSING, dtype=np.int32)
        self.accepting = np.zeros(64, dtype=bool)
        self.expanded = np.zeros(64, dtype=bool)
        self.relative = relative
        self.start = None if relative else self._intern([(automaton.dfa.start, 0)])
        if self.start == MISSING:
            raise AssertionError("a call automaton's start reads nothing")  # (the grammar's language is not empty)

    def __len__(self) -> int:
        return len(self._items)

    def items(self, config: int) -> tuple[np.ndarray, np.ndarray]:
        return self._items[config]

    def depth(self, stack: int) -> int:
        """The most frames of the node's stacks."""
        return self.stack_depth[stack]

    def frames(self, stack: int, base: int = 0) -> list[int]:
        """The return states of a plain ``stack`` above ``base`` (one of its ancestors), top first."""
        out = []
        while stack != base:
            ret, stack = self.stack_pairs[stack][0]
            out.append(ret)
        return out

    def base(self, stacks) -> int:
        """The deepest stack that every one of the plain ``stacks`` holds (their common ancestor)."""
        stacks = set(stacks)
        while len(stacks) > 1:
            deepest = max(stacks, key=self.stack_depth.__getitem__)
            stacks.discard(deepest)
            stacks.add(self.stack_pairs[deepest][0][1])
        return stacks.pop()

    def push_frames(self, stack: int, frames: list[int]) -> int:
        """``stack`` with ``frames`` (top first, as ``frames`` gives them) pushed on it."""
        for ret in reversed(frames):
            stack = self._push(stack, ret)
        return stack

    def moved(self, stack: int, onto: "Configurations", base: int, memo: dict) -> int:
        """Node ``stack`` of these (relative) configurations as a node of ``onto``, the empty stack standing for
        ``onto``'s node ``base`` (``memo``: nodes moved so far, for one ``onto`` and ``base``)."""
        if stack == 0:
            return base
        found = memo.get(stack)
        if found is None:
            pairs = onto._node(False, [(ret, self.moved(parent, onto, base, memo))
                                       for ret, parent in self.stack_pairs[stack]])
            found = memo[stack] = onto.merge([pairs, base]) if self.stack_empty[stack] else pairs
        return found

    def intern(self, pairs) -> int:
        """The configuration of the closure of (state, stack) ``pairs`` (MISSING: none)."""
        return self._intern(pairs)

    def _push(self, stack: int, ret: int) -> int:
        return self._node(False, [(ret, stack)])

    def _node(self, empty: bool, pairs) -> int:
        """The node of the stacks ``pairs`` describe (and the empty one, if ``empty``), interned: pairs with one
        return state are one pair, their parents merged."""
        by_return: dict[int, list[int]] = {}
        for ret, parent in pairs:
            by_return.setdefault(ret, []).append(parent)
        canonical = tuple(sorted((ret, parents[0] if len(parents) == 1 else self.merge(parents))
                                 for ret, parents in by_return.items()))
        key = (empty, canonical)
        i = self._stack_ids.get(key)
        if i is None:
            i = self._stack_ids[key] = len(self.stack_pairs)
            self.stack_empty.append(empty)
            self.stack_pairs.append(canonical)
            self.stack_depth.append(max([self.stack_depth[p] + 1 for _, p in canonical], default=0))
            simple = not empty and len(canonical) == 1 and self.stack_simple[canonical[0][1]]
            self.stack_simple.append(simple)
        return i

    def merge(self, stacks) -> int:
        """The node of the union of the nodes ``stacks``."""
        stacks = frozenset(stacks)
        if len(stacks) == 1:
            return next(iter(stacks))
        found = self._merged.get(stacks)
        if found is None:
            empty = any(self.stack_empty[k] for k in stacks)
            found = self._merged[stacks] = self._node(empty, [pair for k in stacks for pair in self.stack_pairs[k]])
        return found

    def _closure(self, s: int, stack: int) -> tuple[frozenset, bool]:
        """(items that read a byte, whether the root may end) of the closure of one item, computed once."""
        key = (s, stack)
        found = self._closures.get(key)
        if found is None:
            accepting_states = self.automaton.accepting
            seen, todo = {key}, [key]
            while todo:
                s, stack = todo.pop()
                more = [(start, stack if self._only_returns[r] else self._push(stack, r))
                        for start, r in self._calls_at.get(s, ())]
                if accepting_states[s]:  # (its rule may end: each stack's top frame returns)
                    more += self.stack_pairs[stack]
                for pair in more:
                    if pair not in seen:
                        seen.add(pair)
                        todo.append(pair)
                if len(seen) > self.max_items:
                    raise self._too_many()
            ends = any(accepting_states[s] and self.stack_empty[stack] for s, stack in seen)
            found = self._closures[key] = (frozenset(p for p in seen if self._reads[p[0]]), ends)
        return found

    def _too_many(self) -> StateLimitError:
        return StateLimitError(f"a configuration of the grammar holds more than {self.max_items} items (an ambiguous "
                               "grammar: the same text parsed in ever more ways)")

    def _intern(self, pairs) -> int:
        """The configuration of the closure of (state, stack) ``pairs``, numbered on first sight; MISSING if it
        reads nothing and cannot end (a dead text)."""
        closures = [self._closure(s, stack) for s, stack in pairs]
        by_state: dict[int, list[int]] = {}
        for found, _ in closures:
            for s, stack in found:
                by_state.setdefault(s, []).append(stack)
        kept = frozenset((s, stacks[0] if len(stacks) == 1 else self.merge(stacks)) for s, stacks in by_state.items())
        ends = any(c[1] for c in closures)
        if not kept and not ends:
            return MISSING
        key = (ends, kept)
        config = self._ids.get(key)
        if config is None:
            config = self._ids[key] = len(self._items)
            items = sorted(kept)
            self._items.append((np.array([s for s, _ in items], dtype=np.int64),
                                np.array([k for _, k in items], dtype=np.int64)))
            if config == len(self.table):
                grow = len(self.table)
                self.table = np.concatenate([self.table, np.full((grow, 256), MISSING, dtype=np.int32)])
                self.accepting = np.concatenate([self.accepting, np.zeros(grow, dtype=bool)])
                self.expanded = np.concatenate([self.expanded, np.zeros(grow, dtype=bool)])
            self.accepting[config] = ends
        return config

    def _byte_columns(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(columns, inverse): the distinct columns of the items' byte rows ([items, k], MISSING where an item reads
        no such byte) and each byte's column — the bytes that step every item alike, once per tuple of states."""
        key = states.tobytes()
        found = self._columns.get(key)
        if found is None:
            targets = self._transitions[states]  # [items, 256]
            if len(states) == 1:
                values, inverse = np.unique(targets[0], return_inverse=True)
                columns = values[None, :]
            else:
                keys = np.ascontiguousarray(targets.T).view(np.dtype((np.void, 4 * len(states)))).ravel()
                _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
                columns = targets[:, first]
            found = self._columns[key] = (columns, inverse.ravel())
        return found

    def expand(self, configs) -> None:
        """Fill the byte rows of ``configs`` (those not yet expanded): each byte's step of every item, closed."""
        for config in configs:
            if self.expanded[config]:
                continue
            states, stacks = self._items[config]
            if len(states):  # (else the text can only end here: nothing to read)
                self.table[config] = self._row_of(states, stacks)
            self.expanded[config] = True

    def _row_of(self, states: np.ndarray, stacks: np.ndarray) -> np.ndarray:
        """A configuration's byte row: per group of bytes that step every item alike, the closure of the steps."""
        columns, inverse = self._byte_columns(states)
        row = np.empty(columns.shape[1], dtype=np.int32)
        for j in range(columns.shape[1]):
            column = columns[:, j]
            live = column >= 0
            row[j] = self._intern(list(zip(column[live].tolist(), stacks[live].tolist()))) if live.any() else MISSING
        return row[inverse]
