"""`eps plan --park` names where the dispatch is parked: a place where this job can never
queue is bad input (one line, exit 2), not a park decision; a park past every cap of a tier
the job does queue on still plans the rest."""

from __future__ import annotations

import json

import pytest

from eps.shell.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv), env={})
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    ("job", "park"),
    [
        (("cpu-small", "--duration", "1h"), "high-eur=100s"),  # P1: a CPU job never queues on fellows
        (("gpu-1", "--duration", "1h", "--pin", "gcp"), "high-eur=100s"),  # P10: pinned elsewhere
        (("gpu-1", "--duration", "30d"), "high-eur=100s"),  # P9: longer than every tier's MaxWall
    ],
)
def test_a_park_where_the_job_never_queues_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], job: tuple[str, ...], park: str
) -> None:
    rc, out, err = run(capsys, "plan", *job, "--park", park)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and "never queues on fellows" in err, err


def test_a_park_past_every_cap_still_plans_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "plan", "gpu-1", "--duration", "1h", "--park", "low-eur=100000s", "--json")
    plan = json.loads(out)
    assert rc == 0
    assert plan["rungs"] and all(r["lane"] != "fellows" for r in plan["rungs"])
    rc, out, _ = run(capsys, "plan", "gpu-1", "--duration", "1h", "--park", "normal-eur=400s", "--json")
    assert rc == 0
    assert [r["qos"] for r in json.loads(out)["rungs"] if r["lane"] == "fellows"] == ["low-eur"]
