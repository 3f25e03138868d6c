"""The ``canonmerge`` command line.

    canonmerge generate --regex PATTERN "prompt"
                                 write text that satisfies a constraint (``--regex``, ``--schema``, ``--grammar FILE``:
                                 GBNF or Lark) with a real model (default: SmolLM2-135M-Instruct), in the tokenizer's
                                 canonical tokens; report tokens, forced tokens, forward passes skipped and time per
                                 token
    canonmerge graph PATTERN -o FILE
                                 export the token-level canonical automaton of a small regex (GraphML, DOT; SVG/PNG
                                 through Graphviz's dot when it is installed)
    canonmerge compile-schema SCHEMA
                                 compile a JSON Schema (``--style json|yaml``) for a tokenizer and print the regex
                                 size, fragments reused and compiled, guide size and compile time
    canonmerge regex PATTERN     compile a regex to a byte-level DFA and print its size (``--dot`` prints DOT)
    canonmerge compile-tokenizer [SOURCE]
                                 build (or load from the cache) a tokenizer's canonical automaton and print its size
    canonmerge info [SOURCE]     load a tokenizer (default: SmolLM2-135M's, fetched on first use), print a summary

Bad input (a missing file, an invalid regex, an unknown tokenizer, an unreadable model) exits with status 2 and
one line ``canonmerge: error: ...`` on stderr, no traceback. Long steps show a progress line on stderr when it is
a terminal. Leaves out: batching and serving (see ``product.LogitsProcessor``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import mmap
import re
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import product
import vegas
from automata import CanonmergeError, from_regex, write_dot
from automata.grammar import parse_grammar
from automata.grammar.pushdown import call_automaton
from bpe import compile_tokenizer, load_tokenizer
from bpe.assets import DEFAULT_TOKENIZER, TOKENIZERS, asset_path, reference_runtime, tokenizer_source
from bpe.automaton import cache_path
from bpe.lm_cache import load_causal_lm
from bpe.loaders import to_runtime_tokenizer
from vegas._kernels import kernels_ready, warm_kernels
from vegas._progress import Progress

_DEFAULT_MODEL = "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # bpe.assets name of the default model


class _CliError(Exception):
    """Bad command-line input; printed as one line, exit status 2."""


# ------------------------------------------------------------------------------------------------ inputs


def _source(arg: str | None):
    """A tokenizer name (one of ``TOKENIZERS``) or an existing path, as ``load_tokenizer`` takes it."""
    name = arg or DEFAULT_TOKENIZER
    if name in TOKENIZERS:
        return tokenizer_source(name)
    if not Path(name).exists():
        raise _CliError(f"unknown tokenizer {name!r}: not one of {', '.join(TOKENIZERS)} nor an existing file or directory")
    return name


def _canonical(source, label: str):
    """The tokenizer model and its canonical automaton (cached on disk), with a progress line."""
    with Progress(f"tokenizer {label}") as progress:
        model = load_tokenizer(source)
        automaton = compile_tokenizer(model, progress=progress.update)
    return model, automaton


def _runtime(name: str | None, model):
    """The HF ``tokenizers`` runtime that encodes prompts and checks outputs, in continuation mode."""
    if name in TOKENIZERS:
        return reference_runtime(name, model)
    return to_runtime_tokenizer(model)


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _CliError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _CliError(f"cannot read {what} file {path}: {exc}") from None


# ----------------------------------------------------------------------------------------- model and chat


def _model_path(arg: str | None) -> Path:
    if arg is None:
        return asset_path(_DEFAULT_MODEL)
    path = Path(arg)
    if not path.exists():
        raise _CliError(f"model {arg} does not exist (a .gguf file or a transformers model directory)")
    return path


def _load_model(path: Path):
    """A causal LM from a GGUF file (its dequantised weights cached: ``bpe.lm_cache``) or a local transformers
    directory, offline, CPU, eval mode."""
    try:
        # transformers' GGUF reader draws its own tqdm bar whatever its settings say: it goes to a buffer, and the
        # caller's Progress line (which holds the real stderr) shows the load instead.
        with contextlib.redirect_stderr(io.StringIO()):
            return load_causal_lm(path)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, struct.error... on bad files
        raise _CliError(f"cannot load model {path}: {type(exc).__name__}: {exc}") from None


_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _gguf_string(path: Path, key: str) -> str | None:
    """One string from a GGUF file's metadata, read by skipping over the others (the ``gguf`` package's reader
    parses all 100k vocabulary entries first: ~6 s for SmolLM2, against ~50 ms here)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise _CliError(f"{path} is not a GGUF file")
        _version, _tensors, count = struct.unpack_from("<IQQ", m, 4)
        pos = 24

        def string(pos: int) -> tuple[bytes, int]:
            (n,) = struct.unpack_from("<Q", m, pos)
            return m[pos + 8: pos + 8 + n], pos + 8 + n

        def skip(kind: int, pos: int) -> int:
            if kind in _GGUF_SCALAR:
                return pos + _GGUF_SCALAR[kind]
            if kind == _GGUF_STRING:
                return string(pos)[1]
            if kind == _GGUF_ARRAY:
                inner, n = struct.unpack_from("<IQ", m, pos)
                pos += 12
                if inner in _GGUF_SCALAR:
                    return pos + n * _GGUF_SCALAR[inner]
                for _ in range(n):
                    pos = skip(inner, pos)
                return pos
            raise _CliError(f"{path}: unknown GGUF value type {kind}")

        for _ in range(count):
            name, pos = string(pos)
            (kind,) = struct.unpack_from("<I", m, pos)
            pos += 4
            if name.decode("utf-8", "replace") == key and kind == _GGUF_STRING:
                return string(pos)[0].decode("utf-8")
            pos = skip(kind, pos)
    return None


