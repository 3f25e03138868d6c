"""Every published form of a BPE tokenizer: pre-tokenizers, normalisers, added tokens, EOS, the 200k+ vocabularies.

The oracle is always the HF ``tokenizers`` runtime built from the same tokenizer.json: variants are real
tokenizers (GPT-2, Mistral) whose JSON is rewritten into another form (a Split with another behaviour, Metaspace
instead of a Replace normaliser, plain-text added tokens...), and the runtime built from the rewritten JSON
decides what is canonical. Continuation mode as everywhere (no dummy prefix, no added BOS).
"""

from __future__ import annotations

import json
import random
import re
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from bpe import MissingEOSError, SplitRule, TokenizerError, UnsupportedTokenizerError, compile_tokenizer, load_tokenizer
from bpe.assets import (
    ASSETS,
    GGUF_BPE_VOCABS,
    GGUF_SPM_VOCABS,
    LARGE_TOKENIZERS,
    NATIVE_TOKENIZERS,
    TEXT_SAMPLES,
    asset_path,
    native_runtime,
    reference_runtime,
    tokenizer_source,
)
from bpe.loaders import GGUF_PRE_TOKENIZERS, to_runtime_tokenizer
from bpe.model import GPT2_PATTERN
from bpe.pretokenizer import build_segmentation
from bpe.unicode_classes import pre_tokenizer_class
from tests.bpe.forms import O200K_PATTERN, gpt2_json, load_pair, runtime_pieces

_BEHAVIORS = ("isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous")
_TRICKY = ["a", "B", "s", "'", "'S", "'ll", " ", "  ", "\n", "\r\n", "\t", "1", "23", "!", "$", "/", "é", "É", "中",
           "\u00a0", "\u2000", "ſ", "\u212a", "ǅ", "ʰ", "\u0301", "\u0903", "¹", "_", "😀", "▁", "，", "«", "…", "\x1c"]
# Any character, those this Python's Unicode calls unassigned included (the runtime's is newer: U+13440 is a mark
# there, unassigned in Python 3.11's Unicode 14); surrogates cannot be in text.
_text = st.lists(st.one_of(st.sampled_from(_TRICKY), st.characters(codec="utf-8", exclude_categories=("Cs",))),
                 max_size=16).map("".join)
# The classes the loaders give the Digits and Punctuation pre-tokenizers (their members, read from the runtime).
_DIGITS, _PUNCTUATION = pre_tokenizer_class("Digits"), pre_tokenizer_class("Punctuation")


def _real_texts(limit: int = 3000) -> list[str]:
    texts = [asset_path(name).read_text(encoding="utf-8")[:limit] for name in TEXT_SAMPLES]
    texts += asset_path("gguf/ggml-vocab-llama-bpe.gguf.inp").read_text(encoding="utf-8").split(
        "\n__ggml_vocab_test__\n")
    return texts


# -- pre-tokenizer boundaries, every behaviour ----------------------------------------------------------------

_SEGMENTATIONS: dict = {}


def _segmentation(rules):
    if rules not in _SEGMENTATIONS:
        _SEGMENTATIONS[rules] = build_segmentation(rules)
    return _SEGMENTATIONS[rules]


@pytest.mark.parametrize("pattern", [O200K_PATTERN, GPT2_PATTERN, " ", r"\p{N}", _DIGITS, _PUNCTUATION, "▁",
                                     r"\s+$", r"[一-龥ࠀ-一가-퟿，]+"],
                         ids=["o200k", "gpt2", "space", "digit", "digits_class", "punct", "metaspace", "end_anchor",
                              "cjk_ranges"])
