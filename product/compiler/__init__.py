"""Compiling a guide: what builds its tables and stores them, with nothing of serving.

- ``token_regex``: a regex DFA over the vocabulary (``TokenTransitions``, ``VocabularyTrie``).
- ``tables``: ``CompiledGuide`` — product nodes (regex state, context), liveness, each node's rows and row
  descriptors, the tables as named arrays; the tables shared per automaton.
- ``node_kernels``: the compiled loops of exploring and liveness.
- ``forbidden``: the forbidden sets F[mc] (``ForbiddenSets``), liveness's set relations, and the layout of what the
  mask kernels read.
- ``counted``: counted repetitions' token transitions (``CountedTransitions``).
- ``skeleton``: cutting a schema's skeleton into fragments.

Leaves out: serving masks (``product.runtime``, which imports this package; nothing here imports it). The package
itself imports nothing: import its modules.
"""
