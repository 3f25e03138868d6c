"""Grammars: canonmerge beside llguidance and XGrammar on llama.cpp's example grammars and two Lark grammars.

For each tokenizer (GPT-2, Llama-3) and grammar — llama.cpp's eight examples (``grammars/*.gbnf`` from the pinned
llama-cpp-python sdist: arithmetic, c, chess, english, japanese, json, json_arr, list) and two of ours in Lark (a
function-call format, a SQL ``SELECT`` subset) — every engine compiles the grammar (tokenizer-level setup outside
the timing), then walks the runtime's own encoding of a few strings of the grammar (drawn by
``automata.grammar.sample`` with fixed seeds, the same for every engine) plus the final EOS step, filling one
next-token bitmask per step (timed) and advancing by each token. Reported per engine and tokenizer: compile p50,
mask mean/p50/p99, and the share of steps whose mask allows exactly one token (a forced token: canonmerge skips
the forward pass there). Every statistic is the median over ``--repeats`` fresh compiles.

canonmerge compiles the grammars whose language is regular and refuses the others (``UnsupportedGrammarError``:
recursion a regex cannot express) — reported as refused, with the rule. The peers take GBNF (llguidance through its
GBNF-to-Lark converter, XGrammar as EBNF) and Lark (llguidance; XGrammar has no Lark front end: n/a). A peer that
rejects a walk is reported with the failure: llguidance's GBNF converter makes rules greedy lexemes, which changes
some grammars' languages (arithmetic's ``a=b\\n``), and no peer's masks are canonical.

    python bench/grammars.py [--tokenizers gpt2,llama3] [--repeats 3] [--out bench/results/grammars.json]
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

from automata.grammar import UnsupportedGrammarError, parse_grammar  # noqa: E402
from automata.grammar.sample import sample  # noqa: E402
from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import LLAMA_CPP_GRAMMARS, asset_path, reference_runtime, tokenizer_source  # noqa: E402
from product import compile_grammar  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("RAYON_NUM_THREADS", "1")

CALL = r"""
start: _call+
_call: "<call>" NAME "(" [arg ("," arg)*] ")" "</call>" _NL?
!arg: NAME "=" (INT | STRING | BOOL)
BOOL.2: "true" | "false"
NAME: CNAME
STRING: "'" /[^'\n]{0,20}/ "'"
_NL: "\n"
%import common (CNAME, INT)
%ignore " "
"""

SELECT = r"""
start: "SELECT"i _ws columns _ws "FROM"i _ws NAME (_ws "WHERE"i _ws cond)? ";"
columns: "*" | NAME ("," " "? NAME)~0..3
cond: NAME OP (NUMBER | /'[^']*'/)
OP: "=" | "<" | ">" | "<=" | ">=" | "!="
_ws: " "+
NAME: /[a-z][a-z0-9_]*/
%import common.NUMBER
"""


def grammars() -> list[tuple[str, str, str]]:
    """(name, syntax, text) of every grammar benchmarked."""
    out = [(name, "gbnf", asset_path(f"grammars/{name}.gbnf").read_text(encoding="utf-8"))
           for name in sorted(LLAMA_CPP_GRAMMARS)]
    return out + [("call (lark)", "lark", CALL), ("select (lark)", "lark", SELECT)]


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

    def __init__(self, tokenizer: str, runtime):
        self.canonical = compile_tokenizer(tokenizer_source(tokenizer))
        compile_grammar('root ::= "warm" | "up"', self.canonical)  # vocabulary trie and kernels, once

    def compile(self, syntax: str, text: str):
        return compile_grammar(text, self.canonical, syntax=syntax)

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


def _hf_tokenizer(runtime, eos):
    from transformers import PreTrainedTokenizerFast  # (transformers: only the peers' tokenizer objects need it)

    return PreTrainedTokenizerFast(tokenizer_object=runtime, eos_token=runtime.id_to_token(eos))


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

    def compile(self, syntax: str, text: str):
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

    def compile(self, syntax: str, text: str):
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


ENGINES = [Canonmerge, LLGuidance, XGrammar]


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
                        compiled = engine.compile(syntax, text)
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
    head = f"{row['tokenizer']:7s} {row['engine']:11s} {row['grammar']:14s}"
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
                cells.append("refused" if row["refused"].startswith("recursion") else row["refused"].split(":")[0])
            else:
                cell = (f"{row['compile_ms']:.1f} / {row['mask_us_mean']:.1f} / {row['mask_us_p99']:.0f} / "
                        f"{100 * row['forced_share']:.0f} %")
                cells.append(cell + (" (walks rejected)" if row["failures"] else ""))
        print(f"| {tokenizer} | {grammar} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizers", default="gpt2,llama3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "grammars.json"))
    args = parser.parse_args()
    results = run(args.tokenizers.split(","), args.repeats)
    print_table(results)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
