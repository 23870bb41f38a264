"""``scontrol``: show, hold/release, requeue, update, hostnames, ping, version.

Supported (Slurm 22.05 wording and exit codes, ``clients.md`` §9.1 rank 16):

- ``show job [ID]`` (``-o`` one line per job), ``show node [NAME]``, ``show partition
  [NAME]``, ``show config``, ``show hostnames [EXPR]`` (default ``$SLURM_JOB_NODELIST``;
  any prefix of ``hostnames`` of 5+ letters, so Parsl's ``show hostname`` works),
  ``show hostlist NAMES``, ``show hostlistsorted NAMES``;
- ``hold``/``uhold``/``release``/``requeue``/``requeuehold`` ``ID[,ID...]`` (``12_3`` too);
- ``update JobId=ID Key=Value...`` for TimeLimit, JobName/Name, Nice, Priority, Partition,
  Account, QOS, StartTime/BeginTime, Comment, Dependency; ``update NodeName=N State=DRAIN
  Reason=...`` / ``State=RESUME`` / ``State=DOWN``;
- ``create reservation K=V...``, ``update ReservationName=N K=V...``, ``delete
  ReservationName=N``, ``show reservation [NAME]`` (``corral.shims.scontrol_resv``);
- ``ping``, ``version``, ``-V``.
"""

from __future__ import annotations

from typing import Any

from corral.shims import scontrol_show as show
from corral.shims import slurmfmt as sf
from corral.shims.context import Client, Context, ShimExit
from corral.shims.ids import IdError, RefIndex, parse_job_refs, ref_api_ids

VERSION = "slurm 22.05.8"
ENTITIES = ("job", "jobid", "node", "partition", "config", "hostnames", "hostlist",
            "hostlistsorted", "steps", "step", "licenses", "reservation")


def _entity(word: str) -> str | None:
    w = word.lower()
    if w in ENTITIES:
        return w
    if len(w) >= 5 and "hostnames".startswith(w):
        return "hostnames"
    for e in ("job", "node", "partition", "config", "licenses", "reservation"):
        if len(w) >= 3 and e.startswith(w):
            return e
    if w in ("reservations", "reservationname"):
        return "reservation"
    return None


def run(ctx: Context, client: Client) -> None:
    args = list(ctx.argv)
    oneliner = False
    quiet = False
    rest: list[str] = []
    for a in args:
        if a in ("-o", "--oneliner"):
            oneliner = True
        elif a in ("-Q", "--quiet"):
            quiet = True
        elif a in ("-V", "--version"):
            ctx.print(VERSION)
            return
        elif a in ("-d", "--details", "-v", "--verbose", "-a", "--all", "--local",
                   "--sibling", "--federation", "--future"):
            continue
        elif a.startswith(("-M", "--cluster")):
            continue
        elif a in ("-h", "--help", "--usage"):
            ctx.print("Usage: scontrol [<OPTION>] [<COMMAND>]")
            return
        else:
            rest.append(a)
    if not rest:
        raise ctx.fail("scontrol: error: no command given (interactive mode is not "
                       "supported by Corral's scontrol)")
    cmd, words = rest[0].lower(), rest[1:]
    if cmd == "show":
        _show(ctx, client, words, oneliner)
    elif cmd in ("hold", "uhold", "release", "requeue", "requeuehold"):
        _action(ctx, client, cmd, words, quiet)
    elif cmd == "update":
        _update(ctx, client, words)
    elif cmd in ("create", "delete"):
        from corral.shims import scontrol_resv

        if cmd == "create":
            if words and "=" not in words[0]:  # create reservation K=V...
                if _entity(words[0]) != "reservation":
                    raise ctx.fail(f"invalid entity: {words[0]} for keyword: create")
                words = words[1:]
            scontrol_resv.create(ctx, client, words)
        else:
            if words and "=" not in words[0] and _entity(words[0]) == "reservation":
                words = words[1:]
            if not words or not words[0].lower().startswith(("reservationname=",
                                                             "reservation=")):
                raise ctx.fail("scontrol: error: delete: only ReservationName=NAME can be "
                               "deleted by Corral's scontrol")
            scontrol_resv.delete(ctx, client, words)
    elif cmd == "ping":
        _ping(ctx, client.ping())
    elif cmd in ("reconfigure", "reconfig"):
        from corral.client import CorralError

        reload = getattr(client, "config_reload", None)
        if reload is None:
            raise ctx.fail("scontrol: error: reconfigure is not available through this "
                           "connection to the controller")
        try:
            got = reload()
        except CorralError as exc:
            raise ctx.fail(f"slurm_reconfigure error: {exc.slurm or exc.message}") from None
        if got.get("restart_needed"):
            ctx.error("scontrol: warning: these settings take effect after a restart of "
                      f"the controller: {', '.join(got['restart_needed'])}")
    elif cmd == "version":
        ctx.print(VERSION)
    elif cmd in ("listpids",):
        raise ctx.fail("scontrol: error: listpids is not supported by Corral")
    else:
        raise ctx.fail(f"invalid keyword: {rest[0]}")


