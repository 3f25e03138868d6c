"""product.runtime.lazy.LazyGuide: the eager guide's masks, state by state, with only the visited nodes built.

Oracle: ``Guide`` (the eager construction: every node, liveness by the fixpoint over the whole product), walked
alongside on the same random tokens (``tests.support.walk_alike``), on real tokenizers of four pre-tokenizer
families; the eager guide itself is held to the runtime elsewhere (tests/product/test_guide.py)."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import product.runtime.lazy as lazy_module
from automata import EmptyLanguageError, from_regex
from bpe.automaton import DisallowedTokenError
from product import InvalidTokenError, compile_regex, compile_stitched
from product.compiler.tables import vocabulary_trie
from product.compiler.token_regex import TokenTransitions, state_row
from product.runtime.guide import Guide
from product.runtime.lazy import LazyGuide
from tests.product.test_boundaries import PATTERNS, _patterns
from tests.support import automaton_of, runtime_of, walk_alike


def _pair(tokenizer: str, pattern: str) -> tuple[Guide, LazyGuide]:
    canonical = automaton_of(tokenizer)
    dfa = from_regex(pattern)
    return Guide(TokenTransitions.build(dfa, vocabulary_trie(canonical)), canonical), LazyGuide(dfa, canonical)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3", "qwen3", "smollm2"])
def test_masks_equal_the_eager_guides_along_walks(tokenizer):
    rng = np.random.default_rng(0)
    for pattern in PATTERNS:
        eager, lazy = _pair(tokenizer, pattern)
        for _ in range(8):
            walk_alike(eager, lazy, rng, 40)
        assert len(lazy._node_rows) < max(eager.num_nodes, 12)  # (only visited nodes get rows)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_forced_nodes_searched_from_their_edges_or_their_rows_alike(tokenizer, monkeypatch):
    """The liveness search reads a forced node of a short row from the row itself (``node_kernels.open_settled``,
    ``open_forced_steps``) and any other from its edges: with every node read from its edges, the masks and the
    liveness found are the same, and both are the eager guide's."""
    found = []
    for short_row in (lazy_module._SHORT_ROW, 0):
        monkeypatch.setattr(lazy_module, "_SHORT_ROW", short_row)
        store = lazy_module._SharedRows()  # (each run its own: rows shared by the first would answer the second)
        monkeypatch.setattr(lazy_module, "_shared_rows", lambda canonical, store=store: store)
        rng = np.random.default_rng(7)
        lives = []
        for pattern in PATTERNS:
            eager, lazy = _pair(tokenizer, pattern)
            for _ in range(4):
                walk_alike(eager, lazy, rng, 30)
            lives.append({lazy._key(pair // lazy._M) + (pair % lazy._M,): live for pair, live in lazy._live.items()})
        found.append(lives)
    assert found[0] == found[1] and sum(map(len, found[0])) > 50


@settings(max_examples=40, deadline=None)
@given(_patterns(), st.sampled_from(["gpt2", "llama3"]), st.integers(0, 2**32 - 1))
def test_random_patterns_walk_alike(pattern, tokenizer, seed):
    try:
        eager, lazy = _pair(tokenizer, pattern)
    except EmptyLanguageError:  # (both refuse alike: checked below)
        return
    rng = np.random.default_rng(seed)
    for _ in range(3):
        walk_alike(eager, lazy, rng, 30)


def test_a_valid_text_is_accepted_in_its_canonical_tokenization_only():
    canonical, runtime = automaton_of("llama3"), runtime_of("llama3")
    lazy = LazyGuide(from_regex(r'\{"name": "[^"]{0,20}", "n": [0-9]+\}'), canonical)
    text = '{"name": "Zoë Tatum", "n": 2025}'
    ids = runtime.encode(text, add_special_tokens=False).ids
    state = lazy.initial_state
    for t in ids:
        state = lazy.advance(state, t)
    assert lazy.is_accepting(state)
    assert lazy.allowed(state)[canonical.eos_token_ids[0]]
    refused = 0
    for cut in range(1, len(text), 2):  # two encodings glued: the same text, other tokens where they differ
        other = runtime.encode(text[:cut], add_special_tokens=False).ids + runtime.encode(
            text[cut:], add_special_tokens=False).ids
        if other == ids:
            continue
        state = lazy.initial_state
        with pytest.raises(DisallowedTokenError):
            for t in other:
                state = lazy.advance(state, t)
        refused += 1
    assert refused >= 5


def test_it_says_where_it_helps():
    assert LazyGuide.helps(automaton_of("llama3")) and not LazyGuide.helps(automaton_of("mistral"))


def test_the_generation_interface_matches_the_eager_guides():
    """What a generation loop calls: batched bitmasks (numpy and torch buffers), forced chains, acceptance."""
    import torch

    eager, lazy = _pair("llama3", r'\{"id": [0-9]{1,4}, "tags": \["[a-z]{1,6}"(, "[a-z]{1,6}")*\]\}')
    rng = np.random.default_rng(3)
    a, b, pairs = eager.initial_state, lazy.initial_state, []
    for _ in range(30):
        pairs.append((a, b))
        assert eager.forced_tokens(a) == lazy.forced_tokens(b)
        allowed = np.flatnonzero(eager.allowed(a)[: eager.vocab_size])
        token = int(rng.choice(allowed))
        if token in eager.eos_token_ids:
            break
        a, b = eager.advance(a, token), lazy.advance(b, token)
    expected = np.zeros((len(pairs), eager.num_words), dtype=np.int32)
    eager.fill_bitmask([p[0] for p in pairs], expected)
    got = np.zeros_like(expected)
    lazy.fill_bitmask([p[1] for p in pairs], got)
    assert np.array_equal(got, expected)
    tensor = torch.zeros((len(pairs) + 1, lazy.num_words), dtype=torch.int32)
    lazy.fill_bitmask([p[1] for p in pairs], tensor)
    assert np.array_equal(tensor[:-1].numpy(), expected) and not tensor[-1].any()
    with pytest.raises(ValueError):
        lazy.fill_bitmask([lazy.initial_state], np.zeros((1, lazy.num_words - 1), dtype=np.int32))

    runtime = runtime_of("llama3")
    text = '{"id": 42, "tags": ["red", "blue"]}'
    ids = runtime.encode(text, add_special_tokens=False).ids
    assert lazy.accepts(ids) and eager.accepts(ids)
    assert not lazy.accepts(ids[:-1]) and not lazy.accepts(runtime.encode('{"id": 42}', add_special_tokens=False).ids)


def _random_paths(guide, seed: int, walks: int, steps: int) -> list[list[int]]:
    """Token paths of random walks of ``guide`` (no EOS)."""
    rng, paths = np.random.default_rng(seed), []
    for _ in range(walks):
        state, path = guide.initial_state, []
        for _ in range(steps):
            allowed = [t for t in np.flatnonzero(guide.allowed(state)[: guide.vocab_size]).tolist()
                       if t not in guide.eos_token_ids]
            if not allowed:
                break
            path.append(int(rng.choice(allowed)))
            state = guide.advance(state, path[-1])
        paths.append(path)
    return paths


def _walk(guide, path: list[int]) -> int:
    state = guide.initial_state
    for t in path:
        state = guide.advance(state, t)
    return state


def test_compile_regex_builds_a_lazy_guide_on_request():
    """``lazy=True``: a lazy guide where the pre-tokenizer splits text, the whole product where it does not (nothing
    is settled locally there); never for any-tokenization masks. The default compiles the whole product."""
    gpt2, mistral = automaton_of("gpt2"), automaton_of("mistral")
    large = r"[A-Z][a-z]{1,12}( [a-z]{1,12}){2,12}\."
    assert isinstance(compile_regex(large, gpt2, lazy=True), LazyGuide)
    assert not isinstance(compile_regex(large, gpt2), LazyGuide)
    assert not isinstance(compile_regex(large, mistral, lazy=True), LazyGuide)
    with pytest.raises(ValueError, match="canonical masks only"):
        compile_regex(r"[0-9]", gpt2, lazy=True, canonical_only=False)


def test_matchers_batches_and_threads_over_one_lazy_guide():
    """A lazy guide is a ``Guide``: ``Matcher``s over it in a batch with an eager guide's
    (``fill_next_token_bitmasks``, two threads, a 3-row cache evicting all the time), four threads making first
    visits at once, a copy by pickle — every mask the eager guide's at the end of the same tokens."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    from product import Matcher, allocate_token_bitmask, fill_next_token_bitmasks

    canonical, pattern = automaton_of("gpt2"), r'\{"name": "[^"\\]{0,12}", "n": -?[0-9]{1,4}\}'
    eager, other = compile_regex(pattern, canonical), compile_regex(r"[a-z]{1,8}", canonical)
    paths = _random_paths(eager, seed=1, walks=6, steps=24)
    prefixes = [path[:k] for path in paths for k in range(0, len(path) + 1, 3)]
    lazy = compile_regex(pattern, canonical, cache_size=3, lazy=True)
    matchers, expected = [], []
    for i, prefix in enumerate(prefixes):
        m = Matcher(lazy)
        for t in prefix:
            m.accept_token(t)
        matchers.append(m)
        expected.append(eager.allowed(_walk(eager, prefix)))
        if i % 4 == 0:
            matchers.append(Matcher(other))
            expected.append(other.allowed(other.initial_state))
    out = allocate_token_bitmask(len(matchers), canonical.vocab_size)
    fill_next_token_bitmasks(matchers, out, threads=2)
    got = np.unpackbits(out.numpy().view(np.uint8), axis=1, bitorder="little")[:, : canonical.vocab_size]
    assert np.array_equal(got.astype(bool), np.array(expected)[:, : canonical.vocab_size])

    shared = compile_regex(pattern, canonical, cache_size=3, lazy=True)

    def serve(seed):  # (an exception reaches the test through map)
        for path in _random_paths(eager, seed=seed, walks=3, steps=20):
            a, b = eager.initial_state, shared.initial_state
            for t in path:
                assert np.array_equal(shared.allowed(b), eager.allowed(a))
                a, b = eager.advance(a, t), shared._step(b, t)  # (not advance: it would remember the pair)
        return path

    with ThreadPoolExecutor(4) as pool:
        last = list(pool.map(serve, range(10, 14)))
    copied = pickle.loads(pickle.dumps(shared))
    for path in last:
        for k in range(len(path) + 1):
            assert np.array_equal(copied.allowed(_walk(copied, path[:k])), eager.allowed(_walk(eager, path[:k])))
    with pytest.raises(DisallowedTokenError):
        copied.advance(copied.initial_state, int(np.flatnonzero(~eager.allowed(eager.initial_state))[0]))
    with pytest.raises(InvalidTokenError):
        copied.advance(copied.initial_state, canonical.vocab_size)


@pytest.mark.parametrize("tokenizer, style", [("gpt2", "json"), ("llama3", "json"), ("llama3", "yaml")])
def test_fragments_of_stitched_schemas_walk_alike(tokenizer, style):
    """A fragment of a stitched schema (entered in a context, exits where the text goes on in another fragment)
    as a lazy guide: its boundary test counts a cut exit where the marked DFA is universal there
    (``boundaries.universal_states``), and its masks equal the eager fragment guide's along walks."""
    from automata.regex import from_regex_exits
    from product.compiler.boundaries import break_possible
    from product.compiler.node_kernels import NONE_DEAD
    from product.stitched import _compile_fragment, _exit_tables
    from tests.product.test_stitched import NESTED, OVERLAPPING
    from vegas.schema import Compiler

    canonical = automaton_of(tokenizer)
    rng, compared, by_exits = np.random.default_rng(7), 0, 0
    for schema in (NESTED, OVERLAPPING):
        compiler = Compiler.load(schema, style, leaves=True)
        stitched = compile_stitched(compiler.document(), compiler.leaves, canonical)
        for inst in stitched._instances:
            fragment = getattr(inst.fragment, "shared", inst.fragment)
            if type(fragment.guide) is not Guide:  # (counted fragments: not lazy)
                continue
            eager = _compile_fragment(fragment.regex, fragment.entry_context, frozenset(), canonical,
                                      canonical_only=True, eos=fragment.guide.eos_token_ids, max_states=100_000,
                                      max_transitions=50_000_000).guide
            dfa, exit_of, exit_sets = from_regex_exits(fragment.regex)
            ends, exit_live = _exit_tables(exit_of, exit_sets, (dfa.transitions >= 0).any(axis=1), frozenset(),
                                           canonical.num_contexts)
            lazy = LazyGuide(dfa, canonical, start_context=fragment.entry_context, ends=ends, exit_live=exit_live)
            # sound: every node the boundary test settles is live in every merge class by the eager fixpoint
            open_ = ~eager._is_pending
            q, ctx = eager._node_q[open_], eager._node_ctx[open_]
            settled = lazy._break[q, ctx]
            assert (eager._status[open_][settled] == NONE_DEAD).all()
            without = break_possible(dfa, canonical, ends=ends)[q, ctx] | exit_live[q, ctx]
            by_exits += int((settled & ~without).sum())
            for _ in range(4):
                walk_alike(eager, lazy, rng, 30)
            compared += 1
    assert compared >= 4 and by_exits > 0  # (a boundary before a cut: settled only through the exit)


def test_a_region_nothing_settles_is_answered_by_the_whole_product(monkeypatch):
    """Where the forced search grows past ``_MAX_REGION`` pairs (a tokenizer without pre-tokenizer splits, a
    fragment whose only way out is dead), the eager guide of the same constraint answers liveness: same masks."""
    import product.runtime.lazy as lazy_module

    rng = np.random.default_rng(11)
    mistral = automaton_of("mistral")
    dfa = from_regex(r'\{"name": "[a-zé]{0,6}", "ok": (true|false)\}')
    eager = Guide(TokenTransitions.build(dfa, vocabulary_trie(mistral)), mistral)
    monkeypatch.setattr(lazy_module, "_MAX_REGION", 64)
    lazy = LazyGuide(dfa, mistral)
    for _ in range(6):
        walk_alike(eager, lazy, rng, 30)
    assert lazy._whole is not None  # (Mistral: nothing settled, the search outgrew the cap)
    monkeypatch.setattr(lazy_module, "_MAX_REGION", 0)
    for pattern in PATTERNS[:4]:
        eager, lazy = _pair("gpt2", pattern)
        for _ in range(4):
            walk_alike(eager, lazy, rng, 30)


@pytest.mark.parametrize("tokenizer, style", [("gpt2", "json"), ("llama3", "json"), ("llama3", "yaml"), ("qwen3", "json")])
def test_lazy_fragments_stitch_the_same_guide(tokenizer, style):
    """``compile_stitched(..., lazy=True)``: fragments compiled now are lazy guides (choices of keys and counted
    fragments stay compiled), exits followed by node key into instances built for every context a token can leave
    there; masks equal the eager stitched guide's along walks (exits, dead instances and all)."""
    from product.stitched import FragmentLibrary
    from tests.product.test_stitched import NESTED, OVERLAPPING
    from vegas.schema import Compiler

    canonical = automaton_of(tokenizer)
    rng = np.random.default_rng(5)
    for schema in (NESTED, OVERLAPPING):
        compiler = Compiler.load(schema, style, leaves=True)
        skeleton, options = compiler.document(), dict(leaf_exceptions=compiler.exceptions)
        eager = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical), **options)
        lazy = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical), lazy=True,
                                **options)
        assert any(isinstance(g, LazyGuide) for g in lazy._guides)
        assert not any(isinstance(g, LazyGuide) for g in eager._guides)
        entered = sum(g is not None for g in lazy._guides)
        assert entered < len(eager._guides)  # instances proven live wait for a walk to enter them
        for _ in range(12):
            walk_alike(eager, lazy, rng, 60)
        assert sum(g is not None for g in lazy._guides) > entered


