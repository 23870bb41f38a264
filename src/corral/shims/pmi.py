"""A PMI-1/PMI-2 server for ``srun --mpi=pmi2``: MPICH ranks wire up through srun.

MPICH's "simple" PMI client (the one in Debian's libmpich 4.0, and in MPICH builds for
Slurm) finds its process manager through the environment: ``PMI_FD`` (an inherited,
connected socket) or ``PMI_PORT=host:port`` (TCP), plus ``PMI_ID``, ``PMI_RANK``,
``PMI_SIZE``, ``PMI_JOBID`` and ``PMI_SPAWNED``. :class:`PmiServer` is that process
manager for one job step: it listens on TCP (ranks on other hosts connect to the address
srun advertises) and can also hand out socketpairs for ranks started locally.

Protocol subset (wire formats in :mod:`corral.shims.pmi_wire`):

* PMI-1 (what Debian's MPICH 4.0 speaks; it has no PMI-2 client built in):
  ``initack`` (``PMI_PORT`` handshake, answered by ``initack`` and ``set size/rank/debug``),
  ``init``, ``get_maxes``, ``get_appnum``, ``get_my_kvsname``, ``get_universe_size``,
  ``put``, ``get``, ``barrier_in``, ``finalize``, ``abort``, ``publish_name``,
  ``unpublish_name``, ``lookup_name``. ``spawn`` is refused.
* PMI-2 (after ``cmd=init pmi_version=2``): ``fullinit``, ``job-getid``,
  ``info-getjobattr``, ``info-putnodeattr``, ``info-getnodeattr`` (with ``wait``),
  ``kvs-put``, ``kvs-get``, ``kvs-fence``, ``finalize``, ``abort``, ``name-publish``,
  ``name-unpublish``, ``name-lookup``; ``thrid`` is echoed. ``spawn`` is refused.

Invariants:

* One KVS per step, shared by all ranks; a put is visible at once (stronger than PMI
  requires), so after a fence every rank sees every put made before it.
* A barrier/fence completes only when all ``size`` ranks have entered it; a rank cannot
  enter twice. ``PMI_process_mapping`` (KVS key and PMI-2 job attribute) is the real rank
  -> node placement, so MPICH's shared-memory decisions are right.
* Each rank is identified once: over TCP by its ``PMI_ID``, a random number per rank
  (the step's secret); over a socketpair by the socket itself. Anything else is dropped.
* ``abort`` ends the step: :attr:`PmiServer.aborted` is set, ``on_abort`` runs and
  :meth:`PmiServer.wait` returns. So it does when every rank has finalized.

References: MPICH ``src/pmi/maint/pmi-1.1.txt`` and ``pmi-2.0.txt`` (message lists),
MPICH's ``simple_pmi.c``/``simple2pmi.c`` clients, and Slurm's mpi/pmi2 plugin (env).
"""

from __future__ import annotations

import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from corral.shims.pmi_wire import Framer, WireError, block_layout, encode_v1, encode_v2
from corral.shims.pmi_wire import process_mapping as mapping_text

MPI_TYPES = ("none", "pmi2", "pmix")
PMIX_VERSIONS = ("pmix_v2", "pmix_v3", "pmix_v4", "pmix_v5")
MPI_ALIASES = ("openmpi",)  # accepted like Slurm < 21.08 did; not listed
MPI_LIST_TEXT = ("MPI plugin types are...\n" + "".join(f"\t{t}\n" for t in MPI_TYPES)
                 + "specific pmix plugin versions available: " + ",".join(PMIX_VERSIONS)
                 + "\n")
MAXES = {"kvsname_max": "256", "keylen_max": "64", "vallen_max": "1024"}
AUTH_TIMEOUT_S = 30.0


class MpiTypeError(ValueError):
    """An unsupported ``--mpi`` value; ``message`` is srun's line, ``exit_code`` its rc."""

    def __init__(self, value: str) -> None:
        self.message = f"srun: error: invalid MPI type '{value}', --mpi=list for acceptable types"
        self.exit_code = 1
        super().__init__(self.message)


