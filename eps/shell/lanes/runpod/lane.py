"""The ``runpod`` lane: CPU pods (the P3 fallback) and, when pinned, GPU pods.

One :class:`RunpodClient` per command, opened on first use and shared by the
threads of a ``--count`` fan-out.  The key comes from ``RUNPOD_API_KEY`` or
RunPod's standard ``~/.runpod/config.toml`` and never leaves the client.
"""

from __future__ import annotations

import posixpath
import shlex
import threading
from collections.abc import Mapping

from returns.result import Failure, Result, Success

from eps.core.lifecycle import at_lane_maximum, on_rung
from eps.core.model import Job, LaneKind, Provisioning, Rung, evolve
from eps.core.names import dispatch_of_pod, pod_name, pod_prefix
from eps.core.outcome import AttemptRecord, FailureKind, Handle, LaneFailure
from eps.core.settle import LiveItem
from eps.core.states import HandleState
from eps.shell.lanes.jobs import JobFiles, Site
from eps.shell.lanes.machines import MachineAccess, launch_again, reach_again, start_on
from eps.shell.lanes.runpod.client import RungAttempt, RunpodClient
from eps.shell.lanes.runpod.wire import (
    POD_STATES,
    VOLUME_PATH,
    ApiKey,
    PodInfo,
    PodStatus,
    RunpodSettings,
    checked_key,
    load_api_key,
)


def runpod_halt(pod_id: str, verb: str = "remove") -> str:
    """How a pod's watcher removes (``verb`` ``stop``: stops) its own pod: ``runpodctl``, which
    RunPod installs in every pod with a pod-scoped key in the container's environment (PID 1's:
    an ssh session may not carry it).  Best effort: where it cannot, ``eps status``/``eps
    reconcile`` release the pod."""
    return (
        'k=${RUNPOD_API_KEY:-$(tr "\\0" "\\n" </proc/1/environ 2>/dev/null | sed -n "s/^RUNPOD_API_KEY=//p")}; '
        f'RUNPOD_API_KEY="$k" runpodctl {verb} pod {shlex.quote(pod_id)}'
    )


def runpod_park(pod_id: str, gpu: bool) -> str:
    """How a pod whose job ran is stopped by its watcher.  A GPU pod keeps its dispatch root on
    its persistent volume (``mounts.persistent``), so it is stopped (compute released, disk
    kept, ``eps pull`` starts it again).  A CPU pod cannot have one (the API refuses
    ``mounts.persistent`` on CPU pods) and a stop wipes its container disk, so it is removed."""
    return runpod_halt(pod_id, "stop") if gpu else ""


def _still_there(pod: Handle, failure: LaneFailure) -> LaneFailure:
    """A pod that did not come up and could not be terminated: the dispatch stops here (a next
    pod could be a second live one); the attempt stays on record by name for reconcile."""
    return LaneFailure(
        FailureKind.UNKNOWN_FATE,
        f"{failure.message}; pod {pod.id} could not be confirmed terminated, so no other pod is made for this"
        " dispatch (the rotation stops here); eps reconcile releases it",
        code="not_terminated",
    )


