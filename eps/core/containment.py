"""The job wrapper's hold on everything its job starts (cgroup v2 where the machine offers
one, else the process group and an environment tag), and how the wrapper stops all of it:
bash lines for :func:`eps.core.jobscript.render_jobscript`, pure text like the rest of it."""

from __future__ import annotations

from eps.core.sbatch import quote_arg


def containment_lines(name: str, grace: int, cgroup_file: str) -> list[str]:
    """The wrapper's hold on everything the job starts, and how it stops it all.

    Where the machine offers a writable cgroup v2 subtree (the wrapper's own cgroup, or one
    below it), the job runs in a cgroup of its own (``eps-<dispatch>-<task>-<pid>``): nothing
    it starts can leave it (``setsid``, double forks, ``nohup``), and the end waits until it
    is empty.  Elsewhere (no cgroup v2, or none this user may write) the hold is best effort:
    the job's process group (``timeout``'s) and every process that still carries the job's
    tag in its environment (``_eps_job=<root>``, inherited through ``setsid`` and double
    forks); a process that left the group *and* cleared its environment can outlive the job
    there (on a GCP VM or RunPod pod the machine's release ends it).

    ``_eps_stop SIG`` signals all of it once (and remembers when the TERM went out);
    ``_eps_drain`` waits until nothing is left, sending KILL ``grace`` seconds after the TERM.

    ``name``: the job's cgroup name up to its pid, already quoted for bash
    (``eps-<dispatch>-<task>-``); ``cgroup_file``: where the cgroup's path is written (the
    dispatch root's ``cgroup``, relative to it)."""
    return [
        "  _eps_cg= _eps_m= _eps_p=",
        "  # the cgroup2 mount point and this process's cgroup (v2: the `0::` line), read by bash",
        "  while read -r _eps_x _eps_y _eps_z _eps_v; do",
        '    if [ "$_eps_z" = cgroup2 ]; then _eps_m=$_eps_y; break; fi',
        "  done 2>/dev/null </proc/mounts",
        "  while IFS= read -r _eps_x; do",
        "    case $_eps_x in 0::*) _eps_p=${_eps_x#0::}; break ;; esac",
        "  done 2>/dev/null </proc/self/cgroup",
        '  if [ -n "$_eps_m" ] && [ -n "$_eps_p" ] && [ -d "$_eps_m$_eps_p" ]; then',
        f'    _eps_cg="${{_eps_m%/}}${{_eps_p%/}}/"{name}"$$"',
        '    if mkdir -- "$_eps_cg" 2>/dev/null && ( echo "$BASHPID" > "$_eps_cg/cgroup.procs" ) 2>/dev/null; then',
        '      echo "$_eps_cg" > ' + quote_arg(cgroup_file),
        "    else",
        '      rmdir -- "$_eps_cg" 2>/dev/null; _eps_cg=',
        "    fi",
        "  fi",
        "  _eps_tagged() {",
        '    grep -lzxF -- "_eps_job=$_eps_root" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3',
        "  }",
        "  _eps_alive() {",
        '    if [ -n "$_eps_cg" ]; then { read -r _eps_x < "$_eps_cg/cgroup.procs"; } 2>/dev/null; return; fi',
        '    kill -0 -- "-$_eps_child" 2>/dev/null || [ -n "$(_eps_tagged)" ]',
        "  }",
        "  _eps_signal() {",
        '    kill "-$1" -- "-$_eps_child" 2>/dev/null',
        '    if [ -z "$_eps_cg" ]; then',
        '      for _eps_x in $(_eps_tagged); do kill "-$1" "$_eps_x" 2>/dev/null; done; return 0',
        "    fi",
        '    if [ "$1" = KILL ] && [ -e "$_eps_cg/cgroup.kill" ]; then echo 1 > "$_eps_cg/cgroup.kill"; return 0; fi',
        '    while read -r _eps_x; do kill "-$1" "$_eps_x" 2>/dev/null; done < "$_eps_cg/cgroup.procs"',
        "  }",
        "  _eps_stop() {",
        '    [ -n "$_eps_term_at" ] && return 0',
        "    _eps_term_at=$SECONDS",
        '    _eps_signal "$1"',
        "  }",
        "  _eps_drain() {",
        # SECONDS counts whole seconds: one more keeps the grace at least grace_s long
        f"    _eps_kill_at=$((_eps_term_at + {grace} + 1)); _eps_given_up=",
        "    while _eps_alive; do",
        '      if [ -z "$_eps_given_up" ] && [ "$SECONDS" -ge "$_eps_kill_at" ]; then',
        f'        echo "eps: still running {grace} s after the TERM: KILL"',
        "        _eps_signal KILL; _eps_given_up=$((SECONDS + 10))",
        '      elif [ -n "$_eps_given_up" ] && [ "$SECONDS" -ge "$_eps_given_up" ]; then',
        '        echo "eps: processes of the job survived KILL (uninterruptible?); ending anyway"; break',
        "      fi",
        "      sleep 0.2",
        "    done",
        '    if [ -n "$_eps_cg" ]; then rmdir -- "$_eps_cg" 2>/dev/null; fi',
        "  }",
    ]
