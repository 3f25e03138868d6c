"""The character classes of the pre-tokenizer come from the runtime, not Python's ``unicodedata``.

The runtime's regex engine (Oniguruma inside HF ``tokenizers``) knows a newer Unicode than Python 3.11 (Unicode
14): the characters below were assigned in Unicode 15, 15.1 and 16, and are unassigned (Cn) to Python 3.11. Its
``Digits`` and ``Punctuation`` pre-tokenizers use Unicode tables of their own again. The runtime is the oracle:
its pieces and its encodings of text holding them are what the automaton must draw and accept. So are its
normalisers' tables (the characters NFC/NFKC/NFD/NFKD and Lowercase rewrite), which are not Python's either.
"""

import dataclasses
import random
import unicodedata

import numpy as np
import pytest
from tokenizers import Regex, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from bpe import SplitRule, compile_tokenizer, load_tokenizer
from bpe import automaton as automaton_module
from bpe.pretokenizer import CLASSES, build_segmentation, symbol_alphabet
from bpe.unicode_classes import class_bits
from tests.bpe.forms import O200K_PATTERN, gpt2_json, load_pair, runtime_pieces
from tests.support import automaton_of, model_of, runtime_of

# Assigned after Unicode 14, with the classes the runtime puts them in: letters of every case class but Lt (no
# titlecase letter has been added since), marks, numbers, punctuation, and two symbols (in no class).
NEWER_CHARACTERS = {
    "\U00031350": (r"\p{L}", r"\p{Lo}"),  # CJK Extension H (15.0)
    "\U0002EBF0": (r"\p{L}", r"\p{Lo}"),  # CJK Extension I (15.1)
    "\u1C89": (r"\p{L}", r"\p{Lu}"),  # Cyrillic capital TJE (16.0)
    "\u1C8A": (r"\p{L}", r"\p{Ll}"),  # Cyrillic small tje (16.0)
    "\U0001E030": (r"\p{L}", r"\p{Lm}"),  # modifier letter Cyrillic small a (15.0)
    "\u0CF3": (r"\p{M}",),  # Kannada sign combining anusvara above right (15.0)
    "\u0897": (r"\p{M}",),  # Arabic pepet (16.0)
    "\U00011F50": (r"\p{N}",),  # Kawi digit zero (15.0)
    "\U0001D2C0": (r"\p{N}",),  # Kaktovik numeral zero (15.0)
    "\U00011F43": (r"\p{P}",),  # Kawi danda (15.0)
    "\u1B4E": (r"\p{P}",),  # Balinese inverted carik siki (16.0)
    "\u2FFC": (),  # ideographic description character (15.1, So)
    "\u31EF": (),  # CJK stroke HXG (16.0, So)
}


def _texts_with_newer_characters() -> list[str]:
    """Each newer character beside letters, digits, punctuation, spaces, newlines and the others, in a JSON
    string (the case CI hit: ``"\\U00031350\\n"``) and in random mixes."""
    newer = list(NEWER_CHARACTERS)
    texts = ['"\U00031350\\n"']
    for c in newer:
        texts += [c, f'"{c}\\n"', f"a{c}b", f" {c}{c}", f"{c}1", f"12{c}3", f"'s{c}", f"x {c}\n", f"!{c}?", f"{c}é",
                  f"A{c}a", f"{c}\u0301", f"\t{c}  \n{c}"]
    rng = random.Random(15)
    alphabet = newer + ["a", "Z", "1", "7", " ", "  ", "\n", "'", "'s", "!", '"', "\\n", "é", "中", "\u0301", "ǅ"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 14))) for _ in range(400)]
    return texts


def test_the_probed_classes_are_the_runtime_split_s_on_code_points_of_every_plane():
    """For every class a pattern may use, the probed table (and the symbols the automaton reads) say what the
    runtime's Split pre-tokenizer says, on code points drawn from all 17 planes, from every class's members,
    and on the newer characters."""
    bits = class_bits(CLASSES)
    alphabet = symbol_alphabet()
    rng = np.random.default_rng(14)
    sample = np.concatenate([rng.integers(plane << 16, (plane + 1) << 16, 300) for plane in range(17)]
                            + [rng.choice(np.flatnonzero(bits & (1 << k)), 200) for k in range(len(CLASSES))]
                            + [np.arange(128), [ord(c) for c in NEWER_CHARACTERS]])
    sample = sample[(sample < 0xD800) | (sample >= 0xE000)]  # no text holds a surrogate
    text = "".join(map(chr, sample.tolist()))
    for k, key in enumerate(CLASSES):
        kept = pre_tokenizers.Split(Regex(key), "removed").pre_tokenize_str(text)  # drops the class's members
        in_runtime = np.ones(len(sample), dtype=bool)
        for _, (start, end) in kept:
            in_runtime[start:end] = False
        assert in_runtime.sum() >= 150, key
        assert np.array_equal((bits[sample] >> k & 1).astype(bool), in_runtime), key
        non_ascii = sample >= 128
        in_symbols = alphabet.class_symbols(key)[alphabet.table[sample[non_ascii]]]
        assert np.array_equal(in_symbols, in_runtime[non_ascii]), key
    for c, classes in NEWER_CHARACTERS.items():
        assert tuple(key for k, key in enumerate(CLASSES) if bits[ord(c)] >> k & 1) == classes, hex(ord(c))


