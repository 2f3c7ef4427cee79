"""The stall watch: a job that is alive but doing nothing (pure).  The bash lines by which
the job's own wrapper (:func:`eps.core.jobscript.render_jobscript`) watches it where it
runs, on every lane, with no eps process alive, and the rule in words.

The rule (``stall_after``: the job's ``--stall-after``, else ``[jobs] stall_after_s``, else
:attr:`eps.core.tables.Healing.stall_after_s`; 0 turns the watch off):

- without a GPU reading, a job is **stalled** once its log (its own lines: the wrapper's
  ``eps:`` lines and rclone's are not the job speaking) and its ``$EPS_OUTPUT_DIR`` (names,
  sizes and times of everything in it) have not changed for ``stall_after``;
- on a GPU job whose machine answers ``nvidia-smi --query-gpu=utilization.gpu
  --format=csv,noheader,nounits`` (NVIDIA's documented query: one integer percentage per
  GPU per line), the GPUs decide: any GPU above 0 % is work, and every GPU at 0 % for
  ``stall_after`` is stalled, whatever the log says; a machine without ``nvidia-smi`` (or
  whose ``nvidia-smi`` answers nothing readable) falls back to the log and outputs.

The watch looks every :func:`poll_s` (a tenth of ``stall_after``, 1..60 s).  Each silent
spell writes :data:`STALLED` in the dispatch root (the epoch second it began) and says so
in the log once; the job speaking again removes it.  eps turns each spell into one
``stalled`` event.  ``on_stall``: ``notify`` (the default) only says it; ``stop`` also
leaves :data:`STALL_STOP` and TERMs the wrapper, which stops the job as at any end (TERM,
KILL after the grace, outputs synced) and records the end ``stalled`` with exit code
:data:`STALL_EXIT`.  The watch is the wrapper's own child: it ends with the wrapper's end,
and by itself when the wrapper is gone.
"""

from __future__ import annotations

from eps.core.records import NamedTuple
from eps.core.sbatch import quote_arg

#: The marker of a silent spell: the epoch second it began.  Removed when the job speaks again.
STALLED = "stalled"
#: Left by the watch before it stops the job (``on_stall = "stop"``): the end is ``stalled``.
STALL_STOP = "stall-stop"
#: The exit code of a job its stall watch stopped (``eps wait`` leaves with it).
STALL_EXIT = 125
#: What ``on_stall`` may say.
ON_STALL = ("notify", "stop")
#: The watch looks this often at most, and at least.
POLL_MAX_S = 60
POLL_MIN_S = 1
#: NVIDIA's documented query: one integer (percent) per GPU per line.
NVIDIA_SMI_QUERY = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits"
#: New log bytes beyond this are the job speaking without being read (a log that grows this fast is alive).
_READ_MAX = 65536
#: The wrapper's own lines and rclone's (``2026/01/02 03:04:05 NOTICE: ...``): not the job speaking.
WRAPPER_LINES = r"^(eps: |[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [A-Z]+ ?: )"


class StallPlan(NamedTuple):
    """What the wrapper's watch does: stalled after ``after_s`` of silence (looked at every
    ``poll_s``), ``stop`` it then or only say so, the GPUs read (``gpu``) where they answer."""

    after_s: int
    stop: bool = False
    gpu: bool = False
    poll_s: int = POLL_MAX_S


