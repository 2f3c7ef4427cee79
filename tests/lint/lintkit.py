"""Helpers for the linter tests: the clean fixture tree and drift cases applied to copies of it."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from eps.lint.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
CLEAN = FIXTURES / "clean"
DRIFTS = FIXTURES / "drift"

def drift_cases() -> list[Path]:
    return sorted(DRIFTS.glob("*.json"))


def apply_edits(root: Path, edits: list[dict]) -> None:
    """Apply a drift case's edits: replace ``old`` by ``new`` once (``old == ""`` creates), or delete."""
    for e in edits:
        path = root / e["file"]
        if e.get("delete"):
            path.unlink()
            continue
        if e["old"] == "":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(e["new"], encoding="utf-8")
            continue
        text = path.read_text(encoding="utf-8")
        assert text.count(e["old"]) == 1, f"{e['file']}: the edit's old text must occur exactly once"
        path.write_text(text.replace(e["old"], e["new"]), encoding="utf-8")


def run_lint(root: Path, *args: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = main([*args, "--root", str(root), "--tables", str(root / "tables.py")], out=out)
    return code, out.getvalue().splitlines()


def copy_clean(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(CLEAN, root)
    return root


def load_case(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))
