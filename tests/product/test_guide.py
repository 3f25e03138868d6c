"""CartesianMerge guides against the real runtime: exact masks on finite languages, DirectMerge agreement,
random walks on unbounded patterns, the reference's examples, and bad input."""

import pickle
import re
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from automata import Alphabet, EmptyLanguageError, RegexError, StateLimitError, from_regex
from bpe import DisallowedTokenError, direct_merge
from product import InvalidTokenError, compile_regex
from product.runtime.guide import Guide
from tests.support import automaton_of, model_of, runtime_of, runtime_trie

FINITE_PATTERNS = [
    r" William| Theodore",
    r"boolean: (true|false)",
    r"(1[0-9]{0,2}|[2-9][0-9]?|0)",
    r"(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    r'\{"(name|id)": "(ab|a b|xyz)"\}',
    r"a{0,4}b{0,3}",
    r"(yes|no|maybe)( ?)(\n|  )?",
    r"[a-c]{1,3} [a-c]{1,2}",
    r"(café|naïve|日本語|😀!)",
]


@pytest.mark.parametrize("pattern", FINITE_PATTERNS)
def test_masks_are_exactly_the_runtime_continuations(tokenizer_name, pattern):
    """At every node of the trie of the runtime's encodings, allowed = the node's children, plus EOS exactly
    where a string ends: no over- and no under-constraining."""
    guide = compile_regex(pattern, automaton_of(tokenizer_name))
    eos = set(guide.eos_token_ids)
    missing = extra = 0
    for prefix, following in runtime_trie(tokenizer_name, pattern).items():
        state = guide.initial_state
        for t in prefix:
            state = guide.advance(state, t)
        allowed = set(np.flatnonzero(guide.allowed(state)).tolist())
        expected = {t for t in following if t >= 0} | (eos if -1 in following else set())
        missing += len(expected - allowed)
        extra += len(allowed - expected)
        assert guide.is_accepting(state) == (-1 in following)
    assert missing == 0, f"{missing} canonical continuations masked out"
    assert extra == 0, f"{extra} non-canonical continuations allowed"


def _token_language(guide, limit=20_000):
    """The guide's token language as (states, edges, accepting) by BFS over guide states (EOS left out)."""
    index, order, edges = {guide.initial_state: 0}, [guide.initial_state], []
    eos = set(guide.eos_token_ids)
    for i, state in enumerate(order):
        for t in np.flatnonzero(guide.allowed(state)).tolist():
            if t in eos:
                continue
            nxt = guide.advance(state, t)
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
                assert len(order) < limit
            edges.append((i, t, index[nxt]))
    return order, edges, [guide.is_accepting(s) for s in order]


@pytest.mark.parametrize("pattern, chars", [(r"(ab|ba)*c", "abc"), (r"a+ba*", "ab"), (r"[a-c]+ [a-c]*", "abc "),
                                            (r"(yes|no)( (yes|no)){0,3}", "yesno "),
                                            (r"boolean: (true|false)", "boolean: trufs")])
def test_cartesian_merge_equals_direct_merge_on_mistral(pattern, chars):
    """Mistral has no pre-tokenizer, so DirectMerge on the regex DFA is the exact reference: walk both automata
    together; at every reachable pair the next-token sets and acceptance agree."""
    model = model_of("mistral")
    guide = compile_regex(pattern, automaton_of("mistral"))
    reference = direct_merge(from_regex(pattern, Alphabet.of_chars(chars)), model)
    dfa, symbol_of = reference.dfa, {int(t): i for i, t in enumerate(reference.token_ids)}
    eos = set(guide.eos_token_ids)
    seen, todo = set(), [(guide.initial_state, dfa.start)]
    while todo:
        state, q = todo.pop()
        if (state, q) in seen:
            continue
        seen.add((state, q))
        assert guide.is_accepting(state) == bool(dfa.accepting[q])
        allowed = set(np.flatnonzero(guide.allowed(state)).tolist()) - eos
        expected = {int(reference.token_ids[x]) for x in np.flatnonzero(dfa.transitions[q] >= 0)}
        assert allowed == expected, (pattern, [model.token_strings[t] for t in allowed ^ expected])
        for t in allowed:
            todo.append((guide.advance(state, t), int(dfa.transitions[q, symbol_of[t]])))
    assert len(seen) > 3


WALK_PATTERNS = [
    r"[a-z]+( [a-z]+)*",
    r"[+-]?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",  # Outlines paper: float
    r"((25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)",  # Outlines paper: IP address
    r"(yes|no)",  # Outlines paper: yes/no
    r'\{"name": "[^"\\\x00-\x1f]*", "age": [0-9]{1,3}\}',
    r"(\s|[a-z'])*x",
]


@pytest.mark.parametrize("name", ["gpt2", "mistral", "smollm2", "qwen3", "llama3"])
@pytest.mark.parametrize("pattern", WALK_PATTERNS)
def test_random_walks_never_dead_end_and_are_canonical(name, pattern):
    """Uniform random walks over allowed tokens: never stuck, decode to a fullmatch, and (exact automata) are
    exactly what the runtime produces for the text."""
    guide, runtime = compile_regex(pattern, automaton_of(name)), runtime_of(name)
    rng = np.random.default_rng(zlib.crc32(f"{name}:{pattern}".encode()))
    eos = np.array(guide.eos_token_ids)
    finished = non_canonical = 0
    first_byte = np.array([min(b[0], 0x80) if b else 0 for b in model_of(name).token_bytes])  # non-ASCII: one group
    for _ in range(100):
        state, ids = guide.initial_state, []
        for step in range(150):
            allowed = guide.allowed(state)
            assert allowed.any(), f"dead end after {ids}"
            if guide.is_accepting(state) and (rng.random() < 0.25 or step > 40):
                break
            allowed[eos] = False
            choices = np.flatnonzero(allowed)
            if not len(choices):
                break
            # a first byte uniformly, then a token starting with it: free-text states still end in time
            groups = np.flatnonzero(np.bincount(first_byte[choices], minlength=129))
            token = int(rng.choice(choices[first_byte[choices] == rng.choice(groups)]))
            ids.append(token)
            state = guide.advance(state, token)
        else:
            continue  # cut off before accepting: nothing to check but the absence of dead ends
        finished += 1
        text = runtime.decode(ids, skip_special_tokens=False)
        assert re.fullmatch(pattern, text), (text, ids)
        if runtime.encode(text, add_special_tokens=False).ids != ids:
            non_canonical += 1
            print("non-canonical:", repr(text), [runtime.id_to_token(t) for t in ids])
    assert finished > 40
    assert non_canonical == 0


