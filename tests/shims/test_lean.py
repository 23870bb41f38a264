"""The lean launcher's wire pieces, and its import budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from corral.shims.lean import decode_frame, encode_frame, encode_json
from corral.shims.server import handle_exec
from tests.shims.fakes import FakeClient

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_json_encoder_matches_json() -> None:
    obj = {"cmd": "sbatch", "argv": ["-J", "n\u00e9\n\"x\"", "\udcff"], "n": 3, "t": True,
           "f": False, "z": None, "files": {"a.sh": [True, "#!/bin/sh\n"]}}
    assert json.loads(encode_json(obj)) == obj


def test_frame_round_trip() -> None:
    frame = encode_frame(3, "out\u00e9", "err\n", ["-", "job.sh"])
    assert decode_frame(frame) == (3, "out\u00e9".encode(), b"err\n", ["-", "job.sh"])
    assert decode_frame(encode_frame(0, "", "")) == (0, b"", b"", [])


def test_server_asks_for_the_script_then_submits() -> None:
    c = FakeClient()
    req = {"v": 1, "cmd": "sbatch", "argv": ["job.sh"], "cwd": "/tmp", "env": {},
           "files": {}, "stdin": None}
    assert decode_frame(handle_exec(encode_json(req).encode(), 0, c)) == (0, b"", b"",
                                                                          ["job.sh"])
    assert c.submitted == []
    req["files"] = {"job.sh": [True, "#!/bin/sh\necho hi\n"]}
    rc, out, err, need = decode_frame(handle_exec(encode_json(req).encode(), 0, c))
    assert (rc, out, need) == (0, b"Submitted batch job 100\n", [])
    bad = decode_frame(handle_exec(b'{"cmd": "rm"}', 0, c))
    assert bad[0] == 2 and b"unknown shim command" in bad[2]


def test_import_budget() -> None:
    """The launcher imports nothing heavy: no json, socket, typing, dataclasses, corral model."""
    code = ("import sys; sys.path.insert(0, %r); import corral.shims.lean; "
            "print(' '.join(sorted(sys.modules)))" % SRC)
    mods = set(subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True,
                              text=True, check=True).stdout.split())
    heavy = {"json", "socket", "typing", "dataclasses", "enum", "re", "corral.core",
             "corral.submission", "corral.client"}
    assert not heavy & mods, heavy & mods
