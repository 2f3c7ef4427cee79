"""The lanes of one command, built lazily from the settings and keyed by lane kind.

A command that never touches GCP never imports google-cloud-compute; a lane that
is not set up here (no GCP project or credentials, no RunPod key, no SLURM client)
reports why through :meth:`Lanes.down` (answered by :mod:`eps.shell.config.availability`,
without building the adapter) instead of failing mid-walk.  One provider client per
command: every lane object is built once and shared by the threads of a fan-out.
This is the only place that maps a lane kind to its adapter.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from eps.core.model import LaneDown, LaneKind, Policy, QosGrants, Rung
from eps.shell.config.availability import DOWN_CHECKS, lane_names
from eps.shell.config.settings import Settings
from eps.shell.lanes.base import Lane, LaneOptions


def _vm(lanes: Lanes, name: str) -> Lane:
    from eps.shell.lanes.vm import VmLane

    return VmLane(lanes.settings.state_dir, name=name)


def cluster_user(lanes: Lanes, name: str) -> str:
    """The user eps acts as on cluster ``name``: the config's ``user``, else this machine's
    (``$USER``, ``$LOGNAME``, the password database)."""
    given = lanes.settings.cluster_access(name).user or lanes.env.get("USER") or lanes.env.get("LOGNAME")
    if given:
        return given
    import getpass

    return getpass.getuser()


def _slurm(lanes: Lanes, name: str) -> Lane:
    from eps.shell.lanes.slurm.cli import SlurmClient, subprocess_runner
    from eps.shell.lanes.slurm.lane import SlurmLane

    cluster = lanes.policy.cluster(name)
    if cluster is None:  # pragma: no cover - lane_kind found it
        raise KeyError(name)
    access = lanes.settings.cluster_access(name)
    opts = lanes.options
    user = cluster_user(lanes, name)
    from eps.shell.lanes.slurm.pacing import Pacer

    # one sbatch at a time per cluster from this host, spaced by the row's gap (never a burst)
    pacer = Pacer(os.path.join(lanes.settings.state_dir, "submit"), name, cluster.submit_gap_s)
    return SlurmLane(
        cluster,
        SlurmClient(runner=opts.slurm_runner or subprocess_runner, prefix=access.prefix, user=user, pacer=pacer,
                    robot=name if cluster.robot else None),
        user=user,
        login=access.prefix,
        work_root=access.work_root,
        cancel_timeout_s=opts.slurm_cancel_timeout_s,
        clock=lanes.clock,
        sleep=lanes.sleep,
    )


def _quiet_retry_logs() -> None:
    """The provider clients' retry libraries log each retry; eps reports them itself."""
    import logging

    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())


def _gcp(lanes: Lanes, name: str) -> Lane:
    from eps.shell.lanes.gcp.lane import GcpLane
    from eps.shell.lanes.machines import MachineAccess

    _quiet_retry_logs()
    g, s = lanes.settings.gcp, lanes.settings
    access = MachineAccess(
        s.state_dir, g.ssh_user, g.work_root, s.jobs.linger_s, **_patience(lanes),
        max_time_limit_s=s.jobs.max_time_limit_s, kex=s.ssh_kex, also_keys=lanes.options.team_keys,
    )  # fmt: skip
    st = s.storage
    if st is not None and st.machine_credentials == "service-account" and g.service_account is not None:
        # gs:// from the VM's own account: it needs the storage scope (cloud-platform holds it)
        from eps.shell.config.storage import SCOPES

        wanted = f"https://www.googleapis.com/auth/{SCOPES[st.scope]}"
        if not {wanted, "https://www.googleapis.com/auth/cloud-platform"} & set(g.scopes):
            g = g._replace(scopes=(*g.scopes, wanted))
    return GcpLane(g, lanes.options.gcp_options, name=name, access=access)


def _runpod(lanes: Lanes, name: str) -> Lane:
    from eps.shell.lanes.machines import MachineAccess
    from eps.shell.lanes.runpod.lane import RunpodLane
    from eps.shell.lanes.runpod.wire import RunpodSettings

    _quiet_retry_logs()
    s = lanes.settings.runpod
    extra = {"poll_interval_s": s.poll_interval_s, **(lanes.options.runpod_options or {})}
    settings = RunpodSettings(
        base_url=s.base_url,
        cpu_image=s.image,
        gpu_image=s.gpu_image,
        data_center_ids=s.data_centers,
        concurrency=s.concurrency,
        cpu_flavors=lanes.policy.runpod_cpu,
        **extra,
    )
    access = MachineAccess(
        lanes.settings.state_dir, "root", s.work_root, lanes.settings.jobs.linger_s, **_patience(lanes),
        max_time_limit_s=lanes.settings.jobs.max_time_limit_s, kex=lanes.settings.ssh_kex,
        also_keys=lanes.options.team_keys,
    )  # fmt: skip
    return RunpodLane(settings, lanes.env, key=lanes.options.runpod_api_key, name=name, access=access)


