"""The scoring ``bench/tasks.py`` uses (``bench/task_data.py``): BFCL's own AST checker from the pinned bfcl-eval
wheel on questions with known answers, the answer schemas the engines compile, and GSM-Symbolic's answers."""

import json
import re

import jsonschema
import pytest

from bench import task_data
from vegas import format_instance, schema_regex


def _entry(category: str, qid: str) -> dict:
    return next(e for e in task_data.bfcl_questions(category) if e["id"] == qid)


def test_bfcl_simple_answers_are_scored_by_the_ast_checker():
    entry = _entry("simple_python", "simple_python_0")  # calculate_triangle_area(base=10, height=5, unit?)
    check = lambda value: task_data.bfcl_check(entry, value, "simple_python")[0]  # noqa: E731
    call = {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}
    assert check(call)
    assert check({**call, "arguments": {"base": 10, "height": 5, "unit": "units"}})
    assert not check({**call, "arguments": {"base": 11, "height": 5}})  # a wrong value
    assert not check({**call, "arguments": {"base": 10}})  # a required parameter missing
    assert not check({**call, "arguments": {"base": 10, "height": 5, "color": "red"}})  # an unknown one
    assert not check({**call, "arguments": {"base": 10.0, "height": 5}})  # BFCL: an integer must be an int
    assert not check({**call, "name": "triangle_area"})
    assert not check([call])  # not the answer's shape
    assert task_data.bfcl_check(entry, task_data.bfcl_reference(entry, "simple_python"), "simple_python")[0]


def test_bfcl_multiple_and_parallel_answers():
    entry = _entry("multiple", "multiple_0")
    reference = task_data.bfcl_reference(entry, "multiple")
    assert task_data.bfcl_check(entry, reference, "multiple")[0]
    other = next(f["name"] for f in entry["function"] if f["name"] != reference["name"])
    assert not task_data.bfcl_check(entry, {**reference, "name": other}, "multiple")[0]

    entry = _entry("parallel", "parallel_0")  # spotify.play for two artists
    reference = task_data.bfcl_reference(entry, "parallel")
    assert len(reference) == 2 and task_data.bfcl_check(entry, reference, "parallel")[0]
    assert task_data.bfcl_check(entry, reference[::-1], "parallel")[0]  # BFCL: any order
    assert not task_data.bfcl_check(entry, reference[:1], "parallel")[0]
    assert not task_data.bfcl_check(entry, reference[0], "parallel")[0]

    entry = _entry("parallel_multiple", "parallel_multiple_0")  # two different functions, one call each
    reference = task_data.bfcl_reference(entry, "parallel_multiple")
    assert [c["name"] for c in reference] == ["math_toolkit.sum_of_multiples", "math_toolkit.product_of_primes"]
    assert task_data.bfcl_check(entry, reference[::-1], "parallel_multiple")[0]
    assert not task_data.bfcl_check(entry, reference[:1], "parallel_multiple")[0]


def test_java_and_javascript_values_are_the_languages_literals_in_strings():
    """As in BFCL: the model sees every Java/JavaScript parameter as a string, the checker reads the literal."""
    entry = _entry("simple_java", "simple_java_6")  # refreshData(refreshMetadata, append, keepState: boolean)
    shown = task_data.model_functions(entry, "simple_java")[0]["parameters"]["properties"]
    assert {p["type"] for p in shown.values()} == {"string"} and "Java boolean" in shown["append"]["description"]
    assert entry["function"][0]["parameters"]["properties"]["append"]["type"] == "boolean"  # the entry is unchanged
    call = {"name": "SpreadsheetPresentation.refreshData",
            "arguments": {"refreshMetadata": "true", "append": "true", "keepState": "true"}}
    check = lambda value: task_data.bfcl_check(entry, value, "simple_java")[0]  # noqa: E731
    assert check(call) and task_data.bfcl_reference(entry, "simple_java") == call
    assert not check({**call, "arguments": {**call["arguments"], "append": "false"}})
    assert not check({**call, "arguments": {**call["arguments"], "append": True}})  # not a string: BFCL's type error

    entry = _entry("simple_javascript", "simple_javascript_2")  # an array parameter, written as a JS literal
    reference = task_data.bfcl_reference(entry, "simple_javascript")
    assert reference["arguments"]["status"] == '["completed", "failed"]'
    assert task_data.bfcl_check(entry, reference, "simple_javascript")[0]
    wrong = {**reference, "arguments": {**reference["arguments"], "status": '["completed"]'}}
    assert not task_data.bfcl_check(entry, wrong, "simple_javascript")[0]


