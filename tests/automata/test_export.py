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
    """Every edge, exactly: its readable label, the symbols it stands for, and the start and accepting marks."""
    graph = to_networkx(from_regex(r"[a-z0-9]x"))
    assert graph.graph["start"] == 0
    assert {n: (d["start"], d["accepting"]) for n, d in graph.nodes(data=True)} == {
        0: (True, False), 1: (False, False), 2: (False, True)}
    assert {(u, v, d["label"], d["symbols"]) for u, v, d in graph.edges(data=True)} == {
        (0, 1, "0-9 a-z", "48-57,97-122"), (1, 2, "x", "120")}
    # bytes that are not printable ASCII are escaped; a UTF-8 character is two edges, one per byte
    graph = to_networkx(from_regex(r'[a-cx-z]|é"'))
    assert sorted(d["label"] for _, _, d in graph.edges(data=True)) == ['"', "\\xa9", "\\xc3", "a-c x-z"]


def test_dot_output_marks_start_and_accepting():
    dot = write_dot(from_regex(r"ab"))
    assert dot.startswith("digraph DFA {") and "doublecircle" in dot and "__start -> 0" in dot
    assert '[label="a"]' in dot and '[label="b"]' in dot
