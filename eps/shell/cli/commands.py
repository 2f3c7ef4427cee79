"""The commands that act: ``execute``, ``status``, ``cancel``, ``reconcile`` (and ``notify test``).

Parsers are declared here (cheap); the walker, ledger and lane adapters load
only when one of these commands runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eps.core.model import JobError
from eps.shell.cli.exits import SCHEMA_VERSION, Exit
from eps.shell.config.settings import Settings

if TYPE_CHECKING:
    from eps.core.outcome import Handle
    from eps.shell.render.progress import Reporter
    from eps.shell.request.job import JobRequest
    from eps.shell.service.check import LaneOptions
    from eps.shell.service.context import Ctx, DispatchRow

EXIT_OK, EXIT_FAILED = Exit.OK, Exit.NOTHING_STARTS


def _nothing(rows: Sequence[Any]) -> int:
    """The exit status of a dispatch that started nothing: a free cluster set up wrong has its
    own (the fix is in the config, and nothing was paid for), anything else is 1."""
    if any(getattr(r, "terminal", None) == "misconfigured" for r in rows):
        return Exit.MISCONFIGURED
    return EXIT_FAILED


def run(
    ns: argparse.Namespace,
    settings: Settings,
    command: Sequence[str],
    request_of: Callable[[argparse.Namespace, Sequence[str]], JobRequest],
    *,
    env: dict[str, str],
    options: LaneOptions | None = None,
) -> int:
    """``execute``, ``status``, ``cancel``, ``reconcile``; errors map to exit codes in cli.main."""
    from eps.shell.render.progress import Reporter
    from eps.shell.service.operations import Service

    if ns.cmd == "notify":
        return _notify_test(ns, settings)
    reporter = Reporter(json_lines=bool(getattr(ns, "json", False)))
    try:
        with Service(env, settings=settings, lane_options=options).opened(reporter) as ctx:
            return _dispatch_command(ns, ctx, command, request_of, reporter)
    finally:
        reporter.stop_live()


def _dispatch_command(
    ns: argparse.Namespace,
    ctx: Ctx,
    command: Sequence[str],
    request_of: Callable[[argparse.Namespace, Sequence[str]], JobRequest],
    reporter: Reporter,
) -> int:
    from eps.shell.service import operations
    settings = ctx.settings

    # Every input error is found before anything happens: no reconcile, no provider call.
    if getattr(ns, "resume", None) and (ns.intent or command):
        raise JobError("usage", "eps execute --resume DISPATCH takes no intent or command", None)
    if getattr(ns, "resume", None) and getattr(ns, "notify", None):
        raise JobError("usage", "eps execute --resume DISPATCH takes no --notify (its targets are those it was "
                       "handed over with)", None)  # fmt: skip
    _phase_address(ns, ctx)  # D/phase: a pipeline's phase, its own row
    for named in (getattr(ns, "dispatch", None), getattr(ns, "resume", None)):
        if named:
            operations.known(ctx, named)
    if getattr(ns, "resume", None):  # a new job's --dispatch-id is the execute operation's to check
        operations.unused(ctx, getattr(ns, "dispatch_id", None) or None)
    if ns.cmd in ("logs", "pull", "wait", "attach") and command:
        raise JobError("usage", f"eps {ns.cmd} takes no command after --", None)
    if ns.cmd == "logs" and ns.follow and _piece(ns):
        raise JobError("usage", "eps logs: -f streams the whole log; --tail/--offset/--max-bytes/--json read "
                                "a piece of it (choose one)", None)  # fmt: skip
    if ns.cmd == "status" and ns.mine and ns.host:
        raise JobError("usage", "eps status: --mine or --host NAME, not both", None)
    detached = settings.jobs.supervise == "detached"
    if detached and ns.cmd in ("status", "wait", "attach", "logs", "reconcile", "supervise"):
        pid = operations.revive(ctx)  # a dispatch left by a dead supervisor is taken on again
        if ns.cmd == "supervise":
            return _supervise(ns, ctx, pid)
    if ns.cmd == "supervise":
        raise JobError("usage", 'eps supervise: dispatches are walked inline here ([jobs] supervise = "inline")', None)
    if ns.cmd == "status":
        return _status(ns, ctx)
    if ns.cmd == "cancel":
        if not ns.dispatch and not ns.all:
            raise JobError("usage", "eps cancel: name a dispatch or --all", None)
        rep = operations.cancel(ctx, [ns.dispatch] if ns.dispatch else None, force=ns.force)
        if ns.json:
            _emit(rep)
        else:
            cancelled = ", ".join(rep["cancelled"]) or "nothing"
            by = rep.get("cancelled_by")
            by = f" (by {by['user']}@{by['host']})" if by else ""
            sys.stdout.write(f"cancelled {cancelled}{by}; released {len(rep['released'])}\n")
            for line in (*rep["finished"], *rep["skipped"]):
                sys.stdout.write(f"  {line}\n")
            for e in rep["errors"]:
                sys.stdout.write(f"  error: {e}\n")
        return EXIT_FAILED if rep["errors"] else EXIT_OK
    if ns.cmd == "reconcile":
        report = operations.reconcile(ctx)
        if ns.json:
            _emit(report)
        else:
            sys.stdout.write(_reconcile_text({k: v for k, v in report.items() if k != "schema_version"}))
        return EXIT_FAILED if report["errors"] else EXIT_OK
    if ns.cmd in ("wait", "attach") and detached:
        return _attach(ns, ctx, reporter, history=ns.cmd == "attach")
    if ns.cmd == "attach":
        raise JobError("usage", 'eps attach: this config walks dispatches inline ([jobs] supervise = "inline")', None)
    if ns.cmd in ("logs", "pull", "wait", "ssh"):
        return _lifecycle(ns, ctx, command, reporter)
    if (piped := _pipeline(ns, ctx, command, request_of, reporter)) is not None:  # a file of [[phases]]: handed over
        return piped
    if detached:
        return _hand_over(ns, ctx, command, request_of, reporter)
    return _execute(ns, ctx, command, request_of, reporter)


def _phase_address(ns: argparse.Namespace, ctx: Ctx) -> None:
    """``D/phase`` names a pipeline's phase: its own row from here on."""
    if getattr(ns, "dispatch", None) and "/" in ns.dispatch:
        from eps.shell.service.phase_address import resolve

        ns.dispatch = resolve(ctx, ns.dispatch)


