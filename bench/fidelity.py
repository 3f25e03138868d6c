"""Fidelity: how masking changes the probability a real model gives to each answer (reference §9.1).

SmolLM2-135M-Instruct is asked a question with a few possible answers. For each answer we compute exactly:

- unconstrained: the model's probability of the answer, summed over every token path that spells it;
- any-tokenization masking (``canonical_only=False``, the peers' behaviour): the probability that sampling from
  the masked, renormalised distribution produces the answer, summed over every path the mask allows;
- canonical masking (``canonical_only=True``): the same with canonical masks.

Each is normalised over the answers. Exact sums: every path is expanded (no sampling), with one forward pass
per distinct token prefix. Writes ``bench/results/fidelity.json`` and prints a table.

Per step, too (issue 37, part 2: a figure that does not depend on greedy luck): along each answer's canonical
tokens, the model's own next-token distribution *conditioned on the constraint* — p(t | prefix) times the
probability that the model, continuing after t, spells an answer exactly (every token path summed, as above),
renormalised — beside each mask's distribution (the model's, renormalised over the allowed tokens); the
total-variation distance between the two, averaged over the answer's steps, and the log-probability of the
answer's canonical tokens (then EOS) under each mask and under the conditioned model.

    python bench/fidelity.py
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import reference_model, reference_runtime, tokenizer_source  # noqa: E402
from product import compile_regex  # noqa: E402

QUESTIONS = [
    ("Question: What is the first name of the US president who was a member of the Sigma Alpha Epsilon "
     "fraternity?\nAnswer:", [" Theodore", " William"]),
    ("Question: Which city is the capital of Australia?\nAnswer:", [" Sydney", " Canberra", " Melbourne"]),
    ("Question: Is the Great Wall of China visible from the Moon with the naked eye?\nAnswer:",
     [" Yes", " No", " Maybe"]),
]


class Model:
    """Next-token log-probabilities after the prompt plus a token prefix, memoised by prefix."""

    def __init__(self, model, prompt_ids):
        self.model, self.prompt, self.cache, self.passes = model, list(prompt_ids), {}, 0

    @torch.no_grad()
    def logprobs(self, prefix: tuple) -> np.ndarray:
        if prefix not in self.cache:
            ids = torch.tensor([self.prompt + list(prefix)])
            logits = self.model(input_ids=ids).logits[0, -1].float()
            self.cache[prefix] = torch.log_softmax(logits, dim=-1).numpy()
            self.passes += 1
        return self.cache[prefix]


def unconstrained(model: Model, token_bytes, answer: bytes, prefix=()) -> float:
    """Sum over all token paths spelling exactly ``answer`` (recursion over vocabulary prefixes)."""
    if not answer:
        return 1.0
    lp = model.logprobs(prefix)
    total = 0.0
    for t in _tokens_spelling_a_prefix(token_bytes, answer):
        total += float(np.exp(lp[t])) * unconstrained(model, token_bytes, answer[len(token_bytes[t]):], prefix + (t,))
    return total


def masked(model: Model, guide, token_bytes, state=None, prefix=(), spelled=b"") -> dict[bytes, float]:
    """Probability of each complete answer when sampling from the masked, renormalised distribution."""
    state = guide.initial_state if state is None else state
    allowed = guide.allowed(state)
    lp = model.logprobs(prefix).copy()
    lp[len(allowed):] = -np.inf
    lp[: len(allowed)][~allowed] = -np.inf
    probs = np.exp(lp - np.logaddexp.reduce(lp[np.isfinite(lp)]))
    out: dict[bytes, float] = {}
    for t in np.flatnonzero(allowed).tolist():
        if t in guide.eos_token_ids:
            out[spelled] = out.get(spelled, 0.0) + float(probs[t])
            continue
        for answer, p in masked(model, guide, token_bytes, guide.advance(state, t), prefix + (t,),
                                spelled + token_bytes[t]).items():
            out[answer] = out.get(answer, 0.0) + float(probs[t]) * p
    return out


def completion(model: Model, token_bytes, answers: list[bytes], prefix: tuple, spelled: bytes, memo: dict) -> float:
    """The probability that the model, after ``prefix`` (which spells ``spelled``), goes on to spell one of the
    answers exactly: every token path summed (the constraint's mass below this prefix)."""
    if prefix in memo:
        return memo[prefix]
    if spelled in answers:
        memo[prefix] = 1.0
        return 1.0
    lp = model.logprobs(prefix)
    total = 0.0
    for answer in answers:
        if answer.startswith(spelled):
            rest = answer[len(spelled):]
            for t in _tokens_spelling_a_prefix(token_bytes, rest):
                total += float(np.exp(lp[t])) * completion(model, token_bytes, answers, prefix + (t,),
                                                           spelled + token_bytes[t], memo)
    memo[prefix] = total
    return total


def conditioned(model: Model, token_bytes, answers: list[bytes], prefix: tuple, spelled: bytes, memo: dict) -> dict:
    """The model's next-token distribution after ``prefix`` conditioned on spelling an answer: {token: p}."""
    lp = model.logprobs(prefix)
    weights = {}
    for answer in answers:
        if answer.startswith(spelled) and answer != spelled:
            for t in _tokens_spelling_a_prefix(token_bytes, answer[len(spelled):]):
                if t not in weights:
                    weights[t] = float(np.exp(lp[t])) * completion(model, token_bytes, answers, prefix + (t,),
                                                                   spelled + token_bytes[t], memo)
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items() if w > 0}


