"""Regions of several regexes: for each set S of them, a regex of the strings matched by exactly the regexes in S.

Regexes have no complement or intersection operator, but a language built from them may need one: the keys of a
JSON object that match one ``patternProperties`` pattern and no other, or no pattern at all. Here the regexes
are read as alternatives of one pattern, each ended by its own exit marker (``automata.regex.exit_marker``), so
that one character DFA tells, in every state, which of them a string read so far matches (its *exit set*). The
strings of region S are those ending in a state whose exit set is exactly S: a DFA per region (same states,
another accepting set), minimised, then written back as a regex by state elimination (Brzozowski–McCluskey: add
a source and a sink, remove states one by one, the one with the fewest in x out edges first, joining
in-label (loop)* out-label).

Leaves out: regexes interegular's tree cannot express without lookarounds (they raise ``RegexError``), and
regions whose regex would outgrow ``max_length`` characters (state elimination can grow exponentially;
``StateLimitError``).
"""

from __future__ import annotations

import numpy as np
from interegular.fsm import anything_else

from automata.dfa import DFA, MISSING, Alphabet
from automata.errors import StateLimitError
from automata.regex import char_dfa, exit_marker

__all__ = ["regions", "eliminate"]

_MARKER_BASE = ord(exit_marker(0))


def regions(patterns: list[str], *, max_states: int = 10_000,
            max_length: int = 200_000) -> dict[frozenset[int], str]:
    """For every non-empty set S of indices into ``patterns`` whose region has a string: a regex of the strings
    that ``re.fullmatch`` every pattern in S and no other."""
    if not 1 <= len(patterns) < 1000:
        raise ValueError(f"regions of 1 to 999 patterns, not {len(patterns)}")
    joined = "|".join(f"(?:{p}){exit_marker(i + 1)}" for i, p in enumerate(patterns))
    class_target, accepting, start, mapping = char_dfa(joined, max_states)
    # the exit set of each state: the markers it reads into an accepting state
    markers = {}
    for char, c in mapping.items():
        if char is not anything_else and _MARKER_BASE < ord(char) <= _MARKER_BASE + len(patterns):
            markers[c] = ord(char) - _MARKER_BASE - 1
    exits = [frozenset() for _ in range(len(class_target))]
    for c, i in markers.items():
        target = class_target[:, c]
        for q in np.flatnonzero((target != MISSING) & accepting[np.maximum(target, 0)]).tolist():
            exits[q] = exits[q] | {i}
    table = class_target.copy()
    table[:, list(markers)] = MISSING  # no string reads a marker
    labels = _class_labels(mapping, set(markers), table.shape[1])
    alphabet = Alphabet("labels", tuple(str(i) for i in range(table.shape[1])))
    found = {}
    for region in sorted(set(exits) - {frozenset()}, key=sorted):
        final = np.array([e == region for e in exits], dtype=bool)
        dfa = DFA(table.astype(np.int32), final, start, alphabet).minimise()
        if dfa.accepting.any():
            found[region] = _eliminate(dfa, labels, max_length)
    return found


def _class_labels(mapping: dict, markers: set[int], num_classes: int) -> list[set[int] | tuple[str, set[int]]]:
    """Per class: the code points it holds, as ("in", points) or ("not", points named by other classes)."""
    members: dict[int, set[int]] = {c: set() for c in range(num_classes)}
    for char, c in mapping.items():
        if char is not anything_else and c not in markers:
            members[c].add(ord(char))
    named = set().union(*members.values()) | {_MARKER_BASE + k for k in range(1024)}
    other = mapping[anything_else]
    return [("not", named - members[c]) if c == other else ("in", members[c]) for c in range(num_classes)]


def _class_text(parts: list) -> str:
    """One regex character class for the union of class labels."""
    positive = set().union(*(p for kind, p in parts if kind == "in"))
    negatives = [p for kind, p in parts if kind == "not"]
    if negatives:  # a union of complements: everything but what every one of them leaves out
        excluded = set.intersection(*map(set, negatives)) - positive
        return "[^" + _ranges(excluded) + "]" if excluded else "(?:.|\\n)"
    if len(positive) == 1:
        (point,) = positive
        return _escape(point, in_class=False)
    return "[" + _ranges(positive) + "]"


def _ranges(points: set[int]) -> str:
    out, run = [], []
    for p in sorted(points):
        if run and p == run[-1] + 1:
            run.append(p)
            continue
        if run:
            out.append(_run(run))
        run = [p]
    if run:
        out.append(_run(run))
    return "".join(out)


