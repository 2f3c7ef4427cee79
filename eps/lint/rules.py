"""The rules of ``workflow_lint --check-asks``: a registry of small final classes.

Each rule has a stable ``code`` (never reused), a ``name``, message templates
and a docstring whose first line says what it checks and whose body says why
and how to fix.  ``RULES`` is the registry, in code order; CLAUDE.md lists it
in a generated block (``lint-rules``).

A rule reads a :class:`Context` (the root, the code facts, the documents) and
yields :class:`Finding` values; it never writes.
"""

from __future__ import annotations

from eps.lint.context import Context, Finding, Rule
from eps.lint.rules_asks import (
    AskStated,
    AskTested,
    CodeProduced,
    GeneratedBlocks,
    NoDollarCap,
    PolicyFiles,
    TerminalAndSkipCodes,
    TerminalReversal,
)
from eps.lint.rules_duration import UnknownDuration
from eps.lint.rules_tables import (
    FlexStartLimit,
    IntentCoverage,
    IntentRow,
    LaneOrder,
    ParkCaps,
    QosLadder,
    WorstCase,
)

__all__ = ["RULES", "Context", "Finding", "Rule", "rule_rows", "run_rules"]

RULES: tuple[type[Rule], ...] = (
    IntentCoverage,
    IntentRow,
    LaneOrder,
    QosLadder,
    ParkCaps,
    WorstCase,
    TerminalReversal,
    TerminalAndSkipCodes,
    AskStated,
    AskTested,
    NoDollarCap,
    GeneratedBlocks,
    PolicyFiles,
    CodeProduced,
    FlexStartLimit,
    UnknownDuration,
)


def run_rules(ctx: Context, rules: tuple[type[Rule], ...] = RULES) -> list[Finding]:
    findings: set[Finding] = set()
    for rule in rules:
        findings.update(rule().check(ctx))
    return sorted(findings)


def rule_rows() -> tuple[tuple[str, str, str], ...]:
    """(code, name, what it checks) of every rule: the ``lint-rules`` block of CLAUDE.md."""
    return tuple((r.code, r.name, r.summary()) for r in RULES)