@pytest.mark.parametrize("name", ["gpt2", "llama3", "o200k_pattern"])
def test_pieces_of_text_with_newer_characters_are_the_runtime_s(name):
    if name == "o200k_pattern":  # every letter case class and the marks (o200k, gpt-oss)
        rules = (SplitRule(O200K_PATTERN),)
        pre = pre_tokenizers.Split(Regex(O200K_PATTERN), "isolated")
    else:
        rules = model_of(name).pre_tokenizer
        pre = runtime_of(name).pre_tokenizer
    segmentation = build_segmentation(rules)
    for text in _texts_with_newer_characters():
        runtime = [text[start:end] for _, (start, end) in pre.pre_tokenize_str(text)]
        assert segmentation.marks(text) == runtime, repr(text)


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_runtime_encodings_of_text_with_newer_characters_are_accepted(name):
    runtime, automaton = runtime_of(name), automaton_of(name)
    rejected = [text for text in _texts_with_newer_characters()
                if not automaton.accepts(runtime.encode(text, add_special_tokens=False).ids)]
    assert rejected == []


def test_the_cache_key_names_where_the_unicode_tables_come_from(monkeypatch):
    """An automaton built on another runtime's Unicode tables is not found under this one's key."""
    tokenizer = model_of("gpt2")
    key = automaton_module.tokenizer_key(tokenizer)
    monkeypatch.setattr(automaton_module, "unicode_source", lambda: "tokenizers 0.0.0")
    assert automaton_module.tokenizer_key(tokenizer) != key


# Where the runtime's Digits and Punctuation pre-tokenizers (Rust's char::is_numeric, Unicode 17; ASCII punctuation
# or the unicode_categories crate's) disagree with its regex engine or with Python.
RUST_PREDICATE_CHARACTERS = [
    "\u061D",  # Arabic end of text mark: Po since Unicode 14, not punctuation to the crate
    "\u166D",  # Canadian syllabics chi sign: So since Unicode 12, punctuation to the crate
    "\U000111CA",  # Sharada sign nukta: Mn, punctuation to the crate
    "\u1B4E",  # Po in Unicode 16, not punctuation to the crate
    "\U00011DE0",  # a digit in Unicode 17 (Rust), unassigned to the regex engine
    "\U00016FF4",  # a number in Unicode 17 (Rust), unassigned to the regex engine
]


@pytest.mark.parametrize("pre_tokenizer", [
    pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Digits(individual_digits=False),
    *(pre_tokenizers.Punctuation(behavior) for behavior in ("isolated", "removed", "merged_with_previous",
                                                             "merged_with_next", "contiguous"))],
    ids=["digits_individual", "digits_contiguous", "punct_isolated", "punct_removed", "punct_merged_with_previous",
         "punct_merged_with_next", "punct_contiguous"])
def test_digits_and_punctuation_pre_tokenizers_split_where_the_runtime_s_own_do(pre_tokenizer):
    """The loader's rule for each draws the runtime pre-tokenizer's own pieces, on text mixing the characters
    where its Unicode tables disagree with the regex engine's, ASCII, and code points from every plane."""
    runtime = HFTokenizer(models.BPE({"a": 0}, []))
    runtime.pre_tokenizer = pre_tokenizer
    segmentation = build_segmentation(load_tokenizer(runtime, eos_token_ids=[0]).pre_tokenizer)
    rng = random.Random(17)
    anywhere = [chr(cp) for cp in (rng.randrange(plane << 16, (plane + 1) << 16) for plane in range(17) for _ in
                                   range(40)) if not 0xD800 <= cp < 0xE000]
    alphabet = RUST_PREDICATE_CHARACTERS * 8 + list(NEWER_CHARACTERS) + ["a", "1", "!", "$", " ", "\n", "٣"]
    texts = ["".join(rng.choice(alphabet if rng.random() < 0.7 else anywhere) for _ in range(rng.randint(1, 12)))
             for _ in range(1500)]
    for text in texts:
        assert segmentation.marks(text) == runtime_pieces(pre_tokenizer, text), repr(text)


