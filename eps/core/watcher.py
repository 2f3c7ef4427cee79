"""Pure rendering of the machine's own guard: a script on a GCP VM or RunPod pod that stops
the machine when nobody needs it any more, whether or not any eps process still runs.

eps ships and starts the job over ssh and, when it ends, pulls its outputs and releases
the machine (its supervisor, ``eps wait``, ``eps status``).  The watcher is the backstop for
when that never happens (the laptop closed, eps killed, the network gone).  It stops the
machine when:

- no job recorded its start within ``launch_grace_s`` of the watcher's own start (eps
  died between making the machine and launching the job);
- the job ended (``exit-code`` written, or its wrapper is gone without one) and
  ``linger_s`` has passed since (the window for ``eps pull`` / ``eps ssh``);
- the job has run past its time limit plus the kill grace plus the linger plus
  :data:`DEADLINE_SLACK_S` (a wrapper that hangs where its ``timeout`` cannot reach).

How it stops the machine depends on whether a job ran on it.  No job: ``halt`` (a shell
line: GCP powers the VM off, RunPod removes the pod): there is nothing to keep.  A job
ran: its outputs may not have been pulled (eps pulls and releases the machine as soon as
the job ends, so a machine still there after the linger is one nobody pulled), so it is
stopped with its disk kept (``park``; GCP: powered off; RunPod: the pod stopped, its
persistent volume kept): only the disk bills until ``eps pull`` (or the dispatch's next
supervisor) starts it again, brings the outputs back and deletes it.

Before it stops the machine it says why, once, on stdout (the serial console on GCP).
On RunPod eps starts it over ssh right after the job (:func:`render_watch_start`: a
second start while one runs starts nothing); on GCP it is the VM's startup script, so it
runs from the first boot, before eps has even reached the machine.

Nothing in the script is evaluated twice: the user is a checked login name, the dispatch
id (in a comment) and the root are single words from ``quote_arg``, each on one line; the
halt line is eps's own (a table of the lane), one line.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from eps.core.jobscript import LAYOUT, JobScriptError, utc_now_line
from eps.core.sbatch import quote_arg
from eps.core.tables import JOB_LIFECYCLE

#: Past the job's limit + kill grace + linger, the machine is stopped regardless.
DEADLINE_SLACK_S = 300
#: The watcher's own files, in the dispatch root beside the job's.
WATCH_PID = "watch.pid"
WATCH_LOG = "watch.log"
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


class WatchSpec(NamedTuple):
    """What the watcher guards.  ``root``: the job's dispatch root (``<work root>/<dispatch>/<task>``),
    absolute or relative to ``user``'s home (which may not exist yet when a GCP startup script
    begins: the guest agent makes the account from the ssh key a little later)."""

    dispatch_id: str
    user: str
    root: str
    time_limit_s: int
    halt: str
    launch_grace_s: int = JOB_LIFECYCLE.launch_grace_s
    linger_s: int = JOB_LIFECYCLE.linger_s
    kill_grace_s: int = JOB_LIFECYCLE.kill_grace_s
    poll_s: float = 30.0
    deadline_slack_s: int = DEADLINE_SLACK_S
    park: str = ""  # how the machine is stopped once a job ran on it (its disk kept); empty: ``halt``


def render_watcher(spec: WatchSpec) -> str:
    """The watcher's bash text.  Raises :class:`~eps.core.jobscript.JobScriptError` for a
    value that cannot be placed in it safely."""
    _check(spec)
    q = quote_arg
    lay = LAYOUT
    after_start = spec.time_limit_s + spec.kill_grace_s + spec.linger_s + spec.deadline_slack_s
    if spec.root.startswith("/"):
        where = f"root={q(spec.root)}"
    else:
        # looked up until the account is there (the guest agent makes it), then kept
        where = f'[ -n "$home" ] || home=$(getent passwd {spec.user} | cut -d: -f6); root="$home/"{q(spec.root)}'
    lines = [
        "#!/bin/bash",
        f"# eps watcher: dispatch {quote_arg(spec.dispatch_id)}.  Rendered by eps.core.watcher; do not edit.",
        "# Stops this machine when no job was launched, when the job ended and the linger passed,",
        "# or when the job outlived its limit: a machine nobody needs does not keep billing.",
        "set -u",
        "# Needs bash >= 4.2: printf's %()T stands in for date (a process every poll).",
        "printf -v born '%(%s)T' -1",
        f'say() {{ local t; {utc_now_line("t")}; echo "eps watcher ($t): $*"; }}',
        "home=",
        "why=",
        "idle=",
        "gone_since=",
        "while :; do",
        "  printf -v now '%(%s)T' -1",
        f"  {where}",
        f'  if [ -s "$root/{lay.exit_code}" ]; then',
        f'    ended=; {{ IFS= read -r ended < "$root/{lay.ended_at}"; }} 2>/dev/null',
        '    case "$ended" in ""|*[!0-9]*) ended=$now ;; esac',
        f'    if [ "$now" -ge $((ended + {spec.linger_s})) ]; then',
        f'      why="the job ended and the {spec.linger_s} s linger has passed"; break',
        "    fi",
        f'  elif [ -s "$root/{lay.started_at}" ]; then',
        f'    started=; {{ IFS= read -r started < "$root/{lay.started_at}"; }} 2>/dev/null',
        '    case "$started" in ""|*[!0-9]*) started=$now ;; esac',
        f'    pid=; {{ IFS= read -r pid < "$root/{lay.pid}"; }} 2>/dev/null',
        '    case "$pid" in ""|*[!0-9]*) pid= ;; esac',
        f'    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && [ ! -s "$root/{lay.exit_code}" ]; then',
        "      gone_since=${gone_since:-$now}",
        f'      if [ "$now" -ge $((gone_since + {spec.linger_s})) ]; then',
        f'        why="the job\'s wrapper is gone without an exit code and the {spec.linger_s} s linger has passed"',
        "        break",
        "      fi",
        "    else",
        "      gone_since=",
        "    fi",
        f'    if [ "$now" -ge $((started + {after_start})) ]; then',
        f'      why="the job outlived its {spec.time_limit_s} s limit, the kill grace and the linger"; break',
        "    fi",
        f'  elif [ "$now" -ge $((born + {spec.launch_grace_s})) ]; then',
        f'    why="no job was launched within {spec.launch_grace_s} s"; idle=1; break',
        "  fi",
        f"  sleep {_seconds(spec.poll_s)}",
        "done",
    ]
    if spec.park and spec.park != spec.halt:
        lines += [
            'if [ -n "$idle" ]; then',
            '  say "removing this machine: $why"',
            f"  {spec.halt}",
            "else",
            '  say "stopping this machine, its disk kept for eps pull: $why"',
            f"  {spec.park}",
            "fi",
            "",
        ]
    else:
        lines += ['say "stopping this machine: $why"', f"{spec.halt}", ""]
    return "\n".join(lines)


def render_watch_start(root: str) -> str:
    """The shell line that starts the watcher (``<root>/watch.sh``) detached, once: a second
    start while one runs starts nothing.  Its output goes to ``watch.log``."""
    script = quote_arg(f"{root.rstrip('/')}/watch.sh")
    pid = quote_arg(f"{root.rstrip('/')}/{WATCH_PID}")
    log = quote_arg(f"{root.rstrip('/')}/{WATCH_LOG}")
    return (
        f'if [ -s {pid} ] && kill -0 "$(cat -- {pid})" 2>/dev/null; then :; else '
        f"if [ -e {pid} ] || [ -L {pid} ]; then rm -f -- {pid}; fi; "
        # what `nohup CMD &` left, without nohup's process: HUP ignored (nohup), INT and QUIT
        # too (a background command of a shell without job control), kept so through exec
        f"( trap '' HUP INT QUIT; exec setsid bash {script} ) </dev/null >>{log} 2>&1 & echo $! > {pid}; fi"
    )


def _seconds(value: float) -> str:
    return f"{value:g}"


def _check(spec: WatchSpec) -> None:
    if not spec.dispatch_id or any(c in spec.dispatch_id for c in "\0\n\r"):
        raise JobScriptError("dispatch id", spec.dispatch_id, "must be one non-empty line")
    if _USER.fullmatch(spec.user) is None:
        raise JobScriptError("user", spec.user, "must be a login name ([a-z_][a-z0-9_-]*)")
    if not spec.root or "\x00" in spec.root or "\n" in spec.root:
        raise JobScriptError("root", spec.root, "must be a one-line path")
    if "\x00" in spec.halt or "\n" in spec.halt or not spec.halt.strip():
        raise JobScriptError("halt", spec.halt, "must be one non-empty shell line")
    if "\x00" in spec.park or "\n" in spec.park:
        raise JobScriptError("park", spec.park, "must be one shell line")
    for name in ("time_limit_s", "launch_grace_s", "linger_s", "kill_grace_s", "deadline_slack_s"):
        value = getattr(spec, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise JobScriptError(name, str(value), "must be a non-negative integer")
    if not 0 < spec.poll_s <= 3600:
        raise JobScriptError("poll_s", str(spec.poll_s), "must be in (0, 3600]")
