"""The tasks of ``bench/tasks.py``, read from pinned package archives (``bpe.assets.bench_archive``), and how each is
scored. Not part of canonmerge's API: a bench helper the tests import (``bench.task_data``) to check the scoring.

- **BFCL** (``simple_python``, ``multiple``, ``parallel``): questions, function docs and possible answers from the
  ``bfcl-eval`` 2026.3.23 wheel, scored by BFCL's own AST checker
  (``bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker``), imported from the wheel itself (Python imports
  from a zip): the only module replaced is ``bfcl_eval.constants.model_config``, BFCL's registry of hosted models
  (importing it imports every vendor's client), of which the checker reads one flag for the model scored
  (``underscore_to_dot``: False here, function names keep their dots). A model's answer is a JSON object
  ``{"name": ..., "arguments": {...}}`` (``parallel``: a JSON array of them), turned into BFCL's
  ``[{name: arguments}]`` for the checker.
- **GSM-Symbolic** (a JSON answer ``{"reasoning": ..., "answer": ...}``, JSONSchemaBench's GSM8K task's form): the
  100 GSM8K test templates of GSM-Symbolic as ``reasoning-gym`` 0.1.25 ships them (generators, imported from the
  wheel), question i drawn from template i with ``Random(i)``; correct when ``answer`` equals the reference value.
"""

from __future__ import annotations

import json
import sys
import types
import zipfile
from random import Random

from bpe.assets import bench_archive

BFCL_CATEGORIES = ("simple_python", "multiple", "parallel")
MODEL_NAME = "canonmerge-bench"  # the model name the AST checker is told (its registry knows only this one here)


class _ModelConfig:
    underscore_to_dot = False  # function names keep their dots (the JSON answer can hold them)


def _bfcl():
    """BFCL's checker modules, imported from the pinned wheel."""
    wheel = str(bench_archive("bfcl-eval"))
    if wheel not in sys.path:
        sys.path.append(wheel)
    if "bfcl_eval.constants.model_config" not in sys.modules:
        registry = types.ModuleType("bfcl_eval.constants.model_config")
        registry.MODEL_CONFIG_MAPPING = {MODEL_NAME: _ModelConfig()}
        sys.modules["bfcl_eval.constants.model_config"] = registry
    from bfcl_eval.constants.enums import Language  # (from the wheel, put on sys.path above)
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker, Language, GORILLA_TO_OPENAPI


def _jsonl(archive: zipfile.ZipFile, member: str) -> list[dict]:
    return [json.loads(line) for line in archive.read(member).decode().splitlines() if line.strip()]


def bfcl_questions(category: str) -> list[dict]:
    """The category's entries in the wheel's order: ``id``, ``question`` (chat turns), ``function`` (docs) and
    ``ground_truth`` (the possible answers)."""
    if category not in BFCL_CATEGORIES:
        raise ValueError(f"category must be one of {BFCL_CATEGORIES}, not {category!r}")
    with zipfile.ZipFile(bench_archive("bfcl-eval")) as archive:
        questions = _jsonl(archive, f"bfcl_eval/data/BFCL_v4_{category}.json")
        answers = {a["id"]: a["ground_truth"] for a in _jsonl(archive, f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")}
    return [dict(q, ground_truth=answers[q["id"]]) for q in questions]


def _json_schema(node: dict, types_: dict) -> dict:
    """A BFCL parameter description as JSON Schema (BFCL's own type mapping: ``dict`` -> object, ``float`` ->
    number, ``tuple`` -> array, ``any`` -> string); descriptions and defaults dropped, objects closed."""
    out: dict = {}
    kind = node.get("type")
    if kind is not None:
        out["type"] = types_.get(kind, kind)
    if "enum" in node:
        out["enum"] = node["enum"]
    if "properties" in node:
        out["properties"] = {k: _json_schema(v, types_) for k, v in node["properties"].items()}
        out["required"] = [r for r in node.get("required", []) if r in node["properties"]]
        out["additionalProperties"] = False
    if "items" in node and isinstance(node["items"], dict):
        out["items"] = _json_schema(node["items"], types_)
    return out


def call_schema(function: dict) -> dict:
    """The JSON Schema of one call of ``function``: ``{"name": its name, "arguments": {...}}``."""
    _, _, types_ = _bfcl()
    arguments = _json_schema(dict(function["parameters"], type="dict"), types_)
    return {"type": "object", "properties": {"name": {"const": function["name"]}, "arguments": arguments},
            "required": ["name", "arguments"], "additionalProperties": False}


def answer_schema(entry: dict, category: str) -> dict:
    """What a model answers to a BFCL entry: one call of one of its functions (``parallel``: a non-empty array)."""
    calls = [call_schema(f) for f in entry["function"]]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if category == "parallel":
        return {"type": "array", "items": one, "minItems": 1}
    return one


def to_bfcl_output(value, category: str) -> list[dict] | None:
    """A parsed answer as BFCL's model output ``[{name: arguments}]``; None when it has not the answer's shape."""
    calls = value if category == "parallel" else [value]
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for call in calls:
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)):
            return None
        out.append({call["name"]: call["arguments"]})
    return out


