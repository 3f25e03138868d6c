"""Views of a DFA for people and tools: networkx graphs, GraphML and Graphviz DOT files.

``to_networkx`` gives a ``networkx.DiGraph`` with one edge per (source, target) pair. Each edge carries
``label`` (readable symbol ranges such as ``a-z`` or ``\\x80-\\xbf``) and ``symbols`` (the exact symbol set
as a range string such as ``"48-57,97"``, so that GraphML, which stores only scalars, round-trips).
Nodes carry ``accepting`` and ``start``; the graph carries the alphabet. ``from_networkx`` is the inverse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from automata.dfa import DFA, MISSING, Alphabet

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["to_networkx", "from_networkx", "write_graphml", "write_dot"]


def _runs(symbols: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for x in symbols:
        if runs and runs[-1][1] == x - 1:
            runs[-1] = (runs[-1][0], x)
        else:
            runs.append((x, x))
    return runs


def _label(alphabet: Alphabet, symbols: list[int]) -> str:
    parts = []
    for lo, hi in _runs(symbols):
        parts.append(alphabet.label(lo) if lo == hi else f"{alphabet.label(lo)}-{alphabet.label(hi)}")
    return " ".join(parts)


def to_networkx(dfa: DFA) -> nx.DiGraph:
    import networkx as nx  # deferred: ~0.3 s to import, which every process but an export's would pay

    graph = nx.DiGraph(alphabet_kind=dfa.alphabet.kind, alphabet_chars=json.dumps("".join(dfa.alphabet.chars)),
                       start=dfa.start)
    for s in range(dfa.num_states):
        graph.add_node(s, accepting=bool(dfa.accepting[s]), start=s == dfa.start)
    src, sym = np.nonzero(dfa.transitions != MISSING)
    dst = dfa.transitions[src, sym]
    edges: dict[tuple[int, int], list[int]] = {}
    for a, x, b in zip(src.tolist(), sym.tolist(), dst.tolist()):
        edges.setdefault((a, b), []).append(x)
    for (a, b), symbols in edges.items():
        graph.add_edge(a, b, label=_label(dfa.alphabet, symbols),
                       symbols=",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in _runs(symbols)))
    return graph


def from_networkx(graph: nx.DiGraph) -> DFA:
    """Rebuild a DFA from a graph made by ``to_networkx`` (possibly after a GraphML round trip)."""
    kind = graph.graph["alphabet_kind"]
    alphabet = Alphabet.bytes() if kind == "bytes" else Alphabet.of_chars(json.loads(graph.graph["alphabet_chars"]))
    nodes = sorted(graph.nodes, key=int)
    index = {n: i for i, n in enumerate(nodes)}
    table = np.full((len(nodes), alphabet.size), MISSING, dtype=np.int32)
    for a, b, data in graph.edges(data=True):
        for part in str(data["symbols"]).split(","):
            lo, _, hi = part.partition("-")
            table[index[a], int(lo) : int(hi or lo) + 1] = index[b]
    accepting = np.array([bool(graph.nodes[n]["accepting"]) for n in nodes])
    start = next(index[n] for n in nodes if graph.nodes[n]["start"])
    return DFA(table, accepting, start, alphabet)


def write_graphml(dfa: DFA, path: str | Path) -> None:
    import networkx as nx  # deferred (to_networkx)

    nx.write_graphml(to_networkx(dfa), str(path))


def write_dot(dfa: DFA, path: str | Path | None = None) -> str:
    """Graphviz DOT text of the DFA (accepting states double circles); written to ``path`` if given."""
    graph = to_networkx(dfa)
    lines = ["digraph DFA {", "  rankdir=LR;", '  __start [shape=point, label=""];']
    for n, data in graph.nodes(data=True):
        lines.append(f'  {n} [shape={"doublecircle" if data["accepting"] else "circle"}];')
    lines.append(f"  __start -> {dfa.start};")
    for a, b, data in graph.edges(data=True):
        label = data["label"].replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'  {a} -> {b} [label="{label}"];')
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
