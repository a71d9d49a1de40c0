"""Structured output of deepseek-server against llama.cpp b11312's llama-server (a manual check,
not run by the tests: it needs a llama-server build).

Usage: compare_llama_server.py DEEPSEEK_SERVER LLAMA_SERVER MODEL.gguf [SCHEMA_CASES]

Starts both servers on MODEL (llama-server with --no-jinja: the built-in chat templates, as
deepseek-server formats chats), sends every schema of SCHEMA_CASES (default:
chat/tests/data/json_schema_oracle.txt, the schemas upstream converts) as `json_schema` on
/v1/completions and as `response_format` json_schema on /v1/chat/completions, greedy, plus a few
GBNF grammars and bad requests, and compares text and finish reason. llama-server is killed and
restarted when it passes 3 GB (some grammars make upstream's stacks explode) or stops answering.

2026-12-01, tiny-qwen2-f32 (tests/data/tiny): 279 of 297 requests identical; 4 differ only where
max_tokens cut a UTF-8 sequence (deepseek-server ends the text with U+FFFD, llama-server drops
the bytes); 14 are grammars with a repetition {m,n} with n < m (minLength > maxLength, or an
integer minimum of 16 digits, for which upstream's converter writes [0-9]{16,15}): llama-server's
memory explodes, deepseek-server answers 400 with the parser's reason. Sampled (temperature > 0)
outputs differ in places even without a grammar, so only greedy requests are compared.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

OURS, LLAMA, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
CASES = sys.argv[4] if len(sys.argv) > 4 else os.path.join(os.path.dirname(__file__), "../../../chat/tests/data/json_schema_oracle.txt")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv):
        self.argv, self.port = argv, free_port()
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.argv + ["--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.time()
        while time.time() - t0 < 60:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        raise SystemExit(f"{self.argv[0]} did not start")

    def restart(self):
        self.proc.kill()
        self.proc.wait()
        self.start()

    def rss(self):
        try:
            return int(open(f"/proc/{self.proc.pid}/statm").read().split()[1]) * 4096
        except OSError:
            return 0

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                d = json.load(r)
        except urllib.error.HTTPError as e:
            return (e.code, (json.loads(e.read() or b"{}").get("error") or {}).get("message", ""))
        except OSError:
            return None
        c = d["choices"][0]
        return (c["message"]["content"] if "message" in c else c["text"], c["finish_reason"])


common = ["-m", MODEL, "-t", "1", "-np", "1", "-c", "1024"]
ours = Server([OURS] + common)
ref = Server([LLAMA] + common + ["--no-jinja"])


def watchdog():
    while True:
        time.sleep(0.2)
        if ref.rss() > 3e9:
            ref.proc.kill()


threading.Thread(target=watchdog, daemon=True).start()

text = open(CASES, encoding="utf-8").read()
schemas = [json.loads(b.split("\n", 1)[0]) for b in text.split("\n### ")[1:] if "\n--- ok\n" in b]
requests = []
for s in schemas:
    requests.append(("/v1/completions", {"prompt": "Data:", "json_schema": s, "max_tokens": 48, "temperature": 0}))
    requests.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": "data"}], "response_format": {"type": "json_schema", "json_schema": {"schema": s}}, "max_tokens": 48, "temperature": 0}))
for g in ['root ::= ("yes" | "no") " " [a-z]{1,5} "!"', 'root ::= [0-9]+ ("." [0-9]+)?', 'root ::= "{" [a-z": ,]* "}"']:
    requests.append(("/v1/completions", {"prompt": "Say:", "grammar": g, "max_tokens": 48, "temperature": 0}))
    requests.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "grammar": g, "max_tokens": 48, "temperature": 0}))
requests.append(("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}, "max_tokens": 64, "temperature": 0}))

same, differ, ref_failed = 0, 0, 0
for path, body in requests:
    a, b = ours.post(path, body), ref.post(path, body)
    if b is None:
        ref_failed += 1
        print(f"llama-server failed (memory or no answer): {json.dumps(body)[:160]}\n  deepseek-server: {a!r:.200}")
        ref.restart()
    elif a == b:
        same += 1
    else:
        differ += 1
        print(f"differ: {path} {json.dumps(body)[:160]}\n  deepseek-server: {a!r:.300}\n  llama-server:    {b!r:.300}")
print(f"{same} identical, {differ} differ, {ref_failed} llama-server failures, of {len(requests)}")
ours.proc.kill()
ref.proc.kill()
