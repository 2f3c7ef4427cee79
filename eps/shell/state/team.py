"""A team on one database (``[state] url``): the hosts that share it, and which host's
supervisor acts on each dispatch, by lease (:mod:`eps.core.lease`; docs/design/team.md).

- :func:`register`: this host's row in ``hosts`` (name, user, eps's public key here, last seen).
- :class:`Team`: a supervisor's leases.  :meth:`Team.take` owns a dispatch whose lease is
  this host's or has run out; a thread renews every held lease each quarter period
  (:meth:`Team.renew`); :meth:`Team.check`, the ledger's guard, refuses every write of a
  dispatch this host may no longer act on (:class:`LeaseLost`).  An attempt is written
  before its provider call, so a host whose lease was not renewed in time makes no call for
  that dispatch: it stops acting before the lease ends, and only then may another host take it.
- :func:`owners`: the owner host, user and lease end of rows (``unsettled_roots``, the reconcile),
  and who started each (:meth:`Owner.starter`: kept from the first :func:`share`, never taken over).
- :func:`share`: what a takeover needs, kept with the dispatch (its inputs, no secret).
- :func:`with_holdings`: a walk's snapshot with what the user's live SLURM jobs hold under
  each capped QoS, from every host's rows (:mod:`eps.core.holdings` counts; both backends).

Times of leases are the database's (``clock_timestamp()``): hosts' clocks may differ, the
database's is one.  A host's own deadline is its monotonic clock.  Nothing here runs on
SQLite (one host), but :func:`with_holdings`: its ledger is never shared.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from eps.core.holdings import LiveJob, capped_queues, holdings
from eps.core.lease import LeaseState, LeaseTerms, lease_state
from eps.core.model import CapacitySnapshot, Policy, QosGrants
from eps.shell.state.db import Store
from eps.shell.state.errors import LedgerError
from eps.shell.state.ledger import Ledger


class LeaseLost(LedgerError):
    """This host may no longer act on a dispatch: its lease was not renewed in time, or
    another host holds it now."""


class Owner(NamedTuple):
    host: str | None
    user: str | None
    until: float | None  # when its lease ends (the database's clock); None: nobody holds it
    cancelled_by: str | None = None  # who cancelled it (JSON: user, host), when one did
    started_host: str | None = None  # the host that started it (never changed by a takeover)
    started_user: str | None = None  # and its user; both None: recorded before migration 11

    def starter(self) -> tuple[str | None, str | None]:
        """Who started the dispatch (user, host); a row recorded before eps kept that: its owner."""
        if self.started_host is None:
            return self.user, self.host
        return self.started_user, self.started_host


def user_name(env: Mapping[str, str] | None = None) -> str:
    """This user's name: as ``getpass.getuser`` finds it (``LOGNAME``, ``USER``, ``LNAME``,
    ``USERNAME``, then the password database), in ``env`` when given (a front door's)."""
    import getpass

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if env is not None and (found := env.get(name)):
            return found
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        return str(os.getuid())


def db_now(db: Store) -> float:
    """The database's clock now (seconds since the epoch)."""
    return float(db.execute("SELECT extract(epoch from clock_timestamp())").fetchone()[0])


def now_of(ledger: Ledger) -> float:
    rows = ledger.rows("SELECT extract(epoch from clock_timestamp())")
    return float(rows[0][0])


def register(ledger: Ledger, key: str | None, user: str | None = None) -> None:
    """This host's row in ``hosts``: its name, user, eps's public key here (``key``: ``None``
    when none is made yet; a key registered before stays), seen now."""
    if ledger.host is None:
        return
    with ledger.transaction() as db:
        db.execute(
            "INSERT INTO hosts (name, user_name, public_key, seen_at) VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
            " SET user_name=excluded.user_name, public_key=coalesce(excluded.public_key, hosts.public_key),"
            " seen_at=excluded.seen_at",
            (ledger.host, user or user_name(), key, db_now(db)),
        )


def team_keys(ledger: Ledger) -> tuple[str, ...]:
    """The public keys the team's other hosts registered (the machines eps makes let them in)."""
    if ledger.host is None:
        return ()
    rows = ledger.rows("SELECT public_key FROM hosts WHERE name != ? AND public_key IS NOT NULL ORDER BY name",
                       (ledger.host,))  # fmt: skip
    return tuple(dict.fromkeys(str(r[0]) for r in rows))


def owners(ledger: Ledger, ids: Iterable[str]) -> dict[str, Owner]:
    """The owner of each of ``ids`` (those the ledger has)."""
    return _owners(ledger, ids, clock=False)[0]


def owners_now(ledger: Ledger, ids: Iterable[str]) -> tuple[dict[str, Owner], float]:
    """:func:`owners`, and the database's clock (:func:`now_of`) read by the same statement
    (a shared ledger's; a second statement only when none of ``ids`` is there)."""
    found, now = _owners(ledger, ids, clock=True)
    return found, now_of(ledger) if now is None else now


def _owners(ledger: Ledger, ids: Iterable[str], *, clock: bool) -> tuple[dict[str, Owner], float | None]:
    wanted = sorted(set(ids))
    found: dict[str, Owner] = {}
    now: float | None = None
    columns = "id, owner_host, owner_user, lease_until, cancelled_by, started_host, started_user"
    columns += ", extract(epoch from clock_timestamp())" if clock else ""
    for i in range(0, len(wanted), 500):
        part = wanted[i : i + 500]
        marks = ",".join("?" * len(part))
        sql = f"SELECT {columns} FROM dispatches WHERE id IN ({marks})"  # noqa: S608
        for r in ledger.rows(sql, tuple(part)):
            found[str(r[0])] = Owner(r[1], r[2], r[3], r[4], r[5], r[6])
            now = float(r[7]) if clock and now is None else now
    return found, now


def others_of(ledger: Ledger, dispatches: Iterable[str] | None, env: Mapping[str, str]) -> list[tuple[str, Owner]]:
    """The roots of ``dispatches`` (``None``: every unsettled root) another user started, each
    with its owner (``env``'s user is this one); one the ledger lacks is not among them."""
    from eps.core.states import SETTLED_DISPATCH_STATES, DispatchState

    if dispatches is None:
        unsettled = tuple(s for s in DispatchState if s not in SETTLED_DISPATCH_STATES)
        roots = [r.id for r in ledger.dispatches(states=unsettled) if r.parent is None]
    else:
        rows = [ledger.dispatch(d) for d in dispatches]
        roots = [r.parent or r.id for r in rows if r is not None]
    me, found = user_name(env), owners(ledger, roots)
    theirs = [(d, found.get(d)) for d in dict.fromkeys(roots)]
    return [(d, o) for d, o in theirs if o is not None and o.starter()[0] not in (None, me)]


def record_cancel(ledger: Ledger, ids: Iterable[str], user: str | None = None) -> None:
    """Who cancelled ``ids`` (this host's user, or ``user``) and from which host."""
    import json

    wanted = sorted(set(ids))
    if ledger.host is None or not wanted:
        return
    by = json.dumps({"user": user or user_name(), "host": ledger.host})
    with ledger.transaction() as db:
        for i in range(0, len(wanted), 500):
            part = wanted[i : i + 500]
            db.execute(f"UPDATE dispatches SET cancelled_by=? WHERE id IN ({','.join('?' * len(part))})",  # noqa: S608
                       (by, *part))  # fmt: skip


def lease_of(ledger: Ledger, owner: Owner, now: float) -> LeaseState:
    return lease_state(owner.host, owner.until, ledger.host or "", now)


def held_elsewhere(ledger: Ledger, dispatch: str) -> str | None:
    """The host whose running lease holds ``dispatch`` (``None``: none, or this one; always
    ``None`` on a ledger no other host shares)."""
    if not ledger.shared:
        return None
    # its lease and the database's clock in one statement (a status settles each active dispatch)
    sql = "SELECT owner_host, lease_until, extract(epoch from clock_timestamp()) FROM dispatches WHERE id = ?"
    found = ledger.rows(sql, (dispatch,))
    if not found:
        return None
    r = found[0]
    host, until = (None if r[0] is None else str(r[0])), (None if r[1] is None else float(r[1]))
    return host if lease_state(host, until, ledger.host or "", float(r[2])) is LeaseState.HELD else None


def share(ledger: Ledger, dispatch: str, doc: str, lease_s: float, user: str | None = None) -> None:
    """Keep what a takeover walks ``dispatch`` with (``doc``: its inputs, JSON, no secret), and
    hold it for this host for one lease (its supervisor renews it; if none ever does, any
    host's takes it over once the lease has run out).  The first share records who started
    it (``started_host``, ``started_user``); nothing changes that later, a takeover neither."""
    who = user or user_name()
    with ledger.transaction() as db:
        db.execute(
            "UPDATE dispatches SET inputs=?, owner_host=?, owner_user=?, lease_until=?,"
            " started_host=coalesce(started_host, ?), started_user=coalesce(started_user, ?) WHERE id=?",
            (doc, ledger.host, who, db_now(db) + lease_s, ledger.host, who, dispatch),
        )


def inputs_of(ledger: Ledger, dispatch: str) -> str | None:
    rows = ledger.rows("SELECT inputs FROM dispatches WHERE id=?", (dispatch,))
    return None if not rows or rows[0][0] is None else str(rows[0][0])


#: The live SLURM attempts of every host (copies carry their root's starter), with their intent.
LIVE_JOBS = (
    "SELECT a.lane, a.qos, a.state, d.intent, coalesce(d.owner_user, p.owner_user) FROM attempts a"
    " JOIN dispatches d ON d.id = a.dispatch LEFT JOIN dispatches p ON p.id = d.parent"
    " WHERE a.state IN (?, ?) AND a.kind = ?"
)


def live_jobs(ledger: Ledger, policy: Policy) -> list[LiveJob]:
    """The ledger's live SLURM jobs (parked or running), every host's."""
    from eps.core.model import LaneKind
    from eps.core.states import AttemptState

    rows = ledger.rows(LIVE_JOBS, (AttemptState.PENDING.value, AttemptState.RUNNING.value, LaneKind.SLURM.value))
    jobs: list[LiveJob] = []
    for r in rows:
        intent = policy.intent(str(r[3]))
        running = str(r[2]) == AttemptState.RUNNING.value
        jobs.append(LiveJob(str(r[0]), None if r[1] is None else str(r[1]), intent.gpus if intent else 0, running,
                            None if r[4] is None else str(r[4])))  # fmt: skip
    return jobs


def with_holdings(snapshot: CapacitySnapshot, ledger: Ledger, policy: Policy, grants: QosGrants,
                  user: str | None = None) -> CapacitySnapshot:  # fmt: skip
    """``snapshot`` with the GPUs left under each capped QoS after what ``user``'s (this
    user's) live jobs hold there, counted over every host's rows of the ledger."""
    from eps.core.model import evolve

    facts = capped_queues(holdings(live_jobs(ledger, policy), user or user_name()), grants)
    return evolve(snapshot, queues=(*snapshot.queues, *facts)) if facts else snapshot


class Team:
    """One supervisor's leases on a shared ledger (the ledger's guard while it lives)."""

    def __init__(self, ledger: Ledger, terms: LeaseTerms, *, user: str | None = None, key: str | None = None,
                 clock: Callable[[], float] = time.monotonic, renew_on: Ledger | None = None) -> None:  # fmt: skip
        if ledger.host is None:
            raise ValueError("a team needs a shared ledger")
        self.ledger = ledger
        #: The renewals' own connection (closed by :meth:`stop`): they never wait behind the
        #: dispatch threads' queries on the supervisor's one connection (``ledger``'s lock).
        self.renew_on = renew_on or ledger
        self.host = ledger.host
        self.user = user or user_name()
        self.key = key  # eps's public key on this host (registered with its name)
        self.terms = terms
        self.clock = clock
        self._held: dict[str, float] = {}  # root -> start (monotonic) of its last renewal the database confirmed
        self._root: dict[str, str] = {}  # a root's id, and its copies', -> the root
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # a renewal and a let-go of one lease never cross
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- taking, renewing, letting go ---------------------------------------------------------

    def take(self, root: str, members: Iterable[str] = ()) -> bool:
        """Hold ``root`` (and act on its copies ``members``) if its lease is this host's or has
        run out; ``False`` when another host's lease on it runs."""
        began = self.clock()
        with self.ledger.transaction() as db:
            now = db_now(db)
            row = db.execute("SELECT owner_host, lease_until FROM dispatches WHERE id=?", (root,)).fetchone()
            if row is None or lease_state(row[0], row[1], self.host, now) is LeaseState.HELD:
                return False
            db.execute(
                "UPDATE dispatches SET owner_host=?, owner_user=?, lease_until=? WHERE id=?",
                (self.host, self.user, now + self.terms.period_s, root),
            )
        with self._lock:
            self._held[root] = began
            for d in (root, *members):
                self._root[d] = root
        return True

    def renew(self) -> list[str]:
        """Renew every held lease, in one transaction (one per 500 leases: a host holding many
        dispatches costs the shared database one short write each round, not one each); the
        roots another host has taken meanwhile (let go here).  A database that cannot be
        reached renews nothing (its leases run on: their dispatches stop being acted on when
        :meth:`check` says so; nothing is released or cancelled)."""
        lost: list[str] = []
        with self._writing:  # a let-go waits for this round, and is not undone by it
            with self._lock:
                roots = sorted(self._held)
            began = self.clock()
            renewed: list[str] = []
            with self.renew_on.transaction() as db:
                now = db_now(db)
                for i in range(0, len(roots), 500):
                    part = roots[i : i + 500]
                    marks = ",".join("?" * len(part))
                    owned = {str(r[0]): r[1] for r in db.execute(
                        f"SELECT id, owner_host FROM dispatches WHERE id IN ({marks})", tuple(part)).fetchall()}  # noqa: S608  # fmt: skip
                    mine = [r for r in part if owned.get(r) == self.host]
                    lost += [r for r in part if owned.get(r) != self.host]
                    if mine:
                        marks = ",".join("?" * len(mine))
                        db.execute(f"UPDATE dispatches SET lease_until=? WHERE id IN ({marks}) AND owner_host=?",  # noqa: S608
                                   (now + self.terms.period_s, *mine, self.host))  # fmt: skip
                    renewed += mine
            with self._lock:
                for root in renewed:
                    if root in self._held:
                        self._held[root] = began
        for root in lost:
            self._forget(root)
        return lost

    def drop(self, root: str) -> None:
        """Let ``root`` go: its lease ends now (any host may take it; this one too)."""
        with self._writing:
            if not self._forget(root):
                return
            with contextlib.suppress(LedgerError):  # the database out of reach: the lease runs out by itself
                self.ledger.write("UPDATE dispatches SET lease_until=NULL WHERE id=? AND owner_host=?",
                                  (root, self.host))  # fmt: skip

    def _forget(self, root: str) -> bool:
        with self._lock:
            had = self._held.pop(root, None) is not None
            for d in [d for d, r in self._root.items() if r == root]:
                del self._root[d]
        return had

    # --- may this host act? -------------------------------------------------------------------

    def acting(self, dispatch: str) -> bool:
        """This host may act on ``dispatch`` now: it holds its root's lease, renewed recently
        enough (:meth:`eps.core.lease.LeaseTerms.may_act`)."""
        with self._lock:
            root = self._root.get(dispatch)
            began = None if root is None else self._held.get(root)
        return began is not None and self.terms.may_act(began, self.clock())

    def check(self, dispatch: str) -> None:
        """The ledger's guard: :class:`LeaseLost` when ``dispatch`` is one of this supervisor's
        and it may no longer act on it.  Others' writes (a command's) pass."""
        with self._lock:
            known = dispatch in self._root
        if known and not self.acting(dispatch):
            raise LeaseLost(f"dispatch {dispatch}: host {self.host} may no longer act on it (its lease was not renewed "
                            "in time); it is left as it is for the host that takes it over")  # fmt: skip

    # --- the renewer ----------------------------------------------------------------------

    def start(self) -> None:
        """Renew the held leases (and this host's last seen) every quarter period, in a thread."""
        self._thread = threading.Thread(target=self._renewing, name="leases", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.renew_on is not self.ledger and (self._thread is None or not self._thread.is_alive()):
            self.renew_on.close()

    def _renewing(self) -> None:
        while not self._stop.wait(self.terms.renew_every_s):
            try:
                self.renew()
                register(self.renew_on, self.key, self.user)
            except LedgerError as exc:  # out of reach: tried again next round; the leases run on meanwhile
                sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} leases not renewed: {exc}\n")
                sys.stderr.flush()
