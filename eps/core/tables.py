"""The policy tables, declared once.  Everything eps knows about intents, machine
types, flavors, clusters and thresholds lives here; ``plan()`` looks them up,
the docs (CLAUDE.md, .claude/rules/) are checked against them by
``workflow_lint``, and the config file can override the settings but not the
shape.

Prices are list prices in USD per hour, shown as information only (P12: no
code path limits or refuses work by dollars).  Sources, checked 2026-11:
- GCP e2-standard / n2-highmem: Compute Engine VM pricing page (us-central1,
  europe-west4 within a few %); e2-standard-2 $0.067 on-demand, ~$0.025 spot;
  n2-highmem-16 $1.06 on-demand, ~$0.31 spot.
- GCP GPU machines (g2-standard L4, a2-highgpu A100 40GB, a2-ultragpu A100 80GB,
  a3-highgpu H100, a3-ultragpu H200, a4-highgpu B200; GPUs built in): ``eps.core.gpus``,
  each fact with its source page there.  a3-highgpu-1g/2g/4g, a3-ultragpu and a4-highgpu
  are offered only as Spot or Flex-start VMs, not on-demand.
- GCP Flex-start VMs (GCE "About Flex-start VMs", "Create a Flex-start VM";
  google-cloud-compute 1.57 ``Scheduling.ProvisioningModel.FLEX_START``,
  ``Scheduling.max_run_duration``, ``InstanceParams.request_valid_for_duration``,
  ``Instance.Status.PENDING``): run uninterrupted for at most seven days (the max
  run duration must be between 10 minutes and 7 days), then Compute Engine stops or
  deletes them (termination action); supported on accelerator-optimized types (A3
  included); a creation request may wait for capacity (the VM is PENDING) for a
  request-valid duration of 90 s to 2 h, or 0 for "only if available now"; vCPUs,
  memory and GPUs at a discount of up to 53 % (MIG resize-request docs), so the
  flex-start price here is about 47-50 % of on-demand.
- RunPod CPU flavors: catalog ``GET /v2/catalog/cpus`` (securePerVcpu);
  container disk limit vCPU x 10 GB on gen 3, x 15 GB on cpu5c.
- RunPod GPU types: ``eps.core.gpus`` (its API document and catalog ``GET /v2/catalog/gpus``).
- fellows QoS: ``sacctmgr show qos`` on the cluster (see DEFAULT_FELLOWS_GRANTS).
"""

from eps.core.gpus import GCP_GPU_MACHINES, RUNPOD_GPU_TYPES
from eps.core.model import (
    ClusterConfig,
    GcpMachine,
    Intent,
    Policy,
    Provisioning,
    QosGrants,
    QosTier,
    Resource,
    RunpodCpuFlavor,
    Thresholds,
    VmCapacity,
)

DAY_S = 86_400

#: Lanes for GPU work when nothing is pinned (P6).  RunPod is never here.
DEFAULT_AUTO_LANE_ORDER: tuple[str, ...] = ("fellows", "gcp")

#: Lanes for non-trivial CPU work (P3): GCP CPU first, RunPod CPU pods when GCP is exhausted.
CPU_LANE_ORDER: tuple[str, ...] = ("gcp", "runpod")

#: The lane for trivial CPU ops (P2).
TRIVIAL_LANE = "vm"

#: GCP zones in preference order (config ``gcp.zones`` overrides).  A machine type
#: is tried only in the zones of this list that offer it.
DEFAULT_GCP_ZONES: tuple[str, ...] = (
    "europe-west4-a",
    "europe-west4-b",
    "europe-west4-c",
    "us-central1-a",
    "us-central1-b",
    "us-central1-c",
)

_EU4 = ("europe-west4-a", "europe-west4-b", "europe-west4-c")
_USC1 = ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")


def _e2(n: int) -> GcpMachine:
    # e2-standard-N: N vCPU, 4N GB; price scales linearly with N.
    return GcpMachine(
        name=f"e2-standard-{n}",
        vcpus=n,
        mem_gb=4 * n,
        gpus=0,
        gpu_model=None,
        zones=_EU4 + _USC1,
        on_demand_per_hour=round(0.0335 * n, 4),
        spot_per_hour=round(0.0125 * n, 4),
    )


