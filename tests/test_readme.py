"""The README's and docs/api.md's Python examples, executed as written, so that they cannot rot.

Each ```python block runs in a fresh namespace, in a temporary working directory (examples may write files).
The README's ```bash blocks — the two quick-start commands — are run by ``.ci/fresh-install`` in a new virtual
environment; here we only check that they are the two commands that script runs, and that the README stays short.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "docs/api.md")


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", path.read_text(encoding="utf-8"), flags=re.S | re.M)


EXAMPLES = [(f"{name}[{i}]", code) for name in DOCUMENTS for i, code in enumerate(blocks(ROOT / name, "python"))]


@pytest.mark.parametrize("code", [code for _, code in EXAMPLES], ids=[name for name, _ in EXAMPLES])
def test_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})


def test_every_document_has_examples():
    for name in DOCUMENTS:
        assert blocks(ROOT / name, "python"), f"{name} has no ```python block"


def test_readme_is_short_and_its_shell_blocks_are_the_quick_start():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    commands = blocks(ROOT / "README.md", "bash")
    assert len(commands) == 2 and all(c.count("\n") == 1 for c in commands), commands
    assert "canonmerge generate" in commands[0] and "pytest" in commands[1]
    assert "SAMPLE_OUTPUT" not in readme
    fences = re.findall(r"^```(\w*)$", readme, flags=re.M)
    assert set(fences) <= {"python", "bash", "text", ""}, fences  # text blocks show output; nothing else hides code
