"""``qdel``: delete PBS jobs by id (``123``, ``123.server``, ``123[]``, ``123[4].server``).

Deleting an unknown job prints ``qdel: Unknown Job Id <id>`` (exit 153), a finished one
``qdel: Job has finished <id>`` (exit 35); the other ids are still deleted. ``-W force``
and ``-x`` are accepted (Corral's cancel already escalates to SIGKILL).
"""

from __future__ import annotations

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import pbs
from corral.shims.context import Client, Context, ShimExit

TABLE = OptionTable.of([
    Opt("W", (), "W", Arg.REQUIRED), Opt("x", (), "x", Arg.NONE),
    Opt("m", (), "m", Arg.REQUIRED), Opt("version", ("version",), None, Arg.NONE),
])
USAGE = "usage: qdel [-W force|suppress_email=X] [-x] job_identifier...\n       qdel --version"


def run(ctx: Context, client: Client) -> None:
    try:
        parsed, words = getopt_long(ctx.argv, TABLE, "qdel", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\n{USAGE}", 2) from None
    if any(p.opt.key == "version" for p in parsed):
        ctx.print(f"pbs_version = {pbs.PBS_VERSION}")
        return
    if not words:
        raise ctx.fail(USAGE, 2)
    rc = 0
    targets: list[tuple[str, str]] = []  # (api id, word)
    for word in words:
        try:
            ref = pbs.parse_pbs_id(word)
        except pbs.PbsIdError:
            ctx.error(f"qdel: illegally formed job identifier: {word}")
            rc = 1
            continue
        targets.extend((i, word) for i in pbs.api_ids(ref))
    if targets:
        results = client.cancel([t[0] for t in targets])
        for (_, word), res in zip(targets, results, strict=False):
            if res.get("ok"):
                continue
            code = str(res.get("code") or "")
            if code == "not_found":
                ctx.error(f"qdel: Unknown Job Id {word}")
                rc = pbs.EXIT_UNKNOWN
            elif code in ("conflict", "finished"):
                ctx.error(f"qdel: Job has finished {word}")
                rc = pbs.EXIT_HISTORY
            else:
                ctx.error(f"qdel: {res.get('message') or 'Unauthorized Request'} {word}")
                rc = 15007 & 0xFF
    if rc:
        raise ShimExit(rc)