@pytest.mark.parametrize("behavior", _BEHAVIORS)
@pytest.mark.parametrize("invert", [False, True])
def test_split_boundaries_equal_the_runtime_for_every_behaviour(pattern, behavior, invert):
    """The marked-text DFA draws the runtime's pieces, and refuses exactly the texts the runtime removes part of."""
    segmentation = _segmentation((SplitRule(pattern, behavior, invert),))
    pre = pre_tokenizers.Split(Regex(pattern), behavior, invert=invert)
    rng = random.Random(hash((pattern, behavior, invert)) & 0xFFFF)
    texts = ["".join(rng.choice(_TRICKY) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    texts += [t[:400] for t in _real_texts()[:12]]
    for text in texts:
        assert segmentation.marks(text) == runtime_pieces(pre, text), (repr(text), behavior, invert)


_SEQUENCES = {
    "o200k_removed_invert": ((SplitRule(O200K_PATTERN, "removed", True),),
                             [pre_tokenizers.Split(Regex(O200K_PATTERN), "removed", invert=True)]),
    "digits_punct_gpt2": ((SplitRule(_DIGITS, "isolated"), SplitRule(_PUNCTUATION, "contiguous"),
                           SplitRule(GPT2_PATTERN)),
                          [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Punctuation("contiguous"),
                           pre_tokenizers.Split(Regex(GPT2_PATTERN), "isolated")]),
    "space_prev_then_ws_next_inverted": ((SplitRule(" ", "merged_with_previous"),
                                          SplitRule(r"\s+", "merged_with_next", True)),
                                         [pre_tokenizers.Split(" ", "merged_with_previous"),
                                          pre_tokenizers.Split(Regex(r"\s+"), "merged_with_next", invert=True)]),
}


@pytest.mark.parametrize("name", sorted(_SEQUENCES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_text)
def test_sequences_of_splits_on_adversarial_strings(name, text):
    rules, pres = _SEQUENCES[name]
    assert _segmentation(rules).marks(text) == (runtime_pieces(pre_tokenizers.Sequence(pres), text) if text else [])


def test_removed_invert_is_the_isolated_form_when_the_pattern_matches_everything():
    """cl100k/o200k conversions write the regex as Split(Removed, invert): the same boundaries as Isolated."""
    for pattern in (O200K_PATTERN, GPT2_PATTERN):
        a = build_segmentation((SplitRule(pattern, "removed", True),))
        b = build_segmentation((SplitRule(pattern, "isolated"),))
        assert np.array_equal(a.transitions, b.transitions) and np.array_equal(a.final, b.final)


@pytest.mark.parametrize("pattern,message", [
    (r"a(?=b)c", "lookaround other than a final one-character lookahead"),
    (r"(?<=a)b", "lookaround other than a final one-character lookahead"),
    (r"^\s+", r"anchors other than a final \$"),
    (r"\s+$|a$b", r"anchors other than a final \$"),
    (r"[\p{L}&&[^a]]+", "nested classes and intersections"),
    (r"(?i:é)", r"non-ASCII characters inside \(\?i:"),
    (r"\w+", r"escape '\\\\w'"),
    (r"\p{NoSuchScript}+", r"class \\p\{NoSuchScript\}"),
    (r"[z-a]", "is empty"),
    ("".join(chr(0x4E00 + k) for k in range(4000)), r"into \d+ symbols \(at most 4096\)"),
], ids=["lookahead_inside", "lookbehind", "start_anchor", "end_anchor_inside", "intersection", "folded_non_ascii",
        "word_escape", "script_class", "empty_range", "too_many_symbols"])
def test_patterns_outside_the_model_are_refused_by_name(pattern, message):
    with pytest.raises(UnsupportedTokenizerError, match=message):
        build_segmentation((SplitRule(pattern),))


# -- real tokenizers rewritten into other forms ------------------------------------------------------------------


def _mistral_json() -> dict:
    data = json.loads(tokenizer_source("mistral").read_text(encoding="utf-8"))
    data["decoder"]["decoders"] = [d for d in data["decoder"]["decoders"] if d["type"] != "Strip"]
    return data


def _byte_level(use_regex: bool = False, add_prefix_space: bool = False) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def _split(pattern: str, behavior: str, invert: bool = False, regex: bool = True) -> dict:
    return {"type": "Split", "pattern": {"Regex" if regex else "String": pattern}, "behavior": behavior,
            "invert": invert}


def _respellings(model, ids, rng, count):
    split_of = {int(c): (int(a), int(b)) for a, b, c in model.merge_table.tolist()}
    by_bytes = {b: i for i, b in enumerate(model.token_bytes)
                if b is not None and i not in model.special_token_ids and i not in model.added_token_ids}
    out = []
    for _ in range(count * 4 if ids else 0):
        i = rng.randrange(len(ids))
        if rng.random() < 0.5 and ids[i] in split_of:
            # Splitting an added token spells its text with other tokens: the documented corner (see _assert_exact).
            out.append((ids[:i] + list(split_of[ids[i]]) + ids[i + 1:], ids[i] in model.added_token_ids))
        elif i + 1 < len(ids) and model.token_bytes[ids[i]] is not None and model.token_bytes[ids[i + 1]] is not None:
            fused = by_bytes.get(model.token_bytes[ids[i]] + model.token_bytes[ids[i + 1]])
            if fused is not None:
                out.append((ids[:i] + [fused] + ids[i + 2:], False))
        if len(out) == count:
            break
    return out


def _assert_exact(model, runtime, texts, *, respellings: int = 6, min_tokens: int = 5_000, report=None):
    """Runtime encodings are accepted; respellings are accepted exactly when the runtime says canonical, except the
    documented corner: an added token's text spelled by other tokens (Gemma 3's "\n\n" as "\n" "\n", both added
    tokens) is allowed. ``report`` (a dict) receives the counts."""
    automaton = compile_tokenizer(model)
    rng = random.Random(5)
    total, judged, corner, corner_allowed = 0, 0, 0, 0
    for text in texts:
        ids = runtime.encode(text, add_special_tokens=False).ids
        assert automaton.accepts(ids), text[:120]
        total += len(ids)
        for new, spells_added in _respellings(model, ids[:150], rng, respellings):
            canonical = runtime.encode(runtime.decode(new, skip_special_tokens=False),
                                       add_special_tokens=False).ids == new
            accepted = automaton.accepts(new)
            if spells_added:
                assert accepted or not canonical, new
                corner += 1
                corner_allowed += accepted and not canonical
                continue
            assert accepted == canonical, (new, canonical)
            judged += not canonical
    assert total >= min_tokens and judged >= 20, (total, judged)
    if report is not None:
        report.update(tokens=total, judged=judged, added_respellings=corner, added_over_allowed=corner_allowed)
    return automaton


_VARIANTS = {
    # o200k/cl100k conversions' form, on GPT-2: the regex as Split(Removed, invert) then ByteLevel(no regex).
    "removed_invert": [_split(GPT2_PATTERN, "Removed", True), _byte_level()],
    # Splits with merging behaviours, and Digits / Punctuation pre-tokenizers, before GPT-2's regex.
    "space_merged_with_next": [_split(" ", "MergedWithNext", regex=False), _byte_level()],
    "punct_merged_with_previous": [{"type": "Punctuation", "behavior": "MergedWithPrevious"}, _byte_level()],
    "digits_contiguous_punct": [{"type": "Digits", "individual_digits": False},
                                {"type": "Punctuation", "behavior": "Contiguous"}, _byte_level(use_regex=True)],
    "inverted_words_isolated": [_split(r"\p{L}+", "Isolated", True), _byte_level()],
}


@pytest.mark.parametrize("variant", sorted(_VARIANTS))
def test_gpt2_rewritten_pre_tokenizers_are_exact(variant, tmp_path):
    data = gpt2_json()
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": _VARIANTS[variant]}
    model, runtime = load_pair(data, tmp_path)
    texts = _real_texts()
    automaton = _assert_exact(model, runtime, texts[::2])
    if variant == "removed_invert":  # the same boundaries as GPT-2's own form, so the same automaton
        original = compile_tokenizer(load_tokenizer(tokenizer_source("gpt2")))
        assert np.array_equal(automaton.boundary_next, original.boundary_next)
        assert np.array_equal(automaton.inside_next, original.inside_next)


def test_removed_text_is_never_allowed(tmp_path):
    """Split(" ", Removed) drops spaces: no token sequence that decodes to a space is canonical."""
    data = gpt2_json()
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [_split(" ", "Removed", regex=False), _byte_level()]}
    model, runtime = load_pair(data, tmp_path)
    automaton = compile_tokenizer(model)
    spaced = [t for t, b in enumerate(model.token_bytes) if b and b" " in b]
    assert len(spaced) > 1000
    allowed = automaton.allowed_after(automaton.start_class)
    assert not allowed[spaced].any()
    ids = runtime.encode("Hello world, it's me", add_special_tokens=False).ids  # the runtime drops the spaces
    assert b"".join(model.token_bytes[i] for i in ids) == b"Helloworld,it'sme"
    assert automaton.accepts(ids) == (runtime.encode("Helloworld,it'sme", add_special_tokens=False).ids == ids)
    _assert_exact(model, runtime, [t.replace(" ", "") for t in _real_texts()[::3]], min_tokens=3_000)


def test_a_regex_naming_many_characters_takes_a_wider_symbol_table(tmp_path):
    """250 characters written one by one refine the alphabet into 390 symbols: the symbol table turns uint16
    (the automaton marks unread code points with the largest id), and GPT-2 under the regex is still exact."""
    chars = [chr(0x4E00 + k) for k in range(250)]
    data = gpt2_json()
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        _split("(?:" + "|".join(chars) + ")+", "Isolated"), _byte_level()]}
    model, runtime = load_pair(data, tmp_path)
    assert build_segmentation(model.pre_tokenizer).symbols.dtype == np.uint16
    rng = random.Random(3)
    texts = [text[:1500] + "".join(rng.choice(chars + [" ", "中文", "a", "\n"]) for _ in range(300))
             for text in _real_texts()[::3]]
    _assert_exact(model, runtime, texts, min_tokens=3_000)


