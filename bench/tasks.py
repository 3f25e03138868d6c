"""What canonical masks are worth on real tasks, beside the unconstrained model and every peer (issue 37).

One process, one model (``--model``: SmolLM2-135M-Instruct, the reference model, or Qwen2.5-Coder-0.5B-Instruct,
whose Qwen2 tokenizer is another family: ``bpe.assets.bench_model``; CPU, float32), greedy, the same ChatML prompt
for every engine. Engines, each filling its own next-token bitmask with its own matcher (applied to
the logits with one kernel, ``product.apply_bitmask``):

- ``unconstrained``: the model alone; its text is parsed from the first ``{`` or ``[`` on (code fences too);
- ``canonmerge``: ``vegas.compile_schema`` guides, canonical tokenizations only, JSON layout;
- ``canonmerge-any``: the same guides with ``canonical_only=False`` (every tokenization: the peers' behaviour);
- ``llguidance`` 1.9.1 (``grammar_from_json_schema``), ``xgrammar`` 0.2.8 (``compile_json_schema``): canonmerge's
  layout (``", "``, ``": "``, no other whitespace) through their separator options; ``llguidance-default`` and
  ``xgrammar-default``: their own default layouts (whitespace left to the model);
- ``outlines-core`` 0.2.14 (``build_regex_from_schema``): its default layout (``[ ]?`` around separators).

A step where an engine allows exactly one token takes it without a forward pass (every engine), and llguidance
also takes its fast-forward tokens (``compute_ff_tokens``) without one, as in serving. Per engine: accuracy
(BFCL: BFCL's own AST checker; GSM-Symbolic: the answer's value), valid JSON, schema-valid (``jsonschema``), the
canonical share (token ids == the tokenizer's own encoding of the text), tokens, forward passes, answers cut by
the token limit, wall time per request (compile included).

Part 2, a fidelity figure that does not depend on greedy luck: per question, the reference answer (BFCL: each
parameter's first possible value; GSM: the template's worked solution and value), written in canonmerge's layout
and tokenized canonically, is walked under each engine's masks: the log-probability the masked, renormalised
model gives those tokens (``-inf`` where a mask forbids one), and the total-variation distance between the
masked next-token distribution and the model's own (unmasked) one, averaged over the walk. (Against the model's
distribution *conditioned on the constraint*, which needs the probability of completing every allowed token:
``bench/fidelity.py``, exactly, on questions with a few answers.)

Tasks (``bench/task_data.py``): BFCL's single-answer categories (bfcl-eval wheel: simple in Python, Java and
JavaScript, multiple, parallel, parallel-multiple, their live forms, irrelevance and relevance), GSM-Symbolic
(reasoning-gym wheel), the first ``--limit`` questions of each.

    nice -n 10 python bench/tasks.py [--limit 20] [--tasks simple_python,multiple,parallel,gsm,...]
                                     [--engines ...] [--max-tokens 160] [--out bench/results/tasks.json]
    python bench/tasks.py --table bench/results/tasks_bfcl.json bench/results/tasks_gsm.json

Needs the bench extra (``pip install -e ".[bench]"``, ``pip install --no-deps xgrammar==0.2.8``) and jsonschema.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import jsonschema
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import task_data  # noqa: E402  (bench/, on sys.path as the script's folder)

import vegas  # noqa: E402
from bpe import compile_tokenizer, load_tokenizer  # noqa: E402
from bpe.assets import BENCH_MODELS, bench_model  # noqa: E402
from bpe.loaders import to_runtime_tokenizer  # noqa: E402
from product import apply_bitmask  # noqa: E402

ENGINES = ("unconstrained", "canonmerge", "canonmerge-any", "llguidance", "llguidance-default", "xgrammar",
           "xgrammar-default", "outlines-core")
TASKS = task_data.BFCL_CATEGORIES + ("gsm",)
DEFAULT_TASKS = ("simple_python", "multiple", "parallel", "gsm")
SEPARATORS = (", ", ": ")  # canonmerge's JSON layout, asked of llguidance and xgrammar too

BFCL_SYSTEM = ("You are an expert in composing function calls. Given a question and a set of functions, call "
               "the function that answers it. Reply with only a JSON object {\"name\": <function name>, "
               "\"arguments\": {<parameter>: <value>, ...}}.\nThe functions:\n")
BFCL_PARALLEL = ("You are an expert in composing function calls. Given a question and a set of functions, make "
                 "every call the question asks for. Reply with only a JSON array of objects {\"name\": <function "
                 "name>, \"arguments\": {<parameter>: <value>, ...}}, one per call.\nThe functions:\n")
BFCL_RELEVANCE = ("You are an expert in composing function calls. Given a question and a set of functions, make the "
                  "calls the question asks for, if any of the functions fits it. Reply with only a JSON array of "
                  "objects {\"name\": <function name>, \"arguments\": {<parameter>: <value>, ...}}, one per call, "
                  "or [] if none of the functions applies.\nThe functions:\n")
GSM_SYSTEM = ("Solve the math problem. Reply with only a JSON object {\"reasoning\": <your step-by-step "
              "reasoning>, \"answer\": <the final answer, a number>}.")


def chat(system: str, user: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def requests(task: str, limit: int) -> list[dict]:
    """The task's first ``limit`` questions: id, prompt, schema, scorer, reference answer."""
    out = []
    if task == "gsm":
        for entry in task_data.gsm_questions(limit):
            out.append({"id": entry["id"], "prompt": chat(GSM_SYSTEM, entry["question"]), "schema": task_data.GSM_SCHEMA,
                        "check": lambda v, e=entry: task_data.gsm_check(e, v),
                        "reference": {"reasoning": entry["reasoning"], "answer": entry["answer"]}})
        return out
    for entry in task_data.bfcl_questions(task)[:limit]:
        turn = entry["question"][0]  # (every category taken has one turn; live ones may open with a system message)
        instructions = ("relevance" in task and BFCL_RELEVANCE or task_data.answers_many(task) and BFCL_PARALLEL
                        or BFCL_SYSTEM)
        system = "\n".join([m["content"] for m in turn if m["role"] == "system"]
                           + [instructions + json.dumps(task_data.model_functions(entry, task))])
        user = next(m["content"] for m in reversed(turn) if m["role"] == "user")
        out.append({"id": entry["id"], "prompt": chat(system, user), "schema": task_data.answer_schema(entry, task),
                    "check": lambda v, e=entry, t=task: task_data.bfcl_check(e, v, t),
                    "reference": task_data.bfcl_reference(entry, task)})
    return out


