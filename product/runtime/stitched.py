"""A stitched guide served: one state space over fragment instances, each a compiled fragment guide.

``product.stitched`` cuts a skeleton into fragments, compiles each (or reuses it) and links the instances (a
fragment entered in a context, with the instance each exit leads to). Here the guide over them: a state is an
instance's index shifted past any state of its guide, plus a state of that guide (a lazy fragment's guide,
``product.runtime.lazy``, numbers its nodes as it meets them); masks are the fragment guides' masks (a batch hands
the fragments to the batch kernels as the guides computing the masks, ``_mask_makers``), and a token that reaches
an exit moves the state to the next instance's initial state.

Leaves out: cutting, compiling and linking (``product.stitched``, ``product.compiler.skeleton``).
"""

from __future__ import annotations

import threading

import numpy as np

from automata.errors import CanonmergeError
from bpe.automaton import CanonicalAutomaton, DisallowedTokenError
from product.runtime.guide import Guide
from product.runtime.lazy import LazyGuide

__all__ = ["StitchedGuide"]

_INSTANCE_BITS = 40  # a state: instance << 40 | the instance guide's state
_INNER = (1 << _INSTANCE_BITS) - 1


class StitchedGuide(Guide):
    """A ``Guide`` over fragment instances (``compile_stitched``): state = ``i << 40`` + a state of instance i's
    guide. Masks, advance and acceptance are the fragment guides'; a token that reaches an exit moves the
    state to the next instance's start. ``fragments_reused`` / ``fragments_compiled`` say how it was built.

    ``linker``: ``product.stitched``'s, whose ``instance(key, number)`` settles the instance ``key`` and returns it
    with ``fragment`` (its ``guide``) and ``next_of_node`` (exit node, or a lazy guide's exit node key -> the index
    ``number`` gave the instance it leads to). Instances are numbered as they are met: all of them, from ``start``,
    when the guide is built (``link_all``), or (a lazy guide's) each when a walk first enters it."""

    _plain_guide = False  # its rows are its fragments' (not stored as arrays itself)

    def __init__(self, linker, start: tuple, canonical: CanonicalAutomaton, *, canonical_only: bool,
                 cache_size: int, name: str, eos: tuple[int, ...], link_all: bool):
        self.name = name
        self.canonical_only = canonical_only
        self._tokens = canonical
        self.vocab_size = canonical.vocab_size
        self.num_words = (self.vocab_size + 31) // 32
        self.eos_token_ids = eos
        self._linker = linker
        self._link_lock = threading.RLock()
        self._index: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        # per instance (None: numbered, not entered yet): the instance, its guide, whether that is lazy, how it
        # names its exits (``exit_key``: a choice of keys by (node, the key's class), ``product.runtime.keyed``; a
        # lazy guide by node key ``state * contexts + context``, known before the node is; None: others, by node)
        # and, per exit, the index of the instance it leads to
        self._instances: list = []
        self._guides: list = []
        self._lazy: list[bool] = []
        self._exit_keys: list = []
        self._jump: list[dict] = []
        self._makers_held = None
        self._enter(self._number(start))
        if link_all:
            i = 1
            while i < len(self._instances):
                self._enter(i)
                i += 1
        self._M = self._guides[0]._M
        self.initial_state = self._guides[0].initial_state
        self._init_mask_cache(cache_size)
        self._mask(self.initial_state)

    def _number(self, key: tuple) -> int:
        """The index of instance ``key``, numbered now if new."""
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self._instances)
            self._keys.append(key)
            for table in (self._instances, self._guides, self._lazy, self._exit_keys, self._jump):
                table.append(None)
        return i

    def _enter(self, i: int) -> Guide:
        """Instance i's guide, settled by the linker first if no walk has entered it yet."""
        guide = self._guides[i]
        if guide is not None:
            return guide
        with self._link_lock:
            if self._guides[i] is None:
                instance = self._linker.instance(self._keys[i], self._number)
                guide = instance.fragment.guide
                self._instances[i], self._jump[i] = instance, instance.next_of_node
                self._lazy[i], self._exit_keys[i] = isinstance(guide, LazyGuide), getattr(guide, "exit_key", None)
                self._makers_held = None
                self._guides[i] = guide
            return self._guides[i]

    @property
    def fragments_reused(self) -> int:
        return self._linker.counts[False]

    @property
    def fragments_compiled(self) -> int:
        return self._linker.counts[True]

    def _new_step_table(self) -> None:
        return None  # advance goes through the fragments' own guides

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        del state["_link_lock"]
        state["_makers_held"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._link_lock = threading.RLock()

    # ---- sizes ----
    @property
    def num_nodes(self) -> int:
        """Product nodes over the distinct fragments this guide uses (so far, for a lazy one)."""
        return sum(g.num_nodes for g in self._distinct_guides())

    def _distinct_guides(self) -> list:
        """The fragments' guides, each once (a choice of keys is its shared fragment's guide)."""
        return list({id(g): g for g in (getattr(g, "_inner", g) for g in self._guides if g is not None)}.values())

    @property
    def num_fragments(self) -> int:
        """Distinct fragments (regex, entry context) this guide uses (so far, for a lazy one)."""
        return len({id(getattr(inst.fragment, "shared", inst.fragment)) for inst in self._instances
                    if inst is not None})

    @property
    def memory_bytes(self) -> int:
        fragments = self._distinct_guides()
        own = [*self._slabs, self._cache.record]
        return int(sum(g.memory_bytes for g in fragments) + sum(a.nbytes for a in own))

    # ---- states ----
    def _locate(self, state: int) -> tuple[int, int]:
        """(instance, state of its guide)."""
        try:
            state = int(state.__index__())
        except (AttributeError, TypeError):
            raise TypeError(f"a guide state is an int, not {type(state).__name__} ({state!r})") from None
        i = state >> _INSTANCE_BITS
        if not 0 <= i < len(self._guides) or self._guides[i] is None:
            raise ValueError(f"{state} is not a state of this guide")
        return i, state & _INNER

    def _split(self, state: int) -> tuple[int, int]:
        i, inner = self._locate(state)
        self._guides[i]._split(inner)
        return i, inner

    def is_accepting(self, state: int) -> bool:
        i, inner = self._locate(state)
        return self._guides[i].is_accepting(inner)

    def _fill_row(self, state: int, words: np.ndarray) -> None:
        i, inner = self._locate(state)
        self._guides[i]._fill_row(inner, words)

    def _fill_at(self, state: int, out, address: int) -> None:
        i, inner = self._locate(state)
        self._guides[i]._fill_at(inner, out, address)

    def _instance_makers(self) -> tuple[list[Guide], np.ndarray]:
        """The distinct fragment guides whose masks are their node rows', and each instance's index among them (-1:
        a counted or lazy fragment, whose masks ``_fill_row`` computes, or an instance not entered yet); made again
        after an instance is entered."""
        held = self._makers_held
        if held is None:
            with self._link_lock:
                guides = [g for g in self._guides]
                makers = list({id(g): g for g in guides if g is not None and g._plain_masks}.values())
                index = {id(g): i for i, g in enumerate(makers)}
                held = self._makers_held = (makers, np.array([index.get(id(g), -1) for g in guides], dtype=np.int64))
        return held

    def _mask_makers(self, states: np.ndarray) -> tuple[list[Guide], np.ndarray, np.ndarray]:
        """Each state's fragment guide and its state there (``_locate`` for a batch, by shifts)."""
        makers, maker_of_instance = self._instance_makers()
        return makers, maker_of_instance[states >> _INSTANCE_BITS], states & _INNER

    def advance(self, state: int, token_id: int) -> int:
        i, inner = self._locate(state)
        guide = self._guides[i]
        try:
            after = guide.advance(inner, token_id)
        except DisallowedTokenError:
            raise DisallowedTokenError(f"token {token_id} ({guide._describe(token_id)}) is not allowed in state "
                                       f"{state} of {self.name!r}") from None
        exit_key = self._exit_keys[i]
        # (no jump past the nodes of a counted fragment's loop, k > 0)
        key = exit_key(after) if exit_key is not None else after // self._M
        jump = self._jump[i].get(key)
        if jump is None:
            if self._lazy[i] and guide._at_live_exit(after // self._M):
                raise CanonmergeError(f"internal: {self.name!r} reached an exit that no instance follows "
                                      f"(state {state})")
            return (i << _INSTANCE_BITS) + after
        return (jump << _INSTANCE_BITS) + self._enter(jump).initial_state
