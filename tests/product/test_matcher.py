"""product.Matcher on GPT-2's real tokenizer: random accept/rollback/fork/validate sequences equal a fresh replay
of the tokens they leave; jump-forward tokens are the guide's forced tokens and canonical; a batch fill (threads
or not, rows in any order) equals per-row fills; bad input raises typed errors before anything changes."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe import DisallowedTokenError
from product import (
    InvalidTokenError,
    Matcher,
    RollbackError,
    allocate_token_bitmask,
    compile_regex,
    fill_next_token_bitmasks,
)
from tests.support import automaton_of, runtime_of

PATTERN = r'\{"answer": "(yes|no|maybe)", "why": "[a-z ]{0,20}", "n": [0-9]{1,3}\}'
OTHER = r"(true|false|null|-?[0-9]+(\.[0-9]+)?)"


@pytest.fixture(scope="module")
def guide():
    return compile_regex(PATTERN, automaton_of("gpt2"))


@pytest.fixture(scope="module")
def other_guide():
    return compile_regex(OTHER, automaton_of("gpt2"))


def _replay(guide, tokens):
    """The (state, terminated) a fresh walk over ``tokens`` reaches; nothing may follow EOS."""
    state, terminated = guide.initial_state, False
    for t in tokens:
        if terminated:
            raise DisallowedTokenError("a token after EOS")
        state = guide.advance(state, t)
        terminated = t in guide.eos_token_ids
    return state, terminated


def _allowed(guide, state):
    return np.flatnonzero(guide.allowed(state))


def _pick(data, guide, state, label):
    tokens = _allowed(guide, state)
    return int(tokens[data.draw(st.integers(0, len(tokens) - 1), label=label)])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), max_rollback=st.integers(0, 6))
def test_random_operations_equal_a_fresh_replay(guide, data, max_rollback):
    matcher = Matcher(guide, max_rollback=max_rollback)
    path: list[int] = []   # the tokens the matcher should hold
    history = 0            # how many of them rollback can still undo
    forks: list[tuple[Matcher, list[int]]] = []
    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        op = data.draw(st.sampled_from(["accept", "accept", "accept_many", "accept_many", "rollback", "rollback",
                                        "bad", "fork", "validate", "jump", "reset"]), label="op")
        state_before = matcher.state
        if op == "accept" and not matcher.is_terminated:
            t = _pick(data, guide, matcher.state, "token")
            matcher.accept_token(t)
            path.append(t)
            history = min(history + 1, max_rollback)
        elif op == "accept_many" and not matcher.is_terminated:
            s, many = matcher.state, []
            for _ in range(data.draw(st.integers(1, 4), label="n")):
                if many and many[-1] in guide.eos_token_ids:
                    break
                many.append(_pick(data, guide, s, "token"))
                s = guide.advance(s, many[-1])
            matcher.accept_tokens(many)
            path += many
            history = min(history + len(many), max_rollback)
        elif op == "rollback":
            k = data.draw(st.integers(0, max_rollback + 2), label="k")
            if k > history:
                with pytest.raises(RollbackError):
                    matcher.rollback(k)
                assert matcher.state == state_before
            else:
                matcher.rollback(k)
                del path[len(path) - k:]
                history -= k
        elif op == "bad":  # a token the mask refuses, alone or at the end of a batch: nothing changes
            refused = np.flatnonzero(~guide.allowed(matcher.state)) if not matcher.is_terminated else np.arange(9)
            t = int(refused[data.draw(st.integers(0, len(refused) - 1), label="refused")])
            with pytest.raises(DisallowedTokenError):
                matcher.accept_token(t)
            if not matcher.is_terminated:  # a batch whose last token is refused: none of it is accepted
                good = _pick(data, guide, matcher.state, "token")
                after = guide.advance(matcher.state, good)
                refused = np.flatnonzero(~guide.allowed(after)) if good not in guide.eos_token_ids else np.arange(9)
                with pytest.raises(DisallowedTokenError):
                    matcher.accept_tokens([good, int(refused[data.draw(st.integers(0, len(refused) - 1))])])
            assert matcher.state == state_before
        elif op == "fork":
            forks.append((matcher.fork(), list(path)))
        elif op == "validate":
            draft, s, ok = [], matcher.state, not matcher.is_terminated
            for _ in range(data.draw(st.integers(0, 5), label="draft")):
                if ok and data.draw(st.booleans(), label="good"):
                    draft.append(_pick(data, guide, s, "token"))
                    s = guide.advance(s, draft[-1])
                    ok = draft[-1] not in guide.eos_token_ids
                else:
                    draft.append(data.draw(st.integers(0, guide.vocab_size - 1), label="any"))
                    ok = False
            n = matcher.validate_tokens(draft)
            assert matcher.state == state_before
            # the oracle: the longest prefix a fresh walk accepts
            longest = 0
            for k in range(len(draft) + 1):
                try:
                    _replay(guide, path + draft[:k])
                    longest = k
                except DisallowedTokenError:
                    break
            assert n == longest
        elif op == "jump":
            assert matcher.jump_forward_tokens() == (() if matcher.is_terminated else
                                                     guide.forced_tokens(matcher.state))
        elif op == "reset":
            matcher.reset()
            path, history = [], 0
        state, terminated = _replay(guide, path)
        assert (matcher.state, matcher.is_terminated) == (state, terminated), op
        assert matcher.num_rollback_tokens == history
    for twin, twin_path in forks:  # forks kept their own state, whatever happened to the original since
        assert (twin.state, twin.is_terminated) == _replay(guide, twin_path)


def test_jump_forward_tokens_are_forced_and_canonical(guide):
    runtime = runtime_of("gpt2")
    rng = np.random.default_rng(0)
    for _ in range(10):
        matcher, tokens, jumped = Matcher(guide), [], 0
        while not matcher.is_terminated:
            chain = matcher.jump_forward_tokens()
            assert chain == guide.forced_tokens(matcher.state)
            if chain:
                assert all(int(guide.allowed(s).sum()) == 1 for s in _states_along(guide, matcher.state, chain))
                matcher.accept_tokens(chain)
                tokens += chain
                jumped += len(chain)
                continue
            choices = _allowed(guide, matcher.state)
            t = int(rng.choice(choices))
            matcher.accept_token(t)
            if t not in guide.eos_token_ids:
                tokens.append(t)
        text = runtime.decode(tokens)
        assert guide.accepts(tokens)
        assert runtime.encode(text, add_special_tokens=False).ids == tokens, text  # canonical
        assert jumped >= 5  # '{"answer": "' at least is forced


def _states_along(guide, state, chain):
    out = []
    for t in chain:
        out.append(state)
        state = guide.advance(state, t)
    return out


def test_batch_fill_equals_per_row_fills(guide, other_guide):
    rng = np.random.default_rng(1)
    matchers = []
    for g in (guide, other_guide) * 6:
        m = Matcher(g)
        for _ in range(int(rng.integers(0, 12))):
            if m.is_terminated:
                break
            m.accept_token(int(rng.choice(_allowed(g, m.state))))
        matchers.append(m)
    matchers += [matchers[0].fork(), Matcher(guide), Matcher(guide)]  # requests sharing a state
    done = Matcher(other_guide)
    done.accept_tokens(list(runtime_of("gpt2").encode("true").ids) + [other_guide.eos_token_ids[0]])
    matchers.append(done)
    n = len(matchers)
    expected = allocate_token_bitmask(n, guide.vocab_size)
    for i, m in enumerate(matchers):
        m.fill_next_token_bitmask(expected, i)
        if not m.is_terminated:  # a row is the guide's mask
            bits = np.unpackbits(expected[i].numpy().view(np.uint8), bitorder="little")[: guide.vocab_size]
            assert np.array_equal(bits.astype(bool), m.guide.allowed(m.state))
    eos_only = np.zeros(guide.vocab_size, bool)
    eos_only[list(guide.eos_token_ids)] = True
    bits = np.unpackbits(expected[n - 1].numpy().view(np.uint8), bitorder="little")[: guide.vocab_size]
    assert np.array_equal(bits.astype(bool), eos_only)  # after EOS, only EOS
    for threads in (1, 2, 3):
        out = allocate_token_bitmask(n, guide.vocab_size)
        fill_next_token_bitmasks(matchers, out, threads=threads)
        assert torch.equal(out, expected)
        order = rng.permutation(n)  # rows in any order, into a larger bitmask
        out = torch.full((n + 3, guide.num_words), 7, dtype=torch.int32)
        fill_next_token_bitmasks([matchers[i] for i in order], out, indices=[int(i) + 3 for i in order],
                                 threads=threads)
        assert torch.equal(out[3:], expected) and bool((out[:3] == 7).all())
    with ThreadPoolExecutor(2) as pool:  # the engine's own workers, each filling part of the batch at once
        out = allocate_token_bitmask(n, guide.vocab_size)
        halves = [pool.submit(fill_next_token_bitmasks, matchers[k::2], out, indices=range(k, n, 2), threads=2)
                  for k in (0, 1)]
        for half in halves:
            half.result()
        assert torch.equal(out, expected)


def test_large_batches_over_small_caches_equal_per_row_masks():
    """A batch of at least ``PARALLEL_MIN_ROWS`` rows takes the parallel kernels; guides whose caches hold 1-3 masks
    see more new states in one batch than they can keep (slots taken twice in a batch); a counted guide and a schema
    guide with a counted fragment have masks the kernels do not compute. Every row is still its state's mask, filled
    or copied, and every cached slot holds its own state's mask."""
    import vegas
    from product.runtime.kernels.cpu import PARALLEL_MIN_ROWS

    automaton = automaton_of("gpt2")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 200}, "n": {"type": "integer"}},
              "required": ["name", "n"]}
    compilers = [lambda size: compile_regex(PATTERN, automaton, cache_size=size),
                 lambda size: compile_regex(OTHER, automaton, cache_size=size),
                 lambda size: compile_regex('"[a-z ]{0,200}"', automaton, cache_size=size),
                 lambda size: vegas.compile_schema(schema, automaton, cache_size=size)]
    guides = [compile(size) for compile, size in zip(compilers, (1, 3, 2, 4096))] + [compilers[0](4096)]
    reference = {id(g): compile(4096) for g, compile in zip(guides, compilers + compilers[:1])}
    assert {type(g).__name__ for g in guides} == {"Guide", "CountedGuide", "StitchedGuide"}
    rng = np.random.default_rng(5)
    matchers = []
    while len(matchers) < PARALLEL_MIN_ROWS + 20:
        g = guides[len(matchers) % len(guides)]
        m = Matcher(g)
        for _ in range(int(rng.integers(0, 14))):
            tokens = [t for t in _allowed(g, m.state) if t not in g.eos_token_ids]
            if not tokens:
                break
            m.accept_token(int(rng.choice(tokens)))
        matchers.append(m)
    n = len(matchers)
    expected = np.zeros((n, 32 * guides[0].num_words), dtype=bool)
    for i, m in enumerate(matchers):
        expected[i, : guides[0].vocab_size] = reference[id(m.guide)].allowed(m.state)
    expected = np.packbits(expected, axis=1, bitorder="little").view(np.int32)
    for threads in (1, 2, 2):  # (the second two-thread fill finds some masks cached)
        out = allocate_token_bitmask(n, guides[0].vocab_size)
        order = rng.permutation(n)
        fill_next_token_bitmasks([matchers[i] for i in order], out, indices=[int(i) for i in order],
                                 threads=threads)
        assert np.array_equal(out.numpy(), expected)
        for g in guides:
            assert len(g._cache) <= g._cache.limit
            for state, slot in g._cache.slots().items():
                assert np.array_equal(g._row_of(slot), reference[id(g)]._mask(state))


