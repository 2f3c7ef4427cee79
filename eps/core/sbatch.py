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

The cluster's hard rules (the fellows row of :mod:`eps.core.tables` names them):

- no ``--export`` ever (it crashes slurmd there): the environment is ``export`` lines in
  the script body;
- ``CUDA_VISIBLE_DEVICES`` is never set (SLURM sets it): a name that would set it is refused;
- ``--mem`` and ``--cpus-per-task`` from the cluster row, scaled with the GPUs, never 0;
- the job name carries the user when the row says so;
- with ``cleanup_trap``, the script traps SIGTERM, SIGINT and SIGQUIT and passes the signal
  to its whole process group, then waits: nothing the job started outlives the job's end.

A sweep's tasks are one array (``array=``, :class:`SbatchArray`): one ``--array=`` line
(:func:`eps.core.sweep.array_spec`, ``%K`` when fewer than all may run at once), and the
token :data:`TASK_MARK` in an argv word of the command is the task's index, written as
``"$SLURM_ARRAY_TASK_ID"`` (the one expansion this module ever writes; each task runs its
own wrapper).  An array whose command names no task is refused: every task would run the
same step.  Without ``array=`` nothing changes: no line, and the token is plain text.

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
from eps.core.records import NamedTuple

#: What a value on a ``#SBATCH`` line may contain: SLURM names, numbers, times,
#: paths and filename patterns (``%j``).  No blank, quote, ``#`` or control character.
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9._%/:=@+,_-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")

#: Names no batch script may set: SLURM sets them for the job's own GPUs.
FORBIDDEN_ENV = frozenset({"CUDA_VISIBLE_DEVICES"})

#: The script's cleanup: a signal to the script reaches its whole process group, then it waits.
_TRAP = "trap 'trap \"\" TERM INT QUIT; kill -TERM -- -$$ 2>/dev/null; wait' TERM INT QUIT"


#: In the command of an array script, the task's index (``$SLURM_ARRAY_TASK_ID``).
TASK_MARK = "{eps_task}"


class SbatchArray(NamedTuple):
    """The tasks one array submission holds: their ``indices`` (a sweep's task numbers) and
    ``at_once``, the most of them running at once (SLURM's ``%K``; ``None``: no limit)."""

    indices: tuple[int, ...]
    at_once: int | None = None


class SbatchRenderError(ValueError):
    """A value cannot be placed in a batch script safely.  Names the field and the value."""

    def __init__(self, field: str, value: str, why: str) -> None:
        super().__init__(f"cannot render sbatch script: {field} {value!r} {why}")
        self.field = field
        self.value = value


def job_name(dispatch_id: str, user: str | None = None) -> str:
    """The SLURM job name that carries ``dispatch_id`` (and ``user``: :func:`eps.core.names.job_name`)."""
    try:
        return names.job_name(dispatch_id, user)
    except names.BadName as exc:
        raise SbatchRenderError("dispatch id", dispatch_id, str(exc).split(": ", 1)[-1]) from None


def resources(cluster: ClusterConfig, gpus: int) -> tuple[int | None, int | None]:
    """``(--mem in GB, --cpus-per-task)`` of a job of ``gpus`` GPUs (:meth:`ClusterConfig.resources`)."""
    return cluster.resources(gpus)


def cluster_env(cluster: ClusterConfig, gpus: int, user: str | None) -> dict[str, str]:
    """What a job of ``gpus`` GPUs on ``cluster`` gets exported in its script body: the row's
    ``job_env``, and ``multi_gpu_env`` when it has more than one GPU; ``{user}`` is ``user``."""
    pairs = [*cluster.job_env, *(cluster.multi_gpu_env if gpus > 1 else ())]
    out = {}
    for name, value in pairs:
        if "{user}" in value and user is None:
            raise SbatchRenderError(f"environment {name}", value, "needs the cluster user ({user})")
        out[name] = value if user is None else value.replace("{user}", user)
    return out