def _run(run: list[int]) -> str:
    if len(run) <= 2:
        return "".join(_escape(p, in_class=True) for p in run)
    return _escape(run[0], in_class=True) + "-" + _escape(run[-1], in_class=True)


def _escape(point: int, *, in_class: bool) -> str:
    ch = chr(point)
    if point < 0x20 or point == 0x7F:
        return f"\\x{point:02x}"
    if ch in ("\\]^-[" if in_class else "\\.^$*+?()[]{}|"):
        return "\\" + ch
    return ch


def _eliminate(dfa: DFA, labels: list, max_length: int) -> str:
    """The regex of a trimmed DFA whose symbols are classes with ``labels``."""
    SOURCE, SINK = -1, -2
    edges: dict[tuple[int, int], str] = {}
    table = dfa.transitions
    for q in range(dfa.num_states):
        by_target: dict[int, list] = {}
        for c in np.flatnonzero(table[q] != MISSING).tolist():
            by_target.setdefault(int(table[q, c]), []).append(labels[c])
        for t, parts in by_target.items():
            edges[q, t] = _class_text(parts)
        if dfa.accepting[q]:
            edges[q, SINK] = ""
    edges[SOURCE, int(dfa.start)] = ""
    return eliminate(edges, SOURCE, SINK, max_length)


class TextLabels:
    """How ``eliminate`` joins labels that are regex texts (its default): ``size`` is the text's length."""

    empty = ""

    @staticmethod
    def size(label: str) -> int:
        return len(label)

    @staticmethod
    def join(old: str, new: str) -> str:
        return f"(?:{old}|{new})"

    @staticmethod
    def through(into: str, loop: str | None, out_of: str) -> str:
        return into + (f"(?:{loop})*" if loop is not None else "") + out_of


def eliminate(edges: dict, source, sink, max_length: int, labels=TextLabels):
    """State elimination: ``edges`` maps (from, to) to a regex (parallel edges already joined); every node but
    ``source`` and ``sink`` is removed, the one with the fewest in x out edges first (ties by ``repr``), each path
    through it becoming in-label (loop)* out-label. Returns the regex from source to sink ('' if none: callers
    check emptiness first). ``StateLimitError`` once the labels outgrow ``max_length`` characters.
    ``labels``: how labels are sized and joined (``TextLabels``, or any object with its four members: labels may be
    syntax trees).

    Each node's in- and out-neighbours (self-loops aside) and the labels' total length are kept up to date as
    edges come and go; neighbours in the order their edges entered ``edges``, so the regex is the one a scan of
    ``edges`` per elimination writes."""
    edges = dict(edges)
    ins: dict = {}  # node -> {predecessor: None}, in edge order
    outs: dict = {}
    for a, b in edges:
        ins.setdefault(a, {}), outs.setdefault(a, {}), ins.setdefault(b, {}), outs.setdefault(b, {})
        if a != b:
            ins[b][a] = outs[a][b] = None
    size = labels.size
    total = sum(size(r) for r in edges.values())

    def add(a, b, regex) -> None:
        nonlocal total
        old = edges.get((a, b))
        if old is None:
            edges[a, b] = regex
            total += size(regex)
            if a != b:
                ins[b][a] = outs[a][b] = None
        else:
            edges[a, b] = labels.join(old, regex)
            total += size(edges[a, b]) - size(old)

    nodes = set(ins) - {source, sink}
    name = {k: repr(k) for k in nodes}
    while nodes:
        k = min(nodes, key=lambda n: (len(ins[n]) * len(outs[n]), name[n]))
        loop = edges.pop((k, k), None)
        into = [(a, edges.pop((a, k))) for a in ins.pop(k)]
        out_of = [(b, edges.pop((k, b))) for b in outs.pop(k)]
        total -= sum(size(r) for _, r in into) + sum(size(r) for _, r in out_of) + (0 if loop is None else size(loop))
        for a, _ in into:
            del outs[a][k]
        for b, _ in out_of:
            del ins[b][k]
        for a, r_in in into:
            for b, r_out in out_of:
                add(a, b, labels.through(r_in, loop, r_out))
        nodes.discard(k)
        if total > max_length:
            raise StateLimitError(f"a regex written by state elimination outgrows {max_length} characters")
    return edges.get((source, sink), labels.empty)