def test_bad_input_raises_typed_errors_before_anything_changes(guide):
    m = Matcher(guide, max_rollback=2)
    first = guide.forced_tokens(m.state)[:3]
    m.accept_tokens(first)
    state = m.state
    for bad in (guide.vocab_size, -1, 10 ** 9):
        with pytest.raises(InvalidTokenError):
            m.accept_token(bad)
        with pytest.raises(InvalidTokenError):
            m.accept_tokens([guide.forced_tokens(state)[0], bad])
        with pytest.raises(InvalidTokenError):
            m.validate_tokens([bad])
    with pytest.raises(InvalidTokenError):
        m.accept_token("7")
    with pytest.raises(RollbackError):
        m.rollback(3)  # only 2 kept
    with pytest.raises(ValueError):
        m.rollback(-1)
    assert m.state == state and m.num_rollback_tokens == 2
    buffer = allocate_token_bitmask(2, guide.vocab_size)
    buffer.fill_(5)
    bad_buffers = [torch.zeros((2, guide.num_words), dtype=torch.int64),
                   torch.zeros((2, guide.num_words + 1), dtype=torch.int32),
                   torch.zeros((guide.num_words,), dtype=torch.int32),
                   torch.zeros((2, guide.num_words), dtype=torch.int32, device="meta")]
    for b in bad_buffers:
        with pytest.raises(ValueError):
            m.fill_next_token_bitmask(b)
        with pytest.raises(ValueError):
            fill_next_token_bitmasks([m], b)
    with pytest.raises(TypeError):
        m.fill_next_token_bitmask([[0] * guide.num_words])
    reused = allocate_token_bitmask(2, guide.vocab_size)
    m.fill_next_token_bitmask(reused, 1)  # checked once, then remembered ...
    reused.set_(torch.zeros((2, guide.num_words + 1), dtype=torch.int32))  # ... until it changes in place
    with pytest.raises(ValueError):
        m.fill_next_token_bitmask(reused, 1)
    for index in (2, -1):
        with pytest.raises(ValueError):
            m.fill_next_token_bitmask(buffer, index)
    with pytest.raises(ValueError):
        fill_next_token_bitmasks([m, m.fork()], buffer, indices=[1, 1])
    with pytest.raises(ValueError):
        fill_next_token_bitmasks([m, m.fork(), m.fork()], buffer)
    assert bool((buffer == 5).all())  # nothing written
    with pytest.raises(TypeError):
        Matcher("not a guide")


def test_eos_terminates_and_rollback_reopens(other_guide):
    g = other_guide
    m = Matcher(g)
    m.accept_tokens(runtime_of("gpt2").encode("false").ids)
    assert not m.is_terminated and m.is_accepting()
    before = m.state
    m.accept_token(g.eos_token_ids[0])
    assert m.is_terminated and m.jump_forward_tokens() == ()
    buffer = torch.full((2, g.num_words), 5, dtype=torch.int32)
    with pytest.raises(TypeError):  # a bad entry after a terminated matcher: its row is not written either
        fill_next_token_bitmasks([m, "not a matcher"], buffer)
    assert bool((buffer == 5).all())
    assert m.validate_tokens([g.eos_token_ids[0]]) == 0
    with pytest.raises(DisallowedTokenError):
        m.accept_token(g.eos_token_ids[0])
    m.rollback(1)
    assert not m.is_terminated and m.state == before
    m.reset()
    assert m.state == g.initial_state and m.num_rollback_tokens == 0
    with pytest.raises(DisallowedTokenError):  # EOS before the text may end
        m.accept_token(g.eos_token_ids[0])
