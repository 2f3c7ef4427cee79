"""Pure rendering of the batch script one SLURM rung submits.

``render_sbatch(job, cluster, rung, dispatch_id=...)`` returns the exact text
``sbatch`` reads on stdin: a shebang, ``#SBATCH`` lines, optional ``export``
lines, and the job's command as one shell line.

Injection rules (the script is run by bash, its ``#SBATCH`` lines are read by
sbatch's own option parser, which splits on blanks and knows no escapes):

- every ``#SBATCH`` value must match :data:`_SBATCH_VALUE` (no blank, quote,
  newline or other control character); anything else raises
  :class:`SbatchRenderError` rather than being escaped, so a hostile value can
  neither start a new script line nor smuggle in a second option;
- the command is one line: each argv element is ``shlex.quote``-d, or written
  in bash ``$'...'`` form when it holds a control character (a newline inside
  single quotes would still be one word, but a second physical line); NUL
  cannot be in an argv and is refused;
- environment names must be shell identifiers; values are quoted like argv.

Clusters without a QoS ladder (``qos_ladder == ()``, rungs with ``qos=None``)
render without any ``--qos`` line, and nothing here reads the ladder, the park
caps or any other cluster: their renders stay byte-identical when a ladder
changes (P13).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from eps.core import names
from eps.core.durations import format_slurm_time
from eps.core.model import ClusterConfig, Job, LaneKind, Rung

#: What a value on a ``#SBATCH`` line may contain: SLURM names, numbers, times,
#: paths and filename patterns (``%j``).  No blank, quote, ``#`` or control character.
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9._%/:=@+,_-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SbatchRenderError(ValueError):
    """A value cannot be placed in a batch script safely.  Names the field and the value."""

    def __init__(self, field: str, value: str, why: str) -> None:
        super().__init__(f"cannot render sbatch script: {field} {value!r} {why}")
        self.field = field
        self.value = value


def job_name(dispatch_id: str) -> str:
    """The SLURM job name that carries ``dispatch_id`` (:func:`eps.core.names.job_name`)."""
    try:
        return names.job_name(dispatch_id)
    except names.BadName as exc:
        raise SbatchRenderError("dispatch id", dispatch_id, str(exc).split(": ", 1)[-1]) from None


def render_sbatch(
    job: Job,
    cluster: ClusterConfig,
    rung: Rung,
    *,
    dispatch_id: str,
    output: str | None = None,
    env: Mapping[str, str] | None = None,
    time_s: int | None = None,
) -> str:
    """The batch script for ``job`` on ``rung`` of ``cluster``.

    ``#SBATCH`` lines, in this order: ``--no-requeue`` (the cluster never runs the job a
    second time behind eps's back: a preempted run or a lost node is an interruption, which
    the supervisor relaunches under the job's retry policy); ``--job-name=eps-<dispatch_id>``;
    ``--qos`` only when the rung names one; ``--gres=gpu:N`` only when it has
    GPUs; ``--time`` from ``time_s`` or else the job's duration (``D-HH:MM:SS``,
    whole minutes, rounded up); ``--output`` when given; ``--account`` and ``--partition`` when
    the cluster configures them (a tier's own when it has one: ``tier_accounts``,
    ``tier_partitions``).  Then ``export`` lines for ``env`` (sorted by
    name), then the command.

    Raises :class:`SbatchRenderError` for a value that cannot be rendered safely,
    an empty command, a non-positive duration, no time at all (an unknown duration and no
    ``time_s``) or a rung of another lane.
    """
    if rung.kind is not LaneKind.SLURM or rung.lane != cluster.name:
        raise SbatchRenderError("rung", rung.key, f"is not a SLURM rung of {cluster.name}")
    if job.duration_s is not None and job.duration_s <= 0:
        raise SbatchRenderError("duration", str(job.duration_s), "must be positive seconds")
    limit = time_s if time_s is not None else job.duration_s
    if limit is None:  # a job of unknown length runs up to its tier's MaxWall: the caller says it
        raise SbatchRenderError("duration", "unknown", "needs time_s (the tier's MaxWall)")
    if not job.command:
        raise SbatchRenderError("command", "", "is empty")

    options: list[tuple[str, str]] = [("job-name", job_name(dispatch_id))]
    if rung.qos is not None:
        options.append(("qos", rung.qos))
    if rung.gpus > 0:
        options.append(("gres", f"gpu:{rung.gpus}"))
    options.append(("time", format_slurm_time(limit)))
    if output is not None:
        options.append(("output", output))
    if (account := cluster.account_for(rung.qos)) is not None:
        options.append(("account", account))
    if (partition := cluster.partition_for(rung.qos)) is not None:
        options.append(("partition", partition))

    lines = ["#!/bin/bash", "#SBATCH --no-requeue"]  # a second run is eps's to start (its retry policy)
    for name, value in options:
        if _SBATCH_VALUE.fullmatch(value) is None:
            raise SbatchRenderError(f"--{name}", value, "holds a character sbatch cannot take safely")
        lines.append(f"#SBATCH --{name}={value}")
    for name, value in sorted((env or {}).items()):
        if _ENV_NAME.fullmatch(name) is None:
            raise SbatchRenderError("environment name", name, "is not a shell identifier")
        lines.append(f"export {name}={quote_arg(value)}")
    lines.append(" ".join(quote_arg(arg) for arg in job.command))
    return "\n".join(lines) + "\n"


def quote_arg(arg: str) -> str:
    """One shell word that bash reads back as exactly ``arg``, on one physical line."""
    if "\x00" in arg:
        raise SbatchRenderError("argument", arg, "holds a NUL byte")
    if not any(_is_control(c) for c in arg):
        return shlex.quote(arg)
    out = []
    for c in arg:
        if c in "\\'":
            out.append("\\" + c)
        elif _is_control(c):
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def _is_control(c: str) -> bool:
    # C0 controls (newline among them) and DEL; each is one byte in UTF-8, so \xHH is exact.
    return ord(c) < 0x20 or c == "\x7f"
