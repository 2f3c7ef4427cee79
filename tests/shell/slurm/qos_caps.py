"""The QoS-cap helper of the real-SLURM tests, shared by tests/shell/slurm and
tests/shell/faults (whose conftest loads this file by its path): a tier's per-user GPU cap
lowered for one test, waited for until slurmctld enforces it, and the SPEC value put back."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from slurm_support import SPEC_GPU_CAPS, run, wait_until


def qos_cap_seen(qos: str, tres: str) -> bool:
    # slurmctld's own view of the QoS (sacctmgr changes reach it asynchronously).
    # Per-user caps show only under "User Limits", once the user has a record in the QoS;
    # without one there is nothing to compare (sacctmgr's answer is all there is).
    text = run("scontrol", "show", "assoc_mgr", "flags=qos", f"qos={qos}")
    if "User Limits" not in text:
        return True
    users = text.split("User Limits", 1)[1]
    if "MaxTRESPU=" not in users:
        return True
    want = tres.split("=", 1)[1]
    return f"gres/gpu={'N' if want == '-1' else want}(" in users


def set_cap(qos: str, tres: str) -> None:
    run("sacctmgr", "-i", "modify", "qos", "where", f"name={qos}", "set", f"MaxTRESPerUser={tres}")


@pytest.fixture
def gpu_cap() -> Iterator[Callable[[str, int], None]]:
    """``gpu_cap("high-eur", 2)`` lowers a tier's per-user GPU cap until the test ends,
    then puts back the SPEC value.  Waits until slurmctld enforces each change."""
    changed: list[str] = []

    def lower(qos: str, gpus: int) -> None:
        changed.append(qos)
        set_cap(qos, f"gres/gpu={gpus}")
        wait_until(lambda: qos_cap_seen(qos, f"gres/gpu={gpus}"), 10, f"{qos} cap {gpus} in slurmctld")

    yield lower
    for qos in changed:
        set_cap(qos, SPEC_GPU_CAPS[qos])
    for qos in changed:
        wait_until(lambda q=qos: qos_cap_seen(q, SPEC_GPU_CAPS[q]), 10, f"{qos} cap restored in slurmctld")
