"""The compiled shim launcher (launcher.c) against the Python one (lean.py).

Two levels: a scripted controller on a Unix socket (and TCP), which records each request
byte for byte, so both launchers must send the same body and print the same answer for
the same reply, including the awkward ones (files and stdin asked for, HTTP errors,
malformed frames, 404 from an older controller, long argv and environment); and a real
`corral up` cluster, where a matrix of commands (errors included) must print the same
bytes and exit codes through both.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.shims.install import InstallResult, install, is_ours
from corral.shims.lean import encode_frame
from tests.shims.harness import ShimCluster


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(compiled launchers, Python launchers)."""
    base = tmp_path_factory.mktemp("launchers")
    res = install(base / "c", path_env="")
    if res.compile_error is not None:
        pytest.skip(f"no compiled launcher here: {res.compile_error}")
    install(base / "py", path_env="", compiled=False)
    return base / "c", base / "py"


class Scripted:
    """A controller stand-in: answers each request with the next scripted reply."""

    def __init__(self, path: str | None = None) -> None:
        self.requests: list[tuple[bytes, bytes]] = []
        self.replies: list[bytes] = []
        if path is None:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.bind(("127.0.0.1", 0))
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                m = re.search(rb"Content-Length: (\d+)", head)
                want = int(m.group(1)) if m else 0
                while len(body) < want:
                    chunk = conn.recv(1 << 20)
                    if not chunk:
                        break
                    body += chunk
                self.requests.append((head, body))
                reply = self.replies.pop(0) if self.replies else http(500, b"no reply")
                conn.sendall(reply)

    def close(self) -> None:
        self.sock.close()


def http(status: int, body: bytes, chunked: bool = False) -> bytes:
    if chunked:
        mid = len(body) // 2
        parts = [body[:mid], body[mid:]]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\n\r\n"
        return (b"HTTP/1.1 %d X\r\ntransfer-encoding: Chunked\r\n\r\n" % status) + payload
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


@pytest.fixture()
def scripted(tmp_path: Path) -> Iterator[Scripted]:
    s = Scripted(str(tmp_path / "ctl.sock"))
    yield s
    s.close()


def base_env(sock: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/nonexistent",
            "CORRAL_SOCKET": sock}


def both(bins: tuple[Path, Path], server: Scripted, replies: list[bytes], cmd: str,
         argv: list[str], env: dict[str, str] | dict[bytes, bytes], cwd: Path,
         stdin: bytes | None = None) -> list[tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]]:
    """Run ``cmd`` through each launcher against the same replies; what each did."""
    out = []
    for d in bins:
        server.requests.clear()
        server.replies[:] = list(replies)
        p = subprocess.run([str(d / cmd), *argv], env=env, cwd=cwd, input=stdin or b"",
                           capture_output=True, timeout=60)
        out.append((p.returncode, p.stdout, p.stderr, list(server.requests)))
    return out


def test_same_request_and_answer(bins: tuple[Path, Path], scripted: Scripted,
                                 tmp_path: Path) -> None:
    env = base_env(str(scripted.sock.getsockname()))
    env.update({"SBATCH_X": "é \"quoted\" \\ tab\t\x7f \U0001f600", "EMPTY": ""})
    reply = http(200, encode_frame(3, "out é\n", "err\n"))
    c, py = both(bins, scripted, [reply], "sbatch",
                 ["-J", "na\u00efve\n", "--wrap=echo \"$X\"", ""], env, tmp_path)
    assert c == py
    assert c[0:3] == (3, "out é\n".encode(), b"err\n")
    (head, body), = c[3]
    assert b"POST /api/v1/shim/exec HTTP/1.1\r\n" in head
    assert body.startswith(b'{"v":1,"cmd":"sbatch","argv":["-J","na\\u00efve\\n"')


def test_undecodable_bytes_and_duplicate_names_in_the_environment(
        bins: tuple[Path, Path], scripted: Scripted, tmp_path: Path) -> None:
    env = {k.encode(): v.encode() for k, v in base_env(str(scripted.sock.getsockname())).items()}
    env[b"BAD\xff"] = b"\xe2\x82 half \xed\xa0\x80 surrogate \xf4\x90\x80\x80 too big"
    reply = http(200, encode_frame(0, "", ""))
    c, py = both(bins, scripted, [reply], "squeue", ["-u", "\udcfe".encode(
        "utf-8", "surrogateescape").decode("latin-1")], env, tmp_path)
    assert c == py
    assert b"\\udcff" in c[3][0][1] and b"\\udce2\\udc82" in c[3][0][1]


