"""llama-cpp-python 0.3.36 on libdeepseek (run by scripts/test-llama-cpp-python.sh, which sets
LLAMA_CPP_LIB_PATH to a directory whose libllama.so is our library).

usage: python test_llama_cpp_python.py MODEL.gguf DEEPSEEK_CLI
Exits non-zero (assertion) on the first failure; prints one line per passed check.
"""
import json
import os
import subprocess
import sys
import time

MODEL, CLI = sys.argv[1], sys.argv[2]
PROMPT = "def fibonacci(n):"
N = 6


def ok(what):
    print(f"ok: {what} ({time.time() - T0:.1f}s)", flush=True)


T0 = time.time()
import llama_cpp  # noqa: E402  (resolves every function of llama.h through ctypes)

lib_path = llama_cpp.llama_cpp._lib._name
assert "libllama.so" in lib_path and os.path.realpath(lib_path).endswith("libdeepseek.so"), lib_path
assert llama_cpp.llama_cpp.llama_version() == b"0.0.11312", llama_cpp.llama_cpp.llama_version()
ok(f"import llama_cpp ({os.path.realpath(lib_path)})")

llm = llama_cpp.Llama(model_path=MODEL, n_ctx=256, n_threads=2, n_batch=64, verbose=False, seed=1234)
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
ours = out["choices"][0]["text"]
cli = subprocess.run([CLI, "-m", MODEL, "-p", PROMPT, "-n", str(N), "--temp", "0", "--json", "-c", "256"],
                     capture_output=True, text=True, check=True)
theirs = json.loads(cli.stdout)["text"]
assert ours == theirs, (ours, theirs)
assert out["usage"]["completion_tokens"] == N, out["usage"]
ok(f"greedy create_completion == deepseek-cli: {ours!r}")

# save_state / load_state: the next logits after restoring are identical
llm.reset()
llm.eval(llm.tokenize(PROMPT.encode()))
state = llm.save_state()
first = list(llm.scores[llm.n_tokens - 1][:50])
llm.eval(llm.tokenize(b" return"))  # move on, then restore
llm.load_state(state)
assert llm.n_tokens == state.n_tokens
llm.eval(llm.tokenize(b" x", add_bos=False))
after_restore = list(llm.scores[llm.n_tokens - 1][:50])
llm.reset()
llm.eval(llm.tokenize(PROMPT.encode()) + llm.tokenize(b" x", add_bos=False))
fresh = list(llm.scores[llm.n_tokens - 1][:50])
assert after_restore == fresh, "logits after load_state differ from a fresh evaluation"
assert first != fresh, (first[:5], fresh[:5])
ok("save_state/load_state")
print("all llama-cpp-python checks passed")
