"""Real tokenizers rewritten into other forms, and the runtime's own pieces: helpers of the bpe tests."""

import json

from tokenizers import Tokenizer as HFTokenizer

from bpe import load_tokenizer
from bpe.assets import asset_path
from bpe.loaders import gpt2_files_to_json

# o200k's pre-tokenizer regex, as its tokenizer.json writes it.
O200K_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def runtime_pieces(pre, text: str) -> list[str] | None:
    """The runtime's pieces, or None when it removes part of the text (no tokenization gives the text back)."""
    pieces = [p for p, _ in pre.pre_tokenize_str(text)]
    return pieces if "".join(pieces) == text else None


def gpt2_json() -> dict:
    return gpt2_files_to_json(asset_path("gpt2/encoder.json"), asset_path("gpt2/vocab.bpe"))


def load_pair(data: dict, tmp_path, name: str = "tokenizer.json"):
    """The model canonmerge loads from the JSON, and the runtime built from the very same file."""
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return load_tokenizer(path), HFTokenizer.from_file(str(path))