def test_a_length_bounded_format_is_built_lazily():
    """A format under a length bound is written as one copy of the pattern per length (a URI of at most 60
    characters: 57 counted loops, no single counter carries them); a lazy stitched guide builds that fragment as a
    LazyGuide instead of unrolling it over the vocabulary (a 255-character URI on Llama-3: 4.3 s), and its masks
    equal the eager stitched guide's along walks."""
    import re as regex_module

    from product.stitched import FragmentLibrary
    from vegas.schema import Compiler

    canonical = automaton_of("gpt2")
    schema = {"type": "object", "properties": {"home": {"type": "string", "format": "uri", "maxLength": 60}},
              "required": ["home"], "additionalProperties": False}
    compiler = Compiler.load(schema, "json", leaves=True)
    skeleton, options = compiler.document(), dict(leaf_exceptions=compiler.exceptions)
    eager = compile_stitched(skeleton, compiler.leaves, canonical, library=FragmentLibrary(canonical), **options)
    library = FragmentLibrary(canonical)
    lazy = compile_stitched(skeleton, compiler.leaves, canonical, library=library, lazy=True, **options)
    rng = np.random.default_rng(11)
    for _ in range(12):
        walk_alike(eager, lazy, rng, 40)
    built_lazily = [key[0] for key in library._fragments if key[-1] == "lazy"]
    assert any(len(regex_module.findall(r"\{0,\d+\}", regex)) > 32 for regex in built_lazily), built_lazily
    assert set(built_lazily) & library._uncounted  # (its other entry contexts do not try the counter again)


