"""The ``eps`` argument parser: every subcommand, every option with its help, and each
subcommand's help ending with real examples (a test parses every example).

Job options default to ``None`` so that a job file (``--job``) can fill what the
command line leaves out: flags override the file, the file overrides the defaults
(:data:`eps.shell.request.job.DEFAULTS`).  Cheap to build: argparse only.  The tables (the subcommands,
their examples, the defaults) and the checks of the values live in :mod:`eps.shell.cli.args`,
which reads an ordinary ``eps plan`` without any of this.
"""

from __future__ import annotations

import argparse

from eps.core.contract import LOGS_DEFAULT_BYTES, LOGS_MAX_BYTES
from eps.shell.cli import args as values
from eps.shell.cli.args import (
    EXAMPLES as _EXAMPLES,
)
from eps.shell.cli.args import (
    VALUE_OPTIONS,
    glue_negative_values,
)
from eps.shell.service.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn, TypeVar

    from eps.core.simulate import Caps

    T = TypeVar("T")

__all__ = ["EXAMPLES", "SUBCOMMANDS", "VALUE_OPTIONS", "UsageError", "add_execute_options",
           "add_job_options", "build", "glue_negative_values"]  # fmt: skip

#: Every subcommand's examples: args' table, and ``notify`` until that table has it (args
#: is where :func:`eps.shell.cli.main` looks to build one subcommand alone).
EXAMPLES: dict[str, tuple[str, ...]] = {"notify": ("eps notify test", "eps notify test --json")} | _EXAMPLES
SUBCOMMANDS: tuple[str, ...] = tuple(EXAMPLES)

NOTIFY_NOTE = (
    "Targets are the [notify] urls of the config file (apprise URLs: json://, mailto://, slack://, tgram://,\n"
    "ntfy://, ...).  A target is named by its scheme and host only: its URL carries tokens and is never shown.\n"
    "Exit 0 when every target answered, 1 when one did not, 2 when none is configured or a URL is bad.\n"
)

EXECUTE_NOTE = (
    "One argument after -- is a shell line, run through bash -lc (pipes, &&, globs work);\n"
    "several arguments are an argv, run as is.  The job writes its results to $EPS_OUTPUT_DIR.\n"
)

MCP_NOTE = (
    "Tools: check, intents, plan, execute, status, wait, logs, pull, cancel; each result is the --json\n"
    "document of the command (eps schema NAME).  execute always detaches; wait waits at most its timeout\n"
    "(default 50 s, at most 600 s); logs returns at most max_bytes from an offset.  An MCP client runs\n"
    "it as the command `eps` with the argument `mcp` (e.g. claude mcp add eps -- eps mcp).\n"
)

SIMULATE_NOTE = (
    "Each dispatch of the history (the jobs named eps-<dispatch>) walks the ladder again under each cap\n"
    "setting: it starts on a tier when its wait there is at most the cap, else moves on, then to the paid\n"
    "lanes.  Waits history does not hold are drawn (seeded) from the tier's Kaplan-Meier curve for similar\n"
    "jobs; censored waits count as lower bounds.  --sacct FILE: the output of\n"
    "  sacct -X -P -o JobID,JobName,QOS,Submit,Start,End,State,ReqTRES   (with its header line)\n"
)

#: Shell completion hooks (shtab reads ``action.complete``): functions of the preamble in
#: :mod:`eps.shell.cli.completion` that ask ``eps _complete WHAT``.
_COMPLETE = {
    what: {"bash": f"_eps_complete_{what}", "zsh": f"_eps_complete_{what}"}
    for what in ("intents", "lanes", "dispatches", "schemas")
}


def _width() -> int:
    """The help's width as argparse takes it (``shutil.get_terminal_size`` less 2), read
    without importing shutil (and with it bz2 and lzma): argparse makes a formatter for
    every option it adds, so the default one costs every ``eps plan`` that import."""
    import os
    import sys

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:  # fmt: skip
        super().__init__(prog, indent_increment, max_help_position, _width() if width is None else width)


