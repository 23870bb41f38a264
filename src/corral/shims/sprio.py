"""``sprio``: the multifactor priority of pending jobs, factor by factor, as Slurm 22.05.

Data: ``client.priorities()`` (``corral.ops.schedview``): the scheduler's own breakdown
(``corral.core.priority.explain_all``) of every pending job, with the weights.

Layout (Slurm's ``sprio.c``): the default format is ``%.15i %9r %.10Y %.10S`` (``-u``
adds ``%.8u`` after the partition) followed by one ``%.10<letter>`` column per factor
whose weight is not zero (age ``A``, assoc ``B``, fairshare ``F``, job size ``J``,
partition ``P``, QOS ``Q``; TRES weights are not modelled so ``%.20T`` never shows);
``-l`` prints every factor plus ``%.8u`` and ``%.11N`` (nice); ``-n``/``--norm`` the
normalized factors, left-aligned (``%10a``: seven decimals; the priority over
``0xffffffff`` as ``%16.14f``, cut to the width). Weighted values print rounded to whole
numbers; the priority is Slurm's: the weighted sum plus site minus nice, at least 1,
truncated to an integer. A priority set by an administrator prints with every factor 0.
One row per partition a job may run in.

Options: ``-h``/``--noheader``, ``-j``/``--jobs[=list]`` (optional argument: ``-j12,13``),
``-u``/``--user``, ``-p``/``--partition``, ``-o``/``--format``, ``-S``/``--sort``
(letters, ``-`` descending; default job id), ``-w``/``--weights`` (the weights row),
``-l``, ``-n``, ``-M`` (this cluster), ``-v``, ``-V``, ``--usage``/``--help``. No job
matching ``-j`` prints ``Unable to find jobs matching user/id(s) specified`` (exit 0);
``-j 12`` takes the next word as its list (``opts.c``); a bad user name is reported and
left out; ``SPRIO_FORMAT``; ``-o`` with ``-l`` is refused; ``--helpformat``.
"""

from __future__ import annotations

from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import squeue_fields as qf
from corral.shims.context import Context
from corral.shims.users import UserError, resolve_users

R, N, OPT = Arg.REQUIRED, Arg.NONE, Arg.OPTIONAL
TABLE = OptionTable.of([
    Opt("clusters", ("clusters", "cluster"), "M", R),
    Opt("federation", ("federation",), None, N),
    Opt("format", ("format",), "o", R),
    Opt("help", ("help",), None, N),
    Opt("helpformat", ("helpformat",), None, N),
    Opt("jobs", ("jobs",), "j", OPT),
    Opt("local", ("local",), None, N),
    Opt("long", ("long",), "l", N),
    Opt("noheader", ("noheader",), "h", N),
    Opt("norm", ("norm",), "n", N),
    Opt("partition", ("partition",), "p", R),
    Opt("sibling", ("sibling",), None, N),
    Opt("sort", ("sort",), "S", R),
    Opt("usage", ("usage",), None, N),
    Opt("user", ("user", "users"), "u", R),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
    Opt("weights", ("weights",), "w", N),
])
VERSION = "slurm 22.05.8"
USAGE = ("Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]\n"
         "     [--federation] [--local] [--sibling] [--usage] [-hlnvVw]")
FACTORS = (("A", "age", "AGE"), ("B", "assoc", "ASSOC"), ("F", "fairshare", "FAIRSHARE"),
           ("J", "job_size", "JOBSIZE"), ("P", "partition", "PARTITION"),
           ("Q", "qos", "QOS"))
NOT_FOUND = "Unable to find jobs matching user/id(s) specified"
Row = dict[str, Any]


def _direct(r: Row) -> bool:
    """An administrator set the priority: Slurm prints every factor as 0."""
    return r.get("admin_priority") is not None


def _weighted(name: str) -> qf.Getter:
    def get(r: Row, now: float) -> str:
        f = (r.get("factors") or {}).get(name)
        if r.get("_weights"):
            return str(int(f["weight"])) if f else "0"
        if _direct(r) or not f:
            return "0"
        return f"{float(f['contribution']):.0f}"
    return get