def _show_licenses(ctx: Context, client: Any, name: str | None, oneliner: bool) -> None:
    """``scontrol show licenses [NAME]``: each configured license (by name) with its total,
    the count held by running and suspended jobs, and what is free; as Slurm 22.05 prints
    local licenses (no reservations of licenses: Reserved=0)."""
    pools = sorted((str(x["name"]), int(x["count"]))
                   for x in client.cluster_config().get("licenses") or ())
    if not pools:
        ctx.print("No licenses configured in Slurm.")
        return
    used: dict[str, int] = {}
    for job in client.jobs(states=["RUNNING", "SUSPENDED"], fields=["licenses"]):
        for lic, n in job.get("licenses") or ():
            used[str(lic)] = used.get(str(lic), 0) + int(n)
    sep = " " if oneliner else "\n    "
    for lic, total in pools:
        if name is not None and lic != name:
            continue
        held = used.get(lic, 0)
        ctx.print(f"LicenseName={lic}{sep}Total={total} Used={held} "
                  f"Free={max(0, total - held)} Reserved=0 Remote=no")
        if name is not None:
            break


def _ping(ctx: Context, pong: dict[str, Any]) -> None:
    """Slurm's lines: the leader as ``primary``, each standby as ``backup`` (with several
    controllers on PostgreSQL); one controller: ``Slurmctld(primary) at HOST is UP``."""
    if not pong.get("ha"):
        ctx.print(f"Slurmctld(primary) at {pong.get('host') or 'localhost'} is UP")
        return
    leader = pong.get("leader") or {}
    if leader.get("holder"):
        ctx.print(f"Slurmctld(primary) at {leader['holder']} is UP")
    else:
        ctx.print("Slurmctld(primary) at (none: a failover is under way) is DOWN")
    for peer in pong.get("controllers") or ():
        if peer.get("name") != leader.get("holder"):
            ctx.print(f"Slurmctld(backup) at {peer.get('name')} is UP")


def _show(ctx: Context, client: Client, words: list[str], oneliner: bool) -> None:
    if not words:
        raise ctx.fail("invalid entity: (null) for keyword: show")
    if "=" in words[0]:  # show ReservationName=NAME, show JobId=12
        key, _, value = words[0].partition("=")
        words = [key, value, *words[1:]]
    entity = _entity(words[0])
    arg = words[1] if len(words) > 1 else None
    now = ctx.now
    if entity is None:
        raise ctx.fail(f"invalid entity: {words[0]} for keyword: show")
    if entity in ("job", "jobid"):
        _show_job(ctx, client, arg, oneliner)
    elif entity == "node":
        nodes = client.nodes()
        if arg is not None:
            from corral.core.parse.hostlist import expand

            wanted = set(expand(arg))
            nodes = [n for n in nodes if n.get("name") in wanted]
            if not nodes:
                raise ctx.fail(f"Node {arg} not found")
        for n in sorted(nodes, key=lambda n: str(n.get("name"))):
            ctx.write(show.node_block(n, now, oneliner))
            if not oneliner:
                ctx.write("\n")
    elif entity == "partition":
        parts = client.partitions()
        if arg is not None:
            parts = [p for p in parts if p.get("name") == arg]
            if not parts:
                raise ctx.fail(f"Partition {arg} not found")
        for p in parts:
            ctx.write(show.partition_block(p, now, oneliner))
            if not oneliner:
                ctx.write("\n")
    elif entity == "licenses":
        _show_licenses(ctx, client, arg, oneliner)
    elif entity == "reservation":
        from corral.shims import scontrol_resv

        scontrol_resv.show(ctx, client, arg, oneliner)
    elif entity == "config":
        cfg = client.cluster_config()
        try:
            pong = client.ping()
        except Exception:  # noqa: BLE001 - ping is decoration here
            pong = {}
        for line in show.config_lines(cfg, pong, now):
            ctx.print(line)
    elif entity == "hostnames":
        from corral.core.parse.errors import ParseError
        from corral.core.parse.hostlist import expand

        expr = arg if arg is not None else ctx.env.get("SLURM_JOB_NODELIST")
        if expr is None:
            raise ctx.fail("scontrol: error: host list is empty")
        try:
            for h in expand(expr):
                ctx.print(h)
        except ParseError as exc:
            raise ctx.fail(f"scontrol: error: Invalid hostlist: {exc}") from None
    elif entity in ("hostlist", "hostlistsorted"):
        from corral.core.parse.hostlist import compress, expand

        if arg is None:
            raise ctx.fail("scontrol: error: host list is empty")
        names = expand(arg)
        ctx.print(compress(names, sort=entity == "hostlistsorted"))
    else:
        raise ctx.fail(f"scontrol: error: show {entity} is not supported by Corral")