def test_boolean_reference_example_on_mistral():
    """The reference: 'boolean: ((true)|(false))' on Mistral admits exactly two canonical token paths; the
    automaton minimises to DirectMerge's 4 states, 4 transitions."""
    model = model_of("mistral")
    guide = compile_regex(r"boolean: ((true)|(false))", automaton_of("mistral"))
    states, edges, accepting = _token_language(guide)
    paths, todo = [], [(0, [])]
    while todo:
        s, path = todo.pop()
        if accepting[s]:
            paths.append([model.token_strings[t] for t in path])
        todo += [(b, path + [t]) for a, t, b in edges if a == s]
    assert sorted(paths) == [["boolean", ":", "▁false"], ["boolean", ":", "▁true"]]
    assert len(states) == 5 and len(edges) == 4  # one state per step, a final state per answer


def test_non_canonical_mode_allows_every_tokenization():
    """canonical_only=False is the peers' behaviour: a respelling that decodes into the language is allowed."""
    ca, runtime = automaton_of("gpt2"), runtime_of("gpt2")
    canonical = compile_regex(r"Hello world", ca)
    anything = compile_regex(r"Hello world", ca, canonical_only=False)
    respelled = [runtime.token_to_id(t) for t in ["H", "ello", "Ġwor", "ld"]]
    assert anything.accepts(respelled) and not canonical.accepts(respelled)
    assert canonical.accepts(runtime.encode("Hello world", add_special_tokens=False).ids)
    first = canonical.allowed(canonical.initial_state)
    assert (first <= anything.allowed(anything.initial_state)).all() and first.sum() < 10


def test_fill_bitmask_and_forced_tokens_agree_with_allowed():
    guide = compile_regex(r'\{"answer": "(yes|no)", "confidence": [0-9]\}', automaton_of("smollm2"))
    runtime = runtime_of("smollm2")
    ids = runtime.encode('{"answer": "no", "confidence": 7}', add_special_tokens=False).ids
    states = [guide.initial_state]
    for t in ids:
        states.append(guide.advance(states[-1], t))
    out = np.zeros((len(states), guide.num_words), dtype=np.int32)
    guide.fill_bitmask(states, out)
    for row, state in zip(out, states):
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: guide.vocab_size].astype(bool)
        assert (bits == guide.allowed(state)).all()
    forced = guide.forced_tokens(guide.initial_state)
    assert list(forced) == ids[: len(forced)] and len(forced) >= 3  # '{"answer": "' has one canonical spelling
    assert guide.forced_tokens(states[-1]) == ()  # accepting: EOS is a choice


