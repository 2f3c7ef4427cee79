"""Pure rendering of the wrapper script that runs one job on any machine.

``render_jobscript(spec)`` returns the text of ``run.sh``, which lives at the
top of a per-dispatch root directory (:data:`LAYOUT` names every file in it)
and finds that root from its own path, so the same text works wherever the
root is.  It has three modes:

- ``bash ROOT/run.sh start``: start the job detached (its own session under
  ``setsid``, SIGHUP ignored as ``nohup`` would, stdin from /dev/null), so it outlives the ssh session
  that started it; waits until the job has recorded its start, prints its pid.
  A second ``start`` starts nothing (the ``pid`` file is created exclusively).
- ``bash ROOT/run.sh run``: run the job in the foreground (a SLURM batch step);
  same records.
- ``body``: internal, what ``timeout`` runs: setup, then the command.

What the wrapper does, in order: append all output to ``job.log``; write
``pid`` and ``started-at``; create ``out/`` and export ``EPS_OUTPUT_DIR``,
``EPS_DISPATCH_ID``, ``EPS_TASK_INDEX``, ``EPS_TASK_COUNT``, ``EPS_RESTART_COUNT`` (and
``PYTHONUNBUFFERED=1`` so the log is live); check that the ``env`` file has the
named variables (in a subshell: the values never enter the wrapper's own shell,
so ``--env PATH=...`` cannot break it); then, under one ``timeout`` for setup
and command together, in the job's own cgroup when the machine offers one
(:func:`eps.core.containment.containment_lines`), the body: load the named variables, in ``work/`` run the
setup line once through ``bash -lc`` (a failure ends the job with the setup's
code, and the log says so), then the command.  When the command ended (by
itself, at the time limit, or stopped), whatever it left running gets TERM, and
KILL ``kill_grace_s`` after the TERM; only once nothing of the job is left does
it write ``status`` (:class:`~eps.core.ends.JobEnd`), ``ended-at`` and, last and atomically
(tmp + mv), ``exit-code``: a caller that sees ``exit-code`` sees the rest, and
nothing of the job writes after it (a TERM handler's checkpoint is there).
The time limit is told from a command that itself exits 124: the body marks
its own end (``.job-ended``) before it exits; a body stopped by ``timeout``
never does.  TERM/INT/HUP to the wrapper's pid stop the job; the end is
``cancelled`` only when ``eps cancel`` left its ``cancel`` mark first, else
``killed`` (a signal from elsewhere: exit code 128+N).  With a stall watch
(:mod:`eps.core.stall`) a background child of ``run`` watches the job while it runs;
one that stopped the job makes the end ``stalled`` (exit code 125).

Injection rules (the script is read by bash; nothing in it is ever evaluated
twice):

- every value placed in the script is one word from :func:`~eps.core.sbatch.quote_arg`
  (``shlex.quote``, or ``$'...'`` for control characters, so each value stays
  on one physical line); NUL is refused;
- a one-element command is a shell line, quoted as one word and run by
  ``bash -lc``; a longer command is an argv, each element quoted, run as is;
  the setup line is always a shell line (``bash -lc``);
- environment *names* must be shell identifiers, must not be one of the names
  eps sets, nor start with ``_eps_`` (the wrapper's own variables); their
  *values* never appear in the script: they sit in the ``env`` file (mode
  0600, :func:`render_env_file`) and are loaded by name;
- the dispatch id must be a short token (the same rule as SLURM job names);
  the time limit and task numbers are integers in range.

Anything else raises :class:`JobScriptError` naming the field; nothing is escaped
into a different meaning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from eps.core.containment import containment_lines
from eps.core.ends import JobEnd
from eps.core.names import BadName, check_dispatch_id
from eps.core.sbatch import quote_arg
from eps.core.stall import STALL_EXIT, STALL_STOP, STALLED, StallPlan, stall_lines
from eps.core.storage import HF_TRANSFER_LINES, RCLONE_CONF, STORED, StoragePlan, storage_lines
from eps.core.tables import JOB_LIFECYCLE


class RemoteLayout(NamedTuple):
    """The files of one dispatch root, relative to it.  Defined once: the wrapper,
    the probe and the shell's transfers all use these names."""

    workdir: str = "work"  # the shipped workdir; the job's cwd
    outputs: str = "out"  # $EPS_OUTPUT_DIR, created by the wrapper; what `eps pull` brings back
    log: str = "job.log"  # stdout and stderr of setup and command, whole, appended live
    exit_code: str = "exit-code"  # the job's exit code; written last, atomically
    status: str = "status"  # a JobEnd value
    started_at: str = "started-at"  # epoch seconds
    ended_at: str = "ended-at"  # epoch seconds
    pid: str = "pid"  # the wrapper's pid (session leader when detached)
    env: str = "env"  # KEY=VALUE lines, shell-quoted, mode 0600
    script: str = "run.sh"  # this wrapper
    job_ended: str = ".job-ended"  # internal: the body ended by itself (not stopped)
    cancel: str = "cancel"  # written by `eps cancel` before its TERM: only that is a cancel
    cgroup: str = "cgroup"  # the job's own cgroup v2 directory, when the machine offers one
    stored: str = STORED  # with storage: the last upload's rclone exit code (0: confirmed), before exit-code
    rclone_conf: str = RCLONE_CONF  # with storage: rclone's remotes and their credentials, mode 0600
    stalled: str = STALLED  # with a stall watch: a silent spell's start (epoch s), while it lasts
    stall_stop: str = STALL_STOP  # internal: the stall watch stopped the job (on_stall = stop)
    staged: str = ".staged"  # written last by a stage: wrapper, env file and workdir all arrived

    def under(self, root: str) -> RemoteLayout:
        """The same layout with every path joined to ``root``."""
        return RemoteLayout(*(_join(root, name) for name in self))


