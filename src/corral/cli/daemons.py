"""``corral up`` / ``down`` / ``controller`` / ``agent`` / ``token``: running the daemons.

``corral up`` starts a controller and a local agent as two processes that talk the
network protocol (the agent connects to the controller's Unix socket with the cluster
key), waits until the node registered, prints how to submit, and stays in the foreground
until Ctrl-C (or returns at once with ``--detach``; ``corral down`` stops it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

StateDirOpt = Annotated[Path | None, typer.Option(
    "--state-dir", envvar="CORRAL_STATE_DIR",
    help="State directory (database, socket, logs). Default: /var/lib/corral for root, "
         "~/.local/state/corral otherwise.")]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", "-c", envvar="CORRAL_CONFIG", help="corral.toml (default: built-in defaults)")]

_ENTRY = "from corral.cli.main import main; main()"


def _state_dir(opt: Path | None, cfg: Any = None) -> Path:
    from corral.client import default_state_dir

    if opt is not None:
        return opt.resolve()
    if cfg is not None and cfg.state_dir:
        return Path(cfg.state_dir).resolve()
    return Path(default_state_dir()).resolve()


def _load(config: Path | None) -> Any:
    from corral.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        typer.echo(f"corral: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None


def _setup_logging(level: str) -> None:
    import logging

    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_ready(sock: Path, deadline_s: float,
                procs: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    from corral.client import Client, CorralError

    end = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < end:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a daemon exited early (code {p.returncode})")
        if sock.exists():
            try:
                with Client(socket_path=str(sock), timeout_s=5) as c:
                    pong = c.ping()
                    if pong.get("agents", 0) >= 1 and pong.get("nodes_up", 0) >= 1:
                        return pong
                    last = f"controller up, waiting for the agent ({pong})"
            except CorralError as exc:
                last = str(exc)
        time.sleep(0.05)
    raise RuntimeError(f"the cluster did not become ready in {deadline_s:.0f} s: {last}")


def _spawn(args: list[str], log_path: Path, detach: bool) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(log_path.parent, 0o700)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # the daemons' logs name users, jobs and paths: owner only
    logf = os.fdopen(fd, "ab")
    try:
        return subprocess.Popen([sys.executable, "-c", _ENTRY, *args], stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=detach, close_fds=True)
    finally:
        logf.close()


def _stop_pid(pid: int, timeout_s: float = 15.0) -> bool:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not _pid_alive(pid):
            return True
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return not _pid_alive(pid)


def up(
    state_dir: StateDirOpt = None,
    config: ConfigOpt = None,
    listen: Annotated[str | None, typer.Option(
        help="Also serve HTTP on host:port (agents on other hosts, remote users).")] = None,
    detach: Annotated[bool, typer.Option(
        "--detach", "-d", help="Return once the cluster is ready (stop it with corral down).")
    ] = False,
    node_name: Annotated[str | None, typer.Option(
        "--node-name", help="Name of the local node (default: the short host name).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 60.0,
) -> None:
    """Start a one-machine cluster: a controller and a local agent."""
    cfg = _load(config)
    sd = _state_dir(state_dir, cfg)
    from corral.controller.server import prepare_state_dir

    try:
        prepare_state_dir(sd)
    except OSError as exc:
        typer.echo(f"corral: cannot use the state directory {sd}: {exc.strerror} (choose "
                   "another with --state-dir or CORRAL_STATE_DIR)", err=True)
        raise typer.Exit(1) from None
    info_path = sd / "controller.json"
    if info_path.exists():
        try:
            pid = int(json.loads(info_path.read_text())["pid"])
        except (ValueError, KeyError, OSError):
            pid = 0
        if pid and _pid_alive(pid):
            typer.echo(f"corral: a cluster is already running on {sd} (controller pid {pid});"
                       " stop it with `corral down`", err=True)
            raise typer.Exit(1)
    common = ["--state-dir", str(sd)] + (["--config", str(config)] if config else [])
    ctl_args = ["controller", *common] + (["--listen", listen] if listen else [])
    logs = sd / "log"
    ctl = _spawn(ctl_args, logs / "controller.log", detach)
    sock = Path(cfg.controller.socket or sd / "corral.sock")
    procs = [ctl]
    try:
        end = time.monotonic() + timeout
        while not (sd / "cluster.key").exists() or not sock.exists():
            if ctl.poll() is not None:
                raise RuntimeError(f"the controller exited (code {ctl.returncode}); see "
                                   f"{logs / 'controller.log'}")
            if time.monotonic() > end:
                raise RuntimeError("the controller did not start in time")
            time.sleep(0.02)
        agent_args = ["agent", "--controller", f"unix:{sock}", "--key-file",
                      str(sd / "cluster.key"), "--state-dir", str(sd / "agent"),
                      *(["--config", str(config)] if config else []),
                      *(["--name", node_name] if node_name else [])]
        agent = _spawn(agent_args, logs / "agent.log", detach)
        procs.append(agent)
        (sd / "agent.pid").write_text(str(agent.pid))
        pong = _wait_ready(sock, max(1.0, end - time.monotonic()), procs)
    except (RuntimeError, KeyboardInterrupt) as exc:
        for p in reversed(procs):
            if p.poll() is None:
                _stop_pid(p.pid)
        why = (str(exc) if isinstance(exc, RuntimeError)
               else "interrupted before the cluster was ready")
        typer.echo(f"corral: {why}", err=True)
        raise typer.Exit(1) from None
    if detach:
        _print_banner(sd, sock, pong, cfg.cluster_name, detach)
        return
    # from here on Ctrl-C, wherever it lands (even during the banner), stops the cluster;
    # so do SIGTERM and SIGHUP (kill, a service manager, a closed terminal), which would
    # otherwise end this process alone and leave both daemons running without it; and
    # SIGINT even when it was inherited ignored (started with `&` from a script)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        _print_banner(sd, sock, pong, cfg.cluster_name, detach)
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        typer.echo("corral: a daemon exited; stopping the cluster", err=True)
    except KeyboardInterrupt:
        typer.echo("\nstopping the cluster (running jobs keep running and are re-adopted "
                   "on the next `corral up`)")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                _stop_pid(p.pid)
                p.wait(timeout=5)
        try:
            (sd / "agent.pid").unlink()
        except OSError:
            pass


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _print_banner(sd: Path, sock: Path, pong: dict[str, Any], cluster: str, detach: bool) -> None:
    from corral.client import Client

    with Client(socket_path=str(sock)) as c:
        nodes = c.nodes()
    desc = ", ".join(f"{n['name']}: {n['cpus']} CPUs, {n['mem_mb'] / 1024:.1f} GiB"
                     + (f", {n['gpus']} GPUs" if n["gpus"] else "") for n in nodes)
    env_hint = "" if sd == Path(_default_dir()).resolve() else \
        f"  export CORRAL_STATE_DIR={sd}\n"
    typer.echo(
        f"Corral cluster '{cluster}' is up ({len(nodes)} node: {desc}).\n"
        f"  state dir: {sd}\n  socket:    {sock}\n\n"
        f"Submit a job:\n{env_hint}  corral submit --wrap 'hostname'\n"
        f"  corral queue\n\n"
        + ("Stop it with: corral down" + (f" --state-dir {sd}" if env_hint else "")
           if detach else "Press Ctrl-C to stop it.")
    )


def _default_dir() -> str:
    from corral.client import default_state_dir

    return default_state_dir()


def down(state_dir: StateDirOpt = None) -> None:
    """Stop a cluster started with ``corral up --detach`` (jobs keep running)."""
    sd = _state_dir(state_dir)
    stopped = 0
    for name in ("agent.pid", "controller.json"):
        path = sd / name
        if not path.exists():
            continue
        try:
            text = path.read_text()
            pid = int(json.loads(text)["pid"]) if name.endswith(".json") else int(text)
        except (ValueError, KeyError, OSError):
            continue
        if _pid_alive(pid):
            if not _stop_pid(pid):
                typer.echo(f"corral: process {pid} did not stop", err=True)
                raise typer.Exit(1)
            stopped += 1
        if name == "agent.pid":
            try:
                path.unlink()
            except OSError:
                pass
    if not stopped:
        typer.echo(f"no running cluster on {sd}")
    else:
        typer.echo(f"stopped the cluster on {sd}")


def controller(
    state_dir: StateDirOpt = None,
    config: ConfigOpt = None,
    listen: Annotated[str | None, typer.Option(help="Serve HTTP on host:port too.")] = None,
) -> None:
    """Run the controller in the foreground."""
    cfg = _load(config)
    sd = _state_dir(state_dir, cfg)
    _setup_logging(cfg.controller.log_level)
    from corral.controller.server import run_controller

    run_controller(cfg, sd, listen=listen,
                   config_path=config.resolve() if config is not None else None)


def agent(
    controller_url: Annotated[list[str] | None, typer.Option(
        "--controller", help="Controller: http://host:port or unix:/path/corral.sock; "
                             "repeat it (or give a comma list) for the controllers of an HA "
                             "cluster (default: [agent] controllers)")] = None,
    state_dir: Annotated[Path | None, typer.Option(
        "--state-dir", help="Agent state (job spool). Default: <state dir>/agent")] = None,
    key_file: Annotated[Path | None, typer.Option(
        "--key-file", help="Cluster key file (the controller's <state dir>/cluster.key); "
                           "or set CORRAL_CLUSTER_KEY")] = None,
    name: Annotated[str | None, typer.Option(help="Node name (default: host name)")] = None,
    config: ConfigOpt = None,
    ca_file: Annotated[Path | None, typer.Option(
        "--ca-file", envvar="CORRAL_CA_FILE",
        help="CA certificate an https:// controller is verified with (the controller's "
             "<state dir>/ca.pem; default: that file when it exists here)")] = None,
) -> None:
    """Run a node agent in the foreground (jobs survive its restarts)."""
    cfg = _load(config)
    _setup_logging(cfg.controller.log_level)
    configured: tuple[str, ...] = tuple(getattr(cfg.agent, "controllers", ()))
    controllers = list(controller_url) if controller_url else list(configured)
    if not controllers:
        typer.echo("corral: no controller: pass --controller URL (or set [agent] controllers)",
                   err=True)
        raise typer.Exit(2)
    key = os.environ.pop("CORRAL_CLUSTER_KEY", "")  # not inherited by anything it starts
    if key_file is not None:
        try:
            key = key_file.read_text().strip()
        except OSError as exc:
            typer.echo(f"corral: cannot read the key file: {exc.strerror}", err=True)
            raise typer.Exit(2) from None
    if not key:
        default = _state_dir(None, cfg) / "cluster.key"
        if default.exists():
            key = default.read_text().strip()
    if not key:
        typer.echo("corral: no cluster key: pass --key-file or set CORRAL_CLUSTER_KEY",
                   err=True)
        raise typer.Exit(2)
    sd = state_dir.resolve() if state_dir else _state_dir(None, cfg) / "agent"
    ca = _agent_ca_file(ca_file, sd, cfg)
    from corral.agent.daemon import run_agent

    ac = cfg.agent
    if ac.metrics_listen:  # Prometheus endpoint of this node (corral.ops.agent_metrics)
        import socket

        from corral.ops.agent_metrics import start_agent_metrics

        try:
            start_agent_metrics(ac.metrics_listen, name or socket.gethostname().split(".")[0],
                                sd)
        except (ValueError, OSError) as exc:
            typer.echo(f"corral: agent.metrics_listen {ac.metrics_listen!r}: {exc}", err=True)
            raise typer.Exit(2) from None
    run_agent(controllers, key, sd, node_name=name,
              cgroup_root=ac.cgroup_root or os.environ.get("CORRAL_CGROUP_ROOT") or None,
              heartbeat_s=ac.heartbeat_s,
              reconnect_max_s=ac.reconnect_max_s, pin_cpus=ac.pin_cpus,
              isolation="none" if ac.cgroup_root == "" else "auto", ca_file=ca,
              gpu_devices=ac.gpu_devices, containers=cfg.containers)


def _agent_ca_file(ca_file: Path | None, sd: Path, cfg: Any) -> str | None:
    """The CA file of an agent: ``--ca-file``/``CORRAL_CA_FILE``; else the CA that a
    join line brought (``CORRAL_CA_CERT``: base64 DER), written to ``<agent state>/ca.pem``;
    else ``<state dir>/ca.pem`` when it exists; else None (the system's trust store)."""
    if ca_file is not None:
        if not ca_file.is_file():
            typer.echo(f"corral: no CA file {ca_file}", err=True)
            raise typer.Exit(2)
        return str(ca_file.resolve())
    inline = os.environ.pop("CORRAL_CA_CERT", "")
    if inline:
        import base64
        import ssl

        try:
            pem = ssl.DER_cert_to_PEM_cert(base64.b64decode(inline, validate=True))
        except ValueError:
            typer.echo("corral: CORRAL_CA_CERT is not a base64 certificate", err=True)
            raise typer.Exit(2) from None
        sd.mkdir(parents=True, exist_ok=True)
        (sd / "ca.pem").write_text(pem)
        return str(sd / "ca.pem")
    for cand in (_state_dir(None, cfg) / "ca.pem", sd / "ca.pem"):
        if cand.is_file():
            return str(cand)
    return None


def token(
    user: Annotated[str | None, typer.Option(help="For this user (root only)")] = None,
    ttl: Annotated[int, typer.Option(help="Lifetime in seconds")] = 86400,
    agent_line: Annotated[bool, typer.Option(
        "--agent", help="Print the command that joins a new node to this cluster instead "
                        "(on the controller's host, as the user that runs it or root).")
    ] = False,
    url: Annotated[str | None, typer.Option(
        help="With --agent: the controller's URL as the new node reaches it (default: "
             "from its --listen address; for 0.0.0.0 this host's name).")] = None,
    state_dir: StateDirOpt = None,
) -> None:
    """Print a token for remote use: export CORRAL_URL=... CORRAL_TOKEN=<token>.

    With --agent: print the line to run on a new node,
    ``CORRAL_CLUSTER_KEY=<key> corral agent --controller <url>``. It starts with a space,
    so that bash (HISTCONTROL=ignorespace or ignoreboth, the default on many systems)
    keeps it, and with it the cluster key, out of the shell's history; the key is in no
    argument either, so other users do not see it in ps. Anyone with the key can join
    nodes: hand it over as you would a password.
    """
    if agent_line:
        typer.echo(_agent_join_line(_state_dir(state_dir), url))
        typer.echo("corral: run this on the new node (the leading space keeps the key out "
                   "of bash's history); add --name NAME to choose its node name", err=True)
        return
    from corral.client import Client, CorralError

    try:
        with Client() as c:
            typer.echo(c.token(user, ttl))
    except CorralError as exc:
        typer.echo(f"corral: {exc}", err=True)
        raise typer.Exit(1) from None


def _agent_join_line(sd: Path, url: str | None) -> str:
    """`` CORRAL_CLUSTER_KEY=... corral agent --controller URL`` for the cluster of ``sd``:
    the key from its cluster.key, the URL from controller.json (its listen address)."""
    import shlex

    try:
        key = (sd / "cluster.key").read_text().strip()
    except PermissionError:
        typer.echo(f"corral: cannot read {sd / 'cluster.key'}: run this as the user that "
                   "runs the controller, or as root", err=True)
        raise typer.Exit(1) from None
    except OSError:
        typer.echo(f"corral: no cluster key in {sd} (is the controller's state directory "
                   "elsewhere? pass --state-dir)", err=True)
        raise typer.Exit(1) from None
    if not url:
        try:
            info = json.loads((sd / "controller.json").read_text())
        except (OSError, ValueError):
            info = {}
        pid = info.get("pid")
        if not (isinstance(pid, int) and _pid_alive(pid)):
            typer.echo(f"corral: no controller is running on {sd}: start it, or pass --url",
                       err=True)
            raise typer.Exit(1)
        url = info.get("url")
        if not url:
            typer.echo("corral: the controller serves only its Unix socket, which other "
                       "hosts cannot reach: restart it with --listen HOST:PORT (or "
                       "[controller] listen), or pass --url", err=True)
            raise typer.Exit(1)
    ca = ""
    if url.startswith(("https://", "wss://")):
        import base64
        import ssl

        try:  # the CA travels in the line (one word: base64 DER), the agent keeps it
            der = ssl.PEM_cert_to_DER_cert((sd / "ca.pem").read_text())
            ca = f"CORRAL_CA_CERT={base64.b64encode(der).decode()} "
        except (OSError, ValueError):
            typer.echo(f"corral: no CA certificate in {sd / 'ca.pem'}; the new node needs "
                       "--ca-file", err=True)
    return (f" CORRAL_CLUSTER_KEY={shlex.quote(key)} {ca}corral agent --controller "
            f"{shlex.quote(url)}")


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("down")(down)
    app.command("controller")(controller)
    app.command("agent")(agent)
    app.command("token")(token)
