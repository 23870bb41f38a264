"""``qstat``: PBS Pro job status (default table, ``-f``, ``-F json``, ``-x``, ``-B -f``).

What clients read (``clients.md`` §3b, §5, §6, §8.14):

- the default table's 5th column is the state (Parsl's Torque provider);
- ``qstat -f [-1] [@server|queue|ids]`` blocks ``Job Id: <id>`` / ``    job_state = X``,
  matched against the exact ``qsub`` output (Nextflow); ``exec_host = host/0`` (batchspawner);
- ``qstat -x -f -F json <ids>`` with finished jobs included and exit 0 (Parsl's PBS Pro
  provider drops the whole update on any error);
- ``qstat -B -f`` prints ``Server: <name>`` (Nextflow's PBS Pro executor).

``-x`` is PBS Pro's "include finished jobs", not Torque's XML output (documented choice).
Errors: ``qstat: Unknown Job Id <id>`` (exit 153); a finished job without ``-x``:
``qstat: <id> Job has finished, use -x or -H to obtain historical job information``
(exit 35); known jobs are still listed.
"""

from __future__ import annotations

import json
import time
from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import pbs
from corral.shims import slurmfmt as sf
from corral.shims.context import Client, Context, ShimExit
from corral.shims.users import UserError, resolve_users

Record = dict[str, Any]
R, N = Arg.REQUIRED, Arg.NONE
TABLE = OptionTable.of(
    [Opt(ch, (), ch, N) for ch in "aBEfGHiJMnpQqrstTwx1"]
    + [Opt("F", (), "F", R), Opt("D", (), "D", R), Opt("u", (), "u", R),
       Opt("version", ("version",), None, N)]
)
USAGE = """usage:
qstat [-f] [-F json|dsv] [-D delim] [-J] [-p] [-t] [-x] [-E] [-w] [-1]
        [ job_identifier... | destination... ]
qstat [-a|-i|-r|-H|-T] [-J] [-t] [-u user] [-n] [-s] [-G|-M] [-w] [-1]
        [ job_identifier... | destination... ]
qstat -Q [-f] [-F json|dsv] [-D delim] [ destination... ]
qstat -q [-G|-M] [ destination... ]
qstat -B [-f] [-F json|dsv] [-D delim] [ server_name... ]
qstat --version"""


def _asctime(ts: float | None) -> str | None:
    return None if not ts else time.asctime(time.localtime(float(ts)))


