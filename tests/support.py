"""The real tokenizers, their runtimes and canonical automata, loaded once per test process, and the runtime's
trie of a finite language: the oracles the tests compare against (never mocked); a random walk that holds two
guides of one language to the same mask at every step, and one that walks a guide to an accepting state."""

import numpy as np

from automata import from_regex
from bpe import load_tokenizer
from bpe.assets import reference_runtime, tokenizer_source
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


def runtime_trie(name: str, pattern: str) -> dict[tuple, set]:
    """Every prefix of the runtime's encodings of the language -> the ids that follow it (-1: a string ends)."""
    runtime = runtime_of(name)
    trie: dict[tuple, set] = {}
    for symbols in from_regex(pattern).strings(100_000):
        ids = runtime.encode(bytes(symbols).decode(), add_special_tokens=False).ids
        for k in range(len(ids) + 1):
            trie.setdefault(tuple(ids[:k]), set()).add(ids[k] if k < len(ids) else -1)
    return trie


def walk_alike(reference, other, rng, steps: int, pick=None) -> None:
    """Walk ``reference`` and ``other`` (guides of one language) along random tokens ``reference`` allows,
    asserting the same mask before each step, until ``steps`` or no token is allowed. ``pick(allowed)``: the
    token taken (default: uniform over the allowed ones)."""
    a, b = reference.initial_state, other.initial_state
    for _ in range(steps):
        mask = reference.allowed(a)
        assert np.array_equal(mask, other.allowed(b))
        allowed = np.flatnonzero(mask[: reference.vocab_size])
        if not len(allowed):
            break
        token = int(pick(allowed)) if pick is not None else int(rng.choice(allowed))
        a, b = reference.advance(a, token), other.advance(b, token)


def walk_to_accepting(guide, rng, *, steps: int, closing: np.ndarray, end_after: int, closer_share: float,
                      describe=lambda ids: ids) -> list[int] | None:
    """One random walk over a guide's allowed tokens (EOS aside): never stuck (asserted); ``closer_share`` of the
    steps pick among the allowed tokens ``closing`` flags (a uniform walk stays inside a free string nearly
    forever); it stops at an accepting state with chance 0.3 per step, at once past ``end_after`` steps. The
    tokens, or None where it was cut off after ``steps`` unaccepted."""
    state, ids = guide.initial_state, []
    for step in range(steps):
        choices = np.flatnonzero(guide.allowed(state))
        choices = choices[~np.isin(choices, guide.eos_token_ids)]
        if guide.is_accepting(state) and (not len(choices) or rng.random() < 0.3 or step > end_after):
            break
        assert len(choices), f"dead end after {describe(ids)!r}"
        closers = choices[closing[choices]]
        token = int(rng.choice(closers if len(closers) and rng.random() < closer_share else choices))
        ids.append(token)
        state = guide.advance(state, token)
    return ids if guide.is_accepting(state) else None
