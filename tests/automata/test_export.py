"""networkx / GraphML / DOT exports round-trip the language."""

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automata import Alphabet, from_networkx, from_regex, to_networkx, write_dot, write_graphml

CASES = [(r"(true|false)|[a-c]é", None), (r"-?[0-9]+(\.[0-9]*)?", None), (r"(ab)*c|ba", "abc")]


@pytest.mark.parametrize("pattern,chars", CASES)
@settings(max_examples=150, deadline=None)
@given(s=st.text(alphabet=st.sampled_from("truefalsabcé-.0123456789x"), max_size=8))
def test_networkx_and_graphml_round_trip(tmp_path_factory, pattern, chars, s):
    dfa = from_regex(pattern, Alphabet.of_chars(chars) if chars else None)
    rebuilt = from_networkx(to_networkx(dfa))
    path = tmp_path_factory.mktemp("g") / "dfa.graphml"
    write_graphml(dfa, path)
    from_file = from_networkx(nx.read_graphml(path))
    assert rebuilt.accepts(s) == dfa.accepts(s) == from_file.accepts(s)


def test_edge_labels_are_readable_ranges():
    graph = to_networkx(from_regex(r"[a-z0-9]x"))
    labels = {d["label"] for _, _, d in graph.edges(data=True)}
    assert "0-9 a-z" in labels and "x" in labels


def test_dot_output_marks_start_and_accepting():
    dot = write_dot(from_regex(r"ab"))
    assert dot.startswith("digraph DFA {") and "doublecircle" in dot and "__start -> 0" in dot
    assert '[label="a"]' in dot and '[label="b"]' in dot
