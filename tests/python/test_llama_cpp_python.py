"""llama-cpp-python 0.3.36 on libdeepseek (run by scripts/test-llama-cpp-python.sh, which sets
LLAMA_CPP_LIB_PATH to a directory whose libllama.so is our library).

usage: python test_llama_cpp_python.py MODEL.gguf DEEPSEEK_CLI
       python test_llama_cpp_python.py MODEL.gguf --write-embedding-reference OUT.json
Exits non-zero (assertion) on the first failure; prints one line per passed check.
The second form, run with LLAMA_CPP_LIB_PATH at upstream llama.cpp b11312's build, wrote
tests/data/python/qwen05-embeddings-b11312.json (upstream's per-token embeddings of EMBED_TEXT);
scripts/regenerate-references.sh runs it so.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np

MODEL = sys.argv[1]
PROMPT = "def fibonacci(n):"
EMBED_TEXT = "def fibonacci(n):"
N = 6
PARAMS = dict(n_ctx=256, n_threads=2, n_batch=64, verbose=False)
# tests/data/README.md (Tolerances): quantized weights, every row's cosine similarity with the reference >= 0.998.
EMBEDDING_MIN_COSINE = 0.998
EMBEDDING_REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../data/python/qwen05-embeddings-b11312.json")


def ok(what):
    print(f"ok: {what} ({time.time() - T0:.1f}s)", flush=True)


T0 = time.time()
import llama_cpp  # noqa: E402  (resolves every function of llama.h through ctypes)


def embeddings_of(text):
    llm = llama_cpp.Llama(model_path=MODEL, embedding=True, **PARAMS)
    assert llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_NONE, llm.pooling_type()
    rows = llm.embed(text)  # pooling NONE: one row per token
    return llm.tokenize(text.encode()), np.array(rows, dtype=np.float32)


if sys.argv[2] == "--write-embedding-reference":
    tokens, rows = embeddings_of(EMBED_TEXT)
    with open(sys.argv[3], "w") as f:
        # REFERENCE_UPSTREAM: the llama.cpp build scripts/regenerate-references.sh checked
        upstream = {"upstream": os.environ["REFERENCE_UPSTREAM"]} if os.environ.get("REFERENCE_UPSTREAM") else {}
        json.dump({"producer": os.path.realpath(llama_cpp.llama_cpp._lib._name), **upstream, "model": os.path.basename(MODEL),
                   "text": EMBED_TEXT, "tokens": tokens, "embeddings": [[float(f"{v:.6g}") for v in r] for r in rows]}, f)
    sys.exit(0)

CLI = sys.argv[2]
lib_path = llama_cpp.llama_cpp._lib._name
assert "libllama.so" in lib_path and os.path.realpath(lib_path).endswith("libdeepseek.so"), lib_path
assert llama_cpp.llama_cpp.llama_version() == b"0.0.11312", llama_cpp.llama_cpp.llama_version()
ok(f"import llama_cpp ({os.path.realpath(lib_path)})")

llm = llama_cpp.Llama(model_path=MODEL, seed=1234, **PARAMS)
assert llm.n_vocab() == 151936, llm.n_vocab()
ok("Llama(model_path=...)")

# tokenize / detokenize round trip (with a special token and non-ASCII text)
text = "Hello, wörld! <|im_start|> 123"
toks = llm.tokenize(text.encode(), add_bos=False, special=True)
assert len(toks) > 5 and 151644 in toks, toks
assert llm.detokenize(toks, special=True).decode() == text
ok("tokenize/detokenize round trip")

# greedy completion equals deepseek-cli's greedy output
out = llm.create_completion(PROMPT, max_tokens=N, temperature=0.0, top_k=1)
greedy = out["choices"][0]["text"]
cli = subprocess.run([CLI, "-m", MODEL, "-p", PROMPT, "-n", str(N), "--temp", "0", "--json", "-c", "256"],
                     capture_output=True, text=True, check=True)
theirs = json.loads(cli.stdout)["text"]
assert greedy == theirs, (greedy, theirs)
assert out["usage"]["completion_tokens"] == N, out["usage"]
ok(f"greedy create_completion == deepseek-cli: {greedy!r}")

# streaming: the chunks put together are the same greedy text
chunks = [c["choices"][0]["text"] for c in llm.create_completion(PROMPT, max_tokens=N, temperature=0.0, top_k=1, stream=True)]
assert len(chunks) >= 2 and "".join(chunks) == greedy, chunks
ok(f"streaming create_completion: {len(chunks)} chunks == greedy text")

# default sampling parameters (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, dist): a seed
# fixes the draw, another seed may change it
sampled = [llm.create_completion(PROMPT, max_tokens=12, seed=s)["choices"][0]["text"] for s in (7, 7, 8)]
assert sampled[0] == sampled[1] and sampled[0], sampled
ok(f"seeded default sampling is reproducible: {sampled[0]!r} / seed 8: {sampled[2]!r}")

# chat completion with the model's own (Jinja) chat template, greedy: the answer is right and
# equals a plain completion of the same conversation formatted by our llama_chat_apply_template
messages = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is 2+3? Answer with the number only."}]
chat = llm.create_chat_completion(messages=messages, temperature=0.0, top_k=1, max_tokens=8)
answer = chat["choices"][0]["message"]["content"]
assert answer.strip() == "5", answer
assert chat["choices"][0]["finish_reason"] == "stop", chat["choices"][0]
template = llama_cpp.llama_model_chat_template(llm.model, None)
c_msgs = (llama_cpp.llama_chat_message * len(messages))(*[llama_cpp.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in messages])
buf = ctypes.create_string_buffer(4096)
n = llama_cpp.llama_chat_apply_template(template, c_msgs, len(messages), True, buf, len(buf))
assert 0 < n < len(buf), n
formatted = buf.raw[:n]
plain = llm.create_completion(llm.tokenize(formatted, add_bos=False, special=True), temperature=0.0, top_k=1, max_tokens=8)
assert plain["choices"][0]["text"] == answer, (plain["choices"][0]["text"], answer)
ok(f"create_chat_completion: {answer!r}")

# save_state / load_state: a state saved after the prompt, restored into another context, gives
# the same next logits (bit for bit) as continuing the original context
def last_logits(model):
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model.ctx, -1), shape=(model.n_vocab(),)).copy()


prompt_tokens = llm.tokenize(PROMPT.encode())
x_token = llm.tokenize(b" x", add_bos=False)
llm.reset()
llm.eval(prompt_tokens)
state = llm.save_state()
assert state.n_tokens == len(prompt_tokens) and state.llama_state_size == len(state.llama_state) > 0
llm.eval(x_token)
continued = last_logits(llm)
other = llama_cpp.Llama(model_path=MODEL, **PARAMS)
other.eval(other.tokenize(b"import os\nimport sys\n"))  # different content in the cache first
other.load_state(state)
assert other.n_tokens == state.n_tokens
other.eval(x_token)
restored = last_logits(other)
assert np.array_equal(restored, continued), np.abs(restored - continued).max()
other.reset()
other.eval(other.tokenize(b"import os\nimport sys\n") + x_token)
assert not np.array_equal(last_logits(other), continued)  # the check can fail
# llama-cpp-python's prompt cache (save_state/load_state underneath) gives the same completion
llm.set_cache(llama_cpp.LlamaRAMCache())
cached = [llm.create_completion(PROMPT, max_tokens=N, temperature=0.0, top_k=1)["choices"][0]["text"] for _ in range(2)]
assert cached == [greedy, greedy], cached
llm.set_cache(None)
ok("save_state/load_state into another context: bit-identical next logits; LlamaRAMCache")

# embeddings (pooling NONE: one row per token) against upstream llama.cpp b11312's
tokens, rows = embeddings_of(EMBED_TEXT)
ref = json.load(open(EMBEDDING_REFERENCE))
assert tokens == ref["tokens"], (tokens, ref["tokens"])
ref_rows = np.array(ref["embeddings"], dtype=np.float32)
assert rows.shape == ref_rows.shape == (len(tokens), 896), (rows.shape, ref_rows.shape)
cos = [float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(rows, ref_rows)]
assert min(cos) >= EMBEDDING_MIN_COSINE, cos
ok(f"Llama(embedding=True).embed: {rows.shape}, cosine with upstream's >= {min(cos):.5f}")

# MEAN pooling: one vector, the mean of upstream's per-token rows (normalize=True: unit length); several inputs at
# once (llama-cpp-python decodes them as sequences of one batch) and create_embedding
pooled = llama_cpp.Llama(model_path=MODEL, embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, **PARAMS)
assert pooled.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_MEAN, pooled.pooling_type()
vec = np.array(pooled.embed(EMBED_TEXT, normalize=True), dtype=np.float32)
assert vec.shape == (896,), vec.shape
assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-4, np.linalg.norm(vec)
mean_ref = ref_rows.mean(axis=0)
mean_cos = float(np.dot(vec, mean_ref) / np.linalg.norm(mean_ref))
assert mean_cos >= EMBEDDING_MIN_COSINE, mean_cos
batch = np.array(pooled.embed([EMBED_TEXT, "import numpy as np", EMBED_TEXT], normalize=True), dtype=np.float32)
assert batch.shape == (3, 896) and float(np.dot(batch[0], batch[2])) > 0.99999 and float(np.dot(batch[0], batch[1])) < 0.999, batch.shape
assert float(np.dot(batch[0], vec)) > 0.999, float(np.dot(batch[0], vec))  # alone or beside others: the same up to prefill-kernel rounding
resp = pooled.create_embedding(["hello", "world"])
assert [d["index"] for d in resp["data"]] == [0, 1] and len(resp["data"][1]["embedding"]) == 896, resp["usage"]
ok(f"Llama(embedding=True, pooling_type=MEAN).embed and create_embedding: cosine with upstream's mean {mean_cos:.5f}")
# KV cache types: a quantized K cache without flash attention, and Q4_0 keys and values with it (a quantized V needs
# flash attention: Llama's default flash_attn=False asks for it DISABLED, which upstream refuses, and so do we); the
# greedy tokens are upstream's with the same cache types (tests/data/python/qwen05-kv-types-b11312.json).
KV_REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../data/python/qwen05-kv-types-b11312.json")
kv_ref = json.load(open(KV_REFERENCE))
for type_k, type_v, flash_attn in [(8, 1, False), (2, 2, True)]:
    kv = llama_cpp.Llama(model_path=MODEL, type_k=type_k, type_v=type_v, flash_attn=flash_attn, **PARAMS)
    prompt_tokens = kv.tokenize(kv_ref["prompt"].encode(), add_bos=False)
    assert prompt_tokens == kv_ref["prompt_tokens"], prompt_tokens
    want = kv_ref[f"type_k={type_k},type_v={type_v}"]
    got = []
    for t in kv.generate(prompt_tokens, top_k=1, temp=0.0):
        got.append(t)
        if len(got) == len(want):
            break
    # up to upstream's first near tie (its two best logits within 0.1; this machine's and another's llama.cpp
    # part there too), and at least 8 tokens
    gaps = kv_ref[f"type_k={type_k},type_v={type_v} gaps"]
    n = next((i for i, g in enumerate(gaps) if g < 0.1), len(want))
    assert n >= 8, (type_k, type_v, gaps)
    assert got[:n] == want[:n], (type_k, type_v, got, want, n)
    del kv
try:
    llama_cpp.Llama(model_path=MODEL, type_k=8, type_v=8, **PARAMS)
    raise AssertionError("a quantized V cache without flash attention was accepted")
except ValueError:
    pass
ok("Llama(type_k=8) and Llama(type_k=2, type_v=2, flash_attn=True): upstream's greedy tokens; type_v=8 without flash_attn refused as upstream")
print("all llama-cpp-python checks passed")
