"""Serving guides: masks, moves and batches from compiled tables, with nothing of compiling.

- ``guide``: ``Guide`` (a ``product.compiler.tables.CompiledGuide``) — masks through a bounded cache of preallocated
  rows, ``advance``, ``fill_bitmask`` for one state or a batch across guides.
- ``stitched``: ``StitchedGuide``, one state space over fragment guides.
- ``matcher``: ``Matcher`` and ``fill_next_token_bitmasks``, per-request state for serving engines.
- ``mask_cache``: the cache's index (state -> slot, LRU) as one array compiled code reads.
- ``kernels``: the compiled kernels — ``cpu`` (numba: masks, batches, logits on the CPU), ``step`` (``advance``'s
  step), ``device`` (torch and Triton: ``apply_bitmask``), ``pointers`` (arrays read through addresses).
- ``generation``: ``LogitsProcessor``, ``generate`` (imports torch and transformers).

Leaves out: building tables (``product.compiler``). The package itself imports nothing: import its modules.
"""
