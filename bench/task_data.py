"""The tasks of ``bench/tasks.py``, read from pinned package archives (``bpe.assets.bench_archive``), and how each is
scored. Not part of canonmerge's API: a bench helper the tests import (``bench.task_data``) to check the scoring.

- **BFCL**: every category of the ``bfcl-eval`` 2026.3.23 wheel whose questions have one answer
  (``BFCL_CATEGORIES``: simple in Python, Java and JavaScript, multiple, parallel, parallel-multiple, their ``live_``
  forms, irrelevance and relevance); the multi-turn, memory, web-search and format-sensitivity categories need an
  agent loop and are refused by name. Questions, function docs and possible answers from the wheel, scored by BFCL's
  own AST checker (``bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker``) imported from the wheel itself
  (Python imports from a zip): the only module replaced is ``bfcl_eval.constants.model_config``, BFCL's registry of
  hosted models (importing it imports every vendor's client), of which the checker reads one flag for the model
  scored (``underscore_to_dot``: False here, function names keep their dots). A model's answer is a JSON object
  ``{"name": ..., "arguments": {...}}`` (categories with several calls, and the relevance ones: a JSON array of
  them, ``[]`` for "no function applies"), turned into BFCL's ``[{name: arguments}]`` for the checker. As in BFCL,
  the model sees Java and JavaScript parameters as strings holding the language's literal (BFCL's
  ``_func_doc_language_specific_pre_processing``, re-implemented here: the wheel's ``bfcl_eval.utils`` writes to its
  own folder on import, which a zip does not allow) and the checker reads them with the original types;
  irrelevance is correct when the answer makes no call, relevance when it makes one (BFCL's relevance runner).
- **GSM-Symbolic** (a JSON answer ``{"reasoning": ..., "answer": ...}``, JSONSchemaBench's GSM8K task's form): the
  100 GSM8K test templates of GSM-Symbolic as ``reasoning-gym`` 0.1.25 ships them (generators, imported from the
  wheel), question i drawn from template i with ``Random(i)``; correct when ``answer`` equals the reference value.
"""

from __future__ import annotations

import copy
import json
import sys
import types
import zipfile
from random import Random

from bpe.assets import bench_archive

BFCL_CATEGORIES = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
                   "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
                   "irrelevance", "live_irrelevance", "live_relevance")
_AGENTIC = ("multi_turn", "memory", "web_search", "format_sensitivity")  # not one answer per question
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
    ``ground_truth`` (the possible answers; None for the relevance categories, which have none)."""
    if category not in BFCL_CATEGORIES:
        why = " (it needs an agent loop, not one answer)" if any(a in category for a in _AGENTIC) else ""
        raise ValueError(f"BFCL category {category!r} is not one of {BFCL_CATEGORIES}{why}")
    with zipfile.ZipFile(bench_archive("bfcl-eval")) as archive:
        questions = _jsonl(archive, f"bfcl_eval/data/BFCL_v4_{category}.json")
        if _relevance(category):
            return [dict(q, ground_truth=None) for q in questions]
        answers = {a["id"]: a["ground_truth"] for a in _jsonl(archive, f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")}
    return [dict(q, ground_truth=answers[q["id"]]) for q in questions]


def _relevance(category: str) -> bool:
    return "relevance" in category  # irrelevance too


def answers_many(category: str) -> bool:
    """Whether the category's answer is a JSON array of calls (several calls, or possibly none)."""
    return "parallel" in category or _relevance(category)


def _language(category: str) -> str:
    """BFCL's language of a category (its ``is_java``/``is_js``): the checker reads the values in it."""
    return "JAVASCRIPT" if "javascript" in category else "JAVA" if "java" in category else "PYTHON"


def model_functions(entry: dict, category: str) -> list[dict]:
    """The function docs the model is shown: BFCL's, with its language hints (Java and JavaScript parameters are
    strings holding the language's literal; BFCL's ``_func_doc_language_specific_pre_processing``)."""
    functions = copy.deepcopy(entry["function"])
    language = _language(category)
    if language == "PYTHON":
        return functions
    name = {"JAVA": "Java", "JAVASCRIPT": "JavaScript"}[language]
    for function in functions:
        function["description"] += (" Note that the provided function is in Java 8 SDK syntax." if language == "JAVA"
                                    else " Note that the provided function is in JavaScript syntax.")
        for param in function["parameters"]["properties"].values():
            kind = param.get("type", "")
            param["description"] = param.get("description", "") + (
                f" This parameter can be of any type of {name} object in string representation." if kind == "any"
                else f" This is {name} {kind} type parameter in string representation.")
            if kind in ("ArrayList", "Array", "array") and "items" in param:
                param["description"] += (f" The list elements are of type {param['items'].get('type')}; they are not "
                                         "in string representation.")
                del param["items"]
            if language == "JAVASCRIPT" and kind == "dict" and "properties" in param:
                param["description"] += (" The dictionary entries have the following schema; they are not in string "
                                         f"representation. {json.dumps(param['properties'])}")
                del param["properties"]
            param["type"] = "string"
    return functions