def _pipeline(ns: argparse.Namespace, ctx: Ctx, command: Sequence[str],
              request_of: Callable[[argparse.Namespace, Sequence[str]], JobRequest], reporter: Reporter) -> int | None:
    """``eps execute --job pipeline.toml`` or ``--after D``: handed over, then waited for with
    ``--wait``; its exit code.  ``None``: neither."""
    if ns.cmd != "execute" or ns.resume or not (getattr(ns, "job", None) or getattr(ns, "after", None)):
        return None
    from eps.shell.cli.pipeline_cmd import after_dispatch, handed_over, pipeline_dispatch

    piped = pipeline_dispatch(ns, ctx, command) if ns.job else None
    if piped is None and ns.after:  # --after D: a one-phase pipeline that needs D
        piped = after_dispatch(ns, ctx, command, request_of)
    if piped is None:
        return None
    if ns.wait or ns.follow:
        return _follow(ns, ctx, reporter, piped, history=True, wait=True, timeout_s=None)
    return handed_over(ctx, piped, as_json=reporter.json_lines)


def _lifecycle(ns: argparse.Namespace, ctx: Ctx, command: Sequence[str], reporter: Reporter) -> int:
    from eps.shell.service import lifecycle as life
    from eps.shell.service import operations

    ledger, lanes = ctx.ledger, ctx.lanes
    if ns.cmd == "logs":
        if not _piece(ns):
            return life.logs(ledger, lanes, ns.dispatch, follow=ns.follow, task=ns.task)
        got = operations.logs(ctx, ns.dispatch, offset=ns.offset or 0, tail_lines=ns.tail,
                           max_bytes=ns.max_bytes or operations.LOGS_DEFAULT_BYTES, task=ns.task)  # fmt: skip
        if ns.json:
            _emit(got)
        else:
            if got.get("note"):
                sys.stderr.write(f"eps: {got['note']}\n")
            for p in got["logs"]:
                sys.stdout.write(p["text"] if p["note"] is None else f"{p['dispatch']}: {p['note']}\n")
        return EXIT_OK
    if ns.cmd == "pull":
        each = None if ns.json else (lambda d, note: sys.stdout.write(f"{d}: {note}\n"))
        pulled = operations.pull(ctx, ns.dispatch, ns.to, each, task=ns.task)
        if ns.json:
            _emit(pulled)
        return EXIT_OK
    if ns.cmd == "wait":
        from eps.shell.service.waits import wait

        got = wait(ctx, ns.dispatch, timeout_s=ns.timeout, capped=False)
        if not got["ended"]:
            from eps.shell.service.attach import left_running

            left_running(ns.dispatch, f"--timeout {ns.timeout}s passed", reporter, life.rows_of(ledger, ns.dispatch))
            return Exit.STILL_RUNNING
        return int(got["exit_code"])
    argv = life.ssh_argv(ledger, lanes, ns.dispatch, command)
    sys.stdout.flush()
    if not sys.stdin.isatty() and not command:
        raise JobError("usage", "eps ssh: an interactive shell needs a terminal (or give -- COMMAND)", None)
    return subprocess_call(argv)


