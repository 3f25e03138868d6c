"""The merge table's canonical automaton (Algorithm 3 on the runtime's clock) against the appendix and the
real runtime."""

import numpy as np
import pytest

from bpe.canonical import build_merge_automaton
from tests.support import model_of, runtime_of

_built: dict = {}


def _mistral():
    if "mistral" not in _built:
        model = model_of("mistral")
        _built["mistral"] = build_merge_automaton(model.merge_table, model.vocab_size, model.base_token_ids)
    return _built["mistral"]


def _allowed(ma, t1, t2) -> bool:
    return not ma.forbidden_mask(int(ma.class_of[t1]))[t2]


def test_appendix_toy_tokenizer_has_three_states():
    # Alphabet {a, b, c} = ids 0, 1, 2; merges (a,b)->ab=3, (a,a)->aa=4, (a,c)->ac=5 (appendix Figure 9).
    table = np.array([[0, 1, 3], [0, 0, 4], [0, 2, 5]], dtype=np.int32)
    ma = build_merge_automaton(table, 6, np.array([0, 1, 2]))
    assert ma.num_classes == 3
    a, b, c, ab, aa, ac = range(6)
    # After a: b (would be ab), a (aa), c (ac) are forbidden, and so is ab/aa/ac (they start with a).
    assert not _allowed(ma, a, b) and not _allowed(ma, a, a) and not _allowed(ma, a, c)
    # "aaa" is aa|a: after aa, a is allowed; after a, aa is not ("a aa" would re-merge as "aa a").
    assert _allowed(ma, aa, a) and not _allowed(ma, a, aa)
    assert _allowed(ma, b, a) and _allowed(ma, ab, ab) and _allowed(ma, c, ac)


def test_mistral_matches_the_reference_measurements():
    """Reference §5.6 (independent re-implementation): 9,364 fused states (9,481 before fusion), the
    largest forbidden set 12,260 tokens, 13 tokens at the maximum, all runs of '▁'."""
    model, ma = model_of("mistral"), _mistral()
    assert ma.num_classes == 9364 and ma.pre_fusion_states == 9481
    counts = np.array([ma.forbidden_count(c) for c in range(ma.num_classes)])
    assert counts.max() == 12260
    at_max = [t for t in range(model.vocab_size) if ma.class_of[t] >= 0 and counts[ma.class_of[t]] == 12260]
    assert len(at_max) == 13 and all(set(model.token_strings[t]) == {"▁"} for t in at_max)


def _restricted_tokens(model, chars: str):
    ids = []
    for t, s in enumerate(model.token_strings):
        if s is not None and t not in model.special_token_ids and set(s) <= set(chars) and not s.startswith("<0x"):
            ids.append(t)
    return ids


@pytest.mark.parametrize("chars", ["▁ab", "▁aeinst", "thes▁"])
def test_mistral_pairs_equal_the_brute_force_runtime_oracle(chars):
    """On a restricted alphabet, t2 may follow t1 exactly when the runtime encodes their text as (t1, t2)."""
    model, runtime, ma = model_of("mistral"), runtime_of("mistral"), _mistral()
    ids = [t for t in _restricted_tokens(model, chars) if ma.produced[t]]
    texts = [(model.token_bytes[x] + model.token_bytes[y]).decode() for x in ids for y in ids]
    encoded = runtime.encode_batch(texts, add_special_tokens=False)
    expected = np.array([e.ids == [x, y] for e, (x, y) in zip(encoded, ((x, y) for x in ids for y in ids))])
    follow = {x: ~ma.forbidden_mask(int(ma.class_of[x])) for x in ids}
    got = np.array([follow[x][y] for x in ids for y in ids])
    assert len(ids) > 20
    assert (got == expected).all(), [(model.token_strings[x], model.token_strings[y])
                                      for (x, y), g, e in zip(((x, y) for x in ids for y in ids), got, expected) if g != e][:10]