class _RawFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written (the subcommands' help)."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        raise UsageError(f"{self.prog}: {_suggest_choice(message)} (see {self.prog} --help)")


def _suggest_choice(message: str) -> str:
    """argparse's "invalid choice: 'exeucte' (choose from ...)" with a "did you mean"."""
    import re

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m is None:
        return message
    choices = [c.strip().strip("'") for c in m[2].split(",")]
    from difflib import get_close_matches

    close = get_close_matches(m[1], choices, n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"choose from {', '.join(choices)}"
    return f"{message[: m.start()]}invalid choice: {m[1]!r} ({hint})"


def _epilog(cmd: str, note: str = "") -> str:
    return note + "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[cmd])


class _Unused:
    """Stands in for the parser of a subcommand this run does not parse (``build(only=)``):
    what is added to it goes nowhere."""

    def add_argument(self, *_args: Any, **_kwargs: Any) -> object:
        import types

        return types.SimpleNamespace()


class _Subcommands:
    """``root.add_subparsers()``, making only the subcommand ``only`` for real (every one
    when ``only`` is None): argparse spends about a millisecond on each parser it makes."""

    def __init__(self, real: argparse._SubParsersAction[_Parser], only: str | None) -> None:
        self.real, self.only = real, only

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if self.only is not None and name != self.only:
            return _Unused()  # type: ignore[return-value]  # a stand-in: only add_argument is called on it
        return self.real.add_parser(name, **kwargs)


def _sub(
    sub: _Subcommands, name: str, help_: str, *, note: str = "", usage: str | None = None
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_,
        description=help_[0].upper() + help_[1:] + ".",
        epilog=_epilog(name, note),
        usage=usage,
        formatter_class=_RawFormatter,
    )
    return p


def _typed(check: Callable[[str], T], text: str) -> T:
    """``check(text)``, its ValueError as argparse's type error (the message as it is)."""
    try:
        return check(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> int:
    return _typed(values.duration, text)


def _whole(what: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` (to ``high``), else one line naming ``what``."""

    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < low or (high is not None and int(text) > high):
            span = f">= {low}" if high is None else f"{low}..{high}"
            raise argparse.ArgumentTypeError(f"{what} is a whole number {span}, got {text!r}")
        return int(text)

    return parse


def _count(text: str) -> int:
    return _typed(values.count, text)


def _sweep(text: str) -> int:
    return _typed(values.sweep, text)


def _sweep_parallel(text: str) -> int:
    return _typed(values.sweep_parallel, text)


def _retry(text: str) -> tuple[str, ...]:
    return _typed(values.retry, text)


def _restarts(text: str) -> int:
    return _typed(values.max_restarts, text)


def _seconds_or_zero(text: str) -> int:
    return _typed(values.seconds_or_zero, text)


def _stall_after(text: str) -> int:
    return _typed(values.stall_after, text)


def _on_stall(text: str) -> str:
    return _typed(values.on_stall, text)


def _gpu(text: str) -> tuple[str, ...]:
    return _typed(values.gpu, text)


def _gpu_mem(text: str) -> int:
    return _typed(values.gpu_mem, text)


def _footprint(text: str) -> float:
    return _typed(values.footprint, text)


def _limit(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"limit must be a whole number 0..100000, got {text!r}")
    return int(text)


def _caps(text: str) -> Caps:
    from eps.core.simulate import parse_caps

    try:
        return parse_caps(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rounds(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError(f"rounds must be a whole number 1..10000, got {text!r}")
    return int(text)


def _json(p: argparse.ArgumentParser, what: str = "output") -> None:
    p.add_argument("--json", action="store_true", help=f"machine-readable {what} (see `eps schema`)")


def _wide(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wide", action="store_true", help="never wrap or cut table cells, whatever the width")


def add_job_options(p: argparse.ArgumentParser) -> None:
    a = p.add_argument("intent", nargs="?", help="what the job needs (see `eps intents`)")
    a.complete = _COMPLETE["intents"]  # type: ignore[attr-defined]
    p.add_argument("--job", metavar="FILE", help="a job file (TOML): its fields are the defaults, flags override them")
    p.add_argument(
        "--duration", type=_duration,
        help="estimated run time: 45s, 30m, 1h30m, 90min, 01:30:00, 2d (give it: it gives better routes); without "
        "it the duration is unknown and taken as long: never the shared VM, no spot unless --restartable, "
        "and the time limit is the lane's maximum (a QoS tier's MaxWall, flex-start's 7d, [jobs] max_time_limit)",
    )  # fmt: skip
    p.add_argument(
        "--restartable", action=argparse.BooleanOptionalAction, help="the job can be restarted (spot-friendly)"
    )
    p.add_argument("--footprint-gb", type=_footprint, help="data footprint in GB (0)")
    p.add_argument("--gradient-fit", action=argparse.BooleanOptionalAction, help="the job is a gradient-descent fit")
    p.add_argument(
        "--fall-through", action=argparse.BooleanOptionalAction,
        help="a free cluster the cluster itself says is set up wrong (partition, account) is skipped "
        "instead of ending the dispatch (default: the dispatch ends with the fix; nothing is paid for)",
    )  # fmt: skip
    p.add_argument("--count", type=_count, help="parallel copies (CPU: N machines; GPU: one N-times machine) (1)")
    p.add_argument(
        "--sweep", type=_sweep, metavar="N",
        help="N independent tasks of this job as one dispatch (EPS_TASK_INDEX 0..N-1), each its own machine or "
        "allocation of the intent's size; on a SLURM cluster one sbatch --array (1..1000); one row in eps status, "
        "one eps wait and one eps cancel for all of them",
    )  # fmt: skip
    p.add_argument(
        "--sweep-parallel", type=_sweep_parallel, metavar="K",
        help="at most K of a sweep's tasks at once; a task that ends lets the next start (all)",
    )  # fmt: skip
    p.add_argument(
        "--gpu", type=_gpu, metavar="TYPE[,TYPE...]",
        help="the GPU models the job may use: l4, a100-40, a100-80, h100, h200, b200, any (default: any of the "
        "intent's least memory, see `eps intents`); naming models drops that minimum unless --gpu-mem says",
    )  # fmt: skip
    p.add_argument(
        "--gpu-mem", type=_gpu_mem, metavar="GB", help="least memory per GPU, GB (default: the intent's)"
    )
    p.add_argument(
        "--retry", type=_retry, metavar="EVENT[,EVENT]",
        help="what eps retries: no-capacity (every rung exhausted: wait, plan again), interruption (a preempted, "
        "lost or wedged machine, a SLURM run the cluster ended), error (a non-zero exit), stalled (its stall watch "
        "stopped it: --on-stall stop); "
        "default: interruption for a --restartable job, nothing otherwise",
    )  # fmt: skip
    p.add_argument(
        "--retry-for", type=_duration, metavar="DURATION", help="keep retrying this long from submission (1d)"
    )
    p.add_argument("--max-restarts", type=_restarts, metavar="N", help="relaunch the job at most N times (3)")
    p.add_argument(
        "--sync-every", type=_seconds_or_zero, metavar="DURATION",
        help="pull $EPS_OUTPUT_DIR this often while the job runs, so a relaunch resumes from it (10m; 0: never)",
    )  # fmt: skip
    p.add_argument(
        "--stall-after", type=_stall_after, metavar="DURATION",
        help="a job whose log and outputs (a GPU job: its GPUs) are silent this long is stalled "
        "(30m; 0 or off: not watched)",
    )  # fmt: skip
    p.add_argument(
        "--on-stall", type=_on_stall, metavar="notify|stop",
        help="what a stall does: notify (the default), or stop the job (exit 125; --retry stalled relaunches it)",
    )  # fmt: skip
    a = p.add_argument("--pin", metavar="LANE", help="run only on this lane: vm, fellows, gcp, runpod (P10)")
    a.complete = _COMPLETE["lanes"]  # type: ignore[attr-defined]
    p.add_argument("--snapshot", metavar="FILE", help="capacity snapshot (JSON or TOML)")
    p.add_argument("--grants", metavar="FILE", help="QoS grants (JSON or TOML); default: the fellows tiers")
    _json(p)


def add_execute_options(e: argparse.ArgumentParser) -> None:
    e.add_argument(
        "--workdir", metavar="DIR", help="ship DIR to the machine (.gitignore/.epsignore honoured); run in it"
    )
    e.add_argument("--setup", metavar="CMD", help="a shell line run once before the command (e.g. pip install ...)")
    e.add_argument(
        "--env", metavar="KEY[=VALUE]", action="append", default=None,
        help="pass a variable: KEY takes its value from your environment; values are never written down",
    )  # fmt: skip
    e.add_argument(
        "--time-limit", metavar="DURATION",
        help="stop the job after this long (default: 1.5 x --duration; without --duration, the lane's maximum)",
    )  # fmt: skip
    e.add_argument(
        "--storage", metavar="URL",
        help="outputs, checkpoints and log go to s3://BUCKET/PREFIX or gs://BUCKET/PREFIX from the machine itself"
        " (default: [storage] url; none: not for this job)",
    )  # fmt: skip
    _input(e)
    e.add_argument(
        "--notify", metavar="URL|env:NAME", action="append", default=None,
        help="also tell this target (an apprise URL) what [notify] events says, besides [notify] urls; repeatable;"
        " env:NAME takes the URL from variable NAME: the token-safe form (a URL given here shows in ps)",
    )  # fmt: skip
    e.add_argument("--wait", action="store_true", help="wait for the job, pull its outputs, exit with its code")
    e.add_argument("--follow", action="store_true", help="like --wait, and stream the job's log meanwhile")
    e.add_argument(
        "--detach", action="store_true",
        help="return as soon as the supervisor owns the dispatch (eps attach / eps wait --timeout follow it)",
    )  # fmt: skip
    a = e.add_argument("--resume", metavar="DISPATCH", help="continue the walk of a dispatch after a crash")
    a.complete = _COMPLETE["dispatches"]  # type: ignore[attr-defined]
    e.add_argument("--dispatch-id", metavar="ID", help="use this dispatch id (default: a new one)")
    a = e.add_argument(
        "--after", metavar="DISPATCH",
        help="start once DISPATCH (one job) has succeeded, its outputs in $EPS_INPUT_DIR/DISPATCH/;"
        " if it fails, this ends dependency_failed",
    )  # fmt: skip
    a.complete = _COMPLETE["dispatches"]  # type: ignore[attr-defined]


def _input(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input", metavar="URL[:DEST]", action="append", default=None,
        help="copy a storage prefix into the workdir (DEST) on the machine, before --setup; repeatable"
        " (eps plan names it; eps execute lists and sizes it)",
    )  # fmt: skip


def _timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout", type=_duration, metavar="DURATION",
        help="return after at most this long, exit 75 (still running) if it has not ended",
    )  # fmt: skip


def _dispatch_arg(p: argparse.ArgumentParser, help_: str, *, optional: bool = False) -> None:
    a = p.add_argument("dispatch", nargs="?" if optional else None, help=help_)
    a.complete = _COMPLETE["dispatches"]  # type: ignore[attr-defined]


def build(only: str | None = None) -> _Parser:  # noqa: PLR0915  (one statement per option: the parser is a table)
    """The whole ``eps`` parser; with ``only`` (one of :data:`SUBCOMMANDS`), the root and
    that subcommand alone (what a run of it parses; ``eps --help`` and a misspelt
    subcommand get the whole parser)."""
    root = _Parser(
        prog="eps",
        description="Plan and run research compute jobs on the right lane.",
        epilog="start with: eps check; eps plan INTENT --duration 2h; eps SUBCOMMAND --help",
    )
    root.add_argument("--version", action="store_true", help="print the version and exit")
    root.add_argument("--list-intents", action="store_true", help="same as `eps intents`")
    sub = _Subcommands(root.add_subparsers(dest="cmd", parser_class=_Parser, metavar="SUBCOMMAND"), only)

    p = _sub(sub, "plan", "dry run: the route plan for a job, and what this machine can run of it")
    add_job_options(p)
    _wide(p)
    p.add_argument(
        "--park", metavar="[CLUSTER:]QOS=DURATION", help="the job is parked (PENDING) on that tier for that long"
    )
    p.add_argument("--park-reason", metavar="REASON", help="its SLURM pending reason (e.g. Priority)")
    _input(p)
    p.add_argument("--list-intents", action="store_true", help="list the intents and exit")

    i = _sub(sub, "intents", "the intent table")
    _json(i)
    _wide(i)

    e = _sub(
        sub,
        "execute",
        "walk the plan for real: submit, park, fail over; then run -- COMMAND",
        note=EXECUTE_NOTE,
        usage="eps execute [INTENT] [options] -- COMMAND...",
    )
    add_job_options(e)
    add_execute_options(e)

    c = _sub(sub, "check", "which lanes this machine can use, and how to fix the others")
    _json(c)
    c.add_argument("--timeout", type=_duration, default=10, help="how long each lane may take to answer (10s)")

    s = _sub(sub, "status", "what is running where, from the ledger (reconciled, each provider within --timeout)")
    _dispatch_arg(s, "one dispatch id (default: the active ones and the newest)", optional=True)
    s.add_argument("--limit", type=_limit, default=20, help="how many of the newest finished ones to show (20)")
    s.add_argument("--all", action="store_true", help="every dispatch in the ledger")
    s.add_argument("--active", action="store_true", help="only the dispatches that may hold something")
    s.add_argument("--since", type=_duration, metavar="DURATION", help="only those submitted within DURATION (2d)")
    a = s.add_argument("--intent", metavar="INTENT", help="only those of this intent")
    a.complete = _COMPLETE["intents"]  # type: ignore[attr-defined]
    s.add_argument("--timeout", type=_duration, default=5, help="how long each provider may take to answer (5s)")
    s.add_argument("--mine", action="store_true", help="a team's ledger: only the dispatches this host holds now")
    s.add_argument("--host", metavar="NAME", help="a team's ledger: only the dispatches host NAME holds now")
    _json(s)
    _wide(s)

    c = _sub(sub, "cancel", "stop a dispatch and release every resource (a finished one is left as it is)")
    _dispatch_arg(c, "the dispatch id", optional=True)
    c.add_argument("--all", action="store_true", help="every live dispatch")
    c.add_argument("--force", action="store_true", help="a team's ledger: another user's dispatch too (recorded)")
    _json(c)

    r = _sub(sub, "reconcile", "compare the ledger with the providers; adopt or clean up")
    _json(r)

    lg = _sub(sub, "logs", "the job's stdout and stderr (live with -f)")
    _dispatch_arg(lg, "the dispatch id")
    lg.add_argument("-f", "--follow", action="store_true", help="keep streaming until the job ends")
    lg.add_argument("--task", type=_whole("a task index", 0), metavar="I",
                    help="a sweep's task I (0..N-1; default: task 0, said on stderr)")  # fmt: skip
    lg.add_argument("--tail", type=_whole("a line count", 1), metavar="N",
                    help="only the last N lines (within --max-bytes)")  # fmt: skip
    lg.add_argument("--offset", type=_whole("a byte offset", 0), metavar="BYTES",
                    help="from this byte on (a --json next_offset)")  # fmt: skip
    lg.add_argument("--max-bytes", type=_whole("a size in bytes", 1, LOGS_MAX_BYTES), metavar="BYTES",
                    help=f"at most this much of each log with --tail/--offset/--json (default {LOGS_DEFAULT_BYTES}, "
                         f"at most {LOGS_MAX_BYTES})")  # fmt: skip
    _json(lg, "piece of each log: text, size, next_offset (the MCP tool logs)")

    pl = _sub(sub, "pull", "copy the job's $EPS_OUTPUT_DIR back")
    _dispatch_arg(pl, "the dispatch id")
    pl.add_argument("--to", metavar="DIR", help="where to (default: <state dir>/outputs/<dispatch>)")
    pl.add_argument("--task", type=_whole("a task index", 0), metavar="I",
                    help="only a sweep's task I (0..N-1; default: every task)")  # fmt: skip
    _json(pl)

    w = _sub(sub, "wait", "wait for the job to end, pull its outputs, exit with its code")
    _dispatch_arg(w, "the dispatch id")
    _timeout(w)
    _json(w, "progress events")

    at = _sub(sub, "attach", "follow a dispatch again: its events so far, then live, until it ends")
    _dispatch_arg(at, "the dispatch id")
    _timeout(at)
    _json(at, "progress events")

    sv = _sub(sub, "supervise", "make sure every unsettled dispatch has a supervisor (for a timer or cron)")
    _json(sv)

    nt = _sub(sub, "notify", "notifications ([notify]): send a test message to each target", note=NOTIFY_NOTE)
    nt.add_argument("action", choices=("test",), help="test: one message to each target, and which answered")
    _json(nt)

    sh = _sub(sub, "ssh", "a shell where the job runs (or run -- COMMAND there)", usage="eps ssh DISPATCH [-- COMMAND]")
    _dispatch_arg(sh, "the dispatch id")

    m = _sub(sub, "mcp", "serve eps to agents: a Model Context Protocol server on stdin/stdout (eps[mcp])",
             note=MCP_NOTE)
    m.add_argument("--tools", action="store_true", help="list the tools and exit (no server)")

    _sub(sub, "guide", "the agent guide: which intent, how to dispatch and follow without blocking, exit codes")

    si = _sub(sub, "simulate", "replay the cluster's own queue history against other park caps (P8)",
              note=SIMULATE_NOTE)  # fmt: skip
    si.add_argument("--sacct", metavar="FILE", help="read the history from a sacct dump instead of the cluster")
    si.add_argument(
        "--caps", type=_caps, action="append", metavar="FIRST,NEXT",
        help="a park-cap setting in seconds: rung 1, rungs 2+ (inf: unbounded; repeat it); "
        "default: today's setting and a small grid around it",
    )  # fmt: skip
    si.add_argument("--since", type=_duration, default=30 * 86_400, metavar="DURATION",
                    help="history this far back, read from the cluster (30d)")  # fmt: skip
    a = si.add_argument("--cluster", metavar="NAME", help="which SLURM cluster (default: the first with a ladder)")
    a.complete = _COMPLETE["lanes"]  # type: ignore[attr-defined]
    si.add_argument("--all-users", action="store_true", help="every user's jobs on the cluster, not only yours")
    si.add_argument("--all-jobs", action="store_true",
                    help="replay every job on a ladder tier, not only eps's dispatches")  # fmt: skip
    si.add_argument("--ledger", action=argparse.BooleanOptionalAction,
                    help="add the ledger's parks that sacct does not hold (default: on, off with --sacct)")  # fmt: skip
    si.add_argument("--seed", type=int, default=0, help="the seed of the draws (0): same seed, same figures")
    si.add_argument("--rounds", type=_rounds, default=50, help="replays of each dispatch that needs a draw (50)")
    si.add_argument("--plot", metavar="FILE.png", help="draw the time-to-start distributions (needs eps[plot])")
    _json(si)
    _wide(si)

    sc = _sub(sub, "schema", "the JSON Schema of a --json output (plan, intents, status, events, check, ...)")
    a = sc.add_argument("name", nargs="?", help="which schema (none: list them)")
    a.complete = _COMPLETE["schemas"]  # type: ignore[attr-defined]

    co = _sub(sub, "completion", "a shell completion script (intents, lanes and dispatch ids complete too)")
    co.add_argument("shell", choices=("bash", "zsh"), help="bash or zsh")
    return root
