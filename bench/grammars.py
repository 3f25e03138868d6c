"""Grammars: canonmerge beside llguidance and XGrammar on llama.cpp's example grammars and three Lark grammars.

For each tokenizer (GPT-2, Llama-3) and grammar — llama.cpp's eight examples (``grammars/*.gbnf`` from the pinned
llama-cpp-python sdist: arithmetic, c, chess, english, japanese, json, json_arr, list) and three of ours in Lark (a
function-call format, a SQL ``SELECT`` subset, a calculator with parentheses) — every engine compiles the grammar (tokenizer-level setup outside
the timing), then walks the runtime's own encoding of a few strings of the grammar (drawn by
``automata.grammar.sample`` with fixed seeds, the same for every engine) plus the final EOS step, filling one
next-token bitmask per step (timed) and advancing by each token. Reported per engine and tokenizer: compile p50,
mask mean/p50/p99, and the share of steps whose mask allows exactly one token (a forced token: canonmerge skips
the forward pass there). Every statistic is the median over ``--repeats`` fresh compiles.

canonmerge compiles every grammar: a regular one through its regex, a recursive one (arithmetic, c, json, json_arr,
the Lark calculator) as a ``PushdownGuide`` built on first visit, so its mask times include the first visits of the
parser configurations the walks meet; the row "canonmerge, lazy" compiles the regular ones with ``lazy=True`` (built
as walked too: compile in milliseconds, first visits in the masks); the row "canonmerge, bounded" compiles the recursive ones instead with an
opt-in depth bound (``max_depth``: arithmetic 4, json and json_arr 6, c 2, calc 8), a smaller language than the
peers' (the walks' strings are shallow enough for it). The peers take GBNF (llguidance through its
GBNF-to-Lark converter, XGrammar as EBNF) and Lark (llguidance; XGrammar has no Lark front end: n/a). A peer that
rejects a walk is reported with the failure: llguidance's GBNF converter makes rules greedy lexemes, which changes
some grammars' languages (arithmetic's ``a=b\\n``), and no peer's masks are canonical.

    python bench/grammars.py [--tokenizers gpt2,llama3] [--repeats 3] [--out bench/results/grammars.json]

``--boundaries`` measures instead what a construction for recursive grammars must handle (docs/design.md,
"Grammars"): in real JSON (the pinned JSON-Schema-Test-Suite files, as ``json.dumps`` writes them and indented),
how often the edges of an object or array — where a grammar pushes or pops — fall on a token boundary of the
canonical tokenization, and how many distinct tokens cross them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peers import _hf_tokenizer  # noqa: E402  (the peers' tokenizer object, as bench/peers.py builds it)

from automata.grammar import UnsupportedGrammarError, parse_grammar  # noqa: E402
from automata.grammar.sample import sample  # noqa: E402
from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import LLAMA_CPP_GRAMMARS, asset_path, reference_runtime, tokenizer_source  # noqa: E402
from product import PushdownGuide, compile_grammar  # noqa: E402
from tests.automata.test_grammar import CALL as _TEST_CALL  # noqa: E402
from tests.automata.test_grammar import SELECT as _TEST_SELECT  # noqa: E402
from tests.product.test_grammar import GRAMMARS as _TEST_GRAMMARS  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("RAYON_NUM_THREADS", "1")

# the Lark grammars the tests hold to Lark's own parser (tests/automata/test_grammar.py, tests/product/test_grammar.py)
CALL, SELECT, CALC = _TEST_CALL, _TEST_SELECT, _TEST_GRAMMARS["calculator"][0]


def grammars() -> list[tuple[str, str, str]]:
    """(name, syntax, text) of every grammar benchmarked."""
    out = [(name, "gbnf", asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8"))
           for name in sorted(LLAMA_CPP_GRAMMARS)]
    return out + [("call (lark)", "lark", CALL), ("select (lark)", "lark", SELECT), ("calc (lark)", "lark", CALC)]


def instances(syntax: str, text: str, runtime, count: int = 6) -> list[list[int]]:
    """The runtime's encodings of ``count`` strings of the grammar (fixed seeds; strings the vocabulary cannot
    spell are skipped)."""
    grammar = parse_grammar(text, syntax)
    out, seed = [], 0
    while len(out) < count and seed < 10 * count:
        string = sample(grammar, random.Random(seed), max_depth=5, max_repeat=3)
        seed += 1
        ids = runtime.encode(string, add_special_tokens=False).ids
        if string and runtime.decode(ids) == string:
            out.append(ids)
    return out


def _ones(mask: np.ndarray) -> int:
    return int(np.bitwise_count(mask.view(np.uint32)).sum())


class Canonmerge:
    name = "canonmerge"
    depths: dict[str, int] = {}

    def __init__(self, tokenizer: str, runtime):
        self.canonical = compile_tokenizer(tokenizer_source(tokenizer))
        compile_grammar('root ::= "warm" | "up"', self.canonical)  # vocabulary trie and kernels, once

    def compile(self, syntax: str, text: str, name: str = ""):
        return compile_grammar(text, self.canonical, syntax=syntax, max_depth=self.depths.get(name))

    def walk(self, guide, ids, times, forced):
        out = torch.zeros((1, guide.num_words), dtype=torch.int32)
        state = guide.initial_state
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            guide.fill_bitmask([state], out)
            times.append(time.perf_counter_ns() - t0)
            forced.append(_ones(out.numpy()) == 1)
            if t is None:
                return guide.is_accepting(state)
            state = guide.advance(state, t)


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer, runtime):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.lib = llguidance
        canonical = compile_tokenizer(tokenizer_source(tokenizer))
        eos = int(canonical.eos_token_ids[0])
        self.tokenizer = llguidance.hf.from_tokenizer(_hf_tokenizer(runtime, eos), n_vocab=canonical.vocab_size,
                                                      eos_token=eos)
        self.vocab_size = canonical.vocab_size

    def compile(self, syntax: str, text: str, name: str = ""):
        grammar = self.lib.grammar_from(syntax, text)
        matcher = self.lib.LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        return grammar

    def walk(self, grammar, ids, times, forced):
        matcher = self.lib.LLMatcher(self.tokenizer, grammar)
        mask = self.lib.torch.allocate_token_bitmask(1, self.vocab_size)
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            self.lib.torch.fill_next_token_bitmask(matcher, mask, 0)
            times.append(time.perf_counter_ns() - t0)
            forced.append(_ones(mask.numpy()) == 1)
            if t is None:
                return matcher.is_accepting()
            if not matcher.consume_token(t):
                raise RuntimeError(f"rejected token {t}: {matcher.get_error()}")


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer, runtime):
        import xgrammar

        self.lib = xgrammar
        canonical = compile_tokenizer(tokenizer_source(tokenizer))
        self.eos = int(canonical.eos_token_ids[0])
        info = xgrammar.TokenizerInfo.from_huggingface(_hf_tokenizer(runtime, self.eos),
                                                       vocab_size=canonical.vocab_size, stop_token_ids=[self.eos])
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.vocab_size = canonical.vocab_size

    def compile(self, syntax: str, text: str, name: str = ""):
        if syntax == "json_schema":  # (bench/recursion.py)
            return self.compiler.compile_json_schema(text)
        if syntax != "gbnf":
            raise NotImplementedError("no Lark front end")
        return self.compiler.compile_grammar(text)

    def walk(self, compiled, ids, times, forced):
        matcher = self.lib.GrammarMatcher(compiled)
        mask = self.lib.allocate_token_bitmask(1, self.vocab_size)
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            matcher.fill_next_token_bitmask(mask)
            times.append(time.perf_counter_ns() - t0)
            forced.append(_ones(mask.numpy()) == 1)
            if t is None:
                return bool((mask[0, self.eos >> 5] >> (self.eos & 31)) & 1)
            if not matcher.accept_token(t):
                raise RuntimeError(f"rejected token {t}")


class CanonmergeBounded(Canonmerge):
    """canonmerge on the recursive grammars with a depth bound (opt-in ``max_depth``): exact for the strings nested at
    most that deep (JSON: three levels of braces), which is a smaller language than the peers'."""
    name = "canonmerge, bounded"
    depths = {"arithmetic": 4, "json": 6, "json_arr": 6, "c": 2, "calc (lark)": 8}

    def compile(self, syntax: str, text: str, name: str = ""):
        if name not in self.depths:
            raise NotImplementedError("regular: the unbounded row")
        return compile_grammar(text, self.canonical, syntax=syntax, max_depth=self.depths[name])


