"""``product.compile_grammar`` against the real tokenizer runtime: the example grammars that are regular compile;
a string of the grammar is accepted in its canonical tokenization and in no other; a string outside it is refused;
random walks over the masks never dead-end and end in text the grammar's reference parser accepts (Lark's parser for
Lark grammars, the Earley recogniser for GBNF) and that re-encodes to the walk's tokens; recursive grammars are
compiled over their configurations (no depth bound) and refused, naming the rule, where that guide cannot be built."""

from __future__ import annotations

import random
import zlib

import lark
import numpy as np
import pytest

from automata import from_regex
from automata.grammar import Recognizer, UnsupportedGrammarError, parse_grammar
from automata.grammar.sample import sample
from bpe.assets import asset_path
from product import compile_grammar
from product.grammar import grammar_regex
from tests.automata.test_grammar import CALL, SELECT, lark_accepts, mutants
from tests.support import automaton_of, model_of, runtime_of
from vegas import cli

REGULAR_EXAMPLES = ("chess", "english", "japanese", "list")
GRAMMARS = {name: (asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8"), "gbnf")
            for name in REGULAR_EXAMPLES}
GRAMMARS["call"] = (CALL, "lark")
GRAMMARS["select"] = (SELECT, "lark")
# Lark's left recursion (sum, product) and a tail (atom): regular without parentheses
GRAMMARS["sums"] = (r"""
?start: sum
?sum: sum "+" product | sum "-" product | product
?product: product "*" atom | product "/" atom | atom
?atom: NUMBER | "-" atom | NAME
NAME: /[a-z_][a-z_0-9]*/
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
""", "lark")
#: recursion no regex expresses: a guide over the grammar's configurations (``PushdownGuide``), no depth bound
RECURSIVE_EXAMPLES = ("arithmetic", "c", "json", "json_arr")
GRAMMARS.update({name: (asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8"), "gbnf")
                 for name in RECURSIVE_EXAMPLES})
GRAMMARS["calculator"] = (r"""
?start: sum
?sum: sum "+" product | sum "-" product | product
?product: product "*" atom | product "/" atom | atom
?atom: NUMBER | "-" atom | NAME | "(" sum ")"
NAME: /[a-z_][a-z_0-9]*/
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
""", "lark")
RECURSIVE = set(RECURSIVE_EXAMPLES) | {"calculator"}
#: recursive grammars compiled with a depth bound (opt-in): the strings nested at most that deep, exactly
DEPTH = {"json": 6, "arithmetic": 4}
GRAMMARS.update({f"{name} (depth {d})": (asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8"), "gbnf")
                 for name, d in DEPTH.items()})


TOKENIZERS = ("gpt2", "smollm2", "llama3")
#: every grammar on every tokenizer, but the depth-bounded ones on SmolLM2 (its automaton's classes add nothing new)
CASES = [(name, tokenizer) for name in sorted(GRAMMARS) for tokenizer in TOKENIZERS
         if not ("(depth" in name and tokenizer == "smollm2")]
# the sweep (-m slow): Mistral (SentencePiece-style, byte fallback) and Qwen3 (NFC) too
CASES += [pytest.param(name, tokenizer, marks=pytest.mark.slow) for name in sorted(GRAMMARS)
          for tokenizer in ("mistral", "qwen3")
          if not (name in RECURSIVE and tokenizer == "mistral")]  # (refused there: no pre-tokenizer splits)


def depth_of(name: str) -> int | None:
    return int(name.split("(depth ")[1][:-1]) if "(depth " in name else None


_BOUNDED: dict = {}


def in_bounded_language(name: str, text: str) -> bool:
    """Whether ``text`` is in the language the guide is for (the grammar's, or its strings up to the depth)."""
    if name in RECURSIVE:
        return True  # (no bound: the guide's language is the grammar's)
    if name not in _BOUNDED:
        _BOUNDED[name] = from_regex(grammar_regex(*GRAMMARS[name][:1], syntax=GRAMMARS[name][1],
                                                  max_depth=depth_of(name)))
    return _BOUNDED[name].accepts(text)

_GUIDES: dict = {}


def guide_of(name: str, tokenizer: str):
    if (name, tokenizer) not in _GUIDES:
        text, syntax = GRAMMARS[name]
        _GUIDES[name, tokenizer] = compile_grammar(text, automaton_of(tokenizer), syntax=syntax,
                                                   max_depth=depth_of(name))
    return _GUIDES[name, tokenizer]


_REFERENCES: dict = {}
_RECOGNIZERS: dict = {}


def recognizer_of(name: str) -> Recognizer:
    if name not in _RECOGNIZERS:
        _RECOGNIZERS[name] = Recognizer(parse_grammar(*GRAMMARS[name]))
    return _RECOGNIZERS[name]


def in_grammar(name: str, text: str) -> bool:
    """The reference's verdict: Lark's own Earley parser for Lark grammars, the recogniser for GBNF."""
    if name not in _REFERENCES:
        grammar, syntax = GRAMMARS[name]
        _REFERENCES[name] = (lark.Lark(grammar, parser="earley", lexer="dynamic_complete") if syntax == "lark"
                             else recognizer_of(name))
    reference = _REFERENCES[name]
    return lark_accepts(reference, text) if isinstance(reference, lark.Lark) else reference.accepts(text)


def other_tokenizations(runtime, text: str, ids: list[int], rng: random.Random, count: int = 4) -> list[list[int]]:
    """Tokenizations of ``text`` other than ``ids``: the text cut in two at a random character, each part encoded
    on its own (a cut inside what one token spans, or across a merge)."""
    out = []
    for _ in range(count):
        cut = rng.randrange(1, len(text)) if len(text) > 1 else 1
        split = runtime.encode(text[:cut], add_special_tokens=False).ids + runtime.encode(
            text[cut:], add_special_tokens=False).ids
        if split != ids and runtime.decode(split) == text:
            out.append(split)
    return out


@pytest.mark.parametrize("name, tokenizer", CASES)
def test_grammar_strings_are_accepted_canonically_and_only_so(name, tokenizer):
    guide, runtime = guide_of(name, tokenizer), runtime_of(tokenizer)
    grammar = parse_grammar(GRAMMARS[name][0], GRAMMARS[name][1])
    rng = random.Random(zlib.crc32(f"{name}:{tokenizer}".encode()))
    others = outside = 0
    for _ in range(20):
        text = sample(grammar, rng, max_depth=6, max_repeat=3)
        assert in_grammar(name, text), text
        if not in_bounded_language(name, text):
            assert depth_of(name) is not None, text
            continue  # nested deeper than the bound: not in the guide's language (checked below, as outside)
        ids = runtime.encode(text, add_special_tokens=False).ids
        if runtime.decode(ids) != text:
            continue  # a character the vocabulary cannot spell (SmolLM2 lacks some byte tokens): no tokenization
        assert guide.accepts(ids), (text, ids)
        for split in other_tokenizations(runtime, text, ids, rng):
            others += 1
            assert not guide.accepts(split), (text, [runtime.id_to_token(t) for t in split])
        for mutant in mutants(text, rng):
            if not recognizer_of(name).accepts(mutant) or not in_bounded_language(name, mutant):
                # (outside the grammar, by the recogniser, which agrees with Lark: tests/automata; or past the depth)
                outside += 1
                assert not guide.accepts(runtime.encode(mutant, add_special_tokens=False).ids), mutant
    # (Mistral spells each CJK character as its own token or bytes: japanese has no other split to refuse)
    assert (others >= 3 or (name, tokenizer) == ("japanese", "mistral")) and outside >= 3


@pytest.mark.parametrize("name, tokenizer", CASES)
def test_random_walks_never_dead_end_and_end_in_canonical_grammar_text(name, tokenizer):
    guide, runtime = guide_of(name, tokenizer), runtime_of(tokenizer)
    rng = np.random.default_rng(zlib.crc32(f"walk:{name}:{tokenizer}".encode()))
    eos = np.array(guide.eos_token_ids)
    steer = _Steering(grammar_regex(GRAMMARS[name][0], syntax=GRAMMARS[name][1],
                                    max_depth=_STEER_DEPTH if name in RECURSIVE else depth_of(name)),
                      model_of(tokenizer).token_bytes)
    finished = 0
    for _ in range(30):
        state, ids, q = guide.initial_state, [], steer.dfa.start
        for step in range(120):
            allowed = guide.allowed(state)
            assert allowed.any(), f"dead end after {ids}"
            if guide.is_accepting(state) and (rng.random() < 0.2 or step > 30):
                break
            allowed[eos] = False
            choices = np.flatnonzero(allowed)
            if not len(choices):
                break  # (the text can only end: the state accepts, or the mask held a token)
            token = int(rng.choice(choices))
            if step > 20:  # time to end: of the allowed tokens of 1-2 bytes and 100 others, one nearest the end
                candidates = np.union1d(rng.choice(choices, min(100, len(choices)), replace=False),
                                        choices[steer.short[choices]])
                distances = [steer.distance_after(q, int(t)) for t in candidates]
                token = int(rng.choice(candidates[np.flatnonzero(distances == np.min(distances))]))
            q = steer.after(q, token)
            ids.append(token)
            state = guide.advance(state, token)
        else:
            continue  # cut off before accepting: only the absence of dead ends is checked
        finished += 1
        text = runtime.decode(ids, skip_special_tokens=False)
        assert in_grammar(name, text), (text, ids)
        assert runtime.encode(text, add_special_tokens=False).ids == ids, text
    assert finished >= 10


_STEER_DEPTH = 3  # (a recursive grammar's walks are steered to an end by its strings nested at most this deep)


class _Steering:
    """The grammar's byte DFA and each state's distance (in bytes) to acceptance: walks use it to end in time."""

    def __init__(self, regex: str, token_bytes: list):
        self.dfa, self.token_bytes = from_regex(regex), token_bytes
        self.short = np.array([b is not None and len(b) <= 2 for b in token_bytes])
        table = self.dfa.transitions
        self.distance = np.where(self.dfa.accepting, 0, 1 << 30)
        for _ in range(self.dfa.num_states):  # Bellman-Ford on unit edges: a few hundred states
            best = np.where(table >= 0, self.distance[np.maximum(table, 0)] + 1, 1 << 30).min(axis=1)
            new = np.minimum(self.distance, best)
            if (new == self.distance).all():
                break
            self.distance = new

    def after(self, q: int, token: int) -> int:
        return self.dfa.run(list(self.token_bytes[token] or b""), q) if q >= 0 else q

    def distance_after(self, q: int, token: int) -> int:
        q = self.after(q, token)
        return int(self.distance[q]) if q >= 0 else 1 << 30


@pytest.mark.parametrize("name, rule, line", [("arithmetic", "term", 3), ("c", "argList", 35),
                                              ("json", "object", 4), ("json_arr", "array", 19)])
def test_recursive_grammars_are_refused_where_their_guide_cannot_be_built(name, rule, line):
    """Any-tokenization masks and tokenizers without pre-tokenizer splits: a typed refusal naming the recursive rule."""
    text = asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8")
    for kwargs, tokenizer, says in [({"canonical_only": False}, "gpt2", "canonical masks only"),
                                    ({}, "mistral", "pre-tokenizer")]:
        with pytest.raises(UnsupportedGrammarError) as info:
            compile_grammar(text, automaton_of(tokenizer), **kwargs)
        assert (info.value.construct, info.value.rule, info.value.line) == ("recursion", rule, line)
        assert says in str(info.value) and "max_depth" in str(info.value)


def test_left_recursion_is_refused_naming_the_rule():
    grammar = 'root ::= expr\nexpr ::= term "+" term | "(" expr ")" | "x"\nterm ::= expr "*" "x" | "y"\n'
    with pytest.raises(UnsupportedGrammarError) as info:
        compile_grammar(grammar, automaton_of("gpt2"))
    assert info.value.construct == "left recursion" and info.value.rule in ("expr", "term")


def test_cli_refuses_bad_grammars_in_one_line_before_loading_a_model(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text('root ::= "x"\n')
    broken = tmp_path / "broken.lark"
    broken.write_text('start: "a" <|end|>\n')
    left = tmp_path / "left.gbnf"
    left.write_text('root ::= expr\nexpr ::= expr "+" "x" "(" expr ")" | "x"\n')
    for args, names in [([str(left)], ["UnsupportedGrammarError", "'expr'", "left-recursive"]),
                        ([str(notes)], ["cannot tell the syntax", "--syntax"]),
                        ([str(broken)], ["UnsupportedGrammarError", "special tokens", "line 1:12"])]:
        assert cli.main(["generate", "--grammar", *args, "hi"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and all(name in lines[0] for name in names), lines
    assert cli.main(["generate", "--regex", "a", "--max-depth", "3", "hi"]) == 2
    assert "apply to --grammar" in capsys.readouterr().err


def test_a_depth_bound_is_opt_in_and_exact_at_its_edge():
    json_gbnf = asset_path("grammars/json.gbnf").read_text(encoding="utf-8")
    guide, runtime = guide_of("json (depth 6)", "gpt2"), runtime_of("gpt2")
    # root -> object@0 -> value@1 -> object@2 -> ... : at depth 6, values inside a third level of braces; a fourth
    # level may be opened only empty
    three, four = '{"a": {"b": {"c": [], "d": {}}}}', '{"a": {"b": {"c": {"d": 1}}}}'
    assert recognizer_of("json (depth 6)").accepts(four)  # in the grammar, past the bound
    assert guide.accepts(runtime.encode(three, add_special_tokens=False).ids)
    assert not guide.accepts(runtime.encode(four, add_special_tokens=False).ids)
    unbounded = compile_grammar(json_gbnf, automaton_of("gpt2"))  # no bound asked: every depth
    assert unbounded.accepts(runtime.encode(four, add_special_tokens=False).ids)


_LLG: dict = {}


@pytest.mark.parametrize("name", ["c", "chess", "english", "japanese", "json", "json_arr", "list"])
def test_llguidance_agrees_with_the_recognizer_on_llama_cpp_grammars(name):
    """llguidance (a bench dependency: tested where installed) as a second reference for GBNF, on samples and their
    mutants, whole texts through GPT-2's canonical tokens. Not arithmetic: llguidance's GBNF converter makes its
    rules greedy lexemes (``ws`` swallows the newline ``root`` needs), so it rejects texts llama.cpp accepts."""
    llguidance = pytest.importorskip("llguidance")
    llguidance_hf = pytest.importorskip("llguidance.hf")  # (its tokenizer from an HF fast tokenizer)
    from transformers import PreTrainedTokenizerFast  # (llguidance.hf takes a transformers tokenizer)

    runtime = runtime_of("gpt2")
    if "tokenizer" not in _LLG:
        _LLG["tokenizer"] = llguidance_hf.from_tokenizer(
            PreTrainedTokenizerFast(tokenizer_object=runtime, eos_token="<|endoftext|>"))
    text = asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8")
    grammar, recognizer = parse_grammar(text), Recognizer(parse_grammar(text))
    compiled = llguidance.grammar_from("gbnf", text)

    def llguidance_accepts(string: str) -> bool:
        matcher = llguidance.LLMatcher(_LLG["tokenizer"], compiled, log_level=0)
        return all(matcher.consume_token(t) for t in runtime.encode(string, add_special_tokens=False).ids) \
            and matcher.is_accepting()

    rng = random.Random(name)
    checked = 0
    for _ in range(12):
        string = sample(grammar, rng, max_depth=5, max_repeat=3)
        for candidate in [string, *mutants(string, rng)]:
            if runtime.decode(runtime.encode(candidate, add_special_tokens=False).ids) == candidate:
                checked += 1
                assert recognizer.accepts(candidate) == llguidance_accepts(candidate), candidate
    assert checked >= 30
