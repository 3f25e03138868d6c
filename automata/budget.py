"""Compile budgets: a compile that runs past its time or memory, or is cancelled, stops with a typed error.

A ``CompileBudget`` says how long a compile may run (``seconds``) and how much the process's resident memory may
grow while it runs (``memory_bytes``); ``cancel()`` (from any thread) stops the compiles running under it. The
compile entry points (``product.compile_regex``, ``product.compile_stitched``, ``vegas.compile_schema``) run their
work inside ``budget.running()``, and the loops that can grow with the constraint call ``checkpoint()``, which
raises ``CompileTimeoutError``, ``CompileMemoryError`` or ``CompileCancelledError`` (all ``CompileBudgetError``).
The running budget is a context variable, so the checks deep in ``automata``, ``product.compiler`` and
``product.counted`` need no argument passed down, and a compile in another thread has its own.

A check is a clock read, a flag read and a comparison (~0.2 µs); the resident size (``/proc/self/statm``, ~10 µs;
``resource``'s peak where there is no ``/proc``) is read at most every ``MEMORY_INTERVAL`` seconds. Compiled
(numba) kernels cannot check: each of their calls is bounded in work by the state and transition caps
(``max_states``, ``max_transitions``), and the loops around them check between calls.

Memory is the whole process's resident size, measured against its size when the compile started: other threads
allocating at the same time count too, and memory freed back to the allocator but not to the system does not
come back. It is a guard against a compile eating the machine, not an accounting of one compile.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time

from automata.errors import CanonmergeError

__all__ = ["CompileBudget", "CompileBudgetError", "CompileTimeoutError", "CompileMemoryError",
           "CompileCancelledError", "checkpoint", "DEFAULT_SECONDS", "DEFAULT_MEMORY_BYTES", "MEMORY_INTERVAL"]

# Defaults a server can live with: a request waits at most half a minute for its guide, and a compile does not grow
# the process by more than 4 GiB. Warm compiles take milliseconds and cold ones of large real schemas a few seconds
# (MaskBench's slowest finishing ones: 10-30 s on GPT-2); the constraints that run past this ran for minutes
# and 10+ GB before the budget. Pass ``budget=`` to change them (``CompileBudget(None, None)``: no limit).
DEFAULT_SECONDS = 30.0
DEFAULT_MEMORY_BYTES = 4 << 30
MEMORY_INTERVAL = 0.02  # seconds between two reads of the resident size


class CompileBudgetError(CanonmergeError):
    """A compile stopped before it finished: its budget ran out or it was cancelled. Nothing half-built is kept (no
    fragment is stored in a library or on disk); the same constraint compiles again with a larger budget."""

    reason = "budget"


class CompileTimeoutError(CompileBudgetError, TimeoutError):
    """A compile ran past its budget's ``seconds``."""

    reason = "time"


class CompileMemoryError(CompileBudgetError, MemoryError):
    """The process's resident memory grew by more than the budget's ``memory_bytes`` while a compile ran."""

    reason = "memory"


class CompileCancelledError(CompileBudgetError):
    """``CompileBudget.cancel()`` was called while (or before) a compile ran under the budget."""

    reason = "cancelled"


