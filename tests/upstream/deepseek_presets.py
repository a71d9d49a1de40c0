"""pytest plugin for llama.cpp b11312's server test suite (tools/server/tests/unit) on libdeepseek.

Loaded with `-p deepseek_presets` by scripts/check-upstream-suites.sh; upstream's files stay as
they are. It
  - points every ServerPreset at a model the repo can fetch (scripts/fetch-models.sh) instead
    of a Hugging Face download, keeping the preset's other settings;
  - skips the presets' download step (`load_all`), and answers `download_file` for the files
    that have a stand-in (the speculative tests' draft model: the target's stand-in itself,
    which shares its vocabulary);
  - gives a stand-in the settings its original carries in its file (bge-small's CLS pooling);
  - lays out a Hugging Face cache of links to the stand-ins under the repo names the router
    tests ask for (LLAMA_CACHE), and creates the suite's scratch folder `tmp`;
  - marks the test ids listed in server-expected-failures.txt as expected failures, each with
    its category (CATEGORIES below) and note — strictly: a listed test that passes fails the
    run. The list holds the tests that fail on upstream's own library too with the same
    stand-ins (`scripts/check-upstream-suites.sh server-upstream` checks that), plus those of
    category "numerics", which must pass there.

Environment: DEEPSEEK_MODELS (the fetched models' directory), DEEPSEEK_SERVER_EXPECTED (the
list; default: next to this file), DEEPSEEK_SUITE_TARGET (deepseek | upstream),
DEEPSEEK_HF_CACHE (where to lay out the cache; default: a new temporary folder).
"""
import os
import pathlib
import tempfile

import pytest
import utils

MODELS = pathlib.Path(os.environ.get("DEEPSEEK_MODELS", pathlib.Path.home() / ".cache/deepseek/models"))
# what stands in for each of upstream's test models
STAND_INS = {
    "tinyllama2": "smollm2-135m-instruct-q4_1.gguf",       # stories260K (llama)
    "bert_bge_small": "smollm2-135m-instruct-q4_1.gguf",   # an embedding model (bert: not an architecture we run)
    "bert_bge_small_with_fa": "smollm2-135m-instruct-q4_1.gguf",
    "tinyllama_infill": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",  # a model with FIM tokens
    "stories15m_moe": "smollm2-135m-instruct-q4_1.gguf",   # stories15M MoE (llama)
    "jina_reranker_tiny": "smollm2-135m-instruct-q4_1.gguf",  # no reranker can be fetched
    "tinygemma3": "smollm2-135m-instruct-q4_1.gguf",       # gemma3 + vision: not ours
}


# settings the original model carries in its file and the stand-in does not
STAND_IN_SETTINGS = {
    "bert_bge_small": {"pooling": "cls"},          # bge-small's file says CLS pooling
    "bert_bge_small_with_fa": {"pooling": "cls"},
}


def _stand_in(name, original):
    def preset():
        server = original()
        if server.model_hf_repo or server.model_hf_file or server.model_url:
            server.model_hf_repo = None
            server.model_hf_file = None
            server.model_url = None
            server.model_file = str(MODELS / STAND_INS[name])
        for key, value in STAND_IN_SETTINGS.get(name, {}).items():
            setattr(server, key, value)
        server.offline = False
        return server
    return staticmethod(preset)


for _name, _file in STAND_INS.items():
    _orig = getattr(utils.ServerPreset, _name)
    setattr(utils.ServerPreset, _name, _stand_in(_name, _orig))
utils.ServerPreset.load_all = staticmethod(lambda: None)

FILE_STAND_INS = {
    "https://huggingface.co/ggml-org/tiny-llamas/resolve/main/stories15M-q4_0.gguf": "smollm2-135m-instruct-q4_1.gguf",
}
_download_file = utils.download_file


def _download(url, output_file_path=None):
    if url in FILE_STAND_INS:
        return str(MODELS / FILE_STAND_INS[url])
    return _download_file(url, output_file_path)


# test modules take it with `from utils import *` when they are collected, after this plugin loads
utils.download_file = _download

