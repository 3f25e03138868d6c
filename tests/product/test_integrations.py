"""The client adapters (``product.integrations``) through the real clients: docs/clients.md's examples, executed as
written in one session, each generating with SmolLM2-135M-Instruct a JSON object of a small schema; then checked
here, apart from the examples' own asserts: the object validates (``jsonschema``), the guide accepts the ids
generated, and they are the tokenizer's own ids for the text (the reference runtime's, and llama.cpp's for the
GGUF model).

Outlines and llama-cpp-python are test dependencies: a missing one fails these tests. SGLang and vLLM do not
install on a CPU-only machine; their adapters are not run here (docs/clients.md says so).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from bpe.assets import reference_runtime
from product.integrations.llama_cpp import CanonicalLogitsProcessor as LlamaCppProcessor

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "clients.md"
EXAMPLES = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)
OUTLINES_TRANSFORMERS, LLAMA_CPP, OUTLINES_LLAMACPP = range(3)


class _Session:
    """The page's examples run in order in one namespace (as a reader would), a snapshot kept after each."""

    def __init__(self):
        self.namespace = {"__name__": "__clients__"}
        self.snapshots: list[dict] = []

    def after(self, example: int) -> dict:
        while len(self.snapshots) <= example:
            code = EXAMPLES[len(self.snapshots)]
            exec(compile(code, f"docs/clients.md[{len(self.snapshots)}]", "exec"), self.namespace)
            self.snapshots.append(dict(self.namespace))
        return self.snapshots[example]


@pytest.fixture(scope="module")
def session(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.chdir(tmp_path_factory.mktemp("clients"))
    return _Session()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _check_canonical_object(ns: dict, ids: list[int]) -> dict:
    """The text is a schema-valid JSON object, its ids are the reference runtime's for it, and the guide accepts
    them (a complete instance, ended by EOS)."""
    text, schema, guide = ns["text"], ns["schema"], ns["guide"]
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert reference_runtime("smollm2").encode(text, add_special_tokens=False).ids == ids, text
    assert guide.accepts(ids), (text, ids)
    return value


def test_the_page_has_the_three_client_examples():
    assert len(EXAMPLES) == 3
    assert "outlines.from_transformers" in EXAMPLES[OUTLINES_TRANSFORMERS]
    assert "llama_cpp.Llama(" in EXAMPLES[LLAMA_CPP]
    assert "outlines.from_llamacpp" in EXAMPLES[OUTLINES_LLAMACPP]


def test_outlines_transformers_model(session):
    from outlines.processors import OutlinesLogitsProcessor

    ns = session.after(OUTLINES_TRANSFORMERS)
    assert isinstance(ns["processor"], OutlinesLogitsProcessor)
    value = _check_canonical_object(ns, ns["processor"].generated())
    assert set(value) == {"name", "age"}


def test_llama_cpp_logits_processor(session):
    ns = session.after(LLAMA_CPP)
    ids = ns["processor"].generated()
    _check_canonical_object(ns, ids)
    assert ns["llm"].tokenize(ns["text"].encode(), add_bos=False, special=False) == ids  # llama.cpp's own ids


def test_outlines_llamacpp_model(session):
    ns = session.after(OUTLINES_LLAMACPP)
    ids = ns["processor"].generated()
    _check_canonical_object(ns, ids)
    assert ns["llm"].tokenize(ns["text"].encode(), add_bos=False, special=False) == ids


def test_a_guide_of_another_vocabulary_is_refused(session):
    processor = LlamaCppProcessor(session.after(OUTLINES_TRANSFORMERS)["guide"])
    with pytest.raises(ValueError, match="another tokenizer"):
        processor(np.arange(3), np.zeros(1000, dtype=np.float32))


def test_nothing_outside_the_integrations_imports_them():
    """The clients stay optional: no module of the four packages but the adapters names product.integrations."""
    importers = []
    for package in ("automata", "bpe", "product", "vegas"):
        for path in (ROOT / package).rglob("*.py"):
            if path.is_relative_to(ROOT / "product" / "integrations"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(name.startswith("product.integrations") for name in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert not importers, importers


def test_sglang_grammar_backend_through_sglang_classes(session):
    """Where SGLang imports (a GPU machine; never in CI): the backend built by SGLang's registry, grammars compiled
    through its cache and executor, masks filled by ``GrammarRow`` batches and applied by ``GrammarMask``, on
    SmolLM2's logits, greedy, with a rollback and replay on the way. Not an SGLang server: its scheduler and model
    runner are not involved."""
    pytest.importorskip("sglang", reason="SGLang installs only with CUDA: an optional GPU-only client")
    import torch
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY, GrammarMask, GrammarRow

    from product.integrations.sglang import register_backend

    ns = session.after(OUTLINES_TRANSFORMERS)
    register_backend("canonmerge", compile_json=ns["vegas"].compile_schema)
    backend = GRAMMAR_BACKEND_REGISTRY["canonmerge"](None, ns["tokenizer"], 49152, {2})
    key = ("json", json.dumps(ns["schema"]))
    backend.set_cache(key, backend.get_cached_or_future_value(key, False)[0].result())
    grammar, cached = backend.get_cached_or_future_value(key, False)
    assert cached
    model, runtime = ns["model"].model, ns["runtime"]
    prompt, out = runtime.encode("Invent a fictional person. As JSON: ", add_special_tokens=False).ids, []
    with torch.no_grad():
        while not grammar.is_terminated() and len(out) < 40:
            logits = model(torch.tensor([prompt + out])).logits[:, -1, :].float()
            batch = torch.cat([logits, logits.clone()])  # row 1: a request without a grammar
            mask = grammar.allocate_vocab_mask(vocab_size=batch.shape[1], batch_size=2, device="cpu")
            grammar.fill_vocab_mask_batched([GrammarRow(row=0, grammar=grammar)], mask)
            GrammarMask(grammar, grammar.move_vocab_mask(mask, "cpu")).apply(batch)
            assert torch.equal(batch[1], logits[0])
            token = int(batch[0].argmax())
            grammar.accept_token(token)
            if len(out) == 3:
                grammar.rollback(1)
                grammar.accept_token(token)
            out.append(token)
    assert out[-1] == 2
    ns = dict(ns, text=runtime.decode(out[:-1]))
    _check_canonical_object(ns, out[:-1])