class CanonmergeLazy(Canonmerge):
    """canonmerge on the regular grammars with ``lazy=True``: the guide built as it is walked (compile in
    milliseconds, first visits in the masks); a recursive grammar's guide is always so (the unbounded row)."""
    name = "canonmerge, lazy"

    def compile(self, syntax: str, text: str, name: str = ""):
        guide = compile_grammar(text, self.canonical, syntax=syntax, lazy=True)
        if isinstance(guide, PushdownGuide):  # (refused rows report no time)
            raise NotImplementedError("recursive: always built as walked (the unbounded row)")
        return guide


ENGINES = [Canonmerge, CanonmergeLazy, CanonmergeBounded, LLGuidance, XGrammar]


def run(tokenizers: list[str], repeats: int) -> dict:
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "rows": []}
    for tokenizer in tokenizers:
        runtime = reference_runtime(tokenizer)
        cases = [(name, syntax, text, instances(syntax, text, runtime)) for name, syntax, text in grammars()]
        for engine_class in ENGINES:
            try:
                engine = engine_class(tokenizer, runtime)
            except ImportError as exc:
                results["rows"].append({"tokenizer": tokenizer, "engine": engine_class.name, "missing": str(exc)})
                print(f"{tokenizer}: {engine_class.name} not installed ({exc})")
                continue
            for name, syntax, text, walks in cases:
                row = {"tokenizer": tokenizer, "engine": engine.name, "grammar": name, "syntax": syntax}
                runs, failures = [], []
                for _ in range(repeats):  # fresh compiles; statistics are medians over repetitions
                    t0 = time.perf_counter()
                    try:
                        compiled = engine.compile(syntax, text, name)
                    except UnsupportedGrammarError as exc:
                        row["refused"] = f"{exc.construct}: rule {exc.rule!r}, line {exc.line}"
                        break
                    except NotImplementedError as exc:
                        row["refused"] = f"n/a: {exc}"
                        break
                    except Exception as exc:  # a peer that cannot compile a grammar is reported, not fatal
                        row["refused"] = f"{type(exc).__name__}: {str(exc)[:120]}"
                        break
                    compile_ms = (time.perf_counter() - t0) * 1e3
                    times: list[int] = []
                    forced: list[bool] = []
                    for ids in walks:
                        try:
                            if not engine.walk(compiled, list(ids), times, forced):
                                failures.append("did not accept the runtime's encoding")
                        except Exception as exc:
                            failures.append(f"{type(exc).__name__}: {str(exc)[:100]}")
                    us = np.array(times) / 1e3
                    runs.append({"compile_ms": compile_ms, "masks": len(us),
                                 "mask_us_mean": float(us.mean()) if len(us) else None,
                                 "mask_us_p50": float(np.median(us)) if len(us) else None,
                                 "mask_us_p99": float(np.percentile(us, 99)) if len(us) else None,
                                 "forced_share": float(np.mean(forced)) if forced else None})
                if runs:
                    for key in runs[0]:
                        values = [r[key] for r in runs if r[key] is not None]
                        row[key] = float(np.median(values)) if values else None
                    row["masks"] = int(row["masks"])
                row["failures"] = sorted(set(failures))
                results["rows"].append(row)
                print(_line(row), flush=True)
    return results


