"""The ``canonmerge`` command line, run as a user runs it: a subprocess, real tokenizer, real model.

``generate`` must write text that fullmatches its regex in canonical tokens (checked by re-encoding with the
HF runtime) and report forced tokens; ``graph`` must write a GraphML file whose start-to-accepting paths are
exactly the runtime's tokenizations of the regex's finite language; bad input must exit non-zero with one line
naming the problem. One subprocess per test (the model loads once, in the one generate test).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import networkx as nx
import pytest
import yaml

from automata import from_regex
from automata.grammar import Recognizer, parse_grammar
from bpe.assets import asset_path
from tests.support import runtime_of

ROOT = Path(__file__).resolve().parents[2]


def canonmerge(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run this checkout's command line (``python -m vegas.cli``, what the ``canonmerge`` script calls), with
    ``env`` added to this process's environment."""
    env = dict(os.environ, **(env or {}), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "vegas.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_generate_writes_yaml_that_validates_against_the_example_schema():
    schema_file = ROOT / "vegas" / "examples" / "person.json"
    done = canonmerge("generate", "--schema", str(schema_file), "--format", "yaml", "--chat", "--print-json",
                      "--lazy", "--max-tokens", "120", "Describe a fictional person.")  # (lazy: built as walked)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    text, ids = report["text"], report["token_ids"]
    assert report["finished"] is True, text
    jsonschema.validate(yaml.safe_load(text), json.loads(schema_file.read_text()))
    assert runtime_of("smollm2").encode(text, add_special_tokens=False).ids == ids  # canonical
    assert report["forced_tokens"] >= 3  # the keys' tokens, at least
    # One pass per chosen token, plus one if the model chose EOS (rather than EOS being the only option).
    assert len(ids) <= report["forward_passes"] + report["forced_tokens"] <= len(ids) + 1


def _fragment_counts(done: subprocess.CompletedProcess) -> tuple[int, int, int]:
    """(reused, compiled, distinct) from compile-schema's report."""
    return tuple(map(int, re.search(r"fragments\s+(\d+) reused, (\d+) compiled \((\d+) distinct",
                                    done.stdout).groups()))


def test_compile_schema_reports_the_guide_and_reuses_the_on_disk_library():
    schema = str(ROOT / "vegas" / "examples" / "person.json")
    first = canonmerge("compile-schema", schema, "--tokenizer", "gpt2")
    assert first.returncode == 0, first.stderr
    done = canonmerge("compile-schema", schema, "--tokenizer", "gpt2")  # a new process: only the disk library
    assert done.returncode == 0, done.stderr
    nodes = int(re.search(r"guide\s+(\d+) nodes", done.stdout).group(1))
    assert nodes > 10 and "compiled in" in done.stdout
    reused, compiled, distinct = _fragment_counts(done)
    # the disk library keeps the fragments worth a file (not those compiled in under MIN_COMPILE_SECONDS: reading
    # one back costs about as much), so a new process compiles at most what the first one did, and reuses the rest
    assert reused >= 1 and compiled <= _fragment_counts(first)[1] and reused + compiled >= distinct > 1
    stored = int(re.search(r"library\s+.*: (\d+) fragments", done.stdout).group(1))
    assert stored >= 1


def test_help_lists_every_command():
    done = canonmerge("--help")
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^    (\S+)", done.stdout, flags=re.M)
    assert listed == ["generate", "graph", "compile-schema", "regex", "compile-tokenizer", "info"]


def test_generate_writes_canonical_text_that_matches_and_reports_forced_tokens():
    pattern = r'\{"answer": "(yes|no)", "confidence": 0\.[0-9]\}'
    done = canonmerge("generate", "--regex", pattern, "--chat", "--sample", "--seed", "3", "--temperature", "0.8",
                      "--print-json", "Is water wet? Answer in JSON.")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    text, ids = report["text"], report["token_ids"]
    assert re.fullmatch(pattern, text), text
    assert runtime_of("smollm2").encode(text, add_special_tokens=False).ids == ids  # canonical
    assert report["canonical"] is True and report["finished"] is True
    # '{"answer": "' has one canonical spelling, so at least its tokens are forced, and each forced token saved a pass.
    assert report["forced_tokens"] >= 4 and sum(report["forced"]) == report["forced_tokens"]
    assert report["forward_passes"] + report["forced_tokens"] == len(ids)
    assert report["tokens"] == [runtime_of("smollm2").decode([t]) for t in ids]
    lines = done.stderr.splitlines()  # the human report goes to stderr, quiet progress (not a terminal)
    assert [line.split()[0] for line in lines] == ["tokens", "forced", "forward", "time", "canonical"]
    assert f"forced tokens   {report['forced_tokens']} of {len(ids)}" in done.stderr
    assert "canonical       yes" in done.stderr


def _schema_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "schema.json"
    path.write_text(text)
    return str(path)


def _bad_gguf(tmp_path: Path) -> str:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + b"\x00" * 60)  # the magic, then nothing a reader can use
    return str(path)