def _chat_template(path: Path) -> str:
    """The model's chat template: GGUF metadata ``tokenizer.chat_template``, or a transformers directory's
    ``chat_template.jinja`` / ``tokenizer_config.json``."""
    template = None
    if path.is_file():
        template = _gguf_string(path, "tokenizer.chat_template")
    else:
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text(encoding="utf-8")
        elif (path / "tokenizer_config.json").exists():
            template = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    if not isinstance(template, str):
        raise _CliError(f"model {path} carries no chat template; leave out --chat")
    return template


def _chat_prompt(template: str, prompt: str, tokenizer) -> str:
    """The prompt as one user turn followed by the assistant's header, rendered the way transformers does."""
    # (jinja2 deferred: only --chat needs it)
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    special = lambda ids: tokenizer.token_strings[ids[0]] if ids else ""  # noqa: E731
    try:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(template).render(messages=[{"role": "user", "content": prompt}],
                                                add_generation_prompt=True, bos_token="",
                                                eos_token=special(sorted(tokenizer.eos_token_ids)))
    except TemplateError as exc:
        raise _CliError(f"the model's chat template failed: {exc}") from None


# ------------------------------------------------------------------------------------------- constraints


def _warm_kernels(canonical) -> float | None:
    """Compile the numba kernels before the first constraint of a fresh install (``vegas._kernels``), with a
    progress line: the seconds it took, or None where they were compiled already."""
    if kernels_ready():
        return None
    with Progress("compiling kernels, once for this install") as compiling:
        warm_kernels(canonical)
    return compiling.elapsed


def _check_regex(pattern: str) -> str:
    """Fail early, with Python's own message, on a pattern that is not a regular expression at all."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _CliError(f"invalid regex {pattern!r}: {exc}") from None
    return pattern


def _regex_guide(pattern: str, canonical, canonical_only: bool, lazy: bool = False):
    return product.compile_regex(pattern, canonical, canonical_only=canonical_only, lazy=lazy and canonical_only)


def _grammar_syntax(path: str, syntax: str | None) -> str:
    """--syntax, or the grammar file's extension (.gbnf, .lark)."""
    if syntax is not None:
        return syntax
    suffix = Path(path).suffix.lower()
    if suffix not in (".gbnf", ".lark"):
        raise _CliError(f"cannot tell the syntax of grammar file {path} from its extension: name it .gbnf or .lark, "
                        "or pass --syntax")
    return suffix[1:]


