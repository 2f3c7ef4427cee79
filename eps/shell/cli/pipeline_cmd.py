"""``eps plan --job pipeline.toml``: a pipeline file's plan, as text or ``--json``; and the
one-line refusal of ``eps execute --job pipeline.toml`` (not built yet).

A pipeline's phases each give their own job options in the file, so the command line gives
none (a flag would not say which phase it is for): only ``--snapshot``, ``--grants``,
``--json`` and ``--wide``; anything else is one line, exit 2."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from eps.core.model import JobError
from eps.shell.cli.exits import Exit
from eps.shell.config.settings import Settings
from eps.shell.request.job import FLAGS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace

    from eps.shell.request.pipeline import PipelineRequest

__all__ = ["cmd_plan_pipeline"]

#: The command line's job options besides :data:`FLAGS` (each phase gives its own in the file).
_JOB_OPTIONS = ("workdir", "setup", "env", "time_limit", "storage", "input", "notify", "park", "park_reason")


def cmd_plan_pipeline(ns: argparse.Namespace | SimpleNamespace, settings: Settings, env: Mapping[str, str],
                      request: PipelineRequest) -> int:  # fmt: skip
    """Print the pipeline's plan; exit 1 when a phase's plan is terminal, else 0."""
    given = [name for name in (*FLAGS, *_JOB_OPTIONS) if getattr(ns, name, None) is not None]
    if given:
        flag = "an intent" if given[0] == "intent" else "--" + given[0].replace("_", "-")
        raise JobError("usage", f"eps plan --job {request.file}: a pipeline's phases give their own job options "
                       f"in the file; {flag} cannot say which phase it is for")  # fmt: skip
    from eps.shell.service.pipelines import plan_pipeline
    from eps.shell.service.planning import given as files

    snap, grants = files(ns.snapshot, ns.grants)
    result = plan_pipeline(settings, env, request, snap, grants if ns.grants else None)
    if ns.json:
        from eps.shell.util.jsontext import dumps

        sys.stdout.write(dumps(result.to_dict()) + "\n")  # it carries its schema_version
    else:
        from eps.shell.render.pipeline import print_pipeline
        from eps.shell.render.views import out_for

        downs = tuple(p.down for p in result.phases)
        print_pipeline(request.file, result.plan, downs, result.phases[0].healing,
                       out_for(sys.stdout, env, wide=ns.wide))  # fmt: skip
    return Exit.NOTHING_STARTS if result.plan.terminal else Exit.OK