@pytest.mark.parametrize("scheme,split", [("never", True), ("never", False), ("always", True), ("first", False)])
def test_mistral_with_metaspace_is_exact(scheme, split, tmp_path):
    """Mistral's Prepend+Replace normaliser rewritten as a Metaspace pre-tokenizer (split or not). The prefix
    schemes add the dummy prefix, which continuation mode leaves out: the oracle runs with prepend_scheme=never."""
    data = _mistral_json()
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
    model, _ = load_pair(data, tmp_path)
    oracle = dict(data, pre_tokenizer=dict(data["pre_tokenizer"], prepend_scheme="never"))
    _, runtime = load_pair(oracle, tmp_path, "oracle.json")
    # Split on "▁" in the normalised text: on a space or a "▁" in the text as decoded.
    assert model.pre_tokenizer == ((SplitRule(r"[\ ▁]", "merged_with_next"),) if split else ())
    assert model.token_bytes == load_tokenizer(tokenizer_source("mistral")).token_bytes
    _assert_exact(model, runtime, _real_texts()[1::3], min_tokens=3_000)


def test_normalisers_lowercase_and_nfkc_are_exact(tmp_path):
    data = gpt2_json()
    data["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    model, runtime = load_pair(data, tmp_path)
    assert model.normalizer == (("nfkc",), ("lowercase",))
    automaton = _assert_exact(model, runtime, [t.lower() for t in _real_texts()[::3]], min_tokens=3_000)
    upper = [t for t, b in enumerate(model.token_bytes) if b and b.decode("utf-8", "replace") != b.decode(
        "utf-8", "replace").lower()]
    assert len(upper) > 5000 and not automaton.allowed_after(automaton.start_class)[upper].any()


def test_normaliser_strip_and_unknown_forms_are_refused_by_name(tmp_path):
    data = gpt2_json()
    for normalizer, name in (({"type": "Strip", "strip_left": True, "strip_right": True}, "'Strip'"),
                             ({"type": "Precompiled", "precompiled_charsmap": ""}, "'Precompiled'"),
                             ({"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}, "regex pattern")):
        data["normalizer"] = normalizer
        with pytest.raises(UnsupportedTokenizerError, match=name):
            load_pair(data, tmp_path)
    data["normalizer"] = None
    for pre, name in (({"type": "Whitespace"}, "'Whitespace'"), ({"type": "UnicodeScripts"}, "'UnicodeScripts'"),
                      ({"type": "FixedLength", "length": 5}, "'FixedLength'"),
                      (_split(r"\w+", "Isolated"), r"\\w"),
                      (_split(r"a", "Sideways"), "'Sideways'")):
        data["pre_tokenizer"] = pre
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        with pytest.raises(UnsupportedTokenizerError, match=name):
            compile_tokenizer(load_tokenizer(path), tmp_path / "cache")


def test_wordpiece_and_unigram_files_are_refused_by_name(tmp_path):
    wordpiece = HFTokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    unigram = HFTokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0)], 0))
    for runtime, kind in ((wordpiece, "WordPiece"), (unigram, "Unigram")):
        path = tmp_path / f"{kind}.json"
        runtime.save(str(path))
        with pytest.raises(UnsupportedTokenizerError, match=f"{kind} models are not supported"):
            load_tokenizer(path)
        with pytest.raises(UnsupportedTokenizerError, match=kind):
            load_tokenizer(runtime)


