"""Step time of ``product.generate`` with the mask computed during the forward pass (``overlap=True``) and before
it (``overlap=False``), on SmolLM2-135M-Instruct.

One free-text regex (few forced tokens, so almost every token is a forward pass), greedy decoding, the same
prompt; the two settings alternate ``--rounds`` times and each round's time per forward pass is total time /
passes (the prompt's pass included, the same in both). Reports the median and the minimum per setting, the
machine's load average, and the mask fill alone (``Guide.fill_bitmask``, median over the states the text
visits): the most overlap can save per step. Results in ``bench/results/overlap_<device>.json``.

    python bench/overlap.py [--device cpu|cuda] [--rounds 7] [--tokens 48]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import reference_model, reference_runtime, tokenizer_source  # noqa: E402
from product import compile_regex, generate  # noqa: E402

PATTERN = r'\{"summary": "[a-zA-Z ,.]{20,200}", "mood": "(happy|sad|neutral)"\}'
PROMPT = "Summarise the weather today in one JSON object: "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = reference_model().to(device)
    runtime = reference_runtime("smollm2")
    guide = compile_regex(PATTERN, compile_tokenizer(tokenizer_source("smollm2")))
    prompt = runtime.encode(PROMPT, add_special_tokens=False).ids
    generate(model, guide, prompt, max_new_tokens=8)  # warm-up: kernels, allocator, the worker thread
    per_pass: dict[bool, list[float]] = {True: [], False: []}
    tokens, passes = None, 0
    for _ in range(args.rounds):
        for overlap in (False, True):
            guide = compile_regex(PATTERN, compile_tokenizer(tokenizer_source("smollm2")))  # masks not cached
            t0 = time.perf_counter()
            result = generate(model, guide, prompt, max_new_tokens=args.tokens, overlap=overlap)
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_pass[overlap].append((time.perf_counter() - t0) / result.forward_passes * 1e3)
            assert tokens is None or result.token_ids == tokens, "overlap changed the output"
            tokens, passes = result.token_ids, result.forward_passes
    # the mask fill alone, on states the text visits (fresh guide: computed, not cached)
    guide = compile_regex(PATTERN, compile_tokenizer(tokenizer_source("smollm2")))
    states = [guide.initial_state]
    for t in tokens:
        states.append(guide.advance(states[-1], t))
    out = torch.zeros((1, guide.num_words), dtype=torch.int32)
    fill_us = []
    for s in states:
        t0 = time.perf_counter_ns()
        guide.fill_bitmask([s], out)
        fill_us.append((time.perf_counter_ns() - t0) / 1e3)
    result = {"device": str(device), "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
              "load_average": os.getloadavg()[0], "tokens": len(tokens), "forward_passes": passes,
              "fill_us_median": float(np.median(fill_us)),
              **{f"{'with' if o else 'without'}_overlap_ms_per_pass": {"median": float(np.median(v)),
                                                                       "min": float(np.min(v)), "rounds": v}
                 for o, v in per_pass.items()}}
    print(f"SmolLM2-135M on {device} ({torch.get_num_threads()} torch threads, load {result['load_average']:.1f}), "
          f"{len(tokens)} tokens, {args.rounds} rounds; ms per forward pass (median / min):")
    for overlap in (False, True):
        v = per_pass[overlap]
        print(f"  {'with' if overlap else 'without'} overlap: {np.median(v):7.2f} / {np.min(v):7.2f}")
    print(f"  mask fill alone: {result['fill_us_median']:.1f} µs median per state")
    path = Path(__file__).parent / "results" / f"overlap_{device.type}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
