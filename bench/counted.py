"""Benchmark: counted repetitions, the counter guide against the unrolled construction.

For JSON-string-like patterns with length bounds (``maxLength``-style ``{0,n}``) on GPT-2 and Llama-3: product
nodes, compile time, memory, and mask time (uncached masks of states met on random walks, near the bound
included), for the counter guide (``product.counted``, what ``compile_regex`` now builds), the unrolled guide (the
previous construction, forced) and the unbounded ``*`` pattern (the floor). Prints a table and writes
``bench/results/counted.json``. Run: ``python bench/counted.py [tokenizer ...]``.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from automata import StateLimitError, from_regex  # noqa: E402
from bpe.assets import tokenizer_source  # noqa: E402
from bpe.automaton import compile_tokenizer  # noqa: E402
from product import Guide, TokenTransitions, compile_regex  # noqa: E402
from product.compiler.tables import vocabulary_trie  # noqa: E402

CHAR = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
PATTERNS = {
    '"[^"]{0,40}"': (r'"[^"]{0,40}"', r'"[^"]*"'),
    "JSON string {0,100}": ('"' + CHAR + '{0,100}"', '"' + CHAR + '*"'),
    "object, 3 strings {0,100}": (r'\{"a": "' + CHAR + r'{0,100}", "b": "' + CHAR + r'{0,100}", "c": "' + CHAR
                                  + r'{0,100}"\}',
                                  r'\{"a": "' + CHAR + r'*", "b": "' + CHAR + r'*", "c": "' + CHAR + r'*"\}'),
}


def _unrolled(pattern, automaton):
    return Guide(TokenTransitions.build(from_regex(pattern), vocabulary_trie(automaton)), automaton, name=pattern)


def _timed(build, repeats):
    times, guide = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        guide = build()
        times.append(time.perf_counter() - started)
    return guide, 1e3 * statistics.median(times)


def _mask_us(guide, seed=0, walks=20):
    """Mean and max µs of an uncached mask over the states of random walks that favour short tokens (so they
    reach the bound)."""
    rng = np.random.default_rng(seed)
    states = []
    eos = set(guide.eos_token_ids)
    for _ in range(walks):
        s = guide.initial_state
        for _ in range(200):
            states.append(s)
            allowed = [t for t in np.flatnonzero(guide.allowed(s)) if t not in eos]
            if not allowed or (guide.is_accepting(s) and rng.random() < 0.1):
                break
            s = guide.advance(s, int(rng.choice(allowed[: max(1, len(allowed) // 4)]) if rng.random() < 0.5
                                     else rng.choice(allowed)))
    out = np.zeros((1, guide.num_words), dtype=np.int32)
    times = []
    for s in states:
        guide._cache.clear()
        started = time.perf_counter()
        guide.fill_bitmask([s], out)
        times.append(time.perf_counter() - started)
    return 1e6 * float(np.mean(times)), 1e6 * float(np.max(times)), len(states)


def main(names) -> None:
    rows = []
    for name in names:
        automaton = compile_tokenizer(tokenizer_source(name))
        compile_regex('"a"', automaton)  # warm-up
        for label, (bounded, unbounded) in PATTERNS.items():
            for kind, build, repeats in (("counter", lambda: compile_regex(bounded, automaton), 3),
                                         ("unrolled", lambda: _unrolled(bounded, automaton), 1),
                                         ("unbounded *", lambda: compile_regex(unbounded, automaton), 3)):
                try:
                    guide, ms = _timed(build, repeats)
                except StateLimitError as exc:
                    rows.append({"tokenizer": name, "pattern": label, "kind": kind, "error": str(exc)[:80]})
                    continue
                mean_us, max_us, count = _mask_us(guide)
                rows.append({"tokenizer": name, "pattern": label, "kind": kind,
                             "nodes": getattr(guide, "num_nodes_total", guide.num_nodes),
                             "compile_ms": ms, "memory_mb": guide.memory_bytes / 1e6,
                             "mask_mean_us": mean_us, "mask_max_us": max_us, "masks": count,
                             "horizon": getattr(guide, "horizon", None)})
    print(f"{'tokenizer':<8}{'pattern':<28}{'kind':<13}{'nodes':>8}{'compile ms':>12}{'MB':>8}{'mask µs':>9}"
          f"{'max µs':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['tokenizer']:<8}{r['pattern']:<28}{r['kind']:<13}  {r['error']}")
            continue
        print(f"{r['tokenizer']:<8}{r['pattern']:<28}{r['kind']:<13}{r['nodes']:>8}{r['compile_ms']:>12.0f}"
              f"{r['memory_mb']:>8.1f}{r['mask_mean_us']:>9.0f}{r['mask_max_us']:>9.0f}")
    out = Path(__file__).parent / "results" / "counted.json"
    out.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                               "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["gpt2", "llama3"])
