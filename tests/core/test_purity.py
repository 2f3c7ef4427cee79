"""The core is pure: it imports nothing from the shell, no provider clients, no
subprocess/os/time/random/logging, and never touches os.environ (STYLE conventions 1)."""

from __future__ import annotations

import ast
from pathlib import Path

from imports import loaded_by

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


#: Modules ``eps plan`` does without: the provider clients and the ledger's sqlite3 (the 100 ms
#: bar), what only the operations on dispatches need (the service, events, the states, threads),
#: the type checker (``typing``: the records are :mod:`eps.core.records`'), a reader of JSON, or
#: argparse (an ordinary ``eps plan`` is read by :func:`eps.shell.cli.args.plan_namespace`).
PLAN_PATH_SPARES = ("google.cloud.compute_v1", "httpx", "rich", "cattrs", "attrs", "sqlite3", "typing", "contextlib",
                    "json", "argparse", "gettext", "eps.shell.cli.parser", "eps.shell.service.operations",
                    "eps.shell.state.events",
                    "eps.core.states", "threading")  # fmt: skip


PLAN_ARGV = ("plan", "gpu-1", "--duration", "3h", "--json")


def _plan_path_modules(state_dir: Path, argv: tuple[str, ...] = PLAN_ARGV) -> list[str]:
    """The modules of :data:`PLAN_PATH_SPARES` that ``eps plan gpu-1 --duration 3h --json``
    loads with ``state_dir``."""
    return loaded_by(argv, {"EPS_STATE_DIR": str(state_dir)}, PLAN_PATH_SPARES)


def test_plan_path_does_not_import_heavy_clients(tmp_path: Path) -> None:
    """`eps plan --json` must not load google-cloud-compute, httpx, rich, cattrs or attrs (100 ms bar),
    nor typing, json, argparse, the service or the events; without a ledger not even sqlite3 (and
    none is made); with one, only what reading its boot loops takes."""
    assert _plan_path_modules(tmp_path) == [], "plan path imported more than the core"
    assert _plan_path_modules(tmp_path, ("plan", "cpu-small", "--duration", "2h", "--wide")) == []  # the text view
    assert list(tmp_path.iterdir()) == []  # no ledger made
    from eps.shell.state.ledger import Ledger

    Ledger(str(tmp_path)).close()
    with_ledger = _plan_path_modules(tmp_path)
    assert "sqlite3" in with_ledger and set(with_ledger) <= {"sqlite3", "contextlib", "eps.core.states"}
