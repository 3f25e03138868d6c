"""Masks applied to logits on a device: fill on the CPU, one host-to-device copy, expand and mask on the device.

For batch sizes 1–64 at Llama-3's vocabulary (128,256), times per step: ``Guide.fill_bitmask`` for the batch
(states along the runtime's encoding of a JSON instance), the copy of the packed words to the device, and
``apply_bitmask`` on float32 logits; the device is synchronised before each clock read. Runs on CUDA when
available, else on the CPU (the same code path), so the script is checked everywhere and measured where a GPU
is lent. Results in ``bench/results/gpu_masks_<device>.json``.

    python bench/gpu_masks.py [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import reference_runtime, tokenizer_source  # noqa: E402
from product import apply_bitmask, compile_regex  # noqa: E402

PATTERN = r'\{"name": "[^"\\\x00-\x1f]*", "age": [0-9]{1,3}, "city": "[^"\\\x00-\x1f]*"\}'
INSTANCE = '{"name": "Renée O\'Neil", "age": 102, "city": "New York City"}'


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    canonical = compile_tokenizer(tokenizer_source("llama3"))
    guide = compile_regex(PATTERN, canonical)
    ids = reference_runtime("llama3").encode(INSTANCE, add_special_tokens=False).ids
    states = [guide.initial_state]
    for t in ids:
        states.append(guide.advance(states[-1], t))
    rows = []
    for batch in (1, 8, 64):
        host = torch.zeros((batch, guide.num_words), dtype=torch.int32)
        if device.type == "cuda":
            host = host.pin_memory()
        logits = torch.randn(batch, canonical.vocab_size + 256, device=device)  # padded like real models
        fill, copy, apply = [], [], []
        for step, _ in enumerate(states):
            batch_states = [states[(step + i) % len(states)] for i in range(batch)]
            t0 = time.perf_counter()
            guide.fill_bitmask(batch_states, host)
            t1 = time.perf_counter()
            on_device = host.to(device, non_blocking=True)
            _sync(device)
            t2 = time.perf_counter()
            apply_bitmask(logits, on_device)
            _sync(device)
            t3 = time.perf_counter()
            fill.append(t1 - t0)
            copy.append(t2 - t1)
            apply.append(t3 - t2)
        row = {"batch": batch, "steps": len(states)}
        for name, values in (("fill", fill), ("copy", copy), ("apply", apply)):
            values = np.array(values[1:]) * 1e6  # the first step warms the kernels up
            row[f"{name}_us_mean"], row[f"{name}_us_p99"] = float(values.mean()), float(np.percentile(values, 99))
        rows.append(row)
        print(f"{device.type} batch {batch:3d}: fill {row['fill_us_mean']:8.1f} µs  copy {row['copy_us_mean']:7.1f} µs"
              f"  apply {row['apply_us_mean']:7.1f} µs  (p99 {row['fill_us_p99']:.0f} / {row['copy_us_p99']:.0f} / "
              f"{row['apply_us_p99']:.0f})")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = Path(__file__).parent / "results" / f"gpu_masks_{device.type}.json"
    out.write_text(json.dumps({"device": name, "vocab": canonical.vocab_size, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