#: Flex-start's limits on a VM's max run duration (GCE "Create a Flex-start VM": "between
#: 10 minutes and seven days").  A job longer than the maximum gets no flex-start rung (P11).
FLEX_START_MAX_RUN_S = 7 * DAY_S
FLEX_START_MIN_RUN_S = 10 * 60


def flex_start_run_s(duration_s: int | None) -> int:
    """The max run duration a flex-start VM for a job estimated at ``duration_s`` asks for:
    the job's enforced time limit plus its kill grace and the linger that keeps the VM up
    for ``eps pull`` (nothing is lost to an early deletion), within flex-start's limits.
    A job of unknown length (``None``) asks for the maximum (P11)."""
    life = JOB_LIFECYCLE
    if duration_s is None:
        return FLEX_START_MAX_RUN_S
    wanted = job_time_limit_s(duration_s, life) + life.kill_grace_s + life.linger_s
    return max(FLEX_START_MIN_RUN_S, min(FLEX_START_MAX_RUN_S, wanted))


GCP_MACHINES: tuple[GcpMachine, ...] = (
    *(_e2(n) for n in (2, 4, 8, 16, 32)),
    GcpMachine(
        name="n2-highmem-16",
        vcpus=16,
        mem_gb=128,
        gpus=0,
        gpu_model=None,
        zones=_EU4 + _USC1,
        on_demand_per_hour=1.06,
        spot_per_hour=0.31,
    ),
    *GCP_GPU_MACHINES,
)

#: The boot image of a CPU machine (config ``gcp.image`` overrides it).
GCP_CPU_IMAGE = "projects/debian-cloud/global/images/family/debian-12"

#: The boot image of each GPU machine family: a GPU needs its NVIDIA driver, which plain
#: debian lacks.  Google's Deep Learning VM "base" image family with the NVIDIA 570
#: driver and CUDA 12.8 (project ``deeplearning-platform-release``, family
#: ``common-cu128-ubuntu-2204-nvidia-570``; Deep Learning VM "Choose an image" docs;
#: CUDA 12.8 supports the H100/H200 of A3, the A100/L4 of A2/G2 and the B200 of A4).  The config's
#: ``gcp.gpu_image`` overrides it for every GPU machine.
GCP_GPU_IMAGES: tuple[tuple[str, str], ...] = (
    ("a3", "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"),
    ("a2", "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"),
    ("g2", "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"),
    ("a4", "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"),
)
#: The CUDA version (major.minor) of the GPU images above.
GCP_GPU_IMAGE_CUDA = "12.8"


def gcp_image(machine: str, *, cpu_image: str = GCP_CPU_IMAGE, gpu_image: str | None = None) -> str:
    """The boot image of ``machine``: its family's GPU image (or ``gpu_image``) for a GPU
    family, else ``cpu_image``."""
    family = machine.split("-", 1)[0]
    for name, image in GCP_GPU_IMAGES:
        if name == family:
            return gpu_image or image
    return cpu_image


#: Host CUDA versions a RunPod GPU pod may land on, as RunPod's catalog reports them
#: (``GET /v2/catalog/gpus?include=AVAILABILITY`` ``cudaVersions``; ``major.minor``, the
#: ``allowedCudaVersions`` pattern of the API document).  A pod asks for the versions
#: that can run its image: the image's own CUDA version and every later one here.  A
#: version missing from this table only narrows the hosts, it never admits one that
#: cannot run the image.
RUNPOD_HOST_CUDA: tuple[str, ...] = ("12.4", "12.6", "12.8", "12.9", "13.0")


def runpod_cuda_versions(image_cuda: str | None) -> tuple[str, ...]:
    """``allowedCudaVersions`` for a GPU pod whose image needs CUDA ``image_cuda``
    (``None``: unknown, no constraint)."""
    if image_cuda is None:
        return ()

    def key(v: str) -> tuple[int, int]:
        major, minor = v.split(".")
        return int(major), int(minor)

    return tuple(v for v in RUNPOD_HOST_CUDA if key(v) >= key(image_cuda))


