"""A minimal client of QEMU's machine protocol (QMP) over its Unix socket.

QMP is line-delimited JSON: the server greets (``{"QMP": ...}``), the client enters
command mode with ``qmp_capabilities``, then each ``{"execute": NAME, "arguments": {...}}``
gets one ``{"return": ...}`` or ``{"error": {"class", "desc"}}``; asynchronous
``{"event": ...}`` lines may come in between and are kept in ``events``. Used for
``query-cpus-fast`` (vCPU thread ids, to pin them), ``cont`` (start a VM created paused
with ``-S``), ``system_powerdown`` (the ACPI power button) and ``quit``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any


class QmpError(RuntimeError):
    """QMP refused a command, or the connection failed."""


class Qmp:
    def __init__(self, path: str, timeout_s: float = 10.0,
                 alive: Callable[[], bool] | None = None) -> None:
        """Connect to qemu's QMP socket at ``path``, waiting up to ``timeout_s`` for qemu
        to create it (and giving up at once when ``alive`` says qemu is gone)."""
        deadline = time.monotonic() + timeout_s
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        while True:  # qemu creates the socket during its start-up
            try:
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if alive is not None and not alive():
                    self.sock.close()
                    raise QmpError("qemu exited before its QMP socket was up") from None
                if time.monotonic() > deadline:
                    self.sock.close()
                    raise QmpError(f"no QMP socket at {path} after {timeout_s} s") from None
                time.sleep(0.005)
        self.sock.settimeout(timeout_s)
        self._buf = b""
        self.events: list[dict[str, Any]] = []
        greeting = self._read()
        if "QMP" not in greeting:
            raise QmpError(f"not a QMP greeting: {greeting}")
        self.execute("qmp_capabilities")

    def _read(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            try:
                chunk = self.sock.recv(65536)
            except OSError as exc:
                raise QmpError(f"QMP connection: {exc}") from None
            if not chunk:
                raise QmpError("QMP connection closed")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except ValueError:
            raise QmpError(f"bad QMP line {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise QmpError(f"bad QMP message {msg!r}")
        return msg

    def execute(self, command: str, **arguments: Any) -> Any:
        msg: dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        try:
            self.sock.sendall(json.dumps(msg).encode() + b"\n")
        except OSError as exc:
            raise QmpError(f"QMP connection: {exc}") from None
        while True:
            reply = self._read()
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                err = reply["error"]
                raise QmpError(f"{command}: {err.get('class')}: {err.get('desc')}")
            return reply.get("return")

    def vcpu_threads(self) -> dict[int, int]:
        """Host thread id of each vCPU, by vCPU index."""
        out: dict[int, int] = {}
        for cpu in self.execute("query-cpus-fast") or []:
            out[int(cpu["cpu-index"])] = int(cpu["thread-id"])
        return out

    def close(self) -> None:
        self.sock.close()
