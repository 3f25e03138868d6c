"""Tokenizer loading: every format, checked against the HF tokenizers runtime on the real files."""

import json

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from automata import CanonmergeError
from bpe import TokenizerError, UnsupportedTokenizerError, load_tokenizer
from bpe.assets import asset_path, reference_runtime, tokenizer_source
from tests.support import model_of, runtime_of


def _runtime_text(runtime, token_id: int) -> str:
    return runtime.decode([token_id], skip_special_tokens=False)


def test_token_bytes_equal_the_runtime_for_every_regular_id(tokenizer_name):
    """Decoding each id alone with the runtime gives our bytes (lossily decoded the same way)."""
    model, runtime = model_of(tokenizer_name), runtime_of(tokenizer_name)
    assert model.vocab_size == runtime.get_vocab_size(with_added_tokens=True)
    mismatches = []
    for i, b in enumerate(model.token_bytes):
        if b is None:
            assert i in model.special_token_ids
            continue
        if _runtime_text(runtime, i) != b.decode("utf-8", errors="replace"):
            mismatches.append(i)
    assert mismatches == []


def test_token_bytes_reassemble_the_runtime_encoding_of_text(tokenizer_name):
    """Joining our bytes for the ids the runtime emits gives back the text, byte for byte (multi-byte
    characters split over several tokens included)."""
    model, runtime = model_of(tokenizer_name), runtime_of(tokenizer_name)
    text = "Grüße, 世界! naïve café — 😀🎉 x=1234567; \n\tdef f(a, b):\n        return a ≤ b  \n"
    ids = runtime.encode(text, add_special_tokens=False).ids
    assert b"".join(model.token_bytes[i] for i in ids) == text.encode("utf-8")


def test_metadata(tokenizer_name):
    model = model_of(tokenizer_name)
    expected = {
        "gpt2": dict(byte_level=True, byte_fallback=False, ignore_merges=False, vocab=50257, merges=50000),
        "mistral": dict(byte_level=False, byte_fallback=True, ignore_merges=False, vocab=32000, merges=58980),
        "llama3": dict(byte_level=True, byte_fallback=False, ignore_merges=True, vocab=128256, merges=280147),
        "qwen3": dict(byte_level=True, byte_fallback=False, ignore_merges=False, vocab=151669, merges=151387),
        "smollm2": dict(byte_level=True, byte_fallback=False, ignore_merges=False, vocab=49152, merges=48900),
    }[tokenizer_name]
    assert model.byte_level == expected["byte_level"]
    assert model.byte_fallback == expected["byte_fallback"]
    assert model.ignore_merges == expected["ignore_merges"]
    assert model.vocab_size == expected["vocab"] and len(model.merges) == expected["merges"]
    assert len(model.eos_token_ids) == 1 and model.token_bytes[model.eos_token_ids[0]] is None
    # Merges are consistent: left + right spell the result.
    for left, right, result in model.merge_table[:: max(1, len(model.merge_table) // 2000)].tolist():
        assert model.token_bytes[left] + model.token_bytes[right] == model.token_bytes[result]
    # Base tokens are exactly the regular tokens no merge produces.
    produced = set(model.merge_table[:, 2].tolist())
    assert not produced & set(model.base_token_ids.tolist())
    if tokenizer_name == "qwen3":
        assert model.normalizer == (("nfc",),)
    if tokenizer_name == "mistral":
        assert len(model.byte_fallback_ids) == 256
    if tokenizer_name in ("llama3", "qwen3", "gpt2", "smollm2"):
        assert model.pre_tokenizer and "(?!\\S)" in model.pre_tokenizer[-1].pattern


def test_gpt2_from_tokenizer_json_tiktoken_and_gguf_is_identical():
    from_json = model_of("gpt2")
    from_tiktoken = load_tokenizer(asset_path("gpt2/gpt2.tiktoken"))
    from_gguf = load_tokenizer(asset_path("gguf/ggml-vocab-gpt-2.gguf"))
    for other in (from_tiktoken, from_gguf):
        assert other.token_bytes == from_json.token_bytes
        assert other.merges == from_json.merges
        assert other.pre_tokenizer == from_json.pre_tokenizer
        assert other.eos_token_ids == from_json.eos_token_ids == (50256,)


def test_mistral_from_sentencepiece_model_equals_tokenizer_json():
    from_model = load_tokenizer(asset_path("mistral/tokenizer.model"))
    from_json = model_of("mistral")
    assert from_model.token_bytes == from_json.token_bytes
    assert from_model.merges == from_json.merges
    assert from_model.normalizer == from_json.normalizer and from_model.byte_fallback


def test_loading_from_runtime_objects():
    runtime = reference_runtime("llama3")
    model = load_tokenizer(runtime)
    assert model.token_bytes == model_of("llama3").token_bytes
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=HFTokenizer.from_file(str(tokenizer_source("qwen3"))),
                                   eos_token="<|im_end|>")
    via_transformers = load_tokenizer(fast)
    assert via_transformers.eos_token_ids == (fast.eos_token_id,)
    assert via_transformers.token_bytes == model_of("qwen3").token_bytes


def test_every_error_is_typed_and_names_the_problem(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": ')
    with pytest.raises(TokenizerError, match="not valid tokenizer JSON"):
        load_tokenizer(bad)
    bad.write_text('{"hello": 1}')
    with pytest.raises(TokenizerError, match="no 'model' entry"):
        load_tokenizer(bad)
    wordpiece = HFTokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "wp.json"
    wordpiece.save(str(path))
    with pytest.raises(UnsupportedTokenizerError, match="WordPiece models are not supported"):
        load_tokenizer(path)
    data = json.loads(tokenizer_source("qwen3").read_text())
    data["normalizer"] = {"type": "BertNormalizer", "lowercase": True}
    path.write_text(json.dumps(data))
    with pytest.raises(UnsupportedTokenizerError, match="normaliser 'BertNormalizer'"):
        load_tokenizer(path)
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "UnicodeScripts"}
    path.write_text(json.dumps(data))
    with pytest.raises(UnsupportedTokenizerError, match="pre-tokenizer 'UnicodeScripts'"):
        load_tokenizer(path)
    data["pre_tokenizer"] = None
    data["model"]["merges"] = [["Ġ", "zzzunknown"]]
    path.write_text(json.dumps(data))
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        load_tokenizer(path)
    ranks = tmp_path / "mystery.tiktoken"
    ranks.write_text("YQ== 0\n")
    with pytest.raises(UnsupportedTokenizerError, match="pre_tokenizer="):
        load_tokenizer(ranks)
    garbage = tmp_path / "x.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    with pytest.raises(TokenizerError, match="not a readable GGUF"):
        load_tokenizer(garbage)
    with pytest.raises(CanonmergeError):
        load_tokenizer(12345)


def test_gguf_reference_vectors_tokenize_as_llama_cpp_says():
    """llama.cpp's golden tokenizations agree with the runtime we use as oracle (GPT-2, Llama-3 BPE, Qwen2)."""
    for vocab, name in (("gpt-2", "gpt2"), ("llama-bpe", "llama3"), ("qwen2", "qwen3")):
        inputs = asset_path(f"gguf/ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
        outputs = asset_path(f"gguf/ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8").split("\n")
        inputs = inputs[: len(outputs) - 1]  # the .inp file ends with a separator, the .out with a newline
        runtime = runtime_of(name)
        checked = 0
        for text, expected in zip(inputs, outputs):
            ids = [int(x) for x in expected.split()]
            assert runtime.encode(text, add_special_tokens=False).ids == ids, text
            checked += 1
        assert checked >= 40
