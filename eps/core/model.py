"""The records of the pure core: jobs, intents, rungs, plans, capacity, grants.

Every record is an immutable ``NamedTuple`` that knows nothing about
dicts, files, clocks or providers; structuring from JSON/TOML happens in the
shell with a strict cattrs converter.  NamedTuple rather than attrs here: these
records are on the path of every ``eps plan``, and defining them costs ~1 ms
less per class, and the attrs import (~30 ms) not at all (issue 2's 100 ms bar).
Modified copies: :func:`evolve` (``_replace``).  Closed sets of values are ``StrEnum``s so that the
shell can ``match`` on them and their ``.value`` is what JSON shows.

The ``NamedTuple`` is :mod:`eps.core.records`' (``typing.NamedTuple`` to a type checker, the
same classes without importing ``typing``, about 6 ms of every ``eps plan``).  No ``from
__future__ import annotations`` here: the fields' annotations are the types themselves, which
the shell's cattrs converter structures by.
"""

from enum import StrEnum

from eps.core.records import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    R = TypeVar("R")


class LaneKind(StrEnum):
    """What a lane is made of; decides which adapter in the shell runs a rung."""

    VM = "vm"
    SLURM = "slurm"
    GCP = "gcp"
    RUNPOD = "runpod"


class Resource(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class IntentSource(StrEnum):
    """Where an intent comes from (``eps intents`` shows it): the tables, or the config's ``[intents.NAME]``."""

    BUILT_IN = "built-in"
    CONFIG = "config"  # a team's own intent
    OVERRIDE = "override"  # a built-in one whose numbers the config changes


class Provisioning(StrEnum):
    """How a rung obtains its machine: run here, wait in a queue, or buy one.

    ``FLEX_START``: GCP's flex-start provisioning model (Dynamic Workload Scheduler):
    capacity may be waited for, then the VM runs uninterrupted (never preempted) for
    at most its max run duration (7 days), and is deleted at the end of it."""

    LOCAL = "local"
    QUEUE = "queue"
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    FLEX_START = "flex-start"


class Capacity(StrEnum):
    """What is known about one GCP (machine, zone, provisioning) candidate."""

    UNKNOWN = "unknown"
    AVAILABLE = "available"
    EXHAUSTED = "exhausted"
    QUOTA_EXCEEDED = "quota_exceeded"


class Stock(StrEnum):
    """RunPod's own stock words (catalog ``stockStatus``), plus unknown and none."""

    UNKNOWN = "unknown"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    NONE = "none"


class SkipCode(StrEnum):
    """Why a candidate rung is not in the plan.  Stable: JSON and docs show these."""

    CPU_NEVER_HOLDS_GPU = "cpu_never_holds_gpu"  # P1
    TRIVIAL_STAYS_ON_VM = "trivial_stays_on_vm"  # P2
    VM_TOO_SMALL = "vm_too_small"  # P2: a trivial op whose memory or footprint + margin does not fit the VM
    RUNPOD_GPU_NEEDS_PIN = "runpod_gpu_needs_pin"  # P6
    NOT_PINNED = "not_pinned"  # P10: another lane was pinned
    QOS_NOT_GRANTED = "qos_not_granted"  # P9
    QOS_MAX_WALL = "qos_max_wall"  # P9
    QOS_GPU_CAP = "qos_gpu_cap"  # P9
    DEV_QOS_DISABLED = "dev_qos_disabled"  # P7
    DEV_QOS_DEBUG_ONLY = "dev_qos_debug_only"  # P7
    CLUSTER_UNREACHABLE = "cluster_unreachable"
    LANE_UNAVAILABLE = "lane_unavailable"  # not configured here, or no credentials
    CLUSTER_TOO_SMALL = "cluster_too_small"
    PARK_SPENT = "park_spent"  # P8: already parked out on this rung
    NEVER_RUNS_HERE = "never_runs_here"  # pending reason says this tier can never run it
    NOT_TRIVIAL = "not_trivial"  # P2: longer than the trivial-op threshold or too big for the VM
    SPOT_TOO_LONG = "spot_too_long"  # P11
    FLEX_START_TOO_LONG = "flex_start_too_long"  # P11: longer than flex-start's maximum run duration
    MISCONFIGURED = "misconfigured"  # the cluster said this tier's partition/account/QoS is wrong (--fall-through)
    ON_DEMAND_NOT_OFFERED = "on_demand_not_offered"  # e.g. a3-highgpu-1g: spot/flex-start only
    ON_DEMAND_ONLY_INTENT = "on_demand_only_intent"  # P4 cpu-bigmem
    ZONE_NOT_OFFERED = "zone_not_offered"
    GCP_ZONE_EXHAUSTED = "gcp_zone_exhausted"
    GCP_QUOTA_EXCEEDED = "gcp_quota_exceeded"
    RUNPOD_OUT_OF_STOCK = "runpod_out_of_stock"
    RUNPOD_DISK_TOO_SMALL = "runpod_disk_too_small"
    RUNPOD_ROTATION_SPENT = "runpod_rotation_spent"  # MAX_POD_CREATES GPU pods made this dispatch, none came up
    ATTEMPTED = "attempted"  # the executor already tried it and it failed
    LADDER_PASSED = "ladder_passed"  # P7: above a tier this dispatch already reached; never walks back up
    BOOT_LOOP = "boot_loop"  # its machines died soon after coming up, twice within a day (eps.core.healing)
    NOT_IN_LANE_ORDER = "not_in_lane_order"  # a configured lane the lane order ([lanes]) leaves out: --pin only
    GPU_NOT_WANTED = "gpu_not_wanted"  # its GPUs are not the job's models or have too little memory (--gpu-mem)


class Terminal(StrEnum):
    """Why a plan has no rung left.  The retired ``cpu_exhausted_no_runpod_lane``
    is deliberately absent: exhausted GCP CPU now fails over to RunPod (P3)."""

    CPU_EXHAUSTED = "cpu_exhausted"
    GPU_EXHAUSTED = "gpu_exhausted"
    PIN_EXHAUSTED = "pin_exhausted"
    NO_USABLE_LANE = "no_usable_lane"  # every lane that could take the job is unusable here; nothing was tried
    MISCONFIGURED = "misconfigured"  # the next rung is a free cluster's tier that is set up wrong: fix it, never pay


def terminal_of(text: str | None) -> Terminal | None:
    """A dispatch's terminal read back from its stored text (``None``: it has none)."""
    return None if text is None else Terminal(text)


class RungWhy(StrEnum):
    """Why a rung is in the plan, as a stable code (the rung's ``reason`` says it in words)."""

    TRIVIAL_ON_VM = "trivial_on_vm"  # P2
    PINNED = "pinned"  # P10
    LADDER_FIRST = "ladder_first"  # P7: every dispatch starts under the top tier
    LADDER_NEXT = "ladder_next"  # P7: the next granted tier after a park timeout
    CLUSTER_QUEUE = "cluster_queue"  # a cluster without a QoS ladder
    GCP_CPU = "gcp_cpu"  # P3: cheap dedicated CPU machine, GCP first
    GCP_GPU = "gcp_gpu"  # P6: GPU after the free cluster
    RUNPOD_CPU = "runpod_cpu"  # P3: the CPU fallback when GCP CPU is exhausted


class DownCode(StrEnum):
    """Why a lane cannot be used on this machine now.  Stable: JSON shows these."""

    NOT_CONFIGURED = "not_configured"  # e.g. no GCP project, no SLURM client or login prefix
    NO_CREDENTIALS = "no_credentials"  # e.g. no RunPod key, no GCP Application Default Credentials
    LANE_DOWN = "lane_down"  # configured, but it did not answer or refused the credentials
    NO_MASTER = "no_master"  # a login usable only through the user's own ssh master, which is not open


class ParkAction(StrEnum):
    """What to do with a job that is parked (PENDING) right now."""

    WAIT = "wait"  # keep it queued; the cap is not spent and the reason may clear
    ADVANCE = "advance"  # cancel it and move to the next rung
    HOLD = "hold"  # pinned: return the live pending handle (P10)


class Intent(NamedTuple):
    """A named kind of work and the concrete targets each lane would use for it."""

    name: str
    resource: Resource
    description: str
    vcpus: int
    mem_gb: int
    gpus: int = 0
    gcp_machine: str | None = None
    spot_eligible: bool = True  # False: on-demand only (P4 cpu-bigmem)
    runpod_cpu: tuple[str, ...] = ()  # RunPod CPU flavors, in preference order
    runpod_gpu: tuple[str, ...] = ()  # RunPod GPU type ids, in preference order (pin only)
    dev_qos_ok: bool = False  # may use the cluster's dev QoS when switched on (P7)
    #: The disk a paid GPU machine gets by default (GCP boot disk, RunPod volume), GB: its model
    #: and a cache fit; ``None``: the lane's default.  A bigger ``--footprint-gb`` sizes it instead.
    disk_gb: int | None = None
    #: What each GPU must be (a GPU intent's defaults, ``eps.core.gpus``): one of these models
    #: (empty: any model) with at least this much memory, GB.  A job's ``--gpu``/``--gpu-mem`` win.
    gpu_models: tuple[str, ...] = ()
    gpu_mem_gb: int = 0
    #: The duration of a job of this intent that gives none (``--duration`` wins); ``None``: unknown.
    duration_s: int | None = None
    source: IntentSource = IntentSource.BUILT_IN


class GcpMachine(NamedTuple):
    """A GCP machine type, the zones that offer it, the provisioning models GCP sells it
    under, and list prices ($/h, information only)."""

    name: str
    vcpus: int
    mem_gb: int
    gpus: int
    gpu_model: str | None  # as eps names it: ``h100`` (eps.core.gpus.GPU_MODELS)
    zones: tuple[str, ...]
    on_demand_per_hour: float
    spot_per_hour: float
    #: a3-highgpu-{1,2,4}g, a3-ultragpu-8g, a4-highgpu-8g: spot or flex-start only (no on-demand)
    sold_as: tuple[Provisioning, ...] = (Provisioning.SPOT, Provisioning.ON_DEMAND)
    flex_start_per_hour: float | None = None

    @property
    def on_demand_offered(self) -> bool:
        return Provisioning.ON_DEMAND in self.sold_as

    @property
    def flex_start_offered(self) -> bool:
        return Provisioning.FLEX_START in self.sold_as


class RunpodCpuFlavor(NamedTuple):
    """A RunPod CPU flavor: GB of RAM per vCPU, disk per vCPU, $ per vCPU-hour."""

    name: str
    gb_per_vcpu: int
    disk_gb_per_vcpu: int
    per_vcpu_hour: float
    vcpu_options: tuple[int, ...] = (2, 4, 8, 16, 32)


class RunpodGpuType(NamedTuple):
    id: str  # RunPod's gpuTypeId, e.g. "NVIDIA H100 80GB HBM3"
    memory_gb: int
    per_gpu_hour: float
    max_count: int = 8
    #: The GPU model as eps names it (``h100``; ``eps.core.gpus.GPU_MODELS``), ``None`` for one
    #: outside that list (an RTX 4090): such a type fits only a job that names no model.
    model: str | None = None


class QosTier(NamedTuple):
    """One QoS as ``sacctmgr show qos`` reports it.  ``None`` means no limit.

    ``preempts``: the tiers a job under this one may preempt (``Preempt``);
    ``preempt_mode``: what preemption does to a job of this tier (``PreemptMode``:
    ``cancel``, ``requeue``, ...; ``None``: the cluster's default); ``grace_s``: the
    SIGTERM grace a preempted job of this tier gets (``GraceTime``)."""

    name: str
    priority: int
    max_wall_s: int | None = None
    max_gpus_per_user: int | None = None
    preempts: tuple[str, ...] = ()
    preempt_mode: str | None = None
    grace_s: int | None = None


# ClusterConfig (a SLURM cluster's row) lives in eps.core.clusters; imported here so that
# every record is reachable from this module.
from eps.core.clusters import ClusterConfig as ClusterConfig  # noqa: E402, PLC0414  (re-exported for mypy)


class Thresholds(NamedTuple):
    trivial_op_s: int = 60  # P2
    big_footprint_gb: int = 50  # P2, P4
    spot_max_s: int = 7200  # P11
    vm_disk_margin_gb: int = 10  # P2: free disk the VM keeps beyond a trivial op's footprint


#: Bytes per GB in the VM's capacity (the machine tables' GB are 2**30 bytes too).
GB = 2**30


class VmCapacity(NamedTuple):
    """The shared VM's room for trivial ops (P2): vCPUs, memory and free disk, GB = 2**30 bytes.

    ``None`` means unknown, and an unknown field never keeps an op off the VM
    (the behaviour from before capacities were known).  The capacity snapshot's
    ``vm`` (``eps plan --snapshot``; measured by ``eps execute``, see
    :meth:`measured`) wins field by field over the policy's ``vm`` (the
    config's ``[vm]`` section): :meth:`over`.  vCPUs are recorded, not required:
    a sub-minute op on fewer cores is slower, not stuck."""

    vcpus: int | None = None
    mem_gb: float | None = None
    free_disk_gb: float | None = None

    @classmethod
    def measured(cls, vcpus: int | None, mem_available_bytes: int | None, disk_free_bytes: int | None) -> "VmCapacity":
        """The VM's capacity from what the shell measures (``None`` where it could not).

        What to measure (the shell's part, in ``eps execute``): ``vcpus`` =
        ``os.cpu_count()``; ``mem_available_bytes`` = ``MemAvailable`` of
        ``/proc/meminfo`` (kB x 1024), what a new process can get now, not the
        machine's total; ``disk_free_bytes`` = ``shutil.disk_usage(path).free`` of
        the file system a VM job writes to (the state directory's).  Put the record
        in ``CapacitySnapshot.vm`` before calling ``plan()``."""
        return cls(
            vcpus=vcpus,
            mem_gb=None if mem_available_bytes is None else round(mem_available_bytes / GB, 2),
            free_disk_gb=None if disk_free_bytes is None else round(disk_free_bytes / GB, 2),
        )

    def over(self, default: "VmCapacity") -> "VmCapacity":
        """This capacity, with ``default``'s value wherever this one is unknown."""
        return VmCapacity(
            vcpus=default.vcpus if self.vcpus is None else self.vcpus,
            mem_gb=default.mem_gb if self.mem_gb is None else self.mem_gb,
            free_disk_gb=default.free_disk_gb if self.free_disk_gb is None else self.free_disk_gb,
        )


class Job(NamedTuple):
    """What the user asked for.  ``pin`` names a lane (``vm``, a cluster, ``gcp``, ``runpod``).

    ``duration_s`` ``None``: the duration is unknown (no ``--duration``).  Unknown is never
    read as a number: it is not trivial (P2), it is long (P11), no MaxWall rules it out
    (P9), and its time limit is each lane's maximum (``Rung.time_limit_s``)."""

    intent: str
    duration_s: int | None = None
    restartable: bool = False
    footprint_gb: float = 0.0
    gradient_fit: bool = False
    count: int = 1  # type: ignore[assignment]  # shadows tuple.count on purpose
    pin: str | None = None
    command: tuple[str, ...] = ()
    workdir: str | None = None  # shipped to the machine; the command runs in it
    setup: str | None = None  # a shell line run once before the command
    env_names: tuple[str, ...] = ()  # variables passed to the job (names only: values never stored)
    time_limit_s: int | None = None  # the enforced limit (None: the duration times the margin, else the rung's)
    task_index: int = 0  # copy i of a --count N fan-out (EPS_TASK_INDEX)
    task_count: int = 1  # N (EPS_TASK_COUNT)
    retry: tuple[str, ...] | None = None  # events retried (eps.core.healing.RetryOn values); None: the default
    retry_for_s: int | None = None  # how long eps keeps retrying, from submission (None: the default)
    max_restarts: int | None = None  # relaunches at most (None: the default)
    sync_every_s: int | None = None  # $EPS_OUTPUT_DIR pulled this often while the job runs (None: the setting; 0: off)
    restart: int = 0  # the relaunch this is (EPS_RESTART_COUNT): 0 for the first run
    fall_through: bool = False  # a misconfigured free cluster is skipped, not the end of the dispatch
    storage: str | None = None  # where its machine puts outputs and log (s3://, gs://; None: none; eps.core.storage)
    inputs: tuple[str, ...] = ()  # URL[:DEST]: storage prefixes its machine copies into the workdir first
    stall_after_s: int | None = None  # silent this long is stalled (None: the setting; 0: off; eps.core.stall)
    on_stall: str | None = None  # notify or stop (None: the setting)
    gpu_models: tuple[str, ...] = ()  # --gpu: the GPU models allowed (empty or "any": any; eps.core.gpus)
    gpu_mem_gb: int | None = None  # --gpu-mem: least memory per GPU, GB (None: the intent's default)
    sweep: int = 1  # --sweep N: N independent tasks of this job, one dispatch (eps.core.sweep)
    sweep_parallel: int | None = None  # --sweep-parallel K: at most K tasks at once (None: all; SLURM's %K)


class Rung(NamedTuple):
    """One concrete attempt.  Fields that do not apply to the lane are ``None``/0.

    ``machine`` is the GCP machine type, or the RunPod instance id
    (``cpu3g-4-16``) or GPU type id.  ``park_cap_s`` is set on queue rungs: how
    long a PENDING job may wait before the walk moves on; ``None`` on a queue
    rung means "return the pending handle" (a pin, P10).
    """

    lane: str
    kind: LaneKind
    provisioning: Provisioning
    reason: str
    qos: str | None = None
    machine: str | None = None
    zone: str | None = None
    gpus: int = 0
    vcpus: int = 0
    mem_gb: int = 0
    disk_gb: int | None = None
    park_cap_s: int | None = None
    price_per_hour: float = 0.0
    why: RungWhy | None = None  # ``reason`` as a stable code
    #: The enforced time limit of a job of unknown length here: the lane's maximum
    #: (:func:`eps.core.tables.lane_time_limit_s`).  ``None``: the job's own limit
    #: (``--time-limit``, else 1.5 x ``--duration``).
    time_limit_s: int | None = None
    #: The cluster said this tier is set up wrong: the walk stops here (the fix in words).
    fault: str | None = None

    @property
    def key(self) -> str:
        """A stable name for the rung, used by the ledger and by ``attempted``."""
        parts = [self.lane, self.qos or self.machine or "-", self.zone or "-", self.provisioning.value]
        return "/".join(parts)


class Skip(NamedTuple):
    lane: str
    code: SkipCode
    detail: str
    target: str | None = None


class ParkDecision(NamedTuple):
    action: ParkAction
    rung: str  # key of the rung the job is parked on
    remaining_s: int  # seconds of park cap left (0 when advancing)
    reason: str


class RoutePlan(NamedTuple):
    """The decision: rungs still to try in order, what was skipped and why, and
    when nothing is left, one terminal reason.  ``worst_case_wait_s`` is the
    longest a job can wait in queues before its first paid rung starts."""

    intent: str
    resolved_intent: str
    resource: Resource
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose
    rungs: tuple[Rung, ...]
    skipped: tuple[Skip, ...]
    terminal: Terminal | None
    worst_case_wait_s: int
    notes: tuple[str, ...] = ()
    park: ParkDecision | None = None


class QueueState(NamedTuple):
    """What is known about one QoS on one cluster now (from squeue/sshare)."""

    cluster: str
    qos: str
    free_gpus: int | None = None
    pending_reason: str | None = None


class TierFault(NamedTuple):
    """A cluster said a tier is set up wrong (``Invalid partition``, ``Invalid account``):
    ``qos`` ``None`` for every tier.  ``setting`` is what eps rendered for it
    (``partition=gpu account=fellows``), so a fixed config no longer matches."""

    cluster: str
    qos: str | None
    reason: str
    fix: str
    setting: str = ""


class ClusterState(NamedTuple):
    """What is known about one SLURM cluster now.  ``start_estimate_s``: how long until the
    job would start there, by the cluster's own estimate (``sbatch --test-only``): a hint
    that ranks consecutive clusters of a lane order, never a gate."""

    cluster: str
    reachable: bool = True
    start_estimate_s: int | None = None


class GcpState(NamedTuple):
    """``zone`` may be ``*`` (every zone) and ``provisioning`` ``None`` (both)."""

    machine: str
    zone: str
    state: Capacity
    provisioning: Provisioning | None = None


class RunpodState(NamedTuple):
    """``id`` is a CPU flavor (``cpu3g``), a CPU instance id (``cpu3g-4-16``) or a GPU type id."""

    id: str
    stock: Stock


class LaneDown(NamedTuple):
    """A lane that cannot be used now (not configured, no credentials, down), why, and the
    step that fixes it."""

    lane: str
    reason: str
    code: DownCode = DownCode.LANE_DOWN
    fix: str | None = None


class MachineLife(NamedTuple):
    """One machine eps made, as the ledger remembers it: its rung key, when it came up, and
    when (and whether) it was lost (preempted, vanished, unreachable) rather than released."""

    rung: str
    up_at: float
    lost_at: float | None = None


class CapacitySnapshot(NamedTuple):
    """What is known now.  Anything absent is unknown, and unknown means try."""

    clusters: tuple[ClusterState, ...] = ()
    queues: tuple[QueueState, ...] = ()
    gcp: tuple[GcpState, ...] = ()
    runpod: tuple[RunpodState, ...] = ()
    attempted: tuple[str, ...] = ()  # rung keys already tried and failed this dispatch
    unavailable: tuple[LaneDown, ...] = ()
    vm: VmCapacity = VmCapacity()  # the shared VM's room now (P2); unknown fields: the policy's
    #: The machines eps made lately, from the ledger (boot loops: :func:`eps.core.healing.boot_looped`),
    #: and when they were read (the ``now`` their window is measured from).
    lives: tuple[MachineLife, ...] = ()
    lives_at: float = 0.0
    #: Tiers a cluster said are set up wrong (its partition, account or QoS): the walk
    #: stops there rather than fall to a paid lane, unless the job says ``fall_through``.
    faults: tuple[TierFault, ...] = ()


class QosGrants(NamedTuple):
    """The QoS tiers the user may use, per cluster (``sacctmgr show assoc``)."""

    clusters: tuple[tuple[str, tuple[QosTier, ...]], ...] = ()

    def tiers(self, cluster: str) -> tuple[QosTier, ...]:
        for name, tiers in self.clusters:
            if name == cluster:
                return tiers
        return ()


class ParkState(NamedTuple):
    """The dispatch is parked (PENDING) on ``cluster``/``qos`` for ``elapsed_s``."""

    cluster: str
    qos: str | None
    elapsed_s: int
    pending_reason: str | None = None


class Policy(NamedTuple):
    """Everything plan() consults besides the job and the world: the tables and
    the configured settings.  Built once by the shell (defaults + config + env)."""

    intents: tuple[Intent, ...]
    gcp_machines: tuple[GcpMachine, ...]
    runpod_cpu: tuple[RunpodCpuFlavor, ...]
    runpod_gpu: tuple[RunpodGpuType, ...]
    clusters: tuple[ClusterConfig, ...]
    gpu_lane_order: tuple[str, ...]
    cpu_lane_order: tuple[str, ...]
    gcp_zones: tuple[str, ...]
    thresholds: Thresholds = Thresholds()
    trivial_lane: str = "vm"
    vm: VmCapacity = VmCapacity()  # the VM's room when the snapshot says nothing (config [vm])
    #: The time limit of a job of unknown length on a spot/on-demand VM, a pod, the shared VM
    #: or a SLURM tier without a MaxWall (``[jobs] max_time_limit``; default 7 days).
    max_time_limit_s: int = 7 * 86_400
    #: ``[runpod] data_centers``: where GPU pods are asked for, in order (empty: RunPod chooses,
    #: then any other data centre; :mod:`eps.core.runpod_supply`).
    runpod_data_centers: tuple[str, ...] = ()
    #: ``[runpod] supply``: the clouds GPU pods may come from, in order (``secure``, ``community``).
    runpod_supply: tuple[str, ...] = ("secure",)

    def intent(self, name: str) -> Intent | None:
        for it in self.intents:
            if it.name == name:
                return it
        return None

    def cluster(self, name: str) -> ClusterConfig | None:
        for c in self.clusters:
            if c.name == name:
                return c
        return None

    def gcp_machine(self, name: str) -> GcpMachine | None:
        for m in self.gcp_machines:
            if m.name == name:
                return m
        return None

    def lane_kind(self, lane: str) -> LaneKind | None:
        """What ``lane`` is made of (the trivial lane, a cluster, ``gcp``, ``runpod``), or ``None``."""
        if lane == self.trivial_lane:
            return LaneKind.VM
        if lane == "gcp":
            return LaneKind.GCP
        if lane == "runpod":
            return LaneKind.RUNPOD
        if self.cluster(lane) is not None:
            return LaneKind.SLURM
        return None


class JobError(ValueError):
    """The job cannot be planned as asked (unknown intent, impossible pin, bad count).

    Carries a stable ``code`` and the offending ``job``; the message is one line.  A refusal
    of one value the job gave names its ``field`` (the core record's: ``intent``, ``pin``),
    and ``plain`` is its line without the command line's name for it (``--pin``): a front
    door that took the value from elsewhere (a job file's key) says its own name."""

    def __init__(self, code: str, message: str, job: Job | None = None, *, field: str | None = None,
                 plain: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.code = code
        self.job = job
        self.field = field
        self.plain = message if plain is None else plain


def evolve(record: "R", **changes: "Any") -> "R":
    """A copy of ``record`` with ``changes``: ``_replace`` for these records, and
    ``attrs.evolve`` for the shell's attrs classes, so one name serves both."""
    replace = getattr(record, "_replace", None)
    if replace is not None:
        return replace(**changes)  # type: ignore[no-any-return]
    import attrs

    return attrs.evolve(record, **changes)  # type: ignore[misc]
