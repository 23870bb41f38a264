"""The controller process: state directory, keys, store, API server on Unix socket + TCP.

``run_controller(...)`` blocks until SIGINT/SIGTERM. Files in the state directory:
``corral.db`` (SQLite, 0600 like its WAL), ``corral.sock`` (API, mode 0666 when root so
every user can submit; 0600 otherwise), ``cluster.key`` / ``jwt.key`` (0600 secrets),
``controller.json`` (pid, socket, url: how ``corral up``/agents find it) and
``controller.lock`` (one controller per state directory); with ``[controller] tls``,
``ca.pem``/``ca.key`` (the cluster CA) and ``server.pem``/``server.key`` (``corral.tls``).
The Unix socket is always plain HTTP; only the TCP listener is HTTPS.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import json
import logging
import os
import signal
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.client import SOCKET_NAME
from corral.config.schema import ClusterConfig

log = logging.getLogger("corral.controller")


class CorkedTransport:
    """A transport whose writes can be held back and sent as one (``cork``/``uncork``).

    uvicorn writes a response's status line and headers, then its body, with two
    ``write`` calls: two system calls and, for a client blocked in ``recv``, two wake-ups.
    The fast paths (``api.with_fast_paths``) cork around the two ``send`` calls of a small
    response so it leaves in one write. Everything else is passed to the real transport;
    ``close`` sends what is held first."""

    __slots__ = ("_t", "_held")

    def __init__(self, transport: Any) -> None:
        self._t = transport
        self._held: list[bytes] | None = None

    def cork(self) -> None:
        if self._held is None:
            self._held = []

    def uncork(self) -> None:
        held, self._held = self._held, None
        if held:
            self._t.write(held[0] if len(held) == 1 else b"".join(held))

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(bytes(data))
        else:
            self._t.write(data)

    def writelines(self, chunks: Any) -> None:
        for c in chunks:
            self.write(c)

    def close(self) -> None:
        self.uncork()
        self._t.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._t, name)


def _peer_protocol_class() -> type:
    """uvicorn's HTTP protocol, extended to put SO_PEERCRED of Unix-socket callers into
    the ASGI scope as ``scope["corral.peer"] = (pid, uid, gid)``, and a ``CorkedTransport``
    as ``scope["corral.cork"]`` (its ``cork``/``uncork`` make a response one write)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # httptools not installed: the pure-Python parser
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    from corral.controller.auth import peer_credentials

    class PeerCredProtocol(Base):  # type: ignore[misc,valid-type,unused-ignore]
        def connection_made(self, transport: Any) -> None:
            corked = CorkedTransport(transport)
            super().connection_made(corked)  # type: ignore[arg-type, unused-ignore]
            sock = transport.get_extra_info("socket")
            creds = None
            if sock is not None and sock.family == socket.AF_UNIX:
                try:
                    creds = peer_credentials(sock)
                except OSError:
                    creds = None
            inner = self.app
            if creds is not None:
                inner = _without_proxy_headers(inner)

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if creds is not None:
                    scope["corral.peer"] = creds
                scope["corral.cork"] = corked
                await inner(scope, receive, send)

            self.app = app

    return PeerCredProtocol


def _without_proxy_headers(app: Any) -> Any:
    """``app`` without uvicorn's proxy-headers middleware where it would do nothing: a
    Unix-socket caller has no client address (``scope["client"]`` is None), so unless
    every host is trusted the middleware only adds a call layer to each request."""
    try:
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
    except ImportError:
        return app
    if isinstance(app, ProxyHeadersMiddleware) and None not in app.trusted_hosts:
        return app.app
    return app