def _normal(name: str) -> qf.Getter:
    def get(r: Row, now: float) -> str:
        f = (r.get("factors") or {}).get(name)
        if r.get("_weights"):
            return str(int(f["weight"])) if f else "0"
        if _direct(r):
            return "0"
        if not f or not int(f["weight"]):
            return "0.0000000"
        return f"{float(f['contribution']) / int(f['weight']):.7f}"
    return get


def _total(r: Row) -> float:
    """Slurm's ``get_priority_from_factors``: the weighted sum plus site minus nice, at
    least 1 (0 is kept for held jobs), or the administrator's value."""
    if _direct(r):
        return float(r["admin_priority"])
    total = sum(float(f["contribution"]) for f in (r.get("factors") or {}).values())
    total += int(r.get("site") or 0) - int(r.get("nice") or 0)
    return max(1.0, total)


def _priority(r: Row, now: float) -> str:
    return "" if r.get("_weights") else str(int(_total(r)))


def _priority_norm(r: Row, now: float) -> str:
    return "" if r.get("_weights") else f"{_total(r) / 0xFFFFFFFF:16.14f}"


def _plain(key: str, weights_text: str = "") -> qf.Getter:
    def get(r: Row, now: float) -> str:
        if r.get("_weights"):
            return weights_text
        v = r.get(key)
        return "" if v is None else str(v)
    return get


def _site(r: Row, now: float) -> str:
    if r.get("_weights"):
        return "1"
    return "0" if _direct(r) else str(int(r.get("site") or 0))


FIELDS: dict[str, tuple[str, qf.Getter]] = {
    "i": ("JOBID", lambda r, now: "Weights" if r.get("_weights") else str(r["id"])),
    "r": ("PARTITION", _plain("_partition")),
    "u": ("USER", _plain("user")),
    "o": ("ACCOUNT", _plain("account")),
    "n": ("QOSNAME", _plain("qos")),
    "c": ("CLUSTER", _plain("_cluster")),
    "Y": ("PRIORITY", _priority),
    "y": ("PRIORITY", _priority_norm),
    "S": ("SITE", _site),
    "N": ("NICE", lambda r, now: "" if r.get("_weights") else
          "0" if _direct(r) else str(int(r.get("nice") or 0))),
    "T": ("TRES", lambda r, now: ""),
    "t": ("TRES", lambda r, now: ""),
}
for _letter, _name, _head in FACTORS:
    FIELDS[_letter] = (_head, _weighted(_name))
    FIELDS[_letter.lower()] = (_head, _normal(_name))


def default_format(weights: dict[str, Any], *, long: bool, norm: bool,
                   users: bool = False) -> str:
    """Slurm 22.05's ``sprio.c`` defaults: normalized columns are left-aligned
    (``%10a``), weighted ones right-aligned (``%.10A``); ``-u`` adds the user column."""
    if long:
        if norm:
            return "%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t"
        return "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
    fmt = "%.15i %9r" + (" %.8u" if users else "")
    fmt += " %10y" if norm else " %.10Y %.10S"
    for key, name, _head in FACTORS:
        if int(weights.get(name) or 0):
            fmt += f" %10{key.lower()}" if norm else f" %.10{key}"
    return fmt


