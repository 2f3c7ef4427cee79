"""The core is pure: it imports nothing from the shell, no provider clients, no
subprocess/os/time/random/logging, and never touches os.environ (STYLE conventions 1)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "eps" / "core"
FORBIDDEN_MODULES = {
    "eps.shell",
    "eps.lint",
    "httpx",
    "google",
    "subprocess",
    "os",
    "time",
    "random",
    "logging",
    "socket",
    "datetime",
    "threading",
    "asyncio",
    "sqlite3",
    "shutil",
    "pathlib",
    "tempfile",
    "uuid",
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_imports_nothing_impure() -> None:
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 5
    for f in files:
        for name in _imports(f):
            root = name.split(".")[0]
            assert (
                name not in FORBIDDEN_MODULES
                and root not in FORBIDDEN_MODULES
                and not any(name.startswith(m + ".") for m in FORBIDDEN_MODULES)
            ), f"{f.name} imports {name}"


def test_core_never_reads_the_environment_or_the_clock() -> None:
    for f in sorted(CORE.glob("*.py")):
        text = f.read_text()
        for needle in ("os.environ", "getenv", "time.time", "datetime.now", "open(", "print("):
            assert needle not in text, f"{f.name} uses {needle}"


def _plan_path_modules(state_dir: Path) -> list[str]:
    """The heavy modules ``eps plan gpu-1 --duration 3h --json`` loads with ``state_dir``."""
    code = (
        "import sys, io, contextlib\n"
        "from eps.shell.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        f"    rc = main(['plan', 'gpu-1', '--duration', '3h', '--json'], env={{'EPS_STATE_DIR': {str(state_dir)!r}}})\n"
        "assert rc == 0, rc\n"
        "mods = ('google.cloud.compute_v1', 'httpx', 'rich', 'cattrs', 'attrs', 'sqlite3')\n"
        "heavy = [m for m in mods if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_plan_path_does_not_import_heavy_clients(tmp_path: Path) -> None:
    """`eps plan --json` must not load google-cloud-compute, httpx, rich, cattrs or attrs (100 ms bar);
    without a ledger not even sqlite3 (and none is made); with one, only sqlite3 (its boot loops)."""
    assert _plan_path_modules(tmp_path) == [], "plan path imported more than the core"
    assert list(tmp_path.iterdir()) == []  # no ledger made
    from eps.shell.state.ledger import Ledger

    Ledger(str(tmp_path)).close()
    assert _plan_path_modules(tmp_path) == ["sqlite3"]
