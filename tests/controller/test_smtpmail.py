"""``corral.controller.smtpmail`` against a real SMTP receiver on loopback: STARTTLS with a
verified certificate and AUTH; a bad password, a refused recipient, a busy server and a
dead one raise, classified as worth a retry or not; the Message-ID made from the mail's
key; and the ``[mail]`` checks of ``corral.toml``."""

from __future__ import annotations

import smtplib
from pathlib import Path

import pytest

from corral.config.lifecycle import MailConfig
from corral.config.load import ConfigError, parse_config
from corral.controller import smtpmail
from corral.tls import ensure_server_files, server_context
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


def test_failures_raise_and_are_classified(tmp_path: Path) -> None:
    """One attempt raises; ``permanent`` tells which failures are not worth a retry (the
    outbox's retries: tests/controller/test_outbox.py)."""
    cert, key, ca = ensure_server_files(tmp_path, ["127.0.0.1"])
    (tmp_path / "pw").write_text("wrong\n")
    with Receiver(tls=server_context(cert, key), login=("corral", "right")) as rx:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=rx.port, starttls=True,
                         ca_file=str(ca), username="corral",
                         password_file=str(tmp_path / "pw"))
        with pytest.raises(smtplib.SMTPAuthenticationError) as bad_login:
            smtpmail.deliver(cfg, _msg(cfg))
        assert not smtpmail.permanent(bad_login.value)  # a fixed password_file cures it
    with Receiver() as rx:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=rx.port)
        rx.rcpt_code = 550
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            smtpmail.deliver(cfg, _msg(cfg))
        assert smtpmail.permanent(refused.value)
        rx.rcpt_code, rx.refuse = 250, 1
        with pytest.raises(smtplib.SMTPException) as busy:  # 421 at the greeting
            smtpmail.deliver(cfg, _msg(cfg))
        assert not smtpmail.permanent(busy.value)
        assert rx.received() == []
    with Receiver(hang=True) as dead:
        cfg = MailConfig(smtp_host="127.0.0.1", smtp_port=dead.port, timeout_s=0.3)
        with pytest.raises((TimeoutError, smtplib.SMTPServerDisconnected)) as slow:
            smtpmail.deliver(cfg, _msg(cfg))
        assert not smtpmail.permanent(slow.value)


def test_message_id_from_the_key() -> None:
    cfg = MailConfig(smtp_host="mx", from_address="hpc@ex.org")
    args = (cfg, "ann@ex.org", "s", {}, 7, "END")
    one = smtpmail.build_message(*args, key="7.0.END:ann@ex.org", when=1e9)
    again = smtpmail.build_message(*args, key="7.0.END:ann@ex.org", when=1e9)
    other = smtpmail.build_message(*args, key="7.1.END:ann@ex.org", when=1e9)
    assert one["Message-ID"] == again["Message-ID"] != other["Message-ID"]
    assert one["Message-ID"].endswith("@ex.org>") and "2001" in one["Date"]


@pytest.mark.parametrize(("mail", "scripts", "key"), [
    ('smtp_host = "mx"', 'mail_prog = "/usr/bin/mail"', "mail.smtp_host"),
    ('smtp_host = "mx"\nusername = "u"\npassword_file = "/pw"', "", "mail.username"),
    ('smtp_host = "mx"\nstarttls = true\nusername = "u"', "", "mail.password_file"),
    ('smtp_host = "mx"\nsmtp_port = 0', "", "mail.smtp_port"),
    ('smtp_host = "mx"\nfrom_address = "not an address"', "", "mail.from_address"),
    ('smtp_host = "mx"\nca_file = "ca.pem"', "", "mail.ca_file"),
    ('smtp_hots = "mx"', "", "mail.smtp_hots"),
    ('smtp_host = "mx"\nretry_s = 0', "", "mail.retry_s"),
    ('retry_s = 10\nretry_max_s = 5', "", "mail.retry_max_s"),
    ('max_attempts = 0', "", "mail.max_attempts"),
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