# -- added tokens ----------------------------------------------------------------------------------------------


def _added(token_id: int, content: str, special: bool, **flags) -> dict:
    return {"id": token_id, "content": content, "special": special, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": not special, **flags}


def test_added_tokens_in_every_form(tmp_path):
    """Special and not, inside the vocabulary and outside, plain text (non-ASCII) and byte-level spellings."""
    data = gpt2_json()
    n = len(data["model"]["vocab"])
    data["added_tokens"] += [
        _added(n, "<｜end▁of▁sentence｜>", True),      # plain-text, non-ASCII, special (DeepSeek-style)
        _added(n + 1, "<｜tool▁call｜>", False),       # plain-text, non-ASCII, not special
        _added(n + 2, "<tool>", False),                 # ASCII, not special
        _added(n + 3, " worldwide peace", False),      # spaces inside, not in the byte alphabet
        _added(n + 4, "ü", False, normalized=False),   # in the byte alphabet: decodes to byte 0xFC, never text
        _added(data["model"]["vocab"]["ĊĊ"], "ĊĊ", False),  # in the vocabulary, byte-level spelling
        _added(data["model"]["vocab"]["tion"], "tion", False),  # in the vocabulary, matched whole (Gemma's "\n\n")
    ]
    model, runtime = load_pair(data, tmp_path)
    assert model.vocab_size == n + 5
    for i, b in enumerate(model.token_bytes):
        if b is not None:
            assert runtime.decode([i], skip_special_tokens=False) == b.decode("utf-8", "replace"), i
    assert model.token_bytes[n] is None and n in model.special_token_ids
    assert model.token_bytes[n + 1] == "<｜tool▁call｜>".encode() and n + 1 in model.added_token_ids
    assert n + 4 in model.special_token_ids  # never comes back from its own text
    assert data["model"]["vocab"]["ĊĊ"] not in model.added_token_ids  # keeps its BPE role
    tion = data["model"]["vocab"]["tion"]
    assert tion in model.added_token_ids
    assert model.eos_token_ids == (data["model"]["vocab"]["<|endoftext|>"],)
    texts = [t.replace("the", "<｜tool▁call｜>").replace("and", "<tool>").replace(" world", " worldwide peace")
             for t in _real_texts()[::3]]
    automaton = _assert_exact(model, runtime, texts, min_tokens=3_000)
    encoded = runtime.encode("a<｜tool▁call｜>b<tool> worldwide peace\n\n", add_special_tokens=False).ids
    assert {n + 1, n + 2, n + 3} <= set(encoded) and automaton.accepts(encoded)
    # Tokens holding an added token's text ("ĠnaTION", "tions") are never produced: the runtime cuts it out first.
    holding = [t for t, b in enumerate(model.token_bytes) if b and b"tion" in b and t != tion]
    assert len(holding) > 100 and not any(runtime.encode(model.token_bytes[t].decode(), add_special_tokens=False).ids
                                          == [t] for t in holding[:50])
    for c in range(automaton.num_open_contexts):
        assert not automaton.allowed_after(c * automaton.num_merge_classes)[holding].any()


def test_non_ascii_added_token_content_loads_for_byte_level_vocabularies(tmp_path):
    """Issue 18's second failure: a plain-text added token on a byte-level vocabulary used to fail to load."""
    data = json.loads(tokenizer_source("qwen3").read_text(encoding="utf-8"))
    data["added_tokens"].append(_added(max(a["id"] for a in data["added_tokens"]) + 1, "<｜place▁holder｜>", False))
    model, runtime = load_pair(data, tmp_path)
    i = model.vocab_size - 1
    assert model.token_bytes[i] == "<｜place▁holder｜>".encode() and runtime.decode([i]) == "<｜place▁holder｜>"


# -- EOS -------------------------------------------------------------------------------------------------------


def test_eos_from_the_files_beside_the_tokenizer(tmp_path):
    shutil.copy(tokenizer_source("mistral"), tmp_path / "tokenizer.json")
    assert load_tokenizer(tmp_path).eos_token_ids == (2,)  # "</s>" by name
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    assert load_tokenizer(tmp_path).eos_token_ids == (1,)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<unk>"}}))
    assert load_tokenizer(tmp_path / "tokenizer.json").eos_token_ids == (0,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 1]}))
    assert load_tokenizer(tmp_path).eos_token_ids == (2, 1)
    assert load_tokenizer(tmp_path, eos_token_ids=[7]).eos_token_ids == (7,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 10**9}))
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        load_tokenizer(tmp_path)
    (tmp_path / "generation_config.json").write_text("{")
    with pytest.raises(TokenizerError, match="not valid JSON"):
        load_tokenizer(tmp_path)
    # The pinned o200k/gpt-oss/Gemma 3 tokenizers name their EOS only in tokenizer_config.json.
    assert load_tokenizer(tokenizer_source("gemma3")).eos_token_ids == (106,)  # <end_of_turn>
    assert load_tokenizer(tokenizer_source("gptoss")).eos_token_ids == (200002,)  # <|return|>
    assert load_tokenizer(tokenizer_source("llama3_1")).eos_token_ids == (128009,)  # <|eot_id|>
    assert load_tokenizer(tokenizer_source("gemma")).eos_token_ids == (1,)  # <eos>


