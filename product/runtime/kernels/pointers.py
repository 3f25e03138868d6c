"""Arrays read through their addresses in compiled code: one ``int64`` table of addresses instead of many arrays.

numba charges ~0.1 µs per array argument to call a compiled function (15 arrays: 1.9 µs), which is more than a
guide's step or a cached mask costs. So the few functions called once per token take a table of sizes and
addresses, and read the arrays through pointers (``int32_at(address)[i]``, unchecked). Whoever writes an address
into a table keeps that array alive, unchanged, for as long as the table is used.
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["int16_at", "int32_at", "int64_at", "uint32_at"]


def _pointer_reader(item: types.Type):
    """An intrinsic turning an int64 address into a pointer to ``item`` (indexable like an array, unchecked)."""
    @intrinsic
    def pointer(typingctx, address):
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return types.CPointer(item)(types.int64), codegen
    return pointer


int16_at, int32_at, int64_at, uint32_at = (_pointer_reader(t) for t in (types.int16, types.int32, types.int64,
                                                                        types.uint32))
