"""Masks applied to logits on every device, the transformers processor and forced-token generation, on the
real SmolLM2-135M-Instruct model."""

import re

import numpy as np
import pytest
import torch

from automata import MISSING, from_regex
from bpe.assets import reference_model
from product import LogitsProcessor, apply_bitmask, compile_regex, generate
from tests.support import automaton_of, runtime_of

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_apply_bitmask_matches_boolean_masking(device):
    rng = np.random.default_rng(0)
    vocab, padded = 1000, 1024 + 7  # a model whose logits are wider than the vocabulary
    allowed = rng.random((3, vocab)) < 0.3
    words = np.packbits(np.pad(allowed, ((0, 0), (0, 32 - vocab % 32))), axis=1, bitorder="little").view(np.int32)
    logits = torch.randn(3, padded, device=device)
    expected = logits.clone().cpu()
    expected[:, :vocab][~torch.from_numpy(allowed)] = float("-inf")
    expected[:, vocab:] = float("-inf")
    out = apply_bitmask(logits, torch.from_numpy(words))
    assert out.device.type == device and torch.equal(out.cpu(), expected)


@pytest.fixture(scope="module")
def smollm2():
    return reference_model()


def test_generate_is_canonical_and_skips_forced_steps(smollm2):
    runtime = runtime_of("smollm2")
    pattern = r'\{"city": "(Paris|Lyon|Marseille)", "country": "France", "population_millions": [0-9]{1,2}\}'
    guide = compile_regex(pattern, automaton_of("smollm2"))
    prompt = runtime.encode("The largest city of France, as JSON: ", add_special_tokens=False).ids
    result = generate(smollm2, guide, prompt, max_new_tokens=64)
    text = runtime.decode(result.token_ids)
    assert result.finished and re.fullmatch(pattern, text), text
    assert runtime.encode(text, add_special_tokens=False).ids == result.token_ids  # canonical
    assert result.forced_tokens >= 10 and result.forward_passes + result.forced_tokens >= len(result.token_ids)
    # the mask computed during the forward pass (the default) or before it: the same generation
    assert generate(smollm2, guide, prompt, max_new_tokens=64, overlap=False) == result
    sampled = generate(smollm2, guide, prompt, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert re.fullmatch(pattern, runtime.decode(sampled.token_ids))


def test_logits_processor_keeps_model_generate_inside_the_guide(smollm2):
    runtime = runtime_of("smollm2")
    pattern = r"(yes|no|maybe), because [a-z ]{5,40}\."
    guide, dfa = compile_regex(pattern, automaton_of("smollm2")), from_regex(pattern)
    prompt = runtime.encode("Is the sky blue? Answer:", add_special_tokens=False).ids
    inputs = torch.tensor([prompt, prompt])
    out = smollm2.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=40, do_sample=True,
                           logits_processor=[LogitsProcessor(guide)], pad_token_id=guide.eos_token_ids[0],
                           eos_token_id=list(guide.eos_token_ids))
    for row in out[:, len(prompt):].tolist():
        ids = [t for t in row if t not in guide.eos_token_ids]
        text = runtime.decode(ids)
        if len(ids) < len(row):  # finished with EOS: a complete, canonical answer
            assert re.fullmatch(pattern, text), text
            assert runtime.encode(text, add_special_tokens=False).ids == ids
        else:  # cut off by max_new_tokens: still a prefix of some string of the language
            assert dfa.run(list(text.encode())) != MISSING, text


def test_a_gguf_models_cached_weights_equal_its_own_and_a_changed_byte_is_caught(tmp_path):
    """bpe.lm_cache: the first load of the GGUF file dequantises it and caches the weights; the second reads the
    cache and gives the same tensors, tied weights and logits; a cache whose file changed fails its check and is
    deleted (the next load rebuilds it), never trusted."""
    from bpe.assets import asset_path
    from bpe.lm_cache import load_causal_lm, verified_folder

    gguf = asset_path("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    dequantised = load_causal_lm(gguf, cache=tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert verified_folder(folder) and [p for p in tmp_path.iterdir()] == [folder]  # no temporary folder left
    cached = load_causal_lm(gguf, cache=tmp_path)
    expected, got = dequantised.state_dict(), cached.state_dict()
    assert set(got) == set(expected) and all(torch.equal(got[k], expected[k]) for k in expected)
    assert cached.lm_head.weight.data_ptr() == cached.model.embed_tokens.weight.data_ptr()  # still tied
    ids = torch.tensor([[1, 504, 3458, 314, 2]])
    with torch.no_grad():
        assert torch.equal(cached(ids).logits, dequantised(ids).logits)
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as f:  # one byte of the last tensor's data changed
        f.seek(-3, 2)
        byte = f.read(1)
        f.seek(-3, 2)
        f.write(bytes([byte[0] ^ 0x40]))
    assert not verified_folder(folder) and not folder.exists()