RUNPOD_CPU_FLAVORS: tuple[RunpodCpuFlavor, ...] = (
    RunpodCpuFlavor("cpu3c", gb_per_vcpu=2, disk_gb_per_vcpu=10, per_vcpu_hour=0.03),
    RunpodCpuFlavor("cpu3g", gb_per_vcpu=4, disk_gb_per_vcpu=10, per_vcpu_hour=0.04),
    RunpodCpuFlavor("cpu3m", gb_per_vcpu=8, disk_gb_per_vcpu=10, per_vcpu_hour=0.05),
    RunpodCpuFlavor("cpu5c", gb_per_vcpu=2, disk_gb_per_vcpu=15, per_vcpu_hour=0.035),
    RunpodCpuFlavor("cpu5g", gb_per_vcpu=4, disk_gb_per_vcpu=10, per_vcpu_hour=0.05),
    RunpodCpuFlavor("cpu5m", gb_per_vcpu=8, disk_gb_per_vcpu=10, per_vcpu_hour=0.065),
)



#: Default disks of the GPU intents, GB: a model's weights and the Hugging Face cache that
#: holds them, with room to write (the original project sized GPU machines at 200 GB "to hold a
#: 7B+ model + cache"; a 70B model is about 140 GB in bf16, so the 8-GPU shape gets 1 TB).
GPU_DISK_GB: dict[int, int] = {1: 200, 2: 300, 4: 500, 8: 1000}
DEBUG_DISK_GB = 100


#: The least memory per GPU of the GPU intents (``--gpu-mem`` overrides it): ``debug`` takes any
#: GPU of at least 24 GB (an L4 on GCP); the others 80 GB, the H100 meaning they always had.
DEBUG_GPU_MEM_GB = 24
GPU_MEM_GB = 80


def _gpu(n: int) -> Intent:
    return Intent(
        name=f"gpu-{n}",
        resource=Resource.GPU,
        description=f"{n} x 80GB+ GPU on one machine (training, fine-tuning, large inference)",
        vcpus=26 * n,
        mem_gb=234 * n,
        gpus=n,
        disk_gb=GPU_DISK_GB[n],
        gpu_mem_gb=GPU_MEM_GB,
    )


INTENTS: tuple[Intent, ...] = (
    Intent(
        name="cpu-small",
        resource=Resource.CPU,
        description="CPU analysis, preprocessing, evaluation scoring (4 vCPU, 16 GB)",
        vcpus=4,
        mem_gb=16,
        gcp_machine="e2-standard-4",
        runpod_cpu=("cpu3g", "cpu5g"),
    ),
    Intent(
        name="cpu-bigmem",
        resource=Resource.CPU,
        description="large-footprint CPU analysis (16 vCPU, 128 GB), on-demand for reliability",
        vcpus=16,
        mem_gb=128,
        gcp_machine="n2-highmem-16",
        spot_eligible=False,
        runpod_cpu=("cpu3m", "cpu5m"),
    ),
    Intent(
        name="debug",
        resource=Resource.GPU,
        description="short interactive GPU debugging session (1 GPU); may use the dev QoS",
        vcpus=26,
        mem_gb=234,
        gpus=1,
        dev_qos_ok=True,
        disk_gb=DEBUG_DISK_GB,
        gpu_mem_gb=DEBUG_GPU_MEM_GB,
    ),
    *(_gpu(n) for n in (1, 2, 4, 8)),
    Intent(
        name="capture-7b",
        resource=Resource.GPU,
        description="activation capture / inference over a 7B model (1 x 80GB GPU)",
        vcpus=26,
        mem_gb=234,
        gpus=1,
        disk_gb=GPU_DISK_GB[1],
        gpu_mem_gb=GPU_MEM_GB,
    ),
)

#: The intent a big-footprint CPU job is routed to (P4 big-volume route).
BIG_VOLUME_INTENT = "cpu-bigmem"
#: The intent a gradient-descent fit on a CPU intent is routed to (P4).
GRADIENT_FIT_INTENT = "gpu-1"

