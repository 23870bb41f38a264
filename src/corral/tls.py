"""TLS of the controller's TCP listener: a cluster CA and the server certificate it signs.

``[controller] tls = true``: at its first start the controller creates, in its state
directory, ``ca.key`` (0600, never leaves it) and ``ca.pem`` (the CA certificate, public:
agents and remote clients verify the controller with it), then ``server.key`` (0600) and
``server.pem``, signed by the CA for the names and addresses the controller is reached by
(its listen host, this host's names and addresses, ``localhost``, ``[controller]
tls_names``). A later start reuses the CA and makes a new server certificate only when a
name is missing from it or it expires within 30 days.

Clients (``corral.client``, the shims, agents) build their context with
``client_context``: the CA file of ``CORRAL_CA_FILE`` (or ``--ca-file``), else
``<state dir>/ca.pem`` when it exists, else the system's trust store.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from collections.abc import Iterable
from pathlib import Path

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
SERVER_CERT = "server.pem"
SERVER_KEY = "server.key"
_RENEW_BEFORE = datetime.timedelta(days=30)


def _write_private(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def server_names(listen_host: str, extra: Iterable[str] = ()) -> list[str]:
    """The DNS names and IP addresses the server certificate must cover."""
    names: list[str] = []

    def add(n: str) -> None:
        n = n.strip().strip("[]")
        if n and n not in names:
            names.append(n)

    if listen_host not in ("", "0.0.0.0", "::"):
        add(listen_host)
    host = socket.gethostname()
    for n in (host, host.split(".")[0], socket.getfqdn(), "localhost", "127.0.0.1", "::1"):
        add(n)
    if listen_host in ("", "0.0.0.0", "::"):
        try:
            for info in socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM):
                add(str(info[4][0]))
        except OSError:
            pass
    for n in extra:
        add(n)
    return names


def _san(names: Iterable[str]) -> list[object]:
    from cryptography import x509

    out: list[object] = []
    for n in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def ensure_server_files(state_dir: Path, names: list[str],
                        cluster: str = "corral") -> tuple[Path, Path, Path]:
    """Create (or reuse) the CA and a server certificate covering ``names``; returns the
    paths of the server certificate, its key and the CA certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_cert_p, ca_key_p = state_dir / CA_CERT, state_dir / CA_KEY
    srv_cert_p, srv_key_p = state_dir / SERVER_CERT, state_dir / SERVER_KEY
    pem = serialization.Encoding.PEM
    no_pw = serialization.NoEncryption()
    pkcs8 = serialization.PrivateFormat.PKCS8
    if ca_cert_p.exists() and ca_key_p.exists():
        ca_cert = x509.load_pem_x509_certificate(ca_cert_p.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_p.read_bytes(), None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca_key_p}: not an EC private key")
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster} cluster CA")])
        ca_cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
        _write_private(ca_key_p, ca_key.private_bytes(pem, pkcs8, no_pw), 0o600)
        _write_private(ca_cert_p, ca_cert.public_bytes(pem), 0o644)
        for stale in (srv_cert_p, srv_key_p):  # signed by a CA that is gone
            stale.unlink(missing_ok=True)
    if srv_cert_p.exists() and srv_key_p.exists():
        cur = x509.load_pem_x509_certificate(srv_cert_p.read_bytes())
        try:
            sans = cur.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have = set(_san(names)) <= set(sans)
        except x509.ExtensionNotFound:
            have = False
        if have and cur.issuer == ca_cert.subject \
                and cur.not_valid_after_utc - now > _RENEW_BEFORE:
            return srv_cert_p, srv_key_p, ca_cert_p
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(_san(names)),  # type: ignore[arg-type]
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256()))
    _write_private(srv_key_p, key.private_bytes(pem, pkcs8, no_pw), 0o600)
    _write_private(srv_cert_p, cert.public_bytes(pem), 0o644)
    return srv_cert_p, srv_key_p, ca_cert_p


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def default_ca_file(state_dir: str | os.PathLike[str] | None = None) -> str | None:
    """``CORRAL_CA_FILE``, else ``<state_dir>/ca.pem`` when it exists, else None."""
    env = os.environ.get("CORRAL_CA_FILE")
    if env:
        return env
    if state_dir is not None:
        p = os.path.join(state_dir, CA_CERT)
        if os.path.exists(p):
            return p
    return None


def client_context(ca_file: str | None) -> ssl.SSLContext:
    """A context that verifies the controller against ``ca_file`` (None: the system's
    trust store). Raises ``OSError`` when the file cannot be read."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx
