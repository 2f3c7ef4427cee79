"""A job's silent spells, as eps hears of them: the job's own wrapper watches it where it
runs (:mod:`eps.core.stall`) and leaves the ``stalled`` record in its dispatch root while a
spell lasts; whoever reads the job's record (the supervisor's follow loop, ``eps wait``
inline) turns each spell into one ``stalled`` event, and its end into one ``stall_over``.

Once per spell, even across supervisors: a spell is keyed by its start (the record's epoch
second), and the dispatch's event log (the history) is read before a second event is written.
``eps status`` reads the same log: a running job whose last spell has no ``stall_over`` is
shown stalled, with since when (:func:`stalled_since`).
"""

from __future__ import annotations

import time

from eps.core.durations import human
from eps.core.events import Event
from eps.shell.state.events import Events, log_path, read_from
from eps.shell.state.ledger import DispatchRow, Ledger


class StallNews:
    """Emits ``stalled`` / ``stall_over`` for the spells the job records show."""

    def __init__(self, ledger: Ledger, events: Events) -> None:
        self.ledger, self.events = ledger, events
        self.known: dict[str, int | None] = {}  # dispatch -> the spell it last said (None: over)

    def saw(self, row: DispatchRow, since: int | None) -> None:
        """The job's record says it is silent ``since`` (epoch s), or not (``None``)."""
        d = row.id
        if d not in self.known:
            self.known[d] = last_spell(self.ledger.state_dir, row.parent or d, d)
        said = self.known[d]
        if since is not None and since != said:
            self.known[d] = since
            silent = max(0, round(time.time() - since))
            on = row.job.on_stall or "notify"
            then = "its wrapper stops it now (on_stall = stop)" if on == "stop" else "it keeps running"
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
            lane = row.handle.lane if row.handle is not None else None
            message = f"stalled: nothing from the job for {human(silent)} (since {when}); {then}"
            self.events.emit(
                Event.STALLED, dispatch=d, since=since, silent_s=silent, on_stall=on, lane=lane, message=message
            )
        elif since is None and said is not None:
            self.known[d] = None
            self.events.emit(Event.STALL_OVER, dispatch=d, since=said, message="the job is busy again")


def last_spell(state_dir: str, log_owner: str, dispatch: str) -> int | None:
    """The start of ``dispatch``'s last silent spell not yet over, from its event log (kept by
    ``log_owner``: a copy's events are its parent's); ``None`` when there is none."""
    events, _ = read_from(log_path(state_dir, log_owner), 0)
    spell: int | None = None
    for e in events:
        if e.get("dispatch") != dispatch:
            continue
        if e.get("event") == "stalled" and isinstance(e.get("since"), int):
            spell = e["since"]
        elif e.get("event") in ("stall_over", "relaunched", "ended", "interrupted"):
            spell = None
    return spell


def stalled_since(state_dir: str, row: DispatchRow) -> int | None:
    """Since when a running dispatch has been stalled, as its events say (``None``: it is not)."""
    return last_spell(state_dir, row.parent or row.id, row.id)


def stall_fields(state_dir: str, row: DispatchRow) -> dict[str, object]:
    """``eps status``'s ``stalled_since`` of a row (and its result ``stalled`` while it lasts)."""
    from eps.core.states import DispatchState

    since = stalled_since(state_dir, row) if row.state is DispatchState.STARTED else None
    return {"stalled_since": since} if since is None else {"result": "stalled", "stalled_since": since}
