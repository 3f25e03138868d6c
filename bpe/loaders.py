"""Read a BPE tokenizer from any common format into one ``bpe.model.Tokenizer``.

Sources: a ``tokenizer.json`` path (or a directory holding one, or GPT-2's ``encoder.json``/``vocab.bpe``
pair), a ``tokenizers.Tokenizer``, a transformers fast tokenizer, a tiktoken rank file (merges derived by
replaying ranks), Mistral's Tekken JSON (tiktoken ranks in JSON), a GGUF file's vocabulary, a SentencePiece BPE
``.model``.

Only what decides tokenization is kept. Anything that changes it in a way canonmerge does not model
(WordPiece/Unigram models, Strip/Precompiled normalisers, Whitespace/UnicodeScripts pre-tokenizers,
suffix/prefix conventions) raises ``UnsupportedTokenizerError`` naming the construct, rather than being
silently ignored. The dummy prefix (``Prepend``, Metaspace's prepend scheme, ByteLevel's add_prefix_space) is
left out: canonical tokenizations are continuations. EOS: ``eos_token_ids=``, else the source, else the
transformers files beside a tokenizer.json, else a list of names (see docs/tokenizer-forms.md).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer as HFTokenizer

from bpe.errors import TokenizerError, UnsupportedTokenizerError
from bpe.model import GPT2_PATTERN, SplitRule, Tokenizer, bytes_to_unicode
from bpe.unicode_classes import pre_tokenizer_class

__all__ = ["load_tokenizer", "to_runtime_tokenizer"]

# Names of special tokens that end generation, used when neither the source nor the files beside it say which
# one is EOS; the first present wins.
_EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|eom_id|>",
              "<end_of_turn>", "<eos>", "<|end|>", "<|return|>", "<EOT>", "<|eot|>", "<|END_OF_TURN_TOKEN|>",
              "<｜end▁of▁sentence｜>", "<|end▁of▁sentence|>", "<｜end_of_sentence｜>", "<|end_of_sentence|>",
              "[EOS]", "<end_of_utterance>", "<|endofturn|>", "<|eos|>")

# Pre-tokenizer regexes by the names llama.cpp writes into GGUF files (tokenizer.ggml.pre; src/llama-vocab.cpp of
# llama.cpp as vendored by llama-cpp-python 0.3.36) and by the tiktoken encoding names. Each entry is the list of
# regexes llama.cpp applies in order (each an Isolated split of the pieces of the one before: matches and the text
# between them are pieces), and whether a piece found whole in the vocabulary is one token (ignore_merges). Where
# llama.cpp rewrote a tokenizer.json regex for its own engine ("(?i:'s|...)" as "'[sS]|..."), the original form,
# which matches the same strings, is kept.
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = _LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CL100K_PATTERN = _LLAMA3_PATTERN  # Llama-3 adopted cl100k's regex unchanged
_O200K_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CJK = "[一-龥ࠀ-一가-퟿]+"  # llama.cpp's deepseek ranges, as written there
# deepseek-llm's letter ranges, escaped (an editor's Unicode normalisation must not touch them)
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-"
    "\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec"
    "\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-"
    "\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-"
    "\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
_LLAMA_CPP_TYPES: dict[str, tuple[tuple[str, ...], bool]] = {
    # llama.cpp pre-tokenizer type: (regexes, ignore_merges)
    "gpt2": ((GPT2_PATTERN,), False),  # llama.cpp drops the final "|\s+": the gap it leaves is the same piece
    "llama3": ((_LLAMA3_PATTERN,), True),
    "dbrx": ((_LLAMA3_PATTERN,), False),
    "glm4": ((_LLAMA3_PATTERN,), True),
    "qwen2": ((_QWEN2_PATTERN,), False),
    "qwen35": ((_QWEN35_PATTERN,), False),
    "starcoder": ((r"\p{N}", GPT2_PATTERN), False),
    "falcon": ((r"[\p{P}\$\+<=>\^~\|`]+", GPT2_PATTERN, "[0-9][0-9][0-9]"), False),
    "default": ((r"[\p{P}\$\+<=>\^~\|]+", GPT2_PATTERN, r"\p{N}+", "[0-9][0-9][0-9]"), False),
    "deepseek-llm": (("[\r\n]", r"\s?[" + _DEEPSEEK_LETTERS + "]+",
                      r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", _CJK, r"\p{N}+"), False),
    "deepseek-coder": (("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"), False),
    "tekken": ((_TEKKEN_PATTERN,), True),
    "gpt4o": ((_O200K_PATTERN,), False),
    "bloom": ((r" ?[^(\s|.,!?…。，、।۔،)]+",), False),
    "viking": ((r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"), False),
    "seed-coder": ((r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+",), False),
    "ufakzeka": ((r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",), False),
    "bailingmoe": ((r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",), False),
}
# tokenizer.ggml.pre names -> llama.cpp type (the name lists of llama-vocab.cpp's load_pre).
_LLAMA_CPP_NAMES = {
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                     "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling",
                     "jina-v1-en", "jina-v2-code", "roberta-bpe"), "gpt2"),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "jina-v5-nano"), "llama3"),
    **dict.fromkeys(("dbrx", "smaug-bpe", "chatglm-bpe"), "dbrx"),
    **dict.fromkeys(("glm4", "glm5"), "glm4"),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
                     "grok-2"), "qwen2"),
    "qwen35": "qwen35",
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"),
                    "starcoder"),
    "falcon": "falcon", "default": "default", "deepseek-llm": "deepseek-llm", "deepseek-coder": "deepseek-coder",
    "tekken": "tekken",
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), "gpt4o"),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), "bloom"),
    "viking": "viking", "seed-coder": "seed-coder", "ufakzeka": "ufakzeka",
    **dict.fromkeys(("bailingmoe", "bailingmoe2", "llada-moe"), "bailingmoe"),
}
GGUF_PRE_TOKENIZERS: dict[str, tuple[tuple[SplitRule, ...], bool]] = {
    name: (tuple(SplitRule(r) for r in _LLAMA_CPP_TYPES[kind][0]), _LLAMA_CPP_TYPES[kind][1])
    for name, kind in _LLAMA_CPP_NAMES.items()
}
_NAMED_PRE_TOKENIZERS: dict[str, tuple[tuple[SplitRule, ...], bool]] = {
    # name: (split rules, ignore_merges); tiktoken encodings, then llama.cpp's names
    "r50k_base": ((SplitRule(GPT2_PATTERN),), False),
    "gpt2": ((SplitRule(GPT2_PATTERN),), False),
    "cl100k_base": ((SplitRule(_CL100K_PATTERN),), False),
    **GGUF_PRE_TOKENIZERS,
}
# Special tokens that tiktoken adds after the rank file, by encoding name.
_TIKTOKEN_SPECIALS = {
    "gpt2": {"<|endoftext|>": 50256},
    "r50k_base": {"<|endoftext|>": 50256},
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
}


def load_tokenizer(source: Any, *, eos_token_ids: list[int] | None = None, pre_tokenizer: str | None = None) -> Tokenizer:
    """Load a BPE tokenizer from a path, a ``tokenizers.Tokenizer`` or a transformers fast tokenizer.

    ``eos_token_ids`` overrides the end-of-sequence ids found in (or guessed from) the source.
    ``pre_tokenizer`` names the pre-tokenizer (``gpt2``, ``cl100k_base``, ``llama-bpe``, …) for formats
    that do not carry it, i.e. tiktoken files whose name does not tell.
    """
    if eos_token_ids is not None:
        eos_token_ids = checked_eos(eos_token_ids)
    if hasattr(source, "backend_tokenizer"):  # transformers PreTrainedTokenizerFast
        eos = eos_token_ids
        if eos is None and getattr(source, "eos_token_id", None) is not None:
            eos = [int(source.eos_token_id)]
        return _from_json_dict(json.loads(source.backend_tokenizer.to_str()), eos)
    if type(source).__module__.startswith("tokenizers") and hasattr(source, "to_str"):
        return _from_json_dict(json.loads(source.to_str()), eos_token_ids)
    if not isinstance(source, (str, Path)):
        raise TokenizerError(f"cannot load a tokenizer from a {type(source).__name__}")
    path = Path(source)
    if not path.exists():
        raise TokenizerError(f"tokenizer source {str(path)!r} does not exist")
    if path.is_dir():
        if (path / "tokenizer.json").exists():
            path = path / "tokenizer.json"
        elif (path / "encoder.json").exists() and (path / "vocab.bpe").exists():
            return _from_json_dict(gpt2_files_to_json(path / "encoder.json", path / "vocab.bpe"), eos_token_ids,
                                   beside=path)
        else:
            raise TokenizerError(f"directory {str(path)!r} has no tokenizer.json (nor encoder.json + vocab.bpe)")
    name = path.name
    if name.endswith(".tiktoken"):
        return _from_tiktoken(path, eos_token_ids, pre_tokenizer)
    if name.endswith(".gguf"):
        return _from_gguf(path, eos_token_ids)
    if ".model" in name:
        return _from_sentencepiece(path, eos_token_ids)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{str(path)!r} is not valid tokenizer JSON: {exc}") from exc
    if _is_tekken(data):
        return _from_tekken(data, path.name, eos_token_ids)
    if not isinstance(data, dict) or "model" not in data:
        raise TokenizerError(f"{str(path)!r} is JSON but not a tokenizer.json (no 'model' entry)")
    return _from_json_dict(data, eos_token_ids, beside=path.parent)


def checked_eos(eos_token_ids) -> list[int]:
    if isinstance(eos_token_ids, (int, str, bytes)) or not all(
            isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in eos_token_ids):
        raise TypeError(f"eos_token_ids must be a list of token ids, not {eos_token_ids!r}")
    return [int(t) for t in eos_token_ids]


def _eos_beside(directory: Path, strings: list[str | None]) -> tuple[int, ...] | None:
    """EOS ids named by the files transformers keeps beside a tokenizer.json: ``generation_config.json``
    (``eos_token_id``: what generation stops on, one id or several), ``tokenizer_config.json`` (``eos_token``: a
    token's content), ``config.json`` (``eos_token_id``); the first that names one wins. None if none does."""
    def read(name: str) -> dict:
        path = directory / name
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TokenizerError(f"{str(path)!r} is not valid JSON: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def ids(value, where: str) -> tuple[int, ...] | None:
        if value is None:
            return None
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise TokenizerError(f"{where}: eos_token_id {value!r} is not a token id or a list of them")
        for v in values:
            if not 0 <= v < len(strings):
                raise TokenizerError(f"{where}: eos_token_id {v} is outside the vocabulary of {len(strings)} tokens")
        return tuple(values)

    found = ids(read("generation_config.json").get("eos_token_id"), "generation_config.json")
    if found:
        return found
    content = read("tokenizer_config.json").get("eos_token")
    if isinstance(content, dict):
        content = content.get("content")
    if isinstance(content, str):
        matches = [i for i, s in enumerate(strings) if s == content]
        if not matches:
            raise TokenizerError(f"tokenizer_config.json: eos_token {content!r} is not a token of the tokenizer")
        return (matches[0],)
    return ids(read("config.json").get("eos_token_id"), "config.json")


# --------------------------------------------------------------------------------------------- tokenizer.json


_STRIPPED_NORMALISERS = ("Prepend",)  # the dummy prefix: left out in continuation mode (see the README)


def _parse_normalizer(spec: dict | None) -> tuple[tuple[str, ...], ...]:
    if spec is None:
        return ()
    kind = spec.get("type")
    if kind == "Sequence":
        return tuple(step for sub in spec["normalizers"] for step in _parse_normalizer(sub))
    if kind in ("NFC", "NFKC", "NFD", "NFKD"):
        return ((kind.lower(),),)
    if kind == "Lowercase":
        return (("lowercase",),)
    if kind == "Prepend":
        return (("prepend", spec["prepend"]),)
    if kind == "Replace":
        pattern = spec["pattern"]
        if "String" not in pattern:
            raise UnsupportedTokenizerError(f"Replace normaliser with a regex pattern {pattern!r} is not supported")
        if not pattern["String"]:
            raise UnsupportedTokenizerError("Replace normaliser with an empty pattern is not supported")
        return (("replace", pattern["String"], spec["content"]),)
    raise UnsupportedTokenizerError(
        f"normaliser {kind!r} is not supported (supported: NFC/NFKC/NFD/NFKD, Lowercase, Prepend, Replace with a "
        "string pattern, Sequence of these)")


# HF pre-tokenizer behaviours (JSON spells them in CamelCase) as SplitRule.behavior.
_BEHAVIORS = {"Isolated": "isolated", "Removed": "removed", "MergedWithPrevious": "merged_with_previous",
              "MergedWithNext": "merged_with_next", "Contiguous": "contiguous"}
_BEHAVIORS.update({v: v for v in list(_BEHAVIORS.values())})


def _behavior(spec: dict, default: str) -> str:
    behavior = spec.get("behavior", default)
    if behavior not in _BEHAVIORS:
        raise UnsupportedTokenizerError(f"{spec.get('type')} pre-tokenizer behaviour {behavior!r} is not supported "
                                        f"(supported: {', '.join(k for k in _BEHAVIORS if k[0].isupper())})")
    return _BEHAVIORS[behavior]


def _string_pattern(text: str, replaces: list[tuple[str, str]]) -> str | None:
    """The regex, over the text as decoded (before normalisation), of a literal that a Split looks for in the
    normalised text; None when no text can contain it. Exact for one-character replacements."""
    if not text:
        raise UnsupportedTokenizerError("Split pre-tokenizer with an empty string pattern is not supported")
    if not replaces:
        return re.escape(text)
    if any(len(old) != 1 or len(new) != 1 for old, new in replaces):
        raise UnsupportedTokenizerError("a Split string pattern after a multi-character Replace normaliser is not "
                                        "supported")
    universe = {c for pair in replaces for c in pair} | set(text)

    def image(c: str) -> str:
        for old, new in replaces:
            c = new if c == old else c
        return c

    parts = []
    for ch in text:
        sources = sorted(c for c in universe if image(c) == ch)
        if not sources:
            return None
        parts.append(re.escape(sources[0]) if len(sources) == 1 else "[" + "".join(re.escape(c) for c in sources) + "]")
    return "".join(parts)


def _parse_pre_tokenizer(spec: dict | None, replaces: list[tuple[str, str]], first: bool = True
                         ) -> tuple[tuple[SplitRule, ...], bool, tuple[tuple[str, ...], ...]]:
    """Split rules, whether the vocabulary is byte-level, and normaliser-like steps the pre-tokenizer applies
    (Metaspace's space replacement). ``replaces``: character replacements already applied to the text (grown
    in place by Metaspace), through which string patterns are read. ``first``: nothing split the text before."""
    if spec is None:
        return (), False, ()
    kind = spec.get("type")
    if kind == "Sequence":
        rules: list[SplitRule] = []
        byte_level = False
        steps: list[tuple[str, ...]] = []
        for k, sub in enumerate(spec["pretokenizers"]):
            sub_rules, sub_bytes, sub_steps = _parse_pre_tokenizer(sub, replaces, first and not rules)
            rules.extend(sub_rules)
            byte_level |= sub_bytes
            steps.extend(sub_steps)
        return tuple(rules), byte_level, tuple(steps)
    if kind == "ByteLevel":
        if spec.get("add_prefix_space") and not first:
            raise UnsupportedTokenizerError("ByteLevel pre-tokenizer with add_prefix_space=true after a split (a "
                                            "space before every piece) is not supported")
        if replaces and spec.get("use_regex", True):
            raise UnsupportedTokenizerError("ByteLevel(use_regex=true) after a Replace normaliser is not supported")
        return ((SplitRule(GPT2_PATTERN),) if spec.get("use_regex", True) else ()), True, ()
    if kind == "Split":
        pattern = spec["pattern"]
        behavior = _behavior(spec, "Isolated")
        invert = bool(spec.get("invert", False))
        if "Regex" in pattern:
            if replaces:
                raise UnsupportedTokenizerError(f"Split regex {pattern['Regex']!r} after a Replace normaliser (or "
                                                "Metaspace) is not supported")
            regex = pattern["Regex"]
        else:
            regex = _string_pattern(pattern["String"], replaces)
            if regex is None:  # never matches: one span, the whole text
                if behavior == "removed" and invert:
                    raise UnsupportedTokenizerError(f"Split({pattern['String']!r}, Removed, invert) removes all text")
                return (), False, ()
        return (SplitRule(regex, behavior, invert),), False, ()
    # Digits and Punctuation test characters in Rust, with Unicode tables other than the regex engine's: their
    # members, read from the runtime, as a class.
    if kind == "Digits":
        behavior = "isolated" if spec.get("individual_digits") else "contiguous"
        return (SplitRule(pre_tokenizer_class("Digits"), behavior),), False, ()
    if kind == "Punctuation":
        return (SplitRule(pre_tokenizer_class("Punctuation"), _behavior(spec, "Isolated")),), False, ()
    if kind == "WhitespaceSplit":
        return (SplitRule(r"\s", "removed"),), False, ()
    if kind == "CharDelimiterSplit":
        return (SplitRule(re.escape(spec["delimiter"]), "removed"),), False, ()
    if kind == "Metaspace":
        replacement = spec.get("replacement", "▁")
        if len(replacement) != 1:
            raise UnsupportedTokenizerError(f"Metaspace replacement {replacement!r} is not one character")
        scheme = spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never")
        if scheme not in ("always", "first", "never"):
            raise UnsupportedTokenizerError(f"Metaspace prepend_scheme {scheme!r} is not supported")
        if scheme == "always" and not first:
            raise UnsupportedTokenizerError("Metaspace prepend_scheme='always' after a split (a prefix before every "
                                            "piece) is not supported")
        # The prefix is the dummy prefix, left out in continuation mode like a Prepend normaliser.
        replaces.append((" ", replacement))
        split_on = _string_pattern(replacement, replaces)
        rules = (SplitRule(split_on, "merged_with_next"),) if spec.get("split", True) and split_on else ()
        return rules, False, (("replace", " ", replacement),)
    raise UnsupportedTokenizerError(
        f"pre-tokenizer {kind!r} is not supported (supported: ByteLevel, Split, Digits, Punctuation, Metaspace, "
        "WhitespaceSplit, CharDelimiterSplit, Sequence of these)"
    )


def _token_bytes_of(strings: list[str | None], byte_level: bool, byte_fallback: bool,
                    normalizer: tuple[tuple[str, ...], ...], special: set[int], unreachable: set[int]
                    ) -> list[bytes | None]:
    """Each token's bytes (None for ``special``). A byte-level vocabulary token spelled outside the byte alphabet
    (Command-R's 1,403 emoji written as plain text) can never come out of BPE, whose pieces are spelled in the
    alphabet: its id goes into ``unreachable`` (never allowed, like a special token)."""
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    # Undo the normaliser's replacements (SentencePiece style: "▁" stands for a space).
    replacements = [(step[2], step[1]) for step in normalizer if step[0] == "replace"]
    out: list[bytes | None] = []
    for i, s in enumerate(strings):
        if s is None or i in special:
            out.append(None)
        elif byte_level:
            try:
                out.append(bytes(decoder[c] for c in s))
            except KeyError:
                out.append(None)
                unreachable.add(i)
        elif byte_fallback and len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            out.append(bytes([int(s[3:5], 16)]))
        else:
            for new, old in replacements:
                s = s.replace(new, old)
            out.append(s.encode("utf-8"))
    return out


def _added_token_bytes(content: str, byte_level: bool, normalizer: tuple[tuple[str, ...], ...]) -> bytes:
    """What the runtime's decoder makes of an added token's content."""
    if byte_level:
        decoder = {c: b for b, c in bytes_to_unicode().items()}
        if all(c in decoder for c in content):
            return bytes(decoder[c] for c in content)
        return content.encode("utf-8")
    for step in normalizer:
        if step[0] == "replace":
            content = content.replace(step[2], step[1])
    return content.encode("utf-8")


def _merge_table(merges: list, vocab: dict[str, int], where: str) -> np.ndarray:
    table = np.empty((len(merges), 3), dtype=np.int32)
    for k, merge in enumerate(merges):
        if isinstance(merge, str):
            parts = merge.split(" ")
            if len(parts) != 2:
                raise TokenizerError(f"{where}: merge {k} {merge!r} is not two space-separated tokens")
        else:
            parts = list(merge)
        left, right = parts
        try:
            table[k] = (vocab[left], vocab[right], vocab[left + right])
        except KeyError as exc:
            raise TokenizerError(f"{where}: merge {k} ({left!r}, {right!r}) names a token not in the vocabulary: {exc}") from None
    return table


def _guess_eos(strings: list[str | None], special: set[int]) -> tuple[int, ...]:
    by_name = {strings[i]: i for i in special if strings[i] is not None}
    for name in _EOS_NAMES:
        if name in by_name:
            return (by_name[name],)
    return ()


def _from_json_dict(data: dict, eos_token_ids: list[int] | None, beside: Path | None = None) -> Tokenizer:
    model = data.get("model") or {}
    kind = model.get("type")
    if kind is None and "merges" in model:
        kind = "BPE"
    if kind != "BPE":
        raise UnsupportedTokenizerError(f"{kind} models are not supported: canonmerge handles BPE tokenizers only")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise UnsupportedTokenizerError(f"BPE {key}={model[key]!r} is not supported")
    if model.get("dropout"):
        raise UnsupportedTokenizerError("BPE dropout makes tokenization random; canonical tokenization is undefined")
    vocab: dict[str, int] = model["vocab"]
    added = data.get("added_tokens") or []
    size = 1 + max([*vocab.values(), *(a["id"] for a in added)])
    strings: list[str | None] = [None] * size
    for s, i in vocab.items():
        strings[i] = s
    special = {a["id"] for a in added if a.get("special")}
    for a in added:
        # single_word: the runtime matches the token only between word boundaries, and elsewhere BPE spells its text
        # with regular tokens, which the automaton forbids (they hold an added token's text): refused, not guessed.
        if a.get("single_word") and not a.get("special"):
            raise UnsupportedTokenizerError(f"added token {a['content']!r} (id {a['id']}) with single_word=true is not "
                                            "supported")
    in_vocab = set(vocab.values())
    plain = {a["id"] for a in added if not a.get("special")}
    for a in added:
        strings[a["id"]] = a["content"]
    normalizer = _parse_normalizer(data.get("normalizer"))
    replaces = [(step[1], step[2]) for step in normalizer if step[0] == "replace"]
    rules, byte_level, pre_steps = _parse_pre_tokenizer(data.get("pre_tokenizer"), replaces)
    normalizer += pre_steps
    decoder = data.get("decoder") or {}
    byte_level |= decoder.get("type") == "ByteLevel" or (
        decoder.get("type") == "Sequence" and any(d.get("type") == "ByteLevel" for d in decoder.get("decoders", [])))
    byte_fallback = bool(model.get("byte_fallback"))
    unreachable: set[int] = set()
    token_bytes = _token_bytes_of(strings, byte_level, byte_fallback, normalizer, special | (plain - in_vocab),
                                  unreachable)
    added_plain: set[int] = set()
    for i in sorted(plain):
        # Non-special added tokens are found in the text by their content, before normalisation and BPE; the
        # runtime decodes them like any token (through the byte alphabet when every character is in it, else as
        # their UTF-8). One that decodes to its content is matched wherever the text holds it: an added token (the
        # automaton allows it between independently tokenized segments). One that does not never matches decoded
        # text: a vocabulary token keeps its BPE role (Gemma's "▁▁"), any other is never allowed, like a special
        # token.
        raw = _added_token_bytes(strings[i], byte_level, normalizer)
        if raw.decode("utf-8", errors="replace") == strings[i]:
            token_bytes[i] = raw
            added_plain.add(i)
        elif i not in in_vocab:
            special.add(i)
    unreachable -= added_plain
    special |= unreachable
    merge_table = _merge_table(model.get("merges", []), vocab, "tokenizer.json")
    if unreachable and np.isin(merge_table, list(unreachable)).any():
        k = int(np.flatnonzero(np.isin(merge_table, list(unreachable)).any(axis=1))[0])
        raise UnsupportedTokenizerError(f"merge {k} names a token spelled outside the byte-level alphabet "
                                        f"({[strings[int(t)] for t in merge_table[k]]})")
    if eos_token_ids is not None:
        eos = tuple(eos_token_ids)
    else:
        eos = (_eos_beside(beside, strings) if beside is not None else None) or _guess_eos(strings, special)
    return Tokenizer(
        token_bytes=token_bytes,
        merge_table=merge_table,
        eos_token_ids=eos,
        byte_level=byte_level,
        byte_fallback=byte_fallback,
        ignore_merges=bool(model.get("ignore_merges")),
        pre_tokenizer=rules,
        normalizer=normalizer,
        special_token_ids=frozenset(special),
        added_token_ids=frozenset(added_plain),
        unreachable_token_ids=frozenset(unreachable),
        token_strings=strings,
    )


def _added_token(token_id: int, content: str, special: bool) -> dict:
    """An ``added_tokens`` entry of tokenizer.json, complete enough for the HF runtime to load."""
    return {"id": token_id, "content": content, "special": special, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": not special}


def gpt2_files_to_json(encoder: Path, vocab_bpe: Path) -> dict:
    """GPT-2's original release files as a tokenizer.json dictionary (ByteLevel, no normaliser)."""
    vocab = json.loads(encoder.read_text(encoding="utf-8"))
    lines = vocab_bpe.read_text(encoding="utf-8").split("\n")
    merges = [line for line in lines if line and not line.startswith("#version")]
    special = [_added_token(vocab["<|endoftext|>"], "<|endoftext|>", True)] if "<|endoftext|>" in vocab else []
    return {
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True, "trim_offsets": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True, "trim_offsets": True},
        "added_tokens": special,
    }


# --------------------------------------------------------------------------------------------- tiktoken


def _replay_ranks(ranked: list[bytes]) -> list[tuple[int, int, int]]:
    """Merges of a rank-ordered byte vocabulary: each multi-byte token is the merge of the two pieces BPE,
    using only lower ranks, leaves it in."""
    rank = {b: i for i, b in enumerate(ranked)}
    merges = []
    for r, token in enumerate(ranked):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, best_rank = -1, r
            for i in range(len(parts) - 1):
                pr = rank.get(parts[i] + parts[i + 1], r)
                if pr < best_rank:
                    best, best_rank = i, pr
            if best < 0:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) != 2:
            raise TokenizerError(f"tiktoken rank {r} ({token!r}) cannot be produced by merging lower ranks")
        merges.append((rank[parts[0]], rank[parts[1]], r))
    merges.sort(key=lambda m: m[2])
    return merges


def _from_tiktoken(path: Path, eos_token_ids: list[int] | None, pre_tokenizer: str | None) -> Tokenizer:
    name = pre_tokenizer or path.name.removesuffix(".tiktoken")
    if name not in _NAMED_PRE_TOKENIZERS:
        raise UnsupportedTokenizerError(
            f"tiktoken file {path.name!r}: its pre-tokenizer is unknown; pass pre_tokenizer= one of "
            f"{sorted(_NAMED_PRE_TOKENIZERS)}"
        )
    ranked: list[bytes] = []
    for line_no, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            token_b64, rank_text = line.split()
            token, rank = base64.b64decode(token_b64, validate=True), int(rank_text)
        except ValueError as exc:
            raise TokenizerError(f"{path.name} line {line_no} is not '<base64> <rank>': {exc}") from None
        if rank != len(ranked):
            raise TokenizerError(f"{path.name} line {line_no}: ranks must be 0, 1, 2, … (found {rank})")
        ranked.append(token)
    rules, ignore_merges = _NAMED_PRE_TOKENIZERS[name]
    specials = {i: content for content, i in _TIKTOKEN_SPECIALS.get(name, {}).items()}
    return _from_ranks(ranked, 0, specials, rules, ignore_merges, eos_token_ids, None)


def _from_ranks(ranked: list[bytes], offset: int, specials: dict[int, str], rules: tuple[SplitRule, ...],
                ignore_merges: bool, eos_token_ids: list[int] | None, eos_name: str | None) -> Tokenizer:
    """A byte-level tokenizer from tiktoken-style ranks: rank r is id ``offset + r``, merges replay the ranks,
    ``specials`` (id -> content) are never produced by text. EOS: ``eos_token_ids``, else the special named
    ``eos_name``, else the list of names."""
    size = max([offset + len(ranked) - 1, *specials]) + 1
    token_bytes: list[bytes | None] = [None] * size
    token_bytes[offset:offset + len(ranked)] = ranked
    encoder = bytes_to_unicode()
    strings: list[str | None] = [None] * size
    strings[offset:offset + len(ranked)] = ["".join(encoder[b] for b in t) for t in ranked]
    for i, content in specials.items():
        if token_bytes[i] is not None:
            raise TokenizerError(f"special token {content!r} has id {i}, which is a regular token's")
        strings[i] = content
    special = set(specials)
    if eos_token_ids is not None:
        eos = tuple(eos_token_ids)
    elif eos_name is not None and eos_name in specials.values():
        eos = (next(i for i, c in specials.items() if c == eos_name),)
    else:
        eos = _guess_eos(strings, special)
    merges = np.array(_replay_ranks(ranked), dtype=np.int32).reshape(-1, 3) + offset
    return Tokenizer(
        token_bytes=token_bytes,
        merge_table=merges,
        eos_token_ids=eos,
        byte_level=True,
        byte_fallback=False,
        ignore_merges=ignore_merges,
        pre_tokenizer=rules,
        normalizer=(),
        special_token_ids=frozenset(special),
        token_strings=strings,
    )


# --------------------------------------------------------------------------------------------- Tekken

# Mistral's Tekken files (mistral-common) before v7 carry no special tokens; the runtime then uses these 20 at ids
# 0-19, and names the rest of the reserved ids "<SPECIAL_{id}>".
_TEKKEN_DEFAULT_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                            "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                            "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                            "[TOOL_CONTENT]")


