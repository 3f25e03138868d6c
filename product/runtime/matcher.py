"""A matcher per request, the object serving engines (vLLM, SGLang, TensorRT-LLM) drive: accept tokens, roll back
rejected speculative tokens, fill a row of a shared bitmask, jump forward over forced tokens.

A ``Matcher`` is a guide state (an int, ``Guide``'s) plus a bounded history of earlier states, so it is cheap to
create, fork and roll back; many matchers share one compiled ``Guide`` (the guide's mask cache is shared and
locked). ``fill_next_token_bitmasks`` fills the rows of a batch: for all its regex guides at once, one compiled
call copies the cached masks, one computes the others (outside the guides' cache locks, which guard only the
caches) and one keeps them, over numba's threads if asked and without the GIL, so several Python threads may fill
batches too (docs/serving.md has the measurements).

Errors are raised before anything changes: ``RollbackError`` (more tokens than the history holds),
``InvalidTokenError`` (an id outside the vocabulary), ``bpe.DisallowedTokenError`` (a token the mask does not
allow, or any token after EOS), ``ValueError``/``TypeError`` (a bitmask of the wrong shape, dtype or device, a
bad index).

Leaves out: masks on the device and applying them to logits (``product.apply_bitmask``), the engine's own batching
and scheduling.
"""

from __future__ import annotations

import operator
import weakref
from collections import deque
from typing import Iterable, Sequence

import numpy as np

from automata.errors import CanonmergeError
from bpe.automaton import DisallowedTokenError
from product.runtime.guide import Guide, fill_batch

__all__ = ["Matcher", "RollbackError", "allocate_token_bitmask", "fill_next_token_bitmasks"]

_MASK_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


class RollbackError(CanonmergeError, ValueError):
    """A rollback of more tokens than the matcher's history holds."""


