"""A vLLM logits processor (V1 engine) that keeps the requests that ask for it inside canonmerge guides.

Load the class into the engine (``LLM(model, logits_processors=[CanonicalLogitsProcessor])``, a fully qualified
name ``product.integrations.vllm:CanonicalLogitsProcessor`` to ``vllm serve --logits-processors``, or a
``vllm.logits_processors`` entry point); a request opts in through its sampling parameters:
``SamplingParams(extra_args={"canonmerge_regex": PATTERN})`` or ``{"canonmerge_json_schema": SCHEMA}`` (a dict
or its JSON text; ``vllm_xargs`` over the OpenAI API, flat as it requires). Guides compile once per constraint (kept for the engine's life) with the
canonical automaton of the model's tokenizer; JSON Schemas need a subclass that names the schema compiler, as
``product`` does not import the schema layer above it::

    class SchemaProcessor(CanonicalLogitsProcessor):
        compile_json = staticmethod(vegas.compile_schema)

vLLM tells the processor which requests join, leave or move in the persistent batch (``update_state``); each
request's ``Matcher`` follows its output ids (a list vLLM keeps appending to), and ``apply`` fills their rows of
a pinned bitmask (``product.fill_next_token_bitmasks``) and masks those rows of the logits on the GPU
(``product.apply_bitmask``), leaving other requests' rows untouched.

Written against the ``vllm.v1.sample.logits_processor.LogitsProcessor`` interface (``validate_params``,
``update_state``, ``apply``, ``is_argmax_invariant``) of the V1 model runner: the default up to vLLM 0.31; from 0.32
on Model Runner V2 is, and it refuses V1-interface classes, so run with ``VLLM_USE_V2_MODEL_RUNNER=0``. Not run in
an engine (vLLM does not install on a CPU-only machine); imported against vLLM 0.33.0's source and driven once by
hand with its ``BatchUpdate`` (docs/clients.md). Importing this module imports ``vllm``, ``torch`` and
``transformers``. Leaves out: speculative decoding (vLLM refuses custom logits processors with it), vLLM's
structured-output backends (``guided_decoding``: they need a patch to vLLM), the Model Runner V2 interface.
"""

from __future__ import annotations

import json

import torch
import transformers
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from bpe.automaton import compile_tokenizer
from product.compile import compile_regex
from product.runtime.guide import Guide
from product.runtime.kernels.device import apply_bitmask
from product.runtime.matcher import Matcher, allocate_token_bitmask, fill_next_token_bitmasks

__all__ = ["CanonicalLogitsProcessor"]

_KINDS = ("regex", "json_schema")  # a request's extra_args key: "canonmerge_" + kind


def _constraint(params) -> tuple[str, str] | None:
    """The request's ``("regex" | "json_schema", text)``, or None when it does not ask for canonmerge."""
    extra = getattr(params, "extra_args", None) or {}
    asked = [(kind, extra[f"canonmerge_{kind}"]) for kind in _KINDS if f"canonmerge_{kind}" in extra]
    if not asked:
        return None
    if len(asked) > 1:
        raise ValueError("a request takes one of extra_args canonmerge_regex and canonmerge_json_schema, not both")
    (kind, value), = asked
    return kind, value if isinstance(value, str) else json.dumps(value)


class _Request:
    __slots__ = ("matcher", "output_ids", "fed")

    def __init__(self, matcher: Matcher, output_ids: list[int]):
        self.matcher, self.output_ids, self.fed = matcher, output_ids, 0

    def catch_up(self) -> None:
        """Feed the matcher the ids vLLM appended since the last step."""
        for token in self.output_ids[self.fed:]:
            if self.matcher.is_terminated:
                break
            self.matcher.accept_token(token)
        self.fed = len(self.output_ids)


class CanonicalLogitsProcessor(LogitsProcessor):
    """Canonical masks for the requests whose ``extra_args`` carry ``canonmerge_regex`` or
    ``canonmerge_json_schema``; the other rows untouched."""

    #: ``(schema, canonical, eos_token_ids=...) -> Guide`` for ``"json_schema"`` requests (``vegas.compile_schema``)
    compile_json = None

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        constraint = _constraint(sampling_params)
        if constraint and constraint[0] == "json_schema" and cls.compile_json is None:
            raise ValueError("canonmerge JSON Schemas need a processor subclass with compile_json = "
                             "staticmethod(vegas.compile_schema)")

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        config = vllm_config.model_config
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            config.tokenizer, revision=config.tokenizer_revision, trust_remote_code=config.trust_remote_code)
        self.canonical = compile_tokenizer(tokenizer)
        self.device = device
        self._guides: dict[tuple[str, str], Guide] = {}
        self._requests: dict[int, _Request] = {}
        self._bitmask = allocate_token_bitmask(vllm_config.scheduler_config.max_num_seqs,
                                               self.canonical.vocab_size, pin_memory=is_pin_memory)

    def is_argmax_invariant(self) -> bool:
        return False  # masks change the greedy choice

    def _guide(self, constraint: tuple[str, str]) -> Guide:
        if constraint not in self._guides:
            kind, text = constraint
            if kind == "regex":
                self._guides[constraint] = compile_regex(text, self.canonical)
            else:
                self._guides[constraint] = type(self).compile_json(json.loads(text), self.canonical)
        return self._guides[constraint]

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is not None:
            for index in batch_update.removed:
                self._requests.pop(index, None)
            for index, params, _prompt_ids, output_ids in batch_update.added:
                constraint = _constraint(params)
                if constraint is None:
                    self._requests.pop(index, None)
                else:
                    self._requests[index] = _Request(Matcher(self._guide(constraint)), output_ids)
            for a, b, direction in batch_update.moved:
                first, second = self._requests.pop(a, None), self._requests.pop(b, None)
                if first is not None:
                    self._requests[b] = first
                if second is not None and direction == MoveDirectionality.SWAP:
                    self._requests[a] = second
        for request in self._requests.values():
            request.catch_up()

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._requests:
            return logits
        rows = sorted(self._requests)
        fill_next_token_bitmasks([self._requests[row].matcher for row in rows], self._bitmask, rows)
        return apply_bitmask(logits, self._bitmask[: logits.shape[0]], indices=rows)