@pytest.mark.parametrize("tokenizer, style", [("gpt2", "yaml"), ("llama3", "json"), ("qwen3", "json"),
                                              ("smollm2", "yaml")])
def test_instances_proven_live_without_their_fragment_are_live(tokenizer, style):
    """A lazy stitched guide enters an instance whose liveness ``proven_live`` proves (a piece boundary at the cut
    stands whatever follows one of its first bytes; where the tokenizer cannot spell every text — Qwen3's NFC,
    SmolLM2's missing control bytes — a text of printable ASCII from there to the end) only when a walk reaches it.
    Held to the eager linking, which builds every instance: no instance it finds dead is proven live (GPT-2's YAML
    has dead ones: a line break whose context needs a space next, then a key), and most live ones are proven."""
    from product.stitched import proven_live
    from tests.product.test_stitched import CASES
    from vegas.schema import Compiler

    canonical = automaton_of(tokenizer)
    counts = {(dead, proven): 0 for dead in (False, True) for proven in (False, True)}
    for schema in CASES.values():
        compiler = Compiler.load(schema, style, leaves=True)
        guide = compile_stitched(compiler.document(), compiler.leaves, canonical, leaf_exceptions=compiler.exceptions)
        linker = guide._linker
        for (roots, ctx), fragment in linker.fragment_of.items():
            counts[fragment is None, proven_live(linker.sk, canonical, roots, ctx)] += 1
    assert counts[True, True] == 0, counts
    assert counts[True, False] > 0 or (tokenizer, style) != ("gpt2", "yaml"), counts
    assert counts[False, True] > counts[False, False], counts