# The router tests find their models in the Hugging Face cache (llama-server's `--models-dir`-less
# router lists the cached repos): a cache of our own, in upstream's layout
# (models--OWNER--NAME/refs/main -> snapshots/COMMIT/FILE), whose files are links to the
# stand-ins, so `ggml-org/tinygemma3-GGUF:Q8_0` and the others resolve offline. One stand-in for
# all of them (SmolLM2): the router's speculative test pairs two of them as target and draft,
# which must share a vocabulary. No mmproj file: the stand-ins are text-only.
HF_STAND_INS = {
    ("ggml-org/tinygemma3-GGUF", "tinygemma3-Q8_0.gguf"): "smollm2-135m-instruct-q4_1.gguf",
    ("ggml-org/test-model-stories260K", "stories260K-F32.gguf"): "smollm2-135m-instruct-q4_1.gguf",
    ("ggml-org/test-model-stories260K-infill", "stories260K-infill-F32.gguf"): "smollm2-135m-instruct-q4_1.gguf",
}
HF_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _hf_cache():
    root = pathlib.Path(os.environ.get("DEEPSEEK_HF_CACHE") or tempfile.mkdtemp(prefix="deepseek-hf-cache-"))
    for (repo, name), target in HF_STAND_INS.items():
        d = root / ("models--" + repo.replace("/", "--"))
        (d / "refs").mkdir(parents=True, exist_ok=True)
        (d / "refs" / "main").write_text(HF_COMMIT)
        f = d / "snapshots" / HF_COMMIT / name
        f.parent.mkdir(parents=True, exist_ok=True)
        if not f.is_symlink():
            f.symlink_to(MODELS / target)
    return root


# LLAMA_CACHE is the first place llama.cpp's cache lookup reads (common/hf-cache.cpp), before
# HF_HUB_CACHE; the suite's servers get LLAMA_CACHE=tmp unless it is set
os.environ["LLAMA_CACHE"] = str(_hf_cache())
# upstream's load_all creates the suite's scratch folder (tools/server/tests/tmp, the servers'
# LLAMA_CACHE); some tests write their preset files there
os.makedirs("tmp", exist_ok=True)


CATEGORIES = {
    "model": "asserts text, token counts or vectors of the specific model upstream's preset downloads; the stand-in is another model",
    "network": "downloads a file from Hugging Face at run time (no network here)",
    "vision": "needs a vision model and its mmproj (tinygemma3); neither this library nor the stand-ins run images",
    "webui": "needs llama-server's built-in web UI, which the llama-cpp-python sdist's build does not include",
    "todo": "a llama-server feature deepseek-server does not have yet (issue 51: router mode, sleep mode, /slots, slot save/restore, speculative decoding, prompt progress, n > 1, ...)",
    "numerics": "sampled text decides it: with our logits (within the quantized tolerance of upstream's, tests/data/README.md) the stand-in samples other tokens than with upstream's library and ends early (EOS); passes on upstream's library",
}
# Which library llama-server runs on: "deepseek" (preloaded, the default) or "upstream" (its own
# libllama: scripts/check-upstream-suites.sh server-upstream, which checks the list itself).
TARGET = os.environ.get("DEEPSEEK_SUITE_TARGET", "deepseek")


def _expected():
    """id -> (category, note) from the list: `id<TAB>category[<TAB>note]`."""
    path = pathlib.Path(os.environ.get("DEEPSEEK_SERVER_EXPECTED", pathlib.Path(__file__).with_name("server-expected-failures.txt")))
    out = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        test_id, category, *note = line.split("\t")
        if category not in CATEGORIES:
            raise pytest.UsageError(f"{path}: unknown category {category!r} for {test_id}")
        out[test_id] = (category, note[0] if note else "")
    return out


def pytest_collection_modifyitems(config, items):
    expected = _expected()
    seen = set()
    for item in items:
        # ids as `file::test[params]`, relative to unit/
        key = item.nodeid.split("unit/", 1)[-1]
        if key not in expected:
            continue
        seen.add(key)
        category, note = expected[key]
        if TARGET == "upstream" and category == "numerics":
            continue  # must pass on upstream's library
        # strict: a listed test that passes fails the run, so the list cannot go stale
        item.add_marker(pytest.mark.xfail(reason=f"{category}: {CATEGORIES[category]}" + (f" ({note})" if note else ""), strict=True))
    # ids of the files collected that match no test (with -k most ids are deselected)
    files = {item.nodeid.split("unit/", 1)[-1].split("::")[0] for item in items}
    stale = sorted(t for t in set(expected) - seen if t.split("::")[0] in files)
    if stale and not config.getoption("keyword"):
        raise pytest.UsageError(f"deepseek_presets: {len(stale)} listed ids match no test: {stale[:5]}")
