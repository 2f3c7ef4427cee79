"""workflow_lint as a command: the real repository passes; exit codes (its speed: benchmarks/lint_bench.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from eps.lint.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_repository_passes_check_asks() -> None:
    out = io.StringIO()
    code = main(["--check-asks", "--root", str(REPO)], out=out)
    assert (code, out.getvalue()) == (0, "")


@pytest.mark.parametrize(
    "argv",
    [
        ["--bogus"],
        ["--check", "--fix"],
        ["--check-asks", "--root", "/nonexistent/eps-root"],
        ["--check-asks", "--tables", "/nonexistent/tables.py"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_tables_module_without_policy_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "tables.py"
    bad.write_text("X = 1\n")
    assert main(["--check-asks", "--root", str(tmp_path), "--tables", str(bad)], out=io.StringIO()) == 2


def test_list_rules() -> None:
    out = io.StringIO()
    assert main(["--list-rules"], out=out) == 0
    assert out.getvalue().splitlines()[0].startswith("EPS101")


def test_facts_object_can_be_passed_directly(clean_tree: Path) -> None:
    from eps.lint.facts import load_facts

    facts = load_facts(clean_tree / "tables.py")
    out = io.StringIO()
    assert main(["--check-asks", "--root", str(clean_tree)], facts=facts, out=out) == 0
    assert out.getvalue() == ""