def _bind_unix(path: Path, world: bool) -> socket.socket:
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale socket of a dead controller
        else:
            probe.close()
            raise SystemExit(f"a controller is already listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o000 if world else 0o077)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o666 if world else 0o600)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _bind_tcp(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


# files of the state directory that only its owner may read (the database holds every
# job's script and environment; the keys are the cluster's secrets)
PRIVATE_FILES = ("corral.db", "corral.db-wal", "corral.db-shm", "corral.db-journal",
                 "cluster.key", "jwt.key", "controller.json", "controller.lock", "agent.pid",
                 "ca.key", "server.key")
LOG_DIR = "log"


def _server_class(base: type, tls_ctx: Any) -> type:
    """uvicorn's ``Server``, serving TCP sockets with ``tls_ctx`` (when not None) and the
    Unix socket plain: uvicorn itself has one SSL setting for every socket it serves."""
    if tls_ctx is None:
        return base

    class TlsTcpServer(base):  # type: ignore[misc]
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            tcp = [s for s in sockets or [] if s.family != socket.AF_UNIX]
            await super().startup(sockets=[s for s in sockets or [] if s not in tcp])
            config = self.config

            def create_protocol(_loop: Any = None) -> asyncio.Protocol:
                proto: asyncio.Protocol = config.http_protocol_class(
                    config=config, server_state=self.server_state,
                    app_state=self.lifespan.state, _loop=_loop)
                return proto

            loop = asyncio.get_running_loop()
            for sock in tcp:
                self.servers.append(await loop.create_server(
                    create_protocol, sock=sock, ssl=tls_ctx, backlog=config.backlog))

    return TlsTcpServer


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state directory and make it private: 0711 when root runs the cluster
    (users reach the socket by its name but cannot list or read anything), 0700 otherwise;
    its files (including those of an older version) 0600, the log directory 0700."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # users must reach the socket inside when root runs the cluster
    os.chmod(state_dir, 0o711 if os.geteuid() == 0 else 0o700)
    for name in PRIVATE_FILES:
        _chmod_private(state_dir / name, 0o600)
    logs = state_dir / LOG_DIR
    if _chmod_private(logs, 0o700) == "dir":
        for entry in os.scandir(logs):
            _chmod_private(Path(entry.path), 0o600)


def _chmod_private(path: Path, mode: int) -> str:
    """Set ``mode`` on the file or directory ``path`` (never through a symbolic link);
    returns "dir", "file", or "" when there is nothing to change."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return ""
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def run_controller(cfg: ClusterConfig, state_dir: Path, *, listen: str | None = None,
                   cycle_fn: Callable[..., Any] | None = None,
                   ready: Callable[[dict[str, Any]], None] | None = None,
                   config_path: Path | None = None) -> None:
    """Run a controller until SIGINT/SIGTERM (blocking)."""
    import uvicorn

    from corral.agent.proctree import set_process_name
    from corral.controller.api import create_app, with_fast_paths
    from corral.controller.auth import Authenticator, read_or_create_key
    from corral.controller.service import Controller
    from corral.controller.store import Store

    set_process_name("corral-ctld")  # what ps/top show (the agent is corral-agent)
    # everything the controller creates is its own (the database and the WAL and shm files
    # SQLite adds later, keys, controller.json); the socket sets its mode itself
    os.umask(0o077)
    prepare_state_dir(state_dir)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    lock_fd = os.open(state_dir / "controller.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another controller is running on {state_dir}") from None
    cluster_key = read_or_create_key(state_dir / "cluster.key")
    jwt_key = read_or_create_key(state_dir / "jwt.key")
    url = cfg.controller.database_url or f"sqlite:///{state_dir / 'corral.db'}"
    listen = listen or cfg.controller.listen
    sock_path = Path(cfg.controller.socket or state_dir / SOCKET_NAME)
    sockets = [_bind_unix(sock_path, world=os.geteuid() == 0)]
    http_url = None
    tls_ctx = None
    ca_file = None
    port = 0
    if listen:
        tcp = _bind_tcp(listen)
        sockets.append(tcp)
        host, port = tcp.getsockname()[:2]
        shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
        scheme = "http"
        if cfg.controller.tls:
            from corral.tls import ensure_server_files, server_context, server_names

            names = server_names(str(host), cfg.controller.tls_names)
            cert, key, ca = ensure_server_files(state_dir, names, cfg.cluster_name)
            tls_ctx = server_context(cert, key)
            ca_file = str(ca)
            scheme = "https"
        http_url = f"{scheme}://{shown}:{port}"
    from corral.controller.roles import Gate, serve_seats

    ha = url.startswith("postgresql")
    if ha:  # the schema (the lease table), and the keys of the cluster's first controller
        from corral.controller.sharedkeys import share_keys

        cluster_key, jwt_key = share_keys(url, state_dir)
    operators = frozenset(cfg.operators) | frozenset(u.name for u in cfg.users if u.operator)
    auth = Authenticator(jwt_key, cluster_key, operators)
    from corral.controller.leadership import ha_settings

    name, lease_s = ha_settings(cfg)
    holder = name or (f"{socket.gethostname().split('.')[0]}:{port}" if port
                                     else f"{socket.gethostname().split('.')[0]}:{os.getpid()}")
    advertise = http_url or f"unix:{sock_path}"
    gate = Gate(holder, advertise, cfg.cluster_name)

    def make() -> tuple[Any, Any]:
        store = Store(url)
        ctl = Controller(cfg, state_dir, store, cycle_fn=cycle_fn)
        ctl.config_path = config_path  # what `corral config reload` re-reads
        if listen:  # jobs on other hosts reach the API over HTTP
            from corral.controller.auth import Identity

            def mint(user: str, uid: int, gid: int, ttl_s: int) -> str:
                return auth.mint(Identity(user, uid, gid), ttl_s)

            ctl.token_minter = mint
        app = create_app(ctl, auth)
        from corral.controller.kube import Kube  # kubectl's API subset (issue 14)
        from corral.controller.kube_routes import add_routes as add_kube_routes

        add_kube_routes(app, Kube(ctl, app.state.identity))
        from corral.controller.ratelimit import RateLimiter, with_rate_limit
        from corral.shims.fastpath import with_shim_fast_path

        ctl.limiter = RateLimiter(cfg.rate_limit)
        return ctl, with_rate_limit(with_shim_fast_path(with_fast_paths(app, ctl, auth),
                                                        ctl, auth), ctl.limiter, auth)

    seat_factory = None
    if ha:
        from corral.controller.leadership import Leadership

        def seat_factory() -> Leadership:
            return Leadership(url, holder, advertise, lease_s=lease_s)

    uv_cfg = uvicorn.Config(gate, http=_peer_protocol_class(),
                            ws="websockets-sansio",
                            lifespan="off", log_level="warning", access_log=False,
                            ws_max_size=64 * 1024 * 1024, ws_ping_interval=None,
                            timeout_keep_alive=60)
    server = _server_class(uvicorn.Server, tls_ctx)(uv_cfg)
    info = {"pid": os.getpid(), "socket": str(sock_path), "url": http_url,
            "state_dir": str(state_dir), "cluster": cfg.cluster_name, "ca_file": ca_file,
            "controller": holder, "ha": ha}
    first = [True]

    def write_info() -> None:
        tmp = state_dir / "controller.json.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, state_dir / "controller.json")

    def on_lead() -> None:
        if not first[0]:
            return
        first[0] = False
        # what exists now (modules, FastAPI's routes and models, the configuration, the
        # jobs loaded from the store) lives as long as the process: out of the garbage
        # collector's sight, so its full collections no longer walk it all (in a 3,000-job
        # drain: 141 -> 82 ms of collections; its one full collection 89 -> 29 ms, a
        # stall of every caller while it runs)
        gc.collect()
        gc.freeze()
        write_info()
        log.info("controller ready: socket %s%s", sock_path,
                 f", http {http_url}" if http_url else "")
        if ready is not None:
            ready(info)
        led.set()

    led = asyncio.Event()

    async def main() -> None:
        if ha:  # a standby is reachable (and says where the leader is) from now on
            write_info()
        stop = asyncio.Event()
        seats = asyncio.create_task(serve_seats(gate, make, seat_factory, stop, on_lead))
        if not ha:  # one controller: it serves once its state is loaded, as it always did
            waiting = asyncio.create_task(led.wait())
            await asyncio.wait({seats, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not led.is_set():
                waiting.cancel()
                seats.result()  # the start failed: raise it
                return
        # uvicorn re-raises the signal that stopped it once it is done; with these as the
        # handlers it restores, that lands here instead of killing the process before the
        # cleanup below (store close, socket removal)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda _s, _f: None)
        serving = asyncio.create_task(server.serve(sockets=sockets))
        try:
            done, _ = await asyncio.wait({seats, serving}, return_when=asyncio.FIRST_COMPLETED)
            if seats in done:
                seats.result()  # a crash of the role loop: raise it
        finally:
            stop.set()
            server.should_exit = True
            try:
                await seats
            finally:
                await serving
                try:
                    if json.loads((state_dir / "controller.json").read_text()).get(
                            "pid") == os.getpid():
                        (state_dir / "controller.json").unlink()
                except (OSError, ValueError):
                    pass
                try:
                    sock_path.unlink()
                except OSError:
                    pass

    try:
        asyncio.run(main())
    finally:
        os.close(lock_fd)