def test_files_and_stdin_asked_for(bins: tuple[Path, Path], scripted: Scripted,
                                   tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_bytes(b"#!/bin/sh\necho \xff\x00ok\n")
    (tmp_path / "sub").mkdir()
    env = base_env(str(scripted.sock.getsockname()))
    first = http(200, encode_frame(0, "", "", ["-", "job.sh", "missing.sh", "sub/", "job.sh"]))
    second = http(200, encode_frame(0, "", "", [f"{tmp_path}/job.sh/"]))
    done = http(200, encode_frame(0, "Submitted batch job 7\n", ""))
    c, py = both(bins, scripted, [first, second, done], "sbatch", ["job.sh"], env, tmp_path,
                 stdin=b"#!/bin/sh\n#SBATCH -J from-stdin\n")
    assert c == py
    assert c[1] == b"Submitted batch job 7\n" and len(c[3]) == 3
    last = c[3][2][1]
    assert b'"stdin":"#!/bin/sh\\n#SBATCH -J from-stdin\\n"' in last
    assert b'"missing.sh":[false,"No such file or directory"]' in last
    assert b'"sub/":[false,"Is a directory"]' in last
    assert b'job.sh/":[false,"Not a directory"]' in last
    assert b'"job.sh":[true,"#!/bin/sh\\necho \\udcff\\u0000ok\\n"]' in last


def test_controller_that_keeps_asking(bins: tuple[Path, Path], scripted: Scripted,
                                      tmp_path: Path) -> None:
    ask = http(200, encode_frame(0, "", "", ["x"]))
    c, py = both(bins, scripted, [ask] * 4, "qsub", ["x"], base_env(
        str(scripted.sock.getsockname())), tmp_path)
    assert c == py
    assert c[2] == b"qsub: error: the Corral controller kept asking for input files\n"


@pytest.mark.parametrize("reply", [
    http(500, "  Internal \u00e9rror \xff\n".encode("latin-1") + b"x" * 900),
    http(403, b'{"detail": "not you"}'),
    http(200, b"CRSH2 0 0 0 0\n"),
    http(200, b"no header line"),
    http(200, encode_frame(0, "chunked out\n", "chunked err\n"), chunked=True),
    http(200, b"CRSH1 -1 100 0 0\nshort"),
    http(200, encode_frame(300, "", "")),
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
    b"garbage\r\n\r\n",
    b"",
])
def test_odd_replies(bins: tuple[Path, Path], scripted: Scripted, tmp_path: Path,
                     reply: bytes) -> None:
    c, py = both(bins, scripted, [reply], "sinfo", [], base_env(
        str(scripted.sock.getsockname())), tmp_path)
    assert c[:3] == py[:3]


def test_older_controller_and_no_controller_fall_back_to_python(
        bins: tuple[Path, Path], scripted: Scripted, tmp_path: Path) -> None:
    # 404: the compiled launcher hands over to the Python shim, which asks again
    env = base_env(str(scripted.sock.getsockname()))
    scripted.replies[:] = [http(404, b"{}"), http(200, encode_frame(0, "via python\n", ""))]
    p = subprocess.run([str(bins[0] / "scontrol"), "ping"], env=env, cwd=tmp_path,
                       capture_output=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, b"via python\n")
    assert len(scripted.requests) == 2 and scripted.requests[0][1] == scripted.requests[1][1]
    # nobody listening: the same words as the Python shim (which writes them)
    env["CORRAL_SOCKET"] = str(tmp_path / "nobody.sock")
    c, py = both(bins, scripted, [], "squeue", [], env, tmp_path)
    assert c == py and c[0] == 1
    assert c[2].startswith(b"squeue: error: cannot reach the Corral controller at ")


def test_tcp_with_token(bins: tuple[Path, Path], tmp_path: Path) -> None:
    server = Scripted()
    try:
        port = server.sock.getsockname()[1]
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8",
               "CORRAL_URL": f"http://127.0.0.1:{port}/", "CORRAL_TOKEN": "tok.en-1"}
        c, py = both(bins, server, [http(200, encode_frame(0, "ok\n", ""))], "qstat", [], env,
                     tmp_path)
        assert c == py
        assert b"Authorization: Bearer tok.en-1\r\n" in c[3][0][0]
    finally:
        server.close()


