"""A real model writes JSON and YAML for realistic schemas through schema guides, canonical and not.

SmolLM2-135M-Instruct (the pinned GGUF asset, on CPU) answers three requests — a person record, a weather
function call with arguments, an order with line items — in both layouts, greedily, through
``vegas.compile_schema`` guides with ``canonical_only=True`` and ``False`` (every tokenization allowed: the peers'
behaviour). Per run it prints and records: whether the text parses (``json.loads`` / ``yaml.safe_load``) and
validates (``jsonschema``), whether its tokens are the tokenizer's own encoding of the text (canonical), tokens,
forced tokens and forward passes skipped, the compile time and the time per token.

    python bench/schema_generation.py [--max-tokens 160] [--out bench/results/schema_generation.json]

Needs the test extra (jsonschema, pyyaml).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jsonschema
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bpe  # noqa: E402
import product  # noqa: E402
import vegas  # noqa: E402
from bpe.assets import reference_model, reference_runtime, tokenizer_source  # noqa: E402

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "occupation": {"type": "string"}, "email": {"type": "string", "format": "email"},
    "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["name", "age", "occupation", "hobbies"], "additionalProperties": False}
FUNCTION_CALL = {"type": "object", "properties": {
    "name": {"const": "get_weather"},
    "arguments": {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location", "unit"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False}
ORDER = {"type": "object", "properties": {
    "order_id": {"type": "string", "pattern": "^ORD-[0-9]{4}$"},
    "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
        "product": {"type": "string"}, "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
        "price": {"type": "number", "minimum": 0}}, "required": ["product", "quantity", "price"],
        "additionalProperties": False}},
    "status": {"enum": ["pending", "paid", "shipped"]}},
    "required": ["order_id", "items", "status"], "additionalProperties": False}
REQUESTS = [
    ("person", PERSON, "Describe a fictional person."),
    ("function call", FUNCTION_CALL, "Call the weather function for Paris for the next 3 days, in celsius."),
    ("order", ORDER, "Write an order for two books and a lamp, already paid."),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "schema_generation.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    canonical = bpe.compile_tokenizer(bpe.load_tokenizer(tokenizer_source("smollm2")))
    runtime = reference_runtime("smollm2")
    model = reference_model()
    rows = []
    for name, schema, request in REQUESTS:
        for style in ("json", "yaml"):
            prompt = (f"<|im_start|>user\n{request} Answer in {style.upper()}.<|im_end|>\n"
                      "<|im_start|>assistant\n")
            prompt_ids = runtime.encode(prompt, add_special_tokens=False).ids
            for canonical_only in (True, False):
                started = time.perf_counter()
                guide = vegas.compile_schema(schema, canonical, style=style, canonical_only=canonical_only)
                compiled = time.perf_counter()
                with torch.no_grad():
                    out = product.generate(model, guide, prompt_ids, max_new_tokens=args.max_tokens)
                done = time.perf_counter()
                text = runtime.decode(out.token_ids, skip_special_tokens=True)
                try:
                    value = json.loads(text) if style == "json" else yaml.safe_load(text)
                    jsonschema.validate(value, schema)
                    valid = True
                except Exception:
                    valid = False
                rows.append({
                    "schema": name, "style": style, "canonical_only": canonical_only, "text": text,
                    "finished": out.finished, "valid": valid,
                    "canonical": runtime.encode(text, add_special_tokens=False).ids == list(out.token_ids),
                    "tokens": len(out.token_ids), "forced": out.forced_tokens, "forward_passes": out.forward_passes,
                    "compile_ms": 1e3 * (compiled - started),
                    "ms_per_token": 1e3 * (done - compiled) / max(1, len(out.token_ids)),
                })
                r = rows[-1]
                print(f"{name:13s} {style:4s} {'canonical' if canonical_only else 'any tok.':9s} "
                      f"valid={r['valid']!s:5s} canonical={r['canonical']!s:5s} tokens={r['tokens']:3d} "
                      f"forced={r['forced']:3d} ({100 * r['forced'] / max(1, r['tokens']):.0f} %) "
                      f"passes={r['forward_passes']:3d} compile={r['compile_ms']:7.0f} ms "
                      f"{r['ms_per_token']:.0f} ms/token  {json.dumps(text)[:70]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"model": "SmolLM2-135M-Instruct Q4_1 (GGUF, CPU)", "greedy": True,
                                    "max_new_tokens": args.max_tokens, "runs": rows}, indent=1))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
