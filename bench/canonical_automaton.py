"""Benchmark: the canonical automaton of each real tokenizer — build, memory, size, cache, load.

Each tokenizer is built in a fresh subprocess (so peak RSS is its own) into a temporary cache directory, then
loaded back from it. Prints a table with the issues' targets and writes ``bench/results/canonical_automaton.json``
(rows of tokenizers not named in this run are kept). Run: ``python bench/canonical_automaton.py [names...]``; no
names: every named tokenizer (the five, ``LARGE_TOKENIZERS``, ``NATIVE_TOKENIZERS``).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bpe.assets import LARGE_TOKENIZERS, NATIVE_TOKENIZERS, TOKENIZERS  # noqa: E402

# Targets (2-core machine). Issue 3: build seconds per tokenizer, peak memory, load time. Issue 18, for every
# vocabulary up to 262k tokens beyond the first five: build <= 30 s, peak <= 2 GiB, load from cache <= 0.2 s.
BUILD_TARGET_S = {"mistral": 5, "gpt2": 15, "llama3": 90, **dict.fromkeys(LARGE_TOKENIZERS + NATIVE_TOKENIZERS, 30)}
PEAK_TARGET_MB = {**dict.fromkeys(LARGE_TOKENIZERS + NATIVE_TOKENIZERS, 2048)}
LOAD_TARGET_S = {**dict.fromkeys(LARGE_TOKENIZERS + NATIVE_TOKENIZERS, 0.2)}
DEFAULT_PEAK_TARGET_MB, DEFAULT_LOAD_TARGET_S = 4096, 0.5

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
    names = sys.argv[1:] or [*TOKENIZERS, *LARGE_TOKENIZERS, *NATIVE_TOKENIZERS]
    rows = []
    for name in names:
        out = subprocess.run([sys.executable, "-c", _CHILD, name, str(ROOT)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'tokenizer':<10}{'vocab':>8}{'build s':>9}{'target':>8}{'peak MB':>9}{'merge cls':>10}{'contexts':>10}"
          f"{'forbidden':>12}{'cache MB':>10}{'load s':>8}")
    for r in rows:
        name = r["tokenizer"]
        target = BUILD_TARGET_S.get(name)
        r["build_target_s"] = target
        r["peak_target_mb"] = PEAK_TARGET_MB.get(name, DEFAULT_PEAK_TARGET_MB)
        r["load_target_s"] = LOAD_TARGET_S.get(name, DEFAULT_LOAD_TARGET_S)
        r["meets_targets"] = ((target is None or r["build_s"] <= target) and r["peak_rss_mb"] <= r["peak_target_mb"]
                              and r["load_s"] <= r["load_target_s"])
        print(f"{name:<10}{r['vocab']:>8}{r['build_s']:>9.1f}{target or '-':>8}{r['peak_rss_mb']:>9.0f}"
              f"{r['merge_classes']:>10}{r['contexts']:>10}{r['forbidden_entries']:>12}{r['cache_mb']:>10.1f}"
              f"{r['load_s']:>8.2f}")
    print(f"targets: build as listed; peak <= {DEFAULT_PEAK_TARGET_MB} MB and load <= {DEFAULT_LOAD_TARGET_S} s for the "
          f"first five, <= 2048 MB and <= 0.2 s for the others; all met: {all(r['meets_targets'] for r in rows)}")
    out_path = ROOT / "bench" / "results" / "canonical_automaton.json"
    kept = []
    if out_path.exists():  # rows of tokenizers this run did not measure stay, each with its own machine line
        previous = json.loads(out_path.read_text())
        kept = [dict(r, machine=r.get("machine", previous.get("machine"))) for r in previous.get("rows", [])
                if r["tokenizer"] not in names]
    for r in rows:
        r["machine"] = platform.platform()
    out_path.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                                    "rows": kept + rows}, indent=1))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
