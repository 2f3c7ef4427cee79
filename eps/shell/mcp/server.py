"""``eps mcp``: a Model Context Protocol server over stdio, on the official Python SDK
(``mcp`` 2.x, :class:`mcp.server.mcpserver.MCPServer`).  This module is the only one that
imports the SDK, and only ``eps mcp`` imports this module: ``eps plan`` never loads it.

Each tool is a thin call of :mod:`eps.shell.service.operations`, the same operations the command
line runs; its result is the command's ``--json`` document (``structuredContent``, and
the same JSON as text), valid against ``eps schema NAME``.  Arguments are named as the
CLI's long options; intent and lane names are enums from the tables; durations take the
CLI's forms (``"90s"``, ``"1h30m"``, ``"01:30:00"``) or seconds.  An error is a tool
error (``isError``) carrying the CLI's error object ``{"schema_version", "error":
{"code", "text"}, "exit_code"}`` (the did-you-mean included); the server keeps answering
after any error, a bug in eps included.

Every call is bounded: ``execute`` always detaches (it returns the dispatch id and state
as soon as the supervisor owns the dispatch, about half a second); ``wait`` waits at most
its ``timeout`` (default :data:`~eps.shell.service.operations.WAIT_DEFAULT_S` = 50 s, at most
:data:`~eps.shell.service.operations.WAIT_MAX_S` = 600 s: a longer one is cut to 600 s); ``logs``
returns at most ``max_bytes`` (64 KiB by default, at most 1 MiB) from ``offset``, or the
last ``lines``; ``status`` and ``check`` give each provider their ``timeout``.
"""

# No ``from __future__ import annotations``: the SDK reads the tools' annotations (the
# enums are made from this user's tables when the server starts) at run time.

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from eps.core.contract import NEXT_DEFAULT_EVENTS, NEXT_DEFAULT_S, NEXT_MAX_S, TOOLS
from eps.shell.service.errors import error_doc, failure
from eps.shell.service.operations import LOGS_DEFAULT_BYTES, WAIT_DEFAULT_S, WAIT_MAX_S, Service

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from eps.core.model import CapacitySnapshot, QosGrants
    from eps.shell.service.check import LaneOptions  # the service's re-export: a front door imports no lane

#: ``wait`` sends a progress notification this often while it waits.
PROGRESS_EVERY_S = 5.0
#: The names the input schemas offer as enums, filled from the user's tables by :func:`build`.
_ENUMS: dict[str, list[Any]] = {"intent": [], "lane": []}


def _enum(kind: str, *, optional: bool = False) -> Callable[[dict[str, Any]], None]:
    def add(schema: dict[str, Any]) -> None:
        schema["enum"] = [*_ENUMS[kind], *([None] if optional else [])]

    return add


Intent = Annotated[str, Field(description="what the job needs (the intents tool)", json_schema_extra=_enum("intent"))]
IntentFilter = Annotated[
    str | None, Field(description="only dispatches of this intent", json_schema_extra=_enum("intent", optional=True))
]
Lane = Annotated[
    str | None, Field(description="run only on this lane (a pin, P10)", json_schema_extra=_enum("lane", optional=True))
]
Duration = Annotated[
    str | int | None, Field(description="a duration: 45s, 30m, 1h30m, 90min, 01:30:00, 2d, or a number of seconds")
]
Command = Annotated[str | list[str], Field(description="one string: a shell line (run by bash -lc); a list: an argv")]
Dispatch = Annotated[str, Field(description="a dispatch id (from execute or status), or D/phase: a pipeline's phase")]
Mine = Annotated[bool, Field(description="a team's ledger: only the dispatches this host holds now")]
Force = Annotated[bool, Field(description="a team's ledger: cancel another user's dispatch too (recorded as yours)")]
Host = Annotated[str | None, Field(description="a team's ledger: only the dispatches the named host holds now")]
Doc = Annotated[dict[str, Any] | str | None, Field(description="the object inline, or the path of its file")]
Retry = Annotated[
    str | list[str] | None,
    Field(description="what eps retries: no-capacity, interruption, error, stalled (a list or a,b)"),
]
Env = Annotated[list[str] | None, Field(description="KEY (its value from the server's environment) or KEY=VALUE")]
Gpu = Annotated[
    str | list[str] | None,
    Field(description="GPU models allowed: l4, a100-40, a100-80, h100, h200, b200, any (default: the intent's)"),
]
GpuMem = Annotated[int | None, Field(description="least memory per GPU, GB (default: the intent's)")]
Dispatches = Annotated[
    str | list[str] | None, Field(description="the dispatch ids to hear of (none: every dispatch of this state dir)")
]
Cursor = Annotated[
    dict[str, int] | None,
    Field(description="the next_cursor of your last next_events call (none: each dispatch's events from its first)"),
]
Notify = Annotated[
    list[str] | None,
    Field(description="this job's own notification targets: env:NAME (the apprise URL in the server's variable NAME: "
          "the token-safe form) or an apprise URL"),
]  # fmt: skip
OnStall = Annotated[str | None, Field(description="what a stall does: notify (the default) or stop (exit 125)")]

