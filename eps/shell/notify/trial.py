"""``eps notify test``: one test message to each ``[notify]`` target, sent side by side, each
bounded by ``[notify] timeout``; the document says which answered (``eps schema notify``)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from eps.core.model import JobError
from eps.shell.notify.notices import test_notice
from eps.shell.notify.targets import Target, parse, send

if TYPE_CHECKING:
    from eps.shell.config.settings import Settings

#: Beyond its socket timeouts, how long a send may take before it counts as unanswered.
GRACE_S = 5.0


def notify_test(settings: Settings) -> dict[str, Any]:
    """Send the test message; the ``targets`` (each ``target`` by its safe name, ``answered``,
    ``error``, ``seconds``), and how many ``answered`` of ``total``.  No target configured:
    :class:`JobError` ``usage``; a URL apprise cannot read: :class:`ConfigError` (exit 2)."""
    notify = settings.notify
    source = settings.config_path or "config"
    if notify is None or not notify.urls:
        raise JobError("usage", f"eps notify test: no [notify] urls in {source}", None)
    targets = parse(notify.urls, source, timeout_s=notify.timeout_s)
    results: dict[str, tuple[str | None, float]] = {}

    def one(t: Target) -> None:
        start = time.monotonic()
        n = test_notice(t.name)
        err = send(t, n.title, n.body)
        results[t.key] = (err, time.monotonic() - start)

    threads = [threading.Thread(target=one, args=(t,), daemon=True) for t in targets]
    for th in threads:
        th.start()
    end = time.monotonic() + 2 * notify.timeout_s + GRACE_S
    for th in threads:
        th.join(max(0.0, end - time.monotonic()))
    rows = []
    for t in targets:
        err, took = results.get(t.key, (f"{t.name}: no answer within {2 * notify.timeout_s + GRACE_S:.0f} s", None))
        rows.append({"target": t.name, "answered": err is None, "error": err,
                     "seconds": None if took is None else round(took, 3)})  # fmt: skip
    return {"targets": rows, "answered": sum(1 for r in rows if r["answered"]), "total": len(rows)}


def text(doc: dict[str, Any]) -> str:
    """The document for a person: one line per target, then the count."""
    lines = []
    for r in doc["targets"]:
        said = f"answered ({r['seconds']:.2f} s)" if r["answered"] else f"did not answer: {r['error']}"
        lines.append(f"{r['target']}  {said}")
    lines.append(f"{doc['answered']} of {doc['total']} target(s) answered")
    return "\n".join(lines) + "\n"