# ---- engines: compile a schema into a matcher; a matcher fills a bitmask, consumes tokens, may force some ------

class _Canonmerge:
    def __init__(self, canonical, canonical_only: bool, library: str):
        self.canonical, self.canonical_only, self.library = canonical, canonical_only, library

    def compile(self, schema):
        guide = vegas.compile_schema(schema, self.canonical, canonical_only=self.canonical_only,
                                     library_dir=self.library)
        return _CanonmergeMatcher(guide)


class _CanonmergeMatcher:
    def __init__(self, guide):
        self.guide, self.state = guide, guide.initial_state

    def forced(self) -> list[int]:
        return list(self.guide.forced_tokens(self.state))

    def fill(self, out) -> None:
        self.guide.fill_bitmask([self.state], out)

    def consume(self, t: int) -> None:
        self.state = self.guide.advance(self.state, t)



class _LLGuidance:
    def __init__(self, runtime, eos, vocab_size, own_layout: bool = False):
        import llguidance
        import llguidance.hf
        import llguidance.torch
        from transformers import PreTrainedTokenizerFast

        self.lib = llguidance
        hf = PreTrainedTokenizerFast(tokenizer_object=runtime, eos_token=runtime.id_to_token(eos))
        self.tokenizer = llguidance.hf.from_tokenizer(hf, n_vocab=vocab_size, eos_token=eos)
        self.own_layout = own_layout

    def compile(self, schema):
        defaults = None if self.own_layout else {"whitespace_flexible": False, "item_separator": SEPARATORS[0],
                                                 "key_separator": SEPARATORS[1]}
        grammar = self.lib.LLMatcher.grammar_from_json_schema(schema, defaults=defaults)
        matcher = self.lib.LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            raise RuntimeError(matcher.get_error())
        return _LLGuidanceMatcher(self.lib, matcher)