# ---- schemas ---------------------------------------------------------------------------------------------
def _read_schema(path: str):
    text = _read_text(path, "schema")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _CliError(f"schema file {path} is not valid JSON: {exc}") from None


def _constraint(args: argparse.Namespace):
    """Read and check the constraint's input (cheap), so that bad input fails before any slow step. Returns a
    function of (canonical automaton, canonical_only) that compiles the guide (``--lazy``: built as it is walked,
    canonical masks only)."""
    lazy = getattr(args, "lazy", False)
    if args.schema is not None:
        schema, style = _read_schema(args.schema), args.format or "json"
        vegas.schema_regex(schema, style)  # an unsupported or malformed schema fails before any slow step
        return lambda canonical, canonical_only: vegas.compile_schema(schema, canonical, style=style,
                                                                      canonical_only=canonical_only, lazy=lazy)
    if args.format is not None:
        raise _CliError("--format applies to --schema (a regex fixes the format itself)")
    if args.grammar is not None:
        text, syntax = _read_text(args.grammar, "grammar"), _grammar_syntax(args.grammar, args.syntax)
        depth = args.max_depth
        # a bad grammar fails here, before any slow step: its rules written (a recursive one's as its call automaton,
        # where left recursion fails) or, with a depth bound, its regex
        if depth is None:
            call_automaton(parse_grammar(text, syntax))
        else:
            product.grammar_regex(text, syntax=syntax, max_depth=depth)
        return lambda canonical, canonical_only: product.compile_grammar(
            text, canonical, syntax=syntax, max_depth=depth, canonical_only=canonical_only, lazy=lazy and canonical_only)
    if args.syntax is not None or args.max_depth is not None:
        raise _CliError("--syntax and --max-depth apply to --grammar")
    pattern = args.regex if args.regex is not None else _read_text(args.regex_file, "regex").rstrip("\n")
    _check_regex(pattern)
    return lambda canonical, canonical_only: _regex_guide(pattern, canonical, canonical_only, lazy)


# ------------------------------------------------------------------------------------------------ commands


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
    with Progress("canonical automaton") as progress:
        automaton = compile_tokenizer(model, args.cache_dir, progress=progress.update)
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


def _compile_schema(args: argparse.Namespace) -> int:
    schema = _read_schema(args.schema)
    started = time.perf_counter()
    regex = vegas.schema_regex(schema, args.style)
    to_regex = time.perf_counter()
    _, canonical = _canonical(_source(args.tokenizer), args.tokenizer or DEFAULT_TOKENIZER)
    kernels = _warm_kernels(canonical)
    loaded = time.perf_counter()
    store = product.FragmentStore(product.default_library_dir())
    with Progress("schema"):
        guide = vegas.compile_schema(schema, canonical, style=args.style)
    done = time.perf_counter()
    print(f"schema            {args.schema} ({args.style})")
    print(f"regex             {len(regex)} characters in {1e3 * (to_regex - started):.1f} ms")
    if isinstance(guide, product.StitchedGuide):
        print(f"fragments         {guide.fragments_reused} reused, {guide.fragments_compiled} compiled "
              f"({guide.num_fragments} distinct)")
    else:
        print("fragments         none: compiled as one regex (the skeleton could not be cut: StitchError)")
    print(f"guide             {guide.num_nodes} nodes, {guide.memory_bytes / 2**20:.1f} MiB, compiled in "
          f"{1e3 * (done - loaded):.1f} ms (tokenizer loaded in {loaded - to_regex - (kernels or 0):.2f} s)")
    if kernels is not None:
        print(f"kernels           compiled in {kernels:.1f} s, once for this install (numba caches them on disk)")
    print(f"library           {store.directory}: {store.count()} fragments, {store.size_bytes() / 2**20:.1f} MiB")
    return 0


