"""The launcher every installed shim runs: one request to the controller, then exit.

Imports only ``os``, ``_socket`` and ``_json`` (C modules): a shim is called in loops by
workflow tools, and an interpreter start already costs ~10 ms here; ``json``, ``socket`` or
the ``corral`` model would each add as much again (measured with ``python -X importtime``).

Protocol (``POST /api/v1/shim/exec``, HTTP/1.1 over the controller's Unix socket, or TCP when
``CORRAL_URL`` is an ``http://`` address, TLS for ``https://``: ``ssl`` is imported only
then, and the controller is verified against ``CORRAL_CA_FILE``):

- request body (JSON): ``{"v": 1, "cmd": "sbatch", "argv": [...], "cwd": "...",
  "env": {...}, "files": {path: [true, text] | [false, error]}, "stdin": text | null}``;
  the caller's uid comes from the socket (SO_PEERCRED), never from the body;
- response body (``application/x-corral-shim``): a header line
  ``CRSH1 <rc> <len(out)> <len(err)> <len(need)>`` then the UTF-8 bytes of stdout,
  stderr and ``need``: NUL-separated paths the command wants to read, ``-`` for stdin.
  When ``need`` is not empty the launcher reads those (as the calling user) and repeats
  the request with them; nothing has been done on the controller in that case.

A 404 from an older controller, or a command in ``LOCAL_COMMANDS``, runs the command in
this process instead (``corral.shims.local``), over the controller's REST API.
"""

from __future__ import annotations

import os
import sys
from _json import encode_basestring_ascii as _quote

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; annotations stay strings
    from typing import Any

LOCAL_COMMANDS = frozenset({"srun", "salloc"})
SELF_SIGNALLING = frozenset({"scontrol", "scancel", "qdel"})
MAX_FILE_BYTES = 64 * 1024 * 1024
FRAME_MAGIC = b"CRSH1"
STDIN_MARK = "-"
SOCKET_NAME = "corral.sock"
SYSTEM_STATE_DIR = "/var/lib/corral"
API = "/api/v1"


class LeanError(Exception):
    """The controller could not be reached or answered something unexpected."""


class NoShimEndpoint(Exception):
    """The controller answered 404: it has no shim endpoint; run the command locally."""


def encode_json(obj: Any) -> str:
    """Minimal JSON encoder for str/int/bool/None/list/tuple/dict (enough for a request)."""
    if isinstance(obj, str):
        return str(_quote(obj))
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return str(int(obj))
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(encode_json(x) for x in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ",".join(
            str(_quote(str(k))) + ":" + encode_json(v) for k, v in obj.items()
        ) + "}"
    raise TypeError(f"cannot encode {type(obj).__name__}")


def encode_frame(rc: int, out: str, err: str, need: list[str] | tuple[str, ...] = ()) -> bytes:
    """The response body the controller sends (used by ``corral.shims.server``)."""
    bo = out.encode("utf-8", "surrogateescape")
    be = err.encode("utf-8", "surrogateescape")
    bn = "\0".join(need).encode("utf-8", "surrogateescape")
    head = b"%s %d %d %d %d\n" % (FRAME_MAGIC, rc, len(bo), len(be), len(bn))
    return head + bo + be + bn


def decode_frame(body: bytes) -> tuple[int, bytes, bytes, list[str]]:
    head, sep, rest = body.partition(b"\n")
    parts = head.split()
    if not sep or len(parts) != 5 or parts[0] != FRAME_MAGIC:
        raise LeanError("malformed reply from the controller")
    rc, lo, le, ln = (int(p) for p in parts[1:])
    out, err = rest[:lo], rest[lo : lo + le]
    need_b = rest[lo + le : lo + le + ln]
    need = need_b.decode("utf-8", "surrogateescape").split("\0") if ln else []
    return rc, out, err, need


def default_state_dir() -> str:
    """Where ``corral up`` keeps its state (same rule as ``corral.client``)."""
    env = os.environ
    explicit = env.get("CORRAL_STATE_DIR")
    if explicit:
        return explicit
    if os.geteuid() == 0:
        return SYSTEM_STATE_DIR
    base = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "corral")