def _piece(ns: argparse.Namespace) -> bool:
    """``eps logs`` reads a bounded piece (the MCP tool's) rather than streaming the log."""
    return bool(ns.json or ns.tail is not None or ns.offset is not None or ns.max_bytes is not None)


def subprocess_call(argv: Sequence[str]) -> int:
    """Run ``argv`` in the foreground with this terminal; its exit code."""
    import subprocess

    return subprocess.call(list(argv))


def _execute(
    ns: argparse.Namespace,
    ctx: Ctx,
    command: Sequence[str],
    request_of: Callable[[argparse.Namespace, Sequence[str]], JobRequest],
    reporter: Reporter,
) -> int:
    from eps.shell.service import inline, operations

    if getattr(ns, "detach", False):
        raise JobError("usage", 'eps execute --detach needs a supervisor ([jobs] supervise = "detached")', None)
    request = None if ns.resume else request_of(ns, command)
    snapshot, grants = operations.given(getattr(ns, "snapshot", None), getattr(ns, "grants", None))
    given = bool(getattr(ns, "grants", None))
    if request is None:  # --resume: the recorded dispatch walks again
        dispatch = ns.resume
        reporter.start_live()
        results = inline.walk_here(ctx, None, dispatch, snapshot, grants, grants_given=given)
    else:  # every input error is found before anything happens (no reconcile, no call)
        dispatch, results = inline.run_here(
            ctx, request, ns.dispatch_id, snapshot if getattr(ns, "snapshot", None) else None,
            grants if given else None, before=reporter.start_live)  # fmt: skip
    reporter.stop_live()
    if not reporter.json_lines:
        for r in results:
            _result_line(r.dispatch, r.handle, r.failure, r.terminal)
    started = all(r.handle is not None for r in results)
    if not any(r.handle is not None for r in results):
        return _nothing(results)
    if getattr(ns, "wait", False) or getattr(ns, "follow", False):
        from eps.shell.service.waits import wait

        code = int(wait(ctx, dispatch, timeout_s=None, follow=_follower(ctx) if ns.follow else None)["exit_code"])
        return code if started else max(code, EXIT_FAILED)  # no deadline: it ended
    if not reporter.json_lines:
        sys.stdout.write(f"follow it: eps logs -f {dispatch}; wait for it: eps wait {dispatch}\n")
    return EXIT_OK if started else EXIT_FAILED