def walk_figures(model: Model, guides: dict, token_bytes, answers: list[bytes], path: list[int], memo: dict) -> dict:
    """Along ``path`` (an answer's canonical tokens), then EOS: per mask, the mean total-variation distance to the
    conditioned distribution and the log-probability of the path; and the conditioned model's log-probability."""
    states = {mode: guide.initial_state for mode, guide in guides.items()}
    tv = {mode: [] for mode in guides}
    logprob = {mode: 0.0 for mode in guides}
    logprob["conditioned"] = 0.0
    prefix, spelled = (), b""
    for t in path:
        target = conditioned(model, token_bytes, answers, prefix, spelled, memo)
        lp = model.logprobs(prefix)
        for mode, guide in guides.items():
            allowed = np.flatnonzero(guide.allowed(states[mode])).tolist()
            p = np.exp(lp[allowed])
            q = dict(zip(allowed, (p / p.sum()).tolist()))
            tv[mode].append(0.5 * sum(abs(q.get(k, 0.0) - target.get(k, 0.0)) for k in set(q) | set(target)))
            logprob[mode] += math.log(q[t]) if q.get(t, 0.0) > 0 else -math.inf
            states[mode] = guide.advance(states[mode], t)
        logprob["conditioned"] += math.log(target[t]) if target.get(t, 0.0) > 0 else -math.inf
        prefix, spelled = prefix + (t,), spelled + token_bytes[t]
    for mode, guide in guides.items():  # EOS: after a whole answer the only choice here
        allowed = np.flatnonzero(guide.allowed(states[mode])).tolist()
        lp = model.logprobs(prefix)
        eos = [e for e in guide.eos_token_ids if e in allowed]
        mass = np.exp(lp[allowed]).sum()
        logprob[mode] += math.log(np.exp(lp[eos]).sum() / mass) if eos else -math.inf
    return {"tv_mean": {mode: float(np.mean(v)) for mode, v in tv.items()}, "logprob": logprob, "steps": len(path)}


_PREFIX_INDEX: dict = {}


def _tokens_spelling_a_prefix(token_bytes, text: bytes) -> list[int]:
    if not _PREFIX_INDEX:
        for t, b in enumerate(token_bytes):
            if b:
                _PREFIX_INDEX.setdefault(b, []).append(t)
    return [t for k in range(1, len(text) + 1) for t in _PREFIX_INDEX.get(text[:k], [])]


def main() -> None:
    started = time.perf_counter()
    lm = reference_model()
    runtime = reference_runtime("smollm2")
    canonical = compile_tokenizer(tokenizer_source("smollm2"))
    token_bytes = canonical.token_bytes
    rows = []
    for question, answers in QUESTIONS:
        prompt = runtime.encode(question, add_special_tokens=False).ids
        model = Model(lm, prompt)
        pattern = "|".join(re.escape(a) for a in answers)
        raw = {a: unconstrained(model, token_bytes, a.encode()) for a in answers}
        mode_results, guides = {}, {}
        for mode, canonical_only in (("any tokenization", False), ("canonical", True)):
            guide = compile_regex(pattern, canonical, canonical_only=canonical_only)
            guides[mode] = guide
            got = masked(model, guide, token_bytes)
            mode_results[mode] = {a: got.get(a.encode(), 0.0) for a in answers}
        raw_total = sum(raw.values())
        memo: dict = {}
        for a in answers:
            path = runtime.encode(a, add_special_tokens=False).ids
            figures = walk_figures(model, guides, token_bytes, [x.encode() for x in answers], path, memo)
            rows.append({
                "walk": figures,
                "question": question.split("\n")[0], "answer": a,
                "unconstrained_probability": raw[a],
                "unconstrained_share": raw[a] / raw_total,
                "any_tokenization_share": mode_results["any tokenization"][a],
                "canonical_share": mode_results["canonical"][a],
                "canonical_path": [runtime.id_to_token(t) for t in runtime.encode(a, add_special_tokens=False).ids],
            })
        print(f"{question.splitlines()[0]}  ({model.passes} forward passes)")
        print(f"  {'answer':12s} {'P unconstrained':>16s} {'share':>8s} {'any-tokenization mask':>22s} "
              f"{'canonical mask':>15s}")
        for r in rows[-len(answers):]:
            print(f"  {r['answer']!r:12s} {r['unconstrained_probability']:16.6g} {r['unconstrained_share']:8.4f} "
                  f"{r['any_tokenization_share']:22.4f} {r['canonical_share']:15.4f}")
    print("Along each answer's canonical tokens: mean total-variation distance between the masked next-token "
          "distribution and the model's own conditioned on the constraint; log-probability of the tokens (then EOS)")
    print(f"  {'answer':12s} {'TV any-tok':>10s} {'TV canonical':>12s} {'logp any-tok':>12s} {'logp canonical':>14s} "
          f"{'logp conditioned':>16s}")
    for r in rows:
        w = r["walk"]
        print(f"  {r['answer']!r:12s} {w['tv_mean']['any tokenization']:10.4f} {w['tv_mean']['canonical']:12.4f} "
              f"{w['logprob']['any tokenization']:12.3f} {w['logprob']['canonical']:14.3f} "
              f"{w['logprob']['conditioned']:16.3f}")
    out = Path(__file__).parent / "results" / "fidelity.json"
    out.write_text(json.dumps({"model": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)", "rows": rows,
                               "seconds": time.perf_counter() - started}, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
