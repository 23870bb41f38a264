"""The scheduling core imports only the standard library and itself (DESIGN.md, rule 1)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import corral.core

CORE = Path(corral.core.__file__).parent
# stdlib modules that would smuggle I/O, the clock, the environment or global randomness
FORBIDDEN_STDLIB = {
    "os", "sys", "time", "datetime", "socket", "asyncio", "subprocess", "threading",
    "multiprocessing", "sqlite3", "random", "io", "pathlib", "shutil", "signal", "select",
    "selectors", "urllib", "http", "logging", "tempfile", "glob", "uuid", "secrets",
    "concurrent", "ctypes", "pickle", "shelve", "platform", "pwd", "grp", "resource",
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.append((node.lineno, "corral.core." + (node.module or "")))
            else:
                out.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("__import__", "open", "eval", "exec"):
                out.append((node.lineno, f"<call {node.func.id}>"))
    return out


def test_core_imports_only_stdlib_and_itself() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert files, "no core modules found"
    bad: list[str] = []
    for path in files:
        for lineno, name in _imports(path):
            top = name.split(".")[0]
            if name.startswith("<call"):
                bad.append(f"{path.relative_to(CORE)}:{lineno}: {name}")
            elif top == "corral":
                if not name.startswith("corral.core"):
                    bad.append(f"{path.relative_to(CORE)}:{lineno}: imports {name}")
            elif top == "__future__":
                continue
            elif top not in sys.stdlib_module_names:
                bad.append(f"{path.relative_to(CORE)}:{lineno}: third-party {name}")
            elif top in FORBIDDEN_STDLIB:
                bad.append(f"{path.relative_to(CORE)}:{lineno}: I/O, clock or env: {name}")
    assert not bad, "corral.core must stay pure:\n" + "\n".join(bad)


def test_purity_check_catches_a_bad_import(tmp_path: Path) -> None:
    src = tmp_path / "bad.py"
    src.write_text("import time\nfrom sqlalchemy import select\nopen('x')\n")
    names = [n for _, n in _imports(src)]
    assert "time" in names and "sqlalchemy" in names and "<call open>" in names
