"""Measurement: how exact each canonical automaton is, judged by the HF ``tokenizers`` runtime.

Per tokenizer: tokens of real text accepted (must be all), same-text respellings (split a token into its
merge, fuse two neighbours, spell a character with byte-fallback tokens) that the runtime calls non-canonical
and how many of those the automaton still accepts (over-allowed; must be 0),
the restricted-alphabet pairwise oracle counted (not asserted), and for ``ignore_merges`` tokenizers how many vocabulary tokens BPE would spell differently when they stand
alone as a piece (the automaton allows both spellings). Writes ``bench/results/canonical_exactness.json``.
Run: ``python bench/canonical_exactness.py [names...]``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import automaton_of, model_of, runtime_of  # noqa: E402
from test_canonical_automaton import _encode, _is_canonical, _pairwise_verdicts, _real_texts, _respellings  # noqa: E402


def ignore_merges_disagreements(name: str) -> dict:
    """Vocabulary tokens that are one whole piece, where BPE without ignore_merges gives something else."""
    from tokenizers import Tokenizer

    runtime = runtime_of(name)
    spec = json.loads(runtime.to_str())
    spec["model"]["ignore_merges"] = False
    plain = Tokenizer.from_str(json.dumps(spec))
    model = model_of(name)
    whole = 0
    differ: set[str] = set()
    for t, raw in enumerate(model.token_bytes):
        if raw is None or t in model.special_token_ids or t in model.added_token_ids:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(runtime.pre_tokenizer.pre_tokenize_str(text)) != 1:
            continue
        whole += 1
        if plain.encode(text, add_special_tokens=False).ids != [t]:
            differ.add(text)
    # How often real text meets the corner: pieces that are one of those tokens.
    pieces = hits = 0
    for text in _real_texts():
        for piece, (start, end) in runtime.pre_tokenizer.pre_tokenize_str(text):
            pieces += 1
            hits += text[start:end] in differ
    return {"whole_piece_tokens": whole, "bpe_spells_differently": len(differ),
            "real_text_pieces": pieces, "real_text_pieces_spelled_differently": hits}


def pairwise_over_allowance(name: str, alphabet: str = "ab '\n1s") -> dict:
    """The restricted-alphabet pairwise oracle of the tests, counted instead of asserted: pairs (t1, t2) at
    the start of a text that no short continuation makes the runtime produce, yet allowed."""
    _, verdicts = _pairwise_verdicts(name, alphabet)
    non_canonical = [allowed for allowed, canonical, _ in verdicts if not canonical]
    return {"pair_alphabet": alphabet, "pairs": len(verdicts), "pairs_non_canonical": len(non_canonical),
            "pairs_over_allowed": sum(non_canonical)}


def main() -> None:
    names = sys.argv[1:] or ["mistral", "gpt2", "smollm2", "llama3", "qwen3"]
    rows = []
    for name in names:
        automaton = automaton_of(name)
        texts = _real_texts()
        accepted_tokens = total_tokens = 0
        rng = random.Random(5)
        non_canonical = over_allowed = rejected_canonical = 0
        for text in texts:
            ids = _encode(name, text)
            total_tokens += len(ids)
            accepted_tokens += len(ids) if automaton.accepts(ids) else 0
            for new in _respellings(name, ids[:400], rng, 20):
                accepted, canonical = automaton.accepts(new), _is_canonical(name, new)
                non_canonical += not canonical
                over_allowed += accepted and not canonical
                rejected_canonical += canonical and not accepted
        row = {"tokenizer": name, "real_text_tokens": total_tokens, "accepted_tokens": accepted_tokens,
               "respellings_non_canonical": non_canonical, "over_allowed": over_allowed,
               "canonical_rejected": rejected_canonical}
        row.update(pairwise_over_allowance(name))
        if model_of(name).ignore_merges:
            row.update(ignore_merges_disagreements(name))
        rows.append(row)
        print(json.dumps(row))
    out = ROOT / "bench" / "results" / "canonical_exactness.json"
    out.write_text(json.dumps({"rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
