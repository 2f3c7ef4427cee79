"""``workflow_lint``: the written policy agrees with the code, and no dollar caps exist.

Usage::

    workflow_lint --check-asks [--root DIR] [--tables FILE] [--diff]
    workflow_lint --check      [--root DIR] [--tables FILE] [--diff]
    workflow_lint --fix        [--root DIR] [--tables FILE]
    workflow_lint --list-rules

``--check-asks`` runs every rule and never writes (it implies ``--check``);
``--fix`` first regenerates the marked blocks in place, then checks.  Output:
one ``PATH:LINE: CODE message`` line per finding, sorted.

Exit codes, mapped here only: 0 clean; 1 findings; 2 usage error (bad
option, no such root, a ``--tables`` module that cannot be loaded).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from eps.lint.blocks import fix_file, stale_blocks
from eps.lint.facts import FactsError, PolicyFacts, load_facts
from eps.lint.rules import RULES, Context, rule_rows, run_rules

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command line: one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="workflow_lint", description="Check that CLAUDE.md and .claude/rules/ agree with eps's code.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check-asks", action="store_true", help="run every rule; never write (the CI check)")
    mode.add_argument("--check", action="store_true", help="same as --check-asks: report, never write")
    mode.add_argument("--fix", action="store_true", help="regenerate the marked blocks in place, then check")
    mode.add_argument("--list-rules", action="store_true", help="list the rule codes and exit")
    p.add_argument("--root", metavar="DIR", default=".", help="the repository root (default: .)")
    p.add_argument(
        "--tables", metavar="FILE", help="a code-table module defining DEFAULT_POLICY (default: eps.core.tables)"
    )
    p.add_argument("--diff", action="store_true", help="with --check: show how each stale block would change")
    return p


def main(argv: Sequence[str] | None = None, *, facts: PolicyFacts | None = None, out: TextIO | None = None) -> int:
    """Run the linter; return the exit code.  ``facts`` replaces the code tables (tests)."""
    out = sys.stdout if out is None else out
    try:
        ns = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        if ns.list_rules:
            for rule in RULES:
                out.write(f"{rule.code}  {rule.name:<20} {rule.summary()}\n")
            return EXIT_OK
        root = Path(ns.root)
        if not root.is_dir():
            raise UsageError(f"workflow_lint: --root {ns.root}: no such directory")
        if facts is None:
            facts = load_facts(Path(ns.tables) if ns.tables else None)
        if ns.fix:
            for doc in Context(root, facts, rule_rows()).block_docs:
                for name in fix_file(root / doc.path, doc, facts, rule_rows()):
                    out.write(f"{doc.path}: regenerated block {name!r}\n")
        ctx = Context(root, facts, rule_rows())
        findings = run_rules(ctx)
        for f in findings:
            out.write(f"{f}\n")
        if ns.diff:
            for doc in ctx.block_docs:
                for _, name, have, want in stale_blocks(doc, facts, rule_rows()):
                    out.writelines(
                        line + "\n"
                        for line in difflib.unified_diff(
                            have, want, f"{doc.path} ({name})", f"{doc.path} ({name}, regenerated)", lineterm=""
                        )
                    )
    except (UsageError, FactsError) as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_USAGE
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_FINDINGS if findings else EXIT_OK


def entry() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    entry()