def _random_steps(guide, walks: int, seed: int) -> list[tuple[int, int]]:
    """(state, token) for every step of ``walks`` uniform random walks over allowed tokens, each up to EOS."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(walks):
        state = guide.initial_state
        while True:
            token = int(rng.choice(np.flatnonzero(guide.allowed(state))))
            steps.append((state, token))
            if token in guide.eos_token_ids:
                break
            state = guide.advance(state, token)
    return steps


def test_advance_takes_exactly_the_tokens_of_the_mask():
    """``advance`` decides a token from the node's rows, not from a computed mask: in states of every kind (an
    unfinished character, few class-dependent tokens, many), it accepts exactly the mask's tokens, EOS included,
    over the whole vocabulary."""
    guide = compile_regex(r'"[^"\\]{0,12}"( [a-z]{1,8}){0,2}', automaton_of("gpt2"))
    by_kind: dict[str, list[int]] = {}
    for state, _ in _random_steps(guide, 12, seed=3):
        node, _ = guide._split(state)  # (a counted guide also carries an iteration count)
        kind = "pending" if guide._pending_index[node] >= 0 else "sparse" if guide._rows[node][0] else "dense"
        if state not in by_kind.setdefault(kind, []) and len(by_kind[kind]) < 4:
            by_kind[kind].append(state)
    assert sorted(by_kind) == ["dense", "pending", "sparse"], {k: len(v) for k, v in by_kind.items()}
    row_of = np.repeat(np.arange(len(guide._pending_row_bounds) - 1), np.diff(guide._pending_row_bounds))
    assert (np.diff(guide._pending_row_tokens)[np.diff(row_of) == 0] > 0).all()  # rows ascending (searched)
    for state in [s for states in by_kind.values() for s in states]:
        # from the rows (the state's mask not cached), then from the cached mask
        for cached in (False, True):
            guide._advanced.clear()  # the table of pairs advanced before would answer without checking
            with guide._lock:
                guide._cache.clear()
            if cached:
                guide.fill_bitmask([state], np.zeros((1, guide.num_words), dtype=np.int32))
            taken = np.zeros(guide.vocab_size, dtype=bool)
            for token in range(guide.vocab_size):
                try:
                    guide.advance(state, token)
                    taken[token] = True
                except DisallowedTokenError:
                    pass
            assert (state in guide._cache) == cached  # advance reads the cache, never fills it
            assert np.array_equal(taken, guide.allowed(state)), (state, cached)


def _reference_advance(guide, state, token):
    """The move as ``advance`` made it before it was inlined and remembered: the node's rows, the regex
    transitions and ``CanonicalAutomaton.class_after`` (a plain guide; raises for a token the mask refuses)."""
    node, mc = divmod(state, guide._M)
    if not guide._allows(node, mc, token):
        raise DisallowedTokenError(token)
    if token in guide.eos_token_ids:
        return state
    q = guide._transitions.target(int(guide._node_q[node]), token)
    ctx, nxt_mc = divmod(guide._automaton.class_after(int(guide._node_ctx[node]) * guide._M + mc, token), guide._M)
    return guide._node_of[(q, ctx)] * guide._M + nxt_mc


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
@pytest.mark.parametrize("pattern", [r'\{"name": "[^"\\\x00-\x1f]*", "age": [0-9]{1,3}\}',
                                     r"[+-]?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
                                     r"(café|naïve|日本語|😀!)( [a-zé]{1,8}){0,3}", r"[a-z]{1,30}@[a-z]{1,30}\.com",
                                     r'"[^"]{0,200}"'])  # the last one compiles to a counted guide
def test_remembered_advance_equals_the_checked_move_on_random_walks(name, pattern):
    """``advance`` remembers pairs (state, token) it took; on random walks (each walked twice, so the second
    pass answers from the table) it equals the checked move on a twin guide whose masks are not cached, and, on
    plain guides, the move made from the rows and ``class_after``. Refused and out-of-vocabulary tokens raise
    their errors every time and are never remembered; numpy integers take the checked path to the same
    states."""
    automaton = automaton_of(name)
    guide, twin = compile_regex(pattern, automaton), compile_regex(pattern, automaton, cache_size=1)
    plain = type(guide)._step is Guide._step  # not a counted guide
    rng = np.random.default_rng(zlib.crc32(pattern.encode()))
    walks = []
    for _ in range(6):
        state, steps = guide.initial_state, []
        while True:
            allowed = guide.allowed(state)
            token = int(rng.choice(np.flatnonzero(allowed)))
            refused = int(rng.choice(np.flatnonzero(~allowed)))
            steps.append((state, token, refused))
            if token in guide.eos_token_ids or len(steps) > 40:
                break
            state = guide.advance(state, token)
        walks.append(steps)
    for _ in range(2):
        for steps in walks:
            for state, token, refused in steps:
                nxt = guide.advance(state, token)
                with twin._lock:
                    twin._cache.clear()
                assert nxt == twin._step(state, token) == guide.advance(np.int64(state), np.int32(token))
                if plain:
                    assert nxt == _reference_advance(guide, state, token)
                for bad, error in ((refused, DisallowedTokenError), (guide.vocab_size, InvalidTokenError),
                                   (-1, InvalidTokenError)):
                    with pytest.raises(error):
                        guide.advance(state, bad)
                    assert state * guide.vocab_size + bad not in guide._advanced
    assert guide._advanced  # the table was used


def test_the_one_token_check_is_the_mask_formula_on_any_rows():
    """``advance``'s check reads the rows a mask is computed from. Rows of every shape — few class-dependent
    tokens over a short or a packed X, many (packed XY and D), tokens in Y only, in Z only, in both (Z-only
    tokens do not occur in the patterns tried, so the rows are drawn at random) — give the mask's bit for every
    token and several merge classes."""
    automaton = automaton_of("gpt2")
    guide = compile_regex(r"[a-z]{1,6}( [a-z]{1,6}){0,4}\.", automaton)
    node = next(n for n in range(guide.num_nodes) if guide._pending_index[n] < 0)
    rng = np.random.default_rng(0)
    V, words = guide.vocab_size, np.zeros(guide.num_words, dtype=np.uint32)
    classes = rng.choice(np.flatnonzero(guide._forbidden.size > 0), 3, replace=False).tolist() + [0]
    for x, y, z in [(20, 40, 40), (2000, 60, 60), (50, 3000, 3000), (5000, 400, 30)]:
        X, Y, Z = (rng.choice(V - 1, n, replace=False) for n in (x, y, z))  # the last id is GPT-2's EOS
        Z[: len(Z) // 2] = Y[: len(Z) // 2]  # half of Z in Y too
        guide._store_rows(node, X, Y, Z)
        for mc in classes:
            guide._compute_mask(node, mc, words)
            mask = np.unpackbits(words.view(np.uint8), bitorder="little")[:V].astype(bool)
            assert [guide._allows(node, mc, t) for t in range(V)] == mask.tolist(), (x, y, z, mc)


def test_a_small_mask_cache_evicts_and_recomputes_the_same_masks():
    """Masks live in reused cache rows; evicting and recomputing them (cache of 2 masks) changes nothing."""
    automaton, pattern = automaton_of("gpt2"), r"[a-z]{1,6}( [a-z]{1,6}){0,4}\."
    small, large = compile_regex(pattern, automaton, cache_size=2), compile_regex(pattern, automaton)
    steps = _random_steps(large, 10, seed=0)
    for state, token in steps:
        assert np.array_equal(small.allowed(state), large.allowed(state))
        assert small.advance(state, token) == large.advance(state, token)
    visited = [state for state, _ in steps]
    visited += visited[:3]  # states repeated in a batch
    expected = np.zeros((len(visited), small.num_words), dtype=np.int32)
    large.fill_bitmask(visited, expected)
    for threads in (1, 2):
        for cached in (False, True):  # computed, then (some) copied from the cache
            out = np.zeros_like(expected)
            small.fill_bitmask(visited, out, threads=threads)  # a batch far larger than the cache
            assert np.array_equal(out, expected)
            # the cache keeps the last states it was given, each with its own mask
            assert len(small._cache) == 2 and len(set(small._cache.slots().values())) == 2
            for state, slot in small._cache.slots().items():
                assert np.array_equal(small._row_of(slot), expected[visited.index(state)].view(np.uint32))
        wide = np.zeros((len(visited), 2 * small.num_words), dtype=np.int32)  # rows that are not contiguous
        small.fill_bitmask(visited, wide[:, ::2], threads=threads)
        assert np.array_equal(wide[:, ::2], expected) and not wide[:, 1::2].any()
    with pytest.raises(ValueError):
        compile_regex(pattern, automaton, cache_size=0)


def test_a_freed_guides_mask_rows_serve_the_next_guide():
    """Slabs of mask rows go back to a pool when their guide is freed and the next guide of that vocabulary takes
    them (their pages already mapped: no page faults in its walk); what they held never shows in its masks."""
    import gc

    automaton, pattern = automaton_of("gpt2"), r"[a-z]{1,6}( [a-z]{1,6}){0,4}\."
    gc.collect()  # (earlier tests' guides freed now, not after ``first``: the pool lends the last slab given back)
    first = compile_regex(pattern, automaton)
    states = [state for state, _ in _random_steps(first, 12, seed=0)]
    first.fill_bitmask(states, np.zeros((len(states), first.num_words), dtype=np.int32))
    addresses = {slab.ctypes.data for slab in first._slabs}
    del first
    gc.collect()
    second = compile_regex(r"[0-9]{1,4}", automaton)  # another language: stale rows would show
    assert {slab.ctypes.data for slab in second._slabs} <= addresses
    digits = [second.initial_state, second.advance(second.initial_state, runtime_of("gpt2").token_to_id("7"))]
    out = np.zeros((len(digits), second.num_words), dtype=np.uint32)
    for i, state in enumerate(digits):
        second.fill_bitmask([state], out[i:i + 1])
        second._compute_mask(*second._split(state), expected := np.empty(second.num_words, dtype=np.uint32))
        assert np.array_equal(out[i], expected)


def test_one_guide_serves_many_threads():
    """Requests share a compiled guide across threads (a state is an int): with a 3-row cache evicting all the
    time and mask kernels releasing the GIL, every mask still equals the one computed alone."""
    automaton, pattern = automaton_of("gpt2"), r"[a-z]{1,6}( [a-z]{1,6}){0,4}\."
    alone = compile_regex(pattern, automaton)
    states = [state for state, _ in _random_steps(alone, 20, seed=0)]
    expected = np.zeros((len(states), alone.num_words), dtype=np.uint32)
    alone.fill_bitmask(states, expected)
    shared = compile_regex(pattern, automaton, cache_size=3)
    # per state, a token its mask allows and one it refuses, for advance (which reads cached masks while other
    # threads evict them)
    moves = []
    for state in states:
        allowed = alone.allowed(state)
        token, refused = int(np.flatnonzero(allowed)[-1]), int(np.flatnonzero(~allowed)[0])
        moves.append((token, alone.advance(state, token), refused))

    def serve(seed):  # the states whose mask or move came out wrong (an exception reaches the test through map)
        picks = np.random.default_rng(seed).integers(len(states), size=1500).tolist()
        out = np.zeros((1, shared.num_words), dtype=np.uint32)
        wrong = []
        for i in picks:
            shared.fill_bitmask([states[i]], out)
            if not np.array_equal(out[0], expected[i]) or not np.array_equal(shared.allowed(states[i]),
                                                                            alone.allowed(states[i])):
                wrong.append(i)
            token, after, refused = moves[i]
            if shared._step(states[i], token) != after:  # (not advance: it would remember the pair)
                wrong.append(i)
            try:
                shared._step(states[i], refused)
                wrong.append(i)
            except DisallowedTokenError:
                pass
        return wrong

    with ThreadPoolExecutor(4) as pool:
        assert not any(pool.map(serve, range(4)))
    # A guide also travels to another process by pickle (its lock and per-thread scratch are recreated there).
    copied = pickle.loads(pickle.dumps(shared))
    for state in states[:50]:
        assert np.array_equal(copied.allowed(state), alone.allowed(state))
        token = int(np.flatnonzero(alone.allowed(state))[0])
        assert copied.advance(state, token) == alone.advance(state, token)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_of_more_new_states_than_the_cache_has_room_for_grows_it(threads):
    """A cache's index starts with one slab's slots and grows when a batch needs more: the batch's new states are
    kept after it grows (slots kept, records moved), and every row is its state's mask."""
    automaton = automaton_of("gpt2")
    pattern = r"[a-z]{1,6}( [a-z]{1,6}){0,4}\."
    states = list(dict.fromkeys(state for state, _ in _random_steps(compile_regex(pattern, automaton), 40, seed=3)))
    assert len(states) > 2 * 32
    guide, fresh = compile_regex(pattern, automaton), compile_regex(pattern, automaton)
    first_capacity = guide._cache.capacity
    out = np.zeros((len(states), guide.num_words), dtype=np.uint32)
    guide.fill_bitmask(states, out, threads=threads)
    assert guide._cache.capacity >= len(states) > first_capacity
    assert all(state in guide._cache for state in states)
    for state, row in zip(states, out):
        assert np.array_equal(row, fresh._mask(state))
        assert np.array_equal(guide._row_of(guide._cache.get(state)), row)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_mask_being_computed_does_not_hold_the_cache_lock(batch, monkeypatch):
    """``fill_bitmask`` computes masks that are not cached outside the guide's lock — one state (``_fill_at``) or a
    batch (``product.runtime.kernels.cpu.batch_compute``) — so while one thread computes, another fills a cached mask and
    advances (with the lock held for the whole computation, it would wait)."""
    import product.runtime.guide

    automaton = automaton_of("gpt2")
    guide = compile_regex(r"[a-z]{1,6}( [a-z]{1,6}){0,4}\.", automaton)
    steps = _random_steps(guide, 1, seed=1)
    (first, token), (second, _) = steps[:2]
    others = [state for state, _ in steps[1:1 + batch]]
    assert len(set(others)) == batch and first not in others
    with guide._lock:
        guide._cache.clear()
    guide.fill_bitmask([first], np.zeros((1, guide.num_words), dtype=np.uint32))  # cached: first only
    computing, release = threading.Event(), threading.Event()
    owner, name = (guide, "_fill_at") if batch == 1 else (product.runtime.guide, "batch_compute")
    compute = getattr(owner, name)

    def slow_compute(*args):
        computing.set()
        assert release.wait(10)
        compute(*args)

    monkeypatch.setattr(owner, name, slow_compute)
    out = np.zeros((1 + batch, guide.num_words), dtype=np.uint32)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(guide.fill_bitmask, others, out[1:])
        try:
            assert computing.wait(10)
            assert guide._lock.acquire(timeout=10)  # (held for the whole computation, it would time out)
            guide._lock.release()
            guide.fill_bitmask([first], out[:1])
            assert guide._step(first, token) == second
        finally:
            release.set()
        pending.result()
    monkeypatch.undo()
    expected = np.zeros_like(out)
    compile_regex(r"[a-z]{1,6}( [a-z]{1,6}){0,4}\.", automaton).fill_bitmask([first, *others], expected)
    assert np.array_equal(out, expected) and all(state in guide._cache for state in others)