class _LLGuidanceMatcher:
    def __init__(self, lib, matcher):
        self.lib, self.m = lib, matcher

    def forced(self) -> list[int]:
        return list(self.m.compute_ff_tokens())

    def fill(self, out) -> None:
        self.lib.torch.fill_next_token_bitmask(self.m, out, 0)

    def consume(self, t: int) -> None:
        if not self.m.consume_token(t):
            raise RuntimeError(f"llguidance refused token {t}: {self.m.get_error()}")



class _XGrammar:
    def __init__(self, runtime, eos, vocab_size, own_layout: bool = False):
        import xgrammar
        from transformers import PreTrainedTokenizerFast

        self.lib = xgrammar
        hf = PreTrainedTokenizerFast(tokenizer_object=runtime, eos_token=runtime.id_to_token(eos))
        info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=vocab_size, stop_token_ids=[eos])
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.own_layout = own_layout

    def compile(self, schema):
        if self.own_layout:  # its defaults: any whitespace between tokens
            compiled = self.compiler.compile_json_schema(json.dumps(schema))
        else:
            compiled = self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=SEPARATORS)
        return _XGrammarMatcher(self.lib.GrammarMatcher(compiled))


class _XGrammarMatcher:
    def __init__(self, matcher):
        self.m = matcher

    def forced(self) -> list[int]:
        return []

    def fill(self, out) -> None:
        self.m.fill_next_token_bitmask(out)

    def consume(self, t: int) -> None:
        if not self.m.accept_token(t):
            raise RuntimeError(f"xgrammar refused token {t}")



class _OutlinesCore:
    def __init__(self, canonical, eos):
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        self.lib, self.build = outlines_core, build_regex_from_schema
        spellings: dict[bytes, list[int]] = {}
        for i, b in enumerate(canonical.token_bytes):
            if b is not None and i != eos:
                spellings.setdefault(b, []).append(i)
        self.vocabulary = outlines_core.Vocabulary(eos, spellings)

    def compile(self, schema):
        index = self.lib.Index(self.build(json.dumps(schema)), self.vocabulary)
        return _OutlinesMatcher(self.lib.Guide(index))


class _OutlinesMatcher:
    def __init__(self, guide):
        self.g = guide

    def forced(self) -> list[int]:
        return []

    def fill(self, out) -> None:
        self.g.write_mask_into(out.data_ptr(), out.numel(), out.element_size())

    def consume(self, t: int) -> None:
        self.g.advance(t, return_tokens=False)



def make_engine(name: str, canonical, runtime, library: str):
    eos, vocab = int(canonical.eos_token_ids[0]), canonical.vocab_size
    if name == "canonmerge":
        return _Canonmerge(canonical, True, library)
    if name == "canonmerge-any":
        return _Canonmerge(canonical, False, library)
    if name in ("llguidance", "llguidance-default"):
        return _LLGuidance(runtime, eos, vocab, own_layout=name.endswith("-default"))
    if name in ("xgrammar", "xgrammar-default"):
        return _XGrammar(runtime, eos, vocab, own_layout=name.endswith("-default"))
    if name == "outlines-core":
        return _OutlinesCore(canonical, eos)
    raise ValueError(name)


# ---- generation ---------------------------------------------------------------------------------------------

def _cache_keyword(model) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _popcount(words: torch.Tensor) -> int:
    return int(np.bitwise_count(words.numpy().view(np.uint32)).sum())


def _only_token(words: torch.Tensor) -> int:
    row = words.numpy().view(np.uint32)[0]
    w = int(np.flatnonzero(row)[0])
    return w * 32 + int(row[w]).bit_length() - 1


@torch.no_grad()
def prefill(model, prompt: list[int]):
    """The KV cache of the prompt but its last token (shared by every engine: each starts from a copy)."""
    keyword = _cache_keyword(model)
    return getattr(model(input_ids=torch.tensor([prompt[:-1]]), use_cache=True), keyword)