class RunpodLane:
    """RunPod as a :class:`~eps.shell.lanes.base.Lane`."""

    kind = LaneKind.RUNPOD

    def __init__(
        self,
        settings: RunpodSettings,
        env: Mapping[str, str],
        *,
        key: str | None = None,
        name: str = "runpod",
        access: MachineAccess,
    ) -> None:
        self.name = name
        self.settings = settings
        self.access = access  # eps's key (state dir), the login, the work root, the linger
        # A GPU pod's dispatch roots live on its persistent volume (a stop keeps them there);
        # an absolute [runpod] work_root is the user's own choice of place, for every pod.
        on_volume = posixpath.join(VOLUME_PATH, access.work_root)
        self.gpu_access = access if posixpath.isabs(access.work_root) else access._replace(work_root=on_volume)
        # Only the key is kept (in an ApiKey, whose repr hides it), never the environment.
        given = key if key is not None else env.get("RUNPOD_API_KEY", "").strip()
        self._key: ApiKey | None = None
        self._client: RunpodClient | None = None
        self._failure: LaneFailure | None = None
        if given:
            match checked_key(given, "RUNPOD_API_KEY"):
                case Success(k):
                    self._key = k
                case Failure(f):
                    self._failure = f
        self._lock = threading.Lock()

    def client(self) -> Result[RunpodClient, LaneFailure]:
        with self._lock:
            if self._client is None and self._failure is None:
                key = Success(self._key) if self._key is not None else load_api_key({})
                match key:
                    case Success(k):
                        self._client = RunpodClient(k, self.settings)
                    case Failure(f):
                        self._failure = f
            if self._client is not None:
                return Success(self._client)
            return Failure(self._failure or LaneFailure(FailureKind.AUTH, "no RunPod API key", code="no_key"))

    def name_for(self, dispatch: str, rung: Rung, seq: int) -> str:
        return pod_name(dispatch, seq)

    def site(self, handle: Handle | None, dispatch: str, job: Job) -> Result[Site, LaneFailure]:
        """The pod's public ssh address (``ssh.direct``), eps's key, root: a job's site in the pod."""
        if handle is None:
            return Failure(LaneFailure(FailureKind.INVALID_REQUEST, f"{self.name}: no pod to reach"))
        access = self._access(self._gpu(handle.machine))
        return access.site_now(self.client().bind(lambda c: c.address(handle.id)), dispatch, job, handle.id)

    def launch_on(self, handle: Handle, job: Job, dispatch: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        job = at_lane_maximum(job, LaneKind.RUNPOD, Provisioning.ON_DEMAND, self.access.max_time_limit_s)

        gpu = self._gpu(handle.machine)
        access = self._access(gpu)

        def launch(client: RunpodClient) -> Result[Handle, LaneFailure]:
            return access.key(make=False).bind(
                lambda key: launch_again(
                    access, key, handle, lambda: client.address(handle.id), job, dispatch, files,
                    halt=runpod_halt(handle.id), park=runpod_park(handle.id, gpu),
                )
            )  # fmt: skip

        return self.client().bind(launch)

    def shell_inner(self, handle: Handle) -> list[str] | None:
        return None

    def start(self, job: Job, rung: Rung, dispatch: str, name: str, files: JobFiles) -> Result[Handle, LaneFailure]:
        """Make the pod with eps's public key (and the team's other hosts', on a shared
        ledger) and port 22, wait until it runs, then reach it
        over ssh, ship the job, start the pod's watcher and the job; a pod that cannot take
        the job is terminated again."""
        job = on_rung(job, rung)  # a job of unknown length runs up to the rung's limit
        match self.client():
            case Failure(f):
                return Failure(f)
            case Success(client):
                pass
        match self.access.key(make=True):
            case Failure(f):
                return Failure(f)
            case Success(key):
                pass
        attempt: RungAttempt = client.start(
            rung, name, job=job, dispatch_id=dispatch, public_key=key.public_key, also_keys=self.access.also_keys
        )
        if attempt.leftover is not None:
            return Failure(_still_there(attempt.leftover, attempt.result.failure()))
        if isinstance(attempt.result, Failure):
            return attempt.result
        handle = attempt.result.unwrap()
        gone: list[Result[None, LaneFailure]] = []

        def release() -> Result[Handle, LaneFailure]:  # and wait until RunPod says the pod is gone
            gone.append(client.terminate_confirmed(handle.id))
            if isinstance(gone[-1], Success):
                self.access.forget(handle.id)
            return gone[-1].map(lambda _: evolve(handle, state=HandleState.RELEASED))

        started = start_on(
            self._access(rung.gpus > 0), key, handle, lambda: client.address(handle.id), release,
            job, dispatch, files, halt=runpod_halt(handle.id), park=runpod_park(handle.id, rung.gpus > 0), what="pod",
        )  # fmt: skip
        if isinstance(started, Success) or not gone:
            return started
        if isinstance(gone[-1], Failure):
            return Failure(_still_there(handle, started.failure()))
        # Gone for sure: what is learned is this data centre, and the walk may make the next pod.
        return Failure(evolve(started.failure(), made_in=handle.zone or "unknown"))

    def poll(self, handle: Handle) -> Result[Handle, LaneFailure]:
        got = self.client().bind(lambda c: c.get_pod(handle.id))
        match got:
            case Success(pod):
                return Success(evolve(handle, state=POD_STATES[pod.status], reason=pod.status.value))
            case Failure(f) if f.code == "404":
                return Success(evolve(handle, state=HandleState.GONE))
        return got  # type: ignore[return-value]

    def release(self, handle: Handle, *, pending_only: bool = False) -> Result[Handle, LaneFailure]:
        done = self.client().bind(lambda c: c.terminate(handle.id))
        if isinstance(done, Success):
            self.access.forget(handle.id)
        return done.map(lambda _: evolve(handle, state=HandleState.RELEASED))

    def withdraw(self, name: str, rung: Rung) -> Result[None, LaneFailure]:
        """Terminate every pod named ``name`` (a create whose answer was lost made it)."""
        match self.client().bind(lambda c: c.list_pods(name)):
            case Failure(f):
                return Failure(f)
            case Success(pods):
                client = self.client().unwrap()
                for pod in pods:
                    if pod.name == name:
                        done = client.terminate(pod.id)
                        if isinstance(done, Failure):
                            return done
        return Success(None)

    def inventory(self, dispatch: str | None) -> Result[tuple[LiveItem, ...], LaneFailure]:
        match self.client().bind(lambda c: c.list_pods(pod_prefix(dispatch))):
            case Failure(f):
                return Failure(f)
            case Success(pods):
                return Success(tuple(self._item(p) for p in pods if self._counts(p, dispatch)))
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _counts(pod: PodInfo, dispatch: str | None) -> bool:
        if pod.status is PodStatus.TERMINATED:
            return False  # gone for good: nothing billed, nothing to release
        owner = dispatch_of_pod(pod.name)
        return owner is not None and (dispatch is None or owner == dispatch)

    def _item(self, pod: PodInfo) -> LiveItem:
        key = f"{self.name}/{self._instance(pod)}/-/on-demand"
        handle = Handle(
            self.name, LaneKind.RUNPOD, pod.id, key, zone=pod.data_center, machine=pod.machine,
            state=POD_STATES[pod.status], reason=pod.status.value,
        )  # fmt: skip
        return LiveItem(dispatch_of_pod(pod.name) or "", handle, pod.name)

    def _instance(self, pod: PodInfo) -> str:
        """The rung's machine as the plan names it: ``cpu3g-4-16`` for a CPU pod, the GPU type id."""
        if pod.gpus or pod.machine is None:
            return pod.machine or "-"
        flavor, _, vcpus = pod.machine.partition("-")
        per = next((f.gb_per_vcpu for f in self.settings.cpu_flavors if f.name == flavor), None)
        return f"{pod.machine}-{int(vcpus) * per}" if per is not None and vcpus.isdigit() else pod.machine

    def _gpu(self, machine: str | None) -> bool:
        """Whether a pod of ``machine`` (a CPU flavor's ``cpu3g-4-16``, else a GPU type id) has GPUs."""
        flavors = {f.name for f in self.settings.cpu_flavors}
        return machine is not None and machine.split("-", 1)[0] not in flavors

    def _access(self, gpu: bool) -> MachineAccess:
        return self.gpu_access if gpu else self.access

    def was_submitted(self, dispatch: str, attempt: AttemptRecord) -> Result[bool, LaneFailure]:
        return Success(False)

    def how_it_ended(self, handle: Handle, dispatch: str) -> str | None:
        return None

    def wake(self, handle: Handle) -> Result[Handle | None, LaneFailure]:
        """A pod its watcher stopped (EXITED: compute released, disk kept): ``start`` it, wait
        until RUNNING, then until eps gets in over ssh.  Its container disk (and with it the
        sshd's host keys) is made anew, so the pod's known host key is forgotten first."""
        match self.client():
            case Failure(f):
                return Failure(f)
            case Success(client):
                pass
        match client.get_pod(handle.id):
            case Failure(f):
                return Success(None) if f.code == "404" else Failure(f)
            case Success(pod) if pod.status not in (PodStatus.EXITED, PodStatus.ERROR):
                return Success(None)
        started = client.pod_action(handle.id, "start")
        if isinstance(started, Failure) and started.failure().code != "409":
            return Failure(started.failure())
        self.access.forget(handle.id)
        up = client.wait_running(evolve(handle, state=HandleState.STARTING))
        reached: Result[Handle, LaneFailure] = up.bind(
            lambda h: reach_again(self.access, h, lambda: client.address(h.id))
        )
        return reached

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
