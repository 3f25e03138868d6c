"""Adapters that plug a canonmerge guide into the generation libraries users already run (docs/clients.md).

One module per client, each importing its client only when it is itself imported; nothing else in canonmerge
imports them, so none of these clients is a dependency of the package:

- ``product.integrations.outlines``: ``CanonicalLogitsProcessor`` for ``outlines.Generator(model, processor=...)``
  (Outlines' Transformers and LlamaCpp models).
- ``product.integrations.llama_cpp``: ``CanonicalLogitsProcessor`` for llama-cpp-python's ``logits_processor``, and
  ``check_vocabulary`` (the GGUF model's ids are the guide's).
- ``product.integrations.sglang``: a grammar backend (``register_backend``) for SGLang's ``--grammar-backend``.
- ``product.integrations.vllm``: a vLLM (V1 engine) logits processor, per request through ``extra_args``.

Outlines and llama-cpp-python are tested against the real packages (tests/product/test_integrations.py); the SGLang
and vLLM adapters are written against those projects' interfaces (SGLang 0.5.23, vLLM 0.33.0's V1 model runner) and
not run in a server (neither installs on a CPU-only machine; docs/clients.md says what was checked). The shared part, a ``Matcher`` per row advanced by the token ids a client passes, is
``product.integrations.sequences``.

Leaves out: compiling JSON Schemas (``vegas.compile_schema``, a layer above ``product``): adapters take compiled
guides, and the server adapters take the schema compiler as an argument.
"""
