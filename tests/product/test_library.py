"""The on-disk fragment library's size: its cap evicts the least recently used files, a schema whose fragments were
evicted compiles again exactly, and a shared row edited on disk is caught; what it keeps (fragments worth reading
back) and how (behind the compile, on the writer thread) (``product.library``)."""

import os
import threading
import zlib

import numpy as np

import product.library as library
import vegas
from product.library import FragmentStore
from product.stitched import FragmentLibrary, compile_stitched
from tests.support import automaton_of, runtime_of
from vegas.schema import Compiler

SMALL = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
         "additionalProperties": False}
LARGE = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer"}, "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}}, "done": {"type": "boolean"}},
    "required": ["title", "year", "score", "tags", "done"], "additionalProperties": False}
OTHER = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
         "additionalProperties": False}
INSTANCE = {"title": "Dune", "year": 1965, "score": 4.5, "tags": ["sf", "desert"], "done": True}


def _compile(schema, store):
    """``schema``'s stitched guide from an empty memory library (a new process's view) over ``store``."""
    canonical = automaton_of("gpt2")
    compiler = Compiler.load(schema, "json", leaves=True)
    guide = compile_stitched(compiler.document(), compiler.leaves, canonical, library=FragmentLibrary(canonical),
                             store=store)
    if store is not None:
        store.flush()  # (the files are written behind the compile)
    return guide


def _files(directory):
    return {p: p.stat().st_size for p in directory.rglob("*") if p.is_file()}


def _masks(guide, ids):
    state, masks = guide.initial_state, []
    for t in ids:
        masks.append(guide.allowed(state))
        state = guide.advance(state, t)
    return masks + [guide.allowed(state)]


def test_the_cap_evicts_the_least_recently_used_and_an_evicted_schema_compiles_again_exactly(tmp_path):
    _compile(SMALL, FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0))
    small = _files(tmp_path)
    _compile(LARGE, FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0))
    large_only = {p: s for p, s in _files(tmp_path).items() if p not in small}
    other_dir = tmp_path.parent / (tmp_path.name + "-other")
    _compile(OTHER, FragmentStore(other_dir, max_bytes=None, min_compile_seconds=0))
    other = sum(_files(other_dir).values())
    for path in _files(tmp_path):  # every file used a minute ago, then SMALL's used now (loaded)
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns - 60 * 10**9))
    store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
    _compile(SMALL, store)
    assert store.loaded > 0 and store.saved == 0

    # a cap the three schemas pass, where SMALL and OTHER fit in the 3/4 of it eviction goes down to
    cap = (sum(small.values()) + other) * 4 // 3 + 1024
    assert cap < sum(small.values()) + sum(large_only.values()) + other
    store = FragmentStore(tmp_path, max_bytes=cap, min_compile_seconds=0)
    _compile(OTHER, store)
    assert store.saved > 0 and store.evicted > 0
    left = _files(tmp_path)
    assert sum(left.values()) <= cap and store.size_bytes() == sum(left.values())
    assert all(p in left for p in small)                               # used recently: kept
    assert any(p not in left for p in large_only if p.suffix == ".npz")  # used least recently: gone first

    # LARGE again: its evicted fragments compile again, and the guide is the one compiled without a library
    store = FragmentStore(tmp_path, max_bytes=cap, min_compile_seconds=0)
    again = _compile(LARGE, store)
    assert again.fragments_compiled > 0 and store.saved == again.fragments_compiled
    fresh = _compile(LARGE, None)
    text = vegas.format_instance(INSTANCE, LARGE)
    ids = runtime_of("gpt2").encode(text, add_special_tokens=False).ids
    assert again.accepts(ids) and fresh.accepts(ids)
    assert all(np.array_equal(a, b) for a, b in zip(_masks(again, ids), _masks(fresh, ids), strict=True))
    assert store.size_bytes() <= cap


def test_the_total_is_counted_not_listed_on_every_save(tmp_path):
    store = FragmentStore(tmp_path, max_bytes=1 << 30, min_compile_seconds=0)
    guide = _compile(LARGE, store)
    assert store.saved == guide.fragments_compiled > 2
    usage = library._Usage.of(tmp_path)
    assert usage.listings == 1 and usage.total == store.size_bytes()  # listed at the first save only