@pytest.mark.parametrize("pattern", [r"[a-z]{1,12}( [a-z]{1,12}){2,6}\.", r'"[^"\\\x00-\x1f]*"', r"(red|green|ü)",
                                     r'"([^"\\\x00-\x1f]|\\["\\nt])*": |(name|age|address)": '])
def test_token_transitions_by_every_walk_are_equal(pattern, monkeypatch):
    """Token rows come from one of three walks — the byte trie per state, the trie of byte-class sequences per
    state, or per (first-symbol subtree, state entered) segment, alone or over the class trie — chosen by the
    DFA's shape: all give the same rows."""
    from product.compiler import token_regex
    from product.compiler.tables import vocabulary_trie

    trie, dfa = vocabulary_trie(automaton_of("gpt2")), from_regex(pattern)
    monkeypatch.setattr(token_regex, "_GROUPING_MAX_CLASSES", 256)
    built = {}
    for name, grouping_edges, segment_table in (("plain", 10**9, 0), ("grouped", 0, 0), ("segments", 10**9, 1 << 30),
                                                ("grouped segments", 0, 1 << 30)):
        monkeypatch.setattr(token_regex, "_GROUPING_MIN_EDGES", grouping_edges)
        monkeypatch.setattr(token_regex, "_MAX_SEGMENT_TABLE", segment_table)
        monkeypatch.setattr(token_regex, "_MIN_SEGMENT_SHARING", 1.0 if "segments" in name else 10**9)
        built[name] = token_regex.TokenTransitions.build(dfa, trie)
    assert len(built["plain"].tokens) > 0
    for name, transitions in built.items():
        for field in ("offsets", "tokens", "targets"):
            assert np.array_equal(getattr(transitions, field), getattr(built["plain"], field)), (name, field)


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_token_transitions_are_the_dfa_run_over_each_tokens_bytes(name):
    """delta(q, t) is the state reached by running t's bytes from q (or none): checked for every state on a
    sample of the vocabulary that includes every token of at most two bytes (unfinished UTF-8 characters among
    them) and random longer ones. The rows outgrow the walk's first arrays, so it resumes in larger ones."""
    from product.compiler import token_regex
    from product.compiler.tables import vocabulary_trie

    automaton = automaton_of(name)
    dfa = from_regex(r'\{"k": "[^"\\\x00-\x1f]*", "n": [0-9]{1,3}\}|[a-zé ]{1,30}')
    transitions = token_regex.TokenTransitions.build(dfa, vocabulary_trie(automaton))
    assert len(transitions.tokens) > token_regex._FIRST_CAPACITY_ROWS * automaton.vocab_size
    with pytest.raises(StateLimitError, match="max_transitions=100000"):
        compile_regex(r"[a-z ]{1,30}", automaton, max_transitions=100_000)
    lengths = np.diff(automaton.token_offsets)
    short = np.flatnonzero(automaton.token_has_bytes & (lengths <= 2))
    longer = np.flatnonzero(automaton.token_has_bytes & (lengths > 2))
    sample = np.concatenate([short, np.random.default_rng(0).choice(longer, 3000, replace=False)])
    blob = automaton.token_blob
    for t in sample.tolist():
        spelled = blob[automaton.token_offsets[t]:automaton.token_offsets[t + 1]].tolist()
        for q in range(dfa.num_states):
            expected = dfa.run(spelled, q)
            assert transitions.target(q, t) == (expected if expected >= 0 else -1), (q, t)
    assert len(transitions.tokens) > 0
    # What a compiled guide keeps: each row's most common target as a shared bit set, the same edges
    compact = transitions.compact(automaton.vocab_size)
    assert compact.is_compact and 0 < (compact.common_row >= 0).sum() and compact.nbytes < transitions.nbytes
    for q in range(dfa.num_states):
        for kept, listed in zip(compact.row(q), transitions.row(q)):
            assert np.array_equal(kept, listed), q
    for t in sample[::4].tolist():
        for q in range(dfa.num_states):
            assert compact.target(q, t) == transitions.target(q, t), (q, t)
    string = r'"[^"\\\x00-\x1f]*"'  # a free-text state: nearly every token leads back to it
    listed = token_regex.TokenTransitions.build(from_regex(string), vocabulary_trie(automaton))
    kept = compile_regex(string, automaton)._transitions
    assert kept.is_compact and kept.nbytes < listed.nbytes / 10


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_transitions_made_compact_from_their_segments_are_the_listed_ones(name):
    """A free key (any key but the declared names: a trie of states that share most segments with the free string)
    is built by segments; compact straight from them (``build(..., compact=True)``), every row is the listed
    build's, and the guide compiled from them (grouping each segment once) has the listed guide's nodes and
    masks along random walks."""
    import random

    from product.compiler import token_regex
    from product.compiler.tables import vocabulary_trie
    from vegas.schema import _string_except  # (a test reaches up: the regex of a free key, as vegas writes it)

    automaton = automaton_of(name)
    names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "kappa", "lambda"]
    regex = "(" + "|".join(f'"{n}": x' for n in names) + '|"' + _string_except(names, "json") + '": [0-9]+)'
    dfa, trie = from_regex(regex), vocabulary_trie(automaton)
    listed = token_regex.TokenTransitions.build(dfa, trie)
    compact = token_regex.TokenTransitions.build(dfa, trie, compact=True)
    assert compact.is_compact and compact.segments is not None and not listed.is_compact
    for q in range(dfa.num_states):
        for kept, full in zip(compact.row(q), listed.row(q)):
            assert np.array_equal(kept, full), q
    a, b = Guide(listed, automaton, name="listed"), Guide(compact, automaton, name="compact")
    assert a.num_nodes == b.num_nodes and b._transitions.segments is None  # (dropped once compiled)
    for seed in range(4):
        rng, x, y = random.Random(seed), a.initial_state, b.initial_state
        for _ in range(40):
            mask = a.allowed(x)
            assert np.array_equal(mask, b.allowed(y))
            choices = [t for t in np.flatnonzero(mask).tolist() if t not in a.eos_token_ids]
            if not choices:
                break
            t = rng.choice(choices)
            x, y = a.advance(x, t), b.advance(y, t)


