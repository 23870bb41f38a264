"""``corral account ...``: accounts, users and their associations at run time.

The same store as the ``sacctmgr`` shim (``corral.controller.livecfg``: changes are kept
in the database over ``corral.toml``, checked like the file, audited, operators only):

- ``corral account list`` / ``add NAME`` / ``modify NAME`` / ``delete NAME``: accounts
  with ``--parent``, ``--shares`` and limits (``--grp-jobs``, ``--grp-cpus``,
  ``--grp-mem``, ``--grp-gpus``, ``--max-jobs``, ``--max-submit``, ``--max-wall``,
  ``--max-cpus-per-job``, ``--max-nodes``; ``-1`` clears a limit);
- ``corral account user list`` / ``add USER --account A[,B]`` (a new user, or new
  associations of a known one) / ``modify USER`` (``--default-account``, ``--shares``,
  ``--accounts`` to replace the list) / ``delete USER [--account A]`` (only that
  association; the user goes with the last one);
- ``corral account assoc``: every (account, user) association with its shares;
- ``corral account qos list|show|add|modify|delete``: QOS and their limits
  (``corral.cli.accounts_qos``).

Every listing takes ``--json`` (the ``corral.toml`` field names).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from corral.cli.accounts_base import NO_LIMIT, PROG, cluster_config, limits_text, send_change
from corral.cli.output import (
    JSON_OPTION,
    Column,
    fail,
    print_json,
    print_table,
    text,
)

account_app = typer.Typer(help="Accounts, users, associations and QOS (as sacctmgr changes "
                          "them).",
                          no_args_is_help=True)
user_app = typer.Typer(help="Users and their account associations.", no_args_is_help=True)

Parent = Annotated[str | None, typer.Option("--parent", help="Parent account (root: none).")]
Shares = Annotated[int | None, typer.Option("--shares", min=1, help="Fair-share shares.")]
GrpJobs = Annotated[int | None, typer.Option("--grp-jobs", help="Running jobs of the "
                                             "account at once (-1: no limit).")]
GrpCpus = Annotated[int | None, typer.Option("--grp-cpus", help="CPUs of the account at "
                                             "once.")]
GrpMem = Annotated[str | None, typer.Option("--grp-mem", help="Memory of the account at "
                                            "once (8G, 512M; -1: no limit).")]
GrpGpus = Annotated[int | None, typer.Option("--grp-gpus", help="GPUs of the account at once.")]
MaxJobs = Annotated[int | None, typer.Option("--max-jobs", help="Running jobs per user.")]
MaxSubmit = Annotated[int | None, typer.Option("--max-submit", help="Queued jobs per user.")]
MaxWall = Annotated[str | None, typer.Option("--max-wall", help="Time limit per job "
                                             "([D-]HH:MM:SS or minutes; -1: none).")]
MaxCpus = Annotated[int | None, typer.Option("--max-cpus-per-job", help="CPUs per job.")]
MaxNodes = Annotated[int | None, typer.Option("--max-nodes", help="Nodes per job.")]


def _count(value: int | None) -> int | None:
    return None if value is None or value == NO_LIMIT else value


def _limits(grp_jobs: int | None, grp_cpus: int | None, grp_mem: str | None,
            grp_gpus: int | None, max_jobs: int | None, max_submit: int | None,
            max_wall: str | None, max_cpus: int | None, max_nodes: int | None
            ) -> dict[str, Any]:
    from corral.core.parse.errors import ParseError
    from corral.core.parse.memory import parse_mem_mb
    from corral.core.parse.timefmt import parse_time_limit_s

    out: dict[str, Any] = {}
    for key, value in (("grp_jobs", grp_jobs), ("grp_cpus", grp_cpus),
                       ("grp_gpus", grp_gpus), ("max_jobs_per_user", max_jobs),
                       ("max_submit_per_user", max_submit),
                       ("max_cpus_per_job", max_cpus), ("max_nodes_per_job", max_nodes)):
        if value is not None:
            if value < NO_LIMIT:
                fail(f"--{key.replace('_', '-')} must be -1 (no limit) or more, got {value}",
                     prog=PROG)
            out[key] = _count(value)
    if grp_mem is not None:
        try:
            out["grp_mem_mb"] = None if grp_mem == "-1" else parse_mem_mb(grp_mem)
        except ParseError:
            fail(f"bad --grp-mem {grp_mem!r} (8G, 512M, -1)", prog=PROG)
    if max_wall is not None:
        try:
            out["max_wall_s"] = None if max_wall == "-1" else parse_time_limit_s(max_wall)
        except ParseError:
            fail(f"bad --max-wall {max_wall!r} ([D-]HH:MM:SS, minutes, -1)", prog=PROG)
    return out


ACCOUNT_COLUMNS = [
    Column("ACCOUNT", lambda r: str(r["name"]), style="bold"),
    Column("PARENT", lambda r: str(r.get("parent") or "root")),
    Column("SHARES", lambda r: text(r.get("shares"), "1"), justify="right"),
    Column("USERS", lambda r: ",".join(r.get("_users") or ()) or "-"),
    Column("LIMITS", lambda r: limits_text(r.get("limits"))),
]
USER_COLUMNS = [
    Column("USER", lambda r: str(r["name"]), style="bold"),
    Column("DEFAULT ACCOUNT", lambda r: str(r.get("default_account")
                                            or (r.get("accounts") or ["-"])[0])),
    Column("ACCOUNTS", lambda r: ",".join(r.get("accounts") or ()) or "-"),
    Column("SHARES", lambda r: text(r.get("shares"), "1"), justify="right"),
]
ASSOC_COLUMNS = [
    Column("ACCOUNT", lambda r: str(r["account"]), style="bold"),
    Column("USER", lambda r: str(r.get("user") or "")),
    Column("SHARES", lambda r: str(r.get("shares", 1)), justify="right"),
    Column("DEFAULT", lambda r: "yes" if r.get("default") else "", justify="left"),
]


@account_app.command("list")
def list_cmd(as_json: bool = JSON_OPTION) -> None:
    """The accounts, with their parents, shares, users and limits."""
    cfg = cluster_config()
    users = list(cfg.get("users") or ())
    rows = []
    for a in cfg.get("accounts") or ():
        rows.append({**a, "_users": [u["name"] for u in users
                                     if a["name"] in (u.get("accounts") or ())]})
    if as_json:
        print_json({"accounts": [{k: v for k, v in r.items() if k != "_users"} | {
            "users": r["_users"]} for r in rows]})
        return
    print_table(rows, ACCOUNT_COLUMNS, empty="No accounts (every job runs under root).")


def _account_fields(parent: str | None, shares: int | None,
                    limits: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if parent is not None:
        fields["parent"] = None if parent == "root" else parent
    if shares is not None:
        fields["shares"] = shares
    if limits:
        fields["limits"] = limits
    return fields


@account_app.command("add")
def add_cmd(name: Annotated[str, typer.Argument(help="Account name")], parent: Parent = None,
            shares: Shares = None, grp_jobs: GrpJobs = None, grp_cpus: GrpCpus = None,
            grp_mem: GrpMem = None, grp_gpus: GrpGpus = None, max_jobs: MaxJobs = None,
            max_submit: MaxSubmit = None, max_wall: MaxWall = None,
            max_cpus_per_job: MaxCpus = None, max_nodes: MaxNodes = None) -> None:
    """Add an account (operators)."""
    limits = _limits(grp_jobs, grp_cpus, grp_mem, grp_gpus, max_jobs, max_submit, max_wall,
                     max_cpus_per_job, max_nodes)
    send_change("accounts", name, _account_fields(parent, shares, limits), "add")
    typer.echo(f"Account added: {name}")


@account_app.command("modify")
def modify_cmd(name: Annotated[str, typer.Argument(help="Account name")],
               parent: Parent = None, shares: Shares = None, grp_jobs: GrpJobs = None,
               grp_cpus: GrpCpus = None, grp_mem: GrpMem = None, grp_gpus: GrpGpus = None,
               max_jobs: MaxJobs = None, max_submit: MaxSubmit = None,
               max_wall: MaxWall = None, max_cpus_per_job: MaxCpus = None,
               max_nodes: MaxNodes = None) -> None:
    """Change an account's parent, shares or limits (operators)."""
    limits = _limits(grp_jobs, grp_cpus, grp_mem, grp_gpus, max_jobs, max_submit, max_wall,
                     max_cpus_per_job, max_nodes)
    fields = _account_fields(parent, shares, limits)
    if not fields:
        fail("nothing to change: give --parent, --shares or a limit", prog=PROG)
    send_change("accounts", name, fields, "modify")
    typer.echo(f"Account modified: {name}")