def test_every_text_is_spelled_where_the_tokenizer_can_spell_it():
    """The proof above needs the completion to have a tokenization: every text has one on GPT-2 and Llama-3
    (byte-level, no normaliser); not on Qwen3 (NFC rewrites U+212B ANGSTROM SIGN, so no tokenization holds it) nor
    SmolLM2 (no token for some control bytes), where printable ASCII is what is safe."""
    from product.stitched import _safe_bytes, _spells_every_text

    assert _spells_every_text(automaton_of("gpt2")) and _spells_every_text(automaton_of("llama3"))
    for name in ("qwen3", "smollm2"):
        assert not _spells_every_text(automaton_of(name))
        assert _safe_bytes(automaton_of(name)) == frozenset(range(0x20, 0x7F))
    runtime = runtime_of("qwen3")
    assert runtime.decode(runtime.encode("\u212b", add_special_tokens=False).ids) != "\u212b"
    smollm2 = automaton_of("smollm2")
    assert b"\x04" not in {text for text in smollm2.token_bytes if text}


@pytest.mark.parametrize("style", ["json", "yaml"])
def test_a_schema_compiled_lazily_accepts_its_instances_only(style):
    """``vegas.compile_schema(..., lazy=True)`` on the hand-written schemas (Llama-3, memory only): every valid
    instance's runtime encoding accepted, every invalid one's rejected."""
    import vegas
    from tests.schema_cases import INVALID, SCHEMAS, VALID

    canonical, runtime = automaton_of("llama3"), runtime_of("llama3")
    for name, schema in SCHEMAS.items():
        guide = vegas.compile_schema(schema, canonical, style=style, lazy=True, library_dir=False)
        for instance in VALID.get(name, []):
            text = vegas.format_instance(instance, schema, style=style)
            assert guide.accepts(runtime.encode(text, add_special_tokens=False).ids), (name, text)
        for instance in INVALID.get(name, []):
            try:
                text = vegas.format_instance(instance, schema, style=style)
            except vegas.SchemaError:
                continue
            assert not guide.accepts(runtime.encode(text, add_special_tokens=False).ids), (name, text)


