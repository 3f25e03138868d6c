"""A one-line progress indicator on stderr for the command line's long steps (tokenizer compile, model load).

``with Progress("loading model") as p: ...`` redraws ``loading model ... 12.3 s`` in place ten times a second
(a background thread, since the steps it wraps give no callbacks) and ``p.update("step")`` shows the latest
message of a step that does report progress. On exit it leaves one line ``loading model: 20.1 s``. When stderr is
not a terminal (a pipe, a log file, a test) it writes nothing at all, so scripted output stays clean.

Leaves out: percentages and ETAs (none of the wrapped steps knows its total), nested indicators.
"""

from __future__ import annotations

import sys
import threading
import time

__all__ = ["Progress"]

_SPINNER = "|/-\\"


class Progress:
    """Elapsed-time indicator for one step; ``elapsed`` (seconds) is valid during and after the ``with`` block."""

    def __init__(self, label: str, *, stream=None, enabled: bool | None = None):
        self.label = label
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self._stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self._enabled = enabled
        self._message = ""
        self._started = time.perf_counter()
        self._ended: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def elapsed(self) -> float:
        return (self._ended if self._ended is not None else time.perf_counter()) - self._started

    def update(self, message: str) -> None:
        """Show ``message`` after the label (e.g. the current phase of a build)."""
        self._message = message
        self._draw()

    def _draw(self, tick: int = 0) -> None:
        if not self._enabled:
            return
        line = f"{_SPINNER[tick % 4]} {self.label}"
        if self._message:
            line += f": {self._message}"
        line = f"{line} ... {self.elapsed:.1f} s"
        with self._lock:
            self._stream.write("\r\x1b[2K" + line[:200])
            self._stream.flush()

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(0.1):
            tick += 1
            self._draw(tick)

    def __enter__(self) -> "Progress":
        self._started = time.perf_counter()
        if self._enabled:
            self._draw()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._ended = time.perf_counter()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._enabled:
            outcome = "failed after" if exc_type is not None else "done in"
            with self._lock:
                self._stream.write(f"\r\x1b[2K{self.label}: {outcome} {self.elapsed:.1f} s\n")
                self._stream.flush()
