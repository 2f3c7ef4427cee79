"""The GCP lane reports its client's in-place waits as progress (issue 13 item 2): the walker's
reporter gets a ``waiting`` event for each bounded wait, with how long and why."""

from __future__ import annotations

from typing import Any

from returns.result import Success

from eps.core.model import Job, LaneKind, Provisioning, Rung
from eps.shell.config.settings import GcpSettings
from eps.shell.lanes.gcp.lane import GcpLane
from eps.shell.lanes.machines import MachineAccess

from . import fake_server as fs
from .conftest import FAST_RETRY, PROJECT


def test_rate_limit_waits_reach_the_reporter(server: fs.FakeCompute) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    slept: list[float] = []
    seen: list[float] = []
    settings = GcpSettings(project=PROJECT, endpoint=server.endpoint)
    lane = GcpLane(
        settings,
        {"retry": FAST_RETRY, "sleep": slept.append, "on_wait": lambda s, why: seen.append(s)},
        name="gcp",
        access=MachineAccess("/nonexistent/eps-state", "eps", "eps-runs", 600),
    )
    lane.report_to(lambda event, **fields: events.append((event, fields)))
    server.fail("POST", r"/instances$", fs.SyncError(403, "rateLimitExceeded", "Rate Limit Exceeded"), times=2)
    rung = Rung("gcp", LaneKind.GCP, Provisioning.SPOT, "test", machine="e2-standard-4", zone="us-central1-a")
    try:
        started = lane.client().create(Job("cpu-small", 600, command=("true",)), rung, "dwait1", 0)
    finally:
        lane.close()
    assert isinstance(started, Success), started
    assert [e for e, _ in events] == ["waiting", "waiting"]
    assert [f["seconds"] for _, f in events] == [2.0, 4.0] == seen
    assert events[0][1]["lane"] == "gcp"
    assert "rate limit" in events[0][1]["reason"]
    assert slept[:2] == [2.0, 4.0]
