"""The ``eps`` command line: ``main(argv) -> int`` and a one-line entry point.

Exit codes are one table (:mod:`eps.shell.cli.exits`); an error's is :mod:`eps.shell.service.errors`' (the MCP
server's and the Python API's too):
0 ok; 1 nothing can start (a terminal plan, or a plan no rung of which this machine
can run; a dispatch that started nothing; ``eps check`` with a resource kind no lane
here can run); 2 bad input: one line on stderr (with ``--json``, one JSON object),
nothing changed; 70 a bug in eps; 130 interrupted.

The plan path imports only the pure core (and a job file's converter when ``--job`` is
given): an ordinary ``eps plan`` is read without argparse (:func:`eps.shell.cli.args.plan_namespace`;
anything else goes to the argparse parser) and its document written without json
(:mod:`eps.shell.util.jsontext`); the provider clients load only when a command needs them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from eps._version import __version__
from eps.shell.cli.args import SUBCOMMANDS, glue_negative_values, plan_namespace
from eps.shell.cli.exits import SCHEMA_VERSION, Exit, write_error
from eps.shell.config.load import load_settings
from eps.shell.config.settings import Settings
from eps.shell.service.errors import ONE_LINE, UsageError, failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace
    from typing import NoReturn

    from eps.shell.request.job import JobRequest
    from eps.shell.request.pipeline import PipelineRequest
    from eps.shell.service.check import LaneOptions  # the service's re-export: a front door imports no lane

    #: What the command line was read into: argparse's namespace, or ``plan_namespace``'s.
    Args = argparse.Namespace | SimpleNamespace

EXIT_OK = Exit.OK
EXIT_FAILED = Exit.NOTHING_STARTS
EXIT_USAGE = Exit.BAD_INPUT

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "UsageError", "entry", "main", "request_of"]


def request_of(ns: Args, command: Sequence[str] = ()) -> JobRequest:
    """The job of the command line: :meth:`JobRequest.from_flags`."""
    from eps.shell.request.job import JobRequest

    return JobRequest.from_flags(ns, command)


def pipeline_file(path: str) -> PipelineRequest | None:
    """The pipeline of the job file ``path`` when it holds ``[[phases]]``, else ``None``."""
    from eps.shell.request.pipeline import pipeline_file as read

    return read(path)


def cmd_plan(ns: Args, settings: Settings, env: Mapping[str, str]) -> int:
    from eps.shell.service.planning import given, park_state, plan

    if ns.job and (pipeline := pipeline_file(ns.job)) is not None:  # a file of [[phases]]
        from eps.shell.cli.pipeline_cmd import cmd_plan_pipeline

        return cmd_plan_pipeline(ns, settings, env, pipeline)
    request = request_of(ns)
    snap, grants = given(ns.snapshot, ns.grants)
    park = park_state(ns.park, ns.park_reason, settings.policy)
    result = plan(settings, env, request, snap, grants if ns.grants else None, park)  # None: the config's grants
    if ns.json:
        emit(result.to_dict())
    else:
        from eps.shell.render.views import out_for, print_plan

        print_plan(result.route, result.job, out_for(sys.stdout, env, wide=ns.wide), result.down, result.healing)
    # The exit status is the policy's answer (1: a terminal, no rung at all); whether this
    # machine can run the rungs is the `here` column / `can_start`, and `eps check`'s status.
    return EXIT_OK if result.route.terminal is None else EXIT_FAILED


def cmd_intents(ns: Args, settings: Settings, env: Mapping[str, str]) -> int:
    from eps.shell.render import views
    if getattr(ns, "json", False):
        from eps.shell.render.documents import intents_doc

        emit(intents_doc(settings.policy))
    else:
        views.print_intents(settings.policy, views.out_for(sys.stdout, env, wide=getattr(ns, "wide", False)))
    return EXIT_OK


def cmd_schema(ns: argparse.Namespace) -> int:
    from eps.shell.cli.schemas import names, schema_text

    if ns.name is None:
        sys.stdout.write("\n".join(names()) + "\n")
        return EXIT_OK
    sys.stdout.write(schema_text(ns.name))
    return EXIT_OK


def emit(obj: object) -> None:
    """One ``--json`` document on stdout."""
    if isinstance(obj, dict) and "schema_version" not in obj:
        obj = {"schema_version": SCHEMA_VERSION, **obj}
    from eps.shell.util.jsontext import dumps

    sys.stdout.write(dumps(obj) + "\n")


#: Set by :func:`entry`: this process is the ``eps`` command, and its argparse speaks English.
_OWN_PROCESS = False


def _parse(args: list[str]) -> argparse.Namespace:
    """``args`` read by the parser (its subcommand's alone, when one is named)."""
    if _OWN_PROCESS:
        _argparse_in_english()
    from eps.shell.cli.parser import build

    sub = args[0] if args and args[0] in SUBCOMMANDS else None
    ns, extra = build(sub).parse_known_args(args)
    if extra:  # said as the subcommand's own (argparse's root would point at `eps --help`)
        prog = f"eps {sub}" if sub else "eps"
        raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extra)} (see {prog} --help)")
    return ns


def _argparse_in_english() -> None:
    """argparse asks gettext for a translation of each of its words (57 lookups on the
    filesystem per parse, about 8 ms); eps speaks English, and in its own process it tells
    argparse not to look."""
    import argparse

    argparse._ = str  # type: ignore[attr-defined]
    argparse.ngettext = lambda one, many, n: one if n == 1 else many  # type: ignore[attr-defined]


def _plan(ns: Args, command: list[str], env: Mapping[str, str]) -> int:
    settings = load_settings(env)
    if command:
        raise UsageError("eps plan: a command after -- is for `eps execute`")
    return cmd_plan(ns, settings, env)