def _is_tekken(data: Any) -> bool:
    return isinstance(data, dict) and "model" not in data and isinstance(data.get("config"), dict) and "vocab" in data


def _from_tekken(data: dict, where: str, eos_token_ids: list[int] | None) -> Tokenizer:
    """Mistral's Tekken JSON, as mistral-common's Tekkenizer reads it: tiktoken ranks (base64 token bytes) cut to
    ``default_vocab_size - default_num_special_tokens``, each id shifted up by the number of special tokens, which
    take ids 0..n-1; the config's regex is the pre-tokenizer (tiktoken: a whole piece found in the ranks is one
    token, so ignore_merges). Special tokens are never produced by text; EOS is ``</s>``."""
    config = data["config"]
    try:
        pattern = config["pattern"]
        vocab_size = int(config["default_vocab_size"])
        num_special = int(config["default_num_special_tokens"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TokenizerError(f"{where}: Tekken config lacks a valid {exc} (needs pattern, default_vocab_size, "
                             "default_num_special_tokens)") from None
    if not isinstance(pattern, str) or not pattern:
        raise TokenizerError(f"{where}: Tekken config pattern {pattern!r} is not a regex")
    vocab = data["vocab"]
    if not isinstance(vocab, list) or not 0 <= num_special <= vocab_size <= len(vocab) + num_special:
        raise TokenizerError(f"{where}: Tekken vocabulary of {len(vocab) if isinstance(vocab, list) else '?'} "
                             f"ranks cannot fill default_vocab_size={vocab_size} with {num_special} special tokens")
    ranked: list[bytes] = []
    for i, entry in enumerate(vocab[:vocab_size - num_special]):
        try:
            if entry["rank"] != i:
                raise ValueError(f"rank {entry['rank']!r} where {i} was expected")
            ranked.append(base64.b64decode(entry["token_bytes"], validate=True))
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenizerError(f"{where}: Tekken vocabulary entry {i} is not {{rank, token_bytes (base64)}}: "
                                 f"{exc}") from None
    if len(set(ranked)) != len(ranked):
        raise TokenizerError(f"{where}: Tekken vocabulary holds the same token bytes twice")
    listed = data.get("special_tokens")
    if listed is None:
        names = list(_TEKKEN_DEFAULT_SPECIALS[:num_special])
    else:
        try:
            names = [t["token_str"] for t in sorted(listed, key=lambda t: t["rank"])]
            if [t["rank"] for t in sorted(listed, key=lambda t: t["rank"])] != list(range(len(names))):
                raise ValueError("special token ranks are not 0, 1, 2, …")
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenizerError(f"{where}: Tekken special_tokens are not [{{rank, token_str}}]: {exc}") from None
        if len(names) > num_special:
            raise TokenizerError(f"{where}: {len(names)} special tokens but default_num_special_tokens={num_special}")
    names += [f"<SPECIAL_{i}>" for i in range(len(names), num_special)]
    rules = (SplitRule(pattern),)
    return _from_ranks(ranked, num_special, dict(enumerate(names)), rules, True, eos_token_ids, "</s>")


# --------------------------------------------------------------------------------------------- GGUF


def _from_gguf(path: Path, eos_token_ids: list[int] | None) -> Tokenizer:
    try:
        # (only GGUF files need the reader, an optional reader that imports slowly)
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - gguf is a declared dependency
        raise TokenizerError("reading GGUF files needs the 'gguf' package") from exc
    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the reader raises bare ValueError/struct errors on malformed files
        raise TokenizerError(f"{path.name} is not a readable GGUF file: {exc}") from exc

    def field(key: str, default: Any = None) -> Any:
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    model = field("tokenizer.ggml.model")
    tokens = field("tokenizer.ggml.tokens")
    if model is None or tokens is None:
        raise TokenizerError(f"{path.name} has no tokenizer vocabulary (tokenizer.ggml.model/tokens)")
    token_types = field("tokenizer.ggml.token_type", [1] * len(tokens))
    eos = field("tokenizer.ggml.eos_token_id")
    # GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    control = {i for i, t in enumerate(token_types) if t in (2, 3, 5)}
    user_defined = {i for i, t in enumerate(token_types) if t == 4}
    if model == "gpt2":
        pre = field("tokenizer.ggml.pre", "default")  # llama.cpp reads a missing name as "default"
        if pre not in GGUF_PRE_TOKENIZERS:
            raise UnsupportedTokenizerError(
                f"{path.name}: GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; supported: "
                f"{', '.join(sorted(GGUF_PRE_TOKENIZERS))}")
        rules, ignore_merges = GGUF_PRE_TOKENIZERS[pre]
        vocab = {s: i for i, s in enumerate(tokens)}
        merges = field("tokenizer.ggml.merges", [])
        added = [_added_token(i, tokens[i], True) for i in sorted(control)]
        added += [_added_token(i, tokens[i], False) for i in sorted(user_defined)]
        data = {
            "model": {"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": ignore_merges},
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r.pattern}, "behavior": "Isolated", "invert": False} for r in rules
            ] + [{"type": "ByteLevel", "add_prefix_space": False, "use_regex": False, "trim_offsets": False}]},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False, "trim_offsets": False},
            "added_tokens": added,
        }
        return _from_json_dict(data, eos_token_ids if eos_token_ids is not None else ([eos] if eos is not None else None))
    if model == "llama":
        scores = field("tokenizer.ggml.scores")
        if scores is None:
            raise TokenizerError(f"{path.name}: SentencePiece-style GGUF vocabulary without scores")
        byte_fallback = any(t == 6 for t in token_types)
        return _from_pieces(list(tokens), list(scores), control, byte_fallback,
                            eos_token_ids if eos_token_ids is not None else ([eos] if eos is not None else None))
    if model == "gemma4":
        # SentencePiece-style BPE over raw UTF-8 with merges (Gemma 4): spaces written "▁" (llama.cpp's
        # escape_whitespaces), <0xNN> byte fallback, no dummy prefix; llama.cpp splits the text into runs of newlines
        # and runs of anything else before BPE. The split only concerns "\n", which the Replace normaliser leaves
        # alone, so it is added after reading (a Split regex after a Replace is refused in tokenizer.json in general).
        pre = field("tokenizer.ggml.pre", "gemma4")
        if pre not in ("gemma4", "default"):
            raise UnsupportedTokenizerError(f"{path.name}: GGUF pre-tokenizer {pre!r} for a gemma4 vocabulary is not "
                                            "supported")
        merges = field("tokenizer.ggml.merges")
        if merges is None:
            raise TokenizerError(f"{path.name}: gemma4 GGUF vocabulary without merges")
        data = {
            "model": {"type": "BPE", "vocab": {s: i for i, s in enumerate(tokens)}, "merges": merges,
                      "byte_fallback": any(t == 6 for t in token_types)},
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            "pre_tokenizer": None,
            "added_tokens": [_added_token(i, tokens[i], True) for i in sorted(control)]
                            + [_added_token(i, tokens[i], False) for i in sorted(user_defined)],
        }
        loaded = _from_json_dict(data, eos_token_ids if eos_token_ids is not None else ([eos] if eos is not None else None))
        return dataclasses.replace(loaded, pre_tokenizer=(SplitRule(r"[^\n]+|[\n]+"),))
    raise UnsupportedTokenizerError(f"{path.name}: GGUF tokenizer model {model!r} is not supported (supported: gpt2, "
                                    "llama, gemma4)")


