"""The strings several pattern trees all match, as one tree: a ``pattern`` beside a ``format`` (and a length bound).

``vegas.lexical`` reads an ECMA-262 ``pattern`` and a known ``format`` into trees of decoded characters —
("set", CharSet), ("seq", parts), ("alt", options), ("rep", node, lo, hi) — and writes a tree as the regex of its
written (escaped) text. A string schema with both keywords needs the strings of *both* trees, and regexes have no
intersection operator, so the intersection is computed on automata and written back as a tree:

1. *Atoms.* The character sets the two trees name are refined into disjoint atoms (every set is a union of
   atoms), so each tree reads a small alphabet: atom i stands for all of its characters at once.
2. *Automata.* Each tree becomes a Thompson NFA over atoms (a bounded repetition unrolled), then a DFA by subset
   construction; their product (``DFA.intersect``) keeps the pairs where both accept; it is minimised
   (``automata.dfa.DFA.minimise``).
3. *Back to a tree.* Where the product's language is one of the trees' own (a pattern looser than its format, most
   often), that tree, as written; otherwise state elimination (``automata.regions.eliminate``) with trees as labels:
   an edge's atoms are joined into one ("set", union); a path through an eliminated state is ("seq", (in, ("rep",
   loop, 0, None), out)). (A date pattern beside ``format: date``: the format's 242-character regex instead of the
   1,600 characters elimination writes.)

A length bound is one more tree (``.{lo,hi}``) in the product: ``lexical._bounded`` shares a bound out over a tree's
parts, which a tree written by state elimination rarely allows. Invariant: a string is in the result iff every tree
matches it. Leaves out: products past ``max_states`` states and trees past ``max_size`` nodes (``StateLimitError``: the
caller refuses the schema with a typed error; a long bound multiplies the states by its length).
"""

from __future__ import annotations

import numpy as np

from automata.dfa import DFA, MISSING, Alphabet
from automata.errors import StateLimitError
from automata.regions import eliminate
from vegas.charset import ANY, CharSet

__all__ = ["intersection"]

EPSILON = ("seq", ())


def intersection(*trees: tuple, excluded=(), max_states: int = 4096, max_size: int = 10_000) -> tuple | None:
    """The tree of the strings every one of ``trees`` matches and none of ``excluded`` does (a pattern's negative
    lookahead; None when there are none). ``StateLimitError`` past ``max_states`` automaton states or ``max_size``
    tree nodes."""
    atoms = _atoms(set().union(*map(_sets, trees + tuple(excluded))))
    dfas = [_dfa(tree, atoms, max_states) for tree in trees]
    product = dfas[0]
    for dfa in dfas[1:] + [_complement(_dfa(tree, atoms, max_states)) for tree in excluded]:
        product = product.intersect(dfa, max_states=max_states)
        if not product.accepting.any():
            return None
    minimal = product.minimise()
    if not minimal.accepting.any():
        return None
    for tree, dfa in zip(trees, dfas):  # one tree's strings all match the others: that tree, as its author wrote it
        if _same(minimal, dfa.minimise()):
            return tree
    return _tree(minimal, atoms, max_size)


def _same(a: DFA, b: DFA) -> bool:
    """Whether two minimal DFAs (``minimise``: states numbered canonically) have one language."""
    return (a.start == b.start and np.array_equal(a.transitions, b.transitions)
            and np.array_equal(a.accepting, b.accepting))


# ---- 1. atoms --------------------------------------------------------------------------------------------------

def _sets(node: tuple) -> set[CharSet]:
    kind = node[0]
    if kind == "set":
        return {node[1]}
    if kind == "rep":
        return _sets(node[1])
    return set().union(*(_sets(part) for part in node[1]))


def _atoms(sets: set[CharSet]) -> list[CharSet]:
    """Disjoint non-empty sets covering every character, each given set a union of some of them."""
    atoms = [ANY]
    for s in sorted(sets, key=lambda c: c.ranges):
        atoms = [piece for atom in atoms for piece in (atom & s, atom - s) if piece]
    return atoms


# ---- 2. automata -----------------------------------------------------------------------------------------------