# Where the runtime's normalisers disagree with Python's: characters Python's NFKC/NFKD decompose and the runtime
# leaves (modifier letters of Unicode 14, SQUARE ERA NAME REIWA, segmented digits), the one Python's NFD/NFKD
# decompose and the runtime leaves (DIVES AKURU VOWEL SIGN O), and capitals of Unicode 16 only Rust lowercases.
DISAGREEING_NORMALISER_CHARACTERS = ["\U00010781", "\U000107BA", "\u32FF", "\uA7F2", "\U0001FBF0", "\U00011938",
                                     "\u1C89", "\U00010D50", "\U00016EA0"]
# Characters each normaliser rewrites whatever surrounds them (Angstrom sign, ligature fi, precomposed e acute).
REWRITTEN_CHARACTER = {"NFC": "\u212B", "NFKC": "\u212B\uFB01", "NFD": "\u212B\u00E9", "NFKD": "\uFB01\u00E9",
                       "Lowercase": "A\u1C89"}
NORMALISERS = {"NFC": "nfc", "NFKC": "nfkc", "NFD": "nfd", "NFKD": "nfkd", "Lowercase": "lowercase"}


def _python_rewrites(normalizer: str, cp: int) -> bool:
    c = chr(cp)
    return c.lower() != c if normalizer == "Lowercase" else not unicodedata.is_normalized(normalizer, c)


@pytest.mark.parametrize("normalizer", sorted(NORMALISERS))
def test_the_characters_a_normaliser_excludes_are_those_the_runtime_s_rewrites(normalizer):
    """The characters the automaton excludes under a normaliser are exactly those the runtime's own normaliser
    changes alone, on code points drawn from all 17 planes, on the excluded ones, and on those where Python's
    tables say otherwise."""
    model = dataclasses.replace(model_of("gpt2"), normalizer=((NORMALISERS[normalizer],),))
    excluded = automaton_module.excluded_code_points(model)
    normalize = getattr(normalizers, normalizer)().normalize_str
    rng = np.random.default_rng(16)
    sample = np.concatenate([rng.integers(plane << 16, (plane + 1) << 16, 300) for plane in range(17)]
                            + [rng.choice(np.flatnonzero(excluded), 300), np.arange(128),
                               [ord(c) for c in DISAGREEING_NORMALISER_CHARACTERS]])
    sample = sample[(sample < 0xD800) | (sample >= 0xE000)].tolist()
    assert [cp for cp in sample if excluded[cp] != (normalize(chr(cp)) != chr(cp))] == []
    python_disagrees = [c for c in DISAGREEING_NORMALISER_CHARACTERS
                        if _python_rewrites(normalizer, ord(c)) != bool(excluded[ord(c)])]
    expected = {"NFC": [], "NFKC": DISAGREEING_NORMALISER_CHARACTERS[:5], "NFD": ["\U00011938"],
                "NFKD": DISAGREEING_NORMALISER_CHARACTERS[:6], "Lowercase": DISAGREEING_NORMALISER_CHARACTERS[6:]}
    assert python_disagrees == expected[normalizer]


@pytest.mark.parametrize("normalizer", sorted(NORMALISERS))
def test_runtime_encodings_of_text_the_normaliser_leaves_are_accepted_and_what_it_rewrites_is_not(normalizer,
                                                                                                  tmp_path):
    """GPT-2 under each normaliser accepts the runtime's encodings of text holding the characters where Python's
    tables disagree with the runtime's (Python would have excluded the first six under NFKC/NFKD, U+11938 under
    NFD); and no token holding a character the runtime's normaliser rewrites is ever allowed, nor such a
    character spelled byte by byte."""
    data = gpt2_json()
    data["normalizer"] = {"type": normalizer}
    model, runtime = load_pair(data, tmp_path)
    automaton = compile_tokenizer(model)
    rng = random.Random(18)
    alphabet = DISAGREEING_NORMALISER_CHARACTERS + ["a", "Z", " ", "\n", "1", "é", "\u0301", "中"]
    texts = [f"x{c}y {c}{c}\n" for c in DISAGREEING_NORMALISER_CHARACTERS]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    rejected = [text for text in texts if not automaton.accepts(runtime.encode(text, add_special_tokens=False).ids)]
    assert rejected == []
    normalize = runtime.normalizer.normalize_str
    rewriting = [t for t, b in enumerate(model.token_bytes) if b and any(
        normalize(c) != c for c in b.decode("utf-8", "ignore"))]
    assert (len(rewriting) > 20 or normalizer == "NFC") and not automaton.allowed_after(automaton.start_class)[
        rewriting].any()  # (GPT-2 has no token holding a character NFC rewrites)
    byte_token = {b: t for t, b in enumerate(model.token_bytes) if b is not None and len(b) == 1}
    for c in REWRITTEN_CHARACTER[normalizer]:
        assert normalize(c) != c
        assert not automaton.accepts([byte_token[bytes([b])] for b in f"a{c}".encode()])