#: The fellows cluster as it really is.  Sources: its handbook and live ``sacctmgr`` as the
#: original project recorded them (its fellows-lane task card "Add the Anthropic fellows Slurm
#: cluster (charmander) as a backend router lane" and its ``slurm.py`` cluster table), and the
#: cohort's own batch scripts on the cluster's shared filesystem (``--partition=general``,
#: ``--cpus-per-task=16 --mem=128G`` per GPU, ``HF_HOME=/workspace-vast/pretrained_ckpts``,
#: ``HF_TOKEN_PATH=/workspace-vast/$USER/.cache/huggingface/token``,
#: ``NCCL_SOCKET_IFNAME=vxlan0``, ``NCCL_NVLS_ENABLE=0``):
#:
#: - batch jobs go to partition ``general`` (high-eur, normal-eur) or ``general,overflow``
#:   (low-eur); no ``--account``: the user's default account applies;
#: - about 128 GB per GPU, never more than about 250 GB per GPU, never ``--mem=0``
#:   (``--mem = min(128 x GPUs, 1800)`` GB); CPUs scale with the GPUs;
#: - the hard rules, each the cause of a real multi-user outage: never ``--export=`` (the
#:   environment goes in the script body), never ``CUDA_VISIBLE_DEVICES``, never sbatch in a
#:   loop (one at a time, paced), NCCL settings for multi-GPU jobs, caches on the shared
#:   filesystem (``/home`` is per node), a cleanup trap that kills the job's process group,
#:   job names that carry the user and self-scoped cancels (``scancel -u``);
#: - high-eur preempts normal-eur and low-eur; low-eur is preemptible (about 3 min of
#:   SIGTERM grace, auto-requeue, which ``--no-requeue`` turns into an end eps relaunches);
#: - dev-eur is srun-only: sbatch rejects it, so the dev QoS stays off (``dev_qos_for_debug``).
FELLOWS = ClusterConfig(
    name="fellows",
    partition="general",
    account=None,
    qos_ladder=("high-eur", "normal-eur", "low-eur"),
    dev_qos="dev-eur",
    dev_qos_for_debug=False,
    first_park_cap_s=600,
    next_park_cap_s=300,
    advance_on_self_cap=False,
    gpus_per_node=8,
    gpu_model="H200",
    tier_partitions=(("low-eur", "general,overflow"),),
    mem_per_gpu_gb=128,
    mem_max_gb=1800,
    mem_max_per_gpu_gb=250,
    cpus_per_gpu=16,
    cpus_max=128,
    job_env=(
        ("HF_HOME", "/workspace-vast/pretrained_ckpts"),
        ("HF_TOKEN_PATH", "/workspace-vast/{user}/.cache/huggingface/token"),
    ),
    multi_gpu_env=(("NCCL_NVLS_ENABLE", "0"), ("NCCL_SOCKET_IFNAME", "vxlan0")),
    user_in_job_name=True,
    preemptible=("normal-eur", "low-eur"),
    submit_gap_s=2.0,
    cleanup_trap=True,
)

#: What ``sacctmgr show qos`` reports on fellows (SPEC.md facts).  Used when the
#: user gives no grants file and no live discovery is done (``eps plan``).
DEFAULT_FELLOWS_GRANTS: tuple[QosTier, ...] = (
    # Preempt as sacctmgr lists it (sorted); PreemptMode is the cluster's (REQUEUE: auto-requeue,
    # which --no-requeue turns into an end eps relaunches); about 3 min of grace on low-eur.
    QosTier("high-eur", priority=100_000, max_wall_s=7 * DAY_S, max_gpus_per_user=16,
            preempts=("low-eur", "normal-eur")),
    QosTier("normal-eur", priority=50_000, max_wall_s=7 * DAY_S, max_gpus_per_user=16),
    QosTier("low-eur", priority=10_000, max_wall_s=14 * DAY_S, max_gpus_per_user=None, grace_s=180),
    QosTier("dev-eur", priority=200_000, max_wall_s=1 * DAY_S, max_gpus_per_user=8),
)  # fmt: skip

DEFAULT_GRANTS = QosGrants(clusters=(("fellows", DEFAULT_FELLOWS_GRANTS),))

#: Free disk the shared VM keeps beyond a trivial op's footprint (P2).  The cheap CPU
#: machines exist because the shared VM once stalled the whole fleet on disk pressure.
VM_DISK_MARGIN_GB = 10

THRESHOLDS = Thresholds(trivial_op_s=60, big_footprint_gb=50, spot_max_s=2 * 3600, vm_disk_margin_gb=VM_DISK_MARGIN_GB)

#: The shared VM's room when neither the capacity snapshot nor the config's ``[vm]``
#: says: unknown, so trivial ops stay on the VM (P2) until a size is known.
DEFAULT_VM = VmCapacity()

