"""``eps check``: the ``check`` document (:mod:`eps.shell.service.check`) as JSON or a table;
exit 0 only when every resource kind (CPU, GPU) has at least one usable lane here."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from eps.shell.cli.exits import Exit
from eps.shell.config.settings import Settings
from eps.shell.service.check import gather

if TYPE_CHECKING:
    from eps.shell.service.check import LaneOptions  # the service's re-export: a front door imports no lane


def run_check(ns: argparse.Namespace, settings: Settings, env: dict[str, str], options: LaneOptions | None) -> int:
    doc = gather(settings, env, options, float(ns.timeout))
    if ns.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        _print(doc, env)
    return Exit.OK if doc["ok"] else Exit.NOTHING_STARTS


def _yes(v: object) -> str:
    return "-" if v is None else "yes" if v else "no"


def _print(doc: dict[str, Any], env: dict[str, str]) -> None:
    from eps.shell.render.table import Column, render, styled, width_for

    out = sys.stdout
    cols = (
        Column("lane"),
        Column("for"),
        Column("configured"),
        Column("credentials"),
        Column("reachable"),
        Column("usable"),
        Column("what it said", flex=True),
    )
    rows = []
    for r in doc["lanes"]:
        said = r["detail"] or (r["problem"] or {}).get("text") or ""
        rows.append([r["lane"], "/".join(r["resources"]), _yes(r["configured"]), _yes(r["credentials"]),
                     _yes(r["reachable"]), _yes(r["usable"]), said])  # fmt: skip
    out.write(render(cols, rows, width_for(out, env), bold=styled(out, env)))
    fixes = [r for r in doc["lanes"] if r["fix"]]
    if fixes:
        out.write("to fix:\n")
        for r in fixes:
            out.write(f"  {r['lane']}: {r['fix']}\n")
    for r in doc["lanes"]:
        for line in r.get("not_checked", ()):
            out.write(f"{r['lane']}: not checked (robot login): {line}\n")
    for r in doc["left_out"]:
        out.write(f"{r['lane']}: {r['code']}: {r['text']}\n  fix: {r['fix']}\n")
    for kind in ("cpu", "gpu"):
        found = doc["usable"][kind]
        out.write(f"{kind.upper()} jobs: {' -> '.join(found) if found else 'no usable lane here'}\n")