@torch.no_grad()
def generate(model, matcher, prompt: list[int], cache, eos: int, max_tokens: int, vocab_words: int) -> dict:
    """Greedy from ``cache`` (``prefill``'s, copied); ``matcher`` None: unconstrained. Steps with one allowed token
    (and an engine's forced tokens) are taken without a forward pass."""
    keyword = _cache_keyword(model)
    out, feed, past, passes, forced = [], [prompt[-1]], copy.deepcopy(cache), 0, 0
    bitmask = torch.zeros((1, vocab_words), dtype=torch.int32)
    finished = False
    while len(out) < max_tokens:
        if matcher is not None:
            chain = matcher.forced()[: max_tokens - len(out)]
            if chain:
                for t in chain:
                    matcher.consume(t)
                out += chain
                feed += chain
                forced += len(chain)
                continue
            matcher.fill(bitmask)
            if _popcount(bitmask) == 1:
                t = _only_token(bitmask)
                if t == eos:
                    finished = True
                    break
                matcher.consume(t)
                out.append(t)
                feed.append(t)
                forced += 1
                continue
        result = model(input_ids=torch.tensor([feed]), use_cache=True, **{keyword: past})
        passes += 1
        past = getattr(result, keyword)
        logits = result.logits[:, -1, :].float()
        if matcher is not None:
            logits = apply_bitmask(logits, bitmask)
        t = int(torch.argmax(logits, dim=-1).item())
        if t == eos:
            finished = True
            break
        if matcher is not None:
            matcher.consume(t)
        out.append(t)
        feed = [t]
    return {"ids": out, "passes": passes, "forced": forced, "finished": finished}


def parse(text: str):
    """The JSON value of an answer (the unconstrained model's from its first ``{`` or ``[`` on)."""
    try:
        return json.loads(text), True
    except ValueError:
        pass
    match = re.search(r"[\[{]", text)
    if match:
        try:
            return json.JSONDecoder().raw_decode(text[match.start():])[0], True
        except ValueError:
            pass
    return None, False


# ---- part 2: the reference answer's log-probability and the walk's total-variation distance ----------------

@torch.no_grad()
def reference_logprobs(model, prompt: list[int], cache, ids: list[int], vocab: int) -> np.ndarray:
    """The model's own next-token log-probabilities before each reference token and before EOS after them."""
    keyword = _cache_keyword(model)
    logits = model(input_ids=torch.tensor([[prompt[-1]] + ids]), use_cache=True,
                   **{keyword: copy.deepcopy(cache)}).logits[0].float()
    return torch.log_softmax(logits, dim=-1).numpy()[:, :vocab]


def reference_walk(matcher, logp: np.ndarray, ids: list[int], eos: int, vocab_words: int, vocab: int) -> dict:
    """Walk the reference tokens, then EOS, under ``matcher``'s masks (None: unmasked): the masked, renormalised
    model's log-probability of them, and the mean total-variation distance between the masked next-token
    distribution and the model's own along the walk (renormalising over the allowed set moves exactly the model's
    mass outside it: the distance is that mass)."""
    bitmask = torch.zeros((1, vocab_words), dtype=torch.int32)
    total, tvs, refused = 0.0, [], None
    for k, t in enumerate(ids + [eos]):
        lp = logp[k]
        if matcher is None:
            total += float(lp[t])
            tvs.append(0.0)
            continue
        matcher.fill(bitmask)
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:vocab].astype(bool)
        mass = float(np.exp(lp[bits]).sum()) if bits.any() else 0.0
        tvs.append(1.0 - mass)
        if not bits[t] or mass == 0.0:
            refused, total = k, -math.inf
            break
        total += float(lp[t]) - math.log(mass)
        if t != eos:
            matcher.consume(t)
    return {"logprob": total, "tv_mean": float(np.mean(tvs)), "steps": len(tvs), "refused_at": refused}


# ---- the run ------------------------------------------------------------------------------------------------

MODEL_NAMES = {"smollm2": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised, float32, CPU)",
               "qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, dequantised, float32, CPU)"}


