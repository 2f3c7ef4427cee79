"""Real targets on loopback for the notification tests: an HTTP receiver (stdlib
``http.server``) taking apprise's ``json://`` webhooks, and an SMTP server (aiosmtpd)
taking its ``mailto://`` e-mails.  Each records what it got; the HTTP one can refuse
(503) or hang (hold the request until released) on demand.  Both are started by fixtures
and stopped after the test."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: The token every test URL carries; no file, row, event, log line or output may hold it.
TOKEN = "tok3nSECRETxyz"  # noqa: S105  (a made-up token the tests grep for)


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpReceiver:
    """``json://127.0.0.1:PORT/hook/TOKEN``: records each JSON body it took (``got``)."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.tried = 0  # requests that arrived, taken or not
        self.mode = "ok"  # ok | refuse | hang
        self.release = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.tried += 1
                    mode = receiver.mode
                if mode == "hang":
                    receiver.release.wait(120)
                    return  # the connection closes without an answer
                if mode == "refuse":
                    self.send_response(503)
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver.got.append({"path": self.path, **json.loads(body or b"{}")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/hook/{TOKEN}"

    def start(self) -> HttpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def titles(self) -> list[str]:
        with self._lock:
            return [str(g.get("title")) for g in self.got]


class SmtpReceiver:
    """``mailto://`` to an aiosmtpd server on loopback (plain SMTP, no TLS, no login)."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.got: list[Message] = []
        receiver = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                receiver.got.append(message_from_bytes(envelope.content))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return (
            f"mailto://127.0.0.1:{self.port}?smtp=127.0.0.1&from=eps@example.com&to=me@example.com"
            f"&mode=insecure&name={TOKEN}"
        )

    def start(self) -> SmtpReceiver:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def titles(self) -> list[str]:
        return [str(m["Subject"]) for m in list(self.got)]


def dead_url() -> str:
    """A json:// target where nothing listens (connection refused)."""
    return f"json://127.0.0.1:{free_port()}/hook/{TOKEN}"


def notify_config(urls: list[str], **extra: str) -> str:
    """A ``[notify]`` section."""
    lines = ["[notify]", "urls = [" + ", ".join(f'"{u}"' for u in urls) + "]"]
    lines += [f"{k} = {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def token_nowhere(state: Path, *outputs: str, but: Path | None = None) -> None:
    """:data:`TOKEN` is in no file of the state directory (but ``but``: the ledger, events,
    logs, inputs, the supervisor's log), no process's argv (``ps``), and no output."""
    for path in state.rglob("*"):
        if path.is_file() and path != but:
            assert TOKEN.encode() not in path.read_bytes(), path
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            assert TOKEN.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
    for text in outputs:
        assert TOKEN not in text


def wait_for(pred: Callable[[], Any], timeout_s: float, what: str) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
