"""Job mail over SMTP on a real cluster: ``[mail] smtp_host`` pointing at a loopback SMTP
receiver started by the test; ``sbatch --mail-type`` through the installed shims, the
mails polled for until they arrive, with Slurm's subjects and Corral's headers."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.e2e.cluster import TEST_CONFIG, Cluster, corral, wait_for
from tests.smtpd import Receiver


def test_mail_through_smtp_server() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-smtp-"))
    with Receiver() as rx:
        # array_window = 2: an array of 5 keeps 3 tasks in its compact tail at first
        c = Cluster(root, config=TEST_CONFIG.replace(
            "[controller]\n", "[controller]\narray_window = 2\n") + (
            f'\n[scripts]\nmail_domain = "example.org"\n\n[mail]\nsmtp_host = "127.0.0.1"\n'
            f'smtp_port = {rx.port}\nfrom_address = "hpc@example.org"\ntimeout_s = 5\n'))
        c.up()
        try:
            bin_dir = root / "bin"
            assert corral("shims", "install", "--force", str(bin_dir)).returncode == 0
            env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
                       CORRAL_SOCKET=str(c.sock))

            def sbatch(args: str) -> int:
                p = subprocess.run(f"sbatch {args}", shell=True, env=env, cwd=c.work,
                                   text=True, capture_output=True, timeout=60)
                assert p.returncode == 0, p.stderr
                m = re.match(r"^Submitted batch job (\d+)$", p.stdout.strip())
                assert m, p.stdout
                return int(m.group(1))

            # a time limit of 8 s: mails at 50 % and 80 %, and when it is reached
            tl = c.submit("sleep 60", name="tl", time_limit_s=8, extra={
                "mail_type": "TIME_LIMIT,TIME_LIMIT_50,TIME_LIMIT_80", "mail_user": "tl"})
            ok = sbatch("--mail-type=BEGIN,END --mail-user=ann -J mailme --wrap true")
            bad = sbatch("--mail-type=FAIL -J boom --wrap 'exit 3'")
            quiet = sbatch("--mail-type=BEGIN -J quiet --wrap true")  # BEGIN only
            for jid in (ok, bad, quiet):
                c.wait_done(jid)
            arr = sbatch("--array=0-4 --mail-type=BEGIN,END -J arr --wrap "
                         "'exit $((SLURM_ARRAY_TASK_ID % 2))'")  # one mail each, not five
            gone = sbatch("--array=0-5 --hold --mail-type=END -J gone --wrap true")
            p = subprocess.run(f"scancel {gone}", shell=True, env=env, text=True,
                               capture_output=True, timeout=60)
            assert p.returncode == 0, p.stderr
            dep = sbatch(f"--mail-type=INVALID_DEPEND -J dep --dependency=afterok:{bad} "
                         "--wrap true")  # boom failed: this can never start
            assert c.wait_done(tl)["state"] == "TIMEOUT"
            mails = wait_for(lambda: (lambda m: m if len(m) >= 11 else None)(rx.received()),
                             20, what="eleven mails")
            assert c.job(dep)["reason"] == "DependencyNeverSatisfied"
            c.client.cancel([dep])
            by = {(int(m["X-Corral-Job-Id"]), m["X-Corral-Mail-Type"]): (frm, to, m)
                  for frm, to, m in mails}
            assert set(by) == {(ok, "BEGIN"), (ok, "END"), (bad, "FAIL"), (quiet, "BEGIN"),
                               (tl, "TIME_LIMIT_50"), (tl, "TIME_LIMIT_80"),
                               (tl, "TIME_LIMIT"), (dep, "INVALID_DEPEND"), (arr, "BEGIN"),
                               (arr, "END"), (gone, "END")}, sorted(by)
            assert by[(arr, "BEGIN")][2]["Subject"] == \
                f"Slurm Array Summary Job_id={arr}_* ({arr}) Name=arr Began"
            assert by[(arr, "END")][2]["Subject"] == \
                f"Slurm Array Summary Job_id={arr}_* ({arr}) Name=arr Ended, Mixed, ExitCode [0-1]"
            assert by[(gone, "END")][2]["Subject"] == \
                f"Slurm Array Summary Job_id={gone}_* ({gone}) Name=gone Ended, CANCELLED, " \
                "ExitCode [0-0]"
            assert by[(dep, "INVALID_DEPEND")][2]["Subject"] == \
                f"Slurm Job_id={dep} Name=dep Invalid dependency"
            half = by[(tl, "TIME_LIMIT_50")][2]["Subject"]
            assert re.fullmatch(rf"Slurm Job_id={tl} Name=tl Reached 50% of time limit, Run "
                                r"time 00:00:0[4-6]", half), half
            most = by[(tl, "TIME_LIMIT_80")][2]["Subject"]
            assert re.fullmatch(rf"Slurm Job_id={tl} Name=tl Reached 80% of time limit, Run "
                                r"time 00:00:0[6-8]", most), most
            limit = by[(tl, "TIME_LIMIT")][2]
            assert limit["To"] == "tl@example.org" and re.fullmatch(
                rf"Slurm Job_id={tl} Name=tl Reached time limit, Run time 00:00:(0[89]|1\d)",
                limit["Subject"]), limit["Subject"]
            frm, to, began = by[(ok, "BEGIN")]
            assert (frm, to) == ("hpc@example.org", ["ann@example.org"])
            assert began["From"] == "hpc@example.org" and began["To"] == "ann@example.org"
            assert re.fullmatch(rf"Slurm Job_id={ok} Name=mailme Began, Queued time "
                                r"00:00:0\d", began["Subject"]), began["Subject"]
            assert began["Auto-Submitted"] == "auto-generated" and began["Message-ID"]
            body = began.get_content().replace("\r\n", "\n")
            assert f"Job ID: {ok}\n" in body and "State: RUNNING\n" in body, body
            ended = by[(ok, "END")][2]
            assert re.fullmatch(rf"Slurm Job_id={ok} Name=mailme Ended, Run time "
                                r"00:00:0\d, COMPLETED, ExitCode 0", ended["Subject"])
            failed = by[(bad, "FAIL")]
            assert failed[1] == ["root@example.org"]  # default: the job's user + domain
            assert failed[2]["Subject"].endswith(", FAILED, ExitCode 3")
            c.wait_done(dep)
            assert len(rx.received()) == 11  # no END for quiet, boom (FAIL only), tl, dep
        finally:
            c.down()
            shutil.rmtree(root, ignore_errors=True)


def _outbox_rows(db: Path) -> dict[str, tuple[str, int]]:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return {k: (s, a) for k, s, a in
                conn.execute("SELECT key, state, attempts FROM mail_outbox")}


def test_mail_owed_across_controller_kill9() -> None:
    """A job ends while the SMTP server refuses (421); the controller is killed with
    SIGKILL while the END mail is owed; the restarted controller sends it, once, and the
    BEGIN mail sent before the kill is not sent again."""
    root = Path(tempfile.mkdtemp(prefix="corral-smtp9-"))
    with Receiver() as rx:
        c = Cluster(root, config=TEST_CONFIG + (
            f'\n[scripts]\nmail_domain = "example.org"\n\n[mail]\nsmtp_host = "127.0.0.1"\n'
            f'smtp_port = {rx.port}\ntimeout_s = 5\nretry_s = 0.3\nretry_max_s = 0.6\n'
            'max_attempts = 1000\n'))
        c.up()
        try:
            gate = c.work / "go"
            jid = c.submit(f"while [ ! -e {gate} ]; do sleep 0.05; done", name="m9",
                           extra={"mail_type": "BEGIN,END", "mail_user": "ann"})
            wait_for(lambda: any(m["X-Corral-Mail-Type"] == "BEGIN"
                                 for _, _, m in rx.received()), 30, what="BEGIN mailed")
            rx.refusing = True  # the server refuses from now on (421)
            gate.write_text("")
            assert c.wait_done(jid)["state"] == "COMPLETED"
            db = c.state_dir / "corral.db"
            key = f"{jid}.0.END:ann@example.org"
            wait_for(lambda: (lambda r: r if r and r[1] >= 2 else None)(
                _outbox_rows(db).get(key)), 30, what="two failed attempts stored")
            pid = c.controller_pid()
            assert pid
            c.kill9(pid)
            assert _outbox_rows(db)[key][0] == "owed"
            assert [m["X-Corral-Mail-Type"] for _, _, m in rx.received()] == ["BEGIN"]
            rx.refusing = False
            c.start_controller()
            wait_for(lambda: len(rx.received()) >= 2, 30, what="END mailed after restart")
            wait_for(lambda: _outbox_rows(db).get(key, ("", 0))[0] == "sent", 30,
                     what="END marked sent")
            mails = rx.received()
            assert [(int(m["X-Corral-Job-Id"]), m["X-Corral-Mail-Type"])
                    for _, _, m in mails] == [(jid, "BEGIN"), (jid, "END")]
            end = mails[1][2]
            assert re.fullmatch(rf"Slurm Job_id={jid} Name=m9 Ended, Run time 00:00:\d\d, "
                                r"COMPLETED, ExitCode 0", end["Subject"]), end["Subject"]
            rows = _outbox_rows(db)
            assert rows[f"{jid}.0.BEGIN:ann@example.org"] == ("sent", 1)
            assert rows[key][0] == "sent" and rows[key][1] >= 3
            # a further controller restart owes and sends nothing more
            pid = c.controller_pid()
            assert pid
            c.kill9(pid)
            c.start_controller()
            c.wait_done(c.submit("true", name="after"))  # cycles ran since the restart
            assert len(rx.received()) == 2
            log = (c.state_dir / "log" / "controller.log").read_text()
            assert log.count("1 mails owed from before the restart") == 1, log[-3000:]
        finally:
            c.down()
            shutil.rmtree(root, ignore_errors=True)


def test_time_limit_share_not_mailed_again_after_kill9() -> None:
    """The restarted controller looks its running jobs over again and owes their
    time-limit share once more; its key is stored (sent), so it is not mailed twice."""
    root = Path(tempfile.mkdtemp(prefix="corral-smtp50-"))
    with Receiver() as rx:
        c = Cluster(root, config=TEST_CONFIG + (
            f'\n[mail]\nsmtp_host = "127.0.0.1"\nsmtp_port = {rx.port}\ntimeout_s = 5\n'))
        c.up()
        try:
            jid = c.submit("sleep 60", name="half", time_limit_s=16, extra={
                "mail_type": "TIME_LIMIT_50,TIME_LIMIT", "mail_user": "ann@example.org"})
            wait_for(lambda: rx.received(), 30, what="the 50 % mail")
            # delivery is at least once: a kill between the server's acceptance and the
            # "sent" commit sends it again (same Message-ID); this test is about the
            # share owed again after the restart, so the kill waits for the commit
            db = c.state_dir / "corral.db"
            key = f"{jid}.0.TIME_LIMIT_50:ann@example.org"
            wait_for(lambda: _outbox_rows(db).get(key, ("", 0))[0] == "sent", 30,
                     what="the 50 % mail marked sent")
            pid = c.controller_pid()
            assert pid
            c.kill9(pid)
            c.start_controller()
            assert c.wait_done(jid, timeout=40)["state"] == "TIMEOUT"
            mails = wait_for(lambda: (lambda m: m if len(m) >= 2 else None)(rx.received()),
                             20, what="the time-limit mail")
            assert [m["X-Corral-Mail-Type"] for _, _, m in mails] == [
                "TIME_LIMIT_50", "TIME_LIMIT"]
            log = (c.state_dir / "log" / "controller.log").read_text()
            assert f"mail {jid}.0.TIME_LIMIT_50:ann@example.org already stored" in log, \
                log[-3000:]
        finally:
            c.down()
            shutil.rmtree(root, ignore_errors=True)


def test_array_summary_covers_tasks_ended_before_a_kill9() -> None:
    """Task 0 of an array fails (exit 5) before the controller is killed; the other
    tasks end after its restart: the one summary mail still has the whole array's
    range and state (the ends before the restart are read from the store)."""
    root = Path(tempfile.mkdtemp(prefix="corral-smtparr-"))
    with Receiver() as rx:
        c = Cluster(root, config=TEST_CONFIG + (
            f'\n[mail]\nsmtp_host = "127.0.0.1"\nsmtp_port = {rx.port}\ntimeout_s = 5\n'))
        c.up()
        try:
            gate = c.work / "open"
            sub = c.submission(f"[ $SLURM_ARRAY_TASK_ID = 0 ] && exit 5; while [ ! -e {gate} "
                               "]; do sleep 0.05; done", name="arr9",
                               extra={"mail_type": "END", "mail_user": "ann@example.org"})
            sub = dataclasses.replace(sub, array="0-2")
            arr = int(c.client.submit_result(sub)["array_job_id"])
            assert c.wait_done(f"{arr}_0")["state"] == "FAILED"
            for t in (1, 2):
                c.wait_state(f"{arr}_{t}", "RUNNING")
            pid = c.controller_pid()
            assert pid
            c.kill9(pid)
            c.start_controller()
            gate.write_text("")
            for t in (1, 2):
                c.wait_done(f"{arr}_{t}")
            [(_, _, mail)] = wait_for(rx.received, 20, what="the summary mail")
            assert mail["Subject"] == \
                f"Slurm Array Summary Job_id={arr}_* ({arr}) Name=arr9 Ended, Mixed, " \
                "ExitCode [0-5]", mail["Subject"]
        finally:
            c.down()
            shutil.rmtree(root, ignore_errors=True)