def _result_line(dispatch: str, h: Handle | None, failure: str | None, terminal: str | None) -> None:
    if h is not None:
        where = h.qos or h.zone or ""
        sys.stdout.write(f"{dispatch} {h.lane} {where} {h.machine or ''} {h.id} {h.state}\n".replace("  ", " "))
        return
    sys.stdout.write(f"{dispatch} failed: {failure}\n")
    if terminal == "no_usable_lane":
        sys.stdout.write("  what this machine can use, and how to fix the rest: eps check\n")


def _hand_over(
    ns: argparse.Namespace,
    ctx: Ctx,
    command: Sequence[str],
    request_of: Callable[[argparse.Namespace, Sequence[str]], JobRequest],
    reporter: Reporter,
) -> int:
    """``eps execute`` under a supervisor: every input error first (nothing recorded), then
    record the dispatch, hand it to the state directory's supervisor and follow it (until it
    landed; with --wait/--follow until it ended; with --detach not at all)."""
    from eps.shell.service import operations

    settings = ctx.settings
    for note in settings.notes:
        sys.stderr.write(f"eps: note: {note}\n")
    try:
        if ns.resume:
            dispatch = ns.resume
            why = operations.resume(ctx, dispatch)
            if why is not None:
                sys.stdout.write(f"{dispatch} failed: {why}\n")
                return EXIT_FAILED
        else:
            request = request_of(ns, command)
            snapshot, grants = operations.given(getattr(ns, "snapshot", None), getattr(ns, "grants", None))
            dispatch = operations.submit(ctx, request, ns.dispatch_id, snapshot if ns.snapshot else None,
                                         grants if ns.grants else None)  # fmt: skip
    except operations.NotTaken as exc:
        sys.stderr.write(f"eps: error: {exc.dispatch}: {exc.said}\n")
        return EXIT_FAILED
    if ns.detach:
        answer = operations.execute_doc(ctx, dispatch)
        if reporter.json_lines:
            _emit(answer)
        else:
            sys.stdout.write(f"{dispatch} {answer['state']}\n")
            sys.stderr.write(f"eps: {dispatch} runs under its supervisor: eps attach {dispatch}; "
                             f"eps wait {dispatch} --timeout 5m; eps cancel {dispatch}\n")  # fmt: skip
        return EXIT_OK
    wait = bool(getattr(ns, "wait", False) or getattr(ns, "follow", False))
    return _follow(ns, ctx, reporter, dispatch, history=True, wait=wait, timeout_s=None)


def _attach(ns: argparse.Namespace, ctx: Ctx, reporter: Reporter, *, history: bool) -> int:
    """``eps attach D`` (the events so far, then live) and ``eps wait D`` (from now on): until
    the dispatch has ended (the job's own code) or ``--timeout`` passed (still running)."""
    from eps.shell.service import lifecycle as life
    life.rows_of(ctx.ledger, ns.dispatch)  # an unknown dispatch is one line
    return _follow(ns, ctx, reporter, ns.dispatch, history=history, wait=True, timeout_s=ns.timeout)