@account_app.command("delete")
def delete_cmd(name: Annotated[str, typer.Argument(help="Account name")]) -> None:
    """Delete an account (operators); refused while users or sub-accounts use it."""
    send_change("accounts", name, None, "delete")
    typer.echo(f"Account deleted: {name}")


@account_app.command("assoc")
def assoc_cmd(as_json: bool = JSON_OPTION) -> None:
    """Every association: each account, and each (account, user) pair."""
    cfg = cluster_config()
    rows: list[dict[str, Any]] = []
    for a in cfg.get("accounts") or ():
        rows.append({"account": a["name"], "user": "", "shares": a.get("shares", 1),
                     "default": False})
        for u in cfg.get("users") or ():
            accts = list(u.get("accounts") or ())
            if a["name"] in accts:
                default = (u.get("default_account") or accts[0]) == a["name"]
                rows.append({"account": a["name"], "user": u["name"],
                             "shares": u.get("shares", 1), "default": default})
    if as_json:
        print_json({"associations": rows})
        return
    print_table(rows, ASSOC_COLUMNS, empty="No associations.")


@user_app.command("list")
def user_list_cmd(as_json: bool = JSON_OPTION) -> None:
    """The users with their accounts."""
    rows = list(cluster_config().get("users") or ())
    if as_json:
        print_json({"users": rows})
        return
    print_table(rows, USER_COLUMNS, empty="No users configured.")


