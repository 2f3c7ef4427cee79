"""The code-quality bars are tests too: ruff clean everywhere, mypy strict on the pure core."""

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


def test_mypy_strict_on_core() -> None:
    out = subprocess.run(
        [*_tool("mypy"), "--strict", "eps/core"], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
