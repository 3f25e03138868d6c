"""Compile budgets (``automata.budget``): a compile past its time or memory budget, or cancelled from another
thread, stops with its typed error within twice the budget, keeps nothing half-built, and the same constraint then
compiles exactly with a larger budget. The constraints here take seconds without a budget on GPT-2 (measured:
the regex ~3-6 s, the schemas ~5 s)."""

import threading
import time

import pytest

import vegas
from automata import CanonmergeError
from automata.budget import checkpoint, kernel_compile_seconds
from product import (
    CompileBudget,
    CompileBudgetError,
    CompileCancelledError,
    CompileMemoryError,
    CompileTimeoutError,
    compile_regex,
)
from tests.support import automaton_of, runtime_of

SLOW_REGEX = "(?:[a-z]{1,30}@){100}"  # ~3,100 product nodes, hundreds of MB of token transitions
# 1.1 M characters, the size of a large schema's whole YAML regex: reading it and rewriting its counted loops run
# before any automaton is built (unchecked, that took 4.4 s past a 1 s budget)
HUGE_REGEX = "(?:" + "|".join(f'k{i}: "[^"\\n]{{0,40}}"' for i in range(50_000)) + ")"


def _slow_schema(offset: int) -> dict:
    """16 string properties, each a pattern of bounded repetitions: 16 distinct fragments, ~5 s in all. ``offset``
    makes the patterns differ from test to test (compiled fragments are shared within a process)."""
    names = [f"f{i}" for i in range(16)]
    return {"type": "object", "required": names, "additionalProperties": False,
            "properties": {name: {"type": "string", "pattern": f"^(?:[a-z]{{1,{30 + offset + i}}}@){{{12 + i}}}$"}
                           for i, name in enumerate(names)}}


@pytest.fixture(scope="module")
def gpt2():
    automaton = automaton_of("gpt2")
    # the first compile in a process loads the compiled kernels (~1 s, unchecked): done here, not in a timed test
    compile_regex("(?:[a-z]{1,30}@){8}", automaton)  # (through the token walk the slow regex takes)
    vegas.compile_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]{1,20}$"}}},
                         automaton, library_dir=False)
    return automaton


def _timed(compile_once) -> tuple[BaseException | None, float]:
    """The compile's error (None if it finished) and its own seconds: the wall time less numba compiling or loading
    a kernel the process had not used yet (once per process, not counted by budgets)."""
    start, kernels = time.monotonic(), kernel_compile_seconds.seconds()
    try:
        compile_once()
        error = None
    except CompileBudgetError as exc:
        error = exc
    return error, time.monotonic() - start - (kernel_compile_seconds.seconds() - kernels)


@pytest.mark.parametrize("what", ["regex", "huge regex", "schema"])
def test_a_compile_past_its_time_budget_raises_within_twice_the_budget(gpt2, what):
    budget = CompileBudget(seconds=1.0)  # (compiled steps that cannot check run up to ~0.3 s)
    if what != "schema":
        error, elapsed = _timed(lambda: compile_regex(SLOW_REGEX if what == "regex" else HUGE_REGEX, gpt2,
                                                      budget=budget))
    else:
        error, elapsed = _timed(lambda: vegas.compile_schema(_slow_schema(0), gpt2, library_dir=False, budget=budget))
    assert isinstance(error, CompileTimeoutError) and isinstance(error, CanonmergeError), error
    assert error.reason == "time" and "seconds=1.0" in str(error)
    assert elapsed < 2 * budget.seconds, elapsed


def test_cancelling_from_another_thread_stops_a_running_compile(gpt2):
    budget = CompileBudget(seconds=None, memory_bytes=None)
    outcome = {}

    def run():
        outcome["error"], outcome["elapsed"] = _timed(lambda: compile_regex(SLOW_REGEX, gpt2, budget=budget))

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.4)
    cancelled_at = time.monotonic()
    budget.cancel()
    thread.join(timeout=30)
    stopped_after = time.monotonic() - cancelled_at
    assert isinstance(outcome["error"], CompileCancelledError), outcome
    # measured: 3-50 ms, up to ~0.25 s at a long compiled step on a quiet machine, 0.7 s with the 2-core CI machine
    # loaded 3x by other work
    assert stopped_after < 1.0, stopped_after
    # a cancelled budget stays cancelled: a compile started under it stops at once
    error, elapsed = _timed(lambda: compile_regex("[a-z]+", gpt2, budget=budget))
    assert isinstance(error, CompileCancelledError) and elapsed < 0.05


def test_a_compile_past_its_memory_budget_raises_the_memory_error(gpt2):
    budget = CompileBudget(seconds=None, memory_bytes=16 << 20)  # the slow regex's tables take hundreds of MB
    # (a regex no other test compiles: what an earlier compile of the same regex left cached would not grow)
    error, elapsed = _timed(lambda: compile_regex(SLOW_REGEX.replace("30", "29"), gpt2, budget=budget))
    assert isinstance(error, CompileMemoryError) and isinstance(error, MemoryError), error
    assert error.reason == "memory" and "memory_bytes=16777216" in str(error)


