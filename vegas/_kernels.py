"""Compiling canonmerge's numba kernels once per install, before the command line's first constraint.

canonmerge's hot loops are numba kernels, compiled to machine code on their first call and cached on disk (numba's
``cache=True``: beside the sources, or under ``$NUMBA_CACHE_DIR``). In a fresh install that first compile costs tens
of seconds (about 35 s on 2 cores: DFA minimisation, the vocabulary walks, the product, the mask kernels), and it
used to land inside the first constraint's compile, which then reported 30 s for a schema that compiles in under
one. ``warm_kernels`` runs the kernels once on small constraints of every kind the compiler has (a regex with a
counted repetition, a JSON Schema with an enum, a free key, an array, numbers, written as JSON and as YAML, and
both built lazily) and the runtime's masks and steps along a walk, so that the command line reports that one-time
compile as its own step ("kernels compiled once") and a constraint's time is its own.

A marker file under the canonmerge cache (``kernels/<key>``) records that the kernels were compiled for this
install: its key hashes numba's version, the cache location and the stamp (size, modification time) of every
source file, as numba's own cache index does, so an edited or upgraded install compiles again. A marker that
outlives numba's cache (a cache cleared by hand) costs nothing but the progress line: the kernels then compile on
their first call, as they would without this module.

Leaves out: compiling at install time (a wheel of pure Python has no build step that could run numba, and numba's
cache keys name the installed files' modification times, so caches cannot be shipped), and the kernels only a
batch over several threads calls (``parallel=True``: compiled on their first use).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import product
from bpe.storage import atomic_write, cache_dir
from vegas import compile_schema

__all__ = ["kernels_ready", "warm_kernels"]

_PACKAGES = ("automata", "bpe", "product", "vegas")
_WARM_REGEX = r"[a-z]{1,12}(, [0-9]{1,3})*\."
_WARM_STRING = r'"([^"\\]|\\["\\n])*"\.'  # (its body reads most of the vocabulary: the lazy cycle kernels)
_WARM_SCHEMA = {  # small, but with every kind of fragment: literals, an enum, numbers, strings, an array, free keys
    "type": "object",
    "properties": {
        "kind": {"enum": ["alpha", "beta"]},
        "count": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "extra": {"type": "object", "properties": {"a": {"type": "boolean"}}},
    },
    "required": ["kind"],
    "additionalProperties": False,
}


def _marker() -> Path:
    import numba

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{numba.__version__} {sys.version} {os.environ.get('NUMBA_CACHE_DIR', '')}".encode())
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            stat = path.stat()
            digest.update(f"{path.relative_to(root)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return cache_dir() / "kernels" / digest.hexdigest()[:32]


def kernels_ready() -> bool:
    """Whether this install's kernels were compiled (``warm_kernels`` ran since its sources last changed)."""
    return _marker().exists()


def warm_kernels(canonical) -> None:
    """Compile canonmerge's kernels by running them on small constraints over ``canonical`` (the tokenizer the
    command will use: the kernels do not depend on it, but its automaton is loaded anyway), then leave the marker.
    The constraints are compiled without the fragment library on disk, so nothing of them is kept."""
    import torch  # (deferred: torch takes seconds to import, and only the command line's generate needs it)

    guides = [product.compile_regex(_WARM_REGEX, canonical)]
    guides += [compile_schema(_WARM_SCHEMA, canonical, style=style, library_dir=False)
               for style in ("json", "yaml")]
    # the lazy construction's own kernels (the boundary test, first visits, the forced search, fragments entered, a
    # free string's body shared by its cycle)
    guides += [product.compile_regex(_WARM_REGEX, canonical, lazy=True),
               product.compile_regex(_WARM_STRING, canonical, lazy=True),
               compile_schema(_WARM_SCHEMA, canonical, library_dir=False, lazy=True)]
    for guide in guides:
        bitmask = torch.zeros((1, guide.num_words), dtype=torch.int32)
        logits = torch.zeros((1, canonical.vocab_size))
        state = guide.initial_state
        for _ in range(12):  # a short walk: masks, forced tokens and steps of new states
            guide.fill_bitmask([state], bitmask)
            product.apply_bitmask(logits, bitmask)
            guide.forced_tokens(state)
            allowed = guide.allowed(state).nonzero()[0]
            allowed = allowed[allowed < canonical.vocab_size]
            allowed = [t for t in allowed.tolist() if t not in guide.eos_token_ids]
            if not allowed:
                break
            state = guide.advance(state, allowed[0])
    marker = _marker()
    marker.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(marker, b"kernels compiled\n")
