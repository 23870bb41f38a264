"""A small SMTP receiver on loopback for tests: a thread per connection, the messages it
accepted kept in memory (``Receiver.messages``). Speaks EHLO/HELO, MAIL, RCPT, DATA,
RSET, NOOP, QUIT, and optionally STARTTLS (``tls``: a server context) and AUTH PLAIN
(``login``: the (user, password) it accepts). ``hang``: accept connections and never
greet (a dead server, for timeouts). ``refuse``: the next that many sessions are
greeted with ``421`` (a server refusing for now) and closed; ``refusing = True`` refuses
every session until it is set back; ``rcpt_code``: the answer to RCPT (550: refused for
good). ``sessions`` counts the connections it took."""

from __future__ import annotations

import base64
import email
import email.policy
import socket
import socketserver
import ssl
import threading
from email.message import EmailMessage
from typing import Any


class Receiver:
    def __init__(self, *, tls: ssl.SSLContext | None = None,
                 login: tuple[str, str] | None = None, hang: bool = False) -> None:
        self.tls, self.login, self.hang = tls, login, hang
        self.refuse = 0
        self.refusing = False
        self.rcpt_code = 250
        self.sessions = 0
        self.messages: list[tuple[str, list[str], EmailMessage]] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        receiver = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                receiver._session(self)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def received(self) -> list[tuple[str, list[str], EmailMessage]]:
        with self.lock:
            return list(self.messages)

    def _session(self, h: socketserver.StreamRequestHandler) -> None:
        with self.lock:
            self.sessions += 1
            refuse = self.refusing or self.refuse > 0
            if self.refuse > 0:
                self.refuse -= 1
        if self.hang:
            self.released.wait(60)
            return
        rfile, wfile = h.rfile, h.wfile
        if refuse:
            wfile.write(b"421 test busy, try again later\r\n")
            wfile.flush()
            return
        sock: socket.socket = h.connection
        secure, authed = False, self.login is None
        mailfrom, rcpts = "", []

        def say(line: str) -> None:
            wfile.write(line.encode() + b"\r\n")
            wfile.flush()

        say("220 test ESMTP")
        while True:
            raw = rfile.readline(4096)
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip("\r\n")
            verb, _, arg = line.partition(" ")
            verb = verb.upper()
            if verb in ("EHLO", "HELO"):
                ext = ["8BITMIME"]
                if self.tls is not None and not secure:
                    ext.append("STARTTLS")
                if self.login is not None:
                    ext.append("AUTH PLAIN")
                lines = ["test"] + ext
                for i, e in enumerate(lines):
                    say(("250 " if i == len(lines) - 1 else "250-") + e)
            elif verb == "STARTTLS" and self.tls is not None and not secure:
                say("220 go ahead")
                sock = self.tls.wrap_socket(sock, server_side=True)
                rfile, wfile = sock.makefile("rb"), sock.makefile("wb")
                secure = True
            elif verb == "AUTH" and self.login is not None:
                mech, _, blob = arg.partition(" ")
                parts = base64.b64decode(blob or "=").split(b"\0") if mech.upper() == \
                    "PLAIN" else []
                if len(parts) == 3 and (parts[1].decode(), parts[2].decode()) == self.login:
                    authed = True
                    say("235 ok")
                else:
                    say("535 bad credentials")
            elif verb == "MAIL":
                if not authed:
                    say("530 authentication required")
                    continue
                mailfrom = arg.partition(":")[2].strip().split(">")[0].lstrip("<")
                rcpts = []
                say("250 ok")
            elif verb == "RCPT":
                if self.rcpt_code != 250:
                    say(f"{self.rcpt_code} no such user here")
                    continue
                rcpts.append(arg.partition(":")[2].strip().strip("<>"))
                say("250 ok")
            elif verb == "DATA":
                say("354 end with .")
                data = bytearray()
                while True:
                    chunk = rfile.readline(1 << 16)
                    if not chunk or chunk in (b".\r\n", b".\n"):
                        break
                    data += chunk[1:] if chunk.startswith(b"..") else chunk
                msg = email.message_from_bytes(bytes(data), policy=email.policy.default)
                assert isinstance(msg, EmailMessage)
                with self.lock:
                    self.messages.append((mailfrom, rcpts, msg))
                say("250 queued")
            elif verb in ("RSET", "NOOP"):
                say("250 ok")
            elif verb == "QUIT":
                say("221 bye")
                return
            else:
                say("502 not implemented")
