"""``corral.controller.smtpmail`` against a real SMTP receiver on loopback: STARTTLS with a
verified certificate and AUTH, a bad password and a dead server logged without blocking
the caller, the queue bound; and the ``[mail]`` checks of ``corral.toml``."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from corral.config.lifecycle import MailConfig
from corral.config.load import ConfigError, parse_config
from corral.controller import smtpmail
from corral.tls import ensure_server_files, server_context
from tests.e2e.cluster import wait_for
from tests.smtpd import Receiver


def _msg(cfg: MailConfig, to: str = "ann@example.org") -> smtpmail.EmailMessage:
    return smtpmail.build_message(cfg, to, "Slurm Job_id=7 Name=x Began, Queued time "
                                  "00:00:01", {"Job ID": "7", "Stdout": ""}, 7, "BEGIN")


def test_starttls_and_login_deliver(tmp_path: Path) -> None:
    cert, key, ca = ensure_server_files(tmp_path, ["127.0.0.1", "localhost"])
    (tmp_path / "pw").write_text("s3cret\n")
    with Receiver(tls=server_context(cert, key), login=("corral", "s3cret")) as rx:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=rx.port, starttls=True,
                         ca_file=str(ca), username="corral",
                         password_file=str(tmp_path / "pw"), from_address="hpc@ex.org")
        smtpmail.deliver(cfg, _msg(cfg))
        [(frm, to, m)] = rx.received()
        assert (frm, to) == ("hpc@ex.org", ["ann@example.org"])
        assert m["Subject"] == "Slurm Job_id=7 Name=x Began, Queued time 00:00:01"
        assert m["X-Corral-Job-Id"] == "7" and m["X-Corral-Mail-Type"] == "BEGIN"
        assert "Job ID: 7" in m.get_content() and "Stdout" not in m.get_content()


def test_unverified_server_refused(tmp_path: Path) -> None:
    cert, key, _ = ensure_server_files(tmp_path, ["127.0.0.1"])
    with Receiver(tls=server_context(cert, key)) as rx:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=rx.port, starttls=True)
        with pytest.raises(OSError):  # ssl.SSLCertVerificationError: not our CA
            smtpmail.deliver(cfg, _msg(cfg))
        assert rx.received() == []


def test_failures_are_logged_and_never_block(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="corral.mail")
    cert, key, ca = ensure_server_files(tmp_path, ["127.0.0.1"])
    (tmp_path / "pw").write_text("wrong\n")
    with Receiver(tls=server_context(cert, key), login=("corral", "right")) as rx:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=rx.port, starttls=True,
                         ca_file=str(ca), username="corral",
                         password_file=str(tmp_path / "pw"))
        assert smtpmail.send(cfg, _msg(cfg), 7)
        wait_for(lambda: "mail to ann@example.org through" in caplog.text, 10,
                 what="the failed login logged")
        assert "535" in caplog.text and rx.received() == []
    caplog.clear()
    with Receiver(hang=True) as dead:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=dead.port, timeout_s=0.5,
                         max_queued=2)
        t0 = time.monotonic()
        sent = [smtpmail.send(cfg, _msg(cfg, f"u{i}@ex.org"), i) for i in range(3)]
        assert time.monotonic() - t0 < 0.2  # queued, not sent, by the caller
        assert sent == [True, True, False]  # the third is over max_queued
        assert "dropped: 2 mails already wait" in caplog.text
        wait_for(lambda: smtpmail.queued() == 0, 10, what="both timed out")
        assert caplog.text.count("timed out") == 2, caplog.text


@pytest.mark.parametrize(("mail", "scripts", "key"), [
    ('smtp_host = "mx"', 'mail_prog = "/usr/bin/mail"', "mail.smtp_host"),
    ('smtp_host = "mx"\nusername = "u"\npassword_file = "/pw"', "", "mail.username"),
    ('smtp_host = "mx"\nstarttls = true\nusername = "u"', "", "mail.password_file"),
    ('smtp_host = "mx"\nsmtp_port = 0', "", "mail.smtp_port"),
    ('smtp_host = "mx"\nfrom_address = "not an address"', "", "mail.from_address"),
    ('smtp_host = "mx"\nca_file = "ca.pem"', "", "mail.ca_file"),
    ('smtp_hots = "mx"', "", "mail.smtp_hots"),
])
def test_mail_config_checks(mail: str, scripts: str, key: str) -> None:
    import tomllib

    text = f"[scripts]\n{scripts}\n[mail]\n{mail}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(tomllib.loads(text))
    assert err.value.key == key, str(err.value)


def test_mail_config_ok() -> None:
    import tomllib

    cfg = parse_config(tomllib.loads('[mail]\nsmtp_host = "mx.example.org"\nsmtp_port = 587\n'
                                     'starttls = true\nusername = "u"\n'
                                     'password_file = "/etc/corral/smtp.pw"\n'))
    assert (cfg.mail.smtp_host, cfg.mail.smtp_port, cfg.mail.starttls) == (
        "mx.example.org", 587, True)
