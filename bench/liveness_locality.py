"""How much of a guide a generation needs, how much of its liveness a piece boundary settles, and what building
only that costs (issue 35's lazy guides; docs/design.md, "Liveness decided locally").

Per schema (MaskBench Github_easy, whole-regex guides, ``vegas.schema_regex``): the product nodes the eager
construction builds; the nodes random walks visit (``--walks`` walks of uniformly random allowed tokens, up to 200
tokens each); among the open nodes the eager fixpoint finds live in every merge class, those
``product.compiler.boundaries.break_possible`` settles without the product (it must never settle a node the
fixpoint finds dead in some class: counted as violations, expected 0); and the time to the first mask of the eager
guide (token rows + guide) beside ``product.runtime.lazy.LazyGuide``'s (boundary test + the start node's row and
targets), whose masks are compared with the eager guide's at every step of the same walks (mismatches, expected 0).

    python bench/liveness_locality.py [--tokenizer llama3] [--limit 40] [--walks 30]
    python bench/liveness_locality.py --peers [--tokenizer llama3]

``--peers``: the nine regexes of ``bench/peers.py`` instead, ``compile_regex``'s guide (counted repetitions kept
counted) against the lazy one: compile to the first mask (median of 3), and masks along the runtime's own encodings
of the valid texts, where nearly every lazy step is a first visit.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from automata.regex import from_regex  # noqa: E402
from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import tokenizer_source  # noqa: E402
from product.compiler.boundaries import break_possible  # noqa: E402
from product.compiler.node_kernels import NONE_DEAD  # noqa: E402
from product.compiler.tables import _forbidden_index, vocabulary_trie  # noqa: E402
from product.compiler.token_regex import TokenTransitions  # noqa: E402
from product.runtime.guide import Guide  # noqa: E402
from product.runtime.lazy import LazyGuide  # noqa: E402
from vegas import schema_regex  # noqa: E402

MASKBENCH = Path(__file__).resolve().parents[2] / "shared" / "maskbench"


def measure(path: str, canonical, trie, walks: int, rng) -> dict | None:
    data = json.loads(Path(path).read_text())
    try:
        regex = schema_regex(data.get("schema", data))
        if len(regex) > 20_000:
            return None
        dfa = from_regex(regex, max_states=5000)
        start = time.perf_counter()
        guide = Guide(TokenTransitions.build(dfa, trie), canonical)
        guide.allowed(guide.initial_state)
        compile_s = time.perf_counter() - start
    except Exception:  # (schemas these guides do not take whole: the stitched path's business)
        return None
    start = time.perf_counter()
    lazy = LazyGuide(dfa, canonical)
    lazy.allowed(lazy.initial_state)
    lazy_s = time.perf_counter() - start
    start = time.perf_counter()
    possible = break_possible(dfa, canonical)
    boundary_s = time.perf_counter() - start
    eos, visited, mismatches, eager_us, lazy_us = set(guide.eos_token_ids), set(), 0, [], []
    for _ in range(walks):
        state, lazy_state = guide.initial_state, lazy.initial_state
        for _ in range(200):
            visited.add(guide._split(state)[0])
            start = time.perf_counter()
            mask = guide.allowed(state)
            middle = time.perf_counter()
            lazy_mask = lazy.allowed(lazy_state)
            eager_us.append((middle - start) * 1e6), lazy_us.append((time.perf_counter() - middle) * 1e6)
            mismatches += not np.array_equal(mask, lazy_mask)
            tokens = np.flatnonzero(mask[:canonical.vocab_size])
            if not len(tokens):
                break
            token = int(rng.choice(tokens))
            if token in eos:
                break
            state, lazy_state = guide.advance(state, token), lazy.advance(lazy_state, token)
    is_open = ~guide._is_pending
    q, ctx = guide._node_q[is_open], guide._node_ctx[is_open]
    live = guide._status[is_open] == NONE_DEAD
    settled = possible[q, ctx]
    seen = np.zeros(guide.num_nodes, dtype=bool)
    seen[list(visited)] = True
    return {"schema": Path(path).name, "nodes": guide.num_nodes, "open_nodes": int(is_open.sum()),
            "visited": int(seen.sum()), "visited_open": int((seen & ~guide._is_pending).sum()),
            "live_open": int(live.sum()), "settled": int((settled & live).sum()),
            "violations": int((settled & ~live).sum()), "compile_s": compile_s, "boundary_test_s": boundary_s,
            "lazy_first_mask_s": lazy_s, "lazy_nodes_with_rows": len(lazy._rows), "mask_mismatches": mismatches,
            "eager_mask_us": eager_us, "lazy_mask_us": lazy_us}


def peers(canonical, tokenizer: str) -> dict:
    """``--peers``: see the module docstring."""
    sys.path.insert(0, str(Path(__file__).parent))
    from peers import CASES  # (bench/peers.py: the regexes and valid texts every engine walks)

    from bpe.assets import reference_runtime
    from product import compile_regex

    runtime = reference_runtime(tokenizer)
    compile_regex("ab", canonical)
    rows, eager_us, lazy_us = [], [], []
    for name, pattern, texts in CASES:
        times = {"eager": [], "lazy": []}
        for _ in range(3):
            start = time.perf_counter()
            guide = compile_regex(pattern, canonical)
            guide.allowed(guide.initial_state)
            times["eager"].append(time.perf_counter() - start)
            start = time.perf_counter()
            lazy = LazyGuide(from_regex(pattern), canonical)
            lazy.allowed(lazy.initial_state)
            times["lazy"].append(time.perf_counter() - start)
        steps_eager, steps_lazy = [], []
        for text in texts:
            state, lazy_state = guide.initial_state, lazy.initial_state
            for token in runtime.encode(text, add_special_tokens=False).ids:
                start = time.perf_counter()
                guide.allowed(state)
                middle = time.perf_counter()
                lazy.allowed(lazy_state)
                steps_eager.append((middle - start) * 1e6), steps_lazy.append((time.perf_counter() - middle) * 1e6)
                state, lazy_state = guide.advance(state, token), lazy.advance(lazy_state, token)
        eager_us += steps_eager
        lazy_us += steps_lazy
        rows.append({"regex": name, "eager_first_mask_s": float(np.median(times["eager"])),
                     "lazy_first_mask_s": float(np.median(times["lazy"])),
                     "eager_walk_ms": sum(steps_eager) / 1e3, "lazy_walk_ms": sum(steps_lazy) / 1e3})
        print(f"{name:12s} first mask: eager {rows[-1]['eager_first_mask_s'] * 1e3:7.2f} ms, lazy "
              f"{rows[-1]['lazy_first_mask_s'] * 1e3:6.2f} ms; masks of the texts' walks summed: eager "
              f"{rows[-1]['eager_walk_ms']:6.2f} ms, lazy {rows[-1]['lazy_walk_ms']:7.2f} ms", flush=True)
    eager_us, lazy_us = np.array(eager_us), np.array(lazy_us)
    print(f"\nfirst mask p50: eager {np.median([r['eager_first_mask_s'] for r in rows]) * 1e3:.2f} ms, lazy "
          f"{np.median([r['lazy_first_mask_s'] for r in rows]) * 1e3:.2f} ms; masks along the walks mean / p99: eager "
          f"{eager_us.mean():.0f} / {np.percentile(eager_us, 99):.0f} µs, lazy {lazy_us.mean():.0f} / "
          f"{np.percentile(lazy_us, 99):.0f} µs ({len(lazy_us)} steps)")
    return {"tokenizer": tokenizer, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--limit", type=int, default=40, help="schema files tried (the first, by name)")
    parser.add_argument("--walks", type=int, default=30)
    parser.add_argument("--peers", action="store_true", help="the nine regexes of bench/peers.py instead")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    canonical = compile_tokenizer(tokenizer_source(args.tokenizer))
    trie, rng = vocabulary_trie(canonical), np.random.default_rng(0)
    _forbidden_index(canonical)._stabbing_index()  # once per tokenizer and process (0.7 s on Llama-3), for both guides
    LazyGuide(from_regex("ab"), canonical)  # (and the compiled kernels loaded)
    if args.peers:
        out = args.out or Path(__file__).parent / "results" / f"liveness_locality_peers_{args.tokenizer}.json"
        out.write_text(json.dumps(peers(canonical, args.tokenizer), indent=1) + "\n")
        print(f"wrote {out}")
        return
    rows = []
    for path in sorted(glob.glob(str(MASKBENCH / "Github_easy---*.json")))[:args.limit]:
        row = measure(path, canonical, trie, args.walks, rng)
        if row:
            rows.append(row)
            print(f"{row['schema'][:32]:32s} nodes {row['nodes']:6d} (open {row['open_nodes']:5d})  visited "
                  f"{row['visited']:5d} (open {row['visited_open']:4d})  settled {row['settled']:4d}/{row['live_open']:4d}"
                  f"  first mask: eager {row['compile_s'] * 1e3:7.1f} ms, lazy {row['lazy_first_mask_s'] * 1e3:6.1f} ms",
                  flush=True)
    total = {k: sum(r[k] for r in rows) for k in ("nodes", "open_nodes", "visited", "visited_open", "live_open",
                                                  "settled", "violations", "mask_mismatches")}
    print(f"\n{len(rows)} schemas, {args.tokenizer}: {total['nodes']:,} nodes built, {total['visited']:,} visited by "
          f"{args.walks} walks each ({total['visited'] / total['nodes']:.1%}); open nodes live in every class settled "
          f"by the boundary test: {total['settled']:,} of {total['live_open']:,} "
          f"({total['settled'] / max(1, total['live_open']):.1%}); violations {total['violations']}.\nTime to the first "
          f"mask, p50 / max: eager {np.median([r['compile_s'] for r in rows]) * 1e3:.1f} / "
          f"{max(r['compile_s'] for r in rows) * 1e3:.1f} ms, lazy {np.median([r['lazy_first_mask_s'] for r in rows]) * 1e3:.1f}"
          f" / {max(r['lazy_first_mask_s'] for r in rows) * 1e3:.1f} ms (boundary test "
          f"{np.median([r['boundary_test_s'] for r in rows]) * 1e3:.1f} ms p50); masks differing along the walks: "
          f"{total['mask_mismatches']}")
    eager_us = np.concatenate([r["eager_mask_us"] for r in rows])
    lazy_us = np.concatenate([r["lazy_mask_us"] for r in rows])
    print(f"Masks along the walks (allowed(), bool[V], first visits included), mean / p50 / p99 / max: eager "
          f"{eager_us.mean():.0f} / {np.median(eager_us):.0f} / {np.percentile(eager_us, 99):.0f} / {eager_us.max():.0f}"
          f" µs, lazy {lazy_us.mean():.0f} / {np.median(lazy_us):.0f} / {np.percentile(lazy_us, 99):.0f} / "
          f"{lazy_us.max():.0f} µs ({len(lazy_us):,} steps)")
    for r in rows:
        r["eager_mask_us"], r["lazy_mask_us"] = (float(np.mean(r["eager_mask_us"])), float(np.mean(r["lazy_mask_us"])))
    out = args.out or Path(__file__).parent / "results" / f"liveness_locality_{args.tokenizer}.json"
    out.write_text(json.dumps({"tokenizer": args.tokenizer, "walks": args.walks, "rows": rows, "total": total},
                              indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
