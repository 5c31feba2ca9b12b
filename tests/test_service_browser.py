"""The search page in a real headless Chromium, driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: no extra Python package): a 400 px wide screen, the address as the
page's state, the feedback buttons of a ``--learn`` server, its questions, and no
Content-Security-Policy violation. Skipped, with the reason, when no Chromium is installed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests talk HTTP with httpx ([test] extra)")
pytest.importorskip("starlette", reason="sparsesim serve needs the [serve] extra")
pytest.importorskip("uvicorn", reason="sparsesim serve needs the [serve] extra")

from clitools import start_server, stop_server, write_text_index  # noqa: E402
from test_service_page import TOPICS  # noqa: E402


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """A headless Chromium spoken to with DevTools protocol messages (NUL-separated JSON) on fds 3/4."""

    def __init__(self, binary: str, profile):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # the child's ends numbered above 4, so that placing them on fds 3 and 4 cannot clobber one
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
        os.close(to_browser_r)
        os.close(from_browser_w)
        to_browser_r, from_browser_w = moved

        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        # the browser reads commands on fd 3 and writes answers on fd 4: a tiny launcher puts the pipes there
        launcher = ("import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
                    "os.execv(sys.argv[3], sys.argv[3:])")
        self.proc = subprocess.Popen([sys.executable, "-c", launcher, str(to_browser_r), str(from_browser_w), *args],
                                     pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.time() > deadline:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=self.session, **params)

    def js(self, expression: str):
        result = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"never true: {expression}")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture(scope="module")
def learn_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    index_dir = write_text_index(root, TOPICS, n_triplets=300)
    proc, base = start_server(["--index", index_dir, "--learn", "--snapshot", root / "snap.npz"])
    yield base
    stop_server(proc)


@pytest.fixture()
def browser(tmp_path):
    binary = _browser()
    if binary is None:
        pytest.skip("no Chromium/Chrome installed (Debian: `apt-get install -y chromium`); the page is not rendered")
    chrome = Chromium(binary, tmp_path / "profile")
    yield chrome
    chrome.close()


def test_page_at_400px_keeps_state_in_the_address_and_sends_feedback(learn_server, browser):
    b = browser
    b.page("Emulation.setDeviceMetricsOverride", width=400, height=900, deviceScaleFactor=1, mobile=True)
    b.page("Log.enable")
    b.page("Runtime.enable")
    b.page("Page.enable")
    b.page("Page.navigate", url=f"{learn_server}/?q=goal+in+the+match&k=3")
    # the address's query and k are in the form and the search ran with them
    b.wait_for("document.querySelectorAll('#learned li').length === 3")
    assert b.js("document.getElementById('q').value") == "goal in the match"
    assert b.js("document.getElementById('k').value") == "3"
    # 400 px: nothing wider than the screen, the two lists stacked
    assert b.js("document.documentElement.scrollWidth") <= 400
    tops = b.js("[...document.querySelectorAll('.col')].map(c => c.getBoundingClientRect().top)")
    assert tops[1] > tops[0]
    # scores explained, learning controls shown on a --learn server
    assert "not bounded" in " ".join(b.js("document.getElementById('explain').textContent").split())
    assert b.js("document.getElementById('ask').hidden") is False
    # "lower" on the first learned result posts one triplet and says so
    b.js("document.querySelector('#learned li .fb button').click()")
    status = b.wait_for("document.getElementById('status').textContent.includes('queued') && "
                        "document.getElementById('status').textContent")
    assert "lower" in status
    info = httpx.get(f"{learn_server}/info").json()
    assert info["feedback"]["received"] >= 1
    # a new search from the form goes into the address; back restores the previous one
    b.js("document.getElementById('q').value = 'tomato soup'; document.getElementById('k').value = '2';"
         "document.getElementById('form').requestSubmit()")
    b.wait_for("document.querySelectorAll('#learned li').length === 2")
    query = urllib.parse.parse_qs(b.js("location.search")[1:])
    assert query == {"q": ["tomato soup"], "k": ["2"]}
    b.js("history.back()")
    b.wait_for("document.querySelectorAll('#learned li').length === 3")
    assert b.js("document.getElementById('q').value") == "goal in the match"
    # the questions of the active rule, answered with a click
    b.js("document.getElementById('ask-button').click()")
    b.wait_for("document.querySelectorAll('#questions li button').length >= 2")
    received = httpx.get(f"{learn_server}/info").json()["feedback"]["received"]
    b.js("document.querySelector('#questions li button').click()")
    b.wait_for("document.getElementById('status').textContent.startsWith('answer: queued')")
    assert httpx.get(f"{learn_server}/info").json()["feedback"]["received"] == received + 1
    # nothing the page does is refused by its Content-Security-Policy, and no script error
    b.js("1")  # flush pending events
    problems = [e for e in b.events if e.get("method") in ("Log.entryAdded", "Runtime.exceptionThrown")
                and ("Content Security Policy" in json.dumps(e) or e["method"] == "Runtime.exceptionThrown")]
    assert problems == []