def test_mistral_runtime_encodings_of_text_are_accepted_pairwise():
    """Every adjacent pair of regular tokens in the runtime's encoding of real text is allowed."""
    model, runtime, ma = model_of("mistral"), runtime_of("mistral"), _mistral()
    text = (
        "The quick brown fox jumps over the lazy dog. It's 3:45 pm;   spaces   and\ttabs.\n"
        "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
        '{"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"]}\n'
        "Émile Zola écrivit « Germinal » en 1885. Добрый день! Καλημέρα. aaaa bbbb ▁▁\n"
    ) * 3
    ids = runtime.encode(text, add_special_tokens=False).ids
    byte_tokens = set(model.byte_fallback_ids.values())
    pairs = [(x, y) for x, y in zip(ids, ids[1:]) if x not in byte_tokens and y not in byte_tokens]
    assert len(pairs) > 300
    rejected = [(model.token_strings[x], model.token_strings[y]) for x, y in pairs if not _allowed(ma, x, y)]
    assert rejected == []


def _forbids(ma, a: int, b: int) -> bool:
    lo, hi = ma.offsets[ma.class_of[a]], ma.offsets[ma.class_of[a] + 1]
    i = np.searchsorted(ma.starts[lo:hi], ma.position[b], side="right") - 1
    return i >= 0 and ma.position[b] < ma.ends[lo + i]


def test_llama3_pairs_equal_the_runtime_where_merges_fire_out_of_rank_order():
    """Llama-3's merges come from tiktoken ranks: a merge can fire after higher-ranked ones, once a
    later-ranked merge builds its operand. For every such merge (e, f), pairs (t1, t2) where e is on t1's
    right edge and f on t2's left edge (plus random pairs) get the runtime's verdict: its BPE model applied to
    the two tokens' text gives [t1, t2] exactly when t2 may follow t1."""
    from bpe.canonical import derivations, pair_ranks

    model, runtime = model_of("llama3"), runtime_of("llama3")
    ma = build_merge_automaton(model.merge_table, model.vocab_size, model.base_token_ids)
    derivation = derivations(model.merge_table, model.vocab_size, model.base_token_ids,
                              *pair_ranks(model.merge_table, model.vocab_size))
    left, right, clock = derivation.left.tolist(), derivation.right.tolist(), derivation.completed_at
    regular = np.flatnonzero(ma.produced).tolist()
    ending_with: dict[int, list[int]] = {}  # e -> tokens whose right edge passes through e
    starting_with: dict[int, list[int]] = {}
    for t in regular:
        for edge, chain in ((right, ending_with), (left, starting_with)):
            node = t
            while node >= 0:
                chain.setdefault(node, []).append(t)
                node = edge[node]
    late = [(e, f) for k, (e, f, _) in enumerate(model.merge_table.tolist())
            if ma.produced[e] and ma.produced[f] and k < max(clock[e], clock[f])]
    assert len(late) > 1_000, len(late)

    rng = np.random.default_rng(7)
    pairs = [(int(rng.choice(ending_with[e])), int(rng.choice(starting_with[f]))) for e, f in late for _ in range(4)]
    pairs += [(int(a), int(b)) for a, b in rng.choice(regular, (20_000, 2))]
    vocab = {s: i for i, s in enumerate(model.token_strings) if s is not None}
    checked = non_canonical = 0
    for a, b in pairs:
        text = model.token_strings[a] + model.token_strings[b]
        if text in vocab:
            continue  # ignore_merges: a whole piece in the vocabulary is that token; not a pair question
        canonical = [t.id for t in runtime.model.tokenize(text)] == [a, b]
        assert _forbids(ma, a, b) != canonical, (model.token_strings[a], model.token_strings[b], canonical)
        checked += 1
        non_canonical += not canonical
    assert checked > 20_000 and non_canonical > 1_000, (checked, non_canonical)
