"""Shared fixtures: the five real tokenizers (fetched through bpe.assets, never mocked) and their runtimes."""

import pytest

from bpe import load_tokenizer
from bpe.assets import TOKENIZERS, reference_runtime, tokenizer_source

_models: dict = {}
_runtimes: dict = {}


def model_of(name: str):
    if name not in _models:
        _models[name] = load_tokenizer(tokenizer_source(name))
    return _models[name]


def runtime_of(name: str):
    if name not in _runtimes:
        _runtimes[name] = reference_runtime(name)
    return _runtimes[name]


@pytest.fixture(params=TOKENIZERS)
def tokenizer_name(request) -> str:
    return request.param
