"""JSON Schema constraints, written as JSON or YAML, tokenized canonically; and the ``canonmerge`` command line.

The name comes from the *Vegas configurations* of the DirectMerge/CartesianMerge paper: pieces of a schema
fenced by boundaries no token crosses, so that each is compiled once per tokenizer, cached, and stitched into
the schema's guide.

Public: ``compile_schema`` (a schema -> a ``product.Guide``), ``format_instance`` (a value -> the one text that
guide accepts for it), ``schema_regex`` (the regex both are built on), ``SchemaError``,
``UnsupportedSchemaError``. The modules: ``vegas.layout`` (how values are written), ``vegas.schema`` (the
supported keywords and the regex walk), ``vegas.instances`` (``format_instance``), ``vegas.lexical`` and
``vegas.charset`` (strings, numbers, formats, patterns as regexes), ``vegas.token_graph`` (a guide's token
automaton, to look at) and ``vegas.cli`` (``canonmerge``).

    >>> import vegas
    >>> schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    >>> vegas.format_instance({"name": "Ada"}, schema)
    '{"name": "Ada"}'
    >>> vegas.format_instance({"name": "Ada"}, schema, style="yaml")
    'name: Ada'

A schema compiles into a guide stitched from fragments between hard token boundaries
(``product.compile_stitched``), each compiled once per tokenizer and kept in memory and on disk
(``product.FragmentStore``); a fragment holding a counted repetition (``maxLength: 100``...) is one too, compiled
with a counter. What it leaves out: a fragment whose regex is too long to write out; such a schema compiles as
one regex.
"""

from __future__ import annotations

from automata.budget import running
from automata.grammar import UnsupportedGrammarError
from automata.parse import plain
from product import (
    CompileBudget,
    FragmentStore,
    FragmentTooLongError,
    StitchError,
    compile_regex,
    compile_stitched,
    default_library_dir,
)
from product.grammar import compile_call_regexes
from vegas._gc_pause import gc_paused
from vegas.errors import SchemaError, UnsupportedSchemaError
from vegas.instances import format_instance
from vegas.schema import Compiler, schema_regex

__all__ = ["compile_schema", "format_instance", "schema_regex", "SchemaError", "UnsupportedSchemaError"]


def compile_schema(schema, canonical, *, style: str = "json", strict: bool = False, max_recursion: int | None = 3,
                   any_depth: int = 2, canonical_only: bool = True, max_states: int = 100_000,
                   max_transitions: int = 50_000_000, cache_size: int = 4096, eos_token_ids: list[int] | None = None,
                   library_dir=None, budget: CompileBudget | None = None, lazy: bool = False):
    """The guide of the texts of ``schema``'s instances in the layout of ``style`` (``"json"`` or ``"yaml"``),
    tokenized canonically for ``canonical``'s tokenizer (a ``bpe.compile_tokenizer`` automaton).

    ``schema``: a dict, a JSON string, or a class with ``model_json_schema()`` (pydantic). ``strict``: an object
    without ``additionalProperties`` admits no other keys (the standard admits any). ``max_recursion``: how many
    times a recursive ``$ref`` is unrolled; ``None`` (JSON): any depth, the recursive targets compiled as rules that
    call each other (a ``product.PushdownGuide``, built as it is walked; not stitched from the library). The bounded
    default stays: its guide is stitched from cached fragments and its masks are compiled rows, where a pushdown
    guide's first visit to each parser configuration costs milliseconds (docs/schemas.md). ``any_depth``: how deep
    values of ``true`` schemas nest. The other options (``eos_token_ids`` among them) are
    ``product.compile_regex``'s.

    The guide is stitched from fragments (``product.compile_stitched``) kept in memory and in the on-disk library
    ``library_dir`` (default ``<canonmerge cache>/fragments``; ``False``: memory only), so schemas sharing
    value types compile mostly from what earlier ones compiled. Where the schema cannot be cut into fragments
    (a fragment's regex too long to write out), it is compiled as one regex: same guide, slower. Python's cyclic
    garbage collector is paused while it runs (process-wide, as ``gc.disable``; enabled again after, if it was).

    ``budget`` (a ``product.CompileBudget``) bounds the whole compile's time and resident-memory growth and lets
    another thread cancel it; default (None) ``CompileBudget()``: 30 s and 4 GiB, so that a schema too large to
    compile fails in a server instead of running for minutes and tens of GB. Past it, a ``CompileBudgetError``
    (``CompileTimeoutError``, ``CompileMemoryError``, ``CompileCancelledError``) within milliseconds; the fragments
    compiled before are kept, none half-built, and the schema compiles again with a larger budget.

    ``lazy``: the fragments not already compiled (in memory or on disk) are built as the guide is walked
    (``product.runtime.lazy.LazyGuide``; fragments with counted repetitions excepted), each when the text first
    enters it, and kept in memory only: a new schema's compile is then its skeleton and first fragment, and a
    state's first visit costs up to a few milliseconds, entering a fragment its DFA (docs/design.md, "Liveness
    decided locally"; ``advance`` raises ``StateLimitError`` where that DFA is past ``max_states``, and
    ``FragmentTooLongError`` where a YAML fragment whose text goes on past a cut is too long to write).

    Raises ``UnsupportedSchemaError`` (a keyword not compiled exactly; ``.keyword`` and ``.pointer`` name it),
    ``SchemaError`` (a malformed schema, or one no instance satisfies), and ``compile_regex``'s errors.
    """
    # (the cyclic collector paused: a compile's temporaries die by reference count, not in collections it
    # starts, ~10 % of a warm compile; vegas._gc_pause)
    with gc_paused(), running(budget):
        return _compile_schema(schema, canonical, style=style, strict=strict, max_recursion=max_recursion,
                               any_depth=any_depth, library_dir=library_dir,
                               options=dict(canonical_only=canonical_only, max_states=max_states,
                                            max_transitions=max_transitions, cache_size=cache_size,
                                            eos_token_ids=eos_token_ids, lazy=lazy and canonical_only))