def _show_job(ctx: Context, client: Client, arg: str | None, oneliner: bool) -> None:
    now = ctx.now
    if arg is None:
        rows = sf.collapse_pending_arrays(
            sorted(client.jobs(include_finished=True), key=lambda r: -int(r["id"])))
        if not rows:
            ctx.print("No jobs in the system")
            return
    else:
        try:
            refs = parse_job_refs([arg])
        except IdError:
            raise ctx.fail("slurm_load_jobs error: Invalid job id specified") from None
        api_ids = [i for ref in refs for i in ref_api_ids(ref)]
        ref_index = RefIndex(refs)
        rows = [r for r in client.jobs(ids=api_ids, include_finished=True)
                if ref_index.names(r)]
        if not rows:
            raise ctx.fail("slurm_load_jobs error: Invalid job id specified")
        rows = sf.collapse_pending_arrays(sorted(rows, key=lambda r: -int(r["id"])))
        rows.sort(key=lambda r: 0 if r.get("members") else 1)
    sf.fill_default_partition(rows, client)
    for rec in rows:
        ctx.write(show.block(show.job_lines(rec, now), oneliner))
        if not oneliner:
            ctx.write("\n")


_SUSPEND_MSG = {
    "not_found": "Invalid job id specified",
    "forbidden": "Access/permission denied",
}


def _action_message(code: str, message: str, cmd: str) -> str:
    if code in _SUSPEND_MSG:
        return _SUSPEND_MSG[code]
    low = message.lower()
    if "finished" in low or "completed" in low:
        return "Job has already finished"
    if "pending" in low and cmd in ("hold", "uhold"):
        return "Job is no longer pending execution"
    if "pending" in low:
        return "Job is pending execution"
    return message or "Unspecified error"


def _action(ctx: Context, client: Client, cmd: str, words: list[str], quiet: bool) -> None:
    if not words:
        raise ctx.fail(f"scontrol: error: {cmd}: job id required")
    ids: list[str] = []
    for w in words:
        if "=" in w:  # "scontrol hold jobid=12" is accepted too
            w = w.split("=", 1)[1]
        try:
            for ref in parse_job_refs([w]):
                ids.extend(ref_api_ids(ref))
        except IdError:
            raise ctx.fail(f"Invalid job id specified for job {w}") from None
    results: list[dict[str, Any]]
    if cmd == "hold":
        results = client.hold(ids, admin=ctx.uid == 0)
    elif cmd == "uhold":
        results = client.hold(ids)
    elif cmd == "release":
        results = client.release(ids)
    else:
        results = client.requeue(ids, hold=cmd == "requeuehold")
    rc = 0
    last = ""
    for res in results:
        if res.get("ok"):
            continue
        rc = 1
        last = _action_message(str(res.get("code") or ""), str(res.get("message") or ""), cmd)
        if not quiet:
            ctx.error(f"{last} for job {res.get('id')}")
    if rc:
        if cmd in ("hold", "uhold", "release") and not quiet:
            ctx.error(f"slurm_suspend error: {last}")
        raise ShimExit(rc)


_JOB_KEYS = {
    "timelimit": "time_limit_s", "jobname": "name", "name": "name", "nice": "nice",
    "priority": "priority", "partition": "partition", "account": "account", "qos": "qos",
    "starttime": "begin_time", "begintime": "begin_time", "comment": "comment",
    "dependency": "dependency",
}


def _update(ctx: Context, client: Client, words: list[str]) -> None:
    from corral.client import CorralError

    pairs: list[tuple[str, str]] = []
    for w in words:
        key, eq, value = w.partition("=")
        if not eq:
            raise ctx.fail(f"scontrol: error: Invalid input: {w}\n"
                           "Request aborted")
        pairs.append((key.lower(), value))
    keys = dict(pairs)
    if "reservationname" in keys or "reservation" in keys:
        from corral.shims import scontrol_resv

        scontrol_resv.update(ctx, client, words)
        return
    if "nodename" in keys:
        _update_node(ctx, client, keys)
        return
    if "partitionname" in keys:
        _update_partition(ctx, client, pairs)
        return
    target = keys.get("jobid") or keys.get("job")
    if target is None:
        raise ctx.fail("scontrol: error: No job or node identification given\nRequest aborted")
    fields: dict[str, Any] = {}
    for key, value in pairs:
        if key in ("jobid", "job"):
            continue
        api = _JOB_KEYS.get(key)
        if api is None:
            raise ctx.fail(f"Update of this parameter is not supported: {key}={value}\n"
                           "Request aborted")
        fields[api] = _job_value(ctx, client, target, api, value)
    try:
        refs = parse_job_refs([target])
    except IdError:
        raise ctx.fail(f"Invalid job id specified for job {target}") from None
    for ref in refs:
        for jid in ref_api_ids(ref):
            try:
                client.update_job(jid, **fields)
            except CorralError as exc:
                raise ctx.fail(f"{_action_message(exc.code, exc.message, 'update')} "
                               f"for job {jid}\nslurm_update error: "
                               f"{_action_message(exc.code, exc.message, 'update')}") from None