def _run(args: list[str], command: list[str], env: Mapping[str, str], lane_options: LaneOptions | None) -> int:
    plain = plan_namespace(args)  # an ordinary eps plan, read without argparse
    if plain is not None:
        return _plan(plain, command, env)
    ns = _parse(args)
    if ns.version:
        sys.stdout.write(f"eps {__version__}\n")
        return EXIT_OK
    if ns.cmd == "schema":
        return cmd_schema(ns)
    if ns.cmd == "completion":
        from eps.shell.cli.completion import script

        sys.stdout.write(script(ns.shell))
        return EXIT_OK
    if ns.cmd == "plan" and not ns.list_intents:
        return _plan(ns, command, env)
    if ns.cmd == "execute" and getattr(ns, "detach", False) and (ns.wait or ns.follow):
        # said before anything is read or opened: --detach returns at once, --wait/--follow stay
        raise UsageError("eps execute: --detach returns at once; --wait and --follow stay with the job (choose one)")
    settings = load_settings(env)
    if ns.cmd == "execute" and getattr(ns, "job", None) and not ns.resume:  # before anything is opened
        from eps.shell.cli.pipeline_cmd import check_execute

        check_execute(ns, command, settings, env)
    if ns.list_intents or ns.cmd == "intents":
        return cmd_intents(ns, settings, env)
    if ns.cmd is None:
        raise UsageError("eps: a command is needed: check, plan, intents, execute, status, cancel, ... (eps --help)")
    if ns.cmd == "guide":
        from eps.shell.render.documents import guide_text

        sys.stdout.write(guide_text())
        return EXIT_OK
    if ns.cmd == "mcp" and ns.tools:
        from eps.core.contract import TOOLS

        width = max(len(name) for name, _ in TOOLS)
        sys.stdout.write("".join(f"{name:<{width}} {what}\n" for name, what in TOOLS))
        return EXIT_OK
    if ns.cmd == "mcp":
        return _serve_mcp(env)
    if ns.cmd == "simulate":
        from eps.shell.cli.simulate_cmd import run_simulate

        return run_simulate(ns, settings, env, lane_options)
    if ns.cmd == "check":
        from eps.shell.cli.check import run_check

        return run_check(ns, settings, dict(env), lane_options)
    from eps.shell.cli import commands

    return commands.run(ns, settings, command, request_of, env=dict(env), options=lane_options)


def _serve_mcp(env: Mapping[str, str]) -> NoReturn:
    """``eps mcp``: this process becomes the MCP server (``python -m eps.shell.mcp``, the same
    pid, pipes and environment), so the command line imports nothing of that door."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise UsageError("eps mcp needs the MCP SDK (No module named 'mcp'): pip install 'eps[mcp]'")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "eps.shell.mcp"], dict(env))  # noqa: S606 (an argv, no shell)


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None, *,
         lane_options: LaneOptions | None = None) -> int:  # fmt: skip
    """Run one ``eps`` command; return its exit code.  Never raises for bad input.

    ``env`` replaces ``os.environ``; ``lane_options`` (an ``eps.shell.lanes.LaneOptions``)
    lets tests point the lanes at local servers and make them poll fast."""
    args = list(sys.argv[1:] if argv is None else argv)
    environ: Mapping[str, str] = os.environ if env is None else env
    command: list[str] = []
    if "--" in args:  # eps execute INTENT [opts] -- COMMAND...
        k = args.index("--")
        args, command = args[:k], args[k + 1 :]
    as_json = "--json" in args
    if args[:1] == ["_complete"]:  # the shell completion's callback (not in --help)
        from eps.shell.cli.completion import answer

        return answer(args[1:], environ)
    try:
        return _run(glue_negative_values(args), command, environ, lane_options)
    except ONE_LINE as exc:
        said = failure(exc)
        write_error(sys.stderr, as_json=as_json, code=said.code, text=said.text, exit_code=said.exit_code,
                    prefix="eps: error: ")  # fmt: skip
        return said.exit_code
    except KeyboardInterrupt:
        write_error(sys.stderr, as_json=as_json, code="interrupted", text="interrupted", exit_code=Exit.INTERRUPTED,
                    prefix="eps: ")  # fmt: skip
        return Exit.INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug in eps: say so in one line, keep the details in a file
        said = failure(exc)
        write_error(sys.stderr, as_json=as_json, code=said.code, text=said.text, exit_code=said.exit_code,
                    prefix="eps: internal error: ")  # fmt: skip
        return said.exit_code


def entry() -> NoReturn:
    """The ``eps`` command (its argparse, when it needs one, in English: :func:`_argparse_in_english`)."""
    global _OWN_PROCESS  # noqa: PLW0603  (one switch, set once, by the command itself)
    _OWN_PROCESS = True
    code = main()
    _leave_to_the_os()
    sys.exit(code)


def _leave_to_the_os() -> None:
    """Before this process exits: collect the garbage the command left in the young
    generations (its finalizers run, as at any exit), then freeze what is left, so the
    interpreter's exit does not walk it again.  What is left is nearly all what the command
    imported (psycopg, attrs, eps's modules: classes and functions, each in a reference
    cycle); an exit would otherwise run a full collection over it several times as it tears
    the modules down, only to free memory the OS takes back anyway: about 30 ms of CPU of
    an ``eps status`` on PostgreSQL, a sixth of it (``benchmarks/state_pg.py``).  What a
    frozen object's finalizer would do at exit is not done; eps leaves nothing to it (a
    command closes its ledger, its lanes and its files before it returns, and Python does
    not promise finalizers at exit)."""
    import gc  # built in

    gc.collect(1)
    gc.freeze()
