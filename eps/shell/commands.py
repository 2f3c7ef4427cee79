"""The commands that act: ``execute``, ``status``, ``cancel``, ``reconcile``.

Parsers are declared here (cheap); the executor, ledger and lane adapters load
only when one of these commands runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from eps.core.model import Job
from eps.shell.config import Settings


def add_parsers(sub: Any, add_job_options: Callable[[argparse.ArgumentParser], None]) -> None:
    e = sub.add_parser("execute", help="walk the plan for real: submit, park, fail over; -- COMMAND...")
    add_job_options(e)
    e.add_argument("--resume", metavar="DISPATCH", help="continue the walk of a dispatch after a crash")
    e.add_argument("--dispatch-id", metavar="ID", help="use this dispatch id (default: a new one)")

    s = sub.add_parser("status", help="what is running where")
    s.add_argument("dispatch", nargs="?", help="one dispatch id (default: all)")
    s.add_argument("--json", action="store_true")

    c = sub.add_parser("cancel", help="stop a dispatch and release every resource")
    c.add_argument("dispatch", nargs="?", help="the dispatch id")
    c.add_argument("--all", action="store_true", help="every live dispatch")
    c.add_argument("--json", action="store_true")

    r = sub.add_parser("reconcile", help="compare the ledger with the providers; adopt or clean up")
    r.add_argument("--json", action="store_true")


def run(
    ns: argparse.Namespace,
    settings: Settings,
    command: Sequence[str],
    make_job: Callable[[argparse.Namespace, Sequence[str]], Job],
    *,
    env: dict[str, str],
    options: Any = None,
) -> int:
    from eps.core.model import evolve
    from eps.shell import executor
    from eps.shell.lanes import LaneOptions

    opts = LaneOptions(env=env) if options is None else evolve(options, env=options.env or env)
    return executor.run_command(ns, settings, command, make_job, options=opts)