def _line(row: dict) -> str:
    head = f"{row['tokenizer']:7s} {row['engine']:19s} {row['grammar']:14s}"
    if "refused" in row:
        return f"{head} refused ({row['refused']})"
    failures = f"  {len(row['failures'])} failures: {row['failures'][0]}" if row["failures"] else ""
    return (f"{head} compile {row['compile_ms']:8.1f} ms  mask mean {row['mask_us_mean']:7.1f} µs  p99 "
            f"{row['mask_us_p99']:8.1f} µs  forced {100 * row['forced_share']:4.1f} %  ({row['masks']} masks)"
            + failures)


def print_table(results: dict) -> None:
    """One Markdown table: a row per (tokenizer, grammar), engines side by side."""
    rows = [r for r in results["rows"] if "missing" not in r]
    engines = [e.name for e in ENGINES if any(r["engine"] == e.name for r in rows)]
    print("\n| tokenizer | grammar | " + " | ".join(f"{e}: compile ms / mask mean µs / p99 µs / forced" for e in engines)
          + " |")
    print("|---|---|" + "---:|" * len(engines))
    keys = dict.fromkeys((r["tokenizer"], r["grammar"]) for r in rows)
    for tokenizer, grammar in keys:
        cells = []
        for engine in engines:
            row = next((r for r in rows if (r["tokenizer"], r["grammar"], r["engine"]) == (tokenizer, grammar,
                                                                                          engine)), None)
            if row is None:
                cells.append("")
            elif "refused" in row:
                cells.append("refused" if row["refused"].startswith("recursion") else
                             "" if "the unbounded row" in row["refused"] else row["refused"].split(":")[0])
            else:
                cell = (f"{row['compile_ms']:.1f} / {row['mask_us_mean']:.1f} / {row['mask_us_p99']:.0f} / "
                        f"{100 * row['forced_share']:.0f} %")
                cells.append(cell + (" (walks rejected)" if row["failures"] else ""))
        print(f"| {tokenizer} | {grammar} | " + " | ".join(cells) + " |")


