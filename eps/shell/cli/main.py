"""The ``eps`` command line: ``main(argv) -> int`` and a one-line entry point.

Exit codes, mapped in one place (:func:`main`):
0 success; 1 a dispatch failed or nothing could start; 2 bad input (usage,
unknown intent, bad duration, impossible pin, malformed file or config):
one line on stderr, nothing changed; 130 interrupted.

The plan path imports only the pure core, argparse and json; rich, cattrs and
the provider clients load only when a command needs them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from eps.core.durations import parse_duration
from eps.core.model import CapacitySnapshot, Job, JobError, ParkState, Policy, QosGrants
from eps.shell.config import load_settings
from eps.shell.settings import ConfigError, Settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command line: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"count must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"count must be at least 1, got {value}")
    return value


def _footprint(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"footprint must be a number of GB, got {text!r}") from None
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"footprint must be a finite number >= 0, got {text!r}")
    return value


def _add_job_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("intent", nargs="?", help="what the job needs (see `eps intents`)")
    p.add_argument("--duration", type=_duration, default=3600, help="estimated run time: 45s, 30m, 3h, 2d (1h)")
    p.add_argument("--restartable", action="store_true", help="the job can be restarted (spot-friendly)")
    p.add_argument("--footprint-gb", type=_footprint, default=0.0, help="data footprint in GB")
    p.add_argument("--gradient-fit", action="store_true", help="the job is a gradient-descent fit")
    p.add_argument("--count", type=_count, default=1, help="parallel copies (CPU: N machines)")
    p.add_argument("--pin", metavar="LANE", help="run only on this lane: vm, fellows, gcp, runpod")
    p.add_argument("--snapshot", metavar="FILE", help="capacity snapshot (JSON or TOML)")
    p.add_argument("--grants", metavar="FILE", help="QoS grants (JSON or TOML); default: the fellows tiers")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _parser() -> _Parser:
    root = _Parser(prog="eps", description="Plan and run research compute jobs on the right lane.")
    root.add_argument("--list-intents", action="store_true", help="same as `eps intents`")
    sub = root.add_subparsers(dest="cmd", parser_class=_Parser)

    p = sub.add_parser("plan", help="dry run: the route plan for a job")
    _add_job_options(p)
    p.add_argument(
        "--park", metavar="[CLUSTER:]QOS=SECONDS", help="the job is parked (PENDING) on that tier for that long"
    )
    p.add_argument("--park-reason", metavar="REASON", help="its SLURM pending reason (e.g. Priority)")
    p.add_argument("--list-intents", action="store_true", help="list the intents and exit")

    i = sub.add_parser("intents", help="the intent table")
    i.add_argument("--json", action="store_true")

    from eps.shell.cli import commands

    commands.add_parsers(sub, _add_job_options)
    return root


def _job(ns: argparse.Namespace, command: Sequence[str] = ()) -> Job:
    if not ns.intent:
        raise UsageError("eps: an intent is needed (see `eps intents`)")
    return Job(
        intent=ns.intent,
        duration_s=ns.duration,
        restartable=ns.restartable,
        footprint_gb=ns.footprint_gb,
        gradient_fit=ns.gradient_fit,
        count=ns.count,
        pin=ns.pin,
        command=tuple(command),
    )


def _inputs(ns: argparse.Namespace) -> tuple[CapacitySnapshot, QosGrants]:
    from eps.core.tables import DEFAULT_GRANTS

    snap = CapacitySnapshot()
    grants = DEFAULT_GRANTS
    if ns.snapshot or ns.grants:
        from eps.shell import files

        if ns.snapshot:
            snap = files.load_snapshot(ns.snapshot)
        if ns.grants:
            grants = files.load_grants(ns.grants)
    return snap, grants


def _park(text: str | None, reason: str | None, policy: Policy) -> ParkState | None:
    if text is None:
        if reason is not None:
            raise UsageError("eps plan: --park-reason needs --park")
        return None
    spec, sep, secs = text.partition("=")
    if not sep:
        raise UsageError(f"eps plan: --park wants [CLUSTER:]QOS=SECONDS, got {text!r}")
    try:
        elapsed = parse_duration(secs)
    except ValueError as exc:
        raise UsageError(f"eps plan: --park: {exc}") from None
    cluster_name, _, qos = spec.rpartition(":")
    if cluster_name:
        cluster = policy.cluster(cluster_name)
        if cluster is None:
            raise UsageError(f"eps plan: --park: unknown cluster {cluster_name!r}")
    else:
        cluster = next((c for c in policy.clusters if qos in c.qos_ladder or qos in (c.dev_qos, c.name)), None)
        if cluster is None:
            raise UsageError(f"eps plan: --park: no cluster has a QoS {qos!r}")
    q: str | None = None if qos == cluster.name and not cluster.qos_ladder else qos
    return ParkState(cluster.name, q, elapsed, reason)


def cmd_plan(ns: argparse.Namespace, settings: Settings) -> int:
    from eps.core.router import plan

    job = _job(ns)
    snap, grants = _inputs(ns)
    park = _park(ns.park, ns.park_reason, settings.policy)
    result = plan(job, snap, grants, park, policy=settings.policy)
    if ns.json:
        from eps.shell.cli.views import plan_dict

        _emit(plan_dict(result, job))
    else:
        from eps.shell.cli.views import print_plan

        print_plan(result, job)
    return EXIT_OK


def cmd_intents(ns: argparse.Namespace, settings: Settings) -> int:
    from eps.shell.cli import views

    if getattr(ns, "json", False):
        _emit([views.intent_dict(it, settings.policy) for it in settings.policy.intents])
    else:
        views.print_intents(settings.policy)
    return EXIT_OK


def _emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None, *, lane_options: Any = None) -> int:
    """Run one ``eps`` command; return its exit code.  Never raises for bad input.

    ``env`` replaces ``os.environ``; ``lane_options`` (an ``eps.shell.lanes.LaneOptions``)
    lets tests point the lanes at local servers and make them poll fast."""
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:  # eps execute INTENT [opts] -- COMMAND...
        k = args.index("--")
        args, command = args[:k], args[k + 1 :]
    args = _glue_negative_values(args)
    try:
        ns = _parser().parse_args(args)
        settings = load_settings(os.environ if env is None else env)
        if ns.list_intents or ns.cmd == "intents":
            return cmd_intents(ns, settings)
        if ns.cmd == "plan":
            if command:
                raise UsageError("eps plan: a command after -- is for `eps execute`")
            return cmd_plan(ns, settings)
        if ns.cmd is None:
            raise UsageError("eps: a command is needed: plan, intents, execute, status, cancel, reconcile")
        from eps.shell.cli import commands

        return commands.run(
            ns, settings, command, _job, env=dict(os.environ if env is None else env), options=lane_options
        )
    except (UsageError, JobError, ConfigError) as exc:
        sys.stderr.write(f"eps: error: {_one_line(exc)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("eps: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug in eps: say so in one line, keep the details in a file
        import tempfile
        import traceback

        fd, path = tempfile.mkstemp(prefix="eps-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            traceback.print_exc(file=fh)
        sys.stderr.write(f"eps: internal error: {type(exc).__name__}: {_one_line(exc)} (details in {path})\n")
        return 70


_VALUE_OPTIONS = ("--duration", "--footprint-gb", "--count", "--park")


def _glue_negative_values(args: list[str]) -> list[str]:
    """``--duration -3h`` -> ``--duration=-3h`` so the value reaches its validator
    (argparse would otherwise take ``-3h`` for an option and say something vaguer)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in _VALUE_OPTIONS and i + 1 < len(args) and args[i + 1].startswith("-") and args[i + 1][1:2].isdigit():
            out.append(f"{a}={args[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    return text.removeprefix("eps: ")


def entry() -> NoReturn:
    sys.exit(main())
