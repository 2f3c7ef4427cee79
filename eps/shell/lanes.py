"""The lane adapters as the executor sees them: built lazily from settings, so a
command that never touches GCP never imports google-cloud-compute, and a lane
that is not set up here (no GCP project, no RunPod key, no SLURM CLI) is
reported as unavailable with the reason instead of failing mid-walk.

Tests build :class:`Lanes` with their own runner, endpoints and sleeps.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from attrs import frozen
from returns.result import Failure, Result, Success

from eps.core.model import LaneDown, Policy, QosGrants
from eps.core.outcome import Handle, LaneFailure
from eps.shell.config import Settings
from eps.shell.vm import VmLane

T = TypeVar("T")


@frozen
class LaneOptions:
    """Knobs for tests and for the CLI: how often to poll, how long to wait."""

    slurm_runner: Callable[..., tuple[int, str, str]] | None = None
    slurm_poll_interval_s: float = 5.0
    slurm_cancel_timeout_s: float = 120.0
    gcp_options: dict[str, Any] | None = None
    runpod_options: dict[str, Any] | None = None
    runpod_api_key: str | None = None  # tests only; production reads RUNPOD_API_KEY / ~/.runpod
    env: dict[str, str] | None = None


class Lanes:
    def __init__(self, settings: Settings, options: LaneOptions | None = None) -> None:
        self.settings = settings
        self.options = options or LaneOptions()
        self.vm = VmLane(settings.state_dir)
        self._slurm: dict[str, Any] = {}
        self._gcp: Any = None
        self._runpod_key: Any = None

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    # --- SLURM ------------------------------------------------------------------------------

    def slurm(self, cluster: str) -> Any:
        if cluster not in self._slurm:
            from eps.shell.slurm import SlurmClient, subprocess_runner

            access = self.settings.cluster_access(cluster)
            runner = self.options.slurm_runner or subprocess_runner
            self._slurm[cluster] = SlurmClient(runner=runner, prefix=access.login)
        return self._slurm[cluster]

    def slurm_user(self, cluster: str) -> str:
        access = self.settings.cluster_access(cluster)
        env = self.options.env if self.options.env is not None else os.environ
        return access.user or env.get("USER") or env.get("LOGNAME") or "root"

    def discover_grants(self, defaults: QosGrants) -> tuple[QosGrants, tuple[LaneDown, ...]]:
        """Live grants for every configured cluster; a cluster that does not answer is unavailable."""
        clusters = []
        down = []
        for cluster in self.policy.clusters:
            access = self.settings.cluster_access(cluster.name)
            if not access.login and self.options.slurm_runner is None and shutil.which("sacctmgr") is None:
                down.append(LaneDown(cluster.name, f"no SLURM client here and no login prefix for {cluster.name}"))
                continue
            match self.slurm(cluster.name).discover_grants(self.slurm_user(cluster.name)):
                case Success(grants):
                    tiers = grants.tiers(cluster.name)
                    if not tiers and len(grants.clusters) == 1:  # SLURM's own cluster name differs from ours
                        tiers = grants.clusters[0][1]
                    clusters.append((cluster.name, tiers))
                case Failure(failure):
                    down.append(LaneDown(cluster.name, f"{cluster.name} did not answer: {failure.message}"))
        known = {name for name, _ in clusters}
        for name, tiers in defaults.clusters:
            if name not in known and all(d.lane != name for d in down):
                clusters.append((name, tiers))
        return QosGrants(tuple(clusters)), tuple(down)

    # --- GCP --------------------------------------------------------------------------------

    def gcp_down(self) -> LaneDown | None:
        if not self.settings.gcp.project:
            return LaneDown("gcp", "no GCP project configured (gcp.project in the eps config)")
        return None

    def gcp(self) -> Any:
        if self._gcp is None:
            from eps.shell.gcp import GcpLane

            options = {"poll_interval_s": self.settings.gcp.poll_interval_s, **(self.options.gcp_options or {})}
            self._gcp = GcpLane.from_settings(self.settings.gcp, **options)
        return self._gcp

    # --- RunPod -----------------------------------------------------------------------------

    def _key(self) -> Result[Any, LaneFailure]:
        from eps.shell.runpod import ApiKey, load_api_key

        if self.options.runpod_api_key is not None:
            return Success(ApiKey(self.options.runpod_api_key))
        if self._runpod_key is None:
            env = self.options.env if self.options.env is not None else os.environ
            self._runpod_key = load_api_key(env)
        return self._runpod_key  # type: ignore[no-any-return]

    def runpod_down(self) -> LaneDown | None:
        if self.options.runpod_api_key is not None:
            return None
        env = self.options.env if self.options.env is not None else os.environ
        if env.get("RUNPOD_API_KEY") or os.path.exists(os.path.expanduser("~/.runpod/config.toml")):
            return None
        return LaneDown("runpod", "no RunPod API key (RUNPOD_API_KEY or ~/.runpod/config.toml)")

    def runpod_settings(self) -> Any:
        from eps.shell.runpod import RunpodSettings

        s = self.settings.runpod
        extra = {"poll_interval_s": s.poll_interval_s, **(self.options.runpod_options or {})}
        return RunpodSettings(
            base_url=s.base_url,
            cpu_image=s.image,
            gpu_image=s.gpu_image,
            data_center_ids=s.data_centers,
            concurrency=s.concurrency,
            cpu_flavors=self.policy.runpod_cpu,
            **extra,
        )

    def with_runpod(self, action: Callable[[Any], Awaitable[T]]) -> T | LaneFailure:
        """Run ``action(client)`` on a fresh RunPod client in its own event loop (thread-safe)."""
        from eps.shell.runpod import RunpodClient

        key = self._key()
        if isinstance(key, Failure):
            return key.failure()

        async def go() -> T:
            async with RunpodClient(key.unwrap(), self.runpod_settings()) as client:
                return await action(client)

        return asyncio.run(go())

    def unavailable(self, lanes: Sequence[str] = ("gcp", "runpod")) -> tuple[LaneDown, ...]:
        down = []
        if "gcp" in lanes and (d := self.gcp_down()) is not None:
            down.append(d)
        if "runpod" in lanes and (d := self.runpod_down()) is not None:
            down.append(d)
        return tuple(down)

    def close(self) -> None:
        if self._gcp is not None:
            self._gcp.close()


def handle_dict(h: Handle) -> dict[str, Any]:
    return {
        "lane": h.lane,
        "kind": h.kind.value,
        "id": h.id,
        "rung": h.rung,
        "zone": h.zone,
        "qos": h.qos,
        "machine": h.machine,
        "state": h.state,
    }