def test_bad_input_gets_typed_errors():
    ca = automaton_of("gpt2")
    with pytest.raises(RegexError):
        compile_regex(r"(a)\1", ca)  # backreference
    with pytest.raises(RegexError):
        compile_regex(r"a(?<=a)", ca)  # lookbehind (lookahead is supported)
    with pytest.raises(RegexError):
        compile_regex(r"\bfoo", ca)  # word boundary
    with pytest.raises(EmptyLanguageError):
        compile_regex(r"(?=b)a", ca)  # lookahead that contradicts the match
    with pytest.raises(StateLimitError):
        compile_regex(r"[a-z]{0,40}[a-z0-9]{0,40}", ca, max_states=50)  # not compressed: unrolled
    guide = compile_regex(r"(yes|no)", ca)
    with pytest.raises(InvalidTokenError):
        guide.advance(guide.initial_state, ca.vocab_size)
    with pytest.raises(InvalidTokenError, match="float"):
        guide.advance(guide.initial_state, float(runtime_of("gpt2").token_to_id("yes")))
    # Bad mask buffers and states: named, and nothing written (row 0 of a good batch would be).
    good = np.zeros((2, guide.num_words), dtype=np.int32)
    for out in (np.zeros((2, guide.num_words), dtype=np.int64), torch.zeros((2, guide.num_words)),
                np.zeros((1, guide.num_words), dtype=np.int32), np.zeros((2, guide.num_words + 1), dtype=np.uint32),
                np.zeros(guide.num_words, dtype=np.int32)):
        with pytest.raises(ValueError, match="int32 or uint32 buffer"):
            guide.fill_bitmask([guide.initial_state, guide.initial_state], out)
    # one state (a decoder's step, which reads a torch tensor without numpy): the same checks
    for out in (np.zeros((1, guide.num_words), dtype=np.int64), torch.zeros((1, guide.num_words)),
                torch.zeros((0, guide.num_words), dtype=torch.int32), torch.zeros(guide.num_words, dtype=torch.int32),
                torch.zeros((1, guide.num_words + 1), dtype=torch.uint32), np.zeros((0, guide.num_words), np.int32)):
        with pytest.raises(ValueError, match="int32 or uint32 buffer"):
            guide.fill_bitmask([guide.initial_state], out)
    for out in (torch.zeros((1, guide.num_words), dtype=torch.int32, device="meta"), [[0] * guide.num_words]):
        with pytest.raises(TypeError, match="fill_bitmask writes"):
            guide.fill_bitmask([guide.initial_state], out)
    frozen = np.zeros((1, guide.num_words), dtype=np.int32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        guide.fill_bitmask([guide.initial_state], frozen)
    expected = np.zeros((1, guide.num_words), dtype=np.int32)
    guide.fill_bitmask([guide.initial_state], expected)
    for wide in (np.zeros((1, 2 * guide.num_words), dtype=np.int32), torch.zeros((1, 2 * guide.num_words),
                                                                                 dtype=torch.int32)):
        guide.fill_bitmask([guide.initial_state], wide[:, ::2])  # words that are not adjacent
        assert np.array_equal(np.asarray(wide[:, ::2]), expected) and not np.asarray(wide[:, 1::2]).any()
    for bad, error in ((2.0, TypeError), ("0", TypeError), (-1, ValueError), (10**12, ValueError),
                       (2**64, ValueError)):  # 2**64: beyond the compiled step's int64
        with pytest.raises(error, match="state"):
            guide.fill_bitmask([guide.initial_state, bad], good)
        assert not good.any()
        with pytest.raises(error, match="state"):
            guide.is_accepting(bad)
        with pytest.raises(error, match="state"):
            guide.advance(bad, 0)
    with pytest.raises(DisallowedTokenError):
        guide.advance(guide.initial_state, runtime_of("gpt2").token_to_id("maybe"))
    with pytest.raises(DisallowedTokenError):  # EOS before the text is complete
        guide.advance(guide.initial_state, guide.eos_token_ids[0])
    with pytest.raises(ValueError):
        guide.allowed(-1)


def test_forbidden_sets_in_masks_equal_the_automaton_sets(monkeypatch):
    """Masks read F[mc] through the compiled kernels: packed once for the largest classes (Llama-3 has classes
    forbidding most of the vocabulary, among them the whole-piece class that forbids everything), walked
    interval by interval for the others, or tested token by token for short rows."""
    from product.compiler.forbidden import DENSE_MIN, ROW_DENSE, ROW_SPARSE, ROW_SPARSE_PACKED, pack, row_descriptor
    from product.compiler.tables import _forbidden_index
    from product.runtime.kernels import cpu
    from product.runtime.kernels.cpu import (
        BATCH_DESCRIPTORS,
        BATCH_EOS,
        BATCH_FIELDS,
        BATCH_FORBIDDEN,
        BATCH_M,
        BATCH_NUM_EOS,
        COMPUTE,
        batch_compute,
        fill_mask,
    )

    monkeypatch.setattr(cpu, "PARALLEL_MIN_ROWS", 2)  # the parallel kernel on a few rows

    automaton = automaton_of("llama3")
    index = _forbidden_index(automaton)
    V, num_words = automaton.vocab_size, index.num_words
    rng = np.random.default_rng(0)
    X, Y, Z = np.zeros(V, bool), np.zeros(V, bool), np.zeros(V, bool)
    parts = rng.integers(0, 4, V)  # a token is in X, Y, Z or none of them
    X[parts == 0], Y[parts == 1], Z[parts == 2] = True, True, True
    XY = pack(np.flatnonzero(X | Y), num_words)
    D = XY ^ pack(np.flatnonzero(X | Z), num_words)
    packed = np.flatnonzero(index.dense_row >= 0)
    walked = np.flatnonzero((index.dense_row < 0) & (index.size > 0))
    assert index.size[packed].min() >= DENSE_MIN > index.size[walked].max()
    assert index.size.max() == V  # the whole-piece class
    few = rng.choice(V, 300, replace=False)
    x, y, z = (np.sort(few[parts[few] == k]).astype(np.int32) for k in (0, 1, 2))
    X_packed, no_tokens = pack(np.flatnonzero(X), num_words), np.zeros(0, dtype=np.int32)
    eos = np.array([V - 1], dtype=np.int64)
    # row descriptors (what a guide keeps per node): dense, sparse, sparse over a packed X (a long X); final or not
    descriptors = np.array([row_descriptor(ROW_DENSE, False, XY, D), row_descriptor(ROW_SPARSE, False, x, y, z),
                            row_descriptor(ROW_SPARSE_PACKED, True, X_packed, y, z),
                            row_descriptor(ROW_SPARSE, False, no_tokens, y, no_tokens)], dtype=np.int64)
    address = lambda k: descriptors.ctypes.data + k * descriptors.strides[0]  # noqa: E731
    # the batch kernel's guide table: one guide, whose node k is descriptor k (states k * M + mc)
    M = len(index.dense_row)
    table = np.zeros((1, BATCH_FIELDS), dtype=np.int64)
    table[0, [BATCH_FORBIDDEN, BATCH_DESCRIPTORS, BATCH_M, BATCH_EOS, BATCH_NUM_EOS]] = (
        index.table.ctypes.data, descriptors.ctypes.data, M, eos.ctypes.data, len(eos))
    for mc in packed[:3].tolist() + packed[-3:].tolist() + walked[:3].tolist() + walked[-3:].tolist() + [0]:
        F = automaton.forbidden(mc)
        expected = [X | (Y & ~F) | (Z & F), np.isin(np.arange(V), few[(X | (Y & ~F) | (Z & F))[few]]),
                    X | np.isin(np.arange(V), few[(X | (Y & ~F) | (Z & F))[few]]), np.isin(np.arange(V), y) & ~F]
        expected[2][V - 1] = True  # final: EOS allowed
        batches = np.full((2, 6, num_words), 0xDEADBEEF, dtype=np.uint32)  # masks overwrite what the buffer held
        for batch, threads in zip(batches, (1, 2)):  # the serial and the parallel kernel
            rows = np.array([5, 0, 2, 3], dtype=np.int64) * batch.strides[0] + batch.ctypes.data
            batch_compute(table, np.zeros(4, dtype=np.int64), np.arange(4, dtype=np.int64) * M + mc, rows, num_words,
                          np.full(4, COMPUTE, dtype=np.int64), 4, threads)
        for k, row in enumerate((5, 0, 2, 3)):
            words = np.full(num_words, 0xDEADBEEF, dtype=np.uint32)
            fill_mask(words, index.table, address(k), mc, eos)
            assert np.array_equal(words, batches[0, row]) and np.array_equal(words, batches[1, row])
            bits = np.unpackbits(words.view(np.uint8), bitorder="little")
            assert not bits[V:].any()
            assert np.array_equal(bits[:V].astype(bool), expected[k]), (mc, k)
        assert (batches[:, [1, 4]] == 0xDEADBEEF).all()  # rows not asked for are untouched


def test_dead_classes_equal_the_automaton_sets():
    """Liveness asks which classes forbid every token of Y and none of Z; the kernel stops each class at its
    first counter-example, reads packed classes bit by bit and unpacks the others for a long Y. Checked against
    the automaton's own sets, for Y drawn from inside one class's set (so some classes are dead) and for Z empty
    or not."""
    from product.compiler.forbidden import _UNPACK_MIN
    from product.compiler.tables import _forbidden_index

    automaton = automaton_of("llama3")
    index = _forbidden_index(automaton)
    rng = np.random.default_rng(1)
    packed = np.flatnonzero(index.dense_row >= 0)
    walked = np.flatnonzero((index.dense_row < 0) & (index.size > 0))
    largest_walked = walked[np.argsort(-index.size[walked])[:40]]  # unpacked for a long Y
    classes = np.concatenate([packed[:40], packed[-40:], walked[:40], walked[-40:], largest_walked, [0]])
    sets = {int(c): automaton.forbidden(int(c)) for c in classes}
    seen_dead = 0
    for source, size in [(packed[-1], 5), (packed[0], 5), (walked[-1], 5), (walked[0], 5),
                         (largest_walked[0], _UNPACK_MIN + 1), (packed[-1], 2 * _UNPACK_MIN)]:
        members = np.flatnonzero(automaton.forbidden(int(source)))
        Y = np.sort(rng.choice(members, min(size, len(members)), replace=False)).astype(np.int32)
        spoiler = rng.choice(np.setdiff1d(members, Y), 1).astype(np.int32)  # keeps ``source`` itself alive
        for Z in (np.zeros(0, np.int32), rng.choice(automaton.vocab_size, 3, replace=False).astype(np.int32), spoiler):
            expected = [c for c in classes.tolist() if sets[c][Y].all() and not sets[c][Z].any()]
            assert sorted(index.dead_classes(Y, Z, classes).tolist()) == sorted(expected)
            seen_dead += len(expected)
    assert seen_dead  # the test exercised dead classes, not only live ones


def test_dead_classes_in_parallel_threads():
    """Guides of one tokenizer compile in parallel: the dead-class kernel unpacks classes into a scratch row,
    which each thread must have to itself (a shared one corrupts the answers)."""
    from product.compiler.forbidden import _UNPACK_MIN
    from product.compiler.tables import _forbidden_index

    automaton = automaton_of("llama3")
    index = _forbidden_index(automaton)
    walked = np.flatnonzero((index.dense_row < 0) & (index.size > _UNPACK_MIN))
    classes = walked[np.argsort(-index.size[walked])[:300]].astype(np.int64)
    rng = np.random.default_rng(5)
    cases = []
    for source in classes[:8].tolist():
        members = np.flatnonzero(automaton.forbidden(source))
        Y = np.sort(rng.choice(members, _UNPACK_MIN + 1, replace=False)).astype(np.int32)
        cases.append((Y, index.dead_classes(Y, np.zeros(0, np.int32), classes)))
    assert any(len(dead) for _, dead in cases)

    def work(_):  # how many answers came out wrong
        return sum(not np.array_equal(index.dead_classes(Y, np.zeros(0, np.int32), classes), dead)
                   for _ in range(15) for Y, dead in cases)

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(work, range(4))) == 0


