"""Where a warm schema compile's time goes: per phase and per function, over MaskBench schemas.

Each selected schema (``json_schema.py``'s selection) is compiled once (cold: its fragments compiled, or loaded
from the on-disk library of ``CANONMERGE_CACHE_DIR``), then ``--repeats`` more times (warm: every fragment in
the in-memory library); a schema's warm time is the median of those. Right after (as in ``json_schema.py``: the
in-memory library may have evicted an earlier schema's fragments by the end of the run), one more warm compile
runs with timers around the compile's phases and one under cProfile (aggregated over all schemas):

- ``skeleton regex``: ``vegas.schema.Compiler`` walks the schema and writes the skeleton and its leaves;
- ``skeleton DFA``: ``product.compiler.skeleton.Skeleton`` (the skeleton's character DFA and its cut states);
- ``fragments``: ``compile_stitched`` up to the guide (fragment regexes written, looked up in the library,
  instances and their exits);
- ``guide + first mask``: ``StitchedGuide.__init__`` (the instances' tables and the initial state's mask).

Schemas whose cold compile takes longer than ``--skip-cold`` seconds are left out of the warm measurement (they
are counted repetitions, another optimisation's subject). Only the first compile of a process is cold: run the
script twice and the second run's "cold" compiles load fragments from disk.

    python bench/warm_compile.py [--style json] [--limit 25] [--seed 0] [--repeats 5] [--top 40]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from json_schema import select_files  # noqa: E402

from product import StitchedGuide  # noqa: E402
from product.compiler.skeleton import Skeleton  # noqa: E402
from vegas.schema import Compiler  # noqa: E402


def _phase_timers(totals: dict[str, float]):
    """Wrap the compile's phases with timers adding into ``totals``; returns a function undoing it."""
    wrapped = [(Compiler, "value", "skeleton regex"), (Skeleton, "__init__", "skeleton DFA"),
               (StitchedGuide, "__init__", "guide + first mask")]
    originals = []
    depth = defaultdict(int)
    for owner, attr, phase in wrapped:
        original = getattr(owner, attr)
        originals.append((owner, attr, original))

        def timed(*args, _original=original, _phase=phase, **kwargs):
            depth[_phase] += 1
            t0 = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                depth[_phase] -= 1
                if depth[_phase] == 0:  # Compiler.value recurses: count the outermost call only
                    totals[_phase] += time.perf_counter() - t0

        setattr(owner, attr, timed)

    def undo():
        for owner, attr, original in originals:
            setattr(owner, attr, original)

    return undo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--split", default="Glaiveai2K,Github_easy")
    parser.add_argument("--limit", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--style", default="json")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-cold", type=float, default=20.0)
    parser.add_argument("--skip-warm-ms", type=float, default=200.0,
                        help="leave schemas whose warm compile is slower out of the profile (counted repetitions)")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--only", default="", help="comma-separated schema names (default: all selected)")
    args = parser.parse_args()

    import vegas
    from bpe import compile_tokenizer
    from bpe.assets import tokenizer_source

    canonical = compile_tokenizer(tokenizer_source(args.tokenizer))
    files = select_files(args.split.split(","), args.limit, args.seed)
    if args.only:
        files = [f for f in files if f.stem in args.only.split(",")]
    schemas = {}
    for f in files:
        schemas[f.stem] = json.loads(f.read_text(encoding="utf-8"))["schema"]

    def compile_(schema):
        return vegas.compile_schema(schema, canonical, style=args.style)

    cold, warm = {}, {}
    totals: dict[str, float] = defaultdict(float)
    profile = cProfile.Profile()
    total, measured = 0.0, []
    for name, schema in schemas.items():
        t0 = time.perf_counter()
        try:
            compile_(schema)
        except Exception as exc:  # refused or failed: not measured
            print(f"{name}: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
            continue
        cold[name] = time.perf_counter() - t0
        if cold[name] > args.skip_cold:
            continue
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            compile_(schema)
            times.append(time.perf_counter() - t0)
        warm[name] = float(np.median(times)) * 1e3
        if warm[name] > args.skip_warm_ms:
            continue
        # right after its own compiles, as in the bench (the in-memory library may have evicted an earlier
        # schema's fragments since): one compile with phase timers, one under the profiler
        measured.append(name)
        undo = _phase_timers(totals)
        t0 = time.perf_counter()
        compile_(schema)
        total += time.perf_counter() - t0
        undo()
        profile.enable()
        compile_(schema)
        profile.disable()
    values = np.array([warm[n] for n in warm])
    print(f"\n{len(warm)} schemas ({args.style}): warm p50 {np.percentile(values, 50):.2f} ms, p90 "
          f"{np.percentile(values, 90):.2f} ms, max {values.max():.1f} ms; cold p50 "
          f"{np.percentile(list(cold.values()), 50) * 1e3:.0f} ms")
    for name in sorted(warm, key=warm.get):
        print(f"  {name[:55]:55s} warm {warm[name]:8.2f} ms  cold {cold[name] * 1e3:8.0f} ms")

    print(f"\nphases over {len(measured)} warm compiles ({total * 1e3:.1f} ms, {total * 1e3 / len(measured):.2f} "
          f"ms per schema; timers included):")
    phases = dict(totals)
    phases["rest (fragments, lookups, instances)"] = total - sum(totals.values())
    for phase, seconds in phases.items():
        print(f"  {phase:40s} {seconds * 1e3:8.1f} ms  {seconds * 1e3 / len(measured):6.2f} ms/schema  "
              f"{100 * seconds / total:5.1f} %")

    stats = pstats.Stats(profile)
    print(f"\ncProfile over the same {len(measured)} warm compiles, by own time:")
    stats.sort_stats("tottime").print_stats(args.top)
    print("by cumulative time:")
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
