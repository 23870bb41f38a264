"""The job mail outbox (``corral.controller.outbox``) on a real store (SQLite, and a
PostgreSQL server the run starts) against a real SMTP receiver on loopback: a server
that refuses first and then accepts, one that always refuses (dropped after the last
attempt, logged), a permanent refusal, dedup by key, the owed mails of a closed store
sent by the next outbox on it, a dead server that never holds up the event loop, and a
failing mail_prog retried."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from corral.config.lifecycle import MailConfig, ScriptsConfig
from corral.controller.outbox import Mail, Outbox
from corral.controller.store import Store
from tests.smtpd import Receiver


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'c.db'}"
    return str(request.getfixturevalue("pg_url"))


class _Ctl(SimpleNamespace):
    """What the outbox uses of a controller: its configuration, store and term flag."""


async def _outbox(url: str, port: int, **mail: Any) -> tuple[Outbox, Store]:
    store = Store(url)
    store.open()
    await store.bind_loop()
    cfg = SimpleNamespace(mail=MailConfig(smtp_host="127.0.0.1", smtp_port=port,
                                          timeout_s=5, **mail), scripts=ScriptsConfig())
    ctl = _Ctl(cfg=cfg, store=store, term_over=asyncio.Event())
    return Outbox(cast(Any, ctl)), store


async def _close(box: Outbox, store: Store) -> None:
    box.stop()
    store.flush()
    await asyncio.get_running_loop().run_in_executor(None, store.close)


def _mail(key: str = "7.0.END", to: str = "ann@example.org") -> Mail:
    return Mail(key=f"{key}:{to}", job_id=7, created=time.time(), to=to,
                subject="Slurm Job_id=7 Name=x Ended, Run time 00:00:01, COMPLETED, ExitCode 0",
                event="END", env={"SLURM_JOB_ID": "7", "SLURM_JOB_STATE": "COMPLETED"},
                header_job_id=7)


async def _until(pred: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _rows(store: Store) -> dict[str, tuple[str, int]]:
    return {r.key: (r.state, r.attempts) for r in store.load_mail(None)}


def test_refused_then_accepted_with_backoff(db_url: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="corral.mail")

    async def main() -> None:
        with Receiver() as rx:
            rx.refuse = 2  # "421 try again later" twice, then it takes mail
            box, store = await _outbox(db_url, rx.port, retry_s=0.2, retry_max_s=1)
            t0 = time.monotonic()
            box.add(_mail())
            box.add(_mail())  # the same key again while owed: nothing new
            await _until(lambda: len(rx.received()) == 1, 20, "the third attempt")
            took = time.monotonic() - t0
            assert took >= 0.2 + 0.4 - 0.05, took  # backoff 0.2 s, then 0.4 s
            await _until(lambda: _rows(store) == {"7.0.END:ann@example.org": ("sent", 3)},
                         10, "the row marked sent")
            [(_, to, msg)] = rx.received()
            assert to == ["ann@example.org"] and msg["X-Corral-Mail-Type"] == "END"
            assert msg["Message-ID"].startswith("<corral.7.")
            assert "State: COMPLETED" in msg.get_content()
            assert rx.sessions == 3
            box.add(_mail())  # stored before (sent): never sent twice
            await _until(lambda: "already stored; not sent again" in caplog.text, 10,
                         "the duplicate noticed")
            assert len(rx.received()) == 1 and box.owed == {}
            await _close(box, store)
    asyncio.run(main())
    assert "failed (attempt 1 of 8), next in 0.2 s" in caplog.text, caplog.text
    assert "failed (attempt 2 of 8), next in 0.4 s" in caplog.text
    assert "421" in caplog.text and "mailed ann@example.org" in caplog.text


def test_always_refused_is_dropped_after_the_last_attempt(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="corral.mail")

    async def main() -> None:
        with Receiver() as rx:
            rx.refusing = True
            box, store = await _outbox(db_url, rx.port, retry_s=0.05, retry_max_s=0.1,
                                       max_attempts=3)
            box.add(_mail())
            await _until(lambda: _rows(store).get("7.0.END:ann@example.org") ==
                         ("dropped", 3), 20, "the mail dropped")
            assert rx.sessions == 3 and rx.received() == [] and box.owed == {}
            rx.refusing = False
            rx.rcpt_code = 550  # refused for good: one attempt, no retry
            box.add(_mail("8.0.FAIL", "nobody@example.org"))
            await _until(lambda: _rows(store).get("8.0.FAIL:nobody@example.org") ==
                         ("dropped", 1), 20, "the refused mail dropped")
            assert rx.sessions == 4
            await _close(box, store)
    asyncio.run(main())
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().partition(": through")[0] for r in errors] == [
        "job 7: mail END to ann@example.org dropped after 3 attempts, not sent",
        "job 7: mail END to nobody@example.org refused for good, not sent"], caplog.text
    assert "550" in errors[1].getMessage()


def test_owed_mail_survives_the_store_and_is_sent_by_the_next(db_url: str) -> None:
    async def main() -> None:
        with Receiver() as rx:
            rx.refusing = True
            box, store = await _outbox(db_url, rx.port, retry_s=30)
            box.add(_mail())
            await _until(lambda: _rows(store).get("7.0.END:ann@example.org") ==
                         ("owed", 1), 20, "one failed attempt stored")
            await _close(box, store)  # the controller goes (its retry 30 s away)
            rx.refusing = False
            box2, store2 = await _outbox(db_url, rx.port, retry_s=30)
            box2.load(store2.load_mail())
            [owed] = box2.owed.values()
            assert owed.attempts == 1 and owed.next_try > time.time() + 20  # its schedule
            owed.next_try = 0.0  # the test does not wait the 30 s
            box2.kick()
            await _until(lambda: len(rx.received()) == 1, 20, "the owed mail sent")
            await _until(lambda: _rows(store2)["7.0.END:ann@example.org"] == ("sent", 2),
                         10, "marked sent")
            await _close(box2, store2)
    asyncio.run(main())


def test_a_dead_server_never_holds_up_the_loop(tmp_path: Path) -> None:
    async def main() -> None:
        with Receiver(hang=True) as dead:
            box, store = await _outbox(f"sqlite:///{tmp_path / 'c.db'}", dead.port,
                                       retry_s=60, max_queued=3)
            for i in range(4):  # the fourth is over max_queued
                box.add(_mail(f"{i}.0.BEGIN"))
            await _until(lambda: len(box.owed) == 3, 10, "three owed")
            lags = []
            for _ in range(20):  # two attempts hang in their threads meanwhile
                t0 = time.monotonic()
                await asyncio.sleep(0.01)
                lags.append(time.monotonic() - t0)
            assert max(lags) < 0.2, lags
            assert dead.sessions >= 1 and box.dropped == 1
            await _close(box, store)
    asyncio.run(main())


def test_mail_prog_failure_is_retried(tmp_path: Path) -> None:
    """``[scripts] mail_prog`` goes through the same outbox: a program that fails
    (exit 1) is run again after the backoff, with the same subject and recipient."""
    log, once = tmp_path / "sent", tmp_path / "failed-once"
    prog = tmp_path / "mail"
    prog.write_text(f"#!/bin/sh\nif [ ! -e {once} ]; then : > {once}; echo busy; exit 1; fi\n"
                    f'echo "$1|$2|$3|$SLURM_JOB_STATE" >> {log}\n')
    prog.chmod(0o755)

    async def main() -> None:
        store = Store(f"sqlite:///{tmp_path / 'c.db'}")
        store.open()
        await store.bind_loop()
        cfg = SimpleNamespace(mail=MailConfig(retry_s=0.1),
                              scripts=ScriptsConfig(mail_prog=str(prog)))
        box = Outbox(cast(Any, _Ctl(cfg=cfg, store=store, term_over=asyncio.Event())))
        box.add(_mail())
        await _until(lambda: log.exists(), 20, "the second run of the program")
        await _until(lambda: _rows(store) == {"7.0.END:ann@example.org": ("sent", 2)}, 10,
                     "marked sent")
        await _close(box, store)
    asyncio.run(main())
    assert log.read_text() == ("-s|Slurm Job_id=7 Name=x Ended, Run time 00:00:01, "
                               "COMPLETED, ExitCode 0|ann@example.org|COMPLETED\n")