def test_dead_classes_over_every_class_equal_the_probes():
    """Over every class (a wide node's candidates), a few tokens are answered for all classes from the index of
    intervals by block of positions and the rest probed; the per-class probes alone (checked against the
    automaton's sets above) must give the same classes."""
    from product.compiler.tables import _forbidden_index

    index = _forbidden_index(automaton_of("llama3"))
    every = np.arange(index.num_merge_classes, dtype=np.int64)
    one = lambda n: np.array([0, n], dtype=np.int64)  # noqa: E731
    rng = np.random.default_rng(3)
    packed = np.flatnonzero(index.dense_row >= 0)
    members = np.flatnonzero(automaton_of("llama3").forbidden(int(packed[-1])))
    seen_dead = 0
    for Y, Z in [(rng.choice(members, 1), []), (rng.choice(members, 2, replace=False), []),
                 (rng.choice(members, 1), rng.choice(index.vocab_size, 1)), ([], rng.choice(members, 1)),
                 ([], rng.choice(index.vocab_size, 2, replace=False)),
                 (rng.choice(members, 4, replace=False), rng.choice(index.vocab_size, 2, replace=False)),
                 (rng.choice(members, 9, replace=False), []), (np.arange(3), []),  # early ids sit in crowded blocks
                 ([], rng.choice(index.vocab_size, 3, replace=False))]:
        Y, Z = np.sort(np.asarray(Y, np.int32)), np.asarray(Z, np.int32)
        fast = index.dead_classes(Y, Z, every)
        slow = every[index.dead_flags(one(len(every)), every, one(len(Y)), Y, one(len(Z)), Z)]
        assert np.array_equal(np.sort(fast), slow)
        seen_dead += len(fast)
    assert seen_dead and np.array_equal(index.dead_classes(np.zeros(0, np.int32), np.zeros(0, np.int32), every),
                                        every)


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_token_groups_move_alike_in_every_open_context(name):
    """A node's edges are token groups of its regex state's row: the groups partition the row, and every token
    of a group reaches the group's target state and has the same context after it, in every open context, both
    ways (inside the piece and across a boundary)."""
    from product.compiler import token_regex
    from product.compiler.node_kernels import group_row
    from product.compiler.tables import _token_signatures, vocabulary_trie

    automaton = automaton_of(name)
    signature, inside_of, boundary_of = _token_signatures(automaton)
    open_contexts = automaton.num_open_contexts
    assert np.array_equal(inside_of[:, signature], automaton.inside_next[:open_contexts])
    assert np.array_equal(boundary_of[:, signature], automaton.boundary_next[:open_contexts])
    pattern = r'"[^"\\\x00-\x1f]*", [0-9]{1,3}'  # a free-text state beside narrow ones
    transitions = token_regex.TokenTransitions.build(from_regex(pattern), vocabulary_trie(automaton))
    for q in range(transitions.num_states):
        tokens, targets = transitions.row(q)
        grouped, bounds, group_target, group_signature = group_row(tokens, targets, signature, inside_of.shape[1])
        assert np.array_equal(np.sort(grouped), tokens)
        owner = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
        assert np.array_equal(targets[np.searchsorted(tokens, grouped)], group_target[owner])
        assert np.array_equal(signature[grouped], group_signature[owner])
        assert len(np.unique(group_target * inside_of.shape[1] + group_signature)) == len(group_target)


