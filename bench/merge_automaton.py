"""Benchmark: Algorithm 3 (merge table -> canonical classes and forbidden sets) per real tokenizer.

Each tokenizer is built in a fresh subprocess so peak RSS is its own. Prints a table and writes
``bench/results/merge_automaton.json``. Run: ``python bench/merge_automaton.py [names...]``.
Covers the merge table only; pre-tokenizer boundaries, byte fallback and the on-disk cache come with the
full canonical automaton (issue 3).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
import numpy as np
from bpe import load_tokenizer
from bpe.assets import tokenizer_source
from bpe.canonical import build_merge_automaton
model = load_tokenizer(tokenizer_source(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
ma = build_merge_automaton(model.merge_table, model.vocab_size, model.base_token_ids)
seconds = time.perf_counter() - started
per_class = np.add.reduceat(ma.ends - ma.starts, ma.offsets[:-1][np.diff(ma.offsets) > 0])
print(json.dumps({"tokenizer": sys.argv[1], "vocab": model.vocab_size, "merges": len(model.merge_table),
    "build_s": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "rss_before_build_mb": before / 1024, "classes": ma.num_classes, "pre_fusion_states": ma.pre_fusion_states,
    "intervals": int(len(ma.starts)), "forbidden_entries": int(per_class.sum()), "max_forbidden": int(per_class.max()),
    "storage_mb": (ma.starts.nbytes + ma.ends.nbytes + ma.offsets.nbytes + ma.class_of.nbytes + ma.order.nbytes) / 2**20}))
"""


def main() -> None:
    names = sys.argv[1:] or ["mistral", "gpt2", "smollm2", "llama3", "qwen3"]
    rows = []
    for name in names:
        out = subprocess.run([sys.executable, "-c", _CHILD, name, str(ROOT)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    header = f"{'tokenizer':<10}{'vocab':>8}{'build s':>9}{'peak MB':>9}{'classes':>9}{'intervals':>11}{'forbidden':>13}{'max':>8}{'MB':>7}"
    print(header)
    for r in rows:
        print(f"{r['tokenizer']:<10}{r['vocab']:>8}{r['build_s']:>9.1f}{r['peak_rss_mb']:>9.0f}{r['classes']:>9}"
              f"{r['intervals']:>11}{r['forbidden_entries']:>13}{r['max_forbidden']:>8}{r['storage_mb']:>7.1f}")
    out_path = ROOT / "bench" / "results" / "merge_automaton.json"
    out_path.write_text(json.dumps({"machine": platform.platform(), "rows": rows}, indent=1))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
