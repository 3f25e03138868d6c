"""canonmerge beside outlines-core, llguidance and xgrammar: same regexes, same tokenizers, one process, one table.

For each tokenizer (GPT-2, Llama-3) and regex, every engine compiles the regex (tokenizer-level setup is done
once, outside the timing: ``compile_tokenizer`` for canonmerge, vocabulary/tokenizer objects for the peers),
then walks the runtime's own encoding of a few valid instances (plus the final EOS step) and fills one
next-token bitmask per step, timed, and advances by each token (timed apart: a decoder pays both per
token). Memory: canonmerge reports ``Guide.memory_bytes`` (the
largest guide); the peers keep their state in Rust/C++ where Python cannot measure it per guide, so they show
n/a (the JSON keeps the process's peak-RSS growth, which allocator reuse makes meaningless). Single-threaded
where the engine allows it. The whole compile-and-walk is repeated (``--repeats``, fresh compiles each time) and
every statistic is the median over repetitions: this machine's timings have rare 0.1–1 ms stalls (a VM), which
would otherwise decide a p99 over ~330 masks by themselves.

Every compile is a first sight of its pattern: ``product.compile_regex`` keeps nothing per pattern between calls
(its caches are per tokenizer — the vocabulary trie, built by the warm-up compile before the timings — or per
character-class count; with ``--lazy`` the node rows lazy guides share by future are dropped before each compile), and
no peer caches compiled regexes here (xgrammar's cache is off). The first repetition
also pays what each engine loads on its first use of a code path (numba kernels for canonmerge): its compile p50
is reported apart (``compile_ms_p50_first``, the process's first compile of every pattern), and the run ends with
canonmerge's regex compile p50 beside llguidance's, both ways.

Peers are optional bench dependencies (``pip install -e ".[bench]"`` and ``pip install --no-deps
xgrammar==0.2.8``; xgrammar's declared dependencies would pull a CUDA torch and triton). An engine that is not
installed is reported as missing, not skipped silently.

    python bench/peers.py [--tokenizers gpt2,llama3] [--out bench/results/peers.json] [--lazy]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import reference_runtime, tokenizer_source  # noqa: E402
from product import compile_regex  # noqa: E402
from product.runtime.lazy import _shared_rows  # noqa: E402  (cleared before each lazy compile: a first sight)

torch.set_num_threads(1)
os.environ.setdefault("RAYON_NUM_THREADS", "1")

STRING = r'"[^"\\\x00-\x1f]*"'
CASES = [
    ("json object", r'\{"name": ' + STRING + r', "age": [0-9]{1,3}, "city": ' + STRING + r'\}',
     ['{"name": "Alice Smith", "age": 31, "city": "Paris"}', '{"name": "Bob", "age": 7, "city": "São Paulo"}',
      '{"name": "Zoë Ünal", "age": 54, "city": "Zürich"}', '{"name": "李雷", "age": 23, "city": "北京"}',
      '{"name": "Renée O\'Neil", "age": 102, "city": "New York City"}']),
    ("float", r"[+-]?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
     ["3.14159", "-0.5", "6.02214076e23", "+42", "1000000.000001", "-2.5E-10"]),
    ("ipv4", r"((25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)",
     ["192.168.0.1", "10.0.0.255", "255.255.255.0", "8.8.4.4", "172.16.254.1"]),
    ("date", r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
     ["2026-11-22", "1999-01-31", "2000-02-29", "1969-07-20"]),
    ("email", r"[a-z0-9._%+-]{1,40}@[a-z0-9.-]{1,40}\.[a-z]{2,6}",
     ["alice@example.com", "bob.smith+tag@mail.example.org", "x_y-z@sub.domain.io"]),
    ("enum", r"(red|green|blue|cyan|magenta|yellow|black|white|orange|purple)",
     ["red", "magenta", "purple", "white"]),
    ("int array", r"\[([0-9]{1,6}(, [0-9]{1,6})*)?\]", ["[1, 2, 3]", "[]", "[123456, 7, 42, 99, 1000]"]),
    ("sentence", r"[A-Z][a-z]{1,12}( [a-z]{1,12}){2,12}\.",
     ["The quick brown fox jumps over the lazy dog.", "Structured generation should be exact."]),
    ("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
     ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000"]),
]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Canonmerge:
    name = "canonmerge"
    lazy = False  # --lazy: guides built as they are walked (``compile_regex(..., lazy=True)``)

    def __init__(self, tokenizer: str, runtime, canonical_only=True):
        self.canonical = compile_tokenizer(tokenizer_source(tokenizer))
        self.canonical_only = canonical_only
        if not canonical_only:
            self.name = "canonmerge (any tokenization)"
        compile_regex("warm|up", self.canonical)  # vocabulary trie, built once per tokenizer

    def compile(self, pattern):
        if self.lazy:  # (a first sight of the pattern: no node rows shared from its earlier repetitions)
            _shared_rows(self.canonical).clear()
        return compile_regex(pattern, self.canonical, canonical_only=self.canonical_only, lazy=self.lazy)

    def walk(self, guide, ids, times, advance_times):
        out = torch.zeros((1, guide.num_words), dtype=torch.int32)  # like the peers' buffers: written, so resident
        state = guide.initial_state
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            guide.fill_bitmask([state], out)
            times.append(time.perf_counter_ns() - t0)
            if t is None:
                return guide.is_accepting(state)
            t0 = time.perf_counter_ns()
            state = guide.advance(state, t)
            advance_times.append(time.perf_counter_ns() - t0)

    @staticmethod
    def memory(guide):
        return guide.memory_bytes


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tokenizer, runtime):
        import outlines_core

        self.lib = outlines_core
        canonical = compile_tokenizer(tokenizer_source(tokenizer))
        self.eos = int(canonical.eos_token_ids[0])
        spellings: dict[bytes, list[int]] = {}
        for i, b in enumerate(canonical.token_bytes):
            if b is not None and i != self.eos:
                spellings.setdefault(b, []).append(i)
        self.vocabulary = outlines_core.Vocabulary(self.eos, spellings)
        self.words = (canonical.vocab_size + 31) // 32

    def compile(self, pattern):
        return self.lib.Index(pattern, self.vocabulary)

    def walk(self, index, ids, times, advance_times):
        guide = self.lib.Guide(index)
        mask = torch.zeros((1, self.words), dtype=torch.int32)
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
            times.append(time.perf_counter_ns() - t0)
            if t is None:
                return guide.is_finished() or bool((mask[0, self.eos >> 5] >> (self.eos & 31)) & 1)
            t0 = time.perf_counter_ns()
            guide.advance(t, return_tokens=False)
            advance_times.append(time.perf_counter_ns() - t0)

    memory = None


def _hf_tokenizer(runtime, eos):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=runtime, eos_token=runtime.id_to_token(eos))


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer, runtime):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.lib = llguidance
        canonical = compile_tokenizer(tokenizer_source(tokenizer))
        self.eos = int(canonical.eos_token_ids[0])
        self.tokenizer = llguidance.hf.from_tokenizer(_hf_tokenizer(runtime, self.eos), n_vocab=canonical.vocab_size,
                                                      eos_token=self.eos)
        self.vocab_size = canonical.vocab_size

    def compile(self, pattern):
        grammar = self.lib.LLMatcher.grammar_from_regex(pattern)
        matcher = self.lib.LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        return grammar, matcher

    def walk(self, compiled, ids, times, advance_times):
        grammar, _ = compiled
        matcher = self.lib.LLMatcher(self.tokenizer, grammar)
        mask = self.lib.torch.allocate_token_bitmask(1, self.vocab_size)
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            self.lib.torch.fill_next_token_bitmask(matcher, mask, 0)
            times.append(time.perf_counter_ns() - t0)
            if t is None:
                return matcher.is_accepting()
            t0 = time.perf_counter_ns()
            consumed = matcher.consume_token(t)
            advance_times.append(time.perf_counter_ns() - t0)
            if not consumed:
                raise RuntimeError(f"llguidance rejected token {t}: {matcher.get_error()}")

    memory = None


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

    def compile(self, pattern):
        return self.compiler.compile_regex(pattern)

    def walk(self, compiled, ids, times, advance_times):
        matcher = self.lib.GrammarMatcher(compiled)
        mask = self.lib.allocate_token_bitmask(1, self.vocab_size)
        for t in ids + [None]:
            t0 = time.perf_counter_ns()
            matcher.fill_next_token_bitmask(mask)
            times.append(time.perf_counter_ns() - t0)
            if t is None:
                return bool((mask[0, self.eos >> 5] >> (self.eos & 31)) & 1)
            t0 = time.perf_counter_ns()
            accepted = matcher.accept_token(t)
            advance_times.append(time.perf_counter_ns() - t0)
            if not accepted:
                raise RuntimeError(f"xgrammar rejected token {t}")

    memory = None


ENGINES = [Canonmerge, OutlinesCore, LLGuidance, XGrammar]


def run(tokenizers: list[str], repeats: int) -> dict:
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "rows": [], "cases": []}
    for tokenizer in tokenizers:
        runtime = reference_runtime(tokenizer)
        encodings = {name: [runtime.encode(s, add_special_tokens=False).ids for s in instances]
                     for name, _, instances in CASES}
        for engine_class in ENGINES:
            try:
                engine = engine_class(tokenizer, runtime)
            except ImportError as exc:
                print(f"{tokenizer}: {engine_class.name} not installed ({exc})")
                results["rows"].append({"tokenizer": tokenizer, "engine": engine_class.name, "missing": str(exc)})
                continue
            gc.collect()
            rss_before = _rss_mb()
            memory, failures, repetitions, case_ms = [], [], [], {}
            for repetition in range(repeats):  # fresh compiles each time; statistics are medians over repetitions
                compile_ms, mask_us, advance_us = [], [], []
                for case, pattern, _ in CASES:
                    t0 = time.perf_counter()
                    try:
                        compiled = engine.compile(pattern)
                    except Exception as exc:  # a peer that cannot compile a pattern is reported, not fatal
                        failures.append(f"{case}: compile: {type(exc).__name__}: {exc}")
                        continue
                    elapsed = (time.perf_counter() - t0) * 1e3
                    compile_ms.append(elapsed)
                    times: list[int] = []
                    advance_times: list[int] = []
                    for ids in encodings[case]:
                        try:
                            if not engine.walk(compiled, list(ids), times, advance_times):
                                failures.append(f"{case}: did not accept the runtime's encoding")
                        except Exception as exc:
                            failures.append(f"{case}: {type(exc).__name__}: {exc}")
                    mask_us += [t / 1e3 for t in times]
                    advance_us += [t / 1e3 for t in advance_times]
                    if engine.memory:
                        memory.append(engine.memory(compiled))
                    case_ms.setdefault(case, []).append((elapsed, float(np.mean(times)) / 1e3 if times else None,
                                                         len(times)))
                    del compiled
                repetitions.append({
                    "compile_ms_p50": float(np.median(compile_ms)), "compile_ms_max": float(np.max(compile_ms)),
                    "masks": len(mask_us), "mask_us_mean": float(np.mean(mask_us)),
                    "mask_us_p50": float(np.median(mask_us)), "mask_us_p99": float(np.percentile(mask_us, 99)),
                    "advance_us_mean": float(np.mean(advance_us)),
                })
            first_compile = [runs[0][0] for runs in case_ms.values()]
            for case, runs in case_ms.items():
                results["cases"].append({"tokenizer": tokenizer, "engine": engine.name, "case": case,
                                         "compile_ms": float(np.median([r[0] for r in runs])), "masks": runs[0][2],
                                         "mask_mean_us": float(np.median([r[1] for r in runs]))
                                         if runs[0][1] is not None else None})
            row = {"tokenizer": tokenizer, "engine": engine.name, "repetitions": repeats,
                   **{key: float(np.median([r[key] for r in repetitions])) for key in repetitions[0]},
                   "compile_ms_p50_first": float(np.median(first_compile)) if first_compile else None,
                   "memory_mb_max": (max(memory) / 1e6) if memory else None,
                   "rss_growth_mb": _rss_mb() - rss_before,
                   "failures": sorted(set(failures))}
            row["masks"] = int(row["masks"])
            results["rows"].append(row)
            print(f"{tokenizer:7s} {engine.name:14s} compile p50 {row['compile_ms_p50']:8.1f} ms  max "
                  f"{row['compile_ms_max']:8.1f} ms  mask mean {row['mask_us_mean']:7.1f} µs  p50 "
                  f"{row['mask_us_p50']:6.1f} µs  p99 {row['mask_us_p99']:7.1f} µs  advance mean "
                  f"{row['advance_us_mean']:6.1f} µs  ({row['masks']} masks)"
                  + (f"  {len(failures)} failures" if failures else ""), flush=True)
    return results


def print_compile_comparison(results: dict) -> None:
    """canonmerge's regex compile p50 beside llguidance's (the target: at or below it), per tokenizer."""
    rows = {(r["tokenizer"], r["engine"]): r for r in results["rows"] if "missing" not in r}
    for tokenizer in dict.fromkeys(r["tokenizer"] for r in results["rows"]):
        ours, theirs = rows.get((tokenizer, "canonmerge")), rows.get((tokenizer, "llguidance"))
        if ours and theirs:
            print(f"{tokenizer}: regex compile p50 canonmerge {ours['compile_ms_p50']:.2f} ms vs llguidance "
                  f"{theirs['compile_ms_p50']:.2f} ms (median of {ours['repetitions']} repetitions); first repetition "
                  f"{ours['compile_ms_p50_first']:.2f} vs {theirs['compile_ms_p50_first']:.2f} ms")


def print_table(results: dict) -> None:
    print("\n| tokenizer | engine | compile p50 | compile max | mask mean | mask p50 | mask p99 | advance mean "
          "| guide memory |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results["rows"]:
        if "missing" in r:
            print(f"| {r['tokenizer']} | {r['engine']} | not installed | | | | | | |")
            continue
        memory = f"{r['memory_mb_max']:.1f} MB" if r["memory_mb_max"] is not None else "n/a"
        print(f"| {r['tokenizer']} | {r['engine']} | {r['compile_ms_p50']:.1f} ms | {r['compile_ms_max']:.0f} ms | "
              f"{r['mask_us_mean']:.1f} µs | {r['mask_us_p50']:.1f} µs | {r['mask_us_p99']:.1f} µs | "
              f"{r['advance_us_mean']:.1f} µs | {memory} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizers", default="gpt2,llama3")
    parser.add_argument("--repeats", type=int, default=3, help="compile-and-walk repetitions; medians are reported")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "peers.json")
    parser.add_argument("--lazy", action="store_true", help="canonmerge's guides built as they are walked "
                        "(compile_regex(..., lazy=True)): every mask of a walk is a first visit")
    args = parser.parse_args()
    if args.lazy:
        Canonmerge.lazy, Canonmerge.name = True, "canonmerge (lazy)"
    results = run(args.tokenizers.split(","), args.repeats)
    print_table(results)
    print_compile_comparison(results)
    out = args.out
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