def test_a_compiled_tokenizer_is_freed_with_its_guides():
    """Guides keep per-automaton indexes (vocabulary trie, forbidden sets, token signatures) in weak-keyed
    tables; none may refer back to the automaton, or a compiled tokenizer would never be freed."""
    import gc
    import weakref

    from bpe import compile_tokenizer

    automaton = compile_tokenizer(model_of("gpt2"))  # a fresh object, not the tests' shared one
    guides = [compile_regex(r'"[^"]*"', automaton), compile_regex("(yes|no)", automaton, canonical_only=False)]
    assert guides[0].accepts(runtime_of("gpt2").encode('"é"', add_special_tokens=False).ids)
    alive = weakref.ref(automaton)
    del automaton, guides
    gc.collect()
    assert alive() is None


def test_node_table_numbers_keys_in_first_seen_order_across_growth():
    from product.compiler.node_kernels import NodeTable

    rng = np.random.default_rng(2)
    table, numbering = NodeTable(), {}
    for size in (10, 3000, 50_000, 7):  # several growths, with repeated keys inside and across batches
        keys = rng.integers(-1, 40_000, size) * 1_000_003
        for k in keys.tolist():
            if k >= 0:
                numbering.setdefault(k, len(numbering))
        expected = [numbering[k] if k >= 0 else -1 for k in keys.tolist()]
        assert table.ids(keys).tolist() == expected
    assert len(table) == len(numbering)
    assert table.keys[: len(table)].tolist() == list(numbering)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), max_size=4), max_size=12))
