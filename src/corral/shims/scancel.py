"""``scancel``: cancel jobs or send them a signal (Slurm 22.05 behaviour).

- ids may be ``12``, ``12_3``, ``12_[1-3]`` and several per call; options may follow the
  ids (``scancel 12 --signal USR2``, GNU argument permutation);
- cancelling a job that is unknown or already finished is silent and exits 0 (``-v``
  prints ``Kill job error on job id N: Invalid job id specified`` and still exits 0);
  with ``--signal`` such an error is printed and the exit status is 1;
- a malformed id prints ``scancel: error: Invalid job id abc`` and exits 1;
- with filters (``-u``, ``-n``, ``-p``, ``-t``, ``-A``, ``-q``, ``-w``, ``--me``) and no id,
  every matching job of the caller is cancelled.

``--signal`` goes to the job's steps, not the batch shell (``-b``: only the batch shell;
``-f``: both), as in Slurm.
"""

from __future__ import annotations

import signal as _signal
from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import slurmfmt as sf
from corral.shims.context import Client, Context, ShimExit
from corral.shims.ids import IdError, JobRef, RefIndex, parse_job_refs, ref_api_ids
from corral.shims.users import UserError, resolve_users

R, N = Arg.REQUIRED, Arg.NONE
TABLE = OptionTable.of([
    Opt("account", ("account",), "A", R),
    Opt("batch", ("batch",), "b", N),
    Opt("clusters", ("clusters", "cluster"), "M", R),
    Opt("ctld", ("ctld",), None, N),
    Opt("full", ("full",), "f", N),
    Opt("help", ("help",), None, N),
    Opt("hurry", ("hurry",), "H", N),
    Opt("interactive", ("interactive",), "i", N),
    Opt("me", ("me",), None, N),
    Opt("name", ("name", "jobname"), "n", R),
    Opt("nodelist", ("nodelist",), "w", R),
    Opt("partition", ("partition",), "p", R),
    Opt("qos", ("qos",), "q", R),
    Opt("quiet", ("quiet",), "Q", N),
    Opt("reservation", ("reservation",), "R", R),
    Opt("sibling", ("sibling",), None, R),
    Opt("signal", ("signal",), "s", R),
    Opt("state", ("state",), "t", R),
    Opt("usage", ("usage",), None, N),
    Opt("user", ("user",), "u", R),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
    Opt("wckey", ("wckey",), None, R),
])
USAGE = (
    "Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]\n"
    "               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]\n"
    "               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]\n"
    "               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey]\n"
    "               [job_id[_array_id][.step_id]]"
)


def signal_name(text: str) -> str | None:
    """Canonical name (``USR2``) of a signal given as ``SIGUSR2``, ``usr2`` or ``12``."""
    t = text.strip().upper()
    if t.isascii() and t.isdigit() and len(t) <= 3:
        try:
            return _signal.Signals(int(t)).name[3:]
        except ValueError:
            return None
    if not t.startswith("SIG"):
        t = "SIG" + t
    try:
        return _signal.Signals[t].name[3:]
    except KeyError:
        return None


def _split(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x for x in v.split(",") if x)
    return out


