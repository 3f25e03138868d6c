"""Causal language models loaded for generation, a GGUF file's dequantised weights cached on disk.

``transformers`` reads a GGUF file in Python, twice (its config, then its tensors: the metadata parsed each time,
the tensors dequantised): SmolLM2-135M's 94 MB Q4_1 file takes 16-24 s on two cores, at every load. The first
load of a GGUF file saves what it produced — the float32 weights as ``model.safetensors`` (~540 MB for SmolLM2,
tied tensors once), ``config.json`` (without the GGUF quantisation entry: the weights are dequantised) and
``generation_config.json`` — under ``<cache>/models/<key>/``, where the key is the GGUF file's SHA-256 and the
transformers version; later loads build the model from that config and read the weights into it (~2 s). A cache
that cannot be written (a read-only disk) or read (another version's layout) costs speed, never the load. The
folder is written under a temporary name and renamed into place, and holds a manifest of its files' SHA-256 sums,
checked at every load: a folder that fails the check (a missing file, a changed byte) is deleted and built again
from the GGUF file. Nothing is unpickled (safetensors holds raw tensors).

Leaves out: quantised inference (the weights are float32 as ``transformers`` dequantises them), eviction (one
folder per distinct GGUF file, kept until deleted), downloading models (a path on disk is given).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bpe.storage import atomic_directory, cache_dir, sha256_file

__all__ = ["load_causal_lm", "verified_folder"]

_MANIFEST = "canonmerge-manifest.json"


def load_causal_lm(path: str | os.PathLike, *, cache: str | os.PathLike | None = None):
    """A ``transformers`` causal LM (CPU, eval mode) from a GGUF file or a local model directory, offline.

    A GGUF file's dequantised weights are cached in ``cache`` (default ``<canonmerge cache>/models``; see the
    module docstring). ``transformers``' own errors (``OSError``, ``ValueError``...) pass through."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # (transformers and torch take seconds to import: only loading a model pays for them)
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    path = Path(path)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        if not path.is_file():
            return AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).eval()
        # (keyed by the transformers version too: another version may dequantise or name tensors otherwise)
        folder = Path(cache) if cache is not None else cache_dir() / "models"
        folder = folder / f"{sha256_file(path)[:32]}-transformers-{transformers.__version__}"
        if verified_folder(folder):
            try:
                return _load(folder).eval()
            except (OSError, ValueError, KeyError, RuntimeError):  # a folder this version cannot read: rebuilt
                shutil.rmtree(folder, ignore_errors=True)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
        try:
            _save(model, folder)
        except (OSError, ValueError, RuntimeError):  # the cache is only a speed-up: a failed write costs the next load
            pass
        return model.eval()
    finally:
        hf_logging.set_verbosity(verbosity)


def verified_folder(folder: Path) -> bool:
    """Whether ``folder`` holds exactly the files its manifest names, with their SHA-256 sums; a folder that does
    not is deleted (it is rebuilt)."""
    if not folder.is_dir():
        return False
    try:
        manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        present = {p.name for p in folder.iterdir()} - {_MANIFEST}
        if present == set(files) and all(sha256_file(folder / name) == digest for name, digest in files.items()):
            return True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
    return False


def _load(folder: Path):
    """The model of a verified folder: built from its config (float32, initialised), the weights read into it."""
    # (deferred with transformers: see load_causal_lm)
    from safetensors.torch import load_model
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)))
    load_model(model, str(folder / "model.safetensors"), strict=True)
    model.generation_config = GenerationConfig.from_pretrained(str(folder))
    return model


def _save(model, folder: Path) -> None:
    """The weights, config and generation config into a temporary folder beside ``folder``, a manifest of SHA-256
    sums, then one rename. A folder another process put there first is kept (both hold the same weights).
    (``save_pretrained`` refuses a model that ``transformers`` marks as GGUF-quantised, whose weights it has in
    fact dequantised.)"""
    # (deferred with transformers: see load_causal_lm)
    from safetensors.torch import save_model

    with atomic_directory(folder) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        model.generation_config.to_json_file(str(tmp / "generation_config.json"))
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir())}
        (tmp / _MANIFEST).write_text(json.dumps({"files": files}, indent=1), encoding="utf-8")
