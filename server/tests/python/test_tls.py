"""deepseek-server over HTTPS (--ssl-key-file / --ssl-cert-file), driven by real clients
(httpx, the openai client, Python's ssl and http.client) that verify the server's certificate.
Run by server/tests/tls.rs as: python test_tls.py SERVER MODEL KEY CERT; prints
"all tls checks passed" at the end."""

import http.client
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time

import httpx
import openai

import harness

SERVER, MODEL, KEY, CERT = sys.argv[1:5]
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def start(*extra):
    srv = harness.Server(SERVER, MODEL, "--ssl-key-file", KEY, "--ssl-cert-file", CERT, *extra, wait=False)
    srv.base = f"https://127.0.0.1:{srv.port}"
    srv.wait_listening()
    t0 = time.time()
    while time.time() - t0 < 60:
        assert srv.proc.poll() is None, srv.logs()
        if httpx.get(srv.base + "/health", verify=CERT).status_code == 200:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("server not ready: " + srv.logs())
    assert f"listening on https://127.0.0.1:{srv.port}" in srv.logs(), srv.logs()
    return srv


def ctx(alpn=("http/1.1",)):
    c = ssl.create_default_context(cafile=CERT)
    if alpn:
        c.set_alpn_protocols(list(alpn))
    return c


def check_health_and_certificate(srv):
    r = httpx.get(srv.base + "/health", verify=CERT)
    assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text
    # The certificate is really the one given: a client that trusts only the system's
    # authorities refuses it.
    try:
        httpx.get(srv.base + "/health", verify=True)
        raise AssertionError("a self-signed certificate was accepted by the system's trust store")
    except httpx.ConnectError as e:
        assert "CERTIFICATE_VERIFY_FAILED" in str(e), e


def check_alpn(srv):
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
        with ctx(("h2", "http/1.1")).wrap_socket(raw, server_hostname="localhost") as s:
            assert s.selected_alpn_protocol() == "http/1.1", s.selected_alpn_protocol()
            assert s.version() in ("TLSv1.2", "TLSv1.3"), s.version()
    # A client that speaks only h2 is refused in the handshake (no common protocol).
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:
        try:
            ctx(("h2",)).wrap_socket(raw, server_hostname="localhost")
            raise AssertionError("an h2-only client was accepted")
        except ssl.SSLError as e:
            assert "NO_APPLICATION_PROTOCOL" in str(e).upper() or "ALERT" in str(e).upper(), e


def check_chat(srv):
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120, http_client=httpx.Client(verify=CERT))
    r = c.chat.completions.create(model="m", messages=PROMPT, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    assert text and r.choices[0].finish_reason in ("stop", "length"), r
    assert r.usage.completion_tokens > 0, r.usage
    # Streamed: the same greedy answer, in several chunks, with a finish_reason at the end.
    chunks = list(c.chat.completions.create(model="m", messages=PROMPT, max_tokens=24, temperature=0, stream=True))
    pieces = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(pieces) > 1, chunks
    assert "".join(pieces) == text, ("".join(pieces), text)
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == [r.choices[0].finish_reason], chunks


def check_keep_alive(srv):
    # Two requests on one TLS connection: http.client reconnects only if the server closed it.
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx(), timeout=30)
    conn.request("GET", "/health")
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read()) == {"status": "ok"}
    first = conn.sock
    assert first is not None, "the server closed a keep-alive connection"
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 4}), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = json.loads(r.read())
    assert r.status == 200 and body["choices"][0]["text"], body
    assert conn.sock is first, "the second request went over a new connection"
    conn.close()


def check_plain_http_fails_cleanly(srv):
    # Plain HTTP to the HTTPS port: the client gets an error, not an answer, and not a hang.
    try:
        r = httpx.get(f"http://127.0.0.1:{srv.port}/health", timeout=15)
        raise AssertionError(f"plain HTTP was answered: {r.status_code} {r.text}")
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError) as e:
        assert not isinstance(e, httpx.TimeoutException), e
    # The server still serves.
    r = httpx.get(srv.base + "/health", verify=CERT)
    assert r.status_code == 200, r.text


def stalled_clients(port):
    """Two clients that hold a TCP connection without finishing a handshake: one sends
    nothing, one half a TLS record header."""
    quiet = socket.create_connection(("127.0.0.1", port))
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"\x16\x03\x01\x02")
    return [quiet, half]


def check_stalled_handshakes_are_closed(stalled, opened):
    # The server closes both (its handshake timeout is 10 s): recv sees the end of the stream
    # (or a reset), rather than waiting forever.
    for s in stalled:
        s.settimeout(max(1.0, opened + 30 - time.time()))
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise AssertionError("a connection that never finished its TLS handshake was not closed")
        s.close()


def check_unix_socket_is_plain(srv):
    path = srv.uds
    assert f"listening on unix://{path} (plain HTTP: TLS is for TCP addresses only)" in srv.logs(), srv.logs()
    with httpx.Client(transport=httpx.HTTPTransport(uds=path)) as c:
        r = c.get("http://localhost/health")
        assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text


def check_graceful_shutdown(srv):
    # A stream in flight when SIGTERM arrives runs to its end over TLS; then the server exits 0,
    # a connection still in its handshake (sending nothing) notwithstanding.
    quiet = socket.create_connection(("127.0.0.1", srv.port))
    with httpx.stream("POST", srv.base + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": True, "stream": True}, timeout=60, verify=CERT) as s:
        lines = s.iter_lines()
        first = next(l for l in lines if l)
        assert first.startswith("data: "), first
        srv.proc.send_signal(signal.SIGTERM)
        rest = [l for l in lines if l]
    assert rest[-1] == "data: [DONE]", rest[-3:]
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] == "length", rest[-2]
    assert srv.proc.wait(30) == 0, srv.logs()
    quiet.close()


def main():
    sock = f"/tmp/deepseek-tls-test-{os.getpid()}.sock"
    srv = start("-np", "2", "-c", "2048", "--host", f"127.0.0.1,{sock}")
    srv.uds = sock
    try:
        opened = time.time()
        stalled = stalled_clients(srv.port)
        # Everything below runs while the stalled connections are open.
        for check in [check_health_and_certificate, check_alpn, check_chat, check_keep_alive, check_plain_http_fails_cleanly, check_unix_socket_is_plain]:
            t0 = time.time()
            check(srv)
            print(f"ok {check.__name__} ({time.time() - t0:.1f} s)", flush=True)
        # Requests from two threads at once, while stalled clients are still connected.
        errors = []

        def one():
            try:
                check_chat(srv)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        print("ok concurrent chats beside stalled handshakes", flush=True)
        check_stalled_handshakes_are_closed(stalled, opened)
        print(f"ok stalled handshakes closed ({time.time() - opened:.1f} s after opening)", flush=True)
        r = httpx.get(srv.base + "/health", verify=CERT)
        assert r.status_code == 200, r.text
        check_graceful_shutdown(srv)
        print("ok check_graceful_shutdown", flush=True)
        logs = srv.logs()
        assert "panicked" not in logs and "internal error" not in logs, logs
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    print("all tls checks passed")


if __name__ == "__main__":
    main()
