"""Boot loops end to end, against the local GCP server: two dispatches whose spot VMs are
taken back seconds after they came up make the third skip that rung (``boot_loop``), and
``eps plan`` says so with the deaths; ``--pin gcp`` still tries it."""

from __future__ import annotations

import json
from typing import Any

LOOPED = "gcp/e2-standard-4/us-central1-a/spot"
JOB = ("cpu-small", "--duration", "30m")


def _dies_after_boot(eps: Any, gcp: Any) -> None:
    """One dispatch whose spot VM on LOOPED is preempted right after it came up."""
    rc, events = eps.events(*JOB, "--", "sleep", "300")
    assert rc == 0 and events[-1]["handle"]["rung"] == LOOPED, events
    [(zone, name)] = gcp.instances
    gcp.preempt(zone, name)  # the VM vanishes
    [row] = eps.status(events[-1]["dispatch"])
    assert row["state"] == "preempted" and row["attempts"][-1]["outcome"] == "preempted"


def _plan(eps: Any, *extra: str) -> dict[str, Any]:
    rc, out, err = eps("plan", *JOB, *extra, "--json")
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_a_rung_whose_vms_die_after_boot_twice_is_skipped_by_the_third_dispatch(eps: Any, gcp: Any) -> None:
    _dies_after_boot(eps, gcp)
    assert _plan(eps)["rungs"][0]["key"] == LOOPED  # one early death is no loop
    _dies_after_boot(eps, gcp)

    doc = _plan(eps)
    [skip] = [s for s in doc["skipped"] if s["reason"]["code"] == "boot_loop"]
    assert skip["target"] == LOOPED and skip["reason"]["text"].startswith("2 machines died within 10m of coming up")
    assert LOOPED not in [r["key"] for r in doc["rungs"]]
    assert _plan(eps, "--pin", "gcp")["rungs"][0]["key"] == LOOPED  # a pin is exempt

    rc, events = eps.events(*JOB, "--", "sleep", "300")
    assert rc == 0, events
    assert events[-1]["event"] == "started"
    assert events[-1]["handle"]["rung"] == "gcp/e2-standard-4/us-central1-b/spot"
    assert all(e.get("rung") != LOOPED for e in events if e["event"] == "attempt")  # no attempt burnt on it
    rc, _, err = eps("cancel", events[-1]["dispatch"])
    assert rc == 0, err
    assert gcp.instances == {}