def _show_tokens(pieces: list[str], forced: list[bool], limit: int = 48) -> str:
    shown = [json.dumps(p, ensure_ascii=False) + ("*" if f else "") for p, f in zip(pieces[:limit], forced)]
    more = f" … ({len(pieces) - limit} more)" if len(pieces) > limit else ""
    return " ".join(shown) + more


def _forced_positions(guide, token_ids: list[int]) -> list[bool]:
    """Which tokens of a generation the guide forced (replayed: a forced chain starts wherever the state has one)."""
    marks, state, i = [], guide.initial_state, 0
    while i < len(token_ids):
        chain = guide.forced_tokens(state)
        if chain and tuple(token_ids[i: i + len(chain)]) == chain[: len(token_ids) - i]:
            marks += [True] * min(len(chain), len(token_ids) - i)
        else:
            chain = (token_ids[i],)
            marks.append(False)
        for t in chain[: len(token_ids) - i]:
            state = guide.advance(state, t)
        i += len(chain)
    return marks


def _generate(args: argparse.Namespace) -> int:
    if args.max_tokens < 1:
        raise _CliError(f"--max-tokens must be at least 1, not {args.max_tokens}")
    if args.temperature <= 0:
        raise _CliError(f"--temperature must be positive, not {args.temperature}")
    compile_guide = _constraint(args)
    model_path = _model_path(args.model)
    tokenizer_arg = args.tokenizer or (None if args.model is None else str(model_path))
    tokenizer, canonical = _canonical(_source(tokenizer_arg), tokenizer_arg or DEFAULT_TOKENIZER)
    runtime = _runtime(tokenizer_arg or DEFAULT_TOKENIZER, tokenizer)
    kernels = _warm_kernels(canonical)
    with Progress("constraint") as compiling:
        guide = compile_guide(canonical, not args.any_tokenization)
    prompt = _chat_prompt(_chat_template(model_path), args.prompt, tokenizer) if args.chat else args.prompt
    prompt_ids = runtime.encode(prompt, add_special_tokens=False).ids

    import torch  # (deferred: torch takes seconds to import, and only generate needs it)

    with Progress(f"model {model_path.name}") as loading:
        model = _load_model(model_path)
    rows = model.get_input_embeddings().weight.shape[0]
    if rows < canonical.vocab_size:
        raise _CliError(f"model {model_path} has {rows} token embeddings but the tokenizer has "
                        f"{canonical.vocab_size} tokens: they do not belong together (pass --tokenizer)")
    generator = None
    if args.seed is not None:
        torch.manual_seed(args.seed)
        generator = torch.Generator().manual_seed(args.seed)
    with Progress("generating") as generating:
        result = product.generate(model, guide, prompt_ids, max_new_tokens=args.max_tokens, do_sample=args.sample,
                                  temperature=args.temperature, generator=generator)
    text = runtime.decode(result.token_ids, skip_special_tokens=False)
    canonical_ok = runtime.encode(text, add_special_tokens=False).ids == result.token_ids
    pieces = [runtime.decode([t], skip_special_tokens=False) for t in result.token_ids]
    forced = _forced_positions(guide, result.token_ids)
    n = len(result.token_ids)
    per_token = generating.elapsed / max(1, n)
    report = {
        "text": text, "token_ids": result.token_ids, "tokens": pieces, "forced": forced,
        "forced_tokens": result.forced_tokens, "forward_passes": result.forward_passes,
        "skipped_passes": result.skipped_passes, "finished": result.finished, "canonical": canonical_ok,
        "seconds": {"generation": generating.elapsed, "per_token": per_token, "model_load": loading.elapsed,
                    "constraint_compile": compiling.elapsed, "kernels_compile": kernels},
    }
    if args.print_json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(text)
    err = sys.stderr
    print(f"tokens          {n}: {_show_tokens(pieces, forced)}", file=err)
    print(f"forced tokens   {result.forced_tokens} of {n} (marked *): the constraint left one choice, "
          "so the model was not asked", file=err)
    print(f"forward passes  {result.forward_passes} ({result.skipped_passes} skipped against one per token)", file=err)
    print(f"time per token  {per_token * 1e3:.1f} ms ({n} tokens in {generating.elapsed:.2f} s; model loaded in "
          f"{loading.elapsed:.1f} s, constraint compiled in {compiling.elapsed:.2f} s)", file=err)
    if kernels is not None:
        print(f"kernels         compiled in {kernels:.1f} s, once for this install (numba caches them on disk)",
              file=err)
    print(f"canonical       {'yes' if canonical_ok else 'no'}: the tokenizer re-encodes the text to "
          f"{'the same' if canonical_ok else 'other'} tokens", file=err)
    if not result.finished:
        print(f"canonmerge: error: stopped at --max-tokens {args.max_tokens} before the constraint was complete",
              file=err)
        return 1
    return 0