def test_an_interrupted_schema_compiles_again_exactly_with_a_larger_budget(gpt2, tmp_path):
    schema = _slow_schema(20)
    error, _ = _timed(lambda: vegas.compile_schema(schema, gpt2, library_dir=tmp_path, budget=CompileBudget(0.3)))
    assert isinstance(error, CompileTimeoutError)
    guide = vegas.compile_schema(schema, gpt2, library_dir=tmp_path, budget=CompileBudget(None, None))
    runtime = runtime_of("gpt2")
    valid = vegas.format_instance({f"f{i}": "ab@" * (12 + i) for i in range(16)}, schema)
    assert guide.accepts(runtime.encode(valid, add_special_tokens=False).ids)
    invalid = valid.replace(f'"{"ab@" * 15}"', f'"{"ab@" * 14}"')  # f3 one repetition short
    assert invalid != valid and not guide.accepts(runtime.encode(invalid, add_special_tokens=False).ids)
    # the fragments on disk (the interrupted compile's and the second's) load into the same guide, whole
    again = vegas.compile_schema(schema, automaton_of("gpt2"), library_dir=tmp_path)
    assert again.accepts(runtime.encode(valid, add_special_tokens=False).ids)


def test_budgets_are_checked_arguments_and_nest(gpt2):
    with pytest.raises(ValueError):
        CompileBudget(seconds=0)
    with pytest.raises(ValueError):
        CompileBudget(memory_bytes=-1)
    checkpoint()  # outside a compile: nothing to check
    default = CompileBudget()
    assert default.seconds == 30.0 and default.memory_bytes == 4 << 30
    # a compile inside another runs under the enclosing budget too: the outer one's cancel stops the inner
    outer = CompileBudget(seconds=None)
    with outer.running():
        outer.cancel()
        with pytest.raises(CompileCancelledError):
            compile_regex("[a-z]{1,3}", gpt2, budget=CompileBudget(seconds=60))
    # unbudgeted compiles are unchanged
    assert compile_regex("[a-z]{1,3}", gpt2, budget=CompileBudget(None, None)).accepts(
        runtime_of("gpt2").encode("abc", add_special_tokens=False).ids)


def test_numba_compiling_a_kernel_is_not_counted_against_the_budget():
    """A fresh install compiles canonmerge's kernels on their first calls (~30 s in all): that is paid once, not
    by the constraint whose compile happens to call them first, so it does not count against its budget."""
    from numba import njit  # (a kernel made here, so that it is certainly compiled inside the budget)

    @njit(cache=False)
    def fresh_kernel(n):
        total = 0
        for i in range(n):
            total += i * i
        return total

    budget = 0.01  # (a budget well under numba's compile of even this kernel: 0.05-0.5 s measured)
    before = kernel_compile_seconds.seconds()
    with CompileBudget(seconds=budget).running():
        start = time.monotonic()
        assert fresh_kernel(10) == 285  # numba compiles it now
        compiling = kernel_compile_seconds.seconds() - before
        checkpoint()  # within budget: the compile's own time is the few microseconds around the call
    assert compiling > budget and time.monotonic() - start > budget, compiling
    with pytest.raises(CompileTimeoutError):  # and the compile's own time still counts
        with CompileBudget(seconds=budget).running():
            time.sleep(5 * budget)
            checkpoint()


def test_a_fragment_a_lazy_walk_enters_is_built_under_the_compiles_budget(gpt2):
    """A lazy schema builds a fragment when a walk first enters it: under the compile's budget (its limits and
    cancel switch), so a step past it raises the typed error; the guide is left as it was, and the same step
    succeeds once the budget allows it, to the same masks as a guide that never failed. A budget pickles to its
    limits, with a cancel switch of its own."""
    import pickle

    import numpy as np

    schema = {"type": "object", "required": ["name", "home", "tags"], "additionalProperties": False,
              "properties": {"name": {"type": "string", "maxLength": 50},
                             "home": {"type": "string", "format": "uri", "maxLength": 61},  # (no other test's)
                             "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}}}
    runtime = runtime_of("gpt2")
    text = vegas.format_instance({"name": "ada", "home": "https://example.org/a", "tags": ["x", "yz"]}, schema)
    ids = runtime.encode(text, add_special_tokens=False).ids
    for stop in ("time", "cancel"):
        budget = CompileBudget(seconds=30)
        guide = vegas.compile_schema(schema, gpt2, library_dir=False, lazy=True, budget=budget)
        assert guide._linker.budget is budget
        if stop == "time":  # (runs out inside the first fragment's build, its marks set: they are put back)
            budget.seconds = 1e-4
        else:
            budget.cancel()
        state, failed = guide.initial_state, 0
        for token in ids:
            try:
                following = guide.advance(state, token)
            except CompileBudgetError as exc:
                assert isinstance(exc, CompileTimeoutError if stop == "time" else CompileCancelledError), exc
                failed += 1
                if stop == "time":
                    budget.seconds = 30  # the same step again, now within the budget
                else:
                    guide._linker.budget = CompileBudget(seconds=30)
                following = guide.advance(state, token)
            state = following
        assert failed >= 1  # some fragment was entered by the walk, not built at compile time
        assert guide.is_accepting(state)
        reference = vegas.compile_schema(schema, gpt2, library_dir=False, lazy=True)
        other = reference.initial_state
        replay = guide.initial_state
        for token in ids:
            assert np.array_equal(guide.allowed(replay), reference.allowed(other))
            replay, other = guide.advance(replay, token), reference.advance(other, token)
    copy = pickle.loads(pickle.dumps(CompileBudget(seconds=2, memory_bytes=1 << 20)))
    assert (copy.seconds, copy.memory_bytes, copy.cancelled) == (2, 1 << 20, False)
