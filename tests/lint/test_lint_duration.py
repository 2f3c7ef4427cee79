"""EPS116's code side: a plan that breaks a stated rule for a job without a duration is named."""

from __future__ import annotations

from eps.core.model import LaneKind, Provisioning, Resource, RoutePlan, Rung, Skip, SkipCode
from eps.lint.rules_duration import CLAIMS, _broken


def _plan(rungs: tuple[Rung, ...] = (), skipped: tuple[Skip, ...] = ()) -> RoutePlan:
    return RoutePlan("x", "x", Resource.CPU, 1, rungs, skipped, None, 0)


ON_DEMAND = Rung("gcp", LaneKind.GCP, Provisioning.ON_DEMAND, "", machine="m", zone="z", time_limit_s=60)


def test_a_plan_that_keeps_every_rule_breaks_none() -> None:
    plans = [("cpu-small", _plan((ON_DEMAND,)))]
    assert [_broken(i, plans, "vm") for i in range(len(CLAIMS))] == [None] * len(CLAIMS)


def test_each_broken_rule_is_named() -> None:
    vm = Rung("vm", LaneKind.VM, Provisioning.LOCAL, "", time_limit_s=60)
    spot = ON_DEMAND._replace(provisioning=Provisioning.SPOT)
    unlimited = ON_DEMAND._replace(time_limit_s=None)
    wall = Skip("fellows", SkipCode.QOS_MAX_WALL, "P9", "high-eur")
    assert _broken(0, [("cpu-small", _plan((vm,)))], "vm") == "cpu-small on the shared VM"
    assert _broken(1, [("gpu-1", _plan((spot,)))], "vm") == "a spot rung for gpu-1"
    assert _broken(2, [("gpu-1", _plan(skipped=(wall,)))], "vm") == "gpu-1 skipped on high-eur by its MaxWall"
    assert _broken(3, [("gpu-1", _plan((unlimited,)))], "vm") == "no time limit on gcp/m/z/on-demand for gpu-1"
