"""Python client of the Corral controller API (used by the CLI, the shims and scripts).

Connection (first match wins):

1. ``Client(url=..., token=...)`` or ``Client(socket_path=...)`` given explicitly;
2. ``CORRAL_URL`` (``http://host:port``, or ``https://host:port`` when the controller
   has ``[controller] tls``; a comma-separated list for the controllers of an HA
   cluster: calls go to the leader) with ``CORRAL_TOKEN`` (a JWT from ``corral token``), for
   remote users; over https the controller's certificate is verified against
   ``CORRAL_CA_FILE`` (the cluster's ``ca.pem``), else ``<state dir>/ca.pem`` when it
   exists, else the system's trust store;
3. ``CORRAL_SOCKET`` (path of the controller's Unix socket);
4. ``$CORRAL_STATE_DIR/corral.sock``, then the per-user default state dir
   (``$XDG_STATE_HOME/corral`` or ``~/.local/state/corral``), then the system one
   (``/var/lib/corral``): the first socket that exists.

On the Unix socket the kernel tells the controller who is calling (SO_PEERCRED): no token.
Import cost is kept minimal on purpose (no ``http.client``, no ``socket`` module, no
dataclasses): the Slurm/PBS shims start on every call. Every method raises
``CorralError(code, message, status)`` with the server's precise message on failure.

Job ids: a job is an ``int``. Array tasks are jobs too; their display id is
``"<array_job_id>_<array_task_id>"`` and every method that takes ids accepts either form.
An array job id alone (``"12"``) in ``cancel``/``hold``/``release``/``requeue`` means all
of its tasks, as in Slurm.

Job record (``dict``, from ``jobs()``, ``job()``, ``history()``)::

    id                int     unique job id (array tasks have their own)
    job_id            str     display id: "12" or "12_3" for array tasks
    array_job_id      int|None    id of the array (the id of its first task)
    array_task_id     int|None
    array_task_str    str|None    the array spec as submitted, e.g. "1-10%2" (array jobs)
    array_max_running int|None    the '%' limit
    name, user        str
    uid, gid          int
    account, qos      str|None
    partition         str     running partition, else the requested one(s) comma-joined
    partitions        list[str]   requested partitions ([] = the default)
    state             str     JobState value: PENDING RUNNING COMPLETED FAILED CANCELLED
                              TIMEOUT NODE_FAIL OUT_OF_MEMORY PREEMPTED ...
    state_short       str     PD R CD F CA TO NF OOM PR ...
    reason            str     Slurm reason: "None" when running/finished without one;
                              Priority, Resources, Dependency, DependencyNeverSatisfied,
                              JobHeldUser, JobHeldAdmin, BeginTime, JobArrayTaskLimit, ...
    reason_detail     str     plain-words explanation ("" if none)
    priority          float   last computed priority (pending jobs), else 0
    rank              int|None    place in the pending queue (1 = next)
    est_start         float|None  estimated start (epoch seconds) when known
    hold              str     NONE USER ADMIN
    submit_time       float   epoch seconds
    eligible_time     float|None
    start_time        float|None
    end_time          float|None
    begin_time        float|None  requested earliest start (--begin)
    time_limit_s      int|None    effective time limit (None: unlimited)
    time_used_s       float   run time so far / total
    nodes             list[str]   allocated nodes ([] while pending)
    nodelist          str     compressed hostlist of ``nodes`` ("" while pending)
    num_nodes         int     allocated, else requested minimum
    num_cpus          int     allocated, else requested
    num_tasks         int
    cpus_per_task     int
    mem_per_node_mb   int|None    requested memory per node (None if per CPU)
    mem_per_cpu_mb    int|None
    alloc_mem_mb      int     allocated memory summed over nodes (0 while pending)
    gpus              int     allocated GPUs, else requested per job
    tres              str     Slurm TRES string of the allocation or request
    exit_code         int|None    process exit status (0-255) once finished
    signal            int     terminating signal (0 if none)
    derived_exit      str     "code:signal" as sacct prints ExitCode
    restarts          int     times requeued (SLURM_RESTART_COUNT)
    requeue           bool    may be requeued
    workdir           str     submit/working directory
    stdout, stderr    str     output paths, patterns expanded ("" when not known)
    command           str     script path/argv as a display string
    dependency        str     Slurm syntax, e.g. "afterok:12:13" ("" when none)
    submit_host       str
    comment           str
    constraint        str
    exclusive         bool
    end_reason        str     why it ended (e.g. "cancelled by root", "time limit")
    cpu_time_s        float   consumed CPU time (finished jobs, 0 if unknown)
    max_rss_mb        float   peak memory (finished jobs, 0 if unknown)
    dialect           str     native | slurm | pbs | volcano (which front end submitted it)
    interactive       bool    an allocation without a batch script (srun/salloc): no
                              ``.batch`` step
    cancelled_by_uid  int|None    uid of who cancelled it (CANCELLED jobs)
    warning           str     e.g. "suspending a multi-node job: MPI jobs often cannot
                              resume" ("" when none)
    suspended_s       float   time spent SUSPENDED (preemption mode SUSPEND); not counted
                              in ``time_used_s`` nor against the time limit

``job(id)`` and ``history()`` records add ``steps``: the ``srun`` steps of the job's
current run, each ``{step_id, job_id, restarts, name, argv, ntasks, nodes, num_cpus,
start_time, end_time|None, state (RUNNING or an end state), exit_code|None, signal, pid,
node_tasks, usage|None, cpu_time_s|None, max_rss_mb|None}``: ``node_tasks`` the global
task ids on each node (``[]`` when not known), ``usage`` what the step's end report
measured, ``{"nodes": {node: {node, cpu_time_s, max_rss_mb, pids}}, "cpu_time_s" (sum),
"max_rss_mb" (max)}`` (None when nothing was measured; the batch script's use is the
job's own ``cpu_time_s``/``max_rss_mb``).

``job(id)`` adds ``spec`` (the JobSpec as JSON), ``allocation`` (per node: node, cores,
cpus, mem_mb, gpus, tasks) and ``submission`` fields (``script``, ``argv``, ``env`` are
only shown to the owner or an operator).

Node record (``nodes()``, ``node(name)``)::

    name, state (IDLE MIXED ALLOCATED DRAINING DRAINED DOWN UNKNOWN FUTURE), reason,
    partitions list[str], cpus, sockets, cores_per_socket, threads_per_core, mem_mb,
    gpus int, gpu_types {type: count}, features list[str], gres {name: count},
    alloc_cpus, alloc_mem_mb, alloc_gpus, jobs list[int], arch, weight,
    connected bool (agent connected now), last_seen float|None, agent_version str,
    boot_time float|None, address str (the agent's peer address when it registered; "" over
    the controller's Unix socket), hostname str (the host name the agent reported),
    agent_stats dict (launches, launch_s, ack_s, poll_s, cpu_s: the
    agent's counters from its last heartbeat)

Partition record (``partitions()``)::

    name, nodes list[str], nodelist str, default bool, state (UP DOWN DRAIN INACTIVE),
    max_time_s int|None, default_time_s int|None, max_nodes int|None, min_nodes,
    priority_tier, priority_job_factor, preempt_mode, grace_time_s, exclusive,
    allow_accounts list|None, allow_qos list|None, total_cpus, total_nodes
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.submission import JobSubmission

API = "/api/v1"
SOCKET_NAME = "corral.sock"
SYSTEM_STATE_DIR = "/var/lib/corral"


class CorralError(Exception):
    """An API error. ``code`` is a stable word (``not_found``, ``forbidden``, ``invalid``,
    ``conflict``, ``unavailable``, ``rejected``, ``internal``), ``message`` the server's text,
    ``slurm`` Slurm's own message for the same error (for the shims) or None."""

    def __init__(self, code: str, message: str, status: int = 0,
                 slurm: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.slurm = slurm  # Slurm's wording of the same error, when there is one
        self.retry_after_s = 0.0  # rate_limited: when to ask again

    def __str__(self) -> str:
        return self.message


def default_state_dir() -> str:
    """``CORRAL_STATE_DIR``, else ``/var/lib/corral`` for root, else the XDG state dir."""
    env = os.environ.get("CORRAL_STATE_DIR")
    if env:
        return env
    if os.geteuid() == 0:
        return SYSTEM_STATE_DIR
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(xdg, "corral")


def find_socket() -> str | None:
    """The controller socket this process should use, or None if none exists."""
    env = os.environ.get("CORRAL_SOCKET")
    if env:
        return env
    candidates = [os.path.join(default_state_dir(), SOCKET_NAME),
                  os.path.join(SYSTEM_STATE_DIR, SOCKET_NAME)]
    for path in candidates:
        if os.path.exists(path):
            return path
    return None


def _ids_param(ids: Iterable[int | str]) -> list[str]:
    return [str(i) for i in ids]


class Client:
    """A connection to the controller. Cheap to create; reuses one keep-alive connection."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        socket_path: str | None = None,
        timeout_s: float = 30.0,
        ca_file: str | None = None,
    ) -> None:
        if url is None and socket_path is None:
            url = os.environ.get("CORRAL_URL") or None
            if url is None:
                socket_path = find_socket()
        if token is None and url is not None:
            token = os.environ.get("CORRAL_TOKEN") or None
        self.url = url
        self.auth_token = token
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._sock: Any = None
        self._buf = b""
        self._host = "localhost"
        self._addr: tuple[str, int] | None = None
        self._tls = False
        self.ca_file = ca_file
        self._ca_given = ca_file is not None
        # the controllers of an HA cluster: "http://h1:6817,http://h2:6817"; requests go
        # to the one that leads (a standby answers not_leader, naming the leader)
        self.urls = [u.strip() for u in url.split(",") if u.strip()] if url else []
        self.failover_wait_s = float(os.environ.get("CORRAL_FAILOVER_WAIT_S") or 30.0)
        self._sent = False
        if self.urls:
            self._use(self.urls[0])

    def _use(self, url: str) -> None:
        """Talk to the controller at ``url`` from now on."""
        self.close()
        self.url = url
        rest = url.split("://", 1)[-1].rstrip("/")
        self._tls = url.startswith("https://")
        if self._tls and not self._ca_given:
            self.ca_file = os.environ.get("CORRAL_CA_FILE") or None
            if self.ca_file is None:
                sd = default_state_dir()
                if os.path.exists(os.path.join(sd, "ca.pem")):
                    self.ca_file = os.path.join(sd, "ca.pem")
        hostport = rest.split("/", 1)[0]
        host, _, port = hostport.rpartition(":")
        if not host:
            host, port = hostport, "443" if self._tls else "80"
        self._host = hostport
        self._addr = (host.strip("[]"), int(port))

    def _failover(self, hint: str) -> None:
        """Move to the leader a standby named, else to the next controller of the list."""
        if hint.startswith(("http://", "https://")):
            if hint not in self.urls:
                self.urls.append(hint)
            self._use(hint)
            return
        i = self.urls.index(self.url) if self.url in self.urls else -1
        self._use(self.urls[(i + 1) % len(self.urls)])

    # ---- transport -------------------------------------------------------------------

    def _connect(self) -> Any:
        import _socket

        if self._addr is not None:
            infos = _socket.getaddrinfo(self._addr[0], self._addr[1], 0, _socket.SOCK_STREAM)
            last: Exception | None = None
            for family, stype, proto, _cn, sa in infos:
                s = _socket.socket(family, stype, proto)
                s.settimeout(self.timeout_s)
                try:
                    s.connect(sa)
                    s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                except OSError as exc:
                    last = exc
                    s.close()
                    continue
                return self._wrap_tls(s) if self._tls else s
            raise CorralError("unavailable", f"cannot reach the controller at {self.url}: {last}")
        if self.socket_path is None:
            raise CorralError(
                "unavailable",
                "no Corral controller found: start one with `corral up`, or set CORRAL_SOCKET, "
                "CORRAL_STATE_DIR or CORRAL_URL",
            )
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(self.timeout_s)
        try:
            s.connect(self.socket_path)
        except OSError as exc:
            s.close()
            raise CorralError(
                "unavailable",
                f"cannot connect to the controller socket {self.socket_path}: {exc.strerror}"
                " (is `corral up` running?)",
            ) from None
        return s

    def _wrap_tls(self, raw: Any) -> Any:
        """``raw`` (a connected ``_socket.socket``) as a TLS connection that verified the
        controller's certificate against ``ca_file``."""
        import socket as _pysocket
        import ssl

        from corral.tls import client_context

        s = _pysocket.socket(fileno=raw.detach())
        s.settimeout(self.timeout_s)
        where = self.ca_file or "the system's trust store"
        try:
            ctx = client_context(self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            s.close()
            raise CorralError("invalid", f"cannot load the CA file {self.ca_file}: {exc}") from None
        assert self._addr is not None
        try:
            return ctx.wrap_socket(s, server_hostname=self._addr[0])
        except ssl.SSLCertVerificationError as exc:
            s.close()
            raise CorralError(
                "tls", f"the controller at {self.url} presented a certificate that "
                f"{where} does not vouch for ({exc.verify_message}); set CORRAL_CA_FILE "
                "to the cluster's ca.pem (in the controller's state directory)") from None
        except (ssl.SSLError, OSError) as exc:
            s.close()
            raise CorralError(
                "unavailable", f"TLS handshake with the controller at {self.url} failed: "
                f"{exc} (is it serving https?)") from None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recv_until(self, sock: Any, marker: bytes) -> int:
        while True:
            i = self._buf.find(marker)
            if i >= 0:
                return i
            chunk = sock.recv(262144)
            if not chunk:
                raise ConnectionResetError("connection closed by the controller")
            self._buf += chunk

    def _recv_exact(self, sock: Any, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = sock.recv(max(262144, n - len(self._buf)))
            if not chunk:
                raise ConnectionResetError("connection closed by the controller")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _roundtrip(self, method: str, path: str, payload: bytes | None,
                   extra: tuple[str, ...] = ()) -> tuple[int, bytes]:
        reused = self._sock is not None
        self._sent = False
        if self._sock is None:
            self._sock = self._connect()
        sock = self._sock
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host}", "Accept: application/json"]
        lines.extend(extra)
        if self.auth_token:
            lines.append(f"Authorization: Bearer {self.auth_token}")
        if payload is not None:
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(payload)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            sock.sendall(head + payload if payload is not None else head)
            self._sent = True
            end = self._recv_until(sock, b"\r\n\r\n")
        except (ConnectionResetError, BrokenPipeError) as exc:
            # An idle keep-alive connection the server closed: nothing was processed.
            self.close()
            if reused and not self._buf:
                return self._roundtrip(method, path, payload, extra)
            raise CorralError("unavailable", f"lost the controller connection: {exc}") from None
        except TimeoutError:
            self.close()
            raise CorralError("unavailable", "the controller did not answer in time") from None
        header = self._buf[:end].decode("latin-1")
        self._buf = self._buf[end + 4:]
        status_line, _, rest = header.partition("\r\n")
        status = int(status_line.split(" ", 2)[1])
        length = -1
        chunked = False
        close = False
        for line in rest.split("\r\n"):
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif name == "connection" and "close" in value.lower():
                close = True
        try:
            if chunked:
                parts = []
                while True:
                    i = self._recv_until(sock, b"\r\n")
                    size = int(self._buf[:i].split(b";", 1)[0], 16)
                    self._buf = self._buf[i + 2:]
                    if size == 0:
                        self._recv_until(sock, b"\r\n")
                        self._buf = self._buf[self._buf.find(b"\r\n") + 2:]
                        break
                    parts.append(self._recv_exact(sock, size))
                    self._recv_exact(sock, 2)
                body = b"".join(parts)
            elif length >= 0:
                body = self._recv_exact(sock, length)
            else:
                while True:
                    chunk = sock.recv(262144)
                    if not chunk:
                        break
                    self._buf += chunk
                body, self._buf = self._buf, b""
                close = True
        except (ConnectionResetError, TimeoutError) as exc:
            self.close()
            raise CorralError("unavailable", f"lost the controller connection: {exc}") from None
        if close:
            self.close()
        return status, body

    def request(self, method: str, path: str, body: Any = None, *,
                idempotency_key: str | None = None) -> Any:
        """``call``, waiting out the controller's per-user rate limit (429
        ``rate_limited``: it says when to ask again) for up to ``CORRAL_RATE_LIMIT_WAIT_S``
        seconds (default 300), as Slurm's commands wait when slurmctld tells them to back
        off; past that the ``rate_limited`` error is raised."""
        import time

        deadline = 0.0
        while True:
            try:
                return self.call(method, path, body, idempotency_key=idempotency_key)
            except CorralError as exc:
                if exc.code != "rate_limited":
                    raise
                now = time.monotonic()
                if not deadline:
                    deadline = now + float(os.environ.get("CORRAL_RATE_LIMIT_WAIT_S")
                                           or 300.0)
                if now + exc.retry_after_s > deadline:
                    raise
                time.sleep(max(exc.retry_after_s, 0.01))

    def call(self, method: str, path: str, body: Any = None, *,
             idempotency_key: str | None = None) -> Any:
        """One API call; returns the decoded JSON answer or raises ``CorralError``.

        With several controllers (``CORRAL_URL`` a comma list) a call that reached no
        leader (unreachable, or a standby's ``not_leader``) is sent to the leader the
        standby named, else to the next controller, until ``CORRAL_FAILOVER_WAIT_S``
        (30 s) passed; a call whose connection broke after it was sent is repeated only
        when that is safe (a read, or a submit with its idempotency key)."""
        import json

        payload = None if body is None else json.dumps(body).encode()
        extra = (f"Idempotency-Key: {idempotency_key}",) if idempotency_key else ()
        if not self.urls:  # the Unix socket: one controller
            status, raw = self._roundtrip(method, API + path, payload, extra)
            return self._decode(status, raw)
        import time

        deadline = time.monotonic() + self.failover_wait_s
        tries = 0
        while True:
            try:
                status, raw = self._roundtrip(method, API + path, payload, extra)
            except CorralError as exc:
                safe = not self._sent or method == "GET" or idempotency_key is not None
                if exc.code != "unavailable" or not safe or len(self.urls) < 2 \
                        or time.monotonic() > deadline:
                    raise
                hint = ""
            else:
                if status != 503 or b'"not_leader"' not in raw:
                    return self._decode(status, raw)
                try:
                    hint = str(json.loads(raw)["error"].get("leader") or "")
                except (ValueError, KeyError, AttributeError):
                    hint = ""
                if time.monotonic() > deadline:
                    return self._decode(status, raw)
            tries += 1
            if hint == self.url or tries % len(self.urls) == 0:
                time.sleep(0.05)  # once around the list (a failover under way): a pause
            self._failover("" if hint == self.url else hint)

    def _decode(self, status: int, raw: bytes) -> Any:
        import json

        try:
            data: Any = json.loads(raw) if raw else None
        except ValueError:
            if status < 400:
                raise CorralError("internal", f"the controller sent a bad answer: {raw[:200]!r}",
                                  status) from None
            data = None
        if status >= 400:
            code, message = "internal", raw.decode(errors="replace") or f"HTTP {status}"
            slurm = None
            if isinstance(data, dict):
                err = data.get("error")
                if isinstance(err, dict):
                    code = str(err.get("code", code))
                    message = str(err.get("message", message))
                    slurm = err.get("slurm")
                elif "detail" in data:
                    code = {401: "unauthorized", 403: "forbidden", 404: "not_found",
                            422: "invalid"}.get(status, "invalid")
                    message = str(data["detail"])
            error = CorralError(code, message, status, slurm=slurm)
            if status == 429 and isinstance(data, dict):
                try:
                    error.retry_after_s = float(data["error"].get("retry_after_s") or 1.0)
                except (KeyError, TypeError, ValueError, AttributeError):
                    error.retry_after_s = 1.0
            raise error
        return data

    # ---- jobs ------------------------------------------------------------------------

    def submit(self, sub: JobSubmission | Mapping[str, Any]) -> list[int]:
        """Submit one job (or one array); returns the job ids (one per array task).

        ``sub`` is a ``JobSubmission`` or its wire form (``JobSubmission.to_json()``):
        passing the dict avoids importing the model (fast shims). The server replaces the
        identity fields (``spec.user``/``uid``/``gid``) with the caller's unless the caller
        is root or an operator. Returns after the job is committed to the database.
        """
        return [int(i) for i in self.submit_result(sub)["job_ids"]]

    def submit_result(self, sub: JobSubmission | Mapping[str, Any], *,
                      idempotency_key: str | None = None) -> dict[str, Any]:
        """Like ``submit`` but returns the whole answer: ``job_ids``, ``array_job_id``,
        ``display_id`` (what ``sbatch`` prints).

        ``idempotency_key``: a repeat with the same key answers the first submit's jobs.
        With several controllers (HA) each call gets a fresh one, so the client's own
        retry after a failover never makes a second job; one controller: none (this
        client never repeats a submit that reached the controller)."""
        body = sub if isinstance(sub, Mapping) else sub.to_json()
        if idempotency_key is None and len(self.urls) > 1:
            idempotency_key = os.urandom(16).hex()
        result: dict[str, Any] = self.request("POST", "/jobs", body,
                                              idempotency_key=idempotency_key)
        return result

    def jobs(
        self,
        user: str | None = None,
        states: Iterable[str] | None = None,
        partition: str | None = None,
        ids: Iterable[int | str] | None = None,
        *,
        account: str | None = None,
        name: str | None = None,
        include_finished: bool = False,
        fields: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Jobs matching every given filter. By default the active ones (pending and
        running) plus recently finished ones only when ``include_finished`` or an explicit
        ``ids``/``states`` filter asks for them. ``fields`` limits the keys returned."""
        body: dict[str, Any] = {"include_finished": include_finished}
        if user is not None:
            body["user"] = user
        if states is not None:
            body["states"] = list(states)
        if partition is not None:
            body["partition"] = partition
        if ids is not None:
            body["ids"] = _ids_param(ids)
        if account is not None:
            body["account"] = account
        if name is not None:
            body["name"] = name
        if fields is not None:
            body["fields"] = list(fields)
        return self._all_pages("/jobs/query", body)

    def _all_pages(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Every page of a list route: the controller answers at most a page of rows and
        ``next_after`` (the cursor of the next page, null on the last)."""
        out: list[dict[str, Any]] = []
        while True:
            res = self.request("POST", path, body)
            out.extend(res["jobs"])
            after = res.get("next_after")
            if after is None or not res["jobs"] or "limit" in body:
                return out
            body = dict(body, after=after)

    def job(self, job_id: int | str) -> dict[str, Any]:
        """One job, active or finished, with full detail. ``not_found`` if unknown."""
        job: dict[str, Any] = self.request("GET", f"/jobs/{job_id}")
        return job

    def _action(self, action: str, ids: Iterable[int | str], **extra: Any) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"ids": _ids_param(ids)}
        body.update({k: v for k, v in extra.items() if v is not None})
        results: list[dict[str, Any]] = self.request("POST", f"/jobs/{action}", body)["results"]
        return results

    def cancel(
        self,
        ids: Iterable[int | str],
        signal: str | int | None = None,
        *,
        batch_only: bool = False,
        scope: str | None = None,
    ) -> list[dict[str, Any]]:
        """Cancel jobs, or with ``signal`` just send it (``"USR1"``, ``10``) to running ones.

        ``scope`` (with ``signal``), as ``scancel``: ``"steps"`` every job process but the
        batch shell (scancel's default), ``"batch"`` only the shell (``-b``), ``"all"``
        every process (``-f``). Without it the signal goes to every process (or only the
        shell with ``batch_only``).

        Returns one result per id: ``{"id": "12", "ok": bool, "code": str, "message": str}``
        (plus ``slurm``: Slurm's wording of a failure). Per-id failures (unknown, finished,
        not yours) come back as results, not exceptions.
        """
        if scope is not None and scope not in ("steps", "batch", "all"):
            raise CorralError("invalid", f"scope must be steps, batch or all, not {scope!r}")
        return self._action("cancel", ids, signal=None if signal is None else str(signal),
                            batch_only=batch_only or scope == "batch" or None, scope=scope)

    def start_step(self, job_id: int | str, argv: Iterable[str], *, name: str | None = None,
                   ntasks: int = 1, nodes: Iterable[str] = (), num_cpus: int = 0,
                   start_time: float | None = None, pid: int | None = None) -> int:
        """Record a step (what ``srun`` runs) of a running job; returns its step id
        (0, 1, ... within the job's current run). The job's owner or an operator."""
        body: dict[str, Any] = {"argv": list(argv), "ntasks": ntasks, "nodes": list(nodes),
                                "num_cpus": num_cpus}
        for key, value in (("name", name), ("start_time", start_time), ("pid", pid)):
            if value is not None:
                body[key] = value
        return int(self.request("POST", f"/jobs/{job_id}/steps", body)["step_id"])

    def end_step(self, job_id: int | str, step_id: int, *, exit_code: int = 0,
                 signal: int = 0, state: str | None = None,
                 end_time: float | None = None,
                 usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record a step's end (``state`` defaults from the exit code and signal:
        COMPLETED, FAILED or CANCELLED) and, with ``usage``, what it used
        (``{"nodes": {node: {node, cpu_time_s, max_rss_mb, pids}}}``, one entry per node
        of the step); returns the step record."""
        body: dict[str, Any] = {"exit_code": exit_code, "signal": signal}
        if state is not None:
            body["state"] = state
        if end_time is not None:
            body["end_time"] = end_time
        if usage is not None:
            body["usage"] = usage
        step: dict[str, Any] = self.request("POST", f"/jobs/{job_id}/steps/{step_id}/end",
                                            body)
        return step

    def hold(self, ids: Iterable[int | str], *, admin: bool = False) -> list[dict[str, Any]]:
        """Hold pending jobs (user hold; ``admin=True``: an admin hold, operators only)."""
        return self._action("hold", ids, admin=admin or None)

    def release(self, ids: Iterable[int | str]) -> list[dict[str, Any]]:
        return self._action("release", ids)

    def requeue(self, ids: Iterable[int | str], *, hold: bool = False) -> list[dict[str, Any]]:
        """Requeue running or finished jobs: same id, ``restarts`` + 1 (``hold``: held)."""
        return self._action("requeue", ids, hold=hold or None)

    def update_job(self, job_id: int | str, **fields: Any) -> dict[str, Any]:
        """Change a job: ``time_limit_s`` (raise: operators only; applies to running jobs
        too), ``name``, ``nice``, ``priority`` (operators), ``partition``, ``account``,
        ``qos``, ``begin_time``, ``comment``, ``dependency`` (Slurm syntax string) ...
        Returns the updated record."""
        job: dict[str, Any] = self.request("PATCH", f"/jobs/{job_id}", fields)
        return job

    def history(
        self,
        user: str | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        states: Iterable[str] | None = None,
        ids: Iterable[int | str] | None = None,
        account: str | None = None,
        partition: str | None = None,
        limit: int | None = None,
        all_users: bool = False,
        names: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Accounting records of jobs (any state) from the database, oldest first;
        ``names``: only jobs of these names (answered from the database's name index).

        ``since``/``until`` select jobs whose lifetime overlaps that window (epoch seconds).
        Without ``user`` and without ``all_users`` a user sees their own jobs.
        """
        body: dict[str, Any] = {"all_users": all_users}
        for key, value in (("user", user), ("since", since), ("until", until),
                           ("account", account), ("partition", partition), ("limit", limit)):
            if value is not None:
                body[key] = value
        if states is not None:
            body["states"] = list(states)
        if ids is not None:
            body["ids"] = _ids_param(ids)
        if names is not None:
            body["names"] = list(names)
        return self._all_pages("/history", body)

    # ---- job events -------------------------------------------------------------------

    def events_page(self, since: int | None = None, *, user: str | None = None,
                    jobs: Iterable[int | str] | None = None,
                    names: Iterable[str] | None = None, tags: Iterable[str] | None = None,
                    states: Iterable[str] | None = None, limit: int | None = None,
                    wait_s: float = 0.0) -> dict[str, Any]:
        """One long poll of ``GET /events``: ``{"events": [...], "next": N, "last_id": M}``
        (events after id ``since``; None: only new ones); waits up to ``wait_s`` for one."""
        from urllib.parse import quote

        params: list[str] = []
        if since is not None:
            params.append(f"since={int(since)}")
        for key, values in (("jobs", jobs), ("name", names), ("tag", tags),
                            ("state", states)):
            if values is not None:
                words = [str(v) for v in values]
                if words:
                    params.append(f"{key}={quote(','.join(words))}")
        if user is not None:
            params.append(f"user={quote(user)}")
        if limit is not None:
            params.append(f"limit={int(limit)}")
        if wait_s:
            params.append(f"wait_s={min(float(wait_s), 60.0):g}")
        params.append("format=json")
        page: dict[str, Any] = self.request("GET", "/events?" + "&".join(params))
        return page

    def events(self, since: int | None = None, *, user: str | None = None,
               jobs: Iterable[int | str] | None = None, names: Iterable[str] | None = None,
               tags: Iterable[str] | None = None, states: Iterable[str] | None = None,
               follow: bool = True, wait_s: float = 25.0,
               reconnect_s: float = 60.0) -> Iterator[dict[str, Any]]:
        """Job events in order (each a dict: ``id``, ``time``, ``job_id``, ``display_id``,
        ``old_state``, ``state``, ``reason``, ``exit_code``, ``signal``, ...), after id
        ``since`` (None: from now on). With ``follow`` it waits for new ones (long polls of
        ``wait_s``) and rides out a controller restart for up to ``reconnect_s``: the
        cursor is the last id seen, so nothing is skipped or repeated; without it, it ends
        once it caught up. Pass the last ``id`` seen as ``since`` to resume later."""
        import time

        jobs_l = None if jobs is None else [str(j) for j in jobs]
        cursor = since
        wait_s = min(wait_s, max(self.timeout_s - 5.0, 0.0), 60.0)
        down_since: float | None = None
        while True:
            try:
                page = self.events_page(cursor, user=user, jobs=jobs_l, names=names,
                                        tags=tags, states=states,
                                        wait_s=wait_s if follow else 0.0)
            except CorralError as exc:
                if not follow or exc.code != "unavailable":
                    raise
                now = time.monotonic()
                down_since = down_since or now
                if now - down_since > reconnect_s:
                    raise
                time.sleep(0.2)
                continue
            down_since = None
            yield from page["events"]
            cursor = int(page["next"])
            if not follow and not page["events"] and cursor >= int(page["last_id"]):
                return

    # ---- nodes, partitions, cluster -------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self.request("GET", "/nodes")["nodes"]
        return nodes

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.request("GET", f"/nodes/{name}")
        return node

    def drain(self, node: str, reason: str) -> dict[str, Any]:
        """Drain a node (operators): running jobs finish, nothing new starts there."""
        rec: dict[str, Any] = self.request("POST", f"/nodes/{node}/drain", {"reason": reason})
        return rec

    def resume(self, node: str) -> dict[str, Any]:
        rec: dict[str, Any] = self.request("POST", f"/nodes/{node}/resume", {})
        return rec

    def set_node_down(self, node: str, reason: str) -> dict[str, Any]:
        rec: dict[str, Any] = self.request("POST", f"/nodes/{node}/down", {"reason": reason})
        return rec

    def pull_image(self, ref: str, nodes: list[str] | None = None) -> dict[str, Any]:
        """Ask the nodes' agents to cache a registry image (``corral image pull``)."""
        body: dict[str, Any] = {"ref": ref}
        if nodes:
            body["nodes"] = list(nodes)
        out: dict[str, Any] = self.request("POST", "/images/pull", body)
        return out

    # ---- advance reservations (operators change them; docs/lifecycle.md) ----------------

    def reservations(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.request("GET", "/reservations")["reservations"]
        return out

    def create_reservation(self, **fields: Any) -> dict[str, Any]:
        """``name``, ``start_time`` (epoch s or "now"), ``end_time`` or ``duration_s``,
        ``nodes`` (host list or "ALL") or ``node_count``, ``users``/``accounts``,
        ``partition``, ``flags``."""
        rec: dict[str, Any] = self.request("POST", "/reservations", fields)
        return rec

    def update_reservation(self, name: str, **fields: Any) -> dict[str, Any]:
        from urllib.parse import quote

        rec: dict[str, Any] = self.request("PATCH", f"/reservations/{quote(name)}", fields)
        return rec

    def delete_reservation(self, name: str) -> None:
        from urllib.parse import quote

        self.request("DELETE", f"/reservations/{quote(name)}")

    # ---- run-time administration (operators; docs/lifecycle.md, sacctmgr) -------------

    def admin_change(self, kind: str, name: str, fields: dict[str, Any] | None,
                     mode: str) -> dict[str, Any] | None:
        """Add (``mode="add"``), modify or delete an entry of ``kind`` (``accounts``,
        ``users``, ``qos``); ``fields`` as ``corral.toml`` writes them."""
        from urllib.parse import quote

        if mode == "add":
            out: dict[str, Any] | None = self.request("POST", f"/admin/{kind}",
                                                      dict(fields or {}, name=name))
        elif mode == "modify":
            out = self.request("PATCH", f"/admin/{kind}/{quote(name)}", fields or {})
        else:
            self.request("DELETE", f"/admin/{kind}/{quote(name)}")
            out = None
        return out

    def set_partition_state(self, name: str, state: str) -> None:
        from urllib.parse import quote

        self.request("PATCH", f"/partitions/{quote(name)}", {"state": state})

    def config_reload(self) -> dict[str, Any]:
        """Re-read the controller's corral.toml: ``{"applied": [...], "restart_needed":
        [...], "file": path}`` (operators)."""
        out: dict[str, Any] = self.request("POST", "/config/reload", {})
        return out

    def node_power(self, node: str, action: str) -> dict[str, Any]:
        """``action``: ``up`` (run the resume program) or ``down`` (the suspend one)."""
        rec: dict[str, Any] = self.request("POST", f"/nodes/{node}/power", {"action": action})
        return rec

    def partitions(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = self.request("GET", "/partitions")["partitions"]
        return parts

    def cluster_config(self) -> dict[str, Any]:
        """The running configuration (``ClusterConfig`` as JSON, secrets removed)."""
        cfg: dict[str, Any] = self.request("GET", "/config")
        return cfg

    def fairshare(self) -> dict[str, Any]:
        """``{"algorithm", "rows"}``: shares, usage and factors per association (sshare;
        ``corral.ops.schedview.fairshare_payload``)."""
        data: dict[str, Any] = self.request("GET", "/ops/fairshare")
        return data

    def job_usage(self, job_id: int | str) -> dict[str, Any]:
        """``{"job_id", "running", "nodes": {node: {node, cpu_time_s, max_rss_mb, pids,
        time}}}``: the agents' last live samples of a running job (sstat;
        ``corral.controller.liveusage``)."""
        from urllib.parse import quote

        data: dict[str, Any] = self.request("GET", f"/ops/usage/{quote(str(job_id))}")
        return data

    def node_history(self, since: float, until: float) -> dict[str, Any]:
        """``{"nodes": [{name, state, start, end, cpus}], "reservations": [{name, start,
        end, cpus, maint, nodes}]}``: nodes DOWN or DRAINED and reservations inside the
        window (sreport; ``corral.controller.nodehistory``)."""
        data: dict[str, Any] = self.request(
            "GET", f"/ops/node-history?since={since!r}&until={until!r}")
        return data

    def priorities(self) -> dict[str, Any]:
        """``{"ordering", "weights", "jobs"}``: priority factors of pending jobs (sprio;
        ``corral.ops.schedview.priorities_payload``)."""
        data: dict[str, Any] = self.request("GET", "/ops/priorities")
        return data

    def whoami(self) -> dict[str, Any]:
        """``{"user", "uid", "gid", "operator": bool, "via": "socket"|"token"}``."""
        me: dict[str, Any] = self.request("GET", "/whoami")
        return me

    def ping(self) -> dict[str, Any]:
        """``{"status": "ok", "cluster": name, "version": str, "time": float,
        "nodes_up": int, "jobs_active": int}``."""
        pong: dict[str, Any] = self.request("GET", "/ping")
        return pong

    def token(self, user: str | None = None, ttl_s: int = 86400) -> str:
        """A signed token for remote (``CORRAL_URL``) use: yours, or any user's (root)."""
        body: dict[str, Any] = {"ttl_s": ttl_s}
        if user is not None:
            body["user"] = user
        tok: str = self.request("POST", "/tokens", body)["token"]
        return tok