def _compile_schema(schema, canonical, *, style, strict, max_recursion, any_depth, library_dir, options):
    title = schema.get("title", "schema") if isinstance(schema, dict) else "schema"
    options = dict(options, name=f"{title} ({style})")
    if max_recursion is None:
        compiler = Compiler.load(schema, style, strict=strict, max_recursion=None, any_depth=any_depth)
        root = compiler.document()
        if compiler.calls:  # recursive: its targets called at any depth
            if not options["canonical_only"]:
                raise UnsupportedSchemaError("recursion at any depth (max_recursion=None) gives canonical masks only",
                                             keyword="$ref", pointer=next(iter(compiler.calls)))
            try:
                return compile_call_regexes(root, compiler.call_bodies(), canonical,
                                            eos_token_ids=options["eos_token_ids"], max_states=options["max_states"],
                                            cache_size=options["cache_size"], name=options["name"])
            except UnsupportedGrammarError as exc:  # (no pre-tokenizer splits; a $ref that recurses before text)
                raise UnsupportedSchemaError(f"{exc}; pass max_recursion=N", keyword="$ref",
                                             pointer=next(iter(compiler.calls))) from None
        max_recursion = 3  # (no recursion: the stitched guide, as for any schema)
    store = None if library_dir is False else FragmentStore(library_dir or default_library_dir())
    # "anything" values as leaves (each compiles once) and the byte-pair cuts first; in YAML, where a fragment
    # is then too long to write (a nested block on Llama-3, whose line breaks share tokens with the indentation),
    # "anything" written out and cut finely (compile_stitched's fine_cuts): slower to cut, but fragments of lines
    for any_leaf in ((True, False) if style == "yaml" else (True,)):
        compiler = Compiler.load(schema, style, strict=strict, max_recursion=max_recursion, any_depth=any_depth,
                                 leaves=True, any_leaf=any_leaf, loops=True)
        skeleton = compiler.document()
        try:
            return compile_stitched(skeleton, compiler.leaves, canonical, store=store, fine_cuts=not any_leaf,
                                    leaf_exceptions=compiler.exceptions, **options)
        except FragmentTooLongError:
            continue
        except StitchError:
            break
        # (a fragment past max_states raises StateLimitError: the whole regex holds its text and more, and took
        # 24 s to fail the same way on Kubernetes kb_863 in YAML)
    return compile_regex(compiler.expand(plain(skeleton)), canonical, **options)