INSTRUCTIONS = (
    "eps plans and runs research compute jobs on the right lane (the shared VM, SLURM, GCP, RunPod). "
    "Plan first (plan: rungs, can_start, not_runnable fixes), then execute: it returns a dispatch id at once; "
    "follow it with wait (bounded: at most timeout, default 50 s), logs (keep next_offset and pass it as offset) "
    "and status; cancel stops it and releases everything. Never poll in a tight loop: call wait again instead. "
    "Several dispatches at once: next_events returns what happened to any of them (bounded; pass its next_cursor "
    "back as cursor). "
    "Pass secrets as env names (env: ['HF_TOKEN']), never as NAME=VALUE."
)


def _answer(call: Callable[[], dict[str, Any]]) -> CallToolResult:
    """The tool result of ``call()``: its document, or the CLI's error object as a tool error."""
    try:
        doc = call()
    except Exception as exc:  # bad input, a dispatch not taken on, or a bug in eps (its details in a file)
        doc, failed = error_doc(*failure(exc)), True  # the server goes on
    else:
        failed = False
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(doc))], structured_content=doc,
                          is_error=failed)  # fmt: skip


def _progress(ctx: Context, done: float, total: float, message: str) -> None:
    """A progress notification from a tool's worker thread (none when the client asked for
    none; a client gone meanwhile does not stop the call)."""
    import anyio.from_thread

    with contextlib.suppress(Exception):
        anyio.from_thread.run(ctx.report_progress, round(done, 1), total, message)


def _next_events(svc: Service, ctx: Context, dispatches: str | list[str] | None, cursor: dict[str, int] | None,
                 timeout: str | int | None, max_events: int) -> dict[str, Any]:  # fmt: skip
    """The ``next_events`` tool: the service's bounded call, in slices of at most
    :data:`PROGRESS_EVERY_S` with a progress notification between two of them."""
    from eps.shell.request.keywords import seconds

    bound = min(float(seconds(NEXT_DEFAULT_S if timeout is None else timeout, "timeout")), NEXT_MAX_S)
    named = [dispatches] if isinstance(dispatches, str) else dispatches
    start, at = time.monotonic(), cursor
    while True:
        left = max(0.0, bound - (time.monotonic() - start))
        doc = svc.next_events(named, at, timeout_s=min(left, PROGRESS_EVERY_S), max_events=max_events)
        if doc["events"] or left <= PROGRESS_EVERY_S:
            return {**doc, "waited_s": round(time.monotonic() - start, 3), "timeout_s": bound}
        at = doc["next_cursor"]
        _progress(ctx, time.monotonic() - start, bound, f"no new event of {len(doc['dispatches'])} dispatch(es)")


def _say(tool: str, more: str) -> str:
    """A tool's description: what it does and when it returns (the contract's table), and more."""
    return f"{dict(TOOLS)[tool][:1].upper()}{dict(TOOLS)[tool][1:]} ({more})."


