"""A pipeline's own record in the ledger (docs/design/pipelines.md): which child row is which
phase, what each needs, and which dispatch ``--after`` waits for, in the ``pipeline_phases``
table (migration 12), the same on SQLite and PostgreSQL.  It is written in the transaction
that records the pipeline's rows (:meth:`eps.shell.state.ledger.Ledger.new_pipeline`), so
any host sharing the ledger reads the same order, and ``eps status`` reads every listed
pipeline's phases in one query (:func:`read_many`).

An eps before this kept the record in a file, ``<state>/pipelines/D.json``, on the host
that executed D.  A SQLite ledger's files are moved into the table when it is opened
(:func:`import_files`: each file read, its phases inserted unless D has some already, then
the file removed), chosen over reading the file as a fallback so that there is one record,
one way to read it and one query for a listing; an older eps cannot open the ledger once it
is at version 12 (a newer schema is refused), so nothing reads the files after."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from eps.core.records import NamedTuple
from eps.shell.state.db import Row, Store

__all__ = ["PhaseRecord", "import_files", "insert", "read", "read_many"]


class Ledger(Protocol):
    """What is read and written here of :class:`eps.shell.state.ledger.Ledger`."""

    state_dir: str

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]: ...
    def transaction(self) -> contextlib.AbstractContextManager[Store]: ...


class PhaseRecord(NamedTuple):
    """A phase of a recorded pipeline: its ``name``, its child row ``id``, what it ``needs``;
    ``after``: not a phase of it but a dispatch it waits for (``eps execute --after D``), never
    started here, its row its own."""

    name: str
    id: str
    needs: tuple[str, ...]
    after: bool = False


_COLUMNS = "dispatch, seq, name, child, needs, waits"


def insert(db: Store, dispatch: str, phases: Sequence[PhaseRecord]) -> None:
    """Record ``phases`` as pipeline ``dispatch``'s, inside the caller's write transaction."""
    for seq, p in enumerate(phases, start=1):
        db.execute(f"INSERT INTO pipeline_phases ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",  # noqa: S608
                   (dispatch, seq, p.name, p.id, json.dumps(list(p.needs)), int(p.after)))  # fmt: skip


def _record(r: Row) -> PhaseRecord:
    return PhaseRecord(str(r["name"]), str(r["child"]), tuple(str(n) for n in json.loads(r["needs"])),
                       bool(r["waits"]))  # fmt: skip


def read(ledger: Ledger, dispatch: str) -> tuple[PhaseRecord, ...] | None:
    """The phases of pipeline ``dispatch`` in its file's order; ``None`` when it is no pipeline."""
    rows = ledger.rows(f"SELECT {_COLUMNS} FROM pipeline_phases WHERE dispatch=? ORDER BY seq", (dispatch,))  # noqa: S608
    return tuple(_record(r) for r in rows) or None


def read_many(ledger: Ledger, dispatches: Iterable[str]) -> dict[str, tuple[PhaseRecord, ...]]:
    """The phases of each pipeline among ``dispatches``, in one query (per 500); the others are absent."""
    wanted = list(dict.fromkeys(dispatches))
    found: dict[str, list[PhaseRecord]] = {}
    for i in range(0, len(wanted), 500):
        part = wanted[i : i + 500]
        sql = (f"SELECT {_COLUMNS} FROM pipeline_phases WHERE dispatch IN ({','.join('?' * len(part))})"  # noqa: S608
               " ORDER BY dispatch, seq")  # fmt: skip
        for r in ledger.rows(sql, tuple(part)):
            found.setdefault(str(r["dispatch"]), []).append(_record(r))
    return {d: tuple(p) for d, p in found.items()}


def import_files(ledger: Ledger) -> None:
    """Move an older eps's ``<state>/pipelines/D.json`` records into the table (a SQLite
    ledger; see the module's docstring).  A file that cannot be read is left as it is."""
    where = os.path.join(ledger.state_dir, "pipelines")
    try:
        names = [n for n in os.listdir(where) if n.endswith(".json")]
    except OSError:
        return
    for name in names:
        path = os.path.join(where, name)
        try:
            with open(path) as fh:
                doc: dict[str, Any] = json.load(fh)
            phases = [PhaseRecord(str(p["name"]), str(p["id"]), tuple(str(n) for n in p["needs"]),
                                  bool(p.get("after"))) for p in doc["phases"]]  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            continue
        dispatch = name.removesuffix(".json")
        with ledger.transaction() as db:
            if db.execute("SELECT 1 FROM pipeline_phases WHERE dispatch=?", (dispatch,)).fetchone() is None:
                insert(db, dispatch, phases)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
