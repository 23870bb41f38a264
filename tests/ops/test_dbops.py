"""``corral db copy`` (SQLite -> PostgreSQL) and ``corral admin backup`` on real databases."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from corral.controller.rows import insert_row, record_from_row
from corral.controller.store import Store
from corral.ops.dbops import DbOpError, copy_database, find_pg_tool, libpq_url
from tests.controller.test_store import _rec

ENTRY = "from corral.cli.main import main; main()"


def _filled(url: str) -> None:
    st = Store(url)
    st.open()
    st.submit(st.op_insert_jobs([insert_row(_rec(i)) for i in range(1, 41)])).result(10)
    st.submit(st.op_insert_step({"job_id": 3, "restarts": 0, "step_id": 0, "name": "s",
                                 "state": "COMPLETED", "start_time": 1.0, "end_time": 2.0,
                                 "data": "{}"})).result(10)
    st.submit(st.op_upsert_node("n1", {"cpus": 4}, "DRAIN", "fan", {})).result(10)
    st.submit(st.op_set_meta("fairshare_usage", '{"a": 1}')).result(10)
    st.submit(lambda conn: conn.exec_driver_sql(
        'INSERT INTO audit (time, "user", uid, via, action, target, details, outcome) '
        "VALUES (1.0, 'root', 0, 'socket', 'drain', 'n1', '{}', 'ok')")).result(10)
    st.close()


def test_copy_sqlite_to_postgresql(tmp_path: Path, pg_url: str) -> None:
    src = f"sqlite:///{tmp_path / 'corral.db'}"
    _filled(src)
    r = subprocess.run([sys.executable, "-c", ENTRY, "db", "copy", "--from", src, "--to",
                        pg_url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "copied 1 nodes, 40 jobs, 1 steps, 1 audit" in r.stderr
    dst = Store(pg_url)
    dst.open()
    try:
        assert len(dst.load_active()) == 40
        back = record_from_row(dst.get_jobs([7])[0])
        assert back.sub.spec.name == "j7" and back.sub.env == {"A": "1"}
        assert [s.step_id for s in dst.load_steps([3])] == [0]
        assert dst.get_meta("fairshare_usage") == '{"a": 1}'
        assert dst.submit(dst.op_reserve_ids(1)).result(10) == 41  # ids continue
        dst.submit(lambda conn: conn.exec_driver_sql(  # the audit ids continue too
            "INSERT INTO audit (time, \"user\", uid, via, action, target, details, outcome) "
            "VALUES (2.0, 'root', 0, 'socket', 'resume', 'n1', '{}', 'ok')")).result(10)
    finally:
        dst.close()
    with pytest.raises(DbOpError, match="already holds 40 jobs"):  # never into a used one
        copy_database(src, pg_url)
    bad = subprocess.run([sys.executable, "-c", ENTRY, "db", "copy", "--from",
                          f"sqlite:///{tmp_path / 'none.db'}", "--to", pg_url],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "no database at" in bad.stderr


def test_backup_sqlite_online(tmp_path: Path) -> None:
    src = f"sqlite:///{tmp_path / 'corral.db'}"
    _filled(src)
    out = tmp_path / "backup.db"
    r = subprocess.run([sys.executable, "-c", ENTRY, "admin", "backup", str(out), "--url",
                        src], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & 0o077 == 0  # private: it holds every job's environment
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 40
    again = subprocess.run([sys.executable, "-c", ENTRY, "admin", "backup", str(out), "--url",
                            src], capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "exists" in again.stderr


def test_backup_postgresql_and_restore(tmp_path: Path, pg_url: str, pg_server: object) -> None:
    from tests.pg import PgServer

    assert isinstance(pg_server, PgServer)
    if find_pg_tool("pg_restore") is None:
        pytest.skip("pg_restore not installed")
    _filled(pg_url)
    out = tmp_path / "backup.dump"
    r = subprocess.run([sys.executable, "-c", ENTRY, "admin", "backup", str(out), "--url",
                        pg_url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    target = pg_server.create_db("restored_" + tmp_path.name[-12:].replace("-", "_"))
    rr = subprocess.run([str(find_pg_tool("pg_restore")), "--no-owner", "-d",
                         libpq_url(target), str(out)], capture_output=True, text=True,
                        timeout=120)
    assert rr.returncode == 0, rr.stderr
    st = Store(target)
    st.open()
    try:
        assert len(st.load_active()) == 40
        assert json.loads(st.get_meta("fairshare_usage") or "{}") == {"a": 1}
    finally:
        st.close()