def _statm_reader():
    """A function returning the process's resident bytes now (``/proc/self/statm``), or its peak resident bytes
    where there is no ``/proc`` (``resource``; None where neither exists)."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        fd = None
    if fd is not None:
        lock = threading.Lock()

        def resident() -> int:
            with lock:  # one descriptor, read from the start each time
                return int(os.pread(fd, 128, 0).split()[1]) * page

        return resident
    try:
        import resource
    except ImportError:  # no /proc and no resource (Windows): time and cancelling only
        return None
    scale = 1 if os.uname().sysname == "Darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    return lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


resident_bytes = _statm_reader()


class CompileBudget:
    """How long a compile may run (``seconds``; None: no limit) and how much the process's resident memory may
    grow while it does (``memory_bytes``; None: no limit), counted from when each compile under it starts; and a
    cancel switch (``cancel()``, thread-safe, for every compile running under this budget now or later).

    One budget may serve several compiles, one after another or at once (each has its own clock). A compile
    called inside another (a schema's fragments) runs under the enclosing compile's budget too.
    """

    def __init__(self, seconds: float | None = DEFAULT_SECONDS, memory_bytes: int | None = DEFAULT_MEMORY_BYTES):
        if seconds is not None and not seconds > 0:
            raise ValueError(f"seconds must be positive or None, not {seconds!r}")
        if memory_bytes is not None and not memory_bytes > 0:
            raise ValueError(f"memory_bytes must be positive or None, not {memory_bytes!r}")
        self.seconds, self.memory_bytes = seconds, memory_bytes
        self._cancelled = threading.Event()

    def __repr__(self) -> str:
        return f"CompileBudget(seconds={self.seconds!r}, memory_bytes={self.memory_bytes!r})"

    def cancel(self) -> None:
        """Stop the compiles running under this budget (at their next check: milliseconds), and any started
        under it later."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @contextlib.contextmanager
    def running(self):
        """Run the body as one compile under this budget: its clock and memory baseline start now, and
        ``checkpoint()`` checks it (and the enclosing compiles' budgets)."""
        run = _Run(self, _RUN.get())
        run.check()
        token = _RUN.set(run)
        try:
            yield run
        finally:
            _RUN.reset(token)


class _Run:
    """One compile under a budget: its deadline, memory baseline and the enclosing run (checked too)."""

    __slots__ = ("budget", "parent", "start", "deadline", "baseline", "memory_limit", "next_memory", "cancelled")

    def __init__(self, budget: CompileBudget, parent: "_Run | None"):
        self.budget, self.parent = budget, parent
        self.cancelled = budget._cancelled.is_set  # bound once: a check calls it
        self.start = now = time.monotonic()
        self.deadline = now + budget.seconds if budget.seconds is not None else float("inf")
        self.memory_limit = budget.memory_bytes if resident_bytes is not None else None
        self.baseline = resident_bytes() if self.memory_limit is not None else 0
        self.next_memory = now + MEMORY_INTERVAL if self.memory_limit is not None else float("inf")

    def check(self) -> None:
        now = time.monotonic()
        if now >= self.deadline:
            raise CompileTimeoutError(f"compile stopped after {now - self.start:.2f} s: over its budget of "
                                      f"seconds={self.budget.seconds}")
        if self.cancelled():
            raise CompileCancelledError(f"compile cancelled after {now - self.start:.2f} s")
        if now >= self.next_memory:
            self.next_memory = now + MEMORY_INTERVAL
            grown = resident_bytes() - self.baseline
            if grown > self.memory_limit:
                raise CompileMemoryError(f"compile stopped after {now - self.start:.2f} s: resident memory grew by "
                                         f"{grown / 2**20:.0f} MiB, over its budget of memory_bytes="
                                         f"{self.memory_limit} ({self.memory_limit / 2**20:.0f} MiB)")
        if self.parent is not None:
            self.parent.check()


_RUN: "contextvars.ContextVar[_Run | None]" = contextvars.ContextVar("canonmerge_compile_budget", default=None)


def checkpoint() -> None:
    """Raise the running compile's ``CompileBudgetError`` if its budget ran out or it was cancelled (nothing where
    no compile runs under a budget). Cheap: call it from loops whose work grows with the constraint."""
    run = _RUN.get()
    if run is not None:
        run.check()


def running(budget: CompileBudget | None):
    """The context a compile entry point runs in: ``budget.running()``; with None, the enclosing compile's budget
    (nothing new) or, at the top, a default ``CompileBudget()``."""
    if budget is None:
        if _RUN.get() is not None:
            return contextlib.nullcontext()
        budget = CompileBudget()
    return budget.running()
