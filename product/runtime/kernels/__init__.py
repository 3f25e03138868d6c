"""The compiled kernels that serve masks, one module per backend: ``cpu`` (numba: a node's rows into a mask, masks
kept in and copied from a guide's cache, batches across guides, logits masked on the CPU), ``device`` (torch and
Triton: ``apply_bitmask``), and ``step`` (``Guide.advance``'s step), over ``pointers`` (arrays read through their
addresses). The package itself imports nothing (``device`` needs torch): import its modules.
"""
