"""``[runpod]`` of the config file: what it may say, and how it lands in the settings and the policy.

``data_centers`` and ``supply`` are policy (``eps plan`` shows where a GPU pod would be asked
for, :mod:`eps.core.runpod_supply`); the rest is how the lane talks to RunPod.
"""

from __future__ import annotations

from attrs import frozen

from eps.core.model import Policy, evolve
from eps.core.runpod_supply import SUPPLIES
from eps.shell.config.errors import ConfigError
from eps.shell.config.settings import RunpodSettings


@frozen
class RunpodDoc:
    base_url: str | None = None
    image: str | None = None
    gpu_image: str | None = None
    data_centers: list[str] | None = None
    supply: list[str] | None = None
    concurrency: int | None = None
    poll_interval_s: float | None = None
    work_root: str | None = None


def runpod_policy(policy: Policy, r: RunpodDoc, source: str) -> Policy:
    """The policy with ``[runpod] data_centers`` and ``supply`` in it (checked: one line each)."""
    if r.supply is not None:
        good = ", ".join(f'"{s}"' for s in SUPPLIES)
        if not r.supply or any(s not in SUPPLIES for s in r.supply) or len(set(r.supply)) != len(r.supply):
            raise ConfigError(f"{source}: supply lists {good}, each at most once, in the order to try @ $.runpod.supply"
                              f" (got {r.supply!r})")  # fmt: skip
        policy = evolve(policy, runpod_supply=tuple(r.supply))
    if r.data_centers is not None:
        if len(set(r.data_centers)) != len(r.data_centers):
            raise ConfigError(f"{source}: a data centre is listed twice @ $.runpod.data_centers")
        policy = evolve(policy, runpod_data_centers=tuple(r.data_centers))
    return policy


def runpod_settings(base: RunpodSettings, r: RunpodDoc) -> RunpodSettings:
    given = {
        "base_url": r.base_url, "image": r.image, "gpu_image": r.gpu_image, "concurrency": r.concurrency,
        "data_centers": None if r.data_centers is None else tuple(r.data_centers),
        "poll_interval_s": r.poll_interval_s, "work_root": r.work_root,
    }  # fmt: skip
    real = {k: v for k, v in given.items() if v is not None}
    return evolve(base, **real) if real else base
