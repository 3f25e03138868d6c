"""``compile_regex``: which guide a regex compiles to — with a counter beside the state, unrolled, or built on first
visit.

On request (``lazy=True``), where the tokenizer's pre-tokenizer splits text into pieces (every byte-level BPE does;
SentencePiece BPE such as Mistral's does not), the guide is a ``LazyGuide`` (``product.runtime.lazy``): nodes, rows
and liveness built as the generation visits them, so the first mask costs milliseconds (docs/design.md, "Liveness
decided locally"), and each node's first visit costs up to a few milliseconds more. Otherwise a regex with a
counted repetition ``x{m,n}`` (``n - m`` at least ``product.compiler.counted.MIN_COUNT``) is tried as a
``CountedGuide`` first (``product.counted``: the loop compiled once, its iteration count carried in the state); where
that construction does not apply, or no budget horizon passes its exactness check, the regex compiles to a plain
``Guide`` over its token transitions (``product.compiler``), as every other regex does.

Leaves out: the guides themselves (``product.runtime.guide``, ``product.counted``) and schemas, whose skeletons are
cut into fragments (``product.stitched``).
"""

from __future__ import annotations

from automata import from_regex
from automata.budget import CompileBudget, running
from bpe.automaton import CanonicalAutomaton
from product.compiler.tables import guide_eos, vocabulary_trie
from product.compiler.token_regex import TokenTransitions
from product.counted import compile_counted
from product.runtime.guide import Guide
from product.runtime.lazy import LazyGuide

__all__ = ["compile_regex"]



def compile_regex(pattern: str, canonical: CanonicalAutomaton, *, canonical_only: bool = True,
                  max_states: int = 100_000, max_transitions: int = 50_000_000,
                  cache_size: int = 4096, eos_token_ids: list[int] | None = None,
                  name: str | None = None, budget: CompileBudget | None = None, lazy: bool = False) -> "Guide":
    """The guide of the strings ``re.fullmatch(pattern, ·)`` accepts, tokenized canonically for ``canonical``'s
    tokenizer (or in any way, with ``canonical_only=False``), ended by ``eos_token_ids`` (default: the
    tokenizer's EOS).

    Errors: ``RegexError`` (syntax interegular cannot parse or does not support), ``EmptyLanguageError`` (no
    string matches, or none has a tokenization over this vocabulary), ``StateLimitError`` (the regex DFA or the
    product exceeds ``max_states`` nodes, or the token transitions exceed ``max_transitions`` entries),
    ``bpe.MissingEOSError`` (no EOS known: pass ``eos_token_ids=``). ``name`` (default: the pattern) names the
    guide in its errors.

    ``budget`` bounds the compile's time and memory and lets another thread cancel it (``CompileBudget``; None:
    the enclosing compile's, or ``CompileBudget()``: 30 s and 4 GiB). Past it, ``CompileTimeoutError``,
    ``CompileMemoryError`` or ``CompileCancelledError`` (all ``CompileBudgetError``), within milliseconds.

    ``lazy``: build the guide as it is walked (a ``LazyGuide``: the first mask in milliseconds whatever the
    regex; a node's first visit costs up to a few milliseconds, where the default compiles every node first and
    then serves cached rows). Canonical masks only (``ValueError`` with ``canonical_only=False``); for a tokenizer
    without pre-tokenizer splits the whole product is compiled anyway (nothing is settled locally there).
    """
    if lazy and not canonical_only:
        raise ValueError("a lazy guide serves canonical masks only: pass lazy=False with canonical_only=False")
    guide_eos(canonical, eos_token_ids)  # before the expensive part
    with running(budget):
        name = pattern if name is None else name
        if lazy and LazyGuide.helps(canonical):
            return LazyGuide(from_regex(pattern, max_states=max_states), canonical, eos_token_ids=eos_token_ids,
                             cache_size=cache_size, name=name)
        # counted repetitions: a counter beside the state, where that construction applies
        counted = compile_counted(pattern, canonical, canonical_only=canonical_only, max_states=max_states,
                                  max_transitions=max_transitions, cache_size=cache_size, name=name,
                                  eos_token_ids=eos_token_ids)
        if counted is not None:
            return counted
        dfa = from_regex(pattern, max_states=max_states)
        transitions = TokenTransitions.build(dfa, vocabulary_trie(canonical), max_entries=max_transitions,
                                             compact=True)
        return Guide(transitions, canonical, canonical_only=canonical_only, max_states=max_states,
                     cache_size=cache_size, name=name, eos_token_ids=eos_token_ids)