def poll_s(after_s: int) -> int:
    """How often the watch looks: a tenth of ``after_s``, within 1..60 s (a 20 s window: 2 s)."""
    return max(POLL_MIN_S, min(POLL_MAX_S, after_s // 10))


def check_on_stall(value: object) -> str:
    """``notify`` or ``stop``; ValueError (one line) otherwise."""
    if value not in ON_STALL:
        raise ValueError(f"on_stall must be notify or stop, got {value!r}")
    return str(value)


def describe(after_s: int, on_stall: str) -> str:
    """The rule in effect, as ``eps plan`` shows it under the retry line."""
    if after_s <= 0:
        return "stall: not watched (--stall-after 0)"
    from eps.core.durations import format_duration

    then = "stop it (exit 125, a retry event: --retry stalled)" if on_stall == "stop" else "say so (notify)"
    return (f"stall: a log and outputs silent (on a GPU job: every GPU at 0 %) for "
            f"{format_duration(after_s)}: {then}")  # fmt: skip


def stall_lines(plan: StallPlan, log: str, outputs: str) -> tuple[list[str], list[str]]:
    """The watch started by the wrapper's ``run`` once the job runs (it sets ``_eps_stw``),
    and what the wrapper's end does with it (stops it).  ``log`` and ``outputs``: the dispatch
    root's names, relative to it (the wrapper's cwd)."""
    q = quote_arg
    lg, out, mark, stop = q(log), q(outputs), q(STALLED), q(STALL_STOP)
    start = [
        f"  # the stall watch (eps.core.stall): silent for {plan.after_s} s, looked at every {plan.poll_s} s",
        "  ( _eps_q=; _eps_s=; trap '_eps_q=1; kill \"$_eps_s\" 2>/dev/null' TERM",
        "    _eps_off=0; _eps_fp=; _eps_last=$SECONDS; _eps_said=",
        f"    _eps_fp=$(find {out} -printf '%p %s %T@\\n' 2>/dev/null | cksum)",
        '    while [ -z "$_eps_q" ]; do',
        f'      sleep {plan.poll_s} & _eps_s=$!; wait "$_eps_s"',
        '      [ -z "$_eps_q" ] && kill -0 "$$" 2>/dev/null || break  # ended, or its wrapper is gone',
        "      _eps_act= _eps_u=",
        *(  # a GPU job: the GPUs decide where nvidia-smi answers
            [
                "      if command -v nvidia-smi >/dev/null 2>&1; then",
                f"        _eps_u=$({NVIDIA_SMI_QUERY} 2>/dev/null) || _eps_u=",
                "      fi",
            ]
            if plan.gpu
            else []
        ),
        "      _eps_read=0",
        "      while read -r _eps_x; do  # one integer per GPU; [N/A] and the like are not readings",
        "        _eps_x=${_eps_x//[[:space:]]/}",
        '        case $_eps_x in "" | *[!0-9]*) continue ;; esac',
        '        _eps_read=1; if [ "$_eps_x" -gt 0 ]; then _eps_act=gpu; fi',
        '      done <<< "$_eps_u"',
        '      if [ "$_eps_read" = 0 ]; then  # no GPU reading: the log (the job\'s own lines) and outputs',
        f"        _eps_sz=$(stat -c %s -- {lg} 2>/dev/null) || _eps_sz=0",
        '        if [ "$_eps_sz" -lt "$_eps_off" ]; then _eps_act=log',
        f'        elif [ "$_eps_sz" -gt "$((_eps_off + {_READ_MAX}))" ]; then _eps_act=log',
        '        elif [ "$_eps_sz" -gt "$_eps_off" ] && tail -c "+$((_eps_off + 1))" -- '
        + lg
        + ' | head -c "$((_eps_sz - _eps_off))" \\',
        f"            | grep -qvE {q(WRAPPER_LINES)}; then _eps_act=log",
        "        fi",
        "        _eps_off=$_eps_sz",
        f"        _eps_f=$(find {out} -printf '%p %s %T@\\n' 2>/dev/null | cksum)",
        '        if [ "$_eps_f" != "$_eps_fp" ]; then _eps_fp=$_eps_f; _eps_act=outputs; fi',
        "      fi",
        '      if [ -n "$_eps_act" ]; then',
        "        _eps_last=$SECONDS",
        f'        if [ -n "$_eps_said" ]; then rm -f -- {mark}; _eps_said=; echo "eps: the job is busy again'
        ' ($_eps_act)"; fi',
        f'      elif [ -z "$_eps_said" ] && [ "$((SECONDS - _eps_last))" -ge {plan.after_s} ]; then',
        "        printf -v _eps_now '%(%s)T' -1; _eps_said=$((_eps_now - SECONDS + _eps_last))",
        f'        _eps_put {mark} "$_eps_said"',
        '        if [ "$_eps_read" = 1 ]; then _eps_x="every GPU at 0 %"; else _eps_x="no log line, no output"; fi',
        f'        echo "eps: stalled: $_eps_x for {plan.after_s} s (since epoch $_eps_said)"',
    ]
    if plan.stop:
        start += [
            f'        echo "eps: stopping the job (on_stall = stop): it ends stalled, exit code {STALL_EXIT}"',
            f'        : > {stop}; kill -TERM "$$"; break',
        ]
    start += [
        "      fi",
        "    done ) &",
        "  _eps_stw=$!",
    ]
    end = [
        '    if [ -n "${_eps_stw:-}" ]; then kill -TERM "$_eps_stw" 2>/dev/null; wait "$_eps_stw" 2>/dev/null; fi',
    ]
    return start, end


def parse_stall_after(value: object) -> int:
    """``--stall-after``'s value (a duration as ``--duration`` takes it, whole seconds, or
    ``0``/``off``: not watched) -> seconds; ValueError (one line) otherwise."""
    from eps.core.durations import parse_duration

    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"stall_after takes a duration such as 30m, or 0/off, got {value!r}")
    text = str(value).strip()
    if text in ("0", "off"):
        return 0
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"stall_after: {exc} (or 0/off: not watched)") from None
