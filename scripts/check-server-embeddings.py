#!/usr/bin/env python3
"""deepseek-server's embeddings against llama.cpp b11312's for the same model and tokens.

tests/data/embeddings/smollm2-135m-instruct-q4_1.f32 holds upstream's vectors (embed.c on its
libllama, see tests/embeddings.rs) for three token sequences: per-token hidden states (pooling
NONE), then MEAN, CLS and LAST pooling under causal attention, then two non-causal cases (not
checked here: the server runs the model's own, causal, attention). This script starts the server
with each --pooling, sends the three sequences as token arrays in one request (so the server
decodes them together, as embed.c did), and checks each vector's cosine with upstream's (the
server normalizes pooled vectors, which leaves the cosine as it is).

usage: scripts/check-server-embeddings.py [SERVER_BIN] [MODELS_DIR]   (exit 0: all match)
"""
import json
import math
import os
import pathlib
import socket
import struct
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/ci/deepseek-server")
MODELS = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("DEEPSEEK_MODELS", pathlib.Path.home() / ".cache/deepseek/models"))
MODEL = "smollm2-135m-instruct-q4_1"
LEN = [7, 12, 5]
MIN_COSINE = 0.998


def token(s, i):
    # tests/embeddings.rs's token(s, i)
    return (i * 53 + 7 * s + 3) % 400


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def serve(pooling):
    port = free_port()
    p = subprocess.Popen([BIN, "-m", str(MODELS / f"{MODEL}.gguf"), "--port", str(port), "--embedding", "--pooling", pooling, "-np", "3", "-c", "768", "-t", "2"], stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return p, port
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise SystemExit(f"the server with --pooling {pooling} did not become ready")


def main():
    raw = (ROOT / f"tests/data/embeddings/{MODEL}.f32").read_bytes()
    golden = struct.unpack(f"<{len(raw) // 4}f", raw)
    seqs = [[token(s, i) for i in range(n)] for s, n in enumerate(LEN)]
    n_tok = sum(LEN)
    n_embd = len(golden) // (n_tok + 9 + 6)
    vec = lambda k: golden[k * n_embd:(k + 1) * n_embd]
    worst = 1.0
    # pooling none: the native route's per-token vectors, in embed.c's order
    for pooling, first in [("none", 0), ("mean", n_tok), ("cls", n_tok + 3), ("last", n_tok + 6)]:
        p, port = serve(pooling)
        try:
            if pooling == "none":
                res = post(port, "/embeddings", {"input": seqs})
                ours = [row for item in res for row in item["embedding"]]
            else:
                res = post(port, "/v1/embeddings", {"input": seqs})
                ours = [d["embedding"] for d in res["data"]]
        finally:
            p.terminate()
            p.wait()
        cos = [cosine(v, vec(first + k)) for k, v in enumerate(ours)]
        print(f"pooling {pooling}: {len(ours)} vectors, min cosine {min(cos):.6f}")
        worst = min(worst, min(cos))
    ok = worst >= MIN_COSINE
    print(f"{'ok' if ok else 'FAILED'}: min cosine {worst:.6f} (bound {MIN_COSINE})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
