"""The supervisor's notifications: one thread that reads each watched dispatch's event log,
folds it into notices (:mod:`eps.shell.notify.notices`) and hands each target its next one,
a send at a time per target, each in a thread of its own.

**Once per event, at least once.**  A target's cursor (the byte offset in the event log up to
which it was told, :mod:`eps.shell.notify.book`) moves in the ledger only *after* the target
took the notice.  A supervisor killed before a send, or during one, sends it again when it is
revived (the log is replayed from the start; the cursor says where to go on), so a notice is
never lost; the price is that a supervisor killed in the milliseconds between a target's
answer and the cursor's write sends that one notice to that target twice.  At most once
would mean moving the cursor first, and a supervisor killed mid-send (or one that leaves
while a target is down) would then lose the notice for good: a "failed" nobody hears of is
worse than one heard twice.  Each target has its own cursor, so a target that is down never
holds another back, and one that answered is not sent the notice again.

**Never in the dispatch's way.**  Sends run in their own threads, each socket wait bounded
by ``[notify] timeout``; the dispatch threads only write events.  A target that does not
take a notice is tried again after :data:`BACKOFF_S` (1 s, doubling up to 5 min) until
``[notify] retry_for`` has passed since the event, then given up with a line in the
supervisor's log.  The supervisor stays (and is revived by the next eps command) while a
dispatch may still owe a notice, including an ``unpulled`` one due a linger after its end.

**Targets.**  Which events a dispatch sends is its own settings' ``[notify] events`` (kept at
hand-over); its targets are the ``[notify] urls`` of its config file as it is now (the copy
kept in the state directory has them replaced, :mod:`eps.shell.notify.keep`: tokens never
rest there), so a rotated token takes effect at once.  A job's own targets (``--notify``,
:mod:`eps.shell.notify.own`) are sent the same events, each with a cursor of its own; their
file goes once the dispatch owes no more notices (its last one sent or given up).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from eps.core.records import NamedTuple
from eps.core.states import DispatchState
from eps.shell.notify import book
from eps.shell.notify import own as job_targets
from eps.shell.notify.notices import Notice, PullDue, fold, unpulled
from eps.shell.notify.targets import Target, parse_each
from eps.shell.state.events import log_path, read_placed

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings
    from eps.shell.state.ledger import DispatchRow, Ledger

#: Waits before trying a target again after its 1st, 2nd, ... failure (the last repeats).
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 300.0)
#: How often the pump looks at the event logs, and how long a dispatch's targets are kept.
TICK_S = 0.3
RESOLVE_S = 5.0


class Resolved(NamedTuple):
    targets: tuple[Target, ...]
    wanted: frozenset[str]
    linger_s: float
    retry_for_s: float


def _say(line: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} notify: {line}\n")
    sys.stderr.flush()


class Pump:
    """Sends the notices of the dispatches of ``ledger`` that are watched (:meth:`watch`)."""

    def __init__(self, ledger: Ledger, settings: Settings, env: Mapping[str, str], *, tick_s: float = TICK_S,
                 say: Callable[[str], None] = _say) -> None:  # fmt: skip
        self.ledger = ledger
        self.settings = settings
        self.env = dict(env)
        self.tick_s = tick_s
        self.say = say
        self._lock = threading.Lock()
        self._resolved: dict[str, tuple[float, Resolved | None]] = {}
        self._parsed: dict[tuple[tuple[str, ...], int, str], tuple[Target, ...]] = {}
        self._logs: dict[str, tuple[int, list[tuple[int, int, dict[str, Any]]]]] = {}
        self._inflight: dict[str, threading.Thread] = {}
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the supervisor's side -----------------------------------------------------------------

    def watch(self, dispatch: str) -> None:
        """The supervisor took ``dispatch`` on: it owes notices if its settings send any."""
        kept = self._kept(dispatch)
        config = kept is not None and kept.notify is not None and bool(kept.notify.urls)
        if config or job_targets.kept(self.state_dir, dispatch):
            book.watch(self.ledger, dispatch)
            self._resolved.pop(dispatch, None)

    def owes(self) -> bool:
        """Some dispatch may still owe a notice (the supervisor stays for it)."""
        return book.owed(self.ledger) or any(t.is_alive() for t in list(self._inflight.values()))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="notify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a bug here must never take the supervisor down (its text: not shown, a URL?)
                self.say(f"a look failed ({type(exc).__name__} at {_where(exc)}); looking again")
            self._stop.wait(self.tick_s)

    # --- one look ------------------------------------------------------------------------------

    def tick(self) -> None:
        for dispatch, since in book.watched(self.ledger):
            self.step(dispatch, since)

    def step(self, dispatch: str, since: float) -> None:
        row = self.ledger.dispatch(dispatch)
        if row is None:
            self._close(dispatch)
            return
        res = self.resolve(dispatch)
        now = time.time()
        if res is None or not res.targets:
            if _left(row) and (res is not None or now - since > self._retry_for()):
                self._close(dispatch)
            return
        notices, pulls = fold(self._placed(dispatch), res.wanted)
        if "unpulled" not in res.wanted:
            pulls = []
        cursors = book.cursors(self.ledger, dispatch)
        owing = False
        for t in res.targets:
            c = cursors.get(t.key, book.Cursor())
            todo = [n for n in notices if n.end > c.offset]
            due = [p for p in pulls if p.ts > c.pull_done]
            owing = owing or bool(todo or due)
            if not self._free(t.key):
                continue
            if todo:
                n = todo[0]
                self._send(dispatch, t, n, self._ts(dispatch, n), res, offset=n.end)
            elif due:
                self._pull(dispatch, t, due[0], res, now)
        if not owing and _left(row):
            self._close(dispatch)

    def _close(self, dispatch: str) -> None:
        """``dispatch`` owes no more notices: its own targets' URLs go first (a sender killed
        between the two finds it watched, with no target of its own, and closes it)."""
        job_targets.drop(self.state_dir, dispatch)
        book.close(self.ledger, dispatch)
        self._resolved.pop(dispatch, None)

    @property
    def state_dir(self) -> str:
        return str(self.ledger.state_dir)

    def _pull(self, dispatch: str, t: Target, due: PullDue, res: Resolved, now: float) -> None:
        if now < due.ts + res.linger_s:
            return
        r = self.ledger.dispatch(due.dispatch)
        if r is None or r.pulled_at is not None or r.stored_at is not None or r.state is not DispatchState.ENDED:
            book.advance(self.ledger, dispatch, t.key, pull_done=due.ts)  # pulled (or run again) meanwhile: moot
            return
        self._send(dispatch, t, unpulled(due, res.linger_s), due.ts + res.linger_s, res, pull_done=due.ts)

    def _free(self, key: str) -> bool:
        with self._lock:
            busy = key in self._inflight and self._inflight[key].is_alive()
            return not busy and self._retry_at.get(key, 0.0) <= time.monotonic()

    def _send(self, owner: str, t: Target, n: Notice, since: float, res: Resolved, *, offset: int | None = None,
              pull_done: float | None = None) -> None:  # fmt: skip
        """Send ``n`` to ``t`` in a thread; once ``t`` took it (or ``retry_for`` has passed since
        ``since``), move ``t``'s cursor of the watched dispatch ``owner`` (a copy's notices are
        its parent's)."""
        dispatch = n.dispatch

        def work() -> None:
            err = _send_one(t, n)
            with self._lock:
                if err is None:
                    self._failures.pop(t.key, None)
                    self._retry_at.pop(t.key, None)
                else:
                    k = self._failures[t.key] = self._failures.get(t.key, 0) + 1
                    wait = BACKOFF_S[min(k, len(BACKOFF_S)) - 1]
                    self._retry_at[t.key] = time.monotonic() + wait
            if err is None or time.time() - since > res.retry_for_s:
                book.advance(self.ledger, owner, t.key, offset=offset, pull_done=pull_done)
                if err is not None:  # the next notice is tried afresh
                    with self._lock:
                        self._failures.pop(t.key, None)
                        self._retry_at.pop(t.key, None)
                    self.say(f"gave up telling {t.name} '{n.event}' of {dispatch} ({err}) after retry_for")
            else:
                self.say(f"{err}; '{n.event}' of {dispatch} tried again in {wait:.0f} s")

        th = threading.Thread(target=work, name=f"notify-send-{t.key}", daemon=True)
        with self._lock:
            self._inflight[t.key] = th
        th.start()

    # --- what a dispatch's notices are made of -------------------------------------------------

    def _placed(self, dispatch: str) -> list[tuple[int, int, dict[str, Any]]]:
        """The dispatch's event log, read again only when it grew."""
        path = log_path(self.ledger.state_dir, dispatch)
        try:
            size = os.path.getsize(path)
        except OSError:
            return []
        cached = self._logs.get(dispatch)
        if cached is None or cached[0] != size:
            cached = (size, read_placed(path))
            self._logs[dispatch] = cached
        return cached[1]

    def _ts(self, dispatch: str, n: Notice) -> float:
        for _start, end, rec in self._logs.get(dispatch, (0, []))[1]:
            if end == n.end:
                return float(rec.get("ts") or time.time())
        return time.time()

    def _retry_for(self) -> float:
        notify = getattr(self.settings, "notify", None)
        return float(notify.retry_for_s) if notify is not None else 3600.0

    def _kept(self, dispatch: str) -> Settings | None:
        """The settings ``dispatch`` was handed over with (this supervisor's when none were kept)."""
        from eps.shell.config.errors import ConfigError
        from eps.shell.run.ownership import read_settings

        try:
            kept = read_settings(self.ledger.state_dir, dispatch, self.env)
        except (ConfigError, OSError, ValueError, KeyError):
            return None
        return self.settings if kept is None else kept[0]

    def resolve(self, dispatch: str) -> Resolved | None:
        """The dispatch's targets (its config file's ``[notify] urls`` now) and the events it
        sends (its kept settings); ``None`` while that cannot be read.  Kept for :data:`RESOLVE_S`."""
        at, res = self._resolved.get(dispatch, (0.0, None))
        if time.monotonic() - at < RESOLVE_S and dispatch in self._resolved:
            return res
        res = self._resolve(dispatch)
        self._resolved[dispatch] = (time.monotonic(), res)
        return res

    def _resolve(self, dispatch: str) -> Resolved | None:
        from eps.shell.config.errors import ConfigError
        from eps.shell.config.load import load_settings
        from eps.shell.run.ownership import read_settings

        try:
            kept = read_settings(self.ledger.state_dir, dispatch, self.env)
            own, env = (self.settings, self.env) if kept is None else kept
            live = load_settings(env)
        except (ConfigError, OSError, ValueError, KeyError) as exc:
            self.say(f"dispatch {dispatch}: its config cannot be read now ({type(exc).__name__}); tried again")
            return None
        from eps.shell.config.notify import NotifySettings

        config = tuple(live.notify.urls) if own.notify is not None and live.notify is not None else ()
        mine = tuple(u for u in job_targets.kept(self.state_dir, dispatch) if u not in config)
        if not config and not mine:
            return Resolved((), frozenset(), 0.0, 0.0)
        sent, told = own.notify or NotifySettings(), live.notify or NotifySettings()
        targets = self._targets(config, told.timeout_s) + self._targets(mine, told.timeout_s, job_targets.KEY_PREFIX)
        return Resolved(targets, sent.wanted(), float(own.jobs.linger_s), float(told.retry_for_s))

    def _targets(self, urls: tuple[str, ...], timeout_s: int, prefix: str = "") -> tuple[Target, ...]:
        """``urls`` parsed (once), each keyed ``prefix`` + its name; one that is bad is said, left out."""
        key = (urls, timeout_s, prefix)
        if key not in self._parsed:
            found, bad = parse_each(urls, timeout_s) if urls else ([], [])
            for line in bad:
                self.say(line)
            self._parsed[key] = tuple(t._replace(key=prefix + t.key) for t in found)
        return self._parsed[key]


def _left(row: DispatchRow) -> bool:
    """No supervisor works on ``row`` now: settled, or interrupted and waiting for ``eps execute
    --resume`` (whose supervisor watches it again).  Its notices owed so far are all it owes."""
    from eps.shell.run.ownership import SUPERVISED, will_relaunch

    return row.state not in SUPERVISED and not will_relaunch(row)


def _where(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "?" if tb is None else f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"


def _send_one(t: Target, n: Notice) -> str | None:
    from eps.shell.notify.targets import send

    return send(t, n.title, n.body)