def test_relevance_categories_score_whether_a_call_is_made():
    entry = task_data.bfcl_questions("irrelevance")[0]
    call = {"name": entry["function"][0]["name"], "arguments": {}}
    assert task_data.bfcl_check(entry, [], "irrelevance")[0]
    assert task_data.bfcl_check(entry, None, "irrelevance")[0]  # no JSON at all: no call either
    assert not task_data.bfcl_check(entry, [call], "irrelevance")[0]
    assert task_data.bfcl_reference(entry, "irrelevance") == []
    assert jsonschema.Draft202012Validator(task_data.answer_schema(entry, "irrelevance")).is_valid([])

    entry = task_data.bfcl_questions("live_relevance")[0]
    call = {"name": entry["function"][0]["name"], "arguments": {}}
    assert task_data.bfcl_check(entry, [call], "live_relevance")[0]
    assert not task_data.bfcl_check(entry, [], "live_relevance")[0]
    assert task_data.bfcl_reference(entry, "live_relevance") is None  # BFCL lists no answer

    entry = _entry("live_irrelevance", "live_irrelevance_120-9-0")  # a question without functions
    assert entry["function"] == [] and task_data.answer_schema(entry, "live_irrelevance") == {"type": "array", "maxItems": 0}


def test_agentic_categories_are_refused_by_name():
    for category in ("multi_turn_base", "memory", "web_search", "format_sensitivity"):
        with pytest.raises(ValueError, match="agent loop"):
            task_data.bfcl_questions(category)
    with pytest.raises(ValueError, match="not one of"):
        task_data.bfcl_questions("simple_cobol")


def test_reference_answers_fit_the_answer_schemas():
    """Every engine compiles ``answer_schema``: a correct answer validates and canonmerge's layout accepts its text."""
    for category in task_data.BFCL_CATEGORIES:
        missing = 0  # (BFCL's data: a few first possibilities fail its own checker)
        for entry in task_data.bfcl_questions(category)[:10]:  # (multiple_8: a dict parameter)
            schema = task_data.answer_schema(entry, category)
            jsonschema.Draft202012Validator.check_schema(schema)
            reference = task_data.bfcl_reference(entry, category)
            if reference is None:
                missing += 1
                assert category == "live_relevance" or missing <= 2, entry["id"]
                continue
            assert task_data.bfcl_check(entry, reference, category)[0], entry["id"]
            assert jsonschema.Draft202012Validator(schema).is_valid(reference), (entry["id"], reference)
            text = format_instance(reference, schema)
            assert json.loads(text) == reference
            assert re.fullmatch(schema_regex(schema), text), (entry["id"], text)


def test_gsm_symbolic_questions_and_answers():
    questions = task_data.gsm_questions(3)
    assert [q["id"] for q in questions] == ["gsm_symbolic_0", "gsm_symbolic_1", "gsm_symbolic_2"]
    assert questions == task_data.gsm_questions(3)  # deterministic
    first = questions[0]
    assert "peel" in first["question"] and first["answer"] == 220.0 and "220" in first["reasoning"]
    assert task_data.gsm_check(first, {"reasoning": "", "answer": 220})[0]
    assert task_data.gsm_check(first, {"reasoning": "", "answer": 220.0})[0]
    assert not task_data.gsm_check(first, {"reasoning": "", "answer": 221})[0]
    assert not task_data.gsm_check(first, {"reasoning": "", "answer": "220"})[0]
    assert not task_data.gsm_check(first, [220])[0]