@pytest.mark.parametrize("name,token", [("<end_of_turn>", "<end_of_turn>"), ("<｜end▁of▁sentence｜>", None),
                                        ("<|return|>", None), ("<EOT>", None), ("<|im_end|>", None)])
def test_eos_guessed_from_a_wider_list_of_names(name, token, tmp_path):
    data = gpt2_json()
    n = len(data["model"]["vocab"])
    data["added_tokens"] = [_added(n, "<pad>", True), _added(n + 1, name, True)]
    model, _ = load_pair(data, tmp_path)
    assert model.eos_token_ids == (n + 1,)


def test_no_eos_is_a_typed_error_asking_for_eos_token_ids(tmp_path):
    from product import compile_regex

    data = gpt2_json()
    data["added_tokens"] = [_added(50256, "<|mystery|>", True)]
    data["model"]["vocab"]["<|mystery|>"] = data["model"]["vocab"].pop("<|endoftext|>")
    model, _ = load_pair(data, tmp_path)
    assert model.eos_token_ids == ()
    automaton = compile_tokenizer(model)
    with pytest.raises(MissingEOSError, match="eos_token_ids="):
        compile_regex("[ab]+", automaton)
    guide = compile_regex("[ab]+", automaton, eos_token_ids=[50256])
    assert guide.eos_token_ids == (50256,)
    with_eos = compile_tokenizer(model, eos_token_ids=[50256])
    assert list(with_eos.eos_token_ids) == [50256] and compile_regex("[ab]+", with_eos).eos_token_ids == (50256,)
    assert list(compile_tokenizer(tmp_path / "tokenizer.json", eos_token_ids=[3]).eos_token_ids) == [3]
    with pytest.raises(TypeError):
        compile_regex("a", automaton, eos_token_ids=50256)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        compile_regex("a", automaton, eos_token_ids=[10**7])


# -- the 200k+ vocabularies --------------------------------------------------------------------------------------

_LARGE = {}


def _large(name):
    if name not in _LARGE:
        _LARGE[name] = (load_tokenizer(tokenizer_source(name)), reference_runtime(name))
    return _LARGE[name]


@pytest.mark.parametrize("name", LARGE_TOKENIZERS)
def test_large_tokenizers_token_bytes_equal_the_runtime(name):
    model, runtime = _large(name)
    assert model.vocab_size == 1 + max(runtime.get_vocab(with_added_tokens=True).values())
    mismatches = [i for i, b in enumerate(model.token_bytes)
                  if b is not None and runtime.decode([i], skip_special_tokens=False) != b.decode("utf-8", "replace")]
    assert mismatches == []
    text = "Grüße, 世界! naïve café — 😀🎉 x=1234567; \n\tdef f(a, b):\n        return a ≤ b  \n"
    assert b"".join(model.token_bytes[i] for i in runtime.encode(text, add_special_tokens=False).ids) == text.encode()


def test_o200k_is_exact_on_real_text():
    model, runtime = _large("o200k")
    assert model.pre_tokenizer == (SplitRule(O200K_PATTERN, "removed", True),)
    _assert_exact(model, runtime, _real_texts(20_000), min_tokens=100_000)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in LARGE_TOKENIZERS if n != "o200k"])
def test_large_tokenizers_are_exact_on_real_text(name):
    model, runtime = _large(name)
    report: dict = {}
    _assert_exact(model, runtime, _real_texts(20_000), min_tokens=100_000, report=report)
    print(name, report)


# -- formats with a runtime of their own: cl100k's tiktoken file, Mistral's Tekken JSON ---------------------------


class _NativeRuntime:
    """The two calls ``_assert_exact`` makes, answered by a format's own runtime (``bpe.assets.native_runtime``):
    tiktoken's ``cl100k_base`` encoding, mistral-common's ``Tekkenizer``."""

    def __init__(self, name: str):
        self.name, self.runtime = name, native_runtime(name)

    def encode(self, text: str, add_special_tokens: bool = False):
        if self.name == "tekken":
            ids = self.runtime.encode(text, bos=False, eos=False)
        else:
            ids = self.runtime.encode_ordinary(text)
        return type("Encoding", (), {"ids": ids})

    def token_bytes(self, i: int) -> bytes:
        if self.name == "tekken":
            return self.runtime._model.decode_single_token_bytes(i - self.runtime.num_special_tokens)
        return self.runtime.decode_single_token_bytes(i)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


