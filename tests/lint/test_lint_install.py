"""`workflow_lint --check-asks` works the same from a plain (non-editable) install as from the
source tree (issue 15.10): it checks the repository it is pointed at (``--root``), and never
reports its own files there, wherever the installed linter lives."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _can_build_offline() -> bool:
    """Can this interpreter build a wheel without fetching build requirements?
    (setuptools 70.1+ has bdist_wheel built in; older needs the wheel package.)"""
    import setuptools

    major, minor, *_ = (int(x) if x.isdigit() else 0 for x in setuptools.__version__.split("."))
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install --no-deps --target DIR <repo>``: pip builds a wheel of the repository and
    installs it, files and all, outside the tree (no .pth, no editable finder)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "eps", src / "eps", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(src)]
    if _can_build_offline():
        cmd[4:4] = ["--no-index", "--no-build-isolation"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (target / "eps" / "lint" / "money.py").is_file()
    return target


def _lint(site: Path | None, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    code = "import sys, eps; from eps.lint.cli import main; print(eps.__file__, file=sys.stderr); sys.exit(main())"
    # -P: the current directory is not on sys.path, so only the install under test is imported.
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args], capture_output=True, text=True, check=False, cwd=cwd, env=env
    )


def test_check_asks_from_a_plain_install_is_clean_against_the_repo(plain_install: Path, tmp_path: Path) -> None:
    out = _lint(plain_install, "--check-asks", "--root", str(REPO), cwd=tmp_path)
    assert out.stderr.strip() == str(plain_install / "eps" / "__init__.py")  # the plain install ran
    assert out.returncode == 0, out.stdout
    assert out.stdout == ""


def test_root_defaults_to_the_current_directory(plain_install: Path) -> None:
    out = _lint(plain_install, "--check-asks", cwd=REPO)
    assert out.returncode == 0, out.stdout
    assert out.stdout == ""


def test_plain_install_and_source_tree_report_the_same(plain_install: Path, tmp_path: Path) -> None:
    """A drifted copy of the repository gets the same findings, with the same paths, from both."""
    root = tmp_path / "repo"
    shutil.copytree(
        REPO, root, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".*_cache", ".hypothesis")
    )
    claude = root / "CLAUDE.md"
    claude.write_text(
        claude.read_text(encoding="utf-8").replace("600 + 2 x 300 = 1200 s by", "600 + 2 x 300 = 1300 s by")
    )
    (root / "eps" / "shell" / "spend.py").write_text("max_cost = 5\n", encoding="utf-8")
    plain = _lint(plain_install, "--check-asks", "--root", str(root), cwd=tmp_path)
    source = _lint(REPO, "--check-asks", "--root", str(root), cwd=tmp_path)
    assert plain.returncode == source.returncode == 1
    assert plain.stdout == source.stdout
    assert "CLAUDE.md:" in plain.stdout and "EPS106" in plain.stdout
    assert "eps/shell/spend.py:1: EPS111" in plain.stdout
    assert "eps/lint/" not in plain.stdout