def test_a_changed_byte_in_a_shared_row_is_caught(tmp_path):
    first = _compile(LARGE, FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0))
    rows = sorted(tmp_path.rglob("rows/*.z"))
    assert rows and not list(tmp_path.rglob("*.part"))
    piece = bytearray(zlib.decompress(rows[0].read_bytes()))
    piece[len(piece) // 2] ^= 0x01  # valid zlib, other content
    rows[0].write_bytes(zlib.compress(bytes(piece)))
    library._ROW_CACHE = library._RowCache()  # a new process's view: rows read from disk
    store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
    rebuilt = _compile(LARGE, store)
    assert store.rejected > 0 and rebuilt.fragments_compiled == store.rejected
    ids = runtime_of("gpt2").encode(vegas.format_instance(INSTANCE, LARGE), add_special_tokens=False).ids
    assert all(np.array_equal(a, b) for a, b in zip(_masks(rebuilt, ids), _masks(first, ids), strict=True))
    library._ROW_CACHE = library._RowCache()
    store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
    _compile(LARGE, store)
    assert store.rejected == 0 and store.loaded > 0  # the row rewritten is trusted again


def test_rows_near_another_are_stored_as_their_difference_and_read_back_exactly(tmp_path):
    """A shared row that another row of its fragment (stored whole) nearly equals is stored as the XOR with it
    (``.x``, less than half the whole row's bytes); a new process loads every fragment (no compile) with the same
    masks; a delta whose base was evicted is caught, its fragment compiled again, and then trusted again."""
    first = _compile(LARGE, FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0))
    deltas, whole = sorted(tmp_path.rglob("rows/*.x")), sorted(tmp_path.rglob("rows/*.z"))
    assert deltas and whole
    assert sum(p.stat().st_size for p in deltas) / len(deltas) < 0.5 * sum(p.stat().st_size for p in whole) / len(whole)
    ids = runtime_of("gpt2").encode(vegas.format_instance(INSTANCE, LARGE), add_special_tokens=False).ids
    library._ROW_CACHE = library._RowCache()  # a new process's view: rows read from disk
    store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
    loaded = _compile(LARGE, store)
    assert loaded.fragments_compiled == 0 and store.rejected == 0
    assert all(np.array_equal(a, b) for a, b in zip(_masks(loaded, ids), _masks(first, ids), strict=True))
    base = next(p for p in whole if any(d.read_bytes()[:40] == p.stem.encode() for d in deltas))
    base.unlink()  # evicted under a delta that names it
    library._ROW_CACHE = library._RowCache()
    store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
    rebuilt = _compile(LARGE, store)
    assert store.rejected > 0 and rebuilt.fragments_compiled == store.rejected
    assert all(np.array_equal(a, b) for a, b in zip(_masks(rebuilt, ids), _masks(first, ids), strict=True))
    library._ROW_CACHE = library._RowCache()
    store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
    assert _compile(LARGE, store).fragments_compiled == 0 and store.rejected == 0  # rewritten, trusted again


def test_fragments_are_written_behind_the_compile_and_served_from_memory_until_written(tmp_path):
    gate = threading.Event()
    library._writer().submit(gate.wait, 60)  # the writer busy: what the compile hands it waits
    try:
        store = FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=0)
        canonical = automaton_of("gpt2")
        compiler = Compiler.load(LARGE, "json", leaves=True)
        guide = compile_stitched(compiler.document(), compiler.leaves, canonical,
                                 library=FragmentLibrary(canonical), store=store)
        assert guide.fragments_compiled > 2 and store.saved == 0 and not list(tmp_path.rglob("*.npz"))
        again = compile_stitched(compiler.document(), compiler.leaves, canonical,
                                 library=FragmentLibrary(canonical), store=store)  # a new library: from the store
        assert again.fragments_compiled == 0 and store.loaded == guide.num_fragments and store.saved == 0
    finally:
        gate.set()
    store.flush()
    assert store.saved == guide.fragments_compiled == len(list(tmp_path.rglob("*.npz")))
    assert not list(tmp_path.rglob("*.part")) and store.write_errors == 0
    fresh = FragmentStore(tmp_path, max_bytes=None)
    loaded = _compile(LARGE, fresh)
    assert loaded.fragments_compiled == 0 and fresh.loaded == guide.num_fragments
    ids = runtime_of("gpt2").encode(vegas.format_instance(INSTANCE, LARGE), add_special_tokens=False).ids
    assert all(np.array_equal(a, b) for a, b in zip(_masks(loaded, ids), _masks(guide, ids), strict=True))


