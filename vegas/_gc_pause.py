"""The cyclic garbage collector paused for the length of a compile.

A schema compile allocates tens of thousands of short-lived containers (the skeleton's regex tree, its Glushkov
positions, fragment regexes, dicts of instances) and frees nearly all of them by reference counting before it
returns. With the collector running, every 700 net allocations start a young collection, the containers alive
at that moment are promoted, and promotions into the oldest generation eventually start a full collection over
the whole heap — which, in a process that imported torch and transformers, holds ~270,000 containers and takes
~100 ms. Paused, none of that happens: the temporaries die by reference count, and the collector's counter, which
counts allocations net of deallocations, resumes where the compile's survivors leave it.

Measured over 49 MaskBench schemas on Llama-3 (bench/warm_compile.py's selection; docs/optimizations.md): a warm
compile's median 1.13 -> 1.01 ms, a loop of 490 warm compiles 1.25 -> 0.98 s in all (collections 184 -> 23 ms,
one full collection of 142 ms gone); a full collection afterwards found 3 unreachable objects, so a compile
leaves next to no cyclic garbage behind.

Process-wide, as ``gc.disable`` is: while one thread compiles, no thread's cycles are collected. Nested and
concurrent pauses share one count; the collector is enabled again when the last ends, and only if it was
enabled when the first began (a process that turned it off keeps it off).
"""

from __future__ import annotations

import contextlib
import gc
import threading

__all__ = ["gc_paused"]

_lock = threading.Lock()
_depth = 0  # pauses under way
_enable_after = False  # whether the collector was enabled when the first of them began


@contextlib.contextmanager
def gc_paused():
    """The cyclic collector off inside the block (reference counting still frees what a compile drops)."""
    global _depth, _enable_after
    with _lock:
        if _depth == 0:
            _enable_after = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _enable_after:
                gc.enable()
