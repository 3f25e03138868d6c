"""One bench, two revisions of the code, taking turns: is a change within noise?

The VM drifts by more than many of the gaps worth checking (the same code's schema warm p50 measured 1.50 and 1.74
ms four minutes apart), so a before/after comparison runs both trees in one session, alternating A B B A A B ...,
and compares medians over rounds. Each revision is checked out once into a git worktree beside the repository
(so that a bench finding its data at ``../shared`` finds it there too; its own numba cache, warmed by a first,
discarded round; removed at the end) and the bench runs there with that tree first on ``sys.path``. The
bench must accept ``--out PATH`` and write a JSON whose ``rows`` (``bench/peers.py``) or ``table``
(``bench/json_schema.py``) hold the figures; every numeric field is compared.

    python bench/ab.py a01425f HEAD --rounds 2 -- peers.py --tokenizers gpt2,llama3 --repeats 3
    python bench/ab.py a01425f HEAD -- json_schema.py --limit 10 --engines canonmerge-json,llguidance

Leaves out: significance tests (the rounds are few; read the spread between rounds of the same tree first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rows(result: dict) -> dict[str, dict[str, float]]:
    """The bench's figures: row label -> numeric field -> value."""
    if "rows" in result:
        rows = {f"{r['tokenizer']} {r['engine']}": r for r in result["rows"]}
    else:
        rows = dict(result["table"])
    return {label: {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            for label, row in rows.items()}


def _run(tree: Path, script: str, args: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, str(tree / "bench" / script), *args, "--out", str(out)], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="the revision before (any git revision)")
    parser.add_argument("b", help="the revision after")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per revision, after one warm-up round")
    parser.add_argument("--fields", default="compile_ms_p50,warm_compile_ms_p50,new_keys_compile_ms_p50,mask_us_mean,"
                        "mask_us_p99,advance_us_mean,covered,valid_accepted,invalid_rejected",
                        help="fields to print (all numeric fields are in the JSON written)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ab.json")
    parser.usage = "%(prog)s A B [--rounds N] [--fields F] [--out PATH] -- SCRIPT [ARGS...]"
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("name the bench after --: -- SCRIPT [ARGS...] (a script of bench/)")
    cut = argv.index("--")
    args = parser.parse_args(argv[:cut])
    bench = argv[cut + 1:]
    script, bench_args = bench[0], bench[1:]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for label, rev in (("A", args.a), ("B", args.b)):
            trees[label] = REPO.parent / f".ab-{os.getpid()}-{label}"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(trees[label]), rev],
                           check=True)
        try:
            runs: dict[str, list[dict]] = {"A": [], "B": []}
            order = [("A", "B") if k % 2 == 0 else ("B", "A") for k in range(args.rounds + 1)]
            for k, pair in enumerate(order):
                for label in pair:
                    print(f"round {k}{' (warm-up)' if k == 0 else ''}: {label} = {getattr(args, label.lower())}",
                          flush=True)
                    result = _run(trees[label], script, bench_args, Path(tmp) / f"{label}{k}.json")
                    if k:
                        runs[label].append(_rows(result))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    fields = args.fields.split(",")
    summary = {}
    print(f"\nmedians over {args.rounds} rounds (each round's values in brackets); A = {args.a}, B = {args.b}")
    for label in runs["A"][0]:
        for field in fields:
            a = [run[label][field] for run in runs["A"] if field in run.get(label, {})]
            b = [run[label][field] for run in runs["B"] if field in run.get(label, {})]
            if not a or not b:
                continue
            summary.setdefault(label, {})[field] = {"A": a, "B": b}
            ma, mb = statistics.median(a), statistics.median(b)
            change = f"{(mb - ma) / ma * 100:+.1f} %" if ma else ""
            print(f"{label:28} {field:22} A {ma:10.3f} [{', '.join(f'{x:.3f}' for x in a)}]   "
                  f"B {mb:10.3f} [{', '.join(f'{x:.3f}' for x in b)}]   {change}")
    args.out.write_text(json.dumps({"a": args.a, "b": args.b, "bench": bench, "rounds": args.rounds,
                                    "summary": summary}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