def controller_addresses() -> list[tuple[str, str]]:
    """Every controller ``CORRAL_URL`` names (a comma list for an HA cluster), else the
    one ``controller_address`` finds."""
    url = os.environ.get("CORRAL_URL", "")
    if "," not in url:
        return [controller_address()]
    return [_address(u.strip()) for u in url.split(",") if u.strip()]


def _address(url: str) -> tuple[str, str]:
    if url.startswith("https://"):
        return "tls", url[len("https://") :].split("/", 1)[0]
    if url.startswith("unix:"):
        return "unix", url[len("unix:") :]
    return "tcp", url.split("://", 1)[-1].split("/", 1)[0]


def controller_address() -> tuple[str, str]:
    """``("unix", path)`` or ``("tcp", "host:port")`` of the controller."""
    env = os.environ
    url = env.get("CORRAL_URL", "")
    if url.startswith("http://"):
        return "tcp", url[len("http://") :].split("/", 1)[0]
    if url.startswith("https://"):
        return "tls", url[len("https://") :].split("/", 1)[0]
    if url.startswith("unix:"):
        return "unix", url[len("unix:") :]
    sock = env.get("CORRAL_SOCKET")
    if sock:
        return "unix", sock
    first = os.path.join(default_state_dir(), SOCKET_NAME)
    for path in (first, os.path.join(SYSTEM_STATE_DIR, SOCKET_NAME)):
        if os.path.exists(path):
            return "unix", path
    return "unix", first


class _Unreached(LeanError):
    """Nothing was sent: the controller could not be reached."""


def http_request(
    method: str, path: str, body: bytes, content_type: str = "application/json",
    timeout_s: float = 60.0, key: str = "", hold: bool = False,
) -> tuple[int, bytes]:
    """One HTTP/1.1 request with ``Connection: close``; returns (status, body).

    With several controllers (HA) the request goes to the leader: a standby's 503
    ``not_leader`` names it; an unreachable controller is skipped; a connection lost after
    the request was sent is retried only with an idempotency ``key`` (a submit). Gives up
    after ``CORRAL_FAILOVER_WAIT_S`` (30 s). ``hold``: the answer may take as long as a
    job runs (``sbatch --wait``): no read timeout once the request is sent, TCP keepalive
    instead (a dead controller host is noticed within about 25 s; a killed controller at
    once, by the closed connection)."""
    addrs = controller_addresses()
    i = 0
    deadline = 0.0
    while True:
        kind, where = addrs[i % len(addrs)]
        hint = ""
        try:
            status, payload = _request_at(kind, where, method, path, body, content_type,
                                          timeout_s, key, hold)
        except _Unreached:
            if len(addrs) < 2:
                raise
        except LeanError:
            if len(addrs) < 2 or not key:
                raise
        else:
            if status != 503 or b'"not_leader"' not in payload:
                return status, payload
            at = payload.find(b'"leader": "')
            if at >= 0:
                end = payload.find(b'"', at + 11)
                hint = payload[at + 11 : end].decode("utf-8", "replace")
        import time

        if not deadline:
            deadline = time.monotonic() + float(os.environ.get("CORRAL_FAILOVER_WAIT_S")
                                                or 30.0)
        elif time.monotonic() > deadline:
            raise LeanError(f"no Corral controller leads (tried {len(addrs)}; "
                            "a failover did not finish in time)")
        if hint and _address(hint) != (kind, where):
            if _address(hint) not in addrs:
                addrs.append(_address(hint))
            i = addrs.index(_address(hint))
            continue
        i += 1
        if i % len(addrs) == 0 or hint:
            time.sleep(0.05)  # once around the list: a failover is under way