def run(ctx: Context, client: Client) -> None:
    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "scancel", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"scancel --help\" for more information") from None
    opts: dict[str, list[str | None]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value)

    def values(key: str) -> list[str]:
        return [v for v in opts.get(key, []) if v is not None]

    if "help" in opts or "usage" in opts:
        ctx.print(USAGE)
        return
    if "version" in opts:
        ctx.print("slurm 22.05.8")
        return
    verbose = len(opts.get("verbose", []))
    quiet = "quiet" in opts
    sig: str | None = None
    if "signal" in opts:
        sig = signal_name(values("signal")[-1])
        if sig is None:
            raise ctx.fail(f"scancel: error: Invalid job signal: {values('signal')[-1]}")
    refs: list[JobRef] = []
    for word in positional:
        try:
            refs.extend(parse_job_refs([word]))
        except IdError as exc:
            raise ctx.fail(f"scancel: error: Invalid job id {exc.word}") from None
    filters = any(k in opts for k in ("account", "name", "nodelist", "partition", "qos",
                                      "state", "user", "me", "reservation", "wckey"))
    if not refs and not filters:
        raise ctx.fail("scancel: error: No job identification provided")

    targets: list[str] = []
    if filters:
        targets = _filtered(ctx, client, refs, values, "me" in opts)
        if not targets:
            return
    else:
        for ref in refs:
            targets.extend(ref_api_ids(ref) if ref.step is None else
                           [f"{i}.{ref.step}" for i in ref_api_ids(ref)])

    batch_only = "batch" in opts
    scope = "batch" if batch_only else "all" if "full" in opts else "steps"
    rc = 0
    for tid in targets:
        if verbose:
            if sig is None:
                ctx.error(f"scancel: Terminating job {tid}")
            else:
                ctx.error(f"scancel: Signal {_signal.Signals['SIG' + sig].value} to job {tid}")
    results = send_cancel(client, targets, sig, batch_only, scope) if targets else []
    for res in results:
        if res.get("ok"):
            continue
        code = str(res.get("code") or "")
        msg = _slurm_message(code, str(res.get("message") or ""))
        if sig is None and code in ("not_found", "conflict", "finished"):
            if verbose and not quiet:
                ctx.error(f"scancel: error: Kill job error on job id {res.get('id')}: {msg}")
            continue
        if not quiet:
            ctx.error(f"scancel: error: Kill job error on job id {res.get('id')}: {msg}")
        rc = 1
    if rc:
        raise ShimExit(rc)


def send_cancel(client: Client, ids: list[str], sig: str | None, batch_only: bool,
                scope: str) -> list[dict[str, Any]]:
    """Cancel, or signal with Slurm's scope: ``steps`` (default: every job process but
    the batch shell), ``batch`` (``-b``) or ``all`` (``-f``)."""
    if sig is None:
        return client.cancel(ids)
    return client.cancel(ids, sig, batch_only=batch_only, scope=scope)


def _slurm_message(code: str, message: str) -> str:
    return {
        "not_found": "Invalid job id specified",
        "conflict": "Job/step already completing or completed",
        "finished": "Job/step already completing or completed",
        "forbidden": "Access/permission denied",
    }.get(code, message or "Unspecified error")


def _filtered(ctx: Context, client: Client, refs: list[JobRef],
              values: Any, me: bool) -> list[str]:
    user_words = _split(values("user"))
    if me:
        user_words.append(str(ctx.uid))
    try:
        users = resolve_users(user_words) if user_words else None
    except UserError as exc:
        raise ctx.fail(f"scancel: error: Invalid user name: {exc.word}") from None
    names = set(_split(values("name")))
    partitions = set(_split(values("partition")))
    accounts = set(_split(values("account")))
    qos = set(_split(values("qos")))
    states = {sf.LONG_OF_SHORT.get(s.upper(), s.upper()) for s in _split(values("state"))}
    nodes = set(_split(values("nodelist")))
    out: list[str] = []
    ref_index = RefIndex(refs)
    for r in client.jobs():
        if refs and not ref_index.names(r):
            continue
        if users is not None and int(r.get("uid", -1)) not in users:
            continue
        if names and r.get("name") not in names:
            continue
        if partitions and r.get("partition") not in partitions:
            continue
        if accounts and r.get("account") not in accounts:
            continue
        if qos and r.get("qos") not in qos:
            continue
        if states and sf.job_state(r) not in states:
            continue
        if nodes and not nodes & set(r.get("nodes") or []):
            continue
        if users is None and ctx.uid != 0 and int(r.get("uid", -1)) != ctx.uid:
            continue
        out.append(str(r["id"]))
    return out
