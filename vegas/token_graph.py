"""The token-level automaton of a guide, for people and tools: a minimal DFA over token ids, GraphML and DOT.

``token_automaton(guide)`` walks a guide's reachable states (breadth first, every allowed token but EOS) and
returns the minimal ``bpe.TokenDFA`` of the token sequences the guide accepts: for a canonical guide exactly
the canonical tokenizations of the constraint's strings (pre-tokenizer boundaries, byte fallback and all,
unlike ``bpe.direct_merge``, which knows only the merge table). ``to_networkx`` turns it into a
``networkx.MultiDiGraph`` with one edge per token (``token_id``, ``text``: the token's bytes decoded, and a
readable ``label``); ``write_graphml`` and ``write_dot`` write files.

Invariants: node 0 is the start; a node is ``accepting`` iff the text may end there (EOS is not drawn); every
path from node 0 to an accepting node spells one accepted token sequence, and each accepted sequence is
exactly one path.

Leaves out: large constraints. Free text has thousands of tokens per state, so the walk stops with
``StateLimitError`` past ``max_states`` states or ``max_edges`` token edges; this is for looking at small
regexes, not a serialisation of guides.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np

from automata import DFA, MISSING, Alphabet, StateLimitError
from bpe import TokenDFA
from product import Guide

__all__ = ["token_automaton", "to_networkx", "write_graphml", "write_dot", "token_text"]


def token_automaton(guide: Guide, *, max_states: int = 5_000, max_edges: int = 50_000) -> TokenDFA:
    """The minimal DFA of the token sequences (EOS left out) that ``guide`` accepts."""
    eos = set(guide.eos_token_ids)
    index = {guide.initial_state: 0}
    order = [guide.initial_state]
    edges: list[tuple[int, int, int]] = []
    accepting: list[bool] = []
    i = 0
    while i < len(order):
        state = order[i]
        accepting.append(guide.is_accepting(state))
        for token in np.flatnonzero(guide.allowed(state)).tolist():
            if token in eos:
                continue
            target = guide.advance(state, token)
            j = index.get(target)
            if j is None:
                j = index[target] = len(order)
                order.append(target)
                if len(order) > max_states:
                    raise StateLimitError(f"the token automaton of {guide.name!r} has more than {max_states} states; "
                                          "graphs are for small constraints")
            edges.append((i, token, j))
            if len(edges) > max_edges:
                raise StateLimitError(f"the token automaton of {guide.name!r} has more than {max_edges} token edges; "
                                      "graphs are for small constraints")
        i += 1
    tokens = np.array(sorted({t for _, t, _ in edges}), dtype=np.int64)
    column = {int(t): c for c, t in enumerate(tokens)}
    table = np.full((len(order), max(1, len(tokens))), MISSING, dtype=np.int32)
    for a, t, b in edges:
        table[a, column[t]] = b
    labels = Alphabet("labels", tuple(str(t) for t in tokens) or ("",))
    dfa = DFA(table, np.array(accepting, dtype=bool), 0, labels).minimise()
    return TokenDFA(dfa, tokens)


def token_text(token_bytes: bytes | None) -> str:
    """A token's bytes as text (a partial UTF-8 character as ``\\xNN`` escapes; special tokens as ``<special>``)."""
    if token_bytes is None:
        return "<special>"
    return token_bytes.decode("utf-8", errors="backslashreplace")


def _readable(text: str) -> str:
    """Spaces shown as ␣ and control characters escaped, so that ' "' and '"' look different in a drawing."""
    return "".join("␣" if c == " " else (c if c.isprintable() else repr(c)[1:-1]) for c in text)


def to_networkx(automaton: TokenDFA, token_bytes) -> nx.MultiDiGraph:
    """One node per state (``accepting``, ``start``), one edge per (state, token) with ``token_id``, ``text`` and
    ``label``. ``token_bytes`` maps token ids to bytes (``CanonicalAutomaton.token_bytes``)."""
    dfa = automaton.dfa
    graph = nx.MultiDiGraph(start=dfa.start)
    for s in range(dfa.num_states):
        graph.add_node(s, accepting=bool(dfa.accepting[s]), start=s == dfa.start)
    src, sym = np.nonzero(dfa.transitions != MISSING)
    for a, x in zip(src.tolist(), sym.tolist()):
        token = int(automaton.token_ids[x])
        text = token_text(token_bytes[token])
        graph.add_edge(a, int(dfa.transitions[a, x]), key=token, token_id=token, text=text, label=_readable(text))
    return graph


def write_graphml(graph: nx.MultiDiGraph, path: str | Path) -> None:
    nx.write_graphml(graph, str(path))


def write_dot(graph: nx.MultiDiGraph, path: str | Path | None = None) -> str:
    """Graphviz DOT text (accepting states double circles; the tokens between two states on one edge, one per
    line); written to ``path`` if given."""
    lines = ["digraph tokens {", "  rankdir=LR;", '  node [fontname="monospace"];',
             '  edge [fontname="monospace"];', '  __start [shape=point, label=""];']
    for n, data in graph.nodes(data=True):
        lines.append(f'  {n} [shape={"doublecircle" if data["accepting"] else "circle"}];')
    lines.append(f"  __start -> {graph.graph['start']};")
    grouped: dict[tuple[int, int], list[str]] = {}
    for a, b, data in graph.edges(data=True):
        grouped.setdefault((a, b), []).append(data["label"])
    for (a, b), labels in grouped.items():
        label = "\\n".join(x.replace("\\", "\\\\").replace('"', '\\"') for x in labels)
        lines.append(f'  {a} -> {b} [label="{label}"];')
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
