"""Who owns the dispatches of a state directory: its supervisor's lock and pid, starting one
(:func:`ensure`), reviving one (:func:`revive`), and what a caller hands over with a
dispatch (its ``--snapshot`` / ``--grants``).  No walk, no provider: cheap to import.
The supervisor itself is :mod:`eps.shell.run.supervisor`."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from eps.core.model import CapacitySnapshot, QosGrants
from eps.core.states import DispatchState
from eps.shell.config.load import SETTINGS_ENV
from eps.shell.config.settings import Settings
from eps.shell.state.events import log_path as events_path
from eps.shell.state.events import read_from

if TYPE_CHECKING:
    from eps.core.healing import Decision
    from eps.shell.state.ledger import DispatchRow, Ledger
    from eps.shell.state.team import Owner

#: The dispatch states a supervisor works on (``interrupted`` and ``preempted`` wait for
#: ``eps execute --resume``, which hands them back as ``walking``, unless the retry policy
#: relaunches them; ``waiting`` ones it walks again at their next try).
SUPERVISED: tuple[DispatchState, ...] = (
    DispatchState.WALKING, DispatchState.STARTED, DispatchState.HELD, DispatchState.WAITING
)  # fmt: skip


class SupervisorError(RuntimeError):
    """No supervisor could be started (one line naming its log)."""


def lock_path(state_dir: str) -> str:
    return os.path.join(state_dir, "supervisor.lock")


def pid_path(state_dir: str) -> str:
    return os.path.join(state_dir, "supervisor.pid")


def log_file(state_dir: str) -> str:
    return os.path.join(state_dir, "logs", "supervisor.log")


def inputs_path(state_dir: str, dispatch: str) -> str:
    return os.path.join(state_dir, "inputs", f"{dispatch}.json")


# --- is one alive? start one -------------------------------------------------------------------


def alive_pid(state_dir: str) -> int | None:
    """The pid of the live supervisor of ``state_dir`` (0 when its pid is not written yet),
    or ``None`` when there is none."""
    from eps.shell.util.flocks import held_elsewhere

    if not held_elsewhere(lock_path(state_dir)):
        return None
    try:
        with open(pid_path(state_dir)) as p:
            pid = int(p.read().strip() or 0)
    except (OSError, ValueError):
        return 0
    # a supervisor killed by SIGKILL leaves its pid file; the one that took the lock since has
    # not written its own yet: not written, never the dead one's pid
    return pid if pid and _running(pid) else 0


def _running(pid: int) -> bool:
    """``pid`` runs code: not gone, and not a zombie (a SIGKILLed supervisor whose parent has
    not reaped it yet still answers ``kill(pid, 0)``, and must not pass for the new one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid: alive
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (not Linux), or gone since
        return True
    return state not in ("Z", "X")


def alive_elsewhere(state_dir: str) -> bool:
    """A supervisor other than this process owns the state directory's dispatches."""
    pid = alive_pid(state_dir)
    return pid is not None and pid != os.getpid()


def spawn(state_dir: str, env: Mapping[str, str]) -> None:
    """Start a supervisor in its own session (stdin closed, output to its log)."""
    import subprocess  # only to start one: eps status imports this module on every call

    os.makedirs(os.path.dirname(log_file(state_dir)), mode=0o700, exist_ok=True)
    with open(log_file(state_dir), "ab") as out:
        subprocess.Popen(
            [sys.executable, "-c", "from eps.shell.run.supervisor import main; main()", state_dir],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
            env={**env, "EPS_STATE_DIR": state_dir},
        )  # fmt: skip


def ensure(state_dir: str, env: Mapping[str, str], *, within_s: float = 15.0) -> int:
    """The pid of the state directory's supervisor, started if there is none."""
    pid = alive_pid(state_dir)
    if pid is not None:
        return pid
    spawn(state_dir, env)
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        time.sleep(0.02)
        pid = alive_pid(state_dir)
        if pid:
            return pid
    raise SupervisorError(f"no supervisor started within {within_s:.0f} s (see {log_file(state_dir)})")


def relaunch_of(row: DispatchRow, now: float | None = None) -> Decision | None:
    """What the retry policy says of ``row`` now: a :class:`~eps.core.healing.Relaunch` for an
    interrupted (preempted, its machine lost) dispatch or one whose job failed, when its
    policy relaunches it; else a ``GiveUp`` (``None`` for a copy or a dispatch still going)."""
    from eps.core.healing import after_run

    if row.parent is not None:
        return None
    elapsed = (time.time() if now is None else now) - row.created_at
    return after_run(row.job, row.state, row.job_status, row.exit_code, elapsed_s=elapsed)


def will_relaunch(row: DispatchRow, now: float | None = None) -> bool:
    """``row`` is to be relaunched by its supervisor (it is not settled: a waiting caller
    stays attached through the relaunch)."""
    from eps.core.healing import Relaunch

    return isinstance(relaunch_of(row, now), Relaunch)


def landed(row: DispatchRow) -> bool:
    """The walk is over (for now): something runs, is held, nothing could start, or it
    waits for capacity (its supervisor plans again later)."""
    return row.state not in (DispatchState.WALKING, DispatchState.INTERRUPTED)


def settled(row: DispatchRow) -> bool:
    """Over: not walking, running or held, and not interrupted with a relaunch to come."""
    walking = (DispatchState.WALKING, DispatchState.STARTED, DispatchState.HELD, DispatchState.INTERRUPTED,
               DispatchState.WAITING)  # fmt: skip
    return row.state not in walking and not will_relaunch(row)


def unsettled_roots(ledger: Ledger) -> list[DispatchRow]:
    """The dispatches a supervisor owns: walking, started, held, or to be relaunched.  On a
    ledger other hosts share (``[state] url``), those whose lease is this host's or has run
    out (:mod:`eps.shell.state.team`): a dispatch another host's lease holds is its
    supervisor's, and a second walk of it would be a second submission.  A dispatch recorded
    before leases (no owner) stays with the host that handed it over (its inputs are here)."""
    rows = ledger.dispatches(states=(*SUPERVISED, DispatchState.PREEMPTED))
    rows += ledger.select(states=(DispatchState.ENDED,), failed_retrying=True)
    rows = [r for r in rows if r.parent is None and (r.state in SUPERVISED or will_relaunch(r))]
    if ledger.shared and rows:
        from eps.shell.state import team

        found, now = team.owners_now(ledger, (r.id for r in rows))  # one statement
        rows = [r for r in rows if _ours(ledger, r.id, found.get(r.id), now)]
    return rows


def _ours(ledger: Ledger, dispatch: str, owner: Owner | None, now: float) -> bool:
    from eps.core.lease import LeaseState
    from eps.shell.state import team

    if owner is None or owner.host is None:  # recorded before leases: its inputs say whose it is
        return os.path.exists(inputs_path(ledger.state_dir, dispatch))
    return team.lease_of(ledger, owner, now) is not LeaseState.HELD


def revive(ledger: Ledger, env: Mapping[str, str]) -> int | None:
    """Start a supervisor when a dispatch, or a notification of one, is left to none (the
    last one died): the pid, or ``None`` when nothing needs one."""
    rows = unsettled_roots(ledger)
    if not rows:
        from eps.shell.notify import book

        if not book.owed(ledger):  # a notice still owed (a target was down, a supervisor killed) needs one too
            return None
    return ensure(ledger.state_dir, env)


def supervised(state_dir: str, dispatch: str, env: Mapping[str, str], *, within_s: float = 30.0) -> bool:
    """Wait until a supervisor has said it owns ``dispatch`` (its ``supervised`` event),
    starting one again if the one there died meanwhile."""
    end = time.monotonic() + within_s
    offset = 0
    path = events_path(state_dir, dispatch)
    checked = 0.0
    while time.monotonic() < end:
        records, offset = read_from(path, offset)
        if any(r.get("event") == "supervised" and r.get("dispatch") == dispatch for r in records):
            return True
        if time.monotonic() - checked >= 1.0:
            ensure(state_dir, env)
            checked = time.monotonic()
        time.sleep(0.02)
    return False


# --- what the walk starts from -------------------------------------------------------------------


def write_inputs(
    state_dir: str,
    dispatch: str,
    snapshot: CapacitySnapshot | None,
    grants: QosGrants | None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Keep what the dispatch is to be walked with, for whichever supervisor walks it (now, or
    one revived later): the ``--snapshot`` / ``--grants`` the caller gave, and the settings the
    caller's ``eps plan`` would have used (``env``: the caller's environment; its settings part
    and the config file's bytes now are kept, so a config edited later changes only new
    dispatches).  Mode 0600 in a 0700 directory; no secret is among them."""
    from eps.shell.config.load import config_text, settings_env
    from eps.shell.state.codec import to_data

    os.makedirs(os.path.dirname(inputs_path(state_dir, dispatch)), mode=0o700, exist_ok=True)
    doc: dict[str, Any] = {"snapshot": None if snapshot is None else to_data(snapshot),
                           "grants": None if grants is None else to_data(grants)}  # fmt: skip
    if env is not None:
        text = config_text(env)
        if text is not None and b"notify" in text:  # its notification URLs checked, and taken out (tokens)
            from eps.shell.config.settings import config_path
            from eps.shell.notify.keep import kept_config

            text = kept_config(text, config_path(env))
        # the URL may hold a password; the host's name is the caller's host's own
        kept_env = {k: v for k, v in settings_env(env).items() if k not in ("EPS_STATE_URL", "EPS_STATE_HOST")}
        doc["settings"] = {"env": kept_env, "config": None if text is None else text.decode("utf-8")}
    tmp = inputs_path(state_dir, dispatch) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, inputs_path(state_dir, dispatch))


def share_inputs(ledger: Ledger, dispatch: str, settings: Settings) -> None:
    """On a ledger other hosts share: keep the dispatch's inputs (:func:`write_inputs`) with it
    in the database, for a host that takes it over, and hold it for this host for one lease."""
    if not ledger.shared:
        return  # one host: nothing to share, no lease to hold
    from eps.shell.state import team

    try:
        with open(inputs_path(ledger.state_dir, dispatch)) as fh:
            doc = fh.read()
    except FileNotFoundError:
        doc = "{}"
    team.register(ledger, public_key(ledger.state_dir))
    team.share(ledger, dispatch, doc, settings.state_lease_s)


def public_key(state_dir: str) -> str | None:
    """eps's public key in ``state_dir`` (``None``: none made yet)."""
    from eps.shell.remote.keys import PRIVATE_NAME, key_dir

    try:
        with open(os.path.join(key_dir(state_dir), PRIVATE_NAME + ".pub")) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _kept(state_dir: str, dispatch: str, ledger: Ledger | None) -> tuple[dict[str, Any] | None, bool]:
    """The inputs ``dispatch`` was handed over with, and whether they came from the database
    (another host handed it over: this one takes it over)."""
    try:
        with open(inputs_path(state_dir, dispatch)) as fh:
            return json.load(fh), False
    except FileNotFoundError:
        pass
    if ledger is None or not ledger.shared:
        return None, False
    from eps.shell.state import team

    text = team.inputs_of(ledger, dispatch)
    return (None, False) if text is None else (json.loads(text), True)


def read_inputs(
    state_dir: str, dispatch: str, ledger: Ledger | None = None
) -> tuple[CapacitySnapshot | None, QosGrants | None]:
    from eps.shell.state.codec import structure

    doc, _ = _kept(state_dir, dispatch, ledger)
    if doc is None:
        return None, None
    snap = None if doc.get("snapshot") is None else structure(doc["snapshot"], CapacitySnapshot)
    grants = None if doc.get("grants") is None else structure(doc["grants"], QosGrants)
    return snap, grants


def read_settings(
    state_dir: str, dispatch: str, base_env: Mapping[str, str], ledger: Ledger | None = None
) -> tuple[Settings, dict[str, str]] | None:
    """The settings ``dispatch`` was handed over with, and the environment its lanes use (this
    process's, with the caller's settings part over it: keys stay the supervisor's own);
    ``None`` when none were kept (a dispatch recorded before they were, or inline).

    A dispatch another host handed over (its inputs in the shared database, ``ledger``): this
    host's own config and environment (its logins, endpoints, paths and keys), with the
    caller's park caps (``EPS_*_QUEUE_WAIT_SECONDS``) over them: the ladder is walked as it was."""
    from eps.shell.config.load import load_settings

    doc, taken_over = _kept(state_dir, dispatch, ledger)
    kept = None if doc is None else doc.get("settings")
    if kept is None:
        return None
    if taken_over:
        env = dict(base_env)
        env.update({k: v for k, v in kept["env"].items() if k.startswith("EPS_") and k.endswith("_QUEUE_WAIT_SECONDS")})
        return load_settings(env), env
    env = {k: v for k, v in base_env.items() if not (k.startswith("EPS_") or k in SETTINGS_ENV)}
    env.update(kept["env"])
    env["EPS_STATE_DIR"] = state_dir  # the supervisor's: the dispatch is in this ledger
    if base_env.get("EPS_STATE_URL") is not None:  # (wherever that ledger is)
        env["EPS_STATE_URL"] = base_env["EPS_STATE_URL"]
    text = kept.get("config")
    # no file then: none now either (an empty config is the embedded defaults)
    return load_settings(env, text=(text or "").encode("utf-8")), env