def _follow(
    ns: argparse.Namespace,
    ctx: Ctx,
    reporter: Reporter,
    dispatch: str,
    *,
    history: bool,
    wait: bool,
    timeout_s: float | None,
) -> int:
    from eps.core.states import DispatchState
    from eps.shell.service import attach as A
    from eps.shell.service import lifecycle as life
    from eps.shell.service.operations import exit_of

    ledger, lanes = ctx.ledger, ctx.lanes
    on_started = None
    if getattr(ns, "follow", False) and ns.cmd == "execute":
        log_follow = _follower(ctx)
        on_started = log_follow
    reporter.start_live()
    try:
        rows = A.follow(ledger, reporter, dispatch, lanes.env, done=A.settled if wait else A.landed,
                        history=history, timeout_s=timeout_s, on_started=on_started)  # fmt: skip
    except (A.Detached, KeyboardInterrupt) as exc:
        reporter.stop_live()
        how = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else f"{exc}"
        A.left_running(dispatch, f"{how} stopped this eps", reporter, life.rows_of(ledger, dispatch))
        return A.stopped_code(exc)
    finally:
        reporter.stop_live()
    if rows is None:
        A.left_running(dispatch, f"--timeout {timeout_s:g}s passed", reporter, life.rows_of(ledger, dispatch))
        return Exit.STILL_RUNNING
    started = all(r.handle is not None for r in rows)
    if not wait and (waiting := [r for r in rows if r.state is DispatchState.WAITING]):
        if not reporter.json_lines:
            for r in waiting:
                sys.stdout.write(f"{r.id} waiting: {r.message}\n")
            sys.stdout.write(f"it starts without a command when capacity is back: eps attach {dispatch}; "
                             f"eps wait {dispatch}; eps cancel {dispatch} stops it\n")  # fmt: skip
        return Exit.STILL_RUNNING
    if wait:
        from eps.shell.service.pipelines import exit_of as phases_exit

        code = phases_exit(ctx, rows, sys.stderr.write)
        if code is not None:  # a pipeline's phases: 0, or PHASE_FAILED naming the failed phase
            return code
        code = exit_of(rows, sys.stderr.write)
        if not any(r.handle is not None for r in rows) and ns.cmd == "execute":
            return max(code, _nothing(rows))
        return code if started or ns.cmd != "execute" else max(code, EXIT_FAILED)
    if not reporter.json_lines:
        for r in rows:
            _result_line(r.id, r.handle, None if r.handle else r.message, r.terminal)
        sys.stdout.write(f"follow it: eps logs -f {dispatch}; wait for it: eps wait {dispatch}\n")
    return EXIT_OK if started else _nothing(rows)


def _supervise(ns: argparse.Namespace, ctx: Ctx, pid: int | None) -> int:
    """``eps supervise``: every unsettled dispatch has a supervisor (started if none); cheap
    and idempotent, for a timer or cron line."""
    from eps.shell.service import operations

    rows = operations.supervised(ctx)
    if ns.json:
        _emit({"supervisor": pid, "dispatches": [r.id for r in rows]})
    elif pid is None:
        sys.stdout.write("nothing to supervise\n")
    else:
        sys.stdout.write(f"supervisor {pid} owns {len(rows)} dispatch(es): {' '.join(r.id for r in rows)}\n")
    return EXIT_OK


def _follower(ctx: Ctx) -> Callable[[Any], None]:
    """Stream a started job's log to stdout while ``eps execute --follow`` waits for it."""
    from eps.shell.service import lifecycle as life
    def follow(row: DispatchRow) -> None:
        life.logs(ctx.ledger, ctx.lanes, row.id, follow=True)

    return follow


def _status(ns: argparse.Namespace, ctx: Ctx) -> int:
    """``eps status``: the service's document, as JSON or a table."""
    from eps.shell.service import operations
    limit = None if ns.all else ns.limit
    doc = operations.status(ctx, ns.dispatch, limit=limit, active=ns.active, since_s=ns.since, intent=ns.intent,
                            timeout_s=float(ns.timeout), host=ns.host, mine=ns.mine)  # fmt: skip
    if ns.json:
        _emit(doc)
    else:
        from eps.shell.render.status import print_status

        print_status(doc["dispatches"], doc["notes"], ctx.lanes.env, wide=ns.wide)
    return EXIT_OK


def _notify_test(ns: argparse.Namespace, settings: Settings) -> int:
    """``eps notify test``: exit 0 when every target answered, 1 when one did not (2, through
    cli.main: none configured, or a URL apprise cannot read)."""
    from eps.shell.service.operations import notify_test

    doc, said = notify_test(settings)
    if ns.json:
        _emit(doc)
    else:
        sys.stdout.write(said)
    return EXIT_OK if doc["answered"] == doc["total"] else EXIT_FAILED


def _emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=2) + "\n")


def _reconcile_text(report: dict[str, Any]) -> str:
    lines = []
    for k, v in report.items():
        items = [f"{lane} ({why})" for lane, why in v.items()] if isinstance(v, dict) else v
        lines.append(f"{k}: {', '.join(items) if items else '-'}")
    return "\n".join(lines) + "\n"