LAYOUT = RemoteLayout()
#: The VM lane's dispatch roots: ``<state dir>/runs/<dispatch>/<task>``.
VM_RUNS = "runs"


class JobSpec(NamedTuple):
    """What the wrapper runs.  ``command``: one element = a shell line (``bash -lc``),
    several = an argv run as is.  ``env_names``: variables loaded from the env file."""

    command: tuple[str, ...]
    dispatch_id: str
    time_limit_s: int
    setup: str | None = None
    env_names: tuple[str, ...] = ()
    task_index: int = 0
    task_count: int = 1
    kill_grace_s: int = JOB_LIFECYCLE.kill_grace_s  # from the TERM to the KILL
    restart: int = 0  # EPS_RESTART_COUNT: how many times the job was relaunched before this run
    storage: StoragePlan | None = None  # outputs and log to object storage, from the machine itself
    stall: StallPlan | None = None  # the stall watch (eps.core.stall); None: not watched


class JobProgress(NamedTuple):
    """What the probe read from a dispatch root (``None``: that file is not there yet)."""

    exists: bool
    pid: int | None = None
    started_at: int | None = None
    ended_at: int | None = None
    status: JobEnd | None = None
    exit_code: int | None = None
    stored: int | None = None  # with storage: the last upload's exit code (0: confirmed), once written
    stalled: int | None = None  # with a stall watch: since when (epoch s) the job has been silent, while it is
    alive: bool = False  # the wrapper's pid is live (meaningful only on the machine that ran it)
    gone: bool = False  # set by a reader that knows ``alive`` is meaningful: the wrapper died without its end

    @property
    def ended(self) -> bool:
        return self.exit_code is not None or self.gone

    @property
    def wrapper_gone(self) -> bool:
        """The wrapper died without writing its end (killed with -9, the machine's OOM killer):
        the end will never be written.  Meaningful only when the probe ran on the machine that
        runs the job (``alive``)."""
        return self.exists and self.pid is not None and not self.alive and self.exit_code is None

    @property
    def launched(self) -> bool:
        """The job was started here (its wrapper wrote its pid or start): a root that was only
        shipped to (a walk that died while staging) has neither."""
        return self.pid is not None or self.started_at is not None


