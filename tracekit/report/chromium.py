"""Drive Debian's headless Chromium over the DevTools protocol: the report's static figures
(`tracekit report --png/--svg`) and its browser tests.

Chromium speaks the protocol over a pair of pipes (`--remote-debugging-pipe`: it reads commands
from fd 3 and writes replies and events to fd 4, each message JSON ended by a NUL byte), so
nothing needs a websocket client or a browser download: only `/usr/bin/chromium`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"

# These keep Chromium from reaching for the network, which this machine closes (each refused
# connection would otherwise show up as noise or delay).
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    # Every page runs its timers and animation frames as a page in front does, whichever tab
    # the browser thinks is in front: a page measured or waited on must not be throttled.
    "--disable-renderer-backgrounding",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
)


def chromium_available() -> bool:
    """True when the Chromium binary this module drives is installed."""
    return Path(CHROMIUM).exists()


@dataclass
class PageResult:
    """What a page did while it loaded."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    value: Any = None
    screenshot_png: bytes = b""


class Page:
    """An open page, for a caller's actions between its load and its value: scripts, and the
    mouse as a person uses it (the events go through the browser's input pipeline, so the page
    sees trusted events at the pointer's place, as from a real mouse)."""

    def __init__(self, browser: Browser, session: str) -> None:
        self._browser = browser
        self._session = session

    def evaluate(self, expression: str, timeout: float = 30) -> Any:
        """The value of `expression` (a promise is awaited)."""
        out = self._browser.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            self._session,
            timeout=timeout,
        )
        if "exceptionDetails" in out:
            raise RuntimeError(f"evaluating failed: {out['exceptionDetails']}")
        return out["result"].get("value")

    def mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        """One mouse event at (x, y) CSS pixels of the viewport: mouseMoved, mousePressed,
        mouseReleased or mouseWheel (with deltaY)."""
        params = {"type": kind, "x": x, "y": y, **extra}
        if kind in ("mousePressed", "mouseReleased"):
            params.setdefault("button", "left")
            params.setdefault("clickCount", 1)
        if kind == "mouseMoved" and extra.get("buttons"):
            params.setdefault("button", "left")
        self._browser.call("Input.dispatchMouseEvent", params, self._session)

    def click(self, x: float, y: float) -> None:
        """A left click at (x, y): the pointer moves there, presses and releases."""
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 8) -> None:
        """A left-button drag from (x0, y0) to (x1, y1) in `steps` moves."""
        self.mouse("mouseMoved", x0, y0)
        self.mouse("mousePressed", x0, y0)
        for k in range(1, steps + 1):
            f = k / steps
            self.mouse("mouseMoved", x0 + (x1 - x0) * f, y0 + (y1 - y0) * f, buttons=1)
        self.mouse("mouseReleased", x1, y1)


