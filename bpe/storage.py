"""Where canonmerge keeps files, how it hashes them, and how it writes them so a reader never sees half of one.

``cache_dir()`` is the root of everything cached (``$CANONMERGE_CACHE_DIR``, default ``~/.cache/canonmerge``):
``archives/`` and ``assets/`` (``bpe.assets``), ``automata/`` (``bpe.automaton``), ``models/`` (``bpe.lm_cache``),
``fragments/`` (``product.library``), ``tiktoken/`` (``bpe.assets.native_runtime``).

Every write goes to a temporary name in the destination's directory and is renamed into place (``os.replace``
for a file, ``os.rename`` for a folder), so an interrupted write leaves at most a ``*.part`` name behind, never a
truncated file under the final name. ``sha256_file`` reads in 1 MiB blocks.

Leaves out: locking (two processes writing the same name both finish; the last rename wins, and writers here
always write the same content for the same name), fsync (a crash of the machine, not the process, may lose a
write; every reader checks a SHA-256 and rebuilds what fails it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_directory", "atomic_file", "atomic_write", "cache_dir", "sha256_bytes", "sha256_file"]


def cache_dir() -> Path:
    """The root of everything canonmerge caches: ``$CANONMERGE_CACHE_DIR`` or ``~/.cache/canonmerge``."""
    root = os.environ.get("CANONMERGE_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "canonmerge"


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through: a temporary file beside it, renamed over ``path`` when the block
    ends without an exception and deleted when it raises (``path`` then keeps what it held). Creates the
    parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or an iterable of byte chunks such as a download) to ``path`` atomically."""
    with atomic_file(path) as f:
        if isinstance(data, (bytes, bytearray, memoryview)):
            f.write(data)
        else:
            for chunk in data:
                f.write(chunk)


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary folder beside ``path`` to fill; when the block ends without an exception it is renamed to
    ``path``. If ``path`` exists by then (another process finished first) that folder is kept and this one
    deleted; a block that raises leaves nothing behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part"))
    try:
        yield tmp
        try:
            os.rename(tmp, path)
        except OSError:  # (another process finished first: its folder is kept)
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
