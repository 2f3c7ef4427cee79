"""Each drift case (tests/lint/fixtures/drift/*.json) applied to the clean tree gives exactly its findings."""

from __future__ import annotations

from pathlib import Path

import pytest
from lintkit import apply_edits, drift_cases, load_case, run_lint

LADDER = ".claude/rules/fellows-qos-ladder.md"
HAND_EDIT = [{"file": LADDER, "old": "| 100      |", "new": "| 999      |"}]

def test_clean_fixture_has_no_findings(clean_tree: Path) -> None:
    assert run_lint(clean_tree, "--check-asks") == (0, [])


@pytest.mark.parametrize("case", drift_cases(), ids=lambda p: p.stem)
def test_drift_gives_exactly_its_findings(case: Path, clean_tree: Path) -> None:
    data = load_case(case)
    apply_edits(clean_tree, data["edits"])
    code, lines = run_lint(clean_tree, "--check-asks")
    assert lines == data["expect"], data["why"]
    assert code == 1


def test_every_rule_has_a_drift_case_named_for_it() -> None:
    from eps.lint.rules import RULES

    named = {p.stem.split("_", 1)[0].upper() for p in drift_cases()}
    assert {r.code for r in RULES} <= named
    for case in drift_cases():
        data = load_case(case)
        code = case.stem.split("_", 1)[0].upper()
        if code.startswith("EPS"):
            assert data["expect"], case.stem
            assert all(f" {code} " in line for line in data["expect"]), case.stem


def test_check_never_writes(clean_tree: Path) -> None:
    ladder = clean_tree / ".claude/rules/fellows-qos-ladder.md"
    apply_edits(clean_tree, HAND_EDIT)
    before = ladder.read_bytes()
    for mode in ("--check-asks", "--check"):
        assert run_lint(clean_tree, mode)[0] == 1
    assert ladder.read_bytes() == before


def test_fix_regenerates_blocks_and_is_idempotent(clean_tree: Path) -> None:
    pristine = (clean_tree / ".claude/rules/fellows-qos-ladder.md").read_text()
    apply_edits(clean_tree, HAND_EDIT)
    code, lines = run_lint(clean_tree, "--fix")
    assert (code, lines) == (0, [".claude/rules/fellows-qos-ladder.md: regenerated block 'qos-ladder'"])
    assert (clean_tree / ".claude/rules/fellows-qos-ladder.md").read_text() == pristine
    assert run_lint(clean_tree, "--fix") == (0, [])


def test_fix_follows_a_code_change(clean_tree: Path) -> None:
    apply_edits(clean_tree, [{"file": "tables.py", "old": "first_park_cap_s=400", "new": "first_park_cap_s=450"}])
    code, lines = run_lint(clean_tree, "--fix")
    assert code == 1  # the hand-written statements still say 400; --fix only owns the blocks
    assert all(" EPS112 " not in line for line in lines)
    ladder = (clean_tree / ".claude/rules/fellows-qos-ladder.md").read_text()
    assert "450 + 1 x 100 = 550 s" in ladder


def test_diff_shows_the_regenerated_block(clean_tree: Path) -> None:
    apply_edits(clean_tree, HAND_EDIT)
    code, lines = run_lint(clean_tree, "--check", "--diff")
    assert code == 1
    assert "-| 1    | gold    | 999      | 1d      | no cap        | 400 s    |" in lines
    assert "+| 1    | gold    | 100      | 1d      | no cap        | 400 s    |" in lines
