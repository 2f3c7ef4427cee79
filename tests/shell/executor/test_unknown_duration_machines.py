"""A job without a duration on a GCP VM and a RunPod pod (issue 25), through ``eps``
against the test servers, the job running for real on the test sshd: it lands on
on-demand (unknown is long, P11) and runs up to ``[jobs] max_time_limit``, here 20 s,
not 1.5 x a made-up hour."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

LIMIT_S = 20


def _limited(eps: Any) -> None:
    text = eps.config.read_text()
    assert "[jobs]\n" in text
    eps.config.write_text(text.replace("[jobs]\n", f'[jobs]\nmax_time_limit = "{LIMIT_S}s"\n', 1))


def _ran_s(tmp_path: Path, dispatch: str, lane: str = "gcp") -> int:
    """How long the job ran, from its wrapper's own record on the machine."""
    root = tmp_path / f"{lane}-runs" / dispatch / "0"
    return int((root / "ended-at").read_text()) - int((root / "started-at").read_text())


def test_a_job_without_a_duration_shorter_than_the_maximum_succeeds(eps: Any, tmp_path: Path) -> None:
    _limited(eps)
    rc, out, err = eps("execute", "cpu-small", "--wait", "--", "sleep", "15")
    assert rc == 0, (out, err)
    [row] = eps.status()
    assert row["handle"]["lane"] == "gcp" and row["handle"]["rung"].endswith("/on-demand"), row
    assert row["state"] == "ended" and row["message"].startswith("succeeded"), row
    assert 14 <= _ran_s(tmp_path, row["dispatch"]) < LIMIT_S


@pytest.mark.parametrize("lane", ["gcp", "runpod"])
def test_a_job_without_a_duration_longer_than_the_maximum_times_out_at_it(eps: Any, tmp_path: Path, lane: str) -> None:
    """On a GCP VM (unpinned: on-demand first) and on a RunPod pod (pinned), the same maximum."""
    _limited(eps)
    pin = ("--pin", "runpod") if lane == "runpod" else ()
    began = time.monotonic()
    rc, out, err = eps("execute", "cpu-small", *pin, "--wait", "--", "sleep", "40")
    took = time.monotonic() - began
    assert rc == 124, (out, err)  # timed out
    [row] = eps.status()
    assert row["handle"]["lane"] == lane and row["handle"]["rung"].endswith("/on-demand"), row
    assert row["message"].startswith("timed out"), row
    assert LIMIT_S - 1 <= _ran_s(tmp_path, row["dispatch"], lane) <= LIMIT_S + 5  # stopped at the configured maximum
    assert took < 40  # eps came back before the job could have ended by itself
