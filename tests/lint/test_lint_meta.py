"""The rule registry: unique stable codes, documented rules, each listed once in CLAUDE.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eps.lint.rules import RULES, Rule

REPO = Path(__file__).resolve().parents[2]


def test_codes_are_unique_and_well_formed() -> None:
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"EPS1\d\d", c) for c in codes)
    assert codes == sorted(codes)
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_is_final_documented_and_has_templates(rule: type[Rule]) -> None:
    assert getattr(rule, "__final__", False), "rules are final classes"
    doc = rule.__doc__ or ""
    assert rule.summary(), "a one-line summary"
    assert "Why" in doc or "why" in doc
    assert "Fix" in doc
    assert rule.messages and all(isinstance(t, str) and t for t in rule.messages.values())


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_is_documented_once_in_claude_md(rule: type[Rule]) -> None:
    text = (REPO / "CLAUDE.md").read_text(encoding="utf-8")
    assert len(re.findall(rf"`{rule.code}`", text)) == 1
