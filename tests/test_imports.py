"""The project's import graph, read from the source: no cycles, deferred imports say why, private names stay home.

The packages form a pipeline (``vegas -> product -> bpe -> automata``): each imports only those after it, and no
module imports another that (directly or not) imports it back. An import inside a function is allowed where it
defers a heavy or optional dependency (torch, transformers, a tokenizer format's reader); the line, or the one
above it, carries a comment saying so. A ``_private`` name is used only inside the package that defines it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("automata", "bpe", "product", "vegas")  # in pipeline order: each may import only those before it
_LAYER = {name: k for k, name in enumerate(PACKAGES)}


def _modules() -> dict[str, Path]:
    """Every module of the four packages: dotted name -> file (a package is its ``__init__.py``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path):
    """(node, imported module, imported names, at module level) for every project import in the file; ``from
    package import submodule`` counts as an import of the submodule."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            nested.update(id(inner) for inner in ast.walk(node) if inner is not node)
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield node, alias.name, [], id(node) not in nested
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                package = module.split(".")[:len(module.split(".")) - node.level]
                base = ".".join(package + ([node.module] if node.module else []))
            if base.split(".")[0] not in PACKAGES:
                continue
            names = [alias.name for alias in node.names]
            submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in MODULES]
            for target in submodules or [base]:
                yield node, target, names, id(node) not in nested


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for name, path in MODULES.items():
        for _, target, _, _ in _imports(path):
            if target != name:
                graph.add_edge(name, target)
    return graph


def test_every_project_import_names_a_module_that_exists():
    missing = [(name, target) for name, path in MODULES.items() for _, target, _, _ in _imports(path)
               if target not in MODULES]
    assert not missing, f"imports of modules that do not exist: {missing}"


def test_the_import_graph_has_no_cycles():
    graph = _graph()
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


def test_packages_import_only_the_packages_below_them():
    upward = [(a, b) for a, b in _graph().edges if _LAYER[b.split(".")[0]] > _LAYER[a.split(".")[0]]]
    assert not upward, f"imports against the pipeline (vegas -> product -> bpe -> automata): {upward}"


def test_imports_inside_functions_say_why():
    silent = []
    for name, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node, target, _, top_level in _imports(path):
            if not top_level and not any("#" in lines[k] for k in (node.lineno - 1, node.lineno - 2) if k >= 0):
                silent.append(f"{path.relative_to(ROOT)}:{node.lineno} ({target})")
    assert not silent, "project imports inside functions without a comment saying why: " + ", ".join(silent)


def test_private_names_stay_in_their_package():
    leaks = [f"{path.relative_to(ROOT)}:{node.lineno} {target}.{n}"
             for name, path in MODULES.items() for node, target, names, _ in _imports(path)
             for n in names if n.startswith("_") and target.split(".")[0] != name.split(".")[0]]
    assert not leaks, f"private names imported from another package: {leaks}"


def test_the_walk_sees_the_pipeline():
    """The walk reads real imports (a broken walk would pass every check above vacuously): each package is
    there with its modules, and each imports the one below it somewhere."""
    graph = _graph()
    for package in PACKAGES:
        assert package in MODULES and sum(name.split(".")[0] == package for name in MODULES) >= 4
    layers = {(a.split(".")[0], b.split(".")[0]) for a, b in graph.edges}
    assert {("vegas", "product"), ("product", "bpe"), ("bpe", "automata")} <= layers
