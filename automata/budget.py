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

Time spent compiling canonmerge's own numba kernels (the first call of each in a fresh install, ~30 s in all on
2 cores; loading them from numba's cache, ~0.3-0.7 s in a new process) is not counted: it is paid once, not per
constraint, and a default budget counting it would refuse a fresh install's first constraint. numba announces each
of its compiles (``numba.core.event``, kind ``numba:compile``); a listener adds up, per thread, the seconds spent
inside them, and a compile's clock runs on its own work only.

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

from numba.core import event as numba_event

from automata.errors import CanonmergeError

__all__ = ["CompileBudget", "CompileBudgetError", "CompileTimeoutError", "CompileMemoryError",
           "CompileCancelledError", "checkpoint", "current_budget", "DEFAULT_SECONDS", "DEFAULT_MEMORY_BYTES",
           "MEMORY_INTERVAL"]

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


class _KernelCompileClock(numba_event.Listener):
    """Seconds this thread has spent inside numba's compiles (``numba:compile`` events; nested ones, a kernel
    compiling the kernels it calls, counted once)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def seconds(self) -> float:
        local = self._local
        total = getattr(local, "total", 0.0)
        if getattr(local, "depth", 0):  # inside a compile now: its time so far counts too
            total += time.monotonic() - local.started
        return total

    def on_start(self, event) -> None:
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        if local.depth == 1:
            local.started = time.monotonic()

    def on_end(self, event) -> None:
        local = self._local
        local.depth -= 1
        if local.depth == 0:
            local.total = getattr(local, "total", 0.0) + time.monotonic() - local.started


kernel_compile_seconds = _KernelCompileClock()
numba_event.register("numba:compile", kernel_compile_seconds)


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

    def __reduce__(self):
        """A copy (a guide pickled to a worker process) has the same limits and a cancel switch of its own."""
        return CompileBudget, (self.seconds, self.memory_bytes)

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

    __slots__ = ("budget", "parent", "start", "deadline", "baseline", "memory_limit", "next_memory", "cancelled",
                 "kernel_seconds")

    def __init__(self, budget: CompileBudget, parent: "_Run | None"):
        self.budget, self.parent = budget, parent
        self.cancelled = budget._cancelled.is_set  # bound once: a check calls it
        self.start = now = time.monotonic()
        self.deadline = now + budget.seconds if budget.seconds is not None else float("inf")
        self.kernel_seconds = kernel_compile_seconds.seconds()  # numba's compiles so far (not counted from here)
        self.memory_limit = budget.memory_bytes if resident_bytes is not None else None
        self.baseline = resident_bytes() if self.memory_limit is not None else 0
        self.next_memory = now + MEMORY_INTERVAL if self.memory_limit is not None else float("inf")

    def check(self) -> None:
        now = time.monotonic()
        if now >= self.deadline:
            # past the deadline on the wall clock; numba compiling kernels meanwhile moves the deadline on
            kernels = kernel_compile_seconds.seconds() - self.kernel_seconds
            if now - kernels >= self.deadline:
                raise CompileTimeoutError(f"compile stopped after {now - self.start - kernels:.2f} s: over its "
                                          f"budget of seconds={self.budget.seconds}"
                                          + (f" ({kernels:.1f} s more compiling numba kernels)" if kernels >= 0.05
                                             else ""))
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


def current_budget() -> CompileBudget | None:
    """The budget of the innermost compile running in this context (None outside any): what a lazily built guide
    keeps, so that the fragments its walks enter later are compiled under the same limits and cancel switch."""
    run = _RUN.get()
    return None if run is None else run.budget


def running(budget: CompileBudget | None):
    """The context a compile entry point runs in: ``budget.running()``; with None, the enclosing compile's budget
    (nothing new) or, at the top, a default ``CompileBudget()``."""
    if budget is None:
        if _RUN.get() is not None:
            return contextlib.nullcontext()
        budget = CompileBudget()
    return budget.running()