_NATIVE = {}


def _native(name):
    if name not in _NATIVE:
        model = load_tokenizer(tokenizer_source(name))
        _NATIVE[name] = (model, _NativeRuntime(name), to_runtime_tokenizer(model))  # = reference_runtime(name)
    return _NATIVE[name]


@pytest.mark.parametrize("name", NATIVE_TOKENIZERS)
def test_native_formats_token_bytes_and_encodings_equal_their_own_runtime(name):
    """Every regular id's bytes are the runtime's; every token's text, and real text, encodes the same in the
    format's own runtime (tiktoken / mistral-common) and in the tokenizers runtime built from the loaded model."""
    model, native, built = _native(name)
    regular = [i for i, b in enumerate(model.token_bytes) if b is not None]
    assert len(regular) == {"cl100k": 100_256, "tekken": 130_072}[name]
    assert all(native.token_bytes(i) == model.token_bytes[i] for i in regular)
    as_text = [b.decode() for b in (model.token_bytes[i] for i in regular) if _utf8(b)]
    assert len(as_text) > 95_000
    assert [native.encode(t).ids for t in as_text] == [e.ids for e in built.encode_batch(as_text, add_special_tokens=False)]
    for text in _real_texts(20_000):
        assert native.encode(text).ids == built.encode(text, add_special_tokens=False).ids, text[:80]


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_cl100k_specials_and_eos():
    model, native, _ = _native("cl100k")
    assert model.vocab_size == native.runtime.n_vocab == 100_277
    assert model.eos_token_ids == (native.runtime.eot_token,) == (100257,)
    assert {model.token_strings[i]: i for i in model.special_token_ids} == native.runtime._special_tokens
    assert model.pre_tokenizer[0].behavior == "isolated" and "(?!\\S)" in model.pre_tokenizer[0].pattern


def test_tekken_special_tokens_take_the_first_ids():
    model, native, _ = _native("tekken")
    tekkenizer = native.runtime
    assert model.vocab_size == tekkenizer.n_words == 131_072
    assert model.special_token_ids == frozenset(range(tekkenizer.num_special_tokens)) == frozenset(range(1000))
    assert [model.token_strings[i] for i in range(1000)] == [tekkenizer.id_to_piece(i) for i in range(1000)]
    assert model.eos_token_ids == (tekkenizer.eos_id,) == (2,)
    assert model.ignore_merges and model.pre_tokenizer == (SplitRule(tekkenizer._model._pat_str),)
    # The older file holds the same vocabulary and regex (240911 adds an image section).
    older = load_tokenizer(asset_path("tekken/tekken_240718.json"))
    assert older.token_bytes == model.token_bytes and older.pre_tokenizer == model.pre_tokenizer


@pytest.mark.parametrize("name,chars,tokens", [*((n, 6_000, 40_000) for n in NATIVE_TOKENIZERS),
                                                *(pytest.param(n, 20_000, 100_000, marks=pytest.mark.slow)
                                                  for n in NATIVE_TOKENIZERS)])
def test_native_formats_are_exact_on_real_text(name, chars, tokens):
    """The format's own runtime is the oracle: its encodings of real text are accepted, respellings accepted
    exactly when it says canonical (40k+ tokens by default, 100k+ under -m slow)."""
    model, native, _ = _native(name)
    report: dict = {}
    _assert_exact(model, native, _real_texts(chars), min_tokens=tokens, report=report)
    assert report["added_respellings"] == 0
    print(name, report)


def test_malformed_tekken_files_are_typed_errors_naming_the_problem(tmp_path):
    good = json.loads(tokenizer_source("tekken").read_text(encoding="utf-8"))
    path = tmp_path / "tekken.json"

    def load(data):
        path.write_text(json.dumps(data), encoding="utf-8")
        return load_tokenizer(path)

    small = dict(good, vocab=good["vocab"][:300], config=dict(good["config"], default_vocab_size=1300))
    assert load(small).vocab_size == 1300
    cases = [
        (dict(small, config={k: v for k, v in small["config"].items() if k != "pattern"}), "'pattern'"),
        (dict(small, config=dict(small["config"], default_vocab_size=5000)), "cannot fill default_vocab_size=5000"),
        (dict(small, vocab=small["vocab"][:5] + [dict(small["vocab"][5], rank=9)] + small["vocab"][6:]),
         "entry 5.*rank 9"),
        (dict(small, vocab=small["vocab"][:7] + [dict(small["vocab"][7], token_bytes="***")] + small["vocab"][8:]),
         "entry 7"),
        (dict(small, vocab=small["vocab"][:8] + [small["vocab"][3] | {"rank": 8}] + small["vocab"][9:]), "twice"),
        (dict(small, special_tokens=[{"rank": 1, "token_str": "<s>", "is_control": True}]), "special_tokens"),
        (dict(small, vocab=small["vocab"][:299] + [{"rank": 299, "token_bytes": "eHl6enk=", "token_str": "xyzzy"}]),
         "cannot be produced by merging"),
    ]
    for data, message in cases:
        with pytest.raises(TokenizerError, match=message):
            load(data)
    with_specials = dict(small, special_tokens=[{"rank": 0, "token_str": "<unk>", "is_control": True},
                                                {"rank": 1, "token_str": "<|end|>", "is_control": True}])
    loaded = load(with_specials)
    assert loaded.token_strings[1] == "<|end|>" and loaded.token_strings[2] == "<SPECIAL_2>"
    assert loaded.eos_token_ids == (1,)  # no "</s>": the list of names
    bad_regex = dict(small, config=dict(small["config"], pattern=r"\w+(?<=x)"))
    with pytest.raises(UnsupportedTokenizerError):
        compile_tokenizer(load(bad_regex), tmp_path / "cache")