def _split(value: str) -> list[str]:
    return [x.strip() for x in value.split(",") if x.strip()]


Account = Annotated[str | None, typer.Option("--account", "-A", help="Account(s), comma "
                                             "list.")]
Default = Annotated[str | None, typer.Option("--default-account", help="Default account.")]


@user_app.command("add")
def user_add_cmd(name: Annotated[str, typer.Argument(help="Login name")],
                 account: Account = None, default_account: Default = None,
                 shares: Shares = None) -> None:
    """Add a user with associations, or new associations to a known user (operators)."""
    accounts = _split(account or "")
    if not accounts:
        fail("--account is required: a user needs at least one account", prog=PROG)
    known = {u["name"]: u for u in cluster_config().get("users") or ()}
    fields: dict[str, Any] = {}
    if default_account is not None:
        fields["default_account"] = default_account
    if shares is not None:
        fields["shares"] = shares
    if name in known:
        merged = list(dict.fromkeys(list(known[name].get("accounts") or ()) + accounts))
        send_change("users", name, {**fields, "accounts": merged}, "modify")
        typer.echo(f"Associations added: {name} -> {','.join(accounts)}")
    else:
        send_change("users", name, {**fields, "accounts": accounts}, "add")
        typer.echo(f"User added: {name} ({','.join(accounts)})")


@user_app.command("modify")
def user_modify_cmd(name: Annotated[str, typer.Argument(help="Login name")],
                    default_account: Default = None, shares: Shares = None,
                    accounts: Annotated[str | None, typer.Option(
                        "--accounts", help="Replace the account list (comma list).")] = None
                    ) -> None:
    """Change a user's default account, shares or account list (operators)."""
    fields: dict[str, Any] = {}
    if default_account is not None:
        fields["default_account"] = default_account
    if shares is not None:
        fields["shares"] = shares
    if accounts is not None:
        fields["accounts"] = _split(accounts)
        if not fields["accounts"]:
            fail("--accounts needs at least one account (delete the user instead)",
                 prog=PROG)
    if not fields:
        fail("nothing to change: give --default-account, --shares or --accounts",
             prog=PROG)
    send_change("users", name, fields, "modify")
    typer.echo(f"User modified: {name}")


@user_app.command("delete")
def user_delete_cmd(name: Annotated[str, typer.Argument(help="Login name")],
                    account: Account = None) -> None:
    """Delete a user, or only its associations with ``--account`` (operators)."""
    if account is None:
        send_change("users", name, None, "delete")
        typer.echo(f"User deleted: {name}")
        return
    drop = set(_split(account))
    cur = {u["name"]: u for u in cluster_config().get("users") or ()}.get(name)
    if cur is None:
        fail(f"no such user: {name}", prog=PROG)
    have = list(cur.get("accounts") or ())
    missing = sorted(drop - set(have))
    if missing:
        fail(f"{name} has no association with {','.join(missing)} (it has "
             f"{','.join(have) or 'none'})", prog=PROG)
    left = [a for a in have if a not in drop]
    if not left:
        send_change("users", name, None, "delete")
        typer.echo(f"User deleted: {name} (its last association)")
        return
    fields: dict[str, Any] = {"accounts": left}
    if cur.get("default_account") in drop:
        fields["default_account"] = left[0]
    send_change("users", name, fields, "modify")
    typer.echo(f"Associations deleted: {name} -> {','.join(sorted(drop))}")


def register(app: typer.Typer) -> None:
    from corral.cli.accounts_qos import qos_app

    account_app.add_typer(user_app, name="user")
    account_app.add_typer(qos_app, name="qos")
    app.add_typer(account_app, name="account")
