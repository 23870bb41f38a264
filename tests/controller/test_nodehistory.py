"""Node state and reservation history (sreport's Down, PLND Down, Reserved): what each
tick records in a real SQLite store, what survives a reopen, and the window's intervals."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from corral.controller.nodehistory import NodeHistory, window
from corral.controller.records import NodeRecord
from corral.controller.reservations import Reservation
from corral.controller.store import Store
from corral.core.model.node import NodeSpec, NodeState


def _ctl(store: Store) -> Any:
    nodes = {n: NodeRecord(spec=NodeSpec(name=n, cores_per_socket=4), state=NodeState.IDLE)
             for n in ("n1", "n2")}
    return SimpleNamespace(store=store, nodes=SimpleNamespace(nodes=nodes),
                           reservations=SimpleNamespace(items={}))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'h.db'}"
    return str(request.getfixturevalue("pg_url"))


def _flush(store: Store) -> None:
    store.submit(lambda conn: None).result(timeout=10)


def test_node_states_and_reservations_over_a_window(db_url: str) -> None:
    store = Store(db_url)
    store.open()
    try:
        ctl = _ctl(store)
        h = NodeHistory(ctl)
        h.tick(100.0)  # all usable, no reservation: nothing to record
        _flush(store)
        assert store.load_history_last() == []
        ctl.nodes.nodes["n1"].state = NodeState.DOWN
        maint = Reservation("maint", 150.0, 400.0, ("n2",), flags=("MAINT",))
        ctl.reservations.items["maint"] = maint
        h.tick(110.0)
        ctl.nodes.nodes["n1"].state = NodeState.DRAINING  # usable for its jobs again
        h.tick(130.0)
        ctl.nodes.nodes["n1"].state = NodeState.DRAINED
        h.tick(140.0)
        h.tick(141.0)  # no change, no row
        ctl.reservations.items.clear()  # deleted while it runs: closed at 200
        h.tick(200.0)
        ctl.nodes.nodes["n1"].state = NodeState.IDLE
        h.tick(250.0)
        _flush(store)
        got = window(store.load_history(0.0, 1000.0), 120.0, 300.0)
        assert got["nodes"] == [
            {"name": "n1", "state": "DOWN", "start": 120.0, "end": 130.0, "cpus": 4},
            {"name": "n1", "state": "DRAINED", "start": 140.0, "end": 250.0, "cpus": 4}]
        assert got["reservations"] == [{"name": "maint", "start": 150.0, "end": 200.0,
                                        "maint": True, "nodes": ["n2"], "cpus": 4}]
        # from 145 on: the DRAINED row written before the window still counts
        late = window(store.load_history(145.0, 1000.0), 145.0, 1000.0)
        assert late["nodes"] == [{"name": "n1", "state": "DRAINED", "start": 145.0,
                                  "end": 250.0, "cpus": 4}]
        # a restarted controller knows what it recorded: no duplicate rows
        h2 = NodeHistory(ctl)
        h2.load(store.load_history_last())
        before = len(store.load_history(0.0, 1e9))
        h2.tick(260.0)
        _flush(store)
        assert len(store.load_history(0.0, 1e9)) == before
    finally:
        store.close()


def test_a_moved_reservation_keeps_only_its_real_past(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    store.open()
    try:
        ctl = _ctl(store)
        h = NodeHistory(ctl)
        ctl.reservations.items["r"] = Reservation("r", 100.0, 500.0, ("n1", "n2"))
        h.tick(50.0)
        ctl.reservations.items["r"] = Reservation("r", 1000.0, 1100.0, ("n1", "n2"))
        h.tick(60.0)  # moved before it began: its first interval is gone
        _flush(store)
        got = window(store.load_history(0.0, 2000.0), 0.0, 2000.0)["reservations"]
        assert [(r["start"], r["end"], r["cpus"], r["maint"]) for r in got] == [
            (1000.0, 1100.0, 8, False)]
    finally:
        store.close()