def bfcl_check(entry: dict, value, category: str) -> tuple[bool, str]:
    """BFCL's AST checker on a parsed answer: (correct, BFCL's error type or the shape problem)."""
    output = to_bfcl_output(value, category)
    if output is None:
        return False, "not a call (or list of calls)"
    ast_checker, language, _ = _bfcl()
    try:
        result = ast_checker(entry["function"], output, entry["ground_truth"], language.PYTHON, category, MODEL_NAME)
    except Exception as exc:  # the checker indexes what it expects; a malformed answer can raise
        return False, f"checker error: {type(exc).__name__}"
    return bool(result["valid"]), result.get("error_type", "")


def bfcl_reference(entry: dict, category: str):
    """A correct answer from the possible answers: each parameter's first possible value (optional parameters whose
    first possibility is "absent" left out), in the answer's JSON form."""
    calls = []
    for call in entry["ground_truth"]:
        (name, params), = call.items()
        arguments = {}
        for param, possible in params.items():
            if possible and possible[0] != "":
                arguments[param] = _first(possible[0])
        calls.append({"name": name, "arguments": arguments})
    return calls if category == "parallel" else calls[0]


def _first(value):
    """A possible value with the possibilities nested in it (a dict parameter's keys) taken first too."""
    if isinstance(value, dict):
        return {k: _first(v[0]) if isinstance(v, list) else v for k, v in value.items()
                if not (isinstance(v, list) and (not v or v[0] == ""))}
    return value


# ---- GSM-Symbolic ------------------------------------------------------------------------------------------

GSM_SCHEMA = {"type": "object", "properties": {"reasoning": {"type": "string"}, "answer": {"type": "number"}},
              "required": ["reasoning", "answer"], "additionalProperties": False}


def _gsm_generators() -> dict:
    wheel = str(bench_archive("reasoning-gym"))
    if "reasoning_gym" not in sys.modules:  # the package's __init__ imports every data set: only its utils
        package = types.ModuleType("reasoning_gym")
        package.__path__ = [f"{wheel}/reasoning_gym"]
        sys.modules["reasoning_gym"] = package
        for name in ("reasoning_gym.arithmetic", "reasoning_gym.arithmetic.gsm_symbolic"):
            module = types.ModuleType(name)
            module.__path__ = [f"{wheel}/{name.replace('.', '/')}"]
            sys.modules[name] = module
    import importlib

    found = {}
    for part in ("generators_00_49", "generators_50_99"):
        module = importlib.import_module(f"reasoning_gym.arithmetic.gsm_symbolic.{part}")
        found.update({int(n[len("generate_"):]): getattr(module, n) for n in dir(module) if n.startswith("generate_")})
    return found


def gsm_questions(count: int = 100) -> list[dict]:
    """``count`` GSM-Symbolic questions: template i, ``Random(i)``, difficulty 1: ``question``, ``answer`` (the
    value), ``reasoning`` (the template's worked solution, without its ``####`` line)."""
    generators = _gsm_generators()
    out = []
    for i in range(count):
        example = generators[i % len(generators)](Random(i), 1.0)
        cot = example["metadata"]["answer_cot"].split("####")[0].strip()
        out.append({"id": f"gsm_symbolic_{i}", "question": example["question"],
                    "answer": float(example["metadata"]["answer_value"]), "reasoning": cot})
    return out


def gsm_check(entry: dict, value) -> tuple[bool, str]:
    if not isinstance(value, dict) or "answer" not in value:
        return False, "no answer"
    answer = value["answer"]
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return False, "answer not a number"
    return abs(float(answer) - entry["answer"]) < 1e-6, ""