class JobScriptError(ValueError):
    """A value cannot be placed in the job wrapper safely.  Names the field."""

    def __init__(self, field: str, value: str, why: str) -> None:
        super().__init__(f"cannot render job script: {field} {value!r} {why}")
        self.field = field
        self.value = value
        self.why = why


#: Where a pipeline's phase finds the outputs of the phases it needs, in its workdir
#: (``$EPS_INPUT_DIR``, exported when it is there; docs/design/pipelines.md).
INPUTS_DIR = ".eps-inputs"

#: Names the wrapper exports itself; an env file may not override them.
RESERVED_NAMES: frozenset[str] = frozenset(
    {"EPS_DISPATCH_ID", "EPS_TASK_INDEX", "EPS_TASK_COUNT", "EPS_OUTPUT_DIR", "EPS_RESTART_COUNT"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INTERNAL_PREFIX = "_eps_"
#: How long ``start`` waits for the detached job to record its start (seconds).
_START_WAIT_S = 10


def utc_now_line(var: str) -> str:
    """A bash line that sets ``var`` to what ``date -u +%FT%TZ`` prints, without a process where
    it can: printf's ``%()T`` from bash 4.3 on (bash 4.2's printf ignores a ``TZ`` given to it)."""
    return (
        "if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 403)); "
        f"then TZ=UTC printf -v {var} '%(%FT%TZ)T' -1; else {var}=$(date -u +%FT%TZ); fi"
    )


def render_jobscript(spec: JobSpec) -> str:
    """The text of ``run.sh`` for ``spec``.  Raises :class:`JobScriptError` (see the rules above)."""
    _check(spec)
    q = quote_arg
    lay = LAYOUT
    limit = spec.time_limit_s
    grace = spec.kill_grace_s
    # one element: a shell line for bash -lc; more: an argv, each word quoted
    shell_line = len(spec.command) == 1
    command = f"bash -lc {q(spec.command[0])}" if shell_line else " ".join(q(arg) for arg in spec.command)
    names = " ".join(spec.env_names)
    store_setup, store_before, store_end = storage_lines(spec.storage) if spec.storage else ([], [], [])
    stall_start, stall_end = stall_lines(spec.stall, lay.log, lay.outputs) if spec.stall else ([], [])
    lines = [
        "#!/bin/bash",
        f"# eps job wrapper: dispatch {spec.dispatch_id}, task {spec.task_index} of {spec.task_count}.",
        "# Rendered by eps.core.jobscript; do not edit.  Usage: bash run.sh start|run",
        "#   start  run the job detached (own session); prints its pid once it has started",
        "#   run    run the job in the foreground (a SLURM batch step)",
        "# Files, beside this script: work/ (the job's cwd), out/ ($EPS_OUTPUT_DIR), job.log,",
        "# env (names loaded below), pid, started-at, ended-at, status, exit-code (written last).",
        "set -u",
        "# Needs bash >= 4.2 (printf's %()T).  Builtins stand in for dirname, pwd, date, seq, cat,",
        "# hostname, nohup, awk and sed: every process costs a fork+exec on each machine brought up.",
        '# The root is this script\'s directory, as `cd "$(dirname ...)" && pwd -P` finds it.',
        "_eps_root=.",
        "case ${BASH_SOURCE[0]} in */*) _eps_root=${BASH_SOURCE[0]%/*} ;; esac",
        'case $_eps_root in /*) ;; "") _eps_root=/ ;; *) _eps_root=./$_eps_root ;; esac  # never via CDPATH',
        "_eps_o=$PWD",
        'cd -- "$_eps_root" && cd -P . || exit 70',
        "_eps_root=$PWD OLDPWD=$_eps_o  # the job sees the OLDPWD one cd leaves",
        '_eps_put() { printf \'%s\\n\' "$2" > "$1.tmp" && mv -f -- "$1.tmp" "$1"; }',
        "_eps_rm() {  # rm -f, started only when one of the files is there (a fresh root has none)",
        "  local _eps_f",
        '  for _eps_f; do if [ -e "$_eps_f" ] || [ -L "$_eps_f" ]; then rm -f -- "$@"; return; fi; done',
        "}",
        'case "${1:-}" in',
        "start)",
        f"  if ! (set -o noclobber; : > {q(lay.pid)}) 2>/dev/null; then",
        '    echo "eps: already started" >&2',
        "    exit 0",
        "  fi",
        f"  _eps_rm {q(lay.started_at)}",
        "  # what `nohup CMD &` left, without nohup's process: HUP ignored (nohup), INT and QUIT too",
        "  # (a background command of a shell without job control); ignored, they stay so through exec",
        "  if command -v setsid >/dev/null 2>&1; then",
        f"    ( trap '' HUP INT QUIT; exec setsid bash \"$_eps_root/{lay.script}\" run ) </dev/null >/dev/null 2>&1 &",
        "  else",
        f"    ( trap '' HUP INT QUIT; exec bash \"$_eps_root/{lay.script}\" run ) </dev/null >/dev/null 2>&1 &",
        "  fi",
        f"  for ((_eps_i = 0; _eps_i < {_START_WAIT_S * 10}; _eps_i++)); do",
        f"    if [ -s {q(lay.started_at)} ]; then",
        f"      _eps_pid=; IFS= read -r _eps_pid < {q(lay.pid)}; printf '%s\\n' \"$_eps_pid\"; exit 0",
        "    fi",
        "    sleep 0.1",
        "  done",
        f'  echo "eps: the job did not record its start within {_START_WAIT_S} s (see {lay.log})" >&2',
        "  exit 1",
        "  ;;",
        "run)",
        f"  exec </dev/null >>{q(lay.log)} 2>&1",
        f'  _eps_put {q(lay.pid)} "$$"',
        f"  _eps_rm {q(lay.exit_code)} {q(lay.status)} {q(lay.ended_at)} {q(lay.job_ended)} {q(lay.cancel)}"
        + (f" {q(lay.stored)}" if spec.storage else "")
        + (f" {q(lay.stalled)} {q(lay.stall_stop)}" if spec.stall else ""),
        "  printf -v _eps_now '%(%s)T' -1  # date +%s",
        f'  _eps_put {q(lay.started_at)} "$_eps_now"',
        f"  mkdir -p -- {q(lay.outputs)} {q(lay.workdir)}",
        f"  export EPS_DISPATCH_ID={q(spec.dispatch_id)}",
        f"  export EPS_TASK_INDEX={spec.task_index} EPS_TASK_COUNT={spec.task_count} EPS_RESTART_COUNT={spec.restart}",
        f'  export EPS_OUTPUT_DIR="$_eps_root/{lay.outputs}" PYTHONUNBUFFERED=1',
        "  # a model cache on the machine's data disk, shared by its dispatches (a cluster's shared one,",
        "  # set by its batch script, or the job's own --env HF_HOME, wins)",
        '  export HF_HOME="${HF_HOME:-${_eps_root%/*/*}/hf-cache}"',
        *HF_TRANSFER_LINES,
        *store_setup,
        "  _eps_end() {",
        '    echo "eps: job ended: $1, exit code $2"',
        *stall_end,
        *store_end,
        "    # status and ended-at count only once exit-code is there: written in place; exit-code,",
        "    # last, is renamed into place (a reader sees all of it or nothing)",
        f"    printf '%s\\n' \"$1\" > {q(lay.status)}",
        "    printf -v _eps_now '%(%s)T' -1",
        f"    printf '%s\\n' \"$_eps_now\" > {q(lay.ended_at)}",
        f'    _eps_put {q(lay.exit_code)} "$2"',
        '    exit "$2"',
        "  }",
    ]
    if spec.env_names:
        # checked in a subshell: the values never enter the wrapper's own shell (a --env PATH
        # cannot break it); the body loads them
        lines += [
            f"  ( if [ -f {q(lay.env)} ]; then . ./{lay.env} || exit 1; fi",
            f"    for _eps_n in {names}; do",
            '      if [ -z "${!_eps_n+x}" ]; then',
            f'        echo "eps: $_eps_n is not set in {lay.env}; the job did not run"',
            "        exit 1",
            "      fi",
            f"    done ) || _eps_end {JobEnd.ERROR} 78",
        ]
    lines += [
        "  if ! command -v timeout >/dev/null 2>&1; then",
        '    echo "eps: coreutils timeout is not installed; the time limit cannot be kept"',
        f"    _eps_end {JobEnd.ERROR} 69",
        "  fi",
        "  # date -u +%FT%TZ, by printf from bash 4.3 (4.2's printf ignores a TZ given to it)",
        *store_before,
        "  # a pipeline's phase: the outputs of the phases it needs, one directory each (docs/design/pipelines.md)",
        f"  if [ -d {q(lay.workdir + '/' + INPUTS_DIR)} ]; then",
        f'    export EPS_INPUT_DIR="$_eps_root/{lay.workdir}/{INPUTS_DIR}"',
        "  fi",
        f"  {utc_now_line('_eps_utc')}",
        "  # what hostname prints, the kernel's node name ($HOSTNAME may come from the environment)",
        "  _eps_host=$HOSTNAME; { read -r _eps_host < /proc/sys/kernel/hostname; } 2>/dev/null",
        f'  echo "eps: dispatch $EPS_DISPATCH_ID task $EPS_TASK_INDEX/$EPS_TASK_COUNT started'
        f' $_eps_utc on $_eps_host, time limit {limit} s"',
        *containment_lines(quote_arg(f"eps-{spec.dispatch_id}-{spec.task_index}-"), spec.kill_grace_s, LAYOUT.cgroup),
        "  _eps_t0=$SECONDS",
        '  ( if [ -n "$_eps_cg" ]; then echo "$BASHPID" > "$_eps_cg/cgroup.procs" 2>/dev/null || :; fi',
        '    export _eps_job="$_eps_root"  # the tag every process of the job inherits (not the wrapper\'s own)',
        f'    exec timeout -k {grace} {limit} bash "$_eps_root/{lay.script}" body ) &',
        "  _eps_child=$!",
        *stall_start,
        "  _eps_term_at=",
        "  trap '_eps_int=1; _eps_stop TERM' TERM INT HUP",
        "  # wait returns early when a trapped signal arrives: then wait again for the job's own code",
        "  _eps_rc=",
        "  while :; do",
        "    _eps_int=0",
        '    wait "$_eps_child"',
        "    _eps_w=$?",
        '    if [ "$_eps_w" = 127 ] && [ -n "$_eps_rc" ]; then break; fi',
        "    _eps_rc=$_eps_w",
        '    [ "$_eps_int" = 1 ] || break',
        "  done",
        f'  _eps_timed=0; if [ "$_eps_rc" = 124 ] || {{ [ "$_eps_rc" = 137 ] && [ "$SECONDS" -ge {limit} ]; }}; then',
        "    _eps_timed=1",
        "  fi",
        f"  if [ -s {q(lay.job_ended)} ]; then _eps_timed=0; fi",
        "  # Nothing the job started outlives its end: what is left gets TERM (timeout already sent",
        f"  # it at the limit), then KILL {grace} s after the TERM; the end is written once all is gone.",
        '  if [ -z "$_eps_term_at" ]; then',
        f'    if [ "$_eps_timed" = 1 ]; then _eps_term_at=$((_eps_t0 + {limit})); else _eps_stop TERM; fi',
        "  fi",
        "  _eps_drain",
        f"  if [ -s {q(lay.job_ended)} ]; then",
        f"    _eps_how=; IFS= read -r _eps_how < {q(lay.job_ended)}",
        '    _eps_end "$_eps_how" "$_eps_rc"',
        f"  elif [ -e {q(lay.cancel)} ]; then",
        f'    _eps_end {JobEnd.CANCELLED} "$_eps_rc"',
        *([f"  elif [ -e {q(lay.stall_stop)} ]; then", f"    _eps_end {JobEnd.STALLED} {STALL_EXIT}"]
          if spec.stall else []),
        '  elif [ "$_eps_timed" = 1 ]; then',
        f'    echo "eps: time limit of {limit} s reached: the job was stopped"',
        f'    _eps_end {JobEnd.TIMED_OUT} "$_eps_rc"',
        "  else",
        f'    _eps_end {JobEnd.KILLED} "$_eps_rc"',
        "  fi",
        "  ;;",
        "body)",
    ]
    if spec.env_names:
        lines += [
            f"  if [ -f {q(lay.env)} ]; then . ./{lay.env} || exit 78; fi",
            f"  export {names}",
        ]
    lines += [
        f"  cd -- {q(lay.workdir)} || exit 70",
    ]
    if spec.setup is not None:
        lines += [
            '  echo "eps: setup (once, before the command)"',
            f"  bash -lc {q(spec.setup)}",
            "  _eps_rc=$?",
            '  if [ "$_eps_rc" != 0 ]; then',
            '    echo "eps: setup failed with exit code $_eps_rc; the command did not run"',
            f"    printf '%s\\n' {JobEnd.SETUP_FAILED} > \"$_eps_root/{lay.job_ended}\"",
            '    exit "$_eps_rc"',
            "  fi",
        ]
    lines += [
        f"  {command}",
        "  _eps_rc=$?",
        f"  printf '%s\\n' {JobEnd.EXITED} > \"$_eps_root/{lay.job_ended}\"",
        '  exit "$_eps_rc"',
        "  ;;",
        "*)",
        '  echo "usage: bash run.sh start|run" >&2',
        "  exit 64",
        "  ;;",
        "esac",
    ]
    return "\n".join(lines) + "\n"


def render_env_file(values: Mapping[str, str]) -> str:
    """The ``env`` file: one ``NAME=VALUE`` line per variable, sorted, values quoted
    so that bash reads them back exactly.  Same name rules as the wrapper."""
    lines = []
    for name, value in sorted(values.items()):
        _check_env_name(name)
        lines.append(f"{name}={_quote(value, 'environment value of ' + name, secret=True)}")
    return "".join(line + "\n" for line in lines)


def dispatch_root(work_root: str, dispatch_id: str, task_index: int = 0, restart: int = 0) -> str:
    """The per-dispatch root: ``<work_root>/<dispatch_id>/<task_index>``; a relaunch (restart
    N > 0) gets its own, ``<task_index>.r<N>``: the interrupted run's record never reads as
    the new run's (a cluster's shared filesystem keeps it)."""
    _check_dispatch_id(dispatch_id)
    if task_index < 0 or restart < 0:
        raise JobScriptError("task index", f"{task_index}.r{restart}", "must not be negative")
    if not work_root or "\x00" in work_root:
        raise JobScriptError("work root", work_root, "must be a non-empty path")
    leaf = f"{task_index}.r{restart}" if restart else str(task_index)
    return _join(_join(work_root, dispatch_id), leaf)


def render_start(root: str) -> str:
    """The shell line that starts the job detached; prints its pid."""
    return f"bash {_quote(_join(root, LAYOUT.script), 'root')} start"


def render_cancel(root: str) -> str:
    """The shell line that stops a running job: it leaves the ``cancel`` mark (only that makes
    an end ``cancelled``), then TERMs the wrapper, which stops everything the job started
    (KILL after the grace) and records ``cancelled``; does nothing when it has ended."""
    lay = LAYOUT.under(root)
    return (
        f"test -e {_quote(lay.exit_code, 'root')} || "
        f"{{ : > {_quote(lay.cancel, 'root')}; "
        f'p=; {{ read -r p < {_quote(lay.pid, "root")}; }} 2>/dev/null; [ -n "$p" ] && kill -TERM "$p"; }}'
    )


def render_reap(root: str) -> str:
    """The shell line that KILLs what a job left running when its wrapper died without its
    end (so nobody drains it): its cgroup when it had one, and every process carrying its
    tag (``_eps_job=<root>``).  Prints nothing; always succeeds."""
    lay = LAYOUT.under(root)
    return (
        f"cd -- {_quote(root, 'root')} 2>/dev/null || exit 0; r=$(pwd -P); "
        f"c=$(cat -- {_quote(lay.cgroup, 'root')} 2>/dev/null); "
        'if [ -n "$c" ] && [ -d "$c" ]; then '
        '{ echo 1 > "$c/cgroup.kill"; } 2>/dev/null || '
        '{ while read -r p; do kill -KILL "$p" 2>/dev/null; done < "$c/cgroup.procs"; } 2>/dev/null; fi; '
        'for p in $(grep -lzxF -- "_eps_job=$r" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); '
        'do kill -KILL "$p" 2>/dev/null; done; '
        'if [ -n "$c" ]; then sleep 0.5; rmdir -- "$c" 2>/dev/null; fi; exit 0'
    )


#: The records the probe reads: LAYOUT field names, which are also the keys it prints.
PROBED = ("pid", "started_at", "ended_at", "status", "exit_code", "stored", "stalled")


def render_probe(root: str) -> str:
    """The shell line that prints what :func:`parse_probe` reads: one ``key=value``
    line per record file (empty when absent) and ``alive=1|0`` (whether the pid in
    ``pid`` is a live process *on the machine the probe runs on*), or ``missing``
    when the root does not exist."""
    parts = [f"cd -- {_quote(root, 'root')} 2>/dev/null || {{ echo missing; exit 0; }}"]
    # alive first, the records after: a wrapper seen dead before its exit-code was looked for
    # had really gone without one (it writes exit-code before it exits)
    pid = quote_arg(LAYOUT.pid)
    # the pid read by the shell itself (POSIX read: the login shell may not be bash), no cat
    read_pid = f"p=; {{ read -r p < {pid}; }} 2>/dev/null"
    parts.append(f'{read_pid}; if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then a=1; else a=0; fi')
    for field in PROBED:
        name = quote_arg(getattr(LAYOUT, field))
        parts.append(f"printf '{field}=%s\\n' \"$(head -c 64 -- {name} 2>/dev/null)\"")
    parts.append("echo alive=$a")
    return "; ".join(parts)


def parse_probe(text: str) -> JobProgress:
    """What :func:`render_probe` printed, as a record.  Unparsable values read as absent."""
    if text.strip() == "missing":
        return JobProgress(exists=False)
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    status_text = values.get("status", "")
    status = JobEnd(status_text) if status_text in {e.value for e in JobEnd} else None
    return JobProgress(
        exists=True,
        pid=_int(values.get("pid")),
        started_at=_int(values.get("started_at")),
        ended_at=_int(values.get("ended_at")),
        status=status,
        exit_code=_int(values.get("exit_code")),
        stored=_int(values.get("stored")),
        stalled=_int(values.get("stalled")),
        alive=values.get("alive") == "1",
    )


def render_follow(root: str, *, poll_s: int = 1, wrapper_here: bool = False) -> str:
    """The shell line that streams ``job.log`` from its start and stops once the job
    has ended (``exit-code`` written) and the last lines are out, or when the reader
    went away (tail died on a closed pipe).  ``wrapper_here``: it runs on the job's own
    machine, so a wrapper that is gone without writing ``exit-code`` ends it as well."""
    lay = LAYOUT.under(root)
    log = _quote(lay.log, "root")
    done = _quote(lay.exit_code, "root")
    gone = ""
    if wrapper_here:
        pid = _quote(lay.pid, "root")
        gone = (
            # the pid read by the shell itself at every poll (POSIX read: the login shell may not be bash)
            f'p=; {{ read -r p < {pid}; }} 2>/dev/null; if [ -n "$p" ] && ! kill -0 "$p" 2>/dev/null '
            f"&& [ ! -e {done} ]; then break; fi; "
        )
    return (
        f"tail -n +1 -F -- {log} 2>/dev/null & t=$!; "
        f'while kill -0 "$t" 2>/dev/null && [ ! -e {done} ]; do {gone}sleep {poll_s}; done; '
        f'sleep {poll_s}; kill "$t" 2>/dev/null; wait "$t" 2>/dev/null; exit 0'
    )


# ------------------------------------------------------------------ checks ---


def check_spec(spec: JobSpec, env: Mapping[str, str] | None = None) -> None:
    """Everything :func:`render_jobscript` (and :func:`render_env_file` for ``env``) would
    refuse, refused now: a caller checks its input before anything is made."""
    _check(spec)
    if env is not None:
        render_env_file(env)


def _check(spec: JobSpec) -> None:
    if not spec.command:
        raise JobScriptError("command", "", "is empty")
    for arg in spec.command:
        _quote(arg, "command argument")
    if len(spec.command) == 1 and not spec.command[0].strip():
        raise JobScriptError("command", spec.command[0], "is a blank shell line")
    if spec.setup is not None:
        if not spec.setup.strip():
            raise JobScriptError("setup", spec.setup, "is a blank shell line")
        _quote(spec.setup, "setup")
    _check_dispatch_id(spec.dispatch_id)
    if spec.kill_grace_s <= 0:
        raise JobScriptError("kill grace", str(spec.kill_grace_s), "must be positive seconds")
    if spec.time_limit_s <= 0:
        raise JobScriptError("time limit", str(spec.time_limit_s), "must be positive seconds")
    if spec.stall is not None and (spec.stall.after_s <= 0 or spec.stall.poll_s <= 0):
        raise JobScriptError("stall watch", f"{spec.stall.after_s}/{spec.stall.poll_s}", "must be positive seconds")
    if spec.task_count < 1 or not 0 <= spec.task_index < spec.task_count:
        raise JobScriptError("task", f"{spec.task_index}/{spec.task_count}", "needs 0 <= index < count")
    seen: set[str] = set()
    for name in spec.env_names:
        _check_env_name(name)
        if name in seen:
            raise JobScriptError("environment name", name, "is given twice")
        seen.add(name)


def _check_env_name(name: str) -> None:
    if _ENV_NAME.fullmatch(name) is None:
        raise JobScriptError("environment name", name, "is not a shell identifier")
    if name in RESERVED_NAMES or name.startswith(_INTERNAL_PREFIX):
        raise JobScriptError("environment name", name, "is set by eps itself")


def _check_dispatch_id(dispatch_id: str) -> None:
    try:
        check_dispatch_id(dispatch_id)
    except BadName as exc:
        raise JobScriptError("dispatch id", dispatch_id, str(exc).split(": ", 1)[-1]) from None


def _quote(value: str, field: str, *, secret: bool = False) -> str:
    if "\x00" in value:
        # a secret's value is never put in a message
        raise JobScriptError(field, "<hidden>" if secret else value, "holds a NUL byte")
    return quote_arg(value)


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}" if root.rstrip("/") else f"/{name}"


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    return None