def _graph(args: argparse.Namespace) -> int:
    from vegas import token_graph  # deferred: it imports networkx (~0.3 s), which only this command needs

    suffix = Path(args.output).suffix.lower() if args.output else ".dot"
    if suffix not in (".graphml", ".dot", ".gv", ".svg", ".png", ".pdf"):
        raise _CliError(f"cannot write {args.output}: the output ends in .graphml, .dot, .svg, .png or .pdf")
    dot = shutil.which("dot")
    if suffix in (".svg", ".png", ".pdf") and dot is None:
        raise _CliError(f"rendering {suffix} needs Graphviz's `dot` on PATH; write .graphml or .dot instead")
    _check_regex(args.pattern)
    tokenizer, canonical = _canonical(_source(args.tokenizer), args.tokenizer or DEFAULT_TOKENIZER)
    guide = _regex_guide(args.pattern, canonical, not args.any_tokenization)
    automaton = token_graph.token_automaton(guide, max_states=args.max_states)
    graph = token_graph.to_networkx(automaton, canonical.token_bytes)
    if args.output is None:
        sys.stdout.write(token_graph.write_dot(graph))
    elif suffix == ".graphml":
        token_graph.write_graphml(graph, args.output)
    elif suffix in (".dot", ".gv"):
        token_graph.write_dot(graph, args.output)
    else:
        done = subprocess.run([dot, f"-T{suffix[1:]}", "-o", args.output], input=token_graph.write_dot(graph),
                              text=True, capture_output=True)
        if done.returncode != 0:
            raise _CliError(f"Graphviz's dot failed: {' '.join(done.stderr.split()) or f'exit status {done.returncode}'}")
    try:
        count = f"{len(automaton.sequences(10_000))} token sequences"
    except ValueError as exc:  # infinite, or more than 10,000
        count = str(exc).replace("language is", "language:")
    where = f" -> {args.output}" if args.output else ""
    print(f"{automaton.dfa.num_states} states, {graph.number_of_edges()} token edges, {count}{where}",
          file=sys.stderr if args.output is None else sys.stdout)
    return 0


