"""The ``canonmerge`` command line.

    canonmerge info [SOURCE]     load a tokenizer (default: SmolLM2-135M's, fetched on first use), print a summary
    canonmerge regex PATTERN     compile a regex to a byte-level DFA and print its size (``--dot`` prints DOT)
    canonmerge compile-tokenizer [SOURCE]
                                 build (or load from the cache) a tokenizer's canonical automaton and print its size
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from automata import CanonmergeError, from_regex, write_dot
from bpe import compile_tokenizer, load_tokenizer
from bpe.automaton import cache_path
from bpe.assets import DEFAULT_TOKENIZER, TOKENIZERS, tokenizer_source


def _source(arg: str | None):
    name = arg or DEFAULT_TOKENIZER
    return tokenizer_source(name) if name in TOKENIZERS else name


def _info(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    source = _source(args.source)
    model = load_tokenizer(source)
    print(f"source          {source}")
    print(model.summary())
    print(f"loaded in       {time.perf_counter() - started:.2f} s")
    return 0


def _regex(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    dfa = from_regex(args.pattern)
    elapsed = time.perf_counter() - started
    if args.dot:
        sys.stdout.write(write_dot(dfa))
    else:
        print(f"{dfa.num_states} states, {dfa.num_transitions} transitions over UTF-8 bytes, {elapsed * 1e3:.1f} ms")
    return 0


def _compile_tokenizer(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    model = load_tokenizer(_source(args.source))
    loaded = time.perf_counter()
    path = cache_path(model, args.cache_dir)
    if args.rebuild:
        path.unlink(missing_ok=True)
    cached = path.exists()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    automaton = compile_tokenizer(model, args.cache_dir, progress=progress)
    done = time.perf_counter()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"vocabulary        {automaton.vocab_size} tokens")
    print(f"merge classes     {automaton.num_merge_classes}")
    print(f"contexts          {automaton.num_contexts} ({automaton.num_open_contexts} open)")
    print(f"forbidden entries {automaton.forbidden_entries}")
    print(f"{'loaded' if cached else 'built':<17} in {done - loaded:.2f} s (tokenizer loaded in {loaded - started:.2f} s)")
    print(f"peak memory       {peak_mib:.0f} MiB")
    print(f"cache             {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="canonmerge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="load a tokenizer and print its summary")
    info.add_argument("source", nargs="?", help=f"a tokenizer file/directory or one of {', '.join(TOKENIZERS)}")
    info.set_defaults(run=_info)
    regex = sub.add_parser("regex", help="compile a regular expression to a byte-level DFA")
    regex.add_argument("pattern")
    regex.add_argument("--dot", action="store_true", help="print the DFA as Graphviz DOT")
    regex.set_defaults(run=_regex)
    compile_ = sub.add_parser("compile-tokenizer", help="build or load a tokenizer's canonical automaton")
    compile_.add_argument("source", nargs="?", help=f"a tokenizer file/directory or one of {', '.join(TOKENIZERS)}")
    compile_.add_argument("--cache-dir", help="where automata are cached (default: <canonmerge cache>/automata)")
    compile_.add_argument("--rebuild", action="store_true", help="ignore a cached automaton")
    compile_.set_defaults(run=_compile_tokenizer)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except CanonmergeError as exc:
        print(f"canonmerge: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