DEFAULT_POLICY = Policy(
    intents=INTENTS,
    gcp_machines=GCP_MACHINES,
    runpod_cpu=RUNPOD_CPU_FLAVORS,
    runpod_gpu=RUNPOD_GPU_TYPES,
    clusters=(FELLOWS,),
    gpu_lane_order=DEFAULT_AUTO_LANE_ORDER,
    cpu_lane_order=CPU_LANE_ORDER,
    gcp_zones=DEFAULT_GCP_ZONES,
    thresholds=THRESHOLDS,
    trivial_lane=TRIVIAL_LANE,
    vm=DEFAULT_VM,
)


def ladder_worst_case_s(cluster: ClusterConfig) -> int:
    """Worst-case seconds a job parks on ``cluster`` before leaving it (P8):
    rung 1's cap plus, for each further tier of the ladder, the cap of rungs 2+,
    which is the smaller of the two settings (``ClusterConfig.later_park_cap_s``):
    ``first + (tiers - 1) x min(first, next)``, never more than ``tiers x first``."""
    n = len(cluster.qos_ladder) or 1
    return cluster.first_park_cap_s + (n - 1) * cluster.later_park_cap_s


def park_cap_env(cluster: str) -> tuple[str, str]:
    """The environment settings of a cluster's park caps (rung 1, rungs 2+):
    ``EPS_FELLOWS_QUEUE_WAIT_SECONDS`` and ``EPS_FELLOWS_NEXT_QUEUE_WAIT_SECONDS``
    for fellows.  One definition for the shell that reads them and the linter that
    checks the docs name them."""
    stem = "EPS_" + cluster.upper().replace("-", "_")
    return f"{stem}_QUEUE_WAIT_SECONDS", f"{stem}_NEXT_QUEUE_WAIT_SECONDS"


# ------------------------------------------------------- the job lifecycle ---
# How a job runs on its machine (issue 12: a job runs for real on every lane).
# Appended here, with its own imports, so this section merges cleanly with the
# tables above; eps/core/jobscript.py renders the wrapper that applies it.

from enum import StrEnum  # noqa: E402

from eps.core.model import LaneKind  # noqa: E402
from eps.core.records import NamedTuple  # noqa: E402

GIB = 1024**3


class JobLifecycle(NamedTuple):
    """The numbers of a job's life on its machine, from shipping to release."""

    #: The enforced time limit, in percent of the estimated duration: an estimate
    #: is a guess, so the job gets half as long again before it is stopped.
    time_limit_pct: int = 150
    #: After the limit, the job gets SIGTERM; this many seconds later, SIGKILL.
    kill_grace_s: int = 30
    #: A finished job's machine stays up this long for `eps pull` / `eps ssh`,
    #: then is released (nothing keeps billing after a job ended plus a linger).
    linger_s: int = 600
    #: A machine eps made (GCP VM, RunPod pod) on which no job recorded its start this
    #: long after it came up stops itself: eps died between making it and launching.
    launch_grace_s: int = 1800
    #: A workdir bigger than this (the files eps would ship, after .gitignore and
    #: .epsignore) is refused: data belongs in a bucket or the shared filesystem.
    workdir_max_bytes: int = 2 * GIB
    #: How many of the largest files the refusal names (biggest first).
    workdir_biggest_named: int = 5


JOB_LIFECYCLE = JobLifecycle()


class Healing(NamedTuple):
    """The numbers of a job that heals: retries, restarts, boot loops, wedged machines."""

    #: A restartable job with no retry policy of its own is relaunched after an
    #: interruption (preemption, a lost machine) at most this many times.
    restartable_restarts: int = 3
    #: How long eps keeps retrying, from submission, unless ``--retry-for`` says.
    retry_for_s: int = 86_400
    #: An explicit ``--retry`` without ``--max-restarts``: at most this many relaunches.
    max_restarts: int = 3
    #: Waiting for capacity (``--retry no-capacity``): the first wait, doubled each
    #: round up to the maximum.
    capacity_wait_first_s: int = 30
    capacity_wait_max_s: int = 600
    #: A machine lost this soon after it came up is an early death of its rung.
    early_death_s: int = 600
    #: This many early deaths of one rung within the window skip it for every
    #: dispatch (``boot_loop``) until the window has passed; pins are exempt.
    boot_loop_deaths: int = 2
    boot_loop_window_s: int = 86_400
    #: A machine reported running that eps cannot reach over ssh this long while its
    #: job should run is released and handled as an interruption.
    wedge_s: int = 900
    #: While a job runs, its ``$EPS_OUTPUT_DIR`` is pulled this often (0: never).
    sync_every_s: int = 600
    #: A job whose log and outputs (on a GPU job: GPUs) have been silent this long is stalled
    #: (``--stall-after``, ``[jobs] stall_after_s``; 0: not watched; :mod:`eps.core.stall`).
    stall_after_s: int = 1800
    #: What a stall does unless the job says (``--on-stall``, ``[jobs] on_stall``): notify or stop.
    on_stall: str = "notify"