def allocate_token_bitmask(batch_size: int, vocab_size: int, *, pin_memory: bool = False):
    """A zeroed CPU ``torch.int32`` tensor of ``[batch_size, ceil(vocab_size / 32)]`` words, the layout
    ``fill_next_token_bitmask`` writes and ``apply_bitmask`` reads (bit ``t % 32`` of word ``t // 32``). With
    ``pin_memory=True`` (and CUDA present) it is page-locked, so its copy to the GPU can be asynchronous."""
    import torch

    batch_size, vocab_size = operator.index(batch_size), operator.index(vocab_size)
    if batch_size < 1 or vocab_size < 1:
        raise ValueError(f"a token bitmask needs a positive batch size and vocabulary, not {batch_size}, {vocab_size}")
    words = torch.zeros((batch_size, (vocab_size + 31) // 32), dtype=torch.int32)
    return words.pin_memory() if pin_memory and torch.cuda.is_available() else words


# The last torch bitmask checked and its numpy view: an engine fills the rows of one bitmask request by request,
# and converting and checking it again for each row cost ~3 µs of the ~5 µs a row. (A weak reference: the cache
# must not keep a bitmask alive; the key catches a tensor resized or re-pointed in place.)
_last_checked: tuple = (None, None, None)


def _host_words(bitmask, num_words: int) -> np.ndarray:
    """The bitmask as a writable uint32 numpy view of the same memory, checked: 2-D, int32/uint32, ``num_words``
    words a row, on the CPU, rows contiguous."""
    global _last_checked
    if isinstance(bitmask, np.ndarray):
        return _checked_words(bitmask, num_words)
    ref, key, words = _last_checked
    if ref is not None and ref() is bitmask and words.shape[1] == num_words:
        if key == (bitmask.data_ptr(), bitmask.shape, bitmask.stride(), bitmask.dtype):
            return words
    device = getattr(bitmask, "device", None)
    if device is None or not hasattr(bitmask, "numpy"):
        raise TypeError(f"a token bitmask is a numpy array or a torch tensor, not {type(bitmask).__name__}")
    if device.type != "cpu":
        raise ValueError(f"fill the token bitmask on the CPU (then copy it to {device}), not on {device}")
    words = _checked_words(bitmask.numpy(), num_words)
    _last_checked = (weakref.ref(bitmask), (bitmask.data_ptr(), bitmask.shape, bitmask.stride(), bitmask.dtype),
                     words)
    return words


def _address(bitmask, words: np.ndarray) -> int:
    """Where ``words`` (``_host_words(bitmask)``) starts: a tensor's ``data_ptr()`` (~0.3 µs) where it is one (numpy's
    ``ctypes.data`` costs ~1-3 µs)."""
    return words.ctypes.data if isinstance(bitmask, np.ndarray) else bitmask.data_ptr()


def _checked_words(bitmask: np.ndarray, num_words: int) -> np.ndarray:
    if bitmask.dtype not in _MASK_DTYPES or bitmask.ndim != 2 or bitmask.shape[1] != num_words:
        raise ValueError(f"a token bitmask is int32 or uint32 [batch, {num_words}], not {bitmask.dtype} "
                         f"{list(bitmask.shape)}")
    if bitmask.strides[1] != bitmask.itemsize:
        raise ValueError("a token bitmask's rows must be contiguous")
    if not bitmask.flags.writeable:
        raise ValueError("a token bitmask must be writable")
    return bitmask.view(np.uint32)


def _row_index(index, rows: int) -> int:
    try:
        index = operator.index(index)
    except TypeError:
        raise TypeError(f"a bitmask row index is an int, not {type(index).__name__}") from None
    if not 0 <= index < rows:
        raise ValueError(f"bitmask row {index} is outside a bitmask of {rows} rows")
    return index


class Matcher:
    """One request's position in a guide.

    One matcher per request, used by one thread at a time (the guide it shares is thread-safe; the matcher is
    not). Invariants: ``state`` is a live state of ``guide`` (the text so far can still be completed); ``_history``
    holds the ``(state, terminated)`` before each of the last ``len(_history)`` accepted tokens (oldest first, at
    most ``max_rollback``); once EOS is accepted the matcher is terminated and accepts nothing more until
    ``rollback`` or ``reset``.
    """

    __slots__ = ("guide", "max_rollback", "_state", "_terminated", "_history", "_eos")

    def __init__(self, guide: Guide, *, max_rollback: int = 16):
        if not isinstance(guide, Guide):
            raise TypeError(f"a Matcher needs a product.Guide, not {type(guide).__name__}")
        max_rollback = operator.index(max_rollback)
        if max_rollback < 0:
            raise ValueError(f"max_rollback must be at least 0, not {max_rollback}")
        self.guide = guide
        self.max_rollback = max_rollback
        self._eos = frozenset(guide.eos_token_ids)
        self._state = guide.initial_state
        self._terminated = False
        self._history: deque[tuple[int, bool]] = deque(maxlen=max_rollback)

    # ---- state ---------------------------------------------------------------------------------------------
    @property
    def state(self) -> int:
        """The guide state (an int for ``Guide``'s methods)."""
        return self._state

    @property
    def is_terminated(self) -> bool:
        """Whether EOS has been accepted."""
        return self._terminated

    @property
    def num_rollback_tokens(self) -> int:
        """How many tokens ``rollback`` can undo now."""
        return len(self._history)

    def is_accepting(self) -> bool:
        """Whether the text so far is complete (EOS would be accepted)."""
        return self._terminated or self.guide.is_accepting(self._state)

    def reset(self) -> None:
        """Back to the start of the text, history cleared."""
        self._state, self._terminated = self.guide.initial_state, False
        self._history.clear()

    def fork(self) -> "Matcher":
        """An independent copy (same guide, state and history): e.g. one per sampled branch."""
        twin = Matcher.__new__(Matcher)
        twin.guide, twin.max_rollback, twin._eos = self.guide, self.max_rollback, self._eos
        twin._state, twin._terminated = self._state, self._terminated
        twin._history = deque(self._history, maxlen=self.max_rollback)
        return twin

    # ---- tokens --------------------------------------------------------------------------------------------
    def _step(self, state: int, terminated: bool, token: int) -> tuple[int, bool]:
        """The (state, terminated) after ``token``; raises without side effects."""
        if terminated:
            token = self.guide.token_id(token)  # InvalidTokenError first, as advance would
            raise DisallowedTokenError(f"token {token} after EOS: the matcher has terminated")
        state = self.guide.advance(state, token)  # InvalidTokenError / DisallowedTokenError
        return state, token in self._eos

    def accept_token(self, token_id: int) -> None:
        """Advance by one token (EOS terminates). Raises ``InvalidTokenError`` or ``DisallowedTokenError``, leaving
        the matcher unchanged."""
        state, terminated = self._step(self._state, self._terminated, token_id)
        self._history.append((self._state, self._terminated))
        self._state, self._terminated = state, terminated

    def accept_tokens(self, token_ids: Iterable[int]) -> None:
        """Advance by several tokens, all or none: if one is refused the error is raised and the matcher is as it
        was before the call."""
        state, terminated = self._state, self._terminated
        passed = []
        for t in token_ids:
            passed.append((state, terminated))
            state, terminated = self._step(state, terminated, t)
        self._history.extend(passed)
        self._state, self._terminated = state, terminated

    def validate_tokens(self, draft: Sequence[int]) -> int:
        """How many leading tokens of ``draft`` the matcher would accept, one after the other (speculative
        decoding: the rest are rejected). The matcher does not change. Ids outside the vocabulary raise
        ``InvalidTokenError``."""
        state, terminated = self._state, self._terminated
        for n, t in enumerate(draft):
            try:
                state, terminated = self._step(state, terminated, t)
            except DisallowedTokenError:
                return n
        return len(draft)

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens (EOS included). Raises ``RollbackError`` if the history
        holds fewer (it keeps the last ``max_rollback``), leaving the matcher unchanged."""
        num_tokens = operator.index(num_tokens)
        if num_tokens < 0:
            raise ValueError(f"cannot roll back a negative number of tokens ({num_tokens})")
        if num_tokens > len(self._history):
            raise RollbackError(f"cannot roll back {num_tokens} tokens: the history holds {len(self._history)} "
                                f"(max_rollback={self.max_rollback})")
        if num_tokens == 0:
            return
        for _ in range(num_tokens - 1):
            self._history.pop()
        self._state, self._terminated = self._history.pop()

    def jump_forward_tokens(self) -> tuple[int, ...]:
        """The tokens that are the only choice from here (the guide's ``forced_tokens``: canonical, so an engine may
        append them without a forward pass and then ``accept_tokens`` them). Empty when there is a choice, when
        the text may end here, or after EOS."""
        return () if self._terminated else self.guide.forced_tokens(self._state)

    # ---- masks ---------------------------------------------------------------------------------------------
    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> None:
        """Write the mask of the next token into row ``index`` of ``bitmask`` (a CPU int32 torch tensor or numpy
        array of ``[batch, guide.num_words]``, e.g. from ``allocate_token_bitmask``). After EOS only EOS is
        allowed (engines pad finished rows with it). A bad bitmask or index raises before anything is written."""
        words = _host_words(bitmask, self.guide.num_words)
        index = _row_index(index, len(words))
        self._fill(words, index)

    def _fill(self, words: np.ndarray, index: int) -> None:
        if self._terminated:
            row = words[index]
            row[:] = 0
            for t in self._eos:
                row[t >> 5] |= np.uint32(1 << (t & 31))
        else:
            self.guide.fill_bitmask([self._state], words[index: index + 1])

    def __repr__(self) -> str:
        return (f"Matcher(guide={self.guide.name!r}, state={self._state}, terminated={self._terminated}, "
                f"history={len(self._history)}/{self.max_rollback})")


def fill_next_token_bitmasks(matchers: Sequence[Matcher], bitmask, indices: Sequence[int] | None = None, *,
                             threads: int = 1) -> None:
    """Fill row ``indices[i]`` (default ``i``) of ``bitmask`` with the next-token mask of ``matchers[i]``, for the
    whole batch, over up to ``threads`` threads. Equal to calling ``matchers[i].fill_next_token_bitmask(bitmask,
    indices[i])`` for each i; everything is checked before any row is written.

    The rows of matchers on regex guides (whatever the guide) are filled together, by three compiled calls:
    cached masks copied, new ones computed, new ones kept in their guides' caches
    (the batch kernels of ``product.runtime.kernels.cpu``); those of counted and schema guides by each guide's ``fill_bitmask``.
    The copies and computations are split over numba's threads when ``threads > 1`` (OpenMP or TBB; with neither,
    one thread: ``product.runtime.kernels.cpu.parallel_threads``) and release the GIL, so other Python threads (the model's
    forward pass) run meanwhile.
    """
    if not matchers:
        return
    num_words = matchers[0].guide.num_words
    words = _host_words(bitmask, num_words)
    if indices is None:
        if len(matchers) > len(words):
            raise ValueError(f"{len(matchers)} matchers do not fit a bitmask of {len(words)} rows")
        rows = range(len(matchers))
    else:
        rows = [_row_index(i, len(words)) for i in indices]
        if len(rows) != len(matchers):
            raise ValueError(f"{len(matchers)} matchers but {len(rows)} indices")
        if len(set(rows)) != len(rows):
            raise ValueError("two matchers would fill the same bitmask row")
    threads = operator.index(threads)
    if threads < 1:
        raise ValueError(f"threads must be at least 1, not {threads}")
    for kind in set(map(type, matchers)):
        if not issubclass(kind, Matcher):
            raise TypeError(f"fill_next_token_bitmasks takes Matchers, not {kind.__name__}")
    guides = [m.guide for m in matchers]
    distinct = list(dict.fromkeys(guides))  # (guides hash by identity)
    for guide in distinct:
        if guide.num_words != num_words:
            raise ValueError(f"matchers of vocabularies of {num_words} and {guide.num_words} words in one batch")
    # everything is checked: rows may be written from here on
    if True in [m._terminated for m in matchers]:
        for m, row in zip(matchers, rows):
            if m._terminated:
                m._fill(words, row)  # EOS only: no guide involved
        rows = [row for m, row in zip(matchers, rows) if not m._terminated]
        matchers = [m for m in matchers if not m._terminated]
        if not matchers:
            return
        guides = [m.guide for m in matchers]
        distinct = list(dict.fromkeys(guides))
    # a few C-level passes over the matchers (a Python loop over them cost more than the masks it filled)
    if len(distinct) == 1:
        owner_of = np.zeros(len(matchers), dtype=np.int64)
    else:
        number = {guide: g for g, guide in enumerate(distinct)}
        owner_of = np.array(list(map(number.__getitem__, guides)), dtype=np.int64)
    states = np.array([m._state for m in matchers], dtype=np.int64)
    row_numbers = np.arange(len(matchers), dtype=np.int64) if indices is None else np.array(rows, dtype=np.int64)
    fill_batch(distinct, owner_of, states, row_numbers * words.strides[0] + _address(bitmask, words), threads)
