"""deepseek-server's web UI in a real browser: Debian's headless chromium, driven by selenium
through chromedriver, against the server on SmolLM2-135M. The page must load from `/`, take
its defaults from /props (--ui-config), stream an answer that equals the API's own greedy
answer to the same request, stop mid-stream (the server stops generating), keep the
conversation across a reload, fold reasoning_content, say while the model loads, ask for the
API key when the server needs one and show the server's errors. Then the flags without a
browser: --no-webui, --path (no file outside the folder), --api-prefix, --ui-config-file and
bad values.

usage: test_webui.py SERVER MODEL SCREENSHOT_DIR
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from harness import Server  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

SERVER, MODEL, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(SHOTS, exist_ok=True)
passed = []


def check(name):
    passed.append(name)
    print(f"ok   {name}", flush=True)


def browser():
    # Not skipped when missing: the test exists to run in a browser (.ci/run installs both).
    for p, pkg in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")]:
        assert os.path.exists(p), f"{p} is missing: apt-get install {pkg} (.ci/run installs it)"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # the page's console: script errors, and requests the page's policy blocks, are SEVERE
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for a in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1100,850",
              f"--user-data-dir={tempfile.mkdtemp(prefix='deepseek-webui-chromium-')}"]:
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def wait(driver, cond, what, timeout=180):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond(driver)
        if v:
            return v
        time.sleep(0.05)
    shot = os.path.join(SHOTS, "timeout.png")
    driver.save_screenshot(shot)
    raise AssertionError(f"timed out waiting for {what} (screenshot {shot}); page: {messages(driver)}")


def messages(driver):
    return driver.execute_script("""
        return [...document.querySelectorAll('#messages .msg')].map(e => ({
            role: e.dataset.role, state: e.dataset.state,
            content: e.querySelector('.content').textContent,
            reasoning: (e.querySelector('.reasoning .text') || {}).textContent || '',
            error: (e.querySelector('.error') || {}).textContent || ''}));""")


def last_assistant(driver):
    m = [x for x in messages(driver) if x["role"] == "assistant"]
    return m[-1] if m else None


def ready(driver):
    return driver.execute_script("return document.body.dataset.ready === '1'")


def type_and_send(driver, text):
    from selenium.webdriver.common.by import By
    box = driver.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def set_settings(driver, **values):
    from selenium.webdriver.common.by import By
    if not driver.execute_script("return document.getElementById('settings').open"):
        driver.find_element(By.ID, "settings-open").click()
    for k, v in values.items():
        el = driver.find_element(By.ID, "set-" + k)
        el.clear()
        if v != "":
            el.send_keys(str(v))
    driver.find_element(By.ID, "settings-save").click()
    wait(driver, lambda d: not d.execute_script("return document.getElementById('settings').open"), "the settings to close", 10)


def record_stream(driver):
    """From now on, the texts the last assistant message shows while it streams."""
    driver.execute_script("""
        window.__seen = [];
        const box = document.getElementById('messages');
        new MutationObserver(() => {
            const all = box.querySelectorAll('.msg[data-role=assistant]');
            const el = all[all.length - 1];
            if (el && el.dataset.state === 'streaming') window.__seen.push(el.querySelector('.content').textContent);
        }).observe(box, {subtree: true, childList: true, characterData: true, attributes: true});""")


def api_answer(base, messages_, headers=None, **fields):
    r = httpx.post(base + "/v1/chat/completions", json={"messages": messages_, **fields}, headers=headers, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


def api_stream_prefix(base, messages_, n_chars, **fields):
    """The API's streamed answer, read until it holds at least n_chars characters."""
    text = ""
    with httpx.stream("POST", base + "/v1/chat/completions", json={"messages": messages_, "stream": True, **fields}, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                text += (ch.get("delta") or {}).get("content") or ""
            if len(text) >= n_chars:
                break
    return text


def metric(base, name):
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", httpx.get(base + "/metrics").text, re.M)
    assert m, name
    return float(m.group(1))


def raw_get(port, path, method="GET"):
    """The status of a request whose path goes out exactly as given (no client normalizes it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def start_fails(*extra):
    p = subprocess.run([SERVER, "-m", MODEL, "--port", "0", *extra], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, f"{extra} started"
    return p.stderr


# ---- the chat, in the browser ----

UI_CONFIG = {"temperature": 0, "max_tokens": 40}
Q1 = "What is the capital of France? Answer in one sentence."
Q2 = "Write a long story about a dragon who learns to bake bread."

srv = Server(SERVER, MODEL, "-c", "4096", "-np", "1", "--metrics", "--ui-config", json.dumps(UI_CONFIG))
driver = browser()
try:
    base = srv.base
    r = httpx.get(base + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), r
    assert "<title>deepseek-server</title>" in r.text
    assert "connect-src 'self'" in r.headers["content-security-policy"]
    etag = r.headers["etag"]
    assert httpx.get(base + "/", headers={"If-None-Match": etag}).status_code == 304
    assert httpx.get(base + "/index.html").text == r.text
    assert "unregister" in httpx.get(base + "/sw.js").text
    props = httpx.get(base + "/props").json()
    assert props["ui"] is True and props["ui_settings"] == UI_CONFIG, props
    check("/ serves the page (ETag, 304), /props passes --ui-config through")

    driver.get(base + "/")
    wait(driver, ready, "the page to read /props", 60)
    from selenium.webdriver.common.by import By
    assert driver.find_element(By.ID, "model").text == props["model_alias"]
    check("the page shows the model's name from /props")

    record_stream(driver)
    type_and_send(driver, Q1)
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "done", "the first answer")
    shown = last_assistant(driver)
    want = api_answer(base, [{"role": "user", "content": Q1}], temperature=0, max_tokens=40)
    assert shown["content"] == want["content"], (shown, want)
    assert shown["content"].strip() and not shown["error"]
    seen = [s for s in driver.execute_script("return window.__seen") if s]
    assert len(set(seen)) >= 3 and all(shown["content"].startswith(s) for s in seen), seen
    driver.save_screenshot(os.path.join(SHOTS, "answer.png"))
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    check(f"the streamed answer ({len(set(seen))} partial texts seen) equals the API's greedy answer: {shown['content']!r}")

    # A long answer, stopped mid-stream; max tokens set in the settings dialog.
    set_settings(driver, max_tokens=1500)
    assert json.loads(driver.execute_script("return localStorage.getItem('deepseek-webui.settings')")) == {"max_tokens": 1500}
    type_and_send(driver, Q2)
    wait(driver, lambda d: len((last_assistant(d) or {}).get("content", "")) > 40, "the second answer to start")
    assert last_assistant(driver)["state"] == "streaming"
    driver.find_element(By.ID, "stop").click()
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "stopped", "the stop")
    stopped = last_assistant(driver)["content"]
    assert not driver.find_element(By.ID, "stop").is_displayed() and driver.find_element(By.ID, "send").is_enabled()
    t0 = time.time()
    while metric(base, "llamacpp:requests_processing") != 0:
        assert time.time() - t0 < 10, "the server is still generating after the stop"
        time.sleep(0.1)
    time.sleep(0.5)
    assert last_assistant(driver)["content"] == stopped, "text arrived after the stop"
    history = [{"role": "user", "content": Q1}, {"role": "assistant", "content": shown["content"]}, {"role": "user", "content": Q2}]
    full = api_stream_prefix(base, history, len(stopped), temperature=0, max_tokens=1500)
    assert full.startswith(stopped), (stopped, full)
    check(f"stop ends the stream and the server's generation; the {len(stopped)} characters shown begin the API's answer")

    before = messages(driver)
    driver.refresh()
    wait(driver, ready, "the reloaded page", 60)
    after = messages(driver)
    assert [(m["role"], m["content"]) for m in after] == [(m["role"], m["content"]) for m in before] == [(m["role"], m["content"]) for m in history] + [("assistant", stopped)], after
    assert [m["state"] for m in after if m["role"] == "assistant"] == ["done", "stopped"]
    titles = driver.execute_script("return [...document.querySelectorAll('#convs li span')].map(e => e.textContent)")
    assert titles == [Q1[:48]], titles
    driver.save_screenshot(os.path.join(SHOTS, "reloaded.png"))
    check("a reload shows the conversation as it was (the stopped answer kept)")

    driver.find_element(By.ID, "new-chat").click()
    assert messages(driver) == []
    set_settings(driver, max_tokens=8, systemMessage="Answer in French.")
    type_and_send(driver, "Hello!")
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "done", "the answer in the new chat")
    want = api_answer(base, [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello!"}], temperature=0, max_tokens=8)
    assert last_assistant(driver)["content"] == want["content"]
    driver.find_elements(By.CSS_SELECTOR, "#convs li")[1].click()
    assert [m["content"] for m in messages(driver)] == [m["content"] for m in after]
    check("a new chat with a system prompt from the settings; the first chat is still there")

    set_settings(driver, max_tokens=-5, systemMessage="")
    type_and_send(driver, "Hello again")
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "error", "the refused request")
    r = httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": -5, "stream": True})
    assert r.status_code == 400
    err = last_assistant(driver)["error"]
    assert err == "400 Bad Request: " + r.json()["error"]["message"], err
    check(f"a request the server refuses shows its message: {err!r}")
finally:
    srv.stop()

# ---- reasoning: a template that opens a think section, so that all SmolLM2 says is thinking ----

THINK_TEMPLATE = """{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.role == 'assistant' and m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>
{% endif %}{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}"""
tpl = tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False)
tpl.write(THINK_TEMPLATE)
tpl.close()
srv = Server(SERVER, MODEL, "-c", "2048", "-np", "1", "--chat-template-file", tpl.name, "--ui-config", json.dumps({"temperature": 0, "max_tokens": 60}))
try:
    q = "What is 2+2? Think first."
    want = api_answer(srv.base, [{"role": "user", "content": q}], temperature=0, max_tokens=60)
    assert want.get("reasoning_content"), want
    driver.get(srv.base + "/")
    wait(driver, ready, "the page", 60)
    driver.execute_script("""
        window.__thinking = [];
        const box = document.getElementById('messages');
        new MutationObserver(() => {
            const d = box.querySelector('.msg[data-role=assistant][data-state=streaming] .reasoning');
            if (d && !d.hidden) window.__thinking.push([d.open, d.querySelector('summary').textContent]);
        }).observe(box, {subtree: true, childList: true, characterData: true, attributes: true});""")
    type_and_send(driver, q)
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "done", "the thinking answer")
    shown = last_assistant(driver)
    assert shown["reasoning"] == want["reasoning_content"] and shown["content"] == want["content"], (shown, want)
    assert [True, "Thinking…"] in driver.execute_script("return window.__thinking")
    details = driver.find_element(By.CSS_SELECTOR, ".msg[data-role=assistant] details.reasoning")
    summary = details.find_element(By.TAG_NAME, "summary")
    opened = details.get_property("open")
    summary.click()
    assert details.get_property("open") is not opened
    summary.click()
    assert details.get_property("open") is opened
    driver.save_screenshot(os.path.join(SHOTS, "reasoning.png"))
    check("reasoning_content streams into a foldable section, equal to the API's")
finally:
    srv.stop()

# ---- the page while the model loads ----

srv = Server(SERVER, MODEL, "-c", "1024", env={"DEEPSEEK_SERVER_TEST_LOAD_DELAY_MS": "6000"}, wait=False)
try:
    srv.wait_listening()
    driver.get(srv.base + "/")
    wait(driver, lambda d: "Loading the model" in d.find_element(By.ID, "banner").text, "the loading banner", 6)
    assert not ready(driver)
    wait(driver, ready, "the page once loaded", 60)
    assert driver.find_element(By.ID, "banner").text == ""
    check("the page is served while the model loads, says so, then turns ready")
finally:
    srv.stop()

# ---- an API key, under --api-prefix ----

KEY = "sk-webui-test"
cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
json.dump({"temperature": 0, "max_tokens": 12, "systemMessage": ""}, cfg)
cfg.close()
srv = Server(SERVER, MODEL, "-c", "2048", "-np", "1", "--api-key", KEY, "--api-prefix", "/llama", "--ui-config-file", cfg.name, wait=False)
try:
    srv.wait_listening()
    t0 = time.time()
    while httpx.get(srv.base + "/llama/health").status_code != 200:
        assert time.time() - t0 < 60
        time.sleep(0.05)
    base = srv.base + "/llama"
    assert httpx.get(base + "/").status_code == 200
    assert httpx.get(base + "/props").status_code == 401
    assert httpx.get(srv.base + "/").status_code == 404
    auth = {"Authorization": "Bearer " + KEY}
    assert httpx.get(base + "/props", headers=auth).json()["ui_settings"] == {"temperature": 0, "max_tokens": 12, "systemMessage": ""}
    check("under --api-prefix the page needs no key, /props does; --ui-config-file passed through")

    driver.get(base + "/")
    wait(driver, lambda d: d.execute_script("return document.getElementById('settings').open"), "the page to ask for the key", 30)
    assert "API key" in driver.find_element(By.ID, "settings-note").text
    set_settings(driver, apiKey=KEY)
    wait(driver, ready, "the page with the key", 30)
    type_and_send(driver, Q1)
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "done", "the answer with the key")
    want = api_answer(base, [{"role": "user", "content": Q1}], headers=auth, temperature=0, max_tokens=12)
    assert last_assistant(driver)["content"] == want["content"]
    check("the page asks for the API key, then chats with it")

    set_settings(driver, apiKey="wrong")
    wait(driver, lambda d: d.execute_script("return !document.getElementById('settings').open"), "the dialog to close", 5)
    type_and_send(driver, "Hi")
    wait(driver, lambda d: (last_assistant(d) or {}).get("state") == "error", "the error")
    err = last_assistant(driver)["error"]
    assert "401" in err and "Invalid API Key" in err, err
    driver.save_screenshot(os.path.join(SHOTS, "error.png"))
    check(f"the server's error is shown: {err!r}")
finally:
    srv.stop()
    driver.quit()

# ---- --no-webui, --path, bad values (no browser) ----

srv = Server(SERVER, MODEL, "-c", "1024", "--no-webui")
try:
    assert httpx.get(srv.base + "/").status_code == 404
    assert httpx.get(srv.base + "/index.html").status_code == 404
    assert "unregister" in httpx.get(srv.base + "/sw.js").text
    props = httpx.get(srv.base + "/props").json()
    assert props["ui"] is False and props["ui_settings"] == {}
    check("--no-webui: / is a 404, /sw.js removes an old worker, /props says ui false")
finally:
    srv.stop()

top = tempfile.mkdtemp(prefix="deepseek-webui-path-")
pub = os.path.join(top, "public")
os.makedirs(os.path.join(pub, "js"))
open(os.path.join(pub, "index.html"), "w").write("<h1>static</h1>")
open(os.path.join(pub, "js", "app.js"), "w").write("console.log(1)")
open(os.path.join(top, "secret.txt"), "w").write("secret")
os.symlink(os.path.join(top, "secret.txt"), os.path.join(pub, "link.txt"))
srv = Server(SERVER, MODEL, "-c", "1024", "--path", pub)
try:
    assert raw_get(srv.port, "/") == (200, b"<h1>static</h1>")
    assert raw_get(srv.port, "/index.html") == (200, b"<h1>static</h1>")
    r = httpx.get(srv.base + "/js/app.js")
    assert r.status_code == 200 and r.text == "console.log(1)" and r.headers["content-type"] == "application/javascript"
    assert raw_get(srv.port, "/js/app.js", "HEAD")[0] == 200
    for bad in ["/../secret.txt", "/js/../../secret.txt", "/%2e%2e/secret.txt", "/..%2fsecret.txt", "/link.txt", "/nothing.html"]:
        status, body = raw_get(srv.port, bad)
        assert status in (400, 404) and b"secret" not in body, (bad, status, body)
    assert raw_get(srv.port, "/js/app.js", "POST")[0] == 404
    assert httpx.get(srv.base + "/v1/models").status_code == 200
    assert "unregister" in httpx.get(srv.base + "/sw.js").text
    check("--path serves the folder's files and nothing outside it")
finally:
    srv.stop()

err = start_fails("--path", os.path.join(top, "missing"))
assert "static assets path not found" in err, err
err = start_fails("--ui-config", "{temperature")
assert "failed to parse UI config" in err, err
err = start_fails("--ui-config", "{}", "--ui-config-file", cfg.name)
assert "cannot be used with" in err, err
check("a missing --path folder, bad --ui-config JSON and both configs at once stop the start")

print(f"screenshots in {SHOTS}")
print(f"all web UI checks passed ({len(passed)})")