class Browser:
    """One headless Chromium process, driven over the pipe transport; use as a context manager."""

    def __init__(self, width: int = 1400, height: int = 2400, priority: int = 0) -> None:
        """A browser whose pages are `width` x `height` CSS pixels.

        The default height holds a whole connection's plots, so a report draws them all at load
        (it draws plots only as they come near the screen). `priority` below 0 (root only)
        raises the browser's CPU priority, for timing it.
        """
        self.width = width
        self.height = height
        self._profile = tempfile.mkdtemp(prefix="tk-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child must see the command pipe as fd 3 and the reply pipe as fd 4.
        self._proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                # Chromium refuses to start as root with its sandbox on; a page built from a
                # capture keeps the sandbox wherever it can have it.
                *(("--no-sandbox",) if os.geteuid() == 0 else ()),
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=_dup_to_3_4(to_browser_r, from_browser_w, priority),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ask the browser to quit, then make sure it has, and remove its profile."""
        with contextlib.suppress(OSError):
            self._send("Browser.close", {})
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _send(self, method: str, params: dict[str, Any], session: str | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("no message from Chromium before the deadline")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(
        self, method: str, params: dict[str, Any], session: str | None = None, timeout: float = 30
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are queued."""
        call_id = self._send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._events.append(message)

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        """Return the first queued or incoming event of this method."""
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(i)
            self._events.append(self._read_message(deadline))

    def open(
        self,
        path: Path,
        ready_expression: str,
        value_expression: str,
        timeout: float = 30,
        full_page: bool = False,
        scale: float = 1.0,
        clip_selector: str | None = None,
        height: int | None = None,
        color_scheme: str | None = None,
        media: str | None = None,
        actions: Callable[[Page], None] | None = None,
    ) -> PageResult:
        """Load a file, wait until `ready_expression` is truthy, evaluate `value_expression`.

        A value expression that gives a promise is awaited.
        Console errors, uncaught exceptions and every non-file request are recorded from the
        start of the navigation; the screenshot is taken after the page is ready, of the
        viewport, the whole page or the element `clip_selector` names, scaled by `scale` (a
        small one keeps decoding it cheap). `color_scheme` ("light" or "dark") emulates the
        user's `prefers-color-scheme` and `media` ("print") the CSS media type; `timeout` bounds the
        evaluation too. `actions`, given the page once it is ready, does what a person would
        (clicks, drags) before the value is evaluated.
        """
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        try:
            session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable", {}, session)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {
                    "width": self.width,
                    "height": height or self.height,
                    "deviceScaleFactor": 1,
                    "mobile": False,
                },
                session,
            )
            if color_scheme is not None or media is not None:
                features = [{"name": "prefers-color-scheme", "value": color_scheme or ""}]
                self.call(
                    "Emulation.setEmulatedMedia",
                    {"media": media or "", "features": features},
                    session,
                )
            self._events.clear()
            self.call("Page.navigate", {"url": path.resolve().as_uri()}, session)
            deadline = time.monotonic() + timeout
            while True:
                ready = self.call(
                    "Runtime.evaluate",
                    {"expression": ready_expression, "returnByValue": True},
                    session,
                )
                if ready.get("result", {}).get("value"):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"page not ready after {timeout} s: {ready_expression}")
                time.sleep(0.05)
            if actions is not None:
                actions(Page(self, session))
            evaluated = self.call(
                "Runtime.evaluate",
                {"expression": value_expression, "returnByValue": True, "awaitPromise": True},
                session,
                timeout=max(timeout, 30),
            )
            if "exceptionDetails" in evaluated:
                raise RuntimeError(f"evaluating the value failed: {evaluated['exceptionDetails']}")
            value = evaluated["result"].get("value")
            width, height = self.width, height or self.height
            if full_page:
                metrics = self.call("Page.getLayoutMetrics", {}, session)["cssContentSize"]
                width, height = metrics["width"], metrics["height"]
            clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": scale}
            if clip_selector is not None:
                rect = self.call(
                    "Runtime.evaluate",
                    {
                        "expression": "(r => [r.x + scrollX, r.y + scrollY, r.width, r.height])"
                        f"(document.querySelector({json.dumps(clip_selector)})"
                        ".getBoundingClientRect())",
                        "returnByValue": True,
                    },
                    session,
                )["result"]["value"]
                clip = dict(zip(("x", "y", "width", "height"), rect, strict=True), scale=scale)
                full_page = True
            shot_params = {"format": "png", "clip": clip, "captureBeyondViewport": full_page}
            shot = self.call("Page.captureScreenshot", shot_params, session)
            result = PageResult(value=value, screenshot_png=base64.b64decode(shot["data"]))
            for event in self._events:
                if event.get("sessionId") != session:
                    continue
                method, params = event.get("method"), event.get("params", {})
                if method == "Runtime.consoleAPICalled" and params.get("type") in (
                    "error",
                    "assert",
                ):
                    result.console_errors.append(
                        " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                    )
                elif method == "Runtime.exceptionThrown":
                    details = params["exceptionDetails"]
                    result.exceptions.append(
                        details.get("exception", {}).get("description", details.get("text", ""))
                    )
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    result.console_errors.append(params["entry"].get("text", ""))
                elif method == "Network.requestWillBeSent":
                    url = params["request"]["url"]
                    if not url.startswith(("file:", "data:", "blob:", "about:")):
                        result.requests.append(url)
            self._events.clear()
        finally:
            # Closed even when the page failed: a page left open stays in front of the next.
            self.call("Target.closeTarget", {"targetId": target})
        return result


def _dup_to_3_4(read_fd: int, write_fd: int, priority: int) -> Any:
    def move() -> None:
        if priority:
            os.setpriority(os.PRIO_PROCESS, 0, priority)
        # dup2 onto 3 and 4 in an order that cannot clobber either source descriptor.
        a, b = os.dup(read_fd), os.dup(write_fd)
        os.dup2(a, 3)
        os.dup2(b, 4)

    return move