def build(svc: Service) -> "MCPServer[dict[str, Any]]":  # the SDK's default lifespan: an empty dict
    """The server, its tools bound to ``svc`` (the settings read once, when it starts)."""
    from mcp.server.mcpserver import MCPServer

    from eps._version import __version__
    from eps.shell.config.availability import lane_names
    from eps.shell.request.job import JobRequest
    from eps.shell.request.keywords import seconds
    from eps.shell.service.planning import park_state

    policy = svc.settings.policy
    _ENUMS["intent"] = [i.name for i in policy.intents]
    _ENUMS["lane"] = list(lane_names(svc.settings))

    def job_of(intent: str, duration: str | int | None, restartable: bool, footprint_gb: float, gradient_fit: bool,
               count: int, pin: str | None, retry: str | list[str] | None, retry_for: str | int | None,
               max_restarts: int | None, sync_every: str | int | None, **more: object) -> JobRequest:  # fmt: skip
        return JobRequest.from_mapping({
            "intent": intent, "duration": duration, "restartable": restartable, "footprint_gb": footprint_gb,
            "gradient_fit": gradient_fit, "count": count, "backend": pin, "retry": retry, "retry_for": retry_for,
            "max_restarts": max_restarts, "sync_every": sync_every, **more})  # fmt: skip

    def files_given(
        snapshot: dict[str, Any] | str | None, grants: dict[str, Any] | str | None
    ) -> "tuple[CapacitySnapshot | None, QosGrants | None]":
        from eps.shell.config import snapshots as files
        snap = qos = None
        if snapshot is not None:
            snap = files.load_snapshot(snapshot) if isinstance(snapshot, str) else (
                files.snapshot_from_data(snapshot, "snapshot"))  # fmt: skip
        if grants is not None:
            qos = files.load_grants(grants) if isinstance(grants, str) else files.grants_from_data(grants, "grants")
        return snap, qos

    server = MCPServer("eps", version=__version__, instructions=INSTRUCTIONS)
    tool = server.tool

    @tool(description=_say("check", "eps check --json"))
    def check(timeout: Duration = "10s") -> CallToolResult:
        return _answer(lambda: svc.check(timeout_s=seconds(timeout or 10, "timeout")))

    @tool(description=_say("intents", "eps intents --json"))
    def intents() -> CallToolResult:
        return _answer(svc.intents)

    @tool(description=_say("plan", "eps plan --json; park: [CLUSTER:]QOS=DURATION, parked on that tier that long"))
    def plan(intent: Intent, duration: Duration = None, restartable: bool = False, footprint_gb: float = 0.0,
             gradient_fit: bool = False, count: int = 1, pin: Lane = None, retry: Retry = None,
             retry_for: Duration = None, max_restarts: int | None = None, sync_every: Duration = None,
             fall_through: bool = False, gpu: Gpu = None, gpu_mem: GpuMem = None, sweep: int = 1,
             sweep_parallel: int | None = None, snapshot: Doc = None, grants: Doc = None, park: str | None = None,
             park_reason: str | None = None) -> CallToolResult:  # fmt: skip
        def run() -> dict[str, Any]:
            job = job_of(intent, duration, restartable, footprint_gb, gradient_fit, count, pin, retry, retry_for,
                         max_restarts, sync_every, fall_through=fall_through, gpu=gpu, gpu_mem=gpu_mem,
                         sweep=sweep, sweep_parallel=sweep_parallel)  # fmt: skip
            snap, qos = files_given(snapshot, grants)
            return svc.plan(job, snapshot=snap, grants=qos, park=park_state(park, park_reason, policy)).to_dict()

        return _answer(run)

    @tool(description=_say("execute", "eps execute --detach --json; follow it with wait, logs and status"))
    def execute(intent: Intent, command: Command, duration: Duration = None, restartable: bool = False,
                footprint_gb: float = 0.0, gradient_fit: bool = False, count: int = 1, pin: Lane = None,
                workdir: str | None = None, setup: str | None = None, env: Env = None, time_limit: Duration = None,
                retry: Retry = None, retry_for: Duration = None, max_restarts: int | None = None,
                sync_every: Duration = None, fall_through: bool = False, storage: str | None = None,
                stall_after: Duration = None, on_stall: OnStall = None, gpu: Gpu = None, gpu_mem: GpuMem = None,
                inputs: list[str] | None = None, notify: Notify = None, sweep: int = 1,
                sweep_parallel: int | None = None, snapshot: Doc = None, grants: Doc = None,
                dispatch_id: str | None = None) -> CallToolResult:  # fmt: skip
        def run() -> dict[str, Any]:
            job = job_of(intent, duration, restartable, footprint_gb, gradient_fit, count, pin, retry, retry_for,
                         max_restarts, sync_every, command=command, workdir=workdir, setup=setup,
                         env=tuple(env or ()), time_limit=time_limit, fall_through=fall_through, storage=storage,
                         stall_after=stall_after, on_stall=on_stall, gpu=gpu, gpu_mem=gpu_mem,
                         inputs=tuple(inputs or ()), notify=tuple(notify or ()), sweep=sweep,
                         sweep_parallel=sweep_parallel)  # fmt: skip
            snap, qos = files_given(snapshot, grants)
            return svc.execute(job, dispatch_id=dispatch_id, snapshot=snap, grants=qos)

        return _answer(run)

    @tool(description=_say("execute_pipeline", "eps execute --job pipeline.toml --detach --json; each phase is "
                           "DISPATCH/phase for status, wait, logs and pull; wait exits 3 when a phase failed"))
    def execute_pipeline(pipeline: Annotated[dict[str, Any] | str, Field(
            description='{"phases": [{"name", "needs", "cpu", "intent", "duration", "command", ...}]}, '
                        "or the path of a pipeline file")],
            dispatch_id: str | None = None) -> CallToolResult:  # fmt: skip
        def run() -> dict[str, Any]:
            from eps.shell.service.pipelines import execute_document

            with svc.opened() as ctx:
                return execute_document(ctx, pipeline, dispatch_id)

        return _answer(run)

    @tool(description=_say("status", "eps status --json"))
    def status(dispatch: str | None = None, active: bool = False, since: Duration = None, intent: IntentFilter = None,
               limit: int = 20, all: bool = False, timeout: Duration = "5s", mine: Mine = False,
               host: Host = None) -> CallToolResult:  # fmt: skip
        def run() -> dict[str, Any]:
            since_s = None if since is None else seconds(since, "since")
            return svc.status(dispatch, active=active, since_s=since_s, intent=intent, limit=None if all else limit,
                              timeout_s=seconds(timeout or 5, "timeout"), mine=mine, host=host)  # fmt: skip

        return _answer(run)

    @tool(description=_say("wait", f"call it again while ended is false; a progress notification every "
                           f"{PROGRESS_EVERY_S:g} s meanwhile"))  # fmt: skip
    def wait(dispatch: Dispatch, ctx: Context, timeout: Duration = int(WAIT_DEFAULT_S)) -> CallToolResult:
        def run() -> dict[str, Any]:
            bound = min(float(seconds(WAIT_DEFAULT_S if timeout is None else timeout, "timeout")), WAIT_MAX_S)

            def between(waited: float, doc: dict[str, Any]) -> None:  # progress between the slices
                _progress(ctx, waited, bound, f"{dispatch} is {doc['state']}")

            return svc.wait_until(dispatch, bound, slice_s=PROGRESS_EVERY_S, between=between)

        return _answer(run)

    @tool(description=_say("logs", "pass the last next_offset back as offset to continue; task: a sweep's task "
                           "(default 0)"))
    def logs(dispatch: Dispatch, offset: int = 0, max_bytes: int = LOGS_DEFAULT_BYTES,
             lines: int | None = None, task: int | None = None) -> CallToolResult:  # fmt: skip
        return _answer(lambda: svc.logs(dispatch, offset=offset, max_bytes=max_bytes, tail_lines=lines, task=task))

    @tool(description=_say("next_events", f"one call instead of a wait per dispatch; a progress notification "
                           f"every {PROGRESS_EVERY_S:g} s while it waits"))  # fmt: skip
    def next_events(ctx: Context, dispatches: Dispatches = None, cursor: Cursor = None,
                    timeout: Duration = int(NEXT_DEFAULT_S),
                    max_events: int = NEXT_DEFAULT_EVENTS) -> CallToolResult:  # fmt: skip
        return _answer(lambda: _next_events(svc, ctx, dispatches, cursor, timeout, max_events))

    @tool(description=_say("pull", "to: a directory; default: the state dir's outputs/<dispatch>; task: only "
                           "that task of a sweep"))
    def pull(dispatch: Dispatch, to: str | None = None, task: int | None = None) -> CallToolResult:
        return _answer(lambda: svc.pull(dispatch, to=to, task=task))

    @tool(description=_say("cancel", "eps cancel --json"))
    def cancel(dispatch: str | None = None, all: bool = False, force: Force = False) -> CallToolResult:
        return _answer(lambda: svc.cancel(dispatch, every=all, force=force))

    @server.resource("eps://guide", name="guide", description="the agent guide (eps guide)", mime_type="text/markdown")
    def guide() -> str:
        from eps.shell.render.documents import guide_text

        return guide_text()

    @server.resource("eps://intents", name="intents", description="the intent table (eps intents --json)",
                     mime_type="application/json")  # fmt: skip
    def intent_table() -> str:
        return json.dumps(svc.intents(), indent=2)

    return server


def serve(env: Mapping[str, str], lane_options: "LaneOptions | None" = None) -> int:
    """``eps mcp``: serve on stdin/stdout until the client goes away."""
    build(Service(env, lane_options=lane_options)).run("stdio")
    return 0