def _exec_host(rec: Record) -> str | None:
    nodes = rec.get("nodes") or []
    if not nodes:
        return None
    per = max(1, int(rec.get("num_cpus") or 1) // len(nodes))
    return "+".join(f"{n}/0" + (f"*{per}" if per > 1 else "") for n in nodes)


def job_attributes(rec: Record, members: list[Record], server: str, now: float,
                   array_parent: bool) -> dict[str, Any]:
    """PBS attribute name -> value (nested dicts for Resource_List & co.)."""
    state = pbs.array_state(members) if array_parent else pbs.state_letter(
        rec, subjob=sf.is_array(rec))
    cpus = int(rec.get("num_cpus") or 1)
    nodes = int(rec.get("num_nodes") or 1)
    res: dict[str, Any] = {"ncpus": cpus, "nodect": nodes,
                           "place": "scatter" if nodes > 1 else "pack"}
    select = f"{nodes}:ncpus={max(1, cpus // nodes)}"
    mem_node = rec.get("mem_per_node_mb")
    if mem_node:
        res["mem"] = f"{int(mem_node) * nodes}mb"
        select += f":mem={int(mem_node)}mb"
    res["select"] = select
    if rec.get("time_limit_s") is not None:
        res["walltime"] = pbs.hms(float(rec["time_limit_s"]))
    attrs: dict[str, Any] = {
        "Job_Name": rec.get("name") or "",
        "Job_Owner": f"{sf.user_of(rec)}@{rec.get('submit_host') or server}",
    }
    if rec.get("start_time") and not array_parent:
        elapsed = sf.elapsed_s(rec, now)
        attrs["resources_used"] = {
            "cpupercent": 0,
            "cput": pbs.hms(float(rec.get("cpu_time_s") or 0.0)),
            "mem": f"{int(float(rec.get('max_rss_mb') or 0) * 1024)}kb",
            "ncpus": cpus,
            "vmem": "0kb",
            "walltime": pbs.hms(elapsed),
        }
    attrs.update({
        "job_state": state,
        "queue": rec.get("partition") or "",
        "server": server,
        "Checkpoint": "u",
        "ctime": _asctime(rec.get("submit_time")),
        "Error_Path": f"{server}:{rec.get('stderr') or rec.get('stdout') or ''}",
    })
    host = None if array_parent else _exec_host(rec)
    if host:
        attrs["exec_host"] = host
        attrs["exec_vnode"] = "+".join(f"({h.split('/')[0]}:ncpus={max(1, cpus // nodes)})"
                                       for h in host.split("+"))
    hold = rec.get("hold") or "NONE"
    attrs.update({
        "Hold_Types": {"USER": "u", "ADMIN": "o"}.get(str(hold), "n"),
        "Join_Path": "oe" if not rec.get("stderr") or rec.get("stderr") == rec.get("stdout")
        else "n",
        "Keep_Files": "n",
        "Mail_Points": "a",
        "mtime": _asctime(rec.get("end_time") or rec.get("start_time") or rec.get("submit_time")),
        "Output_Path": f"{server}:{rec.get('stdout') or ''}",
        "Priority": int(rec.get("nice") or 0) * -1,
        "qtime": _asctime(rec.get("submit_time")),
        "Rerunable": "True" if rec.get("requeue", True) else "False",
        "Resource_List": res,
    })
    if rec.get("start_time") and not array_parent:
        attrs["stime"] = _asctime(rec.get("start_time"))
    if array_parent:
        idx = sorted(int(m["array_task_id"]) for m in members)
        attrs["array"] = "True"
        attrs["array_indices_submitted"] = f"{idx[0]}-{idx[-1]}" if idx else ""
        left = [int(m["array_task_id"]) for m in members if sf.is_pending(m)]
        if left:
            from corral.core.parse.arrayspec import format_array

            attrs["array_indices_remaining"] = format_array(left)
    elif sf.is_array(rec):
        attrs["array_id"] = f"{sf.array_job_id(rec)}[].{server}"
        attrs["array_index"] = int(rec["array_task_id"])
    attrs["jobdir"] = rec.get("workdir") or ""
    attrs["Variable_List"] = {"PBS_O_WORKDIR": rec.get("workdir") or "",
                              "PBS_O_HOST": rec.get("submit_host") or server,
                              "PBS_O_QUEUE": rec.get("partition") or ""}
    if rec.get("comment"):
        attrs["comment"] = rec["comment"]
    attrs["etime"] = _asctime(rec.get("eligible_time") or rec.get("submit_time"))
    attrs["run_count"] = int(rec.get("restarts") or 0) + (1 if rec.get("start_time") else 0)
    if sf.is_finished(rec) and not array_parent:
        sig = int(rec.get("signal") or 0)
        attrs["Exit_status"] = 256 + sig if sig else int(rec.get("exit_code") or 0)
    attrs["Submit_Host"] = rec.get("submit_host") or server
    return {k: v for k, v in attrs.items() if v is not None}


def full_block(job_id: str, attrs: dict[str, Any]) -> str:
    lines = [f"Job Id: {job_id}"]
    for key, value in attrs.items():
        if isinstance(value, dict):
            if key == "Variable_List":
                text = ",".join(f"{k}={v}" for k, v in value.items())
                lines.append(f"    {key} = {text}")
                continue
            for sub, v in value.items():
                lines.append(f"    {key}.{sub} = {v}")
        else:
            lines.append(f"    {key} = {value}")
    return "\n".join(lines) + "\n"


def _table(rows: list[tuple[str, Record, str]], now: float) -> list[str]:
    out = ["Job id            Name             User              Time Use S Queue",
           "----------------  ---------------- ----------------  -------- - -----"]
    for job_id, rec, state in rows:
        jid = job_id if len(job_id) <= 16 else job_id[:15] + "*"
        name = str(rec.get("name") or "")
        name = name if len(name) <= 16 else name[:15] + "*"
        user = sf.user_of(rec)
        user = user if len(user) <= 16 else user[:15] + "*"
        used = pbs.hms(float(rec.get("cpu_time_s") or 0.0)) if rec.get("start_time") else "0"
        out.append(f"{jid:<16}  {name:<16} {user:<16}  {used:>8} {state} "
                   f"{rec.get('partition') or ''}")
    return out


def run(ctx: Context, client: Client) -> None:
    try:
        parsed, operands = getopt_long(ctx.argv, TABLE, "qstat", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\n{USAGE}", 2) from None
    opts: dict[str, str | None] = {p.opt.key: p.value for p in parsed}
    if "version" in opts:
        ctx.print(f"pbs_version = {pbs.PBS_VERSION}")
        return
    server = pbs.server_name()
    now = ctx.now
    fmt = opts.get("F")
    if fmt is not None and fmt.lower() not in ("json",):
        raise ctx.fail(f"qstat: -F {fmt} is not supported by Corral (use json)", 2)
    if "B" in opts:
        _server_status(ctx, client, server, fmt, "f" in opts)
        return
    if "Q" in opts or "q" in opts:
        _queues(ctx, client)
        return

    history = "x" in opts or "H" in opts
    records = client.jobs(include_finished=True) if history or operands else client.jobs()
    if "u" in opts:
        try:
            uids = resolve_users([u.split("@")[0] for u in (opts["u"] or "").split(",") if u])
        except UserError as exc:
            raise ctx.fail(f"qstat: Unknown user {exc.word}", 1) from None
        records = [r for r in records if int(r.get("uid", -1)) in uids]

    selected: list[tuple[Record, list[Record], bool]] = []  # (rec, members, parent?)
    rc = 0
    groups = pbs.group_arrays(sorted(records, key=lambda r: int(r["id"])))
    show_sub = "t" in opts
    if operands:
        for word in operands:
            if word.startswith("@") or not word[:1].isdigit():
                queue = word.split("@", 1)[0]
                for rep, members in groups:
                    if queue and rep.get("partition") != queue:
                        continue
                    selected.extend(_expand(rep, members, show_sub, history))
                continue
            try:
                ref = pbs.parse_pbs_id(word)
            except pbs.PbsIdError:
                ctx.error(f"qstat: illegally formed job identifier: {word}")
                rc = 1
                continue
            found = [(rep, ms) for rep, ms in groups if any(pbs.ref_matches(ref, m) for m in ms)]
            if not found:
                ctx.error(f"qstat: Unknown Job Id {word}")
                rc = pbs.EXIT_UNKNOWN
                continue
            rep, members = found[0]
            if ref.index is not None:
                member = next(m for m in members if pbs.ref_matches(ref, m))
                items = [(member, [member], False)]
            elif sf.is_array(rep):
                items = [(rep, members, True)] + (
                    [(m, [m], False) for m in members] if show_sub else [])
            else:
                items = [(rep, members, False)]
            if not history and all(sf.is_finished(m) for _, ms, _ in items for m in ms):
                ctx.error(f"qstat: {word} Job has finished, use -x or -H to obtain "
                          "historical job information")
                rc = pbs.EXIT_HISTORY
                continue
            selected.extend(items)
    else:
        for rep, members in groups:
            selected.extend(_expand(rep, members, show_sub, history))
    if "J" in opts:
        selected = [s for s in selected if sf.is_array(s[0])]
    if "H" in opts:
        selected = [s for s in selected if all(sf.is_finished(m) for m in s[1])]
    if "i" in opts:
        selected = [s for s in selected if pbs.state_letter(s[0]) in ("Q", "H", "W")]
    if "r" in opts:
        selected = [s for s in selected if pbs.state_letter(s[0]) in ("R", "E", "S")]

    if fmt is not None:
        jobs: dict[str, Any] = {}
        for rec, members, parent in selected:
            jid = pbs.job_id_text(rec, server, subjob=not parent)
            jobs[jid] = job_attributes(rec, members, server, now, parent)
        doc = {"timestamp": int(now), "pbs_version": pbs.PBS_VERSION, "pbs_server": server,
               "Jobs": jobs}
        ctx.print(json.dumps(doc, indent=4))
    elif "f" in opts:
        blocks = []
        for rec, members, parent in selected:
            jid = pbs.job_id_text(rec, server, subjob=not parent)
            blocks.append(full_block(jid, job_attributes(rec, members, server, now, parent)))
        ctx.write("\n".join(blocks) + ("\n" if blocks else ""))
    elif selected:
        rows = []
        for rec, members, parent in selected:
            state = pbs.array_state(members) if parent else pbs.state_letter(
                rec, subjob=sf.is_array(rec))
            rows.append((pbs.job_id_text(rec, server, subjob=not parent), rec, state))
        for line in _table(rows, now):
            ctx.print(line)
    if rc:
        raise ShimExit(rc)


def _expand(rep: Record, members: list[Record], show_sub: bool,
            history: bool) -> list[tuple[Record, list[Record], bool]]:
    if not history and all(sf.is_finished(m) for m in members):
        return []
    if sf.is_array(rep):
        out = [(rep, members, True)]
        if show_sub:
            out += [(m, [m], False) for m in members if history or not sf.is_finished(m)]
        return out
    return [(rep, members, False)]


def _server_status(ctx: Context, client: Client, server: str, fmt: str | None,
                   full: bool) -> None:
    jobs = client.jobs()
    counts = {"Transit": 0, "Queued": 0, "Held": 0, "Waiting": 0, "Running": 0,
              "Exiting": 0, "Begun": 0}
    for r in jobs:
        letter = pbs.state_letter(r)
        key = {"Q": "Queued", "H": "Held", "W": "Waiting", "R": "Running",
               "E": "Exiting"}.get(letter)
        if key:
            counts[key] += 1
    state_count = " ".join(f"{k}:{v}" for k, v in counts.items())
    attrs = {"server_state": "Active", "server_host": server, "scheduling": "True",
             "total_jobs": len(jobs), "state_count": state_count,
             "default_queue": _default_queue(client), "pbs_version": pbs.PBS_VERSION}
    if fmt is not None:
        ctx.print(json.dumps({"timestamp": int(ctx.now), "pbs_version": pbs.PBS_VERSION,
                              "pbs_server": server, "Server": {server: attrs}}, indent=4))
        return
    if full:
        ctx.print(f"Server: {server}")
        for k, v in attrs.items():
            ctx.print(f"    {k} = {v}")
        ctx.print("")
        return
    ctx.print("Server             Max   Tot   Que   Run   Hld   Wat   Trn   Ext Status")
    ctx.print("---------------- ----- ----- ----- ----- ----- ----- ----- ----- -----------")
    ctx.print(f"{server:<16} {0:>5} {len(jobs):>5} {counts['Queued']:>5} "
              f"{counts['Running']:>5} {counts['Held']:>5} {counts['Waiting']:>5} "
              f"{0:>5} {counts['Exiting']:>5} Active")


def _default_queue(client: Client) -> str:
    for p in client.partitions():
        if p.get("default"):
            return str(p["name"])
    return ""


def _queues(ctx: Context, client: Client) -> None:
    jobs = client.jobs()
    ctx.print("Queue              Max   Tot Ena Str   Que   Run   Hld   Wat   Trn   Ext Type")
    ctx.print("---------------- ----- ----- --- --- ----- ----- ----- ----- ----- ----- ----")
    for p in client.partitions():
        mine = [j for j in jobs if j.get("partition") == p["name"]]
        letters = [pbs.state_letter(j) for j in mine]
        up = "yes" if str(p.get("state") or "UP") == "UP" else "no"
        ctx.print(f"{p['name']:<16} {0:>5} {len(mine):>5} {up:>3} {up:>3} "
                  f"{letters.count('Q'):>5} {letters.count('R'):>5} {letters.count('H'):>5} "
                  f"{letters.count('W'):>5} {0:>5} {letters.count('E'):>5} Exec")
