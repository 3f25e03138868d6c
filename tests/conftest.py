"""Shared fixtures: the hypothesis profile and the five real tokenizers (fetched through bpe.assets, never mocked)."""

import pytest
from hypothesis import settings

from bpe.assets import TOKENIZERS

# No per-example deadlines: they measure the machine, not the code (a loaded CI machine once took 278 ms for an
# example that takes 6 ms). Speed is measured by the benchmarks in bench/.
settings.register_profile("canonmerge", deadline=None)
settings.load_profile("canonmerge")


@pytest.fixture(params=TOKENIZERS)
def tokenizer_name(request) -> str:
    return request.param