def test_long_argv_and_environment(bins: tuple[Path, Path], scripted: Scripted,
                                   tmp_path: Path) -> None:
    env = base_env(str(scripted.sock.getsockname()))
    for i in range(500):
        env[f"V{i}"] = "v" * 200 + "\u00e9"
    env["HUGE"] = "h" * 100_000
    argv = [f"--comment={'a' * 1000}\u00e9"] * 200 + ["x" * 120_000]
    reply = http(200, encode_frame(0, "o" * 3_000_000, "e" * 10))
    c, py = both(bins, scripted, [reply], "sacct", argv, env, tmp_path)
    assert c == py and len(c[1]) == 3_000_000


def test_ignores_a_term_signal_only_where_python_does(bins: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    """scancel/scontrol/qdel finish their call when their own job is signalled."""
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # listens, never answers
    mute.bind(str(tmp_path / "mute.sock"))
    mute.listen(8)
    env = base_env(str(tmp_path / "mute.sock"))
    try:
        for cmd, ignored in (("scancel", True), ("qdel", True), ("squeue", False)):
            p = subprocess.Popen([str(bins[0] / cmd)], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                fields: dict[str, str] = {}
                for _ in range(20000):  # until it has exec'd and waits for the answer
                    text = Path(f"/proc/{p.pid}/status").read_text()
                    fields = dict(line.split(":\t", 1) for line in text.splitlines()
                                  if ":\t" in line)
                    if fields.get("Name") == cmd and fields.get("State", "").startswith("S"):
                        break
                sig_ign = int(fields["SigIgn"], 16)
                assert bool(sig_ign & (1 << 14)) is ignored, (cmd, fields["SigIgn"])
            finally:
                p.kill()
                p.wait()
    finally:
        mute.close()


def test_install_falls_back_without_a_compiler(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    res: InstallResult = install(tmp_path / "bin", path_env="")
    assert res.compiled == [] and res.compile_error and "no-such-cc" in res.compile_error
    for cmd in res.written:
        assert (tmp_path / "bin" / cmd).read_text().startswith("#!")
    monkeypatch.delenv("CC")
    res = install(tmp_path / "bin", path_env="")  # ours: replaced by compiled ones silently
    assert res.compile_error is None and "srun" in res.compiled and "salloc" not in res.compiled
    assert is_ours(tmp_path / "bin" / "sbatch")
    assert (tmp_path / "bin" / "sbatch").read_bytes()[:4] == b"\x7fELF"


# ---- a real cluster -------------------------------------------------------------------------

SUBMIT = re.compile(rb"^Submitted batch job (\d+)\n$")


# the first line of a long listing (``sinfo -l``): the time it was printed, which two
# runs a moment apart may print a second apart
CLOCK_LINE = re.compile(rb"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4}\n")


def same_but_clock(r: tuple[int, bytes, bytes]) -> tuple[int, bytes, bytes]:
    return r[0], CLOCK_LINE.sub(b"<clock>\n", r[1]), r[2]


def test_real_cluster_matrix(shim_cluster: ShimCluster, bins: tuple[Path, Path],
                             tmp_path: Path) -> None:
    c_bin, py_bin = bins
    env = shim_cluster.env

    def run(d: Path, argv: list[str], stdin: bytes = b"") -> tuple[int, bytes, bytes]:
        p = subprocess.run([str(d / argv[0]), *argv[1:]], env=env, cwd=tmp_path, input=stdin,
                           capture_output=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH -J matrix\nsleep 600\n")
    held = run(c_bin, ["sbatch", "--hold", "--parsable", "job.sh"])
    jid = held[1].strip().decode()
    assert held[0] == 0 and jid.isdigit(), held
    matrix = [
        ["squeue", "-j", jid], ["squeue", "-h", "-j", jid, "-o", "%i %t %j"], ["squeue", "-u",
        "nobody"], ["scontrol", "show", "job", jid], ["sacct", "-j", jid, "-P", "-o",
        "JobID,JobName,State"], ["sinfo"], ["sinfo", "-N", "-l"], ["qstat", jid],
        ["sbatch", "--bogus"], ["sbatch", "-t", "nonsense", "--wrap=true"], ["sbatch",
        "missing.sh"], ["squeue", "-j", "999999999"], ["scancel", "notanid"],
        ["scontrol", "show", "job", "999999999"], ["qdel", "999999999"], ["sacct", "--bogus"],
        ["squeue", "--help"], ["sinfo", "--version"], ["qsub", "-l", "walltime=bad", "job.sh"],
    ]
    for argv in matrix:
        assert same_but_clock(run(c_bin, argv)) == same_but_clock(run(py_bin, argv)), argv
    # submissions: the same answer but for the new job's id; the script from stdin
    script = b"#!/bin/sh\n#SBATCH -J from-stdin --hold\ntrue\n"
    a, b = run(c_bin, ["sbatch"], script), run(py_bin, ["sbatch"], script)
    ma, mb = SUBMIT.match(a[1]), SUBMIT.match(b[1])
    assert a[0] == b[0] == 0 and ma and mb and a[2] == b[2] == b"", (a, b)
    with shim_cluster.client() as cl:
        ja, jb = cl.job(ma.group(1).decode()), cl.job(mb.group(1).decode())
    assert ja["name"] == jb["name"] == "from-stdin"
    for argv in (["scancel", ma.group(1).decode()], ["scancel", mb.group(1).decode()]):
        assert run(c_bin, argv) == (0, b"", b"")
    assert run(c_bin, ["scancel", jid]) == (0, b"", b"")


def test_tcp_token_against_a_real_controller(bins: tuple[Path, Path], tmp_path: Path) -> None:
    """Over TCP the controller knows the caller only by the token: none or a bad one is
    refused (HTTP 401) with the same words by both launchers; a good one works."""
    import json
    import shutil
    import tempfile

    from tests.e2e.cluster import TEST_CONFIG, Cluster

    root = Path(tempfile.mkdtemp(prefix="corral-launcher-tcp-"))
    c = Cluster(root, TEST_CONFIG.replace("[controller]\n",
                                          '[controller]\nlisten = "127.0.0.1:0"\n', 1))
    c.up()
    try:
        url = json.loads((c.state_dir / "controller.json").read_text())["url"]
        assert url.startswith("http://127.0.0.1:")
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(tmp_path),
               "CORRAL_URL": url}
        outs = []
        for token in ("", "not-a-token", c.client.token()):
            e = {**env, "CORRAL_TOKEN": token}
            got = [subprocess.run([str(d / "squeue"), "-h", "-o", "%i"], env=e, cwd=tmp_path,
                                  capture_output=True, timeout=60) for d in bins]
            assert (got[0].returncode, got[0].stdout, got[0].stderr) == \
                (got[1].returncode, got[1].stdout, got[1].stderr)
            outs.append(got[0])
        assert outs[0].returncode == 1 and b"answered HTTP 401" in outs[0].stderr
        assert outs[1].returncode == 1 and b"answered HTTP 401" in outs[1].stderr
        assert outs[2].returncode == 0, outs[2].stderr
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_sbatch_wait_takes_the_thread_path(shim_cluster: ShimCluster, bins: tuple[Path, Path],
                                           tmp_path: Path) -> None:
    """Submissions run on the controller's loop, but ``--wait`` polls afterwards: it must
    still work (and the loop must not be blocked meanwhile: the job has to run)."""
    p = subprocess.run([str(bins[0] / "sbatch"), "--wait", "-o", "/dev/null", "--wrap",
                        "exit 3"], env=shim_cluster.env, cwd=tmp_path, capture_output=True,
                       timeout=60)
    assert p.returncode == 3, p.stderr
    assert SUBMIT.match(p.stdout), p.stdout


def test_a_request_over_the_bound_is_refused(shim_cluster: ShimCluster,
                                             bins: tuple[Path, Path], tmp_path: Path) -> None:
    """A script too large for one request ([controller] max_request_mb, 8 MiB): refused
    before it is read whole, through both launchers, nothing submitted. Which words the
    caller sees is a race of the kernel's, not of the launchers: the controller answers 413
    and closes with the rest of the body unread; the launcher's write then fails, and its
    read gets the answer or, when the close reset the connection first, nothing (then
    "Broken pipe"). Both launchers read the answer when it is there."""
    (tmp_path / "big.sh").write_text("#!/bin/sh\n" + "# padding\n" * 900_000)
    with shim_cluster.client() as c:
        before = len(c.jobs())
    refused = b"answered HTTP 413"
    for d in bins:
        p = subprocess.run([str(d / "sbatch"), "big.sh"], env=shim_cluster.env, cwd=tmp_path,
                           capture_output=True, timeout=60)
        assert p.returncode == 1 and p.stdout == b"", p
        # the 413 answer, or (the kernel's race) a cut connection, or uvicorn's 400 for
        # the unread rest of the body taken as a next request: refused in every case
        assert (b"larger than 8 MiB" in p.stderr and refused in p.stderr) or p.stderr == (
            b"sbatch: error: lost the connection to the Corral controller: [Errno 32] "
            b"Broken pipe\n") or b"answered HTTP 400" in p.stderr, p.stderr
    with shim_cluster.client() as c:
        assert len(c.jobs()) == before