def test_equal_pending_rows_are_stored_once_and_read_back_unchanged(rows):
    """A compiled guide keeps equal pending rows once (``_share_equal_rows``): every row reads back as it was, and
    the table holds each distinct row exactly once."""
    from automata.dfa import row_bounds
    from product.compiler.tables import _share_equal_rows

    tokens = np.array([t for row in rows for t in row], dtype=np.int32)
    bounds = row_bounds(np.array([len(row) for row in rows], dtype=np.int64))
    shared, shared_bounds, index = _share_equal_rows(tokens, bounds)
    for i, row in enumerate(rows):
        assert shared[shared_bounds[index[i]]:shared_bounds[index[i] + 1]].tolist() == row
    assert len(shared_bounds) - 1 == len({tuple(row) for row in rows})


def test_guides_of_one_tokenizer_hold_equal_packed_rows_once():
    """A free-text state's packed rows are the same in every guide that has one: held once (``_PackedRows``), and
    a stored guide read back shares them too; masks are unchanged (the tests above check them against the
    runtime)."""
    automaton = automaton_of("llama3")
    string = r'"[^"\\\x00-\x1f]*"'
    first, second = compile_regex(string, automaton), compile_regex(r'\{"k": ' + string + r'\}', automaton)

    def packed(guide):
        return {id(a) for row in guide._rows if row and not row[0] for a in row[1:]}

    assert packed(first) and packed(first) & packed(second)
    loaded = Guide._from_arrays(first._to_arrays(), automaton)
    assert packed(loaded) == packed(first)
    for node in [n for n, row in enumerate(first._rows) if row and not row[0]]:
        state = node * first._M  # merge class 0: forbids nothing
        assert np.array_equal(loaded.allowed(state), first.allowed(state))
