#!/usr/bin/env python3
"""Record upstream llama-server's `POST /apply-template` answers for every Jinja chat template.

For each template file of --templates (sorted by name) this starts

    llama-server -m MODEL --jinja --chat-template-file T --port P -c 2048 -t 2 --host 127.0.0.1

(loopback only; environment with TZ=UTC and no LLAMA_* variables), waits for GET /health to
answer 200, reads GET /props once, POSTs every conversation body of --conversations to
/apply-template and stops the server. Writes

  OUT/upstream.jsonl  one line per (template, conversation):
      {"template", "conversation", "status", "prompt"}     when the status is 200
      {"template", "conversation", "status", "error"}      otherwise (the answer's JSON)
    and one line {"template", "server_error"} (last stderr lines) for a template whose server
    never came up;
  OUT/meta.json       upstream version, model file name and sha256, UTC time of the recording
    (templates calling strftime_now() render the date), the command line, bos/eos tokens, and
    per template the /props `chat_template_caps`.

Python 3 standard library only. Usage:

  tests/data/gen/apply_template.py --server BIN --model GGUF --templates DIR \
      --conversations FILE --out DIR
"""
import argparse
import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

UPSTREAM = "llama.cpp b11312 (commit 0c1e57098, vendored by llama-cpp-python 0.3.36)"
HEALTH_TIMEOUT = 60.0
REQUEST_TIMEOUT = 60.0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=REQUEST_TIMEOUT):
    """Returns (status, raw bytes); never raises on an HTTP error status."""
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def parse_json(raw):
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {"raw": raw.decode("utf-8", "replace")}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tail(path, n=15):
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        return "\n".join(f.read().splitlines()[-n:])


def server_cmd(server, model, template, port):
    return [server, "-m", model, "--jinja", "--chat-template-file", template,
            "--port", str(port), "-c", "2048", "-t", "2", "--host", "127.0.0.1"]


def wait_healthy(proc, base):
    deadline = time.monotonic() + HEALTH_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            status, _ = http("GET", base + "/health", timeout=2)
            if status == 200:
                return True
        except (urllib.error.URLError, ConnectionError, socket.timeout, OSError):
            pass
        time.sleep(0.25)
    return False


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True, help="path of upstream's llama-server")
    ap.add_argument("--model", required=True, help="GGUF model file")
    ap.add_argument("--templates", required=True, help="folder of *.jinja templates")
    ap.add_argument("--conversations", required=True, help="conversations.json")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--only", nargs="*", help="only these template file names (for debugging)")
    args = ap.parse_args()

    with open(args.conversations, encoding="utf-8") as f:
        convs = json.load(f)
    templates = sorted(t for t in os.listdir(args.templates) if t.endswith(".jinja"))
    if args.only:
        templates = [t for t in templates if t in args.only]
    os.makedirs(args.out, exist_ok=True)

    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    env["TZ"] = "UTC"

    started = datetime.datetime.now(datetime.timezone.utc)
    meta = {
        "upstream": UPSTREAM,
        "server": "llama-server (tools/server), POST /apply-template",
        "model": os.path.basename(args.model),
        "model_sha256": sha256(args.model),
        "recorded_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "recorded_date": started.strftime("%Y-%m-%d"),
        "server_env": {"TZ": "UTC"},
        "command": " ".join(server_cmd("llama-server", os.path.basename(args.model),
                                       "TEMPLATE", "PORT")),
        "conversations": os.path.basename(args.conversations),
        "n_templates": len(templates),
        "n_conversations": len(convs),
        "bos_token": None,
        "eos_token": None,
        "build_info": None,
        "templates": {},
    }

    out_path = os.path.join(args.out, "upstream.jsonl")
    with open(out_path, "w", encoding="utf-8") as out:
        for name in templates:
            path = os.path.abspath(os.path.join(args.templates, name))
            port = free_port()
            base = "http://127.0.0.1:%d" % port
            errlog = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
            proc = subprocess.Popen(server_cmd(args.server, args.model, path, port), env=env,
                                    stdin=subprocess.DEVNULL, stdout=errlog,
                                    stderr=subprocess.STDOUT)
            try:
                if not wait_healthy(proc, base):
                    stop(proc)
                    errlog.close()
                    rec = {"template": name, "server_error": tail(errlog.name)}
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    meta["templates"][name] = {"server_error": True}
                    print("%-60s SERVER ERROR" % name, file=sys.stderr)
                    continue
                status, raw = http("GET", base + "/props")
                props = parse_json(raw) if status == 200 else {}
                info = {}
                if "chat_template_caps" in props:
                    info["chat_template_caps"] = props["chat_template_caps"]
                for key in ("bos_token", "eos_token", "build_info"):
                    if key in props:
                        if meta[key] is None:
                            meta[key] = props[key]
                        elif meta[key] != props[key]:
                            info[key] = props[key]  # only where it differs from the first
                meta["templates"][name] = info
                n_ok = 0
                for conv in convs:
                    status, raw = http("POST", base + "/apply-template", conv["body"])
                    rec = {"template": name, "conversation": conv["name"], "status": status}
                    if status == 200:
                        rec["prompt"] = parse_json(raw).get("prompt")
                        n_ok += 1
                    else:
                        rec["error"] = parse_json(raw)
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                print("%-60s %d/%d ok" % (name, n_ok, len(convs)), file=sys.stderr)
            finally:
                stop(proc)
                if not errlog.closed:
                    errlog.close()
                os.unlink(errlog.name)
            out.flush()

    meta["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(os.path.join(args.out, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