def test_a_short_row_holds_only_its_own_entries():
    """A lazy guide keeps its last 64 state rows: a row of a few tokens must not hold the vocabulary-sized buffers
    the trie walk filled (605 kept rows of a Github_medium walk on Llama-3 held 621 MB for 4.2 MB of entries); a row
    of most of the vocabulary may stay a view of them. Both equal the eager walk's row."""
    canonical = automaton_of("gpt2")
    trie = vocabulary_trie(canonical)
    dfa = from_regex(r'(?:"key"|[^"]*)x')
    eager = TokenTransitions.build(dfa, trie)
    for state in range(dfa.num_states):
        tokens, targets = state_row(np.ascontiguousarray(dfa.transitions), trie, state)
        lo, hi = eager.offsets[state], eager.offsets[state + 1]
        assert np.array_equal(tokens, eager.tokens[lo:hi]) and np.array_equal(targets, eager.targets[lo:hi])
        for row in (tokens, targets):
            held = row.base.nbytes if row.base is not None else row.nbytes
            assert held <= 2 * row.nbytes or held <= 64, (state, len(row), held)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
@pytest.mark.parametrize("walk", ["segments", "per state"])
def test_rows_are_each_tokens_bytes_read_through_the_table(tokenizer, walk, monkeypatch):
    """The trie walks (``state_row``; ``TokenTransitions.build`` by segments or state by state), which take a subtree
    whole where every byte of it loops back to the state it is read in, against every token's bytes run through the
    table one by one (``node_kernels.read_tokens``)."""
    import product.compiler.token_regex as token_regex
    from product.compiler.node_kernels import read_tokens

    if walk == "per state":
        monkeypatch.setattr(token_regex, "_MAX_SEGMENT_TABLE", 0)
    canonical = automaton_of(tokenizer)
    trie = vocabulary_trie(canonical)
    every = np.arange(canonical.vocab_size, dtype=np.int64)
    for pattern in [r'"([^"\\]|\\["\\/bfnrt])*"', r"[a-z ]*x", r"(ab|[^b\n])*c", "[\u00e0-\u00ff a-z]+!", r"[0-9]{1,3}"]:
        dfa = from_regex(pattern)
        table = np.ascontiguousarray(dfa.transitions)
        eager = TokenTransitions.build(dfa, trie)
        looped = 0
        for state in range(dfa.num_states):
            reached = read_tokens(table, state, every, canonical.token_blob, canonical.token_offsets)
            expected = np.flatnonzero(canonical.token_has_bytes & (reached >= 0))
            tokens, targets = state_row(table, trie, state)
            assert np.array_equal(tokens, expected) and np.array_equal(targets, reached[expected]), (pattern, state)
            lo, hi = eager.offsets[state], eager.offsets[state + 1]
            assert np.array_equal(eager.tokens[lo:hi], expected) and np.array_equal(eager.targets[lo:hi],
                                                                                      reached[expected])
            looped += int((reached[expected] == state).sum())
        assert looped > 1000 or pattern == r"[0-9]{1,3}"  # (the loops are taken: most of a free text's tokens)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_nodes_with_one_future_share_their_rows_across_guides(tokenizer, monkeypatch):
    """A free string's body followed by the same closing has the same rows whatever came before it
    (``_SharedRows``): a second guide takes them instead of building them, and its masks are still the eager
    guide's; a body followed by another closing, or ending elsewhere, gets its own."""
    built: list[int] = []
    live_rows = LazyGuide._live_rows

    def counting(self, node):
        if node not in self._node_rows:
            built.append(node)
        return live_rows(self, node)

    monkeypatch.setattr(LazyGuide, "_live_rows", counting)
    store = lazy_module._SharedRows()  # (this test's own: what earlier tests shared does not count here)
    monkeypatch.setattr(lazy_module, "_shared_rows", lambda canonical: store)
    rng = np.random.default_rng(3)
    body = '"[^"\\n]*"'
    walks = {}
    for prefix, closing, written in [("first: ", "", ""), ("second: ", "", ""), ("third: ", "!", "!"),
                                     ("fourth: ", "(,)?", ",")]:
        eager, lazy = _pair(tokenizer, prefix + body + closing)
        built.clear()
        state, reference = lazy.initial_state, eager.initial_state
        for token in runtime_of(tokenizer).encode(prefix + '"a free text"' + written, add_special_tokens=False).ids:
            assert np.array_equal(eager.allowed(reference), lazy.allowed(state))
            state, reference = lazy.advance(state, token), eager.advance(reference, token)
        assert np.array_equal(eager.allowed(reference), lazy.allowed(state))
        walks[prefix] = len(built), len(lazy._descriptors)  # (along the text: rows built, masks served)
        for _ in range(4):
            walk_alike(eager, lazy, rng, 30)
    (first_built, first_served), (second_built, second_served) = walks["first: "], walks["second: "]
    assert second_served == first_served and second_built < min(first_built, second_served)  # (the body's: shared)


