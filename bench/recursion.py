"""Recursive JSON Schemas: canonmerge's bounded default beside recursion at any depth, and the peers, in one run.

For each tokenizer (GPT-2, Llama-3) and schema (a tree, a linked list, mutually recursive expressions: the schemas of
``tests/vegas/test_recursion.py``), every engine compiles the schema (fresh: canonmerge's fragment library off, so a
compile is a first sight) and walks the runtime's encoding of instances nested 1, 2 and 6 levels, one mask per step
(timed, the first visits of a lazily built guide included). Engines: canonmerge with ``max_recursion=3`` (the
default: a stitched guide of compiled fragments; instances nested past its unrolling are outside its language and
not walked),
canonmerge with ``max_recursion=None`` (a ``PushdownGuide``), llguidance and XGrammar (their own JSON-Schema
grammars, any depth; each walks the same instances written as its layout takes them: ``json.dumps`` with ``", "``
and ``": "``, which is canonmerge's layout too). Reported: the first compile and the p50 over ``--repeats`` compiles
(canonmerge's bounded default reuses the fragments its first compile left in memory), mask mean, p50, p99 and max
over the walks of the first compile's guide.

    python bench/recursion.py [--tokenizers gpt2,llama3] [--repeats 3] [--out bench/results/recursion.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grammars  # noqa: E402  (its engines: canonmerge's walk, llguidance's and XGrammar's)

import vegas  # noqa: E402
from bpe.assets import reference_runtime  # noqa: E402
from tests.vegas.test_recursion import CASES, nested  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("RAYON_NUM_THREADS", "1")

WRAPS = {"tree": ({"value": 0}, lambda v: {"value": 1, "children": [v, {"value": 2}]}),
         "linked": ({"v": 0, "next": None}, lambda v: {"v": 1, "next": v}),
         "expression": ({"neg": 3}, lambda v: {"neg": {"plus": [1, v]}})}
DEPTHS = (1, 2, 6)


class Canonmerge(grammars.Canonmerge):
    """canonmerge's JSON Schema compile at a recursion bound (None: any depth), walked as bench/grammars.py walks."""

    def __init__(self, tokenizer, runtime, max_recursion):
        super().__init__(tokenizer, runtime)
        self.max_recursion = max_recursion
        self.name = "canonmerge, any depth" if max_recursion is None else f"canonmerge, max_recursion={max_recursion}"
        vegas.compile_schema({"type": "integer"}, self.canonical, library_dir=False)  # kernels warm

    def compile(self, schema):
        return vegas.compile_schema(schema, self.canonical, max_recursion=self.max_recursion, library_dir=False)

    def walk(self, guide, ids, times):
        return super().walk(guide, ids, times, [])

    def covers(self, schema, ids):
        """Whether the instance is in the guide's language (the bounded default's stops at its unrolling depth),
        asked of another compile so that the timed one meets its states first in the walk."""
        return self.max_recursion is None or self.compile(schema).accepts(ids)


class Peer:
    """A peer of bench/grammars.py given the schema as its own JSON-Schema grammar (any depth)."""

    def __init__(self, tokenizer, runtime, engine_class):
        self.engine = engine_class(tokenizer, runtime)
        self.name = self.engine.name

    def compile(self, schema):
        return self.engine.compile("json_schema", json.dumps(schema))

    def walk(self, compiled, ids, times):
        return self.engine.walk(compiled, ids, times, [])

    def covers(self, schema, ids):
        return True


def run(tokenizers: list[str], repeats: int) -> dict:
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "rows": []}
    for tokenizer in tokenizers:
        runtime = reference_runtime(tokenizer)
        engines = [Canonmerge(tokenizer, runtime, 3), Canonmerge(tokenizer, runtime, None)]
        for engine_class in (grammars.LLGuidance, grammars.XGrammar):
            try:
                engines.append(Peer(tokenizer, runtime, engine_class))
            except ImportError as exc:
                print(f"{tokenizer}: {engine_class.name} not installed ({exc})")
        for schema_name in sorted(CASES):
            schema = CASES[schema_name][0]
            leaf, wrap = WRAPS[schema_name]
            texts = {d: vegas.format_instance(nested(d, leaf, wrap), schema, max_recursion=10) for d in DEPTHS}
            walks = {d: runtime.encode(texts[d], add_special_tokens=False).ids for d in DEPTHS}
            for engine in engines:
                row = {"tokenizer": tokenizer, "engine": engine.name, "schema": schema_name}
                compiles, times, failures = [], [], []
                covered = [d for d in DEPTHS if engine.covers(schema, walks[d])]
                for r in range(repeats):
                    t0 = time.perf_counter()
                    compiled = engine.compile(schema)
                    compiles.append((time.perf_counter() - t0) * 1e3)
                    if r == 0:  # masks of the first fresh compile: its first visits are the first sight's
                        for d in covered:
                            if not engine.walk(compiled, list(walks[d]), times):
                                failures.append(f"depth {d}: not accepted")
                us = np.array(times, dtype=float) / 1e3 if times else np.full(1, np.nan)
                row.update(first_compile_ms=compiles[0], compile_ms=float(np.median(compiles)), masks=len(times), mask_us_mean=float(us.mean()),
                           mask_us_p50=float(np.median(us)), mask_us_p99=float(np.percentile(us, 99)),
                           mask_us_max=float(us.max()), depths=covered, failures=failures)
                results["rows"].append(row)
                print(f"{tokenizer:7s} {row['engine']:28s} {schema_name:10s} compile first {row['first_compile_ms']:7.1f} p50 "
                      f"{row['compile_ms']:7.1f} ms  "
                      f"masks mean {row['mask_us_mean']:7.1f} p50 {row['mask_us_p50']:6.1f} p99 "
                      f"{row['mask_us_p99']:8.1f} max {row['mask_us_max']:8.1f} µs  depths {row['depths']}"
                      + (f"  {failures}" if failures else ""), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizers", default="gpt2,llama3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "recursion.json"))
    args = parser.parse_args()
    results = run(args.tokenizers.split(","), args.repeats)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
