"""MaskBench JSON Schemas through canonmerge (JSON and YAML) beside llguidance, xgrammar and outlines-core.

For one tokenizer (Llama-3 by default, or GPT-2), each engine compiles every selected MaskBench schema
(``../shared/maskbench/``, relative to the repository's parent), checks the file's valid and invalid instances,
and walks each valid instance's runtime encoding filling a torch int32 next-token bitmask per step, as
``bench/peers.py`` does for regexes. Engines (``--engines``):

- ``canonmerge-json`` / ``canonmerge-yaml``: ``vegas.compile_schema(schema, canonical, style=...)`` (``-lazy``
  appended, asked for by name: ``lazy=True``, new fragments built as they are walked). The text of
  an instance is ``vegas.format_instance(data, schema, style=...)``, its ids the runtime's encoding, and it is
  accepted iff ``guide.accepts(ids)``. Compile time is taken three ways: *cold* is the schema's first compile in
  this engine's run, which starts with an empty fragment library (its own ``CANONMERGE_CACHE_DIR``, whose
  tokenizer assets and canonical automata are links to the real cache) — fragments compiled for earlier
  schemas of the run are reused, as a user's library would be; *warm* is a second compile of the same schema
  right after, every fragment then in the library; *new keys* is then the compile of the schema with every
  declared property renamed (``name`` → ``name_x``): a new schema of the same shapes, whose value fragments are
  in the library and whose key fragments are not (a free key, allowed where ``additionalProperties`` is absent,
  must differ from the declared keys, so its fragment depends on them). Before its first schema, each worker
  compiles, masks and walks a small schema of every value type outside the timings (numba's kernels load, or in
  a fresh checkout compile, on first use) and empties the in-memory library again.
- ``llguidance`` (1.9.1), ``xgrammar`` (0.2.8), ``outlines-core`` (0.2.14): each peer built from the same
  ``tokenizer.json`` by ``bench/peers.py``'s classes, with its default JSON-Schema settings (xgrammar:
  ``any_whitespace=True, strict_mode=True``, properties in schema order; outlines-core: ``[ ]?`` whitespace).
  The text of an instance is ``json.dumps(data, separators=(",", ":"), ensure_ascii=False)`` in the data's own
  key order (``--peer-layout spaced``: ``", "``/``": "``, MaskBench's own harness layout); it is accepted iff
  every token's bit is set in the engine's mask at its step and EOS's bit after the last. Compile time is the
  engine's own (llguidance: grammar + matcher; xgrammar: ``compile_json_schema``, its cache off; outlines-core:
  ``build_regex_from_schema`` + ``Index``) up to its first mask filled, for every engine: canonmerge's compile
  computes the initial state's mask, llguidance's matcher computes it on its first fill (~85 µs at the start of
  a Llama-3 schema, in process). ``compile_only_ms`` in the results stops before that fill.

A schema is *covered* when it compiled; otherwise it was *refused* (canonmerge: ``UnsupportedSchemaError``,
whose keyword and JSON pointer are kept; peers: any compile error), *failed* (canonmerge: another error — a
bug or a malformed schema), or ran out of time or memory. Mask times: every step of every valid instance's walk
(plus the final EOS step), until the engine rejects a token; the *forced* share counts steps whose mask has
exactly one bit set (popcount taken outside the timing). Invalid instances are checked, not timed.

Isolation: every engine runs in its own worker process (spawned; all live through the run and take each schema
in turn, one at a time: engines never share the two cores, and the machine's drift over a run falls on all);
before every timed compile the worker writes 8 MB, so that no engine's compile finds its data in the core's
private caches (``_evict_private_caches``). A schema's first compile gets ``--timeout`` seconds of wall time, and
what follows it (warm compiles, checks, walks) ``(--repeats + 2) x --timeout``; a worker gets ``--memory-limit``
GB of RSS. Past either it is killed, the schema recorded as a timeout/memory outcome and a fresh worker started
for the next schema. Each valid instance is walked ``--repeats`` times with fresh guides (canonmerge: the warm
compile's, the cold one's, then further warm compiles) or fresh matchers (peers), and a step's time is its median
over the walks: this shared machine's rare multi-millisecond stalls would otherwise decide the p99. Results: a
printed table per engine (all its schemas, then the schemas every engine covered) and
``bench/results/json_schema.json`` (``--out``) with the table and every schema's outcome per engine.

    python bench/json_schema.py [--tokenizer llama3] [--split Glaiveai2K,Github_easy] [--limit 100] [--seed 0]

Needs the bench extra (``pip install -e ".[bench]"`` and ``pip install --no-deps xgrammar==0.2.8``) and the
``vegas`` package; a missing engine fails loudly.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("RAYON_NUM_THREADS", "1")

MASKBENCH = REPO.parent / "shared" / "maskbench"
SPLITS = ("Glaiveai2K", "Github_trivial", "Github_easy", "Snowplow", "Github_medium", "Github_hard", "Kubernetes",
          "JsonSchemaStore")
CANONMERGE_ENGINES = ("canonmerge-json", "canonmerge-yaml", "canonmerge-json-lazy", "canonmerge-yaml-lazy")
LAZY_ENGINES = ("canonmerge-json-lazy", "canonmerge-yaml-lazy")  # (asked for by name only: not in the default run)
PEER_ENGINES = ("llguidance", "xgrammar", "outlines-core")
ENGINES = CANONMERGE_ENGINES + PEER_ENGINES
LIBRARY_CACHE_DIRS = ("archives", "assets", "automata")  # the real cache's entries linked into a cold cache
PEER_LAYOUTS = {"compact": (",", ":"), "spaced": (", ", ": ")}


# ------------------------------------------------------------------------------------------------ workers ---

class _CanonmergeEngine:
    """``vegas.compile_schema`` for one style; instances written by ``vegas.format_instance``."""

    def __init__(self, tokenizer: str, style: str, runtime, lazy: bool = False):
        import vegas
        from bpe import compile_tokenizer
        from bpe.assets import tokenizer_source

        self.vegas = vegas
        self.style, self.lazy = style, lazy
        self.runtime = runtime
        self.canonical = compile_tokenizer(tokenizer_source(tokenizer))
        self.library_dir = None  # the default library (--first-sight: a fresh copy of a warmed one per schema)
        self.layout = f"vegas.format_instance(style={style!r})"
        self._first = np.zeros((1, (self.canonical.vocab_size + 31) // 32), dtype=np.uint32)
        self._warm_up()

    def _warm_up(self) -> None:
        """Outside the timings: numba loads its kernels on first use, and compiles them in a checkout that has not
        run them yet (tens of seconds here, which made a fresh checkout's first schemas time out). A small schema
        of every value type is compiled (memory only), masked and walked, then the in-memory fragments are
        dropped: each schema's first compile still reuses only what earlier schemas of the run compiled."""
        import torch

        from product.stitched import fragment_library

        schema = {"type": "object", "required": ["s"], "properties": {
            "s": {"type": "string", "maxLength": 40}, "i": {"type": "integer", "minimum": 0, "maximum": 100},
            "n": {"type": "number"}, "b": {"type": "boolean"}, "a": {"type": "array", "items": {"type": "string"}},
            "e": {"enum": ["x", "y"]}, "d": {"type": "string", "format": "date-time"}}}
        data = {"s": "héllo", "i": 7, "n": -1.5e3, "b": True, "a": ["q", "r"], "e": "x", "d": "2024-01-02T03:04:05Z"}
        guide = self.vegas.compile_schema(schema, self.canonical, style=self.style, library_dir=False, lazy=self.lazy)
        ids = self.runtime.encode(self.text(data, schema), add_special_tokens=False).ids
        out = torch.zeros((1, guide.num_words), dtype=torch.int32)
        accepted, _, _ = self.walk(guide, ids, out, [])
        if not accepted or not guide.accepts(ids):
            raise AssertionError(f"the warm-up instance was rejected ({self.style})")
        fragment_library(self.canonical).clear()

    def compile(self, schema):
        return self.vegas.compile_schema(schema, self.canonical, style=self.style, library_dir=self.library_dir,
                                         lazy=self.lazy)

    def first_mask(self, guide) -> None:
        """The initial state's mask (computed by the compile: a cache hit), timed as the peers' first mask is."""
        guide.fill_bitmask([guide.initial_state], self._first)

    def classify(self, exc: BaseException) -> tuple[str, dict]:
        """A compile error's outcome: ``refused`` (``UnsupportedSchemaError``), ``error`` (another typed
        ``CanonmergeError``: a malformed schema, a capacity limit) or ``failed`` (anything else: a bug); with the
        keyword and JSON pointer the error names."""
        from automata.errors import CanonmergeError

        where = {k: getattr(exc, k) for k in ("keyword", "pointer") if getattr(exc, k, None) is not None}
        if isinstance(exc, self.vegas.UnsupportedSchemaError):
            return "refused", where
        return ("error" if isinstance(exc, CanonmergeError) else "failed"), where

    def text(self, data, schema) -> str:
        return self.vegas.format_instance(data, schema, style=self.style)

    def roundtrip(self, text: str):
        if self.style == "yaml":
            import yaml

            return yaml.safe_load(text)
        return json.loads(text)

    def accepts(self, guide, ids: list[int]) -> bool:
        return bool(guide.accepts(ids))

    def walk(self, guide, ids, out, times: list[int], advances: list[int] | None = None) -> tuple[bool, int, int]:
        """Fill a mask per step (timed), follow ``ids`` while the mask allows them; (accepted, steps, forced).
        ``advances``: each step's advance timed too (a lazy guide builds a fragment the text enters there)."""
        import torch  # noqa: F401  (out is a torch tensor; fill_bitmask reads its numpy view)

        words = out.numpy().view(np.uint32)
        eos = guide.eos_token_ids[0]
        state, forced, steps = guide.initial_state, 0, 0
        for t in list(ids) + [eos]:
            t0 = time.perf_counter_ns()
            guide.fill_bitmask([state], out)
            times.append(time.perf_counter_ns() - t0)
            steps += 1
            forced += int(np.bitwise_count(words[0]).sum()) == 1
            if not (words[0, t >> 5] >> (t & 31)) & 1:
                return False, steps, forced
            if t == eos:
                return True, steps, forced
            t1 = time.perf_counter_ns()
            state = guide.advance(state, t)
            if advances is not None:
                advances.append(time.perf_counter_ns() - t1)
        raise AssertionError("unreachable")


class _PeerEngine:
    """A peer built by ``bench/peers.py`` (same tokenizer.json), compiling JSON Schemas with its defaults."""

    def __init__(self, name: str, tokenizer: str, runtime, peer_layout: str):
        import peers

        self.name = name
        self.runtime = runtime
        self.separators = PEER_LAYOUTS[peer_layout]
        self.layout = f"json.dumps(separators={self.separators!r}, ensure_ascii=False), data's key order"
        cls = {"llguidance": peers.LLGuidance, "xgrammar": peers.XGrammar, "outlines-core": peers.OutlinesCore}[name]
        self.peer = cls(tokenizer, runtime)
        self.vocab_size = getattr(self.peer, "vocab_size", None) or self.peer.words * 32
        import torch

        # the first mask's buffer, allocated once (as canonmerge's), outside the timed compile
        self._first = torch.zeros((1, (self.vocab_size + 31) // 32), dtype=torch.int32)
        self.eos = self.peer.eos
        if name == "outlines-core":
            from outlines_core.json_schema import build_regex_from_schema

            self.build_regex = build_regex_from_schema

    def compile(self, schema):
        if self.name == "llguidance":
            lib = self.peer.lib
            grammar = lib.LLMatcher.grammar_from_json_schema(schema)
            matcher = lib.LLMatcher(self.peer.tokenizer, grammar)
            if matcher.is_error():
                raise RuntimeError(matcher.get_error())
            self._compiled_matcher = matcher  # (its first mask is the compile's last step: first_mask)
            return grammar
        if self.name == "xgrammar":
            return self.peer.compiler.compile_json_schema(json.dumps(schema))
        return self.peer.lib.Index(self.build_regex(json.dumps(schema)), self.peer.vocabulary)

    def first_mask(self, compiled) -> None:
        """A matcher of the compiled grammar fills its first mask: canonmerge's compile computes its initial
        state's mask, llguidance's and the others' on the first fill (llguidance: the matcher its compile made)."""
        matcher = self._compiled_matcher if self.name == "llguidance" else self._matcher(compiled)
        self._compiled_matcher = None
        self._fill(matcher, self._first)

    def classify(self, exc: BaseException) -> tuple[str, dict]:
        return "refused", {}  # a peer's compile error is its refusal

    def text(self, data, schema) -> str:
        return json.dumps(data, separators=self.separators, ensure_ascii=False)

    def roundtrip(self, text: str):
        return json.loads(text)

    def _matcher(self, compiled):
        lib = self.peer.lib
        if self.name == "llguidance":
            return lib.LLMatcher(self.peer.tokenizer, compiled)
        if self.name == "xgrammar":
            return lib.GrammarMatcher(compiled)
        return lib.Guide(compiled)

    def _fill(self, matcher, out) -> None:
        if self.name == "llguidance":
            self.peer.lib.torch.fill_next_token_bitmask(matcher, out, 0)
        elif self.name == "xgrammar":
            matcher.fill_next_token_bitmask(out)
        else:
            matcher.write_mask_into(out.data_ptr(), out.numel(), out.element_size())

    def _consume(self, matcher, t: int) -> None:
        if self.name == "llguidance":
            if not matcher.consume_token(t):
                raise RuntimeError(f"llguidance: token {t} allowed by the mask but not consumed: {matcher.get_error()}")
        elif self.name == "xgrammar":
            if not matcher.accept_token(t):
                raise RuntimeError(f"xgrammar: token {t} allowed by the mask but not accepted")
        else:
            matcher.advance(t, return_tokens=False)

    def accepts(self, compiled, ids: list[int], out) -> bool:
        return self.walk(compiled, ids, out, None)[0]

    def walk(self, compiled, ids, out, times: list[int] | None,
             advances: list[int] | None = None) -> tuple[bool, int, int]:
        """Fill the peer's mask per step (timed when ``times`` is a list) and follow ``ids`` while its bit is set;
        accepted iff EOS's bit is set after the last token. (accepted, steps, forced). ``advances``: each step's
        consume timed too."""
        matcher = self._matcher(compiled)
        words = out.numpy().view(np.uint32)
        forced = steps = 0
        for t in list(ids) + [self.eos]:
            if times is not None:
                t0 = time.perf_counter_ns()
                self._fill(matcher, out)
                times.append(time.perf_counter_ns() - t0)
                forced += int(np.bitwise_count(words[0]).sum()) == 1
            else:
                self._fill(matcher, out)
            steps += 1
            if not (words[0, t >> 5] >> (t & 31)) & 1:
                return False, steps, forced
            if t == self.eos:
                return True, steps, forced
            t1 = time.perf_counter_ns()
            self._consume(matcher, t)
            if advances is not None:
                advances.append(time.perf_counter_ns() - t1)
        raise AssertionError("unreachable")


def _make_engine(name: str, tokenizer: str, peer_layout: str):
    from bpe.assets import reference_runtime

    runtime = reference_runtime(tokenizer)
    if name in CANONMERGE_ENGINES:
        return _CanonmergeEngine(tokenizer, name.split("-")[1], runtime, lazy=name in LAZY_ENGINES)
    return _PeerEngine(name, tokenizer, runtime, peer_layout)


# twice this VM's L2 caches (2 x 2 MB; its L3, 260 MB, is shared with other tenants); zeros are not touched, so
# a process that never evicts (the parent) holds no memory for it
_EVICTION_BUFFER = np.zeros((8 << 20) // 8, dtype=np.int64)


def _evict_private_caches() -> None:
    """Write ``_EVICTION_BUFFER`` (8 MB), before every timed compile of every engine: each starts with its data out
    of the core's private caches, as a compile in a serving process does after a forward pass. Without it, a compile
    found in cache what the step before it left there: canonmerge's warm compile, its cold compile of the same
    schema; a peer's compile, its walks of the previous schema (or, with the engines taking schemas in turn,
    another engine's)."""
    _EVICTION_BUFFER[:] += 1  # (in place: the module's array)


def _run_schema(engine, path: str, repeats: int, compiled_signal=lambda: None) -> dict:
    """Compile one MaskBench file's schema, check its instances, walk its valid ones ``repeats`` times (fresh
    guides or matchers each time; each step's time is its median over the walks)."""
    import torch

    record = json.loads(Path(path).read_text(encoding="utf-8"))
    schema, tests = record["schema"], record.get("tests", [])
    result: dict = {"status": "ok"}
    _evict_private_caches()
    t0 = time.perf_counter()
    try:
        compiled = engine.compile(schema)
        compiled_at = time.perf_counter()
        engine.first_mask(compiled)
    except Exception as exc:  # a compile error is an outcome; which kind is decided below
        result["status"], where = engine.classify(exc)
        result["error"] = f"{type(exc).__name__}: {exc}"[:500]
        result.update(where)
        if result["status"] == "failed":
            result["traceback"] = traceback.format_exc(limit=-3)[-1500:]
        return result
    result["compile_ms"] = (time.perf_counter() - t0) * 1e3  # up to the first mask
    result["compile_only_ms"] = (compiled_at - t0) * 1e3
    compiled_signal()
    if isinstance(engine, _CanonmergeEngine):
        # Fresh guides for the walks (a guide caches the masks it computed): the warm compile's, then the cold
        # one's (untouched so far: acceptance checks read rows, not masks), then more warm compiles.
        guides, warm_ms = [compiled], []
        while len(guides) < max(repeats, 2):
            _evict_private_caches()
            t0 = time.perf_counter()
            guides.append(engine.compile(schema))
            engine.first_mask(guides[-1])
            warm_ms.append((time.perf_counter() - t0) * 1e3)
        guides = (guides[1:2] + guides[:1] + guides[2:])[:repeats]
        result["compile_warm_ms"] = float(np.median(warm_ms))
        # A new schema of the same shapes: every declared property renamed. Its value fragments are in the
        # library; the fragments that spell keys (and free keys, which exclude the declared ones) are not.
        renamed = renamed_keys(schema, lambda name: name + "_x")
        if renamed != schema:
            _evict_private_caches()
            t0 = time.perf_counter()
            try:
                engine.first_mask(engine.compile(renamed))
                result["compile_new_keys_ms"] = (time.perf_counter() - t0) * 1e3
            except Exception as exc:  # (a $ref or keyword the renaming broke: not measured)
                result["new_keys_error"] = f"{type(exc).__name__}: {exc}"[:300]
        result["guide_nodes"] = int(compiled.num_nodes)
        result["guide_memory_mb"] = compiled.memory_bytes / 1e6
        words = guides[0].num_words
    else:
        guides = [compiled] * repeats  # the peers' walks start a fresh matcher from the compiled grammar
        words = (engine.vocab_size + 31) // 32
    out = torch.zeros((1, words), dtype=torch.int32)
    valid, invalid, walks, roundtrip_failures = [], [], [], 0
    for test in tests:
        data = test["data"]
        text = engine.text(data, schema)
        try:
            if engine.roundtrip(text) != data:
                roundtrip_failures += 1
        except Exception:
            roundtrip_failures += 1
        ids = engine.runtime.encode(text, add_special_tokens=False).ids
        if isinstance(engine, _CanonmergeEngine):
            accepted = engine.accepts(guides[0], ids)
        else:
            accepted = engine.accepts(compiled, ids, out)
        if test["valid"]:
            valid.append(accepted)
            walks.append(ids)
        else:
            invalid.append(not accepted)
    runs: list[list[int]] = []
    steps = forced = mismatches = 0
    for i, guide in enumerate(guides):
        times: list[int] = []
        for ids, accepted in zip(walks, valid):
            walked, n, f = engine.walk(guide, ids, out, times)
            if i == 0:
                steps, forced = steps + n, forced + f
                mismatches += walked != accepted  # the masks and the acceptance check disagree: a bug
        runs.append(times)
    if len({len(r) for r in runs}) == 1:
        mask_ns = np.median(np.asarray(runs, dtype=np.float64), axis=0).tolist() if runs[0] else []
    else:  # walks of the same tokens that took different numbers of steps: keep them all, and say so
        mask_ns = [t for r in runs for t in r]
        result["unequal_walks"] = [len(r) for r in runs]
    result.update({"valid": valid, "invalid_rejected": invalid, "steps": steps, "forced": forced,
                   "mask_ns": mask_ns})
    if roundtrip_failures:
        result["roundtrip_failures"] = roundtrip_failures
    if mismatches:
        result["mask_accept_mismatches"] = mismatches
    return result


def _worker(conn, name: str, tokenizer: str, peer_layout: str, cache_dir: str | None, repeats: int,
            mode: dict | None = None) -> None:
    """A worker process: build the engine once, then answer one schema path at a time (``mode``: the
    ``--first-sight`` protocol's settings, ``bench/first_sight.py``; None: ``_run_schema``)."""
    if cache_dir:
        os.environ["CANONMERGE_CACHE_DIR"] = cache_dir
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        engine = _make_engine(name, tokenizer, peer_layout)
    except BaseException as exc:
        conn.send(("setup-failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return
    def signal(kind: str = "compiled") -> None:
        conn.send((kind, None))

    if mode is None:
        def runner(path):
            return _run_schema(engine, path, repeats, signal)
    else:
        import first_sight

        try:
            runner = first_sight.worker_runner(engine, mode, signal)
        except BaseException as exc:
            conn.send(("setup-failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            return
    conn.send(("ready", {"setup_s": time.perf_counter() - t0, "layout": engine.layout}))
    while True:
        message = conn.recv()
        if message is None:
            return
        try:
            conn.send(("result", runner(message)))
        except Exception as exc:  # an error outside compile (formatting, walking): a failure of this schema
            conn.send(("result", {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500],
                                  "traceback": traceback.format_exc(limit=-3)[-1500:]}))


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Worker:
    """The parent's handle on one engine's worker process: a schema at a time, under a time and memory limit."""

    SETUP_TIMEOUT_S = 300

    def __init__(self, name: str, tokenizer: str, peer_layout: str, cache_dir: str | None, memory_limit: float,
                 repeats: int, mode: dict | None = None):
        self.args = (name, tokenizer, peer_layout, cache_dir, repeats, mode)
        self.memory_limit = memory_limit
        self.process = None
        self.setup_s: list[float] = []
        self.layout = ""

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child, *self.args), daemon=True)
        self.process.start()
        child.close()
        outcome = self._wait(self.SETUP_TIMEOUT_S)
        if outcome[0] != "ready":
            self.stop()
            raise RuntimeError(f"{self.args[0]} worker could not start: {outcome}")
        self.setup_s.append(outcome[1]["setup_s"])
        self.layout = outcome[1]["layout"]

    def _wait(self, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            if self.conn.poll(0.05):
                try:
                    return self.conn.recv()
                except EOFError:
                    return ("crashed", f"worker exited with code {self.process.exitcode}")
            if not self.process.is_alive():
                if self.conn.poll(0):
                    continue
                return ("crashed", f"worker exited with code {self.process.exitcode}")
            if _rss_bytes(self.process.pid) > self.memory_limit * 1e9:
                self.stop()
                return ("memory", f"worker RSS above {self.memory_limit:g} GB")
            if time.monotonic() > deadline:
                self.stop()
                return ("timeout", f"no result within {timeout:g} s")

    def run(self, path: str, timeout: float, after_compile: float) -> dict:
        """One schema: ``timeout`` seconds for the first compile, then ``after_compile`` for the rest (a worker
        that prepares untimed state first, ``--first-sight``, says ``prepared`` within ``after_compile`` seconds,
        and its compile's ``timeout`` starts then)."""
        if self.process is None:
            self._start()
        t0 = time.perf_counter()
        self.conn.send(path)
        kind, payload = self._wait(timeout if self.args[5] is None else after_compile)
        if kind == "prepared":
            kind, payload = self._wait(timeout)
        if kind == "compiled":
            kind, payload = self._wait(after_compile)
            if kind == "timeout":
                payload = f"compiled, but the checks and walks took more than {after_compile:g} s"
        elif kind == "timeout":
            payload = f"no compile within {timeout:g} s"
        wall_s = time.perf_counter() - t0
        if kind == "result":
            payload["wall_s"] = wall_s
            return payload
        self.stop()
        return {"status": kind, "error": payload, "wall_s": wall_s}

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self.process.join(2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        self.process = None


# ------------------------------------------------------------------------------------------------ parent ---

def select_files(splits: list[str], limit: int | None, seed: int | None) -> list[Path]:
    """``limit`` files of each split: the first ones in name order, or a random sample when ``seed`` is set."""
    if not MASKBENCH.is_dir():
        raise SystemExit(f"MaskBench files not found at {MASKBENCH} (the bench reads ../shared/maskbench/)")
    chosen = []
    for split in splits:
        files = sorted(MASKBENCH.glob(f"{split}---*.json"))
        if not files:
            raise SystemExit(f"no MaskBench files of split {split!r} in {MASKBENCH}; splits: {', '.join(SPLITS)}")
        if limit is not None and limit < len(files):
            files = sorted(random.Random(seed).sample(files, limit)) if seed is not None else files[:limit]
        chosen += files
    return chosen


def _cold_cache_dir() -> str:
    """A fresh ``CANONMERGE_CACHE_DIR`` whose asset and canonical-automaton entries link to the real cache, so
    that only the fragment library starts empty."""
    from bpe.assets import cache_dir

    real = cache_dir()
    fresh = Path(tempfile.mkdtemp(prefix="canonmerge-cold-library-"))
    for entry in LIBRARY_CACHE_DIRS:
        (real / entry).mkdir(parents=True, exist_ok=True)
        (fresh / entry).symlink_to(real / entry, target_is_directory=True)
    return str(fresh)


def _percentile(values, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})  # values, not schemas: never renamed
DEPENDENT_KEYWORDS = ("dependentRequired", "dependencies", "dependentSchemas")


def renamed_keys(node, rename):
    """``node`` with every declared property name ``n`` (``properties``, ``required``, the dependent keywords, and
    the ``$ref`` pointers through ``properties``) written ``rename(n)``; values of data keywords are left as
    they are. (The new-keys column renames with a suffix, ``--first-sight`` with fresh words.)"""
    if isinstance(node, list):
        return [renamed_keys(x, rename) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in DATA_KEYWORDS:
            out[key] = value
        elif key == "properties" and isinstance(value, dict):
            out[key] = {rename(name): renamed_keys(sub, rename) for name, sub in value.items()}
        elif key == "required" and isinstance(value, list):
            out[key] = [rename(name) if isinstance(name, str) else name for name in value]
        elif key in DEPENDENT_KEYWORDS and isinstance(value, dict):
            out[key] = {rename(name): ([rename(n) if isinstance(n, str) else n for n in sub]
                                       if isinstance(sub, list) else renamed_keys(sub, rename))
                        for name, sub in value.items()}
        elif key == "$ref" and isinstance(value, str):
            out[key] = _renamed_ref(value, rename)
        else:
            out[key] = renamed_keys(value, rename)
    return out


def _renamed_ref(ref: str, rename) -> str:
    """``ref`` with the name after each ``properties`` segment of its fragment renamed (JSON-pointer escapes and
    percent-encoding read and written back)."""
    if "#" not in ref:
        return ref
    base, fragment = ref.split("#", 1)
    segments = fragment.split("/")
    i = 1
    while i < len(segments):
        if segments[i] == "properties" and i + 1 < len(segments):
            raw = segments[i + 1]
            name = unquote(raw).replace("~1", "/").replace("~0", "~")
            new = rename(name)
            if new != name:
                new = new.replace("~", "~0").replace("/", "~1")
                segments[i + 1] = quote(new, safe="~!$&'()*+,;=:@") if "%" in raw else new
            i += 2
        else:
            i += 1
    return base + "#" + "/".join(segments)


def summarize(outcomes: dict[str, dict], names: list[str] | None = None) -> dict:
    """One engine's table row over the schemas ``names`` (all of them when None)."""
    items = [(n, r) for n, r in outcomes.items() if names is None or n in names]
    status = Counter(r["status"] for _, r in items)
    ok = [r for _, r in items if r["status"] == "ok"]
    compile_ms = [r["compile_ms"] for r in ok]
    warm_ms = [r["compile_warm_ms"] for r in ok if "compile_warm_ms" in r]
    new_keys_ms = [r["compile_new_keys_ms"] for r in ok if "compile_new_keys_ms" in r]
    mask_us = np.concatenate([np.asarray(r["mask_ns"], dtype=np.float64) for r in ok] or [np.zeros(0)]) / 1e3
    valid = [v for r in ok for v in r["valid"]]
    invalid = [v for r in ok for v in r["invalid_rejected"]]
    steps, forced = sum(r["steps"] for r in ok), sum(r["forced"] for r in ok)
    row = {
        "schemas": len(items), "covered": status["ok"], "refused": status["refused"], "error": status["error"],
        "failed": status["failed"],
        "timeout": status["timeout"], "memory": status["memory"], "crashed": status["crashed"],
        "valid_accepted": sum(valid), "valid": len(valid),
        "invalid_rejected": sum(invalid), "invalid": len(invalid),
        "compile_ms_p50": _percentile(compile_ms, 50), "compile_ms_p90": _percentile(compile_ms, 90),
        "compile_ms_p99": _percentile(compile_ms, 99), "compile_ms_max": max(compile_ms, default=None),
        "compile_only_ms_p50": _percentile([r["compile_only_ms"] for r in ok if "compile_only_ms" in r], 50),
        "warm_compile_ms_p50": _percentile(warm_ms, 50), "warm_compile_ms_p90": _percentile(warm_ms, 90),
        "warm_compile_ms_p99": _percentile(warm_ms, 99),
        "new_keys_compiled": len(new_keys_ms), "new_keys_compile_ms_p50": _percentile(new_keys_ms, 50),
        "new_keys_compile_ms_p90": _percentile(new_keys_ms, 90),
        "masks": int(mask_us.size), "mask_us_mean": float(mask_us.mean()) if mask_us.size else None,
        "mask_us_p50": _percentile(mask_us, 50), "mask_us_p99": _percentile(mask_us, 99),
        "mask_us_max": float(mask_us.max()) if mask_us.size else None,
        "forced_share": forced / steps if steps else None,
        "roundtrip_failures": sum(r.get("roundtrip_failures", 0) for r in ok),
        "mask_accept_mismatches": sum(r.get("mask_accept_mismatches", 0) for r in ok),
    }
    return row


def _fmt(value, unit: str = "", digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}{unit}"


def print_table(title: str, rows: dict[str, dict]) -> None:
    print(f"\n{title}\n")
    print("| engine | covered | refused / error / failed / timeout / memory+crash | valid accepted | invalid rejected "
          "| compile p50 / p90 / p99 (cold) | compile p50 / p90 / p99 (warm) | new keys p50 / p90 (n) "
          "| mask mean / p50 / p99 | forced |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for engine, r in rows.items():
        warm = (f"{_fmt(r['warm_compile_ms_p50'], digits=2)} / {_fmt(r['warm_compile_ms_p90'], digits=2)} / "
                f"{_fmt(r['warm_compile_ms_p99'], digits=2)} ms" if r["warm_compile_ms_p50"] is not None else "–")
        forced = _fmt(100 * r["forced_share"], " %") if r["forced_share"] is not None else "–"
        new_keys = (f"{_fmt(r['new_keys_compile_ms_p50'], digits=1)} / {_fmt(r['new_keys_compile_ms_p90'], digits=1)}"
                    f" ms ({r['new_keys_compiled']})" if r.get("new_keys_compile_ms_p50") is not None else "–")
        print(f"| {engine} | {r['covered']}/{r['schemas']} | {r['refused']} / {r['error']} / {r['failed']} / {r['timeout']} / "
              f"{r['memory'] + r['crashed']} | {r['valid_accepted']}/{r['valid']} | "
              f"{r['invalid_rejected']}/{r['invalid']} | {_fmt(r['compile_ms_p50'], digits=2)} / "
              f"{_fmt(r['compile_ms_p90'], digits=2)} / {_fmt(r['compile_ms_p99'], digits=2)} ms | {warm} | {new_keys} | "
              f"{_fmt(r['mask_us_mean'])} / {_fmt(r['mask_us_p50'])} / {_fmt(r['mask_us_p99'])} µs | {forced} |")


def run(args) -> dict:
    files = select_files(args.split.split(","), args.limit, args.seed)
    engines = args.engines.split(",")
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    names = [f.stem for f in files]
    print(f"{len(files)} MaskBench schemas ({args.split}, limit {args.limit}, seed {args.seed}), tokenizer "
          f"{args.tokenizer}, engines {', '.join(engines)}, timeout {args.timeout:g} s per schema", flush=True)
    outcomes: dict[str, dict[str, dict]] = {engine: {} for engine in engines}
    # Every engine's worker lives through the run and they take each schema in turn (one at a time: they never
    # share the two cores), so that the machine's drift over a run falls on every engine alike: run one engine
    # after the other, the same code's warm p50 measured 1.50 and 1.74 ms four minutes apart.
    cold = {engine: _cold_cache_dir() for engine in engines if engine in CANONMERGE_ENGINES}
    workers = {engine: _Worker(engine, args.tokenizer, args.peer_layout, cold.get(engine), args.memory_limit,
                               args.repeats) for engine in engines}
    wall = dict.fromkeys(engines, 0.0)
    t0 = time.perf_counter()
    try:
        for i, (name, path) in enumerate(zip(names, files)):
            for engine, worker in workers.items():
                started = time.perf_counter()
                outcomes[engine][name] = r = worker.run(str(path), args.timeout, args.timeout * (args.repeats + 2))
                wall[engine] += time.perf_counter() - started
                if r["status"] not in ("ok", "refused") and args.verbose:
                    print(f"  {engine} {name}: {r['status']}: {r.get('error', '')[:200]}", flush=True)
            if (i + 1) % 10 == 0:
                print(f"  {i + 1}/{len(files)} schemas, {time.perf_counter() - t0:.0f} s", flush=True)
                save(assemble(args, names, outcomes, {}), args.out)  # a run cut short keeps what it finished
    finally:
        for worker in workers.values():
            worker.stop()
        for directory in cold.values():
            shutil.rmtree(directory, ignore_errors=True)
    info = {e: {"layout": w.layout, "worker_setups": len(w.setup_s), "setup_s": w.setup_s, "wall_s": wall[e]}
            for e, w in workers.items()}
    for engine in engines:
        row = summarize(outcomes[engine])
        print(f"{engine}: {row['covered']}/{row['schemas']} covered, valid {row['valid_accepted']}/{row['valid']}, "
              f"invalid rejected {row['invalid_rejected']}/{row['invalid']}, compile p50 "
              f"{_fmt(row['compile_ms_p50'], ' ms', 2)}, mask mean {_fmt(row['mask_us_mean'], ' µs')} "
              f"({wall[engine]:.0f} s)", flush=True)
    return assemble(args, names, outcomes, info)


def kept_outcomes(outcomes: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """The outcomes as the results JSON keeps them: each schema's mask times summarised (mean, max in µs) instead of
    listed step by step."""
    kept: dict[str, dict[str, dict]] = {}
    for engine, by_schema in outcomes.items():
        kept[engine] = {}
        for name, r in by_schema.items():
            r = dict(r)
            times = r.pop("mask_ns", None)
            if times:
                r["mask_us_mean"] = float(np.mean(times)) / 1e3
                r["mask_us_max"] = float(np.max(times)) / 1e3
            advances = r.pop("advance_ns", None)
            if advances:
                r["advance_us_mean"] = float(np.mean(advances)) / 1e3
                r["advance_us_max"] = float(np.max(advances)) / 1e3
            kept[engine][name] = r
    return kept


def assemble(args, names: list[str], outcomes: dict[str, dict[str, dict]], info: dict[str, dict]) -> dict:
    """The results of the engines run so far: tables, breakdowns, and per-schema outcomes (mask times
    summarised per schema rather than kept step by step)."""
    engines = list(outcomes)
    done = [n for n in names if all(n in outcomes[e] for e in engines)]
    common = [n for n in done if all(outcomes[e][n]["status"] == "ok" for e in engines)]
    table = {e: summarize(outcomes[e]) for e in engines}
    common_table = {e: summarize(outcomes[e], set(common)) for e in engines}
    by_split = {e: {split: f"{sum(r['status'] == 'ok' for n, r in outcomes[e].items() if n.startswith(split + '---'))}"
                           f"/{sum(n.startswith(split + '---') for n in outcomes[e])}"
                    for split in dict.fromkeys(n.split("---", 1)[0] for n in names)} for e in engines}
    refusals = {e: dict(Counter(str(r.get("keyword")) for r in outcomes[e].values() if r["status"] == "refused")
                        .most_common()) for e in engines}
    errors = {e: dict(Counter(f"{r['error'].split(':', 1)[0]} ({r.get('keyword', '')})"
                              for r in outcomes[e].values() if r["status"] in ("error", "failed")).most_common())
              for e in engines}
    kept = kept_outcomes(outcomes)
    return {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_at_end": os.getloadavg()},
        "options": {"tokenizer": args.tokenizer, "split": args.split, "limit": args.limit, "seed": args.seed,
                    "timeout_s": args.timeout, "memory_limit_gb": args.memory_limit,
                    "peer_layout": args.peer_layout, "repeats": args.repeats, "engines": engines},
        "versions": _versions(),
        "engines": info, "table": table, "common_schemas": len(common), "common_table": common_table,
        "coverage_by_split": by_split, "refusals_by_keyword": refusals, "errors_by_type": errors,
        "schemas": names, "outcomes": kept,
    }


def save(results: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(out)


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("llguidance", "xgrammar", "outlines-core", "tokenizers", "torch", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def report(results: dict) -> None:
    o = results["options"]
    print_table(f"{o['tokenizer']}: all {len(results['schemas'])} schemas", results["table"])
    print_table(f"{o['tokenizer']}: the {results['common_schemas']} schemas every engine covered",
                results["common_table"])
    print("\nCoverage by split: " + "; ".join(f"{e} " + ", ".join(f"{k} {v}" for k, v in splits.items())
                                           for e, splits in results["coverage_by_split"].items()))
    print("\nInstance layouts:")
    for engine, info in results["engines"].items():
        print(f"  {engine}: {info['layout']}")
    for engine, counts in results["refusals_by_keyword"].items():
        if engine in CANONMERGE_ENGINES and counts:
            print(f"\n{engine} refusals by keyword: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for engine, counts in results["errors_by_type"].items():
        if counts:
            print(f"\n{engine} errors and failures by type (keyword): "
                  + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for engine, row in results["table"].items():
        if row["mask_accept_mismatches"] or row["roundtrip_failures"]:
            print(f"\n{engine}: {row['mask_accept_mismatches']} walks whose masks disagreed with the acceptance "
                  f"check, {row['roundtrip_failures']} instance texts that did not read back as their data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="llama3", choices=["llama3", "gpt2"])
    parser.add_argument("--split", default=None,
                        help=f"comma-separated MaskBench splits ({', '.join(SPLITS)}); default Glaiveai2K,Github_easy "
                             "(--first-sight: Github_medium,Github_hard,Kubernetes,JsonSchemaStore)")
    parser.add_argument("--limit", type=int, default=100, help="schemas per split (0: all)")
    parser.add_argument("--seed", type=int, default=None,
                        help="sample --limit schemas per split at random with this seed (default: the first ones)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds for a schema's first compile (then (repeats + 2) x this for the rest)")
    parser.add_argument("--memory-limit", type=float, default=6.0, help="GB of RSS per engine worker")
    parser.add_argument("--repeats", type=int, default=3,
                        help="walks of each valid instance (fresh guide or matcher each); a step's time is the median")
    parser.add_argument("--engines", default=None,
                        help=f"comma-separated ({', '.join(ENGINES)}); default all (--first-sight: all but outlines-core)")
    parser.add_argument("--peer-layout", default="compact", choices=sorted(PEER_LAYOUTS),
                        help="the peers' instance text: compact (',' ':') or spaced (', ' ': ')")
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default bench/results/json_schema.json, --first-sight: "
                             "bench/results/json_schema_first_sight.json)")
    parser.add_argument("--verbose", action="store_true", help="print every failure, timeout and crash")
    parser.add_argument("--first-sight", action="store_true",
                        help="every schema renamed and seen for the first time, against a library warmed on other "
                             "schemas: time to the first mask, first-visit masks (bench/first_sight.py)")
    parser.add_argument("--warm-schemas", type=int, default=16,
                        help="--first-sight: schemas (Glaiveai2K and Github_easy, none of the timed) that warm the "
                             "library")
    parser.add_argument("--rename-seed", type=int, default=0, help="--first-sight: seed of the fresh property names")
    parser.add_argument("--library-memory", default="warm", choices=["warm", "empty"],
                        help="--first-sight: canonmerge's in-memory library before each schema: as the warm set left "
                             "it (a serving process), or empty (a fresh process on the warm library directory)")
    args = parser.parse_args()
    if args.limit == 0:
        args.limit = None
    if args.split is None:
        args.split = "Github_medium,Github_hard,Kubernetes,JsonSchemaStore" if args.first_sight else "Glaiveai2K,Github_easy"
    if args.engines is None:
        args.engines = ",".join(e for e in ENGINES if e not in LAZY_ENGINES
                                and not (args.first_sight and e == "outlines-core"))
    if args.out is None:
        args.out = Path(__file__).parent / "results" / ("json_schema_first_sight.json" if args.first_sight
                                                        else "json_schema.json")
    if args.first_sight:
        import first_sight

        results = first_sight.run(args)
        first_sight.report(results)
        save(results, args.out)
        print(f"wrote {args.out}")
        return
    results = run(args)
    report(results)
    save(results, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
