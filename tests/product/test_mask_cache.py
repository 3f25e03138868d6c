"""The mask cache's index (``product.runtime.mask_cache``) against an ``OrderedDict`` LRU, the structure it
replaced."""

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from product.runtime.mask_cache import MaskCache

_OPERATIONS = st.lists(st.tuples(st.sampled_from(["lookup", "take", "get", "clear", "reserve"]),
                                 st.one_of(st.integers(0, 40), st.integers(0, 2**62))), max_size=300)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 70), first_capacity=st.integers(1, 40), operations=_OPERATIONS)
def test_the_cache_index_is_an_lru_of_slots(limit, first_capacity, operations):
    cache, model = MaskCache(limit, first_capacity), OrderedDict()
    for operation, state in operations:
        if operation == "lookup":
            expected = model.get(state, -1)
            if expected >= 0:
                model.move_to_end(state)
            assert cache.lookup(state) == expected
        elif operation == "get":
            assert cache.get(state) == model.get(state, -1) and (state in cache) == (state in model)
        elif operation == "take" and state not in model:
            slot = len(model) if len(model) < limit else model.popitem(last=False)[1]
            model[state] = slot
            assert cache.take(state) == slot
        elif operation == "clear":
            cache.clear()
            model.clear()
        elif operation == "reserve":
            cache.reserve(state % 50)
            assert cache.capacity >= min(limit, len(model) + state % 50)
        assert len(cache) == len(model) and list(cache.slots().items()) == list(model.items())
        assert cache.capacity <= limit