def _job_value(ctx: Context, client: Client, target: str, api: str, value: str) -> Any:
    if api == "time_limit_s":
        from corral.core.parse.errors import ParseError
        from corral.core.parse.timefmt import parse_time_limit_s

        sign = value[:1] if value[:1] in "+-" else ""
        try:
            secs = parse_time_limit_s(value[1:] if sign else value)
        except ParseError:
            raise ctx.fail("Invalid TimeLimit value\nRequest aborted") from None
        if sign:
            cur = client.job(target).get("time_limit_s")
            if cur is None or secs is None:
                raise ctx.fail("Invalid TimeLimit value\nRequest aborted")
            return max(60, int(cur) + (secs if sign == "+" else -secs))
        return secs
    if api in ("nice", "priority"):
        try:
            return int(value)
        except ValueError:
            raise ctx.fail(f"Invalid {api} value: {value}\nRequest aborted") from None
    if api == "begin_time":
        from corral.shims.slurmtime import DateError, parse_date

        try:
            return parse_date(value, ctx.now)
        except DateError:
            raise ctx.fail(f"Invalid StartTime value: {value}\nRequest aborted") from None
    return value


def _update_partition(ctx: Context, client: Any, pairs: list[tuple[str, str]]) -> None:
    """``update PartitionName=P State=UP|DOWN|DRAIN|INACTIVE`` (kept across restarts)."""
    from corral.client import CorralError

    keys = dict(pairs)
    others = [k for k, _ in pairs if k not in ("partitionname", "state")]
    if others:
        raise ctx.fail(f"Update of this parameter is not supported: {others[0]}\n"
                       "Request aborted")
    if "state" not in keys:
        raise ctx.fail("scontrol: error: nothing to update (State= is what Corral's "
                       "scontrol changes on a partition)")
    state = keys["state"].upper()
    if state not in ("UP", "DOWN", "DRAIN", "INACTIVE"):
        raise ctx.fail(f"Invalid input: State={keys['state']}\nRequest aborted\n"
                       "Valid states are UP, DOWN, DRAIN and INACTIVE")
    change = getattr(client, "set_partition_state", None)
    if change is None:
        raise ctx.fail("scontrol: error: partitions cannot be changed through this "
                       "connection to the controller")
    try:
        change(keys["partitionname"], state)
    except CorralError as exc:
        raise ctx.fail(f"{exc.slurm or exc.message}\nslurm_update error: "
                       f"{exc.slurm or exc.message}") from None


def _update_node(ctx: Context, client: Client, keys: dict[str, str]) -> None:
    from corral.client import CorralError
    from corral.core.parse.hostlist import expand

    state = keys.get("state", "").upper()
    reason = keys.get("reason", "")
    for node in expand(keys["nodename"]):
        if state in ("DRAIN", "DRAINING"):
            if not reason:
                raise ctx.fail("You must specify a reason when DOWNING or DRAINING a node. "
                               "Request denied")
            client.drain(node, reason)
        elif state in ("RESUME", "IDLE", "UNDRAIN"):
            client.resume(node)
        elif state in ("POWER_DOWN", "POWER_UP", "POWER_DOWN_ASAP", "POWER_DOWN_FORCE"):
            power = getattr(client, "node_power", None)
            if power is None:
                raise ctx.fail("scontrol: error: power actions are not available through "
                               "this connection to the controller")
            try:
                power(node, "up" if state == "POWER_UP" else "down")
            except CorralError as exc:
                raise ctx.fail(f"{exc.slurm or exc.message}\nslurm_update error: "
                               f"{exc.slurm or exc.message}") from None
        elif state == "DOWN":
            if not reason:
                raise ctx.fail("You must specify a reason when DOWNING or DRAINING a node. "
                               "Request denied")
            down = getattr(client, "set_node_down", None)
            if down is None:
                raise ctx.fail("scontrol: error: State=DOWN is not supported here")
            down(node, reason)
        else:
            raise ctx.fail(f"Invalid node state specified: {keys.get('state', '')}\n"
                           "Request aborted")