def test_fast_fragments_are_not_kept_and_a_failed_write_costs_no_compile(tmp_path):
    quick = _compile(LARGE, FragmentStore(tmp_path, max_bytes=None, min_compile_seconds=3600))
    assert quick.fragments_compiled > 2 and not list(tmp_path.rglob("*"))
    blocked = tmp_path / "not-a-directory"
    blocked.write_bytes(b"")  # the library's directory cannot be made under a file
    store = FragmentStore(blocked, max_bytes=None, min_compile_seconds=0)
    guide = _compile(LARGE, store)
    assert store.write_errors == guide.fragments_compiled > 2 and store.saved == 0
    assert isinstance(store.last_write_error, OSError)
    ids = runtime_of("gpt2").encode(vegas.format_instance(INSTANCE, LARGE), add_special_tokens=False).ids
    assert guide.accepts(ids)


NESTED = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}},
                                           "c": {"type": "boolean"}}, "required": ["a"]}


def test_soft_exits_and_empty_fragments_found_once_are_read_back_not_found_again(tmp_path, monkeypatch):
    """In YAML on GPT-2 this schema's stitching finds fragments whose text goes on past a cut (soft exits); a new
    process reads them back from the store (with any fragment found to have no live text) instead of building
    their automata again, and a damaged outcome file is not trusted."""
    import product.stitched as stitched

    canonical, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    found = {"soft": 0, "empty": 0}
    compile_fragment = stitched._compile_fragment

    def counted(*args, **kwargs):
        try:
            return compile_fragment(*args, **kwargs)
        except stitched._SoftExits:
            found["soft"] += 1
            raise
        except stitched.EmptyLanguageError:
            found["empty"] += 1
            raise

    monkeypatch.setattr(stitched, "_compile_fragment", counted)
    compiler = Compiler.load(NESTED, "yaml", leaves=True)

    def compile_fresh(store):  # a new process's view: an empty memory library
        guide = compile_stitched(compiler.document(), compiler.leaves, canonical,
                                 library=FragmentLibrary(canonical), store=store)
        store.flush()
        return guide

    first = compile_fresh(FragmentStore(tmp_path, max_bytes=None))
    assert found["soft"] > 0
    outcomes = sorted(tmp_path.rglob("*.outcome.json"))
    assert len(outcomes) == found["soft"] + found["empty"]
    found.update(soft=0, empty=0)
    store = FragmentStore(tmp_path, max_bytes=None)
    again = compile_fresh(store)
    assert found == {"soft": 0, "empty": 0} and store.outcomes_loaded >= len(outcomes) and store.rejected == 0
    text = vegas.format_instance({"a": {"b": 12}, "c": True}, NESTED, style="yaml")
    ids = runtime.encode(text, add_special_tokens=False).ids
    assert first.accepts(ids) and again.accepts(ids)
    assert all(np.array_equal(a, b) for a, b in zip(_masks(again, ids), _masks(first, ids), strict=True))

    outcomes[0].write_text('{"key": "another", "exits": []}')  # names another key: not trusted, found again
    store = FragmentStore(tmp_path, max_bytes=None)
    rebuilt = compile_fresh(store)
    assert store.rejected == 1 and found["soft"] + found["empty"] == 1
    assert all(np.array_equal(a, b) for a, b in zip(_masks(rebuilt, ids), _masks(first, ids), strict=True))
