"""The ``canonmerge`` command line.

    canonmerge info [SOURCE]     load a tokenizer (default: SmolLM2-135M's, fetched on first use), print a summary
    canonmerge regex PATTERN     compile a regex to a byte-level DFA and print its size (``--dot`` prints DOT)
"""

from __future__ import annotations

import argparse
import sys
import time

from automata import CanonmergeError, from_regex, write_dot
from bpe import load_tokenizer
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
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except CanonmergeError as exc:
        print(f"canonmerge: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
