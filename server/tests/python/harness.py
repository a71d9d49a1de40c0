"""The deepseek-server process the Python server tests drive: started on a free loopback port,
waited for, its log kept, stopped by a signal."""

import os
import signal
import socket
import subprocess
import time

import httpx


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """deepseek-server BINARY on MODEL at a free loopback port, its log in /tmp; by default
    started and waited for until /health says the model is loaded."""

    def __init__(self, binary, model, *extra, env=None, wait=True):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(f"/tmp/deepseek-server-test-{self.port}.log", "w+")
        self.proc = subprocess.Popen(
            [binary, "-m", model, "--port", str(self.port), "-t", "2", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        if wait:
            self.wait_listening()
            self.wait_ready()

    def wait_listening(self):
        t0 = time.time()
        while time.time() - t0 < 30:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert self.proc.poll() is None, f"server exited: {self.logs()}"
                time.sleep(0.02)
        raise AssertionError("server did not listen")

    def wait_ready(self):
        t0 = time.time()
        while time.time() - t0 < 60:
            if httpx.get(self.base + "/health").status_code == 200:
                return
            time.sleep(0.05)
        raise AssertionError("server not ready: " + self.logs())

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)
