"""Image pulls the agent runs for the controller, each in a child process
(``corral.agent.pullchild.pull_main``), and what it reports about them.

Two kinds, one mechanism:

- ``corral image pull REF``: refreshes the reference (the registry is asked again);
- an **early pull** (``early``): the controller's pre-pull of a pending job's image on
  the node the scheduler plans it on (``corral.controller.prefetch``). It never
  refreshes: an image already cached is left as it is.

The agent's loop never waits for a registry: a child does the pull, writes one line per
progress note (``P <note>``), then the digest (exit 0) or ``corral image pull: <why>``
(exit 1) on its merged stdout/stderr, which ``poll`` reads without blocking. One child
per reference: a second request for a reference being pulled joins the first (so a
``corral image pull`` asked while an early pull of that reference runs does not refresh
it again; ask once more when it has ended). At most
``MAX_PULLS`` children at once; a request beyond that is answered ``failed`` at once.

``poll`` returns a state change per pull: ``{"ref", "state": "pulling" | "done" |
"failed", "note", "digest", "error", "early"}``; the agent sends them to the controller
(``image_pull_state``), with its image list when one ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

MAX_PULLS = 4
_READ = 65536


@dataclass
class Pull:
    proc: subprocess.Popen[bytes] | None
    ref: str
    early: bool
    note: str = ""
    reported: str = ""  # the note last reported
    buf: bytes = b""
    lines: list[str] = field(default_factory=list)


def _state(p: Pull, state: str, *, digest: str = "", error: str = "") -> dict[str, Any]:
    return {"ref": p.ref, "state": state, "note": p.note, "digest": digest, "error": error,
            "early": p.early}


class Pulls:
    def __init__(self, settings: Any) -> None:
        self.settings = settings  # ContainerSettings (cache dir, skopeo, registries, ...)
        self.running: dict[str, Pull] = {}
        self._refused: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.running)

    def start(self, ref: str, uid: Any = None, gid: Any = None, *, early: bool = False
              ) -> str:
        """Start a pull of ``ref`` (or join the one running); "" when started or joined,
        else why not (also reported by the next ``poll``)."""
        have = self.running.get(ref)
        if have is not None:
            have.early = have.early or early
            return ""
        if len(self.running) >= MAX_PULLS:
            why = f"{MAX_PULLS} pulls already running on this node"
            self._refused.append(_state(Pull(None, ref, early), "failed", error=why))
            return why
        c = self.settings
        args = json.dumps({"cache_dir": c.cache_dir, "max_mb": c.cache_max_mb,
                           "insecure": list(c.insecure), "skopeo": c.skopeo,
                           "pull_timeout_s": c.pull_timeout_s, "ref": ref,
                           "apptainer": c.apptainer, "refresh": not early, "progress": True,
                           "uid": int(uid) if isinstance(uid, int) else None,
                           "gid": int(gid) if isinstance(gid, int) else None})
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from corral.agent.pullchild import pull_main; "
                 "sys.exit(pull_main())", args], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            why = f"cannot start the pull: {exc}"
            self._refused.append(_state(Pull(None, ref, early), "failed", error=why))
            return why
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        self.running[ref] = Pull(proc, ref, early)
        return ""

    def pending_refusals(self) -> bool:
        return bool(self._refused)

    def _read(self, p: Pull) -> None:
        assert p.proc is not None and p.proc.stdout is not None
        while True:
            try:
                chunk = os.read(p.proc.stdout.fileno(), _READ)
            except BlockingIOError:
                break
            if not chunk:
                break
            p.buf += chunk
            if len(p.buf) > 1 << 20:  # a child that writes without end: keep the tail
                p.buf = p.buf[-65536:]
        *done, p.buf = p.buf.split(b"\n")
        for raw in done:
            line = raw.decode(errors="replace").strip()
            if line.startswith("P "):
                p.note = line[2:][:300]
            elif line:
                p.lines = (p.lines + [line])[-5:]

    def poll(self) -> list[dict[str, Any]]:
        """State changes since the last call (notes that changed, pulls that ended)."""
        out, self._refused = self._refused, []
        for ref, p in list(self.running.items()):
            assert p.proc is not None
            self._read(p)
            code = p.proc.poll()
            if code is None:
                if p.note != p.reported:
                    p.reported = p.note
                    out.append(_state(p, "pulling"))
                continue
            self._read(p)
            if p.buf:
                p.lines.append(p.buf.decode(errors="replace").strip())
            assert p.proc.stdout is not None
            p.proc.stdout.close()
            del self.running[ref]
            lines = [x for x in p.lines if x]
            if code == 0:
                digest = next((x for x in reversed(lines) if x.startswith("sha256:")), "")
                out.append(_state(p, "done", digest=digest))
            else:
                why = lines[-1] if lines else f"the pull exited with {code}"
                out.append(_state(p, "failed",
                                  error=why.removeprefix("corral image pull: ")[:600]))
        return out
