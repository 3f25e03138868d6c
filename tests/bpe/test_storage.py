"""bpe.storage: the cache root, SHA-256 of files, and writes that never leave half a file under the final name."""

import hashlib

import pytest

from bpe.storage import atomic_directory, atomic_file, atomic_write, cache_dir, sha256_bytes, sha256_file


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CANONMERGE_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("CANONMERGE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "canonmerge"


def test_sha256_of_a_file_and_of_bytes(tmp_path):
    data = bytes(range(256)) * 9000  # more than one 1 MiB block
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == sha256_bytes(data) == hashlib.sha256(data).hexdigest()


def test_atomic_write_replaces_whole_files_and_leaves_nothing_on_failure(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    atomic_write(path, b"first")
    atomic_write(path, iter([b"sec", b"ond"]))
    assert path.read_bytes() == b"second"
    with pytest.raises(RuntimeError), atomic_file(path) as f:
        f.write(b"half")
        raise RuntimeError("interrupted")
    assert path.read_bytes() == b"second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.bin"]


def test_atomic_directory_appears_whole_or_not_at_all(tmp_path):
    target = tmp_path / "models" / "m"
    with pytest.raises(RuntimeError), atomic_directory(target) as tmp:
        (tmp / "a").write_text("a")
        raise RuntimeError("interrupted")
    assert not target.exists() and list(target.parent.iterdir()) == []
    with atomic_directory(target) as tmp:
        (tmp / "a").write_text("a")
        assert not target.exists()
    assert (target / "a").read_text() == "a"
    with atomic_directory(target) as tmp:  # another process finished first: its folder is kept
        (tmp / "b").write_text("b")
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    assert [p.name for p in target.parent.iterdir()] == ["m"]


def test_a_file_published_in_parts_is_joined_and_checked_whole(monkeypatch):
    """``bpe.assets._SplitAsset`` (a model over PyPI's file limit): the parts, each checked, concatenated in order;
    a wrong whole checksum raises and leaves no file under the asset's name."""
    from bpe import assets

    parts = (assets.ASSETS["gpt2/encoder.json"], assets.ASSETS["gpt2/vocab.bpe"])
    whole = b"".join(assets.asset_path(name).read_bytes() for name in ("gpt2/encoder.json", "gpt2/vocab.bpe"))
    monkeypatch.setitem(assets.ASSETS, "test/joined", assets._SplitAsset(parts, sha256_bytes(whole)))
    monkeypatch.setitem(assets.ASSETS, "test/joined-wrong", assets._SplitAsset(parts, sha256_bytes(whole[:-1])))
    try:
        assert assets.asset_path("test/joined").read_bytes() == whole
        with pytest.raises(assets.AssetError, match="joined parts"):
            assets.asset_path("test/joined-wrong")
        assert not (assets.cache_dir() / "assets" / "test" / "joined-wrong").exists()
    finally:
        (assets.cache_dir() / "assets" / "test" / "joined").unlink(missing_ok=True)
