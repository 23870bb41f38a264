"""TLS on the controller's TCP listener (``[controller] tls = true``): the cluster CA is
created at first start, clients verify the controller against it (a different CA is
refused with a certificate error), and a node joins over wss with the CA that
``corral token --agent`` puts in its line. The Unix socket stays plain HTTP."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client import Client, CorralError
from corral.tls import ensure_server_files
from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, corral, wait_for

TLS_CONFIG = TEST_CONFIG.replace(
    "[controller]\n", '[controller]\nlisten = "127.0.0.1:0"\ntls = true\n', 1)


@pytest.fixture()
def tls_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, TLS_CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _url(c: Cluster) -> str:
    url = json.loads((c.state_dir / "controller.json").read_text())["url"]
    assert isinstance(url, str)
    return url


def test_https_with_the_cluster_ca_and_refusal_of_another(tls_cluster: Cluster) -> None:
    c = tls_cluster
    sd = c.state_dir
    url = _url(c)
    assert url.startswith("https://127.0.0.1:")
    for name in ("ca.key", "server.key"):
        assert stat.S_IMODE(os.stat(sd / name).st_mode) == 0o600
    assert (sd / "ca.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")
    token = c.client.token()  # over the Unix socket: plain HTTP as before

    with Client(url=url, token=token, ca_file=str(sd / "ca.pem")) as cl:
        assert cl.whoami()["user"]
        assert cl.ping()

    other = Path(tempfile.mkdtemp(prefix="corral-otherca-"))
    try:
        ensure_server_files(other, ["localhost"], "impostor")
        with pytest.raises(CorralError) as err, \
                Client(url=url, token=token, ca_file=str(other / "ca.pem")) as cl:
            cl.whoami()
        assert err.value.code == "tls"
        assert "certificate" in str(err.value) and "CORRAL_CA_FILE" in str(err.value)

        # the shims: CORRAL_URL=https://... with CORRAL_CA_FILE
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=url, CORRAL_TOKEN=token, CORRAL_CA_FILE=str(sd / "ca.pem"))
        shim = [sys.executable, "-c", "from corral.shims.lean import main; main('squeue')"]
        r = subprocess.run(shim, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "JOBID" in r.stdout
        env["CORRAL_CA_FILE"] = str(other / "ca.pem")
        r = subprocess.run(shim, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode != 0
        assert "certificate" in r.stderr
    finally:
        shutil.rmtree(other, ignore_errors=True)

    # plain HTTP to the TLS port gets nowhere
    with pytest.raises(CorralError), Client(url="http://" + url[8:], token=token,
                                            timeout_s=5) as cl:
        cl.whoami()


def test_agent_joins_over_wss_with_the_ca_from_the_join_line(tls_cluster: Cluster) -> None:
    c = tls_cluster
    r = corral("token", "--agent", "--state-dir", str(c.state_dir))
    assert r.returncode == 0, r.stderr
    words = shlex.split(r.stdout.strip("\n"))
    assert words[0].startswith("CORRAL_CLUSTER_KEY=") and words[1].startswith("CORRAL_CA_CERT=")
    assert words[2:] == ["corral", "agent", "--controller", _url(c)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    for w in words[:2]:
        var, _, value = w.partition("=")
        env[var] = value
    env["HOME"] = str(c.root / "home")  # no default state dir with a ca.pem in it
    log = open(c.root / "joined.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", ENTRY, *words[3:], "--state-dir",
                          str(c.root / "joined-agent"), "--name", "joined"],
                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    c.extra_procs.append(p)
    node = wait_for(lambda: next((n for n in c.client.nodes()
                                  if n["name"] == "joined" and n["connected"]), None), 30,
                    what="the joined node to register over wss")
    assert node["address"] == "127.0.0.1"
    assert (c.root / "joined-agent" / "ca.pem").read_text() == \
        (c.state_dir / "ca.pem").read_text()