# -- GGUF vocabularies: every BPE pre-tokenizer name llama.cpp's vocab files use -----------------------------------

_GGUF_GOLDEN = [v for v in GGUF_BPE_VOCABS if f"gguf/ggml-vocab-{v}.gguf.inp" in ASSETS]
_GGUF_LARGE = {"command-r", "qwen35", "qwen2", "llama-bpe", "deepseek-llm", "gemma-4"}  # 100k+ tokens: -m slow


def _golden(vocab: str) -> list[tuple[str, list[int]]]:
    inputs = asset_path(f"gguf/ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    outputs = asset_path(f"gguf/ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8").split("\n")
    return [(text, [int(x) for x in line.split()]) for text, line in zip(inputs, outputs[:-1])]


@pytest.mark.parametrize("vocab", [v if v not in _GGUF_LARGE else pytest.param(v, marks=pytest.mark.slow)
                                   for v in _GGUF_GOLDEN + list(GGUF_SPM_VOCABS)])
def test_gguf_golden_tokenizations_are_reproduced_and_accepted(vocab, tmp_path):
    """llama.cpp's golden tokenizations (made with each model's own HF tokenizer) are what the runtime built from the
    GGUF vocabulary and its tokenizer.ggml.pre regexes produces, and the canonical automaton accepts each one.
    SentencePiece-style vocabularies with a dummy prefix (llama-spm, phi-3): the golden ids carry it, continuation
    mode leaves it out; under the Replace(" ", "▁") normaliser it is a leading space, so " " + text is encoded.
    Gemma 4 (tokenizer.ggml.model gemma4) has none."""
    model = load_tokenizer(asset_path(f"gguf/ggml-vocab-{vocab}.gguf"))
    runtime = to_runtime_tokenizer(model)
    golden = _golden(vocab)
    assert len(golden) >= 40
    prefix = " " if vocab in ("llama-spm", "phi-3") else ""
    if vocab == "gemma-4":  # llama.cpp splits runs of newlines from the rest; spaces are "▁"; byte fallback
        assert model.pre_tokenizer == (SplitRule(r"[^\n]+|[\n]+"),) and model.byte_fallback
        assert model.normalizer == (("replace", " ", "▁"),) and model.eos_token_ids == (1,)
    for text, ids in golden:
        assert runtime.encode(prefix + text if text else text, add_special_tokens=False).ids == ids, text
    automaton = compile_tokenizer(model)
    for text, ids in golden:
        assert automaton.accepts(ids), text



# Text in the scripts DeepSeek's regexes name by range (CJK ideographs, U+0800..U+4E00 with kana and CJK
# punctuation, Hangul) or by full-width punctuation, mixed with Latin, Greek, Cyrillic, code and digits.
_MIXED_SCRIPT_TEXTS = [
    "深度求索（DeepSeek）发布了新的代码模型：它支持中文、英文和多种编程语言！用户可以通过ＡＰＩ调用，"
    "价格为每百万字１２３元。“你好，世界”——这是第一个程序。",
    "안녕하세요! 오늘은 날씨가 좋습니다. 한국어 텍스트와 English words가 섞여 있습니다: 가격은 12,345원입니다.\n"
    "서울특별시 종로구 세종대로 209 (2024년 12월 31일)",
    "東京は日本の首都です。カタカナとひらがなを混ぜた文章：「コード」を書きましょう！　ｗｗｗ",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Αριθμοί: 42, 3.14159.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю! Цена: 1 234 руб.",
    "def 计算(x: int) -> int:\n    # 返回平方值（整数）\n    return x ** 2  # 结果\n\nprint(计算(１２))  // 全角数字\n",
    "ＦＵＬＬ　ＷＩＤＴＨ：！＂＃＄％＆＇（）＊＋，－．／０１２３４５６７８９：；＜＝＞？＠［＼］＾＿｀｛｜｝～",
    "Mixed 中文English한국어Ελληνικά Русский ２０２４年１２月３１日 — 【注意】请勿“复制”‘粘贴’。\r\n\t  ",
    "for (int i = 0; i < 10; ++i) { printf(\"第%d行：%s\\n\", i, 名字[i]); }  /* 주석 */",
]


@pytest.mark.parametrize("name", ["deepseek-coder", "deepseek-llm"])
def test_deepseek_boundaries_equal_the_runtime_at_the_edges_of_every_named_range(name):
    """The symbols split the categories at every end of every non-ASCII range the regexes write: strings of the
    characters at and beside those ends (and whitespace, for deepseek-llm's final $) get the runtime's pieces."""
    rules = GGUF_PRE_TOKENIZERS[name][0]
    segmentation = _segmentation(rules)
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(rule.pattern), "isolated") for rule in rules])
    ends = {ord(c) for rule in rules for pair in re.findall(r"([^\\])-([^\]])", rule.pattern) for c in pair}
    edges = sorted(chr(c + d) for c in ends if c >= 128 for d in (-1, 0, 1) if not 0xD800 <= c + d < 0xE000)
    assert len(edges) >= {"deepseek-coder": 10, "deepseek-llm": 300}[name]
    alphabet = edges + ["a", "1", "!", " ", "  ", "\n", "\r", "\t", "\u3000", "\u00a0", "中", "한"]
    rng = random.Random(11)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    texts += [t[:1000] for t in _real_texts()] + _MIXED_SCRIPT_TEXTS
    for text in texts:
        assert segmentation.marks(text) == runtime_pieces(pre, text), repr(text)