# --------------------------------------------------------------------------------------------- SentencePiece


def _sentencepiece_merges(pieces: list[str], scores: list[float], skip: set[int]) -> list[list[str]]:
    """Merges of a SentencePiece BPE vocabulary, ordered as HF's converter orders them: by the merged
    piece's score (best first), ties by the ids of (left, right)."""
    vocab = {p: i for i, p in enumerate(pieces) if i not in skip}
    merges = []
    for piece, i in vocab.items():
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges.extend((scores[i], lr) for lr in local)
    merges.sort(key=lambda m: -m[0])  # stable: keeps the id order within one score
    return [list(lr) for _, lr in merges]


def _from_pieces(pieces: list[str], scores: list[float], control: set[int], byte_fallback: bool,
                 eos_token_ids: list[int] | None) -> Tokenizer:
    vocab = {p: i for i, p in enumerate(pieces)}
    data = {
        "model": {"type": "BPE", "vocab": vocab, "merges": _sentencepiece_merges(pieces, scores, control),
                  "byte_fallback": byte_fallback},
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "added_tokens": [_added_token(i, pieces[i], True) for i in sorted(control)],
    }
    return _from_json_dict(data, eos_token_ids)


def _from_sentencepiece(path: Path, eos_token_ids: list[int] | None) -> Tokenizer:
    try:
        # (only SentencePiece .model files need sentencepiece and protobuf)
        from sentencepiece import sentencepiece_model_pb2 as spm
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise TokenizerError("reading SentencePiece .model files needs 'sentencepiece' and 'protobuf'") from exc
    proto = spm.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as exc:  # protobuf raises DecodeError
        raise TokenizerError(f"{path.name} is not a SentencePiece model: {exc}") from exc
    if not proto.pieces:
        raise TokenizerError(f"{path.name} is not a SentencePiece model (no pieces)")
    if proto.trainer_spec.model_type != spm.TrainerSpec.BPE:
        kind = spm.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)
        raise UnsupportedTokenizerError(f"{path.name}: SentencePiece {kind} models are not BPE")
    norm = proto.normalizer_spec
    if norm.name not in ("identity", "") or norm.remove_extra_whitespaces:
        raise UnsupportedTokenizerError(
            f"{path.name}: SentencePiece normaliser {norm.name!r} (remove_extra_whitespaces="
            f"{norm.remove_extra_whitespaces}) is not supported"
        )
    pieces = [p.piece for p in proto.pieces]
    scores = [p.score for p in proto.pieces]
    kinds = spm.ModelProto.SentencePiece
    control = {i for i, p in enumerate(proto.pieces) if p.type in (kinds.CONTROL, kinds.UNKNOWN, kinds.UNUSED)}
    eos = eos_token_ids
    if eos is None and proto.trainer_spec.eos_id >= 0:
        eos = [proto.trainer_spec.eos_id]
    return _from_pieces(pieces, scores, control, bool(proto.trainer_spec.byte_fallback), eos)


