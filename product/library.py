"""The on-disk fragment library: compiled fragments (``product.stitched``) kept between processes.

One file per fragment, ``<directory>/<automaton digest>/<key digest>.npz``: the fragment guide's arrays
(``Guide._to_arrays``, or ``CountedGuide._to_arrays`` for a fragment with a counted repetition: the header says
which), its exits, and a JSON header with the key written out and a SHA-256 over the key and
every array. A file is written to a temporary name and renamed (a reader never sees half a file), read with
``allow_pickle=False``, and trusted only if its header names the same key and the digest matches; anything
else (truncated, edited, another format version, a hash collision of keys) counts as ``rejected`` and the
fragment is compiled again and the file rewritten. The automaton digest is the SHA-256 of the canonical
automaton's arrays, so a library never serves fragments of another tokenizer.

Leaves out: eviction (the directory grows with the fragments compiled; ``size_bytes`` reports it, and deleting
the directory is always safe).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from bpe.automaton import CanonicalAutomaton
from bpe.storage import cache_dir
from product.compiler.tables import per_automaton
from product.counted import CountedGuide
from product.runtime.guide import Guide
from product.stitched import Fragment

__all__ = ["FragmentStore", "default_library_dir"]

FORMAT_VERSION = 2  # 2: compact token transitions (TokenTransitions.compact)


def default_library_dir() -> Path:
    """``<canonmerge cache>/fragments`` (the cache is ``~/.cache/canonmerge`` or ``CANONMERGE_CACHE_DIR``)."""
    return _library_dir(os.environ.get("CANONMERGE_CACHE_DIR"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _library_dir(cache_root: str | None, home: str | None) -> Path:
    """(Per environment: building the path costs ~80 µs here, 3 % of a warm schema compile.)"""
    return cache_dir() / "fragments"


def _automaton_digest(canonical: CanonicalAutomaton) -> str:
    return per_automaton(canonical, "digest", lambda: canonical.digest("fragments"))


class FragmentStore:
    """Fragments on disk under ``directory``; counts ``loaded``, ``saved`` and ``rejected`` files."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.loaded = self.saved = self.rejected = 0

    @staticmethod
    def _key_text(regex: str, entry_context: int, dead_exits: frozenset, canonical_only: bool,
                  eos: tuple[int, ...]) -> str:
        return json.dumps({"format": FORMAT_VERSION, "regex": regex, "entry_context": entry_context,
                           "dead_exits": sorted([list(e), c] for e, c in dead_exits),
                           "canonical_only": canonical_only, "eos": list(eos)}, ensure_ascii=True)

    def _path(self, canonical: CanonicalAutomaton, key_text: str) -> Path:
        name = hashlib.sha256(key_text.encode()).hexdigest()[:32]
        return self.directory / _automaton_digest(canonical)[:32] / f"{name}.npz"

    @staticmethod
    def _digest(key_text: str, arrays: dict[str, np.ndarray]) -> str:
        digest = hashlib.sha256(key_text.encode())
        for name in sorted(arrays):
            a = np.ascontiguousarray(arrays[name])
            digest.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            digest.update(a.data)
        return digest.hexdigest()

    def load(self, canonical: CanonicalAutomaton, regex: str, entry_context: int, dead_exits: frozenset,
             canonical_only: bool, eos: tuple[int, ...]):
        """The stored fragment, or None (absent, or rejected: not trusted, to be compiled again)."""

        key_text = self._key_text(regex, entry_context, dead_exits, canonical_only, eos)
        path = self._path(canonical, key_text)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(str(data["header"]))
                arrays = {name: data[name] for name in data.files if name != "header"}
            if header.get("key") != key_text or header.get("sha256") != self._digest(key_text, arrays):
                raise ValueError("key or checksum mismatch")
            exit_sets = [tuple(e) for e in header["exit_sets"]]
            exit_of_node = arrays.pop("exit_of_node")
            kind = {"plain": Guide, "counted": CountedGuide}[header.get("guide", "plain")]
            guide = kind._from_arrays(arrays, canonical, name="fragment")
            if len(exit_of_node) != guide.num_nodes or exit_of_node.max(initial=-1) >= len(exit_sets):
                raise ValueError("exits do not fit the guide")
        except Exception:  # unreadable, edited, truncated: never trusted, rebuilt by the caller
            self.rejected += 1
            return None
        self.loaded += 1
        return Fragment(regex, entry_context, guide, exit_of_node, exit_sets, 0.0)

    def save(self, canonical: CanonicalAutomaton, fragment, *, dead_exits: frozenset, canonical_only: bool,
             eos: tuple[int, ...]) -> None:
        """Write ``fragment`` atomically (a temporary file renamed over the final name)."""
        key_text = self._key_text(fragment.regex, fragment.entry_context, dead_exits, canonical_only, eos)
        path = self._path(canonical, key_text)
        arrays = fragment.guide._to_arrays()
        arrays["exit_of_node"] = np.asarray(fragment.exit_of_node, dtype=np.int64)
        header = json.dumps({"key": key_text, "sha256": self._digest(key_text, arrays),
                             "exit_sets": [list(e) for e in fragment.exit_sets],
                             "guide": "counted" if isinstance(fragment.guide, CountedGuide) else "plain"})
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, header=np.array(header), **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.saved += 1

    def size_bytes(self) -> int:
        """Bytes of all stored fragments (every tokenizer)."""
        return sum(p.stat().st_size for p in self.directory.rglob("*.npz")) if self.directory.exists() else 0

    def count(self) -> int:
        return sum(1 for _ in self.directory.rglob("*.npz")) if self.directory.exists() else 0
