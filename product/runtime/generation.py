"""Masks on torch devices, a ``transformers`` logits processor, and generation that skips forced steps.

The guide computes packed masks on the CPU (``Guide.fill_bitmask``: int32 words, bit ``t % 32`` of word
``t // 32``); here they are copied to the logits' device in one transfer per step and applied in one pass
(``product.runtime.kernels.device``: a Triton kernel on CUDA, a compiled loop on a CPU).

``generate`` drives a causal LM with a KV cache. Where the guide leaves exactly one choice (``forced_tokens``)
the tokens are appended without asking the model; they are fed to the model together with the next sampled
step, in one forward pass. The report counts the passes this skipped.

Leaves out: beam search (the processor tracks one guide state per row and assumes rows are not reordered) and
batching inside ``generate`` (use the processor with ``model.generate`` for batches).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import transformers

from product.runtime.guide import Guide
from product.runtime.kernels.device import apply_bitmask

__all__ = ["apply_bitmask", "LogitsProcessor", "generate", "Generation"]

_OVERLAP: ThreadPoolExecutor | None = None
_OVERLAP_LOCK = threading.Lock()


def _overlap_thread() -> ThreadPoolExecutor:
    """The process-wide thread that computes next masks during forward passes, started on first use (starting a
    thread per step would cost more than the mask)."""
    global _OVERLAP
    with _OVERLAP_LOCK:
        if _OVERLAP is None:
            _OVERLAP = ThreadPoolExecutor(max_workers=1, thread_name_prefix="canonmerge-overlap")
        return _OVERLAP


class LogitsProcessor(transformers.LogitsProcessor):
    """A ``transformers`` logits processor that keeps each row of ``model.generate`` inside the guide.

    One processor per ``generate`` call (it remembers each row's guide state). Rows that emitted EOS are
    allowed only EOS afterwards. Greedy search and sampling only: beam search reorders rows.
    """

    def __init__(self, guide: Guide):
        self.guide = guide
        self._states: list[int] | None = None
        self._finished: list[bool] = []
        self._buffer = None
        self._eos = set(guide.eos_token_ids)
        eos_row = np.zeros(guide.num_words, dtype=np.uint32)
        for t in self._eos:
            eos_row[t >> 5] |= np.uint32(1 << (t & 31))
        self._eos_row = torch.from_numpy(eos_row.view(np.int32))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.shape[0]
        if self._states is None:
            self._states = [self.guide.initial_state] * rows
            self._finished = [False] * rows
            self._buffer = torch.zeros((rows, self.guide.num_words), dtype=torch.int32)
            if scores.device.type == "cuda":
                self._buffer = self._buffer.pin_memory()
        else:
            for i, token in enumerate(input_ids[:, -1].tolist()):
                if self._finished[i]:
                    continue
                if token in self._eos:
                    self._finished[i] = True
                else:
                    self._states[i] = self.guide.advance(self._states[i], token)
        self.guide.fill_bitmask(self._states, self._buffer)
        for i, done in enumerate(self._finished):
            if done:  # only EOS after EOS (transformers pads finished rows)
                self._buffer[i] = self._eos_row
        return apply_bitmask(scores, self._buffer)


@dataclass
class Generation:
    """What ``generate`` produced and how: ``forced_tokens`` were appended without choosing by the model, so a
    token-by-token decoder would have needed ``forward_passes + forced_tokens`` passes."""

    token_ids: list[int]
    forward_passes: int
    forced_tokens: int
    finished: bool  # ended in an accepting state (EOS chosen or the only option)

    @property
    def skipped_passes(self) -> int:
        return self.forced_tokens

    @property
    def forced_share(self) -> float:
        return self.forced_tokens / max(1, len(self.token_ids))


def _cache_keyword(model) -> str:
    """The name of the KV cache in the model's forward and its output: ``cache`` from transformers 5.x on
    (``past_key_values`` there still works, with a deprecation warning on every first use: printed by the CLI),
    ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def generate(model, guide: Guide, prompt_ids, *, max_new_tokens: int = 256, do_sample: bool = False,
             temperature: float = 1.0, generator: torch.Generator | None = None, overlap: bool = True) -> Generation:
    """Generate one continuation of ``prompt_ids`` that the guide accepts (EOS not included in the result).

    Greedy by default; ``do_sample=True`` samples from the masked softmax at ``temperature``. ``overlap``: compute
    each step's mask while the model's forward pass runs (on CUDA after the pass is launched, which returns before
    the GPU is done; elsewhere in a worker thread, the pass and the mask kernel both releasing the GIL) instead
    of before it. The result is the same either way; docs/serving.md has the step times.
    """
    device = next(model.parameters()).device
    cache_keyword = _cache_keyword(model)
    state, out = guide.initial_state, []
    feed, past, passes, forced = list(prompt_ids), None, 0, 0
    bitmask = torch.zeros((1, guide.num_words), dtype=torch.int32)
    eos = set(guide.eos_token_ids)
    while len(out) < max_new_tokens:
        chain = guide.forced_tokens(state)[: max_new_tokens - len(out)]
        if chain:
            for t in chain:
                state = guide.advance(state, t)
            out += chain
            feed += chain
            forced += len(chain)
            continue
        # The mask of this step depends only on the state, so it may be computed during the forward pass, except
        # where the text may end: there it decides whether the pass is needed at all.
        fill, pending = (lambda s=state: guide.fill_bitmask([s], bitmask)), None
        if guide.is_accepting(state) or not overlap:
            fill()
            if guide.is_accepting(state) and int(np.bitwise_count(bitmask.numpy().view(np.uint32)).sum()) == 1:
                return Generation(out, passes, forced, True)  # EOS is the only option: no need to ask
            fill = None
        elif device.type != "cuda":
            pending = _overlap_thread().submit(fill)
        result = model(input_ids=torch.tensor([feed], device=device), use_cache=True, **{cache_keyword: past})
        passes += 1
        if pending is not None:
            pending.result()
        elif fill is not None:  # CUDA: the pass is launched and runs on the GPU meanwhile
            fill()
        past = getattr(result, cache_keyword)
        logits = apply_bitmask(result.logits[:, -1, :].float(), bitmask)
        if do_sample:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=generator).item())
        else:
            token = int(torch.argmax(logits, dim=-1).item())
        if token in eos:
            return Generation(out, passes, forced, True)
        state = guide.advance(state, token)
        out.append(token)
        feed = [token]
    return Generation(out, passes, forced, guide.is_accepting(state))