def _rows_walked(monkeypatch) -> list[int]:
    """The regex states whose rows lazy guides walk the vocabulary for, recorded from now on, with a fresh table of
    shared rows for this test alone."""
    walked: list[int] = []
    build_row = LazyGuide._build_row
    monkeypatch.setattr(LazyGuide, "_build_row", lambda self, q: (walked.append(q), build_row(self, q))[1])
    store = lazy_module._SharedRows()
    monkeypatch.setattr(lazy_module, "_shared_rows", lambda canonical: store)
    return walked


def _same_along_text(eager, lazy, ids: list[int]) -> None:
    """The lazy guide's masks equal the eager guide's before every token of ``ids`` and after them, where the text
    ends."""
    state, reference = lazy.initial_state, eager.initial_state
    for token in ids:
        assert np.array_equal(eager.allowed(reference), lazy.allowed(state))
        state, reference = lazy.advance(state, token), eager.advance(reference, token)
    assert np.array_equal(eager.allowed(reference), lazy.allowed(state)) and lazy.is_accepting(state)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3", "qwen3"])
def test_nodes_on_one_cycle_share_what_stays_in_it(tokenizer, monkeypatch):
    """A free string's body followed by texts no other guide had (``_Cycle``): the tokens staying in the body are
    shared by the body's cycle and context, so a later guide does not walk the vocabulary from the body — it reads
    only the tokens leaving it — and its masks are still the eager guide's, along the text and along random walks."""
    walked = _rows_walked(monkeypatch)
    rng = np.random.default_rng(5)
    body = r'"([^"\\]|\\["\\/bfnrt])*"'
    text = '{"x": "a free text, with ünïcode, a \\" and more"'
    for i, closing in enumerate([', "alpha": 1}', ', "beta": [2]}', '}']):
        pattern = r'\{"x": ' + body + re.escape(closing)
        eager, lazy = _pair(tokenizer, pattern)
        walked.clear()
        _same_along_text(eager, lazy, runtime_of(tokenizer).encode(text + closing, add_special_tokens=False).ids)
        inside = lazy._dfa.run(list(b'{"x": "'), lazy._dfa.start)
        assert lazy._cycle(inside) is not None
        assert (inside in walked) == (i == 0), (i, walked)
        for _ in range(4):
            walk_alike(eager, lazy, rng, 30)


