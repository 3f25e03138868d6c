"""Benchmark: the canonical automaton of each real tokenizer — build, memory, size, cache, load.

Each tokenizer is built in a fresh subprocess (so peak RSS is its own) into a temporary cache directory, then
loaded back from it. Prints a table with the issue's targets and writes ``bench/results/canonical_automaton.json``.
Run: ``python bench/canonical_automaton.py [names...]``.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Targets from issue 3 (2-core machine): build seconds per tokenizer, peak memory, load time.
BUILD_TARGET_S = {"mistral": 5, "gpt2": 15, "llama3": 90}
PEAK_TARGET_MB = 4096
LOAD_TARGET_S = 0.5

_CHILD = r"""
import json, resource, sys, tempfile, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from bpe import CanonicalAutomaton, compile_tokenizer, load_tokenizer
from bpe.assets import tokenizer_source
from bpe.automaton import cache_path
model = load_tokenizer(tokenizer_source(sys.argv[1]))
stages = []
with tempfile.TemporaryDirectory() as cache:
    started = time.perf_counter()
    automaton = compile_tokenizer(model, cache, progress=lambda m: stages.append((round(time.perf_counter() - started, 2), m.strip())))
    build = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    path = cache_path(model, cache)
    loads = []
    for _ in range(3):
        t = time.perf_counter()
        CanonicalAutomaton.load(path)
        loads.append(time.perf_counter() - t)
    size = path.stat().st_size
print(json.dumps({"tokenizer": sys.argv[1], "vocab": automaton.vocab_size, "build_s": build, "peak_rss_mb": peak,
    "merge_classes": automaton.num_merge_classes, "contexts": automaton.num_contexts,
    "open_contexts": automaton.num_open_contexts, "forbidden_entries": automaton.forbidden_entries,
    "cache_mb": size / 2**20, "load_s": min(loads), "stages": stages}))
"""


def main() -> None:
    names = sys.argv[1:] or ["mistral", "gpt2", "smollm2", "llama3", "qwen3"]
    rows = []
    for name in names:
        out = subprocess.run([sys.executable, "-c", _CHILD, name, str(ROOT)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'tokenizer':<10}{'vocab':>8}{'build s':>9}{'target':>8}{'peak MB':>9}{'merge cls':>10}{'contexts':>10}"
          f"{'forbidden':>12}{'cache MB':>10}{'load s':>8}")
    for r in rows:
        target = BUILD_TARGET_S.get(r["tokenizer"])
        r["build_target_s"] = target
        r["meets_targets"] = ((target is None or r["build_s"] <= target) and r["peak_rss_mb"] <= PEAK_TARGET_MB
                              and r["load_s"] <= LOAD_TARGET_S)
        print(f"{r['tokenizer']:<10}{r['vocab']:>8}{r['build_s']:>9.1f}{target or '-':>8}{r['peak_rss_mb']:>9.0f}"
              f"{r['merge_classes']:>10}{r['contexts']:>10}{r['forbidden_entries']:>12}{r['cache_mb']:>10.1f}"
              f"{r['load_s']:>8.2f}")
    print(f"targets: build as listed, peak <= {PEAK_TARGET_MB} MB, load <= {LOAD_TARGET_S} s; "
          f"all met: {all(r['meets_targets'] for r in rows)}")
    out_path = ROOT / "bench" / "results" / "canonical_automaton.json"
    out_path.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                                    "rows": rows}, indent=1))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