def _json_schema(node: dict, types_: dict) -> dict:
    """A BFCL parameter description as JSON Schema (BFCL's own type mapping: ``dict`` -> object, ``float`` ->
    number, ``tuple`` -> array, ``any`` and unknown types -> string); descriptions and defaults dropped, objects
    closed."""
    out: dict = {}
    kind = node.get("type")
    if kind is not None:
        out["type"] = types_.get(kind, "string")  # (BFCL's ``_cast_to_openai_type``: an unknown type is a string)
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
    """What a model answers to a BFCL entry: one call of one of its functions; an array of them where the category
    makes several calls (non-empty) or asks whether any applies (``[]``: none)."""
    calls = [call_schema(f) for f in model_functions(entry, category)]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if not calls:  # (live_irrelevance: a question without functions; the answer can only be [])
        return {"type": "array", "maxItems": 0}
    if answers_many(category):
        return {"type": "array", "items": one, "minItems": 0 if _relevance(category) else 1}
    return one


def to_bfcl_output(value, category: str) -> list[dict] | None:
    """A parsed answer as BFCL's model output ``[{name: arguments}]``; None when it has not the answer's shape."""
    calls = value if answers_many(category) else [value]
    if not isinstance(calls, list) or not (calls or _relevance(category)):
        return None
    out = []
    for call in calls:
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)):
            return None
        out.append({call["name"]: call["arguments"]})
    return out


def bfcl_check(entry: dict, value, category: str) -> tuple[bool, str]:
    """BFCL's verdict on a parsed answer: (correct, BFCL's error type or the shape problem). Irrelevance: correct
    when no call is made; relevance: when one is (BFCL's relevance runner); the others: BFCL's AST checker."""
    output = to_bfcl_output(value, category)
    if _relevance(category):
        called = bool(output)
        if "irrelevance" in category:
            return not called, "" if not called else "irrelevance_error:decoder_success"
        return called, "" if called else "relevance_error:decoder_failed"
    if output is None:
        return False, "not a call (or list of calls)"
    ast_checker, language, _ = _bfcl()
    try:
        result = ast_checker(entry["function"], output, entry["ground_truth"], getattr(language, _language(category)),
                             category, MODEL_NAME)
    except Exception as exc:  # the checker indexes what it expects; a malformed answer can raise
        return False, f"checker error: {type(exc).__name__}"
    return bool(result["valid"]), result.get("error_type", "")


def bfcl_reference(entry: dict, category: str):
    """A correct answer from the possible answers: each parameter's first possible value (optional parameters whose
    first possibility is "absent" left out), in the answer's JSON form; irrelevance: ``[]``. None where there is
    none to take: relevance (any call is right, BFCL lists none), and the few entries whose first possibilities
    fail BFCL's own checker or the answer schema (live_multiple: 21 of 1,053, a value outside its enum or a required
    parameter listed as absent; simple_java: 11 of 100, arrays whose literals BFCL's Java parser reads otherwise)."""
    if _relevance(category):
        return [] if "irrelevance" in category else None
    calls = [{"name": name, "arguments": _first(params)} for call in entry["ground_truth"] for name, params in call.items()]
    language = _language(category)
    if language != "PYTHON":  # the values as the model writes them: the language's literals, in strings
        types_of = {f["name"]: f["parameters"]["properties"] for f in entry["function"]}
        for call in calls:
            params = types_of.get(call["name"], {})
            call["arguments"] = {k: _literal(v, params.get(k, {}), language) for k, v in call["arguments"].items()}
    answer = calls if answers_many(category) else calls[0]
    if not bfcl_check(entry, answer, category)[0]:
        return None
    import jsonschema  # (a bench dependency, not canonmerge's)

    return answer if jsonschema.Draft202012Validator(answer_schema(entry, category)).is_valid(answer) else None


def _literal(value, doc: dict, language: str) -> str:
    """A Java or JavaScript literal of a value (``doc``: its parameter's description), the string a model writes
    for it (what BFCL's type converters read; a Java ``long`` ends in ``L``)."""
    kind, item_kind = doc.get("type", "any"), doc.get("items", {}).get("type")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        items = ", ".join(_element(v, language, item_kind) for v in value)
        if language == "JAVA":
            return f"new ArrayList<>(Arrays.asList({items}))" if kind == "ArrayList" else f"new Object[]{{{items}}}"
        return f"[{items}]"
    if isinstance(value, dict):
        if language == "JAVA":
            puts = " ".join(f"put({json.dumps(k)}, {_element(v, language, None)});" for k, v in value.items())
            return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
        return "{" + ", ".join(f"{k}: {_element(v, language, None)}" for k, v in value.items()) + "}"
    return _element(value, language, kind)


def _element(value, language: str, kind: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, dict)):
        return _literal(value, {"type": "Array"}, language)
    return f"{value}L" if language == "JAVA" and kind == "long" and isinstance(value, int) else repr(value)


def _first(value):
    """A value as the possible answers hold it, each possibility list replaced by its first possibility: a dict's
    values are possibility lists (a first possibility "" means the key is absent), a list's items are values."""
    if isinstance(value, dict):
        return {k: _first(v[0]) if isinstance(v, list) else v for k, v in value.items()
                if not (isinstance(v, list) and (not v or v[0] == ""))}
    if isinstance(value, list):
        return [_first(item) for item in value]
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
