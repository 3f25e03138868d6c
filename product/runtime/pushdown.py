"""A recursive grammar's guide: the lazy guide's construction over configurations of a call automaton.

A grammar whose recursion no regex expresses has infinitely many configurations (``automata.grammar.pushdown``:
sets of (state, stack) items), so no guide can build its product first. ``LazyGuide`` never needs to: it builds a
node (constraint state, canonical context) when a walk meets it, from three things per constraint state — the
state's byte row (for the vocabulary-trie walk), whether the text may end there, and the boundary test (whether
some completion lets the pre-tokenizer place a piece boundary here: then the state is live in every merge class,
docs/design.md, "Liveness decided locally"). ``PushdownGuide`` is a ``LazyGuide`` whose constraint states are the
configurations met so far, numbered as they come, with those three things computed per configuration:

- *Rows.* A configuration's token row is one scan of the vocabulary trie (``token_regex.GrowingRow``) that stops at
  each configuration it meets at a trie node with children whose byte row is not built yet, has it built
  (``Configurations.expand``) and resumes: a token such as ``[[`` pushes two frames, so the rows it crosses are
  built on the way. The row is then the regex guide's (tokens ascending, the configurations they reach).
- *Ends.* The root rule accepts with an empty stack.
- *Boundary test.* A completion from an item (s, stack) finishes s's rule, then each rule on the stack from its
  return state, then the text ends. ``boundaries.call_summaries`` gives per call-automaton state the marked-DFA
  states a completion of its rule can end in (a least fixpoint over states x 21-33 marked states, once per guide),
  and per stack two sets, built once per stack from its parent's: ``_complete`` (the marked states from which the
  stack's rules can be finished, the text ending in a final state) and ``_complete_first`` (the same, the first
  move a character). The test for an item is then a lookup: some marked state after ``#`` has a non-empty
  completion of s's rule ending in a state from which the stack completes (or s's rule ends at once and the stack
  completes non-empty from there).

Everything else — forced regions searched on demand, the masks, ``advance``, the mask cache, ``Matcher`` and the
clients — is ``LazyGuide``'s. A forced region past ``_MAX_REGION`` undecided pairs, which a regex guide answers by
compiling its whole product, raises ``StateLimitError`` here (there is no whole product).

Rows are shared between configurations alike above their stacks' common base (``_rebased_row``): a relative
configuration's row is scanned once, lifted onto each base, and only the trie subtrees where a token pops below the
base are scanned again per base.

Leaves out: the any-tokenization comparison mode and tokenizers without pre-tokenizer splits (nothing is settled
there: refused by ``product.compile_grammar``); sharing a node's first-visit work (its row split by context, its
forced pairs) between configurations.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from automata.dfa import MISSING
from automata.errors import StateLimitError
from automata.grammar.pushdown import CallAutomaton, Configurations
from bpe.automaton import CanonicalAutomaton
from product.compiler.boundaries import after_hash_states, call_summaries
from product.compiler.token_regex import GrowingRow
from product.runtime.lazy import LazyGuide, kept

__all__ = ["PushdownGuide"]


class PushdownGuide(LazyGuide):
    """Masks of the canonical tokenizations of a recursive grammar's strings (a ``Guide``: states ``node *
    num_merge_classes + merge_class``, nodes built on first visit, as ``LazyGuide``'s)."""

    _shares_rows = False  # (a configuration's future is infinite: no digest names it)

    def __init__(self, automaton: CallAutomaton, canonical: CanonicalAutomaton, *, eos_token_ids=None,
                 cache_size: int = 4096, name: str = "", max_items: int = 100_000):
        self._max_items = max_items
        super().__init__(automaton, canonical, eos_token_ids=eos_token_ids, cache_size=cache_size, name=name)

    def _init_constraint(self, automaton: CallAutomaton, ends, exit_live) -> int:
        if ends is not None or exit_live is not None:
            raise ValueError("a grammar's guide has no fragment exits")
        self._dfa, self._exit_live = None, None
        self._configs = Configurations(automaton, max_items=self._max_items)
        # rows shared between configurations alike above their stacks' common base (``_rebased_row``)
        self._relative = Configurations(automaton, max_items=self._max_items, relative=True)
        self._relative_rows: OrderedDict = OrderedDict()
        self._lifted: dict[tuple[int, int], int] = {}
        self._first, self._anything, self._nullable = call_summaries(automaton, self._canonical)
        self._after_hash = after_hash_states(self._canonical)
        S = self._first.shape[1]
        final = int(sum(1 << m for m in np.flatnonzero(self._canonical.marked_final[:S])))
        self._complete, self._complete_first = [final], [0]  # per stack id (0: the empty stack)
        self._break_rows, self._tested = np.zeros((0, self._num_open), dtype=bool), 0
        self._sync()
        return self._configs.start

    # ---- the growing constraint ---------------------------------------------------------------------------------
    def _sync(self) -> None:
        """Boundary tests of the configurations met since the last call, and the views ``LazyGuide`` reads."""
        configs = self._configs
        n, done = len(configs), self._tested
        self._stack_sets()
        if n > len(self._break_rows):  # (capacity doubled: appends cost amortised constant time)
            grown = np.zeros((2 * n, self._num_open), dtype=bool)
            grown[:done] = self._break_rows[:done]
            self._break_rows = grown
        for config in range(done, n):
            self._break_rows[config] = (self._after_hash & np.uint64(self._first_sets(config))) != 0
        self._tested = n
        self._table = configs.table[:n]
        self._accepting = configs.accepting[:n]
        self._break = self._break_rows[:n]

    def _stack_sets(self) -> None:
        """``_complete`` and ``_complete_first`` of the stacks made since the last call (a stack's parent is always
        older than it)."""
        configs, anything, first, nullable = self._configs, self._anything, self._first, self._nullable
        for stack in range(len(self._complete), len(configs.stack_pairs)):  # (a node's stacks: its pairs', the empty)
            complete, complete_first = self._complete[0] if configs.stack_empty[stack] else 0, 0
            for r, parent in configs.stack_pairs[stack]:
                below = np.uint64(self._complete[parent])
                complete |= _bits((anything[r] & below) != 0)
                complete_first |= _bits((first[r] & below) != 0) | (self._complete_first[parent] if nullable[r] else 0)
            self._complete.append(complete)
            self._complete_first.append(complete_first)

    def _first_sets(self, config: int) -> int:
        """Bits of the marked states from which some non-empty completion of the configuration, starting with a
        character, ends the text in a final state."""
        states, stacks = self._configs.items(config)
        below = np.array([self._complete[k] for k in stacks.tolist()], dtype=np.uint64)
        out = _bits(((self._first[states] & below[:, None]) != 0).any(axis=0))
        for s, k in zip(states.tolist(), stacks.tolist()):
            if self._nullable[s]:
                out |= self._complete_first[k]
        return out

    def _build_row(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        based = self._relative_of(q)
        return self._walk(q) if based is None else self._rebased_row(*based)

    def _read(self, q: int, token: int) -> int:
        """(The row's entry: a token's bytes may reach configurations not built yet, which its row's scan builds.)"""
        tokens, targets = self._row(q)
        i = int(np.searchsorted(tokens, token))
        return int(targets[i]) if i < len(tokens) and tokens[i] == token else -1

    def _walk(self, q, nodes=None) -> tuple[np.ndarray, np.ndarray]:
        """The row of configuration ``q`` by one scan of the trie (of the subtrees of ``nodes``, ``q`` their
        parents' configurations), configurations built as the scan meets them."""
        walk = _scan(self._configs, GrowingRow(self._trie, q, nodes), [q] if nodes is None else q)
        self._sync()  # (the boundary tests of the configurations met, before any kernel reads them)
        return walk.tokens, walk.targets

    # ---- rows shared between configurations that differ below their tops --------------------------------------
    def _relative_of(self, q: int) -> tuple[int, int] | None:
        """(relative configuration, base) of configuration ``q``: its items' stacks above their common ancestor,
        the base; None where that is the empty stack (the root's) or a token may pop below it at once."""
        configs = self._configs
        states, stacks = configs.items(q)
        if not len(states) or not all(configs.stack_simple[k] for k in stacks.tolist()):
            return None  # (a node of several stacks has no one base: the row is scanned whole)
        base = configs.base(stacks.tolist())
        if base == 0:
            return None
        relative = self._relative
        pairs = [(s, relative.push_frames(0, configs.frames(k, base))) for s, k in zip(states.tolist(), stacks.tolist())]
        rel = relative.intern(pairs)
        if rel == MISSING or relative.accepting[rel]:
            return None
        return rel, base

    def _lift(self, rel: int, base: int) -> int:
        """The configuration of relative configuration ``rel`` over ``base``."""
        key = (rel, base)
        found = self._lifted.get(key)
        if found is None:
            relative, configs, memo = self._relative, self._configs, {}
            states, stacks = relative.items(rel)
            found = self._lifted[key] = configs.intern(
                [(s, relative.moved(k, configs, base, memo)) for s, k in zip(states.tolist(), stacks.tolist())])
        return found

    def _relative_row(self, rel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, relative targets, exit nodes, their parents' relative configurations) of a relative
        configuration: the tokens read without popping below the base, once per relative configuration; the
        subtrees of the trie where a token pops below it are the base's to read (``_rebased_row``)."""
        def build(rel: int):
            walk = _scan(self._relative, GrowingRow(self._trie, rel), [rel], exits=True)
            return walk.tokens, walk.targets, walk.exit_nodes, walk.exit_parents

        return kept(self._relative_rows, rel, build)

    def _rebased_row(self, rel: int, base: int) -> tuple[np.ndarray, np.ndarray]:
        """The row of the configuration ``rel`` over ``base``: the relative row's tokens with their targets lifted
        onto the base, and the subtrees where a token pops below the base scanned with the base known."""
        tokens, targets, exit_nodes, exit_parents = self._relative_row(rel)
        present = np.zeros(len(self._relative), dtype=bool)
        present[targets] = True
        lifted = np.full(len(self._relative), -1, dtype=np.int32)
        for t in np.flatnonzero(present).tolist():
            lifted[t] = self._lift(t, base)
        targets = lifted[targets]
        self._sync()
        if len(exit_nodes):
            parents = [self._lift(parent, base) for parent in exit_parents.tolist()]
            more_tokens, more_targets = self._walk(parents, exit_nodes)
            at = np.searchsorted(tokens, more_tokens)
            tokens, targets = np.insert(tokens, at, more_tokens), np.insert(targets, at, more_targets)
        return tokens, targets

    def _compile_whole(self) -> None:
        raise StateLimitError(f"{self.name or 'the grammar'}: deciding whether a token keeps the text completable "
                              "needs a search inside one pre-tokenizer piece past its bound (a grammar that forces a "
                              "long run of text with no piece boundary)")

    @property
    def memory_bytes(self) -> int:
        shared = [a for row in self._relative_rows.values() for a in row]
        shared += [self._relative.table, self._configs.table, self._break_rows]  # (capacities, not views)
        return super().memory_bytes + int(sum(a.nbytes for a in shared)) - self._table.nbytes - self._break.nbytes

    @property
    def num_configurations(self) -> int:
        """Configurations of the grammar met so far."""
        return len(self._configs)


def _scan(configs: Configurations, walk: GrowingRow, starts, exits: bool = False) -> GrowingRow:
    """Run ``walk`` over ``configs`` from the configurations ``starts``, building each configuration it stops at
    (``exits``: a relative scan, ``configs.accepting`` flagging where a token pops below the base)."""
    configs.expand(np.unique(starts).tolist())
    while (state := walk.step(configs.table, configs.expanded, configs.accepting if exits else None)) is not None:
        configs.expand([state])
    return walk


def _bits(flags: np.ndarray) -> int:
    return int(sum(1 << int(m) for m in np.flatnonzero(flags)))
