"""An SGLang grammar backend serving canonmerge guides: ``register_backend()`` at the top of the script that starts
SGLang, then ``--grammar-backend canonmerge`` (or ``sgl.Engine(..., grammar_backend="canonmerge")``).

SGLang asks a grammar backend for one grammar object per constraint (``dispatch_regex``, ``dispatch_json``),
caches it, and gives each request a ``copy()``; the scheduler then calls ``accept_token``/``rollback``, fills one
row of a shared vocabulary mask per request (``fill_vocab_mask``, or ``fill_vocab_mask_batched`` for the batch),
moves the mask to the GPU and applies it. Here a grammar object is a ``product.Matcher`` on a compiled guide, the
mask is canonmerge's packed int32 bitmask (rows SGLang leaves unfilled stay all ones: unconstrained), filled by
``product.fill_next_token_bitmasks`` and applied by ``product.apply_bitmask``. Regexes compile with
``product.compile_regex``; JSON Schemas with the ``compile_json`` given to ``register_backend`` — pass
``vegas.compile_schema`` (``product`` does not import the schema layer above it); ``"$$ANY$$"`` (SGLang's
``json_object`` mode) is the schema ``{}``.

Written against SGLang 0.5.23's ``sglang.srt.constrained.base_grammar_backend`` (``BaseGrammarObject``,
``BaseGrammarBackend``, ``register_grammar_backend``); not run in an SGLang server (SGLang does not install on a
CPU-only machine), driven through SGLang's own classes by tests/product/test_integrations.py where ``sglang``
imports.
Importing this module imports ``sglang`` and ``torch``. Leaves out: EBNF and structural tags (refused as
unsupported), jump-forward (SGLang's retokenizing jump-forward; ``Matcher.jump_forward_tokens`` has the forced
tokens), reasoning-model framing.
"""

from __future__ import annotations

import json

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    InvalidGrammarObject,
    register_grammar_backend,
)

from automata.errors import CanonmergeError
from bpe.automaton import compile_tokenizer
from product.compile import compile_regex
from product.runtime.kernels.device import apply_bitmask
from product.runtime.matcher import Matcher, fill_next_token_bitmasks

__all__ = ["CanonicalGrammar", "CanonicalGrammarBackend", "register_backend"]

MAX_ROLLBACK_TOKENS = 200  # as SGLang's xgrammar backend: speculative decoding rolls back rejected drafts


class CanonicalGrammar(BaseGrammarObject):
    """One request's position in a guide, as SGLang's scheduler drives it."""

    def __init__(self, guide):
        super().__init__()
        self.guide = guide
        self.matcher = Matcher(guide, max_rollback=MAX_ROLLBACK_TOKENS)

    def accept_token(self, token: int) -> None:
        if not self.matcher.is_terminated:
            self.matcher.accept_token(token)

    def rollback(self, k: int) -> None:
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device) -> torch.Tensor:
        # all ones: the rows SGLang does not fill (requests without a grammar) stay unconstrained; the guide's
        # words, whatever the model's (padded) vocabulary: apply_bitmask masks the columns past them
        return torch.full((batch_size, self.guide.num_words), -1, dtype=torch.int32)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries, vocab_mask: torch.Tensor) -> None:
        fill_next_token_bitmasks([entry.grammar.matcher for entry in entries], vocab_mask,
                                 [entry.row for entry in entries])

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_bitmask(logits, vocab_mask)

    def copy(self) -> "CanonicalGrammar":
        return CanonicalGrammar(self.guide)  # the compiled guide is shared; the state starts over

    def try_jump_forward(self, tokenizer):
        return None


class CanonicalGrammarBackend(BaseGrammarBackend):
    """Compiles SGLang's constraints into guides for one tokenizer (its canonical automaton built once, cached on
    disk by ``bpe.compile_tokenizer``)."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids=None, *, compile_json=None):
        super().__init__()
        self.canonical = compile_tokenizer(tokenizer)
        if vocab_size < self.canonical.vocab_size:
            raise ValueError(f"the model has {vocab_size} tokens, its tokenizer {self.canonical.vocab_size}")
        self.eos_token_ids = sorted(eos_token_ids) if eos_token_ids else None
        self.compile_json = compile_json

    def _grammar(self, compile_guide, key_string: str) -> BaseGrammarObject:
        try:
            return CanonicalGrammar(compile_guide())
        except (CanonmergeError, ValueError) as exc:
            return InvalidGrammarObject(f"canonmerge: {exc} ({key_string[:200]})")

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._grammar(lambda: compile_regex(key_string, self.canonical, eos_token_ids=self.eos_token_ids),
                             key_string)

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        if self.compile_json is None:
            return InvalidGrammarObject("canonmerge: JSON Schemas need register_backend(compile_json="
                                        "vegas.compile_schema)")
        schema = {} if key_string == "$$ANY$$" else json.loads(key_string)
        return self._grammar(lambda: self.compile_json(schema, self.canonical, eos_token_ids=self.eos_token_ids),
                             key_string)


def register_backend(name: str = "canonmerge", *, compile_json=None) -> None:
    """Make ``name`` an SGLang grammar backend serving canonmerge guides. ``compile_json``: ``(schema, canonical,
    eos_token_ids=...) -> Guide`` for JSON Schemas (``vegas.compile_schema``); without it JSON constraints are
    refused. Call it where SGLang's scheduler processes import it too (the top level of the launching script)."""

    def create(server_args, tokenizer, vocab_size, eos_token_ids=None):
        return CanonicalGrammarBackend(tokenizer, vocab_size, eos_token_ids, compile_json=compile_json)

    register_grammar_backend(name, create)
    try:  # the --grammar-backend choices (SGLang >= 0.5)
        from sglang.srt.server_args import add_grammar_backend_choices
    except ImportError:  # pragma: no cover - older SGLang
        return
    add_grammar_backend_choices([name])
