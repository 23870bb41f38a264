"""Node state and reservation history, for utilization reports (``sreport cluster
utilization``: Down, PLND Down, Reserved), as Slurm's accounting keeps its event table.

Each controller tick (at most 1 s apart) ``tick`` compares what it sees with what it
last recorded and stores a row per change in the ``node_history`` table:

- ``kind = "node"``: a node's *condition* changed: ``DOWN`` (failed, unreachable, set
  down), ``DRAINED`` (drained with no job left), or ``""`` (usable again); with its CPU
  count. A node never recorded is taken as usable.
- ``kind = "resv"``: a reservation's interval: ``{start, end, cpus, maint, nodes}``,
  written when it is created or changed; when it changes or goes away before its end,
  its previous interval is closed at that moment (``end`` = now, or its start if it
  had not begun). The interval of a reservation is the last row with that name and
  start.

``window(rows, since, until)`` turns the rows ``Store.load_history`` returns into the
intervals inside a window: ``{"nodes": [{name, state, start, end, cpus}],
"reservations": [{name, start, end, cpus, maint, nodes}]}`` (``GET
/api/v1/ops/node-history``). Slurm counts a node DOWN or DRAINED as Down, a maintenance
reservation (``MAINT``) as PLND Down, any other reservation as Reserved (the shim
subtracts what jobs on its nodes used, ``corral.shims.sreport_reports``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from corral.core.model.node import NodeState

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.nodehistory")

NODE, RESV = "node", "resv"


def condition(state: NodeState) -> str:
    """What the history keeps of a node state: DOWN, DRAINED or "" (usable)."""
    if state is NodeState.DOWN:
        return "DOWN"
    if state is NodeState.DRAINED:
        return "DRAINED"
    return ""


class NodeHistory:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.nodes: dict[str, str] = {}  # node -> its last recorded condition
        self.resv: dict[str, dict[str, Any]] = {}  # reservation -> its recorded interval

    def load(self, rows: Iterable[Any]) -> None:
        """The newest row of each node and reservation (``Store.load_history_last``)."""
        for row in rows:
            try:
                data = json.loads(row.data)
            except ValueError:
                continue
            if row.kind == NODE:
                self.nodes[row.name] = str(data.get("state") or "")
            elif row.kind == RESV and float(data["end"]) > float(data["start"]):
                self.resv[row.name] = data

    def tick(self, now: float) -> None:
        rows = self._node_rows(now) + self._resv_rows(now)
        if rows:
            self.ctl.store.submit(self.ctl.store.op_insert_history(rows))

    def _node_rows(self, now: float) -> list[dict[str, Any]]:
        out = []
        for name, rec in self.ctl.nodes.nodes.items():
            cond = condition(rec.state)
            if self.nodes.get(name, "") == cond:
                continue
            self.nodes[name] = cond
            out.append({"time": now, "kind": NODE, "name": name,
                        "data": json.dumps({"state": cond, "cpus": rec.spec.cpus})})
        return out

    def _resv_rows(self, now: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        nodes = self.ctl.nodes.nodes
        current: dict[str, dict[str, Any]] = {}
        for r in self.ctl.reservations.items.values():
            current[r.name] = {
                "start": r.start_time, "end": r.end_time, "maint": "MAINT" in r.flags,
                "nodes": list(r.nodes),
                "cpus": sum(nodes[n].spec.cpus for n in r.nodes if n in nodes)}
        for name, old in list(self.resv.items()):
            new = current.get(name)
            if new == old:
                continue
            if new is None or new["start"] != old["start"] or new["end"] != old["end"]:
                cut = min(float(old["end"]), max(float(old["start"]), now))
                if cut < float(old["end"]):  # it went away or moved before its end
                    out.append({"time": now, "kind": RESV, "name": name,
                                "data": json.dumps({**old, "end": cut})})
            del self.resv[name]
        for name, new in current.items():
            if self.resv.get(name) != new:
                self.resv[name] = new
                out.append({"time": now, "kind": RESV, "name": name,
                            "data": json.dumps(new)})
        return out


def window(rows: Iterable[Any], since: float, until: float) -> dict[str, Any]:
    """The history's intervals inside ``[since, until)`` (see the module docstring)."""
    node_rows: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    resv: dict[tuple[str, float], dict[str, Any]] = {}
    for row in rows:
        try:
            data = json.loads(row.data)
        except ValueError:
            continue
        if row.kind == NODE:
            node_rows.setdefault(row.name, []).append((float(row.time), data))
        elif row.kind == RESV:
            resv[(row.name, float(data["start"]))] = {"name": row.name, **data}
    nodes: list[dict[str, Any]] = []
    for name, changes in sorted(node_rows.items()):
        changes.sort(key=lambda c: c[0])
        for i, (t, data) in enumerate(changes):
            state = str(data.get("state") or "")
            end = changes[i + 1][0] if i + 1 < len(changes) else until
            lo, hi = max(t, since), min(end, until)
            if state and hi > lo:
                nodes.append({"name": name, "state": state, "start": lo, "end": hi,
                              "cpus": int(data.get("cpus") or 0)})
    out_resv = []
    for (_name, _start), d in sorted(resv.items()):
        lo, hi = max(float(d["start"]), since), min(float(d["end"]), until)
        if hi > lo:
            out_resv.append({**d, "start": lo, "end": hi})
    return {"nodes": nodes, "reservations": out_resv}
