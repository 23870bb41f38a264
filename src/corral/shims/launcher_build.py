"""Build the compiled shim launcher (``launcher.c``) with the system C compiler.

``build_launcher(python, root)`` compiles ``launcher.c`` once, with a generated header
naming the Python fallback (this interpreter and a ``-c`` program that puts ``root`` on
``sys.path`` and runs ``corral.shims.lean.main``), and returns the binary's bytes.
``command_binary(binary, cmd)`` writes a command's name into the binary's ``CMD_SLOT``
(``# corral-shim cmd=`` then 24 NUL bytes), so each installed copy knows which command it
is whatever ``argv[0]`` says. Invariant: the slot occurs exactly once in the binary.

Compiler: ``$CC`` if set, else ``cc`` on ``PATH``; no compiler or a failed build raises
``BuildError`` with the reason, and ``install`` falls back to the Python launchers.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("launcher.c")
SLOT_PREFIX = b"# corral-shim cmd="
SLOT_BYTES = 24  # the name (at most 23 bytes) and its NUL
CFLAGS = ("-O2", "-std=gnu99", "-Wall", "-Wextra", "-D_FORTIFY_SOURCE=2",
          "-fstack-protector-strong")
BUILD_TIMEOUT_S = 120


class BuildError(Exception):
    """The launcher could not be built; the message says why."""


def c_string(text: str) -> str:
    """``text`` as a C string literal, every byte an octal escape (nothing to misparse)."""
    return '"' + "".join(f"\\{b:03o}" for b in text.encode("utf-8", "surrogateescape")) + '"'


def fallback_program(root: str) -> str:
    """The ``python -IS -c`` program the launcher execs: argv[1] is the command."""
    return (f"import sys; sys.path.insert(0, {root!r}); "
            "from corral.shims.lean import main; main(sys.argv.pop(1))")


def config_header(python: str, root: str) -> str:
    return (f"#define CORRAL_PYTHON {c_string(python)}\n"
            f"#define CORRAL_PYPROG {c_string(fallback_program(root))}\n")


def compiler() -> list[str] | None:
    cc = os.environ.get("CC")
    if cc:
        return shlex.split(cc)
    found = shutil.which("cc")
    return [found] if found else None


def build_launcher(python: str, root: str) -> bytes:
    """Compile ``launcher.c`` for this interpreter and package root; the binary's bytes."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler (cc) on PATH")
    if not SOURCE.exists():
        raise BuildError(f"{SOURCE} is missing")
    with tempfile.TemporaryDirectory(prefix="corral-launcher-") as tmp:
        Path(tmp, "corral_launcher_config.h").write_text(config_header(python, root))
        out = Path(tmp, "launcher")
        argv = [*cc, *CFLAGS, "-I", tmp, "-o", str(out), str(SOURCE)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{cc[0]} failed to run: {exc}") from None
        if r.returncode != 0 or not out.exists():
            raise BuildError(f"{' '.join(cc)} failed ({r.returncode}): "
                             f"{(r.stderr or r.stdout).strip()[-800:]}")
        data = out.read_bytes()
    if data.count(SLOT_PREFIX + b"\0" * SLOT_BYTES) != 1:
        raise BuildError("the built launcher has no unique command slot")
    return data


def command_binary(binary: bytes, cmd: str) -> bytes:
    """``binary`` with ``cmd`` written into its command slot."""
    name = cmd.encode("ascii")
    if not name or len(name) >= SLOT_BYTES or b"\0" in name:
        raise ValueError(f"bad command name {cmd!r}")
    empty = SLOT_PREFIX + b"\0" * SLOT_BYTES
    return binary.replace(empty, SLOT_PREFIX + name.ljust(SLOT_BYTES, b"\0"), 1)