def check_mpi_type(value: str) -> str:
    """The normalised ``--mpi`` value ("list" included), or raise :class:`MpiTypeError`.

    The message is Slurm 22.05's (``src/srun/libsrun/opt.c``).
    """
    name = value.strip().lower()
    if name in MPI_TYPES or name in PMIX_VERSIONS or name in MPI_ALIASES or name == "list":
        return name
    raise MpiTypeError(value)


@dataclass(frozen=True)
class PmiAbort:
    rank: int
    exit_code: int
    message: str


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    rank: int | None = None  # None until identified
    trusted_rank: int | None = None  # socketpair: the rank it was made for
    framer: Framer = field(default_factory=Framer)
    out: bytearray = field(default_factory=bytearray)
    since: float = field(default_factory=time.monotonic)
    closing: bool = False


class PmiServer:
    """PMI service for one step of ``size`` ranks.

    ``nodes``/``tasks_per_node`` give the step's nodes and how many ranks each runs;
    ``rank_node`` is the node index of every rank (default: block order). ``bind`` and
    ``port`` are where to listen; ``advertise`` is the host name ranks connect to
    (default: this host's name when bound to all addresses).
    """

    def __init__(self, size: int, nodes: Sequence[str], tasks_per_node: Sequence[int],
                 rank_node: Sequence[int] | None = None, *, bind: str = "0.0.0.0",
                 port: int = 0, advertise: str | None = None, kvsname: str | None = None,
                 on_abort: Callable[[PmiAbort], None] | None = None,
                 on_finalized: Callable[[], None] | None = None) -> None:
        layout = list(rank_node) if rank_node is not None else block_layout(tasks_per_node)
        if size < 1 or len(layout) != size or sum(tasks_per_node) != size:
            raise ValueError("size, tasks_per_node and rank_node disagree")
        if len(nodes) != len(tasks_per_node) or any(not 0 <= n < len(nodes) for n in layout):
            raise ValueError("rank_node names a node outside nodes")
        self.size = size
        self.nodes = list(nodes)
        self.rank_node = layout
        self.kvsname = kvsname or f"corral_kvs_{secrets.token_hex(6)}"
        self.mapping = mapping_text(layout)
        self.on_abort = on_abort
        self.on_finalized = on_finalized
        low = max(size, 1 << 24)
        tokens: set[int] = set()
        while len(tokens) < size:
            tokens.add(low + secrets.randbelow((1 << 31) - 1 - low))
        self._tokens = list(tokens)
        self._rank_of_token = {t: r for r, t in enumerate(self._tokens)}
        self._kvs: dict[str, str] = {"PMI_process_mapping": self.mapping}
        self._node_kvs: list[dict[str, str]] = [{} for _ in nodes]
        self._node_waits: list[tuple[_Conn, int, str, str | None]] = []
        self._names: dict[str, str] = {}
        self._claimed: set[int] = set()
        self._barrier: dict[int, tuple[_Conn, int, str | None]] = {}
        self._finalized: set[int] = set()
        self.lost_ranks: set[int] = set()
        self.versions: dict[int, int] = {}  # rank -> PMI version it finalized with
        self.aborted: PmiAbort | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._attach: list[_Conn] = []
        self._sel = selectors.DefaultSelector()
        self._listen = socket.create_server((bind, port), backlog=max(128, size))
        self._listen.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._listen, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self.port = self._listen.getsockname()[1]
        self.host = advertise or (socket.gethostname() if bind in ("", "0.0.0.0") else bind)
        self._thread: threading.Thread | None = None
        self._stop = False

    # -- public API ---------------------------------------------------------------------

    def start(self) -> PmiServer:
        self._thread = threading.Thread(target=self._loop, name="pmi-server", daemon=True)
        self._thread.start()
        return self

    def env_for(self, rank: int, fd: int | None = None) -> dict[str, str]:
        """Variables rank ``rank`` needs: TCP (``PMI_PORT``) unless ``fd`` is given."""
        env = {"PMI_RANK": str(rank), "PMI_SIZE": str(self.size), "PMI_ID": str(
            self._tokens[rank]), "PMI_JOBID": self.kvsname, "PMI_SPAWNED": "0"}
        if fd is None:
            env["PMI_PORT"] = f"{self.host}:{self.port}"
        else:
            env["PMI_FD"] = str(fd)
        return env

    def attach(self, rank: int) -> socket.socket:
        """A connected socket for a locally started rank: pass its fd to the child
        (``pass_fds``, ``env_for(rank, fd=s.fileno())``), then close it here."""
        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        theirs.set_inheritable(True)
        with self._lock:
            self._attach.append(_Conn(mine, trusted_rank=rank))
        self._wake()
        return theirs

    @property
    def all_finalized(self) -> bool:
        with self._lock:
            return len(self._finalized) == self.size

    def wait(self, timeout: float | None = None) -> bool:
        """True once a rank aborted or every rank finalized."""
        return self._done.wait(timeout)

    def close(self) -> None:
        self._stop = True
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        with self._lock:
            for conn in self._attach:
                conn.sock.close()
            self._attach = []
        self._sel.close()
        self._wake_w.close()

    def __enter__(self) -> PmiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- event loop ---------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _loop(self) -> None:
        while not self._stop:
            for key, mask in self._sel.select(timeout=1.0):
                if key.fileobj is self._listen:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                else:
                    conn: _Conn = key.data
                    if mask & selectors.EVENT_READ:
                        self._read(conn)
                    if mask & selectors.EVENT_WRITE and not conn.closing:
                        self._flush(conn)
            with self._lock:
                attach, self._attach = self._attach, []
            for conn in attach:
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            now = time.monotonic()
            for key in list(self._sel.get_map().values()):
                c = key.data
                if isinstance(c, _Conn) and c.rank is None and c.trusted_rank is None \
                        and now - c.since > AUTH_TIMEOUT_S:
                    self._drop(c)

    def _accept(self) -> None:
        try:
            sock, _addr = self._listen.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.framer.feed(data)
        try:
            while not conn.closing and (msg := conn.framer.next()) is not None:
                self._handle(conn, *msg)
        except WireError:
            self._drop(conn)

    def _send(self, conn: _Conn, data: bytes) -> None:
        if conn.closing:
            return
        conn.out += data
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out) if conn.out else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._drop(conn)
            return
        del conn.out[:sent]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if self._sel.get_key(conn.sock).events != want:
            self._sel.modify(conn.sock, want, conn)

    def _drop(self, conn: _Conn) -> None:
        if conn.closing:
            return
        conn.closing = True
        rank = conn.rank
        if rank is not None and rank not in self._finalized:
            self.lost_ranks.add(rank)
            self._barrier.pop(rank, None)
        self._node_waits = [w for w in self._node_waits if w[0] is not conn]
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    # -- protocol -----------------------------------------------------------------------

    def _identify(self, conn: _Conn, claimed: str) -> bool:
        """Bind ``conn`` to a rank from its PMI_ID (or, on a socketpair, its rank)."""
        if conn.rank is not None:
            return True
        rank = self._rank_of_token.get(int(claimed)) if claimed.isdigit() else None
        if conn.trusted_rank is not None and rank in (None, conn.trusted_rank):
            rank = conn.trusted_rank
        if rank is None or rank in self._claimed:
            return False
        self._claimed.add(rank)
        conn.rank = rank
        return True

    def _reply(self, conn: _Conn, cmd: str, fields: dict[str, str]) -> None:
        v2 = conn.framer.v2
        self._send(conn, encode_v2(cmd, fields) if v2 else encode_v1(cmd, fields))

    def _enter_barrier(self, conn: _Conn, thrid: str | None) -> None:
        assert conn.rank is not None
        if conn.rank in self._barrier:
            self._drop(conn)
            return
        self._barrier[conn.rank] = (conn, 2 if conn.framer.v2 else 1, thrid)
        if len(self._barrier) < self.size:
            return
        waiting, self._barrier = self._barrier, {}
        for member, version, tid in waiting.values():
            if version == 2:
                extra = {"thrid": tid} if tid is not None else {}
                self._send(member, encode_v2("kvs-fence-response", {"rc": "0", **extra}))
            else:
                self._send(member, encode_v1("barrier_out", {"rc": "0"}))

    def _finalize(self, conn: _Conn) -> None:
        assert conn.rank is not None
        with self._lock:
            self._finalized.add(conn.rank)
            self.versions[conn.rank] = 2 if conn.framer.v2 else 1
            done = len(self._finalized) == self.size
        if done:
            self._done.set()
            if self.on_finalized is not None:
                self.on_finalized()

    def _abort(self, conn: _Conn, code: int, message: str) -> None:
        with self._lock:
            first = self.aborted is None
            if first:
                self.aborted = PmiAbort(conn.rank if conn.rank is not None else -1, code,
                                        message)
        self._done.set()
        if first and self.on_abort is not None and self.aborted is not None:
            self.on_abort(self.aborted)

    def _handle(self, conn: _Conn, cmd: str, f: dict[str, str]) -> None:
        if conn.framer.v2:
            self._handle_v2(conn, cmd, f)
            return
        if cmd == "init":
            version = f.get("pmi_version", "1")
            if version == "2":
                self._reply(conn, "response_to_init",
                            {"pmi_version": "2", "pmi_subversion": "0", "rc": "0"})
                conn.framer.v2 = True
            elif version == "1":
                self._reply(conn, "response_to_init",
                            {"pmi_version": "1", "pmi_subversion": "1", "rc": "0"})
            else:
                self._reply(conn, "response_to_init",
                            {"pmi_version": "1", "pmi_subversion": "1", "rc": "-1"})
            return
        if cmd == "initack":
            if not self._identify(conn, f.get("pmiid", "")):
                self._drop(conn)
                return
            rank = conn.rank
            self._send(conn, encode_v1("initack") + encode_v1("set", {"size": str(self.size)})
                       + encode_v1("set", {"rank": str(rank)}) + encode_v1("set", {"debug": "0"}))
            return
        if conn.rank is None and not (conn.trusted_rank is not None
                                      and self._identify(conn, str(conn.trusted_rank))):
            self._drop(conn)  # TCP PMI-1 without the PMI_ID handshake
            return
        self._handle_v1(conn, cmd, f)

    def _handle_v1(self, conn: _Conn, cmd: str, f: dict[str, str]) -> None:
        ok = {"rc": "0", "msg": "success"}
        kvs_ok = f.get("kvsname", self.kvsname) == self.kvsname
        if cmd == "get_maxes":
            self._reply(conn, "maxes", {**MAXES, "rc": "0"})
        elif cmd == "get_appnum":
            self._reply(conn, "appnum", {"appnum": "0", "rc": "0"})
        elif cmd == "get_my_kvsname":
            self._reply(conn, "my_kvsname", {"kvsname": self.kvsname, "rc": "0"})
        elif cmd == "get_universe_size":
            self._reply(conn, "universe_size", {"size": str(self.size), "rc": "0"})
        elif cmd == "put":
            if kvs_ok and "key" in f:
                self._kvs[f["key"]] = f.get("value", "")
                self._reply(conn, "put_result", ok)
            else:
                self._reply(conn, "put_result", {"rc": "-1", "msg": "unknown_kvs"})
        elif cmd == "get":
            value = self._kvs.get(f.get("key", "")) if kvs_ok else None
            if value is None:
                self._reply(conn, "get_result",
                            {"rc": "-1", "msg": f"key_{f.get('key', '')}_not_found"})
            else:
                self._reply(conn, "get_result", {**ok, "value": value})
        elif cmd == "barrier_in":
            self._enter_barrier(conn, None)
        elif cmd == "finalize":
            self._reply(conn, "finalize_ack", {"rc": "0"})
            self._finalize(conn)
        elif cmd == "abort":
            code = f.get("exitcode", "1")
            self._abort(conn, int(code) if code.lstrip("-").isdigit() else 1,
                        f.get("message", ""))
        elif cmd == "publish_name":
            self._names[f.get("service", "")] = f.get("port", "")
            self._reply(conn, "publish_result", {"info": "ok", **ok})
        elif cmd == "unpublish_name":
            found = self._names.pop(f.get("service", ""), None) is not None
            self._reply(conn, "unpublish_result", {"info": "ok", **ok} if found
                        else {"rc": "-1", "msg": "service_not_found"})
        elif cmd == "lookup_name":
            port = self._names.get(f.get("service", ""))
            self._reply(conn, "lookup_result", {"info": "ok", "port": port, **ok}
                        if port is not None else {"rc": "-1", "msg": "service_not_found"})
        else:  # spawn, create_kvs, ...: refused (the client then fails the call)
            self._reply(conn, f"{cmd}_result", {"rc": "-1", "msg": "unsupported_command"})

    def _handle_v2(self, conn: _Conn, cmd: str, f: dict[str, str]) -> None:
        tid = f.get("thrid")
        base = {"thrid": tid} if tid is not None else {}
        ok = {**base, "rc": "0"}

        def reply(name: str, fields: dict[str, str]) -> None:
            self._send(conn, encode_v2(name, fields))

        if cmd == "fullinit":
            jobid = f.get("pmijobid")
            if (jobid not in (None, self.kvsname)
                    or not self._identify(conn, f.get("pmirank", f.get("pmiid", "")))):
                self._drop(conn)
                return
            reply("fullinit-response", {**ok, "pmi-version": "2", "pmi-subversion": "0",
                                        "rank": str(conn.rank), "size": str(self.size),
                                        "appnum": "0", "debugged": "FALSE",
                                        "pmiverbose": "FALSE"})
            return
        if conn.rank is None:
            self._drop(conn)
            return
        node = self._kvs_node(conn.rank)
        if cmd == "job-getid":
            reply("job-getid-response", {**ok, "jobid": self.kvsname})
        elif cmd == "info-getjobattr":
            key = f.get("key", "")
            attrs = {"PMI_process_mapping": self.mapping, "universeSize": str(self.size)}
            value = attrs.get(key)
            reply("info-getjobattr-response", {**ok, "found": "TRUE", "value": value}
                  if value is not None else {**ok, "found": "FALSE"})
        elif cmd == "info-putnodeattr":
            key, value = f.get("key", ""), f.get("value", "")
            self._node_kvs[node][key] = value
            reply("info-putnodeattr-response", ok)
            still: list[tuple[_Conn, int, str, str | None]] = []
            for waiter, wnode, wkey, wtid in self._node_waits:
                if wnode == node and wkey == key:
                    extra = {"thrid": wtid} if wtid is not None else {}
                    self._send(waiter, encode_v2("info-getnodeattr-response", {
                        **extra, "rc": "0", "found": "TRUE", "value": value}))
                else:
                    still.append((waiter, wnode, wkey, wtid))
            self._node_waits = still
        elif cmd == "info-getnodeattr":
            key = f.get("key", "")
            value = self._node_kvs[node].get(key)
            if value is not None:
                reply("info-getnodeattr-response", {**ok, "found": "TRUE", "value": value})
            elif f.get("wait", "FALSE") == "TRUE":
                self._node_waits.append((conn, node, key, tid))
            else:
                reply("info-getnodeattr-response", {**ok, "found": "FALSE"})
        elif cmd == "kvs-put":
            self._kvs[f.get("key", "")] = f.get("value", "")
            reply("kvs-put-response", ok)
        elif cmd == "kvs-get":
            value = self._kvs.get(f.get("key", "")) \
                if f.get("jobid", self.kvsname) == self.kvsname else None
            reply("kvs-get-response", {**ok, "found": "TRUE", "value": value}
                  if value is not None else {**ok, "found": "FALSE"})
        elif cmd == "kvs-fence":
            self._enter_barrier(conn, tid)
        elif cmd == "finalize":
            reply("finalize-response", ok)
            self._finalize(conn)
        elif cmd == "abort":
            code = f.get("exitcode", "1")
            self._abort(conn, int(code) if code.lstrip("-").isdigit() else 1, f.get("msg", ""))
        elif cmd == "name-publish":
            self._names[f.get("name", "")] = f.get("port", "")
            reply("name-publish-response", ok)
        elif cmd == "name-unpublish":
            found = self._names.pop(f.get("name", ""), None) is not None
            reply("name-unpublish-response", ok if found
                  else {**base, "rc": "-1", "errmsg": "name not published"})
        elif cmd == "name-lookup":
            port = self._names.get(f.get("name", ""))
            reply("name-lookup-response", {**ok, "port": port} if port is not None
                  else {**base, "rc": "-1", "errmsg": "name not published"})
        else:  # spawn, job-connect, ...
            reply(f"{cmd}-response", {**base, "rc": "-1", "errmsg": "unsupported command"})

    def _kvs_node(self, rank: int) -> int:
        return self.rank_node[rank]