def _patience(lanes: Lanes) -> dict[str, Any]:
    given = lanes.options.machine_patience
    return {} if given is None else {"patience": given}


#: How each kind of lane is built.  Tests replace single lanes with ``overrides``.
FACTORIES: Mapping[LaneKind, Callable[[Lanes, str], Lane]] = {
    LaneKind.VM: _vm,
    LaneKind.SLURM: _slurm,
    LaneKind.GCP: _gcp,
    LaneKind.RUNPOD: _runpod,
}


class Lanes:
    """Every lane this command may use, built on first use."""

    def __init__(
        self,
        settings: Settings,
        options: LaneOptions | None = None,
        *,
        overrides: Mapping[str, Lane] | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        import time

        self.settings = settings
        self.options = options or LaneOptions()
        self.env: Mapping[str, str] = self.options.env if self.options.env is not None else os.environ
        self.clock = clock or time.monotonic
        self.sleep = sleep or time.sleep
        self._built: dict[str, Lane] = dict(overrides or {})
        self._overrides = frozenset(overrides or {})
        self._lock = threading.Lock()

    def stand_ins(self) -> dict[str, Lane]:
        """The lanes a test gave in place of real ones (``overrides``)."""
        return {n: self._built[n] for n in self._overrides}

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    def names(self) -> tuple[str, ...]:
        """Every lane of the policy: the VM, each cluster, gcp, runpod."""
        return lane_names(self.settings)

    def get(self, name: str) -> Lane:
        with self._lock:
            lane = self._built.get(name)
            if lane is None:
                kind = self.policy.lane_kind(name)
                if kind is None:
                    raise KeyError(f"unknown lane {name!r}")
                lane = self._built[name] = FACTORIES[kind](self, name)
            return lane

    def for_rung(self, rung: Rung) -> Lane:
        return self.get(rung.lane)

    def down(self, name: str) -> LaneDown | None:
        """Why lane ``name`` cannot be used here, or ``None``; builds nothing that is not set up."""
        if name in self._overrides:  # a test's stand-in is set up by definition
            return None
        kind = self.policy.lane_kind(name)
        if kind is None:
            raise KeyError(f"unknown lane {name!r}")
        return DOWN_CHECKS[kind](
            self.settings,
            self.env,
            name,
            runpod_key=self.options.runpod_api_key,
            runner_given=self.options.slurm_runner is not None,
        )

    def usable(self) -> list[Lane]:
        """The lanes that are set up here, built (only those)."""
        return [self.get(n) for n in self.names() if self.down(n) is None]

    def unavailable(self, names: tuple[str, ...] = ("gcp", "runpod")) -> tuple[LaneDown, ...]:
        return tuple(d for d in (self.down(n) for n in names) if d is not None)

    def discover_grants(self, defaults: QosGrants) -> tuple[QosGrants, tuple[LaneDown, ...]]:
        """Live grants for every configured cluster; a cluster that does not answer is unavailable.
        A cluster whose config names a grants file (``[[clusters]] grants``) takes its tiers
        from it, and one reached through a robot login (which runs no sacctmgr) from it or
        else from ``defaults`` (the built-in table's, when it has that cluster): sacctmgr is
        never asked there.  A grants file that cannot be read makes its cluster unavailable."""
        from returns.result import Failure, Success

        from eps.shell.lanes.slurm.lane import SlurmLane

        clusters = []
        down = []
        for cluster in self.policy.clusters:
            why = self.down(cluster.name)
            if why is not None:
                down.append(why)
                continue
            lane = self.get(cluster.name)
            if not isinstance(lane, SlurmLane):  # a test's stand-in: no grants to ask for
                continue
            if self.settings.cluster_access(cluster.name).grants is not None or cluster.robot:
                from eps.shell.config.settings import ConfigError
                from eps.shell.config.snapshots import configured_tiers

                try:
                    tiers = configured_tiers(self.settings, cluster.name)
                except ConfigError as exc:
                    down.append(LaneDown(cluster.name, f"{cluster.name}: {exc}", fix=f"fix or remove {cluster.name}'s"
                                         " [[clusters]] grants file (the format of --grants)"))  # fmt: skip
                    continue
                if tiers is not None:
                    clusters.append((cluster.name, tiers))
                continue  # none configured (a robot login): the built-in ones below, if any
            user = self.settings.cluster_access(cluster.name).user
            user = user or self.env.get("USER") or self.env.get("LOGNAME") or "root"
            match lane.client.discover_grants(user):
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

    def close(self) -> None:
        for lane in self._built.values():
            lane.close()