def run(tasks: list[str], engines: list[str], limit: int, max_tokens: int, out: Path | None = None,
        model_name: str = "smollm2") -> dict:
    torch.set_num_threads(1)  # (several runs side by side on a shared machine)
    t0 = time.perf_counter()
    model, gguf = bench_model(model_name)
    runtime = to_runtime_tokenizer(load_tokenizer(gguf))  # the GGUF's own tokenizer, run by ``tokenizers``
    canonical = compile_tokenizer(gguf)
    eos, vocab = int(canonical.eos_token_ids[0]), canonical.vocab_size
    vocab_words = (vocab + 31) // 32
    print(f"model, tokenizer and automaton loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    library = tempfile.mkdtemp(prefix="canonmerge-tasks-")  # canonmerge's fragment library starts empty
    built = {}
    for name in engines:
        if name == "unconstrained":
            continue
        try:
            built[name] = make_engine(name, canonical, runtime, library)
        except ImportError as exc:
            print(f"{name}: not installed ({exc})", flush=True)
    rows = []
    queue = {task: requests(task, limit) for task in tasks}
    for i in range(limit):  # question i of every task, then i + 1: a run stopped early has every task
        for task in tasks:
            if i >= len(queue[task]):
                continue
            item = queue[task][i]
            prompt = runtime.encode(item["prompt"], add_special_tokens=False).ids
            cache = prefill(model, prompt)  # the prompt's cache, once per question: every engine starts from it
            ref_ids = ref_logp = None  # (a question without a reference answer has no part 2: task_data says which)
            if item["reference"] is not None:
                ref_text = vegas.format_instance(item["reference"], item["schema"])
                ref_ids = runtime.encode(ref_text, add_special_tokens=False).ids
                ref_logp = reference_logprobs(model, prompt, cache, ref_ids, vocab)
            for engine in engines:
                if engine != "unconstrained" and engine not in built:
                    continue
                row = {"task": task, "engine": engine, "id": item["id"]}
                start = time.perf_counter()
                matcher = None
                try:
                    if engine != "unconstrained":
                        matcher = built[engine].compile(item["schema"])
                    row["compile_s"] = time.perf_counter() - start
                    gen = generate(model, matcher, prompt, cache, eos, max_tokens, vocab_words)
                except Exception as exc:  # an engine refusing a schema is its outcome
                    row.update(error=f"{type(exc).__name__}: {str(exc)[:200]}", wall_s=time.perf_counter() - start)
                    rows.append(row)
                    print(f"{task} {engine} {item['id']}: {row['error']}", flush=True)
                    continue
                row["wall_s"] = time.perf_counter() - start
                text = runtime.decode(gen["ids"])
                value, valid_json = parse(text)
                row.update(text=text, tokens=len(gen["ids"]), passes=gen["passes"], forced=gen["forced"],
                           finished=gen["finished"], valid_json=valid_json,
                           canonical=runtime.encode(text, add_special_tokens=False).ids == gen["ids"])
                row["schema_valid"] = valid_json and jsonschema.Draft202012Validator(item["schema"]).is_valid(value)
                row["correct"], row["why"] = item["check"](value if valid_json else None)  # (no JSON: no call)
                try:  # part 2: the reference answer under this engine's masks (a fresh matcher)
                    if ref_ids is None:
                        raise LookupError("no reference answer")
                    ref_matcher = None if engine == "unconstrained" else built[engine].compile(item["schema"])
                    row["reference"] = reference_walk(ref_matcher, ref_logp, ref_ids, eos, vocab_words, vocab)
                except Exception as exc:
                    row["reference"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                rows.append(row)
                print(f"{task} {engine} {item['id']}: correct={row['correct']} tokens={row['tokens']} "
                      f"passes={row['passes']} {row['wall_s']:.2f}s {text[:100]!r}", flush=True)
            if out is not None:  # after every question: a run stopped early keeps what it measured
                out.write_text(json.dumps(_result(rows, limit, max_tokens, model_name), indent=1,
                                          ensure_ascii=False) + "\n")
    return _result(rows, limit, max_tokens, model_name)


def _result(rows: list[dict], limit: int, max_tokens: int, model_name: str) -> dict:
    return {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads()},
            "model": MODEL_NAMES[model_name], "limit": limit,
            "max_tokens": max_tokens, "rows": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    keys = sorted({(r["task"], r["engine"]) for r in rows}, key=lambda k: (TASKS.index(k[0]), ENGINES.index(k[1])))
    for task, engine in keys:
        mine = [r for r in rows if r["task"] == task and r["engine"] == engine]
        ran = [r for r in mine if "error" not in r]
        n = len(mine)
        refs = [r["reference"] for r in ran if "logprob" in r.get("reference", {})]
        finite = [x["logprob"] for x in refs if math.isfinite(x["logprob"])]
        out.append({
            "task": task, "engine": engine, "questions": n, "refused": n - len(ran),
            "accuracy": sum(r["correct"] for r in ran) / n if n else 0.0,
            "valid_json": sum(r["valid_json"] for r in ran) / n if n else 0.0,
            "schema_valid": sum(r["schema_valid"] for r in ran) / n if n else 0.0,
            "canonical": sum(r["canonical"] for r in ran) / max(1, len(ran)),
            "cut_by_limit": sum(not r["finished"] for r in ran),
            "tokens": float(np.mean([r["tokens"] for r in ran])) if ran else 0.0,
            "passes": float(np.mean([r["passes"] for r in ran])) if ran else 0.0,
            "wall_s": float(np.mean([r["wall_s"] for r in mine])) if mine else 0.0,
            "compile_s_p50": float(np.median([r["compile_s"] for r in mine if "compile_s" in r])) if mine else 0.0,
            "reference_logprob_mean": float(np.mean(finite)) if finite else None,
            "reference_refused": sum(not math.isfinite(x["logprob"]) for x in refs),
            "reference_tv_mean": float(np.mean([x["tv_mean"] for x in refs])) if refs else None,
        })
    return out


def table(summary: list[dict]) -> str:
    lines = ["| task | engine | accuracy | valid JSON | schema-valid | canonical | cut by limit | tokens | forward "
             "passes | wall s / request | compile p50 | ref. log-prob | ref. refused | TV to model |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summary:
        lp = "–" if s["reference_logprob_mean"] is None else f"{s['reference_logprob_mean']:.1f}"
        tv = "–" if s["reference_tv_mean"] is None else f"{s['reference_tv_mean']:.3f}"
        lines.append(f"| {s['task']} | {s['engine']} | {100 * s['accuracy']:.0f} % | {100 * s['valid_json']:.0f} % | "
                     f"{100 * s['schema_valid']:.0f} % | {100 * s['canonical']:.0f} % | {s['cut_by_limit']} | "
                     f"{s['tokens']:.1f} | {s['passes']:.1f} | {s['wall_s']:.2f} | "
                     f"{1000 * s['compile_s_p50']:.1f} ms | {lp} | {s['reference_refused']} | {tv} |")
    return "\n".join(lines)


def headline(rows: list[dict]) -> str:
    """Per engine, over every BFCL question run: the README's table."""
    lines = ["| engine | BFCL accuracy | schema-valid | canonical outputs | cut by limit | forward passes / call | "
             "wall s / call | compile p50 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for engine in ENGINES:
        mine = [r for r in rows if r["engine"] == engine and r["task"] != "gsm"]
        ran = [r for r in mine if "error" not in r]
        if not mine:
            continue
        n = len(mine)
        compile_ms = 1000 * float(np.median([r["compile_s"] for r in mine if "compile_s" in r]))
        lines.append(f"| {engine} | {sum(r['correct'] for r in ran)}/{n} | {sum(r['schema_valid'] for r in ran)}/{n} | "
                     f"{sum(r['canonical'] for r in ran)}/{len(ran)} | {sum(not r['finished'] for r in ran)} | "
                     f"{np.mean([r['passes'] for r in ran]):.1f} | {np.mean([r['wall_s'] for r in mine]):.1f} | "
                     f"{'–' if engine == 'unconstrained' else f'{compile_ms:.1f} ms'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help=f"any of {', '.join(TASKS)}")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--limit", type=int, default=20, help="questions per task (the first ones)")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--model", choices=BENCH_MODELS, default="smollm2",
                        help="the model (bpe.assets.BENCH_MODELS): SmolLM2-135M, or Qwen2.5-Coder-0.5B (Qwen2 tokenizer)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "tasks.json")
    parser.add_argument("--table", type=Path, nargs="+", help="print the table of saved results and exit")
    args = parser.parse_args()
    if args.table:
        results = [json.loads(path.read_text()) for path in args.table]
        print(table([s for r in results for s in r["summary"]]))
        print()
        print(headline([row for r in results for row in r["rows"]]))
        return
    tasks, engines = args.tasks.split(","), args.engines.split(",")
    for name in tasks:
        if name not in TASKS:
            parser.error(f"unknown task {name!r}")
    for name in engines:
        if name not in ENGINES:
            parser.error(f"unknown engine {name!r}")
    result = run(tasks, engines, args.limit, args.max_tokens, args.out, args.model)
    print(table(result["summary"]))
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
