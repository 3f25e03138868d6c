"""Benchmark: regex -> minimal UTF-8 byte DFA compile time for realistic constraint patterns.

Prints a table and writes ``bench/results/regex_compile.json``. Run: ``python bench/regex_compile.py``.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from automata import from_regex  # noqa: E402

STRING = r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
PATTERNS = {
    "boolean": r"(true|false)",
    "json string": STRING,
    "json number": NUMBER,
    "json object (3 keys)": r'\{"name": ' + STRING + r', "age": (0|[1-9][0-9]*), "admin": (true|false)\}',
    "json array of numbers": r"\[(" + NUMBER + r"(, " + NUMBER + r")*)?\]",
    "iso date": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    "iso datetime": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
    "email": r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
    "ipv4": r"((25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)",
    "url": r"https?://[a-zA-Z0-9.-]+(:[0-9]{1,5})?(/[a-zA-Z0-9._~%!$&'()*+,;=:@-]*)*",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "phone": r"\(\d{3}\) \d{3}-\d{4}",
}


def main() -> None:
    rows = []
    for name, pattern in PATTERNS.items():
        from_regex(pattern)  # warm-up (imports, first allocation)
        times = []
        for _ in range(7):
            started = time.perf_counter()
            dfa = from_regex(pattern)
            times.append(time.perf_counter() - started)
        rows.append({"pattern": name, "states": dfa.num_states, "transitions": dfa.num_transitions,
                     "median_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times)})
    print(f"{'pattern':<24}{'states':>8}{'transitions':>13}{'median ms':>11}{'min ms':>9}")
    for r in rows:
        print(f"{r['pattern']:<24}{r['states']:>8}{r['transitions']:>13}{r['median_ms']:>11.1f}{r['min_ms']:>9.1f}")
    out = Path(__file__).parent / "results" / "regex_compile.json"
    out.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