def _request_at(kind: str, where: str, method: str, path: str, body: bytes,
                content_type: str, timeout_s: float, key: str,
                hold: bool = False) -> tuple[int, bytes]:
    import _socket

    try:
        if kind == "unix":
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            s.settimeout(timeout_s)
            s.connect(where)
        else:
            host, _, port = where.rpartition(":")
            s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            s.settimeout(timeout_s)
            s.connect((host or "127.0.0.1", int(port or (443 if kind == "tls" else 80))))
    except OSError as exc:
        raise _Unreached(
            f"cannot reach the Corral controller at {where}: {exc.strerror or exc}"
        ) from None
    if kind == "tls":
        s = _tls_wrap(s, host or "127.0.0.1", timeout_s)
    token = os.environ.get("CORRAL_TOKEN")
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: corral\r\nContent-Type: {content_type}\r\n"
        f"Accept: application/x-corral-shim\r\nContent-Length: {len(body)}\r\n"
        + (f"Authorization: Bearer {token}\r\n" if token else "")
        + (f"Idempotency-Key: {key}\r\n" if key else "")
        + "Connection: close\r\n\r\n"
    )
    chunks = []
    sent: OSError | None = None
    try:
        try:
            s.sendall(head.encode("latin-1") + body)
        except OSError as exc:  # refused before the body was read (413): read why
            sent = exc
        if hold and sent is None:
            _keepalive(s, kind)
            s.settimeout(None)
        while True:
            b = s.recv(262144)
            if not b:
                break
            chunks.append(b)
    except OSError as exc:
        raise LeanError(f"lost the connection to the Corral controller: {sent or exc}") \
            from None
    finally:
        s.close()
    raw = b"".join(chunks)
    if sent is not None and not raw:
        raise LeanError(f"lost the connection to the Corral controller: {sent}")
    header, sep, payload = raw.partition(b"\r\n\r\n")
    if not sep:
        raise LeanError("incomplete reply from the Corral controller")
    lines = header.split(b"\r\n")
    status_parts = lines[0].split(None, 2)
    if len(status_parts) < 2 or not status_parts[1].isdigit():
        raise LeanError("malformed reply from the Corral controller")
    status = int(status_parts[1])
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        payload = _dechunk(payload)
    return status, payload


