"""The on-disk fragment library: compiled fragments (``product.stitched``) kept between processes, under a size cap.

One file per fragment, ``<directory>/<automaton digest>/<key digest>.npz`` (compressed): the fragment guide's arrays
(``Guide._to_arrays``, or ``CountedGuide._to_arrays`` for a fragment with a counted repetition: the header says
which), its exits, and a JSON header with the key written out and a SHA-256 over the key, the exits and every
array. Row pieces of 1 KiB or more (packed token sets, long token lists) are stored once per tokenizer, by content,
in ``<automaton digest>/rows/<SHA-256>.z`` (zlib), and named in the fragment's header: fragments of one schema and
of different schemas repeat the same free-text rows (the 50 bench schemas on Llama-3: 1.8 GB of rows in their
fragments, 50 MB distinct). A new row that another row of its fragment stored whole nearly equals is stored as
the XOR with it (``<SHA-256>.x``: the base's name, then the compressed XOR). Files are written to a temporary name and renamed (a reader never sees half a file),
read with ``allow_pickle=False``, and trusted only if the header names the same key, the digest matches and every
shared row's content matches its name; anything else (truncated, edited, a row gone, another format version, a
hash collision of keys) counts as ``rejected``, and the fragment is compiled again and its files rewritten. The
automaton digest is the SHA-256 of the canonical automaton's arrays, so a library never serves fragments of
another tokenizer.

A compile that finds no fragment to keep finds something worth keeping all the same: that the regex's text goes
on past some of its cut exits (*soft* exits: the stitching writes the fragment again without those cuts), or that no
text of the fragment is live from its entry context. Finding either costs a character DFA and sometimes a whole
guide (seconds for a YAML fragment: 19 s a schema to find them again in a new process), so each is kept as a small
JSON file beside the fragments (``<key digest>.outcome.json``: the key written out and the outcome), written
atomically, trusted only if it names the same key, and capped and evicted with the rest.

What is kept, and when: a fragment whose compile took less than ``min_compile_seconds`` (default
``MIN_COMPILE_SECONDS``) is not written (a literal key compiles in ~2 ms, about what reading its file back costs);
the others are written *behind* the compile, by one writer thread per process (``keep``), so a compile returns
before its fragments are compressed and written. A fragment waiting for the writer is served from memory to a
``load`` of the same key; ``flush`` waits for the writer; the writer's queue is drained before the interpreter
exits. A write that fails (disk full, permissions) leaves no file, costs no compile, and is counted
(``write_errors``, the last one in ``last_write_error``).

The cap (``max_bytes``, default ``DEFAULT_MAX_BYTES``) bounds the directory, every tokenizer's files together
(older formats' files too, until evicted). A file's mtime is its last use: set when written, and on a load, for
the fragment and the rows it read (``os.utime``, no rewrite). When a save takes the total past the cap, the
least recently used files go first (a fragment before rows used at the same time) down to 3/4 of the cap. The
total is listed once per process and directory and then counted on as this process writes, listed again
whenever that count passes 1/16 of the cap (other processes' writes are seen then). Several processes may share
a directory: a file unlinked while another reads it stays readable to that reader (POSIX), and a reader that
finds a file gone compiles the fragment again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
import time
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numba import njit

from bpe.automaton import CanonicalAutomaton
from bpe.storage import cache_dir
from product.compiler.tables import per_automaton
from product.counted import CountedGuide
from product.runtime.guide import Guide
from product.stitched import Fragment

__all__ = ["FragmentStore", "default_library_dir", "DEFAULT_MAX_BYTES", "MIN_COMPILE_SECONDS"]

# 3: compressed; long row pieces stored once per tokenizer (``rows/``); the header as UTF-8 bytes, covered by the
# checksum with the exits
FORMAT_VERSION = 3
# The cap's default. The 50 bench schemas (25 Glaiveai2K + 25 Github_easy, JSON and YAML) take 75 MB on Llama-3
# (docs/schemas.md): 256 MB keeps a few such working sets, of any tokenizer, at a size nobody needs to clean by hand.
DEFAULT_MAX_BYTES = 256 << 20
# Fragments compiled faster than this are not written: reading one back costs about as much (a literal key: ~2 ms
# either way on Llama-3), and they were most of the files.
MIN_COMPILE_SECONDS = 0.005
_DELTA_SUFFIX = ".x"  # a shared row stored as its XOR with another (``_row_file``)
SHARED_MIN_BYTES = 1024  # pieces at least this long (a packed row is 6 kB at 50k tokens) go to ``rows/``, once each
# (data, bounds) pairs whose pieces are stored by content: the guide's rows, its transitions' tokens per state, its
# pending rows (the counted guide's budget layers too, ``layers_``); and the rows of transitions_common_words
_SEGMENTED = [(prefix + data, prefix + bounds) for prefix in ("", "layers_") for data, bounds in (
    ("row_data", "row_bounds"), ("transitions_tokens", "transitions_offsets"),
    ("pending_row_tokens", "pending_row_bounds"))]
_WORD_TABLES = ("transitions_common_words", "layers_transitions_common_words")
_OUTCOME_SUFFIX = ".outcome.json"  # what a compile found instead of a fragment (``keep_outcome``)
_STALE_PART_SECONDS = 3600  # a temporary file this old is a crashed writer's: evicted like any other


def default_library_dir() -> Path:
    """``<canonmerge cache>/fragments`` (the cache is ``~/.cache/canonmerge`` or ``CANONMERGE_CACHE_DIR``)."""
    return _library_dir(os.environ.get("CANONMERGE_CACHE_DIR"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _library_dir(cache_root: str | None, home: str | None) -> Path:
    """(Per environment: building the path costs ~80 µs here, 3 % of a warm schema compile.)"""
    return cache_dir() / "fragments"


_WRITER: ThreadPoolExecutor | None = None
_WRITER_LOCK = threading.Lock()


def _writer() -> ThreadPoolExecutor:
    """The process's one library writer thread (``concurrent.futures`` drains its queue at interpreter exit)."""
    global _WRITER
    with _WRITER_LOCK:
        if _WRITER is None:
            _WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="canonmerge-library")
        return _WRITER