HEALING = Healing()


def job_time_limit_s(duration_s: int, lifecycle: JobLifecycle = JOB_LIFECYCLE) -> int:
    """The enforced time limit for a job estimated at ``duration_s``: 1.5 x, rounded up."""
    return -(-duration_s * lifecycle.time_limit_pct // 100)


#: What ``sbatch --time`` adds to the wrapper's own limit (:func:`eps.core.lifecycle.batch_time_s`):
#: the kill grace and this, so that the wrapper stops the job and records ``timed_out`` first.
SBATCH_TIME_SLACK_S = 60


def lane_time_limit_s(
    kind: LaneKind,
    provisioning: Provisioning,
    max_time_limit_s: int,
    *,
    max_wall_s: int | None = None,
    lifecycle: JobLifecycle = JOB_LIFECYCLE,
) -> int:
    """The enforced time limit of a job of unknown length (no ``--duration``): the lane's own
    maximum, so a forgotten flag never stops a job early and never lets a machine bill forever.

    - SLURM: the tier's MaxWall (``max_wall_s``), less the kill grace and a minute, so that
      ``sbatch --time`` (the limit plus both) is exactly the MaxWall (P9); a tier without a
      MaxWall, or a cluster without a ladder, has ``max_time_limit_s`` as its maximum;
    - flex-start: its maximum run duration, less the kill grace and the linger: the VM is
      deleted at the end of it, and the outputs must be pulled before (P11);
    - anything else (a spot or on-demand VM, a pod, the shared VM): ``max_time_limit_s``
      (``[jobs] max_time_limit``, default 7 days)."""
    if kind is LaneKind.SLURM:
        if max_wall_s is None:
            return max_time_limit_s
        return max(60, max_wall_s - lifecycle.kill_grace_s - SBATCH_TIME_SLACK_S)
    if provisioning is Provisioning.FLEX_START:
        return FLEX_START_MAX_RUN_S - lifecycle.kill_grace_s - lifecycle.linger_s
    return max_time_limit_s


class RootBase(StrEnum):
    """What a relative work root is relative to."""

    HOME = "home"  # the login's home directory: where ssh runs commands and rsync resolves relative paths
    STATE = "state"  # eps's own state directory on this machine


class RemoteRoot(NamedTuple):
    """Where a lane keeps its per-dispatch directories (``<root>/<dispatch>/<task>``)."""

    lane: LaneKind
    root: str
    base: RootBase
    why: str


REMOTE_WORK_ROOTS: tuple[RemoteRoot, ...] = (
    RemoteRoot(LaneKind.VM, "runs", RootBase.STATE, "the shared VM: beside the ledger, copied locally"),
    RemoteRoot(
        LaneKind.SLURM,
        "eps-runs",
        RootBase.HOME,
        "the login node's home is on the filesystem the compute nodes share; a cluster may configure a scratch root",
    ),
    RemoteRoot(LaneKind.GCP, "eps-runs", RootBase.HOME, "the VM's boot disk, deleted with the VM after the linger"),
    RemoteRoot(LaneKind.RUNPOD, "eps-runs", RootBase.HOME, "the pod's container disk (root's home), gone with the pod"),
)


def remote_work_root(lane: LaneKind) -> RemoteRoot:
    """The default work root of a lane kind (config may override it per cluster)."""
    for entry in REMOTE_WORK_ROOTS:
        if entry.lane is lane:
            return entry
    raise KeyError(lane)
