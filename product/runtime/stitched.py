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

import functools

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

    ``instances``: ``product.stitched``'s instances, each with ``fragment`` (its ``guide``) and ``next_of_node``
    (exit node, or a lazy guide's exit node key -> index of the instance it leads to)."""

    _plain_guide = False  # its rows are its fragments' (not stored as arrays itself)

    def __init__(self, instances: list, canonical: CanonicalAutomaton, *, canonical_only: bool,
                 cache_size: int, name: str, eos: tuple[int, ...], reused: int, compiled: int):
        self.name = name
        self.canonical_only = canonical_only
        self._tokens = canonical
        self.vocab_size = canonical.vocab_size
        self.num_words = (self.vocab_size + 31) // 32
        self.eos_token_ids = eos
        self._instances = instances
        self._guides = [inst.fragment.guide for inst in instances]
        self._M = self._guides[0]._M
        # instance i's states are i << _INSTANCE_BITS plus its guide's (a lazy fragment's guide numbers its nodes
        # as it meets them: no size is fixed when the guide is built)
        # per instance, exit node -> the next instance's initial state, as one global state; a lazy fragment's exit
        # nodes by their key (``LazyGuide``: state * contexts + context), known before the node is
        starts = [(i << _INSTANCE_BITS) + g.initial_state for i, g in enumerate(self._guides)]
        self._jump = [{node: starts[i] for node, i in inst.next_of_node.items()} for inst in instances]
        self._lazy = [isinstance(g, LazyGuide) for g in self._guides]
        # a choice of keys exits by (node, the key's class) (``product.runtime.keyed``), other fragments by node
        self._exit_keys = [getattr(g, "exit_key", None) for g in self._guides]
        self.initial_state = self._guides[0].initial_state
        self.fragments_reused, self.fragments_compiled = reused, compiled
        self._init_mask_cache(cache_size)
        self._mask(self.initial_state)

    def _new_step_table(self) -> None:
        return None  # advance goes through the fragments' own guides

    # ---- sizes ----
    @property
    def num_nodes(self) -> int:
        """Product nodes over the distinct fragments this guide uses."""
        return sum(g.num_nodes for g in self._distinct_guides())

    def _distinct_guides(self) -> list:
        """The fragments' guides, each once (a choice of keys is its shared fragment's guide)."""
        return list({id(g): g for g in (getattr(g, "_inner", g) for g in self._guides)}.values())

    @property
    def num_fragments(self) -> int:
        """Distinct fragments (regex, entry context) this guide uses."""
        return len({id(getattr(inst.fragment, "shared", inst.fragment)) for inst in self._instances})

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
        if not 0 <= i < len(self._guides):
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

    @functools.cached_property
    def _instance_makers(self) -> tuple[list[Guide], np.ndarray]:
        """The distinct fragment guides whose masks are their node rows', and each instance's index among them (-1:
        a counted or lazy fragment, whose masks ``_fill_row`` computes)."""
        makers = list({id(g): g for g in self._guides if g._plain_masks}.values())
        index = {id(g): i for i, g in enumerate(makers)}
        return makers, np.array([index.get(id(g), -1) for g in self._guides], dtype=np.int64)

    def _mask_makers(self, states: np.ndarray) -> tuple[list[Guide], np.ndarray, np.ndarray]:
        """Each state's fragment guide and its state there (``_locate`` for a batch, by shifts)."""
        makers, maker_of_instance = self._instance_makers
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
        if exit_key is not None:
            key = exit_key(after)
        elif self._lazy[i]:
            key = int(guide._nodes.keys[after // self._M])
        else:
            key = after // self._M
        jump = self._jump[i].get(key)
        if jump is None and self._lazy[i] and guide._at_live_exit(after // self._M):
            raise CanonmergeError(f"internal: {self.name!r} reached an exit that no instance follows (state {state})")
        return jump if jump is not None else (i << _INSTANCE_BITS) + after