def _split(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


SORT_LETTERS = frozenset("ciNnoruAaFfJjPpQqTtYy")


def check_sort(ctx: Context, spec: str) -> None:
    for ch in spec:
        if ch not in ",+-" and ch not in SORT_LETTERS:
            raise ctx.fail(f"sprio: error: Invalid sort specification: {ch}")


def _sort(rows: list[Row], spec: str, now: float) -> None:
    """Slurm's ``sort.c``: by job id unless ``-S`` (letters, ``-`` descending, the last
    one applied first); a job's partitions keep the job's order."""
    rows.sort(key=lambda r: int(r["id"]))
    for word in reversed([w.strip() for w in spec.split(",") if w.strip()]):
        desc = word.startswith("-")
        letter = word.lstrip("+-")[:1]
        field = FIELDS.get(letter.upper() if letter in "afjpqty" else letter)
        if field is None:
            continue
        get = field[1]

        def key(r: Row, g: qf.Getter = get) -> tuple[int, float, str]:
            text = g(r, now)
            try:
                return (0, float(text), "")
            except ValueError:
                return (1, 0.0, text)
        rows.sort(key=key, reverse=desc)


def run(ctx: Context, client: Any) -> None:
    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "sprio", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"sprio --help\" for more information") from None
    opts: dict[str, list[str]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value or "")
    if positional and "jobs" in opts:  # opts.c: `-j 12` takes the next word as the list
        opts["jobs"].append(positional.pop(0))
    if positional:
        raise ctx.fail(f"sprio: error: Unrecognized option: {positional[0]}\n{USAGE}")
    if "help" in opts or "usage" in opts:
        ctx.print(USAGE)
        return
    if "version" in opts:
        ctx.print(VERSION)
        return
    if "helpformat" in opts:
        letters = "aAbBcfFijJnNopPrSqQuyYtT"
        ctx.print("\n".join("".join(f"%{c:<5}" for c in letters[i:i + 8])
                            for i in range(0, len(letters), 8)))
        return
    if "long" in opts and "format" in opts:
        raise ctx.fail("sprio: fatal: Options -o(--format) and -l(--long) are mutually "
                       "exclusive. Please remove one and retry.")
    cluster = str((client.ping() or {}).get("cluster") or "corral")
    for want in _split(opts.get("clusters", [])):
        if want.lower() != cluster.lower():
            raise ctx.fail(f"sprio: error: '{want}' can't be reached now, or it is an "
                           "invalid entry for --cluster.  Use 'sacctmgr list clusters' to "
                           "see available clusters.")
    ids: set[int] = set()
    for w in _split(opts.get("jobs", [])):
        if not w.isdigit():
            raise ctx.fail(f"sprio: error: Invalid job id: {w}")
        ids.add(int(w))
    uids: set[int] | None = None
    if "user" in opts:  # opts.c: a bad name is reported and left out, not fatal
        uids = set()
        for word in _split(opts["user"]):
            try:
                uids |= resolve_users([word])
            except UserError:
                ctx.error(f"sprio: error: Invalid user: {word}")
                ctx.error("")
        if not uids:
            uids = None
    parts = set(_split(opts.get("partition", [])))
    if "sort" in opts:
        check_sort(ctx, opts["sort"][-1])
    data = client.priorities()
    from corral.shims.slurmfmt import fill_default_partition

    fill_default_partition(list(data.get("jobs") or ()), client)
    weights: dict[str, Any] = data.get("weights") or {}
    fmt = opts["format"][-1] if "format" in opts else \
        (ctx.env.get("SPRIO_FORMAT") if "long" not in opts else None) or \
        default_format(weights, long="long" in opts, norm="norm" in opts,
                       users="user" in opts)
    items = qf.parse_format(fmt, FIELDS)
    header = "noheader" not in opts
    if "weights" in opts:
        w_row: Row = {"_weights": True, "id": 0, "_partition": "", "factors": {
            name: {"weight": int(weights.get(name) or 0)} for _k, name, _h in FACTORS}}
        for line in qf.render(items, [w_row], ctx.now, header):
            ctx.print(line)
        return
    rows: list[Row] = []
    for j in data.get("jobs") or ():
        if ids and int(j["id"]) not in ids:
            continue
        if uids is not None and int(j.get("uid", -1)) not in uids:
            continue
        for part in str(j.get("partition") or "").split(",") or [""]:
            if parts and part not in parts:
                continue
            rows.append({**j, "_partition": part, "_cluster": cluster})
    if not rows and "jobs" in opts:
        ctx.print(NOT_FOUND)
        return
    _sort(rows, opts["sort"][-1] if "sort" in opts else "", ctx.now)
    for line in qf.render(items, rows, ctx.now, header):
        ctx.print(line)