def _automaton_digest(canonical: CanonicalAutomaton) -> str:
    return per_automaton(canonical, "digest", lambda: canonical.digest("fragments"))


def _write_atomic(path: Path, write) -> None:
    """``write(file)`` to a temporary file beside ``path``, renamed over it (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _RowCache:
    """Shared rows read in this process (their bytes, verified), the least recently used dropped past
    ``max_bytes``: a schema's fragments read the same rows (GPT-2: 45 row reads per fragment loaded, a quarter
    distinct)."""

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self.max_bytes, self._bytes = max_bytes, 0
        self._rows: "OrderedDict[Path, bytes]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path) -> bytes | None:
        with self._lock:
            piece = self._rows.get(path)
            if piece is not None:
                self._rows.move_to_end(path)
            return piece

    def put(self, path: Path, piece: bytes) -> None:
        with self._lock:
            if path not in self._rows:
                self._rows[path] = piece
                self._bytes += len(piece)
            while self._bytes > self.max_bytes:
                self._bytes -= len(self._rows.popitem(last=False)[1])


_ROW_CACHE = _RowCache()


def _touch(path: Path) -> None:
    """Mark ``path`` used now (its mtime is its last use: the eviction order). Gone or read-only: nothing."""
    try:
        os.utime(path)
    except OSError:
        pass


class _Usage:
    """Bytes in one library directory, shared by the stores of this process: listed once, then counted on
    (``added``: bytes this process wrote since it listed; other processes' writes are seen at the next listing,
    taken whenever ``added`` passes 1/16 of the cap, so several writers overshoot the cap by that much each)."""

    _of: "dict[Path, _Usage]" = {}
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.total: int | None = None
        self.added = 0
        self.listings = 0  # (for tests and measurements)

    @classmethod
    def of(cls, directory: Path) -> "_Usage":
        with cls._lock:
            return cls._of.setdefault(directory.absolute(), cls())


def _library_files(directory: Path) -> list[tuple[int, bool, int, Path]]:
    """(last use in ns, is a shared row, bytes, path) of every file of the library: fragments, shared rows and
    temporary files (a stale one, a crashed writer's, sorts as used long ago)."""
    out = []
    stale = time.time_ns() - _STALE_PART_SECONDS * 10**9
    try:
        tokenizers = [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return out
    for tokenizer in tokenizers:
        for folder, is_row in ((tokenizer.path, False), (os.path.join(tokenizer.path, "rows"), True)):
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for e in entries:
                if not e.is_file(follow_symlinks=False):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if e.name.endswith(".part"):
                    if st.st_mtime_ns > stale:
                        continue  # a writer's, being written
                    out.append((0, is_row, st.st_size, Path(e.path)))
                elif e.name.endswith((".npz", _OUTCOME_SUFFIX) if not is_row else (".z", _DELTA_SUFFIX)):
                    out.append((st.st_mtime_ns, is_row, st.st_size, Path(e.path)))
    return out


def _row_file(piece: bytes, whole: dict[str, bytes]) -> tuple[str | None, bytes]:
    """How a new shared row is written: (None, its bytes compressed) — a whole row — or (a base's name, the
    compressed XOR with that base) where that is under half as long. The base is the row of ``whole`` (rows of the
    same fragment stored whole) nearest in Hamming distance: a fragment's packed rows are mostly one another with
    a few tokens changed (on Llama-3, half of the 50 bench schemas' 16 kB rows are within 3 bits of another)."""
    compressed = zlib.compress(piece, 6)
    bases = [(name, other) for name, other in whole.items() if len(other) == len(piece)]
    if not bases:
        return None, compressed
    mine = np.frombuffer(piece, dtype=np.uint8)
    table = np.frombuffer(b"".join(other for _, other in bases), dtype=np.uint8).reshape(len(bases), -1)
    nearest = int(np.bitwise_count(table ^ mine).sum(axis=1).argmin())
    delta = zlib.compress((table[nearest] ^ mine).tobytes(), 6)
    if len(delta) + 40 >= len(compressed) // 2:
        return None, compressed
    return bases[nearest][0], delta


def _read_row(rows_dir: Path, digest: str, used: list[Path], whole_only: bool = False) -> bytes:
    """A shared row's bytes, verified against its name: ``<digest>.z`` (whole), or ``<digest>.x`` (a base's name,
    then the compressed XOR with that base, which is whole). Read files are listed in ``used``; one that does not
    verify, or a delta whose base is gone, is removed (so that the fragment's next save writes it again; rows are
    written atomically, so such a file is never a writer's) and the error raised."""
    if len(digest) != 40 or not all(c in "0123456789abcdef" for c in digest):
        raise ValueError("not a row name")
    row_path = rows_dir / f"{digest}.z"
    piece = _ROW_CACHE.get(row_path)
    if piece is not None:  # (marked used: the file it was read from, whole or delta; not a delta's base)
        used += [row_path, rows_dir / f"{digest}{_DELTA_SUFFIX}"]
        return piece
    if row_path.exists() or whole_only:
        used.append(row_path)
        read_path = row_path
        compressed = row_path.read_bytes()
    else:
        read_path = rows_dir / f"{digest}{_DELTA_SUFFIX}"
        used.append(read_path)
        compressed = read_path.read_bytes()
    try:
        if read_path is row_path:
            piece = zlib.decompress(compressed)
        else:
            base = _read_row(rows_dir, compressed[:40].decode("ascii"), used, whole_only=True)
            xor = np.frombuffer(zlib.decompress(compressed[40:]), dtype=np.uint8)
            if len(xor) != len(base):
                raise ValueError("row delta of another length than its base")
            piece = (np.frombuffer(base, dtype=np.uint8) ^ xor).tobytes()
        if hashlib.sha256(piece).hexdigest()[:40] != digest:
            raise ValueError("row checksum mismatch")
    except Exception:
        read_path.unlink(missing_ok=True)
        raise
    _ROW_CACHE.put(row_path, piece)
    return piece


def _encode(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, list[str]], dict[str, bytes]]:
    """``arrays`` as stored: each segmented array's pieces (``_SEGMENTED``; the rows of a word table) either
    shared — by their SHA-256, the bytes in ``rows`` — or kept in the file once each (``<name>__inline``), with per
    piece its inline index (>= 0) or -1 - its index in ``shared[name]``."""
    stored, shared, rows = dict(arrays), {}, {}
    for data_name, bounds_name in [*_SEGMENTED, *((t, None) for t in _WORD_TABLES)]:
        if data_name not in arrays:
            continue
        data = np.ascontiguousarray(arrays[data_name])
        if bounds_name is None:
            bounds = np.arange(len(data) + 1) * (data.shape[1] if data.ndim == 2 else 0)
            flat = data.reshape(-1)
        else:
            bounds, flat = arrays[bounds_name], data
        raw = flat.view(np.uint8)
        width = flat.itemsize
        index = np.empty(len(bounds) - 1, dtype=np.int32)
        inline: dict[bytes, int] = {}
        names: dict[str, int] = {}
        for i, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            piece = raw[lo * width:hi * width].tobytes()
            if len(piece) >= SHARED_MIN_BYTES:
                digest = hashlib.sha256(piece).hexdigest()[:40]
                rows[digest] = piece
                index[i] = -1 - names.setdefault(digest, len(names))
            else:
                index[i] = inline.setdefault(piece, len(inline))
        del stored[data_name]
        stored[data_name + "__inline"] = np.frombuffer(b"".join(inline), dtype=flat.dtype)
        stored[data_name + "__index"] = index
        shared[data_name] = list(names)
    return stored, shared, rows


def _decode(stored: dict[str, np.ndarray], shared: dict[str, list[str]], shapes: dict[str, list[int]],
            dtypes: dict[str, str], read_row) -> dict[str, np.ndarray]:
    """The arrays ``_encode`` stored (``read_row(digest)``: a shared piece's bytes). ``ValueError`` where the
    pieces do not fit."""
    arrays = dict(stored)
    for data_name, bounds_name in [*_SEGMENTED, *((t, None) for t in _WORD_TABLES)]:
        if data_name + "__index" not in stored:
            continue
        dtype, shape = np.dtype(dtypes[data_name]), tuple(shapes[data_name])
        inline, index = arrays.pop(data_name + "__inline"), arrays.pop(data_name + "__index").astype(np.int64)
        if bounds_name is None:
            width = shape[1] if len(shape) == 2 else 0
            bounds = np.arange(shape[0] + 1, dtype=np.int64) * width
        else:
            bounds = stored[bounds_name].astype(np.int64)
        lengths = np.diff(bounds)
        if len(index) != len(lengths) or inline.dtype != dtype:
            raise ValueError(f"{data_name}: pieces do not fit")
        pool = [np.frombuffer(read_row(digest), dtype=dtype) for digest in shared[data_name]]
        # every source piece one after another (the inline ones, then the shared), and where each starts
        first = {}
        for i, k in enumerate(index.tolist()):
            first.setdefault(k, i)
        inline_keys = sorted(k for k in first if k >= 0)
        if inline_keys != list(range(len(inline_keys))):
            raise ValueError(f"{data_name}: inline pieces out of order")
        inline_lengths = np.array([lengths[first[k]] for k in inline_keys], dtype=np.int64)
        if inline_lengths.sum() != len(inline) or len(first) - len(inline_keys) > len(pool):
            raise ValueError(f"{data_name}: inline pieces do not fit")
        source = np.concatenate([inline, *pool]) if pool else inline
        starts = np.concatenate([[0], np.cumsum(inline_lengths)]).astype(np.int64)[:-1]
        pool_starts = len(inline) + np.concatenate([[0], np.cumsum([len(p) for p in pool])]).astype(np.int64)
        piece_start = np.where(index >= 0, starts[np.maximum(index, 0)] if len(starts) else 0,
                               pool_starts[np.maximum(-1 - index, 0)])
        piece_length = np.where(index >= 0, inline_lengths[np.maximum(index, 0)] if len(starts) else 0,
                                np.diff(pool_starts)[np.maximum(-1 - index, 0)] if pool else 0)
        if not np.array_equal(piece_length, lengths):
            raise ValueError(f"{data_name}: piece lengths do not fit")
        out = np.empty(int(lengths.sum()), dtype=dtype)
        _copy_pieces(source, piece_start, bounds, out)
        arrays[data_name] = out.reshape(shape)
    return arrays


@njit(cache=True, nogil=True)
def _copy_pieces(source, piece_start, bounds, out):
    """``out[bounds[i]:bounds[i + 1]] = source[piece_start[i]:...]`` for every piece: one pass, no index array (a
    large fragment's tables are tens of millions of entries, and gathering them through an index built by
    ``np.repeat`` took 2 s of a 2.7 s load)."""
    for i in range(len(piece_start)):
        at = piece_start[i]
        for j in range(bounds[i], bounds[i + 1]):
            out[j] = source[at + j - bounds[i]]


class FragmentStore:
    """Fragments on disk under ``directory``, at most ``max_bytes`` of files (None: no cap), the least recently
    used evicted first; fragments compiled in less than ``min_compile_seconds`` not kept; ``write_behind``: written
    by the process's writer thread (False: by ``keep`` itself). Counts ``loaded``, ``saved``, ``rejected``,
    ``evicted`` files, ``write_errors`` and ``outcomes_loaded`` (soft exits or empty fragments read back)."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int | None = DEFAULT_MAX_BYTES, *,
                 min_compile_seconds: float = MIN_COMPILE_SECONDS, write_behind: bool = True):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.min_compile_seconds, self.write_behind = min_compile_seconds, write_behind
        self.loaded = self.saved = self.rejected = self.evicted = self.write_errors = self.outcomes_loaded = 0
        self.last_write_error: BaseException | None = None
        self._usage = _Usage.of(self.directory)
        self._pending: dict[Path, Fragment] = {}  # handed to the writer, not yet written
        self._written = threading.Condition()  # notified as the writer finishes each

    def keep(self, canonical: CanonicalAutomaton, fragment, *, dead_exits: frozenset, canonical_only: bool,
             eos: tuple[int, ...]) -> None:
        """Store ``fragment`` (just compiled, under the key ``load`` reads) if its compile took at least
        ``min_compile_seconds``: behind the caller, on the writer thread, where ``write_behind``."""
        if fragment.seconds < self.min_compile_seconds:
            return
        options = dict(dead_exits=dead_exits, canonical_only=canonical_only, eos=eos)
        if not self.write_behind:
            self.save(canonical, fragment, **options)
            return
        path = self._path(canonical, self._key_text(fragment.regex, fragment.entry_context, dead_exits,
                                                    canonical_only, eos))
        with self._written:
            if path in self._pending:
                return
            self._pending[path] = fragment
        _writer().submit(self._write_pending, path, canonical, fragment, options)

    def _write_pending(self, path: Path, canonical: CanonicalAutomaton, fragment, options: dict) -> None:
        try:
            self.save(canonical, fragment, **options)
        except Exception as exc:  # (a cache that cannot be written costs the next process a compile, no more)
            self.write_errors += 1
            self.last_write_error = exc
        finally:
            with self._written:
                del self._pending[path]
                self._written.notify_all()

    def flush(self) -> None:
        """Wait until every fragment handed to the process's writer (by this store or any other) is written (or
        failed: ``write_errors``): the library's files are then complete, to copy or list."""
        writer = _WRITER
        if writer is not None and not threading.current_thread().name.startswith("canonmerge-library"):
            writer.submit(lambda: None).result()  # (one thread, in order: everything queued before is done)
        with self._written:
            self._written.wait_for(lambda: not self._pending)

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
    def _digest(key_text: str, meta_text: str, arrays: dict[str, np.ndarray]) -> str:
        digest = hashlib.sha256(key_text.encode())
        digest.update(meta_text.encode())
        for name in sorted(arrays):
            a = np.ascontiguousarray(arrays[name])
            digest.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            digest.update(a.data)
        return digest.hexdigest()

    def load(self, canonical: CanonicalAutomaton, regex: str, entry_context: int, dead_exits: frozenset,
             canonical_only: bool, eos: tuple[int, ...]):
        """The stored fragment, or None (absent, or rejected: not trusted, to be compiled again). A fragment
        loaded, and the shared rows it reads, are marked used now."""

        key_text = self._key_text(regex, entry_context, dead_exits, canonical_only, eos)
        path = self._path(canonical, key_text)
        with self._written:
            pending = self._pending.get(path)
        if pending is not None:  # (still with the writer: the fragment itself)
            self.loaded += 1
            return Fragment(regex, entry_context, pending.guide, pending.exit_of_node, pending.exit_sets, 0.0)
        rows_dir = path.parent / "rows"
        used: list[Path] = []

        def read_row(digest: str) -> bytes:
            return _read_row(rows_dir, digest, used)

        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(data["header"].tobytes().decode())
                stored = {name: data[name] for name in data.files if name != "header"}
        except FileNotFoundError:
            return None
        except Exception:  # unreadable, truncated: never trusted, rebuilt by the caller
            self.rejected += 1
            return None
        try:
            meta_text = json.dumps(header["meta"], sort_keys=True)
            if header.get("key") != key_text or header.get("sha256") != self._digest(key_text, meta_text, stored):
                raise ValueError("key or checksum mismatch")
            meta = header["meta"]
            arrays = _decode(stored, meta["shared"], meta["shapes"], meta["dtypes"], read_row)
            exit_sets = [tuple(e) for e in meta["exit_sets"]]
            exit_of_node = arrays.pop("exit_of_node")
            kind = {"plain": Guide, "counted": CountedGuide}[meta["guide"]]
            guide = kind._from_arrays(arrays, canonical, name="fragment")
            if len(exit_of_node) != guide.num_nodes or exit_of_node.max(initial=-1) >= len(exit_sets):
                raise ValueError("exits do not fit the guide")
        except Exception:  # edited, a shared row gone or edited, another format: never trusted, rebuilt
            self.rejected += 1
            return None
        for used_path in (path, *dict.fromkeys(used)):
            _touch(used_path)
        self.loaded += 1
        return Fragment(regex, entry_context, guide, exit_of_node, exit_sets, 0.0)

    def _outcome_path(self, canonical: CanonicalAutomaton, key_text: str) -> Path:
        name = hashlib.sha256(key_text.encode()).hexdigest()[:32]
        return self.directory / _automaton_digest(canonical)[:32] / f"{name}{_OUTCOME_SUFFIX}"

    @staticmethod
    def _outcome_key(kind: str, regex: str, key: tuple) -> str:
        """Soft exits belong to the regex alone; an empty fragment to the whole key (entry context and all)."""
        if kind == "soft":
            return json.dumps({"format": FORMAT_VERSION, "outcome": "soft", "regex": regex}, ensure_ascii=True)
        return json.dumps({"outcome": "empty", "key": FragmentStore._key_text(regex, *key)}, ensure_ascii=True)

    def keep_outcome(self, canonical: CanonicalAutomaton, kind: str, regex: str, key: tuple,
                     exits: tuple[int, ...] = ()) -> None:
        """Keep what compiling ``regex`` under ``key`` (entry context, dead exits, canonical_only, EOS) found
        instead of a fragment: ``kind`` "soft" (its text goes on past the cut ``exits``) or "empty" (no live text).
        Written at once (a few hundred bytes); a failed write is counted like a fragment's."""
        key_text = self._outcome_key(kind, regex, key)
        body = json.dumps({"key": key_text, "exits": sorted(int(k) for k in exits)}).encode()
        try:
            _write_atomic(self._outcome_path(canonical, key_text), lambda f: f.write(body))
        except OSError as exc:
            self.write_errors += 1
            self.last_write_error = exc
            return
        self._count(len(body))

    def load_outcome(self, canonical: CanonicalAutomaton, regex: str, key: tuple) -> tuple[str, tuple[int, ...]] | None:
        """("soft", exits) or ("empty", ()) if an earlier compile of ``regex`` (under ``key``) found it so, else
        None. A file that does not parse or names another key is not trusted (removed; the compile finds out
        again)."""
        for kind in ("soft", "empty"):
            key_text = self._outcome_key(kind, regex, key)
            path = self._outcome_path(canonical, key_text)
            try:
                record = json.loads(path.read_bytes())
                if record["key"] != key_text or not all(isinstance(k, int) and k >= 1 for k in record["exits"]):
                    raise ValueError("another key")
            except (FileNotFoundError, NotADirectoryError):
                continue
            except Exception:
                path.unlink(missing_ok=True)
                self.rejected += 1
                continue
            _touch(path)
            self.outcomes_loaded += 1
            return kind, tuple(record["exits"])
        return None

    def save(self, canonical: CanonicalAutomaton, fragment, *, dead_exits: frozenset, canonical_only: bool,
             eos: tuple[int, ...]) -> None:
        """Write ``fragment`` now, atomically (a temporary file renamed over the final name), its long row pieces
        beside it once each (those already there marked used), then evict past the cap. (``keep`` decides whether
        a fragment is worth it and writes it behind the compile.)"""
        key_text = self._key_text(fragment.regex, fragment.entry_context, dead_exits, canonical_only, eos)
        path = self._path(canonical, key_text)
        arrays = fragment.guide._to_arrays()
        arrays["exit_of_node"] = np.asarray(fragment.exit_of_node, dtype=np.int64)
        stored, shared, rows = _encode(arrays)
        meta = {"exit_sets": [list(e) for e in fragment.exit_sets],
                "guide": "counted" if isinstance(fragment.guide, CountedGuide) else "plain", "shared": shared,
                "shapes": {name: list(arrays[name].shape) for name in shared},
                "dtypes": {name: arrays[name].dtype.str for name in shared}}
        meta_text = json.dumps(meta, sort_keys=True)
        header = json.dumps({"key": key_text, "meta": meta, "sha256": self._digest(key_text, meta_text, stored)})
        written = 0
        rows_dir = path.parent / "rows"
        whole: dict[str, bytes] = {}  # this fragment's rows stored whole: the bases its new rows may be told from
        for digest, piece in rows.items():
            row_path, delta_path = rows_dir / f"{digest}.z", rows_dir / f"{digest}{_DELTA_SUFFIX}"
            if row_path.exists():
                _touch(row_path)
                whole[digest] = piece
                continue
            if delta_path.exists():
                _touch(delta_path)
                continue
            base, data = _row_file(piece, whole)
            if base is None:
                _write_atomic(row_path, lambda f, data=data: f.write(data))
                whole[digest] = piece
            else:
                data = base.encode() + data
                _write_atomic(delta_path, lambda f, data=data: f.write(data))
            written += len(data)
        _write_atomic(path, lambda f: np.savez_compressed(
            f, header=np.frombuffer(header.encode(), dtype=np.uint8), **stored))
        written += path.stat().st_size
        self.saved += 1
        self._count(written)

    # ---- the cap --------------------------------------------------------------------------------------------
    def _count(self, written: int) -> None:
        """Count ``written`` bytes; list the directory and evict where the cap may be passed."""
        if self.max_bytes is None:
            return
        usage = self._usage
        with _Usage._lock:
            if usage.total is not None:
                usage.total += written
                usage.added += written
                if usage.total <= self.max_bytes and usage.added <= self.max_bytes // 16:
                    return
        self._evict()

    def evict(self, max_bytes: int | None = None) -> int:
        """List the directory and, past ``max_bytes`` (default: the cap), delete the least recently used files
        (a fragment before the shared rows used at the same time) down to 3/4 of it. Returns the bytes left.
        Safe beside readers: a file open stays readable (POSIX), and a reader that finds a file gone compiles
        the fragment again."""
        self.flush()
        return self._evict(max_bytes)

    def _evict(self, max_bytes: int | None = None) -> int:
        """``evict`` without waiting for the writer (the writer itself evicts after its saves)."""
        cap = self.max_bytes if max_bytes is None else max_bytes
        files = _library_files(self.directory)
        total = sum(size for _, _, size, _ in files)
        if cap is not None and total > cap:
            for _, _, size, path in sorted(files, key=lambda f: (f[0], f[1])):
                if total <= cap * 3 // 4:
                    break
                try:
                    path.unlink()
                except FileNotFoundError:  # another process evicted it first
                    pass
                else:
                    self.evicted += 1
                total -= size
        with _Usage._lock:
            self._usage.total, self._usage.added = total, 0
            self._usage.listings += 1
        return total

    def size_bytes(self) -> int:
        """Bytes of all stored files: fragments and shared rows (every tokenizer), once the writer is done."""
        self.flush()
        return sum(size for _, _, size, _ in _library_files(self.directory))

    def count(self) -> int:
        """Stored fragments (every tokenizer), once the writer is done."""
        self.flush()
        return sum(1 for _, is_row, _, path in _library_files(self.directory)
                   if not is_row and path.suffix == ".npz")
