"""``vegas._kernels``: the command line compiles numba's kernels once per install, as its own step, so that the
first constraint of a fresh install costs what a later one does."""

from __future__ import annotations

import os
import re

from bpe.storage import cache_dir
from tests.support import automaton_of
from tests.vegas.test_cli import ROOT, canonmerge
from vegas import _kernels


def _cache_linked_to_the_real_one(tmp_path):
    """A new, empty canonmerge cache whose assets and tokenizer automata are the real cache's (no download)."""
    real = cache_dir()
    for name in ("archives", "assets", "automata", "models", "tiktoken"):
        if (real / name).exists():
            (tmp_path / name).symlink_to(real / name)
    return tmp_path


def test_warming_the_kernels_leaves_a_marker_that_editing_a_source_invalidates(tmp_path, monkeypatch):
    monkeypatch.setenv("CANONMERGE_CACHE_DIR", str(tmp_path))
    assert not _kernels.kernels_ready()
    _kernels.warm_kernels(automaton_of("gpt2"))
    assert _kernels.kernels_ready()
    marker = _kernels._marker()
    assert marker.parent == tmp_path / "kernels" and marker.exists()
    source = ROOT / "vegas" / "_kernels.py"
    stat = source.stat()
    try:  # a source file with a new modification time (an edit, an upgrade): numba compiles again, so do we
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert not _kernels.kernels_ready()
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _kernels.kernels_ready()


def test_the_command_line_compiles_the_kernels_once_and_says_so(tmp_path):
    env = {"CANONMERGE_CACHE_DIR": str(_cache_linked_to_the_real_one(tmp_path))}
    schema = str(ROOT / "vegas" / "examples" / "person.json")
    first = canonmerge("compile-schema", schema, "--tokenizer", "gpt2", env=env)
    second = canonmerge("compile-schema", schema, "--tokenizer", "gpt2", env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert re.search(r"kernels\s+compiled in [\d.]+ s, once for this install", first.stdout), first.stdout
    assert "kernels" not in second.stdout, second.stdout