@pytest.mark.parametrize("case, args, names", [
    ("invalid regex", ["generate", "--regex", "(ab", "hi"], ["invalid regex", "(ab"]),
    ("missing regex file", ["generate", "--regex-file", "no/such/pattern.txt", "hi"], ["no/such/pattern.txt"]),
    ("missing schema file", ["generate", "--schema", "no/such/person.json", "hi"], ["no/such/person.json"]),
    ("unknown tokenizer", ["generate", "--regex", "a", "--tokenizer", "gpt5", "hi"], ["unknown tokenizer", "gpt5"]),
    ("unreadable model", ["generate", "--regex", "(yes|no)", "--tokenizer", "smollm2", "--model", "BAD", "hi"],
     ["cannot load model", "broken.gguf"]),
    ("unsupported schema", ["generate", "--schema", "SCHEMA:{\"not\": {\"minLength\": 3}}", "hi"],
     ["UnsupportedSchemaError", "not"]),
    ("schema not JSON", ["generate", "--schema", "SCHEMA:{oops", "hi"], ["not valid JSON"]),
    ("graph: invalid regex", ["graph", "[z-a]"], ["invalid regex"]),
    ("graph: unknown tokenizer", ["graph", "a", "--tokenizer", "gpt5"], ["unknown tokenizer", "gpt5"]),
])
def test_bad_input_is_one_line_naming_the_problem(tmp_path, case, args, names):
    args = [_bad_gguf(tmp_path) if a == "BAD" else _schema_file(tmp_path, a[7:]) if a.startswith("SCHEMA:") else a
            for a in args]
    done = canonmerge(*args)
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("canonmerge: error: "), (case, done.stderr)
    assert "Traceback" not in done.stderr
    for name in names:
        assert name in lines[0], (case, lines[0])


def _token_paths(graph: nx.MultiDiGraph) -> list[tuple[int, ...]]:
    """Every start-to-accepting path's token ids (the graphs here are acyclic)."""
    start = next(n for n, d in graph.nodes(data=True) if d["start"])
    out, stack = [], [(start, ())]
    while stack:
        node, path = stack.pop()
        if graph.nodes[node]["accepting"]:
            out.append(path)
        for _, target, data in graph.out_edges(node, data=True):
            stack.append((target, path + (int(data["token_id"]),)))
    return out


@pytest.mark.parametrize("pattern", [r"(true|false)", r'\{"ok": (true|false), "n": -?[0-9]{1,2}\}'])
def test_graph_paths_are_exactly_the_canonical_tokenizations(tmp_path, pattern):
    out = tmp_path / "tokens.graphml"
    done = canonmerge("graph", pattern, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress line when stderr is not a terminal
    graph = nx.read_graphml(out, force_multigraph=True)
    paths = _token_paths(graph)
    runtime = runtime_of("smollm2")
    strings = [bytes(s).decode("utf-8") for s in from_regex(pattern).strings()]
    expected = {tuple(runtime.encode(s, add_special_tokens=False).ids) for s in strings}
    assert len(paths) == len(strings) == len(expected)  # one path per string: no other tokenization is drawn
    assert set(paths) == expected
    for _, _, data in graph.edges(data=True):
        assert data["text"] == runtime.decode([int(data["token_id"])])
    assert f"{graph.number_of_nodes()} states, {graph.number_of_edges()} token edges, {len(strings)} token sequences" \
        in done.stdout


def test_generate_writes_a_recursive_grammars_text_canonically():
    """llama.cpp's json.gbnf (recursive: a guide over its parser configurations) through the command line and a real
    model: the text parses as JSON, the grammar's recogniser accepts it, and its tokens are the runtime's."""
    grammar = asset_path("grammars/json.gbnf")
    done = canonmerge("generate", "--grammar", str(grammar), "--chat", "--max-tokens", "200", "--print-json",
                      "Describe a cat as a JSON object with a name and a list of two toys.")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    text, ids = report["text"], report["token_ids"]
    assert report["finished"] is True and report["canonical"] is True
    assert isinstance(json.loads(text), dict)
    assert Recognizer(parse_grammar(grammar.read_text(encoding="utf-8"))).accepts(text), text
    assert runtime_of("smollm2").encode(text, add_special_tokens=False).ids == ids