@pytest.mark.parametrize("tokenizer", ["gpt2", "llama3"])
def test_a_key_inside_a_loop_of_members_shares_the_string_bodys_cycle(tokenizer, monkeypatch):
    """A free key's body lies on the loop of an object's members (key, value, comma, next key: one strongly connected
    component); its cycle is taken among the states reading many bytes — the body alone — so it shares the rows a
    string value's body left in another guide: the key's body walks no vocabulary, and the masks stay the eager
    guide's along the text and along random walks (tokens holding a quote or a backslash may leave the body and come
    back: read by each guide)."""
    walked = _rows_walked(monkeypatch)
    rng = np.random.default_rng(7)
    body = r'"([^"\\]|\\["\\/bfnrt])*"'
    value = r'\{"x": ' + body + r'\}'
    members = r'\{(' + body + r': [0-9]+(, ' + body + r': [0-9]+)*)?\}'
    texts = {value: '{"x": "a free text, with ünïcode, a \\" and more"}',
             members: '{"a free text, with ünïcode, a \\" and more": 1, "b": 22}'}
    for i, pattern in enumerate([value, members]):
        eager, lazy = _pair(tokenizer, pattern)
        walked.clear()
        _same_along_text(eager, lazy, runtime_of(tokenizer).encode(texts[pattern], add_special_tokens=False).ids)
        inside = lazy._dfa.run(list(b'{"x": "' if i == 0 else b'{"'), lazy._dfa.start)
        cycle = lazy._cycle(inside)
        assert cycle is not None and len(cycle.order) < 8  # (the body and its characters' continuation bytes)
        assert (inside in walked) == (i == 0), (i, walked)
        for _ in range(4):
            walk_alike(eager, lazy, rng, 30)