# ---------------------------------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="canonmerge", description="Structured generation that is exact at the "
                                     "token level: constraints tokenized canonically, as the tokenizer itself would.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = f"one of {', '.join(TOKENIZERS)} or a tokenizer file/directory"

    gen = sub.add_parser("generate", help="write text that satisfies a constraint with a real model",
                         description="Write text that satisfies a constraint with a causal LM, in the tokenizer's "
                         "canonical tokens. The text goes to stdout, the report (tokens, forced tokens, forward "
                         "passes, time per token) to stderr.")
    gen.add_argument("prompt", help="the prompt (raw text, or the user's turn with --chat)")
    what = gen.add_mutually_exclusive_group(required=True)
    what.add_argument("--regex", metavar="PATTERN", help="the output fullmatches this regular expression")
    what.add_argument("--regex-file", metavar="FILE", help="read the regular expression from a file")
    what.add_argument("--schema", metavar="FILE", help="the output is an instance of this JSON Schema file")
    what.add_argument("--grammar", metavar="FILE", help="the output is a string of this grammar (GBNF or Lark; "
                      "recursion at any depth)")
    gen.add_argument("--syntax", choices=("gbnf", "lark"), help="with --grammar: its syntax (default: from the "
                     "file's extension, .gbnf or .lark)")
    gen.add_argument("--max-depth", type=int, metavar="N", help="with --grammar: accept recursion nested at most N "
                     "references deep only, compiled as a regex (opt-in)")
    gen.add_argument("--format", choices=("json", "yaml"), help="with --schema: write JSON or YAML (default json)")
    gen.add_argument("--model", metavar="PATH", help="a .gguf file or a transformers directory "
                     "(default: SmolLM2-135M-Instruct, fetched on first use)")
    gen.add_argument("--tokenizer", metavar="NAME", help=f"{names} (default: the model's)")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    gen.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    gen.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    gen.add_argument("--seed", type=int, help="random seed for --sample")
    gen.add_argument("--any-tokenization", action="store_true",
                     help="allow every tokenization of the text (what other engines' masks do), not only the canonical one")
    gen.add_argument("--lazy", action="store_true", help="build the guide as it is walked: the first mask in "
                     "milliseconds (a schema: its new fragments' DFAs), a state's first visit up to a few ms")
    gen.add_argument("--max-tokens", type=int, default=256, help="stop after this many tokens (default 256)")
    gen.add_argument("--print-json", action="store_true",
                     help="print one JSON object (text, token ids, tokens, forced, timings) instead of the text")
    gen.set_defaults(run=_generate)

    graph = sub.add_parser("graph", help="export the token-level canonical automaton of a small regex",
                           description="Export the token-level automaton of a small regex: every path from the "
                           "start to a double circle is one canonical tokenization of a matching string.")
    graph.add_argument("pattern")
    graph.add_argument("-o", "--output", metavar="FILE",
                       help="out.graphml, out.dot, or out.svg/.png/.pdf through Graphviz (default: DOT on stdout)")
    graph.add_argument("--tokenizer", metavar="NAME", help=f"{names} (default: {DEFAULT_TOKENIZER})")
    graph.add_argument("--any-tokenization", action="store_true", help="every tokenization, not only the canonical one")
    graph.add_argument("--max-states", type=int, default=5_000, help="refuse larger automata (default 5000)")
    graph.set_defaults(run=_graph)

    schema = sub.add_parser("compile-schema", help="compile a JSON Schema to a guide and print its size",
                            description="Compile a JSON Schema (written as JSON or YAML) for a tokenizer and print "
                            "the regex size, guide nodes, memory and compile time.")
    schema.add_argument("schema", metavar="SCHEMA", help="a JSON Schema file")
    schema.add_argument("--style", choices=("json", "yaml"), default="json", help="the layout (default json)")
    schema.add_argument("--tokenizer", metavar="NAME", help=f"{names} (default: {DEFAULT_TOKENIZER})")
    schema.set_defaults(run=_compile_schema)

    regex = sub.add_parser("regex", help="compile a regular expression to a byte-level DFA")
    regex.add_argument("pattern")
    regex.add_argument("--dot", action="store_true", help="print the DFA as Graphviz DOT")
    regex.set_defaults(run=_regex)

    compile_ = sub.add_parser("compile-tokenizer", help="build or load a tokenizer's canonical automaton")
    compile_.add_argument("source", nargs="?", help=names)
    compile_.add_argument("--cache-dir", help="where automata are cached (default: <canonmerge cache>/automata)")
    compile_.add_argument("--rebuild", action="store_true", help="ignore a cached automaton")
    compile_.set_defaults(run=_compile_tokenizer)

    info = sub.add_parser("info", help="load a tokenizer and print its summary")
    info.add_argument("source", nargs="?", help=names)
    info.set_defaults(run=_info)
    return parser


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", str(text)).strip()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except _CliError as exc:
        message = _one_line(exc)
    except CanonmergeError as exc:
        message = f"{type(exc).__name__}: {_one_line(exc)}"
    except OSError as exc:  # an output path that cannot be written, a cache directory that cannot be created
        message = _one_line(f"{exc.strerror or type(exc).__name__}: {exc.filename or exc}")
    except KeyboardInterrupt:
        print("canonmerge: interrupted", file=sys.stderr)
        return 130
    print(f"canonmerge: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