@pytest.mark.parametrize("vocab", ["deepseek-coder", pytest.param("deepseek-llm", marks=pytest.mark.slow)])
def test_deepseek_pre_tokenizers_are_exact_on_mixed_script_text(vocab):
    """DeepSeek's regexes name non-ASCII ranges (CJK, Hangul, full-width punctuation; deepseek-llm also 160
    letter ranges and a final $). The runtime's encodings of text in those scripts are accepted, and respellings
    of them (a token split into its merge operands, two tokens fused into one) are accepted exactly when the
    runtime produces them: most are not, and are rejected."""
    model = load_tokenizer(asset_path(f"gguf/ggml-vocab-{vocab}.gguf"))
    runtime = to_runtime_tokenizer(model)
    report: dict = {}
    _assert_exact(model, runtime, _MIXED_SCRIPT_TEXTS, respellings=40, min_tokens=500, report=report)
    assert report["judged"] >= 150, report
    _assert_exact(model, runtime, _real_texts(), min_tokens=20_000)


def test_gguf_plain_text_vocabulary_tokens_are_never_produced():
    """Command-R's GGUF holds 1,403 regular tokens spelled as plain text (emoji) that byte-level BPE never reaches:
    never allowed, and plain vocabulary entries (not added tokens) in the runtime built from the model."""
    model = load_tokenizer(asset_path("gguf/ggml-vocab-command-r.gguf"))
    assert len(model.unreachable_token_ids) == 1403 and model.unreachable_token_ids <= model.special_token_ids
    runtime = to_runtime_tokenizer(model)
    llama = model.token_strings.index("🦙")
    assert llama in model.unreachable_token_ids and llama not in runtime.encode(" 🦙🦙", add_special_tokens=False).ids


def test_gguf_pre_tokenizer_names_map_to_llama_cpp_regexes_and_unknown_names_are_refused(tmp_path):
    from gguf import GGUFWriter

    starcoder = load_tokenizer(asset_path("gguf/ggml-vocab-starcoder.gguf"))
    assert [r.pattern for r in starcoder.pre_tokenizer] == [r"\p{N}", GPT2_PATTERN]
    falcon = load_tokenizer(asset_path("gguf/ggml-vocab-falcon.gguf"))
    assert len(falcon.pre_tokenizer) == 3 and falcon.pre_tokenizer[-1].pattern == "[0-9][0-9][0-9]"
    neox = load_tokenizer(asset_path("gguf/ggml-vocab-gpt-neox.gguf"))  # no tokenizer.ggml.pre: llama.cpp's default
    assert [r.pattern for r in neox.pre_tokenizer][2:] == [r"\p{N}+", "[0-9][0-9][0-9]"]
    path = tmp_path / "mystery.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("mystery-pre")
    writer.add_token_list(["a", "b", "ab"])
    writer.add_token_types([1, 1, 1])
    writer.add_token_merges(["a b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedTokenizerError, match="'mystery-pre'"):
        load_tokenizer(path)


def test_added_tokens_lstrip_rstrip_err_towards_allowing_and_single_word_is_refused(tmp_path):
    """lstrip/rstrip: the runtime swallows the whitespace beside the token. Its output is always accepted; a
    whitespace token written beside it (which the runtime would swallow) is allowed: the corner, measured here."""
    data = gpt2_json()
    n = len(data["model"]["vocab"])
    data["added_tokens"] += [_added(n, "<tool>", False, lstrip=True), _added(n + 1, "<end>", False, rstrip=True)]
    model, runtime = load_pair(data, tmp_path)
    automaton = compile_tokenizer(model)
    texts = [t.replace(" the", " <tool>").replace("and ", "<end> and ") for t in _real_texts()[::3]]
    swallowed = 0
    for text in texts:
        ids = runtime.encode(text, add_special_tokens=False).ids
        assert automaton.accepts(ids)
        swallowed += runtime.decode(ids, skip_special_tokens=False) != text
    assert swallowed > 5  # the runtime really drops the whitespace beside them
    space = data["model"]["vocab"]["Ġ"]
    for over_allowed in ([space, n], [n + 1, space]):
        decoded = runtime.decode(over_allowed, skip_special_tokens=False)
        assert runtime.encode(decoded, add_special_tokens=False).ids != over_allowed  # not canonical
        assert automaton.accepts(over_allowed)  # allowed: the documented corner
    data["added_tokens"].append(_added(n + 2, "<word>", False, single_word=True))
    with pytest.raises(UnsupportedTokenizerError, match="'<word>'.*single_word"):
        load_pair(data, tmp_path)