def _keepalive(s: Any, kind: str) -> None:
    """Probe an idle TCP connection after 10 s, every 5 s, give up after 3 misses."""
    if kind == "unix":
        return  # the kernel closes it when the controller dies
    import _socket

    s.setsockopt(_socket.SOL_SOCKET, _socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        opt = getattr(_socket, name, None)
        if opt is not None:
            s.setsockopt(_socket.IPPROTO_TCP, opt, value)


def waits(cmd: str, argv: list[str]) -> bool:
    """Whether the command line asks to wait for the job's end (``sbatch --wait``/``-W``):
    the answer then comes when the job ends. (``#SBATCH --wait`` in the script is read
    on the controller only; such a request keeps the usual 60 s read timeout.)"""
    return cmd == "sbatch" and any(a in ("--wait", "-W") for a in argv)


def _tls_wrap(raw: Any, host: str, timeout_s: float) -> Any:
    """``raw`` as TLS, the controller verified against ``CORRAL_CA_FILE`` (else
    ``<state dir>/ca.pem`` when it exists, else the system's trust store)."""
    import socket
    import ssl

    ca: str | None = os.environ.get("CORRAL_CA_FILE") or None
    if ca is None:
        ca = os.path.join(default_state_dir(), "ca.pem")
        if not os.path.exists(ca):
            ca = None
    s = socket.socket(fileno=raw.detach())
    s.settimeout(timeout_s)
    try:
        ctx = ssl.create_default_context(cafile=ca)
        return ctx.wrap_socket(s, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        s.close()
        raise LeanError(
            f"the Corral controller's certificate is not vouched for by "
            f"{ca or 'the system trust store'} ({exc.verify_message}); set CORRAL_CA_FILE "
            "to the cluster's ca.pem") from None
    except (ssl.SSLError, OSError) as exc:
        s.close()
        raise LeanError(f"TLS with the Corral controller failed: {exc}") from None


def _dechunk(data: bytes) -> bytes:
    out = []
    pos = 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            break
        size = int(data[pos:eol].split(b";")[0], 16)
        if size == 0:
            break
        out.append(data[eol + 2 : eol + 2 + size])
        pos = eol + 2 + size + 2
    return b"".join(out)


def read_file(path: str, cwd: str) -> list[Any]:
    """``[True, text]`` or ``[False, error message]`` for one file the command asked for."""
    full = path if path.startswith("/") else os.path.join(cwd, path)
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return [False, exc.strerror or str(exc)]
    if len(data) > MAX_FILE_BYTES:
        return [False, "File too large"]
    return [True, data.decode("utf-8", "surrogateescape")]


def exec_remote(cmd: str, argv: list[str]) -> tuple[int, bytes, bytes]:
    """Run ``cmd argv`` on the controller; returns (rc, stdout, stderr)."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.environ.get("PWD") or "/"
    env = dict(os.environ)
    files: dict[str, Any] = {}
    stdin: str | None = None
    # a submit retried after a failover must not make a second job (with several
    # controllers: only then is a request whose connection broke sent again)
    key = os.urandom(16).hex() if cmd in ("sbatch", "qsub") \
        and "," in os.environ.get("CORRAL_URL", "") else ""
    hold = waits(cmd, argv)
    limited = 0
    rounds = 0
    while rounds < 4:
        rounds += 1
        body = encode_json(
            {"v": 1, "cmd": cmd, "argv": argv, "cwd": cwd, "env": env, "files": files,
             "stdin": stdin}
        ).encode("ascii")
        status, payload = http_request("POST", API + "/shim/exec", body, key=key,
                                       hold=hold)
        if status == 404:
            raise NoShimEndpoint()
        if status == 429:  # the user's rate limit: wait and ask again, as Slurm's client
            import time  # (C module)

            limited += 1
            rounds -= 1
            time.sleep(min(limited, 10))
            continue
        if status != 200:
            text = payload.decode("utf-8", "replace").strip()
            raise LeanError(f"the Corral controller answered HTTP {status}: {text[:500]}")
        rc, out, err, need = decode_frame(payload)
        if not need:
            return rc, out, err
        for path in need:
            if path == STDIN_MARK:
                stdin = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
            elif path not in files:
                files[path] = read_file(path, cwd)
    raise LeanError("the Corral controller kept asking for input files")


def _iterates(args: list[str]) -> bool:
    """``squeue -i N``/``--iterate``: a loop that prints as it goes, run in this process
    (the compiled launcher checks the same words)."""
    for a in args:
        if a == "--":
            return False
        if a.startswith(("--iter", "-i")):
            return True
    return False


def main(cmd: str, argv: list[str] | None = None) -> None:
    """Entry point of an installed launcher."""
    args = sys.argv[1:] if argv is None else argv
    if cmd not in LOCAL_COMMANDS and not os.environ.get("CORRAL_SHIM_LOCAL") \
            and not (cmd == "squeue" and _iterates(args)):
        if cmd in SELF_SIGNALLING:
            # `scontrol requeue $SLURM_JOB_ID` / `scancel $SLURM_JOB_ID` from inside the job:
            # the job's processes get SIGTERM while the answer is on its way; like Slurm's
            # commands, which return before the signal lands, finish the call first.
            import _signal  # type: ignore[import-not-found]  # C module: no enum import

            _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
        try:
            rc, out, err = exec_remote(cmd, args)
        except NoShimEndpoint:
            pass
        except LeanError as exc:
            sys.stderr.write(f"{cmd}: error: {exc}\n")
            sys.exit(1)
        else:
            if out:
                sys.stdout.buffer.write(out)
                sys.stdout.flush()
            if err:
                sys.stderr.buffer.write(err)
                sys.stderr.flush()
            sys.exit(rc)
    _run_local(cmd, args)


def _run_local(cmd: str, args: list[str]) -> None:
    if "site" not in sys.modules:
        import site

        site.main()
    from corral.shims.local import run_local

    sys.exit(run_local(cmd, args))