# --------------------------------------------------------------------------------------------- runtime


def to_runtime_tokenizer(model: Tokenizer):
    """The HF ``tokenizers`` runtime for a model: same vocabulary, merges, normaliser and pre-tokenizer.

    Used where a format has no runtime of its own (a GGUF vocabulary). It encodes text the way the
    original tokenizer does for continuations; the dummy-prefix ``prepend`` step is left out.
    """
    if model.byte_level:
        encoder = bytes_to_unicode()
        spell = lambda b: "".join(encoder[x] for x in b)  # noqa: E731
    else:
        spell = None
    strings = [s if spell is None or b is None or i in model.added_token_ids else spell(b)
               for i, (s, b) in enumerate(zip(model.token_strings, model.token_bytes))]
    vocab = {s: i for i, s in enumerate(strings) if s is not None and i not in model.added_token_ids}
    merges = [[strings[a], strings[b]] for a, b, _ in model.merge_table.tolist()]
    normalizers = []
    for step in model.normalizer:
        if step[0] == "replace":
            normalizers.append({"type": "Replace", "pattern": {"String": step[1]}, "content": step[2]})
        elif step[0] == "lowercase":
            normalizers.append({"type": "Lowercase"})
        elif step[0] != "prepend":
            normalizers.append({"type": step[0].upper()})
    camel = {v: k for k, v in _BEHAVIORS.items() if k[0].isupper()}
    pre = [{"type": "Split", "pattern": {"Regex": r.pattern}, "behavior": camel[r.behavior], "invert": r.invert}
           for r in model.pre_tokenizer]
    if model.byte_level:
        pre.append({"type": "ByteLevel", "add_prefix_space": False, "use_regex": False, "trim_offsets": False})
    added = [_added_token(i, model.token_strings[i], i in model.special_token_ids)
             for i in sorted((model.special_token_ids - model.unreachable_token_ids) | model.added_token_ids)]
    data = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": normalizers} if normalizers else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre} if pre else None,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
        if model.byte_level else None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": model.byte_fallback,
                  "ignore_merges": model.ignore_merges, "vocab": vocab, "merges": merges},
    }
    return HFTokenizer.from_str(json.dumps(data))
