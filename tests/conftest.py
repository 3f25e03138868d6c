"""Shared fixtures: the five real tokenizers (fetched through bpe.assets, never mocked) and their runtimes."""

import pytest
from hypothesis import settings

# No per-example deadlines: they measure the machine, not the code (a loaded CI machine once took 278 ms for an
# example that takes 6 ms). Speed is measured by the benchmarks in bench/.
settings.register_profile("canonmerge", deadline=None)
settings.load_profile("canonmerge")

from bpe import load_tokenizer
from bpe.assets import TOKENIZERS, reference_runtime, tokenizer_source
from bpe.automaton import compile_tokenizer

_models: dict = {}
_runtimes: dict = {}
_automata: dict = {}


def model_of(name: str):
    if name not in _models:
        _models[name] = load_tokenizer(tokenizer_source(name))
    return _models[name]


def runtime_of(name: str):
    if name not in _runtimes:
        _runtimes[name] = reference_runtime(name)
    return _runtimes[name]


def automaton_of(name: str):
    """The canonical automaton, through the on-disk cache (built once per machine)."""
    if name not in _automata:
        _automata[name] = compile_tokenizer(model_of(name))
    return _automata[name]


@pytest.fixture(params=TOKENIZERS)
def tokenizer_name(request) -> str:
    return request.param
