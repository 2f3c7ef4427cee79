"""``eps status`` for people: one row per dispatch that fits the width (the note wraps),
with its times and, as information only (P12), the list price of its runtime."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from eps.core.durations import human
from eps.shell.cli.table import Column, render, styled, width_for

_COLS = (
    Column("dispatch"),
    Column("intent"),
    Column("result"),
    Column("lane"),
    Column("where"),
    Column("submitted"),
    Column("started"),
    Column("ended"),
    Column("runtime", right=True),
    Column("list $", right=True),
    Column("note", flex=True),
)


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%m-%d %H:%M", time.localtime(ts))


def print_status(
    rows: list[dict[str, Any]], notes: list[dict[str, Any]], env: Mapping[str, str], *, wide: bool
) -> None:
    out = sys.stdout
    table = []
    for r in rows:
        h = r["handle"] or {}
        runtime = "-" if r["runtime_s"] is None else human(round(r["runtime_s"]))
        cost = r["list_cost"]
        money = "-" if cost is None else "free" if r["list_price_per_hour"] == 0 else f"{cost:.2f}"
        table.append([
            r["dispatch"], r["intent"], r["result"], h.get("lane", ""), h.get("qos") or h.get("zone") or "",
            _when(r["submitted_at"]), _when(r["started_at"]), _when(r["ended_at"]), runtime, money,
            r["terminal"] or r["message"] or "",
        ])  # fmt: skip
    if table:
        out.write(render(_COLS, table, width_for(out, env, wide=wide), bold=styled(out, env)))
    else:
        out.write("no dispatches\n")
    for n in notes:
        out.write(f"note: {n['lane']}: {n['text']}\n")
    if any(r["list_cost"] for r in rows):
        out.write("list $: list price x runtime, information only; eps never limits work by dollars (P12)\n")
