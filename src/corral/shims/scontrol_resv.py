"""``scontrol create|update|delete|show reservation`` and ``sinfo -T`` in Slurm 22.05's words.

Keys (case-insensitive, as scontrol): ``ReservationName`` (``Reservation``), ``StartTime``
(``now``, ``now+1hour``, ``2026-12-24T08:00``), ``EndTime``, ``Duration`` (minutes or
``[D-]HH:MM:SS``), ``Nodes`` (a host list or ``ALL``), ``NodeCnt``, ``PartitionName``,
``Users``, ``Accounts``, ``Flags``; in an update ``Users=+bob``/``Users-=bob`` (and the same
for ``Accounts`` and ``Flags``) add and remove. Output as Slurm's: ``Reservation created:
NAME``, ``Reservation updated.``, ``No reservations in the system``, ``Reservation NAME not
found``, the four-line ``show`` blocks and the ``sinfo -T`` table.
"""

from __future__ import annotations

from typing import Any

from corral.core.parse.timefmt import format_time_s
from corral.shims import slurmfmt as sf
from corral.shims.context import Context

_KEYS = {
    "reservationname": "name", "reservation": "name", "starttime": "start_time",
    "endtime": "end_time", "duration": "duration_s", "nodes": "nodes", "nodecnt": "node_count",
    "partitionname": "partition", "partition": "partition", "users": "users",
    "accounts": "accounts", "flags": "flags",
}


def _methods(ctx: Context, client: Any, *names: str) -> list[Any]:
    out = [getattr(client, n, None) for n in names]
    if any(m is None for m in out):
        raise ctx.fail("scontrol: error: reservations are not available through this "
                       "connection to the controller")
    return out


def parse_pairs(ctx: Context, words: list[str], what: str) -> dict[str, Any]:
    """The API body of ``create``/``update`` from scontrol's ``Key=Value`` words."""
    body: dict[str, Any] = {}
    now = ctx.now
    for w in words:
        key, eq, value = w.partition("=")
        op = ""
        if key.endswith(("+", "-")):
            key, op = key[:-1], key[-1]
        api = _KEYS.get(key.lower())
        if not eq or api is None:
            raise ctx.fail(f"scontrol: error: Invalid input: {w}\nRequest aborted")
        if api in ("users", "accounts", "flags"):
            items = [x.strip() for x in value.split(",") if x.strip()]
            body[api] = [op + x if op else x for x in items]
        elif api in ("start_time", "end_time"):
            from corral.shims.slurmtime import DateError, parse_date

            if value.lower() == "now":
                body[api] = "now" if api == "start_time" else now
                continue
            try:
                body[api] = parse_date(value, now)
            except DateError:
                raise ctx.fail(f"Error {what} the reservation: Invalid "
                               f"{'StartTime' if api == 'start_time' else 'EndTime'} "
                               f"value: {value}") from None
        elif api == "duration_s":
            from corral.core.parse.errors import ParseError
            from corral.core.parse.timefmt import parse_time_limit_s

            try:
                secs = parse_time_limit_s(value)
            except ParseError:
                secs = -1
            if secs is None or secs <= 0:
                raise ctx.fail(f"Error {what} the reservation: Invalid Duration value: "
                               f"{value}")
            body[api] = secs
        elif api == "node_count":
            if not value.isdigit() or int(value) < 1:
                raise ctx.fail(f"Error {what} the reservation: Invalid NodeCnt value: {value}")
            body[api] = int(value)
        else:
            body[api] = value
    return body


def create(ctx: Context, client: Any, words: list[str]) -> None:
    from corral.client import CorralError

    (make,) = _methods(ctx, client, "create_reservation")
    body = parse_pairs(ctx, words, "creating")
    try:
        got = make(**body)
    except CorralError as exc:
        raise ctx.fail(f"Error creating the reservation: {exc.slurm or exc.message}") from None
    ctx.print(f"Reservation created: {got['name']}")


def update(ctx: Context, client: Any, words: list[str]) -> None:
    from corral.client import CorralError

    (change,) = _methods(ctx, client, "update_reservation")
    body = parse_pairs(ctx, words, "updating")
    name = body.pop("name", None)
    if not name:
        raise ctx.fail("scontrol: error: ReservationName must be given\nRequest aborted")
    try:
        change(name, **body)
    except CorralError as exc:
        raise ctx.fail(f"Error updating the reservation: {exc.slurm or exc.message}") from None
    ctx.print("Reservation updated.")


def delete(ctx: Context, client: Any, words: list[str]) -> None:
    from corral.client import CorralError

    (remove,) = _methods(ctx, client, "delete_reservation")
    names = [w.partition("=")[2] if "=" in w else w for w in words]
    if not names or not all(names):
        raise ctx.fail("scontrol: error: delete: ReservationName=NAME required")
    for name in names:
        try:
            remove(name)
        except CorralError as exc:
            raise ctx.fail(f"Error deleting the reservation: {exc.slurm or exc.message}") \
                from None


def _null(v: Any) -> str:
    return "(null)" if v in (None, "", []) else str(v)


def block(r: dict[str, Any], oneliner: bool) -> str:
    lines = [
        f"ReservationName={r['name']} StartTime={sf.iso(r['start_time'])} "
        f"EndTime={sf.iso(r['end_time'])} Duration={format_time_s(r['duration_s'])}",
        f"Nodes={_null(r.get('nodelist'))} NodeCnt={r['node_count']} "
        f"CoreCnt={r['core_count']} Features=(null) PartitionName={_null(r.get('partition'))} "
        f"Flags={','.join(r.get('flags') or ())}",
        f"TRES=cpu={r['cpu_count']}",
        f"Users={_null(','.join(r.get('users') or ()))} Groups=(null) "
        f"Accounts={_null(','.join(r.get('accounts') or ()))} Licenses=(null) "
        f"State={r['state']} BurstBuffer=(null) Watts=n/a",
        "MaxStartDelay=(null)",
    ]
    if oneliner:
        return " ".join(lines) + "\n"
    return "\n   ".join(lines) + "\n"


def show(ctx: Context, client: Any, name: str | None, oneliner: bool) -> None:
    (listing,) = _methods(ctx, client, "reservations")
    items = listing()
    if name is not None:
        items = [r for r in items if r.get("name") == name]
        if not items:
            raise ctx.fail(f"Reservation {name} not found")
    if not items:
        ctx.print("No reservations in the system")
        return
    for r in items:
        ctx.write(block(r, oneliner))
        if not oneliner:
            ctx.write("\n")


def sinfo_table(ctx: Context, client: Any, header: bool = True) -> None:
    """``sinfo -T``: one line per reservation."""
    (listing,) = _methods(ctx, client, "reservations")
    items = listing()
    if not items:
        ctx.print("No reservations in the system")
        return
    if header:
        ctx.print(_row("RESV_NAME", "STATE", "START_TIME", "END_TIME", "DURATION",
                       "NODELIST"))
    for r in items:
        ctx.print(_row(r["name"], r["state"], sf.iso(r["start_time"]), sf.iso(r["end_time"]),
                       format_time_s(r["duration_s"]), r.get("nodelist") or ""))


def _row(name: str, state: str, start: str, end: str, dur: str, nodes: str) -> str:
    return f"{name:<10} {state:>8}  {start:>19}  {end:>19}  {dur:>11}  {nodes}"


__all__ = ["block", "create", "delete", "parse_pairs", "show", "sinfo_table", "update"]