class _NFA:
    """A Thompson NFA over atom indices: ``moves[q]`` (atom, target) pairs, ``free[q]`` epsilon targets."""

    def __init__(self, atoms: list[CharSet], max_states: int):
        self.atoms, self.max_states = atoms, max_states
        self.moves: list[list[tuple[int, int]]] = []
        self.free: list[list[int]] = []

    def state(self) -> int:
        if len(self.moves) >= 8 * self.max_states:
            raise StateLimitError(f"a pattern's automaton would have more than {8 * self.max_states} states")
        self.moves.append([])
        self.free.append([])
        return len(self.moves) - 1

    def build(self, node: tuple, start: int) -> int:
        """Add ``node`` from ``start``; return its end state."""
        kind = node[0]
        if kind == "set":
            end = self.state()
            self.moves[start] += [(i, end) for i, atom in enumerate(self.atoms) if atom & node[1]]
            return end
        if kind == "seq":
            for part in node[1]:
                start = self.build(part, start)
            return start
        if kind == "alt":
            end = self.state()
            for option in node[1]:
                self.free[self.build(option, start)].append(end)
            return end
        _, inner, lo, hi = node
        for _ in range(lo):
            start = self.build(inner, start)
        if hi is None:  # a loop: inner from a hub back to it
            hub = self.state()
            self.free[start].append(hub)
            self.free[self.build(inner, hub)].append(hub)
            return hub
        end = self.state()
        for _ in range(hi - lo):
            self.free[start].append(end)
            start = self.build(inner, start)
        self.free[start].append(end)
        return end

    def closure(self, states) -> frozenset[int]:
        seen, stack = set(states), list(states)
        while stack:
            for t in self.free[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)


def _dfa(node: tuple, atoms: list[CharSet], max_states: int) -> DFA:
    """The subset construction of the tree's NFA over atoms."""
    nfa = _NFA(atoms, max_states)
    start = nfa.state()
    end = nfa.build(node, start)
    first = nfa.closure([start])
    ids, order, rows = {first: 0}, [first], []
    while len(rows) < len(order):
        targets: dict[int, set[int]] = {}
        for q in order[len(rows)]:
            for atom, t in nfa.moves[q]:
                targets.setdefault(atom, set()).add(t)
        row = np.full(len(atoms), MISSING, dtype=np.int32)
        for atom, ts in targets.items():
            subset = nfa.closure(ts)
            if subset not in ids:
                if len(order) >= max_states:
                    raise StateLimitError(f"a pattern's automaton would have more than {max_states} states")
                ids[subset] = len(order)
                order.append(subset)
            row[atom] = ids[subset]
        rows.append(row)
    accepting = np.array([end in subset for subset in order], dtype=bool)
    return DFA(np.array(rows, dtype=np.int32), accepting, 0, _labels(len(atoms)))


def _complement(dfa: DFA) -> DFA:
    """The DFA of the strings over the atoms that ``dfa`` rejects: every missing move into one more state, a sink,
    and the accepting states swapped."""
    n, width = dfa.transitions.shape
    table = np.vstack([dfa.transitions, np.full((1, width), MISSING, dtype=np.int32)])
    table[table == MISSING] = n
    return DFA(table, np.append(~dfa.accepting, True), dfa.start, dfa.alphabet)


def _labels(n: int) -> Alphabet:
    return Alphabet("labels", tuple(str(i) for i in range(n)))


# ---- 3. back to a tree -----------------------------------------------------------------------------------------

class _TreeLabels:
    """``eliminate``'s labels as (size, tree) pairs: size counts tree nodes, so the bound holds as trees grow."""

    empty = (0, None)

    @staticmethod
    def size(label) -> int:
        return label[0]

    @staticmethod
    def join(old, new):
        options = (old[1][1] if old[1][0] == "alt" else (old[1],)) + (new[1],)
        return old[0] + new[0] + 1, ("alt", options)

    @staticmethod
    def through(into, loop, out_of):
        parts = [into[1]] + ([("rep", loop[1], 0, None)] if loop is not None else []) + [out_of[1]]
        flat = tuple(x for part in parts for x in (part[1] if part[0] == "seq" else (part,)))
        return into[0] + out_of[0] + (0 if loop is None else loop[0] + 1) + 1, ("seq", flat)


def _tree(dfa: DFA, atoms: list[CharSet], max_size: int) -> tuple:
    SOURCE, SINK = -1, -2
    edges: dict = {}
    for q in range(dfa.num_states):
        by_target: dict[int, CharSet] = {}
        for atom in np.flatnonzero(dfa.transitions[q] != MISSING).tolist():
            t = int(dfa.transitions[q, atom])
            by_target[t] = by_target[t] | atoms[atom] if t in by_target else atoms[atom]
        for t, chars in by_target.items():
            edges[q, t] = (1, ("set", chars))
        if dfa.accepting[q]:
            edges[q, SINK] = (1, EPSILON)
    edges[SOURCE, int(dfa.start)] = (1, EPSILON)
    try:
        return eliminate(edges, SOURCE, SINK, max_size, _TreeLabels)[1]
    except StateLimitError:
        raise StateLimitError(f"their intersection has no regex within {max_size} nodes") from None