JSON_LARK = r"""
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


def boundaries(tokenizers: list[str]) -> dict:
    """Per tokenizer: at each object's or array's opening and closing (the character before and after each
    bracket), whether the canonical tokenization has a token boundary there; the tokens that cross, counted."""
    import lark  # (a test dependency: Lark parses the JSON with positions)

    texts = []
    for name in ("text/properties.json", "text/ref.json", "text/format.json", "text/pattern.json"):
        data = json.loads(asset_path(name).read_text(encoding="utf-8"))
        texts += [json.dumps(data), json.dumps(data, indent=2)]
    parser = lark.Lark(JSON_LARK, start="value", parser="lalr", propagate_positions=True)
    out = {}
    for tokenizer in tokenizers:
        runtime = reference_runtime(tokenizer)
        counts: dict[str, list[int]] = {}
        crossing: dict[str, int] = {}
        for text in texts:
            encoding = runtime.encode(text, add_special_tokens=False)
            starts = {s for s, _ in encoding.offsets}
            spans = list(zip(encoding.offsets, encoding.ids))
            for node in parser.parse(text).iter_subtrees():
                if node.data not in ("object", "array"):
                    continue
                s, e = node.meta.start_pos, node.meta.end_pos
                for where, position in (("before open", s), ("after open", s + 1), ("before close", e - 1),
                                        ("after close", e)):
                    aligned = position in starts or position == len(text)
                    counts.setdefault(where, [0, 0])[aligned] += 1
                    if not aligned:
                        token = next(runtime.id_to_token(i) for (a, b), i in spans if a < position < b)
                        crossing[token] = crossing.get(token, 0) + 1
        out[tokenizer] = {"edges": {k: {"aligned": v[1], "crossed": v[0]} for k, v in counts.items()},
                          "crossing_tokens": len(crossing),
                          "most_common": sorted(crossing.items(), key=lambda kv: -kv[1])[:12]}
        print(f"{tokenizer}: " + ", ".join(f"{k} {v[1]}/{sum(v)} on a boundary" for k, v in counts.items())
              + f"; {len(crossing)} distinct crossing tokens, most common "
              + ", ".join(f"{t!r} ({n})" for t, n in out[tokenizer]["most_common"][:6]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizers", default="gpt2,llama3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "grammars.json"))
    parser.add_argument("--boundaries", action="store_true", help="measure recursion edges against token boundaries")
    args = parser.parse_args()
    if args.boundaries:
        out = Path(args.out).with_name("grammar_boundaries.json") if args.out.endswith("grammars.json") else Path(
            args.out)
        out.write_text(json.dumps(boundaries(args.tokenizers.split(",")), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}")
        return
    results = run(args.tokenizers.split(","), args.repeats)
    print_table(results)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