def render_sbatch(
    job: Job,
    cluster: ClusterConfig,
    rung: Rung,
    *,
    dispatch_id: str,
    user: str | None = None,
    output: str | None = None,
    env: Mapping[str, str] | None = None,
    time_s: int | None = None,
    array: SbatchArray | None = None,
) -> str:
    """The batch script for ``job`` on ``rung`` of ``cluster``.

    ``#SBATCH`` lines, in this order: ``--no-requeue`` (the cluster never runs the job a
    second time behind eps's back: a preempted run or a lost node is an interruption, which
    the supervisor relaunches under the job's retry policy); ``--job-name=eps-<dispatch_id>``;
    ``--qos`` only when the rung names one; ``--gres=gpu:N`` only when it has
    GPUs; ``--time`` from ``time_s`` or else the job's duration (``D-HH:MM:SS``,
    whole minutes, rounded up); ``--output`` when given; ``--account`` and ``--partition`` when
    the cluster configures them (a tier's own when it has one: ``tier_accounts``,
    ``tier_partitions``); ``--mem`` and ``--cpus-per-task`` when the row sets them
    (:func:`resources`).  The job name is ``eps-<dispatch_id>-<user>`` when the row says
    ``user_in_job_name``.  Then ``export`` lines for the cluster's environment
    (:func:`cluster_env`) and ``env`` (``env`` wins a shared name), sorted by name; then, when
    the row says ``cleanup_trap``, the trap and the command in the background with a ``wait``
    for it; else the command itself.

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

    if cluster.user_in_job_name and (user is None or _USER.fullmatch(user) is None):
        raise SbatchRenderError("user", str(user), "is not a cluster user name (the job name carries it)")
    named = job_name(dispatch_id, user if cluster.user_in_job_name else None)
    options: list[tuple[str, str]] = [("job-name", named)]
    if array is not None:
        options.append(("array", _array_value(array, job.command)))
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
    mem, cpus = resources(cluster, rung.gpus)
    if mem is not None:
        options.append(("mem", f"{mem}G"))
    if cpus is not None:
        options.append(("cpus-per-task", str(cpus)))

    lines = ["#!/bin/bash", "#SBATCH --no-requeue"]  # a second run is eps's to start (its retry policy)
    for name, value in options:
        if _SBATCH_VALUE.fullmatch(value) is None:
            raise SbatchRenderError(f"--{name}", value, "holds a character sbatch cannot take safely")
        lines.append(f"#SBATCH --{name}={value}")
    own = cluster_env(cluster, rung.gpus, user)
    exports = {**own, **(env or {})}
    for name, value in sorted(exports.items()):
        if _ENV_NAME.fullmatch(name) is None:
            raise SbatchRenderError("environment name", name, "is not a shell identifier")
        if name in FORBIDDEN_ENV:
            raise SbatchRenderError("environment name", name, "is SLURM's to set (the job's own GPUs)")
        lines.append(f"export {name}={quote_arg(value)}")
    command = _command_line(job.command, array is not None)
    if cluster.cleanup_trap:
        lines += [_TRAP, f"{command} &", "wait $!"]
    else:
        lines.append(command)
    return "\n".join(lines) + "\n"


def _command_line(command: tuple[str, ...], array: bool) -> str:
    """The command as one line of shell words; in an array, each :data:`TASK_MARK` the task's index."""
    words = [command_word(command[0]), *(quote_arg(arg) for arg in command[1:])]
    if array:
        words = [_task_word(arg) if TASK_MARK in arg else word for arg, word in zip(command, words, strict=True)]
    return " ".join(words)


def _array_value(array: SbatchArray, command: tuple[str, ...]) -> str:
    """The ``--array`` value of ``array``; refused when it holds no task or its command names none."""
    from eps.core.sweep import array_spec

    if not any(TASK_MARK in arg for arg in command):
        raise SbatchRenderError("command", " ".join(command), f"names no task ({TASK_MARK}): every task would "
                                "run the same step")  # fmt: skip
    limit = array.at_once
    try:
        return array_spec(array.indices, None if limit is None or limit >= len(array.indices) else limit)
    except ValueError as exc:
        raise SbatchRenderError("--array", repr(array.indices), str(exc)) from None


def _task_word(arg: str) -> str:
    """``arg`` as one shell word, each :data:`TASK_MARK` in it the task's index."""
    pieces = [quote_arg(p) if p else "" for p in arg.split(TASK_MARK)]
    if _ASSIGNMENT.match(pieces[0]):  # FOO={eps_task} must not read as an assignment
        pieces[0] = f"'{pieces[0]}'"
    return '"$SLURM_ARRAY_TASK_ID"'.join(pieces)


def command_word(arg: str) -> str:
    """The command's first word: quoted like any other, and quoted even when it needs no quotes but
    reads as an assignment (``FOO=1`` would set FOO for the rest of the line, not run a command)."""
    word = quote_arg(arg)
    if word == arg and _ASSIGNMENT.match(arg):
        return f"'{arg}'"
    return word


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
