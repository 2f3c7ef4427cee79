"""The code-quality bars are tests too: ruff clean everywhere, mypy strict on the core and the
shell, no module over 600 lines, no import cycle, and the core never imports the shell."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> list[str]:
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return [str(exe)]
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
    return [found]


def test_ruff_clean() -> None:
    out = subprocess.run(
        [*_tool("ruff"), "check", "--quiet", "."], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_on_core_and_shell() -> None:
    out = subprocess.run(
        [*_tool("mypy"), "--strict", "eps/core", "eps/shell"], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "eps").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}


def _module_imports() -> dict[str, set[str]]:
    """Every eps module and the eps modules it imports (at any depth of the file: lazy
    imports inside functions count too, since they are still an arrow between rooms)."""
    import ast

    modules: dict[str, set[str]] = {}
    for path in sorted((ROOT / "eps").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("eps"))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("eps"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        modules[name] = found
    return {m: {i for i in imps if i in modules and i != m} for m, imps in modules.items()}


def test_no_import_cycle_and_core_never_imports_shell() -> None:
    graph = _module_imports()
    for module, imports in graph.items():
        if module.startswith("eps.core"):
            assert not [i for i in imports if not i.startswith("eps.core")], f"{module} imports {imports}"
    # a package's __init__ re-exporting its own modules is not a cycle between rooms
    edges = {m: {i for i in imps if not m.startswith(i + ".")} for m, imps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
