"""Real receivers of alerts for the alert tests: an HTTP server taking webhook posts (answering a set sequence of
statuses first) and an SMTP server (aiosmtpd) taking email; each keeps what it received."""

import json
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.conftest import free_port


class Webhook:
    """Posts received (path, JSON body); ``failures`` statuses are answered first, then 200."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.failures: list[int] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                status = owner.failures.pop(0) if owner.failures else 200
                if status == 200:
                    owner.posts.append((self.path, json.loads(self.rfile.read(length))))
                else:
                    self.rfile.read(length)
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, body in self.posts]


class Mailbox:
    """aiosmtpd's handler: every message received, parsed."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.server.shutdown()


@pytest.fixture
def smtp() -> Iterator[tuple[Mailbox, int]]:
    """A real SMTP server on a free port: (its mailbox, the port)."""
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()
